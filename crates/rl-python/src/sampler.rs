//! Samplers from Python: `flatrl.Uniform`, `flatrl.Prioritized` and `flatrl.SliceSampler`
//! describe a sampler; a buffer builds it for its capacity (`rl_storage`'s `AnySampler`).

use pyo3::prelude::*;
use rl_core::{Location, MemoryPlan};
use rl_storage::Result;
use rl_storage::sampler::{self as samplers, AnySampler, PrioritizedConfig};

use crate::error::{storage_error, value_error};

/// Uniform sampling with replacement over every stored row.
#[pyclass(module = "flatrl", frozen)]
#[derive(Clone, Debug)]
pub struct Uniform {
    seed: u64,
}

#[pymethods]
impl Uniform {
    #[new]
    #[pyo3(signature = (seed=0))]
    fn new(seed: u64) -> Self {
        Self { seed }
    }

    fn __repr__(&self) -> String {
        format!("Uniform(seed={})", self.seed)
    }
}

/// Prioritized replay (a sum tree): rows drawn with probability proportional to
/// `(priority + epsilon) ** alpha`, importance weights with exponent `beta`; new rows get
/// the largest priority given so far. Update priorities with
/// `ReplayBuffer.update_priorities(batch.positions, td_errors)`.
#[pyclass(module = "flatrl", frozen)]
#[derive(Clone, Debug)]
pub struct Prioritized {
    config: PrioritizedConfig,
    seed: u64,
}

#[pymethods]
impl Prioritized {
    #[new]
    #[pyo3(signature = (*, alpha=0.6, beta=0.4, epsilon=1e-6, seed=0))]
    fn new(alpha: f64, beta: f64, epsilon: f64, seed: u64) -> PyResult<Self> {
        let config = PrioritizedConfig {
            alpha,
            beta,
            epsilon,
        };
        // Validated here, so a bad exponent fails where it is written.
        samplers::Prioritized::new(1, config, seed).map_err(storage_error)?;
        Ok(Self { config, seed })
    }

    fn __repr__(&self) -> String {
        let c = self.config;
        format!(
            "Prioritized(alpha={}, beta={}, epsilon={}, seed={})",
            c.alpha, c.beta, c.epsilon, self.seed
        )
    }
}

/// Windows of `slice_len` consecutive rows that never cross an episode end (the
/// `terminated`/`truncated` columns); a batch holds whole windows.
#[pyclass(module = "flatrl", frozen)]
#[derive(Clone, Debug)]
pub struct SliceSampler {
    slice_len: usize,
    seed: u64,
}

#[pymethods]
impl SliceSampler {
    #[new]
    #[pyo3(signature = (slice_len, *, seed=0))]
    fn new(slice_len: usize, seed: u64) -> PyResult<Self> {
        samplers::SliceSampler::new(slice_len, seed).map_err(storage_error)?;
        Ok(Self { slice_len, seed })
    }

    /// Rows per window.
    #[getter]
    fn slice_len(&self) -> usize {
        self.slice_len
    }

    fn __repr__(&self) -> String {
        format!(
            "SliceSampler(slice_len={}, seed={})",
            self.slice_len, self.seed
        )
    }
}

/// A sampler described from Python, before it is built for a capacity.
#[derive(Clone, Debug)]
pub(crate) enum SamplerSpec {
    /// [`samplers::Uniform`].
    Uniform(u64),
    /// [`samplers::Prioritized`].
    Prioritized(PrioritizedConfig, u64),
    /// [`samplers::SliceSampler`].
    Slice(usize, u64),
}

impl SamplerSpec {
    /// The spec of a Python sampler object (`None` is `Uniform(seed=0)`).
    pub(crate) fn extract(sampler: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let Some(sampler) = sampler else {
            return Ok(Self::Uniform(0));
        };
        if let Ok(u) = sampler.cast::<Uniform>() {
            return Ok(Self::Uniform(u.get().seed));
        }
        if let Ok(p) = sampler.cast::<Prioritized>() {
            let p = p.get();
            return Ok(Self::Prioritized(p.config, p.seed));
        }
        if let Ok(s) = sampler.cast::<SliceSampler>() {
            let s = s.get();
            return Ok(Self::Slice(s.slice_len, s.seed));
        }
        Err(value_error(format!(
            "sampler must be flatrl.Uniform, flatrl.Prioritized or flatrl.SliceSampler, got {}",
            sampler.get_type().name()?
        )))
    }

    /// What the sampler will allocate for `capacity` rows, before it exists.
    pub(crate) fn plan(&self, capacity: usize) -> MemoryPlan {
        match self {
            Self::Uniform(_) | Self::Slice(..) => MemoryPlan::new(),
            Self::Prioritized(..) => {
                // Two trees of `2 * next_power_of_two(capacity)` f64 nodes (the layout of
                // rl_storage's Prioritized; python/tests check the two plans agree).
                let nodes = capacity
                    .checked_next_power_of_two()
                    .map_or(u64::MAX, |l| (l as u64).saturating_mul(2));
                let bytes = nodes.saturating_mul(size_of::<f64>() as u64);
                MemoryPlan::new()
                    .with("sum_tree", Location::Ram, bytes)
                    .with("min_tree", Location::Ram, bytes)
            }
        }
    }

    /// Builds the sampler for a buffer of `capacity` rows.
    pub(crate) fn build(&self, capacity: usize) -> Result<AnySampler> {
        Ok(match *self {
            Self::Uniform(seed) => AnySampler::Uniform(samplers::Uniform::new(seed)),
            Self::Prioritized(config, seed) => {
                AnySampler::Prioritized(samplers::Prioritized::new(capacity, config, seed)?)
            }
            Self::Slice(len, seed) => AnySampler::Slice(samplers::SliceSampler::new(len, seed)?),
        })
    }
}

/// The prioritized sampler of a buffer, or a `ValueError` saying the buffer has none.
pub(crate) fn prioritized(sampler: &mut AnySampler) -> PyResult<&mut samplers::Prioritized> {
    sampler.as_prioritized_mut().ok_or_else(|| {
        value_error(
            "this buffer's sampler is not prioritized: create it with sampler=flatrl.Prioritized()",
        )
    })
}
