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
/// use rl_core::{Column, DType, Flag, Location, Schema};
/// use rl_storage::{device::{DeviceBatch, DeviceReplay, DeviceReplayOptions, FakeDevice}, sampler::Uniform};
///
/// let schema = Schema::new([
///     Column::new("obs", DType::F32, &[2]),
///     Column::scalar("action", DType::U32),
///     Column::scalar("terminated", DType::Bool),
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
/// batch.download(&device, "action", &mut actions)?;
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
mod tests {
    use std::sync::atomic::Ordering;

    use proptest::prelude::*;
    use rl_core::{Column, DType, Device};
    use rl_testkit::measure;

    use super::*;
    use crate::batch::Batch;
    use crate::device::FakeDevice;
    use crate::device::test_support::FailingDevice;
    use crate::prioritized::{Prioritized, PrioritizedConfig};
    use crate::ram::RamStorage;
    use crate::replay::ReplayBuffer;
    use crate::sampler::SampleContext;
    use crate::slice::SliceSampler;

    fn schema() -> Schema {
        Schema::new([
            Column::new("obs", DType::F32, &[3]),
            Column::scalar("action", DType::U32),
            Column::scalar("reward", DType::F32),
            Column::new("step", DType::I64, &[2]),
            Column::new("pixels", DType::U8, &[5]),
            Column::scalar("terminated", DType::Bool),
            Column::scalar("truncated", DType::Bool),
        ])
        .unwrap()
    }

    /// Rows whose every column encodes the row id, so any misplaced byte shows.
    struct Rows {
        obs: Vec<f32>,
        action: Vec<u32>,
        reward: Vec<f32>,
        step: Vec<i64>,
        pixels: Vec<u8>,
        terminated: Vec<Flag>,
        truncated: Vec<Flag>,
    }

    impl Rows {
        fn new(ids: std::ops::Range<u32>) -> Self {
            let ids: Vec<u32> = ids.collect();
            Self {
                obs: ids
                    .iter()
                    .flat_map(|&i| [i as f32, -(i as f32), 0.5])
                    .collect(),
                action: ids.clone(),
                reward: ids.iter().map(|&i| i as f32 * 0.25).collect(),
                step: ids.iter().flat_map(|&i| [i64::from(i), -7]).collect(),
                pixels: ids
                    .iter()
                    .flat_map(|&i| [i as u8, (i >> 8) as u8, 1, 2, 3])
                    .collect(),
                terminated: ids.iter().map(|&i| Flag::new(i % 7 == 6)).collect(),
                truncated: ids.iter().map(|&i| Flag::new(i % 11 == 10)).collect(),
            }
        }

        fn columns(&self) -> [ColumnSlice<'_>; 7] {
            [
                (&self.obs).into(),
                (&self.action).into(),
                (&self.reward).into(),
                (&self.step).into(),
                (&self.pixels).into(),
                (&self.terminated).into(),
                (&self.truncated).into(),
            ]
        }
    }

    fn options(gather_rows: usize) -> DeviceReplayOptions {
        DeviceReplayOptions {
            gather_rows,
            ..DeviceReplayOptions::default()
        }
    }

    fn device_replay<P: Sampler>(
        capacity: usize,
        sampler: P,
        gather_rows: usize,
    ) -> DeviceReplay<FakeDevice, P> {
        DeviceReplay::new(
            FakeDevice::new(),
            schema(),
            capacity,
            sampler,
            options(gather_rows),
            None,
        )
        .unwrap()
    }

    fn host_replay<P: Sampler>(capacity: usize, sampler: P) -> ReplayBuffer<RamStorage, P> {
        ReplayBuffer::new(RamStorage::new(schema(), capacity, None).unwrap(), sampler)
    }

    /// Every byte of every column of the device buffer equals the host buffer's, at every
    /// position (stored or not: both start zeroed and write the same positions).
    fn assert_same_columns<P: Sampler, Q: Sampler>(
        device: &DeviceReplay<FakeDevice, P>,
        host: &ReplayBuffer<RamStorage, Q>,
    ) {
        fn same<T: Element, P: Sampler, Q: Sampler>(
            device: &DeviceReplay<FakeDevice, P>,
            host: &ReplayBuffer<RamStorage, Q>,
            name: &str,
        ) {
            let expected = host.column::<T>(name).unwrap();
            let mut out = vec![T::default(); expected.len()];
            device.download_column(name, &mut out).unwrap();
            assert_eq!(out, expected, "column {name}");
        }
        same::<f32, P, Q>(device, host, "obs");
        same::<u32, P, Q>(device, host, "action");
        same::<f32, P, Q>(device, host, "reward");
        same::<i64, P, Q>(device, host, "step");
        same::<u8, P, Q>(device, host, "pixels");
        same::<Flag, P, Q>(device, host, "terminated");
        same::<Flag, P, Q>(device, host, "truncated");
        assert_eq!(device.ring(), host.ring());
        assert!(device.positions().eq(host.positions()));
    }

