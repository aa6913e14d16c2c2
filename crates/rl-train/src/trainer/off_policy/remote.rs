//! Collection in other processes or on other machines (Ray actors): the trainer's side
//! is a [`ChunkSource`] that delivers fixed-size chunks of transitions and takes the
//! learner's new weights; the collecting side is a [`ChunkCollector`], a synchronous
//! collector over its own environments acting with a copy of the learner's actor, which
//! fills one chunk at a time and takes weights as checkpoint bytes.
//!
//! A chunk is written into the replay buffer with one `extend`, validated before any
//! row is written: a chunk is in the buffer whole or not at all, so a source that
//! delivers each chunk at most once never duplicates nor loses an acknowledged row.

use std::fmt::Debug;
use std::path::Path;

use rl_collect::{CollectorConfig, EpisodeStats, SyncCollector};
use rl_core::{Env, Field, Flag, MemoryPlan, Schema};
use rl_nn::Checkpoint;
use rl_storage::ColumnSlice;
use rl_storage::ram::RamStorage;
use rl_storage::replay::ReplayBuffer;
use rl_storage::sampler::Uniform;
use rl_storage::storage::HostStorage;

use super::replay::OffPolicyReplay;
use crate::trainer::OffPolicyLearner;
use rl_algos::{Error, Result};

/// A finished episode, as a chunk reports it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Episode {
    /// Sum of its rewards.
    pub episode_return: f32,
    /// Steps.
    pub length: u32,
    /// Ended in a terminal state (else cut by a time limit).
    pub terminated: bool,
}

/// Where a [`ChunkSource`] writes a chunk: the trainer's replay buffer and episode
/// statistics.
#[derive(Debug)]
pub struct ChunkSink<'a> {
    replay: &'a mut OffPolicyReplay,
    stats: &'a mut EpisodeStats,
    rows: u64,
}

impl ChunkSink<'_> {
    /// The replay columns, in the order [`ChunkSink::extend`] takes them.
    pub fn schema(&self) -> &Schema {
        self.replay.schema()
    }

    /// Writes a chunk's rows (one slice per column, schema order). Everything is
    /// checked before anything is written: on error nothing changed.
    ///
    /// # Errors
    /// Columns of another schema, dtype or row count, non-finite values.
    pub fn extend(&mut self, columns: &[ColumnSlice<'_>]) -> Result<usize> {
        let rows = self.replay.rows_mut()?.extend(columns)?;
        self.rows += rows as u64;
        Ok(rows)
    }

    /// Records an episode the chunk finished (for the training-return goal and the
    /// metrics).
    pub fn episode(&mut self, episode: Episode) {
        self.stats
            .record(episode.episode_return, episode.length, episode.terminated);
    }
}

/// The trainer's side of remote collection: chunks in, weights out.
pub trait ChunkSource: Send + Debug {
    /// Waits for the next chunk and writes it into `sink` (rows, then the episodes it
    /// finished).
    ///
    /// # Errors
    /// The source's own ([`Error::Remote`]) and the sink's.
    fn next_chunk(&mut self, sink: &mut ChunkSink<'_>) -> Result<()>;

    /// New weights for the collectors: the learner's checkpoint ([`Checkpoint::to_bytes`]),
    /// with `version` (0 for the learner as built, then one more per training phase) and
    /// the run's env steps (exploration schedules read them).
    ///
    /// # Errors
    /// The source's own.
    fn publish(&mut self, version: u64, env_steps: u64, weights: &[u8]) -> Result<()>;

    /// What the source holds on the trainer's side (chunks in flight, rows of
    /// `schema`), constant.
    fn memory_plan(&self, schema: &Schema) -> MemoryPlan;
}

/// The trainer's collection from a [`ChunkSource`].
#[derive(Debug)]
pub(super) struct Remote<L> {
    pub(super) learner: L,
    source: Box<dyn ChunkSource>,
    plan: MemoryPlan,
    stats: EpisodeStats,
    frames: u64,
    version: u64,
}

impl<L: OffPolicyLearner> Remote<L> {
    /// Publishes the learner as built (version 0).
    pub(super) fn new(
        learner: L,
        mut source: Box<dyn ChunkSource>,
        window: usize,
        env_steps: u64,
    ) -> Result<Self> {
        source.publish(0, env_steps, &learner.checkpoint().to_bytes()?)?;
        let plan = source.memory_plan(&learner.replay_schema()?);
        Ok(Self {
            learner,
            source,
            plan,
            stats: EpisodeStats::new(window),
            frames: 0,
            version: 0,
        })
    }

