//! bsuite's Catch, rendered as `u8` frames for convolutional policies.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::env::{check_len, discrete_action};
use rl_core::{BoxSpace, DType, Env, Error, Result, Space, Step};

use crate::Phase;

/// Rows of the board; the paddle lives in the last one.
const ROWS: usize = 10;
/// Columns of the board.
const COLUMNS: usize = 5;
/// The value of a lit pixel (ball or paddle); the background is 0.
const LIT: u8 = 255;

/// bsuite's `catch` task (Osband et al. 2020, `bsuite/environments/catch.py`), written
/// from its rules and rendered as pixels:
///
/// - A 10 rows × 5 columns board. At reset a ball appears in a uniformly drawn column of
///   the top row and the paddle in the middle column (2) of the bottom row.
/// - Action `Discrete(3)`: 0 moves the paddle left, 1 keeps it, 2 moves it right
///   (clamped at the edges). Then the ball falls one row.
/// - When the ball reaches the bottom row (the 9th step of every episode) the episode
///   terminates with reward +1 if the paddle is under the ball, −1 otherwise; every
///   other step pays 0. There is no truncation.
/// - Observation: `u8` pixels, shape `[1, 10·s, 5·s]` (channels, height, width: the
///   layout of the convolution layers), ball and paddle 255 on a 0 background, each
///   cell drawn as an `s × s` square (`s = 1` unless set with [`Catch::with_scale`]).
///
/// A policy that moves toward the ball's column catches it every time (+1); a uniformly
/// random policy scores about −0.6 on average (it catches about one ball in five).
/// bsuite's random stream (numpy) is not reproduced: seeds give deterministic but
/// different ball columns.
///
/// ```
/// use rl_core::Env;
/// use rl_envs::Catch;
///
/// let mut env = Catch::new(3);
/// let mut frame = [0u8; 50];
/// env.reset(None, &mut frame)?;
/// let mut episode_return = 0.0;
/// loop {
///     // The ball is the lit pixel above the bottom row; move under it.
///     let ball = frame[..45].iter().position(|&p| p == 255).map_or(2, |i| i % 5);
///     let paddle = frame[45..].iter().position(|&p| p == 255).unwrap_or(2);
///     let action = 1 + ball as i64 - paddle as i64;
///     let step = env.step(&[action.clamp(0, 2) as u32], &mut frame)?;
///     episode_return += step.reward;
///     if step.terminated {
///         break;
///     }
/// }
/// assert_eq!(episode_return, 1.0);
/// # Ok::<(), rl_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Catch {
    board: Board,
    phase: Phase,
    rng: Xoshiro256PlusPlus,
    scale: usize,
    observation_space: Space,
    action_space: Space,
}

/// Where the ball and the paddle are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Board {
    ball_row: usize,
    ball_column: usize,
    paddle_column: usize,
}

/// What [`Catch::save_state`](Env::save_state) writes.
#[derive(serde::Serialize, serde::Deserialize)]
struct Saved {
    board: Board,
    phase: Phase,
    rng: Xoshiro256PlusPlus,
}

impl Catch {
    /// Rows of the board.
    pub const ROWS: usize = ROWS;
    /// Columns of the board.
    pub const COLUMNS: usize = COLUMNS;
    /// Steps in every episode: the ball falls from row 0 to row 9.
    pub const EPISODE_STEPS: u32 = (ROWS - 1) as u32;
    /// The largest cell size [`Catch::with_scale`] takes (frames of 640 × 320).
    pub const MAX_SCALE: usize = 64;

