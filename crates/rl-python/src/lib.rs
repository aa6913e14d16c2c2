//! Python bindings of `rl`: the `flatrl` wheel (PyO3 and the numpy crate, an abi3 wheel
//! built by maturin).
//!
//! A thin skin over the crates, numpy in and out:
//!
//! - **Replay buffers** ([`replay`]): `flatrl.ReplayBuffer` over a RAM or memmap storage of
//!   `rl-storage`, from a schema given as a dict (`name -> (dtype, shape)`), `extend` from
//!   numpy arrays, `sample` into a `flatrl.Batch` whose arrays are allocated once and
//!   reused by every sample (`torch.from_numpy` on them shares the memory); uniform,
//!   prioritized and slice samplers ([`sampler`]); `flatrl.DedupReplayBuffer` ([`dedup`]) stores each
//!   observation once and rebuilds frame stacks at sample time; memmap buffers `commit`
//!   and reopen. The memory plan is a `flatrl.MemoryPlan` ([`plan`]) that prints as a
//!   table; a plan over budget raises `flatrl.MemoryBudgetError` carrying the plan. Bad
//!   input raises `ValueError` naming the column, and nothing stored changes ([`error`]).
//! - **Vector environments** ([`vector`]): the Rust environments of `rl-envs` stepped in
//!   one call for `N` copies, exposed to the Python class `flatrl.VectorEnv` (a
//!   `gymnasium.vector.VectorEnv` with autoreset).
//! - **Gymnasium environments for the Rust side** ([`gym`]): [`gym::GymEnv`] is an
//!   [`rl_core::Env`] over a Python Gymnasium environment, so the Rust collectors (and,
//!   trainers) drive it; the GIL is held only while Python runs.
//! - **Trainers** ([`train`]): `flatrl.train`, `resume`, `evaluate` and `plan` run what
//!   the `rl` command runs, from the same configs (TOML file or text, or a dict), on the
//!   built-in environments or any Gymnasium environment, into the same run directories;
//!   `flatrl.load` ([`agent`]) restores a run's policy and predicts as SB3's `predict`.
//!
//! Heavy Rust work (large writes and gathers, collection) runs with the GIL released.
//!
//! The crate has no Rust test binaries (they would link `libpython`); its tests are the
//! pytest suite in `python/tests`, run by `cargo xtask ci`.
#![expect(
    unsafe_code,
    reason = "numpy arrays are read and exposed through raw data pointers (zero-copy in and out)"
)]

pub mod agent;
mod arrays;
mod batch;
pub mod dedup;
pub mod error;
pub mod gym;
pub mod plan;
pub mod remote;
pub mod replay;
pub mod sampler;
mod schema;
mod store;
pub mod train;
pub mod vector;

use pyo3::prelude::*;

/// The extension module `flatrl._flatrl`; the Python package `flatrl` re-exports it.
#[pymodule]
fn _flatrl(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "MemoryBudgetError",
        py.get_type::<error::MemoryBudgetError>(),
    )?;
    m.add_class::<plan::MemoryPlan>()?;
    m.add_class::<plan::MemoryBudget>()?;
    m.add_class::<sampler::Uniform>()?;
    m.add_class::<sampler::Prioritized>()?;
    m.add_class::<sampler::SliceSampler>()?;
    m.add_class::<batch::Batch>()?;
    m.add_class::<replay::ReplayBuffer>()?;
    m.add_class::<dedup::DedupReplayBuffer>()?;
    m.add_class::<vector::VecEnvCore>()?;
    m.add_class::<gym::RandomCollector>()?;
    m.add("ConfigError", py.get_type::<train::ConfigError>())?;
    m.add_function(wrap_pyfunction!(train::train, m)?)?;
    m.add_function(wrap_pyfunction!(train::resume, m)?)?;
    m.add_function(wrap_pyfunction!(train::evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(train::plan, m)?)?;
    m.add_function(wrap_pyfunction!(train::cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(train::load_config, m)?)?;
    m.add_class::<agent::AgentCore>()?;
    m.add_function(wrap_pyfunction!(agent::load_agent, m)?)?;
    m.add_class::<remote::RemoteCollector>()?;
    m.add_function(wrap_pyfunction!(remote::train_remote, m)?)?;
    Ok(())
}
