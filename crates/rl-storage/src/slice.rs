//! Sampling windows of rows inside one episode (recurrent training, frame stacking,
//! n-step returns), rebuilt from positions at sample time: nothing is stored per step
//! beyond the rows themselves.
//!
//! A window is `slice_len` *proper* rows of one environment, consecutive steps inside one
//! episode, optionally preceded by `burn_in` earlier rows of the same environment that
//! only warm a recurrent state up. With a `stride` of n the buffer is read as n
//! interleaved lanes, the layout a synchronous collector of n environments writes (each
//! step as n consecutive rows, environment 0 first), so one environment's consecutive
//! steps are every n-th row.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::error::{Error, Result};
use crate::sampler::{Draw, SampleContext, Sampler, begin_draw};
use crate::sampler_state::{self, StateFormat, StateReader, StateWriter};
use crate::storage::RingState;

/// Rejection draws per window before falling back to counting the valid starts.
const ATTEMPTS: usize = 64;

/// Uniform sampling, with replacement, of windows of stored rows whose `slice_len`
/// proper rows lie inside one episode, each optionally preceded by `burn_in` rows that
/// warm a recurrent state up, read every `stride`-th row.
///
/// **Rows.** Rows are counted by their *logical index*, 0 for the oldest stored row, in
/// ring order ([`RingState::position`] maps a logical index to its position). A window
/// starting at `s` lists, in order, the `burn_in` burn-in rows `s - burn_in * stride`,
/// ..., `s - stride`, then the `slice_len` proper rows `s`, `s + stride`, ...,
/// `s + (slice_len - 1) * stride`: [`SliceSampler::window_len`] positions, oldest first.
/// A batch of `rows` rows (a multiple of `window_len`) holds `rows / window_len` windows
/// one after the other.
///
/// **Stride.** With the default stride 1 a window is a run of consecutive stored rows. A
/// synchronous collector of n environments writes each step as n consecutive rows
/// (environment 0 to n - 1), so with stride n the rows `i`, `i + n`, `i + 2n`, ... are
/// consecutive steps of one environment. This holds whatever the capacity and after the
/// ring wraps, as long as every write is a whole step of all n environments: logical
/// indices count rows in the order they were written.
///
/// **Episodes.** No proper row but the last ends an episode (is `terminated` or
/// `truncated`), so the proper rows may end with the last row of an episode but never
/// span two. Burn-in rows are *not* checked: they may hold the end of an earlier episode.
/// A learner replaying a window resets its recurrent state after every row that ends an
/// episode (the window's flags say which), so the state entering the proper rows only
/// ever saw their own episode: the burn-in never mixes episodes, and nothing but the rows
/// themselves is stored. Without flag columns every window of stored rows is valid.
///
/// **Draws.** A start `s` is valid when `s >= burn_in * stride`, the last proper row
/// `s + (slice_len - 1) * stride` is stored, and no proper row but the last ends an
/// episode. Windows are drawn uniformly over the valid starts: a start is drawn uniformly
/// among the `len - (window_len - 1) * stride` starts whose rows are all stored and
/// redrawn while it is invalid, up to 64 times; after that the valid starts are counted
/// (one linear pass per lane, no allocation) and the k-th is drawn directly.
///
/// - **Errors**: an invalid-configuration error if `rows` is not a multiple of
///   `window_len`; [`Error::Empty`] with no stored row; [`Error::NotEnoughRows`] when no
///   window fits. If fewer rows are stored than a window spans, `requested` is the rows
///   it spans, `(window_len - 1) * stride + 1`, and `available` the stored rows. Otherwise
///   (every window would cross an episode end) `requested` is `slice_len` and `available`
///   the longest run of one lane's consecutive rows (every `stride`-th row) inside one
///   episode, counting only rows with `burn_in` earlier rows of their lane stored (for
///   the defaults: the longest run of stored rows inside one episode; the whole `len`
///   without flags).
/// - Like every sampler it draws at most `indices.len()` rows: with a shorter `indices`,
///   only whole windows that fit are drawn. Weights are all 1.0. Nothing is allocated.
///
/// # Examples
/// Contiguous windows (the defaults):
/// ```
/// use rl_core::Flag;
/// use rl_storage::{storage::RingState, sampler::{SampleContext, Sampler, SliceSampler}};
///
/// // Six rows at positions 0..6; the row at position 2 ends an episode.
/// let terminated: Vec<Flag> = [0, 0, 1, 0, 0, 0].map(|f| Flag::new(f == 1)).to_vec();
/// let context = SampleContext {
///     ring: RingState { cursor: 0, len: 6, written: 6, ..RingState::default() },
///     capacity: 6,
///     terminated: Some(&terminated),
///     truncated: None,
/// };
/// let mut sampler = SliceSampler::new(3, 7)?;
/// let (mut indices, mut weights) = ([0; 6], [0.0; 6]);
/// assert_eq!(sampler.sample(&context, 6, &mut indices, &mut weights)?, 6);
/// for window in indices.chunks(3) {
///     // [1, 2, 3] would cross the end at 2: only these two windows are valid.
///     assert!(window == [0, 1, 2] || window == [3, 4, 5], "{window:?}");
/// }
/// # Ok::<(), rl_storage::Error>(())
/// ```
///
/// Two environments written step by step (stride 2), windows of 2 proper rows after a
/// burn-in of 1:
/// ```
/// use rl_core::Flag;
/// use rl_storage::{storage::RingState, sampler::{SampleContext, Sampler, SliceSampler}};
///
/// // Rows 2t and 2t + 1 are step t of environments 0 and 1 (steps 0..4). Environment 0's
/// // episode ends at step 1 (row 2); environment 1's never does.
/// let terminated: Vec<Flag> = (0..8).map(|row| Flag::new(row == 2)).collect();
/// let context = SampleContext {
///     ring: RingState { cursor: 0, len: 8, written: 8, ..RingState::default() },
///     capacity: 8,
///     terminated: Some(&terminated),
///     truncated: None,
/// };
/// let mut sampler = SliceSampler::new(2, 7)?.with_burn_in(1).with_stride(2)?;
/// assert_eq!(sampler.window_len(), 3);
/// let (mut indices, mut weights) = ([0; 30], [0.0; 30]);
/// assert_eq!(sampler.sample(&context, 30, &mut indices, &mut weights)?, 30);
/// for window in indices.chunks(3) {
///     // [burn-in, proper, proper]. [0, 2, 4] is refused (its first proper row, 2, ends an
///     // episode); [2, 4, 6] is valid: its burn-in row ends the earlier episode, and the
///     // learner resets its state after it.
///     assert!(
///         window == [2, 4, 6] || window == [1, 3, 5] || window == [3, 5, 7],
///         "{window:?}"
///     );
/// }
/// # Ok::<(), rl_storage::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct SliceSampler {
    rng: Xoshiro256PlusPlus,
    slice_len: usize,
    burn_in: usize,
    stride: usize,
}

