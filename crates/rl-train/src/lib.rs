//! The run layer of `rl`: what turns a learner from `rl-algos` into a training run.
//!
//! - [`trainer`]: [`OnPolicyTrainer`](trainer::OnPolicyTrainer) (PPO, recurrent PPO) and
//!   [`OffPolicyTrainer`](trainer::OffPolicyTrainer) (SAC, discrete SAC, DQN and their
//!   recurrent forms) own the loop: environments, collector (sync or async, or chunks
//!   from remote collectors), buffer, updates, evaluation, checkpoints, callbacks, and
//!   the whole run's memory plan, checked before anything large is allocated.
//! - [`eval`]: [`evaluate`](eval::evaluate), deterministic episodes of a trained policy.
//! - [`agent`]: [`Agent`](agent::Agent), a trained policy loaded from a run directory
//!   (latest or best checkpoint), acting on batches of observations.
//! - [`config`]: experiment files (TOML) into typed configurations, `--set key=value`
//!   overrides, errors that name the key.
//! - [`run`]: what the `rl` command does, as a library: the environment [`Registry`](run::Registry),
//!   and train, resume, plan, evaluate, plot and export over a run directory
//!   (config, metrics, checkpoints, best, result, curve). The `rl` binary and the Python
//!   package both sit on it.
//!
//! ```no_run
//! use rl_train::config::Config;
//! use rl_train::run::{self, Registry, TrainOptions};
//!
//! let text = std::fs::read_to_string("configs/ppo_cartpole.toml")?;
//! let config = Config::from_toml(&text, &[])?;
//! let trained = run::train(&Registry::builtin(), &config, "runs/ppo_cartpole".as_ref(), &TrainOptions::quiet())?;
//! assert!(trained.result.solved);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod agent;
pub mod command;
pub mod config;
pub mod eval;
pub mod run;
pub mod trainer;

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
