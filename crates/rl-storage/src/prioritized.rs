//! Prioritized experience replay, proportional variant (Schaul et al. 2016,
//! "Prioritized Experience Replay", arXiv:1511.05952).
//!
//! Row `i` is drawn with probability `P(i) = p_i / sum_j p_j`, where `p_i` is the row's
//! stored priority, and comes with the importance weight `w_i = (N * P(i))^-beta`
//! normalised by the largest weight of any stored row, `N` being the number of stored rows.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Location, MemoryPlan};

use crate::error::{Error, Result};
use crate::sampler::{Draw, SampleContext, Sampler, begin_draw, try_filled};
use crate::sampler_state::{self, StateFormat, StateReader, StateWriter};
use crate::storage::RingState;

/// Exponents of [`Prioritized`] sampling.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrioritizedConfig {
    /// How much priorities matter: a row's stored priority is `(p + epsilon)^alpha`; 0 is
    /// uniform sampling. Finite and `>= 0`. Default 0.6.
    pub alpha: f64,
    /// How much importance weights correct for the non-uniform draw: 0 leaves every weight
    /// at 1, 1 corrects fully. In `[0, 1]`; usually annealed towards 1 with
    /// [`Prioritized::set_beta`]. Default 0.4.
    pub beta: f64,
    /// Added to every priority given to [`Prioritized::update_priorities`], so that no
    /// stored row has probability zero. Finite and `> 0`. Default 1e-6.
    pub epsilon: f64,
}

impl Default for PrioritizedConfig {
    fn default() -> Self {
        Self {
            alpha: 0.6,
            beta: 0.4,
            epsilon: 1e-6,
        }
    }
}

impl PrioritizedConfig {
    /// Checks every field, naming the first that is out of range.
    fn validate(&self) -> Result<()> {
        if !(self.alpha.is_finite() && self.alpha >= 0.0) {
            return Err(Error::config(
                "alpha",
                format!(
                    "is {}: it must be finite and >= 0 (0.6 is usual)",
                    self.alpha
                ),
            ));
        }
        validate_beta(self.beta)?;
        if !(self.epsilon.is_finite() && self.epsilon > 0.0) {
            return Err(Error::config(
                "epsilon",
                format!(
                    "is {}: it must be finite and > 0 (1e-6 is usual)",
                    self.epsilon
                ),
            ));
        }
        Ok(())
    }
}

fn validate_beta(beta: f64) -> Result<()> {
    if (0.0..=1.0).contains(&beta) {
        Ok(())
    } else {
        Err(Error::config(
            "beta",
            format!("is {beta}: it must lie in [0, 1] (0.4 annealed to 1 is usual)"),
        ))
    }
}

