//! A trained agent from Python: `flatrl._flatrl.load_agent` restores a run directory's
//! policy with [`rl_train::agent::Agent`] (as `flatrl.evaluate` and `rl eval` restore
//! it) and `AgentCore` acts on 2-D float32 batches. `flatrl.load` (`python/flatrl/agent.py`)
//! wraps it in SB3's `predict(obs, state, episode_start, deterministic)`.

use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use numpy::{
    PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use rl_algos::policy::{History, Mode};
use rl_train::agent::{Agent, RecurrentState};
use rl_train::run::{ActionSpace, Which};

use crate::error::value_error;
use crate::gym::ErrorSlot;
use crate::train::cli_error;

/// A policy restored from a run directory (see `flatrl.load`, which wraps it).
#[pyclass(module = "flatrl")]
#[derive(Debug)]
pub struct AgentCore {
    agent: Mutex<Agent>,
    errors: ErrorSlot,
}

/// What `act_recurrent` returns: the actions and each row's next state.
type ActedWithState<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray2<f32>>);

/// The rows of a C-contiguous 2-D array as one slice.
fn rows<'a>(array: &'a PyReadonlyArray2<'_, f32>, what: &str) -> PyResult<&'a [f32]> {
    array.as_slice().map_err(|_| {
        value_error(format!(
            "{what} must be a C-contiguous float32 array: pass numpy.ascontiguousarray({what}, dtype=numpy.float32)"
        ))
    })
}

fn mode(deterministic: bool) -> Mode {
    if deterministic {
        Mode::Deterministic
    } else {
        Mode::Sample
    }
}

#[pymethods]
impl AgentCore {
    /// Actions for `obs` (`(rows, obs_len)` float32): `int64` `(rows,)` for discrete
    /// actions, `float32` `(rows, dim)` for a box.
    fn act<'py>(
        &self,
        py: Python<'py>,
        obs: PyReadonlyArray2<'py, f32>,
        deterministic: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut agent = self.agent.lock().unwrap_or_else(PoisonError::into_inner);
        agent.set_mode(mode(deterministic));
        let x = rows(&obs, "obs")?;
        let n = obs.shape()[0];
        match agent.action_space() {
            ActionSpace::Discrete(_) => {
                let mut actions = vec![0u32; n];
                agent
                    .act(x, &mut actions)
                    .map_err(|e| cli_error(e, &self.errors))?;
                let wide: Vec<i64> = actions.into_iter().map(i64::from).collect();
                Ok(PyArray1::from_vec(py, wide).into_any())
            }
            ActionSpace::Box(dim) => {
                let mut actions = vec![0.0f32; n * dim];
                agent
                    .act(x, &mut actions)
                    .map_err(|e| cli_error(e, &self.errors))?;
                let array = PyArray1::from_vec(py, actions).reshape([n, dim])?;
                Ok(array.into_any())
            }
        }
    }

    /// Actions (`int64` `(rows,)`) and each row's state after the step (`(rows,
    /// state_len)` float32) from `state` (`(rows, state_len)` float32) and
    /// `episode_start` (`(rows,)` bool: rows whose episode starts with this
    /// observation), for a recurrent policy.
    fn act_recurrent<'py>(
        &self,
        py: Python<'py>,
        obs: PyReadonlyArray2<'py, f32>,
        state: PyReadonlyArray2<'py, f32>,
        episode_start: PyReadonlyArray1<'py, bool>,
        deterministic: bool,
    ) -> PyResult<ActedWithState<'py>> {
        let mut agent = self.agent.lock().unwrap_or_else(PoisonError::into_inner);
        agent.set_mode(mode(deterministic));
        let n = obs.shape()[0];
        let state_len = agent.state_len();
        if state.shape() != [n, state_len] || episode_start.len() != n {
            return Err(value_error(format!(
                "state has shape {:?} and episode_start {} rows, but {n} observations need ({n}, {state_len}) and {n}: pass back the state predict returned",
                state.shape(),
                episode_start.len()
            )));
        }
        let mut held = RecurrentState::new(n, state_len);
        held.as_mut_slice().copy_from_slice(rows(&state, "state")?);
        held.episode_starts_mut()
            .copy_from_slice(episode_start.as_slice()?);
        let mut actions = vec![0u32; n];
        agent
            .act_recurrent(rows(&obs, "obs")?, &mut held, &mut actions)
            .map_err(|e| cli_error(e, &self.errors))?;
        let wide: Vec<i64> = actions.into_iter().map(i64::from).collect();
        let next = PyArray1::from_slice(py, held.as_slice()).reshape([n, state_len])?;
        Ok((PyArray1::from_vec(py, wide), next))
    }

    /// Floats of one observation.
    #[getter]
    fn obs_len(&self) -> usize {
        self.lock().obs_len()
    }

    /// The number of discrete actions, or `None` for a box.
    #[getter]
    fn n_actions(&self) -> Option<usize> {
        match self.lock().action_space() {
            ActionSpace::Discrete(n) => Some(n),
            ActionSpace::Box(_) => None,
        }
    }

    /// Floats of one action (1 for discrete actions).
    #[getter]
    fn action_len(&self) -> usize {
        self.lock().action_len()
    }

    /// Whether the policy is recurrent (acts with `act_recurrent`).
    #[getter]
    fn recurrent(&self) -> bool {
        self.lock().is_recurrent()
    }

    /// The widths a row of state splits into: `[hidden, hidden]` for an LSTM (`h`, `c`),
    /// `[(k - 1) * obs_len]` for a stack, `[0]` without history, `[]` when feed-forward.
    #[getter]
    fn state_parts(&self) -> Vec<usize> {
        let agent = self.lock();
        match agent.history() {
            None => Vec::new(),
            Some(History::Lstm { hidden }) => vec![hidden, hidden],
            Some(_) => vec![agent.state_len()],
        }
    }

    /// The algorithm that trained it (`"ppo"`, `"recurrent_ppo"`, `"sac"` ...).
    #[getter]
    fn algo(&self) -> &'static str {
        self.lock().algo().name()
    }

    /// The name of its environment.
    #[getter]
    fn env(&self) -> String {
        self.lock().env().to_owned()
    }

    /// Env steps of the run when the checkpoint was saved.
    #[getter]
    fn env_steps(&self) -> u64 {
        self.lock().env_steps()
    }
}

impl AgentCore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Agent> {
        self.agent.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The agent saved in `run_dir` (`best=True`: the best evaluation's checkpoint); `env`
/// as `flatrl.train` takes it, for a run on a Gymnasium environment.
#[pyfunction]
#[pyo3(signature = (run_dir, *, env=None, best=false))]
pub fn load_agent(
    py: Python<'_>,
    run_dir: PathBuf,
    env: Option<&Bound<'_, PyAny>>,
    best: bool,
) -> PyResult<AgentCore> {
    let (registry, errors) = crate::train::run_registry(py, &run_dir, env)?;
    let which = if best { Which::Best } else { Which::Latest };
    let agent = py
        .detach(|| Agent::load_with(&registry, &run_dir, which))
        .map_err(|e| cli_error(e, &errors))?;
    Ok(AgentCore {
        agent: Mutex::new(agent),
        errors,
    })
}
