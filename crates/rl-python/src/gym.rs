//! Gymnasium environments for the Rust side: [`GymEnv`] is an [`rl_core::Env`] over a
//! Python `gymnasium.Env`, so the Rust collectors (and trainers) drive it.
//!
//! The GIL is taken only inside `reset` and `step`, while Python runs; a collector that
//! drives `GymEnv`s runs with the GIL released, so other Python threads run while the
//! Rust side works. A Python exception raised by the environment is kept (see
//! [`ErrorSlot`]) and re-raised unchanged by the caller that started the collection.
//!
//! `flatrl.RandomCollector` drives Gymnasium environments through the synchronous
//! collector of `rl-collect` with uniformly random actions, into a `flatrl.ReplayBuffer`.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyList;
use rl_collect::{CollectorConfig, RandomPolicy, SyncCollector};
use rl_core::{BoxSpace, DType, Env, Space, Step};
use rl_storage::replay::with_storage;

use crate::error::{collect_error, value_error};
use crate::replay::ReplayBuffer;

mod ale;
use ale::Ale;

/// Where the Python exception of a failed `reset` or `step` waits for the caller that
/// started the work (shared by the environments of one collector).
pub type ErrorSlot = Arc<Mutex<Option<PyErr>>>;

/// Action element types a Gymnasium environment can take: `u32` for `Discrete`, `f32`
/// for `Box`.
pub trait GymAction: rl_core::Element {
    /// The action as the Python object `env.step` takes.
    fn to_python<'py>(
        py: Python<'py>,
        action: &[Self],
        shape: &[usize],
    ) -> PyResult<Bound<'py, PyAny>>;

    /// The index of a discrete action (`None` for a box).
    fn index(action: &[Self]) -> Option<usize>;
}

impl GymAction for u32 {
    fn to_python<'py>(
        py: Python<'py>,
        action: &[Self],
        _shape: &[usize],
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(action[0].into_pyobject(py)?.into_any())
    }

    fn index(action: &[Self]) -> Option<usize> {
        action.first().map(|&a| a as usize)
    }
}

impl GymAction for f32 {
    fn to_python<'py>(
        py: Python<'py>,
        action: &[Self],
        shape: &[usize],
    ) -> PyResult<Bound<'py, PyAny>> {
        PyArray1::from_slice(py, action)
            .reshape(shape.to_vec())
            .map(Bound::into_any)
    }

    fn index(_action: &[Self]) -> Option<usize> {
        None
    }
}

/// Observation element types the bridge carries: `f32` for every `Box`, and `u8` for
/// images (a `uint8` `Box` of two or more dimensions), kept as bytes end to end.
pub trait GymObs: rl_core::Element + numpy::Element {
    /// numpy's name of the dtype.
    const NUMPY: &'static str;

    /// The observation as bytes when it is bytes (frames an ALE game renders straight
    /// into it).
    fn bytes_mut(obs: &mut [Self]) -> Option<&mut [u8]>;
}

impl GymObs for f32 {
    const NUMPY: &'static str = "float32";

    fn bytes_mut(_obs: &mut [Self]) -> Option<&mut [u8]> {
        None
    }
}

impl GymObs for u8 {
    const NUMPY: &'static str = "uint8";

    fn bytes_mut(obs: &mut [Self]) -> Option<&mut [u8]> {
        Some(obs)
    }
}

/// Whether a Gymnasium space is an image: a `uint8` `Box` of two or more dimensions.
fn is_image(space: &Bound<'_, PyAny>) -> PyResult<bool> {
    let spaces = space.py().import("gymnasium.spaces")?;
    if !space.is_instance(&spaces.getattr("Box")?)? {
        return Ok(false);
    }
    let dtype: String = space.getattr("dtype")?.str()?.extract()?;
    let shape: Vec<usize> = space.getattr("shape")?.extract()?;
    Ok(dtype == "uint8" && shape.len() >= 2)
}

/// How an image's axes reach the Rust side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// As the environment gives them.
    AsIs,
    /// `[height, width, channels]` frames transposed to `[channels, height, width]` (the
    /// layout of the convolutions; SB3's `VecTransposeImage`), `[height, width]` read as
    /// one channel.
    ChannelsFirst,
}

