//! The one contract between the learners and the trainers that drive them (`rl-train`):
//! [`Learner`], what every learner is (kind, checkpoint to bytes and back, memory plan,
//! update count), and one trait per loop on top of it, each with only what that loop
//! needs: [`OnPolicyLearner`] (a policy, a rollout, one update per rollout) and
//! [`OffPolicyLearner`] (act for the collector, name the replay columns, one gradient
//! step per sampled batch). What each will hold is known before it is built: its
//! [`OnPolicyBlueprint`] or [`OffPolicyBlueprint`], from its configuration and spaces alone.

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{Policy, ValuePolicy};
use rl_core::{MemoryBudget, MemoryPlan, Schema};
use rl_nn::{Checkpoint, Pool};
use rl_storage::Batch;
use rl_storage::rollout::RolloutBuffer;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::policy::PolicyNetworks;
use crate::predict::Predict;

mod blueprint;

pub use blueprint::{OffPolicyBlueprint, OnPolicyBlueprint};
pub(crate) use blueprint::{Scaled, Sizes};

/// What every learner is, whatever loop drives it: what it is (its checkpoints' kind),
/// what it holds (its memory plan), how far it got (its update count), and its whole
/// state as a checkpoint and back. Checkpoints travel as bytes ([`Learner::to_bytes`],
/// [`Learner::restore_bytes`]); files are the run layer's business.
pub trait Learner: Debug {
    /// Typed learner state its checkpoints carry besides the networks.
    type Saved: Serialize + DeserializeOwned + Clone + Debug;

    /// The `kind` its checkpoints carry (`"ppo"`, `"sac"`, `"recurrent_dqn"` ...); a
    /// checkpoint of another kind is refused.
    fn kind(&self) -> &'static str;

    /// Gradient updates done.
    fn updates(&self) -> u64;

    /// Runs the learner's large matrix products on `pool`'s threads (`None`, the default:
    /// on the calling thread). Every product is split into fixed blocks of output rows,
    /// each computed by one thread in the order of summation one thread uses, so updates
    /// and checkpoints are bit-identical whatever the pool's size. Allocates nothing
    /// per update; the pool's threads are started once, by [`Pool::new`].
    fn set_pool(&mut self, pool: Option<Arc<Pool>>);

    /// Everything the learner holds, constant for its life.
    fn memory_plan(&self) -> MemoryPlan;

    /// Everything needed to resume training exactly: networks, optimiser states,
    /// schedules, normalisers, generators.
    fn checkpoint(&self) -> Checkpoint<'_, Self::Saved>;

    /// Restores a checkpoint of a learner built the same way; on error nothing changes.
    ///
    /// # Errors
    /// [`crate::Error::CheckpointMismatch`] and checkpoint shape or state errors.
    fn restore(&mut self, checkpoint: &Checkpoint<Self::Saved>) -> Result<()>;

    /// [`Learner::checkpoint`] as bytes (the safetensors layout of `rl-nn`).
    ///
    /// # Errors
    /// A state that cannot be serialised.
    fn to_bytes(&self) -> Result<Vec<u8>> {
        Ok(self.checkpoint().to_bytes()?)
    }

    /// Restores the bytes of [`Learner::to_bytes`]; `what` names their source in errors
    /// (a file, `"weights from the learner"` ...). On error nothing changes.
    ///
    /// # Errors
    /// Bytes that are not a checkpoint of this learner's kind and format version, and
    /// the errors of [`Learner::restore`].
    fn restore_bytes(&mut self, bytes: &[u8], what: &Path) -> Result<()> {
        let checkpoint = Checkpoint::from_bytes(bytes, self.kind(), what)?;
        self.restore(&checkpoint)
    }
}

/// An off-policy learner ([`crate::sac::Sac`], [`crate::sac::DiscreteSac`], [`crate::dqn::Dqn`]): it is
/// the synchronous collector's [`rl_collect::Policy`] (so new weights reach the collector
/// without a copy), gives an [`OffPolicyLearner::Actor`] for collectors that act in
/// worker threads, and reads batches of the replay columns it names. What every learner
/// does (checkpoints, plan, update count) is its [`Learner`] side.
pub trait OffPolicyLearner: Learner + Predict<Obs: rl_nn::Observation, State: Debug> {
    /// What one gradient step measured.
    type Stats: Copy + Default + Debug + Serialize;
    /// The acting part of the learner (actor or Q network, action mapping, exploration
    /// state), which the asynchronous collector's workers act with. It always samples
    /// (exploration on). A clone acts like its source with its own random stream, so
    /// workers that start as clones of one actor explore independently; `clone_from`
    /// takes the source's weights and exploration state in place, without allocating,
    /// and keeps the destination's random stream (the way workers take new weights).
    type Actor: Policy<Obs = <Self as Policy>::Obs, Act = Self::Act, State = Self::State>
        + Clone
        + Debug
        + 'static;

