//! Collection in other processes (Ray actors, `flatrl.ray`), Rust side:
//!
//! - `flatrl.RemoteCollector`: what a collecting process holds, a collector over its own
//!   environments acting with a copy of the learner's actor
//!   ([`rl_train::trainer::ChunkActor`]); it fills one chunk per `collect` (a dict of
//!   numpy arrays and the episodes it finished) and takes weights as checkpoint bytes.
//! - `flatrl.train_remote`: trains a config into a run directory (as `flatrl.train`)
//!   from the chunks a Python feed object delivers: `feed.next_chunk()` returns
//!   `(columns, episodes)`, `feed.publish(version, env_steps, weights)` takes the
//!   learner's weights after every training phase. The feed's exceptions reach the
//!   caller unchanged.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use numpy::PyUntypedArray;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use rl_core::{Location, MemoryPlan, Schema};
use rl_storage::ColumnSlice;
use rl_train::run as cli;
use rl_train::trainer::{ChunkActor, ChunkConfig, ChunkSink, ChunkSource, Episode};

use crate::arrays::{InputArray, columns_from_dict};
use crate::gym::ErrorSlot;
use crate::replay::column_array;
use crate::schema;
use crate::train::{cli_error, options, prepare, result_dict};

/// A finished episode as Python sees it: `(return, length, terminated)`.
type EpisodeTuple = (f32, u32, bool);

/// A collector for a remote run: `run.n_envs` environments of the config, acting with
/// the learner's weights as last given, one chunk of `steps_per_chunk` steps of every
/// environment per `collect`.
#[pyclass(module = "flatrl")]
#[derive(Debug)]
pub struct RemoteCollector {
    /// A mutex only to make the class `Sync`, as PyO3 requires: methods that change it
    /// take `&mut self` (PyO3's borrow checking), which reaches it without locking.
    inner: Mutex<Box<dyn ChunkActor>>,
    errors: ErrorSlot,
}

fn algos_error(err: rl_algos::Error, errors: &ErrorSlot) -> PyErr {
    cli_error(cli::Error::Algos(err), errors)
}

#[pymethods]
impl RemoteCollector {
    /// `config`: a dict, TOML text or a TOML file (an off-policy algorithm); `env` as
    /// for `flatrl.train`. Environment `i` is first reset with `seed + i`; the first
    /// `random_frames` env steps act at random.
    #[new]
    #[pyo3(signature = (config, *, steps_per_chunk, env=None, overrides=Vec::new(), random_frames=0, seed=0))]
    fn new(
        py: Python<'_>,
        config: &Bound<'_, PyAny>,
        steps_per_chunk: usize,
        env: Option<&Bound<'_, PyAny>>,
        overrides: Vec<String>,
        random_frames: u64,
        seed: u64,
    ) -> PyResult<Self> {
        let (config, registry, errors) = prepare(py, config, &overrides, env)?;
        let chunk = ChunkConfig {
            steps_per_chunk,
            random_frames,
            seed,
        };
        let inner = py
            .detach(|| cli::remote_actor(&registry, &config, chunk))
            .map_err(|e| cli_error(e, &errors))?;
        Ok(Self {
            inner: Mutex::new(inner),
            errors,
        })
    }

    /// Transitions per chunk.
    #[getter]
    fn rows(&self) -> usize {
        self.lock().rows()
    }

    /// The version of the weights it acts with (0: the learner as built).
    #[getter]
    fn version(&self) -> u64 {
        self.lock().version()
    }

    /// Takes the weights `feed.publish` received; on error nothing changes.
    fn set_weights(&mut self, version: u64, env_steps: u64, weights: &[u8]) -> PyResult<()> {
        let set = self.actor().set_weights(version, env_steps, weights);
        set.map_err(|e| algos_error(e, &self.errors))
    }

    /// Fills the next chunk: `(columns, episodes)`, a dict `name -> array` of `rows`
    /// rows per column (the learner's replay columns) and `[(return, length,
    /// terminated)]` for the episodes it finished.
    fn collect<'py>(
        &mut self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyDict>, Vec<EpisodeTuple>)> {
        let errors = &self.errors;
        let inner = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        let episodes = py
            .detach(|| {
                inner.collect().map(|episodes| {
                    episodes
                        .iter()
                        .map(|e| (e.episode_return, e.length, e.terminated))
                        .collect::<Vec<_>>()
                })
            })
            .map_err(|e| algos_error(e, errors))?;
        let columns = PyDict::new(py);
        let rows = inner.rows();
        for (index, column) in inner.schema().columns().iter().enumerate() {
            let slice = inner.column(index).map_err(|e| algos_error(e, errors))?;
            let array: Bound<'py, PyUntypedArray> =
                column_array(py, column, slice.as_bytes().to_vec(), rows)?;
            columns.set_item(column.name(), array)?;
        }
        Ok((columns, episodes))
    }

    /// The chunk's columns: `name -> (dtype, shape)`, as a `flatrl.ReplayBuffer` schema.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        schema::to_dict(py, self.lock().schema())
    }

    fn __repr__(&self) -> String {
        let inner = self.lock();
        format!(
            "RemoteCollector({} rows per chunk, weights version {})",
            inner.rows(),
            inner.version()
        )
    }
}

