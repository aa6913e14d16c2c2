//! SAC on Pendulum-v1: a mean return of at least -200 over the last 10 episodes.
//!
//! ```text
//! cargo run --release --example sac_pendulum -- --seed 0
//! cargo run --release --example sac_pendulum -- --seed 0 --preset sb3
//! ```
//!
//! The library's `OffPolicyTrainer` owns the loop (memory plan checked against 1 GiB
//! before the replay buffer is allocated); output and run flags as `ppo_cartpole`
//! (`--help` lists every flag with its default). Presets:
//! - `--preset sb3`: Stable-Baselines3's SAC defaults (`SacConfig::sb3` and
//!   `OffPolicyConfig::new`): 256-256 ReLU, batch 256, buffer 1 000 000, 100 random
//!   steps, learning rate 3e-4, one gradient step per env step, automatic entropy
//!   coefficient from 1.0 towards -1, gamma 0.99, tau 0.005.
//! - `--preset tuned` (default): the same with 64-64 networks, learning rate 1e-3 and
//!   1 000 random steps: each update is ~10x cheaper.

mod common;

use std::num::NonZeroUsize;

use clap::{ArgAction, Parser, ValueEnum};
use rl::algos::sac::{Sac, SacConfig};
use rl::envs::Pendulum;
use rl::train::trainer::{Goal, OffPolicyConfig};

/// SAC on Pendulum-v1 (Stable-Baselines3's defaults or a tuned preset) on the off-policy
/// trainer; one JSON line on stdout.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    run: common::RunFlags<20_000, 5_000>,
    #[command(flatten)]
    off: common::OffPolicyFlags,
    /// Settings: `tuned` (64-64, lr 1e-3, 1 000 random steps) or `sb3` (SB3's defaults).
    #[arg(long, value_enum, default_value_t = Preset::Tuned)]
    preset: Preset,
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
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Preset {
    Tuned,
    Sb3,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let goal = Goal::TrainingReturn {
        mean_return: -200.0,
        window: 10,
    };
    let mut run = args.run.run_config(1, goal, Some(1 << 30));
    run.stop_at_goal = !args.budget_only;
    let mut config = args.off.apply(OffPolicyConfig::new());
    let mut sac = SacConfig::sb3();
    if let Preset::Tuned = args.preset {
        (sac.hidden, sac.adam.lr, config.learning_starts) = (vec![64, 64], 1e-3, 1_000);
    }
    if let Some(width) = args.hidden {
        sac.hidden = vec![width.get(), width.get()];
    }
    sac.adam.lr = args.lr.unwrap_or(sac.adam.lr);
    sac.batch_size = args.batch.map_or(sac.batch_size, NonZeroUsize::get);
    config.learning_starts = args.learning_starts.unwrap_or(config.learning_starts);
    config.gradient_steps = args.gradient_steps.map_or(1, NonZeroUsize::get);
    let learner = Sac::for_env(&Pendulum::new(0), sac, run.seed)?;
    let resume = args.run.resume.as_ref();
    common::off_policy("sac_pendulum", resume, Pendulum::new, learner, config, run)
}
