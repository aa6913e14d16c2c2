//! Scoring all actions chunk by chunk, without a `batch x n x d` tensor.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use rand::Rng;
use rl_core::env::check_len;
use rl_core::{Error, FeatureTable, Location, MemoryPlan, Result};

use crate::kernels::{self, Isa};
use crate::mask::{ActionMask, Masks};

#[path = "soft.rs"]
mod soft;

/// How [`ChunkedScorer::sample`] draws an action.
///
/// With one seed, both methods are reproducible for a given chunk size. Gumbel-max draws
/// its noise chunk by chunk (rows inside a chunk, actions inside a row), so changing the
/// chunk size changes which samples come out (not their distribution); it does not tile
/// (its cost is the noise, not the table). Inverse CDF draws one uniform per row before
/// walking, whatever the chunk or tile; only the walk goes tile by tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// One pass: `argmax_i s_i + g_i` with Gumbel noise `g_i` (one draw and two `f64`
    /// logarithms per action: the slow path, several times slower than inverse CDF over
    /// large action sets).
    GumbelMax,
    /// Two passes: log-sum-exp, then walk the cumulative distribution to a uniform draw
    /// (one draw per row; whole tiles are skipped by their total mass).
    InverseCdf,
}

/// A per-action quantity given chunk by chunk: called with a range of actions and a
/// `batch x range.len()` buffer (row-major) to fill, e.g. with [`dot_scores`].
pub type ChunkValues<'a> = dyn FnMut(Range<usize>, &mut [f32]) -> Result<()> + 'a;

/// Writes `out[b * len + j] = <q[b], f_{range.start + j}>` for every row `b` of `q`
/// (`batch x d`, row-major), with `len = range.len()`.
///
/// This is a plain scalar loop over the row-major table, public so that a second
/// quantity (a Q-value head over another table) can be fed to
/// [`ChunkedScorer::expectation`]. For the two-critic discrete SAC quantities,
/// [`ChunkedScorer::soft_value`] and [`ChunkedScorer::soft_policy_loss`] compute the
/// critics' scores themselves, with the vectorised kernels.
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
    /// Nothing: the pass only computes log-sum-exp (and `E[s]`, which is free).
    Nothing,
    /// A chunked quantity given by the caller.
    Given(&'v mut ChunkValues<'c>),
}

/// Streaming softmax sums for one row, relative to the running max: `sum` of
/// `exp(x - max)`, `sx` of `exp(x - max) (x - max)`, `sv` of `exp(x - max) v`.
///
/// Chunks are summed in `f32` relative to their own max by the kernels and merged here
/// in `f64`, rescaling once per chunk.
#[derive(Clone, Copy, Debug)]
struct Acc {
    max: f32,
    sum: f64,
    sx: f64,
    sv: f64,
}

impl Acc {
    const EMPTY: Acc = Acc {
        max: f32::NEG_INFINITY,
        sum: 0.0,
        sx: 0.0,
        sv: 0.0,
    };

    /// Adds a chunk with max `mc` and sums `(s0, st, sv)` relative to `mc`. Returns the
    /// factors the old and the chunk's sums were scaled by, for accumulators kept
    /// alongside (the gradient's).
    #[inline]
    fn merge(&mut self, mc: f32, s0: f32, st: f32, sv: f32) -> (f64, f64) {
        // NaN-safe: a chunk that weighs nothing (fully masked, or NaN scores) is skipped.
        if s0.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return (1.0, 0.0);
        }
        let (s0, st, sv) = (f64::from(s0), f64::from(st), f64::from(sv));
        if self.sum == 0.0 {
            *self = Acc {
                max: mc,
                sum: s0,
                sx: st,
                sv,
            };
            return (0.0, 1.0);
        }
        let delta = f64::from(mc) - f64::from(self.max);
        if delta > 0.0 {
            // The chunk holds the new max: the old sums shrink by exp(-delta), and their
            // offsets `x - max` move by -delta.
            let a = (-delta).exp();
            self.sx = a * (self.sx - delta * self.sum) + st;
            self.sum = a * self.sum + s0;
            self.sv = a * self.sv + sv;
            self.max = mc;
            (a, 1.0)
        } else {
            let b = delta.exp();
            self.sx += b * (st + delta * s0);
            self.sum += b * s0;
            self.sv += b * sv;
            (1.0, b)
        }
    }

    fn ln_sum(&self) -> f64 {
        self.sum.ln()
    }

    fn log_sum_exp(&self) -> f32 {
        (f64::from(self.max) + self.ln_sum()) as f32
    }

    /// `x - lse`, subtracting the max first so that large scores keep their precision.
    #[inline]
    fn log_prob(&self, x: f32) -> f32 {
        (f64::from(x - self.max) - self.ln_sum()) as f32
    }

    /// `lse - E[s] = ln sum - E[s - max]`, free of the cancellation of large scores.
    fn entropy(&self) -> f64 {
        let h = self.ln_sum() - self.sx / self.sum;
        // Rounding can leave a tiny negative entropy for a near-deterministic row.
        h.max(0.0)
    }

    fn mean(&self) -> f64 {
        self.sv / self.sum
    }

    /// `E[s]`.
    fn mean_score(&self) -> f64 {
        f64::from(self.max) + self.sx / self.sum
    }
}

