//! The FIFO replay buffer: a ring writer over a storage, and a sampler; [`AnyReplay`], one
//! over RAM or a memmap file chosen at run time.

use rl_core::{Element, MemoryPlan, Schema};

use crate::batch::{Batch, Parallel};
use crate::column::{ColumnSlice, column_index, typed};
use crate::copy::Stores;
use rl_core::NonFinite;

use crate::error::{Error, Result};
use crate::ram::RamStorage;
use crate::ring::{self, HostSink, RingWriter};
use crate::sampler::{Sampler, Uniform};
use crate::storage::{HostStorage, RingState};

#[doc(inline)]
pub use crate::__with_storage as with_storage;
pub use crate::any_replay::{AnyReplay, ByStorage};

/// A fixed-capacity FIFO replay buffer: writes go around a ring of rows in a storage, the
/// oldest rows are overwritten first, and batches are gathered by a sampler into
/// caller-owned [`Batch`]es.
///
/// Nothing is allocated after construction: `push`, `extend`, `sample` and `commit` reuse
/// what the storage, the sampler and the batch allocated up front. `terminated` and
/// `truncated` are ordinary (separate) columns; when the schema has them as `Bool`
/// columns, samplers that respect episodes (slices) see them.
///
/// ```
/// use rl_core::{Column, DType, Field, Flag, Schema};
/// use rl_storage::{Batch, ColumnSlice, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};
///
/// let schema = Schema::new([
///     Column::new(Field::Obs.name(), DType::F32, &[2]),
///     Column::scalar(Field::Action.name(), DType::U32),
///     Column::scalar(Field::Terminated.name(), DType::Bool),
/// ])?;
/// let storage = RamStorage::new(schema.clone(), 3, None)?;
/// let mut buffer = ReplayBuffer::new(storage, Uniform::new(0));
/// for step in 0..5u32 {
///     let obs = [step as f32, 0.0];
///     let done = [Flag::new(step == 4)];
///     buffer.push(&[(&obs).into(), (&[step]).into(), (&done).into()])?;
/// }
/// assert_eq!(buffer.len(), 3); // rows 2, 3, 4: the oldest two were overwritten
/// let mut batch = Batch::new(&schema, 8)?;
/// buffer.sample(&mut batch)?;
/// assert!(batch.field::<u32>(Field::Action)?.iter().all(|&a| a >= 2));
/// # Ok::<(), rl_storage::Error>(())
/// ```
#[derive(Debug)]
pub struct ReplayBuffer<S = RamStorage, P = Uniform> {
    storage: S,
    sampler: P,
    ring: RingWriter,
    /// Streaming stores for rings larger than the cache.
    stores: Stores,
}

impl<S: HostStorage, P: Sampler> ReplayBuffer<S, P> {
    /// A buffer over `storage`, resuming from the ring state the storage was opened with
    /// (empty for a new storage, the last commit for a reopened file).
    pub fn new(storage: S, sampler: P) -> Self {
        let ring = storage.restored();
        Self::with_ring(storage, sampler, ring)
    }

    pub(crate) fn with_ring(storage: S, mut sampler: P, ring: RingState) -> Self {
        let ring = RingWriter::new(storage.schema(), storage.capacity(), ring);
        ring.announce_stored(&mut sampler);
        Self::from_parts(storage, sampler, ring)
    }

    /// A buffer over `storage` whose `sampler` already knows the rows `ring` holds (its
    /// state was restored from a checkpoint).
    pub(crate) fn with_restored_sampler(storage: S, sampler: P, ring: RingState) -> Self {
        let ring = RingWriter::new(storage.schema(), storage.capacity(), ring);
        Self::from_parts(storage, sampler, ring)
    }

    fn from_parts(storage: S, sampler: P, ring: RingWriter) -> Self {
        let bytes = storage
            .schema()
            .row_bytes()
            .saturating_mul(storage.capacity());
        Self {
            storage,
            sampler,
            ring,
            stores: Stores::for_storage_bytes(bytes),
        }
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
        self.storage.capacity()
    }

    /// Cursor, fill and counters of the ring.
    pub fn ring(&self) -> RingState {
        self.ring.state()
    }

    /// The storage.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The sampler.
    pub fn sampler(&self) -> &P {
        &self.sampler
    }

    /// The sampler, mutably (to update priorities, for instance).
    pub fn sampler_mut(&mut self) -> &mut P {
        &mut self.sampler
    }

