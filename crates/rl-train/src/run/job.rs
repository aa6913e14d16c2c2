//! One job (train or resume, evaluate, act for a remote run) on a trainer built for a
//! concrete environment and learner, and the plan of a run from its learner's blueprint
//! alone (nothing built): the generic half of the command.

use std::path::Path;

use crate::eval::{EvalConfig, EvalReport, evaluate};
use crate::trainer::{
    ChunkActor, ChunkCollector, ChunkConfig, ChunkSource, Continuation, Goal, OffPolicyConfig,
    OffPolicyLearner, OffPolicyReplay, OffPolicyTrainer, OnPolicyLearner, OnPolicyTrainer,
    ReplayLocation, RunConfig, TrainSummary,
};
use rl_algos::learner::{OffPolicyBlueprint, OnPolicyBlueprint};
use rl_collect::{RandomAction, ValuePolicy};
use rl_core::{Column, DType, Env, Field, MemoryPlan, Schema, Space};
use rl_nn::Checkpoint;
use rl_storage::Batch;

use super::monitor::Monitor;
use super::registry::action_space;
use super::rundir::{self, CHECKPOINT_DIR, LEARNER_FILE};
use super::{Error, Result, TrainOptions, Trained};
use crate::agent::{Loadable, Loaded};
use crate::config::{Config, ConfigError, StoredActions};

/// Restores `learner` from the checkpoint folder `dir` (the trainers' layout).
fn restore<L: rl_algos::learner::Learner>(learner: &mut L, dir: &Path) -> Result<()> {
    let checkpoint = Checkpoint::<L::Saved>::load(dir.join(LEARNER_FILE), learner.kind())?;
    learner.restore(&checkpoint)?;
    Ok(())
}

/// What [`Job::Load`] gives for `acting`, with the sizes of `make`'s environment.
fn loaded<E: Env, F: Fn(u64) -> E>(
    make: F,
    config: &Config,
    acting: Box<dyn crate::agent::Acting>,
) -> Outcome {
    let env = make(config.run.seed);
    Outcome::Agent(Box::new(Loaded {
        acting,
        obs_len: env.observation_space().flat_len(),
        actions: action_space(env.action_space()),
    }))
}

/// What to do with the trainer a config describes.
pub(crate) enum Job<'a> {
    /// Train into the run directory (`true`: resume it from its checkpoint); the last
    /// field is the process's resident memory before the trainer was built.
    Train(&'a Path, &'a TrainOptions, bool, Option<u64>),
    /// Evaluate the learner saved in a checkpoint folder.
    Eval {
        /// The checkpoint folder (`RUN/checkpoint` or `RUN/best`).
        dir: &'a Path,
        /// Episodes.
        episodes: usize,
        /// Reset seed of the first episode.
        seed: u64,
    },
    /// Train into the new run directory from the chunks of a remote source (and the
    /// process's resident memory before the run).
    Remote(
        &'a Path,
        &'a TrainOptions,
        Box<dyn ChunkSource>,
        Option<u64>,
    ),
    /// A collector for a remote run: `run.n_envs` environments, reset from
    /// `ChunkConfig::seed`.
    Actor(ChunkConfig),
    /// Restore the learner saved in a checkpoint folder (as [`Job::Eval`] does) for an
    /// [`Agent`](crate::agent::Agent).
    Load(&'a Path),
}

/// What a job gave.
pub(crate) enum Outcome {
    Trained(Box<Trained>),
    Eval(EvalReport),
    Actor(Box<dyn ChunkActor>),
    Agent(Box<Loaded>),
}

impl Outcome {
    pub(crate) fn trained(self) -> Result<Trained> {
        match self {
            Outcome::Trained(trained) => Ok(*trained),
            _ => Err(Error::Usage("train: the job gave no run".into())),
        }
    }
}

/// The loop settings a plan reads: the config's, without the checkpoint schedule (the
/// run directory names its folder, and saving plans no memory).
fn plan_run(config: &Config) -> RunConfig {
    RunConfig {
        checkpoint: None,
        ..config.run.clone()
    }
}

/// The evaluation settings of `rl eval`: the scheduled evaluations' episode cap.
fn eval_config(run: &RunConfig, episodes: usize, seed: u64) -> EvalConfig {
    EvalConfig {
        episodes,
        seed,
        max_episode_steps: run
            .eval
            .map_or(EvalConfig::default().max_episode_steps, |e| {
                e.max_episode_steps
            }),
    }
}

