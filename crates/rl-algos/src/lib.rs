//! Learning algorithms with bounded memory, every network on `rl-nn`: PPO, SAC
//! (continuous and discrete), DQN.
//!
//! **Status:** PPO and SAC (continuous and discrete) are complete; the `ppo_cartpole`,
//! `ppo_pendulum`, `sac_pendulum` and `sac_large_actions` examples train them end to end.
//!
//! - Policies: [`CategoricalPolicy`] (discrete) and [`GaussianPolicy`] (continuous,
//!   state-independent log-std), each an actor MLP and a separate critic MLP whose sizes,
//!   activation and initialisation come from a [`PolicyConfig`] at run time. They
//!   implement `rl-collect`'s `Policy` and `ValuePolicy` (so collectors drive them),
//!   [`PolicyNetworks`] (their named networks for optimisers, checkpoints and weight
//!   files) and [`ActorCritic`] (what PPO needs: log-probs and values of stored actions
//!   in minibatches through a [`PolicyWorkspace`], and a training pass with its backward
//!   pass into [`PolicyGradients`]); no pass allocates.
//! - [`Ppo`]: the PPO update over a rollout buffer (advantages by GAE computed once per
//!   update into [`Advantages`], clipped surrogate, optional value
//!   clipping, entropy bonus, per-minibatch advantage normalisation, grad-norm clipping,
//!   target-KL early stop, linear learning-rate and clip-range schedules; old
//!   log-probabilities recorded during collection or recomputed in minibatches),
//!   configured by a validated [`PpoConfig`], reporting [`UpdateStats`], with exact
//!   optional running observation normalisation ([`ObsNormalizer`]) and reward
//!   normalisation ([`RewardNormalizer`], applied by [`Ppo::update`]) and exact resumable
//!   checkpoints ([`Ppo::checkpoint`], [`Ppo::restore`], [`PpoState`]). Its losses are
//!   loss-and-gradient functions: [`clipped_surrogate`], [`value_loss`].
//! - [`Sac`]: soft actor-critic for box actions with Stable-Baselines3's semantics
//!   (tanh-squashed Gaussian actor with the log-prob correction, twin critics with polyak
//!   targets, automatic entropy coefficient towards `-dim(A)`, truncation bootstraps),
//!   configured by [`SacConfig`] ([`SacConfig::sb3`] holds SB3's defaults).
//! - [`DiscreteSac`]: Christodoulou's discrete SAC with exact expectations over the whole
//!   policy, computed in chunks by `rl-actions` so that 100 000 actions cost
//!   `batch x chunk` floats: two-tower networks scored against a fixed or learned action
//!   table ([`DiscreteSac::with_table`], [`DiscreteSac::with_learnable_table`]), or one
//!   output per action ([`DiscreteSac::with_index`]), optionally with per-state action
//!   masks ([`DiscreteSac::with_action_masks`]). Both trainers are the collector's
//!   `Policy` and a [`SacTrainer`], and report [`SacStats`].
//! - [`Dqn`]: deep Q-learning with Stable-Baselines3's semantics (Huber loss on the TD
//!   error, gradient-norm clipping, epsilon-greedy exploration on a linear
//!   [`EpsilonSchedule`], truncation bootstraps) plus double Q-learning (on by default),
//!   hard or polyak target updates ([`TargetUpdate`]), importance-weighted losses and
//!   new priorities for prioritized replay, configured by [`DqnConfig`]
//!   ([`DqnConfig::rl_zoo_cartpole`] holds rl-zoo's tuned CartPole settings), reporting
//!   [`DqnStats`].
//! - Checkpoints: every trainer writes the one layout of `rl-nn` ([`Checkpoint`]: named
//!   networks with their weights and Adam states, plus the trainer's typed state, in a
//!   safetensors file), of kind [`PPO_CHECKPOINT_KIND`], [`SAC_CHECKPOINT_KIND`],
//!   [`DISCRETE_SAC_CHECKPOINT_KIND`] or [`DQN_CHECKPOINT_KIND`]; architectures are typed
//!   values ([`PolicyArchitecture`], [`SacArchitecture`], [`DqnArchitecture`]).
//! - Evaluation: [`evaluate`] runs whole episodes with a policy acting deterministically
//!   and returns an [`EvalReport`] (mean, std, min, max of returns and lengths);
//!   [`Predict::predict`] gives the most likely action for observations. Both work on
//!   every trained policy, fresh or restored from a checkpoint.
//! - [`Error`], [`Result`]: the crate's error type.

mod dqn;
mod error;
mod eval;
mod policy;
mod ppo;
mod sac;
pub mod trainer;

pub use dqn::{
    CHECKPOINT_KIND as DQN_CHECKPOINT_KIND, Dqn, DqnActor, DqnArchitecture, DqnConfig, DqnState,
    DqnStats, EpsilonSchedule, TargetUpdate,
};
pub use error::{Error, Result};
pub use eval::{EvalConfig, EvalReport, Predict, evaluate};
pub use policy::{
    ActorCritic, CategoricalPolicy, GaussianPolicy, Mode, ObsNormalizer, PolicyArchitecture,
    PolicyConfig, PolicyGradients, PolicyInit, PolicyKind, PolicyNetworks, PolicyWorkspace,
};
pub use ppo::{
    Advantages, CHECKPOINT_KIND as PPO_CHECKPOINT_KIND, ObsNormalization, Ppo, PpoConfig, PpoState,
    RewardNormalization, RewardNormalizer, RewardTransform, UpdateStats, clipped_surrogate,
    value_loss,
};
/// The network layer's types that appear in this crate's signatures.
pub use rl_nn::{Activation, AdamConfig, Checkpoint};
pub use sac::{
    ActionMaskFn, DISCRETE_SAC_CHECKPOINT_KIND, DiscreteSac, DiscreteSacActor, EntropyCoef,
    SAC_CHECKPOINT_KIND, Sac, SacActor, SacArchitecture, SacConfig, SacState, SacStats, SacTrainer,
};
pub use trainer::{OffPolicyLearner, OffPolicyTrainer, OnPolicyTrainer};

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