    /// Storage and sampler memory, line by line.
    pub fn memory_plan(&self) -> MemoryPlan {
        let mut plan = MemoryPlan::new();
        plan.nest("replay", &self.storage.memory_plan());
        plan.nest("replay/sampler", &self.sampler.memory_plan());
        plan
    }

    /// Storage positions of the stored rows, oldest first.
    pub fn positions(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        let (ring, capacity) = (self.ring.state(), self.capacity());
        (0..ring.len).map(move |i| ring.position(i, capacity))
    }

    /// Column `name` of the storage, indexed by position (all `capacity` rows; only the
    /// rows at [`ReplayBuffer::positions`] hold data).
    ///
    /// # Errors
    /// Unknown column or a dtype other than the column's.
    pub fn column<T: Element>(&self, name: &str) -> Result<&[T]> {
        let index = column_index(self.schema(), name)?;
        typed(&self.schema().columns()[index], self.storage.column(index))
    }

    /// Appends one row: one single-row slice per column, in schema order.
    ///
    /// # Errors
    /// As [`ReplayBuffer::extend`], and [`Error::RowMismatch`] for more than one row.
    pub fn push(&mut self, row: &[ColumnSlice<'_>]) -> Result<()> {
        ring::check_single_row(self.schema(), row)?;
        self.extend(row).map(|_| ())
    }

    /// Appends rows given as one slice per column, in schema order, each holding the same
    /// number of rows. Overwrites the oldest rows once full. Returns the rows written.
    ///
    /// Everything is validated before anything is written: a refused write changes
    /// nothing. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ColumnCount`], [`Error::DTypeMismatch`], [`Error::RowMismatch`],
    /// [`Error::NonFinite`] (unless allowed), or a storage I/O error.
    pub fn extend(&mut self, columns: &[ColumnSlice<'_>]) -> Result<usize> {
        let mut sink = HostSink {
            storage: &mut self.storage,
            stores: self.stores,
        };
        self.ring.write(&mut sink, &mut self.sampler, columns)
    }

    /// Samples `batch.room()` rows into `batch`.
    ///
    /// # Errors
    /// [`Error::Empty`], [`Error::BatchSchema`], or the sampler's errors.
    pub fn sample(&mut self, batch: &mut Batch) -> Result<()> {
        self.sample_rows(batch, batch.room())
    }

    /// Samples `rows` rows into `batch` (a sampler may return a different number, e.g. the
    /// merged last batch of an epoch; [`Batch::len`] says how many). Allocates nothing.
    ///
    /// # Errors
    /// [`Error::Empty`], [`Error::BatchSchema`], or the sampler's errors.
    pub fn sample_rows(&mut self, batch: &mut Batch, rows: usize) -> Result<()> {
        if batch.schema() != self.storage.schema() {
            return Err(Error::BatchSchema);
        }
        let (positions, weights) = batch.draw_space();
        let drawn = self.draw(rows, positions, weights)?;
        batch.gather_drawn(&self.storage, drawn);
        Ok(())
    }

    /// [`ReplayBuffer::sample`] with the gather split by rows over the tasks of
    /// `parallel` (the draw stays on the caller): the same batch, bit for bit, on as many
    /// cores as `parallel` runs. Worth it for batches of megabytes, whose copy is bound by
    /// one core's memory traffic. Allocates nothing.
    ///
    /// # Errors
    /// As [`ReplayBuffer::sample`].
    pub fn sample_on(&mut self, batch: &mut Batch, parallel: &dyn Parallel) -> Result<()>
    where
        S: Sync,
    {
        if batch.schema() != self.storage.schema() {
            return Err(Error::BatchSchema);
        }
        let rows = batch.room();
        let (positions, weights) = batch.draw_space();
        let drawn = self.draw(rows, positions, weights)?;
        batch.gather_drawn_on(&self.storage, drawn, parallel);
        Ok(())
    }

    /// Lets the sampler draw `rows` positions (and weights) of stored rows.
    pub(crate) fn draw(
        &mut self,
        rows: usize,
        positions: &mut [usize],
        weights: &mut [f32],
    ) -> Result<usize> {
        if self.ring.state().len == 0 {
            return Err(Error::Empty);
        }
        let context = self.ring.host_context(&self.storage);
        self.sampler.sample(&context, rows, positions, weights)
    }

    /// Gathers the rows at the given storage `positions` into `batch` (weights 1).
    ///
    /// # Errors
    /// [`Error::BatchSchema`], [`Error::NotEnoughRows`] if the batch is too small, or an
    /// invalid-configuration error naming a position that holds no row.
    pub fn gather(&self, positions: &[usize], batch: &mut Batch) -> Result<()> {
        if batch.schema() != self.storage.schema() {
            return Err(Error::BatchSchema);
        }
        self.ring.check_stored(positions)?;
        batch.gather_positions(&self.storage, positions)
    }

    /// Makes every row written so far durable (memmap storage); a no-op in RAM.
    ///
    /// # Errors
    /// Storage I/O errors.
    pub fn commit(&mut self) -> Result<()> {
        self.storage.commit(&self.ring.state())
    }

    /// Takes the buffer apart.
    pub fn into_parts(self) -> (S, P, RingState) {
        (self.storage, self.sampler, self.ring.state())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;
    use rl_core::{Column, DType, Field, Flag, MemoryBudget};
    use rl_testkit::measure;

    use super::*;

    fn schema() -> Schema {
        Schema::new([
            Column::new(Field::Obs.name(), DType::F32, &[3]),
            Column::scalar(Field::Action.name(), DType::U32),
            Column::scalar(Field::Reward.name(), DType::F32),
            Column::scalar(Field::Terminated.name(), DType::Bool),
            Column::scalar(Field::Truncated.name(), DType::Bool),
        ])
        .unwrap()
    }

    /// Rows whose every column encodes the row id, so any misplaced byte shows.
    struct Rows {
        obs: Vec<f32>,
        action: Vec<u32>,
        reward: Vec<f32>,
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
                terminated: ids.iter().map(|&i| Flag::new(i % 7 == 6)).collect(),
                truncated: ids.iter().map(|&i| Flag::new(i % 11 == 10)).collect(),
            }
        }

        fn columns(&self) -> [ColumnSlice<'_>; 5] {
            [
                (&self.obs).into(),
                (&self.action).into(),
                (&self.reward).into(),
                (&self.terminated).into(),
                (&self.truncated).into(),
            ]
        }
    }

    fn buffer(capacity: usize) -> ReplayBuffer {
        ReplayBuffer::new(
            RamStorage::new(schema(), capacity, None).unwrap(),
            Uniform::new(3),
        )
    }

    /// The stored rows' ids, oldest first, checking every column agrees with the id.
    fn stored_ids(buffer: &ReplayBuffer) -> Vec<u32> {
        let (obs, action) = (
            buffer.column::<f32>(Field::Obs.name()).unwrap(),
            buffer.column::<u32>(Field::Action.name()).unwrap(),
        );
        let reward = buffer.column::<f32>(Field::Reward.name()).unwrap();
        let terminated = buffer.column::<Flag>(Field::Terminated.name()).unwrap();
        buffer
            .positions()
            .map(|p| {
                let id = action[p];
                assert_eq!(&obs[p * 3..p * 3 + 3], &[id as f32, -(id as f32), 0.5]);
                assert_eq!(reward[p], id as f32 * 0.25);
                assert_eq!(terminated[p].get(), id % 7 == 6);
                id
            })
            .collect()
    }

    /// Runs each call's tasks on `threads` scoped threads (task `i` on thread `i %
    /// threads`).
    struct Scoped(usize);

    impl crate::Parallel for Scoped {
        fn threads(&self) -> usize {
            self.0
        }

        fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
            std::thread::scope(|scope| {
                for t in 0..self.0 {
                    scope.spawn(move || (t..tasks).step_by(self.0).for_each(task));
                }
            });
        }
    }

