//! The off-policy trainer: a replay buffer (in RAM or a memory-mapped file) filled by a
//! collector whose policy is the learner itself (sync) or copies of its actor in worker
//! threads (async), gradient steps on sampled batches.

mod collection;
#[cfg(test)]
mod frames_tests;
mod remote;
mod replay;

use std::path::Path;

use rl_collect::RandomAction;
use rl_core::{Env, Location, MemoryBudget, MemoryPlan};
use rl_nn::Checkpoint;
use rl_storage::{Batch, sampler::PrioritizedConfig};
use serde::{Deserialize, Serialize};

pub use self::collection::CollectorChoice;
use self::collection::{Collection, async_plan, sync_plan};
use self::remote::Remote;
pub use self::remote::{ChunkActor, ChunkCollector, ChunkConfig, ChunkSink, ChunkSource, Episode};
use self::replay::sampler_plan;
pub use self::replay::{OffPolicyReplay, REPLAY_FILE, ReplayLocation};
use super::run::{
    self, Callback, Clock, Continuation, EvalSchedule, RunConfig, RunCounters, TrainSummary,
};
use crate::eval::{EvalReport, evaluate};
use rl_algos::learner::{OffPolicyBlueprint, OffPolicyLearner};
use rl_algos::{Error, Result};

/// The learner's checkpoint inside a run directory.
const LEARNER_FILE: &str = "learner.safetensors";
/// The replay buffer's folder inside a run directory.
const REPLAY_DIR: &str = "replay";
const TRAINER: &str = "off_policy";

/// The loop settings of an off-policy run besides the run's own (budget, seed,
/// environments ...: the [`RunConfig`] the trainer takes beside it).
///
/// Serialized as a config file's `[off_policy]` table. Missing fields take
/// [`OffPolicyConfig::new`]'s values; unknown fields are refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OffPolicyConfig {
    /// Rows the replay buffer holds. Default 1 000 000.
    #[serde(default = "defaults::buffer_capacity")]
    pub buffer_capacity: usize,
    /// Where the replay rows live: RAM (default) or a memory-mapped file. In a config
    /// run by `rl train` (or `flatrl`), a relative memmap `dir` is a folder of the run
    /// directory, so every run of the config has its own file.
    #[serde(default)]
    pub replay_location: ReplayLocation,
    /// Env steps of uniformly random actions before the first update (not repeated
    /// after a resume). Default 100.
    #[serde(default = "defaults::learning_starts")]
    pub learning_starts: u64,
    /// Env steps between training phases, in steps of every environment: a phase is due
    /// every `train_freq x run.n_envs` env steps (once `learning_starts` are stored).
    /// Default 1.
    #[serde(default = "defaults::train_freq")]
    pub train_freq: u64,
    /// Gradient steps per training phase. Default 1. The sync collector delivers one
    /// phase's env steps per call; with the async collector the trainer does, after each
    /// chunk, the phases that chunk's env steps complete (so updates per env step are
    /// the same whichever collector runs).
    #[serde(default = "defaults::gradient_steps")]
    pub gradient_steps: usize,
    /// Prioritized replay (Schaul et al.): rows drawn in proportion to the learner's
    /// [`OffPolicyLearner::priorities`], with importance weights in the batch; `None`
    /// (default): uniform.
    #[serde(default)]
    pub prioritized: Option<PrioritizedConfig>,
    /// Which collector steps the environments (default [`CollectorChoice::Sync`]).
    #[serde(default)]
    pub collector: CollectorChoice,
    /// Stores each frame once (`None`, the default: whole observations and next
    /// observations). With `Some(k)` the observations are stacks of `k` frames, shape
    /// `[k, ...]`, oldest first, shifted by one frame per step (Atari's 4-frame stacks):
    /// every row stores only its newest frame, an episode's end one extra row with the
    /// final frame, and sampling rebuilds `obs` and `next_obs` from the rows before
    /// ([`rl_storage::dedup::DedupReplay::with_frame_stack`]): `2 x k` times less for
    /// the observations. The collector checks every step that the environment's stacks
    /// are what the buffer rebuilds (first frame repeated at an episode's start), and
    /// refuses anything else. Needs one environment, the sync collector, uniform
    /// sampling and a learner without history; `buffer_capacity` counts the final
    /// rows too.
    #[serde(default)]
    pub frame_stack: Option<usize>,
}

