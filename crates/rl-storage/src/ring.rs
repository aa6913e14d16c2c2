//! Ring-writer bookkeeping shared by every buffer that writes rows around a ring,
//! wherever the rows live (host storages, device storages, tiers).

use rl_core::{Column, DType, Flag, Schema};

use crate::column::{ColumnSlice, reject_non_finite};
use crate::error::{Error, Result};
use crate::replay::NonFinite;
use crate::storage::RingState;

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
    let flag = |name: &str| {
        schema.index_of(name).filter(|&i| {
            let column: &Column = &schema.columns()[i];
            column.dtype() == DType::Bool && column.numel() == 1
        })
    };
    (flag("terminated"), flag("truncated"))
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
            return Err(Error::RowMismatch {
                column: column.name().to_owned(),
                elements: slice.len(),
                rows,
                per_row: column.numel(),
                expected,
            });
        }
        if non_finite == NonFinite::Reject {
            reject_non_finite(*slice, column.name(), column.numel())?;
        }
    }
    Ok(rows)
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
mod tests {
    use super::*;

    #[test]
    fn plans_split_at_the_end_of_the_ring_and_skip_what_a_long_write_overwrites() {
        let ring = RingState {
            cursor: 8,
            len: 8,
            written: 8,
            ..RingState::default()
        };
        let plan = plan_write(&ring, 5, 10);
        assert_eq!((plan.skipped, plan.written), (0, 5));
        let [a, b] = plan.segments(10);
        assert_eq!((a.position, a.source_row, a.rows), (8, 0, 2));
        assert_eq!((b.position, b.source_row, b.rows), (0, 2, 3));
        let after = ring_after(
            &ring,
            &plan,
            10,
            EpisodeEnds {
                count: 1,
                last: Some(3),
            },
        );
        assert_eq!((after.cursor, after.len, after.written), (3, 10, 13));
        assert_eq!((after.episodes, after.episode_start), (1, 12));
        let long = plan_write(&ring, 25, 10);
        assert_eq!(
            (
                long.skipped,
                long.written,
                long.start.cursor,
                long.start.len
            ),
            (15, 10, 3, 0)
        );
        let [a, b] = long.segments(10);
        assert_eq!((a.position, a.source_row, a.rows), (3, 15, 7));
        assert_eq!((b.position, b.source_row, b.rows), (0, 22, 3));
    }
}
