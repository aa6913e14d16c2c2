//! The off-policy trainer's replay buffer: rows in RAM or in a memory-mapped file
//! ([`ReplayLocation`]), uniform or prioritized sampling, and how each location is
//! saved into a run directory and found again.

use std::path::{Path, PathBuf};

use rl_core::{
    Column, DType, Element, Field, Location, MemoryBudget, MemoryPlan, ProcessMemory, Schema,
};
use rl_storage::storage::{HostStorage, READ_MIN_ROW_BYTES};
use rl_storage::{
    Batch, ColumnSlice,
    dedup::{AnyDedup, DedupReplay},
    memmap::{MemmapOptions, MemmapStorage},
    ram::RamStorage,
    replay::{AnyReplay, ByStorage, ReplayBuffer, with_storage},
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
/// What a run directory's `replay/` folder holds for a frame-stacked buffer: the rows
/// written at the save (`u64`, little-endian), then the newest frame of the observation
/// the next step acts on, to end the stream there if a resumed run restarts its
/// episodes.
const NEXT_FRAME: &str = "next_frame.bin";
/// File pages a memmap buffer may keep mapped (resident) before the trainer releases
/// them ([`MemmapStorage::release_pages`]).
const MAPPED_LIMIT: u64 = 32 << 20;
/// The most the kernel maps around one byte a file mapping touches: a whole page-cache
/// folio, at most a PMD (2 MiB on x86-64 with 4 KiB pages; about 1 MiB per random read
/// was measured on Linux 6.18 with ext4, far more than the 64 KiB `fault_around_bytes`).
const FOLIO_MAX: u64 = 2 << 20;

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

/// The rows of an [`OffPolicyReplay`], by how observations are stored.
#[derive(Debug)]
pub(super) enum Stored {
    /// Whole rows: `obs` and `next_obs` in each.
    Rows(AnyReplay),
    /// One frame per row ([`OffPolicyConfig::frame_stack`]).
    Frames(AnyDedup),
}

/// Runs `$body` with `$b` bound to the [`ReplayBuffer`] holding the rows of a
/// [`Stored`], whatever the storage and the kind.
macro_rules! with_rows {
    ($stored:expr, $b:ident => $body:expr) => {
        match $stored {
            Stored::Rows(rows) => with_storage!(rows, $b => $body),
            Stored::Frames(frames) => with_storage!(frames, d => {
                let $b = d.buffer();
                $body
            }),
        }
    };
}

/// The replay buffer of an [`OffPolicyTrainer`](super::OffPolicyTrainer), in RAM or in a
/// memory-mapped file as [`OffPolicyConfig::replay_location`] says, whole rows or one
/// frame per row as [`OffPolicyConfig::frame_stack`] says: the stored rows, read
/// through the same accessors whatever the location.
#[derive(Debug)]
pub struct OffPolicyReplay {
    pub(super) stored: Stored,
    /// The schema of sampled batches.
    batch_schema: Schema,
    /// A memmap buffer's bound on its mapped pages.
    mapped: Option<MappedPages>,
    /// A resumed frame-stacked buffer's saved next frame: the rows written then, the
    /// frame's bytes.
    next_frame: Option<(u64, Vec<u8>)>,
}

/// Keeps the file pages a memmap buffer has mapped under [`MAPPED_LIMIT`]: the
/// process's resident file pages are read after every collection and training phase,
/// and released once they exceed what they were after the last release by the limit.
#[derive(Debug)]
struct MappedPages {
    baseline: u64,
}

impl MappedPages {
    fn new() -> Self {
        Self {
            baseline: ProcessMemory::read().map_or(0, |m| m.rss_file_bytes),
        }
    }
}

impl OffPolicyReplay {
    fn new(stored: Stored) -> Self {
        let batch_schema = match &stored {
            Stored::Rows(rows) => rows.schema().clone(),
            Stored::Frames(frames) => frames.batch_schema().clone(),
        };
        let mapped = (Self::location_of(&stored) == Location::File).then(MappedPages::new);
        Self {
            stored,
            batch_schema,
            mapped,
            next_frame: None,
        }
    }

    fn location_of(stored: &Stored) -> Location {
        match stored {
            Stored::Rows(rows) => rows.location(),
            Stored::Frames(frames) => frames.location(),
        }
    }

    /// Rows stored (with [`OffPolicyConfig::frame_stack`], final rows included).
    pub fn len(&self) -> usize {
        with_rows!(&self.stored, b => b.len())
    }

    /// Whether no row is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows the buffer holds at most.
    pub fn capacity(&self) -> usize {
        with_rows!(&self.stored, b => b.capacity())
    }

    /// The ring: cursor, rows stored, rows and episodes ever written.
    pub fn ring(&self) -> RingState {
        with_rows!(&self.stored, b => b.ring())
    }

    /// The stored row layout (with [`OffPolicyConfig::frame_stack`]: one frame in
    /// `obs`, no `next_obs`, the `final_obs` flag).
    pub fn schema(&self) -> &Schema {
        with_rows!(&self.stored, b => b.schema())
    }

    /// The layout of sampled batches: the learner's transition columns.
    pub fn batch_schema(&self) -> &Schema {
        &self.batch_schema
    }

    /// All `capacity` rows of column `name`, by ring position (see
    /// [`ReplayBuffer::column`]).
    ///
    /// # Errors
    /// An unknown column or another element type.
    pub fn column<T: Element>(&self, name: &str) -> Result<&[T]> {
        Ok(with_rows!(&self.stored, b => b.column::<T>(name))?)
    }

    /// Where the rows live: [`Location::Ram`] or [`Location::File`].
    pub fn location(&self) -> Location {
        Self::location_of(&self.stored)
    }

    /// The memmap file (`None` in RAM).
    pub fn path(&self) -> Option<&Path> {
        match &self.stored {
            Stored::Rows(rows) => rows.path(),
            Stored::Frames(ByStorage::Memmap(d)) => Some(d.buffer().storage().path()),
            Stored::Frames(ByStorage::Ram(_)) => None,
        }
    }

    /// What the storage and the sampler hold.
    pub fn memory_plan(&self) -> MemoryPlan {
        with_rows!(&self.stored, b => b.memory_plan())
    }

    /// The whole rows inside, for writers of whole rows (remote chunks).
    pub(super) fn rows_mut(&mut self) -> Result<&mut AnyReplay> {
        match &mut self.stored {
            Stored::Rows(rows) => Ok(rows),
            Stored::Frames(_) => Err(Error::config(
                "frame_stack",
                "is set, but this collector writes whole rows: leave frame_stack out",
            )),
        }
    }

    /// The storage's plan for rows of `schema` under `config` (capacity and location),
    /// nothing allocated or created: the trainer's `replay` lines.
    ///
    /// # Errors
    /// A capacity whose bytes overflow.
    pub fn plan(schema: &Schema, config: &OffPolicyConfig) -> Result<MemoryPlan> {
        let stored = storage_schema(schema, config)?;
        Ok(match config.replay_location {
            ReplayLocation::Ram => RamStorage::plan(&stored, config.buffer_capacity)?,
            ReplayLocation::Memmap { .. } => MemmapStorage::plan(&stored, config.buffer_capacity)?,
        })
    }

    /// The resident file pages a memmap buffer for `schema` under `config` keeps at
    /// most, for a learner sampling `batch_size` rows (nothing for RAM): the limit past
    /// which they are released, plus what one collection or one gradient step maps
    /// before the next check. The kernel maps whole page-cache folios, up to
    /// [`FOLIO_MAX`], around each byte a mapping touches, so: writes at the ring's head
    /// map the rows written and at most a folio ahead in each column; sampled rows of
    /// [`READ_MIN_ROW_BYTES`] or more are read by copy and map nothing
    /// ([`HostStorage::reads_by_copy`](rl_storage::storage::HostStorage::reads_by_copy));
    /// a smaller column read at random maps a folio per sampled row, never more than the
    /// whole column.
    ///
    /// # Errors
    /// As [`OffPolicyReplay::plan`].
    pub(crate) fn mapped_plan(
        schema: &Schema,
        config: &OffPolicyConfig,
        run: &RunConfig,
        batch_size: usize,
    ) -> Result<MemoryPlan> {
        if config.replay_location == ReplayLocation::Ram {
            return Ok(MemoryPlan::new());
        }
        let stored = storage_schema(schema, config)?;
        let chunk = match config.collector {
            super::CollectorChoice::Sync => config.phase_steps(run),
            super::CollectorChoice::Async {
                steps_per_chunk, ..
            } => steps_per_chunk as u64 * run.n_envs as u64,
        };
        // A step writes a row (and, frame-stacked, a final row) in every column.
        let collection: u64 = stored
            .columns()
            .iter()
            .map(|c| 2 * chunk * c.row_bytes() as u64 + FOLIO_MAX)
            .sum();
        // A sampled row reads its own row of every column, and frame-stacked its two
        // stacks in `obs`, a run of `stack + 1` rows, one or two folios.
        let stack = config.frame_stack.map_or(0, |k| k as u64);
        let update: u64 = stored
            .columns()
            .iter()
            .filter(|c| c.row_bytes() < READ_MIN_ROW_BYTES)
            .map(|c| {
                let stacked = c.name() == Field::Obs.name() && stack > 1;
                let folios = if stacked { 2 } else { 1 };
                let whole = config.buffer_capacity as u64 * c.row_bytes() as u64;
                whole.min(batch_size as u64 * folios * FOLIO_MAX)
            })
            .sum();
        Ok(MemoryPlan::new().with(
            "file pages mapped (released past 32 MiB)",
            Location::Ram,
            MAPPED_LIMIT + collection.max(update),
        ))
    }

    /// Releases the memmap file's pages once the process's resident file pages grew by
    /// [`MAPPED_LIMIT`] since the last release (nothing in RAM). Called after every
    /// collection and gradient step.
    pub(super) fn bound_mapped(&mut self) -> Result<()> {
        let Some(mapped) = &mut self.mapped else {
            return Ok(());
        };
        let Ok(memory) = ProcessMemory::read() else {
            return Ok(());
        };
        if memory.rss_file_bytes <= mapped.baseline + MAPPED_LIMIT {
            return Ok(());
        }
        match &self.stored {
            Stored::Rows(ByStorage::Memmap(b)) => b.storage().release_pages()?,
            Stored::Frames(ByStorage::Memmap(d)) => d.buffer().storage().release_pages()?,
            _ => {}
        }
        *mapped = MappedPages::new();
        Ok(())
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
        let schema = storage_schema(schema, config)?;
        let buffer = match (&config.replay_location, config.replay_location.file()?) {
            (ReplayLocation::Memmap { dir }, Some(file)) => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    Error::config(
                        "replay_location.dir",
                        format!("{} cannot be created: {e}", dir.display()),
                    )
                })?;
                let storage =
                    MemmapStorage::create(file, schema, capacity, MemmapOptions::default())?;
                AnyReplay::Memmap(ReplayBuffer::new(storage, sampler))
            }
            _ => {
                let storage = RamStorage::new(schema, capacity, Some(budget))?;
                AnyReplay::Ram(ReplayBuffer::new(storage, sampler))
            }
        };
        Ok(Self::new(stored(buffer, config)?))
    }

    /// Saves the buffer into `dir` (a run directory's `replay/` folder): the stored rows
    /// (RAM), or a commit of the file and its path (memmap); for a frame-stacked buffer
    /// also `observation`'s newest frame (the observation the next step acts on, as
    /// bytes), which ends the stream if the run is resumed with new episodes.
    pub(super) fn save(&mut self, dir: &Path, observation: Option<&[u8]>) -> Result<()> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::config("checkpoint", format!("creating {}: {e}", dir.display())))?;
        let record = match &mut self.stored {
            Stored::Rows(ByStorage::Ram(b)) => {
                b.save(dir)?;
                None
            }
            Stored::Frames(ByStorage::Ram(d)) => {
                d.buffer().save(dir)?;
                None
            }
            Stored::Rows(ByStorage::Memmap(b)) => {
                b.commit()?;
                Some(MemmapRecord {
                    path: b.storage().path().to_owned(),
                    capacity: b.capacity(),
                    ring: b.ring(),
                })
            }
            Stored::Frames(ByStorage::Memmap(d)) => {
                d.commit()?;
                let b = d.buffer();
                Some(MemmapRecord {
                    path: b.storage().path().to_owned(),
                    capacity: b.capacity(),
                    ring: b.ring(),
                })
            }
        };
        if let Some(record) = record {
            let text = serde_json::to_vec_pretty(&record)
                .map_err(|e| Error::config("checkpoint", format!("replay record: {e}")))?;
            write_file(&dir.join(MEMMAP_RECORD), &text)?;
        }
        if let (Stored::Frames(_), Some(observation)) = (&self.stored, observation) {
            let frame = self.frame_bytes();
            if observation.len() < frame {
                return Err(Error::config(
                    "checkpoint",
                    "the observation is shorter than one stored frame",
                ));
            }
            let mut bytes = self.ring().written.to_le_bytes().to_vec();
            bytes.extend_from_slice(&observation[observation.len() - frame..]);
            write_file(&dir.join(NEXT_FRAME), &bytes)?;
        }
        Ok(())
    }

    /// Bytes of one stored observation frame (one row of `obs`).
    fn frame_bytes(&self) -> usize {
        let schema = self.schema();
        schema
            .index_of(Field::Obs.name())
            .map_or(0, |i| schema.columns()[i].row_bytes())
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
        let schema = &storage_schema(schema, config)?;
        let record_path = dir.join(MEMMAP_RECORD);
        let record = if record_path.exists() {
            let text = read_file(&record_path)?;
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
            expected: format!(
                "{} rows of this learner's columns{}",
                config.buffer_capacity,
                if config.frame_stack.is_some() {
                    ", one frame per row"
                } else {
                    ""
                }
            ),
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
        let mut replay = Self::new(stored(buffer, config)?);
        let next_frame = dir.join(NEXT_FRAME);
        if config.frame_stack.is_some() && next_frame.exists() {
            let bytes = read_file(&next_frame)?;
            let frame = replay.frame_bytes();
            if bytes.len() != 8 + frame {
                return Err(Error::config(
                    "resume",
                    format!(
                        "{} holds {} bytes; a frame of this buffer needs {}",
                        next_frame.display(),
                        bytes.len(),
                        8 + frame
                    ),
                ));
            }
            let (written, frame) = bytes.split_at(8);
            let written = u64::from_le_bytes(written.try_into().unwrap_or([0; 8]));
            let words = frame.to_vec();
            replay.next_frame = Some((written, words));
        }
        Ok(replay)
    }

    /// For a frame-stacked buffer of a run resumed with new episodes: ends the stream
    /// of the episode the save interrupted ([`DedupReplay::close_stream`]) with the
    /// frame that followed its newest row, so that row stays a complete transition and
    /// the next episode starts a new stack. The frame saved with the buffer when its
    /// rows are the saved ones; otherwise (a file that went on past its save) the newest
    /// row's own frame, so only that one transition's next frame is off by a step.
    /// Nothing for whole rows.
    pub(super) fn close_stream(&mut self) -> Result<()> {
        let frame = self.frame_bytes();
        let written = self.ring().written;
        let Stored::Frames(frames) = &mut self.stored else {
            return Ok(());
        };
        let schema = frames.schema();
        let Some(obs) = schema.index_of(Field::Obs.name()) else {
            return Ok(());
        };
        let dtype = schema.columns()[obs].dtype();
        let bytes = match self.next_frame.take() {
            Some((at, bytes)) if at == written => bytes,
            _ => {
                let newest = with_storage!(&*frames, d => {
                    let b = d.buffer();
                    let ring = b.ring();
                    let position = (ring.cursor + b.capacity() - 1) % b.capacity();
                    (ring.len > 0).then(|| {
                        b.storage().column(obs)[position * frame..(position + 1) * frame].to_vec()
                    })
                });
                let Some(newest) = newest else {
                    return Ok(());
                };
                newest
            }
        };
        let floats: Vec<f32>;
        let slice = match dtype {
            DType::F32 => {
                floats = bytemuck::pod_collect_to_vec(&bytes);
                ColumnSlice::F32(&floats)
            }
            _ => ColumnSlice::U8(&bytes),
        };
        Ok(frames.close_stream(slice)?)
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
        match &mut self.stored {
            Stored::Rows(rows) => rows.sample(batch)?,
            Stored::Frames(frames) => frames.sample(batch)?,
        }
        Ok(())
    }

    /// Gives the rows of the last sampled batch new priorities, for prioritized replay
    /// (nothing for uniform sampling).
    pub(super) fn update_priorities(
        &mut self,
        positions: &[usize],
        priorities: &[f32],
    ) -> Result<()> {
        if let Stored::Rows(rows) = &mut self.stored
            && let Some(sampler) = rows.sampler_mut().as_prioritized_mut()
        {
            sampler.update_priorities(positions, priorities)?;
        }
        Ok(())
    }
}

