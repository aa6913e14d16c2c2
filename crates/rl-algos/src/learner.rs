//! The contract between the learners and the trainers that drive them (`rl-train`): what
//! an on-policy trainer needs ([`OnPolicyLearner`], for the policies [`PpoPolicy`] names)
//! and what an off-policy trainer needs ([`OffPolicyLearner`]): act for the collector
//! (itself, or a copy acting in worker threads), name the replay columns, learn from
//! sampled batches, and save and restore itself.

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{Policy, ValuePolicy};
use rl_core::{MemoryBudget, MemoryPlan, Schema};
use rl_nn::Checkpoint;
use rl_storage::Batch;
use rl_storage::rollout::RolloutBuffer;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::policy::{ActorCritic, PolicyNetworks, RecurrentCategoricalPolicy};
use crate::ppo::{
    CHECKPOINT_KIND, Ppo, PpoConfig, PpoState, RECURRENT_CHECKPOINT_KIND, RecurrentPpo,
    RecurrentPpoConfig, RecurrentPpoState, UpdateStats,
};
use crate::predict::Predict;

/// An off-policy learner ([`crate::sac::Sac`], [`crate::sac::DiscreteSac`], [`crate::dqn::Dqn`]): it is
/// the synchronous collector's [`rl_collect::Policy`] (so new weights reach the collector
/// without a copy), gives an [`OffPolicyLearner::Actor`] for collectors that act in
/// worker threads, reads batches of the replay columns it names, and saves itself in the
/// one checkpoint layout of `rl-nn`.
pub trait OffPolicyLearner: Predict<Obs = f32, State: Debug> {
    /// Typed learner state its checkpoints carry besides the networks.
    type Saved: Serialize + DeserializeOwned + Clone + Debug;
    /// What one gradient step measured.
    type Stats: Copy + Default + Debug + Serialize;
    /// The acting part of the learner (actor or Q network, action mapping, exploration
    /// state), which the asynchronous collector's workers act with. It always samples
    /// (exploration on). A clone acts like its source with its own random stream, so
    /// workers that start as clones of one actor explore independently; `clone_from`
    /// takes the source's weights and exploration state in place, without allocating,
    /// and keeps the destination's random stream (the way workers take new weights).
    type Actor: Policy<Obs = f32, Act = Self::Act, State = Self::State> + Clone + Debug + 'static;

    /// The replay columns [`OffPolicyLearner::update`] reads (built with
    /// [`rl_core::TransitionSchema`]).
    ///
    /// # Errors
    /// None in practice (the schema is valid by construction).
    fn replay_schema(&self) -> Result<Schema>;

    /// Transitions per gradient step: the rows of one sampled batch (for a learner
    /// trained on sequences, every window's burn-in and proper rows).
    fn batch_size(&self) -> usize;

    /// How batches are drawn: `None` (the default) for independent rows (uniform or
    /// prioritized), or windows of consecutive steps of one environment for learners
    /// with memory ([`crate::recurrent::Recurrent`]).
    fn sequence(&self) -> Option<SequenceSpec> {
        None
    }

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

    /// What acting on `rows` environments at once adds to [`OffPolicyLearner::memory_plan`]
    /// (a recurrent learner's per-environment state, made on the first call with that
    /// many rows). Nothing by default.
    fn acting_plan(&self, rows: usize) -> MemoryPlan {
        let _ = rows;
        MemoryPlan::new()
    }

    /// The whole learner state.
    fn checkpoint(&self) -> Checkpoint<Self::Saved>;

    /// A new actor that acts as the learner would now (in [`crate::policy::Mode::Sample`]).
    ///
    /// # Errors
    /// None in practice for this crate's learners (their buffers are sized from what
    /// the learner was built with).
    fn actor(&self) -> Result<Self::Actor>;