/// Prioritized sampling with replacement, proportional to stored priorities, with
/// importance weights.
///
/// Priorities live in a sum tree (to draw) and a min tree (for the largest weight) over
/// the capacity, each `2 * capacity.next_power_of_two()` `f64`s, allocated by
/// [`Prioritized::new`]; sampling, [`Sampler::rows_written`] and
/// [`Prioritized::update_priorities`] allocate nothing.
///
/// - **Stored rows** are the positions [`Sampler::rows_written`] reported, so the buffer
///   must report every write (and, for a buffer reopened with rows in it, those rows
///   too). Other positions have no priority and are never drawn. [`Sampler::sample`]
///   refuses with an invalid-configuration error when the sampler's count of stored rows
///   differs from the ring's `len` (it missed a write, or the buffer was cleared: build a
///   new sampler then).
/// - **New rows** get the largest priority given so far, `max(1, max (p + epsilon))^alpha`,
///   so that each is likely drawn soon after it is written.
/// - **Drawing** is stratified: the total priority is split into `rows` equal segments and
///   one point is drawn uniformly in each (as SB3-contrib and TorchRL do), then found by
///   descending the sum tree. The descent only enters subtrees of positive mass, so
///   floating-point rounding can never land on a position without a row.
/// - **Weights** are `w_i = (N * P(i))^-beta / max_j (N * P(j))^-beta
///   = (p_i / p_min)^-beta`, in `[0, 1]` (1 for the rows of smallest priority), written
///   as `f32`.
/// - **Checkpoints** ([`Sampler::save_state`], kind `prioritized`) hold the generator,
///   the configuration (`beta` as last set included), the largest priority so far and
///   every position's priority (8 bytes per row of capacity); the trees are rebuilt from
///   them on load, to the bit. Loading takes all of it, so the configuration the sampler
///   was built with is replaced; the capacity must be the saved one.
///
/// # Example
/// ```
/// use rl_storage::{sampler::{Prioritized, PrioritizedConfig, SampleContext, Sampler}, storage::RingState};
///
/// let config = PrioritizedConfig { alpha: 1.0, ..PrioritizedConfig::default() };
/// let mut sampler = Prioritized::new(4, config, 7)?;
/// sampler.rows_written(&RingState::default(), 2, 4); // positions 0 and 1
/// sampler.update_priorities(&[0, 1], &[1.0, 3.0])?;
/// let context = SampleContext {
///     ring: RingState { cursor: 2, len: 2, written: 2, ..RingState::default() },
///     capacity: 4,
///     terminated: None,
///     truncated: None,
/// };
/// let (mut indices, mut weights) = ([0; 4], [0.0; 4]);
/// assert_eq!(sampler.sample(&context, 4, &mut indices, &mut weights)?, 4);
/// // Stratified draws: one in each quarter of the mass (1 for row 0, 3 for row 1).
/// assert_eq!(indices, [0, 1, 1, 1]);
/// // Row 0 has the smallest priority, so the largest weight: 1. Row 1's is (3 / 1)^-0.4.
/// assert_eq!(weights[0], 1.0);
/// assert!((weights[1] - 3f32.powf(-0.4)).abs() < 1e-5);
/// # Ok::<(), rl_storage::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Prioritized {
    rng: Xoshiro256PlusPlus,
    config: PrioritizedConfig,
    capacity: usize,
    /// Leaves of each tree (a power of two); leaf of position `p` is node `leaves + p`.
    leaves: usize,
    /// Sums of priorities, node 1 the root, node `i`'s children `2i` and `2i + 1`. Leaves
    /// without a stored row hold 0.
    sum: Vec<f64>,
    /// Minima of priorities, laid out like `sum`. Leaves without a stored row hold +inf
    /// (which is how the sampler tells stored positions apart).
    min: Vec<f64>,
    /// Largest `p + epsilon` given so far (at least 1).
    max_priority: f64,
    /// Positions holding a row.
    stored: usize,
}

impl Prioritized {
    /// A sampler for a buffer of `capacity` rows, drawing from a stream seeded with `seed`.
    /// Nothing is stored until [`Sampler::rows_written`] says so.
    ///
    /// # Errors
    /// Invalid configuration if `capacity` is zero or too large to allocate, or a field of
    /// `config` is out of range.
    pub fn new(capacity: usize, config: PrioritizedConfig, seed: u64) -> Result<Self> {
        config.validate()?;
        if capacity == 0 {
            return Err(Error::config(
                "capacity",
                "is zero: a buffer needs at least one row",
            ));
        }
        let nodes = capacity
            .checked_next_power_of_two()
            .and_then(|leaves| leaves.checked_mul(2))
            .ok_or_else(|| {
                Error::config(
                    "capacity",
                    format!("of {capacity} rows is too large for priority trees: lower it"),
                )
            })?;
        Ok(Self {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            config,
            capacity,
            leaves: nodes / 2,
            sum: try_filled(nodes, 0.0, "priority sum tree")?,
            min: try_filled(nodes, f64::INFINITY, "priority min tree")?,
            max_priority: 1.0,
            stored: 0,
        })
    }

    /// Sets the importance-weight exponent (to anneal it towards 1 during training).
    ///
    /// # Errors
    /// Invalid configuration if `beta` is not in `[0, 1]`; the old value is kept.
    pub fn set_beta(&mut self, beta: f64) -> Result<()> {
        validate_beta(beta)?;
        self.config.beta = beta;
        Ok(())
    }

    /// The exponents in use.
    pub fn config(&self) -> PrioritizedConfig {
        self.config
    }

    /// Sum of the stored priorities of every stored row.
    pub fn total_priority(&self) -> f64 {
        self.sum[1]
    }

    /// Stored priority (`(p + epsilon)^alpha`) of the row at `position`, or `None` if no
    /// row is stored there.
    pub fn priority(&self, position: usize) -> Option<f64> {
        self.is_stored(position)
            .then(|| self.sum[self.leaves + position])
    }