    pub(super) fn collect(&mut self, replay: &mut OffPolicyReplay) -> Result<()> {
        let mut sink = ChunkSink {
            replay,
            stats: &mut self.stats,
            rows: 0,
        };
        self.source.next_chunk(&mut sink)?;
        if sink.rows == 0 {
            return Err(Error::Remote(
                "the source delivered a chunk of no rows: a chunk holds at least one transition"
                    .into(),
            ));
        }
        self.frames += sink.rows;
        Ok(())
    }

    pub(super) fn publish(&mut self, env_steps: u64) -> Result<u64> {
        self.learner.set_env_steps(env_steps);
        self.version += 1;
        let weights = self.learner.checkpoint().to_bytes()?;
        self.source.publish(self.version, env_steps, &weights)?;
        Ok(self.version)
    }

    pub(super) fn frames(&self) -> u64 {
        self.frames
    }

    pub(super) fn stats(&self) -> &EpisodeStats {
        &self.stats
    }

    pub(super) fn stats_mut(&mut self) -> &mut EpisodeStats {
        &mut self.stats
    }

    /// Continues a resumed run's episode statistics.
    pub(super) fn restore_stats(&mut self, saved: &rl_collect::SavedStats) -> Result<()> {
        Ok(self.stats.restore(saved)?)
    }

    pub(super) fn version(&self) -> u64 {
        self.version
    }

    pub(super) fn memory_plan(&self) -> MemoryPlan {
        self.plan.clone()
    }
}

/// How a [`ChunkCollector`] collects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkConfig {
    /// Steps of every environment per chunk: a chunk holds `steps_per_chunk x envs`
    /// transitions.
    pub steps_per_chunk: usize,
    /// The first env steps act uniformly at random (the collector's share of the run's
    /// `learning_starts`).
    pub random_frames: u64,
    /// Environment `i` is first reset with `seed + i`; random actions are seeded from it.
    pub seed: u64,
}

/// The collecting side, with its types erased: what a process that collects for a
/// remote trainer holds.
pub trait ChunkActor: Send + Debug {
    /// The chunk's columns (the learner's replay schema).
    fn schema(&self) -> &Schema;

    /// Transitions per chunk.
    fn rows(&self) -> usize;

    /// The version of the weights it acts with (0: the learner as built).
    fn version(&self) -> u64;

    /// Takes the weights [`ChunkSource::publish`] gave out; on error nothing changes.
    ///
    /// # Errors
    /// Bytes that are not a checkpoint of this learner.
    fn set_weights(&mut self, version: u64, env_steps: u64, weights: &[u8]) -> Result<()>;

    /// Fills the next chunk; returns the episodes it finished. Its rows are then
    /// [`ChunkActor::column`].
    ///
    /// # Errors
    /// Environment and policy errors.
    fn collect(&mut self) -> Result<&[Episode]>;

    /// Column `index` (schema order) of the last chunk, `rows x per-row shape`
    /// elements.
    ///
    /// # Errors
    /// An index past the schema.
    fn column(&self, index: usize) -> Result<ColumnSlice<'_>>;
}

/// Fills chunks from its own environments with a copy of a learner's actor
/// (a [`ChunkActor`]).
pub struct ChunkCollector<E, L>
where
    E: Env,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    /// Restored from published weights, then copied into the collector's actor.
    learner: L,
    collector: SyncCollector<E, L::Actor>,
    chunk: ReplayBuffer<RamStorage, Uniform>,
    /// Per environment: return and length of the episode under way.
    running: Vec<(f32, u32)>,
    episodes: Vec<Episode>,
    version: u64,
    kind: &'static str,
}

