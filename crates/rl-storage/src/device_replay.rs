//! The FIFO replay buffer with its columns in device memory: written from the host,
//! gathered on the device.

use rl_core::{Element, Flag, Location, MemoryBudget, MemoryPlan, Schema};

use crate::column::{ColumnSlice, column_index};
use crate::device::{DeviceBackend, DeviceBatch, encode_pairs};
use crate::error::{Error, Result};
use crate::ring::{self, CopyError, RingWriter, RowSink, WritePlan};
use crate::sampler::{Sampler, Uniform, try_filled};
use crate::storage::RingState;
use rl_core::NonFinite;

/// How a [`DeviceReplay`] is built. Plain data; every field has a documented default.
///
/// ```
/// use rl_core::NonFinite;
/// use rl_storage::device::DeviceReplayOptions;
///
/// let options = DeviceReplayOptions::default();
/// assert_eq!(options.gather_rows, 4096);
/// assert_eq!(options.non_finite, NonFinite::Reject);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceReplayOptions {
    /// Rows gathered per round trip (default 4096). It sizes the (position, slot) pairs
    /// the device gather reads, 8 bytes per row, twice: a host staging buffer and a device
    /// buffer. A sample of more rows is gathered in several rounds; one of at most this
    /// many rows uploads its pairs once. Must be at least 1.
    pub gather_rows: usize,
    /// What a write does with NaN or infinite `f32` values (default: reject the write).
    pub non_finite: NonFinite,
}

impl Default for DeviceReplayOptions {
    fn default() -> Self {
        Self {
            gather_rows: 4096,
            non_finite: NonFinite::Reject,
        }
    }
}

/// A host copy of one episode flag column (`terminated` or `truncated`), kept so that
/// samplers, which run on the host, can see episode ends without a device round trip.
#[derive(Debug)]
struct HostFlags {
    /// Index of the column in the schema.
    column: usize,
    /// The flag of every position (`capacity` bytes).
    flags: Vec<Flag>,
}