impl SliceSampler {
    /// A sampler of windows of `slice_len` consecutive rows (no burn-in, stride 1),
    /// drawing from a stream seeded with `seed`.
    ///
    /// # Errors
    /// Invalid configuration if `slice_len` is zero.
    pub fn new(slice_len: usize, seed: u64) -> Result<Self> {
        if slice_len == 0 {
            return Err(Error::config(
                "slice length",
                "is zero: a window needs at least one row",
            ));
        }
        Ok(Self {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            slice_len,
            burn_in: 0,
            stride: 1,
        })
    }

    /// This sampler with `burn_in` rows before the proper rows of each window (default
    /// 0): they only warm a recurrent state up, and may hold an earlier episode's end.
    #[must_use]
    pub fn with_burn_in(self, burn_in: usize) -> Self {
        Self { burn_in, ..self }
    }

    /// This sampler reading every `stride`-th row (default 1): the number of interleaved
    /// environments, for rows written by a synchronous collector of `stride` environments.
    ///
    /// # Errors
    /// Invalid configuration if `stride` is zero.
    pub fn with_stride(self, stride: usize) -> Result<Self> {
        if stride == 0 {
            return Err(Error::config(
                "slice stride",
                "is zero: use 1 for contiguous rows, or the number of environments whose \
                 steps are interleaved",
            ));
        }
        Ok(Self { stride, ..self })
    }