    /// Copies the learner's current weights and exploration state (DQN's epsilon at
    /// [`OffPolicyLearner::set_env_steps`]) into `actor`, one built by
    /// [`OffPolicyLearner::actor`] of this learner. Allocates nothing, except for
    /// what the learner's documentation says (a learned action table is copied).
    ///
    /// # Errors
    /// [`crate::Error::CheckpointMismatch`] for an actor of another architecture
    /// (nothing copied).
    fn refresh_actor(&self, actor: &mut Self::Actor) -> Result<()>;

    /// What `copies` actors hold together: each copy's networks and buffers, and what
    /// clones share once (a fixed action table's transposed copy). Constant for the
    /// learner's life.
    fn actor_memory_plan(&self, copies: usize) -> MemoryPlan;

    /// The `kind` its checkpoints carry, for [`Checkpoint::load`].
    fn checkpoint_kind(&self) -> &'static str;

    /// Restores a checkpoint of a learner built the same way; on error nothing changes.
    ///
    /// # Errors
    /// [`crate::Error::CheckpointMismatch`] and checkpoint shape or state errors.
    fn restore(&mut self, checkpoint: &Checkpoint<Self::Saved>) -> Result<()>;
}

/// The windows a learner trained on sequences wants from the replay buffer: each batch
/// holds `batch_size / (burn_in + len)` windows of one environment's consecutive steps
/// (`rl_storage::sampler::SliceSampler` with that burn-in, and the run's number of
/// environments as stride), whose `len` proper rows lie inside one episode and are
/// preceded by the `burn_in` rows before them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceSpec {
    /// Proper rows per window (the loss is on them).
    pub len: usize,
    /// Rows before each window that only warm the learner's state.
    pub burn_in: usize,
}

/// The random generator of an actor: each clone draws from its own stream, so that the
/// workers of an asynchronous collector, which start as clones of one actor, explore
/// independently; `clone_from` keeps the destination's stream (new weights arrive,
/// the worker's noise goes on).
#[derive(Debug)]
pub(crate) struct ActorRng {
    rng: Xoshiro256PlusPlus,
    seed: u64,
    /// Streams handed out so far by this actor and its clones.
    streams: Arc<AtomicU64>,
}

impl ActorRng {
    /// Stream 0 of `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            rng: stream(seed, 0),
            seed,
            streams: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The generator.
    pub(crate) fn rng(&mut self) -> &mut Xoshiro256PlusPlus {
        &mut self.rng
    }
}

