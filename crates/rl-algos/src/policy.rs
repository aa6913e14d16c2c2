//! Actor-critic policies on dfdx: a categorical one for discrete actions and a diagonal
//! Gaussian one for continuous actions, each with a separate value network.
//!
//! Both own their dfdx [`Cpu`] device (seeded) and a seeded generator for sampling
//! actions, implement `rl-collect`'s [`Policy`](rl_collect::Policy) and
//! [`ValuePolicy`](rl_collect::ValuePolicy) (so collectors drive them), and
//! [`ActorCritic`], which is what a learner needs: log-probabilities and values of stored
//! actions without a tape, in minibatches of a chosen size (memory does not grow with the
//! rollout), and a traced pass returning log-probs, entropy and values on the tape.
//!
//! Either may hold an [`ObsNormalizer`] (none by default) that normalises every input,
//! and exposes its sampling generator ([`ActorCritic::sampling_state`]) so that
//! checkpoints resume the actions drawn exactly.

mod categorical;
mod gaussian;
mod mlp;
mod normalize;
mod shared;

#[cfg(test)]
mod tests;

use dfdx::prelude::{Cpu, Gradients, OwnedTape, Tensor, TensorCollection};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::ValuePolicy;
use rl_storage::Actions;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use categorical::{CategoricalNet, CategoricalPolicy};
pub use gaussian::{GaussianNet, GaussianPolicy};
pub use mlp::{Activation, Mlp, Relu, Tanh};
pub use normalize::ObsNormalizer;

/// How a policy chooses actions when a collector calls it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mode {
    /// Draw from the policy's distribution (training). The default.
    #[default]
    Sample,
    /// The most likely action: the argmax of the logits, or the Gaussian's mean
    /// (evaluation). The log-prob written is that action's.
    Deterministic,
}

/// Construction settings shared by both policies. Start from [`PolicyConfig::new`] and
/// change fields with struct update syntax.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyConfig {
    /// How actions are chosen (default [`Mode::Sample`]); also settable later.
    pub mode: Mode,
    /// The actor's output layer is built with dfdx's initialisation, then its weights are
    /// multiplied by this and its bias set to 0 (default 0.01, as Stable-Baselines3's
    /// orthogonal gain for the policy head): the first policy is close to uniform
    /// (categorical) or has means close to 0 (Gaussian). Positive and finite.
    pub actor_head_scale: f32,
    /// The same for the critic's output layer (default 1.0: dfdx's initialisation as is,
    /// bias set to 0). Positive and finite.
    pub critic_head_scale: f32,
    /// Gaussian policies only: the initial log standard deviation of every action
    /// dimension (default 0.0, a standard deviation of 1). Finite.
    pub log_std_init: f32,
}

