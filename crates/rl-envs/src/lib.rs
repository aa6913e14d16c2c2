//! Reference environments for tests, examples and benchmarks.
//!
//! - [`CartPole`]: Gymnasium's `CartPole-v1`, bit for bit (dynamics in `f64`).
//! - [`Pendulum`]: Gymnasium's `Pendulum-v1`, bit for bit.
//! - [`MaskedCartPole`]: CartPole with both velocities hidden; needs memory.
//! - [`Catch`]: bsuite's Catch as `u8` frames (`[1, 10, 5]`, or larger with
//!   [`Catch::with_scale`]): the small pixel task for convolutional policies.
//! - [`DeepSea`]: bsuite's DeepSea (an `N × N` one-hot grid, per-cell random action
//!   mapping): the deep-exploration task epsilon-greedy fails.
//!
//! Pixel preprocessing, with no OpenCV: [`AtariPreprocess`] wraps an environment of raw
//! RGB frames with DQN's Atari pipeline (no-op starts, frame skip with max-pooling,
//! grayscale, 84 × 84 area resize, a stack of 4 frames, reward clipping); its parts are
//! [`rgb_to_gray`], [`max_frames`], [`AreaResize`] and [`FrameStack`], which match
//! OpenCV's `cvtColor` and `INTER_AREA` resize bit for bit.
//! - [`LargeDiscrete`]: a contextual task with 100 000 actions described by a shared
//!   feature table; the large-action case that runs other frameworks out of memory.
//!
//! All implement [`rl_core::Env`]: stepping writes into caller-owned buffers and
//! allocates nothing; every environment is deterministic given its seed; invalid actions
//! are typed errors that leave the environment unchanged.
//!
//! # Example
//!
//! ```
//! use rl_core::Env;
//! use rl_envs::CartPole;
//!
//! let mut env = CartPole::new(42);
//! let mut obs = [0.0f32; 4];
//! env.reset(None, &mut obs)?;
//! let mut episode_return = 0.0;
//! loop {
//!     // Push the cart towards the side the pole leans to.
//!     let action = u32::from(obs[2] + 0.5 * obs[3] > 0.0);
//!     let step = env.step(&[action], &mut obs)?;
//!     episode_return += step.reward;
//!     if step.terminated || step.truncated {
//!         break;
//!     }
//! }
//! assert!(episode_return > 100.0);
//! # Ok::<(), rl_core::Error>(())
//! ```

mod atari;
mod cartpole;
mod catch;
mod deep_sea;
mod large_discrete;
mod palette;
mod partial_large_discrete;
mod pendulum;
mod pixels;
mod stacked;

pub use atari::{AtariConfig, AtariPreprocess, LifeLoss, Lives, Rewards};
pub use cartpole::{CartPole, MaskedCartPole};
pub use catch::Catch;
pub use deep_sea::DeepSea;
pub use large_discrete::{CONTEXT_DIM, Estimate, FEATURE_DIM, LargeDiscrete};
pub use palette::LearnedPalette;
pub use partial_large_discrete::PartialLargeDiscrete;
pub use pendulum::Pendulum;
pub use pixels::{AreaResize, FrameStack, StackPadding, max_frames, resize_area, rgb_to_gray};
pub use stacked::FrameStacked;

use rl_core::{Error, Result};

/// An environment's saved state: its type's name beside the fields, so that a state of
/// another environment is refused by name.
#[derive(serde::Serialize, serde::Deserialize)]
struct Saved<T> {
    env: String,
    state: T,
}

/// `state` of the environment type `env` as bytes (JSON, whose floats round-trip
/// exactly).
fn save_state<T: serde::Serialize>(env: &str, state: T) -> Option<Vec<u8>> {
    serde_json::to_vec(&Saved {
        env: env.to_owned(),
        state,
    })
    .ok()
}

/// The state of an environment of type `env` from bytes [`save_state`] wrote.
fn load_state<T: serde::de::DeserializeOwned>(env: &str, bytes: &[u8]) -> Result<T> {
    let damaged = |e: serde_json::Error| Error::EnvState {
        problem: format!(
            "the saved state of a {env} does not parse ({e}): it is damaged or of another environment"
        ),
    };
    let saved: Saved<serde_json::Value> = serde_json::from_slice(bytes).map_err(damaged)?;
    if saved.env != env {
        return Err(Error::EnvState {
            problem: format!(
                "the saved state is of a {}, not of a {env}: restore it into the environment that saved it",
                saved.env
            ),
        });
    }
    serde_json::from_value(saved.state).map_err(damaged)
}

/// Where an environment is in its episode cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Phase {
    NotStarted,
    Running,
    Ended,
}

impl Phase {
    #[inline]
    fn check_running(self) -> Result<()> {
        match self {
            Phase::Running => Ok(()),
            Phase::NotStarted => Err(Error::NeedsReset {
                state: "before the first reset",
            }),
            Phase::Ended => Err(Error::NeedsReset {
                state: "after the episode ended",
            }),
        }
    }
}

fn nonzero_limit(steps: u32) -> Result<u32> {
    if steps == 0 {
        Err(Error::config(
            "max episode steps",
            "is zero: an episode needs at least one step",
        ))
    } else {
        Ok(steps)
    }
}

/// The changing state of a classic-control task: physics, steps into the episode
/// (at most `max_steps`), phase and random stream.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Episodic<const N: usize> {
    #[serde(with = "serde_arrays")]
    state: [f64; N],
    elapsed: u32,
    phase: Phase,
    rng: rand_xoshiro::Xoshiro256PlusPlus,
}

impl<const N: usize> Episodic<N> {
    /// Decodes and checks a saved state for a task of `max_steps` steps.
    fn load(env: &str, bytes: &[u8], max_steps: u32) -> Result<Self> {
        let saved: Self = load_state(env, bytes)?;
        finite_state(&saved.state).map_err(|e| Error::EnvState {
            problem: format!("the saved state of a {env} is damaged: {e}"),
        })?;
        if saved.elapsed > max_steps {
            return Err(Error::EnvState {
                problem: format!(
                    "the saved state of a {env} is {} steps into an episode of at most {max_steps}: restore it into an environment with the same time limit",
                    saved.elapsed
                ),
            });
        }
        Ok(saved)
    }
}

/// Fixed-size arrays as sequences (serde derives them only up to 32 elements, and
/// `[f64; N]` for a generic `N` not at all).
mod serde_arrays {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer, const N: usize>(
        values: &[f64; N],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        values.as_slice().serialize(serializer)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
        deserializer: D,
    ) -> Result<[f64; N], D::Error> {
        let values = Vec::<f64>::deserialize(deserializer)?;
        let len = values.len();
        values
            .try_into()
            .map_err(|_| serde::de::Error::custom(format!("{len} values where {N} were expected")))
    }
}

fn finite_state(state: &[f64]) -> Result<()> {
    match state.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(Error::config(
            format!("state element {i}"),
            format!("is {}: set a finite state", state[i]),
        )),
    }
}
