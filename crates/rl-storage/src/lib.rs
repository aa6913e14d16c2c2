//! Columnar replay and rollout storage with memory planned before it is allocated,
//! bounded by construction, and flat while a run goes on.
//!
//! - **Storages** hold `capacity` rows of a [`rl_core::Schema`], one contiguous column per
//!   field: [`RamStorage`] (anonymous memory, allocated and pre-faulted once) and
//!   [`MemmapStorage`] (a memory-mapped file with a versioned header and crash-safe ring
//!   commits). Both report a [`rl_core::MemoryPlan`] before allocating and refuse a
//!   configuration over budget.
//! - **Buffers**: [`ReplayBuffer`] (FIFO ring writer, `push`/`extend` from column slices,
//!   sampling into a caller-owned [`Batch`]), [`DedupReplay`] (each observation stored
//!   once, final observations kept), and [`RolloutBuffer`] (on-policy, `T x N` rows of a
//!   schema, shuffled minibatches; advantages are the learner's business).
//! - **Devices**: storage location and sample device are separate choices.
//!   [`DeviceReplay`] keeps columns in device memory and gathers batches on the device;
//!   [`ToDevice`] moves host batches (from RAM or memmap storage) to a device through a
//!   reused staging buffer; [`TieredReplay`] keeps every row in a memmap file and the
//!   newest `H` also on the device, taking each sampled row from the fastest tier. All are
//!   generic over [`DeviceBackend`]: [`CudaDevice`] (feature `cuda`) or [`FakeDevice`]
//!   (host memory behind the same interface, for tests on machines without a GPU).
//! - **Pixels**: [`DedupReplay::with_frame_stack`] rebuilds stacks of frames from indices
//!   at sample time: each frame stored once, stacks never crossing an episode start.
//! - **Samplers**: [`Uniform`], [`WithoutReplacement`] (epochs), [`Prioritized`] (sum
//!   tree), [`SliceSampler`] (windows that never cross an episode end).
//! - **Bootstrap masks** ([`BootstrapMasks`]): an ensemble of up to 64 heads shares one
//!   copy of the data.
//! - **Checkpoints**: RAM buffers save to and load from a directory without a second
//!   copy ([`ReplayBuffer::save`]), the sampler's state included ([`Sampler::save_state`]),
//!   so a loaded buffer draws exactly what the saved one would have drawn next; memmap
//!   buffers commit their rows in place.
//!
//! After construction, writing, sampling and committing allocate nothing.
//!
//! # Example
//!
//! ```
//! use rl_core::{Column, DType, Flag, MemoryBudget, Schema};
//! use rl_storage::{Batch, ColumnSlice, RamStorage, ReplayBuffer, Uniform};
//!
//! let schema = Schema::new([
//!     Column::new("obs", DType::F32, &[4]),
//!     Column::scalar("action", DType::U32), // an index, never one-hot
//!     Column::scalar("reward", DType::F32),
//!     Column::scalar("terminated", DType::Bool),
//!     Column::scalar("truncated", DType::Bool),
//! ])?;
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
//! assert_eq!(batch.column::<f32>("reward")?.len(), 32);
//! # Ok::<(), rl_storage::Error>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![expect(
    unsafe_code,
    reason = "mapping files into memory is unsafe: another process may change them"
)]

mod batch;
mod bootstrap;
mod checkpoint;
mod column;
mod copy;
mod cuda;
mod dedup;
mod device;
mod device_replay;
mod error;
mod memmap;
mod prioritized;
mod ram;
mod replay;
mod ring;
mod rollout;
mod sampler;
mod sampler_state;
mod slice;
mod storage;
mod tiered;
mod transfer;
mod without_replacement;

pub use batch::Batch;
pub use bootstrap::{BOOTSTRAP_MASK, BootstrapMasks};
pub use column::ColumnSlice;
#[cfg(feature = "cuda")]
#[cfg_attr(docsrs, doc(cfg(feature = "cuda")))]
pub use cuda::{CudaBuffer, CudaStaging};
pub use cuda::{CudaDevice, cuda_initializations, libcuda_loaded};
pub use dedup::{DedupReplay, FINAL_OBS, NEXT_OBS};
pub use device::{DeviceBackend, DeviceBatch, FakeBuffer, FakeDevice, encode_pairs};
pub use device_replay::{DeviceReplay, DeviceReplayOptions};
pub use error::{Error, Result};
pub use memmap::{MemmapOptions, MemmapStorage};
pub use prioritized::{Prioritized, PrioritizedConfig};
pub use ram::RamStorage;
pub use replay::{NonFinite, ReplayBuffer};
pub use rollout::RolloutBuffer;
pub use sampler::{SampleContext, Sampler, Uniform};
pub use sampler_state::{StateFormat, StateReader, StateWriter};
pub use slice::SliceSampler;
pub use storage::{COLUMN_ALIGN, ColumnLayout, HostStorage, RingState, Storage};
pub use tiered::{TierCounts, TieredConfig, TieredReplay};
pub use transfer::ToDevice;
pub use without_replacement::{LastBatch, WithoutReplacement};

#[cfg(test)]
#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;
