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
//! Flags: `--seed N` (default 0), `--preset sb3|tuned`, `--max-steps N` (default
//! 20 000), `--budget-only true` (spend all steps even after the goal), and for tuning
//! `--hidden N` (both hidden layers), `--lr`, `--batch`, `--learning-starts`,
//! `--gradient-steps`. Checkpoints: `--checkpoint DIR` saves the trainer (weights, Adam
//! moments, entropy coefficient, noise generator: `rl_algos::SacState`) and the replay
//! buffer at the end; `--resume DIR` restores both and continues without a new warm-up.

mod sac_common;

use anyhow::{Context, bail};
use rl::algos::{Sac, SacConfig};
use rl::envs::Pendulum;

fn main() -> anyhow::Result<()> {
    let mut seed = 0u64;
    let mut max_steps = 20_000u64;
    let mut stop_at_goal = true;
    let mut config = tuned();
    let mut paths = sac_common::CheckpointPaths::default();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let bad = || format!("{flag} {value}: not a valid value");
        if paths.parse(&flag, &value) {
            continue;
        }
        match flag.as_str() {
            "--seed" => seed = value.parse().with_context(bad)?,
            "--max-steps" => max_steps = value.parse().with_context(bad)?,
            "--budget-only" => stop_at_goal = !value.parse::<bool>().with_context(bad)?,
            "--preset" => {
                config = match value.as_str() {
                    "sb3" => SacConfig::sb3(),
                    "tuned" => tuned(),
                    _ => bail!("--preset {value}: use sb3 or tuned"),
                }
            }
            "--hidden" => {
                let width: usize = value.parse().with_context(bad)?;
                config.hidden = vec![width, width];
            }
            "--lr" => config.lr = value.parse().with_context(bad)?,
            "--batch" => config.batch_size = value.parse().with_context(bad)?,
            "--learning-starts" => config.learning_starts = value.parse().with_context(bad)?,
            "--gradient-steps" => config.gradient_steps = value.parse().with_context(bad)?,
            _ => bail!(
                "unknown flag {flag}: use --seed, --preset, --max-steps, --budget-only, --hidden, --lr, --batch, --learning-starts, --gradient-steps, --checkpoint or --resume"
            ),
        }
    }
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
