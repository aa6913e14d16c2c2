//! Sampling without replacement, epoch by epoch (on-policy minibatches, supervised passes).
//!
//! An *epoch* is one shuffled pass over the rows stored when it starts: every row is drawn
//! once (or, with [`LastBatch::Drop`], all but fewer than a batch) before any is drawn again.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Location, MemoryPlan};

use crate::error::{Error, Result};
use crate::sampler::{Draw, SampleContext, Sampler, begin_draw, try_filled};
use crate::sampler_state::{self, StateFormat, StateReader, StateWriter};
use crate::storage::RingState;

/// What [`WithoutReplacement`] does at the end of an epoch when fewer rows than a batch
/// remain (the *remainder*: `len % rows` rows when every batch asks for `rows`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LastBatch {
    /// Return the remainder as a short last batch. Every row appears once per epoch.
    #[default]
    Keep,
    /// Return the last full batch and the remainder together, as one batch of
    /// `rows + remainder` (at most `2 * rows - 1`) rows. Every row appears once per epoch
    /// and no batch is short; `indices` and `weights` need room for `2 * rows - 1` rows.
    Merge,
    /// Skip the remainder: every batch is full, and up to `rows - 1` rows are left out of
    /// each epoch (different ones each time, since each epoch is a fresh shuffle).
    Drop,
}

/// Sampling without replacement: shuffled passes (epochs) over the stored rows.
///
/// An epoch starts at the first [`Sampler::sample`] call, and again once the previous one
/// is used up: it is a fresh shuffle (Fisher-Yates, in place) of the positions of the `len`
/// rows stored at that moment, and each call returns the next `rows` of them. What happens
/// to the last rows of an epoch is set by [`LastBatch`].
///
/// - **The buffer grew**: if `ring.len` differs from its value when the epoch started, the
///   rest of the epoch is abandoned and the call starts a new one over every stored row.
///   The same happens if the ring is not full and its cursor moved (it was cleared and
///   refilled).
/// - **The buffer is full and rows are overwritten**: `len` does not change and every
///   position stays stored, so the epoch goes on over positions: each position is still
///   drawn once per epoch, holding whatever row was last written there.
/// - **Errors**: [`Error::Empty`] with no stored row; [`Error::NotEnoughRows`] when
///   `rows > len`, in every mode (not even one batch could be drawn without replacement);
///   an invalid-configuration error when [`LastBatch::Merge`] is used with `indices` or
///   `weights` shorter than `2 * rows - 1`, or when the buffer's capacity is not the one
///   the sampler was built for.
/// - Like every sampler, it draws at most `indices.len()` rows (fewer than `rows` when
///   `indices` is shorter, except with [`LastBatch::Merge`], which refuses). `rows == 0`
///   draws nothing and does not advance the epoch. Weights are all 1.0.
///
/// Memory: one `u32` position per row of capacity (so capacity is at most 2^32 rows),
/// allocated by [`WithoutReplacement::new`]; sampling allocates nothing.
///
/// # Example
/// ```
/// use rl_storage::{sampler::{LastBatch, SampleContext, Sampler, WithoutReplacement}, storage::RingState};
///
/// let mut sampler = WithoutReplacement::new(8, LastBatch::Keep, 7)?;
/// let context = SampleContext {
///     ring: RingState { cursor: 5, len: 5, written: 5, ..RingState::default() },
///     capacity: 8,
///     terminated: None,
///     truncated: None,
/// };
/// let (mut indices, mut weights) = ([0; 2], [0.0; 2]);
/// let mut seen = Vec::new();
/// for expected in [2, 2, 1] {
///     let n = sampler.sample(&context, 2, &mut indices, &mut weights)?;
///     assert_eq!(n, expected);
///     seen.extend_from_slice(&indices[..n]);
/// }
/// seen.sort();
/// assert_eq!(seen, [0, 1, 2, 3, 4]);
/// assert_eq!((sampler.epoch(), sampler.remaining()), (1, 0));
/// # Ok::<(), rl_storage::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct WithoutReplacement {
    rng: Xoshiro256PlusPlus,
    last: LastBatch,
    /// Positions of the current epoch in draw order; `order[next..end]` are still to come.
    order: Vec<u32>,
    next: usize,
    end: usize,
    /// The ring when the current epoch started.
    epoch_ring: RingState,
    epochs: u64,
}

