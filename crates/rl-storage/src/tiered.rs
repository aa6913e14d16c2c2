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

use rl_core::{Column, Flag, Location, MemoryBudget, MemoryPlan, Schema};

use crate::column::ColumnSlice;
use crate::copy::{self, Stores};
use crate::device::{DeviceBackend, DeviceBatch, encode_pairs};
use crate::error::{Error, Result};
use crate::memmap::{MemmapOptions, MemmapStorage};
use crate::replay::NonFinite;
use crate::ring;
use crate::sampler::{SampleContext, Sampler};
use crate::storage::{HostStorage, RingState, Storage};

/// Bytes of one encoded (source position, destination slot) pair, see [`encode_pairs`].
const PAIR_BYTES: usize = 8;
/// Host bytes per batch row of the split scratch: a hot (position, slot) pair, a cold
/// position and a cold slot.
const SPLIT_BYTES: usize = size_of::<(usize, usize)>() + 2 * size_of::<usize>();

/// How a [`TieredReplay`] splits its rows between the tiers, how large its batches get,
/// and how its file is created or opened.
///
/// ```
/// use rl_storage::{MemmapOptions, TieredConfig};
///
/// let config = TieredConfig::new(1 << 16, 256)
///     .with_memmap(MemmapOptions { reserve_rows: 4096 });
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
/// [`crate::ReplayBuffer`] over a [`MemmapStorage`], and every sampler works unchanged.
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
/// use rl_core::{Column, DType, Schema};
/// use rl_storage::{ColumnSlice, FakeDevice, TieredConfig, TieredReplay, Uniform};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("replay.rlmm");
/// let schema = Schema::new([
///     Column::new("obs", DType::F32, &[2]),
///     Column::scalar("reward", DType::F32),
/// ])?;
/// let device = FakeDevice::new(); // a CUDA device in real use
/// let config = TieredConfig::new(4, 8); // the newest 4 rows on the device, batches of 8
/// println!("{}", config.plan(&schema, 100)?); // file, GPU and staging bytes, up front
///
/// let mut replay =
///     TieredReplay::create(&path, device.clone(), schema, 100, config, Uniform::new(0))?;
/// let obs: Vec<f32> = (0..20).map(|i| i as f32).collect();
/// let reward: Vec<f32> = (0..10).map(|i| i as f32).collect();
/// replay.extend(&[ColumnSlice::from(&obs[..]), ColumnSlice::from(&reward[..])])?;
///
/// let mut batch = replay.new_batch()?; // allocated once, reused
/// replay.sample(&mut batch)?;
/// let counts = replay.last_sample_counts();
/// assert_eq!(counts.hot + counts.cold, 8);
/// let mut rewards = [0.0f32; 8];
/// batch.download(&device, "reward", &mut rewards)?;
/// assert!(rewards.iter().all(|&r| (0.0..10.0).contains(&r)));
///
/// replay.commit()?; // durable: reopening gives the 10 rows back, hot tier refilled
/// drop(replay);
/// let replay = TieredReplay::open(&path, device, TieredConfig::new(2, 8), Uniform::new(0))?;
/// assert_eq!((replay.len(), replay.hot_len()), (10, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TieredReplay<D: DeviceBackend, P: Sampler> {
    device: D,
    storage: MemmapStorage,
    sampler: P,
    ring: RingState,
    config: TieredConfig,
    non_finite: NonFinite,
    terminated: Option<usize>,
    truncated: Option<usize>,
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
    /// `device`.
    ///
    /// # Errors
    /// As [`TieredReplay::create_with_budget`], without a budget.
    pub fn create(
        path: impl AsRef<Path>,
        device: D,
        schema: Schema,
        capacity: usize,
        config: TieredConfig,
        sampler: P,
    ) -> Result<Self> {
        let budget = MemoryBudget::unlimited();
        Self::create_with_budget(path, device, schema, capacity, config, sampler, &budget)
    }

    /// As [`TieredReplay::create`], but refuses, before creating or allocating anything,
    /// a configuration whose plan (with the sampler's memory) does not fit `budget`.
    ///
    /// # Errors
    /// An invalid configuration (see [`TieredConfig::plan`]), over budget, the errors of
    /// [`MemmapStorage::create`], or a device allocation or upload error (the new file is
    /// removed then).
    pub fn create_with_budget(
        path: impl AsRef<Path>,
        device: D,
        schema: Schema,
        capacity: usize,
        config: TieredConfig,
        sampler: P,
        budget: &MemoryBudget,
    ) -> Result<Self> {
        check_budget(&schema, capacity, &config, &sampler, budget)?;
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
    /// # Errors
    /// As [`TieredReplay::open_with_budget`], without a budget.
    pub fn open(
        path: impl AsRef<Path>,
        device: D,
        config: TieredConfig,
        sampler: P,
    ) -> Result<Self> {
        Self::open_with_budget(path, device, config, sampler, &MemoryBudget::unlimited())
    }

    /// As [`TieredReplay::open`], but refuses, before allocating anything on the device,
    /// a configuration whose plan (with the sampler's memory) does not fit `budget`.
    ///
    /// # Errors
    /// The errors of [`MemmapStorage::open`], an invalid configuration for the file's
    /// capacity, over budget, or a device allocation or upload error.
    pub fn open_with_budget(
        path: impl AsRef<Path>,
        device: D,
        config: TieredConfig,
        sampler: P,
        budget: &MemoryBudget,
    ) -> Result<Self> {
        let storage = MemmapStorage::open(path, config.memmap)?;
        check_budget(
            storage.schema(),
            storage.capacity(),
            &config,
            &sampler,
            budget,
        )?;
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
        let ring = storage.restored();
        if ring.len > 0 {
            let empty_before = RingState {
                cursor: ring.oldest(capacity),
                len: 0,
                ..ring
            };
            sampler.rows_written(&empty_before, ring.len, capacity);
        }
        let (terminated, truncated) = ring::flag_columns(schema);
        let stores = Stores::for_storage_bytes(schema.row_bytes().saturating_mul(capacity));
        let mut replay = Self {
            device,
            storage,
            sampler,
            ring,
            config,
            non_finite: NonFinite::default(),
            terminated,
            truncated,
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
        self.non_finite = policy;
        self
    }

    /// The row layout.
    pub fn schema(&self) -> &Schema {
        self.storage.schema()
    }

    /// Rows stored (in the file; the newest of them on the device too).
    pub fn len(&self) -> usize {
        self.ring.len
    }

    /// Whether no row is stored.
    pub fn is_empty(&self) -> bool {
        self.ring.len == 0
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
        self.ring
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
        let rows = ring::validate_write(self.storage.schema(), columns, self.non_finite)?;
        if rows == 0 {
            return Ok(0);
        }
        let capacity = self.capacity();
        let hot_rows = self.config.hot_rows;
        let plan = ring::plan_write(&self.ring, rows, capacity);
        self.storage.prepare_write(&plan.start, plan.written)?;

        // Row `s` of the write is the `ring.written + s`-th row ever written.
        let fresh = plan.written.min(hot_rows);
        let first = rows - fresh;
        let hot_start = ((self.ring.written + first as u64) % hot_rows as u64) as usize;
        for (index, slice) in columns.iter().enumerate() {
            let row_bytes = self.storage.schema().columns()[index].row_bytes();
            let uploaded = upload_rows(
                &self.device,
                &mut self.hot[index],
                row_bytes,
                slice.as_bytes(),
                first,
                hot_start,
                fresh,
            );
            if let Err(error) = uploaded {
                self.hot_len = 0;
                return Err(error);
            }
        }

        for (index, slice) in columns.iter().enumerate() {
            let row_bytes = self.storage.schema().columns()[index].row_bytes();
            let source = slice.as_bytes();
            let target = self.storage.column_mut(index);
            for segment in plan.segments(capacity) {
                copy::copy(
                    &mut target[segment.position * row_bytes..][..segment.rows * row_bytes],
                    &source[segment.source_row * row_bytes..][..segment.rows * row_bytes],
                    self.stores,
                );
            }
        }
        copy::fence(self.stores);
        let ends = ring::episode_ends(self.terminated, self.truncated, columns, rows);
        self.ring = ring::ring_after(&self.ring, &plan, capacity, ends);
        self.hot_len = (self.hot_len + plan.written)
            .min(hot_rows)
            .min(self.ring.len);
        self.sampler
            .rows_written(&plan.start, plan.written, capacity);
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
        let rows = self.config.hot_rows.min(self.ring.len);
        if rows == 0 {
            return Ok(());
        }
        let first = self.ring.position(self.ring.len - rows, capacity);
        let global = self.ring.written - rows as u64;
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
        if self.ring.len == 0 {
            return Err(Error::Empty);
        }
        let (_, columns, positions, weights) = batch.parts_mut();
        let flags = |index: Option<usize>| {
            index.map(|i| bytemuck::cast_slice::<u8, Flag>(self.storage.column(i)))
        };
        let context = SampleContext {
            ring: self.ring,
            capacity: self.storage.capacity(),
            terminated: flags(self.terminated),
            truncated: flags(self.truncated),
        };
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
        self.storage.commit(&self.ring)
    }

    /// Takes the buffer apart: the file, the sampler and the ring (the device tier is
    /// freed).
    pub fn into_parts(self) -> (MemmapStorage, P, RingState) {
        (self.storage, self.sampler, self.ring)
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
        let ring = self.ring;
        let capacity = self.capacity();
        let oldest = ring.oldest(capacity);
        let first_hot = ring.len - self.hot_len;
        let hot_rows = self.config.hot_rows as u64;
        for (slot, &position) in positions.iter().enumerate() {
            let index = if position >= oldest {
                position - oldest
            } else {
                position + capacity - oldest
            };
            if position >= capacity || index >= ring.len {
                return Err(Error::config(
                    format!("position {position}"),
                    format!("holds no row ({} rows stored of {capacity})", ring.len),
                ));
            }
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
mod tests {
    use std::ops::Range;
    use std::sync::atomic::Ordering;

    use proptest::prelude::*;
    use rl_core::{DType, Element};
    use rl_testkit::measure;

    use super::*;
    use crate::batch::Batch;
    use crate::device::FakeDevice;
    use crate::device::test_support::FailingDevice;
    use crate::ram::RamStorage;
    use crate::replay::ReplayBuffer;
    use crate::sampler::Uniform;
    use crate::slice::SliceSampler;

    fn schema() -> Schema {
        Schema::new([
            Column::new("obs", DType::F32, &[3]),
            Column::new("pixels", DType::U8, &[5]),
            Column::scalar("id", DType::I64),
            Column::scalar("reward", DType::F32),
            Column::scalar("terminated", DType::Bool),
            Column::scalar("truncated", DType::Bool),
        ])
        .unwrap()
    }

    /// Rows whose every column encodes the row id, so any misplaced byte shows.
    struct Rows {
        obs: Vec<f32>,
        pixels: Vec<u8>,
        id: Vec<i64>,
        reward: Vec<f32>,
        terminated: Vec<Flag>,
        truncated: Vec<Flag>,
    }

    impl Rows {
        fn new(ids: Range<i64>) -> Self {
            let ids: Vec<i64> = ids.collect();
            Self {
                obs: ids
                    .iter()
                    .flat_map(|&i| [i as f32, -(i as f32), 0.5])
                    .collect(),
                pixels: ids
                    .iter()
                    .flat_map(|&i| (0..5).map(move |k| (i * 5 + k) as u8))
                    .collect(),
                id: ids.clone(),
                reward: ids.iter().map(|&i| i as f32 * 0.25).collect(),
                terminated: ids.iter().map(|&i| Flag::new(i % 7 == 6)).collect(),
                truncated: ids.iter().map(|&i| Flag::new(i % 11 == 10)).collect(),
            }
        }

        fn columns(&self) -> [ColumnSlice<'_>; 6] {
            [
                (&self.obs).into(),
                (&self.pixels).into(),
                (&self.id).into(),
                (&self.reward).into(),
                (&self.terminated).into(),
                (&self.truncated).into(),
            ]
        }
    }

    fn create<D: DeviceBackend, P: Sampler>(
        dir: &Path,
        device: D,
        capacity: usize,
        hot_rows: usize,
        batch_rows: usize,
        sampler: P,
    ) -> TieredReplay<D, P> {
        let config = TieredConfig::new(hot_rows, batch_rows);
        TieredReplay::create(
            dir.join("replay.rlmm"),
            device,
            schema(),
            capacity,
            config,
            sampler,
        )
        .unwrap()
    }

    fn reference<P: Sampler>(capacity: usize, sampler: P) -> ReplayBuffer<RamStorage, P> {
        ReplayBuffer::new(RamStorage::new(schema(), capacity).unwrap(), sampler)
    }

    /// The gathered rows of every column of a device batch, as bytes.
    fn device_rows<D: DeviceBackend>(device: &D, batch: &DeviceBatch<D>) -> Vec<Vec<u8>> {
        batch
            .schema()
            .columns()
            .iter()
            .map(|column| {
                let mut out = vec![0u8; batch.len() * column.row_bytes()];
                device
                    .download(batch.column(column.name()).unwrap(), 0, &mut out)
                    .unwrap();
                out
            })
            .collect()
    }

    fn typed_bytes<T: Element>(batch: &Batch, index: usize) -> Vec<u8> {
        bytemuck::cast_slice(batch.column_at::<T>(index).unwrap()).to_vec()
    }

    /// The gathered rows of every column of a host batch, as bytes.
    fn host_rows(batch: &Batch) -> Vec<Vec<u8>> {
        (batch.schema().columns().iter().enumerate())
            .map(|(index, column)| match column.dtype() {
                DType::F32 => typed_bytes::<f32>(batch, index),
                DType::U32 => typed_bytes::<u32>(batch, index),
                DType::I64 => typed_bytes::<i64>(batch, index),
                DType::U8 => typed_bytes::<u8>(batch, index),
                DType::Bool => typed_bytes::<Flag>(batch, index),
            })
            .collect()
    }

    /// Hot rows by the definition: the drawn positions whose logical index (0 = oldest)
    /// is among the newest `min(hot_rows, len)`.
    fn expected_hot(ring: RingState, capacity: usize, hot_rows: usize, positions: &[usize]) -> u64 {
        let first_hot = ring.len - hot_rows.min(ring.len);
        let oldest = ring.oldest(capacity);
        positions
            .iter()
            .filter(|&&p| (p + capacity - oldest) % capacity >= first_hot)
            .count() as u64
    }

    /// Every row the hot tier claims to hold equals the file's row at the same logical
    /// index.
    fn check_hot_tier<D: DeviceBackend, P: Sampler>(replay: &TieredReplay<D, P>) {
        let ring = replay.ring();
        let (capacity, hot_rows) = (replay.capacity(), replay.hot_rows());
        for i in ring.len - replay.hot_len()..ring.len {
            let position = ring.position(i, capacity);
            let hot = ((ring.written - (ring.len - i) as u64) % hot_rows as u64) as usize;
            for (index, column) in replay.schema().columns().iter().enumerate() {
                let row_bytes = column.row_bytes();
                let mut row = vec![0u8; row_bytes];
                replay
                    .device
                    .download(&replay.hot[index], hot * row_bytes, &mut row)
                    .unwrap();
                assert_eq!(
                    row,
                    replay.storage.column(index)[position * row_bytes..][..row_bytes],
                    "hot row {hot} (logical {i}) of column {}",
                    column.name()
                );
            }
        }
    }

    /// The file holds exactly the reference's rows at the same positions.
    fn check_file<D: DeviceBackend, P: Sampler, Q: Sampler>(
        replay: &TieredReplay<D, P>,
        reference: &ReplayBuffer<RamStorage, Q>,
    ) {
        assert_eq!(replay.ring(), reference.ring());
        for position in reference.positions() {
            for (index, column) in replay.schema().columns().iter().enumerate() {
                let row = column.row_bytes();
                assert_eq!(
                    replay.storage.column(index)[position * row..][..row],
                    reference.storage().column(index)[position * row..][..row]
                );
            }
        }
    }

    /// Gathers `positions` from both and compares rows, positions, weights and the split.
    fn gather_both<D: DeviceBackend, P: Sampler, Q: Sampler>(
        replay: &mut TieredReplay<D, P>,
        reference: &ReplayBuffer<RamStorage, Q>,
        positions: &[usize],
        device_batch: &mut DeviceBatch<D>,
        host_batch: &mut Batch,
    ) {
        replay.gather(positions, device_batch).unwrap();
        reference.gather(positions, host_batch).unwrap();
        assert_eq!(device_batch.positions(), positions);
        assert_eq!(
            device_rows(replay.device(), device_batch),
            host_rows(host_batch)
        );
        let hot = expected_hot(
            replay.ring(),
            replay.capacity(),
            replay.hot_len(),
            positions,
        );
        assert_eq!(
            replay.last_sample_counts(),
            TierCounts {
                hot,
                cold: positions.len() as u64 - hot
            }
        );
    }

    /// Samples with both (same sampler, same seed) and compares everything.
    fn sample_both<D: DeviceBackend, P: Sampler>(
        replay: &mut TieredReplay<D, P>,
        reference: &mut ReplayBuffer<RamStorage, P>,
        device_batch: &mut DeviceBatch<D>,
        host_batch: &mut Batch,
    ) {
        replay.sample(device_batch).unwrap();
        reference.sample(host_batch).unwrap();
        assert_eq!(device_batch.positions(), host_batch.positions());
        assert_eq!(device_batch.weights(), host_batch.weights());
        assert_eq!(
            device_rows(replay.device(), device_batch),
            host_rows(host_batch)
        );
        let hot = expected_hot(
            replay.ring(),
            replay.capacity(),
            replay.hot_len(),
            device_batch.positions(),
        );
        assert_eq!(replay.last_sample_counts().hot, hot);
        assert_eq!(
            replay.last_sample_counts().rows(),
            device_batch.len() as u64
        );
    }

    /// `rows` stored positions picked by a small LCG seeded with `state`.
    fn pick_positions(
        ring: RingState,
        capacity: usize,
        rows: usize,
        state: &mut u64,
    ) -> Vec<usize> {
        (0..rows)
            .map(|_| {
                *state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ring.position((*state >> 33) as usize % ring.len, capacity)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Rows gathered through the tiers (explicit positions and a seeded sampler) are
        /// exactly those a host replay buffer fed the same writes returns; the split
        /// matches the definition; the hot tier mirrors the newest rows of the file.
        /// Writes range from empty to over twice the capacity (so over `hot_rows` too).
        #[test]
        fn tiers_return_what_a_host_replay_returns(
            capacity in 1usize..40,
            hot_pick in any::<usize>(),
            batch_rows in 1usize..24,
            writes in proptest::collection::vec(0i64..90, 1..10),
            seed in any::<u64>(),
        ) {
            let hot_rows = 1 + hot_pick % capacity;
            let dir = tempfile::tempdir().unwrap();
            let device = FakeDevice::new();
            let mut replay = create(dir.path(), device, capacity, hot_rows, batch_rows, Uniform::new(seed));
            let mut host = reference(capacity, Uniform::new(seed));
            let mut device_batch = replay.new_batch().unwrap();
            let mut host_batch = Batch::new(&schema(), batch_rows).unwrap();
            let (mut next, mut state) = (0i64, seed);
            for rows in writes {
                let data = Rows::new(next..next + rows);
                next += rows;
                prop_assert_eq!(replay.extend(&data.columns()).unwrap(), rows as usize);
                host.extend(&data.columns()).unwrap();
                check_file(&replay, &host);
                prop_assert_eq!(replay.hot_len(), hot_rows.min(replay.len()));
                check_hot_tier(&replay);
                if host.is_empty() {
                    prop_assert!(matches!(replay.sample(&mut device_batch), Err(Error::Empty)));
                    continue;
                }
                let positions = pick_positions(replay.ring(), capacity, batch_rows, &mut state);
                gather_both(&mut replay, &host, &positions, &mut device_batch, &mut host_batch);
                sample_both(&mut replay, &mut host, &mut device_batch, &mut host_batch);
            }
        }

        /// After a commit and a reopen (with another hot size), the ring, the rows and the
        /// hot tier are intact, samples match the host buffer, and later writes continue
        /// the same hot ring.
        #[test]
        fn reopening_keeps_rows_and_refills_the_hot_tier(
            capacity in 1usize..40,
            hot_picks in any::<(usize, usize)>(),
            writes in proptest::collection::vec(0i64..90, 1..6),
            more in proptest::collection::vec(0i64..90, 0..4),
            seed in any::<u64>(),
        ) {
            let (hot_before, hot_after) = (1 + hot_picks.0 % capacity, 1 + hot_picks.1 % capacity);
            let batch_rows = 8;
            let dir = tempfile::tempdir().unwrap();
            let mut replay = create(dir.path(), FakeDevice::new(), capacity, hot_before, batch_rows, Uniform::new(seed));
            let mut host = reference(capacity, Uniform::new(seed));
            let mut next = 0i64;
            for rows in writes {
                let data = Rows::new(next..next + rows);
                next += rows;
                replay.extend(&data.columns()).unwrap();
                host.extend(&data.columns()).unwrap();
            }
            replay.commit().unwrap();
            let committed = replay.ring();
            drop(replay);

            let device = FakeDevice::new();
            let config = TieredConfig::new(hot_after, batch_rows);
            let mut replay = TieredReplay::open(dir.path().join("replay.rlmm"), device.clone(), config, Uniform::new(seed)).unwrap();
            prop_assert_eq!(replay.ring(), committed);
            prop_assert_eq!(replay.hot_len(), hot_after.min(committed.len));
            prop_assert_eq!(device.allocated_bytes(), config.plan(&schema(), capacity).unwrap().total(Location::Gpu));
            check_file(&replay, &host);
            check_hot_tier(&replay);
            let mut device_batch = replay.new_batch().unwrap();
            let mut host_batch = Batch::new(&schema(), batch_rows).unwrap();
            let mut state = seed;
            for rows in std::iter::once(0).chain(more) {
                let data = Rows::new(next..next + rows);
                next += rows;
                replay.extend(&data.columns()).unwrap();
                host.extend(&data.columns()).unwrap();
                check_file(&replay, &host);
                prop_assert_eq!(replay.hot_len(), hot_after.min(replay.len()));
                check_hot_tier(&replay);
                if host.is_empty() {
                    continue;
                }
                let positions = pick_positions(replay.ring(), capacity, batch_rows, &mut state);
                gather_both(&mut replay, &host, &positions, &mut device_batch, &mut host_batch);
                sample_both(&mut replay, &mut host, &mut device_batch, &mut host_batch);
            }
        }
    }

    #[test]
    fn samplers_that_read_episode_flags_see_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let sampler = || SliceSampler::new(4, 9).unwrap();
        let mut replay = create(dir.path(), FakeDevice::new(), 50, 10, 16, sampler());
        let mut host = reference(50, sampler());
        let mut device_batch = replay.new_batch().unwrap();
        let mut host_batch = Batch::new(&schema(), 16).unwrap();
        for start in (0..130).step_by(13) {
            let data = Rows::new(start..start + 13);
            replay.extend(&data.columns()).unwrap();
            host.extend(&data.columns()).unwrap();
            sample_both(&mut replay, &mut host, &mut device_batch, &mut host_batch);
        }
        let total = replay.total_counts();
        assert!(total.hot > 0 && total.cold > 0, "{total:?}");
    }

    #[test]
    fn device_bytes_are_the_planned_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let device = FakeDevice::new();
        let config = TieredConfig::new(100, 32);
        let plan = config.plan(&schema(), 1000).unwrap();
        // Hot tier 100 rows x 31 bytes, scratch 32 x 12 (obs, the widest), 2 x 32 pairs.
        assert_eq!(plan.total(Location::Gpu), 3100 + 384 + 512);
        assert_eq!(
            plan.total(Location::Ram),
            32 * 31 + 512 + 32 * SPLIT_BYTES as u64
        );
        let path = dir.path().join("replay.rlmm");
        let replay = TieredReplay::create(
            &path,
            device.clone(),
            schema(),
            1000,
            config,
            Uniform::new(0),
        )
        .unwrap();
        assert_eq!(device.allocated_bytes(), plan.total(Location::Gpu));
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            plan.total(Location::File)
        );
        assert_eq!(replay.memory_plan(), plan, "Uniform holds nothing");
        let batch = replay.new_batch().unwrap();
        let batch_plan = DeviceBatch::<FakeDevice>::plan(&schema(), 32).unwrap();
        assert_eq!(
            device.allocated_bytes(),
            plan.total(Location::Gpu) + batch_plan.total(Location::Gpu)
        );
        drop((batch, replay));
        assert_eq!(device.allocated_bytes(), 0);
    }

    type Snapshot = (RingState, usize, Vec<Vec<u8>>, Vec<Vec<u8>>);

    fn snapshot<D: DeviceBackend, P: Sampler>(replay: &TieredReplay<D, P>) -> Snapshot {
        let columns = replay.schema().columns().len();
        let file = (0..columns)
            .map(|i| replay.storage.column(i).to_vec())
            .collect();
        let hot = replay
            .hot
            .iter()
            .map(|buffer| {
                let mut bytes = vec![0u8; replay.device.len(buffer)];
                replay.device.download(buffer, 0, &mut bytes).unwrap();
                bytes
            })
            .collect();
        (replay.ring(), replay.hot_len(), file, hot)
    }

    #[test]
    fn refused_writes_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut replay = create(dir.path(), FakeDevice::new(), 10, 4, 8, Uniform::new(0));
        replay.extend(&Rows::new(0..7).columns()).unwrap();
        let before = snapshot(&replay);
        let good = Rows::new(7..12);
        let mut bad = Rows::new(7..12);
        bad.reward[3] = f32::NAN;
        assert!(matches!(
            replay.extend(&bad.columns()),
            Err(Error::NonFinite { row: 3, .. })
        ));
        let mut short = good.columns();
        short[2] = ColumnSlice::I64(&[7]);
        assert!(matches!(
            replay.extend(&short),
            Err(Error::RowMismatch { .. })
        ));
        let mut wrong_type = good.columns();
        wrong_type[3] = ColumnSlice::U32(&[1, 2, 3, 4, 5]);
        assert!(matches!(
            replay.extend(&wrong_type),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            replay.extend(&good.columns()[..5]),
            Err(Error::ColumnCount { .. })
        ));
        assert!(matches!(
            replay.push(&good.columns()),
            Err(Error::RowMismatch { .. })
        ));
        assert!(replay.extend(&[]).is_err());
        assert_eq!(snapshot(&replay), before);
        // Allowed on request; the NaN reaches both tiers.
        let mut replay = replay.with_non_finite(NonFinite::Allow);
        replay.extend(&bad.columns()).unwrap();
        check_hot_tier(&replay);
    }

    #[test]
    fn extend_sample_gather_and_commit_allocate_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut replay = create(
            dir.path(),
            FakeDevice::new(),
            1000,
            128,
            64,
            Uniform::new(1),
        );
        let data = Rows::new(0..256);
        let columns = data.columns();
        let one = Rows::new(7..8);
        let mut batch = replay.new_batch().unwrap();
        let positions: Vec<usize> = (0..64).map(|i| i * 3).collect();
        replay.extend(&columns).unwrap();
        let (result, stats) = measure(|| -> Result<()> {
            for _ in 0..20 {
                replay.extend(&columns)?;
                replay.push(&one.columns())?;
                replay.sample(&mut batch)?;
                replay.gather(&positions, &mut batch)?;
                replay.sample_rows(&mut batch, 10)?;
                replay.commit()?;
            }
            Ok(())
        });
        result.unwrap();
        assert_eq!(stats.allocations, 0, "{stats:?}");
        let total = replay.total_counts();
        assert!(
            total.hot > 0 && total.cold > 0,
            "both tiers used: {total:?}"
        );
        assert_eq!(total.rows(), 20 * (64 + 64 + 10));
    }

    #[test]
    fn bad_configurations_are_refused_before_anything_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replay.rlmm");
        let device = FakeDevice::new();
        for (hot, batch) in [(0, 8), (11, 8), (4, 0)] {
            let config = TieredConfig::new(hot, batch);
            assert!(config.plan(&schema(), 10).is_err());
            let created =
                TieredReplay::create(&path, device.clone(), schema(), 10, config, Uniform::new(0));
            assert!(created.is_err(), "hot {hot}, batch {batch}");
            assert!(!path.exists());
        }
        let config = TieredConfig::new(4, 8);
        let tight = MemoryBudget::unlimited().with_gpu(100);
        let err = TieredReplay::create_with_budget(
            &path,
            device.clone(),
            schema(),
            10,
            config,
            Uniform::new(0),
            &tight,
        )
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Core(rl_core::Error::OverBudget {
                    location: Location::Gpu,
                    ..
                })
            ),
            "{err}"
        );
        assert!(!path.exists());
        assert_eq!(device.allocated_bytes(), 0);
        // A file of 10 rows cannot be reopened with a hot tier of 11.
        let mut replay =
            TieredReplay::create(&path, device.clone(), schema(), 10, config, Uniform::new(0))
                .unwrap();
        replay.commit().unwrap();
        drop(replay);
        let open = TieredReplay::open(
            &path,
            device.clone(),
            TieredConfig::new(11, 8),
            Uniform::new(0),
        );
        assert!(open.is_err());
        let budget =
            TieredReplay::open_with_budget(&path, device.clone(), config, Uniform::new(0), &tight);
        assert!(budget.is_err());
        assert_eq!(device.allocated_bytes(), 0);
        // The file is left as it was: it opens fine.
        TieredReplay::open(&path, device, config, Uniform::new(0)).unwrap();
    }

    #[test]
    fn bad_samples_are_errors_and_leave_the_batch_empty() {
        let dir = tempfile::tempdir().unwrap();
        let device = FakeDevice::new();
        let mut replay = create(dir.path(), device.clone(), 10, 4, 8, Uniform::new(0));
        let mut batch = replay.new_batch().unwrap();
        assert!(matches!(replay.sample(&mut batch), Err(Error::Empty)));
        assert!(replay.gather(&[0], &mut batch).is_err(), "nothing stored");
        replay.extend(&Rows::new(0..6).columns()).unwrap();
        replay.gather(&[5, 0], &mut batch).unwrap();
        assert_eq!(batch.len(), 2);
        assert_eq!(replay.last_sample_counts(), TierCounts { hot: 1, cold: 1 });
        assert_eq!(replay.hot_fraction_last_sample(), 0.5);
        let mut ids = [0i64; 2];
        batch.download(&device, "id", &mut ids).unwrap();
        assert_eq!(ids, [5, 0]);
        for positions in [&[6usize][..], &[10], &[usize::MAX]] {
            assert!(
                replay.gather(positions, &mut batch).is_err(),
                "{positions:?}"
            );
            assert!(batch.is_empty());
        }
        let other = Schema::new([Column::scalar("x", DType::F32)]).unwrap();
        let mut foreign = DeviceBatch::new(&device, &other, 8).unwrap();
        assert!(matches!(
            replay.sample(&mut foreign),
            Err(Error::BatchSchema)
        ));
        let mut too_large = DeviceBatch::new(&device, &schema(), 9).unwrap();
        assert!(replay.sample(&mut too_large).is_err());
        replay.sample_rows(&mut too_large, 8).unwrap();
        assert_eq!(too_large.len(), 8);
        let mut small = DeviceBatch::new(&device, &schema(), 2).unwrap();
        assert!(matches!(
            replay.gather(&[0, 1, 2], &mut small),
            Err(Error::NotEnoughRows { .. })
        ));
        replay.sample_rows(&mut batch, 3).unwrap();
        assert_eq!(batch.len(), 3);
        assert!(replay.sample(&mut too_large).is_err());
        assert!(
            too_large.is_empty(),
            "a batch that could not be filled is empty"
        );
    }

    #[test]
    fn a_device_error_mid_write_changes_nothing_stored_and_rows_come_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let device = FailingDevice::new();
        let mut replay = create(dir.path(), device.clone(), 20, 8, 16, Uniform::new(0));
        let mut host = reference(20, Uniform::new(0));
        let mut device_batch = replay.new_batch().unwrap();
        let mut host_batch = Batch::new(&schema(), 16).unwrap();
        let first = Rows::new(0..12);
        replay.extend(&first.columns()).unwrap();
        host.extend(&first.columns()).unwrap();
        let all: Vec<usize> = (0..12).collect();

        // Two columns reach the hot ring (overwriting the rows of ids 4..7 there), then
        // the device fails.
        device.uploads_left.store(2, Ordering::Relaxed);
        let second = Rows::new(12..15);
        assert!(replay.extend(&second.columns()).is_err());
        let (_, _, file, _) = snapshot(&replay);
        device.uploads_left.store(usize::MAX, Ordering::Relaxed);
        check_file(&replay, &host);
        assert_eq!(replay.hot_len(), 0);
        gather_both(&mut replay, &host, &all, &mut device_batch, &mut host_batch);
        assert_eq!(
            replay.last_sample_counts().hot,
            0,
            "every row from the file"
        );
        assert_eq!(snapshot(&replay).2, file);

        // Later writes fill the hot tier again; a refill restores all of it.
        replay.extend(&second.columns()).unwrap();
        host.extend(&second.columns()).unwrap();
        assert_eq!(replay.hot_len(), 3);
        check_hot_tier(&replay);
        let all: Vec<usize> = (0..15).collect();
        gather_both(&mut replay, &host, &all, &mut device_batch, &mut host_batch);
        assert_eq!(replay.last_sample_counts().hot, 3);
        replay.refill_hot().unwrap();
        assert_eq!(replay.hot_len(), 8);
        check_hot_tier(&replay);
        gather_both(&mut replay, &host, &all, &mut device_batch, &mut host_batch);
        assert_eq!(replay.last_sample_counts().hot, 8);

        // A failed refill leaves the hot tier empty, still correct.
        device.uploads_left.store(1, Ordering::Relaxed);
        assert!(replay.refill_hot().is_err());
        device.uploads_left.store(usize::MAX, Ordering::Relaxed);
        assert_eq!(replay.hot_len(), 0);
        gather_both(&mut replay, &host, &all, &mut device_batch, &mut host_batch);

        // A failed gather leaves the batch empty.
        device.gathers_left.store(3, Ordering::Relaxed);
        assert!(replay.sample(&mut device_batch).is_err());
        assert!(device_batch.is_empty());
        device.gathers_left.store(usize::MAX, Ordering::Relaxed);
        host.sample(&mut host_batch).unwrap(); // the sampler drew once on both sides
        sample_both(&mut replay, &mut host, &mut device_batch, &mut host_batch);
    }
}