/// [`OffPolicyConfig::new`]'s values, for fields a config file leaves out.
mod defaults {
    use super::OffPolicyConfig;

    fn new() -> OffPolicyConfig {
        OffPolicyConfig::new()
    }

    pub(super) fn buffer_capacity() -> usize {
        new().buffer_capacity
    }

    pub(super) fn learning_starts() -> u64 {
        new().learning_starts
    }

    pub(super) fn train_freq() -> u64 {
        new().train_freq
    }

    pub(super) fn gradient_steps() -> usize {
        new().gradient_steps
    }
}

impl Default for OffPolicyConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl OffPolicyConfig {
    /// Stable-Baselines3's off-policy loop defaults (as for SAC): a 1 000 000-row buffer
    /// in RAM, 100 random steps, one gradient step per env step, uniform sampling, the
    /// synchronous collector.
    pub fn new() -> Self {
        Self {
            buffer_capacity: 1_000_000,
            replay_location: ReplayLocation::Ram,
            learning_starts: 100,
            train_freq: 1,
            gradient_steps: 1,
            prioritized: None,
            collector: CollectorChoice::Sync,
            frame_stack: None,
        }
    }

    /// Checks every field for a run of `n_envs` environments; the error names the first
    /// invalid one, from this table (`train_freq`, `replay_location.dir`).
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self, n_envs: usize) -> Result<()> {
        if self.buffer_capacity == 0 {
            return Err(Error::config("buffer_capacity", "is 0: use at least 1"));
        }
        if self.train_freq == 0 {
            return Err(Error::config("train_freq", "is 0: use at least 1"));
        }
        if self.gradient_steps == 0 {
            return Err(Error::config("gradient_steps", "is 0: use at least 1"));
        }
        if self
            .train_freq
            .checked_mul(n_envs as u64)
            .is_none_or(|steps| usize::try_from(steps).is_err())
        {
            return Err(Error::config(
                "train_freq",
                format!(
                    "is {}: times run.n_envs it overflows; use a smaller value",
                    self.train_freq
                ),
            ));
        }
        if let ReplayLocation::Memmap { dir } = &self.replay_location
            && dir.as_os_str().is_empty()
        {
            return Err(Error::config(
                "replay_location.dir",
                "is empty: name the folder of the replay file",
            ));
        }
        self.collector.validate(n_envs)?;
        self.validate_frames(n_envs)
    }

    /// Checks what [`OffPolicyConfig::frame_stack`] needs.
    fn validate_frames(&self, n_envs: usize) -> Result<()> {
        let Some(frames) = self.frame_stack else {
            return Ok(());
        };
        let refuse = |field: &'static str, found: String, fix: &str| {
            Err(Error::config(
                field,
                format!(
                    "{found}, but frame_stack = {frames} stores one stream of steps, one frame per row: {fix}"
                ),
            ))
        };
        if frames == 0 {
            return Err(Error::config(
                "frame_stack",
                "is 0: stack at least one frame, or leave it out to store whole observations",
            ));
        }
        if n_envs != 1 {
            return refuse(
                "run.n_envs",
                format!("is {n_envs}"),
                "train with n_envs = 1",
            );
        }
        if self.collector != CollectorChoice::Sync {
            return refuse(
                "collector",
                "is asynchronous".to_owned(),
                "use the sync collector",
            );
        }
        if self.prioritized.is_some() {
            return refuse(
                "prioritized",
                "is set".to_owned(),
                "use uniform sampling (leave prioritized out)",
            );
        }
        Ok(())
    }

    /// Env steps of one training phase: `train_freq x run.n_envs`.
    fn phase_steps(&self, run: &RunConfig) -> u64 {
        self.train_freq * run.n_envs as u64
    }
}

