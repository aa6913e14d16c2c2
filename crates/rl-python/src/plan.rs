//! `flatrl.MemoryPlan` (what a buffer will hold, line by line, before it allocates) and
//! `flatrl.MemoryBudget` (the limits a plan is checked against).

use pyo3::prelude::*;
use rl_core::Location;

use crate::error::value_error;

/// What a component holds, line by line: `(component, location, bytes)`. `str(plan)` is
/// the table `rl` prints before a run.
#[pyclass(module = "flatrl", frozen)]
#[derive(Clone, Debug)]
pub struct MemoryPlan {
    inner: rl_core::MemoryPlan,
}

impl From<rl_core::MemoryPlan> for MemoryPlan {
    fn from(inner: rl_core::MemoryPlan) -> Self {
        Self { inner }
    }
}

/// Parses a location name: `ram`, `file` or `gpu`.
fn location(name: &str) -> PyResult<Location> {
    Location::ALL
        .into_iter()
        .find(|l| l.as_str() == name)
        .ok_or_else(|| {
            value_error(format!(
                "unknown location `{name}`: use \"ram\", \"file\" or \"gpu\""
            ))
        })
}

#[pymethods]
impl MemoryPlan {
    /// The lines as `(component, location, bytes)` tuples, in order.
    #[getter]
    fn lines(&self) -> Vec<(String, &'static str, u64)> {
        self.inner
            .lines()
            .iter()
            .map(|l| (l.component.clone(), l.location.as_str(), l.bytes))
            .collect()
    }

    /// Bytes planned at `location` (`"ram"`, `"file"` or `"gpu"`).
    fn total(&self, location_name: &str) -> PyResult<u64> {
        Ok(self.inner.total(location(location_name)?))
    }

    /// Bytes planned at every location together.
    #[getter]
    fn grand_total(&self) -> u64 {
        self.inner.grand_total()
    }

    fn __len__(&self) -> usize {
        self.inner.lines().len()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }

    fn __repr__(&self) -> String {
        let totals: Vec<String> = Location::ALL
            .iter()
            .map(|&l| format!("{}={}", l.as_str(), self.inner.total(l)))
            .collect();
        format!(
            "MemoryPlan({} lines, {})",
            self.inner.lines().len(),
            totals.join(", ")
        )
    }
}

/// Limits in bytes per location; `None` means unlimited. RAM storages count against
/// `ram`, memmap files against `file`.
#[pyclass(module = "flatrl", frozen)]
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    pub(crate) inner: rl_core::MemoryBudget,
}

#[pymethods]
impl MemoryBudget {
    #[new]
    #[pyo3(signature = (*, ram=None, file=None))]
    fn new(ram: Option<u64>, file: Option<u64>) -> Self {
        Self {
            inner: rl_core::MemoryBudget {
                ram,
                file,
                gpu: None,
            },
        }
    }

    /// The RAM limit in bytes, or `None`.
    #[getter]
    fn ram(&self) -> Option<u64> {
        self.inner.ram
    }

    /// The file limit in bytes, or `None`.
    #[getter]
    fn file(&self) -> Option<u64> {
        self.inner.file
    }

    fn __repr__(&self) -> String {
        let show = |v: Option<u64>| v.map_or_else(|| "None".to_owned(), |b| b.to_string());
        format!(
            "MemoryBudget(ram={}, file={})",
            show(self.inner.ram),
            show(self.inner.file)
        )
    }
}
