//! Storage in anonymous host memory, allocated once and pre-faulted.

use memmap2::{MmapMut, MmapOptions};
use rl_core::{Location, MemoryBudget, MemoryPlan, Schema};

use crate::error::{Error, Result};
use crate::storage::{ColumnLayout, HostStorage, RingState, Storage};

/// Columns in RAM: one anonymous mapping holding every column, page-aligned, allocated
/// and touched at construction.
///
/// Touching every page up front makes resident memory equal the plan from the first step
/// (no surprise growth as the buffer fills) and keeps page faults out of the write path.
/// On Linux the mapping asks for transparent huge pages, which cuts TLB misses when
/// sampling rows at random from a large buffer.
#[derive(Debug)]
pub struct RamStorage {
    schema: Schema,
    capacity: usize,
    layout: ColumnLayout,
    memory: MmapMut,
}

impl RamStorage {
    /// The plan of a RAM storage of `schema` at `capacity` rows: one line per column.
    ///
    /// # Errors
    /// Invalid configuration for a zero or overflowing capacity.
    pub fn plan(schema: &Schema, capacity: usize) -> Result<MemoryPlan> {
        let layout = ColumnLayout::new(schema, capacity)?;
        Ok(plan_of(schema, &layout, Location::Ram))
    }

    /// Allocates and pre-faults the columns, refusing first (before allocating anything)
    /// a configuration whose plan does not fit `budget`.
    ///
    /// # Errors
    /// Invalid configuration for a zero or overflowing capacity; over budget, naming the
    /// plan's largest lines; I/O if the mapping fails.
    pub fn new(schema: Schema, capacity: usize, budget: Option<&MemoryBudget>) -> Result<Self> {
        let layout = ColumnLayout::new(&schema, capacity)?;
        if let Some(budget) = budget {
            plan_of(&schema, &layout, Location::Ram).check(budget)?;
        }
        let mut memory = MmapOptions::new()
            .len(layout.total())
            .map_anon()
            .map_err(Error::io(format!(
                "allocating {} bytes of RAM storage",
                layout.total()
            )))?;
        advise_huge_pages(&memory);
        prefault(&mut memory);
        Ok(Self {
            schema,
            capacity,
            layout,
            memory,
        })
    }
}

/// One plan line per column, named after it.
pub(crate) fn plan_of(schema: &Schema, layout: &ColumnLayout, location: Location) -> MemoryPlan {
    let mut plan = MemoryPlan::new();
    for (i, column) in schema.columns().iter().enumerate() {
        let padded = if i + 1 < layout.columns() {
            layout.offset(i + 1) - layout.offset(i)
        } else {
            layout.total() - layout.offset(i)
        };
        plan.add(column.name(), location, padded as u64);
    }
    plan
}

/// Asks for transparent huge pages (Linux): fewer TLB misses when rows are read at random.
/// For file mappings this needs a kernel whose file system caches large folios (ext4
/// since Linux 6.16); elsewhere the advice is ignored.
#[cfg(target_os = "linux")]
pub(crate) fn advise_huge_pages(memory: &MmapMut) {
    // Advice only: without transparent huge pages the storage works the same, slower.
    let _ = memory.advise(memmap2::Advice::HugePage);
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn advise_huge_pages(_memory: &MmapMut) {}

/// Writes one byte per page so every page is resident now, not on first use.
fn prefault(memory: &mut [u8]) {
    for page in memory.chunks_mut(4096) {
        page[0] = 0;
    }
    std::hint::black_box(&memory);
}

impl Storage for RamStorage {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn location(&self) -> Location {
        Location::Ram
    }

    fn memory_plan(&self) -> MemoryPlan {
        plan_of(&self.schema, &self.layout, Location::Ram)
    }

    fn restored(&self) -> RingState {
        RingState::default()
    }

    fn prepare_write(&mut self, _ring: &RingState, _rows: usize) -> Result<()> {
        Ok(())
    }

    fn commit(&mut self, _ring: &RingState) -> Result<()> {
        Ok(())
    }
}

impl HostStorage for RamStorage {
    fn column(&self, index: usize) -> &[u8] {
        &self.memory[self.layout.range(index)]
    }

    fn column_mut(&mut self, index: usize) -> &mut [u8] {
        let range = self.layout.range(index);
        &mut self.memory[range]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rl_core::{Column, DType, Field, ProcessMemory};

    fn schema(obs: usize) -> Schema {
        Schema::new([
            Column::new(Field::Obs.name(), DType::F32, &[obs]),
            Column::scalar(Field::Action.name(), DType::U32),
        ])
        .unwrap()
    }

    #[test]
    fn over_budget_is_refused_before_allocating() {
        let err = RamStorage::new(schema(1024), 1_000_000, Some(&MemoryBudget::ram(1 << 30)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("obs (ram, 3.81 GiB)"), "{err}");
        assert!(RamStorage::new(schema(4), 0, None).is_err());
    }

    #[test]
    fn columns_are_zeroed_aligned_and_independent() {
        let mut storage = RamStorage::new(schema(3), 100, None).unwrap();
        assert!(storage.column(0).iter().all(|&b| b == 0));
        assert_eq!(storage.column(0).len(), 1200);
        assert_eq!(storage.column(1).as_ptr() as usize % 4096, 0);
        storage.column_mut(1).fill(7);
        assert!(storage.column(0).iter().all(|&b| b == 0));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn planned_bytes_are_resident_after_construction() {
        let schema = schema(256);
        let planned = RamStorage::plan(&schema, 100_000)
            .unwrap()
            .total(Location::Ram);
        let before = ProcessMemory::read().unwrap().rss_anon_bytes;
        let storage = RamStorage::new(schema, 100_000, None).unwrap();
        let after = ProcessMemory::read().unwrap().rss_anon_bytes;
        let grown = after.saturating_sub(before) as f64;
        // Other tests run in parallel threads and allocate too: allow 5% plus 8 MiB.
        assert!(
            (grown - planned as f64).abs() < planned as f64 * 0.05 + f64::from(8u32 << 20),
            "planned {planned}, resident grew {grown}"
        );
        drop(storage);
    }
}