impl WithoutReplacement {
    /// A sampler for a buffer of `capacity` rows, ending epochs as `last` says, drawing from
    /// a stream seeded with `seed`. Allocates the permutation (`4 * capacity` bytes).
    ///
    /// # Errors
    /// Invalid configuration if `capacity` is zero, above 2^32, or cannot be allocated.
    pub fn new(capacity: usize, last: LastBatch, seed: u64) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::config(
                "capacity",
                "is zero: a buffer needs at least one row",
            ));
        }
        if capacity - 1 > u32::MAX as usize {
            return Err(Error::config(
                "capacity",
                format!(
                    "{capacity} is above the 2^32 rows sampling without replacement supports: lower it"
                ),
            ));
        }
        Ok(Self {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            last,
            order: try_filled(capacity, 0, "sampler permutation")?,
            next: 0,
            end: 0,
            epoch_ring: RingState::default(),
            epochs: 0,
        })
    }

    /// Epochs started so far (0 before the first draw).
    pub fn epoch(&self) -> u64 {
        self.epochs
    }

    /// Rows of the current epoch not drawn yet, as of the last [`Sampler::sample`] call
    /// (0 before the first draw and when the epoch is used up).
    pub fn remaining(&self) -> usize {
        self.end - self.next
    }

    /// What the sampler does at the end of an epoch.
    pub fn last_batch(&self) -> LastBatch {
        self.last
    }

    /// Whether the current epoch can go on over `ring`: the positions it was shuffled from
    /// are exactly the stored ones.
    fn continues(&self, ring: &RingState, capacity: usize) -> bool {
        self.epochs > 0
            && ring.len == self.epoch_ring.len
            && (ring.len == capacity || ring.cursor == self.epoch_ring.cursor)
    }

    /// Shuffles the positions of the rows stored in `ring` into a new epoch.
    fn start_epoch(&mut self, ring: RingState, capacity: usize) {
        let order = &mut self.order[..ring.len];
        for (i, slot) in order.iter_mut().enumerate() {
            // `capacity <= 2^32` (checked in `new`), so every position fits in a u32.
            *slot = ring.position(i, capacity) as u32;
        }
        for i in (1..order.len()).rev() {
            order.swap(i, self.rng.random_range(0..=i));
        }
        self.next = 0;
        self.end = ring.len;
        self.epoch_ring = ring;
        self.epochs += 1;
    }
}

impl Sampler for WithoutReplacement {
    fn sample(
        &mut self,
        context: &SampleContext<'_>,
        rows: usize,
        indices: &mut [usize],
        weights: &mut [f32],
    ) -> Result<usize> {
        let Draw {
            ring,
            capacity,
            room,
        } = begin_draw(context, Some(self.order.len()), rows, indices, weights)?;
        if rows > ring.len {
            return Err(Error::NotEnoughRows {
                requested: rows,
                available: ring.len,
            });
        }
        let rows = match self.last {
            LastBatch::Merge => {
                let needed = rows.saturating_mul(2).saturating_sub(1);
                if room < needed {
                    return Err(Error::config(
                        "batch",
                        format!(
                            "has room for {room} rows but LastBatch::Merge may return up to \
                             2 * {rows} - 1 = {needed}: size the batch for merge, or use LastBatch::Keep"
                        ),
                    ));
                }
                rows
            }
            LastBatch::Keep | LastBatch::Drop => rows.min(room),
        };
        if rows == 0 {
            return Ok(0);
        }
        let used_up = match self.last {
            LastBatch::Keep | LastBatch::Merge => self.remaining() == 0,
            LastBatch::Drop => self.remaining() < rows,
        };
        if used_up || !self.continues(&ring, capacity) {
            self.start_epoch(ring, capacity);
        }
        let remaining = self.remaining();
        let take = match self.last {
            LastBatch::Keep => rows.min(remaining),
            // A fresh or ongoing Drop epoch has at least `rows` left (checked above).
            LastBatch::Drop => rows,
            // Fewer than two batches left: this is the last one, remainder included. It is
            // also short if `rows` grew since the previous call of the epoch.
            LastBatch::Merge if remaining < rows.saturating_mul(2) => remaining,
            LastBatch::Merge => rows,
        };
        let drawn = &self.order[self.next..self.next + take];
        for (index, &position) in indices.iter_mut().zip(drawn) {
            *index = position as usize;
        }
        weights[..take].fill(1.0);
        self.next += take;
        Ok(take)
    }

    /// Kind `without_replacement`, version 1: capacity and [`LastBatch`] (loading needs
    /// the same), the generator, the epoch counter, the ring the epoch started from, its
    /// draw order and how far it got.
    fn state_format(&self) -> Option<StateFormat> {
        Some(StateFormat {
            kind: "without_replacement",
            version: 1,
        })
    }

    fn save_state(&self, out: &mut StateWriter<'_>) -> Result<()> {
        out.write_u64(self.order.len() as u64)?;
        out.write_u64(last_batch_code(self.last))?;
        sampler_state::write_rng(out, &self.rng)?;
        out.write_u64s(&[self.epochs, self.next as u64, self.end as u64])?;
        let ring = self.epoch_ring;
        out.write_u64s(&[
            ring.cursor as u64,
            ring.len as u64,
            ring.written,
            ring.episodes,
            ring.episode_start,
        ])?;
        out.write_u32s(&self.order[..self.end])
    }

