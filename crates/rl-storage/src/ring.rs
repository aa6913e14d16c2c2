//! The ring writer shared by every buffer that writes rows around a ring, wherever the
//! rows live (host storages, device storages, tiers).
//!
//! [`RingWriter`] owns a buffer's [`RingState`] and carries out the write protocol:
//! validate the column slices against the schema, plan where the rows go (wrapping at the
//! capacity, skipping what a write longer than the ring would overwrite itself), let the
//! backend copy them, count the episode ends, advance the ring and tell the sampler. The
//! backend's copy (host memory, device uploads, both tiers) is the only part that varies.

use rl_core::{Column, DType, Field, Flag, Schema};

use crate::column::{ColumnSlice, reject_non_finite};
use crate::copy::{self, Stores};
use crate::error::{Error, Result};
use crate::sampler::{SampleContext, Sampler};
use crate::storage::{HostStorage, RingState};
use rl_core::NonFinite;

/// How a failed copy left the positions a write covers.
#[derive(Debug)]
pub(crate) enum CopyError {
    /// No stored row was touched: the ring stays as it was.
    Untouched(Error),
    /// Positions the write covers may hold parts of new rows: the rows stored there are
    /// dropped from the ring, so that no half-written row is ever sampled.
    Partial(Error),
}

/// Where a [`RingWriter`] puts the rows of a write: the one part of the write protocol
/// that differs between buffers (host memory, device uploads, both tiers).
pub(crate) trait RowSink {
    /// The row layout writes are validated against.
    fn schema(&self) -> &Schema;

    /// Puts the rows of a validated write (`columns`) at the positions `plan` covers: row
    /// `segment.source_row + k` of every column at position `segment.position + k`, for
    /// both [`WritePlan::segments`].
    ///
    /// # Errors
    /// A storage or device error, saying how it left the positions the write covers.
    fn copy_rows(&mut self, plan: &WritePlan, columns: &[ColumnSlice<'_>])
    -> Result<(), CopyError>;
}

/// A host storage as a [`RowSink`]: the storage prepares the write (persistent storages
/// reserve the positions first), then the rows are copied.
pub(crate) struct HostSink<'a, S: ?Sized> {
    pub(crate) storage: &'a mut S,
    pub(crate) stores: Stores,
}

impl<S: HostStorage + ?Sized> HostSink<'_, S> {
    /// Lets the storage prepare the positions of `plan` (a persistent storage makes sure
    /// no committed row is overwritten before a new commit). Nothing is written yet.
    pub(crate) fn prepare(&mut self, plan: &WritePlan) -> Result<(), CopyError> {
        self.storage
            .prepare_write(&plan.start, plan.written)
            .map_err(CopyError::Untouched)
    }

    /// Copies the rows of a prepared write, column by column, at most two runs each (up
    /// to the end of the ring, then from position 0), then orders the streaming stores.
    pub(crate) fn copy(&mut self, plan: &WritePlan, columns: &[ColumnSlice<'_>]) {
        let capacity = self.storage.capacity();
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
    }
}

impl<S: HostStorage + ?Sized> RowSink for HostSink<'_, S> {
    fn schema(&self) -> &Schema {
        self.storage.schema()
    }

    fn copy_rows(
        &mut self,
        plan: &WritePlan,
        columns: &[ColumnSlice<'_>],
    ) -> Result<(), CopyError> {
        self.prepare(plan)?;
        self.copy(plan, columns);
        Ok(())
    }
}

/// The ring of one buffer and the write protocol around it.
///
/// Every buffer that writes rows around a ring (host, device, tiered) holds one, so that
/// all of them store the same rows at the same positions for the same writes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RingWriter {
    state: RingState,
    capacity: usize,
    non_finite: NonFinite,
    /// Indices of the one-element `Bool` columns `terminated` and `truncated`.
    terminated: Option<usize>,
    truncated: Option<usize>,
}

impl RingWriter {
    /// The writer of a ring of `capacity` rows of `schema`, resuming from `state`.
    pub(crate) fn new(schema: &Schema, capacity: usize, state: RingState) -> Self {
        let (terminated, truncated) = flag_columns(schema);
        Self {
            state,
            capacity,
            non_finite: NonFinite::default(),
            terminated,
            truncated,
        }
    }

    /// The ring as it is now.
    #[inline]
    pub(crate) fn state(&self) -> RingState {
        self.state
    }

    /// What writes do with NaN or infinite values from now on.
    pub(crate) fn set_non_finite(&mut self, policy: NonFinite) {
        self.non_finite = policy;
    }

    /// Tells a new sampler about the rows the ring already holds (a reopened file, a
    /// loaded checkpoint), as if they had just been written, oldest first.
    pub(crate) fn announce_stored<P: Sampler + ?Sized>(&self, sampler: &mut P) {
        if self.state.len > 0 {
            let empty_before = RingState {
                cursor: self.state.oldest(self.capacity),
                len: 0,
                ..self.state
            };
            sampler.rows_written(&empty_before, self.state.len, self.capacity);
        }
    }

