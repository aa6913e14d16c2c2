//! The recurrent summarizer: an `rl_nn::Lstm` cell whose state per environment is `(h, c)`.

use rand::Rng;
use rl_core::{Location, MemoryPlan};
use rl_nn::{LstmState, Usage, Weights};

use crate::error::{Result, check_index};
use crate::summarizer::{Summarizer, check_input_len, check_step};

/// An LSTM over each environment's inputs: the output is the cell's hidden state `h`
/// (`hidden` elements), the state per environment is `(h, c)`, `2 x hidden` floats
/// whatever the episode's length. One step for `N` environments is one
/// [`rl_nn::Lstm::step`]: two matrix products over the `N` rows and one sweep. Nothing
/// of the history is kept beyond `(h, c)`: training replays bounded windows from storage
/// with [`rl_nn::Lstm::forward_sequence`] and [`rl_nn::Lstm::backward_sequence`] on the
/// same cell ([`Lstm::cell`]), from the state recorded at each window's start.
///
/// ```
/// use rl_history::{Lstm, Summarizer};
/// use rand::SeedableRng;
///
/// # fn main() -> rl_history::Result<()> {
/// let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0);
/// let lstm = Lstm::new(4, 16, &mut rng)?;
/// println!("{}", lstm.memory_plan("history", 64)); // before the state exists
/// let mut state = lstm.state(64);
/// let mut out = vec![0.0; 64 * 16];
/// let starts = vec![true; 64];
/// lstm.step(&mut state, &[0.1; 64 * 4], &starts, &mut out)?;
/// lstm.step(&mut state, &[0.2; 64 * 4], &[false; 64], &mut out)?;
/// lstm.reset(&mut state, 5)?; // environment 5 starts an episode
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Lstm {
    cell: rl_nn::Lstm,
}

impl Lstm {
    /// A summarizer of `input_len`-element rows into `hidden` elements, its cell
    /// initialised as PyTorch does.
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) for a size of 0.
    pub fn new<R: Rng + ?Sized>(input_len: usize, hidden: usize, rng: &mut R) -> Result<Self> {
        check_input_len(input_len)?;
        Ok(Self {
            cell: rl_nn::Lstm::new(input_len, hidden, rng)?,
        })
    }

    /// A summarizer over an existing cell (loaded weights, a trained cell).
    pub fn from_cell(cell: rl_nn::Lstm) -> Self {
        Self { cell }
    }

    /// The cell: its weights, and its window passes for training.
    pub fn cell(&self) -> &rl_nn::Lstm {
        &self.cell
    }

    /// The cell, mutably (an optimiser updates its parameters).
    pub fn cell_mut(&mut self) -> &mut rl_nn::Lstm {
        &mut self.cell
    }

    /// What training on windows of `steps x sequences` costs, under `name`: parameters,
    /// gradients, Adam's moments and the window workspace
    /// ([`rl_nn::Lstm::sequence_memory_plan`]). The window is the only thing that sets
    /// it, never an episode's length.
    pub fn training_plan(&self, name: &str, steps: usize, sequences: usize) -> MemoryPlan {
        self.cell
            .sequence_memory_plan(name, steps, sequences, Usage::Training)
    }
}

impl Summarizer for Lstm {
    type State = LstmState;

    fn input_len(&self) -> usize {
        self.cell.input()
    }

    fn output_len(&self) -> usize {
        self.cell.hidden()
    }

    fn state(&self, envs: usize) -> LstmState {
        self.cell.state(envs)
    }

    fn state_bytes(&self, envs: usize) -> u64 {
        self.cell.state_bytes(envs)
    }

    fn memory_plan(&self, name: &str, envs: usize) -> MemoryPlan {
        let params = (self.cell.num_params() * size_of::<f32>()) as u64;
        MemoryPlan::new()
            .with(format!("{name}/lstm parameters"), Location::Ram, params)
            .with(
                format!("{name}/lstm state ({envs} envs: h, c, gates)"),
                Location::Ram,
                self.state_bytes(envs),
            )
    }

    fn step(
        &self,
        state: &mut LstmState,
        inputs: &[f32],
        starts: &[bool],
        out: &mut [f32],
    ) -> Result<()> {
        if state.architecture() != self.cell.architecture() {
            return Err(rl_nn::Error::ArchitectureMismatch {
                what: "lstm summarizer state".to_owned(),
                expected: self.cell.architecture(),
                found: state.architecture(),
            }
            .into());
        }
        check_step(self, state.rows(), inputs, starts, out)?;
        for (env, _) in starts.iter().enumerate().filter(|(_, s)| **s) {
            state.reset_row(env)?;
        }
        out.copy_from_slice(self.cell.step(inputs, state)?);
        Ok(())
    }

    fn reset(&self, state: &mut LstmState, env: usize) -> Result<()> {
        check_index("environment", env, state.rows())?;
        Ok(state.reset_row(env)?)
    }
}

#[cfg(test)]
mod tests;