/// A Gymnasium environment (`gymnasium.Env` with a `Box` observation space) as an
/// [`rl_core::Env`]: observations as `O` (`f32`, or `u8` for images), actions `u32`
/// (`Discrete`) or `f32` (`Box`).
pub struct GymEnv<A, O = f32> {
    /// `None` for an environment whose factory failed ([`GymFactory::make`]): its
    /// `reset` fails, the factory's exception waits in `errors`.
    env: Option<Py<PyAny>>,
    observation_space: Space,
    action_space: Space,
    action_shape: Vec<usize>,
    /// `[height, width, channels]` of the frames to transpose ([`Layout::ChannelsFirst`]).
    transpose: Option<[usize; 3]>,
    errors: ErrorSlot,
    /// `env.unwrapped.ale.lives` of an ALE game (`None` for other environments).
    lives: Option<Py<PyAny>>,
    /// Whether action 1 is FIRE (`env.unwrapped.get_action_meanings()`, ALE games).
    fires: bool,
    /// ALE's own calls, for a game `gymnasium.make` built with one frame per step.
    ale: Option<Ale>,
    /// Reset or stepped at least once.
    touched: bool,
    /// Where the environment goes when this is dropped untouched (made by a
    /// [`GymFactory`], whose next `make` takes it instead of making another).
    spares: Option<Spares>,
    _action: PhantomData<fn(A, O)>,
}

/// Environments a [`GymFactory`] made that nobody reset or stepped.
type Spares = Arc<Mutex<Vec<Py<PyAny>>>>;

/// An environment that was never reset nor stepped (made to read spaces, to plan, or to
/// check a setting) goes back to its factory for the next `make`: an Atari game takes
/// 0.15 s to make, and a run's checks and plan would otherwise make several.
impl<A, O> Drop for GymEnv<A, O> {
    fn drop(&mut self) {
        if let (false, Some(spares), Some(env)) = (self.touched, &self.spares, self.env.take()) {
            spares
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(env);
        }
    }
}

/// The lives the player has left, from ALE's `lives()`: what
/// `rl_envs::LifeLoss::Terminate` reads. 0 for an environment without ALE (never a lost
/// life); an exception is kept for the caller as the environment's own are, and reads
/// as 0.
impl<A, O> rl_envs::Lives for GymEnv<A, O> {
    fn lives(&self) -> u32 {
        let Some(lives) = &self.lives else { return 0 };
        Python::attach(|py| {
            lives
                .bind(py)
                .call0()
                .and_then(|n| n.extract::<u32>())
                .unwrap_or_else(|err| {
                    self.errors
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get_or_insert(err);
                    0
                })
        })
    }
}

impl<A, O> GymEnv<A, O> {
    /// Whether the environment is an ALE game whose lives can be read.
    pub fn has_lives(&self) -> bool {
        self.lives.is_some()
    }

    /// Whether its action 1 is FIRE (an ALE game's `get_action_meanings()`).
    pub fn fires(&self) -> bool {
        self.fires
    }
}

impl<A, O> std::fmt::Debug for GymEnv<A, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GymEnv")
            .field("observation_space", &self.observation_space)
            .field("action_space", &self.action_space)
            .finish_non_exhaustive()
    }
}

/// The shape of one action of `space` as `env.step` takes it (`[]` for `Discrete`).
fn action_shape(space: &Space) -> Vec<usize> {
    match space {
        Space::Box(b) => b.shape().to_vec(),
        Space::Discrete { .. } => Vec::new(),
    }
}

/// A Gymnasium space as an `rl_core::Space`: `Discrete` (start 0) or a `Box` (of `u8`
/// for an image, else `f32`).
fn space_of(space: &Bound<'_, PyAny>, what: &str) -> PyResult<Space> {
    let py = space.py();
    let spaces = py.import("gymnasium.spaces")?;
    if space.is_instance(&spaces.getattr("Discrete")?)? {
        let start: i64 = space.getattr("start")?.extract()?;
        if start != 0 {
            return Err(value_error(format!(
                "the {what} space is Discrete with start {start}: only start 0 is supported"
            )));
        }
        let n: u32 = space.getattr("n")?.extract()?;
        return Space::discrete(n).map_err(crate::error::core_error);
    }
    if space.is_instance(&spaces.getattr("Box")?)? {
        let numpy = py.import("numpy")?;
        let flat = |name: &str| -> PyResult<Vec<f32>> {
            numpy
                .call_method1("asarray", (space.getattr(name)?, "float32"))?
                .call_method0("ravel")?
                .call_method0("tolist")?
                .extract()
        };
        let shape: Vec<usize> = space.getattr("shape")?.extract()?;
        let dtype = if is_image(space)? {
            DType::U8
        } else {
            DType::F32
        };
        return BoxSpace::new(flat("low")?, flat("high")?, &shape, dtype)
            .map(Space::Box)
            .map_err(crate::error::core_error);
    }
    Err(value_error(format!(
        "the {what} space is {}: GymEnv takes Discrete or Box spaces",
        space.get_type().name()?
    )))
}

