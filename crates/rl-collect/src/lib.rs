//! Experience collectors with fixed memory that never touch CUDA on the CPU.
//!
//! - [`Policy`] (and [`ValuePolicy`] for rollouts): a small trait collectors call with a
//!   batch of observations and one state slot per environment; it writes actions (and
//!   log-probs and values) into collector-owned buffers. This crate depends on no
//!   network library: `rl-algos` implements the trait for its networks. [`ConstantPolicy`] and
//!   [`RandomPolicy`] need no network.
//! - [`SyncCollector`]: `N` environments stepped in the caller's thread, one batched
//!   policy call per step, transitions written straight into an `rl-storage` replay or
//!   rollout buffer.
//! - [`AsyncCollector`]: `W` worker threads, each with its own environments and policy
//!   copy, filling chunks from a fixed pool that travel through bounded channels and
//!   return to the pool after use. Policy weights are pushed with a version; every chunk
//!   carries the version that produced it. A worker's error or panic reaches the consumer
//!   as an error, never a hang.
//! - [`EpisodeStats`]: returns, lengths, terminated and truncated counts in a fixed window.
//!
//! Everything is allocated at construction and reported in a `MemoryPlan`: with a policy
//! that does not allocate, collecting allocates nothing. With the CPU as policy and
//! storing device, nothing here initialises CUDA, even with the `cuda` feature compiled in
//! (tested with `rl-storage`'s process-wide counter).
//!
//! # Features
//! - `cuda`: forwards to `rl-storage/cuda`.

mod async_collector;
mod error;
mod lanes;
mod policy;
mod saved;
mod stats;
mod sync;

pub use async_collector::{AsyncCollector, AsyncConfig, ChunkRef};
pub use error::{Error, PolicyError, Result};
pub use policy::{
    ActOutput, ActionSampler, ConstantPolicy, Policy, RandomAction, RandomPolicy, ValuePolicy,
};
pub use saved::{SavedCollector, SavedLanes, SavedStats};
pub use stats::{EndedEpisode, EpisodeStats};
pub use sync::{BatchReport, Beside, CollectorConfig, SyncCollector};

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
