//! What every training example shares: the run flags (`--seed`, `--threads`,
//! `--max-steps`, `--checkpoint`, `--resume`, `--eval-episodes`, `--eval-every`), the run
//! through a library trainer with a progress line on stderr, and the one JSON line on
//! stdout.

#![allow(dead_code, reason = "each example uses part of it")]

use std::path::PathBuf;

use rl::algos::{Activation, policy::PolicyConfig};
use rl::collect::{RandomAction, ValuePolicy};
use rl::core::{Env, MemoryBudget};
use rl::train::eval::EvalReport;
use rl::train::trainer::{
    CheckpointSchedule, CollectorChoice, EvalSchedule, Goal, OffPolicyConfig, OffPolicyLearner,
    OffPolicyTrainer, OnPolicyLearner, OnPolicyTrainer, ProgressLog, ReplayLocation, RunConfig,
    TrainSummary,
};

/// The run flags of every training example; `MAX_STEPS`, `EVAL_EVERY` and
/// `EVAL_EPISODES` are the example's defaults.
#[derive(Debug, clap::Args)]
pub(crate) struct RunFlags<
    const MAX_STEPS: u64,
    const EVAL_EVERY: u64,
    const EVAL_EPISODES: usize = 0,
> {
    /// Seed of the environments, the networks, the sampling and the replay.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Threads the learner's large matrix products are split across (bit-identical
    /// results for any number).
    #[arg(long, default_value_t = 1)]
    pub(crate) threads: usize,
    /// Env-step budget over the run's life (a resumed run continues towards it).
    #[arg(long, default_value_t = MAX_STEPS)]
    pub(crate) max_steps: u64,
    /// Save the whole run (learner, replay, counters) into this folder at the end.
    #[arg(long)]
    pub(crate) checkpoint: Option<PathBuf>,
    /// Continue the run saved in this folder by --checkpoint.
    #[arg(long)]
    pub(crate) resume: Option<PathBuf>,
    /// Episodes of each deterministic evaluation (0: none); the JSON line's
    /// eval_mean_return is the last one.
    #[arg(long, default_value_t = EVAL_EPISODES)]
    pub(crate) eval_episodes: usize,
    /// Env steps between evaluations.
    #[arg(long, default_value_t = EVAL_EVERY)]
    pub(crate) eval_every: u64,
}

impl<const M: u64, const E: u64, const N: usize> RunFlags<M, E, N> {
    /// The library's loop settings for these flags.
    pub(crate) fn run_config(&self, n_envs: usize, goal: Goal, budget: Option<u64>) -> RunConfig {
        RunConfig {
            seed: self.seed,
            n_envs,
            threads: self.threads,
            goal: Some(goal),
            eval: (self.eval_episodes > 0)
                .then(|| EvalSchedule::new(self.eval_every, self.eval_episodes)),
            checkpoint: self.checkpoint.clone().map(|dir| CheckpointSchedule {
                dir,
                every_steps: None,
                best: None,
                ..CheckpointSchedule::default()
            }),
            budget: budget.map(MemoryBudget::ram),
            ..RunConfig::new(self.max_steps)
        }
    }
}

/// What a recurrent policy remembers (`--history`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum HistoryFlag {
    /// An LSTM of --lstm-hidden units.
    Lstm,
    /// The last --k observations.
    Stack,
    /// The last observation only.
    None,
}

impl HistoryFlag {
    /// The library's summarizer: an LSTM of `hidden` units or a stack of `k`.
    pub(crate) fn history(self, hidden: usize, k: usize) -> rl::algos::policy::History {
        use rl::algos::policy::History;
        match self {
            HistoryFlag::Lstm => History::Lstm { hidden },
            HistoryFlag::Stack => History::Stack { k },
            HistoryFlag::None => History::None,
        }
    }
}

/// Which collector fills the replay buffer.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum Collector {
    /// Environments stepped in the trainer's thread (bit-identical reruns).
    Sync,
    /// Worker threads with copies of the actor, overlapping with learning.
    Async,
}

/// The loop flags of the off-policy examples: collector and replay location.
#[derive(Debug, clap::Args)]
pub(crate) struct OffPolicyFlags {
    /// Which collector fills the replay buffer.
    #[arg(long, value_enum, default_value_t = Collector::Sync)]
    pub(crate) collector: Collector,
    /// Worker threads of --collector async (they must divide the environments).
    #[arg(long, default_value_t = 1)]
    pub(crate) workers: usize,
    /// Steps of a worker's environments per chunk, with --collector async.
    #[arg(long, default_value_t = 64)]
    pub(crate) steps_per_chunk: usize,
    /// Keep the replay buffer in a memory-mapped file in this folder instead of RAM.
    #[arg(long)]
    pub(crate) replay_dir: Option<PathBuf>,
}

impl OffPolicyFlags {
    /// `config` with these flags' collector and replay location.
    pub(crate) fn apply(&self, config: OffPolicyConfig) -> OffPolicyConfig {
        OffPolicyConfig {
            collector: match self.collector {
                Collector::Sync => CollectorChoice::Sync,
                Collector::Async => CollectorChoice::Async {
                    workers: self.workers,
                    steps_per_chunk: self.steps_per_chunk,
                },
            },
            replay_location: match &self.replay_dir {
                Some(dir) => ReplayLocation::Memmap { dir: dir.clone() },
                None => ReplayLocation::Ram,
            },
            ..config
        }
    }
}