impl<A: GymAction, O: GymObs> GymEnv<A, O> {
    /// Wraps `env`, reading its spaces, its images laid out as `layout` says. Its
    /// exceptions go to `errors`.
    ///
    /// # Errors
    /// `ValueError` for an observation space that is not a `Box` of `O` (images are
    /// `u8`, every other box `f32`), or an action space whose elements are not `A`
    /// (`Discrete` for `u32`, `Box` for `f32`).
    pub fn new(env: &Bound<'_, PyAny>, layout: Layout, errors: ErrorSlot) -> PyResult<Self> {
        let mut observation_space = space_of(&env.getattr("observation_space")?, "observation")?;
        let Space::Box(boxed) = &observation_space else {
            return Err(value_error(
                "the observation space is Discrete: GymEnv needs a Box observation space",
            ));
        };
        if boxed.dtype() == DType::U8 && O::DTYPE == DType::F32 {
            return Err(value_error(format!(
                "the observation space is a uint8 image of shape {:?}: this path takes f32 \
                 observations; train on the frames with a convolutional encoder (flatrl.train \
                 with policy.encoder or dqn.encoder = \"nature_cnn\" or \"small_cnn\"), or \
                 convert them explicitly with \
                 gymnasium.wrappers.DtypeObservation(env, numpy.float32)",
                boxed.shape()
            )));
        }
        if boxed.dtype() != O::DTYPE {
            return Err(value_error(format!(
                "the observation space {observation_space} holds {} observations, not {}",
                boxed.dtype(),
                O::DTYPE
            )));
        }
        let transpose = match (layout, boxed.shape()) {
            (Layout::ChannelsFirst, &[h, w, c]) if c <= 4 => Some([h, w, c]),
            (Layout::ChannelsFirst, &[h, w]) => Some([h, w, 1]),
            _ => None,
        };
        if let Some([h, w, c]) = transpose {
            observation_space = Space::Box(
                BoxSpace::uniform(0.0, 255.0, &[c, h, w], DType::U8)
                    .map_err(crate::error::core_error)?,
            );
        }
        let action_space = space_of(&env.getattr("action_space")?, "action")?;
        if action_space.dtype() != A::DTYPE {
            return Err(value_error(format!(
                "the action space {action_space} holds {} actions, not {}",
                action_space.dtype(),
                A::DTYPE
            )));
        }
        let action_shape = action_shape(&action_space);
        let lives = env
            .getattr("unwrapped")
            .and_then(|inner| inner.getattr("ale"))
            .and_then(|ale| ale.getattr("lives"))
            .ok()
            .map(Bound::unbind);
        let fires = env
            .getattr("unwrapped")
            .and_then(|inner| inner.call_method0("get_action_meanings"))
            .and_then(|meanings| meanings.extract::<Vec<String>>())
            .is_ok_and(|meanings| meanings.get(1).is_some_and(|m| m == "FIRE"));
        let ale = match action_space {
            Space::Discrete { .. } => Ale::of(env),
            Space::Box(_) => None,
        };
        Ok(Self {
            env: Some(env.clone().unbind()),
            observation_space,
            action_space,
            action_shape,
            transpose,
            errors,
            lives,
            fires,
            ale,
            touched: false,
            spares: None,
            _action: PhantomData,
        })
    }

    /// The Python environment (an error for one whose factory failed).
    fn env<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyAny>> {
        self.env.as_ref().map(|env| env.bind(py)).ok_or_else(|| {
            pyo3::exceptions::PyRuntimeError::new_err(
                "the environment factory failed when this environment was built",
            )
        })
    }

    /// Keeps `err` for the caller (unless an earlier exception waits there: the first
    /// one is the cause) and returns the `rl_core::Error` the Rust side sees.
    fn fail(&self, call: &str, err: PyErr) -> rl_core::Error {
        let message = err.to_string();
        self.errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(err);
        rl_core::Error::Io {
            context: format!("gymnasium env.{call}"),
            source: std::io::Error::other(message),
        }
    }

