//! Scoring all actions chunk by chunk, without a `batch x n x d` tensor.

use std::ops::Range;

use rand::Rng;
use rl_core::env::check_len;
use rl_core::{Error, FeatureTable, Location, MemoryPlan, Result};

use crate::mask::Masks;

/// How [`ChunkedScorer::sample`] draws an action.
///
/// With one seed, both methods are reproducible for a given chunk size. Gumbel-max draws
/// its noise chunk by chunk, so changing the chunk size changes which samples come out
/// (not their distribution).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// One pass: `argmax_i s_i + g_i` with Gumbel noise `g_i` (one draw per action).
    GumbelMax,
    /// Two passes: log-sum-exp, then walk the cumulative distribution to a uniform draw
    /// (one draw per row).
    InverseCdf,
}

/// A per-action quantity given chunk by chunk: called with a range of actions and a
/// `batch x range.len()` buffer (row-major) to fill, e.g. with [`dot_scores`].
pub type ChunkValues<'a> = dyn FnMut(Range<usize>, &mut [f32]) -> Result<()> + 'a;

/// Writes `out[b * len + j] = <q[b], f_{range.start + j}>` for every row `b` of `q`
/// (`batch x d`, row-major), with `len = range.len()`.
///
/// This is the chunked score the scorer uses; it is public so that a second quantity
/// (a Q-value head over another table) can be fed to [`ChunkedScorer::expectation`].
///
/// # Errors
/// [`Error::ShapeMismatch`] if `q.len()` is not a multiple of the table's `d` or `out`
/// has not `batch x len` floats, [`Error::ActionOutOfRange`] if `range` leaves the table.
pub fn dot_scores(
    table: &FeatureTable,
    q: &[f32],
    range: Range<usize>,
    out: &mut [f32],
) -> Result<()> {
    let d = table.dim();
    if !q.len().is_multiple_of(d) {
        return Err(Error::ShapeMismatch {
            what: "state vectors (batch x d)",
            expected: q.len().div_ceil(d) * d,
            actual: q.len(),
        });
    }
    if range.end > table.rows() || range.start > range.end {
        return Err(Error::ActionOutOfRange {
            index: range.end as u64,
            n: u32::try_from(table.rows()).unwrap_or(u32::MAX),
        });
    }
    let len = range.len();
    check_len("chunk scores", q.len() / d * len, out.len())?;
    let rows = &table.as_slice()[range.start * d..range.end * d];
    if len == 0 {
        return Ok(());
    }
    for (qb, ob) in q.chunks_exact(d).zip(out.chunks_exact_mut(len)) {
        for (f, o) in rows.chunks_exact(d).zip(ob.iter_mut()) {
            *o = dot(qb, f);
        }
    }
    Ok(())
}

#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// What a streaming pass averages under the softmax weights.
enum Weighted<'v, 'c> {
    /// Nothing: the pass only computes log-sum-exp.
    Nothing,
    /// The score itself (for the entropy).
    Score,
    /// A chunked quantity given by the caller.
    Given(&'v mut ChunkValues<'c>),
}

/// Streaming `(max, sum of exp(x - max), sum of exp(x - max) * v)` for one row.
#[derive(Clone, Copy, Debug)]
struct Acc {
    max: f32,
    sum: f64,
    weighted: f64,
}

impl Acc {
    const EMPTY: Acc = Acc {
        max: f32::NEG_INFINITY,
        sum: 0.0,
        weighted: 0.0,
    };

    #[inline]
    fn push(&mut self, x: f32, v: f32) {
        if x == f32::NEG_INFINITY {
            return;
        }
        if x > self.max {
            let scale = f64::from(self.max - x).exp();
            self.sum *= scale;
            self.weighted *= scale;
            self.max = x;
        }
        let w = f64::from(x - self.max).exp();
        self.sum += w;
        self.weighted += w * f64::from(v);
    }

    fn log_sum_exp(&self) -> f32 {
        self.max + self.sum.ln() as f32
    }

    /// `x - lse`, subtracting the max first so that large scores keep their precision.
    #[inline]
    fn log_prob(&self, x: f32) -> f32 {
        (f64::from(x - self.max) - self.sum.ln()) as f32
    }

    /// `lse - E[s]` in f64, so that large scores do not cancel in f32.
    fn entropy(&self) -> f32 {
        let h = f64::from(self.max) + self.sum.ln() - self.weighted / self.sum;
        // Rounding can leave a tiny negative entropy for a near-deterministic row.
        h.max(0.0) as f32
    }