    /// Sets the priorities of the rows at `positions` (as returned by
    /// [`Sampler::sample`]), typically to their absolute TD errors. Each is stored as
    /// `(p + epsilon)^alpha`; the largest `p + epsilon` becomes the priority of rows
    /// written afterwards. With a position given twice, the last priority wins.
    ///
    /// # Errors
    /// Invalid configuration, with nothing changed, if the slices differ in length, a
    /// position is outside the capacity or holds no row, or a priority is negative, NaN,
    /// infinite, or so large that its stored value overflows.
    pub fn update_priorities(&mut self, positions: &[usize], priorities: &[f32]) -> Result<()> {
        if positions.len() != priorities.len() {
            return Err(Error::config(
                "priorities",
                format!(
                    "{} were given for {} positions: give one per position",
                    priorities.len(),
                    positions.len()
                ),
            ));
        }
        for (&position, &priority) in positions.iter().zip(priorities) {
            if position >= self.capacity {
                return Err(Error::config(
                    "priority position",
                    format!(
                        "{position} is outside the buffer's {} rows: pass positions returned by sample",
                        self.capacity
                    ),
                ));
            }
            if !self.is_stored(position) {
                return Err(Error::config(
                    "priority position",
                    format!("{position} holds no row yet: pass positions returned by sample"),
                ));
            }
            if !(priority.is_finite() && priority >= 0.0) {
                return Err(Error::config(
                    "priority",
                    format!(
                        "of position {position} is {priority}: priorities must be finite and >= 0"
                    ),
                ));
            }
            if !self.stored_value(priority).is_finite() {
                return Err(Error::config(
                    "priority",
                    format!(
                        "of position {position} is {priority}: (p + epsilon)^alpha overflows; \
                         rescale the priorities or lower alpha"
                    ),
                ));
            }
        }
        for (&position, &priority) in positions.iter().zip(priorities) {
            let value = self.stored_value(priority).max(f64::MIN_POSITIVE);
            self.set_leaf(position, value);
            self.max_priority = self
                .max_priority
                .max(f64::from(priority) + self.config.epsilon);
        }
        Ok(())
    }

    /// `(p + epsilon)^alpha`, possibly infinite.
    fn stored_value(&self, priority: f32) -> f64 {
        (f64::from(priority) + self.config.epsilon).powf(self.config.alpha)
    }

    fn is_stored(&self, position: usize) -> bool {
        position < self.capacity && self.min[self.leaves + position].is_finite()
    }

    /// Recomputes every inner node of both trees from the leaves, bottom up: the values
    /// [`Prioritized::set_leaf`] keeps, since each inner node is always the sum (the
    /// minimum) of its two children as last computed.
    fn rebuild(&mut self) {
        for node in (1..self.leaves).rev() {
            let (left, right) = (2 * node, 2 * node + 1);
            self.sum[node] = self.sum[left] + self.sum[right];
            self.min[node] = self.min[left].min(self.min[right]);
        }
    }

    /// Sets the priority of `position` in both trees and updates the nodes above it.
    fn set_leaf(&mut self, position: usize, value: f64) {
        let mut node = self.leaves + position;
        self.sum[node] = value;
        self.min[node] = value;
        while node > 1 {
            node /= 2;
            let (left, right) = (2 * node, 2 * node + 1);
            self.sum[node] = self.sum[left] + self.sum[right];
            self.min[node] = self.min[left].min(self.min[right]);
        }
    }

    /// The position whose prefix-sum interval holds `point`. Only subtrees of positive
    /// mass are entered (a node of positive sum has a child of positive sum), so the leaf
    /// reached holds a row whenever the root's sum is positive, even if rounding pushed
    /// `point` past the mass of the subtree it is in.
    fn find(&self, mut point: f64) -> usize {
        let mut node = 1;
        while node < self.leaves {
            let (left, right) = (2 * node, 2 * node + 1);
            if point < self.sum[left] {
                node = left;
            } else if self.sum[right] > 0.0 {
                // `point >= sum[left]`, so the difference rounds to `>= 0`.
                point -= self.sum[left];
                node = right;
            } else {
                node = left;
            }
        }
        node - self.leaves
    }
}