/// Where the scores come from.
#[derive(Clone)]
enum Scores {
    /// `s[b, a] = <q[b], f_a>`; `cols` is the table transposed (`d` rows of `n`), so that
    /// the kernels run across actions.
    Table {
        table: FeatureTable,
        cols: Arc<[f32]>,
    },
    /// `s[b, a] = q[b][a]` (`d = n`): the index / one-hot head.
    Identity { n: usize },
}

impl Scores {
    fn n(&self) -> usize {
        match self {
            Scores::Table { table, .. } => table.rows(),
            Scores::Identity { n } => *n,
        }
    }

    fn dim(&self) -> usize {
        match self {
            Scores::Table { table, .. } => table.dim(),
            Scores::Identity { n } => *n,
        }
    }

    /// `out[j] = s(qb, range.start + j)`, masked actions `-inf`.
    #[inline]
    fn fill(
        &self,
        isa: Isa,
        qb: &[f32],
        mask: Option<&ActionMask>,
        range: Range<usize>,
        out: &mut [f32],
    ) {
        match self {
            Scores::Table { table, cols } => {
                kernels::dots1(isa, qb, cols, table.rows(), range.start, out);
            }
            Scores::Identity { .. } => out.copy_from_slice(&qb[range.clone()]),
        }
        apply_mask(mask, range, out);
    }

    /// The score of one action (which must be below `n`).
    fn score(&self, qb: &[f32], a: usize) -> f32 {
        match self {
            Scores::Table { table, .. } => table.row(a).map_or(f32::NAN, |f| dot(qb, f)),
            Scores::Identity { .. } => qb.get(a).copied().unwrap_or(f32::NAN),
        }
    }
}

/// Sets `out[j] = -inf` for every action `range.start + j` the mask forbids, a 64-bit
/// word at a time (fully available words cost one compare).
#[inline]
fn apply_mask(mask: Option<&ActionMask>, range: Range<usize>, out: &mut [f32]) {
    let Some(mask) = mask else { return };
    let words = mask.as_words();
    let mut a = range.start;
    while a < range.end {
        let w = a / 64;
        let lo = a % 64;
        let hi = (range.end - w * 64).min(64);
        let span = if hi == 64 { u64::MAX } else { (1u64 << hi) - 1 } & !((1u64 << lo) - 1);
        let mut missing = !words.get(w).copied().unwrap_or(0) & span;
        while missing != 0 {
            let bit = missing.trailing_zeros() as usize;
            out[w * 64 + bit - range.start] = f32::NEG_INFINITY;
            missing &= missing - 1;
        }
        a = w * 64 + hi;
    }
}

/// The mask of row `b`.
#[inline]
fn row_mask<'m>(masks: Masks<'m>, b: usize) -> Option<&'m ActionMask> {
    match masks {
        Masks::None => None,
        Masks::Shared(m) => Some(m),
        Masks::PerRow(ms) => ms.get(b),
    }
}

