//! The environment interface: zero-allocation stepping into caller-owned buffers.

use crate::error::{Error, Result};
use crate::schema::Element;
use crate::space::Space;

/// What one step returned besides the observation.
///
/// `terminated` and `truncated` are separate facts and stay separate everywhere, storage
/// included: a time-limit cut (`truncated`) must bootstrap from the final observation's
/// value, a real terminal state (`terminated`) must not.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Step {
    /// The reward for the transition.
    pub reward: f32,
    /// The episode reached a terminal state of the task.
    pub terminated: bool,
    /// The episode was cut short (time limit) in a non-terminal state.
    pub truncated: bool,
}

impl Step {
    /// Whether the environment must be reset before the next step. For deciding resets
    /// only: learning code needs the two flags, never this merged value.
    pub fn ends_episode(&self) -> bool {
        self.terminated || self.truncated
    }
}

/// A reinforcement-learning environment that writes observations into caller-provided
/// buffers, so stepping allocates nothing.
///
/// Observations are flat slices of [`Env::Obs`] of length
/// `observation_space().flat_len()`; actions are flat slices of [`Env::Act`] of length
/// `action_space().flat_len()` (one `u32` index for a discrete space).
///
/// Implementations are deterministic given their seed. Invalid input returns an error and
/// leaves the environment unchanged.
pub trait Env {
    /// Observation element type (`f32`, or `u8` for pixels).
    type Obs: Element;
    /// Action element type (`u32` index for discrete spaces, `f32` for boxes).
    type Act: Element;

    /// The space observations lie in.
    fn observation_space(&self) -> &Space;

    /// The space actions must lie in.
    fn action_space(&self) -> &Space;

    /// Starts a new episode and writes its first observation into `obs`. With
    /// `Some(seed)` the environment's random stream restarts from `seed`; with `None` it
    /// continues.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `obs` has the wrong length.
    fn reset(&mut self, seed: Option<u64>, obs: &mut [Self::Obs]) -> Result<()>;

    /// Applies `action`, writes the next observation into `obs` and returns reward and
    /// flags.
    ///
    /// # Errors
    /// [`Error::ActionOutOfRange`], [`Error::NonFiniteAction`] or [`Error::ShapeMismatch`]
    /// for invalid input; [`Error::NeedsReset`] before the first reset or after the episode
    /// ended.
    fn step(&mut self, action: &[Self::Act], obs: &mut [Self::Obs]) -> Result<Step>;

    /// As [`Env::step`], for a caller that will not read this step's observation unless
    /// the step ends the episode (a frame-skipping wrapper, which looks only at the last
    /// frames of a skip). An environment whose observation is costly to produce (an
    /// emulator's screen) may leave `obs` as it was, except on a step that ends the
    /// episode, whose observation it always writes. The default writes it as
    /// [`Env::step`] does.
    ///
    /// # Errors
    /// As [`Env::step`].
    fn step_unobserved(&mut self, action: &[Self::Act], obs: &mut [Self::Obs]) -> Result<Step> {
        self.step(action, obs)
    }

    /// Tells the environment whether it is used for evaluation: trainers call it with
    /// `true` on their evaluation environment, and so does `rl eval`. An environment
    /// whose training rewards are shaped reports the task's true return instead (Atari's
    /// clipped rewards become the game score, and a lost life no longer ends the
    /// episode: `AtariPreprocess`). Called before the first reset. Default: nothing
    /// changes.
    fn set_evaluation(&mut self, evaluation: bool) {
        let _ = evaluation;
    }

    /// The environment's whole changing state (physics, step count, random stream) as
    /// bytes that [`Env::restore_state`] of an environment built the same way takes
    /// back, so that it then steps exactly as this one would. This is what makes a
    /// resumed training run continue bit for bit.
    ///
    /// Optional: the default `None` says this environment cannot be saved (a
    /// Gymnasium environment, say); a resumed run then restarts its episodes.
    fn save_state(&self) -> Option<Vec<u8>> {
        None
    }

    /// Restores a state [`Env::save_state`] gave. Changes nothing on error.
    ///
    /// # Errors
    /// [`Error::EnvState`]: this environment cannot restore states (the default), or
    /// `state` is another environment's or damaged.
    fn restore_state(&mut self, state: &[u8]) -> Result<()> {
        let _ = state;
        Err(Error::EnvState {
            problem: "this environment cannot restore a saved state (it implements no \
                      Env::restore_state): its episodes restart instead"
                .to_owned(),
        })
    }
}

/// Checks a buffer length against what a space or schema asks for.
///
/// # Errors
/// [`Error::ShapeMismatch`] naming `what`.
#[inline]
pub fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<()> {
    if expected == actual {
        Ok(())
    } else {
        Err(Error::ShapeMismatch {
            what,
            expected,
            actual,
        })
    }
}

/// Validates a discrete action slice: exactly one index below `n`. Returns the index.
///
/// # Errors
/// [`Error::ShapeMismatch`] or [`Error::ActionOutOfRange`].
#[inline]
pub fn discrete_action(action: &[u32], n: u32) -> Result<u32> {
    check_len("action", 1, action.len())?;
    let index = action[0];
    if index < n {
        Ok(index)
    } else {
        Err(Error::ActionOutOfRange {
            index: u64::from(index),
            n,
        })
    }
}

/// Validates a continuous action slice: exactly `len` finite values.
///
/// # Errors
/// [`Error::ShapeMismatch`] or [`Error::NonFiniteAction`].
#[inline]
pub fn finite_action(action: &[f32], len: usize) -> Result<()> {
    check_len("action", len, action.len())?;
    match action.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(position) => Err(Error::NonFiniteAction {
            position,
            value: action[position],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_checks_name_the_problem() {
        assert_eq!(discrete_action(&[1], 2).unwrap(), 1);
        let out = discrete_action(&[2], 2).unwrap_err().to_string();
        assert!(
            out.contains("out of range") && out.contains("0..2"),
            "{out}"
        );
        let len = discrete_action(&[0, 1], 2).unwrap_err().to_string();
        assert!(len.contains("has 2 elements but 1"), "{len}");
        finite_action(&[0.5, -3.0], 2).unwrap();
        let nan = finite_action(&[0.5, f32::NAN], 2).unwrap_err();
        assert!(matches!(nan, Error::NonFiniteAction { position: 1, .. }));
        assert!(finite_action(&[f32::INFINITY], 1).is_err());
    }

    #[test]
    fn ends_episode_on_either_flag() {
        let mut step = Step::default();
        assert!(!step.ends_episode());
        step.truncated = true;
        assert!(step.ends_episode());
        step = Step {
            terminated: true,
            ..Step::default()
        };
        assert!(step.ends_episode());
    }
}