/// A fixed-capacity FIFO replay buffer whose columns live in device memory (GPU memory
/// when `D` is [`crate::device::CudaDevice`]), sampled into [`DeviceBatch`]es without the rows
/// ever leaving the device.
///
/// Where the rows live and where batches land are separate choices: this type is for rows
/// that live on the device. For rows in RAM or in a memory-mapped file and batches on the
/// device, use a host [`crate::replay::ReplayBuffer`] and move its batches with
/// [`crate::device::ToDevice`].
///
/// - **Writes** come from host memory: [`DeviceReplay::extend`] validates the whole write
///   first (a refused write changes nothing), then uploads each column with at most two
///   copies (up to the end of the ring, then from position 0). The ring bookkeeping is
///   the host [`crate::replay::ReplayBuffer`]'s, so both store the same rows at the same
///   positions.
/// - **Sampling** happens in two halves. The sampler draws positions on the host, into
///   the batch's positions and weights; they are encoded as (position, slot) pairs into
///   a reused host staging buffer (page-locked on CUDA), uploaded once into a reused
///   device buffer, and then every column is gathered on the device into the batch.
/// - **Episode flags**: samplers that respect episodes ([`crate::sampler::SliceSampler`]) read
///   `terminated` and `truncated` on the host, so the buffer keeps a host copy of those
///   two columns when the schema has them as one-element `Bool` columns: `capacity`
///   bytes each, in RAM, listed in the plan. No other column is copied to the host.
/// - **Memory**: everything is allocated at construction and listed by
///   [`DeviceReplay::plan`] first; writing and sampling allocate nothing, on the host or
///   on the device.
///
/// Device operations may be asynchronous ([`DeviceBackend::synchronize`] waits).
///
/// ```
/// use rl_core::{Column, DType, Field, Flag, Location, Schema};
/// use rl_storage::{device::{DeviceBatch, DeviceReplay, DeviceReplayOptions, FakeDevice}, sampler::Uniform};
///
/// let schema = Schema::new([
///     Column::new(Field::Obs.name(), DType::F32, &[2]),
///     Column::scalar(Field::Action.name(), DType::U32),
///     Column::scalar(Field::Terminated.name(), DType::Bool),
/// ])?;
/// let options = DeviceReplayOptions::default();
/// let plan = DeviceReplay::<FakeDevice>::plan(&schema, 3, &options)?;
/// assert_eq!(plan.total(Location::Gpu), 3 * (8 + 4 + 1) + 4096 * 8);
///
/// // FakeDevice keeps "device" memory on the host; CudaDevice puts it on a GPU.
/// let device = FakeDevice::new();
/// let mut buffer = DeviceReplay::new(device.clone(), schema.clone(), 3, Uniform::new(0), options, None)?;
/// for step in 0..5u32 {
///     let obs = [step as f32, 0.0];
///     buffer.push(&[(&obs).into(), (&[step]).into(), (&[Flag::new(step == 4)]).into()])?;
/// }
/// assert_eq!(buffer.len(), 3); // rows 2, 3, 4: the oldest two were overwritten
///
/// let mut batch = DeviceBatch::new(&device, &schema, 8)?; // allocated once, reused
/// buffer.sample(&mut batch)?;
/// let mut actions = [0u32; 8];
/// batch.download(&device, Field::Action.name(), &mut actions)?;
/// assert!(actions.iter().all(|&a| a >= 2));
/// # Ok::<(), rl_storage::Error>(())
/// ```
#[derive(Debug)]
pub struct DeviceReplay<D: DeviceBackend, P: Sampler = Uniform> {
    device: D,
    schema: Schema,
    capacity: usize,
    /// One device buffer per column, `capacity` rows each.
    columns: Vec<D::Buffer>,
    /// Host copies of the episode flag columns.
    terminated: Option<HostFlags>,
    truncated: Option<HostFlags>,
    /// (position, slot) pairs of one gather round, encoded on the host.
    pair_staging: D::Staging,
    /// The same pairs on the device, read by the gathers.
    pairs: D::Buffer,
    gather_rows: usize,
    sampler: P,
    ring: RingWriter,
    plan: MemoryPlan,
}

impl<D: DeviceBackend> DeviceReplay<D> {
    /// What a buffer of `schema` at `capacity` rows allocates, before anything is:
    /// one [`Location::Gpu`] line per column (`capacity x row bytes`), one for the device
    /// gather pairs, one [`Location::Ram`] line for their host staging buffer (page-locked
    /// on CUDA), and one `Ram` line per host copy of an episode flag column
    /// (`terminated`, `truncated`: `capacity` bytes each). The sampler's memory is
    /// added by [`DeviceReplay::memory_plan`]; batches plan their own
    /// ([`DeviceBatch::plan`]).
    ///
    /// # Errors
    /// Invalid configuration for a zero capacity, a capacity above `2^32` rows (gather
    /// positions are `u32`), zero `gather_rows`, or overflowing sizes.
    pub fn plan(
        schema: &Schema,
        capacity: usize,
        options: &DeviceReplayOptions,
    ) -> Result<MemoryPlan> {
        if capacity == 0 {
            return Err(Error::config(
                "capacity",
                "is zero: a buffer needs at least one row",
            ));
        }
        if u32::try_from(capacity - 1).is_err() {
            return Err(Error::config(
                "capacity",
                format!(
                    "of {capacity} rows is above 2^32: device gathers address rows with u32 positions; lower it"
                ),
            ));
        }
        if options.gather_rows == 0 {
            return Err(Error::config(
                "gather_rows",
                "is zero: a device gather needs room for at least one row",
            ));
        }
        let overflow = |what: &str| {
            Error::config(
                what.to_owned(),
                format!("overflows the address space at {capacity} rows: lower it"),
            )
        };
        let mut plan = MemoryPlan::new();
        for column in schema.columns() {
            let bytes = column
                .row_bytes()
                .checked_mul(capacity)
                .ok_or_else(|| overflow("capacity"))?;
            plan.add(
                format!("device_replay/{}", column.name()),
                Location::Gpu,
                bytes as u64,
            );
        }
        let pair_bytes = options
            .gather_rows
            .checked_mul(8)
            .ok_or_else(|| overflow("gather_rows"))?;
        plan.add(
            "device_replay/gather_pairs",
            Location::Gpu,
            pair_bytes as u64,
        );
        plan.add(
            "device_replay/gather_pairs_staging",
            Location::Ram,
            pair_bytes as u64,
        );
        let (terminated, truncated) = ring::flag_columns(schema);
        for index in [terminated, truncated].into_iter().flatten() {
            plan.add(
                format!("device_replay/{}_host_copy", schema.columns()[index].name()),
                Location::Ram,
                capacity as u64,
            );
        }
        Ok(plan)
    }
}