impl Sampler for Prioritized {
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
        } = begin_draw(context, Some(self.capacity), rows, indices, weights)?;
        let out_of_step = || {
            Error::config(
                "prioritized sampler",
                format!(
                    "has priorities for {} rows but the buffer holds {}: report every write with \
                     rows_written (and build a new sampler after clearing the buffer)",
                    self.stored, ring.len
                ),
            )
        };
        if self.stored != ring.len {
            return Err(out_of_step());
        }
        let total = self.total_priority();
        if !(total.is_finite() && total > 0.0) {
            return Err(Error::config(
                "priorities",
                format!("sum to {total}: rescale the priorities or lower alpha"),
            ));
        }
        let rows = rows.min(room);
        let segment = total / rows as f64;
        let below_total = total.next_down();
        let min_priority = self.min[1];
        let beta = self.config.beta;
        let oldest = ring.oldest(capacity);
        for (k, (index, weight)) in indices
            .iter_mut()
            .zip(weights.iter_mut())
            .take(rows)
            .enumerate()
        {
            let point = ((k as f64 + self.rng.random::<f64>()) * segment).min(below_total);
            let position = self.find(point);
            let in_ring = (position + capacity - oldest) % capacity < ring.len;
            if !(in_ring && self.is_stored(position)) {
                return Err(out_of_step());
            }
            *index = position;
            let ratio = self.sum[self.leaves + position] / min_priority;
            *weight = ratio.powf(-beta).min(1.0) as f32;
        }
        Ok(rows)
    }

    fn rows_written(&mut self, before: &RingState, rows: usize, capacity: usize) {
        // A write to a buffer of another capacity is refused when sampling.
        if capacity != self.capacity || before.cursor >= capacity {
            return;
        }
        let value = self
            .max_priority
            .powf(self.config.alpha)
            .clamp(f64::MIN_POSITIVE, f64::MAX);
        for k in 0..rows.min(capacity) {
            let position = (before.cursor + k) % capacity;
            if !self.is_stored(position) {
                self.stored += 1;
            }
            self.set_leaf(position, value);
        }
    }

    /// Kind `prioritized`, version 1: capacity, `alpha`, `beta`, `epsilon`, the
    /// generator, the largest `p + epsilon`, and each position's stored priority
    /// (`+inf` where no row is stored).
    fn state_format(&self) -> Option<StateFormat> {
        Some(StateFormat {
            kind: "prioritized",
            version: 1,
        })
    }

    fn save_state(&self, out: &mut StateWriter<'_>) -> Result<()> {
        out.write_u64(self.capacity as u64)?;
        out.write_f64(self.config.alpha)?;
        out.write_f64(self.config.beta)?;
        out.write_f64(self.config.epsilon)?;
        sampler_state::write_rng(out, &self.rng)?;
        out.write_f64(self.max_priority)?;
        // The min tree's leaves: the stored priority, +inf where no row is.
        out.write_f64s(&self.min[self.leaves..self.leaves + self.capacity])
    }

    fn load_state(
        mut self,
        ring: &RingState,
        capacity: usize,
        input: &mut StateReader<'_>,
    ) -> Result<Self> {
        let saved = input.read_u64()?;
        if saved != self.capacity as u64 {
            return Err(input.mismatch(
                format!("a prioritized sampler for {} rows", self.capacity),
                format!("the state of one for {saved} rows"),
            ));
        }
        let config = PrioritizedConfig {
            alpha: input.read_f64()?,
            beta: input.read_f64()?,
            epsilon: input.read_f64()?,
        };
        config
            .validate()
            .map_err(|e| input.corrupt(format!("the saved configuration is invalid: {e}")))?;
        let rng = sampler_state::read_rng(input)?;
        let max_priority = input.read_f64()?;
        if !(max_priority.is_finite() && max_priority >= 1.0) {
            return Err(input.corrupt(format!(
                "the largest priority is {max_priority} (finite and at least 1 expected)"
            )));
        }
        let leaves = self.leaves..self.leaves + self.capacity;
        input.read_f64s(&mut self.min[leaves.clone()])?;
        let mut stored = 0;
        for (position, node) in leaves.enumerate() {
            let value = self.min[node];
            if value.is_finite() && value >= f64::MIN_POSITIVE {
                stored += 1;
                self.sum[node] = value;
            } else if value == f64::INFINITY {
                self.sum[node] = 0.0;
            } else {
                return Err(input.corrupt(format!(
                    "the priority of position {position} is {value} (positive, or +inf for no row,                      expected)"
                )));
            }
        }
        self.rebuild();
        let ring_stored = (0..ring.len).all(|i| self.is_stored(ring.position(i, capacity)));
        if capacity != self.capacity || stored != ring.len || !ring_stored {
            return Err(input.corrupt(format!(
                "the sampler has priorities for {stored} rows but not for the {} rows of the                  checkpoint's ring",
                ring.len
            )));
        }
        self.rng = rng;
        self.config = config;
        self.max_priority = max_priority;
        self.stored = stored;
        Ok(self)
    }

    fn memory_plan(&self) -> MemoryPlan {
        let bytes = (self.sum.len() * size_of::<f64>()) as u64;
        MemoryPlan::new()
            .with("sum_tree", Location::Ram, bytes)
            .with("min_tree", Location::Ram, bytes)
    }
}

#[cfg(test)]
mod tests;
