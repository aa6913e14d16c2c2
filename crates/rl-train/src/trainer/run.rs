//! What both trainers share: the loop's settings, callbacks, the summary, the run
//! directory's counters, and the bookkeeping of goals, evaluations and checkpoints.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use rl_collect::{EndedEpisode, EpisodeStats};
use rl_core::{Env, MemoryBudget, ProcessMemory};
use rl_nn::Pool;
use serde::{Deserialize, Serialize};

use crate::eval::{EvalConfig, EvalReport, evaluate_each};
use rl_algos::learner::Learner;
use rl_algos::predict::Predict;
use rl_algos::{Error, Result};

/// The file of a run directory that holds the loop's counters ([`RunCounters`]).
pub const RUN_FILE: &str = "run.json";
/// The file of a run directory that holds the collector's state
/// ([`rl_collect::SavedCollector`]: episode statistics, and the environments mid-episode
/// where they can be saved).
pub const COLLECTOR_FILE: &str = "collector.json";

/// When a run counts as solved, and stops (unless [`RunConfig::stop_at_goal`] is off).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Goal {
    /// The mean return of the last `window` training episodes reaches `mean_return`.
    TrainingReturn {
        /// The mean return to reach (inclusive).
        mean_return: f32,
        /// Training episodes averaged; the goal is not checked before that many ended.
        window: usize,
    },
    /// A scheduled deterministic evaluation ([`RunConfig::eval`]) reaches `mean_return`.
    EvalReturn {
        /// The mean evaluation return to reach (inclusive).
        mean_return: f32,
    },
}

/// Deterministic evaluation on a separate environment every `every_steps` env steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSchedule {
    /// Env steps between evaluations (at least 1); the first comes after `every_steps`.
    pub every_steps: u64,
    /// Episodes per evaluation (at least 1), reset with seeds `eval seed + i`.
    pub episodes: usize,
    /// An evaluation episode longer than this is cut. Default 100 000.
    #[serde(default = "default_max_episode_steps")]
    pub max_episode_steps: u64,
}

fn default_max_episode_steps() -> u64 {
    EvalConfig::default().max_episode_steps
}

impl EvalSchedule {
    /// `episodes` episodes every `every_steps` env steps.
    pub fn new(every_steps: u64, episodes: usize) -> Self {
        Self {
            every_steps,
            episodes,
            max_episode_steps: EvalConfig::default().max_episode_steps,
        }
    }
}

/// Where and how often a run saves itself.
///
/// A run with a schedule also saves at the end of every `train` call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointSchedule {
    /// The run directory. A save writes a sibling `<dir>.partial` completely, then swaps
    /// it in, so a crash mid-save leaves the previous checkpoint whole.
    pub dir: PathBuf,
    /// Env steps between saves (`None`: no step cadence).
    pub every_steps: Option<u64>,
    /// Minutes of wall time between saves (`None`: no time cadence). The `rl` command
    /// saves every 10 minutes unless a config says otherwise.
    pub every_minutes: Option<f64>,
    /// Save after every scheduled evaluation too (the `rl` command does).
    pub at_eval: bool,
    /// Where the learner alone is saved (its checkpoint and the counters, no replay
    /// buffer) each time a scheduled evaluation's mean return beats every earlier one of
    /// the run (`None`: no best checkpoint). Written the same whole-or-nothing way as
    /// `dir`; it must not be `dir` or inside it.
    pub best: Option<PathBuf>,
}

