//! The off-policy trainer's replay buffer: rows in RAM or in a memory-mapped file
//! ([`ReplayLocation`]), uniform or prioritized sampling, and how each location is
//! saved into a run directory and found again.

use std::path::{Path, PathBuf};

use rl_core::{Element, Location, MemoryBudget, MemoryPlan, Schema};
use rl_storage::{
    Batch,
    memmap::{MemmapOptions, MemmapStorage},
    ram::RamStorage,
    replay::{AnyReplay, ReplayBuffer},
    sampler::{AnySampler, Prioritized, SliceSampler, Uniform},
    storage::RingState,
};
use serde::{Deserialize, Serialize};

use super::{OffPolicyConfig, RunConfig};
use crate::trainer::SequenceSpec;
use rl_algos::{Error, Result};

/// The file a memmap-located replay buffer lives in, inside
/// [`ReplayLocation::Memmap`]'s `dir`.
pub const REPLAY_FILE: &str = "replay.rlmm";
/// What a run directory's `replay/` folder holds for a memmap-located buffer: the file's
/// path and the ring committed at the save.
const MEMMAP_RECORD: &str = "memmap.json";

/// Where the off-policy trainer's replay rows live.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ReplayLocation {
    /// Anonymous memory, allocated and touched up front (the plan's `Ram` lines). A save
    /// writes the stored rows into the run directory's `replay/` folder.
    #[default]
    Ram,
    /// A memory-mapped file, `dir/replay.rlmm` ([`REPLAY_FILE`]; `dir` is created if
    /// missing), through [`rl_storage::memmap::MemmapStorage`]: the plan's `File` lines, paged in
    /// and out by the operating system, so a buffer larger than RAM fits. A new run
    /// refuses a `dir` that already holds the file (resume that run instead). A save
    /// commits the file in place (rows written since the last commit become durable) and
    /// records its path in the run directory; a resume reopens that file. The file is
    /// the run's one buffer: a later save of the run moves it on, and a run that went
    /// on writing after its last save is resumed with the file's newest committed rows
    /// (an off-policy learner may train on rows newer than its counters).
    Memmap {
        /// The folder of the file.
        dir: PathBuf,
    },
}

impl ReplayLocation {
    /// The memmap file of this location (`None` for RAM), made absolute.
    pub(super) fn file(&self) -> Result<Option<PathBuf>> {
        match self {
            Self::Ram => Ok(None),
            Self::Memmap { dir } => std::path::absolute(dir.join(REPLAY_FILE))
                .map(Some)
                .map_err(|e| {
                    Error::config(
                        "replay_location.dir",
                        format!("{} cannot be made absolute: {e}", dir.display()),
                    )
                }),
        }
    }
}

/// The sampler `config` asks for, uniform or prioritized, or, for a learner trained on
/// `sequence`s, windows of one environment's consecutive steps (the environments' rows
/// interleave, one step of every environment after another, so the stride is
/// `run.n_envs`). Its state goes into the run's checkpoint, so that a resumed run draws
/// the batches an uninterrupted one would (the kinds are the wrapped samplers' own: a
/// checkpoint of the other kind is refused by the buffer's load).
fn sampler_for(
    config: &OffPolicyConfig,
    run: &RunConfig,
    sequence: Option<SequenceSpec>,
) -> Result<AnySampler> {
    Ok(match (sequence, config.prioritized) {
        (Some(spec), _) => AnySampler::Slice(
            SliceSampler::new(spec.len, run.seed)?
                .with_burn_in(spec.burn_in)
                .with_stride(run.n_envs)?,
        ),
        (None, None) => AnySampler::Uniform(Uniform::new(run.seed)),
        (None, Some(p)) => {
            AnySampler::Prioritized(Prioritized::new(config.buffer_capacity, p, run.seed)?)
        }
    })
}

