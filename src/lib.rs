//! `rl`: reinforcement learning with memory you can predict before a run starts and that
//! stays flat while it runs.
//!
//! This facade re-exports the workspace's crates, each behind a feature of the same name
//! (all on by default). Depend on a single crate instead when that is all you need.
//!
//! | module | crate | holds |
//! |---|---|---|
//! | [`core`] | `rl-core` | spaces, the `Env` trait, schemas, devices, memory plans, errors |
//! | `envs` | `rl-envs` | CartPole, Pendulum (Gymnasium bit for bit), masked CartPole, a 100k-action task |
//! | `storage` | `rl-storage` | columnar replay and rollout storage in RAM, memmap files and on the GPU |
//! | `actions` | `rl-actions` | index, lazy one-hot, binary and embedding action representations |
//! | `nn` | `rl-nn` | the one network layer: MLPs with runtime sizes, Adam, safetensors checkpoints |
//! | `history` | `rl-history` | history summarizers (identity, frame stacks, LSTM) with constant memory per environment |
//! | `algos` | `rl-algos` | the learners: PPO, SAC (continuous, discrete), DQN, recurrent forms |
//! | `collect` | `rl-collect` | synchronous and asynchronous collectors |
//! | `train` | `rl-train` | the run layer: trainers, evaluation, experiment configs, registry, run directories, [`Agent`] (load a run and act) |
//!
//! With the `cli` feature (on by default), [`config`] (`rl-train`'s) reads experiment
//! files (TOML) into the library's configurations and [`cli`] runs them: train into a
//! run directory (effective config, metrics, checkpoints, result, learning curve),
//! resume, plan, evaluate, plot and export, for the built-in environments and any
//! registered one. The `rl` binary is a thin command line over [`cli`].
//!
//! The `cuda` feature turns on GPU storage (`rl-storage`'s `CudaDevice`, through cudarc
//! loaded dynamically, so it builds without a CUDA toolkit) and is forwarded to
//! `rl-collect`.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use rl_core as core;

#[cfg(feature = "actions")]
#[cfg_attr(docsrs, doc(cfg(feature = "actions")))]
pub use rl_actions as actions;
#[cfg(feature = "algos")]
#[cfg_attr(docsrs, doc(cfg(feature = "algos")))]
pub use rl_algos as algos;
#[cfg(feature = "collect")]
#[cfg_attr(docsrs, doc(cfg(feature = "collect")))]
pub use rl_collect as collect;
#[cfg(feature = "envs")]
#[cfg_attr(docsrs, doc(cfg(feature = "envs")))]
pub use rl_envs as envs;
#[cfg(feature = "history")]
#[cfg_attr(docsrs, doc(cfg(feature = "history")))]
pub use rl_history as history;
#[cfg(feature = "nn")]
#[cfg_attr(docsrs, doc(cfg(feature = "nn")))]
pub use rl_nn as nn;
#[cfg(feature = "storage")]
#[cfg_attr(docsrs, doc(cfg(feature = "storage")))]
pub use rl_storage as storage;
#[cfg(feature = "train")]
#[cfg_attr(docsrs, doc(cfg(feature = "train")))]
pub use rl_train as train;
/// A trained agent loaded from a run directory (`rl_train::agent::Agent`).
#[cfg(feature = "train")]
#[cfg_attr(docsrs, doc(cfg(feature = "train")))]
pub use rl_train::agent::Agent;

#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub mod cli;
#[cfg(feature = "cli")]
#[cfg_attr(docsrs, doc(cfg(feature = "cli")))]
pub use rl_train::config;

/// The README's examples run as doc tests, so they cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
