//! The off-policy trainer: a replay buffer filled by a collector whose policy is the
//! learner itself, gradient steps on sampled batches.

use std::path::Path;

use rl_collect::{CollectorConfig, RandomAction, SyncCollector};
use rl_core::{Env, Location, MemoryBudget, MemoryPlan};
use rl_nn::Checkpoint;
use rl_storage::{
    Batch,
    ram::RamStorage,
    replay::ReplayBuffer,
    sampler::{Prioritized, PrioritizedConfig, SampleContext, Sampler, Uniform},
    storage::RingState,
};

use super::learner::OffPolicyLearner;
use super::run::{self, Callback, Clock, EvalSchedule, RunConfig, RunCounters, TrainSummary};
use crate::error::{Error, Result};
use crate::eval::{EvalReport, evaluate};

/// The learner's checkpoint inside a run directory.
const LEARNER_FILE: &str = "learner.safetensors";
/// The replay buffer's folder inside a run directory.
const REPLAY_DIR: &str = "replay";
const TRAINER: &str = "off_policy";

/// The loop settings of an off-policy run.
#[derive(Clone, Debug, PartialEq)]
pub struct OffPolicyConfig {
    /// Budget, seed, environments, goal, evaluation, checkpoints, memory budget.
    pub run: RunConfig,
    /// Rows the replay buffer holds (in RAM). Default 1 000 000.
    pub buffer_capacity: usize,
    /// Env steps of uniformly random actions before the first update (not repeated
    /// after a resume). Default 100.
    pub learning_starts: u64,
    /// Collector steps (each steps every environment once) between training phases.
    /// Default 1.
    pub train_freq: u64,
    /// Gradient steps per training phase. Default 1.
    pub gradient_steps: usize,
    /// Prioritized replay (Schaul et al.): rows drawn in proportion to the learner's
    /// [`OffPolicyLearner::priorities`], with importance weights in the batch; `None`
    /// (default): uniform.
    pub prioritized: Option<PrioritizedConfig>,
}

impl OffPolicyConfig {
    /// Stable-Baselines3's off-policy loop defaults (as for SAC): a 1 000 000-row buffer,
    /// 100 random steps, one gradient step per env step, uniform sampling.
    pub fn new(run: RunConfig) -> Self {
        Self {
            run,
            buffer_capacity: 1_000_000,
            learning_starts: 100,
            train_freq: 1,
            gradient_steps: 1,
            prioritized: None,
        }
    }

    /// Checks every field; the error names the first invalid one.
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<()> {
        self.run.validate()?;
        if self.buffer_capacity == 0 {
            return Err(Error::config("buffer_capacity", "is 0: use at least 1"));
        }
        if self.train_freq == 0 {
            return Err(Error::config("train_freq", "is 0: use at least 1"));
        }
        if self.gradient_steps == 0 {
            return Err(Error::config("gradient_steps", "is 0: use at least 1"));
        }
        Ok(())
    }
}

/// Uniform or prioritized sampling, chosen by the configuration.
#[derive(Debug)]
enum ReplaySampler {
    Uniform(Uniform),
    Prioritized(Box<Prioritized>),
}

impl Sampler for ReplaySampler {
    fn sample(
        &mut self,
        context: &SampleContext<'_>,
        rows: usize,
        indices: &mut [usize],
        weights: &mut [f32],
    ) -> rl_storage::Result<usize> {
        match self {
            Self::Uniform(s) => s.sample(context, rows, indices, weights),
            Self::Prioritized(s) => s.sample(context, rows, indices, weights),
        }
    }

    fn rows_written(&mut self, before: &RingState, rows: usize, capacity: usize) {
        match self {
            Self::Uniform(s) => s.rows_written(before, rows, capacity),
            Self::Prioritized(s) => s.rows_written(before, rows, capacity),
        }
    }

    fn memory_plan(&self) -> MemoryPlan {
        match self {
            Self::Uniform(s) => s.memory_plan(),
            Self::Prioritized(s) => s.memory_plan(),
        }
    }
}

