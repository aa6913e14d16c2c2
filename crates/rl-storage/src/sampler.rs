//! Samplers: which stored rows a batch gathers: [`Uniform`], [`WithoutReplacement`]
//! (epochs), [`Prioritized`] (sum tree) and [`SliceSampler`] (windows that never cross an
//! episode end), [`AnySampler`] (one of uniform, prioritized or slice, chosen at run
//! time), and the [`Sampler`] interface with its checkpoint format ([`StateFormat`],
//! [`StateWriter`], [`StateReader`]) for your own.
//!
//! A sampler draws row *positions* (in `0..capacity`) of rows the buffer holds; the buffer
//! gathers those rows into a caller-owned [`crate::Batch`]. Samplers allocate at
//! construction (and say so in [`Sampler::memory_plan`]), never while sampling. Their
//! state (generator, per-row state) goes into checkpoints through
//! [`Sampler::save_state`] and comes back through [`Sampler::load_state`].

use rand::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Flag, MemoryPlan};

use crate::error::{Error, Result};
use crate::sampler_state;
use crate::storage::RingState;

pub use crate::any_sampler::AnySampler;
pub use crate::prioritized::{Prioritized, PrioritizedConfig};
pub use crate::sampler_state::{StateFormat, StateReader, StateWriter};
pub use crate::slice::SliceSampler;
pub use crate::without_replacement::{LastBatch, WithoutReplacement};

/// What a sampler sees of a buffer when it draws.
#[derive(Clone, Copy, Debug)]
pub struct SampleContext<'a> {
    /// The rows that may be sampled: the `len` positions before `cursor`, wrapping.
    pub ring: RingState,
    /// Rows the storage holds.
    pub capacity: usize,
    /// The `terminated` column by position, when the schema has one.
    pub terminated: Option<&'a [Flag]>,
    /// The `truncated` column by position, when the schema has one.
    pub truncated: Option<&'a [Flag]>,
}

impl SampleContext<'_> {
    /// Whether the row at `position` ends an episode (terminated or truncated). `false`
    /// when the schema has neither column.
    #[inline]
    pub fn ends_episode(&self, position: usize) -> bool {
        let flag = |column: Option<&[Flag]>| column.is_some_and(|c| c[position].get());
        flag(self.terminated) || flag(self.truncated)
    }
}

/// Chooses the rows of each batch.
pub trait Sampler: Send {
    /// Draws `rows` positions (normally exactly `rows`; an epoch's last batch may hold
    /// fewer or, merged, more) into `indices` and the matching importance weights (1.0
    /// for unweighted samplers) into `weights` (same length as `indices`). Returns how
    /// many were drawn.
    ///
    /// # Errors
    /// [`Error::BatchTooSmall`] when `indices` or `weights` has room for fewer than
    /// `rows` (the samplers of this crate never return fewer rows in silence);
    /// [`Error::Empty`] when no row can be sampled; sampler-specific errors (not enough
    /// rows for a batch without replacement).
    fn sample(
        &mut self,
        context: &SampleContext<'_>,
        rows: usize,
        indices: &mut [usize],
        weights: &mut [f32],
    ) -> Result<usize>;

    /// Called after `rows` rows were written at `before.cursor ..` (wrapping); `before` is
    /// the ring state before the write. Samplers that keep per-row state (priorities)
    /// reset the overwritten positions here.
    fn rows_written(&mut self, before: &RingState, rows: usize, capacity: usize) {
        let _ = (before, rows, capacity);
    }

    /// Memory the sampler holds (per-row state, permutations).
    fn memory_plan(&self) -> MemoryPlan {
        MemoryPlan::new()
    }

    /// The kind and layout version of the state [`Sampler::save_state`] writes, or `None`
    /// (the default) for a sampler that saves no state. A checkpoint of a buffer whose
    /// sampler saves no state holds the rows only; loading it leaves the sampler as
    /// constructed (told about the loaded rows through [`Sampler::rows_written`]), so its
    /// draws do not continue the saved buffer's.
    fn state_format(&self) -> Option<StateFormat> {
        None
    }

    /// Writes everything the sampler's future draws depend on (generator, per-row state,
    /// position in an epoch) for a checkpoint ([`crate::replay::ReplayBuffer::save`]). Called
    /// only when [`Sampler::state_format`] is `Some`. The default writes nothing.
    ///
    /// # Errors
    /// I/O errors of `out`.
    fn save_state(&self, out: &mut StateWriter<'_>) -> Result<()> {
        let _ = out;
        Ok(())
    }

