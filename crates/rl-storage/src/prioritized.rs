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
#[derive(Clone, Copy, Debug, PartialEq)]
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
        } = begin_draw(context, Some(self.capacity), indices, weights)?;
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
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn alpha(alpha: f64) -> PrioritizedConfig {
        PrioritizedConfig {
            alpha,
            ..PrioritizedConfig::default()
        }
    }

    /// Writes `rows` rows to `ring` and tells the sampler.
    fn write(sampler: &mut Prioritized, ring: &mut RingState, rows: usize, capacity: usize) {
        sampler.rows_written(ring, rows, capacity);
        ring.cursor = (ring.cursor + rows) % capacity;
        ring.len = (ring.len + rows).min(capacity);
        ring.written += rows as u64;
    }

    fn context(ring: RingState, capacity: usize) -> SampleContext<'static> {
        SampleContext {
            ring,
            capacity,
            terminated: None,
            truncated: None,
        }
    }

    fn is_stored(ring: &RingState, capacity: usize, position: usize) -> bool {
        (0..ring.len).any(|i| ring.position(i, capacity) == position)
    }

    /// Every observable of the sampler's priorities.
    fn snapshot(sampler: &Prioritized) -> (f64, Vec<Option<f64>>) {
        let priorities = (0..sampler.capacity + 2)
            .map(|p| sampler.priority(p))
            .collect();
        (sampler.total_priority(), priorities)
    }

    proptest! {
        #[test]
        fn draws_stored_rows_with_the_textbook_weights(
            capacity in 1usize..40,
            start in 0usize..40,
            writes in proptest::collection::vec(1usize..40, 1..6),
            updates in proptest::collection::vec((0usize..40, 0u32..6, -8i32..8), 0..30),
            rows in 1usize..64,
            config in (0.0f64..2.0, 0.0f64..=1.0),
            seed in any::<u64>(),
        ) {
            let config = PrioritizedConfig { alpha: config.0, beta: config.1, epsilon: 1e-6 };
            let mut sampler = Prioritized::new(capacity, config, seed).unwrap();
            let mut ring = RingState { cursor: start % capacity, ..RingState::default() };
            for &rows in &writes {
                write(&mut sampler, &mut ring, rows.min(capacity), capacity);
            }
            // Updates on positions the ring does not hold are refused and change nothing.
            for &(position, mantissa, exponent) in &updates {
                let priority = mantissa as f32 * 10f32.powi(exponent);
                let before = snapshot(&sampler);
                let result = sampler.update_priorities(&[position], &[priority]);
                if is_stored(&ring, capacity, position) {
                    prop_assert!(result.is_ok(), "{:?}", result);
                } else {
                    prop_assert!(result.is_err());
                    prop_assert_eq!(snapshot(&sampler), before);
                }
            }
            let (mut indices, mut weights) = (vec![usize::MAX; rows], vec![f32::NAN; rows]);
            prop_assert_eq!(sampler.sample(&context(ring, capacity), rows, &mut indices, &mut weights).unwrap(), rows);

            let priorities: Vec<Option<f64>> = (0..capacity).map(|p| sampler.priority(p)).collect();
            for (p, priority) in priorities.iter().enumerate() {
                prop_assert_eq!(priority.is_some(), is_stored(&ring, capacity, p));
            }
            let n = ring.len as f64;
            let total: f64 = priorities.iter().flatten().sum();
            prop_assert!((total - sampler.total_priority()).abs() <= 1e-9 * total);
            let naive = |p: f64| (n * p / total).powf(-config.beta);
            let max_weight = priorities.iter().flatten().map(|&p| naive(p)).fold(0.0, f64::max);
            for (&position, &weight) in indices.iter().zip(&weights) {
                prop_assert!(is_stored(&ring, capacity, position), "position {} is not stored", position);
                let expected = naive(priorities[position].unwrap()) / max_weight;
                prop_assert!(weight > 0.0 && weight <= 1.0, "weight {}", weight);
                prop_assert!((f64::from(weight) - expected).abs() <= 1e-5 * expected, "{} vs {}", weight, expected);
            }
        }
    }

    #[test]
    fn frequencies_match_priorities() {
        // 8 positions, 5 stored: the padding and unstored leaves must never be drawn.
        let mut sampler = Prioritized::new(8, alpha(1.0), 2016).unwrap();
        let mut ring = RingState {
            cursor: 6,
            ..RingState::default()
        };
        write(&mut sampler, &mut ring, 5, 8); // positions 6, 7, 0, 1, 2
        let positions = [6, 7, 0, 1, 2];
        let given = [1.0f32, 2.0, 3.0, 4.0, 10.0];
        sampler.update_priorities(&positions, &given).unwrap();
        let context = context(ring, 8);
        // Small batches: with few strata, each draw within its segment must be uniform too.
        let (mut indices, mut weights) = ([0; 3], [0.0; 3]);
        let mut counts = [0u64; 8];
        let calls = 70_000;
        for _ in 0..calls {
            sampler
                .sample(&context, 3, &mut indices, &mut weights)
                .unwrap();
            for &i in &indices {
                counts[i] += 1;
            }
        }
        let draws = (calls * 3) as f64;
        let sum: f64 = given.iter().map(|&p| f64::from(p) + 1e-6).sum();
        for (&position, &p) in positions.iter().zip(&given) {
            let expected = (f64::from(p) + 1e-6) / sum;
            // Binomial standard deviation; stratification only lowers the variance.
            let sigma = (draws * expected * (1.0 - expected)).sqrt();
            let deviation = (counts[position] as f64 - draws * expected).abs();
            assert!(
                deviation <= 5.0 * sigma,
                "position {position}: {} draws, {} expected (sigma {sigma:.1})",
                counts[position],
                draws * expected
            );
        }
        assert_eq!(counts[3] + counts[4] + counts[5], 0, "unstored rows drawn");
    }

    #[test]
    fn invalid_updates_change_nothing() {
        let mut sampler = Prioritized::new(10, alpha(0.7), 1).unwrap();
        let mut ring = RingState::default();
        write(&mut sampler, &mut ring, 4, 10);
        sampler.update_priorities(&[0, 1], &[0.5, 2.0]).unwrap();
        let before = snapshot(&sampler);
        let invalid: [(&[usize], &[f32]); 8] = [
            (&[0, 1], &[1.0]),
            (&[2, 0], &[1.0, f32::NAN]),
            (&[2, 0], &[1.0, -0.5]),
            (&[2, 0], &[1.0, f32::INFINITY]),
            (&[2, 10], &[1.0, 1.0]),
            (&[2, usize::MAX], &[1.0, 1.0]),
            // Position 7 holds no row yet.
            (&[2, 7], &[1.0, 1.0]),
            (&[2, 3], &[1.0, f32::NEG_INFINITY]),
        ];
        for (positions, priorities) in invalid {
            assert!(
                sampler.update_priorities(positions, priorities).is_err(),
                "{positions:?} {priorities:?}"
            );
            assert_eq!(snapshot(&sampler), before);
        }
        // Nor did they raise the priority of new rows: max is still 2 + epsilon.
        write(&mut sampler, &mut ring, 1, 10);
        let expected = (2.0f64 + 1e-6).powf(0.7);
        assert!((sampler.priority(4).unwrap() - expected).abs() < 1e-12);
        assert_eq!(sampler.priority(7), None);
    }

    #[test]
    fn unstored_positions_are_never_drawn() {
        let mut sampler = Prioritized::new(10, alpha(1.0), 3).unwrap();
        let mut ring = RingState {
            cursor: 8,
            ..RingState::default()
        };
        write(&mut sampler, &mut ring, 3, 10); // positions 8, 9, 0
        assert!(sampler.update_priorities(&[5], &[1e6]).is_err());
        // Extreme magnitudes: a tiny priority next to huge ones.
        sampler
            .update_priorities(&[8, 9, 0], &[0.0, 1e30, 3e38])
            .unwrap();
        let context = context(ring, 10);
        let (mut indices, mut weights) = ([0; 64], [0.0; 64]);
        for _ in 0..200 {
            sampler
                .sample(&context, 64, &mut indices, &mut weights)
                .unwrap();
            assert!(indices.iter().all(|i| [8, 9, 0].contains(i)), "{indices:?}");
            assert!(weights.iter().all(|w| (0.0..=1.0).contains(w)));
        }
        // Points at or past the total still land on a stored row.
        for point in [0.0, sampler.total_priority(), f64::MAX, f64::INFINITY] {
            assert!([8, 9, 0].contains(&sampler.find(point)));
        }
    }

    #[test]
    fn new_rows_get_the_largest_priority() {
        let mut sampler = Prioritized::new(4, alpha(0.5), 0).unwrap();
        let mut ring = RingState::default();
        write(&mut sampler, &mut ring, 2, 4);
        assert_eq!(sampler.priority(0), Some(1.0));
        assert_eq!(sampler.total_priority(), 2.0);
        sampler.update_priorities(&[0, 1], &[8.0, 0.0]).unwrap();
        write(&mut sampler, &mut ring, 3, 4); // positions 2, 3, and 0 again
        let max = (8.0f64 + 1e-6).sqrt();
        for position in [2, 3, 0] {
            assert!((sampler.priority(position).unwrap() - max).abs() < 1e-12);
        }
        assert!((sampler.priority(1).unwrap() - 1e-3).abs() < 1e-15);
        assert!((sampler.total_priority() - 3.0 * max - 1e-3).abs() < 1e-12);
    }

    #[test]
    fn config_is_validated() {
        let bad = [
            PrioritizedConfig {
                alpha: -0.1,
                ..PrioritizedConfig::default()
            },
            PrioritizedConfig {
                alpha: f64::NAN,
                ..PrioritizedConfig::default()
            },
            PrioritizedConfig {
                beta: 1.5,
                ..PrioritizedConfig::default()
            },
            PrioritizedConfig {
                beta: f64::NAN,
                ..PrioritizedConfig::default()
            },
            PrioritizedConfig {
                epsilon: 0.0,
                ..PrioritizedConfig::default()
            },
            PrioritizedConfig {
                epsilon: f64::INFINITY,
                ..PrioritizedConfig::default()
            },
        ];
        for config in bad {
            assert!(Prioritized::new(8, config, 0).is_err(), "{config:?}");
        }
        assert!(Prioritized::new(0, PrioritizedConfig::default(), 0).is_err());
        assert!(Prioritized::new(usize::MAX, PrioritizedConfig::default(), 0).is_err());
        let mut sampler = Prioritized::new(3, PrioritizedConfig::default(), 0).unwrap();
        assert!(sampler.set_beta(-0.1).is_err());
        assert!(sampler.set_beta(f64::NAN).is_err());
        assert_eq!(sampler.config().beta, 0.4);
        sampler.set_beta(1.0).unwrap();
        assert_eq!(sampler.config().beta, 1.0);
        // 3 leaves round up to 4: two trees of 8 nodes.
        assert_eq!(sampler.memory_plan().total(Location::Ram), 2 * 8 * 8);
    }

    #[test]
    fn sampling_out_of_step_with_the_buffer_is_refused() {
        let mut sampler = Prioritized::new(6, PrioritizedConfig::default(), 0).unwrap();
        let (mut indices, mut weights) = ([0; 4], [0.0; 4]);
        let mut ring = RingState::default();
        assert!(matches!(
            sampler.sample(&context(ring, 6), 4, &mut indices, &mut weights),
            Err(Error::Empty)
        ));
        // The buffer holds rows the sampler was never told about.
        let restored = RingState {
            cursor: 3,
            len: 3,
            written: 3,
            ..RingState::default()
        };
        assert!(
            sampler
                .sample(&context(restored, 6), 4, &mut indices, &mut weights)
                .is_err()
        );
        write(&mut sampler, &mut ring, 3, 6);
        assert_eq!(
            sampler
                .sample(&context(ring, 6), 4, &mut indices, &mut weights)
                .unwrap(),
            4
        );
        assert!(
            sampler
                .sample(&context(ring, 7), 4, &mut indices, &mut weights)
                .is_err()
        );
    }

    #[test]
    fn sampling_and_updates_allocate_nothing() {
        let mut sampler = Prioritized::new(1000, PrioritizedConfig::default(), 5).unwrap();
        let mut ring = RingState::default();
        let (mut indices, mut weights) = ([0; 64], [0.0; 64]);
        let priorities = [0.25f32; 64];
        let ((), stats) = rl_testkit::measure(|| {
            for _ in 0..40 {
                write(&mut sampler, &mut ring, 50, 1000);
                sampler
                    .sample(&context(ring, 1000), 64, &mut indices, &mut weights)
                    .unwrap();
                sampler.update_priorities(&indices, &priorities).unwrap();
            }
        });
        assert_eq!(stats.allocations, 0);
        assert_eq!(ring.len, 1000);
    }
}
