//! Learning algorithms with bounded memory, on dfdx's CPU backend.
//!
//! **Status:** PPO is complete (see below and the `ppo_cartpole` / `ppo_pendulum`
//! examples). SAC, continuous (tanh-squashed Gaussian, twin critics, automatic entropy
//! tuning) and discrete (expectations over the full policy distribution, in chunks for
//! huge `n`), arrives with its issue.
//!
//! Available now:
//!
//! - [`Adam`]: Adam with state it owns, numerically identical to dfdx's, whose moments and
//!   step counter save and load as an [`AdamState`] (dfdx 0.13 keeps its own private), so
//!   checkpoints resume exactly; [`AdamConfig`] holds the PPO defaults.
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
//!   checkpoints ([`Ppo::checkpoint`], [`Ppo::restore`], [`PpoState`]). The
//!   `ppo_cartpole` and `ppo_pendulum` examples train it end to end.
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
    Activation, ActorCritic, CategoricalNet, CategoricalPolicy, Evaluation, GaussianNet,
    GaussianPolicy, Mlp, Mode, ObsNormalizer, PolicyConfig, Relu, Tanh, TracedRows,
};
pub use ppo::{Ppo, PpoConfig, PpoState, RewardNormalizer, UpdateStats, clipped_surrogate};
pub use sac::{
    Core as SacCore, DiscreteSac, EntropyCoef, LearnedTable, Sac, SacConfig, SacState, SacStats,
    SacTrainer,
};

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
