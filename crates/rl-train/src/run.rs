//! What the `rl` command does, as a library: train a [`Config`] into a run directory,
//! resume it, plan it, evaluate, plot and export what it saved, on the built-in
//! environments or any registered with a [`Registry`].
//!
//! A run directory holds:
//!
//! | path | what |
//! |---|---|
//! | `config.toml` | the effective config: every value in force, defaults written out |
//! | `metrics.jsonl` | one JSON object per line, at most every `log.metrics_every_steps` env steps, at every evaluation and at the end ([`METRICS_KEYS`]) |
//! | `checkpoint/` | the latest save of the run (`learner.safetensors`, `run.json`, `replay/` for off-policy runs): what `rl resume` continues from |
//! | `best/` | the learner at its best scheduled evaluation (with `run.eval`) |
//! | `result.json` | the outcome, the JSON line `rl train` prints |
//! | `changes.jsonl` | the settings `rl resume --set` changed: one line per resume, old and new values |
//! | `tb/` | the metrics lines as TensorBoard event files, SB3's tags where SB3 has one (`log.tensorboard`, on by default; `tensorboard --logdir runs/`) |
//! | `episodes.csv` | one row per finished episode, training and evaluation: `r,l,t,env_steps,kind` (SB3's `monitor.csv` columns first) |
//! | `metrics.discarded.jsonl` | metrics lines written after the last checkpoint of a run that was killed, moved there on resume |
//! | `episodes.discarded.csv` | rows of `episodes.csv` past the last checkpoint of a run that was killed, moved there on resume |
//! | `curve.png` | the learning curve |
//!
//! ```no_run
//! use rl_train::run::{self, Registry, TrainOptions};
//! use rl_train::config::Config;
//!
//! let text = std::fs::read_to_string("configs/ppo_cartpole.toml")?;
//! let config = Config::from_toml(&text, &[])?;
//! let trained = run::train(&Registry::builtin(), &config, "runs/ppo_cartpole".as_ref(), &TrainOptions::quiet())?;
//! assert!(trained.result.solved);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod episodes;
mod export;
mod job;
#[cfg(test)]
mod logs_tests;
mod monitor;
mod plot;
mod registry;
mod rundir;
mod tensorboard;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::eval::EvalReport;
use crate::trainer::{ChunkActor, ChunkConfig};
use rl_core::{Bytes, MemoryBudget, MemoryPlan, SystemMemory};
use serde::Serialize;

use crate::config::{Config, ConfigError};

pub use episodes::{DISCARDED_EPISODES_FILE, EPISODES_FILE};
pub use export::{Exported, export};
pub use monitor::METRICS_KEYS;
pub use plot::{PlotOptions, XAxis, plot, plot_with};
pub use registry::{ActionSpace, EnvInfo, Registry};
pub use rundir::{
    BEST_DIR, CHANGES_FILE, CHECKPOINT_DIR, CONFIG_FILE, CURVE_FILE, DISCARDED_METRICS_FILE,
    METRICS_FILE, RESULT_FILE, RunResult,
};
pub use tensorboard::TENSORBOARD_DIR;

use job::{Job, Outcome};

/// What went wrong, and which exit code the command gives it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The config (or a flag) is unusable: a bad key or value, an unknown environment,
    /// an algorithm the environment's actions do not fit. Nothing ran.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// A flag or path given on the command line is unusable (an `--out` that cannot be
    /// written, a run directory without a config, a checkpoint of another algorithm).
    /// Nothing ran.
    #[error("{0}")]
    Usage(String),
    /// The library refused or failed (a plan over the memory budget, a diverged update,
    /// an environment error ...).
    #[error("{0}")]
    Algos(#[from] rl_algos::Error),
    /// Reading or writing a file failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done (`"writing"` ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Drawing the learning curve failed.
    #[error("plot: {0}")]
    Plot(String),
    /// The network layer refused a file (a checkpoint of another format or version).
    #[error("{0}")]
    Nn(#[from] rl_nn::Error),
    /// An argument of a loaded [`Agent`](crate::agent::Agent) is unusable (observations
    /// that are not whole rows, an action buffer of another length or type, a state of
    /// another agent): the message says what to give. Nothing was acted on.
    #[error("{what} {message}")]
    Input {
        /// What was refused (`"observations"`, `"actions"`, `"state"`, `"agent"`).
        what: &'static str,
        /// What was wrong with it and what to give instead.
        message: String,
    },
}

impl Error {
    /// The exit code of the `rl` command for this error: 2 for usage and config errors
    /// (nothing ran), 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(_) | Error::Usage(_) | Error::Input { .. } => 2,
            _ => 1,
        }
    }

    pub(crate) fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            action,
            path: path.to_owned(),
            source,
        }
    }
}

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a training run reports while it runs.
#[derive(Clone, Debug, Default)]
pub struct TrainOptions {
    /// No memory plan and no progress on stderr (the result line is still printed by
    /// the command).
    pub quiet: bool,
    /// Set (by a Ctrl-C handler, say) to end the run cleanly: the run saves its
    /// checkpoint, metrics and result, and `rl resume` continues it.
    pub stop: Option<Arc<AtomicBool>>,
    /// Overrides applied to a resumed run's config (`--set key=value`); the seed and the
    /// number of environments must stay.
    pub overrides: Vec<String>,
}

