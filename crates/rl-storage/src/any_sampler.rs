//! [`AnySampler`]: one of the crate's samplers, chosen at run time.

use rl_core::MemoryPlan;

use crate::error::Result;
use crate::prioritized::Prioritized;
use crate::sampler::{SampleContext, Sampler, StateFormat, StateReader, StateWriter, Uniform};
use crate::slice::SliceSampler;
use crate::storage::RingState;

/// Uniform, prioritized or slice sampling, chosen at run time (from a configuration, or
/// from Python), behind one [`Sampler`].
///
/// Every method forwards to the sampler inside, so a buffer over an `AnySampler` draws
/// the positions and weights the bare sampler would, and its checkpoint holds the bare
/// sampler's state under that sampler's own kind (a checkpoint of another kind is
/// refused by the buffer's load, as for the bare sampler).
///
/// ```
/// use rl_storage::sampler::{AnySampler, Prioritized, PrioritizedConfig, Uniform};
///
/// let mut uniform = AnySampler::from(Uniform::new(0));
/// assert!(uniform.as_prioritized_mut().is_none());
/// let mut prioritized = AnySampler::from(Prioritized::new(8, PrioritizedConfig::default(), 0)?);
/// prioritized.as_prioritized_mut().expect("prioritized").set_beta(1.0)?;
/// # Ok::<(), rl_storage::Error>(())
/// ```
#[derive(Clone, Debug)]
pub enum AnySampler {
    /// [`Uniform`]: with replacement over every stored row.
    Uniform(Uniform),
    /// [`Prioritized`]: proportional to priorities (sum tree).
    Prioritized(Prioritized),
    /// [`SliceSampler`]: windows that never cross an episode end.
    Slice(SliceSampler),
}

/// Runs `$body` with `$s` bound to the sampler inside an [`AnySampler`].
macro_rules! each {
    ($sampler:expr, $s:ident => $body:expr) => {
        match $sampler {
            AnySampler::Uniform($s) => $body,
            AnySampler::Prioritized($s) => $body,
            AnySampler::Slice($s) => $body,
        }
    };
}

impl AnySampler {
    /// The prioritized sampler inside, or `None` for another kind.
    pub fn as_prioritized(&self) -> Option<&Prioritized> {
        match self {
            Self::Prioritized(p) => Some(p),
            Self::Uniform(_) | Self::Slice(_) => None,
        }
    }

    /// The prioritized sampler inside (to update priorities or anneal `beta`), or `None`
    /// for another kind.
    pub fn as_prioritized_mut(&mut self) -> Option<&mut Prioritized> {
        match self {
            Self::Prioritized(p) => Some(p),
            Self::Uniform(_) | Self::Slice(_) => None,
        }
    }

    /// The slice sampler inside, or `None` for another kind.
    pub fn as_slice(&self) -> Option<&SliceSampler> {
        match self {
            Self::Slice(s) => Some(s),
            Self::Uniform(_) | Self::Prioritized(_) => None,
        }
    }
}

impl From<Uniform> for AnySampler {
    fn from(sampler: Uniform) -> Self {
        Self::Uniform(sampler)
    }
}

impl From<Prioritized> for AnySampler {
    fn from(sampler: Prioritized) -> Self {
        Self::Prioritized(sampler)
    }
}

impl From<SliceSampler> for AnySampler {
    fn from(sampler: SliceSampler) -> Self {
        Self::Slice(sampler)
    }
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
        each!(self, s => s.rows_written(before, rows, capacity));
    }

    fn memory_plan(&self) -> MemoryPlan {
        each!(self, s => s.memory_plan())
    }

    /// The sampler inside's format: its own kind and version.
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

#[cfg(test)]
mod tests;
