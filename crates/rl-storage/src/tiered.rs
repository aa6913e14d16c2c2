//! Tiered replay: every row in a memory-mapped file, the newest rows on the device too.
//!
//! A [`TieredReplay`] has one index space (the ring positions of its file) and two tiers:
//!
//! - the **cold tier** is a [`MemmapStorage`]: every stored row, durable, with crash-safe
//!   commits and a reopen that resumes where the last commit left off;
//! - the **hot tier** is a ring of `hot_rows` rows per column on a device
//!   ([`DeviceBackend`]): the newest rows, which is where most samplers (and all
//!   recency-weighted ones) draw most often.
//!
//! Samplers draw over *all* stored rows; each drawn row is gathered from the fastest tier
//! that holds it, on the device, into a [`DeviceBatch`]: hot rows by one device gather out
//! of the hot ring, cold rows by a host gather out of the file into a reused staging
//! buffer, one upload into a reused device scratch buffer, and a device gather from
//! there into the batch slots they were drawn for.

use std::path::Path;

use rl_core::{Column, Location, MemoryBudget, MemoryPlan, Schema};

use crate::column::ColumnSlice;
use crate::copy::{self, Stores};
use crate::device::{DeviceBackend, DeviceBatch, encode_pairs};
use crate::error::{Error, Result};
use crate::memmap::{MemmapOptions, MemmapStorage};
use crate::ring::{self, CopyError, HostSink, RingWriter, RowSink, WritePlan};
use crate::sampler::Sampler;
use crate::storage::{HostStorage, RingState, Storage};
use rl_core::NonFinite;

/// Bytes of one encoded (source position, destination slot) pair, see [`encode_pairs`].
const PAIR_BYTES: usize = 8;
/// Host bytes per batch row of the split scratch: a hot (position, slot) pair, a cold
/// position and a cold slot.
const SPLIT_BYTES: usize = size_of::<(usize, usize)>() + 2 * size_of::<usize>();

/// How a [`TieredReplay`] splits its rows between the tiers, how large its batches get,
/// and how its file is created or opened.
///
/// ```
/// use rl_storage::{memmap::{Fallback, MemmapOptions}, device::TieredConfig};
///
/// let config = TieredConfig::new(1 << 16, 256)
///     .with_memmap(MemmapOptions { fallback: Fallback::Refuse });
/// assert_eq!((config.hot_rows, config.batch_rows), (65_536, 256));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TieredConfig {
    /// The newest rows also kept on the device (the hot tier), in `1..=capacity`.
    pub hot_rows: usize,
    /// The most rows one sample gathers: it sizes the pair buffers, the cold scratch
    /// buffer and the staging buffers, all allocated at construction.
    pub batch_rows: usize,
    /// How the file (the cold tier) is created or opened.
    pub memmap: MemmapOptions,
}

impl TieredConfig {
    /// `hot_rows` newest rows on the device, batches of up to `batch_rows` rows, default
    /// file options.
    pub fn new(hot_rows: usize, batch_rows: usize) -> Self {
        Self {
            hot_rows,
            batch_rows,
            memmap: MemmapOptions::default(),
        }
    }

    /// This configuration with other file options.
    pub fn with_memmap(mut self, options: MemmapOptions) -> Self {
        self.memmap = options;
        self
    }

    /// What a [`TieredReplay`] of `schema` at `capacity` rows with this configuration
    /// holds, before anything is created: [`Location::File`] lines for the file (they add
    /// up to its length), [`Location::Gpu`] lines for the hot tier, the cold scratch
    /// buffer and the pair buffers, [`Location::Ram`] lines for the (page-locked, on
    /// CUDA) staging buffers and the host split scratch. Batches
    /// ([`DeviceBatch::plan`]) and the sampler's memory are not included.
    ///
    /// # Errors
    /// `hot_rows` outside `1..=capacity`, zero `batch_rows`, positions past `u32`, a zero
    /// capacity, or sizes that overflow.
    pub fn plan(&self, schema: &Schema, capacity: usize) -> Result<MemoryPlan> {
        self.validate(capacity)?;
        let mut plan = MemoryPlan::new();
        plan.nest("tiered/file", &MemmapStorage::plan(schema, capacity)?);
        plan_devices(&mut plan, schema, self)?;
        Ok(plan)
    }