    fn mean(&self) -> f32 {
        (self.weighted / self.sum) as f32
    }
}

/// Scores `s[b, i] = <q[b], f_i>` of every action `i` of a shared feature table for a
/// batch of state vectors `q`, one chunk of actions at a time, and builds softmax
/// quantities on those chunks.
///
/// All scratch (`max_batch x chunk` floats plus a few floats per row) is allocated in
/// [`ChunkedScorer::new`]; no operation allocates afterwards. Masked actions score
/// `-inf` in every operation.
#[derive(Clone, Debug)]
pub struct ChunkedScorer {
    table: FeatureTable,
    chunk: usize,
    max_batch: usize,
    scratch: Vec<f32>,
    values: Vec<f32>,
    acc: Vec<Acc>,
    best: Vec<(f32, u32)>,
    heap_len: Vec<usize>,
}

impl ChunkedScorer {
    /// A scorer over `table` with `chunk` actions per pass, for batches of at most
    /// `max_batch` rows.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `chunk` or `max_batch` is zero, or the table has more
    /// than `u32::MAX` rows.
    pub fn new(table: FeatureTable, chunk: usize, max_batch: usize) -> Result<Self> {
        if chunk == 0 || max_batch == 0 {
            return Err(Error::config(
                "chunked scorer",
                format!("has chunk {chunk} and max_batch {max_batch}: both must be at least 1"),
            ));
        }
        if u32::try_from(table.rows()).is_err() {
            return Err(Error::config(
                "scorer table",
                format!("has {} rows: at most u32::MAX actions", table.rows()),
            ));
        }
        let chunk = chunk.min(table.rows());
        Ok(Self {
            table,
            chunk,
            max_batch,
            scratch: vec![0.0; max_batch * chunk],
            values: vec![0.0; max_batch * chunk],
            acc: vec![Acc::EMPTY; max_batch],
            best: vec![(f32::NEG_INFINITY, 0); max_batch],
            heap_len: vec![0; max_batch],
        })
    }

    /// The shared table.
    pub fn table(&self) -> &FeatureTable {
        &self.table
    }

    /// Actions per chunk (capped at the number of actions).
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Number of actions.
    pub fn n(&self) -> usize {
        self.table.rows()
    }

    /// The table (shared, once per process) and the transient scratch: two
    /// `max_batch x chunk` float buffers and per-row accumulators. Nothing scales with
    /// `batch x n` except the caller's buffer for [`ChunkedScorer::full_distribution`].
    pub fn memory_plan(&self) -> MemoryPlan {
        let floats = 2 * self.max_batch * self.chunk;
        self.table
            .memory_plan("scorer/table (shared)")
            .with("scorer/chunk scratch", Location::Ram, (floats * 4) as u64)
            .with(
                "scorer/row accumulators",
                Location::Ram,
                (self.max_batch * (size_of::<Acc>() + size_of::<(f32, u32)>() + size_of::<usize>()))
                    as u64,
            )
    }

    /// Validates `q` and masks; returns the batch size.
    fn start(&self, q: &[f32], masks: Masks<'_>, need: usize) -> Result<usize> {
        let d = self.table.dim();
        let batch = q.len() / d;
        if !q.len().is_multiple_of(d) || batch > self.max_batch {
            return Err(Error::ShapeMismatch {
                what: "state vectors (batch x d, batch at most max_batch)",
                expected: batch.min(self.max_batch) * d,
                actual: q.len(),
            });
        }
        masks.validate(self.n(), batch, need)?;
        Ok(batch)
    }

    /// Fills the scratch with the masked scores of `range` for `batch` rows.
    fn fill(&mut self, q: &[f32], batch: usize, range: Range<usize>, masks: Masks<'_>) {
        let len = range.len();
        let d = self.table.dim();
        let rows = &self.table.as_slice()[range.start * d..range.end * d];
        for (b, (qb, ob)) in q
            .chunks_exact(d)
            .zip(self.scratch[..batch * len].chunks_exact_mut(len))
            .enumerate()
        {
            for (j, (f, o)) in rows.chunks_exact(d).zip(ob.iter_mut()).enumerate() {
                *o = if masks.allowed(b, (range.start + j) as u32) {
                    dot(qb, f)
                } else {
                    f32::NEG_INFINITY
                };
            }
        }
    }