/// The evaluation the result reports: the one that reached an evaluation goal, or a new
/// one of the policy as it ended (none without `run.eval`).
fn final_eval(
    run: &RunConfig,
    summary: &TrainSummary,
    evaluate: impl FnOnce(usize) -> rl_algos::Result<EvalReport>,
) -> Result<Option<EvalReport>> {
    let Some(schedule) = run.eval else {
        return Ok(None);
    };
    if summary.solved && matches!(run.goal, Some(Goal::EvalReturn { .. })) {
        return Ok(summary.last_eval);
    }
    Ok(Some(evaluate(schedule.episodes)?))
}

/// The whole run's plan of an on-policy learner `L` of blueprint `learner` (from its
/// configuration and spaces) on environments like `env`. Takes no learner: nothing is
/// built, the types only say what would be.
pub(crate) fn on_policy_plan<E, L>(
    env: &E,
    learner: &OnPolicyBlueprint,
    config: &Config,
) -> Result<MemoryPlan>
where
    E: Env,
    E::Act: RandomAction,
    L: OnPolicyLearner<Policy: ValuePolicy<Obs = E::Obs, Act = E::Act>>,
{
    Ok(OnPolicyTrainer::<E, L>::plan(
        env,
        learner,
        &plan_run(config),
    )?)
}

/// The whole run's plan of an off-policy learner `L` of blueprint `learner` (from its
/// configuration and spaces) on environments like `env`, actions stored as the config
/// says. Takes no learner: nothing is built, the types only say what would be.
pub(crate) fn off_policy_plan<E, L>(
    env: &E,
    learner: &OffPolicyBlueprint,
    config: &Config,
) -> Result<MemoryPlan>
where
    E: Env + Send + 'static,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    let off = config
        .off_policy
        .as_ref()
        .ok_or_else(|| Error::Usage(format!("the config of algo {} is incomplete", config.algo)))?;
    match config.stored_actions {
        StoredActions::Index => Ok(OffPolicyTrainer::<E, L>::plan(
            learner,
            off,
            &plan_run(config),
        )?),
        StoredActions::OneHot => one_hot_plan::<E, L>(env, learner, off, &plan_run(config)),
    }
}

/// A job on the on-policy trainer of `learner` (PPO, recurrent PPO).
pub(crate) fn on_policy<E, L, F>(
    make: F,
    mut learner: L,
    config: &Config,
    job: Job<'_>,
) -> Result<Outcome>
where
    E: Env,
    E::Act: RandomAction,
    L: OnPolicyLearner<Policy: ValuePolicy<Obs = E::Obs, Act = E::Act> + Loadable>,
    F: Fn(u64) -> E,
{
    match job {
        Job::Train(dir, options, resume, before) => {
            let run = rundir::run_config(dir, config);
            let envs = EnvMemory::default();
            let make = envs.measuring(make);
            let mut trainer = if resume {
                let trainer =
                    OnPolicyTrainer::resume(&dir.join(CHECKPOINT_DIR), make, learner, run)?;
                rundir::accept_resume(dir, config, trainer.env_steps())?;
                release_freed_heap();
                note_continuation(trainer.continuation(), options);
                trainer
            } else {
                OnPolicyTrainer::new(make, learner, run)?
            };
            let plan = recorded_plan(trainer.memory_plan(), before, envs.bytes());
            let mut monitor = Monitor::start(dir, config, options, &plan, trainer.env_steps())?;
            let summary = trainer.train(&mut monitor);
            let summary = monitor.finish(summary)?;
            let run = trainer.run_config().clone();
            let eval = final_eval(&run, &summary, |n| trainer.evaluate(n))?;
            let interrupted = monitor.interrupted();
            rundir::finish(dir, config, &summary, eval, plan, interrupted).map(outcome)
        }
        Job::Remote(..) | Job::Actor(_) => Err(Error::Usage(format!(
            "algo {} is on-policy: remote collection (Ray) trains the off-policy algorithms (sac, discrete_sac, dqn)",
            config.algo
        ))),
        Job::Eval {
            dir,
            episodes,
            seed,
        } => {
            restore(&mut learner, dir)?;
            let mut env = make(seed);
            env.set_evaluation(true);
            let report = evaluate(
                &mut env,
                learner.policy_mut(),
                &eval_config(&config.run, episodes, seed),
            )?;
            Ok(Outcome::Eval(report))
        }
        Job::Load(dir) => {
            restore(&mut learner, dir)?;
            let acting = learner.policy().clone().into_acting();
            Ok(loaded(make, config, acting))
        }
    }
}