    /// Checks the sizes against a capacity.
    fn validate(&self, capacity: usize) -> Result<()> {
        if self.hot_rows == 0 || self.hot_rows > capacity {
            return Err(Error::config(
                "hot_rows",
                format!(
                    "is {}: the hot tier holds between 1 and the capacity ({capacity}) rows",
                    self.hot_rows
                ),
            ));
        }
        if self.batch_rows == 0 {
            return Err(Error::config(
                "batch_rows",
                "is zero: a batch needs room for at least one row",
            ));
        }
        // Device gathers read u32 positions: hot positions and scratch rows must fit.
        let fits = |rows: usize| u32::try_from(rows - 1).is_ok();
        if !fits(self.hot_rows) || !fits(self.batch_rows) {
            return Err(Error::config(
                "tiered replay",
                format!(
                    "hot_rows {} and batch_rows {} must each be at most 2^32: device gathers \
                     address rows with u32",
                    self.hot_rows, self.batch_rows
                ),
            ));
        }
        Ok(())
    }
}

/// `rows * row_bytes`, or an error naming `what`.
fn bytes(rows: usize, row_bytes: usize, what: &str) -> Result<u64> {
    rows.checked_mul(row_bytes)
        .map(|b| b as u64)
        .ok_or_else(|| {
            Error::config(
                what,
                format!("{rows} rows of {row_bytes} bytes overflow the address space: lower it"),
            )
        })
}

/// The device and staging lines of a plan (everything but the file), in allocation
/// order.
fn plan_devices(plan: &mut MemoryPlan, schema: &Schema, config: &TieredConfig) -> Result<()> {
    let (hot, batch) = (config.hot_rows, config.batch_rows);
    for column in schema.columns() {
        plan.add(
            format!("tiered/hot/{}", column.name()),
            Location::Gpu,
            bytes(hot, column.row_bytes(), "hot_rows")?,
        );
    }
    let widest = schema
        .columns()
        .iter()
        .map(Column::row_bytes)
        .max()
        .unwrap_or(0);
    plan.add(
        "tiered/cold_scratch",
        Location::Gpu,
        bytes(batch, widest, "batch_rows")?,
    );
    let pairs = bytes(batch, PAIR_BYTES, "batch_rows")?;
    plan.add("tiered/pairs/hot", Location::Gpu, pairs);
    plan.add("tiered/pairs/cold", Location::Gpu, pairs);
    for column in schema.columns() {
        plan.add(
            format!("tiered/staging/{}", column.name()),
            Location::Ram,
            bytes(batch, column.row_bytes(), "batch_rows")?,
        );
    }
    plan.add("tiered/staging/pairs", Location::Ram, 2 * pairs);
    plan.add(
        "tiered/split",
        Location::Ram,
        bytes(batch, SPLIT_BYTES, "batch_rows")?,
    );
    Ok(())
}

/// Rows one sample (or all samples so far) took from each tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierCounts {
    /// Rows gathered from the hot tier (device memory).
    pub hot: u64,
    /// Rows gathered from the cold tier (the file, through staging).
    pub cold: u64,
}

impl TierCounts {
    /// Rows gathered from both tiers.
    pub fn rows(&self) -> u64 {
        self.hot + self.cold
    }

    /// The share of rows that came from the hot tier (0 when no row was gathered).
    pub fn hot_fraction(&self) -> f64 {
        match self.rows() {
            0 => 0.0,
            rows => self.hot as f64 / rows as f64,
        }
    }
}

