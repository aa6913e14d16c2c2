//! How Rust errors reach Python: the exception each error kind becomes.
//!
//! | Rust error | Python exception |
//! |---|---|
//! | bad input: dtype, shape, row count, NaN, unknown column, bad configuration, empty buffer | `ValueError` (the message names the column) |
//! | a memory plan over budget | `flatrl.MemoryBudgetError` (a `MemoryError`) with `.plan` |
//! | files: I/O, no space left, locked, truncated, corrupt, foreign | `OSError` |
//! | anything else (an environment stepped before reset, CUDA) | `RuntimeError` |

use pyo3::exceptions::{PyMemoryError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::plan::MemoryPlan;

pyo3::create_exception!(
    flatrl,
    MemoryBudgetError,
    PyMemoryError,
    "A memory plan does not fit its budget; nothing was allocated. `.plan` is the whole `flatrl.MemoryPlan`."
);

/// Shorthand for a `ValueError` with `message`.
pub(crate) fn value_error(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

/// The Python exception for an error of `rl-core`.
pub(crate) fn core_error(err: rl_core::Error) -> PyErr {
    use rl_core::Error as E;
    let message = err.to_string();
    match err {
        E::ActionOutOfRange { .. }
        | E::NonFiniteAction { .. }
        | E::ShapeMismatch { .. }
        | E::InvalidConfig { .. } => PyValueError::new_err(message),
        E::OverBudget { largest, .. } => {
            // Only the largest lines are known here; callers that hold the whole plan
            // use `budget_error`.
            let mut plan = rl_core::MemoryPlan::new();
            for line in largest {
                plan.add(line.component, line.location, line.bytes);
            }
            budget_exception(message, plan)
        }
        E::Io { .. } => PyOSError::new_err(message),
        _ => PyRuntimeError::new_err(message),
    }
}

/// The Python exception for an error of `rl-storage`.
pub(crate) fn storage_error(err: rl_storage::Error) -> PyErr {
    use rl_storage::Error as E;
    let message = err.to_string();
    match err {
        E::Core(core) => core_error(core),
        // The Rust remedy (`Batch::new(buffer.schema(), rows)`) in Python's words.
        E::BatchSchema => PyValueError::new_err(
            "the batch was made by another buffer (another schema): make it with this buffer's new_batch(rows)",
        ),
        E::UnknownColumn { .. }
        | E::DTypeMismatch { .. }
        | E::ColumnCount { .. }
        | E::RowMismatch { .. }
        | E::NonFinite { .. }
        | E::Empty
        | E::NotEnoughRows { .. }
        | E::FileMismatch { .. }
        | E::SamplerMismatch { .. } => PyValueError::new_err(message),
        E::Truncated { .. }
        | E::BadMagic { .. }
        | E::UnsupportedVersion { .. }
        | E::Locked { .. }
        | E::Corrupt { .. }
        | E::NoSpace { .. }
        | E::Io { .. } => PyOSError::new_err(message),
        _ => PyRuntimeError::new_err(message),
    }
}

/// The Python exception for an error of `rl-collect`.
pub(crate) fn collect_error(err: rl_collect::Error) -> PyErr {
    use rl_collect::Error as E;
    match err {
        E::Config(core) => core_error(core),
        E::Storage(storage) => storage_error(storage),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// `flatrl.MemoryBudgetError` for `err` (an over-budget error), carrying the whole `plan`.
pub(crate) fn budget_error(err: rl_core::Error, plan: &rl_core::MemoryPlan) -> PyErr {
    match err {
        rl_core::Error::OverBudget { .. } => budget_exception(err.to_string(), plan.clone()),
        other => core_error(other),
    }
}

/// Builds the exception and sets its `plan` attribute.
pub(crate) fn budget_exception(message: String, plan: rl_core::MemoryPlan) -> PyErr {
    Python::attach(|py| {
        let err = MemoryBudgetError::new_err(message);
        let plan = MemoryPlan::from(plan);
        if let Err(set) = Py::new(py, plan).and_then(|p| err.value(py).setattr("plan", p)) {
            return set;
        }
        err
    })
}