impl PolicyConfig {
    /// The defaults: [`Mode::Sample`], actor head scale 0.01, critic head scale 1.0,
    /// initial log-std 0.0.
    pub const fn new() -> Self {
        Self {
            mode: Mode::Sample,
            actor_head_scale: 0.01,
            critic_head_scale: 1.0,
            log_std_init: 0.0,
        }
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first invalid field.
    pub fn validate(&self) -> Result<()> {
        for (what, scale) in [
            ("policy.actor_head_scale", self.actor_head_scale),
            ("policy.critic_head_scale", self.critic_head_scale),
        ] {
            if !(scale.is_finite() && scale > 0.0) {
                return Err(Error::config(
                    what,
                    format!(
                        "is {scale}: use a positive finite scale (0.01 for the actor, 1 for the critic)"
                    ),
                ));
            }
        }
        if !self.log_std_init.is_finite() {
            return Err(Error::config(
                "policy.log_std_init",
                format!(
                    "is {}: use a finite log standard deviation (0 means a standard deviation of 1)",
                    self.log_std_init
                ),
            ));
        }
        Ok(())
    }
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// One row value per batch row, on the tape.
pub type TracedRows = Tensor<(usize,), f32, Cpu, OwnedTape<f32, Cpu>>;

/// What a traced pass returns, one value per row, for a learner's loss.
///
/// **Tape layout** (dfdx 0.13 keeps one tape per tensor and merges tapes only in binary
/// operations):
/// - `log_probs` carries the actor's operations (for the Gaussian also the log-std's)
///   and the gradient store given to [`ActorCritic::evaluate_traced`], so the gradients
///   `backward` returns hold every parameter of the network only if the loss uses
///   `log_probs` (every policy-gradient loss does).
/// - `values` carries the critic's operations.
/// - `entropy` carries only its own operations: for the categorical policy, those after
///   the actor's log-softmax, which reach the actor's weights through `log_probs`' tape;
///   for the Gaussian, the log-std's (complete on its own: the entropy does not depend
///   on the mean).
///
/// A loss made of the categorical `entropy` alone would give the actor exactly zero
/// gradients, with no error (see `STACK-NOTES.md`): add `0 * log_probs` to such a loss.
#[derive(Debug)]
pub struct Evaluation {
    /// `log pi(a | s)` of the given actions (summed over dimensions for the Gaussian).
    pub log_probs: TracedRows,
    /// Entropy of the action distribution at each observation.
    pub entropy: TracedRows,
    /// `V(s)`.
    pub values: TracedRows,
}

/// An actor-critic policy a learner can train: the network as a dfdx tensor collection,
/// evaluation of stored actions without a tape (whole or in minibatches), and a traced
/// pass for the loss.
///
/// Observations are `f32` rows of [`ActorCritic::OBS_LEN`] elements; actions rows of
/// [`ActorCritic::ACT_LEN`] elements (one `u32` index for discrete policies).
pub trait ActorCritic: ValuePolicy<Obs = f32, State = ()> {
    /// The dfdx module holding every trainable tensor (give it to an optimiser,
    /// `alloc_grads`, save/load).
    type Net: TensorCollection<f32, Cpu>;

    /// Elements of one observation.
    const OBS_LEN: usize;
    /// Elements of one action (1 for a discrete index).
    const ACT_LEN: usize;

    /// The actions of a rollout (or rollout batch) as this policy's action slice.
    ///
    /// # Errors
    /// [`Error::Config`] for actions of the other kind (continuous actions for a
    /// discrete policy, or the reverse).
    fn stored_actions(actions: Actions<'_>) -> Result<&[Self::Act]>;

    /// The network.
    fn net(&self) -> &Self::Net;

    /// The network, mutably (for an optimiser step).
    fn net_mut(&mut self) -> &mut Self::Net;

    /// The dfdx device the network lives on.
    fn device(&self) -> &Cpu;

    /// Names the architecture: the policy kind, layer sizes and activation, e.g.
    /// `"categorical 4-64-64-2 relu"`. Checkpoints record it, and a checkpoint of another
    /// architecture is refused even where tensor shapes agree (ReLU against tanh).
    fn architecture() -> String;

    /// A copy of the generator that samples actions (its exact state: a policy given it
    /// with [`ActorCritic::set_sampling_state`] draws the same actions from then on).
    fn sampling_state(&self) -> Xoshiro256PlusPlus;

    /// Replaces the generator that samples actions (from
    /// [`ActorCritic::sampling_state`], possibly through a checkpoint).
    fn set_sampling_state(&mut self, state: Xoshiro256PlusPlus);

    /// The observation normaliser every input goes through, if any (none by default).
    fn obs_normalizer(&self) -> Option<&ObsNormalizer>;

    /// The observation normaliser, mutably (to update its statistics).
    fn obs_normalizer_mut(&mut self) -> Option<&mut ObsNormalizer>;

    /// Installs (or with `None` removes) the observation normaliser.
    ///
    /// # Errors
    /// [`Error::Config`] for a normaliser of another observation length or with
    /// non-finite statistics ([`ObsNormalizer::check`]); the policy is then unchanged.
    fn set_obs_normalizer(&mut self, normalizer: Option<ObsNormalizer>) -> Result<()>;

    /// Writes `log pi(a | s)` of `actions` and `V(s)` for every row of `obs`, in one pass
    /// without a tape. Memory grows with the number of rows: use
    /// [`ActorCritic::evaluate_minibatched`] for a whole rollout.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if the slices do not hold the same number of rows;
    /// [`Error::ActionOutOfRange`] for a discrete action not below the action count.
    fn log_probs_and_values(
        &self,
        obs: &[f32],
        actions: &[Self::Act],
        log_probs: &mut [f32],
        values: &mut [f32],
    ) -> Result<()>;

    /// As [`ActorCritic::log_probs_and_values`], `minibatch` rows at a time: live memory
    /// is bounded by the minibatch (plus the caller's outputs), whatever the number of
    /// rows. Gives the same numbers as the one-pass version (the tests check it
    /// bit for bit).
    ///
    /// # Errors
    /// As [`ActorCritic::log_probs_and_values`], and [`Error::Config`] for a `minibatch`
    /// of 0.
    fn evaluate_minibatched(
        &self,
        obs: &[f32],
        actions: &[Self::Act],
        minibatch: usize,
        log_probs: &mut [f32],
        values: &mut [f32],
    ) -> Result<()> {
        if minibatch == 0 {
            return Err(Error::config(
                "evaluation minibatch",
                "is 0: use at least one row per minibatch",
            ));
        }
        let rows = log_probs.len();
        check_rows::<Self::Act>(rows, Self::OBS_LEN, Self::ACT_LEN, obs, actions, values)?;
        let chunks = obs
            .chunks(minibatch * Self::OBS_LEN)
            .zip(actions.chunks(minibatch * Self::ACT_LEN))
            .zip(log_probs.chunks_mut(minibatch))
            .zip(values.chunks_mut(minibatch));
        for (((obs, actions), log_probs), values) in chunks {
            self.log_probs_and_values(obs, actions, log_probs, values)?;
        }
        Ok(())
    }

    /// The pass a loss is built from: log-probs of `actions`, entropies and values, on a
    /// tape that accumulates into `grads` (from `net().alloc_grads()`). See
    /// [`Evaluation`] for which tensor carries which part of the tape.
    ///
    /// # Errors
    /// As [`ActorCritic::log_probs_and_values`] (without output buffers).
    fn evaluate_traced(
        &self,
        obs: &[f32],
        actions: &[Self::Act],
        grads: Gradients<f32, Cpu>,
    ) -> Result<Evaluation>;
}

/// Checks that `obs`, `actions` and the per-row output hold `rows` rows.
fn check_rows<A>(
    rows: usize,
    obs_len: usize,
    act_len: usize,
    obs: &[f32],
    actions: &[A],
    per_row: &[f32],
) -> Result<()> {
    check_len("observations", rows * obs_len, obs.len())?;
    check_len("actions", rows * act_len, actions.len())?;
    check_len("value output", rows, per_row.len())
}

fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::ShapeMismatch {
            what,
            expected,
            actual,
        })
    }
}

/// Rows in `obs`, which must be a whole number of `obs_len` rows.
fn rows_of(obs: &[f32], obs_len: usize) -> Result<usize> {
    let rows = obs.len() / obs_len;
    check_len("observations", rows * obs_len, obs.len())?;
    Ok(rows)
}

/// Describes a space for error messages.
pub(crate) fn describe(space: &rl_core::Space) -> String {
    match space {
        rl_core::Space::Discrete { n } => format!("a discrete space of {n} actions"),
        rl_core::Space::Box(b) => format!(
            "a box of {} {} elements (shape {:?})",
            b.flat_len(),
            b.dtype(),
            b.shape()
        ),
    }
}

/// Checks that `space` is an `f32` box of `len` elements.
fn check_box(what: &'static str, space: &rl_core::Space, len: usize) -> Result<()> {
    match space {
        rl_core::Space::Box(b) if b.dtype() == rl_core::DType::F32 && b.flat_len() == len => Ok(()),
        _ => Err(Error::SpaceMismatch {
            what,
            expected: format!("a box of {len} f32 elements"),
            actual: describe(space),
        }),
    }
}