    /// Copies a Python observation into `obs` as `O` (frames transposed to channels
    /// first when asked).
    fn read_obs(&self, value: &Bound<'_, PyAny>, obs: &mut [O]) -> PyResult<()> {
        read_obs(self.transpose, value, obs)
    }
}

/// Copies a Python observation into `obs` as `O` (frames of shape `transpose` transposed
/// to channels first when given).
fn read_obs<O: GymObs>(
    transpose: Option<[usize; 3]>,
    value: &Bound<'_, PyAny>,
    obs: &mut [O],
) -> PyResult<()> {
    let py = value.py();
    let array = match value.cast::<PyArrayDyn<O>>() {
        Ok(a) if a.is_contiguous() => a.clone(),
        _ => py
            .import("numpy")?
            .call_method1("ascontiguousarray", (value, O::NUMPY))?
            .cast_into::<PyArrayDyn<O>>()
            .map_err(PyErr::from)?,
    };
    let data = array.readonly();
    let slice = data.as_slice()?;
    if slice.len() != obs.len() {
        return Err(value_error(format!(
            "the environment returned an observation of {} elements but its observation space has {}",
            slice.len(),
            obs.len()
        )));
    }
    match transpose {
        None => obs.copy_from_slice(slice),
        Some([h, w, c]) => {
            for (i, &value) in slice.iter().enumerate() {
                let (pixel, channel) = (i / c, i % c);
                obs[channel * h * w + pixel] = value;
            }
        }
    }
    Ok(())
}

impl<A: GymAction, O: GymObs> Env for GymEnv<A, O> {
    type Obs = O;
    type Act = A;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        &self.action_space
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [O]) -> rl_core::Result<()> {
        Python::attach(|py| {
            let result = (|| {
                let kwargs = pyo3::types::PyDict::new(py);
                kwargs.set_item("seed", seed)?;
                self.touched = true;
                let out = self.env(py)?.call_method("reset", (), Some(&kwargs))?;
                self.read_obs(&out.get_item(0)?, obs)?;
                if let Some(ale) = &mut self.ale {
                    ale.ready = true;
                }
                Ok(())
            })();
            result.map_err(|err| self.fail("reset", err))
        })
    }

    fn step(&mut self, action: &[A], obs: &mut [O]) -> rl_core::Result<Step> {
        self.step_observing(action, obs, true)
    }

    /// An ALE game made by `gymnasium.make` skips the screen of a frame that does not end
    /// the episode; any other environment steps as `step` does.
    fn step_unobserved(&mut self, action: &[A], obs: &mut [O]) -> rl_core::Result<Step> {
        self.step_observing(action, obs, false)
    }
}

impl<A: GymAction, O: GymObs> GymEnv<A, O> {
    /// `env.step`, or ALE's own calls for a game they step exactly (reading the screen
    /// only when `observe` or when the episode ends).
    fn step_observing(
        &mut self,
        action: &[A],
        obs: &mut [O],
        observe: bool,
    ) -> rl_core::Result<Step> {
        self.touched = true;
        Python::attach(|py| {
            let result = (|| {
                let direct = self.ale.as_mut().filter(|ale| ale.ready);
                if let (Some(ale), Some(index)) = (direct, A::index(action)) {
                    let (step, read) = ale.step(py, index, observe)?;
                    if read {
                        // Frames as they are (no transpose) are rendered straight into
                        // `obs`; others go through the RGB screen.
                        match (self.transpose, O::bytes_mut(obs)) {
                            (None, Some(bytes)) => ale.observe(py, bytes)?,
                            (transpose, _) => {
                                let screen = ale.screen(py)?;
                                read_obs(transpose, screen.as_any(), obs)?;
                            }
                        }
                    }
                    return Ok(step);
                }
                let action = A::to_python(py, action, &self.action_shape)?;
                let out = self.env(py)?.call_method1("step", (action,))?;
                self.read_obs(&out.get_item(0)?, obs)?;
                Ok(Step {
                    reward: out.get_item(1)?.extract::<f64>()? as f32,
                    terminated: out.get_item(2)?.is_truthy()?,
                    truncated: out.get_item(3)?.is_truthy()?,
                })
            })();
            result.map_err(|err| self.fail("step", err))
        })
    }
}