/// Scores `s[b, i] = <q[b], f_i>` of every action `i` of a shared feature table for a
/// batch of state vectors `q` (or, built with [`ChunkedScorer::identity`], `s[b, i] =
/// q[b][i]`), one chunk of actions at a time, and builds softmax quantities on those
/// chunks.
///
/// All scratch is allocated in [`ChunkedScorer::new`] / [`ChunkedScorer::identity`] (see
/// [`ChunkedScorer::memory_plan`]); no operation allocates afterwards. Masked actions
/// score `-inf` in every operation.
///
/// The hot loops are vectorised across actions, with a polynomial `f32` exponential
/// (relative error below `1.5e-7`, weights under `exp(-87)` relative to a chunk's max
/// flushed to zero); per-chunk sums are merged in `f64`. On x86-64 the widest of AVX-512,
/// AVX2 + FMA or portable code is chosen once, at construction: the set
/// [`rl_core::simd::Isa::detect`] chose for the process.
#[derive(Clone)]
pub struct ChunkedScorer {
    scores: Scores,
    isa: Isa,
    chunk: usize,
    /// Actions per tile of the row-inner loops (at most `chunk`): see [`tile_for`].
    tile: usize,
    max_batch: usize,
    scratch: Vec<f32>,
    values: Vec<f32>,
    /// Two copies of one tile's block of the transposed table (`d x tile` floats each,
    /// one per half of a split soft pass); empty for identity scoring.
    tile_table: Vec<f32>,
    acc: Vec<Acc>,
    best: Vec<(f32, u32)>,
    heap_len: Vec<usize>,
    /// Per row and feature, `sum w f` and `sum w (alpha s - Q) f` (table scoring only).
    grad_w: Vec<f64>,
    grad_c: Vec<f64>,
    /// With a join, the soft passes split their rows over two threads.
    join: Option<Arc<dyn Join>>,
}

/// Runs two closures, possibly at the same time: how a [`ChunkedScorer`] uses threads
/// it does not own ([`ChunkedScorer::set_join`]; `rl-algos` hands it an `rl_nn::Pool`).
/// Each closure writes its own rows, so the results are the same whether they run side
/// by side or one after the other.
pub trait Join: Send + Sync + fmt::Debug {
    /// Runs `a` and `b` and returns when both have finished.
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send));
}

impl fmt::Debug for ChunkedScorer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkedScorer")
            .field(
                "scores",
                &match &self.scores {
                    Scores::Table { table, .. } => format!("table {table:?}"),
                    Scores::Identity { n } => format!("identity over {n} actions"),
                },
            )
            .field("isa", &self.isa)
            .field("chunk", &self.chunk)
            .field("tile", &self.tile)
            .field("max_batch", &self.max_batch)
            .field("join", &self.join)
            .finish_non_exhaustive()
    }
}

/// What a [`ChunkedScorer`] scores against, by size alone: what
/// [`ChunkedScorer::plan`] needs to plan one before it (or its table) exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScorerShape {
    /// A feature table of `rows` actions x `dim` features ([`ChunkedScorer::new`]).
    Table {
        /// Actions (the table's rows).
        rows: usize,
        /// Features per action.
        dim: usize,
    },
    /// The index representation over `n` actions ([`ChunkedScorer::identity`]).
    Identity {
        /// Actions.
        n: usize,
    },
}

/// Bytes of the transposed table one tile spans: half of the 32 KiB L1 data cache of the
/// x86-64 cores measured here (Zen 3 and Zen 5 have 32 and 48 KiB), leaving room for a
/// row's tile of scores and critic values.
const TILE_BYTES: usize = 16 * 1024;

/// Actions per tile for `scores` with `chunk` actions per chunk: [`TILE_BYTES`] of
/// transposed table (512 actions for `d = 8`), a multiple of 64 actions (the kernels'
/// blocks) and at least 64, capped at the chunk. Identity scoring reads each row's own
/// logits, which no other row shares: its tile is the chunk.
fn tile_for(scores: &Scores, chunk: usize) -> usize {
    match scores {
        Scores::Table { table, .. } => table_tile(table.dim(), chunk),
        Scores::Identity { .. } => chunk,
    }
}

/// [`tile_for`] a table of `dim` features.
fn table_tile(dim: usize, chunk: usize) -> usize {
    let per_action = dim * size_of::<f32>();
    (TILE_BYTES / per_action.max(1) / 64 * 64)
        .max(64)
        .min(chunk)
}

/// Floats of [`ChunkedScorer`]'s tile copies of the table for `tile` actions.
fn tile_table_len(scores: &Scores, tile: usize) -> usize {
    match scores {
        Scores::Table { table, .. } => 2 * table.dim() * tile,
        Scores::Identity { .. } => 0,
    }
}

/// Writes the `n x d` row-major `rows` as `d x n` into `cols`.
fn transpose(rows: &[f32], n: usize, d: usize, cols: &mut [f32]) {
    for (a, f) in rows.chunks_exact(d).enumerate() {
        for (k, &x) in f.iter().enumerate() {
            cols[k * n + a] = x;
        }
    }
}