    /// Proper rows per window: the rows trained on, inside one episode.
    pub fn slice_len(&self) -> usize {
        self.slice_len
    }

    /// Burn-in rows before the proper rows of each window.
    pub fn burn_in(&self) -> usize {
        self.burn_in
    }

    /// Rows between consecutive rows of a window (the number of interleaved lanes).
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// Rows per window in a batch: `burn_in + slice_len`.
    pub fn window_len(&self) -> usize {
        self.burn_in.saturating_add(self.slice_len)
    }

    /// Stored rows a window spans, from its first burn-in row to its last proper row.
    fn span(&self) -> usize {
        (self.window_len() - 1)
            .saturating_mul(self.stride)
            .saturating_add(1)
    }

    /// Whether the window whose first row is the `first`-th oldest stored row keeps its
    /// proper rows in one episode.
    fn is_valid(&self, context: &SampleContext<'_>, first: usize) -> bool {
        let start = first + self.burn_in * self.stride;
        (0..self.slice_len - 1).all(|k| {
            let i = start + k * self.stride;
            !context.ends_episode(context.ring.position(i, context.capacity))
        })
    }

    /// Walks the `firsts` window candidates once, lane by lane and oldest first within a
    /// lane, counting the valid ones (a candidate is a window's first row; candidate `c`
    /// is in lane `c % stride`). Returns the `target`-th valid candidate (counting from 0)
    /// if there is one, else the number of valid candidates.
    fn scan(&self, context: &SampleContext<'_>, firsts: usize, target: usize) -> Scan {
        let ends = |i: usize| {
            usize::from(context.ends_episode(context.ring.position(i, context.capacity)))
        };
        let (stride, inner) = (self.stride, self.slice_len - 1);
        let lead = self.burn_in * stride;
        let mut valid = 0;
        for lane in 0..stride.min(firsts) {
            // Episode ends among the proper rows of the window but its last.
            let mut ends_inside: usize = (0..inner).map(|k| ends(lead + lane + k * stride)).sum();
            let mut first = lane;
            loop {
                if ends_inside == 0 {
                    if valid == target {
                        return Scan::Found(first);
                    }
                    valid += 1;
                }
                if first + stride >= firsts {
                    break;
                }
                let start = lead + first;
                ends_inside = ends_inside + ends(start + inner * stride) - ends(start);
                first += stride;
            }
        }
        Scan::Counted(valid)
    }

    /// Longest run of one lane's rows (every `stride`-th row) inside one episode (only
    /// the last may end it), among rows with `burn_in` earlier rows of their lane stored.
    fn longest_segment(&self, context: &SampleContext<'_>) -> usize {
        let lead = self.burn_in * self.stride;
        let mut longest = 0;
        for lane in 0..self.stride {
            let mut run = 0;
            for i in (lead + lane..context.ring.len).step_by(self.stride) {
                run += 1;
                longest = usize::max(longest, run);
                if context.ends_episode(context.ring.position(i, context.capacity)) {
                    run = 0;
                }
            }
        }
        longest
    }

    /// Draws the first row (a logical row index) of one window. `valid` caches the number
    /// of valid candidates once a scan has counted them, so later windows skip the
    /// rejection.
    fn draw_first(
        &mut self,
        context: &SampleContext<'_>,
        firsts: usize,
        valid: &mut Option<usize>,
    ) -> Result<usize> {
        if valid.is_none() {
            for _ in 0..ATTEMPTS {
                let first = self.rng.random_range(0..firsts);
                if self.is_valid(context, first) {
                    return Ok(first);
                }
            }
        }
        let count = match *valid {
            Some(count) => count,
            None => match self.scan(context, firsts, usize::MAX) {
                Scan::Counted(count) => count,
                Scan::Found(first) => return Ok(first), // unreachable: no target
            },
        };
        *valid = Some(count);
        if count == 0 {
            return Err(self.no_window(context));
        }
        let target = self.rng.random_range(0..count);
        match self.scan(context, firsts, target) {
            Scan::Found(first) => Ok(first),
            Scan::Counted(_) => Err(self.no_window(context)),
        }
    }

