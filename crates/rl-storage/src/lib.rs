//! Columnar replay and rollout storage: the crate that keeps memory planned, bounded and flat.
//!
//! **Status: skeleton.** The storage issue fills this crate; until then it holds no types.
//! What it will hold (see `ARCHITECTURE.md`):
//!
//! - Storages with one contiguous column per [`rl_core::Schema`] field: in RAM (allocated
//!   and pre-faulted once), in memory-mapped files (versioned header, crash-safe ring
//!   commits, typed errors for truncated or foreign files), and on the GPU (`cuda` feature).
//! - A FIFO replay buffer, an on-policy rollout buffer with in-place GAE, and samplers
//!   (uniform, without replacement, prioritized, episode-respecting slices) that gather
//!   into caller-owned, reused batches.
//! - Transforms that move sampled batches to a device, and tiered storage (newest rows on
//!   the GPU, every row in a memmap file).
//!
//! Every storage reports its [`rl_core::MemoryPlan`] before it allocates.
//!
//! # Features
//! - `cuda`: reserved for the CUDA storage and transfer path (cudarc, loaded dynamically).
//!   With the CPU everywhere nothing in this crate ever initialises CUDA.
