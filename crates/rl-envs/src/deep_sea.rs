//! bsuite's DeepSea: the exploration chain of Osband et al., as a one-hot grid.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::env::{check_len, discrete_action};
use rl_core::{BoxSpace, DType, Env, Error, Result, Space, Step};

use crate::Phase;

/// The total cost of moving right on every step of an episode (bsuite's
/// `unscaled_move_cost`): each right move costs `MOVE_COST / N`.
const MOVE_COST: f32 = 0.01;
/// The largest grid [`DeepSea::new`] builds (observations of 256 × 256 floats).
const MAX_SIZE: usize = 256;

/// bsuite's deterministic `deep_sea` task (Osband et al. 2019, `bsuite/environments/
/// deep_sea.py`), written from its rules:
///
/// - An `N × N` grid. The agent starts in the top-left cell (row 0, column 0) and falls
///   one row per step, so every episode lasts exactly `N` steps and then terminates.
/// - Action `Discrete(2)`. In each cell one of the two actions moves right (column + 1,
///   clamped at `N − 1`) and the other left (column − 1, clamped at 0): the mapping is
///   drawn per cell, each action with probability 1/2, from `mapping_seed` (bsuite's
///   randomized actions), so no fixed action index is "right".
/// - Rewards: every right move costs `0.01 / N`; moving right from the last column pays
///   +1. Only the path that moves right on every step reaches the bottom-right cell: it
///   returns `1 − 0.01 = 0.99`; every other path returns at most 0.
/// - Observation: the agent's cell as a one-hot `N × N` grid of `f32` (shape `[N, N]`,
///   row-major); the observation after the last step is all zeros (bsuite's).
///
/// A uniformly random policy finds the reward once in `2^N` episodes, which is what
/// makes the task a test of deep exploration: dithering (epsilon-greedy) needs
/// exponentially many episodes, an agent that plans to explore needs polynomially many.
/// bsuite's numpy stream is not reproduced: a mapping seed gives a deterministic but
/// different mapping. There is nothing else random, so `reset`'s seed changes nothing.
///
/// ```
/// use rl_core::Env;
/// use rl_envs::DeepSea;
///
/// let mut env = DeepSea::new(5, 42)?;
/// let mut obs = [0.0f32; 25];
/// env.reset(None, &mut obs)?;
/// let mut episode_return = 0.0;
/// for step in 0..5 {
///     let (row, column) = env.position();
///     let result = env.step(&[env.right_action(row, column)], &mut obs)?;
///     episode_return += result.reward;
///     assert_eq!(result.terminated, step == 4);
/// }
/// assert!((episode_return - 0.99).abs() < 1e-6);
/// # Ok::<(), rl_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct DeepSea {
    size: usize,
    mapping_seed: u64,
    /// The action that moves right in each cell, row-major.
    right: Vec<u8>,
    row: usize,
    column: usize,
    phase: Phase,
    observation_space: Space,
    action_space: Space,
}

/// What [`DeepSea::save_state`](Env::save_state) writes.
#[derive(serde::Serialize, serde::Deserialize)]
struct Saved {
    size: usize,
    mapping_seed: u64,
    row: usize,
    column: usize,
    phase: Phase,
}

impl DeepSea {
    /// The largest `size` [`DeepSea::new`] takes.
    pub const MAX_SIZE: usize = MAX_SIZE;

    /// An `size × size` DeepSea whose action mapping is drawn from `mapping_seed`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a size of 0 or above [`DeepSea::MAX_SIZE`].
    pub fn new(size: usize, mapping_seed: u64) -> Result<Self> {
        if size == 0 || size > MAX_SIZE {
            return Err(Error::config(
                "deep sea size",
                format!("is {size}: use a grid of 1 to {MAX_SIZE} rows"),
            ));
        }
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(mapping_seed);
        let right = (0..size * size)
            .map(|_| u8::from(rng.random_bool(0.5)))
            .collect();
        let observation_space = BoxSpace::uniform(0.0, 1.0, &[size, size], DType::F32)
            .map(Space::Box)
            .unwrap_or_else(|_| unreachable!("a nonzero shape with constant bounds is valid"));
        Ok(Self {
            size,
            mapping_seed,
            right,
            row: 0,
            column: 0,
            phase: Phase::NotStarted,
            observation_space,
            action_space: Space::Discrete { n: 2 },
        })
    }

    /// `N`: rows and columns of the grid, and steps of every episode.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The seed the action mapping was drawn from.
    pub fn mapping_seed(&self) -> u64 {
        self.mapping_seed
    }

    /// The agent's `(row, column)`; the row is the number of steps taken this episode.
    pub fn position(&self) -> (usize, usize) {
        (self.row, self.column)
    }

    /// The action (0 or 1) that moves right in cell `(row, column)`.
    ///
    /// # Panics
    /// If the cell is off the grid.
    pub fn right_action(&self, row: usize, column: usize) -> u32 {
        assert!(row < self.size && column < self.size, "cell off the grid");
        u32::from(self.right[row * self.size + column])
    }

    /// The optimal return, `1 − 0.01`.
    pub fn optimal_return(&self) -> f32 {
        1.0 - MOVE_COST
    }

    /// Writes the one-hot observation (all zeros past the last row).
    fn observe(&self, obs: &mut [f32]) {
        obs.fill(0.0);
        if self.row < self.size {
            obs[self.row * self.size + self.column] = 1.0;
        }
    }
}

impl Env for DeepSea {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        &self.action_space
    }

    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        check_len("observation buffer", self.size * self.size, obs.len())?;
        self.row = 0;
        self.column = 0;
        self.phase = Phase::Running;
        self.observe(obs);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> Result<Step> {
        check_len("observation buffer", self.size * self.size, obs.len())?;
        let action = discrete_action(action, 2)?;
        self.phase.check_running()?;
        let last = self.size - 1;
        let mut reward = 0.0;
        if action == self.right_action(self.row, self.column) {
            if self.column == last {
                reward += 1.0;
            }
            reward -= MOVE_COST / self.size as f32;
            self.column = (self.column + 1).min(last);
        } else {
            self.column = self.column.saturating_sub(1);
        }
        self.row += 1;
        let terminated = self.row == self.size;
        if terminated {
            self.phase = Phase::Ended;
        }
        self.observe(obs);
        Ok(Step {
            reward,
            terminated,
            truncated: false,
        })
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        crate::save_state(
            "DeepSea",
            Saved {
                size: self.size,
                mapping_seed: self.mapping_seed,
                row: self.row,
                column: self.column,
                phase: self.phase,
            },
        )
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<()> {
        let saved: Saved = crate::load_state("DeepSea", state)?;
        if (saved.size, saved.mapping_seed) != (self.size, self.mapping_seed) {
            return Err(Error::EnvState {
                problem: format!(
                    "the saved state is of a DeepSea of size {} and mapping seed {}, this one \
                     has size {} and mapping seed {}: restore it into the same task",
                    saved.size, saved.mapping_seed, self.size, self.mapping_seed
                ),
            });
        }
        let row_ok = match saved.phase {
            Phase::Running => saved.row < self.size,
            Phase::Ended => saved.row == self.size,
            Phase::NotStarted => true,
        };
        if !row_ok || saved.column >= self.size || saved.column > saved.row {
            return Err(Error::EnvState {
                problem: format!(
                    "the saved state of a DeepSea is damaged: row {}, column {} ({:?}) on a \
                     {} × {} grid",
                    saved.row, saved.column, saved.phase, self.size, self.size
                ),
            });
        }
        self.row = saved.row;
        self.column = saved.column;
        self.phase = saved.phase;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