impl ReplaySampler {
    fn new(config: &OffPolicyConfig) -> Result<Self> {
        Ok(match config.prioritized {
            None => Self::Uniform(Uniform::new(config.run.seed)),
            Some(p) => Self::Prioritized(Box::new(Prioritized::new(
                config.buffer_capacity,
                p,
                config.run.seed,
            )?)),
        })
    }

    /// What the sampler holds, from the configuration alone.
    fn plan(config: &OffPolicyConfig) -> MemoryPlan {
        match config.prioritized {
            None => MemoryPlan::new(),
            // Two trees (sum, min) of f64 over the next power of two of the capacity.
            Some(_) => MemoryPlan::new().with(
                "sum and min trees",
                Location::Ram,
                (2 * 2 * config.buffer_capacity.next_power_of_two() * size_of::<f64>()) as u64,
            ),
        }
    }
}

/// Off-policy training: `n_envs` environments stepped by a collector whose policy is the
/// learner, transitions into a RAM replay buffer, `gradient_steps` updates on sampled
/// batches every `train_freq` collector steps once `learning_starts` random steps are
/// stored.
///
/// ```
/// use rl_algos::trainer::{Goal, OffPolicyConfig, OffPolicyTrainer, RunConfig};
/// use rl_algos::{Sac, SacConfig};
/// use rl_envs::Pendulum;
///
/// let sac = Sac::for_env(&Pendulum::new(0), SacConfig { hidden: vec![16, 16], batch_size: 32, ..SacConfig::sb3() })?;
/// let config = OffPolicyConfig {
///     buffer_capacity: 10_000,
///     ..OffPolicyConfig::new(RunConfig { goal: Some(Goal::TrainingReturn { mean_return: -200.0, window: 10 }), ..RunConfig::new(300) })
/// };
/// let mut trainer = OffPolicyTrainer::new(Pendulum::new, sac, config)?;
/// println!("{}", trainer.memory_plan());
/// let summary = trainer.train(&mut ())?;
/// assert_eq!(summary.total_env_steps, 300);
/// # Ok::<(), rl_algos::Error>(())
/// ```
#[derive(Debug)]
pub struct OffPolicyTrainer<E, L>
where
    E: Env<Obs = f32>,
    L: OffPolicyLearner<Act = E::Act>,
{
    config: OffPolicyConfig,
    collector: SyncCollector<E, L>,
    replay: ReplayBuffer<RamStorage, ReplaySampler>,
    batch: Batch,
    eval_env: E,
    plan: MemoryPlan,
    /// Env steps taken before this process (a resumed run), plus the collector's frames.
    steps_before: u64,
    last_eval_steps: u64,
    last_stats: Option<L::Stats>,
}