/// Trains an off-policy learner (or continues the run saved in `resume`) and reports.
pub(crate) fn off_policy<E, L>(
    name: &str,
    resume: Option<&PathBuf>,
    make_env: impl FnMut(u64) -> E,
    learner: L,
    config: OffPolicyConfig,
    run: RunConfig,
) -> anyhow::Result<()>
where
    E: Env + Send + 'static,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    eprintln!("{name}: seed {}", run.seed);
    let mut trainer = match resume {
        Some(dir) => OffPolicyTrainer::resume(dir, make_env, learner, config, run)?,
        None => OffPolicyTrainer::new(make_env, learner, config, run)?,
    };
    eprintln!("memory plan\n{}", trainer.memory_plan());
    let summary = trainer.train(&mut ProgressLog::every(0.1))?;
    let run = trainer.run_config().clone();
    let eval = final_eval(&run, &summary, |episodes| trainer.evaluate(episodes))?;
    report(&run, &summary, eval)
}

/// Trains `learner` (PPO, or recurrent PPO for a recurrent policy), or continues the run
/// saved in `resume`, and reports.
pub(crate) fn on_policy<E, L>(
    name: &str,
    resume: Option<&PathBuf>,
    make_env: impl FnMut(u64) -> E,
    learner: L,
    run: RunConfig,
) -> anyhow::Result<()>
where
    E: Env,
    E::Act: RandomAction,
    L: OnPolicyLearner<Policy: ValuePolicy<Obs = E::Obs, Act = E::Act>>,
{
    eprintln!("{name}: seed {}", run.seed);
    let mut trainer = match resume {
        Some(dir) => OnPolicyTrainer::resume(dir, make_env, learner, run)?,
        None => OnPolicyTrainer::new(make_env, learner, run)?,
    };
    eprintln!("memory plan\n{}", trainer.memory_plan());
    let summary = trainer.train(&mut ProgressLog::every(0.1))?;
    let run = trainer.run_config().clone();
    let eval = final_eval(&run, &summary, |episodes| trainer.evaluate(episodes))?;
    report(&run, &summary, eval)
}

/// The evaluation the JSON line reports: the one that reached an evaluation goal, or a
/// new one of the policy as it ended (none without --eval-episodes).
fn final_eval(
    run: &RunConfig,
    summary: &TrainSummary,
    evaluate: impl FnOnce(usize) -> rl::algos::Result<EvalReport>,
) -> anyhow::Result<Option<EvalReport>> {
    let Some(schedule) = run.eval else {
        return Ok(None);
    };
    if summary.solved && matches!(run.goal, Some(Goal::EvalReturn { .. })) {
        return Ok(summary.last_eval);
    }
    Ok(Some(evaluate(schedule.episodes)?))
}

/// Prints the outcome on stderr and the JSON line on stdout.
fn report(run: &RunConfig, s: &TrainSummary, eval: Option<EvalReport>) -> anyhow::Result<()> {
    eprintln!(
        "{} after {} env steps, {:.2} s; {} env steps in {:.2} s; planned {:.1} MiB, peak RSS {}",
        if s.solved { "solved" } else { "not solved" },
        s.env_steps,
        s.wall_s,
        s.total_env_steps,
        s.total_wall_s,
        s.planned_bytes as f64 / 1048576.0,
        s.peak_rss_bytes.map_or("n/a".to_owned(), |b| format!(
            "{:.1} MiB",
            b as f64 / 1048576.0
        )),
    );
    println!(
        "{}",
        serde_json::json!({
            "solved": s.solved,
            "env_steps": s.env_steps,
            "wall_s": s.wall_s,
            "mean_return": s.mean_return,
            "window": s.window,
            "peak_rss_bytes": s.peak_rss_bytes,
            "seed": run.seed,
            "planned_bytes": s.planned_bytes,
            "env_steps_per_s": s.total_env_steps as f64 / s.total_wall_s,
            "total_env_steps": s.total_env_steps,
            "total_wall_s": s.total_wall_s,
            "eval_mean_return": eval.map(|e| e.mean_return),
        })
    );
    Ok(())
}

/// The network flags of the PPO examples.
#[derive(Debug, clap::Args)]
pub(crate) struct PolicyFlags {
    /// Hidden layer widths of the actor and of the critic.
    #[arg(long, value_delimiter = ',', default_value = "64,64")]
    pub(crate) hidden: Vec<std::num::NonZeroUsize>,
    /// The nonlinearity between layers.
    #[arg(long, value_enum, default_value_t = ActivationFlag::Relu)]
    pub(crate) activation: ActivationFlag,
}

/// `--activation` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum ActivationFlag {
    Relu,
    Tanh,
}

impl PolicyFlags {
    /// The policy settings these flags give.
    pub(crate) fn policy_config(&self) -> PolicyConfig {
        PolicyConfig {
            hidden: self.hidden.iter().map(|w| w.get()).collect(),
            activation: match self.activation {
                ActivationFlag::Relu => Activation::Relu,
                ActivationFlag::Tanh => Activation::Tanh,
            },
            ..PolicyConfig::new()
        }
    }
}