    /// The device batch holds exactly the host batch's rows, positions and weights.
    fn assert_same_batch(device: &FakeDevice, batch: &DeviceBatch<FakeDevice>, host: &Batch) {
        fn same<T: Element>(
            device: &FakeDevice,
            batch: &DeviceBatch<FakeDevice>,
            host: &Batch,
            name: &str,
        ) {
            let expected = host.column::<T>(name).unwrap();
            let mut out = vec![T::default(); expected.len()];
            batch.download(device, name, &mut out).unwrap();
            assert_eq!(out, expected, "column {name}");
        }
        assert_eq!(batch.len(), host.len());
        assert_eq!(batch.positions(), host.positions());
        assert_eq!(batch.weights(), host.weights());
        same::<f32>(device, batch, host, "obs");
        same::<u32>(device, batch, host, "action");
        same::<f32>(device, batch, host, "reward");
        same::<i64>(device, batch, host, "step");
        same::<u8>(device, batch, host, "pixels");
        same::<Flag>(device, batch, host, "terminated");
        same::<Flag>(device, batch, host, "truncated");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Fed the same writes (wraps and writes longer than the ring included), the device
        /// buffer stores exactly what the host buffer stores, at the same positions, with
        /// the same ring; the same sampler seed draws the same positions, and the rows
        /// gathered on the device equal the host's gather of those positions.
        #[test]
        fn behaves_like_the_host_replay_buffer(
            capacity in 1usize..40,
            writes in proptest::collection::vec(0u32..90, 1..12),
            batch_rows in 1usize..50,
            gather_rows in 1usize..20,
            seed in 0u64..1000,
        ) {
            let mut device = device_replay(capacity, Uniform::new(seed), gather_rows);
            let mut host = host_replay(capacity, Uniform::new(seed));
            let fake = device.device().clone();
            let mut device_batch = DeviceBatch::new(&fake, &schema(), batch_rows).unwrap();
            let (mut host_batch, mut gathered) = (
                Batch::new(&schema(), batch_rows).unwrap(),
                Batch::new(&schema(), batch_rows).unwrap(),
            );
            let mut next = 0u32;
            for rows in writes {
                let data = Rows::new(next..next + rows);
                next += rows;
                prop_assert_eq!(device.extend(&data.columns()).unwrap(), rows as usize);
                host.extend(&data.columns()).unwrap();
                assert_same_columns(&device, &host);
                if host.is_empty() {
                    prop_assert!(matches!(device.sample(&mut device_batch), Err(Error::Empty)));
                    continue;
                }
                device.sample(&mut device_batch).unwrap();
                host.sample(&mut host_batch).unwrap();
                assert_same_batch(&fake, &device_batch, &host_batch);
                host.gather(device_batch.positions(), &mut gathered).unwrap();
                assert_same_batch(&fake, &device_batch, &gathered);
            }
        }

        /// Episode-aware sampling sees the same flags through the host copies as the host
        /// buffer sees in its storage: a slice sampler draws the same windows.
        #[test]
        fn slice_sampling_matches_the_host_buffer(
            capacity in 4usize..40,
            writes in proptest::collection::vec(1u32..60, 1..8),
            seed in 0u64..1000,
        ) {
            let slice = || SliceSampler::new(2, seed).unwrap();
            let mut device = device_replay(capacity, slice(), 3);
            let mut host = host_replay(capacity, slice());
            let fake = device.device().clone();
            let mut device_batch = DeviceBatch::new(&fake, &schema(), 8).unwrap();
            let mut host_batch = Batch::new(&schema(), 8).unwrap();
            let mut next = 0u32;
            for rows in writes {
                let data = Rows::new(next..next + rows);
                next += rows;
                device.extend(&data.columns()).unwrap();
                host.extend(&data.columns()).unwrap();
                match (device.sample(&mut device_batch), host.sample(&mut host_batch)) {
                    (Ok(()), Ok(())) => assert_same_batch(&fake, &device_batch, &host_batch),
                    (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                    (a, b) => prop_assert!(false, "device {:?}, host {:?}", a, b),
                }
            }
        }
    }

    #[test]
    fn weighted_samples_carry_the_host_weights() {
        let sampler = || Prioritized::new(30, PrioritizedConfig::default(), 11).unwrap();
        let mut device = device_replay(30, sampler(), 7);
        let mut host = host_replay(30, sampler());
        let data = Rows::new(0..45);
        device.extend(&data.columns()).unwrap();
        host.extend(&data.columns()).unwrap();
        let stored: Vec<usize> = host.positions().collect();
        let priorities: Vec<f32> = (0..stored.len()).map(|i| 0.5 + i as f32).collect();
        for sampler in [device.sampler_mut(), host.sampler_mut()] {
            sampler.update_priorities(&stored, &priorities).unwrap();
        }
        let fake = device.device().clone();
        let mut device_batch = DeviceBatch::new(&fake, &schema(), 25).unwrap();
        let mut host_batch = Batch::new(&schema(), 25).unwrap();
        device.sample(&mut device_batch).unwrap();
        host.sample(&mut host_batch).unwrap();
        assert!(host_batch.weights().iter().any(|&w| w != 1.0));
        assert_same_batch(&fake, &device_batch, &host_batch);
        assert!(device.memory_plan().total(Location::Ram) > device.plan.total(Location::Ram));
    }

    #[test]
    fn refused_writes_change_nothing() {
        let mut device = device_replay(8, Uniform::new(0), 4);
        let mut host = host_replay(8, Uniform::new(0));
        let first = Rows::new(0..6);
        device.extend(&first.columns()).unwrap();
        host.extend(&first.columns()).unwrap();
        let good = Rows::new(6..9);
        let mut bad = Rows::new(6..9);
        bad.reward[2] = f32::INFINITY;
        let err = device.extend(&bad.columns()).unwrap_err();
        assert!(
            matches!(&err, Error::NonFinite { column, row: 2, .. } if column == "reward"),
            "{err}"
        );
        let mut short = good.columns();
        short[4] = ColumnSlice::U8(&[1, 2, 3]);
        assert!(matches!(
            device.extend(&short),
            Err(Error::RowMismatch { .. })
        ));
        let mut wrong_type = good.columns();
        wrong_type[1] = ColumnSlice::F32(&[6.0, 7.0, 8.0]);
        assert!(matches!(
            device.extend(&wrong_type),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            device.extend(&good.columns()[..6]),
            Err(Error::ColumnCount { .. })
        ));
        assert!(matches!(
            device.push(&good.columns()),
            Err(Error::RowMismatch { .. })
        ));
        // Nothing reached the device or the host flag copies: still the host's twin.
        assert_same_columns(&device, &host);
        let flags = |h: &Option<HostFlags>| h.as_ref().unwrap().flags.clone();
        assert_eq!(
            flags(&device.terminated),
            host.column::<Flag>("terminated").unwrap()
        );
        assert_eq!(
            flags(&device.truncated),
            host.column::<Flag>("truncated").unwrap()
        );
        // Allowed on request.
        let mut device = DeviceReplay::new(
            FakeDevice::new(),
            schema(),
            8,
            Uniform::new(0),
            DeviceReplayOptions {
                non_finite: NonFinite::Allow,
                ..options(4)
            },
            None,
        )
        .unwrap();
        device.extend(&bad.columns()).unwrap();
        let mut reward = [0.0f32; 8];
        device.download_column("reward", &mut reward).unwrap();
        assert_eq!(reward[2], f32::INFINITY);
    }

    #[test]
    fn sampling_errors_leave_an_empty_batch() {
        let mut device = device_replay(4, Uniform::new(0), 4);
        let fake = device.device().clone();
        let mut batch = DeviceBatch::new(&fake, &schema(), 3).unwrap();
        assert!(matches!(device.sample(&mut batch), Err(Error::Empty)));
        device.extend(&Rows::new(0..2).columns()).unwrap();
        device.sample(&mut batch).unwrap();
        assert_eq!(batch.len(), 3);
        let other = Schema::new([Column::scalar("x", DType::F32)]).unwrap();
        let mut foreign = DeviceBatch::new(&fake, &other, 2).unwrap();
        assert!(matches!(
            device.sample(&mut foreign),
            Err(Error::BatchSchema)
        ));
        assert!(
            device.gather(&[2], &mut batch).is_err(),
            "position 2 holds no row"
        );
        assert!(batch.is_empty());
        assert!(matches!(
            device.gather(&[0, 1, 0, 1], &mut batch),
            Err(Error::NotEnoughRows { .. })
        ));
        device.gather(&[1, 0], &mut batch).unwrap();
        let mut actions = [0u32; 2];
        batch.download(&fake, "action", &mut actions).unwrap();
        assert_eq!(actions, [1, 0]);
        let mut wrong = [0u32; 4];
        assert!(device.download_column("reward", &mut wrong).is_err());
        assert!(device.download_column("action", &mut wrong[..3]).is_err());
        assert!(device.download_column("nope", &mut wrong).is_err());
    }

    /// A sampler that draws a position outside the ring.
    #[derive(Debug)]
    struct Broken;

    impl Sampler for Broken {
        fn sample(
            &mut self,
            _: &SampleContext<'_>,
            rows: usize,
            indices: &mut [usize],
            weights: &mut [f32],
        ) -> Result<usize> {
            indices[..rows].fill(3);
            weights[..rows].fill(1.0);
            Ok(rows)
        }
    }

    #[test]
    fn positions_outside_the_ring_never_reach_the_device() {
        let mut device = device_replay(4, Broken, 4);
        device.extend(&Rows::new(0..2).columns()).unwrap();
        let fake = device.device().clone();
        let mut batch = DeviceBatch::new(&fake, &schema(), 2).unwrap();
        let err = device.sample(&mut batch).unwrap_err();
        assert!(err.to_string().contains("position 3"), "{err}");
        assert!(batch.is_empty());
    }

    #[test]
    fn over_budget_is_refused_before_allocating_with_the_plan_in_the_error() {
        let fake = FakeDevice::new();
        let options = options(64);
        let plan = DeviceReplay::<FakeDevice>::plan(&schema(), 1000, &options).unwrap();
        let gpu = plan.total(Location::Gpu);
        assert_eq!(gpu, (1000 * schema().row_bytes() + 64 * 8) as u64);
        assert_eq!(plan.total(Location::Ram), 64 * 8 + 2 * 1000);
        let budget = MemoryBudget::unlimited().with_gpu(gpu - 1);
        let err = DeviceReplay::new(
            fake.clone(),
            schema(),
            1000,
            Uniform::new(0),
            options,
            Some(&budget),
        )
        .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Core(rl_core::Error::OverBudget {
                    location: Location::Gpu,
                    ..
                })
            ),
            "{err}"
        );
        let message = err.to_string();
        assert!(message.contains("device_replay/obs"), "{message}");
        assert_eq!(fake.allocated_bytes(), 0, "nothing allocated");
        // The host copies of the flags count against the RAM budget.
        let ram = MemoryBudget::ram(plan.total(Location::Ram) - 1);
        let err = DeviceReplay::new(
            fake.clone(),
            schema(),
            1000,
            Uniform::new(0),
            options,
            Some(&ram),
        )
        .unwrap_err();
        assert!(err.to_string().contains("host_copy"), "{err}");
        // Exactly at the budget it fits.
        let exact = MemoryBudget::ram(plan.total(Location::Ram)).with_gpu(gpu);
        DeviceReplay::new(fake, schema(), 1000, Uniform::new(0), options, Some(&exact)).unwrap();
    }

    #[test]
    fn bad_configurations_are_errors() {
        let schema = schema();
        assert!(DeviceReplay::<FakeDevice>::plan(&schema, 0, &options(1)).is_err());
        assert!(DeviceReplay::<FakeDevice>::plan(&schema, 10, &options(0)).is_err());
        assert!(DeviceReplay::<FakeDevice>::plan(&schema, usize::MAX, &options(1)).is_err());
        let one = Schema::new([Column::scalar("x", DType::U8)]).unwrap();
        assert!(
            DeviceReplay::<FakeDevice>::plan(&one, (1 << 32) + 1, &options(1)).is_err(),
            "positions are u32: position 2^32 cannot be gathered"
        );
        assert!(DeviceReplay::<FakeDevice>::plan(&one, 1 << 32, &options(1)).is_ok());
        let wide = Schema::new([Column::new("x", DType::F32, &[1 << 40])]).unwrap();
        let err = DeviceReplay::<FakeDevice>::plan(&wide, 1 << 30, &options(1)).unwrap_err();
        assert!(err.to_string().contains("overflows"), "{err}");
        assert!(DeviceReplay::<FakeDevice>::plan(&one, 10, &options(usize::MAX)).is_err());
    }

    #[test]
    fn device_bytes_equal_the_planned_gpu_bytes() {
        let fake = FakeDevice::new();
        let options = options(100);
        let buffer =
            DeviceReplay::new(fake.clone(), schema(), 777, Uniform::new(0), options, None).unwrap();
        let plan = DeviceReplay::<FakeDevice>::plan(&schema(), 777, &options).unwrap();
        assert_eq!(fake.allocated_bytes(), plan.total(Location::Gpu));
        assert_eq!(buffer.memory_plan(), plan, "Uniform holds nothing");
        assert_eq!(buffer.device().device(), Device::Cuda(0));
        assert_eq!(buffer.capacity(), 777);
        assert!(buffer.is_empty());
        let batch = DeviceBatch::new(&fake, &schema(), 32).unwrap();
        let batch_plan = DeviceBatch::<FakeDevice>::plan(&schema(), 32).unwrap();
        assert_eq!(
            fake.allocated_bytes(),
            plan.total(Location::Gpu) + batch_plan.total(Location::Gpu)
        );
        drop((buffer, batch));
        assert_eq!(fake.allocated_bytes(), 0);
        // Without flag columns there are no host copies.
        let plain = Schema::new([Column::scalar("x", DType::F32)]).unwrap();
        let plan = DeviceReplay::<FakeDevice>::plan(&plain, 10, &options).unwrap();
        assert_eq!(plan.total(Location::Ram), 100 * 8);
    }

    #[test]
    fn writing_and_sampling_allocate_nothing() {
        let mut buffer = device_replay(1000, Uniform::new(1), 16);
        let fake = buffer.device().clone();
        let data = Rows::new(0..256);
        let long = Rows::new(0..1500);
        let one = Rows::new(7..8);
        let (columns, long, one) = (data.columns(), long.columns(), one.columns());
        let mut batch = DeviceBatch::new(&fake, &schema(), 64).unwrap();
        buffer.extend(&columns).unwrap();
        let positions: Vec<usize> = (0..64).map(|i| i * 3).collect();
        let (result, stats) = measure(|| -> Result<()> {
            for _ in 0..20 {
                buffer.extend(&columns)?;
                buffer.extend(&long)?;
                buffer.push(&one)?;
                buffer.sample(&mut batch)?;
                buffer.sample_rows(&mut batch, 40)?;
                buffer.gather(&positions, &mut batch)?;
            }
            Ok(())
        });
        result.unwrap();
        assert_eq!(stats.allocations, 0, "{stats:?}");
    }

    #[test]
    fn a_device_failure_mid_write_drops_the_rows_it_may_have_overwritten() {
        let flaky = FailingDevice::new();
        let mut buffer =
            DeviceReplay::new(flaky, schema(), 10, Uniform::new(0), options(4), None).unwrap();
        buffer.extend(&Rows::new(0..10).columns()).unwrap();
        let before = buffer.ring();
        // The next write of 3 rows overwrites positions 0..3 (rows 0, 1, 2); fail after
        // two columns were uploaded.
        buffer.device.uploads_left.store(2, Ordering::Relaxed);
        assert!(buffer.extend(&Rows::new(10..13).columns()).is_err());
        let ring = buffer.ring();
        assert_eq!((ring.cursor, ring.len), (0, 7), "{ring:?}");
        assert_eq!(
            (ring.written, ring.episodes),
            (before.written, before.episodes)
        );
        assert!(buffer.positions().eq(3..10));
        // Every sampled row is an intact old row.
        let mut batch = DeviceBatch::new(&buffer.device, &schema(), 200).unwrap();
        buffer.sample(&mut batch).unwrap();
        let mut actions = [0u32; 200];
        batch
            .download(&buffer.device, "action", &mut actions)
            .unwrap();
        assert!(actions.iter().all(|&a| (3..10).contains(&a)), "{actions:?}");
        // The buffer keeps working once the device does.
        buffer
            .device
            .uploads_left
            .store(usize::MAX, Ordering::Relaxed);
        buffer.extend(&Rows::new(10..13).columns()).unwrap();
        assert_eq!(buffer.len(), 10);
        let mut action = [0u32; 10];
        buffer.download_column("action", &mut action).unwrap();
        assert_eq!(action, [10, 11, 12, 3, 4, 5, 6, 7, 8, 9]);
    }
}