/// The minimum of two critics' per-action values, `min(g1[a], g2[a])` (identity scoring).
#[inline]
fn min_into(g1: &[f32], g2: &[f32], out: &mut [f32]) {
    for ((o, &a), &b) in out.iter_mut().zip(g1).zip(g2) {
        *o = if a < b { a } else { b };
    }
}

impl ChunkedScorer {
    /// A scorer over `table` with `chunk` actions per pass, for batches of at most
    /// `max_batch` rows. Keeps a transposed copy of the table (`n x d` floats, shared by
    /// clones of the scorer) so that scores vectorise across actions.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `chunk` or `max_batch` is zero, or the table has more
    /// than `u32::MAX` rows.
    pub fn new(table: FeatureTable, chunk: usize, max_batch: usize) -> Result<Self> {
        if u32::try_from(table.rows()).is_err() {
            return Err(Error::config(
                "scorer table",
                format!("has {} rows: at most u32::MAX actions", table.rows()),
            ));
        }
        let (n, d) = (table.rows(), table.dim());
        let mut cols = vec![0.0f32; n * d];
        transpose(table.as_slice(), n, d, &mut cols);
        let grad = max_batch.saturating_mul(d);
        Self::build(
            Scores::Table {
                table,
                cols: cols.into(),
            },
            chunk,
            max_batch,
            grad,
        )
    }

    /// A scorer whose scores are the state vectors themselves: `s[b, a] = q[b][a]`, with
    /// `q` of `batch x n` floats (`d = n`). This is the index / one-hot representation
    /// (a discrete-SAC head with one output per action); every operation works as with a
    /// table, and no table is stored.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] if `n`, `chunk` or `max_batch` is zero.
    pub fn identity(n: u32, chunk: usize, max_batch: usize) -> Result<Self> {
        if n == 0 {
            return Err(Error::config(
                "identity scorer",
                "has 0 actions: at least 1",
            ));
        }
        Self::build(Scores::Identity { n: n as usize }, chunk, max_batch, 0)
    }

    fn build(scores: Scores, chunk: usize, max_batch: usize, grad: usize) -> Result<Self> {
        if chunk == 0 || max_batch == 0 {
            return Err(Error::config(
                "chunked scorer",
                format!("has chunk {chunk} and max_batch {max_batch}: both must be at least 1"),
            ));
        }
        let chunk = chunk.min(scores.n());
        let tile = tile_for(&scores, chunk);
        let tile_table = vec![0.0; tile_table_len(&scores, tile)];
        Ok(Self {
            scores,
            isa: Isa::detect(),
            chunk,
            tile,
            max_batch,
            scratch: vec![0.0; max_batch * chunk],
            values: vec![0.0; max_batch * chunk],
            tile_table,
            acc: vec![Acc::EMPTY; max_batch],
            best: vec![(f32::NEG_INFINITY, 0); max_batch],
            heap_len: vec![0; max_batch],
            grad_w: vec![0.0; grad],
            grad_c: vec![0.0; grad],
            join: None,
        })
    }

    /// Splits the rows of the batched soft passes ([`ChunkedScorer::soft_policy_loss`],
    /// [`ChunkedScorer::soft_value`]) into two halves run through `join` (`None`, the
    /// default: one thread). Each row is computed by one thread in the same order either
    /// way, so results are bit-identical; the halves use scratch the scorer already
    /// holds, so nothing is allocated.
    pub fn set_join(&mut self, join: Option<Arc<dyn Join>>) {
        self.join = join;
    }

    /// The same scorer running the given kernels (tests compare every compiled copy).
    #[cfg(test)]
    pub(crate) fn with_isa(mut self, isa: Isa) -> Self {
        self.isa = isa;
        self
    }

    /// The same scorer with `tile` actions per tile (capped at the chunk; tests compare
    /// tilings).
    #[cfg(test)]
    pub(crate) fn with_tile(mut self, tile: usize) -> Self {
        self.tile = tile.clamp(1, self.chunk);
        self.tile_table = vec![0.0; tile_table_len(&self.scores, self.tile)];
        self
    }

    /// The shared table, or `None` for an identity scorer.
    pub fn table(&self) -> Option<&FeatureTable> {
        match &self.scores {
            Scores::Table { table, .. } => Some(table),
            Scores::Identity { .. } => None,
        }
    }