/// A replay buffer in two tiers: **every** row in a memory-mapped file (durable,
/// crash-safe commits), the **newest** `hot_rows` rows also in device memory; samplers draw
/// over all stored rows, and each drawn row is gathered from the fastest tier holding it.
///
/// One index space: positions are the ring positions of the file, as in a
/// [`crate::replay::ReplayBuffer`] over a [`MemmapStorage`], and every sampler works unchanged.
/// The row written `w`-th ever (counting from 0, across reopens) sits at hot position
/// `w % hot_rows`, so the hot ring always holds the newest rows. A drawn row whose logical
/// index `i` (0 = oldest stored) is at least `len - hot_len` is *hot*: its (hot position,
/// slot) pair goes to one device gather per column. The others are *cold*: per column,
/// they are gathered on the host from the file into a staging buffer (rows `0..k`),
/// uploaded to a device scratch buffer, and gathered from there into their slots.
/// `hot_len` is `min(hot_rows, len)`, unless a device error interrupted an upload (see
/// [`TieredReplay::extend`]).
///
/// Everything is allocated at construction and reported by [`TieredConfig::plan`]:
/// writing, sampling, gathering and committing allocate nothing on the host or the
/// device. Reopening a file ([`TieredReplay::open`]) refills the hot tier from the newest
/// rows of the file; the hot tier size may change between runs.
///
/// ```
/// use rl_core::{Column, DType, Field, Schema};
/// use rl_storage::{ColumnSlice, device::{FakeDevice, TieredConfig, TieredReplay}, sampler::Uniform};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("replay.rlmm");
/// let schema = Schema::new([
///     Column::new(Field::Obs.name(), DType::F32, &[2]),
///     Column::scalar(Field::Reward.name(), DType::F32),
/// ])?;
/// let device = FakeDevice::new(); // a CUDA device in real use
/// let config = TieredConfig::new(4, 8); // the newest 4 rows on the device, batches of 8
/// println!("{}", config.plan(&schema, 100)?); // file, GPU and staging bytes, up front
///
/// let mut replay =
///     TieredReplay::create(&path, device.clone(), schema, 100, config, Uniform::new(0), None)?;
/// let obs: Vec<f32> = (0..20).map(|i| i as f32).collect();
/// let reward: Vec<f32> = (0..10).map(|i| i as f32).collect();
/// replay.extend(&[ColumnSlice::from(&obs[..]), ColumnSlice::from(&reward[..])])?;
///
/// let mut batch = replay.new_batch()?; // allocated once, reused
/// replay.sample(&mut batch)?;
/// let counts = replay.last_sample_counts();
/// assert_eq!(counts.hot + counts.cold, 8);
/// let mut rewards = [0.0f32; 8];
/// batch.download(&device, Field::Reward.name(), &mut rewards)?;
/// assert!(rewards.iter().all(|&r| (0.0..10.0).contains(&r)));
///
/// replay.commit()?; // durable: reopening gives the 10 rows back, hot tier refilled
/// drop(replay);
/// let replay = TieredReplay::open(&path, device, TieredConfig::new(2, 8), Uniform::new(0), None)?;
/// assert_eq!((replay.len(), replay.hot_len()), (10, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TieredReplay<D: DeviceBackend, P: Sampler> {
    device: D,
    storage: MemmapStorage,
    sampler: P,
    ring: RingWriter,
    config: TieredConfig,
    /// Streaming stores for files larger than the cache.
    stores: Stores,
    /// The newest rows the hot tier holds for sure: `min(hot_rows, len)`, unless an
    /// upload failed (then 0, growing again with every write).
    hot_len: usize,
    /// One device ring of `hot_rows` rows per column.
    hot: Vec<D::Buffer>,
    /// `batch_rows` rows of the widest column: cold rows of one column at a time.
    cold_scratch: D::Buffer,
    /// (hot position, slot) pairs of the current sample, on the device.
    hot_pairs: D::Buffer,
    /// (scratch row, slot) pairs of the current sample, on the device.
    cold_pairs: D::Buffer,
    /// Host staging for the hot and the cold pairs.
    pair_staging: [D::Staging; 2],
    /// Host staging for the cold rows, one per column (filled while earlier columns'
    /// uploads are in flight).
    column_staging: Vec<D::Staging>,
    /// The current sample's split, reused: hot (position, slot) pairs, cold file
    /// positions and their slots.
    hot_split: Vec<(usize, usize)>,
    cold_positions: Vec<usize>,
    cold_slots: Vec<usize>,
    last: TierCounts,
    total: TierCounts,
}