    /// This sampler with the state [`Sampler::save_state`] wrote, for a buffer whose ring
    /// is `ring` over `capacity` positions (the positions are those of the saved buffer).
    /// Called only when the saved kind and version equal [`Sampler::state_format`]'s.
    /// Implementations check every value before using it; the sampler is taken by value,
    /// so that on error none is left half restored. The default returns the sampler
    /// unchanged.
    ///
    /// # Errors
    /// [`Error::SamplerMismatch`] for a state saved by a sampler built otherwise,
    /// [`Error::Corrupt`] for values no sampler could have saved, I/O errors.
    fn load_state(
        self,
        ring: &RingState,
        capacity: usize,
        input: &mut StateReader<'_>,
    ) -> Result<Self>
    where
        Self: Sized,
    {
        let _ = (ring, capacity, input);
        Ok(self)
    }
}

/// Uniform sampling with replacement over every stored row.
#[derive(Clone, Debug)]
pub struct Uniform {
    rng: Xoshiro256PlusPlus,
}

impl Uniform {
    /// A uniform sampler drawing from a stream seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
        }
    }
}

impl Sampler for Uniform {
    /// Kind `uniform`, version 1: the generator.
    fn state_format(&self) -> Option<StateFormat> {
        Some(StateFormat {
            kind: "uniform",
            version: 1,
        })
    }

    fn save_state(&self, out: &mut StateWriter<'_>) -> Result<()> {
        sampler_state::write_rng(out, &self.rng)
    }

    fn load_state(self, _: &RingState, _: usize, input: &mut StateReader<'_>) -> Result<Self> {
        Ok(Self {
            rng: sampler_state::read_rng(input)?,
        })
    }

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
        } = begin_draw(context, None, rows, indices, weights)?;
        let rows = rows.min(room);
        let oldest = ring.oldest(capacity);
        let len = ring.len as u128;
        for index in &mut indices[..rows] {
            // Multiply-shift maps 64 random bits onto 0..len; its bias (at most len / 2^64)
            // is far below anything a batch could show, and it skips `random_range`'s
            // rejection loop on this hot path.
            let p = oldest + ((u128::from(self.rng.next_u64()) * len) >> 64) as usize;
            *index = if p >= capacity { p - capacity } else { p };
        }
        weights[..rows].fill(1.0);
        Ok(rows)
    }
}

/// What a sampler may draw from, once [`begin_draw`] accepted a call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Draw {
    /// The stored rows (at least one).
    pub(crate) ring: RingState,
    /// Rows the storage holds.
    pub(crate) capacity: usize,
    /// Rows the output slices have room for: the shorter of `indices` and `weights`.
    pub(crate) room: usize,
}

/// The checks every sampler makes before it draws, in this order: the output has room
/// for the `rows` asked for ([`Error::BatchTooSmall`]: never fewer rows in silence), the
/// context is self-consistent ([`check_context`]), the buffer holds at least one row
/// ([`Error::Empty`]), and, for a sampler `built_for` a capacity (per-row state), the
/// buffer has that capacity ([`check_capacity`]).
pub(crate) fn begin_draw(
    context: &SampleContext<'_>,
    built_for: Option<usize>,
    rows: usize,
    indices: &[usize],
    weights: &[f32],
) -> Result<Draw> {
    let room = indices.len().min(weights.len());
    if rows > room {
        return Err(Error::BatchTooSmall {
            requested: rows,
            room,
        });
    }
    check_context(context)?;
    let ring = context.ring;
    if ring.len == 0 {
        return Err(Error::Empty);
    }
    if let Some(built_for) = built_for {
        check_capacity(context.capacity, built_for)?;
    }
    Ok(Draw {
        ring,
        capacity: context.capacity,
        room,
    })
}

/// Checks that a sample context is self-consistent, so that the samplers never index out
/// of bounds: the ring fits the capacity and every flag column covers it.
pub(crate) fn check_context(context: &SampleContext<'_>) -> Result<()> {
    let ring = context.ring;
    let capacity = context.capacity;
    let ring_fits = ring.len <= capacity && (ring.len == 0 || ring.cursor < capacity);
    if !ring_fits {
        return Err(Error::config(
            "sample context",
            format!("ring {ring:?} does not fit a capacity of {capacity} rows"),
        ));
    }
    let covers = |column: Option<&[Flag]>| column.is_none_or(|c| c.len() >= capacity);
    if !(covers(context.terminated) && covers(context.truncated)) {
        return Err(Error::config(
            "sample context",
            format!("flag columns must hold all {capacity} rows of the capacity"),
        ));
    }
    Ok(())
}