    fn ranges(&self) -> impl Iterator<Item = Range<usize>> + use<> {
        let (n, chunk) = (self.n(), self.chunk);
        (0..n).step_by(chunk).map(move |s| s..(s + chunk).min(n))
    }

    /// One streaming pass of log-sum-exp, also accumulating the softmax-weighted mean
    /// of `weighted` (nothing, the score itself, or a given chunked quantity).
    fn pass(
        &mut self,
        q: &[f32],
        batch: usize,
        masks: Masks<'_>,
        mut weighted: Weighted<'_, '_>,
    ) -> Result<()> {
        self.acc[..batch].fill(Acc::EMPTY);
        for range in self.ranges() {
            let len = range.len();
            self.fill(q, batch, range.clone(), masks);
            if let Weighted::Given(f) = &mut weighted {
                f(range, &mut self.values[..batch * len])?;
            }
            for b in 0..batch {
                let acc = &mut self.acc[b];
                for j in 0..len {
                    let x = self.scratch[b * len + j];
                    let v = match weighted {
                        Weighted::Nothing => 0.0,
                        Weighted::Score => x,
                        Weighted::Given(_) => self.values[b * len + j],
                    };
                    acc.push(x, v);
                }
            }
        }
        Ok(())
    }

    /// `log sum_i exp(s[b, i])` over available actions, per row, into `out` (`batch`).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for wrong buffer sizes, [`Error::InvalidConfig`] if a
    /// row has no available action.
    pub fn log_sum_exp(&mut self, q: &[f32], masks: Masks<'_>, out: &mut [f32]) -> Result<()> {
        let batch = self.start(q, masks, 1)?;
        check_len("log-sum-exp output", batch, out.len())?;
        self.pass(q, batch, masks, Weighted::Nothing)?;
        for (o, acc) in out.iter_mut().zip(&self.acc) {
            *o = acc.log_sum_exp();
        }
        Ok(())
    }

    /// `log pi(actions[b] | q[b])` under the softmax of the scores, per row, into `out`.
    /// A masked action has log-probability `-inf`.
    ///
    /// # Errors
    /// As [`ChunkedScorer::log_sum_exp`], plus [`Error::ActionOutOfRange`] for an action
    /// not below `n`.
    pub fn log_softmax(
        &mut self,
        q: &[f32],
        actions: &[u32],
        masks: Masks<'_>,
        out: &mut [f32],
    ) -> Result<()> {
        let batch = self.start(q, masks, 1)?;
        check_len("actions", batch, actions.len())?;
        check_len("log-softmax output", batch, out.len())?;
        let n = self.n() as u32;
        if let Some(&a) = actions.iter().find(|&&a| a >= n) {
            return Err(Error::ActionOutOfRange {
                index: u64::from(a),
                n,
            });
        }
        self.pass(q, batch, masks, Weighted::Nothing)?;
        let d = self.table.dim();
        for (b, ((o, &a), qb)) in out
            .iter_mut()
            .zip(actions)
            .zip(q.chunks_exact(d))
            .enumerate()
        {
            *o = match self.table.row(a as usize) {
                Some(f) if masks.allowed(b, a) => self.acc[b].log_prob(dot(qb, f)),
                _ => f32::NEG_INFINITY,
            };
        }
        Ok(())
    }

    /// Entropy `-sum_i pi_i log pi_i` of the softmax over available actions, per row.
    ///
    /// # Errors
    /// As [`ChunkedScorer::log_sum_exp`].
    pub fn entropy(&mut self, q: &[f32], masks: Masks<'_>, out: &mut [f32]) -> Result<()> {
        let batch = self.start(q, masks, 1)?;
        check_len("entropy output", batch, out.len())?;
        self.pass(q, batch, masks, Weighted::Score)?;
        for (o, acc) in out.iter_mut().zip(&self.acc) {
            *o = acc.entropy();
        }
        Ok(())
    }