/// Builds [`GymEnv`]s from a Python callable that takes no argument and returns a
/// `gymnasium.Env` (a factory, or `functools.partial(gymnasium.make, id)`): what a
/// registry of the `rl` command needs, an infallible `Fn(seed) -> Env`.
///
/// The factory is called once by [`GymFactory::new`] to read the spaces (that
/// environment is closed). A later call that raises gives an environment whose `reset`
/// fails, the factory's exception kept in the [`ErrorSlot`] for the caller to re-raise.
/// Seeds reach the environments through `reset(seed=...)`, as the collectors give them.
#[derive(Clone)]
pub struct GymFactory {
    factory: Arc<Py<PyAny>>,
    name: String,
    observation_space: Space,
    action_space: Space,
    /// Whether the observations are images (`GymEnv<_, u8>`).
    image: bool,
    layout: Layout,
    errors: ErrorSlot,
    /// Environments the factory made but nobody reset or stepped (the one that read the
    /// spaces, those dropped after a check or a plan), handed out by
    /// [`GymFactory::make`] before new ones.
    spares: Spares,
}

impl std::fmt::Debug for GymFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GymFactory")
            .field("observation_space", &self.observation_space)
            .field("action_space", &self.action_space)
            .finish_non_exhaustive()
    }
}

impl GymFactory {
    /// Calls `factory` once to read and check the spaces; images are laid out as
    /// `layout` says.
    ///
    /// # Errors
    /// The factory's exception, a `TypeError` if it is not callable, and the
    /// `ValueError`s of [`GymEnv::new`] for spaces `GymEnv` cannot take.
    pub fn new(factory: &Bound<'_, PyAny>, layout: Layout, errors: ErrorSlot) -> PyResult<Self> {
        if !factory.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "env is a {}: give a Gymnasium id (str) or a callable returning a gymnasium.Env",
                factory.get_type().name()?
            )));
        }
        let probe = factory.call0()?;
        let action_space = space_of(&probe.getattr("action_space")?, "action")?;
        let image = is_image(&probe.getattr("observation_space")?)?;
        let e = errors.clone();
        let checked = match (&action_space, image) {
            (Space::Discrete { .. }, false) => {
                GymEnv::<u32>::new(&probe, layout, e).map(|e| e.observation_space.clone())
            }
            (Space::Discrete { .. }, true) => {
                GymEnv::<u32, u8>::new(&probe, layout, e).map(|e| e.observation_space.clone())
            }
            (_, false) => {
                GymEnv::<f32>::new(&probe, layout, e).map(|e| e.observation_space.clone())
            }
            (_, true) => Err(value_error(
                "the observation space is an image (uint8) and the action space a Box: \
                 convolutional encoders train discrete actions (PPO, DQN) for now",
            )),
        };
        let name = env_name(&probe)?;
        Ok(Self {
            factory: Arc::new(factory.clone().unbind()),
            name,
            observation_space: checked?,
            action_space,
            image,
            layout,
            errors,
            // Reading attributes left it as the factory made it: the first `make` takes it.
            spares: Arc::new(Mutex::new(vec![probe.unbind()])),
        })
    }

    /// Whether the observations are images, carried as bytes (`GymEnv<_, u8>`).
    pub fn image(&self) -> bool {
        self.image
    }

    /// The environments' name: their Gymnasium id (`env.spec.id`), or without a spec the
    /// class name of the unwrapped environment.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the environments take discrete actions (`GymEnv<u32>`), else a box
    /// (`GymEnv<f32>`).
    pub fn discrete(&self) -> bool {
        matches!(self.action_space, Space::Discrete { .. })
    }

    /// A new environment (see the type's documentation for a factory that raises).
    pub fn make<A: GymAction, O: GymObs>(&self) -> GymEnv<A, O> {
        Python::attach(|py| {
            let spare = self
                .spares
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let env = match spare {
                Some(env) => Ok(env.into_bound(py)),
                None => self.factory.bind(py).call0(),
            };
            let built = env
                .and_then(|env| GymEnv::new(&env, self.layout, self.errors.clone()))
                .map(|mut env| {
                    env.spares = Some(Arc::clone(&self.spares));
                    env
                });
            built.unwrap_or_else(|err| {
                *self.errors.lock().unwrap_or_else(PoisonError::into_inner) = Some(err);
                GymEnv {
                    env: None,
                    observation_space: self.observation_space.clone(),
                    action_space: self.action_space.clone(),
                    action_shape: action_shape(&self.action_space),
                    transpose: None,
                    errors: self.errors.clone(),
                    lives: None,
                    fires: false,
                    ale: None,
                    touched: false,
                    spares: None,
                    _action: PhantomData,
                }
            })
        })
    }
}

