//! `flatrl.DedupReplayBuffer`: each observation stored once; `next_obs` and frame stacks
//! rebuilt at sample time.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rl_core::{Column, DType, Field, Flag, NonFinite, Schema};
use rl_storage::ColumnSlice;
use rl_storage::dedup::AnyDedup;
use rl_storage::replay::with_storage;

use crate::arrays::{InputArray, columns_from_dict};
use crate::batch::{Batch, IndexDType};
use crate::error::{storage_error, value_error};
use crate::plan::{MemoryBudget, MemoryPlan};
use crate::replay::{RELEASE_GIL_BYTES, non_finite, stored_column};
use crate::sampler::SamplerSpec;
use crate::schema;
use crate::store::{self, Options};

/// A replay buffer of one stream of consecutive steps that stores each observation once:
/// the next observation of a step is the observation of the step after it. When a step
/// ends its episode (`terminated` or `truncated`), its final observation is stored in one
/// extra row, so `next_obs` stays exact at time-limit cuts.
///
/// With `frame_stack=k`, sampled `obs` and `next_obs` are stacks of the last `k` frames
/// (shape `(k, *obs shape)`), rebuilt from the stored frames and never crossing an episode
/// start: pixels are stored once instead of `2k` times. `schema` holds the transition
/// columns (it must have `obs`; `terminated` and `truncated` bool columns mark episode
/// ends); batches also get `next_obs`. Sampling is uniform.
#[pyclass(module = "flatrl")]
#[derive(Debug)]
pub struct DedupReplayBuffer {
    store: Option<AnyDedup>,
    /// The transition columns (the storage's minus `final_obs`).
    schema: Schema,
    batch_schema: Schema,
    obs: usize,
    ends: Vec<usize>,
    check_finite: bool,
    path: Option<PathBuf>,
}

impl DedupReplayBuffer {
    fn store(&mut self) -> PyResult<&mut AnyDedup> {
        self.store
            .as_mut()
            .ok_or_else(|| value_error("the buffer is closed"))
    }

    fn store_ref(&self) -> PyResult<&AnyDedup> {
        self.store
            .as_ref()
            .ok_or_else(|| value_error("the buffer is closed"))
    }

    fn from_store(store: AnyDedup, non_finite: NonFinite, path: Option<PathBuf>) -> PyResult<Self> {
        let (storage_schema, batch_schema) = (store.schema().clone(), store.batch_schema().clone());
        let columns = storage_schema.columns();
        let schema = Schema::new(columns[..columns.len() - 1].iter().cloned())
            .map_err(crate::error::core_error)?;
        let obs = schema
            .index_of(Field::Obs.name())
            .ok_or_else(|| value_error(format!("the schema has no `{}` column", Field::Obs)))?;
        let ends = [Field::Terminated, Field::Truncated]
            .iter()
            .filter_map(|field| schema.index_of(field.name()))
            .filter(|&i| schema.columns()[i].dtype() == DType::Bool)
            .collect();
        Ok(Self {
            store: Some(store),
            schema,
            batch_schema,
            obs,
            ends,
            check_finite: non_finite == NonFinite::Reject,
            path,
        })
    }

    /// Whether row `row` of the write ends an episode.
    fn ends_episode(&self, slices: &[ColumnSlice<'_>], row: usize) -> bool {
        self.ends.iter().any(|&i| match slices[i] {
            ColumnSlice::Bool(flags) => flags[row].get(),
            _ => false,
        })
    }
}

/// The single-row slice `row` of a column slice with `numel` elements per row.
fn row_of<'a>(slice: ColumnSlice<'a>, numel: usize, row: usize) -> ColumnSlice<'a> {
    let range = row * numel..(row + 1) * numel;
    match slice {
        ColumnSlice::F32(s) => ColumnSlice::F32(&s[range]),
        ColumnSlice::U32(s) => ColumnSlice::U32(&s[range]),
        ColumnSlice::I64(s) => ColumnSlice::I64(&s[range]),
        ColumnSlice::U8(s) => ColumnSlice::U8(&s[range]),
        ColumnSlice::Bool(s) => ColumnSlice::Bool(&s[range]),
    }
}

/// The first non-finite value of a float slice, as `(element, value)`.
fn first_non_finite(slice: &ColumnSlice<'_>) -> Option<(usize, f32)> {
    match slice {
        ColumnSlice::F32(s) => s.iter().position(|v| !v.is_finite()).map(|i| (i, s[i])),
        _ => None,
    }
}

