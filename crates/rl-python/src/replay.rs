//! `flatrl.ReplayBuffer`: a FIFO replay buffer in RAM or a memmap file, numpy in and out.

use std::path::PathBuf;

use numpy::{PyArray1, PyArrayMethods, PyUntypedArray};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rl_core::{NonFinite, Schema};
use rl_storage::ColumnSlice;
use rl_storage::replay::{AnyReplay, with_storage};
use rl_storage::storage::HostStorage;

use crate::arrays::{InputArray, columns_from_dict};
use crate::batch::{Batch, IndexDType};
use crate::error::{storage_error, value_error};
use crate::plan::{MemoryBudget, MemoryPlan};
use crate::sampler::{self, SamplerSpec};
use crate::schema;
use crate::store::{self, Options};

/// Bytes of a write or gather above which the GIL is released while Rust copies.
pub(crate) const RELEASE_GIL_BYTES: usize = 64 << 10;

/// A fixed-capacity FIFO replay buffer (the oldest rows are overwritten first) in RAM or,
/// with `path`, in a memmap file that survives crashes once committed.
///
/// `schema` maps column names to `(dtype, shape)`, e.g.
/// `{"obs": ("float32", (4,)), "action": ("uint32", ()), "reward": ("float32", ())}`.
/// The memory is planned, checked against `budget`, and allocated once at construction.
/// With `threads=N` (N > 1) a sample of 256 KiB or more is gathered on N threads (a pool
/// made once, rows split between them; the same batch bit for bit), for batches whose
/// copy one core's memory traffic bounds.
#[pyclass(module = "flatrl")]
#[derive(Debug)]
pub struct ReplayBuffer {
    store: Option<AnyReplay>,
    schema: Schema,
    path: Option<PathBuf>,
    /// Positions converted from a caller's array for `update_priorities`, reused.
    positions: Vec<usize>,
    /// The threads large gathers are split over (`threads=`; `None`: the caller's).
    pool: Option<Threads>,
}

/// A thread pool for a buffer's gathers.
#[derive(Debug)]
struct Threads(rl_nn::Pool);

impl rl_storage::Parallel for Threads {
    fn threads(&self) -> usize {
        self.0.threads()
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        self.0.run(tasks, task);
    }
}

/// Bytes of a sample above which it is split over the buffer's threads.
const SPLIT_GATHER_BYTES: usize = 256 << 10;

impl ReplayBuffer {
    /// The buffer, or a `ValueError` once closed.
    pub(crate) fn store(&mut self) -> PyResult<&mut AnyReplay> {
        self.store
            .as_mut()
            .ok_or_else(|| value_error("the buffer is closed"))
    }

    fn store_ref(&self) -> PyResult<&AnyReplay> {
        self.store
            .as_ref()
            .ok_or_else(|| value_error("the buffer is closed"))
    }

    fn from_store(store: AnyReplay, path: Option<PathBuf>) -> Self {
        let schema = store.schema().clone();
        Self {
            store: Some(store),
            schema,
            path,
            positions: Vec::new(),
            pool: None,
        }
    }

    /// With `threads` threads for large samples (1: none).
    fn with_threads(mut self, threads: usize) -> PyResult<Self> {
        if threads > 1 {
            let pool =
                rl_nn::Pool::new(threads).map_err(|e| value_error(format!("threads: {e}")))?;
            self.pool = Some(Threads(pool));
        } else if threads == 0 {
            return Err(value_error(
                "threads is 0: use 1 (sample on the calling thread) or more",
            ));
        }
        Ok(self)
    }
}

/// `NonFinite` from the Python flag.
pub(crate) fn non_finite(allow: bool) -> NonFinite {
    if allow {
        NonFinite::Allow
    } else {
        NonFinite::Reject
    }
}

/// Positions from a numpy integer array (uint64 or int64, non-negative) into `out`.
pub(crate) fn positions_from(array: &Bound<'_, PyAny>, out: &mut Vec<usize>) -> PyResult<()> {
    out.clear();
    if let Ok(a) = array.cast::<PyArray1<usize>>() {
        out.extend_from_slice(a.readonly().as_slice()?);
        return Ok(());
    }
    if let Ok(a) = array.cast::<PyArray1<i64>>() {
        for &p in a.readonly().as_array() {
            out.push(usize::try_from(p).map_err(|_| {
                value_error(format!(
                    "position {p} is negative: pass batch.positions; nothing was changed"
                ))
            })?);
        }
        return Ok(());
    }
    Err(value_error(
        "positions must be a 1-d numpy array of uint64 or int64 (pass batch.positions)",
    ))
}