/// The stored rows for the learner's transition `schema` under `config`: the schema
/// itself, or with [`OffPolicyConfig::frame_stack`] = `k` one frame per row (`obs`
/// without its leading stack dimension of `k`, no `next_obs`, the `final_obs` flag).
///
/// The learner's columns are flat, so a frame is `1 / k` of an observation's elements:
/// the collector checks at every step that they are frames, the stack's first
/// dimension.
///
/// # Errors
/// With a frame stack: observations whose elements are not a multiple of `k`, or
/// columns a deduplicating buffer cannot fill (anything but the five step columns and
/// `next_obs`).
pub(super) fn storage_schema(schema: &Schema, config: &OffPolicyConfig) -> Result<Schema> {
    let Some(frames) = config.frame_stack else {
        return Ok(schema.clone());
    };
    // obs, action, reward, terminated, truncated.
    let step = &Field::ALL[..5];
    let mut columns = Vec::with_capacity(schema.columns().len());
    for column in schema.columns() {
        let name = column.name();
        if name == Field::NextObs.name() {
            continue;
        }
        if !step.iter().any(|f| f.name() == name) {
            return Err(Error::config(
                "frame_stack",
                format!(
                    "is set, but the learner stores a column `{name}`, which a deduplicating buffer does not fill: leave frame_stack out"
                ),
            ));
        }
        if name == Field::Obs.name() {
            let numel = column.numel();
            if !numel.is_multiple_of(frames) {
                return Err(Error::config(
                    "frame_stack",
                    format!(
                        "is {frames}, but an observation has {numel} elements, not {frames} frames of equal size: set frame_stack to the environment's stack (the first dimension of its observations), or leave it out"
                    ),
                ));
            }
            columns.push(Column::new(name, column.dtype(), &[numel / frames]));
        } else {
            columns.push(column.clone());
        }
    }
    Ok(DedupReplay::<RamStorage>::schema(columns)?)
}

/// `buffer` as `config` stores observations: whole rows, or a deduplicating buffer of
/// `frame_stack` frames over its rows.
fn stored(buffer: AnyReplay, config: &OffPolicyConfig) -> Result<Stored> {
    let Some(frames) = config.frame_stack else {
        return Ok(Stored::Rows(buffer));
    };
    Ok(Stored::Frames(match buffer {
        ByStorage::Ram(b) => ByStorage::Ram(DedupReplay::from_buffer(b)?.with_frame_stack(frames)?),
        ByStorage::Memmap(b) => {
            ByStorage::Memmap(DedupReplay::from_buffer(b)?.with_frame_stack(frames)?)
        }
    }))
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes)
        .map_err(|e| Error::config("checkpoint", format!("writing {}: {e}", path.display())))
}

fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|e| Error::config("resume", format!("cannot read {}: {e}", path.display())))
}