/// Refuses settings a learner trained on sequences cannot use: prioritized replay
/// (priorities are per row, windows span many) and the asynchronous collector (its
/// workers write chunks, so one environment's steps are not a fixed stride apart).
fn check_sequence<L: OffPolicyLearner>(learner: &L, config: &OffPolicyConfig) -> Result<()> {
    if learner.sequence().is_none() {
        return Ok(());
    }
    if config.frame_stack.is_some() {
        return Err(Error::config(
            "frame_stack",
            "is set, but a recurrent learner samples windows of rows, which a deduplicating buffer does not give: leave frame_stack out (the learner's history replaces the stack)",
        ));
    }
    if config.prioritized.is_some() {
        return Err(Error::config(
            "prioritized",
            "is set, but a recurrent learner samples windows of steps, not rows: use uniform windows (no prioritized)",
        ));
    }
    if config.collector != CollectorChoice::Sync {
        return Err(Error::config(
            "collector",
            "is asynchronous, but a recurrent learner reads windows of one environment's steps, which only the synchronous collector writes a fixed stride apart: use the sync collector",
        ));
    }
    Ok(())
}

/// Training phases due when the run's env steps go from `before` to `after`: one for
/// every multiple of `phase_steps` in `(max(before, learning_starts), after]`.
pub(super) fn phases_due(before: u64, after: u64, learning_starts: u64, phase_steps: u64) -> u64 {
    let from = before.max(learning_starts);
    if after <= from {
        0
    } else {
        after / phase_steps - from / phase_steps
    }
}

/// Off-policy training: `n_envs` environments stepped by a collector
/// ([`CollectorChoice`]: in this thread with the learner as policy, or in worker threads
/// with copies of its actor), transitions into a replay buffer ([`ReplayLocation`]: RAM
/// or a memory-mapped file), `gradient_steps` updates on sampled batches every
/// `train_freq x n_envs` env steps once `learning_starts` random steps are stored.
///
/// ```
/// use rl_train::trainer::{Goal, OffPolicyConfig, OffPolicyTrainer, RunConfig};
/// use rl_algos::sac::{Sac, SacConfig};
/// use rl_envs::Pendulum;
///
/// let run = RunConfig { goal: Some(Goal::TrainingReturn { mean_return: -200.0, window: 10 }), ..RunConfig::new(300) };
/// let sac = Sac::for_env(&Pendulum::new(0), SacConfig { hidden: vec![16, 16], batch_size: 32, ..SacConfig::sb3() }, run.seed)?;
/// let config = OffPolicyConfig { buffer_capacity: 10_000, ..OffPolicyConfig::new() };
/// let mut trainer = OffPolicyTrainer::new(Pendulum::new, sac, config, run)?;
/// println!("{}", trainer.memory_plan());
/// let summary = trainer.train(&mut ())?;
/// assert_eq!(summary.total_env_steps, 300);
/// # Ok::<(), rl_algos::Error>(())
/// ```
///
/// With worker threads and the buffer in a file (the same run, asynchronous):
///
/// ```
/// use rl_train::trainer::{CollectorChoice, OffPolicyConfig, OffPolicyTrainer, ReplayLocation, RunConfig};
/// use rl_algos::sac::{Sac, SacConfig};
/// use rl_envs::Pendulum;
///
/// let dir = tempfile::tempdir().map_err(|e| rl_algos::Error::config("tempdir", e.to_string()))?;
/// let run = RunConfig { n_envs: 4, ..RunConfig::new(320) };
/// let sac = Sac::for_env(&Pendulum::new(0), SacConfig { hidden: vec![16, 16], batch_size: 32, ..SacConfig::sb3() }, run.seed)?;
/// let config = OffPolicyConfig {
///     buffer_capacity: 10_000,
///     replay_location: ReplayLocation::Memmap { dir: dir.path().to_owned() },
///     collector: CollectorChoice::Async { workers: 2, steps_per_chunk: 8 },
///     ..OffPolicyConfig::new()
/// };
/// let mut trainer = OffPolicyTrainer::new(Pendulum::new, sac, config, run)?;
/// let summary = trainer.train(&mut ())?;
/// assert_eq!(summary.total_env_steps, 320);
/// assert_eq!(trainer.replay().len(), 320);
/// # Ok::<(), rl_algos::Error>(())
/// ```
#[derive(Debug)]
pub struct OffPolicyTrainer<E, L>
where
    E: Env,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    config: OffPolicyConfig,
    run: RunConfig,
    collection: Collection<E, L>,
    replay: OffPolicyReplay,
    batch: Batch,
    eval_env: E,
    plan: MemoryPlan,
    /// Env steps taken before this process (a resumed run), plus the collector's frames.
    steps_before: u64,
    /// Seconds of training over the run's life, as of the end of the last `train` call
    /// or save.
    wall_s: f64,
    /// How a resumed run continued its environments (`None`: a new run).
    continuation: Option<Continuation>,
    last_eval_steps: u64,
    best_eval: Option<f64>,
    last_stats: Option<L::Stats>,
    /// The threads the learner's products are split across (`run.threads` above 1).
    pool: Option<std::sync::Arc<rl_nn::Pool>>,
}

