//! Replay with each observation stored once: the next observation of row `t` is the
//! observation of row `t + 1`.
//!
//! Storing `obs` and `next_obs` doubles the largest column of most buffers (for pixels, it
//! is nearly the whole buffer). Here every step writes its observation once; when an
//! episode ends (terminated *or* truncated), one extra *final row* holds the final
//! observation, so `next_obs` of the last transition is the true final observation and
//! bootstrapping at a time-limit cut stays correct. Final rows, and the newest row (whose
//! successor is not written yet), are never sampled as transitions.
//!
//! A deduplicating buffer holds one stream of consecutive steps: give each environment its
//! own buffer (or write whole trajectories one after another).

use rl_core::{Column, DType, Field, Flag, MemoryPlan, Schema};

use crate::batch::Batch;
use crate::column::{ColumnSlice, column_index, reject_non_finite};
use crate::error::{Error, Result};
use crate::ram::RamStorage;
use crate::replay::ReplayBuffer;
use crate::sampler::{Sampler, Uniform};
use crate::storage::{HostStorage, READ_MIN_ROW_BYTES};
use rl_core::NonFinite;

pub use crate::any_replay::AnyDedup;

/// Name of the flag column marking final rows.
pub const FINAL_OBS: &str = "final_obs";
/// Name of the next-observation column of sampled batches ([`Field::NextObs`]).
pub const NEXT_OBS: &str = Field::NextObs.name();
/// Most columns a deduplicating schema may have (writes assemble rows on the stack).
const MAX_COLUMNS: usize = 32;
/// Redraws allowed per sampled row before giving up (only hit when nearly no row is a
/// complete transition).
const MAX_REDRAWS: usize = 1000;

/// A replay buffer storing each observation once: the next observation of row `t` is the
/// observation of row `t + 1`.
///
/// Every step writes its observation once; when an episode ends (terminated *or*
/// truncated), one extra *final row* holds the final observation, so `next_obs` of the last
/// transition is the true final observation and bootstrapping at a time-limit cut stays
/// correct. Final rows, and the newest row (whose successor is not written yet), are never
/// sampled. One buffer holds one stream of consecutive steps: give each environment its
/// own buffer, or write whole trajectories one after another.
///
/// ```
/// use rl_core::{Column, DType, Field, Flag};
/// use rl_storage::{Batch, dedup::DedupReplay, ram::RamStorage, sampler::Uniform};
///
/// let schema = DedupReplay::<RamStorage>::schema([
///     Column::new(Field::Obs.name(), DType::F32, &[1]),
///     Column::scalar(Field::Reward.name(), DType::F32),
///     Column::scalar(Field::Terminated.name(), DType::Bool),
///     Column::scalar(Field::Truncated.name(), DType::Bool),
/// ])?;
/// let mut buffer = DedupReplay::new(RamStorage::new(schema, 16, None)?, Uniform::new(0))?;
/// let no = [Flag::new(false)];
/// buffer.push_step(&[(&[0.0f32]).into(), (&[1.0f32]).into(), (&no).into(), (&no).into()], None)?;
/// // The time limit cuts the episode after its second step: the final observation is kept.
/// let cut = [Flag::new(true)];
/// let final_obs = [2.0f32];
/// buffer.push_step(
///     &[(&[1.0f32]).into(), (&[1.0f32]).into(), (&no).into(), (&cut).into()],
///     Some((&final_obs).into()),
/// )?;
/// let mut batch = Batch::new(buffer.batch_schema(), 4)?;
/// buffer.sample(&mut batch)?;
/// for (obs, next) in batch.column::<f32>(Field::Obs.name())?.iter().zip(batch.column::<f32>(Field::NextObs.name())?) {
///     assert_eq!(*next, obs + 1.0);
/// }
/// # Ok::<(), rl_storage::Error>(())
/// ```
#[derive(Debug)]
pub struct DedupReplay<S = RamStorage, P = Uniform> {
    inner: ReplayBuffer<S, P>,
    obs: usize,
    final_flag: usize,
    /// Frames per stacked observation (1: no stacking).
    stack: usize,
    ends: [Option<usize>; 2],
    batch_schema: Schema,
    /// Zeroed bytes for the non-observation columns of final rows.
    zeros: Vec<u64>,
    non_finite: NonFinite,
}