impl TrainOptions {
    /// Options that print nothing while training.
    pub fn quiet() -> Self {
        Self {
            quiet: true,
            ..Self::default()
        }
    }
}

/// A finished (or interrupted) training run.
#[derive(Clone, Debug)]
pub struct Trained {
    /// The outcome, as written to `result.json`.
    pub result: RunResult,
    /// The run directory.
    pub dir: PathBuf,
    /// The run's memory plan.
    pub plan: MemoryPlan,
    /// Whether a stop request ended it (the run is resumable).
    pub interrupted: bool,
}

/// A plan and whether it fits: `run.budget`, or without one the machine's available
/// memory.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The whole run's memory plan.
    pub plan: MemoryPlan,
    /// What it was checked against.
    pub limit: Limit,
    /// Why the plan does not fit [`Planned::limit`] (`None`: it fits, or nothing was
    /// checked), with what to change.
    pub refused: Option<String>,
    /// What the run would do that its author probably did not mean
    /// ([`Config::warnings`](crate::config::Config::warnings)).
    pub warnings: Vec<String>,
}

/// What a run's plan is checked against before anything is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// The config's `run.budget`.
    Budget(MemoryBudget),
    /// No `run.budget`: the RAM this machine had available (`MemAvailable`, in bytes)
    /// when the plan was made.
    Available(u64),
    /// No `run.budget` and no reading of the available memory (off Linux): nothing is
    /// checked.
    Unchecked,
}

/// What to lower when a plan does not fit.
const LOWER: &str = "lower what the largest lines grow with (policy.hidden, sac.hidden or dqn.hidden, ppo.n_steps, batch sizes, off_policy.buffer_capacity)";

impl Limit {
    /// `config`'s `run.budget`, or without one this machine's available memory.
    pub fn of(config: &Config) -> Self {
        match config.run.budget {
            Some(budget) => Limit::Budget(budget),
            None => match SystemMemory::read() {
                Ok(memory) => Limit::Available(memory.available_bytes),
                Err(_) => Limit::Unchecked,
            },
        }
    }

    /// Why `plan` does not fit this limit, and what to change; `None` when it fits.
    pub fn refusal(&self, plan: &MemoryPlan) -> Option<String> {
        let budget = match *self {
            Limit::Budget(budget) => budget,
            Limit::Available(bytes) => MemoryBudget::ram(bytes),
            Limit::Unchecked => return None,
        };
        let error = plan.check(&budget).err()?;
        let rl_core::Error::OverBudget {
            location,
            planned,
            budget,
            largest,
        } = error
        else {
            return Some(error.to_string());
        };
        let largest: Vec<String> = largest
            .iter()
            .map(|l| format!("{} ({})", l.component, Bytes(l.bytes)))
            .collect();
        let (limit, fix) = match self {
            Limit::Budget(_) => (
                format!("run.budget allows {}", Bytes(budget)),
                "or raise run.budget",
            ),
            _ => (
                format!(
                    "run.budget is not set and this machine has {} available (MemAvailable)",
                    Bytes(budget)
                ),
                "or set run.budget to the bytes this run may use",
            ),
        };
        Some(format!(
            "the plan needs {} of {location} but {limit}; largest lines: {}; {LOWER}, {fix}",
            Bytes(planned),
            largest.join(", ")
        ))
    }
}

/// `plan` checked against `config`'s [`Limit`]: a refusal is a config error of
/// `run.budget` carrying the plan's table (nothing was built or created).
fn check_plan(config: &Config, plan: &MemoryPlan) -> Result<()> {
    match Limit::of(config).refusal(plan) {
        None => Ok(()),
        Some(why) => Err(ConfigError::new("run.budget", format!("{why}\n{plan}")).into()),
    }
}