    /// What the learner holds and asks of a run, the same as its configuration and spaces
    /// gave before it was built (each learner's `blueprint` function): its
    /// [`Learner::memory_plan`], replay schema, batch size and acting plans all come from
    /// it.
    fn blueprint(&self) -> &OffPolicyBlueprint;

    /// The replay columns [`OffPolicyLearner::update`] reads (built with
    /// [`rl_core::TransitionSchema`]).
    ///
    /// # Errors
    /// None in practice (the schema is valid by construction).
    fn replay_schema(&self) -> Result<Schema> {
        Ok(self.blueprint().replay_schema.clone())
    }

    /// Transitions per gradient step: the rows of one sampled batch (for a learner
    /// trained on sequences, every window's burn-in and proper rows).
    fn batch_size(&self) -> usize {
        self.blueprint().batch_size
    }

    /// How batches are drawn: `None` for independent rows (uniform or prioritized), or
    /// windows of consecutive steps of one environment for learners with memory
    /// ([`crate::sequence::Recurrent`]).
    fn sequence(&self) -> Option<SequenceSpec> {
        self.blueprint().sequence
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

    /// What acting on `rows` environments at once adds to [`OffPolicyLearner::memory_plan`](crate::learner::Learner::memory_plan)
    /// (a recurrent learner's per-environment state, made on the first call with that
    /// many rows; nothing for the others).
    fn acting_plan(&self, rows: usize) -> MemoryPlan {
        self.blueprint().acting_plan(rows)
    }

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
    fn actor_memory_plan(&self, copies: usize) -> MemoryPlan {
        self.blueprint().actor_memory_plan(copies)
    }
}

/// What an on-policy trainer (`rl-train`'s `OnPolicyTrainer`) needs of a learner
/// ([`Ppo`](crate::ppo::Ppo), [`RecurrentPpo`](crate::ppo::RecurrentPpo)) besides being a
/// [`Learner`]: the policy it trains (whose copy the collector acts with), its rollout
/// buffer, one update on a full rollout, and its weights handed to the collector's copy.
pub trait OnPolicyLearner: Learner {
    /// The policy it trains; the collector acts with a clone of it.
    type Policy: ValuePolicy<Obs: rl_nn::Observation, State: Debug>
        + Predict
        + PolicyNetworks
        + Clone;
    /// What one update measured.
    type Stats: Copy + Debug + Serialize;

    /// The policy being trained.
    fn policy(&self) -> &Self::Policy;

    /// The policy being trained, mutably (the trainer hands it the collector's sampling
    /// generator before a checkpoint).
    fn policy_mut(&mut self) -> &mut Self::Policy;

    /// What the learner holds and what its rollouts and acting copy cost, the same as its
    /// configuration and spaces gave before it was built
    /// ([`Ppo::blueprint`](crate::ppo::Ppo::blueprint),
    /// [`RecurrentPpo::blueprint`](crate::ppo::RecurrentPpo::blueprint)): its
    /// [`Learner::memory_plan`] and the plans below all come from it.
    fn blueprint(&self) -> &OnPolicyBlueprint;

    /// Environments its rollouts hold (the learner was built for them).
    fn envs(&self) -> usize {
        self.blueprint().envs
    }

    /// What its rollout buffer allocates.
    ///
    /// # Errors
    /// None in practice (the plan was checked when the learner was built).
    fn rollout_plan(&self) -> Result<MemoryPlan> {
        Ok(self.blueprint().rollout.clone())
    }

    /// Its rollout buffer, refused first if the plan does not fit `budget`.
    ///
    /// # Errors
    /// As [`RolloutBuffer::new`].
    fn rollout_buffer(&self, budget: Option<&MemoryBudget>) -> Result<RolloutBuffer>;

    /// One update on a full rollout collected by `acting` (the collector's copy of the
    /// policy, prepared by [`OnPolicyLearner::begin_rollout`]).
    ///
    /// # Errors
    /// The learner's ([`crate::Error::Diverged`] ...).
    fn update(&mut self, rollout: &mut RolloutBuffer, acting: &Self::Policy)
    -> Result<Self::Stats>;

    /// Copies what acting depends on (weights, normaliser statistics) into `target`;
    /// `target` keeps its own sampling generator.
    ///
    /// # Errors
    /// A target of another architecture.
    fn copy_policy_into(&self, target: &mut Self::Policy) -> Result<()>;

    /// Prepares the collector's copy for the rollout collected next (a recurrent policy
    /// records each chunk's starting state). Nothing by default.
    ///
    /// # Errors
    /// The policy's.
    fn begin_rollout(&self, acting: &mut Self::Policy) -> Result<()> {
        let _ = acting;
        Ok(())
    }

    /// What the collector's copy of the policy holds besides its weights while
    /// collecting (a recurrent policy's state and chunk record).
    fn acting_plan(&self) -> MemoryPlan {
        self.blueprint().acting.clone()
    }
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