    /// `E_pi[v]` per row, where `v` is another chunked score: `values(range, buf)` must
    /// write `batch x range.len()` values (row-major) for the actions in `range`, e.g.
    /// with [`dot_scores`] over a Q-value table. For discrete SAC the soft value
    /// `E_pi[Q - alpha log pi]` is `expectation(Q) + alpha * entropy`.
    ///
    /// # Errors
    /// As [`ChunkedScorer::log_sum_exp`], plus whatever `values` returns.
    pub fn expectation(
        &mut self,
        q: &[f32],
        masks: Masks<'_>,
        values: &mut ChunkValues<'_>,
        out: &mut [f32],
    ) -> Result<()> {
        let batch = self.start(q, masks, 1)?;
        check_len("expectation output", batch, out.len())?;
        self.pass(q, batch, masks, Weighted::Given(values))?;
        for (o, acc) in out.iter_mut().zip(&self.acc) {
            *o = acc.mean();
        }
        Ok(())
    }

    /// Samples one available action per row from the softmax of the scores.
    ///
    /// # Errors
    /// As [`ChunkedScorer::log_sum_exp`].
    pub fn sample<R: Rng + ?Sized>(
        &mut self,
        q: &[f32],
        masks: Masks<'_>,
        method: Sampling,
        rng: &mut R,
        out: &mut [u32],
    ) -> Result<()> {
        let batch = self.start(q, masks, 1)?;
        check_len("sample output", batch, out.len())?;
        match method {
            Sampling::GumbelMax => {
                self.best[..batch].fill((f32::NEG_INFINITY, 0));
                for range in self.ranges() {
                    let len = range.len();
                    self.fill(q, batch, range.clone(), masks);
                    for b in 0..batch {
                        for j in 0..len {
                            let x = self.scratch[b * len + j];
                            if x == f32::NEG_INFINITY {
                                continue;
                            }
                            // u in (0, 1): never 0, so both logs are finite.
                            let u: f64 = 1.0 - rng.random::<f64>();
                            let g = -(-u.ln()).ln();
                            let key = (f64::from(x) + g) as f32;
                            if key > self.best[b].0 || self.best[b].0 == f32::NEG_INFINITY {
                                self.best[b] = (key, (range.start + j) as u32);
                            }
                        }
                    }
                }
                for (o, best) in out.iter_mut().zip(&self.best) {
                    *o = best.1;
                }
            }
            Sampling::InverseCdf => {
                self.pass(q, batch, masks, Weighted::Nothing)?;
                // best[b] = (remaining probability mass to walk, last available action).
                for b in 0..batch {
                    self.best[b] = (rng.random::<f32>(), u32::MAX);
                }
                for range in self.ranges() {
                    let len = range.len();
                    self.fill(q, batch, range.clone(), masks);
                    for b in 0..batch {
                        let acc = self.acc[b];
                        let (ref mut left, ref mut chosen) = self.best[b];
                        if *left < 0.0 {
                            continue;
                        }
                        for j in 0..len {
                            let x = self.scratch[b * len + j];
                            if x == f32::NEG_INFINITY {
                                continue;
                            }
                            *chosen = (range.start + j) as u32;
                            *left -= acc.log_prob(x).exp();
                            if *left < 0.0 {
                                break;
                            }
                        }
                    }
                }
                // Rounding can leave a sliver of mass: the last available action takes it.
                for (o, best) in out.iter_mut().zip(&self.best) {
                    *o = best.1;
                }
            }
        }
        Ok(())
    }

    /// The `k` highest-scoring available actions per row, best first (ties: lower index
    /// first), into `indices` and `scores` (`batch x k` each). Uses the output slices as
    /// one fixed-size min-heap per row.
    ///
    /// # Errors
    /// As [`ChunkedScorer::log_sum_exp`], and [`Error::InvalidConfig`] if `k` is zero
    /// or a row has fewer than `k` available actions.
    pub fn top_k(
        &mut self,
        q: &[f32],
        masks: Masks<'_>,
        k: usize,
        indices: &mut [u32],
        scores: &mut [f32],
    ) -> Result<()> {
        if k == 0 {
            return Err(Error::config("top-k", "has k = 0: ask for at least 1"));
        }
        let batch = self.start(q, masks, k)?;
        check_len("top-k indices", batch * k, indices.len())?;
        check_len("top-k scores", batch * k, scores.len())?;
        self.heap_len[..batch].fill(0);
        for range in self.ranges() {
            let len = range.len();
            self.fill(q, batch, range.clone(), masks);
            for b in 0..batch {
                let hi = &mut indices[b * k..(b + 1) * k];
                let hs = &mut scores[b * k..(b + 1) * k];
                let filled = &mut self.heap_len[b];
                for j in 0..len {
                    let x = self.scratch[b * len + j];
                    if x == f32::NEG_INFINITY {
                        continue;
                    }
                    let i = (range.start + j) as u32;
                    if *filled < k {
                        hs[*filled] = x;
                        hi[*filled] = i;
                        sift_up(hs, hi, *filled);
                        *filled += 1;
                    } else if better((x, i), (hs[0], hi[0])) {
                        hs[0] = x;
                        hi[0] = i;
                        sift_down(hs, hi, k);
                    }
                }
            }
        }
        // Heap sort in place: moving the worst to the back leaves the best first.
        for (hi, hs) in indices.chunks_exact_mut(k).zip(scores.chunks_exact_mut(k)) {
            for end in (1..k).rev() {
                hs.swap(0, end);
                hi.swap(0, end);
                sift_down(hs, hi, end);
            }
        }
        Ok(())
    }

