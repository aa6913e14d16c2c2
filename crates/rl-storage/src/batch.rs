//! Caller-owned, reused batches that sampling gathers rows into.

use rl_core::{Element, Field, Flag, Location, MemoryPlan, Schema};

use crate::column::{column_index, typed};
use crate::copy;
use crate::error::{Error, Result};
use crate::storage::{HostStorage, READ_MIN_ROW_BYTES};

/// Rows gathered from a buffer: one contiguous block per column, each starting on a
/// cache line (64 bytes), plus the positions the rows came from and their importance
/// weights.
///
/// Allocated once with room for a maximum number of rows and reused for every sample, so
/// sampling allocates nothing.
#[derive(Clone, Debug)]
pub struct Batch {
    schema: Schema,
    room: usize,
    /// Cache-line backing keeps every column aligned for any element type, and rows of
    /// whole lines land on whole lines. With `Vec<u64>` blocks (16 bytes past a line:
    /// `malloc`'s large blocks) the storage bench's sample at D = 1024 ran at 1.14 M
    /// rows/s; line-aligned, 1.62-1.66 M rows/s (memcpy's stores straddled two lines).
    columns: Vec<Vec<Line>>,
    positions: Vec<usize>,
    /// Scratch positions for gathers that read shifted rows (next observations).
    shifted: Vec<usize>,
    weights: Vec<f32>,
    len: usize,
}

impl Batch {
    /// A batch for `schema` with room for `rows` rows.
    ///
    /// # Errors
    /// Invalid configuration if `rows` is zero or the bytes overflow.
    pub fn new(schema: &Schema, rows: usize) -> Result<Self> {
        let plan = Self::plan(schema, rows)?;
        let columns = schema
            .columns()
            .iter()
            .zip(plan.lines())
            .map(|(_, line)| vec![Line::ZERO; line.bytes as usize / LINE_BYTES])
            .collect();
        Ok(Self {
            schema: schema.clone(),
            room: rows,
            columns,
            positions: vec![0; rows],
            shifted: vec![0; rows],
            weights: vec![1.0; rows],
            len: 0,
        })
    }

    /// What a batch of `rows` rows of `schema` allocates: one line per column (rounded up
    /// to 64 bytes, a cache line), plus positions and weights.
    ///
    /// # Errors
    /// Invalid configuration if `rows` is zero or the bytes overflow.
    pub fn plan(schema: &Schema, rows: usize) -> Result<MemoryPlan> {
        if rows == 0 {
            return Err(Error::config(
                "batch rows",
                "is zero: a batch needs room for at least one row",
            ));
        }
        let overflow = || {
            Error::config(
                "batch rows",
                format!("{rows} rows overflow the address space"),
            )
        };
        let mut plan = MemoryPlan::new();
        for column in schema.columns() {
            let bytes = column
                .row_bytes()
                .checked_mul(rows)
                .and_then(|b| b.checked_next_multiple_of(LINE_BYTES))
                .ok_or_else(overflow)?;
            plan.add(
                format!("batch/{}", column.name()),
                Location::Ram,
                bytes as u64,
            );
        }
        let index_bytes = rows
            .checked_mul(2 * size_of::<usize>() + size_of::<f32>())
            .ok_or_else(overflow)?;
        plan.add(
            "batch/positions+weights+scratch",
            Location::Ram,
            index_bytes as u64,
        );
        Ok(plan)
    }

    /// What this batch holds, as [`Batch::plan`].
    pub fn memory_plan(&self) -> MemoryPlan {
        // A built batch has a valid plan.
        Self::plan(&self.schema, self.room).unwrap_or_default()
    }

    /// The schema the batch was made for.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Rows gathered by the last sample.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch holds no rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Maximum rows the batch can hold.
    pub fn room(&self) -> usize {
        self.room
    }

    /// Storage positions of the gathered rows (to update priorities, for instance).
    pub fn positions(&self) -> &[usize] {
        &self.positions[..self.len]
    }

    /// Importance weights of the gathered rows (1.0 unless the sampler weights rows).
    pub fn weights(&self) -> &[f32] {
        &self.weights[..self.len]
    }