/// Priorities from a 1-d float32 (or float64) array.
pub(crate) fn priorities_from(array: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
    if let Ok(a) = array.cast::<PyArray1<f32>>() {
        return Ok(a.readonly().as_array().to_vec());
    }
    if let Ok(a) = array.cast::<PyArray1<f64>>() {
        return Ok(a.readonly().as_array().iter().map(|&p| p as f32).collect());
    }
    Err(value_error(
        "priorities must be a 1-d numpy array of float32 or float64",
    ))
}

/// A new array holding the stored rows of column `index`, oldest first.
pub(crate) fn stored_column<'py, S: HostStorage, P: rl_storage::sampler::Sampler>(
    py: Python<'py>,
    buffer: &rl_storage::replay::ReplayBuffer<S, P>,
    index: usize,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let column = &buffer.schema().columns()[index];
    let row_bytes = column.row_bytes();
    let source = buffer.storage().column(index);
    let mut bytes = Vec::with_capacity(buffer.len() * row_bytes);
    for position in buffer.positions() {
        bytes.extend_from_slice(&source[position * row_bytes..(position + 1) * row_bytes]);
    }
    column_array(py, column, bytes, buffer.len())
}

/// A numpy array of `rows` rows of `column` from their bytes (taken, not copied).
pub(crate) fn column_array<'py>(
    py: Python<'py>,
    column: &rl_core::Column,
    bytes: Vec<u8>,
    rows: usize,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let flat = PyArray1::from_vec(py, bytes);
    let shape: Vec<usize> = std::iter::once(rows)
        .chain(column.shape().iter().copied())
        .collect();
    flat.call_method1("view", (schema::descr(py, column.dtype()),))?
        .call_method1("reshape", (shape,))?
        .cast_into::<PyUntypedArray>()
        .map_err(PyErr::from)
}

