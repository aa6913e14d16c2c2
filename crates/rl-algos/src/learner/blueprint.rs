//! Learners described before they are built: what each will hold and what it will ask of
//! a run, from its configuration and spaces alone, so that a run's memory plan is made,
//! printed and checked before any network or buffer exists.

use rl_core::{Location, MemoryPlan, Schema};

use super::SequenceSpec;
use crate::error::{Error, Result};

/// An on-policy learner ([`Ppo`](crate::ppo::Ppo),
/// [`RecurrentPpo`](crate::ppo::RecurrentPpo)) before it is built: made by
/// [`Ppo::blueprint`](crate::ppo::Ppo::blueprint) and
/// [`RecurrentPpo::blueprint`](crate::ppo::RecurrentPpo::blueprint) from the
/// configuration and the spaces alone, and equal to the built learner's
/// [`OnPolicyLearner::blueprint`](super::OnPolicyLearner::blueprint) (which is how a built
/// learner answers [`Learner::memory_plan`](super::Learner::memory_plan) and its other
/// plans: one computation for both).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnPolicyBlueprint {
    /// Environments its rollouts hold.
    pub envs: usize,
    /// What the learner holds ([`Learner::memory_plan`](super::Learner::memory_plan)).
    pub learner: MemoryPlan,
    /// What its rollout buffer allocates.
    pub rollout: MemoryPlan,
    /// Parameters over every network of the policy (the collector's copy holds as
    /// many).
    pub policy_params: usize,
    /// What the collector's copy of the policy holds besides its weights while
    /// collecting (a recurrent policy's state and chunk record).
    pub acting: MemoryPlan,
}

/// An off-policy learner ([`Sac`](crate::sac::Sac), [`DiscreteSac`](crate::sac::DiscreteSac),
/// [`Dqn`](crate::dqn::Dqn), [`Recurrent`](crate::sequence::Recurrent)) before it is built:
/// made by each learner's `blueprint` function from the configuration and the spaces
/// alone, and equal to the built learner's
/// [`OffPolicyLearner::blueprint`](super::OffPolicyLearner::blueprint), from which the built
/// learner answers its plans, replay schema and batch size (one computation for both).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OffPolicyBlueprint {
    /// What the learner holds ([`Learner::memory_plan`](super::Learner::memory_plan)).
    pub learner: MemoryPlan,
    /// The replay columns its updates read.
    pub replay_schema: Schema,
    /// Transitions per gradient step (every window's rows for a learner on sequences).
    pub batch_size: usize,
    /// How batches are drawn ([`OffPolicyLearner::sequence`](super::OffPolicyLearner::sequence)).
    pub sequence: Option<SequenceSpec>,
    /// What acting on a number of environments at once adds (one line per entry).
    pub(crate) acting: Vec<Scaled>,
    /// What each actor copy holds, and what copies share (one line per entry).
    pub(crate) actor: Vec<Scaled>,
}

impl OffPolicyBlueprint {
    /// A blueprint with no acting state and no actor lines yet.
    pub(crate) fn new(learner: MemoryPlan, replay_schema: Schema, batch_size: usize) -> Self {
        Self {
            learner,
            replay_schema,
            batch_size,
            sequence: None,
            acting: Vec::new(),
            actor: Vec::new(),
        }
    }

    /// What acting on `rows` environments at once adds to the learner's plan
    /// ([`OffPolicyLearner::acting_plan`](super::OffPolicyLearner::acting_plan)).
    pub fn acting_plan(&self, rows: usize) -> MemoryPlan {
        Scaled::plan(&self.acting, rows)
    }

    /// What `copies` actors hold together
    /// ([`OffPolicyLearner::actor_memory_plan`](super::OffPolicyLearner::actor_memory_plan)).
    pub fn actor_memory_plan(&self, copies: usize) -> MemoryPlan {
        Scaled::plan(&self.actor, copies)
    }
}