/// The loop's settings, shared by both trainers.
///
/// In serialized form (a config file) only `total_steps` is required; every other field
/// defaults to [`RunConfig::new`]'s value, unknown fields are refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Env steps to take in all (all environments together), counted over the run's life:
    /// a resumed run continues towards the same total.
    pub total_steps: u64,
    /// Seed of the run: training environment `i` is built by `make_env(seed * 1000 + i)`
    /// and first reset with `seed + i`, the evaluation environment is built by
    /// `make_env(seed * 1000 + 500)` and its episode `j` reset with
    /// `seed * 1000 + 500 + j`; random warm-up actions and the replay sampler are seeded
    /// from it too.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Environments stepped together. Default 1.
    #[serde(default = "default_n_envs")]
    pub n_envs: usize,
    /// Threads the learner's large matrix products are split across (an
    /// [`rl_nn::Pool`] started once by the trainer). Results are bit-identical for any
    /// number, so it may change on resume. Default 1: the calling thread only.
    #[serde(default = "default_threads")]
    pub threads: usize,
    /// When the run is solved (`None`: never, run the whole budget).
    #[serde(default = "default_none")]
    pub goal: Option<Goal>,
    /// Stop when the goal is reached (default true); otherwise only note when.
    #[serde(default = "default_true")]
    pub stop_at_goal: bool,
    /// Training episodes averaged in progress reports. Default 100.
    #[serde(default = "default_stats_window")]
    pub stats_window: usize,
    /// Scheduled deterministic evaluations (`None`: none).
    #[serde(default = "default_none")]
    pub eval: Option<EvalSchedule>,
    /// Saving the run (`None`: never).
    #[serde(default = "default_none")]
    pub checkpoint: Option<CheckpointSchedule>,
    /// Memory the run's plan must fit in, checked before the buffer is allocated
    /// (`None`: no check).
    #[serde(default = "default_none")]
    pub budget: Option<MemoryBudget>,
}

fn default_seed() -> u64 {
    RunConfig::new(1).seed
}

fn default_n_envs() -> usize {
    RunConfig::new(1).n_envs
}

fn default_threads() -> usize {
    RunConfig::new(1).threads
}

fn default_none<T>() -> Option<T> {
    None
}

fn default_true() -> bool {
    true
}

fn default_stats_window() -> usize {
    RunConfig::new(1).stats_window
}

impl RunConfig {
    /// A run of `total_steps` env steps with seed 0, one environment, no goal,
    /// evaluation, checkpoint or budget.
    pub fn new(total_steps: u64) -> Self {
        Self {
            total_steps,
            seed: 0,
            n_envs: 1,
            threads: 1,
            goal: None,
            stop_at_goal: true,
            stats_window: 100,
            eval: None,
            checkpoint: None,
            budget: None,
        }
    }