impl<D: DeviceBackend, P: Sampler> DeviceReplay<D, P> {
    /// An empty buffer of `capacity` rows of `schema` on `device`, sampled by `sampler`,
    /// refusing first (before allocating anything) a configuration whose plan does not
    /// fit `budget` (GPU and RAM lines alike).
    ///
    /// # Errors
    /// As [`DeviceReplay::plan`], over budget (naming the plan's largest lines), out of
    /// device memory, or a driver error.
    pub fn new(
        device: D,
        schema: Schema,
        capacity: usize,
        sampler: P,
        options: DeviceReplayOptions,
        budget: Option<&MemoryBudget>,
    ) -> Result<Self> {
        let plan = DeviceReplay::<D>::plan(&schema, capacity, &options)?;
        if let Some(budget) = budget {
            plan.check(budget)?;
        }
        let columns = schema
            .columns()
            .iter()
            .map(|column| device.alloc(column.row_bytes() * capacity))
            .collect::<Result<Vec<_>>>()?;
        let pair_bytes = options.gather_rows * 8;
        let pairs = device.alloc(pair_bytes)?;
        let pair_staging = device.alloc_staging(pair_bytes)?;
        let (terminated, truncated) = ring::flag_columns(&schema);
        let host_flags = |index: Option<usize>| {
            index
                .map(|column| {
                    let name = schema.columns()[column].name();
                    let flags = try_filled(capacity, Flag::new(false), &format!("{name} copy"))?;
                    Ok::<_, Error>(HostFlags { column, flags })
                })
                .transpose()
        };
        let (terminated, truncated) = (host_flags(terminated)?, host_flags(truncated)?);
        let mut ring = RingWriter::new(&schema, capacity, RingState::default());
        ring.set_non_finite(options.non_finite);
        Ok(Self {
            device,
            schema,
            capacity,
            columns,
            terminated,
            truncated,
            pair_staging,
            pairs,
            gather_rows: options.gather_rows,
            sampler,
            ring,
            plan,
        })
    }

    /// The device the columns live on.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The row layout.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Rows stored.
    pub fn len(&self) -> usize {
        self.ring.state().len
    }

    /// Whether no row is stored.
    pub fn is_empty(&self) -> bool {
        self.ring.state().len == 0
    }

    /// Rows the buffer holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Cursor, fill and counters of the ring.
    pub fn ring(&self) -> RingState {
        self.ring.state()
    }

    /// The sampler.
    pub fn sampler(&self) -> &P {
        &self.sampler
    }

    /// The sampler, mutably (to update priorities, for instance).
    pub fn sampler_mut(&mut self) -> &mut P {
        &mut self.sampler
    }

    /// What the buffer allocated, line by line: [`DeviceReplay::plan`] plus the
    /// sampler's memory.
    pub fn memory_plan(&self) -> MemoryPlan {
        let mut plan = self.plan.clone();
        plan.nest("device_replay/sampler", &self.sampler.memory_plan());
        plan
    }

    /// Storage positions of the stored rows, oldest first.
    pub fn positions(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        let (ring, capacity) = (self.ring.state(), self.capacity);
        (0..ring.len).map(move |i| ring.position(i, capacity))
    }