    /// The gathered rows of column `name`, `len x per-row shape` elements.
    ///
    /// # Errors
    /// Unknown column or a dtype other than the column's.
    pub fn column<T: Element>(&self, name: &str) -> Result<&[T]> {
        self.column_at(column_index(&self.schema, name)?)
    }

    /// The gathered rows of a transition field's column ([`Field`]).
    ///
    /// # Errors
    /// As [`Batch::column`]: no such column, or another dtype.
    pub fn field<T: Element>(&self, field: Field) -> Result<&[T]> {
        self.column(field.name())
    }

    /// The observations (`f32` rows).
    ///
    /// # Errors
    /// No `obs` column, or observations of another dtype (read them with
    /// [`Batch::field`]).
    pub fn obs(&self) -> Result<&[f32]> {
        self.field(Field::Obs)
    }

    /// The next observations (`f32` rows).
    ///
    /// # Errors
    /// As [`Batch::obs`], for `next_obs`.
    pub fn next_obs(&self) -> Result<&[f32]> {
        self.field(Field::NextObs)
    }

    /// The rewards.
    ///
    /// # Errors
    /// No `reward` column of `f32`.
    pub fn rewards(&self) -> Result<&[f32]> {
        self.field(Field::Reward)
    }

    /// The `terminated` flags.
    ///
    /// # Errors
    /// No `terminated` flag column.
    pub fn terminated(&self) -> Result<&[Flag]> {
        self.field(Field::Terminated)
    }

    /// The `truncated` flags.
    ///
    /// # Errors
    /// No `truncated` flag column.
    pub fn truncated(&self) -> Result<&[Flag]> {
        self.field(Field::Truncated)
    }

    /// The gathered rows of the column at `index` in schema order.
    ///
    /// # Errors
    /// A dtype other than the column's, or an index past the schema.
    pub fn column_at<T: Element>(&self, index: usize) -> Result<&[T]> {
        let column = self.schema.columns().get(index).ok_or_else(|| {
            Error::config(
                format!("column index {index}"),
                "is past the schema's columns",
            )
        })?;
        let bytes = bytemuck::cast_slice::<Line, u8>(&self.columns[index]);
        typed(column, &bytes[..self.len * column.row_bytes()])
    }

    /// Gathers the rows at `positions` (already checked to be below the capacity) of
    /// `storage` into this batch, with weights 1. Allocates nothing.
    pub(crate) fn gather_positions<S: HostStorage + ?Sized>(
        &mut self,
        storage: &S,
        positions: &[usize],
    ) -> Result<()> {
        let rows = positions.len();
        if rows > self.room {
            return Err(Error::NotEnoughRows {
                requested: rows,
                available: self.room,
            });
        }
        self.positions[..rows].copy_from_slice(positions);
        self.weights[..rows].fill(1.0);
        self.gather_drawn(storage, rows);
        Ok(())
    }

    /// Gathers the rows at `indices` (already checked to be below the storage's rows) of
    /// `storage` into this batch, with weights 1. Allocates nothing.
    pub(crate) fn gather_indices<S: HostStorage + ?Sized>(
        &mut self,
        storage: &S,
        indices: &[u32],
    ) -> Result<()> {
        let rows = indices.len();
        if rows > self.room {
            return Err(Error::NotEnoughRows {
                requested: rows,
                available: self.room,
            });
        }
        for (position, &index) in self.positions.iter_mut().zip(indices) {
            *position = index as usize;
        }
        self.weights[..rows].fill(1.0);
        self.gather_drawn(storage, rows);
        Ok(())
    }

    /// Room for positions and weights, for samplers to draw into.
    pub(crate) fn draw_space(&mut self) -> (&mut [usize], &mut [f32]) {
        (&mut self.positions, &mut self.weights)
    }

    /// Gathers the rows whose positions a sampler just drew into `draw_space`.
    pub(crate) fn gather_drawn<S: HostStorage + ?Sized>(&mut self, storage: &S, rows: usize) {
        for index in 0..self.columns.len() {
            self.gather_from(storage, (index, index), 0, rows);
        }
        self.len = rows;
    }