    /// Checks every field; the error names the first invalid one.
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<()> {
        if self.total_steps == 0 {
            return Err(Error::config("run.total_steps", "is 0: use at least 1"));
        }
        if self.n_envs == 0 {
            return Err(Error::config("run.n_envs", "is 0: use at least 1"));
        }
        if !(1..=rl_nn::MAX_THREADS).contains(&self.threads) {
            return Err(Error::config(
                "run.threads",
                format!(
                    "is {}: use 1 to {} (1 runs the learner on the calling thread only)",
                    self.threads,
                    rl_nn::MAX_THREADS
                ),
            ));
        }
        if self.stats_window == 0 {
            return Err(Error::config("run.stats_window", "is 0: use at least 1"));
        }
        match self.goal {
            Some(Goal::TrainingReturn {
                mean_return,
                window,
            }) if window == 0 || !mean_return.is_finite() => {
                return Err(Error::config(
                    "run.goal",
                    format!(
                        "is a mean return of {mean_return} over {window} episodes: use a finite return and at least 1 episode"
                    ),
                ));
            }
            Some(Goal::EvalReturn { mean_return })
                if self.eval.is_none() || !mean_return.is_finite() =>
            {
                return Err(Error::config(
                    "run.goal",
                    format!(
                        "is an evaluation return of {mean_return}: it needs a finite return and run.eval set"
                    ),
                ));
            }
            _ => {}
        }
        if let Some(eval) = &self.eval
            && (eval.every_steps == 0 || eval.episodes == 0 || eval.max_episode_steps == 0)
        {
            return Err(Error::config(
                "run.eval",
                format!(
                    "is every {} steps, {} episodes, at most {} steps each: all three must be at least 1",
                    eval.every_steps, eval.episodes, eval.max_episode_steps
                ),
            ));
        }
        if let Some(checkpoint) = &self.checkpoint {
            if checkpoint.every_steps == Some(0) {
                return Err(Error::config(
                    "run.checkpoint.every_steps",
                    "is 0: use at least 1, or None to save only at the end",
                ));
            }
            if checkpoint
                .every_minutes
                .is_some_and(|m| !(m.is_finite() && m > 0.0))
            {
                return Err(Error::config(
                    "run.checkpoint.every_minutes",
                    format!(
                        "is {}: use a positive number of minutes, or None for no time cadence",
                        checkpoint.every_minutes.unwrap_or_default()
                    ),
                ));
            }
            if checkpoint.dir.as_os_str().is_empty() {
                return Err(Error::config(
                    "run.checkpoint.dir",
                    "is empty: name a folder",
                ));
            }
            if let Some(best) = &checkpoint.best
                && (best.as_os_str().is_empty() || best.starts_with(&checkpoint.dir))
            {
                return Err(Error::config(
                    "run.checkpoint.best",
                    format!(
                        "is {:?}: name a folder outside run.checkpoint.dir (a save replaces that folder whole)",
                        best.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The episodes averaged for progress and for a training-return goal.
    pub(crate) fn window(&self) -> usize {
        match self.goal {
            Some(Goal::TrainingReturn { window, .. }) => window,
            _ => self.stats_window,
        }
    }

    /// The first reset seed of training environment `i`.
    pub(crate) fn env_seed(&self, i: usize) -> u64 {
        self.seed.wrapping_mul(1000).wrapping_add(i as u64)
    }

    /// The evaluation settings of one scheduled evaluation.
    pub(crate) fn eval_config(&self, schedule: &EvalSchedule) -> EvalConfig {
        EvalConfig {
            episodes: schedule.episodes,
            seed: self.seed.wrapping_mul(1000).wrapping_add(500),
            max_episode_steps: schedule.max_episode_steps,
        }
    }
}

/// Whether the loop goes on after a callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Go on.
    Continue,
    /// Stop after this iteration (the summary says [`StopReason::Callback`]).
    Stop,
}

/// The state of a run after one iteration (a collection and its updates).
#[derive(Clone, Copy, Debug)]
pub struct Progress<'a, S> {
    /// Env steps so far, over the run's life.
    pub env_steps: u64,
    /// Gradient steps (off-policy) or PPO updates (on-policy) so far.
    pub updates: u64,
    /// Training episodes ended so far, over the run's life.
    pub episodes: u64,
    /// Mean return of the last training episodes (`None` before the first ends).
    pub mean_return: Option<f32>,
    /// Mean length of the same episodes.
    pub mean_length: Option<f32>,
    /// Training episodes in those means (at most the run's window).
    pub window: usize,
    /// Seconds of training over the run's life (a resumed run continues the count).
    pub wall_s: f64,
    /// Env steps per second in this `train` call.
    pub steps_per_s: f64,
    /// Resident memory now (`None` where the platform has no reading).
    pub rss_bytes: Option<u64>,
    /// What the last update measured (`None` before the first).
    pub stats: Option<&'a S>,
}

/// Which episodes an [`EpisodeEnd`] is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeKind {
    /// A training environment's (the policy sampling).
    Train,
    /// A scheduled evaluation's (the policy deterministic).
    Eval,
}

/// A finished episode, for [`Callback::on_episode`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EpisodeEnd {
    /// Training or evaluation.
    pub kind: EpisodeKind,
    /// Undiscounted return.
    pub episode_return: f64,
    /// Steps.
    pub length: u64,
    /// Env steps of the run (all training environments) just after the episode's last
    /// step; for an evaluation episode, the env steps at which the evaluation ran (with
    /// the asynchronous or remote collector, the env steps when the trainer received
    /// the episode).
    pub env_steps: u64,
    /// Seconds of training over the run's life when the trainer saw the episode end:
    /// after the collection that finished it, or as the evaluation episode ended.
    pub wall_s: f64,
}

/// The finished training episodes a trainer keeps between two collections: the
/// collector drains them after every collection, so more are lost (and counted by
/// `EpisodeStats::ended_dropped`) only when one collection ends more episodes than
/// this (4096 episodes of CartPole's shortest, 8 steps, take 32 768 env steps).
pub(crate) const KEPT_EPISODES: usize = 4096;

/// Adds the memory of the [`KEPT_EPISODES`] list to a trainer's plan.
pub(crate) fn plan_kept_episodes(plan: &mut rl_core::MemoryPlan) {
    plan.add(
        "collector/finished episodes",
        rl_core::Location::Ram,
        (KEPT_EPISODES * size_of::<EndedEpisode>()) as u64,
    );
}

/// Hooks a run calls. Every method has a default that does nothing, so a callback
/// implements only what it needs; `()` is the callback that does nothing at all.
pub trait Callback<S> {
    /// After every iteration.
    fn on_progress(&mut self, _progress: &Progress<'_, S>) -> Control {
        Control::Continue
    }

    /// After every scheduled evaluation.
    fn on_eval(&mut self, _env_steps: u64, _report: &EvalReport) -> Control {
        Control::Continue
    }

    /// After the run was saved into `dir`.
    fn on_checkpoint(&mut self, _env_steps: u64, _dir: &Path) {}

    /// For every finished training episode (after the collection that finished it,
    /// oldest first, before [`Callback::on_progress`]) and every episode of a scheduled
    /// evaluation (before [`Callback::on_eval`]). Called from the loop: it should not
    /// allocate.
    fn on_episode(&mut self, _episode: &EpisodeEnd) {}
}

impl<S> Callback<S> for () {}

/// A callback that prints a progress line to stderr at most every `interval_s`
/// seconds (steps, steps/s, mean return, episodes, resident memory, the last update's
/// statistics as JSON), every evaluation and every save.
#[derive(Debug)]
pub struct ProgressLog {
    interval_s: f64,
    last: Option<Instant>,
}

impl ProgressLog {
    /// Prints at most every `interval_s` seconds.
    pub fn every(interval_s: f64) -> Self {
        Self {
            interval_s,
            last: None,
        }
    }
}

impl<S: Serialize> Callback<S> for ProgressLog {
    fn on_progress(&mut self, p: &Progress<'_, S>) -> Control {
        if self
            .last
            .is_some_and(|t| t.elapsed().as_secs_f64() < self.interval_s)
        {
            return Control::Continue;
        }
        self.last = Some(Instant::now());
        let stats = p
            .stats
            .and_then(|s| serde_json::to_string(s).ok())
            .unwrap_or_default();
        eprintln!(
            "steps {:>8}  {:>8.0} steps/s  mean return {:>8.2} ({} episodes)  updates {}  rss {}  {stats}",
            p.env_steps,
            p.steps_per_s,
            p.mean_return.unwrap_or(f32::NAN),
            p.episodes,
            p.updates,
            p.rss_bytes.map_or_else(
                || "n/a".to_owned(),
                |b| format!("{:.1} MiB", b as f64 / 1048576.0)
            ),
        );
        Control::Continue
    }

    fn on_eval(&mut self, env_steps: u64, r: &EvalReport) -> Control {
        eprintln!(
            "eval at {env_steps} steps: mean return {:.2} ± {:.2} over {} episodes (min {:.1}, max {:.1}, mean length {:.1})",
            r.mean_return, r.std_return, r.episodes, r.min_return, r.max_return, r.mean_length
        );
        Control::Continue
    }

    fn on_checkpoint(&mut self, env_steps: u64, dir: &Path) {
        eprintln!("saved the run at {env_steps} steps into {}", dir.display());
    }
}

/// Why `train` returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The goal was reached (and [`RunConfig::stop_at_goal`] is on).
    Goal,
    /// [`RunConfig::total_steps`] were taken.
    Budget,
    /// A callback returned [`Control::Stop`].
    Callback,
}

/// What a run did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainSummary {
    /// Whether the goal was reached.
    pub solved: bool,
    /// Env steps at the goal, or at the end when it was not reached.
    pub env_steps: u64,
    /// Seconds of training over the run's life at the goal, or at the end.
    pub wall_s: f64,
    /// Env steps over the run's life at the end.
    pub total_env_steps: u64,
    /// Seconds of training over the run's life at the end.
    pub total_wall_s: f64,
    /// Gradient steps (off-policy) or PPO updates (on-policy) over the run's life.
    pub updates: u64,
    /// Mean return of the last training episodes.
    pub mean_return: Option<f32>,
    /// Training episodes in that mean.
    pub window: usize,
    /// Env steps per second of this `train` call.
    pub steps_per_s: f64,
    /// Training episodes ended in this `train` call.
    pub episodes: u64,
    /// Training episodes ended over the run's life.
    pub total_episodes: u64,
    /// The last scheduled evaluation.
    pub last_eval: Option<EvalReport>,
    /// Bytes of host memory the plan holds.
    pub planned_bytes: u64,
    /// Peak resident memory of the process (`None` where the platform has no reading).
    pub peak_rss_bytes: Option<u64>,
    /// Why the run returned.
    pub stopped_by: StopReason,
}

