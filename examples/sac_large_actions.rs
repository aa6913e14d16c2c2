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
//! Flags: `--seed N` (default 0), `--max-steps N` (default 100 000), `--budget-only true`
//! (spend all steps), `--store index|one-hot`, and for tuning `--batch`, `--lr`,
//! `--train-freq`, `--chunk`, `--entropy-ratio` (target entropy as a fraction of
//! `ln n`, default 0.6), and `--checkpoint DIR` / `--resume DIR` as in `sac_pendulum`.

mod sac_common;

use anyhow::{Context, bail};
use rl::algos::{DiscreteSac, SacConfig};
use rl::core::{Column, DType, MemoryBudget, Schema};
use rl::envs::LargeDiscrete;
use rl::storage::RamStorage;

const BUDGET_BYTES: u64 = 1 << 30;

fn main() -> anyhow::Result<()> {
    let mut seed = 0u64;
    let mut max_steps = 100_000u64;
    let mut stop_at_goal = true;
    let mut one_hot = false;
    let mut entropy_ratio = 0.6f32;
    let mut config = SacConfig {
        hidden: vec![64, 64],
        batch_size: 64,
        lr: 1e-3,
        learning_starts: 1_000,
        train_freq: 2,
        chunk: 2048,
        ..SacConfig::sb3()
    };
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
            "--store" => {
                one_hot = match value.as_str() {
                    "index" => false,
                    "one-hot" => true,
                    _ => bail!("--store {value}: use index or one-hot"),
                }
            }
            "--batch" => config.batch_size = value.parse().with_context(bad)?,
            "--lr" => config.lr = value.parse().with_context(bad)?,
            "--train-freq" => config.train_freq = value.parse().with_context(bad)?,
            "--chunk" => config.chunk = value.parse().with_context(bad)?,
            "--entropy-ratio" => entropy_ratio = value.parse().with_context(bad)?,
            _ => bail!(
                "unknown flag {flag}: use --seed, --max-steps, --budget-only, --store, --batch, --lr, --train-freq, --chunk, --entropy-ratio, --checkpoint or --resume"
            ),
        }
    }
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
    let schema = Schema::new([
        Column::new("obs", DType::F32, &[16]),
        Column::new("action", DType::F32, &[n]),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
        Column::new("next_obs", DType::F32, &[16]),
    ])?;
    Ok(RamStorage::with_budget(
        schema,
        capacity,
        &MemoryBudget::ram(BUDGET_BYTES),
    )?)
}