impl<S: HostStorage, P: Sampler> DedupReplay<S, P> {
    /// The storage schema for transition `columns` (which must include `obs`; `terminated`
    /// and `truncated` Bool columns mark episode ends): `columns` plus the `final_obs` flag.
    ///
    /// # Errors
    /// Invalid schema (see [`Schema::new`]), or no `obs` column.
    pub fn schema(columns: impl IntoIterator<Item = Column>) -> Result<Schema> {
        let mut columns: Vec<Column> = columns.into_iter().collect();
        columns.push(Column::scalar(FINAL_OBS, DType::Bool));
        let schema = Schema::new(columns)?;
        column_index(&schema, Field::Obs.name())?;
        Ok(schema)
    }

    /// A deduplicating buffer over `storage`, whose schema comes from
    /// [`DedupReplay::schema`].
    ///
    /// # Errors
    /// A schema without `obs` or without `final_obs` as its last column, or with more
    /// than 32 columns.
    pub fn new(storage: S, sampler: P) -> Result<Self> {
        Self::from_buffer(ReplayBuffer::new(storage, sampler))
    }

    /// A deduplicating buffer over the rows `buffer` already holds (a reopened memmap
    /// file, a loaded checkpoint), its ring and sampler state kept. The schema must come
    /// from [`DedupReplay::schema`].
    ///
    /// # Errors
    /// As [`DedupReplay::new`].
    pub fn from_buffer(buffer: ReplayBuffer<S, P>) -> Result<Self> {
        let schema = buffer.schema().clone();
        let columns = schema.columns();
        let obs = column_index(&schema, Field::Obs.name())?;
        let final_flag = columns.len() - 1;
        if columns[final_flag].name() != FINAL_OBS || columns[final_flag].dtype() != DType::Bool {
            return Err(Error::config(
                "deduplicating schema",
                format!(
                    "must end with the Bool column `{FINAL_OBS}`: build it with DedupReplay::schema"
                ),
            ));
        }
        if columns.len() > MAX_COLUMNS {
            return Err(Error::config(
                "deduplicating schema",
                format!(
                    "has {} columns; at most {MAX_COLUMNS} are supported",
                    columns.len()
                ),
            ));
        }
        let flag = |field: Field| {
            schema
                .index_of(field.name())
                .filter(|&i| columns[i].dtype() == DType::Bool && columns[i].numel() == 1)
        };
        let ends = [flag(Field::Terminated), flag(Field::Truncated)];
        let mut batch_columns: Vec<Column> = columns[..final_flag].to_vec();
        batch_columns.push(Column::new(
            NEXT_OBS,
            columns[obs].dtype(),
            columns[obs].shape(),
        ));
        let widest = columns.iter().map(Column::row_bytes).max().unwrap_or(0);
        Ok(Self {
            inner: buffer,
            obs,
            final_flag,
            stack: 1,
            ends,
            batch_schema: Schema::new(batch_columns)?,
            zeros: vec![0u64; widest.div_ceil(8)],
            non_finite: NonFinite::default(),
        })
    }

    /// This buffer with another policy for non-finite values.
    pub fn with_non_finite(mut self, policy: NonFinite) -> Self {
        self.inner = self.inner.with_non_finite(policy);
        self.non_finite = policy;
        self
    }