impl RemoteCollector {
    fn lock(&self) -> std::sync::MutexGuard<'_, Box<dyn ChunkActor>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn actor(&mut self) -> &mut Box<dyn ChunkActor> {
        self.inner.get_mut().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A Python feed as the trainer's [`ChunkSource`].
struct Feed {
    feed: Py<PyAny>,
    rows_in_flight: usize,
    errors: ErrorSlot,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("rows_in_flight", &self.rows_in_flight)
            .finish_non_exhaustive()
    }
}

impl Feed {
    /// Keeps the feed's exception for the caller; the trainer sees a `Remote` error.
    fn fail(&self, call: &str, err: PyErr) -> rl_algos::Error {
        let message = format!("feed.{call}: {err}");
        self.errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_or_insert(err);
        rl_algos::Error::Remote(message)
    }
}

impl ChunkSource for Feed {
    fn next_chunk(&mut self, sink: &mut ChunkSink<'_>) -> rl_algos::Result<()> {
        Python::attach(|py| {
            let read = (|| -> PyResult<_> {
                let out = self.feed.bind(py).call_method0("next_chunk")?;
                let (columns, episodes): (Bound<'_, PyAny>, Vec<EpisodeTuple>) = out.extract()?;
                Ok((columns, episodes))
            })();
            let (columns, episodes) = read.map_err(|err| self.fail("next_chunk", err))?;
            // Checked whole before anything is written.
            let (arrays, _) = columns_from_dict(sink.schema(), &columns)
                .map_err(|err| self.fail("next_chunk", err))?;
            let slices: Vec<ColumnSlice<'_>> = arrays.iter().map(InputArray::slice).collect();
            sink.extend(&slices)?;
            for (episode_return, length, terminated) in episodes {
                sink.episode(Episode {
                    episode_return,
                    length,
                    terminated,
                });
            }
            Ok(())
        })
    }

    fn publish(&mut self, version: u64, env_steps: u64, weights: &[u8]) -> rl_algos::Result<()> {
        Python::attach(|py| {
            let weights = PyBytes::new(py, weights);
            self.feed
                .bind(py)
                .call_method1("publish", (version, env_steps, weights))
                .map(|_| ())
                .map_err(|err| self.fail("publish", err))
        })
    }

    fn memory_plan(&self, schema: &Schema) -> MemoryPlan {
        let mut plan = MemoryPlan::new();
        plan.add(
            "remote/chunks_in_flight",
            Location::Ram,
            (self.rows_in_flight * schema.row_bytes()) as u64,
        );
        plan
    }
}

/// Trains `config` (an off-policy algorithm) into the new run directory `run_dir` from
/// the chunks `feed` delivers; returns the run's result (as `flatrl.train`).
/// `rows_in_flight`: the most rows the feed holds at once (its chunks in flight), for
/// the memory plan.
#[pyfunction]
#[pyo3(signature = (config, run_dir, feed, *, rows_in_flight, env=None, overrides=Vec::new(), verbose=false))]
#[allow(
    clippy::too_many_arguments,
    reason = "the keyword arguments of a Python function"
)]
pub fn train_remote<'py>(
    py: Python<'py>,
    config: &Bound<'py, PyAny>,
    run_dir: PathBuf,
    feed: &Bound<'py, PyAny>,
    rows_in_flight: usize,
    env: Option<&Bound<'py, PyAny>>,
    overrides: Vec<String>,
    verbose: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (config, registry, errors) = prepare(py, config, &overrides, env)?;
    let source = Box::new(Feed {
        feed: feed.clone().unbind(),
        rows_in_flight,
        errors: errors.clone(),
    });
    let options = options(verbose, Vec::new());
    let trained = py
        .detach(|| cli::train_remote(&registry, &config, &run_dir, &options, source))
        .map_err(|e| cli_error(e, &errors))?;
    result_dict(py, &trained)
}
