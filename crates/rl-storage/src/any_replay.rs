//! [`ByStorage`]: a buffer over RAM or over a memmap file, chosen at run time;
//! [`AnyReplay`] and [`AnyDedup`] name it for the two host buffers, and
//! [`with_storage!`](crate::replay::with_storage) reaches the buffer inside.

use std::path::Path;

use rl_core::{Element, Location, MemoryPlan, Schema};

use crate::batch::Batch;
use crate::column::ColumnSlice;
use crate::dedup::DedupReplay;
use crate::error::Result;
use crate::memmap::MemmapStorage;
use crate::ram::RamStorage;
use crate::replay::ReplayBuffer;
use crate::sampler::{AnySampler, Sampler};
use crate::storage::RingState;

/// One value of two types, by where the rows live: `R` over a [`RamStorage`], `M` over a
/// [`MemmapStorage`]. Its two uses are [`AnyReplay`] and [`AnyDedup`]; the methods of
/// those forward to the buffer inside, and
/// [`with_storage!`](crate::replay::with_storage) runs code that is generic over the
/// storage (a collector's `collect`, say) on it.
#[derive(Debug)]
pub enum ByStorage<R, M> {
    /// Anonymous memory, allocated and touched at construction.
    Ram(R),
    /// A memory-mapped file (crash-safe commits).
    Memmap(M),
}

/// A [`ReplayBuffer`] in RAM or in a memmap file, chosen at run time, with the methods
/// both share. The sampler defaults to [`AnySampler`].
///
/// ```
/// use rl_core::{Column, DType, Location, Schema};
/// use rl_storage::{Batch, ColumnSlice, ram::RamStorage, replay::{AnyReplay, ReplayBuffer, with_storage}};
/// use rl_storage::sampler::{AnySampler, Uniform};
///
/// let schema = Schema::new([Column::scalar("id", DType::I64)])?;
/// let storage = RamStorage::new(schema.clone(), 4, None)?;
/// let mut buffer: AnyReplay = AnyReplay::Ram(ReplayBuffer::new(storage, AnySampler::from(Uniform::new(0))));
/// buffer.extend(&[ColumnSlice::from(&[1i64, 2, 3])])?;
/// assert_eq!((buffer.len(), buffer.location()), (3, Location::Ram));
/// // Code generic over the storage sees the buffer inside.
/// let stored: Vec<usize> = with_storage!(&buffer, b => b.positions().collect());
/// assert_eq!(stored, [0, 1, 2]);
/// let mut batch = Batch::new(&schema, 2)?;
/// buffer.sample(&mut batch)?;
/// # Ok::<(), rl_storage::Error>(())
/// ```
pub type AnyReplay<P = AnySampler> =
    ByStorage<ReplayBuffer<RamStorage, P>, ReplayBuffer<MemmapStorage, P>>;

/// A [`DedupReplay`] in RAM or in a memmap file, chosen at run time, with the methods
/// both share. The sampler defaults to [`AnySampler`].
pub type AnyDedup<P = AnySampler> =
    ByStorage<DedupReplay<RamStorage, P>, DedupReplay<MemmapStorage, P>>;

/// Runs `$body` with `$b` bound to the buffer inside a
/// [`ByStorage`](crate::replay::ByStorage) (an [`AnyReplay`](crate::replay::AnyReplay) or
/// an [`AnyDedup`](crate::dedup::AnyDedup)), whatever its storage: `$body` is compiled
/// once per storage, so it may call code generic over the storage.
///
/// ```
/// # use rl_core::{Column, DType, Schema};
/// # use rl_storage::{ram::RamStorage, replay::{AnyReplay, ReplayBuffer, with_storage}, sampler::{AnySampler, Uniform}};
/// # let schema = Schema::new([Column::scalar("id", DType::I64)])?;
/// # let mut buffer: AnyReplay = AnyReplay::Ram(ReplayBuffer::new(RamStorage::new(schema, 4, None)?, AnySampler::from(Uniform::new(0))));
/// let rows = with_storage!(&mut buffer, b => b.extend(&[(&[7i64]).into()]))?;
/// assert_eq!(rows, 1);
/// # Ok::<(), rl_storage::Error>(())
/// ```
#[doc(hidden)]
#[macro_export]
macro_rules! __with_storage {
    ($buffer:expr, $b:ident => $body:expr) => {
        match $buffer {
            $crate::replay::ByStorage::Ram($b) => $body,
            $crate::replay::ByStorage::Memmap($b) => $body,
        }
    };
}

impl<R, M> ByStorage<R, M> {
    /// Where the rows live: [`Location::Ram`] or [`Location::File`].
    pub fn location(&self) -> Location {
        match self {
            Self::Ram(_) => Location::Ram,
            Self::Memmap(_) => Location::File,
        }
    }
}

impl<P: Sampler> AnyReplay<P> {
    /// The row layout.
    pub fn schema(&self) -> &Schema {
        __with_storage!(self, b => b.schema())
    }

    /// Rows stored.
    pub fn len(&self) -> usize {
        __with_storage!(self, b => b.len())
    }

    /// Whether no row is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows the buffer holds at most.
    pub fn capacity(&self) -> usize {
        __with_storage!(self, b => b.capacity())
    }