impl<D: DeviceBackend, P: Sampler> TieredReplay<D, P> {
    /// What a tiered replay of `schema` at `capacity` rows holds: see
    /// [`TieredConfig::plan`].
    ///
    /// # Errors
    /// As [`TieredConfig::plan`].
    pub fn plan(schema: &Schema, capacity: usize, config: &TieredConfig) -> Result<MemoryPlan> {
        config.plan(schema, capacity)
    }

    /// Creates the file at `path` (see [`MemmapStorage::create`]) and the device tier on
    /// `device`, refusing first, before creating or allocating anything, a configuration
    /// whose plan (with the sampler's memory) does not fit `budget`.
    ///
    /// # Errors
    /// An invalid configuration (see [`TieredConfig::plan`]), over budget, the errors of
    /// [`MemmapStorage::create`], or a device allocation or upload error (the new file is
    /// removed then).
    pub fn create(
        path: impl AsRef<Path>,
        device: D,
        schema: Schema,
        capacity: usize,
        config: TieredConfig,
        sampler: P,
        budget: Option<&MemoryBudget>,
    ) -> Result<Self> {
        if let Some(budget) = budget {
            check_budget(&schema, capacity, &config, &sampler, budget)?;
        }
        let storage = MemmapStorage::create(path, schema, capacity, config.memmap)?;
        let path = storage.path().to_path_buf();
        Self::build(storage, device, config, sampler).inspect_err(|_| {
            // The storage was dropped (and unlocked) inside `build`; an empty file left
            // behind would only make the next `create` at this path fail.
            let _ = std::fs::remove_file(&path);
        })
    }

    /// Opens the file at `path` (see [`MemmapStorage::open`]), resumes from its last
    /// commit, and refills the hot tier with the newest `min(hot_rows, len)` rows of the
    /// file. `config.hot_rows` and `config.batch_rows` may differ from the run that wrote
    /// the file.
    ///
    /// Refuses, before allocating anything on the device, a configuration whose plan
    /// (with the sampler's memory) does not fit `budget`.
    ///
    /// # Errors
    /// The errors of [`MemmapStorage::open`], an invalid configuration for the file's
    /// capacity, over budget, or a device allocation or upload error.
    pub fn open(
        path: impl AsRef<Path>,
        device: D,
        config: TieredConfig,
        sampler: P,
        budget: Option<&MemoryBudget>,
    ) -> Result<Self> {
        let storage = MemmapStorage::open(path, config.memmap)?;
        if let Some(budget) = budget {
            check_budget(
                storage.schema(),
                storage.capacity(),
                &config,
                &sampler,
                budget,
            )?;
        }
        Self::build(storage, device, config, sampler)
    }

    /// Allocates the device tier and the staging buffers, then fills the hot tier from the
    /// storage's restored rows.
    fn build(
        storage: MemmapStorage,
        device: D,
        config: TieredConfig,
        mut sampler: P,
    ) -> Result<Self> {
        let capacity = storage.capacity();
        config.validate(capacity)?;
        let schema = storage.schema();
        let batch = config.batch_rows;
        let hot = schema
            .columns()
            .iter()
            .map(|column| device.alloc(config.hot_rows * column.row_bytes()))
            .collect::<Result<Vec<_>>>()?;
        let widest = schema
            .columns()
            .iter()
            .map(Column::row_bytes)
            .max()
            .unwrap_or(0);
        let cold_scratch = device.alloc(batch * widest)?;
        let hot_pairs = device.alloc(batch * PAIR_BYTES)?;
        let cold_pairs = device.alloc(batch * PAIR_BYTES)?;
        let column_staging = schema
            .columns()
            .iter()
            .map(|column| device.alloc_staging(batch * column.row_bytes()))
            .collect::<Result<Vec<_>>>()?;
        let pair_staging = [
            device.alloc_staging(batch * PAIR_BYTES)?,
            device.alloc_staging(batch * PAIR_BYTES)?,
        ];
        let ring = RingWriter::new(schema, capacity, storage.restored());
        ring.announce_stored(&mut sampler);
        let stores = Stores::for_storage_bytes(schema.row_bytes().saturating_mul(capacity));
        let mut replay = Self {
            device,
            storage,
            sampler,
            ring,
            config,
            stores,
            hot_len: 0,
            hot,
            cold_scratch,
            hot_pairs,
            cold_pairs,
            pair_staging,
            column_staging,
            hot_split: Vec::with_capacity(batch),
            cold_positions: Vec::with_capacity(batch),
            cold_slots: Vec::with_capacity(batch),
            last: TierCounts::default(),
            total: TierCounts::default(),
        };
        replay.refill_hot()?;
        Ok(replay)
    }