    /// Rows of 1 200 floats (4 800 bytes: a file's rows of them are read by copy), the
    /// row id in every element, and an id column.
    fn wide_schema() -> Schema {
        Schema::new([
            Column::new(Field::Obs.name(), DType::F32, &[1200]),
            Column::scalar(Field::Action.name(), DType::U32),
        ])
        .unwrap()
    }

    /// Samples three batches from two buffers `make` builds alike, with `sample` and
    /// with `sample_on` over `threads` threads: the same rows, the same bytes, each row
    /// the one written.
    fn same_batches<S: HostStorage + Sync>(make: impl Fn(&str) -> S, threads: usize) {
        let ids: Vec<u32> = (0..700).collect();
        let obs: Vec<f32> = ids.iter().flat_map(|&i| [i as f32; 1200]).collect();
        let columns = [ColumnSlice::F32(&obs), ColumnSlice::U32(&ids)];
        let buffer = |name: &str| {
            let mut buffer = ReplayBuffer::new(make(name), Uniform::new(11));
            buffer.extend(&columns).unwrap();
            buffer
        };
        let (mut alone, mut split) = (buffer("a"), buffer("b"));
        let mut want = Batch::new(&wide_schema(), 37).unwrap();
        let mut got = Batch::new(&wide_schema(), 37).unwrap();
        for _ in 0..3 {
            alone.sample(&mut want).unwrap();
            split.sample_on(&mut got, &Scoped(threads)).unwrap();
            assert_eq!(got.len(), 37);
            let ids = got.column::<u32>(Field::Action.name()).unwrap().to_vec();
            assert_eq!(ids, want.column::<u32>(Field::Action.name()).unwrap());
            assert!(ids.iter().all(|&id| (200..700).contains(&id)), "{ids:?}");
            let rows = got.column::<f32>(Field::Obs.name()).unwrap();
            assert_eq!(rows, want.column::<f32>(Field::Obs.name()).unwrap());
            for (row, &id) in rows.chunks_exact(1200).zip(&ids) {
                assert!(row.iter().all(|&v| v == id as f32), "{threads} threads");
            }
        }
    }