/// Trains `config` into the run directory `out` (created; it must not hold a run
/// already). Checks everything a user can get wrong before anything is created: the
/// environment and the algorithm, the memory plan (from the configuration alone,
/// nothing built) against `run.budget` or, without one, the machine's available memory,
/// that `out` is writable. A refused plan leaves no run directory.
///
/// # Errors
/// [`Error::Config`] and [`Error::Usage`] before anything runs; the library's errors.
pub fn train(
    registry: &Registry,
    config: &Config,
    out: &Path,
    options: &TrainOptions,
) -> Result<Trained> {
    let entry = registry.check(config)?;
    check_plan(config, &entry.plan(config)?)?;
    // After the plan: its probe environment has loaded the environment's libraries (a
    // Python environment's imports), which stay.
    let before = resident_now();
    // Printed even when quiet: a run that will not do what its config suggests.
    for warning in config.warnings() {
        eprintln!("warning: {warning}");
    }
    let dir = rundir::create(out)?;
    rundir::write_config(&dir, config)?;
    entry
        .run(config, Job::Train(&dir, options, false, before))?
        .trained()
}

/// The process's resident memory now (`None` where it cannot be read).
pub(crate) fn resident_now() -> Option<u64> {
    rl_core::ProcessMemory::read().ok().map(|m| m.rss_bytes)
}

/// Trains `config` (an off-policy algorithm) into the run directory `out` from the
/// chunks `source` delivers (collectors in other processes or on other machines, each a
/// [`remote_actor`]; the Python package drives Ray actors this way), with the same run
/// directory, metrics and checkpoints as [`train`]. The source gets the learner's
/// weights after every training phase. The budget check includes the source's plan.
///
/// # Errors
/// As [`train`]; an on-policy algorithm (Usage).
pub fn train_remote(
    registry: &Registry,
    config: &Config,
    out: &Path,
    options: &TrainOptions,
    source: Box<dyn crate::trainer::ChunkSource>,
) -> Result<Trained> {
    let before = resident_now();
    let entry = registry.check(config)?;
    if !config.algo.off_policy() {
        return Err(Error::Usage(format!(
            "algo {} is on-policy: remote collection trains the off-policy algorithms (sac, discrete_sac, dqn)",
            config.algo
        )));
    }
    let dir = rundir::create(out)?;
    rundir::write_config(&dir, config)?;
    entry
        .run(config, Job::Remote(&dir, options, source, before))?
        .trained()
}

/// A collector for a remote run of `config` ([`train_remote`]): `run.n_envs` of the
/// config's environments (environment `i` reset first with `chunk.seed + i`), acting
/// with a copy of the learner's actor, filling chunks of `chunk.steps_per_chunk` steps
/// of every environment. Weights arrive with [`ChunkActor::set_weights`].
///
/// # Errors
/// An unknown environment, an algorithm it does not fit or that is on-policy, an
/// invalid config.
pub fn remote_actor(
    registry: &Registry,
    config: &Config,
    chunk: ChunkConfig,
) -> Result<Box<dyn ChunkActor>> {
    match registry.check(config)?.run(config, Job::Actor(chunk))? {
        Outcome::Actor(actor) => Ok(actor),
        _ => Err(Error::Usage("remote_actor: the job gave no actor".into())),
    }
}

/// Continues the run saved in `dir` (from `dir/checkpoint`, with `dir/config.toml` and
/// `options.overrides`), appending to its metrics. A run that was killed before its
/// first checkpoint starts over from step 0. Overrides may change only the budget,
/// learning rates and schedules, `run.eval`, `run.goal`, `run.stop_at_goal` and `log`;
/// accepted changes are written to `config.toml` and recorded in `changes.jsonl`. Before
/// appending, a torn last line of `metrics.jsonl` is cut off and lines past the
/// checkpoint are moved to `metrics.discarded.jsonl`.
///
/// # Errors
/// A directory without a run, a checkpoint of another algorithm, a setting that cannot
/// change on resume ([`Error::Config`]: nothing in `dir` is written then), the errors
/// of [`train`].
pub fn resume(registry: &Registry, dir: &Path, options: &TrainOptions) -> Result<Trained> {
    let before = resident_now();
    let saved = rundir::read_config(dir, &[])?;
    let config = rundir::read_config(dir, &options.overrides)?;
    rundir::resume_changes(&saved, &config)?;
    let entry = registry.check(&config)?;
    rundir::check_writable(dir)?;
    if !rundir::has_checkpoint(dir)? {
        // Killed before its first save: nothing to continue, so the run starts over.
        if !options.quiet {
            eprintln!(
                "{}: the run stopped before its first checkpoint, so it starts over from step 0 (its metrics so far move to {})",
                dir.display(),
                rundir::DISCARDED_METRICS_FILE
            );
        }
        rundir::accept_resume(dir, &config, 0)?;
        return entry
            .run(&config, Job::Train(dir, options, false, before))?
            .trained();
    }
    rundir::check_checkpoint(dir, CHECKPOINT_DIR, &config)?;
    // The trainer checks the checkpoint against the config; `config.toml` is written,
    // and `metrics.jsonl` repaired, only once it has accepted it.
    entry
        .run(&config, Job::Train(dir, options, true, before))?
        .trained()
}

