//! The last `k` inputs, stacked: a bounded ring per environment while acting, rebuilt
//! from storage row indices while training.

use rl_core::{Flag, Location, MemoryPlan};

use crate::error::{Error, Result, check_index, check_len};
use crate::summarizer::{Summarizer, check_input_len, check_step};

/// What fills the slots of a stack older than its episode's first input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Padding {
    /// Repeat the episode's first input (Gymnasium's `FrameStackObservation` default,
    /// `padding_type="reset"`, and `rl_storage::DedupReplay`'s frame stacks). The default.
    #[default]
    FirstFrame,
    /// Zeros (Stable-Baselines3's `VecFrameStack`).
    Zeros,
}

/// The last `k` input rows of each environment, oldest first, newest last: an output row
/// is `k x input_len`. A stack never reaches across an episode start: its older slots are
/// [`Padding`].
///
/// While acting it keeps a ring of `k` rows per environment ([`StackState`]: bounded,
/// `envs x k x input_len` floats whatever the episode's length). At training time nothing
/// stacked is stored: [`Stack::gather`] rebuilds the same stacks from the storage's one
/// column of rows, their episode flags and the sampled row indices.
///
/// ```
/// use rl_history::{Stack, Summarizer};
///
/// # fn main() -> rl_history::Result<()> {
/// let stack = Stack::new(1, 3)?; // stacks of the last 3 one-element inputs
/// let mut state = stack.state(1);
/// let mut out = [0.0; 3];
/// stack.step(&mut state, &[1.0], &[true], &mut out)?;
/// assert_eq!(out, [1.0, 1.0, 1.0]); // padded with the episode's first input
/// stack.step(&mut state, &[2.0], &[false], &mut out)?;
/// stack.step(&mut state, &[3.0], &[false], &mut out)?;
/// stack.step(&mut state, &[4.0], &[false], &mut out)?;
/// assert_eq!(out, [2.0, 3.0, 4.0]);
/// stack.step(&mut state, &[9.0], &[true], &mut out)?; // a new episode
/// assert_eq!(out, [9.0, 9.0, 9.0]);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stack {
    input_len: usize,
    k: usize,
    padding: Padding,
}

impl Stack {
    /// [`Summarizer::state_bytes`] of a stack of `k` inputs of `input_len` elements for
    /// `envs` environments, from the sizes alone (a plan made before anything exists);
    /// `None` on overflow.
    pub fn state_bytes_for(input_len: usize, k: usize, envs: usize) -> Option<u64> {
        let per_env = k
            .checked_mul(input_len)?
            .checked_mul(size_of::<f32>())?
            .checked_add(2 * size_of::<usize>())?;
        u64::try_from(envs.checked_mul(per_env)?).ok()
    }

    /// Stacks of the last `k` rows of `input_len` elements, [`Padding::FirstFrame`].
    ///
    /// # Errors
    /// [`Error::Config`] for a width or `k` of 0.
    pub fn new(input_len: usize, k: usize) -> Result<Self> {
        check_input_len(input_len)?;
        if k == 0 {
            return Err(Error::config(
                "stack k",
                "is 0: stack at least one input (k = 1 is the identity)",
            ));
        }
        Ok(Self {
            input_len,
            k,
            padding: Padding::default(),
        })
    }

    /// The same stack with another padding.
    #[must_use]
    pub fn with_padding(mut self, padding: Padding) -> Self {
        self.padding = padding;
        self
    }

    /// Rows per stack.
    pub fn k(&self) -> usize {
        self.k
    }

    /// What pads a stack before its episode's first row.
    pub fn padding(&self) -> Padding {
        self.padding
    }