    /// `sample_on` draws as `sample` does and gathers the same bytes on any number of
    /// threads, from RAM and from a memmap file (rows read by copy), the ring wrapped.
    #[test]
    fn sampling_on_several_threads_gathers_the_same_batch() {
        let dir = tempfile::tempdir().unwrap();
        for threads in [1, 2, 3, 8] {
            same_batches(
                |_| RamStorage::new(wide_schema(), 500, None).unwrap(),
                threads,
            );
            same_batches(
                |name| {
                    crate::memmap::MemmapStorage::create(
                        dir.path().join(format!("{name}{threads}.rlmm")),
                        wide_schema(),
                        500,
                        crate::memmap::MemmapOptions::default(),
                    )
                    .unwrap()
                },
                threads,
            );
        }
    }

    #[test]
    fn sampling_more_rows_than_the_batch_holds_is_refused() {
        let mut buffer = buffer(100);
        let rows = Rows::new(0..50);
        buffer.extend(&rows.columns()).unwrap();
        let mut batch = Batch::new(&schema(), 8).unwrap();
        match buffer.sample_rows(&mut batch, 300) {
            Err(Error::BatchTooSmall {
                requested: 300,
                room: 8,
            }) => {}
            other => panic!("{other:?}"),
        }
        assert!(batch.is_empty());
        buffer.sample_rows(&mut batch, 8).unwrap();
        assert_eq!(batch.len(), 8);
        buffer.sample_rows(&mut batch, 3).unwrap();
        assert_eq!(batch.len(), 3);
    }

    proptest! {
        /// The ring behaves like a bounded VecDeque: FIFO order, no row lost or duplicated
        /// among the newest `capacity`, capacity never exceeded.
        #[test]
        fn ring_matches_a_bounded_vecdeque(capacity in 1usize..40, writes in proptest::collection::vec(0u32..60, 1..20)) {
            let mut buffer = buffer(capacity);
            let mut model = VecDeque::new();
            let mut next = 0u32;
            for rows in writes {
                let data = Rows::new(next..next + rows);
                prop_assert_eq!(buffer.extend(&data.columns()).unwrap(), rows as usize);
                for id in next..next + rows {
                    model.push_back(id);
                    if model.len() > capacity {
                        model.pop_front();
                    }
                }
                next += rows;
                prop_assert!(buffer.len() <= capacity);
                prop_assert_eq!(stored_ids(&buffer), model.iter().copied().collect::<Vec<_>>());
                prop_assert_eq!(buffer.ring().written, u64::from(next));
                let ends = (0..next).filter(|i| i % 7 == 6 || i % 11 == 10).count() as u64;
                prop_assert_eq!(buffer.ring().episodes, ends);
            }
        }

        /// Sampled rows are stored rows, gathered intact.
        #[test]
        fn samples_are_stored_rows(capacity in 1usize..50, rows in 1u32..120, batch_rows in 1usize..64) {
            let mut buffer = buffer(capacity);
            buffer.extend(&Rows::new(0..rows).columns()).unwrap();
            let mut batch = Batch::new(&schema(), batch_rows).unwrap();
            buffer.sample(&mut batch).unwrap();
            prop_assert_eq!(batch.len(), batch_rows);
            let oldest = rows.saturating_sub(capacity as u32);
            let actions = batch.column::<u32>(Field::Action.name()).unwrap();
            let obs = batch.column::<f32>(Field::Obs.name()).unwrap();
            for (j, &id) in actions.iter().enumerate() {
                prop_assert!(id >= oldest && id < rows, "id {} not stored", id);
                prop_assert_eq!(&obs[j * 3..j * 3 + 3], &[id as f32, -(id as f32), 0.5]);
            }
        }
    }

