//! Columnar replay and rollout storage with memory planned before it is allocated,
//! bounded by construction, and flat while a run goes on.
//!
//! - **Storages** hold `capacity` rows of a [`rl_core::Schema`], one contiguous column per
//!   field: [`RamStorage`](crate::ram::RamStorage) (anonymous memory, allocated and pre-faulted once) and
//!   [`MemmapStorage`](crate::memmap::MemmapStorage) (a memory-mapped file with a versioned header and crash-safe ring
//!   commits). Both report a [`rl_core::MemoryPlan`] before allocating and refuse a
//!   configuration over budget.
//! - **Buffers**: [`ReplayBuffer`](crate::replay::ReplayBuffer) (FIFO ring writer, `push`/`extend` from column slices,
//!   sampling into a caller-owned [`Batch`]), [`DedupReplay`](crate::dedup::DedupReplay) (each observation stored
//!   once, final observations kept), and [`RolloutBuffer`](crate::rollout::RolloutBuffer) (on-policy, `T x N` rows of a
//!   schema, shuffled minibatches; advantages are the learner's business).
//! - **Devices**: storage location and sample device are separate choices.
//!   [`DeviceReplay`](crate::device::DeviceReplay) keeps columns in device memory and gathers batches on the device;
//!   [`ToDevice`](crate::device::ToDevice) moves host batches (from RAM or memmap storage) to a device through a
//!   reused staging buffer; [`TieredReplay`](crate::device::TieredReplay) keeps every row in a memmap file and the
//!   newest `H` also on the device, taking each sampled row from the fastest tier. All are
//!   generic over [`DeviceBackend`](crate::device::DeviceBackend): [`CudaDevice`](crate::device::CudaDevice) (feature `cuda`) or [`FakeDevice`](crate::device::FakeDevice)
//!   (host memory behind the same interface, for tests on machines without a GPU).
//! - **Pixels**: [`DedupReplay::with_frame_stack`](crate::dedup::DedupReplay::with_frame_stack) rebuilds stacks of frames from indices
//!   at sample time: each frame stored once, stacks never crossing an episode start.
//! - **Samplers**: [`Uniform`](crate::sampler::Uniform), [`WithoutReplacement`](crate::sampler::WithoutReplacement) (epochs), [`Prioritized`](crate::sampler::Prioritized) (sum
//!   tree), [`SliceSampler`](crate::sampler::SliceSampler) (windows that never cross an episode end).
//! - **Bootstrap masks** ([`BootstrapMasks`](crate::bootstrap::BootstrapMasks)): an ensemble of up to 64 heads shares one
//!   copy of the data.
//! - **Checkpoints**: RAM buffers save to and load from a directory without a second
//!   copy ([`ReplayBuffer::save`](crate::replay::ReplayBuffer::save)), the sampler's state included ([`Sampler::save_state`](crate::sampler::Sampler::save_state)),
//!   so a loaded buffer draws exactly what the saved one would have drawn next; memmap
//!   buffers commit their rows in place.
//!
//! After construction, writing, sampling and committing allocate nothing.
//!
//! # Example
//!
//! ```
//! use rl_core::{DType, Flag, MemoryBudget, TransitionSchema};
//! use rl_storage::{Batch, ColumnSlice, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};
//!
//! // Columns obs (4 floats), action (an index, never one-hot), reward, terminated, truncated.
//! let schema = TransitionSchema::new(DType::F32, &[4], DType::U32, &[]).build()?;
//! // The plan is known before anything is allocated; over budget is refused up front.
//! println!("{}", RamStorage::plan(&schema, 100_000)?);
//! let storage = RamStorage::new(schema.clone(), 100_000, Some(&MemoryBudget::ram(64 << 20)))?;
//! let mut buffer = ReplayBuffer::new(storage, Uniform::new(0));
//!
//! // Two transitions, written column by column.
//! let obs = [0.1f32, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8];
//! let (no, yes) = (Flag::new(false), Flag::new(true));
//! buffer.extend(&[
//!     ColumnSlice::from(&obs),
//!     (&[1u32, 0]).into(),
//!     (&[1.0f32, 1.0]).into(),
//!     (&[no, yes]).into(),
//!     (&[no, no]).into(),
//! ])?;
//!
//! let mut batch = Batch::new(&schema, 32)?; // allocated once, reused for every sample
//! buffer.sample(&mut batch)?;
//! assert_eq!(batch.rewards()?.len(), 32);
//! # Ok::<(), rl_storage::Error>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![expect(
    unsafe_code,
    reason = "mapping files into memory is unsafe: another process may change them"
)]

mod any_replay;
mod any_sampler;
mod batch;
pub mod bootstrap;
mod checkpoint;
mod column;
mod copy;
mod cuda;
pub mod dedup;
pub mod device;
mod device_replay;
mod error;
pub mod memmap;
mod prioritized;
pub mod ram;
pub mod replay;
mod ring;
pub mod rollout;
pub mod sampler;
mod sampler_state;
mod slice;
pub mod storage;
mod tiered;
mod transfer;
mod without_replacement;

pub use batch::{Batch, Parallel};
pub use column::ColumnSlice;
pub use error::{Error, Result};

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
