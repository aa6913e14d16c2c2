//! What the off-policy trainer needs from an algorithm: act for the collector, name the
//! replay columns, learn from sampled batches, and save and restore itself.

use std::fmt::Debug;

use rl_core::{MemoryPlan, Schema};
use rl_nn::Checkpoint;
use rl_storage::Batch;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::eval::Predict;

/// An off-policy learner ([`crate::Sac`], [`crate::DiscreteSac`], DQN): it is
/// the collector's [`rl_collect::Policy`] (so new weights reach the collector without a
/// copy), reads batches of the replay columns it names, and saves itself in the one
/// checkpoint layout of `rl-nn`.
pub trait OffPolicyLearner: Predict<Obs = f32> {
    /// Typed learner state its checkpoints carry besides the networks.
    type Saved: Serialize + DeserializeOwned + Clone + Debug;
    /// What one gradient step measured.
    type Stats: Copy + Default + Debug + Serialize;

    /// The replay columns [`OffPolicyLearner::update`] reads (built with
    /// [`rl_core::TransitionSchema`]).
    ///
    /// # Errors
    /// None in practice (the schema is valid by construction).
    fn replay_schema(&self) -> Result<Schema>;

    /// Transitions per gradient step.
    fn batch_size(&self) -> usize;

    /// One gradient step on a sampled batch of [`OffPolicyLearner::batch_size`] rows.
    /// Rows carry importance weights in [`Batch::weights`] (all 1 for uniform sampling).
    ///
    /// # Errors
    /// A batch of another schema or size; [`crate::Error::Diverged`] for a non-finite
    /// loss (nothing applied).
    fn update(&mut self, batch: &Batch) -> Result<Self::Stats>;

    /// New sampling priorities of the rows of the last [`OffPolicyLearner::update`]
    /// (one per batch row, positive), for prioritized replay; `None` for a learner
    /// that has none.
    fn priorities(&self) -> Option<&[f32]> {
        None
    }

    /// Tells the learner how many environment steps the run has taken (exploration
    /// schedules read it). Called before every collection.
    fn set_env_steps(&mut self, _env_steps: u64) {}

    /// Gradient steps done.
    fn updates(&self) -> u64;

    /// Everything the learner holds, constant for its life.
    fn memory_plan(&self) -> MemoryPlan;

    /// The whole learner state.
    fn checkpoint(&self) -> Checkpoint<Self::Saved>;

    /// The `kind` its checkpoints carry, for [`Checkpoint::load`].
    fn checkpoint_kind(&self) -> &'static str;

    /// Restores a checkpoint of a learner built the same way; on error nothing changes.
    ///
    /// # Errors
    /// [`crate::Error::CheckpointMismatch`] and checkpoint shape or state errors.
    fn restore(&mut self, checkpoint: &Checkpoint<Self::Saved>) -> Result<()>;
}