/// The whole run's memory plan of `config`, from the configuration and the
/// environment's spaces alone (no learner, network, buffer or file is made), and whether
/// it fits `run.budget` or, without one, the machine's available memory ([`Limit`]).
///
/// # Errors
/// An unknown environment, an algorithm the environment does not fit, an invalid
/// configuration (sizes whose bytes overflow included).
pub fn plan(registry: &Registry, config: &Config) -> Result<Planned> {
    let plan = registry.entry(config)?.plan(config)?;
    let limit = Limit::of(config);
    let refused = limit.refusal(&plan);
    Ok(Planned {
        plan,
        limit,
        refused,
        warnings: config.warnings(),
    })
}

/// Which checkpoint of a run to load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Which {
    /// `checkpoint/`: the latest save.
    #[default]
    Latest,
    /// `best/`: the learner of the best scheduled evaluation.
    Best,
}

impl Which {
    /// The folder inside a run directory.
    pub fn dir_name(self) -> &'static str {
        match self {
            Which::Latest => CHECKPOINT_DIR,
            Which::Best => BEST_DIR,
        }
    }
}

/// An evaluation of a saved policy.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Evaluated {
    /// Env steps the run had taken when the checkpoint was saved.
    pub env_steps: u64,
    /// The first reset seed of the episodes (episode `i` resets with `seed + i`).
    pub seed: u64,
    /// Returns and lengths of the episodes.
    #[serde(flatten)]
    pub report: EvalReport,
}

/// Runs `episodes` deterministic episodes with the policy saved in `dir` (the
/// `which` checkpoint) on a fresh environment, episode `i` reset with `seed + i`
/// (`None`: the seeds of the run's scheduled evaluations).
///
/// # Errors
/// A directory without a run or that checkpoint, a checkpoint of another algorithm,
/// 0 episodes, environment and policy errors.
pub fn eval(
    registry: &Registry,
    dir: &Path,
    which: Which,
    episodes: usize,
    seed: Option<u64>,
) -> Result<Evaluated> {
    if episodes == 0 {
        return Err(Error::Usage(
            "--episodes is 0: evaluate at least 1 episode".into(),
        ));
    }
    let (config, entry, counters, checkpoint) = saved(registry, dir, which)?;
    let seed = seed.unwrap_or_else(|| config.run.seed.wrapping_mul(1000).wrapping_add(500));
    let job = Job::Eval {
        dir: &checkpoint,
        episodes,
        seed,
    };
    match entry.run(&config, job)? {
        Outcome::Eval(report) => Ok(Evaluated {
            env_steps: counters.env_steps,
            seed,
            report,
        }),
        _ => Err(Error::Usage("eval: the job gave no evaluation".into())),
    }
}

/// What [`eval`] and [`Agent::load`](crate::agent::Agent::load) read first: the run's
/// config, its registry entry, the `which` checkpoint's counters (checked to hold the
/// config's algorithm) and folder.
fn saved<'r>(
    registry: &'r Registry,
    dir: &Path,
    which: Which,
) -> Result<(
    Config,
    &'r dyn registry::Entry,
    crate::trainer::RunCounters,
    PathBuf,
)> {
    let config = rundir::read_config(dir, &[])?;
    let entry = registry.entry(&config)?;
    let counters = rundir::check_checkpoint(dir, which.dir_name(), &config)?;
    Ok((config, entry, counters, dir.join(which.dir_name())))
}

/// The learner saved in `dir` (the `which` checkpoint), built from the run's config and
/// restored as [`eval`] restores it, as an agent's acting part.
pub(crate) fn load(
    registry: &Registry,
    dir: &Path,
    which: Which,
) -> Result<(Config, crate::trainer::RunCounters, crate::agent::Loaded)> {
    let (config, entry, counters, checkpoint) = saved(registry, dir, which)?;
    match entry.run(&config, Job::Load(&checkpoint))? {
        Outcome::Agent(loaded) => Ok((config, counters, *loaded)),
        _ => Err(Error::Usage("load: the job gave no agent".into())),
    }
}
