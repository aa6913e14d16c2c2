//! SAC on Pendulum-v1: a mean return of at least -200 over the last 10 episodes.
//!
//! ```text
//! cargo run --release --example sac_pendulum -- --seed 0
//! cargo run --release --example sac_pendulum -- --seed 0 --preset sb3
//! ```
//!
//! Prints the memory plan at start (checked against a 1 GiB budget before anything is
//! allocated) and a progress line every 0.1 s on stderr, then one JSON line on stdout:
//! `{"solved", "env_steps", "wall_s", "mean_return", "window", "peak_rss_bytes",
//! "planned_bytes", "env_steps_per_s", "total_env_steps", "total_wall_s", "seed"}`
//! (`env_steps` and `wall_s` at the solve point, or at the end of the budget;
//! `env_steps_per_s` over the whole run). Runs on one thread.
//!
//! Presets:
//! - `--preset sb3`: Stable-Baselines3's SAC defaults (`SacConfig::sb3`): actor and
//!   critics 256-256 ReLU, batch 256, buffer 1 000 000, 100 random steps, learning rate
//!   3e-4, one gradient step per env step, automatic entropy coefficient from 1.0 with
//!   target -1, gamma 0.99, tau 0.005.
//! - `--preset tuned` (the default): the same algorithm with 64-64 networks, learning
//!   rate 1e-3 and 1 000 random steps: each update is ~10x cheaper and Pendulum is
//!   solved in fewer steps.
//!
//! Flags (`--help` lists them with their defaults): `--seed N` (default 0), `--preset sb3|tuned`, `--max-steps N` (default
//! 20 000), `--budget-only true` (spend all steps even after the goal), and for tuning
//! `--hidden N` (both hidden layers), `--lr`, `--batch`, `--learning-starts`,
//! `--gradient-steps`. Checkpoints: `--checkpoint DIR` saves the trainer (weights, Adam
//! moments, entropy coefficient, noise generator: `rl_algos::SacState`) and the replay
//! buffer at the end; `--resume DIR` restores both and continues without a new warm-up.

mod sac_common;

use std::num::NonZeroUsize;

use clap::{ArgAction, Parser};
use rl::algos::{Sac, SacConfig};
use rl::envs::Pendulum;

/// SAC on Pendulum-v1: progress on stderr, one JSON line on stdout.
#[derive(Debug, Parser)]
struct Args {
    /// Seed of the environment, the networks and the noise.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Settings: `tuned` (64-64, lr 1e-3, 1 000 random steps) or `sb3` (SB3's defaults).
    #[arg(long, value_parser = ["tuned", "sb3"], default_value = "tuned")]
    preset: String,
    /// Environment-step budget.
    #[arg(long, default_value_t = 20_000)]
    max_steps: u64,
    /// Spend the whole budget instead of stopping at the goal.
    #[arg(long, action = ArgAction::Set, default_value_t = false)]
    budget_only: bool,
    /// Width of both hidden layers (overrides the preset).
    #[arg(long)]
    hidden: Option<NonZeroUsize>,
    /// Learning rate (overrides the preset).
    #[arg(long)]
    lr: Option<f64>,
    /// Batch size (overrides the preset).
    #[arg(long)]
    batch: Option<NonZeroUsize>,
    /// Random steps before learning (overrides the preset).
    #[arg(long)]
    learning_starts: Option<u64>,
    /// Gradient steps per environment step (overrides the preset).
    #[arg(long)]
    gradient_steps: Option<NonZeroUsize>,
    #[command(flatten)]
    paths: sac_common::CheckpointPaths,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let seed = args.seed;
    let mut config = if args.preset == "sb3" {
        SacConfig::sb3()
    } else {
        tuned()
    };
    if let Some(width) = args.hidden {
        config.hidden = vec![width.get(), width.get()];
    }
    config.lr = args.lr.unwrap_or(config.lr);
    config.batch_size = args.batch.map_or(config.batch_size, NonZeroUsize::get);
    config.learning_starts = args.learning_starts.unwrap_or(config.learning_starts);
    config.gradient_steps = args
        .gradient_steps
        .map_or(config.gradient_steps, NonZeroUsize::get);
    let (max_steps, stop_at_goal, paths) = (args.max_steps, !args.budget_only, args.paths);
    config.seed = seed;
    let env = Pendulum::new(seed.wrapping_mul(1000));
    let sac = Sac::for_env(&env, config)?;
    sac_common::train(
        "sac_pendulum",
        env,
        sac,
        sac_common::Run {
            goal: -200.0,
            window: 10,
            max_steps,
            stop_at_goal,
            budget_bytes: 1 << 30,
            seed,
            paths,
        },
    )
}

/// The default preset: SB3's algorithm with smaller networks, a higher learning rate and
/// a longer random warm-up.
fn tuned() -> SacConfig {
    SacConfig {
        hidden: vec![64, 64],
        lr: 1e-3,
        learning_starts: 1_000,
        ..SacConfig::sb3()
    }
}
