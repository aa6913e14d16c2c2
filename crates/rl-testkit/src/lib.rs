//! Measuring memory in tests and benches.
//!
//! - [`CountingAllocator`]: a global allocator that counts allocations per thread (tests
//!   run in parallel threads, so process-wide counts would mix tests up) and process-wide.
//! - [`measure`]: runs a closure and reports what the current thread allocated, freed,
//!   and the peak of its live bytes while the closure ran.
//! - [`ProcessMemory`] (re-exported from `rl-core`): current and peak RSS, RssAnon and
//!   RssFile from `/proc`.
//!
//! Install the allocator once per test or bench binary:
//!
//! ```
//! use rl_testkit::{CountingAllocator, measure};
//!
//! #[global_allocator]
//! static ALLOCATOR: CountingAllocator = CountingAllocator;
//!
//! let mut buffer = Vec::with_capacity(1024);
//! let ((), stats) = measure(|| {
//!     buffer.clear();
//!     buffer.extend(0..1024u32); // fits the capacity: no allocation
//! });
//! assert_eq!(stats.allocations, 0);
//! let (_v, stats) = measure(|| vec![0u8; 4096]);
//! assert_eq!(stats.allocated_bytes, 4096);
//! assert_eq!(stats.live_bytes_delta(), 4096);
//! ```
#![expect(
    unsafe_code,
    reason = "a global allocator is an unsafe trait implementation"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub use rl_core::ProcessMemory;

/// A global allocator that forwards to [`System`] and counts.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAllocator;

/// Per-thread counters. `const` initialisation and no destructor: reading them never
/// allocates, so they are safe to touch from inside the allocator.
struct ThreadCounters {
    allocations: Cell<u64>,
    allocated: Cell<u64>,
    deallocations: Cell<u64>,
    freed: Cell<u64>,
    live: Cell<i64>,
    peak_live: Cell<i64>,
}

thread_local! {
    static THREAD: ThreadCounters = const {
        ThreadCounters {
            allocations: Cell::new(0),
            allocated: Cell::new(0),
            deallocations: Cell::new(0),
            freed: Cell::new(0),
            live: Cell::new(0),
            peak_live: Cell::new(0),
        }
    };
}

static INSTALLED: AtomicBool = AtomicBool::new(false);
static PROCESS_ALLOCATED: AtomicU64 = AtomicU64::new(0);
static PROCESS_FREED: AtomicU64 = AtomicU64::new(0);
static PROCESS_ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

fn record_alloc(bytes: usize) {
    INSTALLED.store(true, Ordering::Relaxed);
    PROCESS_ALLOCATED.fetch_add(bytes as u64, Ordering::Relaxed);
    PROCESS_ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    // `try_with`: during thread teardown the counters may already be gone.
    let _ = THREAD.try_with(|t| {
        t.allocations.set(t.allocations.get() + 1);
        t.allocated.set(t.allocated.get() + bytes as u64);
        let live = t.live.get() + bytes as i64;
        t.live.set(live);
        if live > t.peak_live.get() {
            t.peak_live.set(live);
        }
    });
}

fn record_dealloc(bytes: usize) {
    PROCESS_FREED.fetch_add(bytes as u64, Ordering::Relaxed);
    let _ = THREAD.try_with(|t| {
        t.deallocations.set(t.deallocations.get() + 1);
        t.freed.set(t.freed.get() + bytes as u64);
        t.live.set(t.live.get() - bytes as i64);
    });
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `System`'s guarantees hold; the bookkeeping around it never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `GlobalAlloc::alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            record_alloc(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            record_alloc(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from this allocator (which is `System`)
        // with `layout`, as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) };
        record_dealloc(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `realloc`'s contract.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            // A reallocation frees the old block and allocates a new one.
            record_dealloc(layout.size());
            record_alloc(new_size);
        }
        new
    }
}

/// What the current thread allocated while a closure ran.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Number of allocations (a reallocation counts as one).
    pub allocations: u64,
    /// Bytes allocated.
    pub allocated_bytes: u64,
    /// Number of deallocations (a reallocation counts as one).
    pub deallocations: u64,
    /// Bytes freed (including memory allocated before the closure started).
    pub freed_bytes: u64,
    /// Highest live bytes above the level at the start of the closure.
    pub peak_live_bytes: i64,
}

impl AllocStats {
    /// Live bytes at the end minus live bytes at the start (negative if the closure freed
    /// more than it allocated).
    pub fn live_bytes_delta(&self) -> i64 {
        self.allocated_bytes as i64 - self.freed_bytes as i64
    }
}