    /// The full `batch x n` softmax probabilities into a caller buffer: the one
    /// operation whose memory scales with `batch x n` (the caller's `out`, not the
    /// scorer's scratch). Masked actions get probability `0`.
    ///
    /// # Errors
    /// As [`ChunkedScorer::log_sum_exp`].
    pub fn full_distribution(
        &mut self,
        q: &[f32],
        masks: Masks<'_>,
        out: &mut [f32],
    ) -> Result<()> {
        let batch = self.start(q, masks, 1)?;
        let n = self.n();
        check_len("full distribution output", batch * n, out.len())?;
        self.pass(q, batch, masks, Weighted::Nothing)?;
        for range in self.ranges() {
            let len = range.len();
            self.fill(q, batch, range.clone(), masks);
            for b in 0..batch {
                let acc = self.acc[b];
                for j in 0..len {
                    out[b * n + range.start + j] = acc.log_prob(self.scratch[b * len + j]).exp();
                }
            }
        }
        Ok(())
    }
}

/// Whether `a` ranks above `b`: higher score, then lower index.
#[inline]
fn better(a: (f32, u32), b: (f32, u32)) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}

/// Min-heap (worst at the root) on parallel slices.
fn sift_up(s: &mut [f32], i: &mut [u32], mut pos: usize) {
    while pos > 0 {
        let parent = (pos - 1) / 2;
        if better((s[parent], i[parent]), (s[pos], i[pos])) {
            s.swap(parent, pos);
            i.swap(parent, pos);
            pos = parent;
        } else {
            break;
        }
    }
}

fn sift_down(s: &mut [f32], i: &mut [u32], len: usize) {
    let mut pos = 0;
    loop {
        let (l, r) = (2 * pos + 1, 2 * pos + 2);
        let mut worst = pos;
        if l < len && better((s[worst], i[worst]), (s[l], i[l])) {
            worst = l;
        }
        if r < len && better((s[worst], i[worst]), (s[r], i[r])) {
            worst = r;
        }
        if worst == pos {
            return;
        }
        s.swap(worst, pos);
        i.swap(worst, pos);
        pos = worst;
    }
}

#[cfg(test)]
#[allow(
    clippy::needless_range_loop,
    reason = "the naive models index rows and actions like the maths does"
)]
mod tests {
    use super::*;
    use crate::mask::ActionMask;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    /// Naive full scores (batch x n), masked to -inf.
    fn naive_scores(t: &FeatureTable, q: &[f32], masks: Masks<'_>) -> Vec<Vec<f64>> {
        q.chunks(t.dim())
            .enumerate()
            .map(|(b, qb)| {
                (0..t.rows())
                    .map(|i| {
                        if masks.allowed(b, i as u32) {
                            f64::from(dot(qb, t.row(i).unwrap()))
                        } else {
                            f64::NEG_INFINITY
                        }
                    })
                    .collect()
            })
            .collect()
    }

    fn naive_log_probs(s: &[f64]) -> Vec<f64> {
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + s.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
        s.iter().map(|x| x - lse).collect()
    }

    fn close(a: f32, b: f64) -> bool {
        (f64::from(a) - b).abs() <= 1e-5 * (1.0 + b.abs())
            || (a == f32::NEG_INFINITY && b == f64::NEG_INFINITY)
    }

    type Case = (
        usize,
        usize,
        usize,
        Vec<f32>,
        Vec<f32>,
        Vec<f32>,
        Vec<Vec<bool>>,
        Vec<u32>,
    );

