//! The `rl` command: a clap command line over [`rl_train::run`], whose items this module
//! re-exports (train, resume, plan, evaluate, plot and export a run directory; the
//! environment [`Registry`]).
//!
//! ```no_run
//! use rl::cli::{Registry, TrainOptions};
//! use rl::config::Config;
//!
//! let text = std::fs::read_to_string("configs/ppo_cartpole.toml")?;
//! let config = Config::from_toml(&text, &[])?;
//! let trained = rl::cli::train(&Registry::builtin(), &config, "runs/ppo_cartpole".as_ref(), &TrainOptions::quiet())?;
//! assert!(trained.result.solved);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use rl_train::command::run_command;
pub use rl_train::run::*;