    #[test]
    fn refused_writes_change_nothing_and_say_why() {
        let mut buffer = buffer(8);
        buffer.extend(&Rows::new(0..5).columns()).unwrap();
        let before = (stored_ids(&buffer), buffer.ring());
        let good = Rows::new(5..7);
        let mut bad = Rows::new(5..7);
        bad.reward[1] = f32::NAN;
        let err = buffer.extend(&bad.columns()).unwrap_err();
        assert!(
            matches!(&err, Error::NonFinite { column, row: 1, .. } if column == Field::Reward.name()),
            "{err}"
        );
        let mut short = good.columns();
        short[1] = ColumnSlice::U32(&[5]);
        assert!(matches!(
            buffer.extend(&short),
            Err(Error::RowMismatch { .. })
        ));
        let mut wrong_type = good.columns();
        wrong_type[1] = ColumnSlice::F32(&[5.0, 6.0]);
        assert!(matches!(
            buffer.extend(&wrong_type),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            buffer.extend(&good.columns()[..4]),
            Err(Error::ColumnCount { .. })
        ));
        assert!(matches!(
            buffer.push(&good.columns()),
            Err(Error::RowMismatch { .. })
        ));
        assert_eq!((stored_ids(&buffer), buffer.ring()), before);
        // Allowed on request.
        let mut buffer = buffer.with_non_finite(NonFinite::Allow);
        buffer.extend(&bad.columns()).unwrap();
        assert!(buffer.column::<f32>(Field::Reward.name()).unwrap()[6].is_nan());
    }

    #[test]
    fn empty_buffers_and_foreign_batches_are_errors() {
        let mut buffer = buffer(4);
        let mut batch = Batch::new(&schema(), 2).unwrap();
        assert!(matches!(buffer.sample(&mut batch), Err(Error::Empty)));
        buffer.extend(&Rows::new(0..2).columns()).unwrap();
        let other = Schema::new([Column::scalar("x", DType::F32)]).unwrap();
        let mut foreign = Batch::new(&other, 2).unwrap();
        assert!(matches!(
            buffer.sample(&mut foreign),
            Err(Error::BatchSchema)
        ));
        assert!(
            buffer.gather(&[3], &mut batch).is_err(),
            "position 3 holds no row"
        );
        buffer.gather(&[1, 0], &mut batch).unwrap();
        assert_eq!(batch.column::<u32>(Field::Action.name()).unwrap(), &[1, 0]);
        assert!(batch.column::<f32>(Field::Action.name()).is_err());
        assert!(batch.column::<u32>("nope").is_err());
    }

    #[test]
    fn writing_sampling_and_committing_allocate_nothing() {
        let mut buffer = buffer(1000);
        let data = Rows::new(0..256);
        let columns = data.columns();
        let one = Rows::new(7..8);
        let mut batch = Batch::new(&schema(), 64).unwrap();
        buffer.extend(&columns).unwrap();
        let (result, stats) = measure(|| -> Result<()> {
            for _ in 0..50 {
                buffer.extend(&columns)?;
                buffer.push(&one.columns())?;
                buffer.sample(&mut batch)?;
                buffer.commit()?;
            }
            Ok(())
        });
        result.unwrap();
        assert_eq!(stats.allocations, 0, "{stats:?}");
    }

    #[test]
    fn budget_and_plan_cover_storage_and_batch() {
        let plan = RamStorage::plan(&schema(), 1_000_000).unwrap();
        assert!(plan.check(&MemoryBudget::ram(1 << 20)).is_err());
        let buffer = buffer(1000);
        let total = buffer.memory_plan().grand_total();
        assert!(total >= 1000 * schema().row_bytes() as u64);
        let batch_plan = Batch::plan(&schema(), 256).unwrap();
        assert_eq!(batch_plan.lines().len(), 6);
    }
}