    fn case() -> impl Strategy<Value = Case> {
        (1usize..25, 1usize..4, 1usize..4).prop_flat_map(|(n, d, batch)| {
            (
                Just(n),
                Just(d),
                Just(batch),
                proptest::collection::vec(-3.0f32..3.0, n * d),
                proptest::collection::vec(-3.0f32..3.0, n * d),
                proptest::collection::vec(-2.0f32..2.0, batch * d),
                proptest::collection::vec(proptest::collection::vec(any::<bool>(), n), batch),
                proptest::collection::vec(0..n as u32, batch),
            )
        })
    }

    fn masks_from(bits: &[Vec<bool>], actions: &[u32]) -> Vec<ActionMask> {
        bits.iter()
            .zip(actions)
            .map(|(row, &a)| {
                let mut m = ActionMask::none(row.len() as u32);
                for (i, &on) in row.iter().enumerate() {
                    if on {
                        m.allow(i as u32).unwrap();
                    }
                }
                m.allow(a).unwrap(); // at least one available action per row
                m
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn chunked_equals_naive((n, d, batch, f, g, q, bits, actions) in case()) {
            let t = FeatureTable::new(n, d, f).unwrap();
            let qt = FeatureTable::new(n, d, g).unwrap();
            let row_masks = masks_from(&bits, &actions);
            for masks in [Masks::None, Masks::PerRow(&row_masks)] {
                let s = naive_scores(&t, &q, masks);
                let qv = naive_scores(&qt, &q, Masks::None);
                for chunk in [1, 7, n, n + 3] {
                    let mut sc = ChunkedScorer::new(t.clone(), chunk, batch).unwrap();
                    let mut out = vec![0.0; batch];
                    sc.log_softmax(&q, &actions, masks, &mut out).unwrap();
                    for b in 0..batch {
                        let lp = naive_log_probs(&s[b]);
                        prop_assert!(close(out[b], lp[actions[b] as usize]), "log_softmax {} {}", out[b], lp[actions[b] as usize]);
                    }
                    sc.entropy(&q, masks, &mut out).unwrap();
                    for b in 0..batch {
                        let lp = naive_log_probs(&s[b]);
                        let h: f64 = lp.iter().filter(|x| x.is_finite()).map(|x| -x.exp() * x).sum();
                        prop_assert!(close(out[b], h), "entropy {} {}", out[b], h);
                    }
                    let mut values = |r: Range<usize>, buf: &mut [f32]| dot_scores(&qt, &q, r, buf);
                    sc.expectation(&q, masks, &mut values, &mut out).unwrap();
                    for b in 0..batch {
                        let lp = naive_log_probs(&s[b]);
                        let e: f64 = lp.iter().zip(&qv[b]).filter(|(x, _)| x.is_finite()).map(|(x, v)| x.exp() * v).sum();
                        prop_assert!(close(out[b], e), "expectation {} {}", out[b], e);
                    }
                    let mut full = vec![0.0; batch * n];
                    sc.full_distribution(&q, masks, &mut full).unwrap();
                    for b in 0..batch {
                        let lp = naive_log_probs(&s[b]);
                        for i in 0..n {
                            prop_assert!((f64::from(full[b * n + i]) - lp[i].exp()).abs() < 1e-5);
                        }
                    }
                    // top-k equals sorting (score desc, index asc) among available actions.
                    let k = (1..=n).map(|k| k.min(3)).max().unwrap();
                    let avail = (0..batch).map(|b| s[b].iter().filter(|x| x.is_finite()).count()).min().unwrap();
                    let k = k.min(avail);
                    let (mut ti, mut ts) = (vec![0u32; batch * k], vec![0.0f32; batch * k]);
                    sc.top_k(&q, masks, k, &mut ti, &mut ts).unwrap();
                    for b in 0..batch {
                        let mut order: Vec<(f32, u32)> = (0..n as u32)
                            .filter(|&i| s[b][i as usize].is_finite())
                            .map(|i| (dot(&q[b * d..(b + 1) * d], t.row(i as usize).unwrap()), i))
                            .collect();
                        order.sort_by(|a, c| c.0.total_cmp(&a.0).then(a.1.cmp(&c.1)));
                        let want: Vec<u32> = order[..k].iter().map(|p| p.1).collect();
                        prop_assert_eq!(&ti[b * k..(b + 1) * k], &want[..]);
                    }
                    // Samples are always available actions.
                    let mut rng = Xoshiro256PlusPlus::seed_from_u64(chunk as u64);
                    let mut picks = vec![0u32; batch];
                    for method in [Sampling::GumbelMax, Sampling::InverseCdf] {
                        sc.sample(&q, masks, method, &mut rng, &mut picks).unwrap();
                        for b in 0..batch {
                            prop_assert!(masks.allowed(b, picks[b]) && (picks[b] as usize) < n);
                        }
                    }
                }
            }
        }
    }

    fn small() -> (FeatureTable, Vec<f32>) {
        let f = vec![1.0, 0.0, 0.5, 0.5, 0.0, 1.0, -1.0, 0.0, 0.2, -0.3];
        (FeatureTable::new(5, 2, f).unwrap(), vec![1.0, 0.7])
    }

    #[test]
    fn sampling_frequencies_match_softmax() {
        let (t, q) = small();
        let mut mask = ActionMask::all(5);
        mask.forbid(2).unwrap();
        for masks in [Masks::None, Masks::Shared(&mask)] {
            let s = naive_scores(&t, &q, masks);
            let p: Vec<f64> = naive_log_probs(&s[0]).iter().map(|x| x.exp()).collect();
            for method in [Sampling::GumbelMax, Sampling::InverseCdf] {
                let mut sc = ChunkedScorer::new(t.clone(), 2, 1).unwrap();
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(42);
                let draws = 40_000;
                let mut counts = [0usize; 5];
                let mut out = [0u32];
                for _ in 0..draws {
                    sc.sample(&q, masks, method, &mut rng, &mut out).unwrap();
                    counts[out[0] as usize] += 1;
                }
                for i in 0..5 {
                    let expected = p[i] * draws as f64;
                    let sigma = (draws as f64 * p[i] * (1.0 - p[i])).sqrt();
                    assert!(
                        (counts[i] as f64 - expected).abs() <= 5.0 * sigma.max(1e-9),
                        "{method:?} action {i}: {} vs {expected}",
                        counts[i]
                    );
                }
            }
        }
    }

    #[test]
    fn soft_value_is_expectation_plus_alpha_entropy() {
        let (t, q) = small();
        let mut sc = ChunkedScorer::new(t.clone(), 3, 1).unwrap();
        let qv = [1.0f32, -2.0, 0.5, 3.0, 0.0];
        let alpha = 0.3;
        let (mut e, mut h) = ([0.0], [0.0]);
        let mut values = |r: Range<usize>, buf: &mut [f32]| {
            buf.copy_from_slice(&qv[r]);
            Ok(())
        };
        sc.expectation(&q, Masks::None, &mut values, &mut e)
            .unwrap();
        sc.entropy(&q, Masks::None, &mut h).unwrap();
        let lp = naive_log_probs(&naive_scores(&t, &q, Masks::None)[0]);
        let want: f64 = lp
            .iter()
            .zip(qv)
            .map(|(l, v)| l.exp() * (f64::from(v) - f64::from(alpha) * l))
            .sum();
        assert!(close(e[0] + alpha * h[0], want));
    }

    #[test]
    fn errors_are_typed() {
        let (t, q) = small();
        let mut sc = ChunkedScorer::new(t, 2, 1).unwrap();
        let mut out = [0.0];
        assert!(matches!(
            sc.log_softmax(&q, &[5], Masks::None, &mut out),
            Err(Error::ActionOutOfRange { index: 5, n: 5 })
        ));
        let none = ActionMask::none(5);
        assert!(matches!(
            sc.entropy(&q, Masks::Shared(&none), &mut out),
            Err(Error::InvalidConfig { .. })
        ));
        let (mut ti, mut ts) = ([0u32; 6], [0.0f32; 6]);
        assert!(sc.top_k(&q, Masks::None, 6, &mut ti, &mut ts).is_err());
        assert!(matches!(
            sc.entropy(&[1.0, 0.0, 0.0, 1.0], Masks::None, &mut [0.0; 2]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(ChunkedScorer::new(small().0, 0, 1).is_err());
    }

    #[test]
    fn chunked_operations_allocate_nothing_after_construction() {
        let (n, d, batch, chunk) = (1000, 8, 4, 64);
        let data = (0..n * d)
            .map(|x| ((x * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let t = FeatureTable::new(n, d, data).unwrap();
        let qt = t.clone();
        let mut sc = ChunkedScorer::new(t, chunk, batch).unwrap();
        assert!(sc.table().shares_storage_with(&qt));
        let q: Vec<f32> = (0..batch * d).map(|x| x as f32 / 10.0 - 1.0).collect();
        let mut mask = ActionMask::all(n as u32);
        mask.forbid(3).unwrap();
        let (mut out, mut picks) = (vec![0.0; batch], vec![0u32; batch]);
        let (mut ti, mut ts) = (vec![0u32; batch * 5], vec![0.0; batch * 5]);
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let actions = [0u32, 3, 999, 500];
        let (result, stats) = rl_testkit::measure(|| -> Result<()> {
            for masks in [Masks::None, Masks::Shared(&mask)] {
                sc.log_softmax(&q, &actions, masks, &mut out)?;
                sc.log_sum_exp(&q, masks, &mut out)?;
                sc.entropy(&q, masks, &mut out)?;
                let mut values = |r: Range<usize>, buf: &mut [f32]| dot_scores(&qt, &q, r, buf);
                sc.expectation(&q, masks, &mut values, &mut out)?;
                sc.sample(&q, masks, Sampling::GumbelMax, &mut rng, &mut picks)?;
                sc.sample(&q, masks, Sampling::InverseCdf, &mut rng, &mut picks)?;
                sc.top_k(&q, masks, 5, &mut ti, &mut ts)?;
            }
            Ok(())
        });
        result.unwrap();
        assert_eq!(stats.allocations, 0, "{stats:?}");
        let plan = sc.memory_plan();
        assert_eq!(plan.lines()[1].bytes, (2 * batch * chunk * 4) as u64);
    }

    #[test]
    fn large_scores_stay_stable() {
        // Scores around 1e4: a naive exp overflows, the streaming form does not.
        let t = FeatureTable::new(3, 1, vec![10_000.0, 10_001.0, 9_000.0]).unwrap();
        let mut sc = ChunkedScorer::new(t, 1, 1).unwrap();
        let mut out = [0.0];
        sc.log_softmax(&[1.0], &[1], Masks::None, &mut out).unwrap();
        let want = -(1.0 + (-1.0f64).exp()).ln();
        assert!(close(out[0], want), "{} vs {want}", out[0]);
        sc.entropy(&[1.0], Masks::None, &mut out).unwrap();
        let p = [(-1.0f64).exp(), 1.0].map(|w| w / (1.0 + (-1.0f64).exp()));
        let h: f64 = p.iter().map(|p| -p * p.ln()).sum();
        assert!(close(out[0], h), "{} vs {h}", out[0]);
    }

    #[test]
    fn hundred_thousand_actions_in_bounded_scratch() {
        let (n, d, batch, chunk) = (100_000, 8, 4, 4096);
        let data = (0..n * d)
            .map(|x| ((x * 31) % 97) as f32 / 97.0 - 0.5)
            .collect();
        let mut sc =
            ChunkedScorer::new(FeatureTable::new(n, d, data).unwrap(), chunk, batch).unwrap();
        let q: Vec<f32> = (0..batch * d).map(|x| (x % 5) as f32 - 2.0).collect();
        let mut h = vec![0.0; batch];
        sc.entropy(&q, Masks::None, &mut h).unwrap();
        assert!(
            h.iter()
                .all(|h| h.is_finite() && *h > 0.0 && *h <= (n as f32).ln() + 1e-3)
        );
        let plan = sc.memory_plan();
        assert_eq!(plan.lines()[0].bytes, 3_200_000, "table, once");
        assert_eq!(plan.lines()[1].bytes, (2 * batch * chunk * 4) as u64);
        assert!(plan.lines()[1].bytes < (batch * n * 4) as u64);
    }

    #[test]
    fn top_k_breaks_ties_by_lower_index_like_a_stable_sort() {
        let t = FeatureTable::new(6, 1, vec![1.0, 3.0, 3.0, 2.0, 3.0, 0.0]).unwrap();
        for chunk in [1, 2, 4, 6] {
            let mut sc = ChunkedScorer::new(t.clone(), chunk, 1).unwrap();
            let (mut ti, mut ts) = ([0u32; 4], [0.0f32; 4]);
            sc.top_k(&[1.0], Masks::None, 4, &mut ti, &mut ts).unwrap();
            assert_eq!(ti, [1, 2, 4, 3]);
            assert_eq!(ts, [3.0, 3.0, 3.0, 2.0]);
        }
    }
}