    /// This buffer with another policy for non-finite values.
    pub fn with_non_finite(mut self, policy: NonFinite) -> Self {
        self.ring.set_non_finite(policy);
        self
    }

    /// The row layout.
    pub fn schema(&self) -> &Schema {
        self.storage.schema()
    }

    /// Rows stored (in the file; the newest of them on the device too).
    pub fn len(&self) -> usize {
        self.ring.state().len
    }

    /// Whether no row is stored.
    pub fn is_empty(&self) -> bool {
        self.ring.state().len == 0
    }

    /// Rows the buffer holds at most.
    pub fn capacity(&self) -> usize {
        self.storage.capacity()
    }

    /// Rows the hot tier holds at most.
    pub fn hot_rows(&self) -> usize {
        self.config.hot_rows
    }

    /// The newest rows the hot tier holds now: `min(hot_rows, len)`, unless a device
    /// error interrupted an upload (see [`TieredReplay::extend`]).
    pub fn hot_len(&self) -> usize {
        self.hot_len
    }

    /// The most rows one sample gathers.
    pub fn batch_rows(&self) -> usize {
        self.config.batch_rows
    }

    /// The configuration the buffer was built with.
    pub fn config(&self) -> &TieredConfig {
        &self.config
    }

    /// Cursor, fill and counters of the ring.
    pub fn ring(&self) -> RingState {
        self.ring.state()
    }