/// The plan of everything but the collector: replay buffer, sampler, batch, learner.
fn base_plan(
    learner: &OffPolicyBlueprint,
    config: &OffPolicyConfig,
    run: &RunConfig,
) -> Result<MemoryPlan> {
    let schema = &learner.replay_schema;
    let mut plan = MemoryPlan::new();
    plan.nest("replay", &OffPolicyReplay::plan(schema, config)?);
    plan.nest(
        "replay",
        &OffPolicyReplay::mapped_plan(schema, config, run, learner.batch_size)?,
    );
    plan.nest("sampler", &sampler_plan(config));
    plan.nest("batch", &Batch::plan(schema, learner.batch_size)?);
    plan.nest("learner", &learner.learner);
    // Per-environment acting state (a recurrent learner's): the training
    // environments' and the evaluation's own (one row, deterministic: never shared).
    plan.nest("learner", &learner.acting_plan(run.n_envs));
    plan.nest("learner/evaluation", &learner.acting_plan(1));
    run::plan_kept_episodes(&mut plan);
    Ok(plan)
}

impl<E, L> OffPolicyTrainer<E, L>
where
    E: Env + Send + 'static,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    /// The whole run's memory plan for a learner of `learner` (its blueprint, from its
    /// configuration and spaces: `Dqn::blueprint` ..., or a built learner's
    /// [`OffPolicyLearner::blueprint`]) under `config` and `run`, from the configuration
    /// alone (nothing built or allocated): replay buffer (`Ram` lines, or `File` lines
    /// for a memmap location), sampler, batch, learner and, for the asynchronous
    /// collector, its chunk pool, workers' buffers and actor copies
    /// (`rl_collect::AsyncCollector::plan`: the figures
    /// [`OffPolicyTrainer::memory_plan`] reports once it exists). This is what a new run
    /// checks against `run.budget`.
    ///
    /// # Errors
    /// An invalid schema or capacity.
    pub fn plan(
        learner: &OffPolicyBlueprint,
        config: &OffPolicyConfig,
        run: &RunConfig,
    ) -> Result<MemoryPlan> {
        let schema = &learner.replay_schema;
        let mut plan = base_plan(learner, config, run)?;
        let collector = match config.collector {
            CollectorChoice::Async {
                workers,
                steps_per_chunk,
            } => async_plan::<E, L>(learner, config, run, workers, steps_per_chunk)?,
            CollectorChoice::Sync => sync_plan::<E, L>(schema, run),
        };
        plan.nest("collector", &collector);
        Ok(plan)
    }

    /// A new run: `make_env(seed)` builds each training environment and the evaluation
    /// environment; `run` holds the budget, seed, environments, goal, evaluation,
    /// checkpoints and memory budget. The configuration is checked first, then the plan
    /// against `run.budget`, before the replay buffer, the collector or any environment
    /// exists.
    ///
    /// # Errors
    /// An invalid configuration ([`Error::Config`] naming the field), a plan over the
    /// budget, a memmap location whose file exists, environments that do not fit the
    /// learner.
    pub fn new(
        make_env: impl FnMut(u64) -> E,
        learner: L,
        config: OffPolicyConfig,
        run: RunConfig,
    ) -> Result<Self> {
        Self::build(make_env, learner, config, run, None, None)
    }

    /// A new run whose transitions come from `source` (collectors in other processes or
    /// on other machines, [`ChunkCollector`]s): each collection writes the source's next
    /// chunk; after every training phase the learner's checkpoint goes to the source
    /// with a new version (version 0, the learner as built, before the first chunk).
    /// `make_env` builds only the evaluation environment. `config.collector` must be
    /// the default (sync): the source replaces it; `learning_starts` counts the
    /// source's rows (the collectors act at random for their share of it).
    ///
    /// # Errors
    /// As [`OffPolicyTrainer::new`]; an asynchronous `collector`, a learner trained on
    /// sequences (windows need one environment's steps a fixed stride apart).
    pub fn with_source(
        make_env: impl FnMut(u64) -> E,
        learner: L,
        config: OffPolicyConfig,
        run: RunConfig,
        source: Box<dyn ChunkSource>,
    ) -> Result<Self> {
        if config.collector != CollectorChoice::Sync {
            return Err(Error::config(
                "collector",
                "is asynchronous, but a remote source delivers the chunks: leave collector out",
            ));
        }
        if learner.sequence().is_some() {
            return Err(Error::config(
                "algo",
                "is a recurrent learner, which reads windows of one environment's steps; remote chunks interleave collectors: train it with the sync collector",
            ));
        }
        if config.frame_stack.is_some() {
            return Err(Error::config(
                "frame_stack",
                "is set, but remote chunks are whole rows of many collectors' steps: leave frame_stack out",
            ));
        }
        Self::build(make_env, learner, config, run, None, Some(source))
    }

    /// Continues the run saved in `dir` (by [`OffPolicyTrainer::save`] or a checkpoint
    /// schedule): learner, replay buffer and counters. `learner` must be built as the
    /// saved one was, `run` must keep the seed and the number of environments, `config`
    /// the buffer's capacity and location (a memmap-located buffer is reopened in place);
    /// the collector may differ. Everything is checked before anything is loaded into
    /// the trainer.
    ///
    /// A run resumed from a synchronous save of environments that save their state
    /// ([`Env::save_state`]) and a learner without per-environment acting state (not a
    /// recurrent one) continues exactly, bit for bit, as if it never stopped: the
    /// environments are restored mid-episode ([`Continuation::Exact`]). Otherwise the
    /// environments start new episodes ([`Continuation::EpisodesRestart`]); with the
    /// asynchronous collector the chunks workers had filled but the trainer had not
    /// written are not in the save either, so the run continues equivalently, not
    /// identically. The episode statistics (counts, return window) continue in both
    /// cases.
    ///
    /// # Errors
    /// A directory of another run ([`Error::CheckpointMismatch`]), missing or corrupt
    /// files, a locked or changed memmap file, and the errors of
    /// [`OffPolicyTrainer::new`].
    pub fn resume(
        dir: &Path,
        make_env: impl FnMut(u64) -> E,
        mut learner: L,
        config: OffPolicyConfig,
        run: RunConfig,
    ) -> Result<Self> {
        run.validate()?;
        config.validate(run.n_envs)?;
        let counters = RunCounters::load(dir)?;
        counters.check(TRAINER, learner.kind(), &run)?;
        let saved = Checkpoint::<L::Saved>::load(dir.join(LEARNER_FILE), learner.kind())?;
        learner.restore(&saved)?;
        Self::build(make_env, learner, config, run, Some((dir, counters)), None)
    }

    fn build(
        mut make_env: impl FnMut(u64) -> E,
        mut learner: L,
        config: OffPolicyConfig,
        run: RunConfig,
        resume: Option<(&Path, RunCounters)>,
        source: Option<Box<dyn ChunkSource>>,
    ) -> Result<Self> {
        run.validate()?;
        config.validate(run.n_envs)?;
        check_sequence(&learner, &config)?;
        let schema = learner.replay_schema()?;
        let checked = match &source {
            None => Self::plan(learner.blueprint(), &config, &run)?,
            Some(source) => {
                let mut plan = base_plan(learner.blueprint(), &config, &run)?;
                plan.nest("collector", &source.memory_plan(&schema));
                plan
            }
        };
        if let Some(budget) = &run.budget {
            checked.check(budget)?;
        }
        let pool = run::start_pool(&mut learner, run.threads)?;
        let created = resume.is_none();
        let resume_dir = resume.as_ref().map(|(dir, _)| dir.to_path_buf());
        let (mut replay, steps_before, wall_s, last_eval_steps, best_eval) = match resume {
            None => {
                OffPolicyReplay::check_new(&config)?;
                let budget = run.budget.unwrap_or_else(MemoryBudget::unlimited);
                let sequence = learner.sequence();
                (
                    OffPolicyReplay::create(&schema, &config, &run, sequence, &budget)?,
                    0,
                    0.0,
                    0,
                    None,
                )
            }
            Some((dir, counters)) => (
                OffPolicyReplay::load(
                    &dir.join(REPLAY_DIR),
                    &schema,
                    &config,
                    &run,
                    learner.sequence(),
                )?,
                counters.env_steps,
                counters.wall_s,
                counters.last_eval_steps,
                counters.best_eval_return,
            ),
        };
        let rest = (|| {
            let mut collection = match source {
                None => {
                    let envs: Vec<E> = (0..run.n_envs).map(|i| make_env(run.env_seed(i))).collect();
                    Collection::new(envs, learner, &config, &run, steps_before)?
                }
                Some(source) => {
                    Collection::Remote(Remote::new(learner, source, run.window(), steps_before)?)
                }
            };
            collection.stats_mut().keep_ended(run::KEPT_EPISODES);
            let continuation = match &resume_dir {
                None => None,
                Some(dir) => Some(match run::read_collector(dir)? {
                    Some(saved) if collection.restore(&saved)? => Continuation::Exact,
                    _ => Continuation::EpisodesRestart,
                }),
            };
            let mut eval_env = make_env(run.seed.wrapping_mul(1000).wrapping_add(500));
            eval_env.set_evaluation(true);
            let mut plan = base_plan(collection.learner().blueprint(), &config, &run)?;
            plan.nest("collector", &collection.memory_plan());
            if let Some(budget) = &run.budget {
                plan.check(budget)?;
            }
            if continuation == Some(Continuation::EpisodesRestart) {
                // The interrupted episode's stream ends where the save left it.
                replay.close_stream()?;
            }
            Ok((eval_env, collection, plan, continuation))
        })();
        let (eval_env, collection, plan, continuation) = match rest {
            Ok(built) => built,
            Err(error) => {
                if created {
                    // A new run that failed leaves no replay file behind to refuse the
                    // next attempt.
                    replay.discard();
                }
                return Err(error);
            }
        };
        let batch = Batch::new(replay.batch_schema(), collection.learner().batch_size())?;
        Ok(Self {
            config,
            run,
            collection,
            replay,
            batch,
            eval_env,
            plan,
            steps_before,
            wall_s,
            continuation,
            last_eval_steps,
            best_eval,
            last_stats: None,
            pool,
        })
    }
}