/// The counters a run directory holds besides the learner and the buffer
/// ([`RUN_FILE`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunCounters {
    /// Which trainer wrote it: `"off_policy"` or `"on_policy"`.
    pub trainer: String,
    /// The learner's checkpoint kind.
    pub learner: String,
    /// Env steps over the run's life.
    pub env_steps: u64,
    /// Seconds of training over the run's life (the time between a save and a kill is
    /// lost with its steps).
    #[serde(default)]
    pub wall_s: f64,
    /// Gradient steps or updates over the run's life.
    pub updates: u64,
    /// Env steps at the last scheduled evaluation.
    pub last_eval_steps: u64,
    /// The loop settings of the run (a resumed run may change the budget, the goal and
    /// the cadences, not the seed or the number of environments).
    pub run: RunConfig,
    /// The best mean return of the run's scheduled evaluations so far (`None` before
    /// the first), which a [`CheckpointSchedule::best`] save must beat.
    #[serde(default)]
    pub best_eval_return: Option<f64>,
}

impl RunCounters {
    /// Reads `dir/run.json` of a run directory a trainer saved.
    ///
    /// # Errors
    /// [`Error::Config`] for a missing or unreadable file, or one that does not parse.
    pub fn load(dir: &Path) -> Result<Self> {
        recover_dir(dir)?;
        let path = dir.join(RUN_FILE);
        let text = std::fs::read(&path).map_err(|e| {
            Error::config(
                "resume",
                format!(
                    "cannot read {}: {e}: resume from a directory a trainer saved",
                    path.display()
                ),
            )
        })?;
        serde_json::from_slice(&text)
            .map_err(|e| Error::config("resume", format!("{} does not parse: {e}", path.display())))
    }

