//! How the off-policy trainer steps its environments ([`CollectorChoice`]): a
//! synchronous collector whose policy is the learner itself, or an asynchronous one
//! whose worker threads act with copies of the learner's actor, published after every
//! training phase.

use rl_collect::{
    AsyncCollector, AsyncConfig, CollectorConfig, EpisodeStats, RandomAction, SavedCollector,
    SyncCollector,
};
use rl_core::{Env, Field, MemoryPlan, Schema};
use serde::{Deserialize, Serialize};

use super::remote::Remote;
use super::replay::{OffPolicyReplay, Stored};
use super::{OffPolicyConfig, RunConfig};
use crate::trainer::OffPolicyLearner;
use rl_algos::learner::OffPolicyBlueprint;
use rl_algos::{Error, Result};
use rl_storage::replay::with_storage;

/// Which collector steps the training environments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum CollectorChoice {
    /// [`rl_collect::SyncCollector`]: every environment stepped in the trainer's thread,
    /// one batched call of the learner per step. The learner is the collector's policy,
    /// so each update reaches the next action without a copy, and a run with the same
    /// seed trains bit-identically.
    #[default]
    Sync,
    /// [`rl_collect::AsyncCollector`]: `workers` threads, each stepping
    /// `run.n_envs / workers` environments with its own copy of the learner's
    /// [`OffPolicyLearner::Actor`], filling chunks of `steps_per_chunk` steps that the
    /// trainer writes into the replay buffer one at a time. After every training phase
    /// the trainer publishes the learner's new weights (and exploration state) with a
    /// new version; workers take them at their next chunk, so a chunk may come from
    /// weights a few phases old. Collection overlaps learning; the order in which
    /// workers' chunks arrive depends on thread timing, so runs are not bit-identical.
    /// The warm-up (`learning_starts` env steps of random actions) is split over the
    /// workers, each acting at random for its first `learning_starts / workers` env
    /// steps (rounded up to whole steps of its environments).
    Async {
        /// Worker threads, at least 1, dividing `run.n_envs`.
        workers: usize,
        /// Steps of a worker's environments per chunk, at least 1: a chunk holds
        /// `steps_per_chunk x run.n_envs / workers` transitions.
        steps_per_chunk: usize,
    },
}

impl CollectorChoice {
    /// Checks the choice for `n_envs` environments; the error names the field.
    pub(super) fn validate(&self, n_envs: usize) -> Result<()> {
        let Self::Async {
            workers,
            steps_per_chunk,
        } = *self
        else {
            return Ok(());
        };
        if workers == 0 {
            return Err(Error::config(
                "collector.workers",
                "is 0: use at least one worker thread",
            ));
        }
        if !n_envs.is_multiple_of(workers) {
            return Err(Error::config(
                "collector.workers",
                format!(
                    "is {workers}, which does not divide run.n_envs = {n_envs}: every worker steps as many environments, so use a divisor of run.n_envs"
                ),
            ));
        }
        if steps_per_chunk == 0 {
            return Err(Error::config(
                "collector.steps_per_chunk",
                "is 0: a chunk holds at least one step",
            ));
        }
        if steps_per_chunk.checked_mul(n_envs / workers).is_none() {
            return Err(Error::config(
                "collector.steps_per_chunk",
                "is too large: the transitions of a chunk overflow usize",
            ));
        }
        Ok(())
    }
}

/// The collector and, for the asynchronous one, the learner and its actor.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per trainer, built once and never moved in the loop"
)]
pub(super) enum Collection<E, L>
where
    E: Env,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    /// The learner is the collector's policy.
    Sync(SyncCollector<E, L>),
    Async(Workers<E, L>),
    /// Chunks from other processes ([`super::ChunkSource`]).
    Remote(Remote<L>),
}

/// An asynchronous collector, the learner, and the actor the trainer refreshes and
/// publishes (`staging`: its clones go to the workers).
#[derive(Debug)]
pub(super) struct Workers<E, L>
where
    E: Env,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    collector: AsyncCollector<E, L::Actor>,
    learner: L,
    staging: L::Actor,
}

/// Actor copies an asynchronous run holds at most: one per worker, the collector's
/// published one, the trainer's `staging` one, and the clone being published.
pub(super) fn actor_copies(workers: usize) -> usize {
    workers + 3
}

