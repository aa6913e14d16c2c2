//! The summarizer interface, and the summarizer without memory.

use std::fmt;

use rl_core::{Location, MemoryPlan};

use crate::error::{Error, Result, check_index, check_len};

/// Turns each environment's stream of inputs into the policy's input, one step at a time
/// for `N` environments at once, with a per-environment state that is reset when an
/// episode starts.
///
/// The summarizer holds what is shared (sizes, weights); the per-environment part lives
/// in a [`Summarizer::State`] made once for `N` environments ([`Summarizer::state`]),
/// whose bytes are known before it exists ([`Summarizer::state_bytes`],
/// [`Summarizer::memory_plan`]). Stepping writes into the caller's buffer and allocates
/// nothing; its cost does not depend on how long an episode has run.
///
/// **Inputs.** An input row is whatever the caller feeds for one environment and step:
/// usually the observation; a caller that wants the previous action and reward appends
/// them to the row (an action index as a float or an embedding, the reward) and builds
/// the summarizer for the wider row. The summarizers do not interpret the row, so the
/// same three implementations serve both, and a stack rebuilt from storage
/// ([`Stack::gather`](crate::Stack::gather)) reads one column holding exactly the rows
/// fed while acting.
///
/// **Episode starts.** `starts[e]` set means `inputs`' row `e` is the first of a new
/// episode: environment `e`'s state is reset before the row is taken in (as
/// [`Summarizer::reset`] would), so nothing of the previous episode reaches the output.
/// A fresh state counts as every environment at an episode start.
pub trait Summarizer {
    /// Per-environment memory for a batch of environments.
    type State: fmt::Debug + Send;

    /// Elements of one environment's input row.
    fn input_len(&self) -> usize;

    /// Elements of one environment's output row (the policy's input width).
    fn output_len(&self) -> usize;

    /// A fresh state for `envs` environments (every one at an episode start).
    fn state(&self, envs: usize) -> Self::State;

    /// Bytes [`Summarizer::state`] allocates for `envs` environments.
    fn state_bytes(&self, envs: usize) -> u64;

    /// What acting with `envs` environments costs, under `name`: the state and, for a
    /// summarizer with weights, its parameters. Known before anything is allocated.
    fn memory_plan(&self, name: &str, envs: usize) -> MemoryPlan {
        MemoryPlan::new().with(
            format!("{name}/state ({envs} envs)"),
            Location::Ram,
            self.state_bytes(envs),
        )
    }

    /// One step for every environment of `state`: `inputs` is `envs x input_len`,
    /// `starts` one flag per environment (see the trait's documentation), `out` receives
    /// `envs x output_len`. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for a buffer of the wrong length, [`Error::Nn`] for the
    /// state of another network; nothing changes then.
    fn step(
        &self,
        state: &mut Self::State,
        inputs: &[f32],
        starts: &[bool],
        out: &mut [f32],
    ) -> Result<()>;

    /// Resets environment `env`'s state: its next input starts an episode.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for an environment the state does not have.
    fn reset(&self, state: &mut Self::State, env: usize) -> Result<()>;
}

/// Checks one step's buffers against a summarizer's widths and the state's environments.
pub(crate) fn check_step(
    summarizer: &impl Summarizer,
    envs: usize,
    inputs: &[f32],
    starts: &[bool],
    out: &[f32],
) -> Result<()> {
    check_len(
        "summarizer inputs (envs x input_len)",
        envs * summarizer.input_len(),
        inputs.len(),
    )?;
    check_len("summarizer starts (one per env)", envs, starts.len())?;
    check_len(
        "summarizer outputs (envs x output_len)",
        envs * summarizer.output_len(),
        out.len(),
    )
}

/// Checks an input width.
pub(crate) fn check_input_len(input_len: usize) -> Result<()> {
    if input_len == 0 {
        return Err(Error::config(
            "summarizer input_len",
            "is 0: give the width of one environment's input row (its observation)",
        ));
    }
    Ok(())
}

/// No memory: the output is the last input row.
///
/// ```
/// use rl_history::{Identity, Summarizer};
///
/// # fn main() -> rl_history::Result<()> {
/// let identity = Identity::new(3)?;
/// let mut state = identity.state(2);
/// let mut out = [0.0; 6];
/// identity.step(&mut state, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[true, false], &mut out)?;
/// assert_eq!(out, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    input_len: usize,
}

impl Identity {
    /// The identity on rows of `input_len` elements.
    ///
    /// # Errors
    /// [`Error::Config`] for a width of 0.
    pub fn new(input_len: usize) -> Result<Self> {
        check_input_len(input_len)?;
        Ok(Self { input_len })
    }
}

/// [`Identity`]'s state: only the number of environments (no memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdentityState {
    envs: usize,
}

impl IdentityState {
    /// Environments.
    pub fn envs(&self) -> usize {
        self.envs
    }
}

impl Summarizer for Identity {
    type State = IdentityState;

    fn input_len(&self) -> usize {
        self.input_len
    }

    fn output_len(&self) -> usize {
        self.input_len
    }

    fn state(&self, envs: usize) -> IdentityState {
        IdentityState { envs }
    }

    fn state_bytes(&self, _envs: usize) -> u64 {
        0
    }

    fn step(
        &self,
        state: &mut IdentityState,
        inputs: &[f32],
        starts: &[bool],
        out: &mut [f32],
    ) -> Result<()> {
        check_step(self, state.envs, inputs, starts, out)?;
        out.copy_from_slice(inputs);
        Ok(())
    }

    fn reset(&self, state: &mut IdentityState, env: usize) -> Result<()> {
        check_index("environment", env, state.envs)
    }
}

#[cfg(test)]
mod tests;