impl<E, L> Debug for ChunkCollector<E, L>
where
    E: Env,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkCollector")
            .field("learner", &self.kind)
            .field("envs", &self.running.len())
            .field("rows", &self.chunk.capacity())
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

impl<E, L> ChunkCollector<E, L>
where
    E: Env,
    E::Act: rl_collect::RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act>,
{
    /// A collector over `envs` acting like `learner`.
    ///
    /// # Errors
    /// `steps_per_chunk == 0`, environments that do not fit the learner.
    pub fn new(envs: Vec<E>, learner: L, config: ChunkConfig) -> Result<Self> {
        if config.steps_per_chunk == 0 {
            return Err(Error::config(
                "steps_per_chunk",
                "is 0: a chunk holds at least one step of every environment",
            ));
        }
        let n = envs.len();
        let rows = config.steps_per_chunk.checked_mul(n).ok_or_else(|| {
            Error::config("steps_per_chunk", "is too large: a chunk's rows overflow")
        })?;
        let schema = learner.replay_schema()?;
        let storage = RamStorage::new(schema, rows, None)?;
        let collector_config = CollectorConfig {
            seed: config.seed,
            random_frames: config.random_frames,
            report_memory: false,
            ..CollectorConfig::new(rows)
        };
        let collector = SyncCollector::new(envs, learner.actor()?, collector_config)?;
        Ok(Self {
            kind: learner.kind(),
            learner,
            collector,
            chunk: ReplayBuffer::new(storage, Uniform::new(config.seed)),
            running: vec![(0.0, 0); n],
            episodes: Vec::with_capacity(rows),
            version: 0,
        })
    }
}

impl<E, L> ChunkActor for ChunkCollector<E, L>
where
    E: Env + Send,
    E::Act: rl_collect::RandomAction,
    L: OffPolicyLearner<Obs = E::Obs, Act = E::Act> + Send,
    L::Actor: Send,
{
    fn schema(&self) -> &Schema {
        self.chunk.schema()
    }

    fn rows(&self) -> usize {
        self.chunk.capacity()
    }

    fn version(&self) -> u64 {
        self.version
    }

    fn set_weights(&mut self, version: u64, env_steps: u64, weights: &[u8]) -> Result<()> {
        let what = Path::new("published weights");
        let checkpoint = Checkpoint::<L::Saved>::from_bytes(weights, self.kind, what)?;
        self.learner.restore(&checkpoint)?;
        self.learner.set_env_steps(env_steps);
        self.learner.refresh_actor(self.collector.policy_mut())?;
        self.version = version;
        Ok(())
    }

    fn collect(&mut self) -> Result<&[Episode]> {
        self.collector.collect(&mut self.chunk)?;
        self.episodes.clear();
        let rewards: &[f32] = self.chunk.column(Field::Reward.name())?;
        let terminated: &[Flag] = self.chunk.column(Field::Terminated.name())?;
        let truncated: &[Flag] = self.chunk.column(Field::Truncated.name())?;
        // A chunk is whole steps of every environment, environments interleaved.
        let n = self.running.len();
        for (row, &reward) in rewards.iter().enumerate() {
            let (episode_return, length) = &mut self.running[row % n];
            *episode_return += reward;
            *length += 1;
            let ended = terminated[row].get() || truncated[row].get();
            if ended {
                self.episodes.push(Episode {
                    episode_return: *episode_return,
                    length: *length,
                    terminated: terminated[row].get(),
                });
                (*episode_return, *length) = (0.0, 0);
            }
        }
        Ok(&self.episodes)
    }

    fn column(&self, index: usize) -> Result<ColumnSlice<'_>> {
        let column = self.chunk.schema().columns().get(index).ok_or_else(|| {
            Error::config(
                "column",
                format!(
                    "is {index}, past the chunk's {} columns",
                    self.chunk.schema().columns().len()
                ),
            )
        })?;
        Ok(ColumnSlice::from_bytes(
            column,
            self.chunk.storage().column(index),
        )?)
    }
}

#[cfg(test)]
mod tests;