    /// Samples stacks of the last `frames` observations instead of single ones: the
    /// batch's `obs` and `next_obs` columns get a leading dimension of `frames`, rebuilt
    /// from indices at sample time, so each frame is stored once. A stack never crosses
    /// the start of its episode: slots before the first frame repeat it (Gymnasium's
    /// `FrameStackObservation` "reset" padding). Rows whose stack would reach past the
    /// oldest stored row (at most `frames - 1` of them, whose earlier frames the ring
    /// overwrote) are not sampled, so every sampled stack is the one the environment
    /// showed.
    ///
    /// # Errors
    /// `frames` of zero, or a stacked shape that overflows.
    pub fn with_frame_stack(mut self, frames: usize) -> Result<Self> {
        if frames == 0 {
            return Err(Error::config(
                "frame stack",
                "is zero: stack at least one frame",
            ));
        }
        let schema = self.inner.schema();
        let obs = &schema.columns()[self.obs];
        let stacked: Vec<usize> = std::iter::once(frames)
            .chain(obs.shape().iter().copied())
            .collect();
        let stack_shape: &[usize] = if frames == 1 { obs.shape() } else { &stacked };
        let mut columns: Vec<Column> = schema.columns()[..self.final_flag].to_vec();
        columns[self.obs] = Column::new(obs.name(), obs.dtype(), stack_shape);
        columns.push(Column::new(NEXT_OBS, obs.dtype(), stack_shape));
        self.batch_schema = Schema::new(columns)?;
        self.stack = frames;
        Ok(self)
    }

    /// Frames per sampled observation (1: no stacking).
    pub fn frame_stack(&self) -> usize {
        self.stack
    }

    /// The schema of sampled batches: the transition columns plus `next_obs`.
    pub fn batch_schema(&self) -> &Schema {
        &self.batch_schema
    }

    /// The underlying ring buffer (rows include final rows).
    pub fn buffer(&self) -> &ReplayBuffer<S, P> {
        &self.inner
    }

    /// The underlying ring buffer, taken out (to save a RAM buffer, or to reopen it with
    /// [`DedupReplay::from_buffer`]).
    pub fn into_buffer(self) -> ReplayBuffer<S, P> {
        self.inner
    }

    /// Whether the newest stored row is a step whose episode the stream has not ended:
    /// the next row written continues its stack. False for an empty buffer or a final
    /// row newest.
    pub fn newest_is_open(&self) -> bool {
        let ring = self.inner.ring();
        if ring.len == 0 {
            return false;
        }
        let capacity = self.inner.capacity();
        let newest = (ring.cursor + capacity - 1) % capacity;
        let finals = bytemuck::cast_slice::<u8, Flag>(self.inner.storage().column(self.final_flag));
        !finals[newest].get()
    }

    /// Ends the stream of the newest row's episode without a step: a final row holding
    /// `next_frame`, the observation that followed the newest row (the newest row's
    /// next observation). For an episode cut without a last step, e.g. a run resumed
    /// with its environments restarted: the newest row becomes a complete transition
    /// (not terminated, not truncated, bootstrapped from `next_frame`) and the next step
    /// starts a new stack. Does nothing when the newest row is a final row already or
    /// the buffer is empty.
    ///
    /// # Errors
    /// A frame not shaped like `obs` or of another type; storage errors.
    pub fn close_stream(&mut self, next_frame: ColumnSlice<'_>) -> Result<()> {
        if !self.newest_is_open() {
            return Ok(());
        }
        self.check_final(next_frame)?;
        let transition_columns = self.final_flag;
        let mut full = [ColumnSlice::U8(&[]); MAX_COLUMNS];
        let schema = self.inner.schema();
        for (i, column) in schema.columns().iter().enumerate().take(transition_columns) {
            full[i] = zero_slice(column, &self.zeros);
        }
        full[self.obs] = next_frame;
        let is_final = [Flag::new(true)];
        full[transition_columns] = (&is_final).into();
        self.inner.push(&full[..=transition_columns])
    }

    /// Storage and sampler memory.
    pub fn memory_plan(&self) -> MemoryPlan {
        self.inner.memory_plan()
    }

