//! Discrete SAC on `LargeDiscrete`: 100 000 actions, a 1 000 000-row replay buffer, all of
//! it inside 1 GiB.
//!
//! ```text
//! cargo run --release --example sac_large_actions -- --seed 0
//! cargo run --release --example sac_large_actions -- --store one-hot   # refused: ~400 GB
//! ```
//!
//! The actor and both critics are two-tower networks over the environment's shared
//! `100 000 x 8` action-feature table (`LargeDiscrete::action_features`, held once):
//! each maps the 16-float context to an 8-vector, and scores all actions against the
//! table in chunks of 2048, so nothing ever holds `batch x 100 000` values. Actions are
//! stored as `u32` indices (4 bytes a row); the same buffer with one-hot stored actions
//! would need `100 000 x 4` bytes a row, about 400 GB for 1 000 000 rows: the run prints
//! that plan's refusal by the budget check (and `--store one-hot` tries to build it and
//! exits with the error).
//!
//! Goal: half of the task's optimal expected reward (estimated by Monte Carlo at start;
//! a random policy earns 0) as the mean reward of the last 1 000 episodes (one-step
//! episodes, so a window of 10 would be mostly noise). Prints the memory plan, a
//! progress line every 0.1 s on stderr and one JSON line on stdout, as `sac_pendulum`.
//!
//! Flags (`--help` lists them with their defaults): `--seed N` (default 0), `--max-steps N` (default 100 000), `--budget-only true`
//! (spend all steps), `--store index|one-hot`, and for tuning `--batch`, `--lr`,
//! `--train-freq`, `--chunk`, `--entropy-ratio` (target entropy as a fraction of
//! `ln n`, default 0.6), and `--checkpoint DIR` / `--resume DIR` as in `sac_pendulum`.

mod sac_common;

use std::num::{NonZeroU64, NonZeroUsize};

use anyhow::bail;
use clap::{ArgAction, Parser};
use rl::algos::{DiscreteSac, SacConfig};
use rl::core::{DType, MemoryBudget, TransitionSchema};
use rl::envs::LargeDiscrete;
use rl::storage::RamStorage;

const BUDGET_BYTES: u64 = 1 << 30;

/// Discrete SAC over 100 000 actions: progress on stderr, one JSON line on stdout.
#[derive(Debug, Parser)]
struct Args {
    /// Seed of the networks, the noise and the contexts drawn.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Environment-step budget.
    #[arg(long, default_value_t = 100_000)]
    max_steps: u64,
    /// Spend the whole budget instead of stopping at the goal.
    #[arg(long, action = ArgAction::Set, default_value_t = false)]
    budget_only: bool,
    /// How actions are stored: `index` (u32) or `one-hot` (refused by the 1 GiB budget).
    #[arg(long, value_parser = ["index", "one-hot"], default_value = "index")]
    store: String,
    /// Batch size.
    #[arg(long, default_value_t = NonZeroUsize::new(64).expect("64 > 0"))]
    batch: NonZeroUsize,
    /// Learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Environment steps per gradient step.
    #[arg(long, default_value_t = NonZeroU64::new(2).expect("2 > 0"))]
    train_freq: NonZeroU64,
    /// Actions scored at a time.
    #[arg(long, default_value_t = NonZeroUsize::new(2048).expect("2048 > 0"))]
    chunk: NonZeroUsize,
    /// Target entropy as a fraction of the maximum `ln n`.
    #[arg(long, default_value_t = 0.6)]
    entropy_ratio: f32,
    #[command(flatten)]
    paths: sac_common::CheckpointPaths,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (seed, max_steps, stop_at_goal) = (args.seed, args.max_steps, !args.budget_only);
    let one_hot = args.store == "one-hot";
    let entropy_ratio = args.entropy_ratio;
    let paths = args.paths;
    let mut config = SacConfig {
        hidden: vec![64, 64],
        batch_size: args.batch.get(),
        lr: args.lr,
        learning_starts: 1_000,
        train_freq: args.train_freq.get(),
        chunk: args.chunk.get(),
        ..SacConfig::sb3()
    };
    let env = LargeDiscrete::new(0);
    let n = env.actions();

    // The configuration the Pearl seed ran out of memory with: one-hot stored actions.
    let refusal = one_hot_replay(n as usize, config.buffer_size).err();
    match (&refusal, one_hot) {
        (Some(error), true) => bail!("one-hot stored actions: {error}"),
        (Some(error), false) => {
            eprintln!("one-hot stored actions (not used) would be refused: {error}")
        }
        (None, _) => bail!("a one-hot replay of {n} actions unexpectedly fits in 1 GiB"),
    }

    config.seed = seed;
    config.target_entropy = Some(entropy_ratio * (n as f32).ln());
    let optimal = env.optimal_reward(2_000, 12_345);
    eprintln!(
        "optimal expected reward {:.3} +- {:.3}; goal {:.3}",
        optimal.mean,
        optimal.std_error,
        optimal.mean / 2.0
    );
    let sac = DiscreteSac::for_env_with_table(&env, env.action_features().clone(), config)?;
    sac_common::train(
        "sac_large_actions",
        env,
        sac,
        sac_common::Run {
            goal: (optimal.mean / 2.0) as f32,
            window: 1_000,
            max_steps,
            stop_at_goal,
            budget_bytes: BUDGET_BYTES,
            seed,
            paths,
        },
    )
}

/// Tries to build the replay buffer with actions stored one-hot (`n` f32 per row).
fn one_hot_replay(n: usize, capacity: usize) -> anyhow::Result<RamStorage> {
    let schema = TransitionSchema::new(DType::F32, &[16], DType::F32, &[n])
        .with_next_obs()
        .build()?;
    Ok(RamStorage::with_budget(
        schema,
        capacity,
        &MemoryBudget::ram(BUDGET_BYTES),
    )?)
}
