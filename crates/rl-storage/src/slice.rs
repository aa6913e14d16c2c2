//! Sampling contiguous windows of rows inside one episode (recurrent training, frame
//! stacking, n-step returns), rebuilt from positions at sample time.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::error::{Error, Result};
use crate::sampler::{Draw, SampleContext, Sampler, begin_draw};
use crate::sampler_state::{self, StateFormat, StateReader, StateWriter};
use crate::storage::RingState;

/// Rejection draws per window before falling back to counting the valid starts.
const ATTEMPTS: usize = 64;

/// Uniform sampling, with replacement, of windows of `slice_len` consecutive stored rows
/// that lie inside one episode.
///
/// A batch of `rows` rows (a multiple of `slice_len`) holds `rows / slice_len` windows one
/// after the other; each window lists `slice_len` positions in ring order, oldest first
/// (wrapping from the last position to 0 where the ring does). No row of a window but its
/// last ends an episode (is `terminated` or `truncated`), so a window may end with the
/// last row of an episode but never spans two. Without flag columns every window of
/// stored rows is valid.
///
/// Windows are drawn uniformly over all valid starts: a start is drawn uniformly among
/// the `len - slice_len + 1` windows of stored rows and redrawn while it is invalid, up to
/// 64 times; after that the valid starts are counted (one linear pass, no allocation) and
/// the k-th is drawn directly.
///
/// - **Errors**: an invalid-configuration error if `rows` is not a multiple of
///   `slice_len`; [`Error::Empty`] with no stored row; [`Error::NotEnoughRows`] when no
///   window fits: `requested` is `slice_len` and `available` the longest run of stored
///   rows inside one episode (the whole `len` without flags).
/// - Like every sampler it draws at most `indices.len()` rows: with a shorter `indices`,
///   only whole windows that fit are drawn. Weights are all 1.0. Nothing is allocated.
///
/// # Example
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
#[derive(Clone, Debug)]
pub struct SliceSampler {
    rng: Xoshiro256PlusPlus,
    slice_len: usize,
}

impl SliceSampler {
    /// A sampler of windows of `slice_len` rows, drawing from a stream seeded with `seed`.
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
        })
    }

    /// Rows per window.
    pub fn slice_len(&self) -> usize {
        self.slice_len
    }

    /// Whether the window starting at the `start`-th oldest row stays in one episode.
    fn is_valid(&self, context: &SampleContext<'_>, start: usize) -> bool {
        (start..start + self.slice_len - 1)
            .all(|i| !context.ends_episode(context.ring.position(i, context.capacity)))
    }

    /// Walks the `starts` window starts once, oldest first, counting the valid ones.
    /// Returns the `target`-th valid start (counting from 0) if there is one, else the
    /// number of valid starts.
    fn scan(&self, context: &SampleContext<'_>, starts: usize, target: usize) -> Scan {
        let ends = |i: usize| {
            usize::from(context.ends_episode(context.ring.position(i, context.capacity)))
        };
        // Episode ends among the rows of the window but its last.
        let inner = self.slice_len - 1;
        let mut ends_inside: usize = (0..inner).map(ends).sum();
        let mut valid = 0;
        for start in 0..starts {
            if ends_inside == 0 {
                if valid == target {
                    return Scan::Found(start);
                }
                valid += 1;
            }
            if start + 1 < starts {
                ends_inside = ends_inside - ends(start) + ends(start + inner);
            }
        }
        Scan::Counted(valid)
    }

    /// Longest run of stored rows inside one episode (only the last may end it).
    fn longest_segment(context: &SampleContext<'_>) -> usize {
        let (mut longest, mut run) = (0, 0);
        for i in 0..context.ring.len {
            run += 1;
            longest = usize::max(longest, run);
            if context.ends_episode(context.ring.position(i, context.capacity)) {
                run = 0;
            }
        }
        longest
    }

    /// Draws the start (a logical row index) of one window. `valid` caches the number of
    /// valid starts once a scan has counted them, so later windows skip the rejection.
    fn draw_start(
        &mut self,
        context: &SampleContext<'_>,
        starts: usize,
        valid: &mut Option<usize>,
    ) -> Result<usize> {
        if valid.is_none() {
            for _ in 0..ATTEMPTS {
                let start = self.rng.random_range(0..starts);
                if self.is_valid(context, start) {
                    return Ok(start);
                }
            }
        }
        let count = match *valid {
            Some(count) => count,
            None => match self.scan(context, starts, usize::MAX) {
                Scan::Counted(count) => count,
                Scan::Found(start) => return Ok(start), // unreachable: no target
            },
        };
        *valid = Some(count);
        let slice_len = self.slice_len;
        let none = || Error::NotEnoughRows {
            requested: slice_len,
            available: Self::longest_segment(context),
        };
        if count == 0 {
            return Err(none());
        }
        let target = self.rng.random_range(0..count);
        match self.scan(context, starts, target) {
            Scan::Found(start) => Ok(start),
            Scan::Counted(_) => Err(none()),
        }
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
    /// Kind `slice`, version 1: the window length (loading needs the same) and the
    /// generator.
    fn state_format(&self) -> Option<StateFormat> {
        Some(StateFormat {
            kind: "slice",
            version: 1,
        })
    }

    fn save_state(&self, out: &mut StateWriter<'_>) -> Result<()> {
        out.write_u64(self.slice_len as u64)?;
        sampler_state::write_rng(out, &self.rng)
    }

    fn load_state(mut self, _: &RingState, _: usize, input: &mut StateReader<'_>) -> Result<Self> {
        let saved = input.read_u64()?;
        if saved != self.slice_len as u64 {
            return Err(input.mismatch(
                format!("a slice sampler of {}-row windows", self.slice_len),
                format!("the state of one of {saved}-row windows"),
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
        let slice_len = self.slice_len;
        if !rows.is_multiple_of(slice_len) {
            return Err(Error::config(
                "slice batch",
                format!(
                    "of {rows} rows is not a multiple of the slice length {slice_len}: ask for whole windows"
                ),
            ));
        }
        let Draw { ring, room, .. } = begin_draw(context, None, rows, indices, weights)?;
        let windows = rows.min(room) / slice_len;
        if windows == 0 {
            return Ok(0);
        }
        if slice_len > ring.len {
            return Err(Error::NotEnoughRows {
                requested: slice_len,
                available: ring.len,
            });
        }
        let starts = ring.len - slice_len + 1;
        let mut valid = None;
        for window in indices.chunks_exact_mut(slice_len).take(windows) {
            let start = self.draw_start(context, starts, &mut valid)?;
            for (offset, index) in window.iter_mut().enumerate() {
                *index = ring.position(start + offset, context.capacity);
            }
        }
        let drawn = windows * slice_len;
        weights[..drawn].fill(1.0);
        Ok(drawn)
    }
}

#[cfg(test)]
mod tests;