    /// A Catch board drawn one pixel per cell (`[1, 10, 5]`), whose ball columns are drawn
    /// from a stream seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            board: Board {
                ball_row: 0,
                ball_column: COLUMNS / 2,
                paddle_column: COLUMNS / 2,
            },
            phase: Phase::NotStarted,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            scale: 1,
            observation_space: frame_space(1),
            action_space: Space::Discrete { n: 3 },
        }
    }

    /// The same task drawn with each cell as a `scale × scale` square: observations of
    /// shape `[1, 10·scale, 5·scale]`, for convolution stacks that need larger frames.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `scale` is 0 or above [`Catch::MAX_SCALE`].
    pub fn with_scale(mut self, scale: usize) -> Result<Self> {
        if scale == 0 || scale > Self::MAX_SCALE {
            return Err(Error::config(
                "catch scale",
                format!(
                    "is {scale}: draw each cell as 1 to {} pixels square",
                    Self::MAX_SCALE
                ),
            ));
        }
        self.scale = scale;
        self.observation_space = frame_space(scale);
        Ok(self)
    }

    /// Pixels per cell side.
    pub fn scale(&self) -> usize {
        self.scale
    }

    /// The ball's `(row, column)`: row 0 is the top, row 9 the paddle's.
    pub fn ball(&self) -> (usize, usize) {
        (self.board.ball_row, self.board.ball_column)
    }

    /// The paddle's column (its row is always the bottom one, 9).
    pub fn paddle(&self) -> usize {
        self.board.paddle_column
    }

    fn frame_len(&self) -> usize {
        ROWS * COLUMNS * self.scale * self.scale
    }

    /// Draws the board into `obs` (checked to be [`Catch::frame_len`] long).
    fn render(&self, obs: &mut [u8]) {
        obs.fill(0);
        self.light(obs, self.board.ball_row, self.board.ball_column);
        self.light(obs, ROWS - 1, self.board.paddle_column);
    }

    fn light(&self, obs: &mut [u8], row: usize, column: usize) {
        let s = self.scale;
        let width = COLUMNS * s;
        for y in row * s..(row + 1) * s {
            let start = y * width + column * s;
            obs[start..start + s].fill(LIT);
        }
    }
}

/// The observation space of a board drawn `scale` pixels per cell.
fn frame_space(scale: usize) -> Space {
    BoxSpace::uniform(0.0, 255.0, &[1, ROWS * scale, COLUMNS * scale], DType::U8)
        .map(Space::Box)
        .unwrap_or_else(|_| unreachable!("a nonzero shape with constant bounds is valid"))
}

impl Env for Catch {
    type Obs = u8;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        &self.action_space
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [u8]) -> Result<()> {
        check_len("observation buffer", self.frame_len(), obs.len())?;
        if let Some(seed) = seed {
            self.rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        }
        self.board = Board {
            ball_row: 0,
            ball_column: self.rng.random_range(0..COLUMNS),
            paddle_column: COLUMNS / 2,
        };
        self.phase = Phase::Running;
        self.render(obs);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [u8]) -> Result<Step> {
        check_len("observation buffer", self.frame_len(), obs.len())?;
        let action = discrete_action(action, 3)?;
        self.phase.check_running()?;
        let board = &mut self.board;
        board.paddle_column = match action {
            0 => board.paddle_column.saturating_sub(1),
            1 => board.paddle_column,
            _ => (board.paddle_column + 1).min(COLUMNS - 1),
        };
        board.ball_row += 1;
        let terminated = board.ball_row == ROWS - 1;
        let reward = match (terminated, board.paddle_column == board.ball_column) {
            (false, _) => 0.0,
            (true, true) => 1.0,
            (true, false) => -1.0,
        };
        if terminated {
            self.phase = Phase::Ended;
        }
        self.render(obs);
        Ok(Step {
            reward,
            terminated,
            truncated: false,
        })
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        crate::save_state(
            "Catch",
            Saved {
                board: self.board,
                phase: self.phase,
                rng: self.rng.clone(),
            },
        )
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<()> {
        let saved: Saved = crate::load_state("Catch", state)?;
        let Board {
            ball_row,
            ball_column,
            paddle_column,
        } = saved.board;
        // A running episode has the ball above the bottom row; an ended one has it there.
        let row_ok = match saved.phase {
            Phase::Running => ball_row < ROWS - 1,
            Phase::Ended => ball_row == ROWS - 1,
            Phase::NotStarted => true,
        };
        if !row_ok || ball_row >= ROWS || ball_column >= COLUMNS || paddle_column >= COLUMNS {
            return Err(Error::EnvState {
                problem: format!(
                    "the saved state of a Catch is damaged: ball at row {ball_row}, column \
                     {ball_column} and paddle at column {paddle_column} ({:?}) are off a \
                     {ROWS} × {COLUMNS} board",
                    saved.phase
                ),
            });
        }
        self.board = saved.board;
        self.phase = saved.phase;
        self.rng = saved.rng;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
