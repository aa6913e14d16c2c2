//! Reference environments for tests, examples and benchmarks.
//!
//! - [`CartPole`]: Gymnasium's `CartPole-v1`, bit for bit (dynamics in `f64`).
//! - [`Pendulum`]: Gymnasium's `Pendulum-v1`, bit for bit.
//! - [`MaskedCartPole`]: CartPole with both velocities hidden; needs memory.
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

mod cartpole;
mod large_discrete;
mod partial_large_discrete;
mod pendulum;

pub use cartpole::{CartPole, MaskedCartPole};
pub use large_discrete::{CONTEXT_DIM, Estimate, FEATURE_DIM, LargeDiscrete};
pub use partial_large_discrete::PartialLargeDiscrete;
pub use pendulum::Pendulum;

use rl_core::{Error, Result};

/// Where an environment is in its episode cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

fn finite_state(state: &[f64]) -> Result<()> {
    match state.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(Error::config(
            format!("state element {i}"),
            format!("is {}: set a finite state", state[i]),
        )),
    }
}