    /// Writes `columns` (one slice per column of the sink's schema, in schema order):
    /// validates the whole write, plans it, lets `sink` put the rows at the positions of
    /// the plan, then counts episode ends, advances the ring and tells `sampler`. Returns
    /// the rows of the write (0 for an empty write, which the sink never sees).
    ///
    /// A refused write changes nothing; a failed copy changes the ring as its
    /// [`CopyError`] says, and the sampler is not told.
    pub(crate) fn write<P: Sampler + ?Sized>(
        &mut self,
        sink: &mut impl RowSink,
        sampler: &mut P,
        columns: &[ColumnSlice<'_>],
    ) -> Result<usize> {
        let rows = validate_write(sink.schema(), columns, self.non_finite)?;
        if rows == 0 {
            return Ok(0);
        }
        let capacity = self.capacity;
        let plan = plan_write(&self.state, rows, capacity);
        match sink.copy_rows(&plan, columns) {
            Ok(()) => {}
            Err(CopyError::Untouched(error)) => return Err(error),
            Err(CopyError::Partial(error)) => {
                // Positions `plan.start.cursor ..` (wrapping) may now hold parts of new
                // rows: keep only the stored rows the write did not reach.
                self.state = RingState {
                    len: plan.start.len.min(capacity - plan.written),
                    ..plan.start
                };
                return Err(error);
            }
        }
        let ends = episode_ends(self.terminated, self.truncated, columns, rows);
        self.state = ring_after(&self.state, &plan, capacity, ends);
        sampler.rows_written(&plan.start, plan.written, capacity);
        Ok(rows)
    }

    /// What a sampler sees of the ring, with the episode flag columns by position.
    pub(crate) fn context<'a>(
        &self,
        terminated: Option<&'a [Flag]>,
        truncated: Option<&'a [Flag]>,
    ) -> SampleContext<'a> {
        SampleContext {
            ring: self.state,
            capacity: self.capacity,
            terminated,
            truncated,
        }
    }

    /// What a sampler sees of the ring, with the episode flag columns of a host storage.
    pub(crate) fn host_context<'a, S: HostStorage + ?Sized>(
        &self,
        storage: &'a S,
    ) -> SampleContext<'a> {
        let flags = |index: Option<usize>| {
            index.map(|i| bytemuck::cast_slice::<u8, Flag>(storage.column(i)))
        };
        self.context(flags(self.terminated), flags(self.truncated))
    }

    /// The logical index (0 = oldest) of the row stored at `position`, or an error naming
    /// a position that holds no row (a sampler's bug must never become an out-of-bounds
    /// read).
    #[inline]
    pub(crate) fn stored_index(&self, position: usize) -> Result<usize> {
        let (ring, capacity) = (self.state, self.capacity);
        let oldest = ring.oldest(capacity);
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
        Ok(index)
    }

    /// Refuses positions that hold no stored row (see [`RingWriter::stored_index`]).
    pub(crate) fn check_stored(&self, positions: &[usize]) -> Result<()> {
        positions
            .iter()
            .try_for_each(|&position| self.stored_index(position).map(|_| ()))
    }
}

/// Where the rows of one write go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WritePlan {
    /// Rows the write holds.
    pub(crate) rows: usize,
    /// Leading rows skipped: a write longer than the ring would overwrite them itself.
    pub(crate) skipped: usize,
    /// Rows actually written (`rows - skipped`, at most the capacity).
    pub(crate) written: usize,
    /// The ring as the storage should see it just before the rows are written.
    pub(crate) start: RingState,
}

/// One contiguous run of written rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    /// First ring position written.
    pub(crate) position: usize,
    /// Row of the write it starts from.
    pub(crate) source_row: usize,
    /// Rows in the run.
    pub(crate) rows: usize,
}

impl WritePlan {
    /// The (at most two) contiguous runs of positions the write covers: up to the end of
    /// the ring, then from position 0. The second may be empty.
    pub(crate) fn segments(&self, capacity: usize) -> [Segment; 2] {
        let first = (capacity - self.start.cursor).min(self.written);
        [
            Segment {
                position: self.start.cursor,
                source_row: self.skipped,
                rows: first,
            },
            Segment {
                position: 0,
                source_row: self.skipped + first,
                rows: self.written - first,
            },
        ]
    }
}

/// Plans a write of `rows` rows into a ring of `capacity` positions.
pub(crate) fn plan_write(ring: &RingState, rows: usize, capacity: usize) -> WritePlan {
    let skipped = rows.saturating_sub(capacity);
    WritePlan {
        rows,
        skipped,
        written: rows - skipped,
        start: RingState {
            cursor: (ring.cursor + skipped) % capacity,
            len: if skipped > 0 { 0 } else { ring.len },
            written: ring.written + skipped as u64,
            ..*ring
        },
    }
}

/// Episode ends in a write: how many rows end an episode, and the last one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EpisodeEnds {
    pub(crate) count: u64,
    pub(crate) last: Option<usize>,
}

