//! The on-policy trainer: rollouts collected by a copy of the policy, PPO updates
//! (feed-forward or recurrent), the new weights handed back to the collector's copy.

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use rl_collect::{CollectorConfig, RandomAction, SyncCollector};
use rl_core::{Env, Location, MemoryPlan};
use rl_nn::Checkpoint;
use rl_storage::rollout::RolloutBuffer;

use super::run::{
    self, Callback, Clock, Continuation, EvalSchedule, RunConfig, RunCounters, TrainSummary,
};
use crate::eval::{EvalReport, evaluate};
use rl_algos::learner::{OnPolicyBlueprint, OnPolicyLearner};
use rl_algos::policy::PolicyNetworks;
use rl_algos::{Error, Result};
use rl_collect::ValuePolicy;

/// The learner's checkpoint inside a run directory.
const LEARNER_FILE: &str = "learner.safetensors";
const TRAINER: &str = "on_policy";

/// On-policy training with PPO: `run.n_envs` environments stepped by a collector that
/// holds a copy of the policy, one rollout of `n_steps` steps per environment, reward
/// scaling (if configured) and a PPO update, then the learner's weights, normaliser
/// statistics and sampling generator copied into the collector's policy (the trainer
/// does this; nothing for the caller to keep in step).
///
/// The learner is any [`OnPolicyLearner`], built for `run.n_envs` environments: [`Ppo`](rl_algos::ppo::Ppo) with a [`PpoConfig`](rl_algos::ppo::PpoConfig)
/// for feed-forward policies, [`RecurrentPpo`](rl_algos::ppo::RecurrentPpo) with a [`RecurrentPpoConfig`](rl_algos::ppo::RecurrentPpoConfig) for a
/// [`RecurrentCategoricalPolicy`](rl_algos::policy::RecurrentCategoricalPolicy) (the trainer makes the collector's copy record each
/// chunk's starting state before every rollout).
///
/// The run owns the number of environments (`run.n_envs`); a rollout holds
/// `ppo.n_steps x run.n_envs` rows.
///
/// ```
/// use rl_train::trainer::{Goal, OnPolicyTrainer, RunConfig};
/// use rl_algos::{policy::{CategoricalPolicy, PolicyConfig}, ppo::{Ppo, PpoConfig}};
/// use rl_envs::CartPole;
///
/// let policy = CategoricalPolicy::for_env(&CartPole::new(0), PolicyConfig::new(), 0)?;
/// let ppo = PpoConfig { n_steps: 32, ..PpoConfig::new() };
/// let run = RunConfig { n_envs: 4, goal: Some(Goal::TrainingReturn { mean_return: 475.0, window: 20 }), ..RunConfig::new(1_024) };
/// let ppo = Ppo::new(policy, ppo, run.n_envs, run.seed)?; // built for run.n_envs, seeded by run.seed
/// let mut trainer = OnPolicyTrainer::new(CartPole::new, ppo, run)?;
/// let summary = trainer.train(&mut ())?;
/// assert_eq!(summary.total_env_steps, 1_024);
/// # Ok::<(), rl_algos::Error>(())
/// ```
#[derive(Debug)]
pub struct OnPolicyTrainer<E, L>
where
    E: Env,
    L: OnPolicyLearner<Policy: ValuePolicy<Obs = E::Obs, Act = E::Act>>,
{
    run: RunConfig,
    ppo: L,
    collector: SyncCollector<E, L::Policy>,
    rollout: RolloutBuffer,
    eval_env: E,
    plan: MemoryPlan,
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

impl<E, L> OnPolicyTrainer<E, L>
where
    E: Env,
    E::Act: RandomAction,
    L: OnPolicyLearner<Policy: ValuePolicy<Obs = E::Obs, Act = E::Act>>,
{
    /// A new run: `make_env(seed)` builds each training environment and the evaluation
    /// environment; `policy` is trained with `ppo`. The plan (rollout, learner,
    /// collector, the collector's weight copy and acting state) is checked against
    /// `run.budget` before the rollout buffer is allocated.
    ///
    /// # Errors
    /// An invalid configuration, a plan over the budget, environments that do not fit
    /// the policy.
    pub fn new(make_env: impl FnMut(u64) -> E, learner: L, run: RunConfig) -> Result<Self> {
        Self::build(make_env, learner, run, None)
    }

    /// Continues the run saved in `dir`: learner (weights, optimiser, schedules,
    /// normalisers, generators), counters and the collector's state. `policy` and `ppo`
    /// must be built as the saved ones were; `run` must keep the seed and the number of
    /// environments. Environments that save their state ([`Env::save_state`]) under a
    /// feed-forward policy continue mid-episode, so the run continues exactly
    /// ([`Continuation::Exact`]); otherwise they start new episodes. The episode
    /// statistics continue either way.
    ///
    /// # Errors
    /// A directory of another run ([`Error::CheckpointMismatch`](rl_algos::Error::CheckpointMismatch)), missing or corrupt
    /// files, and the errors of [`OnPolicyTrainer::new`].
    pub fn resume(
        dir: &Path,
        make_env: impl FnMut(u64) -> E,
        learner: L,
        run: RunConfig,
    ) -> Result<Self> {
        let counters = RunCounters::load(dir)?;
        counters.check(TRAINER, learner.kind(), &run)?;
        Self::build(make_env, learner, run, Some((dir, counters)))
    }

    /// The whole run's memory plan for a learner of `learner` (its blueprint, from its
    /// configuration and spaces: `Ppo::blueprint`, `RecurrentPpo::blueprint`, or a built
    /// learner's [`OnPolicyLearner::blueprint`]) under `run` on environments like `env`,
    /// from the configuration alone (no learner, rollout buffer, collector or further
    /// environment is built): what [`OnPolicyTrainer::memory_plan`] reports once the
    /// trainer exists, and what a new run checks against `run.budget`.
    ///
    /// # Errors
    /// An invalid configuration.
    pub fn plan(env: &E, learner: &OnPolicyBlueprint, run: &RunConfig) -> Result<MemoryPlan> {
        run.validate()?;
        check_envs(learner.envs, run)?;
        Self::plan_of(learner, run, env)
    }

    fn plan_of(learner: &OnPolicyBlueprint, run: &RunConfig, env: &E) -> Result<MemoryPlan> {
        let mut plan = MemoryPlan::new();
        plan.nest("rollout", &learner.rollout);
        plan.nest("learner", &learner.learner);
        plan.add(
            "policy/weights (collector copy)",
            Location::Ram,
            (learner.policy_params as u64).saturating_mul(size_of::<f32>() as u64),
        );
        plan.nest("collector", &learner.acting);
        run::plan_kept_episodes(&mut plan);
        plan.nest(
            "collector",
            &SyncCollector::<E, L::Policy>::plan(
                run.n_envs,
                env.observation_space().flat_len(),
                env.action_space().flat_len(),
            ),
        );
        Ok(plan)
    }

    fn build(
        mut make_env: impl FnMut(u64) -> E,
        mut ppo: L,
        run: RunConfig,
        resume: Option<(&Path, RunCounters)>,
    ) -> Result<Self> {
        run.validate()?;
        check_envs(ppo.envs(), &run)?;
        let policy = ppo.policy().clone();
        let (steps_before, wall_s, last_eval_steps, best_eval) = match &resume {
            Some((dir, counters)) => {
                run::load_learner(&mut ppo, &dir.join(LEARNER_FILE))?;
                (
                    counters.env_steps,
                    counters.wall_s,
                    counters.last_eval_steps,
                    counters.best_eval_return,
                )
            }
            None => (0, 0.0, 0, None),
        };
        let envs: Vec<E> = (0..run.n_envs).map(|i| make_env(run.env_seed(i))).collect();
        let mut eval_env = make_env(run.seed.wrapping_mul(1000).wrapping_add(500));
        eval_env.set_evaluation(true);
        let plan = Self::plan_of(ppo.blueprint(), &run, &eval_env)?;
        if let Some(budget) = &run.budget {
            plan.check(budget)?;
        }
        let pool = run::start_pool(&mut ppo, run.threads)?;
        let rollout = ppo.rollout_buffer(None)?;
        let mut collector = SyncCollector::new(
            envs,
            policy,
            CollectorConfig {
                seed: run.seed.wrapping_add(steps_before),
                stats_window: run.window(),
                ..CollectorConfig::new(run.n_envs)
            },
        )?;
        collector.stats_mut().keep_ended(run::KEPT_EPISODES);
        // The learner's policy may carry state the fresh copy lacks (a normaliser added
        // by `Ppo::new`, restored weights and generator).
        ppo.copy_policy_into(collector.policy_mut())?;
        // Acting's passes are split across the pool too (the same numbers as on one
        // thread): an 8-row Nature CNN pass is about a quarter of a PPO Atari rollout.
        collector.policy_mut().set_pool(pool.clone());
        // With a second thread, half the environments step while the policy acts for the
        // other half (the same rollouts: see `SyncCollector::set_beside`).
        collector.set_beside(
            pool.clone()
                .map(|pool| Arc::new(run::PoolBeside(pool)) as Arc<dyn rl_collect::Beside>),
        );
        let continuation = match &resume {
            None => None,
            Some((dir, _)) => {
                let sampling = ppo.policy().sampling_state();
                collector.policy_mut().set_sampling_state(sampling);
                Some(match run::read_collector(dir)? {
                    Some(saved) if collector.restore(&saved)? => Continuation::Exact,
                    _ => Continuation::EpisodesRestart,
                })
            }
        };
        Ok(Self {
            run,
            ppo,
            collector,
            rollout,
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

    /// The whole run's memory plan.
    pub fn memory_plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// The learner.
    pub fn ppo(&self) -> &L {
        &self.ppo
    }

    /// The policy being trained (the learner's copy).
    pub fn policy(&self) -> &L::Policy {
        self.ppo.policy()
    }

    /// The collector's copy of the policy, mutably (acts like the learner's: the
    /// trainer copies weights after every update). Use it to evaluate or predict.
    pub fn policy_mut(&mut self) -> &mut L::Policy {
        self.collector.policy_mut()
    }

    /// The loop settings.
    pub fn run_config(&self) -> &RunConfig {
        &self.run
    }

    /// The pool of `run.threads` threads the learner's large products are split across
    /// (`None` for one thread), started once when the trainer was built.
    pub fn pool(&self) -> Option<&std::sync::Arc<rl_nn::Pool>> {
        self.pool.as_ref()
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
        evaluate(&mut self.eval_env, self.collector.policy_mut(), &config)
    }

    /// How this resumed run continued its environments (`None`: a new run).
    pub fn continuation(&self) -> Option<Continuation> {
        self.continuation
    }

    /// Env steps over the run's life.
    pub fn env_steps(&self) -> u64 {
        self.steps_before + self.collector.frames()
    }

    /// Runs until the goal, the budget or a callback stops it. The goal is checked after
    /// each rollout, before its update (a solved run ends on the policy that solved it);
    /// the last rollout of the budget is learned from, as Stable-Baselines3 does.
    ///
    /// # Errors
    /// Environment, policy and learner errors ([`Error::Diverged`](rl_algos::Error::Diverged) ...).
    pub fn train(&mut self, callback: &mut dyn Callback<L::Stats>) -> Result<TrainSummary> {
        let run = self.run.clone();
        let mut clock = Clock::start(
            self.env_steps(),
            self.wall_s,
            self.last_eval_steps,
            self.best_eval,
        );
        let episodes_before = self.collector.stats().episodes();
        while self.env_steps() < run.total_steps && clock.stop.is_none() {
            self.rollout.clear();
            self.ppo.begin_rollout(self.collector.policy_mut())?;
            self.collector.collect_rollout(&mut self.rollout)?;
            let steps = self.env_steps();
            let stats = self.collector.stats_mut();
            clock.report_episodes(stats, self.steps_before, steps, callback);
            let stats = self.collector.stats();
            clock.check_training_goal(&run, steps, stats.window_len(), stats.mean_return());
            if clock.stop.is_some() {
                break;
            }
            // Scales the rewards when configured (the episode statistics above were
            // taken from the raw rewards, which the rollout keeps).
            let acting = self.collector.policy();
            self.last_stats = Some(self.ppo.update(&mut self.rollout, acting)?);
            self.ppo.copy_policy_into(self.collector.policy_mut())?;
            clock.evaluate_if_due(
                &run,
                steps,
                &mut self.eval_env,
                self.collector.policy_mut(),
                callback,
            )?;
            if let Some(best) = clock.take_new_best(&run) {
                // An on-policy save is the learner and the counters, nothing more: the
                // best checkpoint is a whole save.
                self.best_eval = clock.best_eval;
                self.wall_s = clock.elapsed();
                self.save(&best)?;
            }
            if clock.save_due(&run, steps) {
                self.save_scheduled(&mut clock, callback)?;
            }
            let progress = clock.progress(
                self.env_steps(),
                self.ppo.updates(),
                self.collector.stats(),
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
            self.ppo.updates(),
            self.collector.stats(),
            episodes_before,
            self.plan.total(Location::Ram),
        ))
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

    /// The learner's whole state, with the sampling generator of the collector's copy
    /// (the one that draws the actions).
    pub fn checkpoint(&mut self) -> Checkpoint<'_, L::Saved> {
        self.sync_sampling();
        self.ppo.checkpoint()
    }

    fn sync_sampling(&mut self) {
        let sampling = self.collector.policy().sampling_state();
        self.ppo.policy_mut().set_sampling_state(sampling);
    }

    /// Saves the run into `dir` (learner with the collector's sampling generator, the
    /// collector's state and the counters), replacing what was there only once the new
    /// directory is whole and synced to disk.
    ///
    /// # Errors
    /// I/O errors.
    pub fn save(&mut self, dir: &Path) -> Result<()> {
        self.sync_sampling();
        let counters = RunCounters {
            trainer: TRAINER.to_owned(),
            learner: self.ppo.kind().to_owned(),
            env_steps: self.env_steps(),
            wall_s: self.wall_s,
            updates: self.ppo.updates(),
            last_eval_steps: self.last_eval_steps,
            run: self.run.clone(),
            best_eval_return: self.best_eval,
        };
        let collector = self.collector.saved();
        let ppo = &self.ppo;
        run::save_dir(dir, |partial| {
            run::save_learner(ppo, &partial.join(LEARNER_FILE))?;
            run::write_collector(partial, &collector)?;
            run::write_counters(partial, &counters)
        })
    }
}

/// Refuses a learner built for another number of environments than the run's.
fn check_envs(envs: usize, run: &RunConfig) -> Result<()> {
    if envs == run.n_envs {
        Ok(())
    } else {
        Err(Error::config(
            "run.n_envs",
            format!(
                "is {} but the learner was built for {envs} environments: build it with run.n_envs",
                run.n_envs
            ),
        ))
    }
}