    /// [`Batch::gather_drawn`] split by rows over the tasks of `parallel` (each task
    /// gathers every column of its rows; nothing allocated).
    pub(crate) fn gather_drawn_on<S: HostStorage + Sync + ?Sized>(
        &mut self,
        storage: &S,
        rows: usize,
        parallel: &dyn Parallel,
    ) {
        let tasks = parallel.threads().clamp(1, rows.max(1));
        if tasks == 1 {
            self.gather_drawn(storage, rows);
            return;
        }
        let per_task = rows.div_ceil(tasks);
        let columns = Columns {
            schema: &self.schema,
            lines: self.columns.as_mut_ptr(),
            count: self.columns.len(),
        };
        let positions = &self.positions[..rows];
        parallel.run(rows.div_ceil(per_task), &|task| {
            let range = task * per_task..((task + 1) * per_task).min(rows);
            for index in 0..columns.count {
                let row_bytes = columns.schema.columns()[index].row_bytes();
                // SAFETY:
                // - `self.columns` is borrowed mutably for this whole call, which returns
                //   only after every task has finished, and no `&mut` to a column exists
                //   meanwhile (only the buffers' raw pointers are used);
                // - task `task` writes rows `range` of each column only: disjoint between
                //   tasks, inside the column (`range.end <= rows <= room`, and a column
                //   holds at least `room * row_bytes` bytes).
                let target = unsafe {
                    column_rows(
                        columns.column(index),
                        range.start * row_bytes,
                        range.len() * row_bytes,
                    )
                };
                gather_rows_from(storage, index, target, row_bytes, &positions[range.clone()]);
            }
        });
        self.len = rows;
    }

    /// Gathers batch column `into` from storage column `from`, reading row
    /// `positions[j] + shift` (wrapping at the capacity) for each of the first `rows`
    /// drawn positions (see [`gather_rows_from`]). Allocates nothing.
    pub(crate) fn gather_from<S: HostStorage + ?Sized>(
        &mut self,
        storage: &S,
        (into, from): (usize, usize),
        shift: usize,
        rows: usize,
    ) {
        let row_bytes = self.schema.columns()[into].row_bytes();
        let positions = shifted_positions(
            &self.positions[..rows],
            &mut self.shifted[..rows],
            shift,
            storage.capacity(),
        );
        let target =
            &mut bytemuck::cast_slice_mut::<Line, u8>(&mut self.columns[into])[..rows * row_bytes];
        gather_rows_from(storage, from, target, row_bytes, positions);
    }

    /// All the bytes of column `index`: room for [`Batch::room`] rows (rounded up to 64
    /// bytes), 64-byte aligned, at an address that stays put for the batch's life (the
    /// batch never reallocates). Bindings expose a batch's columns as arrays over these
    /// bytes (no copy after each sample); gathers fill them by hand.
    ///
    /// # Panics
    /// If `index` is not below the schema's number of columns.
    pub fn column_bytes_mut(&mut self, index: usize) -> &mut [u8] {
        bytemuck::cast_slice_mut::<Line, u8>(&mut self.columns[index])
    }

    /// Sets the number of gathered rows (after a caller gathered every column).
    pub(crate) fn set_len(&mut self, rows: usize) {
        self.len = rows;
    }
}

/// Runs tasks on several threads: a thread pool the caller owns (`rl_nn::Pool` through a
/// newtype, a Rayon pool ...), which [`crate::replay::ReplayBuffer::sample_on`] splits a
/// batch's gather over. `run` returns once every task has run.
pub trait Parallel: Sync {
    /// How many tasks run at once (1: the calling thread alone).
    fn threads(&self) -> usize;

    /// Runs `task(0)` ... `task(tasks - 1)`, each once, and returns when all have.
    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync));
}

/// A batch's column buffers, written by several tasks at disjoint rows.
struct Columns<'a> {
    schema: &'a Schema,
    lines: *mut Vec<Line>,
    count: usize,
}

// SAFETY:
// - `Batch::gather_drawn_on` gives each task disjoint rows of every column and waits for
//   all of them before the borrow the pointer came from ends.
unsafe impl Sync for Columns<'_> {}

impl Columns<'_> {
    /// Column `index`'s pointer (a method, so closures capture the whole struct).
    fn column(&self, index: usize) -> *mut Vec<Line> {
        assert!(index < self.count);
        self.lines.wrapping_add(index)
    }
}