/// The collectors' settings for a run at `steps_before` steps: the shared ones, and with
/// `Async { workers, steps_per_chunk }` the asynchronous collector's.
fn collector_configs(
    config: &OffPolicyConfig,
    run: &RunConfig,
    steps_before: u64,
    workers: usize,
    steps_per_chunk: usize,
) -> (CollectorConfig, AsyncConfig) {
    let shared = CollectorConfig {
        seed: run.seed.wrapping_add(steps_before),
        random_frames: config.learning_starts.saturating_sub(steps_before),
        stats_window: run.window(),
        ..CollectorConfig::new(config.train_freq as usize * run.n_envs)
    };
    let rows = steps_per_chunk * (run.n_envs / workers.max(1));
    // Workers stop claiming chunks at the run's budget (at least one step, so that a
    // resumed run at its budget starts nothing).
    let left = run.total_steps.saturating_sub(steps_before).max(1);
    let async_config = AsyncConfig::new(
        workers,
        steps_per_chunk,
        CollectorConfig {
            frames_per_batch: rows,
            total_frames: Some(left),
            ..shared
        },
    );
    (shared, async_config)
}

/// What an asynchronous collector for `config` and `schema` will hold, before it
/// exists ([`AsyncCollector::plan`]: the chunk pool, every worker's lanes, the channel
/// slots and the statistics window), and `learner`'s actor copies. Nothing allocated.
///
/// # Errors
/// An invalid collector configuration, as [`AsyncCollector::plan`].
/// What the synchronous collector of `run` will hold (the collector's
/// [`SyncCollector::memory_plan`], from the replay columns alone).
pub(super) fn sync_plan<E, L>(schema: &Schema, run: &RunConfig) -> MemoryPlan
where
    E: Env,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    SyncCollector::<E, L>::plan(
        run.n_envs,
        numel(schema, Field::Obs),
        numel(schema, Field::Action),
    )
}

/// Elements per row of `field`'s column (0 if the schema has none).
fn numel(schema: &Schema, field: Field) -> usize {
    schema
        .index_of(field.name())
        .map_or(0, |i| schema.columns()[i].numel())
}

pub(super) fn async_plan<E, L>(
    learner: &OffPolicyBlueprint,
    config: &OffPolicyConfig,
    run: &RunConfig,
    workers: usize,
    steps_per_chunk: usize,
) -> Result<MemoryPlan>
where
    E: Env + Send + 'static,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    let numel = |field: Field| numel(&learner.replay_schema, field);
    let (_, async_config) = collector_configs(config, run, 0, workers, steps_per_chunk);
    let mut plan = AsyncCollector::<E, L::Actor>::plan(
        &async_config,
        run.n_envs,
        numel(Field::Obs),
        numel(Field::Action),
    )?;
    plan.nest(
        "async_collector",
        &learner.actor_memory_plan(actor_copies(workers)),
    );
    Ok(plan)
}

impl<E, L> Collection<E, L>
where
    E: Env + Send + 'static,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    /// The collector `config` chooses over `envs` for `run`, acting at random for the
    /// `learning_starts` steps not yet taken in `steps_before`.
    pub(super) fn new(
        envs: Vec<E>,
        mut learner: L,
        config: &OffPolicyConfig,
        run: &RunConfig,
        steps_before: u64,
    ) -> Result<Self> {
        learner.set_env_steps(steps_before);
        Ok(match config.collector {
            CollectorChoice::Sync => {
                let (shared, _) = collector_configs(config, run, steps_before, 1, 1);
                Self::Sync(SyncCollector::new(envs, learner, shared)?)
            }
            CollectorChoice::Async {
                workers,
                steps_per_chunk,
            } => {
                let staging = learner.actor()?;
                let (_, async_config) =
                    collector_configs(config, run, steps_before, workers, steps_per_chunk);
                let collector = AsyncCollector::new(envs, staging.clone(), async_config)?;
                Self::Async(Workers {
                    collector,
                    learner,
                    staging,
                })
            }
        })
    }
}