/// A plan line whose bytes grow with a count (environments acted for, actor copies):
/// `per_unit x count + shared` bytes, named `before`, the count, then `after` (or
/// `before` alone when the name holds no count).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Scaled {
    pub(crate) before: String,
    /// `None`: the name holds no count.
    pub(crate) after: Option<String>,
    pub(crate) per_unit: u64,
    pub(crate) shared: u64,
}

impl Scaled {
    /// `per_unit` bytes per unit, named `{before}{count}{after}`.
    pub(crate) fn per(before: impl Into<String>, after: impl Into<String>, per_unit: u64) -> Self {
        Self {
            before: before.into(),
            after: Some(after.into()),
            per_unit,
            shared: 0,
        }
    }

    /// `bytes` whatever the count, named `name`.
    pub(crate) fn shared(name: impl Into<String>, bytes: u64) -> Self {
        Self {
            before: name.into(),
            after: None,
            per_unit: 0,
            shared: bytes,
        }
    }

    /// One line per entry for `count` units (saturating: a plan that large is refused
    /// by any budget).
    fn plan(lines: &[Scaled], count: usize) -> MemoryPlan {
        let mut plan = MemoryPlan::new();
        for line in lines {
            let name = match &line.after {
                Some(after) => format!("{}{count}{after}", line.before),
                None => line.before.clone(),
            };
            let bytes = line
                .per_unit
                .saturating_mul(count as u64)
                .saturating_add(line.shared);
            plan.add(name, Location::Ram, bytes);
        }
        plan
    }
}

/// Checked byte arithmetic of plans made from configuration: a size that overflows is a
/// configuration error naming the setting and what to lower, never a panic or a
/// wrapped number.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sizes {
    /// The setting the sizes come from (`"policy.hidden"`, `"ppo.n_steps"` ...).
    what: &'static str,
}

impl Sizes {
    /// Sizes from the setting `what`.
    pub(crate) fn of(what: &'static str) -> Self {
        Self { what }
    }

    /// The overflow error.
    pub(crate) fn overflow(self) -> Error {
        Error::config(
            self.what,
            "makes the memory plan overflow 64-bit byte counts: lower it (or the hidden sizes, n_steps, batch_size and buffer_capacity it multiplies)",
        )
    }

    /// The product of `factors`, as a count.
    pub(crate) fn count(self, factors: &[usize]) -> Result<usize> {
        factors
            .iter()
            .try_fold(1usize, |acc, &f| acc.checked_mul(f))
            .filter(|&n| n.checked_mul(size_of::<f64>()).is_some())
            .ok_or_else(|| self.overflow())
    }

    /// The product of `factors`, as bytes.
    pub(crate) fn bytes(self, factors: &[usize]) -> Result<u64> {
        self.count(factors)
            .and_then(|n| u64::try_from(n).map_err(|_| self.overflow()))
    }

    /// Bytes of `factors` multiplied `f32`s.
    pub(crate) fn f32s(self, factors: &[usize]) -> Result<u64> {
        let n = self.count(factors)?;
        self.bytes(&[n, size_of::<f32>()])
    }

    /// The sum of `terms`.
    pub(crate) fn sum(self, terms: &[u64]) -> Result<u64> {
        terms
            .iter()
            .try_fold(0u64, |acc, &t| acc.checked_add(t))
            .ok_or_else(|| self.overflow())
    }

    /// The sum of `terms`, as a count.
    pub(crate) fn add(self, terms: &[usize]) -> Result<usize> {
        terms
            .iter()
            .try_fold(0usize, |acc, &t| acc.checked_add(t))
            .ok_or_else(|| self.overflow())
    }

    /// `value`, or the overflow error for `None` (a size helper of another crate).
    pub(crate) fn checked<T>(self, value: Option<T>) -> Result<T> {
        value.ok_or_else(|| self.overflow())
    }
}

#[cfg(test)]
mod tests;
