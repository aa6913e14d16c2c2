//! The Rust environments of `rl-envs`, `N` copies stepped in one call, for the Python
//! class `flatrl.VectorEnv` (a `gymnasium.vector.VectorEnv`).
//!
//! [`VecEnvCore`] owns the environments and the output arrays (allocated once); the Python
//! class adds Gymnasium's spaces, copies and info dicts. Actions are all checked before
//! any environment steps, so a bad action changes nothing.

use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use rl_core::{Element, Env, Space};
use rl_envs::{CartPole, LargeDiscrete, MaskedCartPole, Pendulum};

use crate::arrays::slice_mut;
use crate::error::{core_error, value_error};

/// Environment ids `VecEnvCore` knows.
pub const ENV_IDS: [&str; 4] = [
    "CartPole-v1",
    "MaskedCartPole-v1",
    "Pendulum-v1",
    "LargeDiscrete-v0",
];

/// When finished episodes restart (Gymnasium's `AutoresetMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Autoreset {
    /// The step after an episode ends resets that environment (its action is ignored,
    /// reward 0, flags false). Gymnasium's default.
    NextStep,
    /// The step that ends an episode resets the environment at once and returns the
    /// reset observation; the final one is in `final_obs`.
    SameStep,
}

/// Actions as the caller gave them, before conversion.
#[derive(Clone, Copy, Debug)]
enum ActionsIn<'a> {
    I64(&'a [i64]),
    I32(&'a [i32]),
    U32(&'a [u32]),
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl ActionsIn<'_> {
    fn len(&self) -> usize {
        match self {
            Self::I64(a) => a.len(),
            Self::I32(a) => a.len(),
            Self::U32(a) => a.len(),
            Self::F32(a) => a.len(),
            Self::F64(a) => a.len(),
        }
    }

    /// Element `i` as `f64` (exact for every integer a discrete space can hold).
    fn get(&self, i: usize) -> f64 {
        match self {
            Self::I64(a) => a[i] as f64,
            Self::I32(a) => f64::from(a[i]),
            Self::U32(a) => f64::from(a[i]),
            Self::F32(a) => f64::from(a[i]),
            Self::F64(a) => a[i],
        }
    }
}

/// Action element types a vector env converts the caller's actions into.
trait ActionElement: Element {
    /// Converts and checks every action against `space`, naming the environment of the
    /// first bad one.
    fn convert(input: &ActionsIn<'_>, space: &Space, out: &mut [Self]) -> Result<(), String>;
}

impl ActionElement for u32 {
    fn convert(input: &ActionsIn<'_>, space: &Space, out: &mut [Self]) -> Result<(), String> {
        let Space::Discrete { n } = *space else {
            return Err("integer actions for a continuous space".to_owned());
        };
        if matches!(input, ActionsIn::F32(_) | ActionsIn::F64(_)) {
            return Err("actions of a discrete space must be integers, got floats".to_owned());
        }
        for (i, slot) in out.iter_mut().enumerate() {
            let value = input.get(i);
            if !(0.0..f64::from(n)).contains(&value) {
                return Err(format!(
                    "action {value} of environment {i} is out of range: use 0..{n}"
                ));
            }
            *slot = value as u32;
        }
        Ok(())
    }
}

impl ActionElement for f32 {
    fn convert(input: &ActionsIn<'_>, _space: &Space, out: &mut [Self]) -> Result<(), String> {
        for (i, slot) in out.iter_mut().enumerate() {
            let value = input.get(i);
            if !value.is_finite() {
                return Err(format!(
                    "action element {i} is {value}: actions must be finite"
                ));
            }
            *slot = value as f32;
        }
        Ok(())
    }
}

/// Where one step writes.
struct StepOut<'a> {
    obs: &'a mut [f32],
    rewards: &'a mut [f64],
    terminated: &'a mut [bool],
    truncated: &'a mut [bool],
    final_obs: &'a mut [f32],
    ended: &'a mut [bool],
}

/// `N` environments of one type, stepped together.
trait Lanes: Send + Sync {
    fn observation_space(&self) -> &Space;
    fn action_space(&self) -> &Space;
    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()>;
    fn step(&mut self, actions: &ActionsIn<'_>, out: StepOut<'_>) -> PyResult<()>;
}

/// The environments and their per-environment state.
struct EnvLanes<E: Env> {
    envs: Vec<E>,
    actions: Vec<E::Act>,
    obs_len: usize,
    act_len: usize,
    /// Environments whose episode ended on the last step (next-step autoreset).
    pending: Vec<bool>,
    mode: Autoreset,
}

impl<E> Lanes for EnvLanes<E>
where
    E: Env<Obs = f32> + Send + Sync,
    E::Act: ActionElement,
{
    fn observation_space(&self) -> &Space {
        self.envs[0].observation_space()
    }

    fn action_space(&self) -> &Space {
        self.envs[0].action_space()
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        for (i, (env, o)) in self
            .envs
            .iter_mut()
            .zip(obs.chunks_exact_mut(self.obs_len))
            .enumerate()
        {
            env.reset(seed.map(|s| s.wrapping_add(i as u64)), o)?;
        }
        self.pending.fill(false);
        Ok(())
    }

    fn step(&mut self, actions: &ActionsIn<'_>, out: StepOut<'_>) -> PyResult<()> {
        let space = self.envs[0].action_space().clone();
        E::Act::convert(actions, &space, &mut self.actions).map_err(value_error)?;
        let (obs_len, act_len) = (self.obs_len, self.act_len);
        for (i, env) in self.envs.iter_mut().enumerate() {
            let obs = &mut out.obs[i * obs_len..(i + 1) * obs_len];
            if self.mode == Autoreset::NextStep && self.pending[i] {
                env.reset(None, obs).map_err(core_error)?;
                out.rewards[i] = 0.0;
                out.terminated[i] = false;
                out.truncated[i] = false;
                self.pending[i] = false;
                continue;
            }
            let step = env
                .step(&self.actions[i * act_len..(i + 1) * act_len], obs)
                .map_err(core_error)?;
            out.rewards[i] = f64::from(step.reward);
            out.terminated[i] = step.terminated;
            out.truncated[i] = step.truncated;
            let ends = step.ends_episode();
            match self.mode {
                Autoreset::NextStep => self.pending[i] = ends,
                Autoreset::SameStep => {
                    out.ended[i] = ends;
                    if ends {
                        out.final_obs[i * obs_len..(i + 1) * obs_len].copy_from_slice(obs);
                        env.reset(None, obs).map_err(core_error)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// Builds the lanes of `n` environments made by `make(i)`.
fn lanes<E>(n: usize, mode: Autoreset, make: impl Fn(u64) -> E) -> Box<dyn Lanes>
where
    E: Env<Obs = f32> + Send + Sync + 'static,
    E::Act: ActionElement,
{
    let envs: Vec<E> = (0..n as u64).map(make).collect();
    let obs_len = envs[0].observation_space().flat_len();
    let act_len = envs[0].action_space().flat_len();
    Box::new(EnvLanes {
        actions: vec![E::Act::default(); n * act_len],
        envs,
        obs_len,
        act_len,
        pending: vec![false; n],
        mode,
    })
}

/// A space as plain Python data: `("discrete", n)` or `("box", low, high, shape, dtype)`.
fn describe<'py>(py: Python<'py>, space: &Space) -> PyResult<Bound<'py, PyTuple>> {
    match space {
        Space::Discrete { n } => ("discrete", *n).into_pyobject(py),
        Space::Box(b) => {
            let n = b.flat_len();
            let low: Vec<f32> = (0..n).map(|i| b.low(i)).collect();
            let high: Vec<f32> = (0..n).map(|i| b.high(i)).collect();
            (
                "box",
                low,
                high,
                b.shape().to_vec(),
                crate::schema::numpy_name(b.dtype()),
            )
                .into_pyobject(py)
        }
    }
}

/// The Rust side of `flatrl.VectorEnv`: `num_envs` copies of a Rust environment and the
/// arrays each step writes into (the same arrays every step).
#[pyclass(module = "flatrl")]
pub struct VecEnvCore {
    lanes: Box<dyn Lanes>,
    num_envs: usize,
    obs_shape: Vec<usize>,
    started: bool,
    obs: Py<PyArrayDyn<f32>>,
    rewards: Py<PyArray1<f64>>,
    terminated: Py<PyArray1<bool>>,
    truncated: Py<PyArray1<bool>>,
    final_obs: Py<PyArrayDyn<f32>>,
    ended: Py<PyArray1<bool>>,
}

impl std::fmt::Debug for VecEnvCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VecEnvCore")
            .field("num_envs", &self.num_envs)
            .field("obs_shape", &self.obs_shape)
            .finish_non_exhaustive()
    }
}

#[pymethods]
impl VecEnvCore {
    #[new]
    #[pyo3(signature = (env_id, num_envs, *, autoreset_mode="next_step"))]
    fn new(py: Python<'_>, env_id: &str, num_envs: usize, autoreset_mode: &str) -> PyResult<Self> {
        if num_envs == 0 {
            return Err(value_error(
                "num_envs is 0: a vector env needs at least one environment",
            ));
        }
        let mode = match autoreset_mode {
            "next_step" => Autoreset::NextStep,
            "same_step" => Autoreset::SameStep,
            other => {
                return Err(value_error(format!(
                    "autoreset_mode `{other}` is not supported: use \"next_step\" or \"same_step\""
                )));
            }
        };
        let lanes = match env_id {
            "CartPole-v1" => lanes(num_envs, mode, CartPole::new),
            "MaskedCartPole-v1" => lanes(num_envs, mode, MaskedCartPole::new),
            "Pendulum-v1" => lanes(num_envs, mode, Pendulum::new),
            "LargeDiscrete-v0" => {
                // One action table (100k x 8) shared by every copy.
                let task = LargeDiscrete::new(0);
                lanes(num_envs, mode, move |_| task.clone())
            }
            other => {
                return Err(value_error(format!(
                    "unknown environment `{other}`: flatrl has {}",
                    ENV_IDS.join(", ")
                )));
            }
        };
        let space = lanes.observation_space();
        let obs_shape: Vec<usize> = match space {
            Space::Box(b) => b.shape().to_vec(),
            Space::Discrete { .. } => vec![1],
        };
        let batched: Vec<usize> = std::iter::once(num_envs)
            .chain(obs_shape.iter().copied())
            .collect();
        Ok(Self {
            num_envs,
            started: false,
            obs: PyArrayDyn::zeros(py, batched.clone(), false).unbind(),
            rewards: PyArray1::zeros(py, num_envs, false).unbind(),
            terminated: PyArray1::from_vec(py, vec![false; num_envs]).unbind(),
            truncated: PyArray1::from_vec(py, vec![false; num_envs]).unbind(),
            final_obs: PyArrayDyn::zeros(py, batched, false).unbind(),
            ended: PyArray1::from_vec(py, vec![false; num_envs]).unbind(),
            obs_shape,
            lanes,
        })
    }

    /// Number of environments.
    #[getter]
    fn num_envs(&self) -> usize {
        self.num_envs
    }

    /// One environment's observation space as plain data.
    #[getter]
    fn single_observation_space<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        describe(py, self.lanes.observation_space())
    }

    /// One environment's action space as plain data.
    #[getter]
    fn single_action_space<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        describe(py, self.lanes.action_space())
    }

    /// Resets every environment (environment `i` with `seed + i`, or continuing its own
    /// stream when `seed` is None) and returns the observation array.
    #[pyo3(signature = (seed=None))]
    fn reset<'py>(
        &mut self,
        py: Python<'py>,
        seed: Option<u64>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let obs = self.obs.bind(py);
        // SAFETY: `obs` is this core's own contiguous array; no other Rust reference.
        let slice = unsafe { slice_mut(obs)? };
        self.lanes.reset(seed, slice).map_err(core_error)?;
        self.started = true;
        Ok(obs.clone())
    }

    /// Steps every environment with `actions` (one per environment; a numpy array of
    /// integers for discrete spaces, floats of shape `(num_envs, *action shape)` for
    /// continuous ones) and returns `(obs, rewards, terminated, truncated)`, the same
    /// arrays every step. Every action is checked before any environment steps.
    fn step<'py>(
        &mut self,
        py: Python<'py>,
        actions: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if !self.started {
            return Err(PyRuntimeError::new_err(
                "step called before reset: call reset() first",
            ));
        }
        let expected = self.num_envs * self.lanes.action_space().flat_len();
        let array = actions.cast::<PyUntypedArray>().map_err(|_| {
            value_error("actions must be a numpy array with one action per environment")
        })?;
        if array.len() != expected {
            return Err(value_error(format!(
                "actions has {} elements ({:?}) but {} environments need {expected}",
                array.len(),
                array.shape(),
                self.num_envs
            )));
        }
        let contiguous;
        let array = if array.is_c_contiguous() {
            array
        } else {
            contiguous = py
                .import("numpy")?
                .call_method1("ascontiguousarray", (array,))?
                .cast_into::<PyUntypedArray>()
                .map_err(PyErr::from)?;
            &contiguous
        };
        macro_rules! typed {
            ($t:ty, $variant:ident) => {
                if let Ok(a) = array.cast::<PyArrayDyn<$t>>() {
                    let guard = a.readonly();
                    let input = ActionsIn::$variant(guard.as_slice()?);
                    return self.step_with(py, &input);
                }
            };
        }
        typed!(i64, I64);
        typed!(i32, I32);
        typed!(u32, U32);
        typed!(f32, F32);
        typed!(f64, F64);
        Err(value_error(format!(
            "actions have dtype {}: use int64, int32 or uint32 for discrete spaces, float32 or float64 for continuous ones",
            array.dtype()
        )))
    }

    /// Final observations of the environments that ended on the last step (same-step
    /// autoreset), and which did (`ended`).
    #[getter]
    fn final_obs<'py>(&self, py: Python<'py>) -> Bound<'py, PyArrayDyn<f32>> {
        self.final_obs.bind(py).clone()
    }

    /// Which environments ended on the last step (same-step autoreset).
    #[getter]
    fn ended<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<bool>> {
        self.ended.bind(py).clone()
    }
}

impl VecEnvCore {
    /// Steps with converted input and returns the output arrays.
    fn step_with<'py>(
        &mut self,
        py: Python<'py>,
        actions: &ActionsIn<'_>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        debug_assert_eq!(
            actions.len(),
            self.num_envs * self.lanes.action_space().flat_len()
        );
        let (obs, rewards) = (self.obs.bind(py), self.rewards.bind(py));
        let (terminated, truncated) = (self.terminated.bind(py), self.truncated.bind(py));
        let (final_obs, ended) = (self.final_obs.bind(py), self.ended.bind(py));
        // SAFETY: six distinct arrays owned by this core, contiguous, never resized; no
        // other Rust reference to them exists while `out` lives.
        let out = unsafe {
            StepOut {
                obs: slice_mut(obs)?,
                rewards: slice_mut(rewards)?,
                terminated: slice_mut(terminated)?,
                truncated: slice_mut(truncated)?,
                final_obs: slice_mut(final_obs)?,
                ended: slice_mut(ended)?,
            }
        };
        self.lanes.step(actions, out)?;
        PyTuple::new(
            py,
            [
                obs.as_any(),
                rewards.as_any(),
                terminated.as_any(),
                truncated.as_any(),
            ],
        )
    }
}