/// The plan a run records (printed, `planned_bytes` in its metrics, `result.json`):
/// the trainer's, the resident memory the process held before the trainer was built
/// (the interpreter and libraries of a Python process, those the plan's probe
/// environment loaded, a few MiB for the `rl` binary), and what building the
/// environments added ([`EnvMemory`]: a Python MuJoCo environment holds about 1 MiB, the
/// first one of a process about 24 MiB with its imports), each measured then, so that
/// `planned_bytes` compares with `rss_bytes`. The budget is checked against the
/// trainer's plan alone.
fn recorded_plan(plan: &MemoryPlan, before: Option<u64>, envs: Option<u64>) -> MemoryPlan {
    let mut recorded = plan.clone();
    for (what, bytes) in [
        (
            "process before the run (measured: binary, interpreter, libraries)",
            before,
        ),
        ("environments (measured as they were built)", envs),
    ] {
        if let Some(bytes) = bytes {
            recorded.add(what, rl_core::Location::Ram, bytes);
        }
    }
    recorded
}

/// What the environments a trainer builds add to the process's resident memory: the
/// growth of the resident set across each call of the trainer's `make`, summed (an
/// environment's memory is its own, so no plan can know it before it exists).
#[derive(Debug, Default)]
struct EnvMemory {
    bytes: std::cell::Cell<Option<u64>>,
}

impl EnvMemory {
    /// `make`, measured.
    fn measuring<'a, E, F: Fn(u64) -> E + 'a>(&'a self, make: F) -> impl Fn(u64) -> E + 'a {
        move |seed| {
            let start = super::resident_now();
            let env = make(seed);
            if let (Some(start), Some(end)) = (start, super::resident_now()) {
                let grown = end.saturating_sub(start);
                self.bytes
                    .set(Some(self.bytes.get().unwrap_or(0).saturating_add(grown)));
            }
            env
        }
    }

    /// The sum so far (`None` where the resident set cannot be read).
    fn bytes(&self) -> Option<u64> {
        self.bytes.get()
    }
}

/// Says on stderr when a resumed run's environments start new episodes (it then does
/// not continue exactly as the uninterrupted run would have).
fn note_continuation(continuation: Option<Continuation>, options: &TrainOptions) {
    if continuation == Some(Continuation::EpisodesRestart) && !options.quiet {
        eprintln!(
            "note: the environments' state was not saved (an environment without Env::save_state, the async collector, or a recurrent policy), so their episodes restart here; the learner, the buffer and the counters continue"
        );
    }
}

fn outcome(trained: Trained) -> Outcome {
    Outcome::Trained(Box::new(trained))
}

/// `off` with a relative memmap replay folder inside the run directory `dir` (so that
/// every run of a config has its own replay file).
fn in_run_dir(mut off: OffPolicyConfig, dir: &Path) -> OffPolicyConfig {
    if let ReplayLocation::Memmap { dir: replay } = &mut off.replay_location
        && replay.is_relative()
    {
        *replay = dir.join(&*replay);
    }
    off
}

/// A job on the off-policy trainer of `learner` (SAC, discrete SAC, DQN).
pub(crate) fn off_policy<E, L, F>(
    make: F,
    mut learner: L,
    config: &Config,
    job: Job<'_>,
) -> Result<Outcome>
where
    E: Env + Send + 'static,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act> + Loadable + Send + 'static,
    L::Actor: Send,
    F: Fn(u64) -> E,
{
    let missing = || Error::Usage(format!("the config of algo {} is incomplete", config.algo));
    match job {
        Job::Train(dir, options, resume, before) => {
            let off = in_run_dir(config.off_policy.clone().ok_or_else(missing)?, dir);
            let run = rundir::run_config(dir, config);
            let envs = EnvMemory::default();
            let make = envs.measuring(make);
            let trainer = if resume {
                let trainer =
                    OffPolicyTrainer::resume(&dir.join(CHECKPOINT_DIR), make, learner, off, run)?;
                rundir::accept_resume(dir, config, trainer.env_steps())?;
                release_freed_heap();
                note_continuation(trainer.continuation(), options);
                trainer
            } else {
                OffPolicyTrainer::new(make, learner, off, run)?
            };
            train_off_policy(trainer, dir, options, config, (before, envs.bytes()))
        }
        Job::Remote(dir, options, source, before) => {
            let off = in_run_dir(config.off_policy.clone().ok_or_else(missing)?, dir);
            let run = rundir::run_config(dir, config);
            let envs = EnvMemory::default();
            let trainer =
                OffPolicyTrainer::with_source(envs.measuring(make), learner, off, run, source)?;
            train_off_policy(trainer, dir, options, config, (before, envs.bytes()))
        }
        Job::Actor(chunk) => {
            let envs = (0..config.run.n_envs as u64)
                .map(|i| make(chunk.seed.wrapping_add(i)))
                .collect();
            let actor = ChunkCollector::new(envs, learner, chunk)?;
            Ok(Outcome::Actor(Box::new(actor)))
        }
        Job::Eval {
            dir,
            episodes,
            seed,
        } => {
            restore(&mut learner, dir)?;
            let mut env = make(seed);
            env.set_evaluation(true);
            let report = evaluate(
                &mut env,
                &mut learner,
                &eval_config(&config.run, episodes, seed),
            )?;
            Ok(Outcome::Eval(report))
        }
        Job::Load(dir) => {
            restore(&mut learner, dir)?;
            Ok(loaded(make, config, learner.into_acting()))
        }
    }
}

/// Trains `trainer` into the run directory `dir`: monitor, metrics, checkpoints, result.
fn train_off_policy<E, L>(
    mut trainer: OffPolicyTrainer<E, L>,
    dir: &Path,
    options: &TrainOptions,
    config: &Config,
    (before, envs): (Option<u64>, Option<u64>),
) -> Result<Outcome>
where
    E: Env + Send + 'static,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    let plan = recorded_plan(trainer.memory_plan(), before, envs);
    let mut monitor = Monitor::start(dir, config, options, &plan, trainer.env_steps())?;
    let summary = trainer.train(&mut monitor);
    let summary = monitor.finish(summary)?;
    let run = trainer.run_config().clone();
    let eval = final_eval(&run, &summary, |n| trainer.evaluate(n))?;
    let interrupted = monitor.interrupted();
    rundir::finish(dir, config, &summary, eval, plan, interrupted).map(outcome)
}