#[pymethods]
impl DedupReplayBuffer {
    #[new]
    #[pyo3(signature = (schema, capacity, *, frame_stack=1, path=None, seed=0, budget=None, allow_non_finite=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        schema: &Bound<'_, PyAny>,
        capacity: usize,
        frame_stack: usize,
        path: Option<PathBuf>,
        seed: u64,
        budget: Option<&MemoryBudget>,
        allow_non_finite: bool,
    ) -> PyResult<Self> {
        let schema = schema::from_dict(schema)?;
        let policy = non_finite(allow_non_finite);
        let options = Options {
            path: path.as_deref(),
            sampler: SamplerSpec::Uniform(seed),
            budget: budget.map(|b| b.inner),
            non_finite: policy,
        };
        let store = store::create_dedup(&schema, capacity, frame_stack, &options)?;
        Self::from_store(store, policy, path)
    }

    /// Reopens a memmap buffer at its last commit.
    #[staticmethod]
    #[pyo3(signature = (path, *, frame_stack=1, seed=0, allow_non_finite=false))]
    fn open(
        path: PathBuf,
        frame_stack: usize,
        seed: u64,
        allow_non_finite: bool,
    ) -> PyResult<Self> {
        let policy = non_finite(allow_non_finite);
        let store = store::open_dedup(&path, frame_stack, &SamplerSpec::Uniform(seed), policy)?;
        Self::from_store(store, policy, Some(path))
    }

    /// The plan of a buffer before it exists (`memmap=True` for a file).
    #[staticmethod]
    #[pyo3(signature = (schema, capacity, *, memmap=false))]
    fn plan(schema: &Bound<'_, PyAny>, capacity: usize, memmap: bool) -> PyResult<MemoryPlan> {
        let schema = schema::from_dict(schema)?;
        let storage = rl_storage::dedup::DedupReplay::<rl_storage::ram::RamStorage>::schema(
            schema.columns().iter().cloned(),
        )
        .map_err(storage_error)?;
        store::plan(&storage, capacity, memmap, &SamplerSpec::Uniform(0)).map(MemoryPlan::from)
    }

    /// Appends consecutive steps: one array per transition column, `(n, *shape)`. Where a
    /// step ends its episode, row `i` of `final_obs` (shaped like `obs`) is its final
    /// observation; `final_obs` may be `None` when no step ends one. Everything is
    /// checked first; on error nothing changes. Returns `n`.
    #[pyo3(signature = (columns, final_obs=None))]
    fn extend(
        &mut self,
        py: Python<'_>,
        columns: &Bound<'_, PyAny>,
        final_obs: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let (arrays, rows) = columns_from_dict(&self.schema, columns)?;
        let obs_column = self.schema.columns()[self.obs].clone();
        let finals = match final_obs {
            None => None,
            Some(value) => {
                let final_column = Column::new("final_obs", obs_column.dtype(), obs_column.shape());
                let (array, n) = InputArray::new(&final_column, value, false)?;
                if n != rows {
                    return Err(value_error(format!(
                        "column `final_obs` has {n} rows but the columns have {rows}: give one (possibly unused) row per step; nothing was written"
                    )));
                }
                Some(array)
            }
        };
        let slices: Vec<ColumnSlice<'_>> = arrays.iter().map(InputArray::slice).collect();
        let final_slice = finals.as_ref().map(InputArray::slice);
        // Check everything a row-by-row write could refuse half-way.
        let ending: Vec<usize> = (0..rows)
            .filter(|&r| self.ends_episode(&slices, r))
            .collect();
        if let (Some(&row), None) = (ending.first(), &final_slice) {
            return Err(value_error(format!(
                "step {row} ends its episode but final_obs is None: pass the final observations; nothing was written"
            )));
        }
        if self.check_finite {
            for (column, slice) in self.schema.columns().iter().zip(&slices) {
                if let Some((element, value)) = first_non_finite(slice) {
                    return Err(value_error(format!(
                        "column `{}` row {} is {value}: non-finite values are rejected (or create the buffer with allow_non_finite=True); nothing was written",
                        column.name(),
                        element / column.numel()
                    )));
                }
            }
            if let Some(slice) = &final_slice {
                let numel = obs_column.numel();
                for &row in &ending {
                    if let Some((_, value)) = first_non_finite(&row_of(*slice, numel, row)) {
                        return Err(value_error(format!(
                            "column `final_obs` row {row} is {value}: non-finite values are rejected; nothing was written"
                        )));
                    }
                }
            }
        }
        let numels: Vec<usize> = self.schema.columns().iter().map(Column::numel).collect();
        let obs_numel = obs_column.numel();
        let bytes: usize = slices.iter().map(|s| s.as_bytes().len()).sum();
        let store = self.store()?;
        let ends_at: Vec<bool> = {
            let mut flags = vec![false; rows];
            for &row in &ending {
                flags[row] = true;
            }
            flags
        };
        let mut run = move || -> rl_storage::Result<()> {
            let mut row_slices = slices.clone();
            for (row, &ends) in ends_at.iter().enumerate() {
                for (target, (&slice, &numel)) in
                    row_slices.iter_mut().zip(slices.iter().zip(&numels))
                {
                    *target = row_of(slice, numel, row);
                }
                let last = ends
                    .then(|| final_slice.map(|s| row_of(s, obs_numel, row)))
                    .flatten();
                store.push_step(&row_slices, last)?;
            }
            Ok(())
        };
        if bytes >= RELEASE_GIL_BYTES {
            py.detach(run)
        } else {
            run()
        }
        .map_err(storage_error)?;
        Ok(rows)
    }

    /// A batch with room for `rows` transitions (with `next_obs`, stacked if asked);
    /// `uint32` columns come out as `int64` (`index_dtype="uint32"`: as stored).
    #[pyo3(signature = (rows, index_dtype="int64"))]
    fn new_batch(&self, py: Python<'_>, rows: usize, index_dtype: &str) -> PyResult<Batch> {
        Batch::create(
            py,
            &self.batch_schema,
            rows,
            IndexDType::parse(index_dtype)?,
        )
    }

    /// Samples `batch.room` transitions into `batch` (in place) and returns it.
    fn sample<'py>(
        &mut self,
        py: Python<'py>,
        batch: Bound<'py, Batch>,
    ) -> PyResult<Bound<'py, Batch>> {
        let bytes = self.batch_schema.row_bytes();
        let store = self.store()?;
        {
            let mut b = batch.borrow_mut();
            {
                let mut memory = b.memory.borrow_mut(py);
                let inner = &mut memory.inner;
                let large = inner.room() * bytes >= RELEASE_GIL_BYTES;
                let mut run = move || store.sample(inner);
                if large { py.detach(run) } else { run() }.map_err(storage_error)?;
            }
            b.after_sample(py)?;
        }
        Ok(batch)
    }

    /// Makes every row written so far durable (memmap); a no-op in RAM.
    fn commit(&mut self, py: Python<'_>) -> PyResult<()> {
        let store = self.store()?;
        py.detach(|| store.commit()).map_err(storage_error)
    }

    /// Releases the storage (and a memmap file's lock).
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

    /// Rows stored (steps plus one final row per ended episode).
    fn __len__(&self) -> PyResult<usize> {
        Ok(self.store_ref()?.len())
    }

    /// Rows the buffer holds at most.
    #[getter]
    fn capacity(&self) -> PyResult<usize> {
        Ok(self.store_ref()?.capacity())
    }

    /// Episodes ever completed.
    #[getter]
    fn episodes(&self) -> PyResult<u64> {
        Ok(self.store_ref()?.ring().episodes)
    }

    /// The memmap file, or `None` in RAM.
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.path.clone()
    }

    /// The transition schema as a dict `name -> (dtype, shape)`.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        schema::to_dict(py, &self.schema)
    }

    /// The schema of sampled batches (with `next_obs`, stacked observations).
    #[getter]
    fn batch_schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        schema::to_dict(py, &self.batch_schema)
    }

    /// What the buffer holds, line by line.
    #[getter]
    fn memory_plan(&self) -> PyResult<MemoryPlan> {
        Ok(self.store_ref()?.memory_plan().into())
    }

    /// A copy of the stored rows of storage column `name` (`final_obs` included),
    /// oldest first.
    fn column<'py>(
        &self,
        py: Python<'py>,
        name: &str,
    ) -> PyResult<Bound<'py, numpy::PyUntypedArray>> {
        with_storage!(self.store_ref()?, b => {
            let index = b.buffer().schema().index_of(name).ok_or_else(|| {
                value_error(format!("no column `{name}` in this buffer"))
            })?;
            stored_column(py, b.buffer(), index)
        })
    }

    fn __repr__(&self) -> String {
        match &self.store {
            None => "DedupReplayBuffer(closed)".to_owned(),
            Some(store) => {
                format!(
                    "DedupReplayBuffer({}/{} rows)",
                    store.len(),
                    store.capacity()
                )
            }
        }
    }
}

/// `Flag` is one byte (numpy bool), which the zero-copy input relies on.
const _: () = assert!(size_of::<Flag>() == 1);