    fn load_state(mut self, _: &RingState, _: usize, input: &mut StateReader<'_>) -> Result<Self> {
        let capacity = self.order.len();
        let (saved, last) = (input.read_u64()?, input.read_u64()?);
        let saved_last = [LastBatch::Keep, LastBatch::Merge, LastBatch::Drop]
            .into_iter()
            .find(|&mode| last_batch_code(mode) == last)
            .ok_or_else(|| input.corrupt(format!("unknown last-batch mode {last}")))?;
        if saved != capacity as u64 || saved_last != self.last {
            return Err(input.mismatch(
                format!(
                    "a sampler without replacement for {capacity} rows with {:?}",
                    self.last
                ),
                format!("the state of one for {saved} rows with {saved_last:?}"),
            ));
        }
        let rng = sampler_state::read_rng(input)?;
        let mut counters = [0u64; 8];
        input.read_u64s(&mut counters)?;
        let [
            epochs,
            next,
            end,
            cursor,
            len,
            written,
            episodes,
            episode_start,
        ] = counters;
        let index = |value: u64| usize::try_from(value).ok().filter(|&v| v <= capacity);
        let (Some(next), Some(end), Some(cursor), Some(len)) =
            (index(next), index(end), index(cursor), index(len))
        else {
            return Err(input.corrupt(format!(
                "the epoch's positions ({next}, {end}, {cursor}, {len}) exceed the capacity of                  {capacity} rows"
            )));
        };
        let epoch_ring = RingState {
            cursor,
            len,
            written,
            episodes,
            episode_start,
        };
        let consistent = next <= end
            && if epochs == 0 {
                end == 0 && epoch_ring == RingState::default()
            } else {
                end == len && epoch_ring.validate(capacity).is_ok()
            };
        if !consistent {
            return Err(input.corrupt(format!(
                "the epoch is inconsistent: {epochs} epochs, at {next} of {end}, ring {epoch_ring:?}"
            )));
        }
        input.read_u32s(&mut self.order[..end])?;
        if let Some(bad) = self.order[..end].iter().find(|&&p| p as usize >= capacity) {
            return Err(input.corrupt(format!(
                "the epoch's order holds position {bad}, outside the capacity of {capacity} rows"
            )));
        }
        self.rng = rng;
        self.epochs = epochs;
        self.next = next;
        self.end = end;
        self.epoch_ring = epoch_ring;
        Ok(self)
    }

    fn memory_plan(&self) -> MemoryPlan {
        MemoryPlan::new().with(
            "permutation",
            Location::Ram,
            (self.order.len() * size_of::<u32>()) as u64,
        )
    }
}

/// How a [`LastBatch`] is saved.
fn last_batch_code(last: LastBatch) -> u64 {
    match last {
        LastBatch::Keep => 0,
        LastBatch::Merge => 1,
        LastBatch::Drop => 2,
    }
}

/// Random rings and episode flags shared by the samplers' tests.
#[cfg(test)]
pub(crate) mod test_support {
    use proptest::prelude::*;
    use rl_core::Flag;

    use crate::sampler::SampleContext;
    use crate::storage::RingState;

    /// A ring over `capacity` positions with an episode-end flag per position.
    #[derive(Clone, Debug)]
    pub(crate) struct Fixture {
        pub(crate) ring: RingState,
        pub(crate) capacity: usize,
        pub(crate) terminated: Vec<Flag>,
        pub(crate) truncated: Vec<Flag>,
    }

    impl Fixture {
        /// The context with both flag columns.
        pub(crate) fn context(&self) -> SampleContext<'_> {
            SampleContext {
                ring: self.ring,
                capacity: self.capacity,
                terminated: Some(&self.terminated),
                truncated: Some(&self.truncated),
            }
        }

        /// The context of a schema without flag columns.
        pub(crate) fn context_without_flags(&self) -> SampleContext<'_> {
            SampleContext {
                terminated: None,
                truncated: None,
                ..self.context()
            }
        }

        /// Whether `position` holds a stored row, by brute force.
        pub(crate) fn is_stored(&self, position: usize) -> bool {
            (0..self.ring.len).any(|i| self.ring.position(i, self.capacity) == position)
        }
    }

    /// A consistent ring (any cursor, `min_len <= len <= capacity`, `written >= len`) over
    /// `1..=max_capacity` positions, with each flag set with probability `1 / flag_odds`.
    pub(crate) fn fixture(
        max_capacity: usize,
        min_len: usize,
        flag_odds: u32,
    ) -> impl Strategy<Value = Fixture> {
        (min_len.max(1)..=max_capacity)
            .prop_flat_map(move |capacity| {
                (
                    Just(capacity),
                    0..capacity,
                    min_len..=capacity,
                    0u64..3,
                    proptest::collection::vec((0..flag_odds, 0..flag_odds), capacity),
                )
            })
            .prop_map(|(capacity, cursor, len, wraps, flags)| Fixture {
                ring: RingState {
                    cursor,
                    len,
                    written: len as u64 + wraps * capacity as u64,
                    ..RingState::default()
                },
                capacity,
                terminated: flags.iter().map(|f| Flag::new(f.0 == 0)).collect(),
                truncated: flags.iter().map(|f| Flag::new(f.1 == 0)).collect(),
            })
    }
}

#[cfg(test)]
mod tests;