    /// The ring: cursor, rows stored, rows and episodes ever written.
    pub fn ring(&self) -> RingState {
        __with_storage!(self, b => b.ring())
    }

    /// The memmap file (`None` in RAM).
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Ram(_) => None,
            Self::Memmap(b) => Some(b.storage().path()),
        }
    }

    /// The sampler.
    pub fn sampler(&self) -> &P {
        __with_storage!(self, b => b.sampler())
    }

    /// The sampler, mutably (to update priorities, for instance).
    pub fn sampler_mut(&mut self) -> &mut P {
        __with_storage!(self, b => b.sampler_mut())
    }

    /// Storage and sampler memory, line by line ([`ReplayBuffer::memory_plan`]).
    pub fn memory_plan(&self) -> MemoryPlan {
        __with_storage!(self, b => b.memory_plan())
    }

    /// All `capacity` rows of column `name`, by ring position ([`ReplayBuffer::column`]).
    ///
    /// # Errors
    /// An unknown column or another element type.
    pub fn column<T: Element>(&self, name: &str) -> Result<&[T]> {
        __with_storage!(self, b => b.column(name))
    }

    /// Appends one row ([`ReplayBuffer::push`]).
    ///
    /// # Errors
    /// As [`ReplayBuffer::push`]; nothing changes on error.
    pub fn push(&mut self, row: &[ColumnSlice<'_>]) -> Result<()> {
        __with_storage!(self, b => b.push(row))
    }

    /// Appends rows column by column ([`ReplayBuffer::extend`]); returns how many.
    ///
    /// # Errors
    /// As [`ReplayBuffer::extend`]; nothing changes on error.
    pub fn extend(&mut self, columns: &[ColumnSlice<'_>]) -> Result<usize> {
        __with_storage!(self, b => b.extend(columns))
    }

    /// Samples `batch.room()` rows into `batch` ([`ReplayBuffer::sample`]).
    ///
    /// # Errors
    /// As [`ReplayBuffer::sample`].
    pub fn sample(&mut self, batch: &mut Batch) -> Result<()> {
        __with_storage!(self, b => b.sample(batch))
    }

    /// [`ReplayBuffer::sample_on`]: the gather split over `parallel`'s threads.
    ///
    /// # Errors
    /// As [`ReplayBuffer::sample`].
    pub fn sample_on(&mut self, batch: &mut Batch, parallel: &dyn crate::Parallel) -> Result<()> {
        __with_storage!(self, b => b.sample_on(batch, parallel))
    }

    /// Makes every row written so far durable (memmap); a no-op in RAM.
    ///
    /// # Errors
    /// Storage I/O errors.
    pub fn commit(&mut self) -> Result<()> {
        __with_storage!(self, b => b.commit())
    }
}

impl<P: Sampler> AnyDedup<P> {
    /// The storage's row layout (`final_obs` included).
    pub fn schema(&self) -> &Schema {
        __with_storage!(self, b => b.buffer().schema())
    }

    /// The layout of a batch ([`DedupReplay::batch_schema`]).
    pub fn batch_schema(&self) -> &Schema {
        __with_storage!(self, b => b.batch_schema())
    }

    /// Rows stored (final rows included).
    pub fn len(&self) -> usize {
        __with_storage!(self, b => b.buffer().len())
    }

    /// Whether no row is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rows the buffer holds at most.
    pub fn capacity(&self) -> usize {
        __with_storage!(self, b => b.buffer().capacity())
    }

    /// The ring of the storage: cursor, rows stored, rows and episodes ever written.
    pub fn ring(&self) -> RingState {
        __with_storage!(self, b => b.buffer().ring())
    }

    /// Storage and sampler memory, line by line ([`DedupReplay::memory_plan`]).
    pub fn memory_plan(&self) -> MemoryPlan {
        __with_storage!(self, b => b.memory_plan())
    }

    /// Appends one step ([`DedupReplay::push_step`]).
    ///
    /// # Errors
    /// As [`DedupReplay::push_step`]; nothing changes on error.
    pub fn push_step(
        &mut self,
        row: &[ColumnSlice<'_>],
        final_obs: Option<ColumnSlice<'_>>,
    ) -> Result<()> {
        __with_storage!(self, b => b.push_step(row, final_obs))
    }

    /// Ends the newest row's stream with its next frame ([`DedupReplay::close_stream`]).
    ///
    /// # Errors
    /// As [`DedupReplay::close_stream`]; nothing changes on error.
    pub fn close_stream(&mut self, next_frame: ColumnSlice<'_>) -> Result<()> {
        __with_storage!(self, b => b.close_stream(next_frame))
    }

    /// Samples `batch.room()` transitions into `batch` ([`DedupReplay::sample`]).
    ///
    /// # Errors
    /// As [`DedupReplay::sample`].
    pub fn sample(&mut self, batch: &mut Batch) -> Result<()> {
        __with_storage!(self, b => b.sample(batch))
    }

    /// Makes every row written so far durable (memmap); a no-op in RAM.
    ///
    /// # Errors
    /// Storage I/O errors.
    pub fn commit(&mut self) -> Result<()> {
        __with_storage!(self, b => b.commit())
    }
}

#[cfg(test)]
mod tests;