/// Runs `f` and reports what the current thread allocated meanwhile. Allocations made by
/// other threads (worker pools) are not counted here: use [`process_counters`] for those.
///
/// # Panics
/// If [`CountingAllocator`] is not the global allocator of this binary: a measurement
/// that counts nothing would pass every "allocates nothing" test by mistake.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, AllocStats) {
    // Allocate once so that INSTALLED is set if the allocator is in place.
    drop(std::hint::black_box(Box::new(0u8)));
    assert!(
        INSTALLED.load(Ordering::Relaxed),
        "CountingAllocator is not installed: add `#[global_allocator] static A: \
         rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;` to the test binary"
    );
    let snapshot = |t: &ThreadCounters| {
        (
            t.allocations.get(),
            t.allocated.get(),
            t.deallocations.get(),
            t.freed.get(),
            t.live.get(),
        )
    };
    let (start, outer_peak) = THREAD.with(|t| {
        let outer_peak = t.peak_live.get();
        t.peak_live.set(t.live.get());
        (snapshot(t), outer_peak)
    });
    let result = f();
    let (end, inner_peak) = THREAD.with(|t| {
        let inner_peak = t.peak_live.get();
        // Keep an enclosing measurement's peak correct.
        t.peak_live.set(outer_peak.max(inner_peak));
        (snapshot(t), inner_peak)
    });
    let stats = AllocStats {
        allocations: end.0 - start.0,
        allocated_bytes: end.1 - start.1,
        deallocations: end.2 - start.2,
        freed_bytes: end.3 - start.3,
        peak_live_bytes: inner_peak - start.4,
    };
    (result, stats)
}

/// Process-wide totals since start, over all threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessCounters {
    /// Number of allocations.
    pub allocations: u64,
    /// Bytes allocated.
    pub allocated_bytes: u64,
    /// Bytes freed.
    pub freed_bytes: u64,
}

impl ProcessCounters {
    /// Bytes currently live in the process (as seen by the allocator).
    pub fn live_bytes(&self) -> i64 {
        self.allocated_bytes as i64 - self.freed_bytes as i64
    }
}

/// Reads the process-wide counters (all threads). Compare two readings around a phase
/// that involves worker threads; other tests running in parallel also count here, so use
/// it in binaries or tests that run alone.
pub fn process_counters() -> ProcessCounters {
    ProcessCounters {
        allocations: PROCESS_ALLOCATIONS.load(Ordering::Relaxed),
        allocated_bytes: PROCESS_ALLOCATED.load(Ordering::Relaxed),
        freed_bytes: PROCESS_FREED.load(Ordering::Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOCATOR: CountingAllocator = CountingAllocator;

    #[test]
    fn counts_allocations_frees_and_peaks() {
        let ((), stats) = measure(|| {
            let a = vec![0u8; 1000];
            let b = vec![0u8; 500];
            drop(std::hint::black_box(a));
            drop(std::hint::black_box(b));
        });
        assert_eq!(stats.allocations, 2);
        assert_eq!(stats.allocated_bytes, 1500);
        assert_eq!(stats.freed_bytes, 1500);
        assert_eq!(stats.peak_live_bytes, 1500);
        assert_eq!(stats.live_bytes_delta(), 0);
    }

    #[test]
    fn nothing_allocated_reads_zero() {
        let mut v: Vec<u64> = Vec::with_capacity(64);
        let ((), stats) = measure(|| {
            for i in 0..64 {
                v.push(i);
            }
        });
        assert_eq!(stats, AllocStats::default());
    }

    #[test]
    fn growth_through_realloc_is_counted() {
        let (v, stats) = measure(|| {
            let mut v: Vec<u8> = Vec::with_capacity(8);
            v.extend(std::iter::repeat_n(1u8, 100));
            v
        });
        assert!(stats.allocations >= 2);
        assert_eq!(stats.live_bytes_delta(), v.capacity() as i64);
    }

    #[test]
    fn nested_measurements_keep_the_outer_peak() {
        let ((), outer) = measure(|| {
            let big = vec![0u8; 10_000];
            drop(std::hint::black_box(big));
            let ((), inner) = measure(|| {
                drop(std::hint::black_box(vec![0u8; 10]));
            });
            assert_eq!(inner.peak_live_bytes, 10);
        });
        assert_eq!(outer.peak_live_bytes, 10_000);
    }

    #[test]
    fn other_threads_are_not_counted_here_but_in_the_process_totals() {
        let before = process_counters();
        let ((), stats) = measure(|| {
            std::thread::scope(|s| {
                s.spawn(|| drop(std::hint::black_box(vec![0u8; 1 << 20])));
            });
        });
        let after = process_counters();
        assert!(stats.allocated_bytes < 1 << 20, "{stats:?}");
        assert!(after.allocated_bytes - before.allocated_bytes >= 1 << 20);
    }

    #[test]
    fn reading_process_memory_allocates_nothing() {
        let (memory, stats) = measure(ProcessMemory::read);
        assert!(memory.unwrap().rss_bytes > 0);
        assert_eq!(stats.allocations, 0, "{stats:?}");
    }
}
