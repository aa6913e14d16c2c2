//! `flatrl.Batch`: the arrays a buffer samples into, allocated once and reused.

use numpy::{IxDyn, PyArray1, PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rl_core::{DType, Schema};

use crate::arrays::array_over;
use crate::error::{storage_error, value_error};

/// How a batch hands out `uint32` columns (discrete action indices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IndexDType {
    /// As `int64` arrays, which PyTorch indexes and `gather`s with
    /// (`torch.from_numpy` gives `torch.int64`): the batch's own arrays, widened from the
    /// gathered rows by every sample. The default.
    Int64,
    /// As the stored `uint32`, views of the gathered rows (no widening).
    Uint32,
}

impl IndexDType {
    /// The `index_dtype=` argument of `new_batch`.
    pub(crate) fn parse(name: &str) -> PyResult<Self> {
        match name {
            "int64" => Ok(Self::Int64),
            "uint32" => Ok(Self::Uint32),
            other => Err(value_error(format!(
                "index_dtype is {other:?}: use \"int64\" (what torch indexes with, the default) or \"uint32\" (the stored dtype, no widening)"
            ))),
        }
    }
}

/// The memory of a batch: an `rl_storage::Batch`. The numpy arrays of a [`Batch`] are
/// views of its columns and keep it alive (it is their base object).
#[pyclass(module = "flatrl")]
#[derive(Debug)]
pub(crate) struct BatchMemory {
    pub(crate) inner: rl_storage::Batch,
}

/// Rows sampled from a buffer: one numpy array per column (`batch["obs"]`, shape
/// `(room, *column shape)`), `positions` (where each row is stored, for priority updates)
/// and `weights` (importance weights; 1 unless the sampler is prioritized).
///
/// Made once by `buffer.new_batch(rows)` and filled in place by every
/// `buffer.sample(batch)`: the arrays are the same objects after each sample, so
/// `torch.from_numpy(batch["obs"])` made once shares their memory and sees every new
/// sample without a copy. Columns stored as `uint32` (discrete actions) come out as
/// `int64` arrays, which torch indexes and `gather`s with (the batch widens them at
/// each sample); `new_batch(rows, index_dtype="uint32")` keeps the stored dtype.
#[pyclass(module = "flatrl")]
#[derive(Debug)]
pub struct Batch {
    pub(crate) memory: Py<BatchMemory>,
    /// Name -> full-room view, in schema order.
    columns: Py<PyDict>,
    positions: Py<PyArray1<usize>>,
    weights: Py<PyArray1<f32>>,
    /// `uint32` columns handed out as `int64`: the column's index and its array.
    wide: Vec<(usize, Py<PyArrayDyn<i64>>)>,
    room: usize,
    len: usize,
}

impl Batch {
    /// A batch with room for `rows` rows of `schema`, `uint32` columns handed out as
    /// `index`.
    pub(crate) fn create(
        py: Python<'_>,
        schema: &Schema,
        rows: usize,
        indices: IndexDType,
    ) -> PyResult<Self> {
        let inner = rl_storage::Batch::new(schema, rows).map_err(storage_error)?;
        let memory = Bound::new(py, BatchMemory { inner })?;
        let columns = PyDict::new(py);
        let mut wide = Vec::new();
        {
            let mut guard = memory.borrow_mut();
            for (index, column) in schema.columns().iter().enumerate() {
                let data = guard.inner.column_bytes_mut(index).as_mut_ptr();
                let shape: Vec<usize> = std::iter::once(rows)
                    .chain(column.shape().iter().copied())
                    .collect();
                if column.dtype() == DType::U32 && indices == IndexDType::Int64 {
                    let array = PyArrayDyn::<i64>::zeros(py, IxDyn(&shape), false);
                    columns.set_item(column.name(), &array)?;
                    wide.push((index, array.unbind()));
                    continue;
                }
                // SAFETY: `column_bytes_mut` holds room for `rows` rows of the column, is
                // 64-byte aligned and never reallocated (an `rl_storage::Batch` does not
                // grow); `memory` owns it and becomes the base of the array. Rust code
                // re-borrows these bytes only through `BatchMemory`'s exclusive borrow
                // while sampling, with no Python code running on them.
                let array = unsafe { array_over(memory.as_any(), data, column.dtype(), &shape)? };
                columns.set_item(column.name(), array)?;
            }
        }
        Ok(Self {
            memory: memory.unbind(),
            columns: columns.unbind(),
            positions: PyArray1::zeros(py, rows, false).unbind(),
            weights: PyArray1::from_vec(py, vec![1.0f32; rows]).unbind(),
            wide,
            room: rows,
            len: 0,
        })
    }

    /// Copies the positions and weights of the last sample into the batch's arrays.
    pub(crate) fn after_sample(&mut self, py: Python<'_>) -> PyResult<()> {
        let memory = self.memory.borrow(py);
        let inner = &memory.inner;
        self.len = inner.len();
        let mut positions = self.positions.bind(py).readwrite();
        positions.as_slice_mut()?[..self.len].copy_from_slice(inner.positions());
        let mut weights = self.weights.bind(py).readwrite();
        weights.as_slice_mut()?[..self.len].copy_from_slice(inner.weights());
        for (index, array) in &self.wide {
            let gathered = inner.column_at::<u32>(*index).map_err(storage_error)?;
            let mut array = array.bind(py).readwrite();
            let out = array.as_slice_mut()?;
            for (o, &i) in out.iter_mut().zip(gathered) {
                *o = i64::from(i);
            }
        }
        Ok(())
    }
}

#[pymethods]
impl Batch {
    /// The rows of column `name` gathered by the last sample.
    fn __getitem__<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        self.columns
            .bind(py)
            .get_item(name)?
            .ok_or_else(|| PyKeyError::new_err(format!("no column `{name}` in this batch")))
    }

    /// Rows gathered by the last sample: 0 before the first, `room` after (every sampler
    /// fills the whole batch or raises).
    fn __len__(&self) -> usize {
        self.len
    }

    fn __contains__(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        self.columns.bind(py).contains(name)
    }

    /// The column names, in schema order.
    fn keys(&self, py: Python<'_>) -> Vec<String> {
        self.columns
            .bind(py)
            .keys()
            .iter()
            .filter_map(|k| k.extract().ok())
            .collect()
    }

    /// Rows the batch holds at most.
    #[getter]
    fn room(&self) -> usize {
        self.room
    }

    /// Storage positions of the sampled rows (`uint64`), for `update_priorities`.
    #[getter]
    fn positions<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<usize>> {
        self.positions.bind(py).clone()
    }

    /// Importance weights of the sampled rows (`float32`).
    #[getter]
    fn weights<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f32>> {
        self.weights.bind(py).clone()
    }

    /// A dict `name -> array` of every column (the arrays `batch[name]` returns).
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.columns.bind(py).copy()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Batch(rows={}, room={}, columns={:?})",
            self.len,
            self.room,
            self.keys(py)
        )
    }
}