/// `env.spec.id`, or the class name of `env.unwrapped` when there is no spec.
fn env_name(env: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(spec) = env.getattr("spec")
        && !spec.is_none()
        && let Ok(id) = spec.getattr("id").and_then(|id| id.extract::<String>())
    {
        return Ok(id);
    }
    let inner = env.getattr("unwrapped").unwrap_or_else(|_| env.clone());
    Ok(inner.get_type().name()?.to_string())
}

/// The collector of one action type.
#[derive(Debug)]
enum Collector {
    Discrete(SyncCollector<GymEnv<u32>, RandomPolicy<f32, u32>>),
    Continuous(SyncCollector<GymEnv<f32>, RandomPolicy<f32, f32>>),
}

/// Steps Gymnasium environments with uniformly random actions through the Rust
/// synchronous collector (`rl-collect`), writing every transition into a
/// `flatrl.ReplayBuffer` whose schema has `obs`, `action`, `reward`, `terminated`,
/// `truncated` and `next_obs` (the final observation where an episode ended).
///
/// Environment `i` is reset with seed `seed + i`; `frames_per_batch` (a multiple of the
/// number of environments) frames are collected per `collect` call. The GIL is released
/// while the Rust side works and taken for each Python `reset`/`step`.
#[pyclass(module = "flatrl")]
#[derive(Debug)]
pub struct RandomCollector {
    collector: Collector,
    errors: ErrorSlot,
}

#[pymethods]
impl RandomCollector {
    #[new]
    #[pyo3(signature = (envs, *, frames_per_batch, seed=0))]
    fn new(
        py: Python<'_>,
        envs: &Bound<'_, PyList>,
        frames_per_batch: usize,
        seed: u64,
    ) -> PyResult<Self> {
        let errors = ErrorSlot::default();
        let first = envs
            .iter()
            .next()
            .ok_or_else(|| value_error("envs is empty: give at least one environment"))?;
        let discrete = matches!(
            space_of(&first.getattr("action_space")?, "action")?,
            Space::Discrete { .. }
        );
        let config = CollectorConfig {
            seed,
            report_memory: false,
            ..CollectorConfig::new(frames_per_batch)
        };
        macro_rules! build {
            ($a:ty, $variant:ident) => {{
                let wrapped = envs
                    .iter()
                    .map(|env| GymEnv::<$a>::new(&env, Layout::AsIs, errors.clone()))
                    .collect::<PyResult<Vec<_>>>()?;
                let space = wrapped[0].action_space().clone();
                let policy = RandomPolicy::new(&space, seed).map_err(collect_error)?;
                let made = py.detach(|| SyncCollector::new(wrapped, policy, config));
                Collector::$variant(made.map_err(|err| take_error(&errors, collect_error(err)))?)
            }};
        }
        let collector = if discrete {
            build!(u32, Discrete)
        } else {
            build!(f32, Continuous)
        };
        Ok(Self { collector, errors })
    }

    /// Collects one batch of frames into `buffer` and returns
    /// `{"frames", "total_frames", "episodes", "mean_return"}`.
    fn collect<'py>(
        &mut self,
        py: Python<'py>,
        buffer: &Bound<'py, ReplayBuffer>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let mut buffer = buffer.borrow_mut();
        let store = buffer.store()?;
        let collector = &mut self.collector;
        let report = py.detach(move || match collector {
            Collector::Discrete(c) => with_storage!(store, b => c.collect(b)),
            Collector::Continuous(c) => with_storage!(store, b => c.collect(b)),
        });
        let report = report.map_err(|err| take_error(&self.errors, collect_error(err)))?;
        let out = pyo3::types::PyDict::new(py);
        out.set_item("frames", report.frames)?;
        out.set_item("total_frames", report.total_frames)?;
        out.set_item("episodes", report.episodes)?;
        out.set_item("mean_return", report.mean_return)?;
        Ok(out)
    }
}

/// The environment's own exception if one was kept, else `fallback`.
pub(crate) fn take_error(errors: &ErrorSlot, fallback: PyErr) -> PyErr {
    errors
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .unwrap_or(fallback)
}