    /// Checks that a run of `trainer` with `learner` and `run` settings may continue
    /// from these counters.
    pub(crate) fn check(&self, trainer: &str, learner: &str, run: &RunConfig) -> Result<()> {
        let pairs = [
            ("trainer", self.trainer.clone(), trainer.to_owned()),
            ("learner", self.learner.clone(), learner.to_owned()),
            ("run.seed", self.run.seed.to_string(), run.seed.to_string()),
            (
                "run.n_envs",
                self.run.n_envs.to_string(),
                run.n_envs.to_string(),
            ),
        ];
        for (what, saved, now) in pairs {
            if saved != now {
                return Err(Error::CheckpointMismatch {
                    what: what.to_owned(),
                    expected: now,
                    actual: saved,
                });
            }
        }
        Ok(())
    }
}

/// Saves a run directory through `write` into `<dir>.partial`, makes every file and the
/// folder durable (fsync), then swaps it in for `dir`: the old one is renamed
/// `<dir>.old`, the new one into place, the parent folder synced, and the old one
/// removed. A crash at any point leaves a whole save: `dir`, or `<dir>.old` between
/// the two renames, which [`recover_dir`] (called by every load) puts back.
pub(crate) fn save_dir(dir: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let partial = sibling(dir, "partial");
    let old = sibling(dir, "old");
    recover_dir(dir)?;
    for stale in [&partial, &old] {
        if stale.exists() {
            std::fs::remove_dir_all(stale).map_err(|e| io("removing", stale, e))?;
        }
    }
    std::fs::create_dir_all(&partial).map_err(|e| io("creating", &partial, e))?;
    write(&partial)?;
    sync_tree(&partial)?;
    if dir.exists() {
        std::fs::rename(dir, &old).map_err(|e| io("moving aside", dir, e))?;
    }
    std::fs::rename(&partial, dir).map_err(|e| io("renaming into place", &partial, e))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent)?;
    }
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(|e| io("removing", &old, e))?;
    }
    Ok(())
}

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::config("checkpoint", format!("{what} {}: {e}", path.display()))
}

/// Puts a save back that a crash left as `<dir>.old` (between the two renames of
/// [`save_dir`]); nothing to do when `dir` exists.
///
/// # Errors
/// The rename's I/O error.
pub(crate) fn recover_dir(dir: &Path) -> Result<()> {
    let old = sibling(dir, "old");
    if !dir.exists() && old.join(RUN_FILE).exists() {
        std::fs::rename(&old, dir).map_err(|e| io("restoring", &old, e))?;
    }
    Ok(())
}

