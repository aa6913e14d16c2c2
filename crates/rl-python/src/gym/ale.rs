//! ALE's own calls for a game that `gymnasium.make` built: one emulator frame per step
//! without the Python of Gymnasium's wrappers, and no screen for a frame nobody looks at.
//!
//! `AtariEnv.step` with `frameskip=1` is `ale.act(action_set[a])`, then
//! `ale.game_over(with_truncation=False)`, `ale.game_truncated()` and a new
//! `ale.getScreenRGB()` array. [`Ale::step`] makes the same calls, in the same order, on
//! bound methods looked up once, with the screen read into one buffer made at
//! construction; a frame a frame-skipping wrapper never reads
//! ([`rl_core::Env::step_unobserved`]) skips the screen, a fifth of a frame's time in
//! Pong. A frame read as bytes is read as palette indices (`getScreen`, 1.8 us in ale-py
//! 0.11, against 21.8 us for `getScreenRGB`) and coloured with the game's palette as
//! learned from earlier frames ([`LearnedPalette`]: a frame with an index not seen yet is
//! read in RGB too and learned from). Rewards, flags and frames are those of `env.step`.

use numpy::{PyArray2, PyArray3, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use rl_core::Step;
use rl_envs::LearnedPalette;

/// The Gymnasium wrappers `gymnasium.make` adds that leave `step` as the environment's:
/// with only these around an `AtariEnv`, ALE's calls are the whole step.
const PASSIVE_WRAPPERS: &[&str] = &["OrderEnforcing", "PassiveEnvChecker"];

/// The bound methods of one game's `ALEInterface` and its frame buffer.
pub(super) struct Ale {
    act: Py<PyAny>,
    game_over: Py<PyAny>,
    /// `with_truncation=False` for `game_over` (keyword-only).
    no_truncation: Py<PyDict>,
    game_truncated: Py<PyAny>,
    get_screen: Py<PyAny>,
    /// `getScreen`: the frame as palette indices.
    get_indices: Py<PyAny>,
    /// `env.unwrapped._action_set`: the ALE action of each discrete action.
    actions: Vec<Py<PyAny>>,
    /// The `[height, width, 3]` frame `getScreenRGB` fills.
    screen: Py<PyArray3<u8>>,
    /// The `[height, width]` palette indices `getScreen` fills.
    indices: Py<PyArray2<u8>>,
    /// The game's colours seen so far.
    palette: LearnedPalette,
    /// Whether Gymnasium's `reset` ran (its `OrderEnforcing` refuses a step before it:
    /// until then steps go through `env.step`, which says so).
    pub(super) ready: bool,
}

impl Ale {
    /// ALE's calls for `env` when it is an `ale_py` `AtariEnv` of one raw RGB frame per
    /// step, discrete actions and no sound, under [`PASSIVE_WRAPPERS`] only; `None` for
    /// anything else (which then steps through `env.step`).
    pub(super) fn of(env: &Bound<'_, PyAny>) -> Option<Self> {
        Self::try_of(env).ok().flatten()
    }

    fn try_of(env: &Bound<'_, PyAny>) -> PyResult<Option<Self>> {
        let inner = env.getattr("unwrapped")?;
        let class = inner.get_type();
        let module: String = class.getattr("__module__")?.extract()?;
        if class.name()? != "AtariEnv" || !module.starts_with("ale_py") {
            return Ok(None);
        }
        let mut wrapper = env.clone();
        while !wrapper.is(&inner) {
            let name = wrapper.get_type().name()?.to_string();
            if !PASSIVE_WRAPPERS.contains(&name.as_str()) {
                return Ok(None);
            }
            wrapper = wrapper.getattr("env")?;
        }
        let one_frame = inner.getattr("_frameskip")?.extract::<i64>().ok() == Some(1);
        let rgb = inner.getattr("_obs_type")?.extract::<String>()? == "rgb";
        let discrete = !inner.getattr("continuous")?.is_truthy()?;
        let silent = match inner.getattr("sound_obs") {
            Ok(sound) => !sound.is_truthy()?,
            Err(_) => true,
        };
        if !(one_frame && rgb && discrete && silent) {
            return Ok(None);
        }
        let shape: Vec<usize> = inner
            .getattr("observation_space")?
            .getattr("shape")?
            .extract()?;
        let &[h, w, 3] = shape.as_slice() else {
            return Ok(None);
        };
        let ale = inner.getattr("ale")?;
        let actions: Vec<Py<PyAny>> = inner
            .getattr("_action_set")?
            .try_iter()?
            .map(|a| a.map(Bound::unbind))
            .collect::<PyResult<_>>()?;
        let method = |name: &str| ale.getattr(name).map(Bound::unbind);
        let no_truncation = PyDict::new(env.py());
        no_truncation.set_item("with_truncation", false)?;
        Ok(Some(Self {
            act: method("act")?,
            game_over: method("game_over")?,
            no_truncation: no_truncation.unbind(),
            game_truncated: method("game_truncated")?,
            get_screen: method("getScreenRGB")?,
            get_indices: method("getScreen")?,
            actions,
            screen: PyArray3::zeros(env.py(), [h, w, 3], false).unbind(),
            indices: PyArray2::zeros(env.py(), [h, w], false).unbind(),
            palette: LearnedPalette::new(),
            ready: false,
        }))
    }

    /// One frame with discrete action `action`: the reward and flags, and whether the
    /// frame is to be read (when `observe` or when the episode ended:
    /// [`Ale::observe`] or [`Ale::screen`]).
    pub(super) fn step(
        &self,
        py: Python<'_>,
        action: usize,
        observe: bool,
    ) -> PyResult<(Step, bool)> {
        let Some(ale_action) = self.actions.get(action) else {
            return Err(crate::error::value_error(format!(
                "action {action} is out of range for this game's {} actions",
                self.actions.len()
            )));
        };
        let reward: f64 = self.act.call1(py, (ale_action,))?.extract(py)?;
        let terminated = self
            .game_over
            .call(py, (), Some(self.no_truncation.bind(py)))?
            .is_truthy(py)?;
        let truncated = self.game_truncated.call0(py)?.is_truthy(py)?;
        let step = Step {
            reward: reward as f32,
            terminated,
            truncated,
        };
        Ok((step, observe || step.ends_episode()))
    }

    /// The current frame as `getScreenRGB` gives it.
    pub(super) fn screen<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyArray3<u8>>> {
        let screen = self.screen.bind(py);
        self.get_screen.call1(py, PyTuple::new(py, [screen])?)?;
        Ok(screen)
    }

    /// Writes the current frame into `obs` (`height x width x 3` bytes, as `getScreenRGB`
    /// gives it): its palette indices coloured with the learned palette, or, when one of
    /// them is not known yet, the RGB screen, learned from.
    pub(super) fn observe(&mut self, py: Python<'_>, obs: &mut [u8]) -> PyResult<()> {
        let indices = self.indices.bind(py);
        if obs.len() != 3 * indices.len() {
            return Err(crate::error::value_error(format!(
                "the observation holds {} bytes but the game's frame {}",
                obs.len(),
                3 * indices.len()
            )));
        }
        // The indices of a frame the palette could not colour, to learn from.
        let unseen = if self.palette.usable() {
            self.get_indices.call1(py, PyTuple::new(py, [indices])?)?;
            let indices = indices.readonly();
            if self.palette.expand(indices.as_slice()?, obs) {
                return Ok(());
            }
            Some(indices)
        } else {
            None
        };
        obs.copy_from_slice(self.screen(py)?.readonly().as_slice()?);
        if let Some(indices) = unseen {
            self.palette.learn(indices.as_slice()?, obs);
        }
        Ok(())
    }
}