    /// Rebuilds the stacks of storage rows `rows` into `out` (`rows.len() x k x
    /// input_len`, one stack after another), as [`Summarizer::step`] produced them while
    /// acting when the stored column holds the rows fed to it: the row itself newest,
    /// then its environment's earlier rows (`stride` rows apart) back to its episode's
    /// first, then [`Padding`]. Reads only `stored`; allocates nothing.
    ///
    /// A row whose predecessor is not stored (the oldest rows of a ring, the first rows
    /// of a column) counts as an episode start: its stack is padded from there.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for columns of mismatched lengths or an `out` of the
    /// wrong length, [`Error::Config`] for a stride of 0 or a ring position outside the
    /// column, [`Error::OutOfRange`] for a row that is not stored. Nothing is written
    /// then.
    pub fn gather(&self, stored: &StoredRows<'_>, rows: &[usize], out: &mut [f32]) -> Result<()> {
        let capacity = stored.capacity(self.input_len)?;
        let row_len = self.k * self.input_len;
        check_len(
            "stacked rows (rows x k x input_len)",
            rows.len() * row_len,
            out.len(),
        )?;
        for &row in rows {
            check_index("stored row", row, capacity)?;
            if stored.age(row, capacity) >= stored.len(capacity) {
                return Err(Error::OutOfRange {
                    what: "stored row (not among the ring's written rows)",
                    index: row,
                    len: stored.len(capacity),
                });
            }
        }
        let len = self.input_len;
        for (&row, target) in rows.iter().zip(out.chunks_exact_mut(row_len)) {
            let mut source = Some(row);
            let mut first = row;
            for slot in (0..self.k).rev() {
                let frame = &mut target[slot * len..(slot + 1) * len];
                match (source, self.padding) {
                    (Some(s), _) => {
                        frame.copy_from_slice(&stored.obs[s * len..(s + 1) * len]);
                        first = s;
                        source = stored.predecessor(s, capacity);
                    }
                    (None, Padding::FirstFrame) => {
                        frame.copy_from_slice(&stored.obs[first * len..(first + 1) * len]);
                    }
                    (None, Padding::Zeros) => frame.fill(0.0),
                }
            }
        }
        Ok(())
    }
}

/// A stored column of input rows and where its episodes start, for [`Stack::gather`].
#[derive(Clone, Copy, Debug)]
pub struct StoredRows<'a> {
    /// The column: `capacity x input_len` elements, row after row (a storage's `obs`
    /// column).
    pub obs: &'a [f32],
    /// Where episodes start.
    pub episodes: Episodes<'a>,
    /// Rows between two consecutive steps of one environment: 1 when each environment's
    /// rows are consecutive, `N` when `N` environments write one row each per step (a
    /// rollout's `steps x envs` rows, a collector's replay buffer).
    pub stride: usize,
    /// Which rows are written, and in what order.
    pub written: Written,
}

/// Episode boundaries of a stored column, one flag per row.
#[derive(Clone, Copy, Debug)]
pub enum Episodes<'a> {
    /// Set where the row is the first of its episode.
    Starts(&'a [Flag]),
    /// A transition's flags (`terminated`, `truncated` of the step taken from the row):
    /// the environment's next row starts an episode where either is set.
    Ends {
        /// The step from the row ended the episode.
        terminated: &'a [Flag],
        /// The step from the row hit a time limit.
        truncated: &'a [Flag],
    },
}

/// Which rows of a stored column hold data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Written {
    /// Every row, oldest first (a rollout, a buffer that has not wrapped).
    #[default]
    All,
    /// A ring: the `len` rows before `cursor`, wrapping (a replay buffer's ring state).
    Ring {
        /// Where the next row will be written.
        cursor: usize,
        /// Rows written and still held.
        len: usize,
    },
}

impl StoredRows<'_> {
    /// Rows of the column, after checking the other fields against it.
    fn capacity(&self, input_len: usize) -> Result<usize> {
        if !self.obs.len().is_multiple_of(input_len) {
            return Err(Error::ShapeMismatch {
                what: "stored column (rows x input_len)",
                expected: self.obs.len() / input_len * input_len,
                actual: self.obs.len(),
            });
        }
        let capacity = self.obs.len() / input_len;
        match self.episodes {
            Episodes::Starts(starts) => check_len("episode starts", capacity, starts.len())?,
            Episodes::Ends {
                terminated,
                truncated,
            } => {
                check_len("terminated flags", capacity, terminated.len())?;
                check_len("truncated flags", capacity, truncated.len())?;
            }
        }
        if self.stride == 0 {
            return Err(Error::config(
                "stored rows stride",
                "is 0: give the rows between one environment's consecutive steps (1, or the number of environments)",
            ));
        }
        if let Written::Ring { cursor, len } = self.written
            && (len > capacity || (capacity > 0 && cursor >= capacity))
        {
            return Err(Error::config(
                "stored rows ring",
                format!(
                    "has cursor {cursor} and length {len} in a column of {capacity} rows: both must lie inside the column"
                ),
            ));
        }
        Ok(capacity)
    }

    /// Rows held.
    fn len(&self, capacity: usize) -> usize {
        match self.written {
            Written::All => capacity,
            Written::Ring { len, .. } => len,
        }
    }

    /// How many rows were written after `row` (0: the newest).
    fn age(&self, row: usize, capacity: usize) -> usize {
        let cursor = match self.written {
            Written::All => capacity,
            Written::Ring { cursor, .. } => cursor,
        };
        (cursor + capacity - 1 - row) % capacity
    }

    /// The environment's previous row of `row`, unless `row` starts an episode or the
    /// previous row is not held.
    fn predecessor(&self, row: usize, capacity: usize) -> Option<usize> {
        if self.age(row, capacity) + self.stride >= self.len(capacity) {
            return None;
        }
        let previous = (row + capacity - self.stride % capacity) % capacity;
        let starts = match self.episodes {
            Episodes::Starts(starts) => starts[row].get(),
            Episodes::Ends {
                terminated,
                truncated,
            } => terminated[previous].get() || truncated[previous].get(),
        };
        (!starts).then_some(previous)
    }
}