    /// Appends one step: one single-row slice per transition column (every storage column
    /// but `final_obs`, in order). When the step ends the episode (`terminated` or
    /// `truncated` set), `final_obs` must hold the episode's final observation, which is
    /// stored in a final row; otherwise it must be `None`: the next step's observation is
    /// this step's next observation.
    ///
    /// Validated completely before anything is written.
    ///
    /// # Errors
    /// The errors of [`ReplayBuffer::extend`], or a final observation missing, unexpected,
    /// or not shaped like `obs`.
    pub fn push_step(
        &mut self,
        row: &[ColumnSlice<'_>],
        final_obs: Option<ColumnSlice<'_>>,
    ) -> Result<()> {
        let transition_columns = self.final_flag;
        if row.len() != transition_columns {
            return Err(Error::ColumnCount {
                expected: transition_columns,
                actual: row.len(),
            });
        }
        let ends = self.ends.iter().flatten().any(|&i| match row[i] {
            ColumnSlice::Bool(flags) => flags.first().is_some_and(|f| f.get()),
            _ => false,
        });
        match (ends, final_obs) {
            (true, None) => {
                return Err(Error::config(
                    "final observation",
                    "is missing: the step ends the episode, pass its final observation",
                ));
            }
            (false, Some(_)) => {
                return Err(Error::config(
                    "final observation",
                    "was given for a step that does not end the episode: pass None",
                ));
            }
            _ => {}
        }
        if let Some(observation) = final_obs {
            self.check_final(observation)?;
        }
        let not_final = [Flag::new(false)];
        let mut full = [ColumnSlice::U8(&[]); MAX_COLUMNS];
        full[..transition_columns].copy_from_slice(row);
        full[transition_columns] = (&not_final).into();
        self.inner.push(&full[..=transition_columns])?;
        if let Some(observation) = final_obs {
            let is_final = [Flag::new(true)];
            let schema = self.inner.schema();
            for (i, column) in schema.columns().iter().enumerate().take(transition_columns) {
                full[i] = zero_slice(column, &self.zeros);
            }
            full[self.obs] = observation;
            full[transition_columns] = (&is_final).into();
            self.inner.push(&full[..=transition_columns])?;
        }
        Ok(())
    }

    fn check_final(&self, observation: ColumnSlice<'_>) -> Result<()> {
        let column = &self.inner.schema().columns()[self.obs];
        if observation.dtype() != column.dtype() {
            return Err(Error::DTypeMismatch {
                column: "final observation".into(),
                expected: column.dtype(),
                actual: observation.dtype(),
            });
        }
        if observation.len() != column.numel() {
            return Err(Error::RowMismatch {
                column: "final observation".into(),
                elements: observation.len(),
                rows: 1,
                per_row: column.numel(),
                expected: column.numel(),
            });
        }
        if self.non_finite == NonFinite::Reject {
            reject_non_finite(observation, "final observation", column.numel())?;
        }
        Ok(())
    }

    /// Whether the row at `position` is a complete transition: not a final row, not
    /// the newest row (its next observation is not written yet), and with stacks, not a
    /// row whose stack reaches past the oldest stored row (its earlier frames are
    /// overwritten).
    fn is_transition(&self, position: usize) -> bool {
        let ring = self.inner.ring();
        let capacity = self.inner.capacity();
        let newest = (ring.cursor + capacity - 1) % capacity;
        let finals = bytemuck::cast_slice::<u8, Flag>(self.inner.storage().column(self.final_flag));
        if position == newest || finals[position].get() {
            return false;
        }
        // Rows since the oldest: the stack needs `stack - 1` rows before this one
        // unless its episode starts (the row before is final) on the way back.
        if ring.written == ring.len as u64 {
            // Nothing overwritten: the oldest row is the stream's first, a start.
            return true;
        }
        let oldest = ring.oldest(capacity);
        let back = (position + capacity - oldest) % capacity;
        if back >= self.stack - 1 {
            return true;
        }
        (1..=back).any(|age| finals[(position + capacity - age) % capacity].get())
    }

    /// Samples `batch.room()` transitions; `next_obs` is read from the following row.
    /// Allocates nothing.
    ///
    /// # Errors
    /// [`Error::BatchSchema`] unless the batch was made for
    /// [`DedupReplay::batch_schema`], [`Error::Empty`], [`Error::NotEnoughRows`] when
    /// (almost) no stored row is a complete transition, or the sampler's errors.
    pub fn sample(&mut self, batch: &mut Batch) -> Result<()> {
        if batch.schema() != &self.batch_schema {
            return Err(Error::BatchSchema);
        }
        let rows = batch.room();
        let (positions, weights) = batch.draw_space();
        let drawn = self.inner.draw(rows, positions, weights)?;
        for j in 0..drawn {
            let mut redraws = 0;
            while !self.is_transition(positions[j]) {
                redraws += 1;
                if redraws > MAX_REDRAWS {
                    return Err(Error::NotEnoughRows {
                        requested: rows,
                        available: 0,
                    });
                }
                let (mut position, mut weight) = ([0usize], [0.0f32]);
                self.inner.draw(1, &mut position, &mut weight)?;
                positions[j] = position[0];
                weights[j] = weight[0];
            }
        }
        let storage = self.inner.storage();
        for index in (0..self.final_flag).filter(|&i| self.stack == 1 || i != self.obs) {
            batch.gather_from(storage, (index, index), 0, drawn);
        }
        batch.set_len(drawn);
        if self.stack == 1 {
            batch.gather_from(storage, (self.final_flag, self.obs), 1, drawn);
        } else {
            self.gather_stacks(batch, drawn);
        }
        Ok(())
    }

    /// Whether the row at `position` starts an episode: it follows a final row, or it is
    /// the oldest row stored (earlier frames are gone).
    fn starts_episode(&self, position: usize, finals: &[Flag]) -> bool {
        let capacity = self.inner.capacity();
        position == self.inner.ring().oldest(capacity)
            || finals[(position + capacity - 1) % capacity].get()
    }

    /// Fills the stacked `obs` and `next_obs` columns of the first `rows` drawn rows.
    fn gather_stacks(&self, batch: &mut Batch, rows: usize) {
        let storage = self.inner.storage();
        let capacity = storage.capacity();
        let frame_bytes = storage.schema().columns()[self.obs].row_bytes();
        // A file's frames are read (`pread`), never mapped ([`HostStorage::reads_by_copy`]).
        let by_copy = storage.reads_by_copy() && frame_bytes >= READ_MIN_ROW_BYTES;
        let frames = storage.column(self.obs);
        let finals = bytemuck::cast_slice::<u8, Flag>(storage.column(self.final_flag));
        let stack_bytes = frame_bytes * self.stack;
        for j in 0..rows {
            let position = batch.positions()[j];
            // next_obs's newest frame is the following row; obs's is the row itself.
            for (column, newest) in [
                (self.obs, position),
                (self.final_flag, (position + 1) % capacity),
            ] {
                let target =
                    &mut batch.column_bytes_mut(column)[j * stack_bytes..(j + 1) * stack_bytes];
                let mut source = newest;
                for slot in (0..self.stack).rev() {
                    let into = &mut target[slot * frame_bytes..(slot + 1) * frame_bytes];
                    if by_copy {
                        storage.read_column(self.obs, source * frame_bytes, into);
                    } else {
                        into.copy_from_slice(
                            &frames[source * frame_bytes..(source + 1) * frame_bytes],
                        );
                    }
                    if !self.starts_episode(source, finals) {
                        source = (source + capacity - 1) % capacity;
                    }
                }
            }
        }
    }

    /// Makes every row written so far durable (memmap storage).
    ///
    /// # Errors
    /// Storage I/O errors.
    pub fn commit(&mut self) -> Result<()> {
        self.inner.commit()
    }
}

/// A zero-valued single row for `column`, viewed from a zeroed buffer.
fn zero_slice<'a>(column: &Column, zeros: &'a [u64]) -> ColumnSlice<'a> {
    let bytes = &bytemuck::cast_slice::<u64, u8>(zeros)[..column.row_bytes()];
    match column.dtype() {
        DType::F32 => ColumnSlice::F32(bytemuck::cast_slice(bytes)),
        DType::U32 => ColumnSlice::U32(bytemuck::cast_slice(bytes)),
        DType::I64 => ColumnSlice::I64(bytemuck::cast_slice(bytes)),
        DType::U8 => ColumnSlice::U8(bytes),
        DType::Bool => ColumnSlice::Bool(bytemuck::cast_slice(bytes)),
    }
}

#[cfg(test)]
mod tests;
