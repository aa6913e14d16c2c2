//! Discrete SAC on `LargeDiscrete`: 100 000 actions scored in chunks over a shared
//! `100 000 x 8` table, `u32` actions in a 1 000 000-row replay, all inside 1 GiB (the
//! one-hot plan, ~400 GB, is shown refused). Goal: half the optimal expected reward.
//! `--history lstm|stack|none` runs `PartialLargeDiscrete` (the context revealed a quarter
//! per step) with a recurrent discrete SAC (`rl_algos::sequence`) on replayed episodes;
//! the goal is halfway between the memoryless optimum (about 1.96) and the optimum (3.76).

mod common;

use std::num::NonZeroUsize;

use anyhow::bail;
use clap::{ArgAction, Parser};
use rl::algos::sac::{DiscreteSac, SacConfig};
use rl::algos::sequence::{Recurrent, RecurrentConfig};
use rl::core::{DType, Env, MemoryBudget, TransitionSchema};
use rl::envs::{LargeDiscrete, PartialLargeDiscrete};
use rl::storage::ram::RamStorage;
use rl::train::trainer::{Goal, OffPolicyConfig, RunConfig};

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
    /// Batch size.
    #[arg(long, default_value_t = NonZeroUsize::new(64).expect("64 > 0"))]
    batch: NonZeroUsize,
    /// Learning rate (the summarizer's too, with --history).
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Run the partially observed task with this memory (an LSTM of 64 units, a stack).
    #[arg(long, value_enum)]
    history: Option<common::HistoryFlag>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let n = LargeDiscrete::new(0).actions();
    // The configuration the Pearl seed ran out of memory with: one-hot stored actions.
    let one_hot = TransitionSchema::new(DType::F32, &[16], DType::F32, &[n as usize])
        .with_next_obs()
        .build()?;
    match RamStorage::new(one_hot, 1_000_000, Some(&MemoryBudget::ram(BUDGET_BYTES))) {
        Err(error) => eprintln!("one-hot stored actions (not used) would be refused: {error}"),
        Ok(_) => bail!("a one-hot replay of {n} actions unexpectedly fits in 1 GiB"),
    }
    let sac = SacConfig {
        hidden: vec![64, 64],
        batch_size: args.batch.get(),
        adam: rl::algos::AdamConfig {
            lr: args.lr,
            ..SacConfig::sb3().adam
        },
        chunk: 2048,
        // gamma 0: only the last step pays and no action changes what follows.
        target_entropy: Some(0.6 * (n as f32).ln()),
        gamma: 0.0,
        ..SacConfig::sb3()
    };
    let off = OffPolicyConfig {
        learning_starts: 1_000,
        train_freq: 2,
        ..args.off.apply(OffPolicyConfig::new())
    };
    let (name, resume) = ("sac_large_actions", args.run.resume.as_ref());
    let Some(history) = args.history else {
        let env = LargeDiscrete::new(0);
        let optimal = env.optimal_reward(2_000, 12_345);
        let run = goal_run(&args, (optimal.mean / 2.0) as f32, 1_000);
        let learner =
            DiscreteSac::for_env_with_table(&env, env.action_features().clone(), sac, run.seed)?;
        return common::off_policy(name, resume, |_| LargeDiscrete::new(0), learner, off, run);
    };
    let env = PartialLargeDiscrete::new(0);
    let with = env.optimal_reward(2_000, 12_345).mean;
    let without = env.memoryless_optimal_reward(2_000, 12_345).mean;
    eprintln!("expected reward with memory {with:.3}, without {without:.3}");
    let parts = env.parts();
    let memory = RecurrentConfig {
        seq_len: parts, // whole episodes: windows start where episodes start
        burn_in: 0,
        adam: rl::algos::AdamConfig {
            lr: args.lr,
            ..Default::default()
        },
        ..RecurrentConfig::new(history.history(64, parts))
    };
    let run = goal_run(&args, ((with + without) / 2.0) as f32, 1_000 / parts);
    let (table, seed) = (env.action_features().clone(), run.seed);
    let learner = Recurrent::new(env.observation_space(), memory, seed, |summaries| {
        DiscreteSac::with_table(summaries, env.action_space(), table, sac, seed)
    })?;
    common::off_policy(
        name,
        resume,
        |_| PartialLargeDiscrete::new(0),
        learner,
        off,
        run,
    )
}

/// The loop settings: budget, the goal over the last `window` episodes, 1 GiB.
fn goal_run(args: &Args, mean_return: f32, window: usize) -> RunConfig {
    eprintln!("goal {mean_return:.3} over the last {window} episodes");
    let goal = Goal::TrainingReturn {
        mean_return,
        window,
    };
    let mut run = args.run.run_config(1, goal, Some(BUDGET_BYTES));
    run.stop_at_goal = !args.budget_only;
    run
}