    /// The file (the cold tier: every stored row).
    pub fn storage(&self) -> &MemmapStorage {
        &self.storage
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The sampler.
    pub fn sampler(&self) -> &P {
        &self.sampler
    }

    /// The sampler, mutably (to update priorities, for instance).
    pub fn sampler_mut(&mut self) -> &mut P {
        &mut self.sampler
    }

    /// Rows the last sample or gather took from each tier.
    pub fn last_sample_counts(&self) -> TierCounts {
        self.last
    }

    /// Rows all samples and gathers so far took from each tier.
    pub fn total_counts(&self) -> TierCounts {
        self.total
    }

    /// The share of the last sample's rows that came from the hot tier.
    pub fn hot_fraction_last_sample(&self) -> f64 {
        self.last.hot_fraction()
    }

    /// File, device, staging and sampler memory, line by line (batches excluded).
    pub fn memory_plan(&self) -> MemoryPlan {
        let mut plan = MemoryPlan::new();
        plan.nest("tiered/file", &self.storage.memory_plan());
        // Cannot fail: the same sizes were planned and allocated at construction.
        let _ = plan_devices(&mut plan, self.storage.schema(), &self.config);
        plan.nest("tiered/sampler", &self.sampler.memory_plan());
        plan
    }

    /// A batch of [`TieredReplay::batch_rows`] rows on this buffer's device.
    ///
    /// # Errors
    /// Out of device memory.
    pub fn new_batch(&self) -> Result<DeviceBatch<D>> {
        DeviceBatch::new(&self.device, self.storage.schema(), self.config.batch_rows)
    }

    /// Appends one row: one single-row slice per column, in schema order.
    ///
    /// # Errors
    /// As [`TieredReplay::extend`], and [`Error::RowMismatch`] for more than one row.
    pub fn push(&mut self, row: &[ColumnSlice<'_>]) -> Result<()> {
        ring::check_single_row(self.schema(), row)?;
        self.extend(row).map(|_| ())
    }

    /// Appends rows given as one slice per column, in schema order, each holding the same
    /// number of rows: into the file, and the newest `min(rows, hot_rows)` of them into
    /// the hot tier. Overwrites the oldest rows once full. Returns the rows written.
    ///
    /// Everything is validated before anything is written: a refused write changes
    /// nothing. The hot tier is written first: if the device fails part way, neither the
    /// file nor the ring changed, and the hot tier is marked empty
    /// ([`TieredReplay::hot_len`] 0), so every row is served from the file until writes
    /// (or [`TieredReplay::refill_hot`]) fill it again. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ColumnCount`], [`Error::DTypeMismatch`], [`Error::RowMismatch`],
    /// [`Error::NonFinite`] (unless allowed), a file I/O error, or a device error.
    pub fn extend(&mut self, columns: &[ColumnSlice<'_>]) -> Result<usize> {
        let mut sink = TieredSink {
            file: HostSink {
                storage: &mut self.storage,
                stores: self.stores,
            },
            device: &self.device,
            hot: &mut self.hot,
            hot_rows: self.config.hot_rows,
            hot_len: &mut self.hot_len,
        };
        let rows = self.ring.write(&mut sink, &mut self.sampler, columns)?;
        self.hot_len = (self.hot_len + rows.min(self.capacity()))
            .min(self.config.hot_rows)
            .min(self.ring.state().len);
        Ok(rows)
    }

    /// Uploads the newest `min(hot_rows, len)` rows of the file to the hot tier (done by
    /// [`TieredReplay::open`]; needed again only after a device error). Allocates
    /// nothing.
    ///
    /// # Errors
    /// A device error (the hot tier is then left empty: rows are served from the file).
    pub fn refill_hot(&mut self) -> Result<()> {
        self.hot_len = 0;
        let capacity = self.capacity();
        let ring = self.ring.state();
        let rows = self.config.hot_rows.min(ring.len);
        if rows == 0 {
            return Ok(());
        }
        let first = ring.position(ring.len - rows, capacity);
        let global = ring.written - rows as u64;
        let hot_start = (global % self.config.hot_rows as u64) as usize;
        for (index, column) in self.storage.schema().columns().iter().enumerate() {
            upload_rows(
                &self.device,
                &mut self.hot[index],
                column.row_bytes(),
                self.storage.column(index),
                first,
                hot_start,
                rows,
            )?;
        }
        self.hot_len = rows;
        Ok(())
    }

    /// Samples `batch.room()` rows into `batch`.
    ///
    /// # Errors
    /// As [`TieredReplay::sample_rows`].
    pub fn sample(&mut self, batch: &mut DeviceBatch<D>) -> Result<()> {
        self.sample_rows(batch, batch.room())
    }

    /// Lets the sampler draw `rows` positions over all stored rows (a sampler may return
    /// fewer, see [`DeviceBatch::len`]) and gathers them into `batch`, each from the
    /// fastest tier holding it. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::Empty`], [`Error::BatchSchema`], more rows than
    /// [`TieredConfig::batch_rows`], the sampler's errors, or a device error. The batch
    /// is left empty on error.
    pub fn sample_rows(&mut self, batch: &mut DeviceBatch<D>, rows: usize) -> Result<()> {
        batch.set_len(0);
        self.check_batch(batch, rows)?;
        if self.ring.state().len == 0 {
            return Err(Error::Empty);
        }
        let (_, columns, positions, weights) = batch.parts_mut();
        let context = self.ring.host_context(&self.storage);
        let drawn = self.sampler.sample(&context, rows, positions, weights)?;
        if drawn > rows.min(positions.len()) {
            return Err(Error::config(
                "sampler",
                format!("returned {drawn} rows when at most {rows} were asked for"),
            ));
        }
        self.fill(&positions[..drawn], columns)?;
        batch.set_len(drawn);
        Ok(())
    }

    /// Gathers the rows at the given storage `positions` into `batch` (weights 1), each
    /// from the fastest tier holding it. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::BatchSchema`], [`Error::NotEnoughRows`] if the batch is too small, more
    /// rows than [`TieredConfig::batch_rows`], an invalid-configuration error naming a
    /// position that holds no row, or a device error. The batch is left empty on error.
    pub fn gather(&mut self, positions: &[usize], batch: &mut DeviceBatch<D>) -> Result<()> {
        let rows = positions.len();
        batch.set_len(0);
        self.check_batch(batch, rows)?;
        if rows > batch.room() {
            return Err(Error::NotEnoughRows {
                requested: rows,
                available: batch.room(),
            });
        }
        let (_, columns, slots, weights) = batch.parts_mut();
        slots[..rows].copy_from_slice(positions);
        weights[..rows].fill(1.0);
        self.fill(positions, columns)?;
        batch.set_len(rows);
        Ok(())
    }

    /// Makes every row written so far durable (see [`MemmapStorage`]'s commits).
    ///
    /// # Errors
    /// File I/O errors.
    pub fn commit(&mut self) -> Result<()> {
        self.storage.commit(&self.ring.state())
    }

    /// Takes the buffer apart: the file, the sampler and the ring (the device tier is
    /// freed).
    pub fn into_parts(self) -> (MemmapStorage, P, RingState) {
        (self.storage, self.sampler, self.ring.state())
    }

    /// Checks that `batch` was made for this schema and `rows` fits the scratch buffers.
    fn check_batch(&self, batch: &DeviceBatch<D>, rows: usize) -> Result<()> {
        if batch.schema() != self.storage.schema() {
            return Err(Error::BatchSchema);
        }
        if rows > self.config.batch_rows {
            return Err(Error::config(
                "batch",
                format!(
                    "of {rows} rows exceeds the {} rows this tiered replay was built for: \
                     raise TieredConfig::batch_rows or sample fewer rows",
                    self.config.batch_rows
                ),
            ));
        }
        Ok(())
    }

    /// Splits `positions` between the tiers: hot (hot position, slot) pairs, cold file
    /// positions and their slots. Checks that every position holds a row.
    fn split(&mut self, positions: &[usize]) -> Result<()> {
        self.hot_split.clear();
        self.cold_positions.clear();
        self.cold_slots.clear();
        let ring = self.ring.state();
        let first_hot = ring.len - self.hot_len;
        let hot_rows = self.config.hot_rows as u64;
        for (slot, &position) in positions.iter().enumerate() {
            let index = self.ring.stored_index(position)?;
            if index >= first_hot {
                let global = ring.written - (ring.len - index) as u64;
                self.hot_split.push(((global % hot_rows) as usize, slot));
            } else {
                self.cold_positions.push(position);
                self.cold_slots.push(slot);
            }
        }
        Ok(())
    }

    /// Gathers the rows at `positions` into slots `0..` of the batch `columns`.
    fn fill(&mut self, positions: &[usize], columns: &mut [D::Buffer]) -> Result<()> {
        self.split(positions)?;
        let (hot, cold) = (self.hot_split.len(), self.cold_positions.len());
        if hot > 0 {
            let staging = self.device.staging_mut(&mut self.pair_staging[0])?;
            let len = encode_pairs(self.hot_split.iter().copied(), staging)?;
            self.device
                .upload_staging(&self.pair_staging[0], len, &mut self.hot_pairs, 0)?;
        }
        if cold > 0 {
            let staging = self.device.staging_mut(&mut self.pair_staging[1])?;
            let pairs = self.cold_slots.iter().copied().enumerate();
            let len = encode_pairs(pairs, staging)?;
            self.device
                .upload_staging(&self.pair_staging[1], len, &mut self.cold_pairs, 0)?;
        }
        for (index, column) in self.storage.schema().columns().iter().enumerate() {
            let row_bytes = column.row_bytes();
            let target = &mut columns[index];
            if hot > 0 {
                self.device
                    .gather(&self.hot[index], row_bytes, &self.hot_pairs, hot, target)?;
            }
            if cold > 0 {
                let staging = self.device.staging_mut(&mut self.column_staging[index])?;
                gather_host(
                    self.storage.column(index),
                    row_bytes,
                    &self.cold_positions,
                    staging,
                );
                self.device.upload_staging(
                    &self.column_staging[index],
                    cold * row_bytes,
                    &mut self.cold_scratch,
                    0,
                )?;
                self.device.gather(
                    &self.cold_scratch,
                    row_bytes,
                    &self.cold_pairs,
                    cold,
                    target,
                )?;
            }
        }
        self.last = TierCounts {
            hot: hot as u64,
            cold: cold as u64,
        };
        self.total.hot += hot as u64;
        self.total.cold += cold as u64;
        Ok(())
    }
}

/// Both tiers as a [`RowSink`]: the file reserves the positions, the newest rows go to the
/// hot ring first (a device failure then leaves the file and the ring as they were and
/// marks the hot tier empty), then every row is copied into the file.
struct TieredSink<'a, D: DeviceBackend> {
    file: HostSink<'a, MemmapStorage>,
    device: &'a D,
    hot: &'a mut [D::Buffer],
    hot_rows: usize,
    hot_len: &'a mut usize,
}

impl<D: DeviceBackend> RowSink for TieredSink<'_, D> {
    fn schema(&self) -> &Schema {
        self.file.schema()
    }

    fn copy_rows(
        &mut self,
        plan: &WritePlan,
        columns: &[ColumnSlice<'_>],
    ) -> Result<(), CopyError> {
        self.file.prepare(plan)?;
        // Row `s` of the write is the `before + s`-th row ever written (`before`: the rows
        // written before it), so its newest `fresh` rows, from row `first` on, start at hot
        // position `(before + first) % hot_rows`. `plan.start.written` is `before` plus
        // the skipped rows, and `first` is the skipped rows plus `written - fresh`.
        let fresh = plan.written.min(self.hot_rows);
        let first = plan.rows - fresh;
        let hot_start = (plan.start.written + (plan.written - fresh) as u64) % self.hot_rows as u64;
        for (index, slice) in columns.iter().enumerate() {
            let row_bytes = self.file.schema().columns()[index].row_bytes();
            let uploaded = upload_rows(
                self.device,
                &mut self.hot[index],
                row_bytes,
                slice.as_bytes(),
                first,
                hot_start as usize,
                fresh,
            );
            if let Err(error) = uploaded {
                *self.hot_len = 0;
                return Err(CopyError::Untouched(error));
            }
        }
        self.file.copy(plan, columns);
        Ok(())
    }
}

/// Checks the plan of a configuration, with the sampler's memory, against a budget.
fn check_budget<P: Sampler>(
    schema: &Schema,
    capacity: usize,
    config: &TieredConfig,
    sampler: &P,
    budget: &MemoryBudget,
) -> Result<()> {
    let mut plan = config.plan(schema, capacity)?;
    plan.nest("tiered/sampler", &sampler.memory_plan());
    plan.check(budget)?;
    Ok(())
}

/// Uploads `rows` consecutive rows of `source` (rows of `row_bytes`, wrapping at its end)
/// starting at row `first`, to the hot ring `hot` starting at hot position `hot_start`
/// (wrapping at its end): at most two runs each side, so at most three uploads.
fn upload_rows<D: DeviceBackend>(
    device: &D,
    hot: &mut D::Buffer,
    row_bytes: usize,
    source: &[u8],
    first: usize,
    hot_start: usize,
    rows: usize,
) -> Result<()> {
    let (source_rows, hot_rows) = match row_bytes {
        0 => (0, 0),
        _ => (source.len() / row_bytes, device.len(hot) / row_bytes),
    };
    if rows == 0 || source_rows == 0 || hot_rows == 0 {
        return Ok(());
    }
    let mut done = 0;
    while done < rows {
        let from = (first + done) % source_rows;
        let to = (hot_start + done) % hot_rows;
        let run = (rows - done).min(source_rows - from).min(hot_rows - to);
        device.upload(
            &source[from * row_bytes..][..run * row_bytes],
            hot,
            to * row_bytes,
        )?;
        done += run;
    }
    Ok(())
}

/// Copies row `positions[r]` of `source` to row `r` of `staging`, prefetching first.
fn gather_host(source: &[u8], row_bytes: usize, positions: &[usize], staging: &mut [u8]) {
    if row_bytes == 0 {
        return;
    }
    copy::prefetch_rows(source, row_bytes, positions);
    for (row, &position) in staging.chunks_exact_mut(row_bytes).zip(positions) {
        row.copy_from_slice(&source[position * row_bytes..][..row_bytes]);
    }
}

#[cfg(test)]
mod tests;