/// What the sampler holds, from the configuration alone.
pub(super) fn sampler_plan(config: &OffPolicyConfig) -> MemoryPlan {
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

/// What a run directory records of a memmap-located buffer.
#[derive(Debug, Serialize, Deserialize)]
struct MemmapRecord {
    path: PathBuf,
    capacity: usize,
    ring: RingState,
}

/// The replay buffer of an [`OffPolicyTrainer`](super::OffPolicyTrainer), in RAM or in a
/// memory-mapped file as [`OffPolicyConfig::replay_location`] says: the stored rows,
/// read through the same accessors whatever the location.
#[derive(Debug)]
pub struct OffPolicyReplay {
    pub(super) buffer: AnyReplay,
}

impl OffPolicyReplay {
    /// Rows stored.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether no row is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows the buffer holds at most.
    pub fn capacity(&self) -> usize {
        self.buffer.capacity()
    }

    /// The ring: cursor, rows stored, rows and episodes ever written.
    pub fn ring(&self) -> RingState {
        self.buffer.ring()
    }

    /// The row layout.
    pub fn schema(&self) -> &Schema {
        self.buffer.schema()
    }

    /// All `capacity` rows of column `name`, by ring position (see
    /// [`ReplayBuffer::column`]).
    ///
    /// # Errors
    /// An unknown column or another element type.
    pub fn column<T: Element>(&self, name: &str) -> Result<&[T]> {
        Ok(self.buffer.column::<T>(name)?)
    }

    /// Where the rows live: [`Location::Ram`] or [`Location::File`].
    pub fn location(&self) -> Location {
        self.buffer.location()
    }

    /// The memmap file (`None` in RAM).
    pub fn path(&self) -> Option<&Path> {
        self.buffer.path()
    }

    /// What the storage and the sampler hold.
    pub fn memory_plan(&self) -> MemoryPlan {
        self.buffer.memory_plan()
    }

    /// The storage's plan for rows of `schema` under `config` (capacity and location),
    /// nothing allocated or created: the trainer's `replay` lines.
    ///
    /// # Errors
    /// A capacity whose bytes overflow.
    pub fn plan(schema: &Schema, config: &OffPolicyConfig) -> Result<MemoryPlan> {
        Ok(match config.replay_location {
            ReplayLocation::Ram => RamStorage::plan(schema, config.buffer_capacity)?,
            ReplayLocation::Memmap { .. } => MemmapStorage::plan(schema, config.buffer_capacity)?,
        })
    }

    /// Refuses a location whose file a new run would overwrite. Creates nothing.
    pub(super) fn check_new(config: &OffPolicyConfig) -> Result<()> {
        if let Some(file) = config.replay_location.file()?
            && file.exists()
        {
            return Err(Error::config(
                "replay_location.dir",
                format!(
                    "already holds {}: resume that run (OffPolicyTrainer::resume), delete the file, or choose another folder",
                    file.display()
                ),
            ));
        }
        Ok(())
    }

    /// A new, empty buffer (RAM allocated under `budget`, or the file created).
    pub(super) fn create(
        schema: &Schema,
        config: &OffPolicyConfig,
        run: &RunConfig,
        sequence: Option<SequenceSpec>,
        budget: &MemoryBudget,
    ) -> Result<Self> {
        let sampler = sampler_for(config, run, sequence)?;
        let capacity = config.buffer_capacity;
        let buffer = match (&config.replay_location, config.replay_location.file()?) {
            (ReplayLocation::Memmap { dir }, Some(file)) => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    Error::config(
                        "replay_location.dir",
                        format!("{} cannot be created: {e}", dir.display()),
                    )
                })?;
                let storage = MemmapStorage::create(
                    file,
                    schema.clone(),
                    capacity,
                    MemmapOptions::default(),
                )?;
                AnyReplay::Memmap(ReplayBuffer::new(storage, sampler))
            }
            _ => {
                let storage = RamStorage::new(schema.clone(), capacity, Some(budget))?;
                AnyReplay::Ram(ReplayBuffer::new(storage, sampler))
            }
        };
        Ok(Self { buffer })
    }

    /// Saves the buffer into `dir` (a run directory's `replay/` folder): the stored rows
    /// (RAM), or a commit of the file and its path (memmap).
    pub(super) fn save(&mut self, dir: &Path) -> Result<()> {
        match &mut self.buffer {
            AnyReplay::Ram(b) => Ok(b.save(dir)?),
            AnyReplay::Memmap(b) => {
                b.commit()?;
                let record = MemmapRecord {
                    path: b.storage().path().to_owned(),
                    capacity: b.capacity(),
                    ring: b.ring(),
                };
                let text = serde_json::to_vec_pretty(&record)
                    .map_err(|e| Error::config("checkpoint", format!("replay record: {e}")))?;
                let path = dir.join(MEMMAP_RECORD);
                std::fs::create_dir_all(dir)
                    .and_then(|()| std::fs::write(&path, text))
                    .map_err(|e| {
                        Error::config("checkpoint", format!("writing {}: {e}", path.display()))
                    })
            }
        }
    }

    /// The buffer a run directory's `replay/` folder `dir` saved, for `config` (whose
    /// location must be the saved one) and `schema`. Checks everything before returning.
    pub(super) fn load(
        dir: &Path,
        schema: &Schema,
        config: &OffPolicyConfig,
        run: &RunConfig,
        sequence: Option<SequenceSpec>,
    ) -> Result<Self> {
        let sampler = sampler_for(config, run, sequence)?;
        let record_path = dir.join(MEMMAP_RECORD);
        let record = if record_path.exists() {
            let text = std::fs::read(&record_path).map_err(|e| {
                Error::config(
                    "resume",
                    format!("cannot read {}: {e}", record_path.display()),
                )
            })?;
            Some(serde_json::from_slice::<MemmapRecord>(&text).map_err(|e| {
                Error::config(
                    "resume",
                    format!("{} does not parse: {e}", record_path.display()),
                )
            })?)
        } else {
            None
        };
        let describe = |file: Option<&Path>| match file {
            None => "RAM".to_owned(),
            Some(path) => format!("the memmap file {}", path.display()),
        };
        let wanted = config.replay_location.file()?;
        if record.as_ref().map(|r| &r.path) != wanted.as_ref() {
            return Err(Error::CheckpointMismatch {
                what: "replay_location".to_owned(),
                expected: describe(wanted.as_deref()),
                actual: describe(record.as_ref().map(|r| r.path.as_path())),
            });
        }
        let mismatch = |capacity: usize, columns: usize| Error::CheckpointMismatch {
            what: "replay buffer".to_owned(),
            expected: format!("{} rows of this learner's columns", config.buffer_capacity),
            actual: format!("{capacity} rows of {columns} columns"),
        };
        let buffer = match record {
            None => {
                let replay = ReplayBuffer::load(dir, sampler)?;
                if replay.capacity() != config.buffer_capacity || replay.schema() != schema {
                    return Err(mismatch(replay.capacity(), replay.schema().columns().len()));
                }
                AnyReplay::Ram(replay)
            }
            Some(record) => {
                if record.capacity != config.buffer_capacity {
                    return Err(mismatch(record.capacity, schema.columns().len()));
                }
                let storage = MemmapStorage::open_with(
                    &record.path,
                    schema,
                    record.capacity,
                    MemmapOptions::default(),
                )?;
                let replay = ReplayBuffer::new(storage, sampler);
                if replay.ring().written < record.ring.written {
                    return Err(Error::CheckpointMismatch {
                        what: format!("replay file {}", record.path.display()),
                        expected: format!(
                            "at least the {} rows written at the save",
                            record.ring.written
                        ),
                        actual: format!("{} rows written", replay.ring().written),
                    });
                }
                AnyReplay::Memmap(replay)
            }
        };
        Ok(Self { buffer })
    }

    /// Closes the buffer and, for a memmap buffer, deletes its file (a new run that
    /// failed after creating it).
    pub(super) fn discard(self) {
        let path = self.path().map(Path::to_owned);
        drop(self);
        if let Some(path) = path {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Samples a batch of its size.
    pub(super) fn sample(&mut self, batch: &mut Batch) -> Result<()> {
        Ok(self.buffer.sample(batch)?)
    }

    /// Gives the rows of the last sampled batch new priorities, for prioritized replay
    /// (nothing for uniform sampling).
    pub(super) fn update_priorities(
        &mut self,
        positions: &[usize],
        priorities: &[f32],
    ) -> Result<()> {
        if let Some(sampler) = self.buffer.sampler_mut().as_prioritized_mut() {
            sampler.update_priorities(positions, priorities)?;
        }
        Ok(())
    }
}