    /// The error when windows fit the stored rows but every one crosses an episode end.
    fn no_window(&self, context: &SampleContext<'_>) -> Error {
        Error::NotEnoughRows {
            requested: self.slice_len,
            available: self.longest_segment(context),
        }
    }

    /// The configuration fields of a saved state (`saved`: slice length, burn-in,
    /// stride) that differ from this sampler's, described with this sampler's values and
    /// with the saved ones.
    fn differences(&self, saved: [u64; 3]) -> (String, String) {
        let ours = [self.slice_len, self.burn_in, self.stride].map(|v| v as u64);
        let describe = |values: [u64; 3]| {
            let parts = [
                format!("{}-row windows", values[0]),
                format!("a burn-in of {} rows", values[1]),
                format!("a stride of {}", values[2]),
            ];
            let differing: Vec<String> = parts
                .into_iter()
                .zip(ours.iter().zip(&saved))
                .filter(|(_, (a, b))| a != b)
                .map(|(part, _)| part)
                .collect();
            differing.join(", ")
        };
        (describe(ours), describe(saved))
    }
}

/// What [`SliceSampler::scan`] found.
enum Scan {
    /// The start asked for.
    Found(usize),
    /// Fewer valid starts than the one asked for: how many there are.
    Counted(usize),
}

impl Sampler for SliceSampler {
    /// Kind `slice`, version 2: the slice length, burn-in and stride (loading needs the
    /// same) and the generator.
    fn state_format(&self) -> Option<StateFormat> {
        Some(StateFormat {
            kind: "slice",
            version: 2,
        })
    }

    fn save_state(&self, out: &mut StateWriter<'_>) -> Result<()> {
        for value in [self.slice_len, self.burn_in, self.stride] {
            out.write_u64(value as u64)?;
        }
        sampler_state::write_rng(out, &self.rng)
    }

    fn load_state(mut self, _: &RingState, _: usize, input: &mut StateReader<'_>) -> Result<Self> {
        let mut saved = [0; 3];
        input.read_u64s(&mut saved)?;
        if saved != [self.slice_len, self.burn_in, self.stride].map(|v| v as u64) {
            let (expected, found) = self.differences(saved);
            return Err(input.mismatch(
                format!("a slice sampler with {expected}"),
                format!("the state of one with {found}"),
            ));
        }
        self.rng = sampler_state::read_rng(input)?;
        Ok(self)
    }

    fn sample(
        &mut self,
        context: &SampleContext<'_>,
        rows: usize,
        indices: &mut [usize],
        weights: &mut [f32],
    ) -> Result<usize> {
        let window_len = self.window_len();
        if !rows.is_multiple_of(window_len) {
            let of = if self.burn_in == 0 {
                format!("the slice length {window_len}")
            } else {
                format!(
                    "the window length {window_len} ({} burn-in + {} rows)",
                    self.burn_in, self.slice_len
                )
            };
            return Err(Error::config(
                "slice batch",
                format!("of {rows} rows is not a multiple of {of}: ask for whole windows"),
            ));
        }
        let Draw { ring, room, .. } = begin_draw(context, None, rows, indices, weights)?;
        let windows = rows.min(room) / window_len;
        if windows == 0 {
            return Ok(0);
        }
        let span = self.span();
        if span > ring.len {
            return Err(Error::NotEnoughRows {
                requested: span,
                available: ring.len,
            });
        }
        // Candidates for a window's first row: those whose window lies in stored rows.
        let firsts = ring.len - span + 1;
        let mut valid = None;
        for window in indices.chunks_exact_mut(window_len).take(windows) {
            let first = self.draw_first(context, firsts, &mut valid)?;
            for (k, index) in window.iter_mut().enumerate() {
                *index = ring.position(first + k * self.stride, context.capacity);
            }
        }
        let drawn = windows * window_len;
        weights[..drawn].fill(1.0);
        Ok(drawn)
    }
}

#[cfg(test)]
mod tests;