impl<E, L> OffPolicyTrainer<E, L>
where
    E: Env,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    /// The whole run's memory plan (replay, sampler, batch, learner, collector with,
    /// when asynchronous, its actor copies).
    pub fn memory_plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// The learner (with the sync collector, also the collector's policy).
    pub fn learner(&self) -> &L {
        self.collection.learner()
    }

    /// The learner, mutably (to evaluate or predict between `train` calls).
    pub fn learner_mut(&mut self) -> &mut L {
        self.collection.learner_mut()
    }

    /// The replay buffer.
    pub fn replay(&self) -> &OffPolicyReplay {
        &self.replay
    }

    /// The off-policy loop's settings.
    pub fn config(&self) -> &OffPolicyConfig {
        &self.config
    }

    /// The run's settings.
    pub fn run_config(&self) -> &RunConfig {
        &self.run
    }

    /// The pool of `run.threads` threads the learner's large products are split across
    /// (`None` for one thread), started once when the trainer was built.
    pub fn pool(&self) -> Option<&std::sync::Arc<rl_nn::Pool>> {
        self.pool.as_ref()
    }

    /// The version of the weights the asynchronous collector's workers were last given
    /// (one per training phase; 0 before the first, and always 0 with the sync
    /// collector, whose policy is the learner).
    pub fn policy_version(&self) -> u64 {
        self.collection.version()
    }

    /// Runs `episodes` deterministic episodes on the evaluation environment: the
    /// episodes a scheduled evaluation of that many episodes runs, so a policy that
    /// did not change scores the same.
    ///
    /// # Errors
    /// `episodes == 0`; environment and policy errors.
    pub fn evaluate(&mut self, episodes: usize) -> Result<EvalReport> {
        let mut schedule = self.run.eval.unwrap_or(EvalSchedule::new(1, episodes));
        schedule.episodes = episodes;
        let config = self.run.eval_config(&schedule);
        evaluate(&mut self.eval_env, self.collection.learner_mut(), &config)
    }

    /// How this resumed run continued its environments (`None`: a new run).
    pub fn continuation(&self) -> Option<Continuation> {
        self.continuation
    }

    /// Env steps over the run's life: those in the replay buffer's writes (with the
    /// async collector, steps workers took for chunks not yet written are not counted).
    pub fn env_steps(&self) -> u64 {
        self.steps_before + self.collection.frames()
    }

    /// Runs until the goal, the budget or a callback stops it.
    ///
    /// # Errors
    /// Environment, policy, storage and learner errors ([`Error::Diverged`] ...); the
    /// trainer keeps what it had done before the error.
    pub fn train(&mut self, callback: &mut dyn Callback<L::Stats>) -> Result<TrainSummary> {
        let run = self.run.clone();
        let mut clock = Clock::start(
            self.env_steps(),
            self.wall_s,
            self.last_eval_steps,
            self.best_eval,
        );
        let episodes_before = self.collection.stats().episodes();
        while self.env_steps() < run.total_steps && clock.stop.is_none() {
            let before = self.env_steps();
            self.collection.collect(&mut self.replay, before)?;
            let steps = self.env_steps();
            let stats = self.collection.stats_mut();
            clock.report_episodes(stats, self.steps_before, steps, callback);
            let stats = self.collection.stats();
            clock.check_training_goal(&run, steps, stats.window_len(), stats.mean_return());
            let phases = phases_due(
                before,
                steps,
                self.config.learning_starts,
                self.config.phase_steps(&run),
            );
            for _ in 0..phases {
                for _ in 0..self.config.gradient_steps {
                    self.gradient_step()?;
                }
            }
            if phases > 0 {
                self.collection.publish(steps)?;
            }
            clock.evaluate_if_due(
                &run,
                steps,
                &mut self.eval_env,
                self.collection.learner_mut(),
                callback,
            )?;
            if let Some(best) = clock.take_new_best(&run) {
                self.best_eval = clock.best_eval;
                self.wall_s = clock.elapsed();
                self.save_best(&best)?;
            }
            if clock.save_due(&run, steps) {
                self.save_scheduled(&mut clock, callback)?;
            }
            let progress = clock.progress(
                self.env_steps(),
                self.learner().updates(),
                self.collection.stats(),
                self.last_stats.as_ref(),
            );
            clock.report(callback, &progress);
        }
        self.last_eval_steps = clock.last_eval_steps;
        self.wall_s = clock.elapsed();
        if run.checkpoint.is_some() {
            self.save_scheduled(&mut clock, callback)?;
        }
        Ok(clock.summary(
            self.env_steps(),
            self.learner().updates(),
            self.collection.stats(),
            episodes_before,
            self.plan.total(Location::Ram),
        ))
    }

    fn gradient_step(&mut self) -> Result<()> {
        self.replay.sample(&mut self.batch)?;
        let learner = self.collection.learner_mut();
        self.last_stats = Some(learner.update(&self.batch)?);
        if let Some(priorities) = learner.priorities() {
            self.replay
                .update_priorities(self.batch.positions(), priorities)?;
        }
        self.replay.bound_mapped()
    }

    fn save_scheduled(
        &mut self,
        clock: &mut Clock,
        callback: &mut dyn Callback<L::Stats>,
    ) -> Result<()> {
        let steps = self.env_steps();
        self.last_eval_steps = clock.last_eval_steps;
        self.best_eval = clock.best_eval;
        self.wall_s = clock.elapsed();
        if let Some(schedule) = self.run.checkpoint.clone() {
            self.save(&schedule.dir)?;
            clock.saved(steps);
            callback.on_checkpoint(steps, &schedule.dir);
        }
        Ok(())
    }

    /// Saves the run into `dir` (learner, replay buffer, collector state, counters),
    /// replacing what was there only once the new directory is whole and synced to
    /// disk. A RAM buffer's rows are written into `dir/replay/`; a memmap buffer is
    /// committed in place and `dir/replay/` records its file.
    ///
    /// # Errors
    /// I/O errors.
    pub fn save(&mut self, dir: &Path) -> Result<()> {
        let counters = self.counters();
        let collector = self.collection.saved();
        let observation = self.collection.observation_bytes();
        let (learner, replay) = (self.collection.learner(), &mut self.replay);
        run::save_dir(dir, |partial| {
            learner.checkpoint().save(partial.join(LEARNER_FILE))?;
            replay.save(&partial.join(REPLAY_DIR), observation)?;
            run::write_collector(partial, &collector)?;
            run::write_counters(partial, &counters)
        })
    }

    /// Saves the learner and the counters, without the replay buffer, into `dir` (a
    /// best checkpoint: enough to evaluate or export the learner, not to resume).
    fn save_best(&mut self, dir: &Path) -> Result<()> {
        let counters = self.counters();
        let learner = self.collection.learner();
        run::save_dir(dir, |partial| {
            learner.checkpoint().save(partial.join(LEARNER_FILE))?;
            run::write_counters(partial, &counters)
        })
    }

    fn counters(&self) -> RunCounters {
        RunCounters {
            trainer: TRAINER.to_owned(),
            learner: self.learner().kind().to_owned(),
            env_steps: self.env_steps(),
            wall_s: self.wall_s,
            updates: self.learner().updates(),
            last_eval_steps: self.last_eval_steps,
            run: self.run.clone(),
            best_eval_return: self.best_eval,
        }
    }
}