/// Checks that the buffer sampled has the capacity a sampler was built for.
pub(crate) fn check_capacity(buffer: usize, sampler: usize) -> Result<()> {
    if buffer == sampler {
        Ok(())
    } else {
        Err(Error::config(
            "sampler",
            format!(
                "was built for {sampler} rows but the buffer holds {buffer}: build it with the buffer's capacity"
            ),
        ))
    }
}

/// A vector of `len` copies of `value`, or an error naming `what` if it cannot be allocated.
pub(crate) fn try_filled<T: Clone>(len: usize, value: T, what: &str) -> Result<Vec<T>> {
    let mut vector = Vec::new();
    vector.try_reserve_exact(len).map_err(|_| {
        Error::config(
            "capacity",
            format!("of {len} rows is too large: the {what} cannot be allocated; lower it"),
        )
    })?;
    vector.resize(len, value);
    Ok(vector)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_draws_only_stored_positions() {
        let ring = RingState {
            cursor: 3,
            len: 5,
            written: 13,
            ..RingState::default()
        };
        let context = SampleContext {
            ring,
            capacity: 10,
            terminated: None,
            truncated: None,
        };
        let mut sampler = Uniform::new(1);
        let (mut indices, mut weights) = (vec![0; 1000], vec![0.0; 1000]);
        assert_eq!(
            sampler
                .sample(&context, 1000, &mut indices, &mut weights)
                .unwrap(),
            1000
        );
        let mut seen = [0usize; 10];
        for &i in &indices {
            seen[i] += 1;
        }
        // Stored rows are positions 8, 9, 0, 1, 2.
        for p in [3, 4, 5, 6, 7] {
            assert_eq!(seen[p], 0, "position {p} is not stored");
        }
        for p in [8, 9, 0, 1, 2] {
            assert!(seen[p] > 120, "position {p} drawn {} times", seen[p]);
        }
        assert!(weights.iter().all(|&w| w == 1.0));
        let empty = SampleContext {
            ring: RingState::default(),
            ..context
        };
        assert!(matches!(
            sampler.sample(&empty, 1, &mut indices, &mut weights),
            Err(Error::Empty)
        ));
    }

    #[test]
    fn every_sampler_begins_with_the_same_checks() {
        use crate::sampler::{
            LastBatch, Prioritized, PrioritizedConfig, SliceSampler, WithoutReplacement,
        };

        let stored = RingState {
            cursor: 2,
            len: 2,
            written: 2,
            ..RingState::default()
        };
        let context = |ring: RingState, capacity: usize| SampleContext {
            ring,
            capacity,
            terminated: None,
            truncated: None,
        };
        let mut prioritized = Prioritized::new(4, PrioritizedConfig::default(), 0).unwrap();
        prioritized.rows_written(&RingState::default(), 2, 4);
        let mut samplers: [Box<dyn Sampler>; 4] = [
            Box::new(Uniform::new(0)),
            Box::new(prioritized),
            Box::new(WithoutReplacement::new(4, LastBatch::Keep, 0).unwrap()),
            Box::new(SliceSampler::new(1, 0).unwrap()),
        ];
        let (mut indices, mut weights) = ([0; 4], [0.0; 4]);
        for sampler in &mut samplers {
            let mut draw = |context: &SampleContext<'_>, weights: &mut [f32]| {
                sampler.sample(context, 2, &mut indices, weights)
            };
            // A ring that does not fit the capacity, before anything else.
            let too_long = RingState {
                len: 5,
                ..RingState::default()
            };
            let err = draw(&context(too_long, 4), &mut weights).unwrap_err();
            assert!(err.to_string().contains("sample context"), "{err}");
            assert!(matches!(
                draw(&context(RingState::default(), 4), &mut weights),
                Err(Error::Empty)
            ));
            assert_eq!(draw(&context(stored, 4), &mut weights).unwrap(), 2);
            // Weights shorter than the rows asked for: refused, first, never cut short.
            assert!(matches!(
                draw(&context(too_long, 4), &mut weights[..1]),
                Err(Error::BatchTooSmall {
                    requested: 2,
                    room: 1
                })
            ));
        }
        // Samplers with per-row state refuse a buffer of another capacity.
        for sampler in &mut samplers[1..3] {
            let err = sampler
                .sample(&context(stored, 5), 2, &mut indices, &mut weights)
                .unwrap_err();
            assert!(err.to_string().contains("was built for 4 rows"), "{err}");
        }
    }
}