    /// Changes the table's values in place, for a table that is learned (an optimiser
    /// step on its gradient), then refreshes the scorer's transposed copy; returns what
    /// `change` returns. The first call on a table shared with other handles (the
    /// environment's, say) copies it once (copy-on-write: the others keep the original);
    /// later calls allocate nothing.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for an identity scorer, which has no table.
    pub fn update_table<R>(&mut self, change: impl FnOnce(&mut [f32]) -> R) -> Result<R> {
        let Scores::Table { table, cols } = &mut self.scores else {
            return Err(Error::config(
                "identity scorer",
                "has no table to update: learn the network's output layer instead",
            ));
        };
        let result = change(table.values_mut());
        let (n, d) = (table.rows(), table.dim());
        transpose(table.as_slice(), n, d, Arc::make_mut(cols));
        Ok(result)
    }

    /// Actions per chunk (capped at the number of actions).
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Number of actions.
    pub fn n(&self) -> usize {
        self.scores.n()
    }

    /// Floats per state vector `q[b]` (and per critic vector and gradient row): the
    /// table's `d`, or `n` for an identity scorer.
    pub fn dim(&self) -> usize {
        self.scores.dim()
    }

    /// Actions per tile: the loops that go over every row of a batch take the actions a
    /// tile at a time (tiles on the outside, rows on the inside), so that a tile of the
    /// table is read from the L1 cache by every row. At most [`ChunkedScorer::chunk`];
    /// chosen at construction from the table's width (see the crate docs).
    pub fn tile(&self) -> usize {
        self.tile
    }

    /// Largest batch the scratch holds.
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// What the scorer holds: the table (shared, once per process), its transposed copy
    /// (`n x d` floats, shared by clones of this scorer) and two copies of one tile of it
    /// (`2 x d x tile` floats), none for identity scoring;
    /// the chunk scratch (two `max_batch x chunk` float buffers); per-row accumulators;
    /// and the gradient accumulators of [`ChunkedScorer::soft_policy_loss`]
    /// (`2 x max_batch x d` `f64`, table scoring only). Nothing scales with `batch x n`
    /// except the caller's buffers (identity `q`, [`ChunkedScorer::full_distribution`]).
    pub fn memory_plan(&self) -> MemoryPlan {
        let shape = match &self.scores {
            Scores::Table { table, .. } => ScorerShape::Table {
                rows: table.rows(),
                dim: table.dim(),
            },
            Scores::Identity { n } => ScorerShape::Identity { n: *n },
        };
        // A built scorer's sizes were allocated, so they cannot overflow.
        Self::plan(shape, self.chunk, self.max_batch).unwrap_or_default()
    }

    /// What a scorer of `shape` with `chunk` actions per pass for batches of at most
    /// `max_batch` rows holds ([`ChunkedScorer::memory_plan`]), from the sizes alone,
    /// before the scorer (or its table) exists.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a zero size, or sizes whose bytes overflow.
    pub fn plan(shape: ScorerShape, chunk: usize, max_batch: usize) -> Result<MemoryPlan> {
        let (n, dim) = match shape {
            ScorerShape::Table { rows, dim } => (rows, dim),
            ScorerShape::Identity { n } => (n, n),
        };
        if n == 0 || dim == 0 || chunk == 0 || max_batch == 0 {
            return Err(Error::config(
                "chunked scorer",
                format!(
                    "has {n} actions of {dim} features, chunk {chunk} and max_batch {max_batch}: all must be at least 1"
                ),
            ));
        }
        let overflow = || {
            Error::config(
                "chunked scorer",
                format!(
                    "of {n} actions of {dim} features for batches of {max_batch} rows needs more bytes than fit in 64 bits: use a smaller batch or chunk"
                ),
            )
        };
        let bytes = |factors: &[usize]| -> Result<u64> {
            factors
                .iter()
                .try_fold(1u64, |acc, &f| acc.checked_mul(f as u64))
                .ok_or_else(overflow)
        };
        let chunk = chunk.min(n);
        let f32s = size_of::<f32>();
        let mut plan = MemoryPlan::new();
        if let ScorerShape::Table { .. } = shape {
            plan.add(
                "scorer/table (shared)",
                Location::Ram,
                bytes(&[n, dim, f32s])?,
            );
        }
        plan.add(
            "scorer/chunk scratch",
            Location::Ram,
            bytes(&[2, max_batch, chunk, f32s])?,
        );
        if let ScorerShape::Table { .. } = shape {
            plan.add(
                "scorer/transposed table (shared by clones)",
                Location::Ram,
                bytes(&[n, dim, f32s])?,
            );
            plan.add(
                "scorer/tile copies of the table",
                Location::Ram,
                bytes(&[2, dim, table_tile(dim, chunk), f32s])?,
            );
        }
        let per_row = size_of::<Acc>() + size_of::<(f32, u32)>() + size_of::<usize>();
        plan.add(
            "scorer/row accumulators",
            Location::Ram,
            bytes(&[max_batch, per_row])?,
        );
        let grad = match shape {
            ScorerShape::Table { .. } => bytes(&[2, max_batch, dim, size_of::<f64>()])?,
            ScorerShape::Identity { .. } => 0,
        };
        plan.add("scorer/gradient accumulators", Location::Ram, grad);
        Ok(plan)
    }