/// The ring after `plan` was carried out.
pub(crate) fn ring_after(
    before: &RingState,
    plan: &WritePlan,
    capacity: usize,
    ends: EpisodeEnds,
) -> RingState {
    RingState {
        cursor: (plan.start.cursor + plan.written) % capacity,
        len: (plan.start.len + plan.written).min(capacity),
        written: plan.start.written + plan.written as u64,
        episodes: before.episodes + ends.count,
        episode_start: ends
            .last
            .map_or(before.episode_start, |end| before.written + end as u64 + 1),
    }
}

/// Indices of the one-element Bool columns `terminated` and `truncated`, if present.
pub(crate) fn flag_columns(schema: &Schema) -> (Option<usize>, Option<usize>) {
    let flag = |field: Field| {
        schema.index_of(field.name()).filter(|&i| {
            let column: &Column = &schema.columns()[i];
            column.dtype() == DType::Bool && column.numel() == 1
        })
    };
    (flag(Field::Terminated), flag(Field::Truncated))
}

/// Counts the rows of a write that end an episode. Branch-free passes over the flag
/// bytes: this runs on every write.
pub(crate) fn episode_ends(
    terminated: Option<usize>,
    truncated: Option<usize>,
    columns: &[ColumnSlice<'_>],
    rows: usize,
) -> EpisodeEnds {
    let flags = |index: Option<usize>| match index.map(|i| columns[i]) {
        Some(ColumnSlice::Bool(flags)) => Some(flags),
        _ => None,
    };
    let (terminated, truncated) = (flags(terminated), flags(truncated));
    let ended = |i: usize| {
        let flag = |f: Option<&[Flag]>| f.map_or(0, |f| f[i].0);
        flag(terminated) | flag(truncated) != 0
    };
    let count = match (terminated, truncated) {
        (Some(a), Some(b)) => a.iter().zip(b).filter(|(a, b)| a.0 | b.0 != 0).count(),
        (Some(f), None) | (None, Some(f)) => f.iter().filter(|f| f.0 != 0).count(),
        (None, None) => 0,
    };
    let last = if count == 0 {
        None
    } else {
        (0..rows).rev().find(|&i| ended(i))
    };
    EpisodeEnds {
        count: count as u64,
        last,
    }
}

/// Checks a write against the schema (column count, dtypes, rows, finiteness); returns
/// its number of rows. Nothing is written when this fails.
pub(crate) fn validate_write(
    schema: &Schema,
    columns: &[ColumnSlice<'_>],
    non_finite: NonFinite,
) -> Result<usize> {
    if columns.len() != schema.columns().len() {
        return Err(Error::ColumnCount {
            expected: schema.columns().len(),
            actual: columns.len(),
        });
    }
    let rows = columns[0].len() / schema.columns()[0].numel();
    for (column, slice) in schema.columns().iter().zip(columns) {
        if slice.dtype() != column.dtype() {
            return Err(Error::DTypeMismatch {
                column: column.name().to_owned(),
                expected: column.dtype(),
                actual: slice.dtype(),
            });
        }
        let expected = rows * column.numel();
        if slice.len() != expected {
            return Err(row_mismatch(schema, columns));
        }
        if non_finite == NonFinite::Reject {
            reject_non_finite(*slice, column.name(), column.numel())?;
        }
    }
    Ok(rows)
}

/// The error of a write whose columns disagree on their number of rows (cold path). The
/// write's rows are the count most columns agree on (the first column's on a tie), so
/// that the column named is the odd one out, with the right numbers: one column of the
/// wrong width does not make every other column look wrong.
#[cold]
fn row_mismatch(schema: &Schema, columns: &[ColumnSlice<'_>]) -> Error {
    let implied: Vec<Option<usize>> = schema
        .columns()
        .iter()
        .zip(columns)
        .map(|(column, slice)| {
            let per_row = column.numel();
            (per_row > 0 && slice.len().is_multiple_of(per_row)).then(|| slice.len() / per_row)
        })
        .collect();
    let votes = |rows: usize| implied.iter().filter(|&&r| r == Some(rows)).count();
    let rows = implied
        .iter()
        .flatten()
        .copied()
        .fold(None, |best: Option<usize>, rows| match best {
            Some(best) if votes(best) >= votes(rows) => Some(best),
            _ => Some(rows),
        })
        .unwrap_or(0);
    let (column, slice) = schema
        .columns()
        .iter()
        .zip(columns)
        .find(|(column, slice)| slice.len() != rows * column.numel())
        .unwrap_or((&schema.columns()[0], &columns[0]));
    Error::RowMismatch {
        column: column.name().to_owned(),
        elements: slice.len(),
        rows,
        per_row: column.numel(),
        expected: rows * column.numel(),
    }
}

/// Checks that a `push` holds exactly one row (its first column has one row's elements);
/// the rest is checked by [`validate_write`].
pub(crate) fn check_single_row(schema: &Schema, row: &[ColumnSlice<'_>]) -> Result<()> {
    if let Some(first) = row.first() {
        let column = &schema.columns()[0];
        if first.len() != column.numel() {
            return Err(Error::RowMismatch {
                column: column.name().to_owned(),
                elements: first.len(),
                rows: 1,
                per_row: column.numel(),
                expected: column.numel(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