/// The plan of `off` with actions stored one-hot (a float per possible action) instead
/// of as indices: replay and batch lines for that layout, every other line as the
/// trainer plans it.
fn one_hot_plan<E, L>(
    env: &E,
    learner: &OffPolicyBlueprint,
    off: &OffPolicyConfig,
    run: &RunConfig,
) -> Result<MemoryPlan>
where
    E: Env + Send + 'static,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    let Space::Discrete { n } = *env.action_space() else {
        return Err(ConfigError::new(
            "stored_actions",
            "is \"one_hot\", which needs discrete actions: leave it out",
        )
        .into());
    };
    let schema = &learner.replay_schema;
    let action = Field::Action.name();
    let one_hot = Schema::new(schema.columns().iter().map(|c| {
        if c.name() == action {
            Column::new(action, DType::F32, &[n as usize])
        } else {
            c.clone()
        }
    }))
    .map_err(rl_algos::Error::from)?;
    let index = OffPolicyTrainer::<E, L>::plan(learner, off, run)?;
    let mut plan = MemoryPlan::new();
    plan.nest("replay", &OffPolicyReplay::plan(&one_hot, off)?);
    plan.nest(
        "replay",
        &OffPolicyReplay::mapped_plan(&one_hot, off, run, learner.batch_size)?,
    );
    plan.nest(
        "batch",
        &Batch::plan(&one_hot, learner.batch_size).map_err(rl_algos::Error::from)?,
    );
    for line in index.lines() {
        if !(line.component.starts_with("replay/") || line.component.starts_with("batch/")) {
            plan.add(line.component.clone(), line.location, line.bytes);
        }
    }
    Ok(plan)
}

/// Hands the pages of freed heap memory back to the system, after a resume. glibc keeps
/// them: once a large buffer has been freed, its mmap threshold rises, so a resume's
/// transient buffers (the learner checkpoint read whole, its parsed tensors) come from the
/// heap and stay resident after they are freed: a resumed `td3_halfcheetah` run held
/// 261.5 MiB against a 240.3 MiB plan without this, 251.4 against 241.4 with it (the
/// same run fresh: 245.2). Nothing to do elsewhere.
#[allow(
    unsafe_code,
    reason = "a call into glibc's allocator (malloc_trim), which takes no pointers"
)]
fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only returns free heap pages to the kernel; it reads no
    // caller memory and takes glibc's allocator locks itself.
    unsafe {
        libc::malloc_trim(0);
    }
}
