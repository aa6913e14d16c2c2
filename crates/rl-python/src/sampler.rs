//! Samplers from Python: `flatrl.Uniform`, `flatrl.Prioritized` and `flatrl.SliceSampler`
//! describe a sampler; a buffer builds it for its capacity (`AnySampler`).

use pyo3::prelude::*;
use rl_core::{Location, MemoryPlan};
use rl_storage::Result;
use rl_storage::sampler::{
    self as samplers, PrioritizedConfig, SampleContext, Sampler, StateFormat, StateReader,
    StateWriter,
};
use rl_storage::storage::RingState;

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

/// One of the samplers a Python buffer can hold.
#[derive(Clone, Debug)]
pub(crate) enum AnySampler {
    /// Uniform with replacement.
    Uniform(samplers::Uniform),
    /// Prioritized (sum tree).
    Prioritized(samplers::Prioritized),
    /// Windows within episodes.
    Slice(samplers::SliceSampler),
}

impl AnySampler {
    /// The prioritized sampler, or a `ValueError` saying the buffer has none.
    pub(crate) fn prioritized(&mut self) -> PyResult<&mut samplers::Prioritized> {
        match self {
            Self::Prioritized(p) => Ok(p),
            _ => Err(value_error(
                "this buffer's sampler is not prioritized: create it with sampler=flatrl.Prioritized()",
            )),
        }
    }
}

/// Forwards a call to whichever sampler is inside.
macro_rules! each {
    ($sampler:expr, $s:ident => $body:expr) => {
        match $sampler {
            AnySampler::Uniform($s) => $body,
            AnySampler::Prioritized($s) => $body,
            AnySampler::Slice($s) => $body,
        }
    };
}

impl Sampler for AnySampler {
    fn sample(
        &mut self,
        context: &SampleContext<'_>,
        rows: usize,
        indices: &mut [usize],
        weights: &mut [f32],
    ) -> Result<usize> {
        each!(self, s => s.sample(context, rows, indices, weights))
    }

    fn rows_written(&mut self, before: &RingState, rows: usize, capacity: usize) {
        each!(self, s => s.rows_written(before, rows, capacity))
    }

    fn memory_plan(&self) -> MemoryPlan {
        each!(self, s => s.memory_plan())
    }

    fn state_format(&self) -> Option<StateFormat> {
        each!(self, s => s.state_format())
    }

    fn save_state(&self, out: &mut StateWriter<'_>) -> Result<()> {
        each!(self, s => s.save_state(out))
    }

    fn load_state(
        self,
        ring: &RingState,
        capacity: usize,
        input: &mut StateReader<'_>,
    ) -> Result<Self> {
        Ok(match self {
            Self::Uniform(s) => Self::Uniform(s.load_state(ring, capacity, input)?),
            Self::Prioritized(s) => Self::Prioritized(s.load_state(ring, capacity, input)?),
            Self::Slice(s) => Self::Slice(s.load_state(ring, capacity, input)?),
        })
    }
}
