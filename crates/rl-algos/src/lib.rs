//! Learning algorithms with bounded memory: PPO on dfdx, SAC on dense networks of its
//! own.
//!
//! **Status:** PPO and SAC (continuous and discrete) are complete; the `ppo_cartpole`,
//! `ppo_pendulum`, `sac_pendulum` and `sac_large_actions` examples train them end to end.
//!
//! - [`Adam`]: Adam with state it owns, numerically identical to dfdx's, whose moments and
//!   step counter save and load as an [`AdamState`] (dfdx 0.13 keeps its own private), so
//!   checkpoints resume exactly; [`AdamConfig`] holds the PPO defaults. [`FlatAdam`] is
//!   the same arithmetic over one flat parameter vector.
//! - [`clip_grad_norm`]: global L2 gradient-norm clipping over a model's trainable
//!   tensors (dfdx has none).
//! - Policies: [`CategoricalPolicy`] (discrete) and [`GaussianPolicy`] (continuous,
//!   state-independent log-std), each an actor MLP and a separate critic MLP with layer
//!   sizes as const generics; they implement `rl-collect`'s `Policy` and `ValuePolicy`
//!   (so collectors drive them) and [`ActorCritic`]: log-probs and values of stored
//!   actions in minibatches of a chosen size, and a traced pass for the loss.
//! - [`Ppo`]: the PPO update over a rollout buffer (clipped surrogate, optional value
//!   clipping, entropy bonus, per-minibatch advantage normalisation, grad-norm clipping,
//!   target-KL early stop, linear learning-rate and clip-range schedules; old
//!   log-probabilities recorded during collection or recomputed in minibatches),
//!   configured by a validated [`PpoConfig`], reporting [`UpdateStats`], with exact
//!   optional running observation normalisation ([`ObsNormalizer`]) and reward
//!   normalisation ([`RewardNormalizer`], [`Ppo::normalize_rewards`]) and exact resumable
//!   checkpoints ([`Ppo::checkpoint`], [`Ppo::restore`], [`PpoState`]).
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
//!   `Policy` and a [`SacTrainer`], report [`SacStats`], and checkpoint everything
//!   ([`SacState`], [`LearnedTable`]) into the same [`Checkpoint`] format as PPO.
//! - [`DenseMlp`] and [`Workspace`]: ReLU networks on flat parameters with hand-written
//!   backward passes on the `gemm` crate (dfdx's own matrix product), every activation
//!   preallocated. SAC uses them because dfdx's per-operation overhead (about 1 ms of a
//!   2.46 ms `4-256-256-1` forward and backward at batch 256 here, against 1.4 ms of
//!   matrix products) would have put SAC at Stable-Baselines3's speed.
//! - [`Error`], [`Result`]: the crate's error type.

mod checkpoint;
mod error;
mod nn;
mod optim;
mod policy;
mod ppo;
mod sac;

pub use checkpoint::{Checkpoint, NetWeights};
pub use error::{Error, Result};
pub use nn::{DenseMlp, Workspace};
pub use optim::{Adam, AdamConfig, AdamState, FlatAdam, clip_grad_norm};
pub use policy::{
    ActorCritic, CategoricalPolicy, GaussianPolicy, Mode, ObsNormalizer, PolicyArchitecture,
    PolicyConfig, PolicyGradients, PolicyInit, PolicyKind, PolicyNetworks, PolicyWorkspace,
};
pub use ppo::{
    CHECKPOINT_KIND as PPO_CHECKPOINT_KIND, Ppo, PpoConfig, PpoState, RewardNormalizer,
    UpdateStats, clipped_surrogate, value_loss,
};
pub use sac::{
    ActionMaskFn, Core as SacCore, DiscreteSac, EntropyCoef, LearnedTable, Sac, SacConfig,
    SacState, SacStats, SacTrainer,
};

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