impl<E, L> OffPolicyTrainer<E, L>
where
    E: Env<Obs = f32>,
    E::Act: RandomAction,
    L: OffPolicyLearner<Act = E::Act>,
{
    /// The whole run's memory plan for `learner` under `config`, from the configuration
    /// alone (nothing allocated): replay buffer, sampler, batch, learner.
    ///
    /// # Errors
    /// An invalid schema or capacity.
    pub fn plan(learner: &L, config: &OffPolicyConfig) -> Result<MemoryPlan> {
        let schema = learner.replay_schema()?;
        let mut plan = MemoryPlan::new();
        plan.nest(
            "replay",
            &RamStorage::plan(&schema, config.buffer_capacity)?,
        );
        plan.nest("sampler", &ReplaySampler::plan(config));
        plan.nest("batch", &Batch::plan(&schema, learner.batch_size())?);
        plan.nest("learner", &learner.memory_plan());
        Ok(plan)
    }

    /// A new run: `make_env(seed)` builds each training environment and the evaluation
    /// environment. The plan is checked against `config.run.budget` before the replay
    /// buffer is allocated.
    ///
    /// # Errors
    /// An invalid configuration, a plan over the budget, environments that do not fit
    /// the learner.
    pub fn new(
        make_env: impl FnMut(u64) -> E,
        learner: L,
        config: OffPolicyConfig,
    ) -> Result<Self> {
        Self::build(make_env, learner, config, None)
    }

    /// Continues the run saved in `dir` (by [`OffPolicyTrainer::save`] or a checkpoint
    /// schedule): learner, replay buffer and counters. `learner` must be built as the
    /// saved one was, `config` must keep the seed and the number of environments.
    /// Everything is checked before anything is loaded into the trainer.
    ///
    /// # Errors
    /// A directory of another run ([`Error::CheckpointMismatch`]), missing or corrupt
    /// files, and the errors of [`OffPolicyTrainer::new`].
    pub fn resume(
        dir: &Path,
        make_env: impl FnMut(u64) -> E,
        mut learner: L,
        config: OffPolicyConfig,
    ) -> Result<Self> {
        let counters = RunCounters::load(dir)?;
        counters.check(TRAINER, learner.checkpoint_kind(), &config.run)?;
        let saved =
            Checkpoint::<L::Saved>::load(dir.join(LEARNER_FILE), learner.checkpoint_kind())?;
        learner.restore(&saved)?;
        Self::build(make_env, learner, config, Some((dir, counters)))
    }

    fn build(
        mut make_env: impl FnMut(u64) -> E,
        learner: L,
        config: OffPolicyConfig,
        resume: Option<(&Path, RunCounters)>,
    ) -> Result<Self> {
        config.validate()?;
        let run = &config.run;
        let schema = learner.replay_schema()?;
        let mut plan = Self::plan(&learner, &config)?;
        if let Some(budget) = &run.budget {
            plan.check(budget)?;
        }
        let (replay, steps_before, last_eval_steps) = match resume {
            None => {
                let budget = run.budget.unwrap_or_else(MemoryBudget::unlimited);
                let storage =
                    RamStorage::new(schema.clone(), config.buffer_capacity, Some(&budget))?;
                (
                    ReplayBuffer::new(storage, ReplaySampler::new(&config)?),
                    0,
                    0,
                )
            }
            Some((dir, counters)) => {
                let replay =
                    ReplayBuffer::load(&dir.join(REPLAY_DIR), ReplaySampler::new(&config)?)?;
                if replay.capacity() != config.buffer_capacity || replay.schema() != &schema {
                    return Err(Error::CheckpointMismatch {
                        what: "replay buffer".to_owned(),
                        expected: format!(
                            "{} rows of this learner's columns",
                            config.buffer_capacity
                        ),
                        actual: format!(
                            "{} rows of {} columns",
                            replay.capacity(),
                            replay.schema().columns().len()
                        ),
                    });
                }
                (replay, counters.env_steps, counters.last_eval_steps)
            }
        };
        let envs: Vec<E> = (0..run.n_envs).map(|i| make_env(run.env_seed(i))).collect();
        let eval_env = make_env(run.seed.wrapping_mul(1000).wrapping_add(500));
        let random_frames = config.learning_starts.saturating_sub(steps_before);
        let collector = SyncCollector::new(
            envs,
            learner,
            CollectorConfig {
                seed: run.seed.wrapping_add(steps_before),
                random_frames,
                stats_window: run.window(),
                ..CollectorConfig::new(config.train_freq as usize * run.n_envs)
            },
        )?;
        plan.nest("collector", &collector.memory_plan());
        let batch = Batch::new(&schema, collector.policy().batch_size())?;
        Ok(Self {
            config,
            collector,
            replay,
            batch,
            eval_env,
            plan,
            steps_before,
            last_eval_steps,
            last_stats: None,
        })
    }

    /// The whole run's memory plan (replay, sampler, batch, learner, collector).
    pub fn memory_plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// The learner (also the collector's policy).
    pub fn learner(&self) -> &L {
        self.collector.policy()
    }

    /// The learner, mutably (to evaluate or predict between `train` calls).
    pub fn learner_mut(&mut self) -> &mut L {
        self.collector.policy_mut()
    }

    /// The replay buffer.
    pub fn replay(&self) -> &ReplayBuffer<RamStorage, impl Sampler> {
        &self.replay
    }

    /// The settings.
    pub fn config(&self) -> &OffPolicyConfig {
        &self.config
    }

    /// Runs `episodes` deterministic episodes on the evaluation environment: the
    /// episodes a scheduled evaluation of that many episodes runs, so a policy that
    /// did not change scores the same.
    ///
    /// # Errors
    /// `episodes == 0`; environment and policy errors.
    pub fn evaluate(&mut self, episodes: usize) -> Result<EvalReport> {
        let mut schedule = self
            .config
            .run
            .eval
            .unwrap_or(EvalSchedule::new(1, episodes));
        schedule.episodes = episodes;
        let config = self.config.run.eval_config(&schedule);
        evaluate(&mut self.eval_env, self.collector.policy_mut(), &config)
    }

    /// Env steps over the run's life.
    pub fn env_steps(&self) -> u64 {
        self.steps_before + self.collector.frames()
    }

    /// Runs until the goal, the budget or a callback stops it.
    ///
    /// # Errors
    /// Environment, policy, storage and learner errors ([`Error::Diverged`] ...); the
    /// trainer keeps what it had done before the error.
    pub fn train(&mut self, callback: &mut dyn Callback<L::Stats>) -> Result<TrainSummary> {
        let run = self.config.run.clone();
        let mut clock = Clock::start(self.env_steps(), self.last_eval_steps);
        let episodes_before = self.collector.stats().episodes();
        while self.env_steps() < run.total_steps && clock.stop.is_none() {
            let steps = self.env_steps();
            self.collector.policy_mut().set_env_steps(steps);
            self.collector.collect(&mut self.replay)?;
            let steps = self.env_steps();
            let stats = self.collector.stats();
            clock.check_training_goal(&run, steps, stats.window_len(), stats.mean_return());
            if steps > self.config.learning_starts {
                for _ in 0..self.config.gradient_steps {
                    self.gradient_step()?;
                }
            }
            clock.evaluate_if_due(
                &run,
                steps,
                &mut self.eval_env,
                self.collector.policy_mut(),
                callback,
            )?;
            if clock.save_due(&run, steps) {
                self.save_scheduled(&mut clock, callback)?;
            }
            let progress = clock.progress(
                self.env_steps(),
                self.learner().updates(),
                self.collector.stats(),
                self.last_stats.as_ref(),
            );
            clock.report(callback, &progress);
        }
        self.last_eval_steps = clock.last_eval_steps;
        if run.checkpoint.is_some() {
            self.save_scheduled(&mut clock, callback)?;
        }
        Ok(clock.summary(
            self.env_steps(),
            self.learner().updates(),
            self.collector.stats(),
            episodes_before,
            self.plan.total(Location::Ram),
        ))
    }

    fn gradient_step(&mut self) -> Result<()> {
        self.replay.sample(&mut self.batch)?;
        let learner = self.collector.policy_mut();
        self.last_stats = Some(learner.update(&self.batch)?);
        if let (ReplaySampler::Prioritized(sampler), Some(priorities)) =
            (self.replay.sampler_mut(), learner.priorities())
        {
            sampler.update_priorities(self.batch.positions(), priorities)?;
        }
        Ok(())
    }

    fn save_scheduled(
        &mut self,
        clock: &mut Clock,
        callback: &mut dyn Callback<L::Stats>,
    ) -> Result<()> {
        let steps = self.env_steps();
        self.last_eval_steps = clock.last_eval_steps;
        if let Some(schedule) = self.config.run.checkpoint.clone() {
            self.save(&schedule.dir)?;
            clock.saved(steps);
            callback.on_checkpoint(steps, &schedule.dir);
        }
        Ok(())
    }

    /// Saves the run into `dir` (learner, replay buffer, counters), replacing what was
    /// there only once the new directory is whole.
    ///
    /// # Errors
    /// I/O errors.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let learner = self.learner();
        let counters = RunCounters {
            trainer: TRAINER.to_owned(),
            learner: learner.checkpoint_kind().to_owned(),
            env_steps: self.env_steps(),
            updates: learner.updates(),
            last_eval_steps: self.last_eval_steps,
            run: self.config.run.clone(),
        };
        run::save_dir(dir, |partial| {
            learner.checkpoint().save(partial.join(LEARNER_FILE))?;
            self.replay.save(&partial.join(REPLAY_DIR))?;
            run::write_counters(partial, &counters)
        })
    }
}