/// Writes checked input arrays, releasing the GIL for large writes.
pub(crate) fn write(
    py: Python<'_>,
    store: &mut AnyReplay,
    arrays: &[InputArray<'_>],
    rows: usize,
) -> PyResult<usize> {
    let slices: Vec<ColumnSlice<'_>> = arrays.iter().map(InputArray::slice).collect();
    let bytes: usize = slices.iter().map(|s| s.as_bytes().len()).sum();
    let mut run = move || store.extend(&slices);
    let written = if bytes >= RELEASE_GIL_BYTES {
        py.detach(run)
    } else {
        run()
    }
    .map_err(storage_error)?;
    debug_assert_eq!(written, rows);
    Ok(written)
}

#[pymethods]
impl ReplayBuffer {
    #[new]
    #[pyo3(signature = (schema, capacity, *, path=None, sampler=None, budget=None, allow_non_finite=false, threads=1))]
    fn new(
        schema: &Bound<'_, PyAny>,
        capacity: usize,
        path: Option<PathBuf>,
        sampler: Option<&Bound<'_, PyAny>>,
        budget: Option<&MemoryBudget>,
        allow_non_finite: bool,
        threads: usize,
    ) -> PyResult<Self> {
        let schema = schema::from_dict(schema)?;
        let options = Options {
            path: path.as_deref(),
            sampler: SamplerSpec::extract(sampler)?,
            budget: budget.map(|b| b.inner),
            non_finite: non_finite(allow_non_finite),
        };
        let store = store::create_replay(&schema, capacity, &options)?;
        Self::from_store(store, path).with_threads(threads)
    }

    /// Reopens a memmap buffer at its last commit (rows written after it are gone). The
    /// sampler starts fresh (priorities are not stored in the file).
    #[staticmethod]
    #[pyo3(signature = (path, *, sampler=None, allow_non_finite=false))]
    fn open(
        path: PathBuf,
        sampler: Option<&Bound<'_, PyAny>>,
        allow_non_finite: bool,
    ) -> PyResult<Self> {
        let spec = SamplerSpec::extract(sampler)?;
        let store = store::open_replay(&path, &spec, non_finite(allow_non_finite))?;
        Ok(Self::from_store(store, Some(path)))
    }

    /// The plan of a buffer before it exists: `memmap=True` for a file.
    #[staticmethod]
    #[pyo3(signature = (schema, capacity, *, memmap=false, sampler=None))]
    fn plan(
        schema: &Bound<'_, PyAny>,
        capacity: usize,
        memmap: bool,
        sampler: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<MemoryPlan> {
        let schema = schema::from_dict(schema)?;
        let spec = SamplerSpec::extract(sampler)?;
        store::plan(&schema, capacity, memmap, &spec).map(MemoryPlan::from)
    }

    /// Appends rows: a dict with one array per column, each `(n, *shape)` of the
    /// column's dtype. Everything is checked first; on error nothing changes. Returns `n`.
    fn extend(&mut self, py: Python<'_>, columns: &Bound<'_, PyAny>) -> PyResult<usize> {
        let (arrays, rows) = columns_from_dict(&self.schema, columns)?;
        write(py, self.store()?, &arrays, rows)
    }

    /// A batch with room for `rows` rows, to pass to `sample` again and again;
    /// `uint32` columns come out as `int64` (`index_dtype="uint32"`: as stored).
    #[pyo3(signature = (rows, index_dtype="int64"))]
    fn new_batch(&self, py: Python<'_>, rows: usize, index_dtype: &str) -> PyResult<Batch> {
        Batch::create(py, &self.schema, rows, IndexDType::parse(index_dtype)?)
    }

    /// Samples `batch.room` rows into `batch` (in place) and returns it.
    fn sample<'py>(
        &mut self,
        py: Python<'py>,
        batch: Bound<'py, Batch>,
    ) -> PyResult<Bound<'py, Batch>> {
        let row_bytes = self.schema.row_bytes();
        let Self { store, pool, .. } = self;
        let store = store
            .as_mut()
            .ok_or_else(|| value_error("the buffer is closed"))?;
        {
            let mut b = batch.borrow_mut();
            {
                let mut memory = b.memory.borrow_mut(py);
                let inner = &mut memory.inner;
                let bytes = inner.room() * row_bytes;
                let pool = pool.as_ref().filter(|_| bytes >= SPLIT_GATHER_BYTES);
                let mut run = move || match pool {
                    Some(pool) => store.sample_on(inner, pool),
                    None => store.sample(inner),
                };
                if bytes >= RELEASE_GIL_BYTES {
                    py.detach(run)
                } else {
                    run()
                }
                .map_err(storage_error)?;
            }
            b.after_sample(py)?;
        }
        Ok(batch)
    }

    /// Sets the priorities of the rows at `positions` (from `batch.positions`), e.g. to
    /// their absolute TD errors. Prioritized sampler only. Nothing changes on error.
    fn update_priorities(
        &mut self,
        positions: &Bound<'_, PyAny>,
        priorities: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let mut scratch = std::mem::take(&mut self.positions);
        let result = positions_from(positions, &mut scratch).and_then(|()| {
            let priorities = priorities_from(priorities)?;
            let store = self.store()?;
            sampler::prioritized(store.sampler_mut())?
                .update_priorities(&scratch, &priorities)
                .map_err(storage_error)
        });
        self.positions = scratch;
        result
    }

    /// Sets the importance-weight exponent of a prioritized sampler (anneal it to 1).
    fn set_beta(&mut self, beta: f64) -> PyResult<()> {
        let store = self.store()?;
        sampler::prioritized(store.sampler_mut())?
            .set_beta(beta)
            .map_err(storage_error)
    }

    /// Makes every row written so far durable (memmap); a no-op in RAM.
    fn commit(&mut self, py: Python<'_>) -> PyResult<()> {
        let store = self.store()?;
        py.detach(|| store.commit()).map_err(storage_error)
    }

    /// Releases the storage (and a memmap file's lock). Uncommitted rows of a memmap
    /// buffer are not committed. Later calls raise `ValueError`.
    fn close(&mut self) {
        self.store = None;
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) {
        self.close();
    }

    /// Rows stored.
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.store_ref()?.len())
    }

    /// Rows the buffer holds at most.
    #[getter]
    fn capacity(&self) -> PyResult<usize> {
        Ok(self.store_ref()?.capacity())
    }

    /// Rows ever written.
    #[getter]
    fn written(&self) -> PyResult<u64> {
        Ok(self.store_ref()?.ring().written)
    }

    /// Episodes ever completed (rows with `terminated` or `truncated` set).
    #[getter]
    fn episodes(&self) -> PyResult<u64> {
        Ok(self.store_ref()?.ring().episodes)
    }

    /// The memmap file, or `None` in RAM.
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.path.clone()
    }

    /// The schema as a dict `name -> (dtype, shape)`.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        schema::to_dict(py, &self.schema)
    }

    /// What the buffer holds, line by line.
    #[getter]
    fn memory_plan(&self) -> PyResult<MemoryPlan> {
        Ok(self.store_ref()?.memory_plan().into())
    }

    /// A copy of the stored rows of column `name`, oldest first.
    fn column<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyUntypedArray>> {
        let index = self
            .schema
            .index_of(name)
            .ok_or_else(|| value_error(format!("no column `{name}` in this buffer")))?;
        with_storage!(self.store_ref()?, b => stored_column(py, b, index))
    }

    fn __repr__(&self) -> String {
        let state = match &self.store {
            None => "closed".to_owned(),
            Some(store) => {
                format!("{}/{} rows", store.len(), store.capacity())
            }
        };
        let place = self
            .path
            .as_ref()
            .map_or_else(|| "RAM".to_owned(), |p| format!("file {}", p.display()));
        format!("ReplayBuffer({state}, {place})")
    }
}