    /// Validates `q` and masks; returns the batch size.
    fn start(&self, q: &[f32], masks: Masks<'_>, need: usize) -> Result<usize> {
        let d = self.dim();
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

    fn ranges(&self) -> impl Iterator<Item = Range<usize>> + use<> {
        let (n, chunk) = (self.n(), self.chunk);
        (0..n).step_by(chunk).map(move |s| s..(s + chunk).min(n))
    }

    /// `range` cut into tiles of [`ChunkedScorer::tile`] actions.
    fn tiles(&self, range: Range<usize>) -> impl Iterator<Item = Range<usize>> + use<> {
        let (end, tile) = (range.end, self.tile);
        range.step_by(tile).map(move |s| s..(s + tile).min(end))
    }

    /// One streaming pass of log-sum-exp and `E[s]`, also accumulating the
    /// softmax-weighted mean of a given chunked quantity. The given quantity comes a
    /// chunk at a time (all rows); within a chunk, tiles on the outside and rows inside,
    /// each row's scores of a tile merged into its running (online) log-sum-exp.
    fn pass(
        &mut self,
        q: &[f32],
        batch: usize,
        masks: Masks<'_>,
        mut weighted: Weighted<'_, '_>,
    ) -> Result<()> {
        let d = self.dim();
        self.acc[..batch].fill(Acc::EMPTY);
        for range in self.ranges() {
            let len = range.len();
            if let Weighted::Given(f) = &mut weighted {
                f(range.clone(), &mut self.values[..batch * len])?;
            }
            for tile in self.tiles(range.clone()) {
                let at = tile.start - range.start;
                for b in 0..batch {
                    let row = &mut self.scratch[..tile.len()];
                    let qb = &q[b * d..(b + 1) * d];
                    self.scores
                        .fill(self.isa, qb, row_mask(masks, b), tile.clone(), row);
                    let mc = kernels::max_of(self.isa, row);
                    let v: &[f32] = match weighted {
                        Weighted::Nothing => &[],
                        Weighted::Given(_) => &self.values[b * len + at..b * len + at + tile.len()],
                    };
                    let (s0, st, sv) = kernels::exp_sums(self.isa, row, mc, v);
                    self.acc[b].merge(mc, s0, st, sv);
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
        self.check_actions(actions)?;
        self.pass(q, batch, masks, Weighted::Nothing)?;
        let d = self.dim();
        for (b, ((o, &a), qb)) in out
            .iter_mut()
            .zip(actions)
            .zip(q.chunks_exact(d))
            .enumerate()
        {
            *o = if masks.allowed(b, a) {
                self.acc[b].log_prob(self.scores.score(qb, a as usize))
            } else {
                f32::NEG_INFINITY
            };
        }
        Ok(())
    }

    fn check_actions(&self, actions: &[u32]) -> Result<()> {
        let n = u32::try_from(self.n()).unwrap_or(u32::MAX);
        match actions.iter().find(|&&a| a >= n) {
            Some(&a) => Err(Error::ActionOutOfRange {
                index: u64::from(a),
                n,
            }),
            None => Ok(()),
        }
    }

    /// Entropy `-sum_i pi_i log pi_i` of the softmax over available actions, per row.
    ///
    /// # Errors
    /// As [`ChunkedScorer::log_sum_exp`].
    pub fn entropy(&mut self, q: &[f32], masks: Masks<'_>, out: &mut [f32]) -> Result<()> {
        let batch = self.start(q, masks, 1)?;
        check_len("entropy output", batch, out.len())?;
        self.pass(q, batch, masks, Weighted::Nothing)?;
        for (o, acc) in out.iter_mut().zip(&self.acc) {
            *o = acc.entropy() as f32;
        }
        Ok(())
    }

    /// `E_pi[v]` per row, where `v` is another chunked score: `values(range, buf)` must
    /// write `batch x range.len()` values (row-major) for the actions in `range`, e.g.
    /// with [`dot_scores`] over a Q-value table. For discrete SAC with two critics over
    /// the same table (or identity heads), [`ChunkedScorer::soft_value`] is faster.
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
            *o = acc.mean() as f32;
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
        let d = self.dim();
        match method {
            Sampling::GumbelMax => {
                self.best[..batch].fill((f32::NEG_INFINITY, 0));
                for range in self.ranges() {
                    let len = range.len();
                    for b in 0..batch {
                        let row = &mut self.scratch[..len];
                        let qb = &q[b * d..(b + 1) * d];
                        self.scores
                            .fill(self.isa, qb, row_mask(masks, b), range.clone(), row);
                        for (j, &x) in row.iter().enumerate() {
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
            }
            Sampling::InverseCdf => {
                self.pass(q, batch, masks, Weighted::Nothing)?;
                // best[b] = (remaining probability mass to walk, last available action).
                for b in 0..batch {
                    self.best[b] = (rng.random::<f32>(), u32::MAX);
                }
                for range in self.tiles(0..self.n()) {
                    let len = range.len();
                    for b in 0..batch {
                        let (ref mut left, ref mut chosen) = self.best[b];
                        if *left < 0.0 {
                            continue;
                        }
                        let acc = self.acc[b];
                        let row = &mut self.scratch[..len];
                        let qb = &q[b * d..(b + 1) * d];
                        self.scores
                            .fill(self.isa, qb, row_mask(masks, b), range.clone(), row);
                        kernels::exp_shift(self.isa, row, acc.max, acc.ln_sum() as f32);
                        let mass = kernels::sum_of(self.isa, row);
                        if mass < *left {
                            // The whole chunk lies before the draw.
                            *left -= mass;
                            if let Some(j) = row.iter().rposition(|&p| p > 0.0) {
                                *chosen = (range.start + j) as u32;
                            }
                            continue;
                        }
                        for (j, &p) in row.iter().enumerate() {
                            if p > 0.0 {
                                *chosen = (range.start + j) as u32;
                                *left -= p;
                                if *left < 0.0 {
                                    break;
                                }
                            }
                        }
                    }
                }
                // Rounding can leave a sliver of mass: the last available action takes it.
                // No action with a positive weight means the scores were not finite.
                if let Some(b) = self.best[..batch]
                    .iter()
                    .position(|best| best.1 == u32::MAX)
                {
                    return Err(Error::config(
                        "state vectors",
                        format!(
                            "row {b} gives no action a finite positive probability (NaN or \
                             infinite scores): check the network producing them"
                        ),
                    ));
                }
            }
        }
        for (o, best) in out.iter_mut().zip(&self.best) {
            *o = best.1;
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
        let d = self.dim();
        self.heap_len[..batch].fill(0);
        for range in self.ranges() {
            let len = range.len();
            for b in 0..batch {
                let hi = &mut indices[b * k..(b + 1) * k];
                let hs = &mut scores[b * k..(b + 1) * k];
                let filled = &mut self.heap_len[b];
                let row = &mut self.scratch[..len];
                let qb = &q[b * d..(b + 1) * d];
                self.scores
                    .fill(self.isa, qb, row_mask(masks, b), range.clone(), row);
                // Every index here is above the heap's: a tie with the root loses.
                if *filled == k && kernels::max_of(self.isa, row) <= hs[0] {
                    continue;
                }
                for (j, &x) in row.iter().enumerate() {
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
        let (n, d) = (self.n(), self.dim());
        check_len("full distribution output", batch * n, out.len())?;
        self.pass(q, batch, masks, Weighted::Nothing)?;
        for range in self.ranges() {
            for b in 0..batch {
                let acc = self.acc[b];
                let row = &mut out[b * n + range.start..b * n + range.end];
                self.scores.fill(
                    self.isa,
                    &q[b * d..(b + 1) * d],
                    row_mask(masks, b),
                    range.clone(),
                    row,
                );
                kernels::exp_shift(self.isa, row, acc.max, acc.ln_sum() as f32);
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
mod tests;