/// fsyncs every file below `dir`, and the folders.
fn sync_tree(dir: &Path) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| io("reading", dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| io("reading", dir, e))?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            std::fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| io("syncing", &path, e))?;
        }
    }
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("syncing", dir, e))
}

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{suffix}"));
    dir.with_file_name(name)
}

/// Writes `learner`'s checkpoint to `path` atomically (the run layer owns files; the
/// learner gives its state).
pub(crate) fn save_learner<L: Learner>(learner: &L, path: &Path) -> Result<()> {
    Ok(learner.checkpoint().save(path)?)
}

/// Starts the pool of `threads` threads the learner's products are split across, once
/// per trainer (none for one thread: the calling thread does every product).
pub(crate) fn start_pool<L: Learner>(learner: &mut L, threads: usize) -> Result<Option<Arc<Pool>>> {
    if threads < 2 {
        return Ok(None);
    }
    let pool = Arc::new(Pool::new(threads)?);
    learner.set_pool(Some(Arc::clone(&pool)));
    Ok(Some(pool))
}

/// The trainer's pool as the second thread a collector acts on while its environments
/// step on the calling thread ([`rl_collect::SyncCollector::set_beside`]).
#[derive(Debug)]
pub(crate) struct PoolBeside(pub(crate) Arc<Pool>);

impl rl_collect::Beside for PoolBeside {
    fn beside(&self, on_caller: &mut dyn FnMut(), on_worker: &mut (dyn FnMut() + Send)) {
        self.0.join(on_caller, on_worker);
    }
}

/// Restores `learner` from the checkpoint file at `path`; on error nothing changes.
pub(crate) fn load_learner<L: Learner>(learner: &mut L, path: &Path) -> Result<()> {
    let checkpoint = rl_nn::Checkpoint::<L::Saved>::load(path, learner.kind())?;
    learner.restore(&checkpoint)
}

/// Writes a collector's state as `dir/collector.json`.
pub(crate) fn write_collector(dir: &Path, saved: &rl_collect::SavedCollector) -> Result<()> {
    let path = dir.join(COLLECTOR_FILE);
    let text = serde_json::to_vec(saved)
        .map_err(|e| Error::config("checkpoint", format!("{}: {e}", path.display())))?;
    std::fs::write(&path, text).map_err(|e| io("writing", &path, e))
}

/// The collector's state saved in `dir` (`None` in a save that has none: an older
/// one, or a best checkpoint).
pub(crate) fn read_collector(dir: &Path) -> Result<Option<rl_collect::SavedCollector>> {
    let path = dir.join(COLLECTOR_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::config(
                "resume",
                format!(
                    "{} does not parse ({e}): the save is damaged; remove the file to resume with new episodes",
                    path.display()
                ),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("reading", &path, e)),
    }
}

/// How a resumed run continues its environments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Continuation {
    /// The environments were restored mid-episode: the run continues exactly as if it
    /// had not stopped (synchronous collection, environments that save their state,
    /// a learner without per-environment acting state).
    Exact,
    /// The environments start new episodes (an environment that cannot save its
    /// state, the asynchronous collector, a recurrent learner); the learner, the
    /// buffer, the counters and the episode statistics continue.
    EpisodesRestart,
}

/// Writes `counters` as `dir/run.json`.
pub(crate) fn write_counters(dir: &Path, counters: &RunCounters) -> Result<()> {
    let text = serde_json::to_vec_pretty(counters)
        .map_err(|e| Error::config("checkpoint", format!("run counters: {e}")))?;
    let path = dir.join(RUN_FILE);
    std::fs::write(&path, text)
        .map_err(|e| Error::config("checkpoint", format!("writing {}: {e}", path.display())))
}

/// The bookkeeping of one `train` call: time, goal, evaluation and checkpoint cadence.
#[derive(Debug)]
pub(crate) struct Clock {
    start: Instant,
    /// Seconds of training over the run's life before this `train` call.
    wall_before: f64,
    start_steps: u64,
    pub(crate) solved_at: Option<(u64, f64)>,
    pub(crate) last_eval_steps: u64,
    pub(crate) last_eval: Option<EvalReport>,
    last_save_steps: u64,
    last_save_at: Instant,
    /// Whether an evaluation ran since the last save.
    evaluated_since_save: bool,
    pub(crate) stop: Option<StopReason>,
    /// The best evaluation's mean return of the run so far.
    pub(crate) best_eval: Option<f64>,
    /// Whether the last evaluation beat every earlier one (and the best checkpoint is
    /// due).
    new_best: bool,
}