    /// Copies all `capacity` rows of column `name` to host memory, indexed by position
    /// (only the rows at [`DeviceReplay::positions`] hold data). For tests, debugging and
    /// checkpoints; waits for the device.
    ///
    /// # Errors
    /// Unknown column, a dtype other than the column's, `out` not holding exactly
    /// `capacity` rows, or a driver error.
    pub fn download_column<T: Element>(&self, name: &str, out: &mut [T]) -> Result<()> {
        let index = column_index(&self.schema, name)?;
        let column = &self.schema.columns()[index];
        if T::DTYPE != column.dtype() {
            return Err(Error::DTypeMismatch {
                column: column.name().to_owned(),
                expected: column.dtype(),
                actual: T::DTYPE,
            });
        }
        rl_core::env::check_len(
            "column download buffer",
            self.capacity * column.numel(),
            out.len(),
        )?;
        self.device
            .download(&self.columns[index], 0, bytemuck::cast_slice_mut(out))
    }

    /// Appends one row: one single-row slice per column, in schema order.
    ///
    /// # Errors
    /// As [`DeviceReplay::extend`], and [`Error::RowMismatch`] for more than one row.
    pub fn push(&mut self, row: &[ColumnSlice<'_>]) -> Result<()> {
        ring::check_single_row(self.schema(), row)?;
        self.extend(row).map(|_| ())
    }

    /// Appends rows given as one host slice per column, in schema order, each holding the
    /// same number of rows. Overwrites the oldest rows once full (of a write longer than
    /// the capacity only the last `capacity` rows are uploaded). Returns the rows written.
    ///
    /// Everything is validated before anything is uploaded: a refused write changes
    /// nothing. If the device fails part-way through the upload, the rows the write was
    /// overwriting (the oldest) are dropped from the ring before the error is returned,
    /// so no half-written row is ever sampled. (A sampler with per-row state, such as
    /// [`crate::sampler::Prioritized`], keeps the dropped positions until they are written again,
    /// which the next write does first; until then a sample that draws one is refused
    /// with an error.) Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ColumnCount`], [`Error::DTypeMismatch`], [`Error::RowMismatch`],
    /// [`Error::NonFinite`] (unless allowed), or a driver error.
    pub fn extend(&mut self, columns: &[ColumnSlice<'_>]) -> Result<usize> {
        let mut sink = DeviceSink {
            device: &self.device,
            schema: &self.schema,
            capacity: self.capacity,
            columns: &mut self.columns,
            flags: [self.terminated.as_mut(), self.truncated.as_mut()],
        };
        self.ring.write(&mut sink, &mut self.sampler, columns)
    }

    /// Samples `batch.room()` rows into `batch`.
    ///
    /// # Errors
    /// As [`DeviceReplay::sample_rows`].
    pub fn sample(&mut self, batch: &mut DeviceBatch<D>) -> Result<()> {
        let rows = batch.room();
        self.sample_rows(batch, rows)
    }

    /// Samples `rows` rows into `batch` (a sampler may return a different number, e.g. the
    /// merged last batch of an epoch; [`DeviceBatch::len`] says how many). The sampler
    /// draws positions on the host; the rows are gathered on the device. `batch` must be
    /// allocated on this buffer's device. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::Empty`], [`Error::BatchSchema`], the sampler's errors, an
    /// invalid-configuration error if the sampler drew a position outside the ring, or a
    /// driver error. On error the batch holds no rows.
    pub fn sample_rows(&mut self, batch: &mut DeviceBatch<D>, rows: usize) -> Result<()> {
        if batch.schema() != &self.schema {
            return Err(Error::BatchSchema);
        }
        batch.set_len(0);
        if self.ring.state().len == 0 {
            return Err(Error::Empty);
        }
        let context = self.ring.context(
            self.terminated.as_ref().map(|h| h.flags.as_slice()),
            self.truncated.as_ref().map(|h| h.flags.as_slice()),
        );
        let (_, _, positions, weights) = batch.parts_mut();
        let drawn = self
            .sampler
            .sample(&context, rows, positions, weights)?
            .min(positions.len());
        self.ring.check_stored(&positions[..drawn])?;
        self.gather_drawn(batch, drawn)
    }

    /// Gathers the rows at the given storage `positions` into `batch` on the device
    /// (weights 1). Allocates nothing.
    ///
    /// # Errors
    /// [`Error::BatchSchema`], [`Error::NotEnoughRows`] if the batch is too small, an
    /// invalid-configuration error naming a position that holds no row, or a driver
    /// error. On error the batch holds no rows.
    pub fn gather(&mut self, positions: &[usize], batch: &mut DeviceBatch<D>) -> Result<()> {
        if batch.schema() != &self.schema {
            return Err(Error::BatchSchema);
        }
        batch.set_len(0);
        let rows = positions.len();
        if rows > batch.room() {
            return Err(Error::NotEnoughRows {
                requested: rows,
                available: batch.room(),
            });
        }
        self.ring.check_stored(positions)?;
        let (_, _, slots, weights) = batch.parts_mut();
        slots[..rows].copy_from_slice(positions);
        weights[..rows].fill(1.0);
        self.gather_drawn(batch, rows)
    }

    /// Gathers, on the device, the rows at the first `rows` positions of `batch` into
    /// slots `0..rows`, `gather_rows` pairs per round, then sets the batch's length.
    fn gather_drawn(&mut self, batch: &mut DeviceBatch<D>, rows: usize) -> Result<()> {
        let (schema, targets, positions, _) = batch.parts_mut();
        let mut start = 0;
        while start < rows {
            let round = (rows - start).min(self.gather_rows);
            let staging = self.device.staging_mut(&mut self.pair_staging)?;
            let pairs = positions[start..start + round]
                .iter()
                .enumerate()
                .map(|(j, &position)| (position, start + j));
            let bytes = encode_pairs(pairs, staging)?;
            self.device
                .upload_staging(&self.pair_staging, bytes, &mut self.pairs, 0)?;
            for ((column, source), target) in schema
                .columns()
                .iter()
                .zip(&self.columns)
                .zip(&mut *targets)
            {
                self.device
                    .gather(source, column.row_bytes(), &self.pairs, round, target)?;
            }
            start += round;
        }
        batch.set_len(rows);
        Ok(())
    }
}

/// The device columns (and the host copies of the episode flags) as a [`RowSink`].
struct DeviceSink<'a, D: DeviceBackend> {
    device: &'a D,
    schema: &'a Schema,
    capacity: usize,
    columns: &'a mut [D::Buffer],
    flags: [Option<&'a mut HostFlags>; 2],
}

impl<D: DeviceBackend> RowSink for DeviceSink<'_, D> {
    fn schema(&self) -> &Schema {
        self.schema
    }

    /// Uploads every column's runs, then copies the episode flags to their host copies.
    /// A device failure part-way may have overwritten some positions: it is
    /// [`CopyError::Partial`].
    fn copy_rows(
        &mut self,
        plan: &WritePlan,
        columns: &[ColumnSlice<'_>],
    ) -> Result<(), CopyError> {
        let segments = plan.segments(self.capacity);
        for ((column, slice), target) in self
            .schema
            .columns()
            .iter()
            .zip(columns)
            .zip(&mut *self.columns)
        {
            let row_bytes = column.row_bytes();
            let source = slice.as_bytes();
            for segment in segments.iter().filter(|s| s.rows > 0) {
                self.device
                    .upload(
                        &source[segment.source_row * row_bytes..][..segment.rows * row_bytes],
                        target,
                        segment.position * row_bytes,
                    )
                    .map_err(CopyError::Partial)?;
            }
        }
        for host in self.flags.iter_mut().flatten() {
            if let ColumnSlice::Bool(source) = columns[host.column] {
                for segment in segments {
                    host.flags[segment.position..][..segment.rows]
                        .copy_from_slice(&source[segment.source_row..][..segment.rows]);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
