//! Discrete SAC on `LargeDiscrete`: 100 000 actions, a 1 000 000-row replay buffer, all of
//! it inside 1 GiB.
//!
//! ```text
//! cargo run --release --example sac_large_actions -- --seed 0
//! cargo run --release --example sac_large_actions -- --store one-hot   # refused: ~400 GB
//! ```
//!
//! Actor and critics are two-tower networks over the task's shared `100 000 x 8` action
//! table (held once), scoring all actions in chunks of 2048, so nothing holds
//! `batch x 100 000` values. Actions are stored as `u32` indices; one-hot stored actions
//! would need about 400 GB for 1 000 000 rows, and the run prints that plan's refusal
//! (`--store one-hot` builds it and exits with the error). Goal: half the optimal
//! expected reward (Monte Carlo estimate) as the mean of the last 1 000 one-step
//! episodes. Output and run flags as `ppo_cartpole` (`--help` lists every flag).
//!
//! `--history lstm|stack|none` runs the partially observed task instead
//! (`PartialLargeDiscrete`: the context revealed a quarter per step over 4 steps, only
//! the last paying): a recurrent discrete SAC (`rl_algos::sequence`) trained on whole
//! episodes sampled as windows from the same 1 000 000-row buffer. No policy without
//! memory can beat the memoryless optimum (about 1.96 against 3.76 with memory); the goal
//! is halfway between the two.

mod common;

use std::num::{NonZeroU64, NonZeroUsize};

use anyhow::bail;
use clap::{ArgAction, Parser};
use rl::algos::{
    AdamConfig,
    sac::{DiscreteSac, SacConfig},
    sequence::{Recurrent, RecurrentConfig},
};
use rl::core::{DType, Env, MemoryBudget, TransitionSchema};
use rl::envs::{LargeDiscrete, PartialLargeDiscrete};
use rl::storage::ram::RamStorage;
use rl::train::trainer::{Goal, OffPolicyConfig};

const BUDGET_BYTES: u64 = 1 << 30;

/// Discrete SAC over LargeDiscrete's 100 000 actions in 1 GiB; one JSON line on stdout.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    run: common::RunFlags<100_000, 10_000>,
    #[command(flatten)]
    off: common::OffPolicyFlags,
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
    /// Discount. Only the last step of an episode pays and no action changes what
    /// follows, so 0 loses nothing and keeps the entropy bonus out of the targets.
    #[arg(long, default_value_t = 0.0)]
    gamma: f32,
    /// Run the partially observed task with this memory (see above).
    #[arg(long, value_enum)]
    history: Option<common::HistoryFlag>,
    /// LSTM units with --history lstm.
    #[arg(long, default_value_t = NonZeroUsize::new(64).expect("64 > 0"))]
    lstm_hidden: NonZeroUsize,
    /// Learning rate of the summarizer with --history.
    #[arg(long, default_value_t = 1e-3)]
    history_lr: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let env = LargeDiscrete::new(0);
    let n = env.actions();
    // The configuration the Pearl seed ran out of memory with: one-hot stored actions.
    let schema = TransitionSchema::new(DType::F32, &[16], DType::F32, &[n as usize])
        .with_next_obs()
        .build()?;
    let budget = MemoryBudget::ram(BUDGET_BYTES);
    match (
        RamStorage::new(schema, 1_000_000, Some(&budget)),
        args.store.as_str(),
    ) {
        (Err(error), "one-hot") => bail!("one-hot stored actions: {error}"),
        (Err(error), _) => eprintln!("one-hot stored actions (not used) would be refused: {error}"),
        (Ok(_), _) => bail!("a one-hot replay of {n} actions unexpectedly fits in 1 GiB"),
    }
    let sac = SacConfig {
        hidden: vec![64, 64],
        batch_size: args.batch.get(),
        adam: AdamConfig {
            lr: args.lr,
            ..SacConfig::sb3().adam
        },
        chunk: args.chunk.get(),
        target_entropy: Some(args.entropy_ratio * (n as f32).ln()),
        gamma: args.gamma,
        ..SacConfig::sb3()
    };
    if let Some(history) = args.history {
        return partial(&args, history, sac);
    }
    let optimal = env.optimal_reward(2_000, 12_345);
    let goal = (optimal.mean / 2.0) as f32;
    eprintln!(
        "optimal expected reward {:.3} +- {:.3}; goal {goal:.3}",
        optimal.mean, optimal.std_error
    );
    let run = goal_run(&args, goal, 1_000);
    let learner =
        DiscreteSac::for_env_with_table(&env, env.action_features().clone(), sac, run.seed)?;
    let config = off_policy_config(&args);
    let resume = args.run.resume.as_ref();
    common::off_policy(
        "sac_large_actions",
        resume,
        |_| LargeDiscrete::new(0),
        learner,
        config,
        run,
    )
}

/// The loop settings: budget, goal over `window` episodes, 1 GiB.
fn goal_run(args: &Args, goal: f32, window: usize) -> rl::train::trainer::RunConfig {
    let goal = Goal::TrainingReturn {
        mean_return: goal,
        window,
    };
    let mut run = args.run.run_config(1, goal, Some(BUDGET_BYTES));
    run.stop_at_goal = !args.budget_only;
    run
}

fn off_policy_config(args: &Args) -> OffPolicyConfig {
    OffPolicyConfig {
        learning_starts: 1_000,
        train_freq: args.train_freq.get(),
        ..args.off.apply(OffPolicyConfig::new())
    }
}

/// The partially observed task with a recurrent discrete SAC.
fn partial(args: &Args, history: common::HistoryFlag, sac: SacConfig) -> anyhow::Result<()> {
    let env = PartialLargeDiscrete::new(0);
    let (with, without) = (
        env.optimal_reward(2_000, 12_345),
        env.memoryless_optimal_reward(2_000, 12_345),
    );
    let goal = ((with.mean + without.mean) / 2.0) as f32;
    eprintln!(
        "expected reward with memory {:.3} +- {:.3}, without {:.3} +- {:.3}; goal {goal:.3}",
        with.mean, with.std_error, without.mean, without.std_error
    );
    let parts = env.parts();
    let memory = RecurrentConfig {
        // Whole episodes: windows of `parts` steps start where episodes start.
        seq_len: parts,
        burn_in: 0,
        adam: AdamConfig {
            lr: args.history_lr,
            ..AdamConfig::default()
        },
        ..RecurrentConfig::new(history.history(args.lstm_hidden.get(), parts))
    };
    let run = goal_run(args, goal, 1_000 / parts);
    let table = env.action_features().clone();
    let learner = Recurrent::new(env.observation_space(), memory, run.seed, |summaries| {
        DiscreteSac::with_table(summaries, env.action_space(), table, sac, run.seed)
    })?;
    let config = off_policy_config(args);
    let resume = args.run.resume.as_ref();
    common::off_policy(
        "sac_large_actions",
        resume,
        |_| PartialLargeDiscrete::new(0),
        learner,
        config,
        run,
    )
}