/// Generator `index` of `seed`'s streams (SplitMix64 seeding of a distinct value).
fn stream(seed: u64, index: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

impl Clone for ActorRng {
    /// The next unused stream of this generator's family.
    fn clone(&self) -> Self {
        let index = self.streams.fetch_add(1, Ordering::Relaxed) + 1;
        Self {
            rng: stream(self.seed, index),
            seed: self.seed,
            streams: Arc::clone(&self.streams),
        }
    }

    /// Keeps this generator's own stream.
    fn clone_from(&mut self, _source: &Self) {}
}

/// A policy an on-policy trainer (`rl-train`'s `OnPolicyTrainer`) can train, and the learner that trains it:
/// [`Ppo`] for every [`ActorCritic`] policy ([`CategoricalPolicy`](crate::policy::CategoricalPolicy),
/// [`GaussianPolicy`](crate::policy::GaussianPolicy)), [`RecurrentPpo`] for a
/// [`RecurrentCategoricalPolicy`].
pub trait PpoPolicy:
    ValuePolicy<Obs = f32, State: Debug> + Predict + PolicyNetworks + Clone
{
    /// The learner.
    type Learner: OnPolicyLearner<Policy = Self>;
}

impl<P: ActorCritic + Predict + Clone> PpoPolicy for P {
    type Learner = Ppo<P>;
}

impl PpoPolicy for RecurrentCategoricalPolicy {
    type Learner = RecurrentPpo;
}

/// What an on-policy trainer needs of a learner ([`Ppo`], [`RecurrentPpo`]): build
/// itself, plan and make its rollout buffer, prepare the collector's copy of the policy
/// for a rollout, update on the rollout, hand its weights to that copy, save and
/// restore itself.
pub trait OnPolicyLearner: Sized + Debug {
    /// The policy it trains.
    type Policy: PpoPolicy<Learner = Self>;
    /// Its configuration.
    type Config: Clone + Debug;
    /// Typed state its checkpoints carry besides the networks.
    type Saved: Serialize + DeserializeOwned + Clone + Debug;
    /// Its checkpoints' `kind`.
    const KIND: &'static str;

    /// A learner for `policy` on rollouts of `envs` environments.
    ///
    /// # Errors
    /// An invalid configuration.
    fn new(policy: Self::Policy, config: Self::Config, envs: usize) -> Result<Self>;

    /// What its rollout buffer allocates.
    ///
    /// # Errors
    /// As [`RolloutBuffer::plan`].
    fn rollout_plan(&self) -> Result<MemoryPlan>;

    /// Its rollout buffer, refused first if the plan does not fit `budget`.
    ///
    /// # Errors
    /// As [`RolloutBuffer::new`].
    fn rollout_buffer(&self, budget: Option<&MemoryBudget>) -> Result<RolloutBuffer>;

    /// What the learner holds.
    fn memory_plan(&self) -> MemoryPlan;

    /// What the collector's copy of the policy holds besides its weights while
    /// collecting (a recurrent policy's state and chunk record; nothing otherwise).
    fn acting_plan(&self) -> MemoryPlan;

    /// The policy being trained.
    fn policy(&self) -> &Self::Policy;

    /// The policy being trained, mutably.
    fn policy_mut(&mut self) -> &mut Self::Policy;

    /// Parameters over every network.
    fn num_params(&self) -> usize;

    /// Updates completed.
    fn updates(&self) -> u64;

    /// Prepares the collector's copy for the rollout collected next.
    ///
    /// # Errors
    /// The policy's.
    fn begin_rollout(&self, acting: &mut Self::Policy) -> Result<()>;

    /// One update on a full rollout collected by `acting`.
    ///
    /// # Errors
    /// The learner's.
    fn update(&mut self, rollout: &mut RolloutBuffer, acting: &Self::Policy)
    -> Result<UpdateStats>;

    /// Copies what acting depends on into `target`.
    ///
    /// # Errors
    /// A target of another architecture.
    fn copy_policy_into(&self, target: &mut Self::Policy) -> Result<()>;

    /// Everything needed to resume training exactly.
    fn checkpoint(&self) -> Checkpoint<Self::Saved>;

    /// Writes [`OnPolicyLearner::checkpoint`] to `path`.
    ///
    /// # Errors
    /// I/O errors.
    fn save(&self, path: &Path) -> Result<()>;

    /// Restores the checkpoint at `path`; on error nothing changes.
    ///
    /// # Errors
    /// A missing, corrupt or mismatched checkpoint.
    fn load(&mut self, path: &Path) -> Result<()>;
}

impl<P: ActorCritic + Predict + Clone> OnPolicyLearner for Ppo<P> {
    type Policy = P;
    type Config = PpoConfig;
    type Saved = PpoState;
    const KIND: &'static str = CHECKPOINT_KIND;

    fn new(policy: P, config: PpoConfig, envs: usize) -> Result<Self> {
        Ppo::new(policy, config, envs)
    }

    fn rollout_plan(&self) -> Result<MemoryPlan> {
        Ppo::rollout_plan(self)
    }

    fn rollout_buffer(&self, budget: Option<&MemoryBudget>) -> Result<RolloutBuffer> {
        Ppo::rollout_buffer(self, budget)
    }

    fn memory_plan(&self) -> MemoryPlan {
        Ppo::memory_plan(self)
    }

    fn acting_plan(&self) -> MemoryPlan {
        MemoryPlan::new()
    }

    fn policy(&self) -> &P {
        Ppo::policy(self)
    }

    fn policy_mut(&mut self) -> &mut P {
        Ppo::policy_mut(self)
    }

    fn num_params(&self) -> usize {
        self.adams().iter().map(|a| a.num_params()).sum()
    }

    fn updates(&self) -> u64 {
        Ppo::updates(self)
    }

    fn begin_rollout(&self, _acting: &mut P) -> Result<()> {
        Ok(())
    }

    fn update(&mut self, rollout: &mut RolloutBuffer, _acting: &P) -> Result<UpdateStats> {
        Ppo::update(self, rollout)
    }

    fn copy_policy_into(&self, target: &mut P) -> Result<()> {
        Ppo::copy_policy_into(self, target)
    }

    fn checkpoint(&self) -> Checkpoint<PpoState> {
        Ppo::checkpoint(self)
    }

    fn save(&self, path: &Path) -> Result<()> {
        Ppo::save(self, path)
    }

    fn load(&mut self, path: &Path) -> Result<()> {
        Ppo::load(self, path)
    }
}

impl OnPolicyLearner for RecurrentPpo {
    type Policy = RecurrentCategoricalPolicy;
    type Config = RecurrentPpoConfig;
    type Saved = RecurrentPpoState;
    const KIND: &'static str = RECURRENT_CHECKPOINT_KIND;

    fn new(
        policy: RecurrentCategoricalPolicy,
        config: RecurrentPpoConfig,
        envs: usize,
    ) -> Result<Self> {
        RecurrentPpo::new(policy, config, envs)
    }

    fn rollout_plan(&self) -> Result<MemoryPlan> {
        RecurrentPpo::rollout_plan(self)
    }

    fn rollout_buffer(&self, budget: Option<&MemoryBudget>) -> Result<RolloutBuffer> {
        RecurrentPpo::rollout_buffer(self, budget)
    }

    fn memory_plan(&self) -> MemoryPlan {
        RecurrentPpo::memory_plan(self)
    }

    fn acting_plan(&self) -> MemoryPlan {
        RecurrentPpo::acting_plan(self)
    }

    fn policy(&self) -> &RecurrentCategoricalPolicy {
        RecurrentPpo::policy(self)
    }

    fn policy_mut(&mut self) -> &mut RecurrentCategoricalPolicy {
        RecurrentPpo::policy_mut(self)
    }

    fn num_params(&self) -> usize {
        self.adams().iter().map(|a| a.num_params()).sum()
    }

    fn updates(&self) -> u64 {
        RecurrentPpo::updates(self)
    }

    fn begin_rollout(&self, acting: &mut RecurrentCategoricalPolicy) -> Result<()> {
        RecurrentPpo::begin_rollout(self, acting)
    }

    fn update(
        &mut self,
        rollout: &mut RolloutBuffer,
        acting: &RecurrentCategoricalPolicy,
    ) -> Result<UpdateStats> {
        let record = acting.chunk_record().ok_or_else(|| {
            Error::config(
                "chunk record",
                "is missing: the collector's policy recorded no chunk starts (call begin_rollout before collecting)",
            )
        })?;
        RecurrentPpo::update(self, rollout, record)
    }

    fn copy_policy_into(&self, target: &mut RecurrentCategoricalPolicy) -> Result<()> {
        RecurrentPpo::copy_policy_into(self, target)
    }

    fn checkpoint(&self) -> Checkpoint<RecurrentPpoState> {
        RecurrentPpo::checkpoint(self)
    }

    fn save(&self, path: &Path) -> Result<()> {
        RecurrentPpo::save(self, path)
    }

    fn load(&mut self, path: &Path) -> Result<()> {
        RecurrentPpo::load(self, path)
    }
}

/// The configuration of policy `P`'s learner.
pub type LearnerConfig<P> = <<P as PpoPolicy>::Learner as OnPolicyLearner>::Config;
