//! The storage interface: where the columns of a buffer live.
//!
//! A storage owns `capacity` rows of every column of a [`Schema`], one contiguous column
//! per field. It knows nothing about rings or sampling: buffers ([`crate::replay::ReplayBuffer`])
//! decide which rows to write and read, and tell the storage through [`RingState`] what the
//! ring looks like so that persistent storages can make it durable.
//!
//! [`Storage`] is what every storage implements, wherever its bytes live (RAM, a
//! memory-mapped file, a GPU). [`HostStorage`] adds direct access to the column bytes for
//! storages in host memory, which is what the fast write and gather paths use.

use rl_core::{Location, MemoryPlan, Schema};

use crate::error::{Error, Result};

/// Position and fill of a ring of rows, as a buffer sees it.
///
/// Persistent storages record it at every commit and give it back when reopened, so a
/// buffer resumes exactly where the last commit left it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RingState {
    /// Next row position to write, in `0..capacity`.
    pub cursor: usize,
    /// Rows holding data; they are the `len` positions just before `cursor`, wrapping.
    pub len: usize,
    /// Rows ever written (so `written / capacity` is the number of wraps).
    pub written: u64,
    /// Episodes completed (rows with `terminated` or `truncated` set) ever written.
    pub episodes: u64,
    /// Value of `written` when the current, unfinished episode started.
    pub episode_start: u64,
}

impl RingState {
    /// Position of the `i`-th oldest stored row (`i < len`).
    #[inline]
    pub fn position(&self, i: usize, capacity: usize) -> usize {
        let oldest = (self.cursor + capacity - self.len) % capacity;
        let p = oldest + i;
        if p >= capacity { p - capacity } else { p }
    }

    /// Position of the oldest stored row.
    #[inline]
    pub fn oldest(&self, capacity: usize) -> usize {
        self.position(0, capacity)
    }

    /// Checks the state against a capacity (used when reopening files).
    pub(crate) fn validate(&self, capacity: usize) -> Result<()> {
        let consistent = self.cursor < capacity
            && self.len <= capacity
            && self.written >= self.len as u64
            && self.episode_start <= self.written;
        if consistent {
            Ok(())
        } else {
            Err(Error::config(
                "ring state",
                format!("{self:?} does not fit a capacity of {capacity} rows"),
            ))
        }
    }
}

/// Where a buffer's columns live.
///
/// Implementations allocate everything at construction (reporting it first in
/// [`Storage::memory_plan`]) and allocate nothing in [`Storage::prepare_write`] or
/// [`Storage::commit`].
pub trait Storage: Send {
    /// The row layout.
    fn schema(&self) -> &Schema;

    /// Rows the storage holds.
    fn capacity(&self) -> usize;

    /// Where the column bytes live.
    fn location(&self) -> Location;

    /// What this storage allocated (or mapped), line by line.
    fn memory_plan(&self) -> MemoryPlan;

    /// The ring state the storage was opened with: empty for a new storage, the last
    /// committed state for a reopened file.
    fn restored(&self) -> RingState;

    /// Called before rows `ring.cursor .. ring.cursor + rows` (wrapping) are written.
    /// Persistent storages use it to record, before any committed row is overwritten,
    /// that exactly the rows about to be overwritten leave the committed set (so a
    /// crash never loses a committed row no write reached). `rows <= capacity`.
    ///
    /// # Errors
    /// I/O errors of persistent storages.
    fn prepare_write(&mut self, ring: &RingState, rows: usize) -> Result<()>;

    /// Makes every row written up to `ring` durable, so that reopening returns `ring`'s
    /// rows. A no-op for volatile storages.
    ///
    /// # Errors
    /// I/O errors of persistent storages.
    fn commit(&mut self, ring: &RingState) -> Result<()>;
}

/// A storage whose columns are host memory the CPU can address directly.
pub trait HostStorage: Storage {
    /// All `capacity` rows of column `index`, as bytes. Aligned to at least 8 bytes.
    fn column(&self, index: usize) -> &[u8];

    /// Mutable access to column `index`.
    fn column_mut(&mut self, index: usize) -> &mut [u8];

    /// Copies `out.len()` bytes of column `index`, from its byte `offset`, into `out`.
    /// By default from [`HostStorage::column`];
    /// [`MemmapStorage`](crate::memmap::MemmapStorage) reads the file instead (`pread`),
    /// so the pages read are never mapped into the process.
    ///
    /// # Panics
    /// If the bytes leave the column.
    fn read_column(&self, index: usize, offset: usize, out: &mut [u8]) {
        out.copy_from_slice(&self.column(index)[offset..offset + out.len()]);
    }