/// `len` bytes from byte `start` of the column `lines` points at.
///
/// # Safety
/// `lines` points at a live column, the bytes lie inside it, and nothing else reads or
/// writes them while the slice lives.
unsafe fn column_rows<'a>(lines: *mut Vec<Line>, start: usize, len: usize) -> &'a mut [u8] {
    // SAFETY:
    // - the caller's contract: the column is live and the range is inside it and
    //   written through this slice alone; `Vec<Line>`'s buffer is reached through raw
    //   pointers without making a reference to the `Vec` itself.
    unsafe {
        let column = &*lines;
        let bytes = column.as_ptr().cast::<u8>().cast_mut();
        assert!(start + len <= column.len() * LINE_BYTES);
        std::slice::from_raw_parts_mut(bytes.add(start), len)
    }
}

/// `positions` itself when `shift` is 0, else `(p + shift) % capacity` of each written
/// into `shifted` (as long as `positions`).
fn shifted_positions<'a>(
    positions: &'a [usize],
    shifted: &'a mut [usize],
    shift: usize,
    capacity: usize,
) -> &'a [usize] {
    if shift == 0 {
        return positions;
    }
    for (s, &p) in shifted.iter_mut().zip(positions) {
        *s = (p + shift) % capacity;
    }
    shifted
}

/// Copies row `positions[j]` of storage column `index` to row `j` of `target`: by copy
/// from a file (one [`HostStorage::read_column`] per row, so sampling maps none of the
/// file's pages) for rows of at least [`READ_MIN_ROW_BYTES`], else from the column's
/// bytes.
fn gather_rows_from<S: HostStorage + ?Sized>(
    storage: &S,
    index: usize,
    target: &mut [u8],
    row_bytes: usize,
    positions: &[usize],
) {
    if storage.reads_by_copy() && row_bytes >= READ_MIN_ROW_BYTES {
        for (row, &position) in target.chunks_exact_mut(row_bytes).zip(positions) {
            storage.read_column(index, position * row_bytes, row);
        }
        return;
    }
    let source = storage.column(index);
    copy::prefetch_rows(source, row_bytes, positions);
    gather_rows(source, target, row_bytes, positions);
}

/// Bytes of a cache line: the alignment and granularity of a batch's column blocks.
const LINE_BYTES: usize = 64;

/// One cache line of a batch column.
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([u8; LINE_BYTES]);

impl Line {
    const ZERO: Self = Self([0; LINE_BYTES]);
}

/// Copies row `positions[j]` of `source` to row `j` of `target`. Common row sizes get a
/// fixed-size copy the compiler turns into a few moves; rows past the prefetch limit are
/// copied two at a time ([`copy::gather_large_rows`]); others call `memcpy`.
#[inline]
fn gather_rows(source: &[u8], target: &mut [u8], row_bytes: usize, positions: &[usize]) {
    match row_bytes {
        1 => gather_fixed::<1>(source, target, positions),
        2 => gather_fixed::<2>(source, target, positions),
        4 => gather_fixed::<4>(source, target, positions),
        8 => gather_fixed::<8>(source, target, positions),
        12 => gather_fixed::<12>(source, target, positions),
        16 => gather_fixed::<16>(source, target, positions),
        32 => gather_fixed::<32>(source, target, positions),
        64 => gather_fixed::<64>(source, target, positions),
        _ if row_bytes > copy::PREFETCH_MAX_ROW => {
            copy::gather_large_rows(source, target, row_bytes, positions);
        }
        _ => {
            for (row, &p) in target.chunks_exact_mut(row_bytes).zip(positions) {
                row.copy_from_slice(&source[p * row_bytes..(p + 1) * row_bytes]);
            }
        }
    }
}

#[inline]
fn gather_fixed<const N: usize>(source: &[u8], target: &mut [u8], positions: &[usize]) {
    let (rows, _) = target.as_chunks_mut::<N>();
    let (source, _) = source.as_chunks::<N>();
    for (row, &p) in rows.iter_mut().zip(positions) {
        *row = source[p];
    }
}

#[cfg(test)]
mod tests;