/// [`Stack`]'s per-environment ring of its last `k` rows.
#[derive(Clone, Debug)]
pub struct StackState {
    envs: usize,
    /// `envs x k x input_len`: environment `e`'s ring.
    frames: Vec<f32>,
    /// Each ring's newest slot.
    newest: Vec<usize>,
    /// Rows of the current episode held (at most `k`; 0 before the first).
    filled: Vec<usize>,
}

impl StackState {
    /// Environments.
    pub fn envs(&self) -> usize {
        self.envs
    }

    /// Bytes held by its buffers ([`Summarizer::state_bytes`] of its stack).
    pub fn memory_bytes(&self) -> u64 {
        (self.frames.len() * size_of::<f32>()
            + (self.newest.len() + self.filled.len()) * size_of::<usize>()) as u64
    }
}

impl Summarizer for Stack {
    type State = StackState;

    fn input_len(&self) -> usize {
        self.input_len
    }

    fn output_len(&self) -> usize {
        self.k * self.input_len
    }

    fn state(&self, envs: usize) -> StackState {
        StackState {
            envs,
            frames: vec![0.0; envs * self.k * self.input_len],
            newest: vec![0; envs],
            filled: vec![0; envs],
        }
    }

    fn state_bytes(&self, envs: usize) -> u64 {
        Self::state_bytes_for(self.input_len, self.k, envs).unwrap_or(u64::MAX)
    }

    fn memory_plan(&self, name: &str, envs: usize) -> MemoryPlan {
        MemoryPlan::new().with(
            format!("{name}/stack rings ({envs} envs x {} rows)", self.k),
            Location::Ram,
            self.state_bytes(envs),
        )
    }

    fn step(
        &self,
        state: &mut StackState,
        inputs: &[f32],
        starts: &[bool],
        out: &mut [f32],
    ) -> Result<()> {
        check_step(self, state.envs, inputs, starts, out)?;
        let (k, len) = (self.k, self.input_len);
        let rings = state.frames.chunks_exact_mut(k * len);
        let rows = inputs.chunks_exact(len).zip(out.chunks_exact_mut(k * len));
        for (e, (ring, (input, target))) in rings.zip(rows).enumerate() {
            if starts[e] {
                state.filled[e] = 0;
            }
            let slot = (state.newest[e] + 1) % k;
            ring[slot * len..(slot + 1) * len].copy_from_slice(input);
            state.newest[e] = slot;
            let filled = (state.filled[e] + 1).min(k);
            state.filled[e] = filled;
            for (j, frame) in target.chunks_exact_mut(len).enumerate() {
                // Age of the row this slot shows: 0 for the newest (the last slot).
                let age = k - 1 - j;
                if age >= filled && self.padding == Padding::Zeros {
                    frame.fill(0.0);
                    continue;
                }
                let age = age.min(filled - 1);
                let at = (slot + k - age) % k;
                frame.copy_from_slice(&ring[at * len..(at + 1) * len]);
            }
        }
        Ok(())
    }

    fn reset(&self, state: &mut StackState, env: usize) -> Result<()> {
        check_index("environment", env, state.envs)?;
        state.filled[env] = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