impl Clock {
    pub(crate) fn start(
        env_steps: u64,
        wall_before: f64,
        last_eval_steps: u64,
        best_eval: Option<f64>,
    ) -> Self {
        let now = Instant::now();
        Self {
            start: now,
            wall_before,
            start_steps: env_steps,
            solved_at: None,
            last_eval_steps,
            last_eval: None,
            last_save_steps: env_steps,
            last_save_at: now,
            evaluated_since_save: false,
            stop: None,
            best_eval,
            new_best: false,
        }
    }

    /// Whether a best checkpoint is due: the last evaluation beat every earlier one and
    /// the run keeps a best checkpoint. Clears the flag.
    pub(crate) fn take_new_best(&mut self, run: &RunConfig) -> Option<PathBuf> {
        let due = std::mem::take(&mut self.new_best);
        run.checkpoint
            .as_ref()
            .and_then(|c| c.best.clone())
            .filter(|_| due)
    }

    /// Seconds of training over the run's life.
    pub(crate) fn elapsed(&self) -> f64 {
        self.wall_before + self.start.elapsed().as_secs_f64()
    }

    /// Env steps per second of this `train` call.
    pub(crate) fn steps_per_s(&self, env_steps: u64) -> f64 {
        (env_steps - self.start_steps) as f64 / self.start.elapsed().as_secs_f64().max(1e-9)
    }

    /// Notes that the goal was reached at `env_steps` (the first time only) and stops if
    /// the run stops at its goal.
    pub(crate) fn reached(&mut self, run: &RunConfig, env_steps: u64) {
        if self.solved_at.is_none() {
            self.solved_at = Some((env_steps, self.elapsed()));
            if run.stop_at_goal {
                self.stop = Some(StopReason::Goal);
            }
        }
    }

    /// Checks a training-return goal.
    pub(crate) fn check_training_goal(
        &mut self,
        run: &RunConfig,
        env_steps: u64,
        window_len: usize,
        mean_return: Option<f32>,
    ) {
        if let Some(Goal::TrainingReturn {
            mean_return: goal,
            window,
        }) = run.goal
            && window_len >= window
            && mean_return.is_some_and(|m| m >= goal)
        {
            self.reached(run, env_steps);
        }
    }

    /// Runs the scheduled evaluation if one is due at `env_steps`: deterministic
    /// episodes of `policy` on `env`, then [`Clock::evaluated`].
    pub(crate) fn evaluate_if_due<E, P, S>(
        &mut self,
        run: &RunConfig,
        env_steps: u64,
        env: &mut E,
        policy: &mut P,
        callback: &mut dyn Callback<S>,
    ) -> Result<()>
    where
        E: Env,
        P: Predict<Obs = E::Obs, Act = E::Act>,
    {
        let Some(schedule) = run
            .eval
            .filter(|e| env_steps >= self.last_eval_steps.saturating_add(e.every_steps))
        else {
            return Ok(());
        };
        let report = evaluate_each(env, policy, &run.eval_config(&schedule), |r, l| {
            callback.on_episode(&EpisodeEnd {
                kind: EpisodeKind::Eval,
                episode_return: r,
                length: l,
                env_steps,
                wall_s: self.elapsed(),
            });
        })?;
        self.evaluated(run, env_steps, report, callback);
        Ok(())
    }

    /// Hands the training episodes `stats` kept to `callback` (and forgets them):
    /// `steps_before` is the run's env steps when the collector started counting its
    /// frames, `env_steps` the run's now.
    pub(crate) fn report_episodes<S>(
        &self,
        stats: &mut EpisodeStats,
        steps_before: u64,
        env_steps: u64,
        callback: &mut dyn Callback<S>,
    ) {
        let wall_s = self.elapsed();
        for ended in stats.drain_ended() {
            callback.on_episode(&EpisodeEnd {
                kind: EpisodeKind::Train,
                episode_return: f64::from(ended.episode_return),
                length: u64::from(ended.length),
                env_steps: ended
                    .frames
                    .map_or(env_steps, |f| steps_before.saturating_add(f)),
                wall_s,
            });
        }
    }

