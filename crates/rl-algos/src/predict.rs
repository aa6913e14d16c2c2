//! Acting deterministically: [`Predict`], which every trained policy and learner
//! implements (the run layer's evaluation and load-and-act read it).

use rl_collect::{ActOutput, Policy};

use crate::error::{Error, Result};
use crate::policy::Mode;

/// A trained policy that can act deterministically: the most likely action (the argmax of
/// a categorical policy, the mean of a Gaussian, the squashed mean of a SAC actor).
///
/// A recurrent policy's per-environment [`Policy::State`] starts at its default at every
/// episode start (an evaluation keeps one slot per episode, [`Predict::predict`] one fresh
/// slot per row).
pub trait Predict: Policy {
    /// How [`Policy::act`] chooses actions now.
    fn mode(&self) -> Mode;

    /// Switches between sampling and the most likely action.
    fn set_mode(&mut self, mode: Mode);

    /// The most likely action for each of `rows` observations (`obs` holds `rows` rows,
    /// `actions` as many action rows), whatever the current mode, which it leaves as it
    /// was. Allocates a few floats per row (for one-off calls; an evaluation reuses its
    /// buffers).
    ///
    /// # Errors
    /// [`Error::Policy`] for what the policy refuses (buffers of the wrong length ...).
    fn predict(&mut self, obs: &[Self::Obs], rows: usize, actions: &mut [Self::Act]) -> Result<()> {
        let (mut log_probs, mut values) = (vec![0.0; rows], vec![0.0; rows]);
        let mut states = vec![Self::State::default(); rows];
        let mode = self.mode();
        self.set_mode(Mode::Deterministic);
        let out = ActOutput {
            actions,
            log_probs: &mut log_probs,
            values: &mut values,
        };
        let result = self.act(obs, &mut states, out);
        self.set_mode(mode);
        result.map_err(|source| Error::Policy { source })
    }
}

/// Pairs of (observation rows, action slots) of at most `chunk` rows each, for a policy
/// that acts on `obs` (rows of `obs_dim`) into `actions` (one index per row) through a
/// workspace of `chunk` rows.
///
/// # Errors
/// [`Error::ShapeMismatch`] when `obs` is not whole rows or `actions` holds another
/// number of rows.
pub(crate) fn action_chunks<'a, O>(
    obs: &'a [O],
    obs_dim: usize,
    actions: &'a mut [u32],
    chunk: usize,
) -> Result<impl Iterator<Item = (&'a [O], &'a mut [u32])>> {
    let rows = obs.len() / obs_dim;
    for (what, expected, actual) in [
        ("observations", rows * obs_dim, obs.len()),
        ("actions", rows, actions.len()),
    ] {
        if expected != actual {
            return Err(Error::shape(what, expected, actual));
        }
    }
    Ok(obs.chunks(chunk * obs_dim).zip(actions.chunks_mut(chunk)))
}