    /// Whether gathers read rows of at least [`READ_MIN_ROW_BYTES`] with
    /// [`HostStorage::read_column`] rather than from [`HostStorage::column`]: true for a
    /// file, whose mapped pages count in the process's resident memory (the kernel maps
    /// a whole page-cache folio, up to 2 MiB, around each byte a mapping touches: about
    /// 1 MiB per random read measured on Linux 6.18 with ext4).
    fn reads_by_copy(&self) -> bool {
        false
    }
}

/// Rows of at least this many bytes are gathered from a storage that
/// [reads by copy](HostStorage::reads_by_copy) with one [`HostStorage::read_column`]
/// call each (a system call for a file); smaller rows are copied from the mapping, where
/// a call per row would cost more than the copy.
pub const READ_MIN_ROW_BYTES: usize = 4096;

/// Byte layout of the columns of a schema at a capacity: each column starts on a page
/// boundary, so it can be mapped, flushed and advised on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ColumnLayout {
    offsets: Vec<usize>,
    lengths: Vec<usize>,
    total: usize,
}

/// Alignment of every column (a page, which also satisfies every element type).
pub(crate) const COLUMN_ALIGN: usize = 4096;

impl ColumnLayout {
    /// The layout of `schema` at `capacity` rows, or an error if it overflows.
    ///
    /// # Errors
    /// Invalid configuration if `capacity` is zero or the bytes overflow `usize`.
    pub(crate) fn new(schema: &Schema, capacity: usize) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::config(
                "capacity",
                "is zero: a buffer needs at least one row",
            ));
        }
        let overflow = || {
            Error::config(
                "capacity",
                format!(
                    "{capacity} rows of {} bytes overflow the address space: lower it",
                    schema.row_bytes()
                ),
            )
        };
        let mut offsets = Vec::with_capacity(schema.columns().len());
        let mut lengths = Vec::with_capacity(schema.columns().len());
        let mut offset = 0usize;
        for column in schema.columns() {
            let bytes = column
                .row_bytes()
                .checked_mul(capacity)
                .ok_or_else(overflow)?;
            offsets.push(offset);
            lengths.push(bytes);
            offset = offset
                .checked_add(bytes)
                .and_then(|end| end.checked_next_multiple_of(COLUMN_ALIGN))
                .ok_or_else(overflow)?;
        }
        Ok(Self {
            offsets,
            lengths,
            total: offset,
        })
    }

    /// Byte offset of column `index` from the start of the column area.
    pub(crate) fn offset(&self, index: usize) -> usize {
        self.offsets[index]
    }

    /// Byte length of column `index` (capacity x row bytes, without padding).
    #[cfg(test)]
    pub(crate) fn len(&self, index: usize) -> usize {
        self.lengths[index]
    }

    /// Byte range of column `index`.
    pub(crate) fn range(&self, index: usize) -> std::ops::Range<usize> {
        self.offsets[index]..self.offsets[index] + self.lengths[index]
    }

    /// Total bytes of all columns, with page padding.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Number of columns.
    pub(crate) fn columns(&self) -> usize {
        self.offsets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rl_core::{Column, DType, Field};

    #[test]
    fn columns_are_page_aligned_and_sized_exactly() {
        let schema = Schema::new([
            Column::new(Field::Obs.name(), DType::F32, &[3]),
            Column::scalar(Field::Terminated.name(), DType::Bool),
        ])
        .unwrap();
        let layout = ColumnLayout::new(&schema, 1000).unwrap();
        assert_eq!(layout.range(0), 0..12_000);
        assert_eq!(layout.offset(1), 12_288);
        assert_eq!(layout.len(1), 1000);
        assert_eq!(layout.total(), 16_384);
        assert!(ColumnLayout::new(&schema, 0).is_err());
        assert!(ColumnLayout::new(&schema, usize::MAX / 2).is_err());
    }

    #[test]
    fn ring_positions_wrap() {
        let ring = RingState {
            cursor: 2,
            len: 5,
            written: 12,
            ..RingState::default()
        };
        let positions: Vec<usize> = (0..5).map(|i| ring.position(i, 5)).collect();
        assert_eq!(positions, [2, 3, 4, 0, 1]);
        let partial = RingState {
            cursor: 3,
            len: 3,
            written: 3,
            ..RingState::default()
        };
        assert_eq!(partial.oldest(10), 0);
        assert!(partial.validate(10).is_ok());
        assert!(partial.validate(3).is_err());
    }
}