    /// Records an evaluation; checks an evaluation goal and the callback's answer.
    fn evaluated<S>(
        &mut self,
        run: &RunConfig,
        env_steps: u64,
        report: EvalReport,
        callback: &mut dyn Callback<S>,
    ) {
        self.last_eval_steps = env_steps;
        self.last_eval = Some(report);
        self.evaluated_since_save = true;
        if self.best_eval.is_none_or(|best| report.mean_return > best) {
            self.best_eval = Some(report.mean_return);
            self.new_best = true;
        }
        if callback.on_eval(env_steps, &report) == Control::Stop {
            self.stop.get_or_insert(StopReason::Callback);
        }
        if let Some(Goal::EvalReturn { mean_return }) = run.goal
            && report.mean_return >= f64::from(mean_return)
        {
            self.reached(run, env_steps);
        }
    }

    /// Whether a scheduled save is due at `env_steps`: `every_steps` env steps or
    /// `every_minutes` minutes since the last one, or an evaluation since (`at_eval`).
    pub(crate) fn save_due(&self, run: &RunConfig, env_steps: u64) -> bool {
        let Some(schedule) = run.checkpoint.as_ref() else {
            return false;
        };
        let steps = schedule
            .every_steps
            .is_some_and(|every| env_steps >= self.last_save_steps.saturating_add(every));
        let minutes = schedule
            .every_minutes
            .is_some_and(|m| self.last_save_at.elapsed().as_secs_f64() >= m * 60.0);
        steps || minutes || (schedule.at_eval && self.evaluated_since_save)
    }

    pub(crate) fn saved(&mut self, env_steps: u64) {
        self.last_save_steps = env_steps;
        self.last_save_at = Instant::now();
        self.evaluated_since_save = false;
    }

    /// The state of the run after an iteration, for [`Callback::on_progress`].
    pub(crate) fn progress<'a, S>(
        &self,
        env_steps: u64,
        updates: u64,
        episodes: &EpisodeStats,
        stats: Option<&'a S>,
    ) -> Progress<'a, S> {
        Progress {
            env_steps,
            updates,
            episodes: episodes.episodes(),
            mean_return: episodes.mean_return(),
            mean_length: episodes.mean_length(),
            window: episodes.window_len(),
            wall_s: self.elapsed(),
            steps_per_s: self.steps_per_s(env_steps),
            rss_bytes: ProcessMemory::read().ok().map(|m| m.rss_bytes),
            stats,
        }
    }

    /// Reports an iteration to `callback`; a [`Control::Stop`] ends the run.
    pub(crate) fn report<S>(&mut self, callback: &mut dyn Callback<S>, progress: &Progress<'_, S>) {
        if callback.on_progress(progress) == Control::Stop {
            self.stop.get_or_insert(StopReason::Callback);
        }
    }

    /// The summary at the end of `train`: `episodes` are the collector's statistics,
    /// of which `episodes_before` ended before this `train` call.
    pub(crate) fn summary(
        &self,
        env_steps: u64,
        updates: u64,
        episodes: &EpisodeStats,
        episodes_before: u64,
        planned_bytes: u64,
    ) -> TrainSummary {
        let (mean_return, window) = (episodes.mean_return(), episodes.window_len());
        let total_episodes = episodes.episodes();
        let episodes = total_episodes - episodes_before;
        let total_wall_s = self.elapsed();
        let (at_steps, at_s) = self.solved_at.unwrap_or((env_steps, total_wall_s));
        TrainSummary {
            solved: self.solved_at.is_some(),
            env_steps: at_steps,
            wall_s: at_s,
            total_env_steps: env_steps,
            total_wall_s,
            updates,
            mean_return,
            window,
            steps_per_s: self.steps_per_s(env_steps),
            episodes,
            total_episodes,
            last_eval: self.last_eval,
            planned_bytes,
            peak_rss_bytes: ProcessMemory::read().ok().map(|m| m.peak_rss_bytes),
            stopped_by: self.stop.unwrap_or(StopReason::Budget),
        }
    }
}