impl<E, L> Collection<E, L>
where
    E: Env,
    E::Act: RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    pub(super) fn learner(&self) -> &L {
        match self {
            Self::Sync(c) => c.policy(),
            Self::Async(w) => &w.learner,
            Self::Remote(r) => &r.learner,
        }
    }

    pub(super) fn learner_mut(&mut self) -> &mut L {
        match self {
            Self::Sync(c) => c.policy_mut(),
            Self::Async(w) => &mut w.learner,
            Self::Remote(r) => &mut r.learner,
        }
    }

    /// Env steps delivered into the replay buffer by this collector.
    pub(super) fn frames(&self) -> u64 {
        match self {
            Self::Sync(c) => c.frames(),
            Self::Async(w) => w.collector.frames(),
            Self::Remote(r) => r.frames(),
        }
    }

    /// Statistics of the episodes delivered so far.
    pub(super) fn stats(&self) -> &EpisodeStats {
        match self {
            Self::Sync(c) => c.stats(),
            Self::Async(w) => w.collector.stats(),
            Self::Remote(r) => r.stats(),
        }
    }

    /// The statistics, mutably (to keep and drain finished episodes).
    pub(super) fn stats_mut(&mut self) -> &mut EpisodeStats {
        match self {
            Self::Sync(c) => c.stats_mut(),
            Self::Async(w) => w.collector.stats_mut(),
            Self::Remote(r) => r.stats_mut(),
        }
    }

    /// The collector's state for a save: the episode statistics, and with the sync
    /// collector the environments mid-episode where they can be saved.
    pub(super) fn saved(&self) -> SavedCollector {
        match self {
            Self::Sync(c) => c.saved(),
            Self::Async(w) => SavedCollector::stats_only(w.collector.stats().saved()),
            Self::Remote(r) => SavedCollector::stats_only(r.stats().saved()),
        }
    }

    /// Restores a saved state; whether the environments continue mid-episode.
    pub(super) fn restore(&mut self, saved: &SavedCollector) -> Result<bool> {
        Ok(match self {
            Self::Sync(c) => c.restore(saved)?,
            Self::Async(w) => {
                w.collector.restore_stats(&saved.stats)?;
                false
            }
            Self::Remote(r) => {
                r.restore_stats(&saved.stats)?;
                false
            }
        })
    }

    /// Collects into `replay`: `train_freq` steps of every environment (sync), or the
    /// next chunk a worker filled (async). `env_steps` is the run's count before.
    pub(super) fn collect(&mut self, replay: &mut OffPolicyReplay, env_steps: u64) -> Result<()> {
        match self {
            Self::Sync(c) => {
                c.policy_mut().set_env_steps(env_steps);
                match &mut replay.stored {
                    Stored::Rows(rows) => with_storage!(rows, b => c.collect(b))?,
                    Stored::Frames(frames) => with_storage!(frames, b => c.collect_frames(b))?,
                };
            }
            Self::Async(w) => {
                with_storage!(replay.rows_mut()?, b => w.collector.collect(b))?;
            }
            Self::Remote(r) => r.collect(replay)?,
        }
        replay.bound_mapped()
    }

    /// The bytes of the observations the next step acts on (sync collector; `None`
    /// for the others, whose environments are not the trainer's).
    pub(super) fn observation_bytes(&self) -> Option<&[u8]> {
        match self {
            Self::Sync(c) => Some(bytemuck::cast_slice(c.observations())),
            Self::Async(_) | Self::Remote(_) => None,
        }
    }

    /// After a training phase at `env_steps`: hands the workers the learner's new
    /// weights and exploration state (async; nothing to do when the learner is the
    /// policy). Returns the version published.
    pub(super) fn publish(&mut self, env_steps: u64) -> Result<u64> {
        let w = match self {
            Self::Sync(_) => return Ok(0),
            Self::Remote(r) => return r.publish(env_steps),
            Self::Async(w) => w,
        };
        w.learner.set_env_steps(env_steps);
        w.learner.refresh_actor(&mut w.staging)?;
        Ok(w.collector.set_policy(w.staging.clone()))
    }

    /// The collector's own plan (and, async, the actor copies).
    pub(super) fn memory_plan(&self) -> MemoryPlan {
        match self {
            Self::Sync(c) => c.memory_plan(),
            Self::Async(w) => {
                let mut plan = w.collector.memory_plan();
                let copies = actor_copies(w.collector.workers());
                plan.nest("async_collector", &w.learner.actor_memory_plan(copies));
                plan
            }
            Self::Remote(r) => r.memory_plan(),
        }
    }

    /// The policy version the workers were last given (0 for the first, or sync).
    pub(super) fn version(&self) -> u64 {
        match self {
            Self::Sync(_) => 0,
            Self::Async(w) => w.collector.version(),
            Self::Remote(r) => r.version(),
        }
    }
}
