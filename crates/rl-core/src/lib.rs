//! Shared vocabulary of the `rl` workspace.
//!
//! Every other crate speaks in these types, and this crate depends on nothing heavy (no
//! network library, no cudarc), so depending on it costs nothing:
//!
//! - [`Space`] and [`BoxSpace`]: discrete spaces (actions stored as `u32` indices, never
//!   one-hot) and boxes of `f32` or `u8` values (pixels are first-class).
//! - [`Env`]: environments that write observations into caller-owned buffers, so stepping
//!   allocates nothing, and return `terminated` and `truncated` as separate facts.
//! - [`Schema`], [`Column`], [`DType`], [`Element`]: the row layout of columnar storage.
//! - [`Field`], [`TransitionSchema`]: the transition columns every crate agrees on, named
//!   once.
//! - [`Device`]: CPU or a CUDA ordinal, as plain data (naming a device touches no driver).
//! - [`MemoryPlan`], [`MemoryBudget`]: what a component will allocate, declared before it
//!   allocates, and checked against a budget.
//! - [`ProcessMemory`]: the process's resident memory from `/proc`, read without
//!   allocating; [`SystemMemory`]: the machine's available memory.
//! - [`FeatureTable`]: a shared per-action feature table, held once per process.
//! - [`simd::Isa`]: which SIMD kernels (AVX-512, AVX2 + FMA or scalar) every vectorised
//!   crate runs, detected once per process.
//! - [`Error`]: one error type whose messages say what was wrong and what to do.
//!
//! # Example
//!
//! ```
//! use rl_core::{DType, Location, MemoryBudget, MemoryPlan, TransitionSchema};
//!
//! // A replay row for CartPole: 4 observation floats, an action index, reward, two flags.
//! let schema = TransitionSchema::new(DType::F32, &[4], DType::U32, &[]).build()?;
//! let capacity = 1_000_000u64;
//! let plan = MemoryPlan::new().with("replay", Location::Ram, capacity * schema.row_bytes() as u64);
//! plan.check(&MemoryBudget::ram(1 << 30))?; // 26 MB fits in 1 GiB
//! # Ok::<(), rl_core::Error>(())
//! ```

mod device;
pub mod env;
mod error;
mod memory;
mod process;
mod schema;
pub mod simd;
mod space;
mod table;
mod transition;

pub use device::Device;
pub use env::{Env, Step};
pub use error::{Error, Result};
pub use memory::{Bytes, Location, MemoryBudget, MemoryPlan, PlanLine};
pub use process::{ProcessMemory, SystemMemory};
pub use schema::{Column, DType, Element, Flag, NonFinite, Schema};
pub use space::{BoxSpace, Space};
pub use table::FeatureTable;
pub use transition::{Field, TransitionSchema};
