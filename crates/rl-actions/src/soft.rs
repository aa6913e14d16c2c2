//! Discrete soft actor-critic (Christodoulou 2019) on the chunked scorer, in the
//! "two-tower" form: the actor gives a state vector `q[b]` with `pi(a | s_b) =
//! softmax_a <q[b], f_a>` over the allowed actions, each critic a vector `g_i[b]` with
//! `Q_i(s_b, a) = <g_i[b], f_a>` (identity scoring: `q[b][a]` and `g_i[b][a]`).
//!
//! Everything streams over chunks of actions; nothing of size `batch x n` is formed.

use rl_core::env::check_len;
use rl_core::{Error, Result};

use super::{Acc, ChunkedScorer, Scores, row_mask};
use crate::kernels::{self, Isa};
use crate::mask::Masks;

fn check_alpha(alpha: f32) -> Result<()> {
    if alpha.is_finite() && alpha >= 0.0 {
        Ok(())
    } else {
        Err(Error::config(
            "SAC temperature alpha",
            format!("is {alpha}: it must be finite and at least 0"),
        ))
    }
}

impl ChunkedScorer {
    /// The discrete-SAC actor objective and its gradient, per row `b`, with `pi` the
    /// softmax over allowed actions of `s[b, .]` and `Q(a) = min(Q_1(a), Q_2(a))` from
    /// the two critics' vectors (`critics[i]` is `batch x d`, like `q`):
    ///
    /// - `loss[b] = sum_a pi(a) (alpha log pi(a) - Q(a))` (the objective `J_b`),
    /// - `entropy[b] = -sum_a pi(a) log pi(a)`,
    /// - `grad_q[b] = dJ_b / dq[b]` (`d` floats per row; `Q` is a constant), that is
    ///   `sum_a pi(a) (c_a - J_b) f_a` with `c_a = alpha log pi(a) - Q(a)` (identity
    ///   scoring: `grad_q[b][a] = pi(a) (c_a - J_b)`, `0` for masked actions).
    ///
    /// Table scoring takes one pass over the actions (the gradient's sums are carried
    /// along, centred per chunk); identity scoring two (the gradient is written per
    /// action once `log pi` is known). Masked actions have `pi = 0` and contribute
    /// nothing, whatever their scores or critic values (`-inf` included).
    ///
    /// # Errors
    /// Checked before anything is written: [`Error::ShapeMismatch`] for a buffer of the
    /// wrong size or a batch above `max_batch`; [`Error::InvalidConfig`] if `alpha` is not
    /// finite and at least 0, or a row has no available action.
    #[allow(
        clippy::too_many_arguments,
        reason = "the op's inputs and its three outputs"
    )]
    pub fn soft_policy_loss(
        &mut self,
        q: &[f32],
        critics: [&[f32]; 2],
        alpha: f32,
        masks: Masks<'_>,
        loss: &mut [f32],
        entropy: &mut [f32],
        grad_q: &mut [f32],
    ) -> Result<()> {
        let batch = self.start(q, masks, 1)?;
        let d = self.dim();
        check_alpha(alpha)?;
        check_len("critic 1 vectors (batch x d)", batch * d, critics[0].len())?;
        check_len("critic 2 vectors (batch x d)", batch * d, critics[1].len())?;
        check_len("loss output", batch, loss.len())?;
        check_len("entropy output", batch, entropy.len())?;
        check_len("policy gradient (batch x d)", batch * d, grad_q.len())?;
        let with_grad = matches!(self.scores, Scores::Table { .. });
        self.soft_pass(q, critics, alpha, masks, batch, with_grad);
        let alpha64 = f64::from(alpha);
        for b in 0..batch {
            let acc = self.acc[b];
            let h = acc.entropy();
            let eq = acc.mean();
            loss[b] = (-alpha64 * h - eq) as f32;
            entropy[b] = h as f32;
            if with_grad {
                // sum_a pi (c_a - J) f_a = E[c_hat f] - E[c_hat] E[f], c_hat = alpha s - Q.
                let ec = alpha64 * acc.mean_score() - eq;
                for k in 0..d {
                    let i = b * d + k;
                    grad_q[i] = ((self.grad_c[i] - ec * self.grad_w[i]) / acc.sum) as f32;
                }
            }
        }
        if !with_grad {
            self.identity_grad(q, critics, alpha, masks, batch, entropy, grad_q);
        }
        Ok(())
    }

    /// The soft state value of the critic target, per row:
    /// `V[b] = sum_a pi(a) (Q(a) - alpha log pi(a))` with `pi` and `Q` as in
    /// [`ChunkedScorer::soft_policy_loss`]. One pass over the actions.
    ///
    /// # Errors
    /// As [`ChunkedScorer::soft_policy_loss`] (for `out`: `batch` floats).
    pub fn soft_value(
        &mut self,
        q: &[f32],
        critics: [&[f32]; 2],
        alpha: f32,
        masks: Masks<'_>,
        out: &mut [f32],
    ) -> Result<()> {
        let batch = self.start(q, masks, 1)?;
        let d = self.dim();
        check_alpha(alpha)?;
        check_len("critic 1 vectors (batch x d)", batch * d, critics[0].len())?;
        check_len("critic 2 vectors (batch x d)", batch * d, critics[1].len())?;
        check_len("soft value output", batch, out.len())?;
        self.soft_pass(q, critics, alpha, masks, batch, false);
        for (o, acc) in out.iter_mut().zip(&self.acc) {
            *o = (acc.mean() + f64::from(alpha) * acc.entropy()) as f32;
        }
        Ok(())
    }

    /// The critic's values of given actions: `out[b] = <g[b], f_{actions[b]}>`
    /// (identity scoring: `g[b][actions[b]]`), for `g` of `batch x d` floats with
    /// `batch = actions.len()` (not limited by `max_batch`).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong size,
    /// [`Error::ActionOutOfRange`] for an action not below `n`; `out` is then untouched.
    pub fn action_scores(&self, g: &[f32], actions: &[u32], out: &mut [f32]) -> Result<()> {
        let d = self.dim();
        let batch = actions.len();
        check_len("critic vectors (batch x d)", batch * d, g.len())?;
        check_len("action scores output", batch, out.len())?;
        self.check_actions(actions)?;
        for ((o, &a), gb) in out.iter_mut().zip(actions).zip(g.chunks_exact(d)) {
            *o = self.scores.score(gb, a as usize);
        }
        Ok(())
    }

    /// The backward of [`ChunkedScorer::action_scores`]: `grad[b] += coeff[b] *
    /// f_{actions[b]}` (identity scoring: `grad[b][actions[b]] += coeff[b]`), `grad` of
    /// `batch x d` floats.
    ///
    /// # Errors
    /// As [`ChunkedScorer::action_scores`]; `grad` is then untouched.
    pub fn add_action_grad(&self, actions: &[u32], coeff: &[f32], grad: &mut [f32]) -> Result<()> {
        let d = self.dim();
        let batch = actions.len();
        check_len("gradient coefficients", batch, coeff.len())?;
        check_len("critic gradient (batch x d)", batch * d, grad.len())?;
        self.check_actions(actions)?;
        for ((&a, &c), gb) in actions.iter().zip(coeff).zip(grad.chunks_exact_mut(d)) {
            match &self.scores {
                Scores::Table { table, .. } => {
                    if let Some(f) = table.row(a as usize) {
                        for (g, &x) in gb.iter_mut().zip(f) {
                            *g += c * x;
                        }
                    }
                }
                Scores::Identity { .. } => {
                    if let Some(g) = gb.get_mut(a as usize) {
                        *g += c;
                    }
                }
            }
        }
        Ok(())
    }

    /// The one streaming pass: per row, the softmax sums of the policy's scores with
    /// `v = Q` (so `E[Q]` and the entropy), and with `with_grad` (table scoring) the
    /// per-feature sums `sum w f` and `sum w (alpha s - Q) f` of the gradient.
    ///
    /// With a [`Join`](super::Join) ([`ChunkedScorer::set_join`]) and at least two rows,
    /// the first and second half of the rows run side by side, each with its own
    /// tile-sized scratch; every row is computed the same way either way.
    fn soft_pass(
        &mut self,
        q: &[f32],
        critics: [&[f32]; 2],
        alpha: f32,
        masks: Masks<'_>,
        batch: usize,
        with_grad: bool,
    ) {
        let d = self.dim();
        let Self {
            scores,
            isa,
            scratch,
            values,
            tile_table,
            acc,
            grad_w,
            grad_c,
            tile,
            join,
            ..
        } = self;
        let tile = *tile;
        let pass = SoftRows {
            scores,
            isa: *isa,
            d,
            tile,
            q,
            critics,
            alpha,
            masks,
            with_grad,
        };
        let grads = if with_grad { batch * d } else { 0 };
        let (acc, grad_w, grad_c) = (
            &mut acc[..batch],
            &mut grad_w[..grads],
            &mut grad_c[..grads],
        );
        // A tile's block of the table per thread (table scoring; empty for identity).
        let block = tile_table.len() / 2;
        match join.as_deref() {
            Some(join) if batch >= 2 && scratch.len() >= 2 * tile => {
                let half = batch.div_ceil(2);
                let split = if with_grad { half * d } else { 0 };
                let (s0, s1) = scratch[..2 * tile].split_at_mut(tile);
                let (v0, v1) = values[..2 * tile].split_at_mut(tile);
                let (t0, t1) = tile_table.split_at_mut(block);
                let (a0, a1) = acc.split_at_mut(half);
                let (w0, w1) = grad_w.split_at_mut(split);
                let (c0, c1) = grad_c.split_at_mut(split);
                let pass = &pass;
                let mut shares = [
                    Some(Share {
                        first: 0,
                        s: s0,
                        v: v0,
                        table: t0,
                        acc: a0,
                        grad_w: w0,
                        grad_c: c0,
                    }),
                    Some(Share {
                        first: half,
                        s: s1,
                        v: v1,
                        table: t1,
                        acc: a1,
                        grad_w: w1,
                        grad_c: c1,
                    }),
                ];
                let [one, two] = &mut shares;
                // Each closure runs once; `take` hands its share over by value.
                join.join(
                    &mut || one.take().into_iter().for_each(|s| pass.rows(s)),
                    &mut || two.take().into_iter().for_each(|s| pass.rows(s)),
                );
            }
            _ => pass.rows(Share {
                first: 0,
                s: &mut scratch[..tile],
                v: &mut values[..tile],
                table: &mut tile_table[..block],
                acc,
                grad_w,
                grad_c,
            }),
        }
    }

    /// Identity scoring's gradient, per action: `pi(a) (alpha (log pi(a) + H) - (Q(a) -
    /// E[Q]))`, which is `pi(a) (c_a - J)` written without cancelling large terms.
    #[allow(clippy::too_many_arguments, reason = "internal: the op's state, split")]
    #[allow(
        clippy::needless_range_loop,
        reason = "b indexes rows of q, critics and outputs"
    )]
    fn identity_grad(
        &mut self,
        q: &[f32],
        critics: [&[f32]; 2],
        alpha: f32,
        masks: Masks<'_>,
        batch: usize,
        entropy: &[f32],
        grad_q: &mut [f32],
    ) {
        let n = self.n();
        let isa = self.isa;
        for range in self.ranges() {
            let len = range.len();
            for b in 0..batch {
                let acc = self.acc[b];
                let (h, eq) = (entropy[b], acc.mean() as f32);
                let ln_sum = acc.ln_sum() as f32;
                let row = b * n..(b + 1) * n;
                let (qb, g1, g2) = (
                    &q[row.clone()],
                    &critics[0][row.clone()],
                    &critics[1][row.clone()],
                );
                let p = &mut self.scratch[..len];
                p.copy_from_slice(&qb[range.clone()]);
                super::apply_mask(row_mask(masks, b), range.clone(), p);
                kernels::exp_shift(isa, p, acc.max, ln_sum);
                let out = &mut grad_q[row][range.clone()];
                for (j, (o, &pj)) in out.iter_mut().zip(p.iter()).enumerate() {
                    let a = range.start + j;
                    *o = if pj > 0.0 {
                        let log_pi = (qb[a] - acc.max) - ln_sum;
                        let qa = if g1[a] < g2[a] { g1[a] } else { g2[a] };
                        pj * (alpha * (log_pi + h) - (qa - eq))
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// What every row of [`ChunkedScorer::soft_pass`] reads, shared by the threads of a
/// split pass.
struct SoftRows<'a> {
    scores: &'a Scores,
    isa: Isa,
    d: usize,
    tile: usize,
    q: &'a [f32],
    critics: [&'a [f32]; 2],
    alpha: f32,
    masks: Masks<'a>,
    with_grad: bool,
}

/// One thread's part of a [`ChunkedScorer::soft_pass`]: rows `first..first +
/// acc.len()` and their tile-sized scratch.
struct Share<'a> {
    first: usize,
    s: &'a mut [f32],
    v: &'a mut [f32],
    table: &'a mut [f32],
    acc: &'a mut [Acc],
    grad_w: &'a mut [f64],
    grad_c: &'a mut [f64],
}

impl SoftRows<'_> {
    /// The rows `first..first + acc.len()` of `share`: their accumulators in `acc`, their
    /// gradient sums in `grad_w` and `grad_c` (`d` per row, empty without the gradient),
    /// with `s` and `v` (a tile each) as scratch and `table` for a copy of the tile's
    /// block of the transposed table (`d x tile`, table scoring).
    ///
    /// Tiles of actions on the outside, rows on the inside: a tile's block of the table
    /// ([`ChunkedScorer::tile`] actions, sized for the L1 cache) is copied out once (in
    /// the transposed table its `d` rows lie `n` floats apart and share cache sets with
    /// each other and with the scratch) and read by every row while it is cached. Per
    /// row and tile, the kernels write the scores and `min(Q_1, Q_2)` into the tile
    /// scratch, take its max, the weights and their sums, and (with the gradient) the
    /// centred feature sums; [`Acc::merge`] folds the tile into the row's running
    /// (online) log-sum-exp, rescaling the gradient's sums by the same factors.
    fn rows(&self, share: Share<'_>) {
        let Self {
            scores,
            isa,
            d,
            tile,
            q,
            critics,
            alpha,
            masks,
            with_grad,
        } = *self;
        let Share {
            first,
            s: s_tile,
            v: v_tile,
            table,
            acc,
            grad_w,
            grad_c,
        } = share;
        let n = scores.n();
        acc.fill(Acc::EMPTY);
        grad_w.fill(0.0);
        grad_c.fill(0.0);
        let table_scoring = matches!(scores, Scores::Table { .. });
        for start in (0..n).step_by(tile) {
            let range = start..(start + tile).min(n);
            let len = range.len();
            let (s, v) = (&mut s_tile[..len], &mut v_tile[..len]);
            if let Scores::Table { cols, .. } = scores {
                for (k, block) in table.chunks_exact_mut(len).take(d).enumerate() {
                    block.copy_from_slice(&cols[k * n + range.start..k * n + range.end]);
                }
            }
            let block = &table[..if table_scoring { d * len } else { 0 }];
            for (r, acc) in acc.iter_mut().enumerate() {
                let b = first + r;
                let rows = b * d..(b + 1) * d;
                let (qb, g1, g2) = (
                    &q[rows.clone()],
                    &critics[0][rows.clone()],
                    &critics[1][rows],
                );
                let top = match scores {
                    Scores::Table { .. } => {
                        Some(kernels::dots3(isa, qb, g1, g2, block, len, 0, s, v))
                    }
                    Scores::Identity { .. } => {
                        s.copy_from_slice(&qb[range.clone()]);
                        super::min_into(&g1[range.clone()], &g2[range.clone()], v);
                        None
                    }
                };
                let mask = row_mask(masks, b);
                super::apply_mask(mask, range.clone(), s);
                // The kernel's max holds while no score was masked.
                let mc = match (top, mask) {
                    (Some(top), None) => top,
                    _ => kernels::max_of(isa, s),
                };
                if !with_grad {
                    let (s0, st, sv) = kernels::exp_sums(isa, s, mc, v);
                    acc.merge(mc, s0, st, sv);
                    continue;
                }
                let (s0, st, sv) = kernels::soft_weights(isa, s, v, mc, alpha);
                let (old, new) = acc.merge(mc, s0, st, sv);
                if s0.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
                    continue;
                }
                let mean = (alpha * st - sv) / s0;
                // c here is alpha (s - mc) - Q; the row sums use c_hat = alpha s - Q.
                let shift = f64::from(mean) + f64::from(alpha) * f64::from(mc);
                if let Scores::Table { .. } = scores {
                    let mut add = |k: usize, fw: f32, fc: f32| {
                        let (fw, fc) = (f64::from(fw), f64::from(fc));
                        let i = r * d + k;
                        grad_w[i] = old * grad_w[i] + new * fw;
                        grad_c[i] = old * grad_c[i] + new * (fc + shift * fw);
                    };
                    let col = |k: usize| &block[k * len..(k + 1) * len];
                    let mut k = 0;
                    while k + 4 <= d {
                        let (fw, fc) = kernels::grad_block(
                            isa,
                            s,
                            v,
                            mean,
                            [col(k), col(k + 1), col(k + 2), col(k + 3)],
                        );
                        for i in 0..4 {
                            add(k + i, fw[i], fc[i]);
                        }
                        k += 4;
                    }
                    for k in k..d {
                        let (fw, fc) = kernels::grad1(isa, s, v, mean, col(k));
                        add(k, fw, fc);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::needless_range_loop,
    reason = "the naive models index rows and actions like the maths does"
)]
mod tests {
    use super::*;
    use crate::kernels::Isa;
    use crate::mask::ActionMask;
    use proptest::prelude::*;
    use rl_core::FeatureTable;

    /// What the naive f64 model needs: per row the action features as f64 vectors (for
    /// identity scoring, unit vectors), so one formula serves both kinds of scorer.
    struct Naive {
        n: usize,
        d: usize,
        identity: bool,
        f: Vec<f64>,
    }

    impl Naive {
        fn table(t: &FeatureTable) -> Self {
            Naive {
                n: t.rows(),
                d: t.dim(),
                identity: false,
                f: t.as_slice().iter().map(|&x| f64::from(x)).collect(),
            }
        }

        fn identity(n: usize) -> Self {
            Naive {
                n,
                d: n,
                identity: true,
                f: Vec::new(),
            }
        }

        fn score(&self, v: &[f64], a: usize) -> f64 {
            if self.identity {
                v[a]
            } else {
                (0..self.d).map(|k| v[k] * self.f[a * self.d + k]).sum()
            }
        }

        fn feature(&self, a: usize, k: usize) -> f64 {
            if self.identity {
                f64::from(u8::from(a == k))
            } else {
                self.f[a * self.d + k]
            }
        }

        /// (log pi, Q) of row `b` (masked: -inf, and Q 0).
        fn row(
            &self,
            q: &[f64],
            g: [&[f64]; 2],
            mask: Option<&ActionMask>,
        ) -> (Vec<f64>, Vec<f64>) {
            let allowed = |a: usize| mask.is_none_or(|m| m.is_allowed(a as u32));
            let s: Vec<f64> = (0..self.n)
                .map(|a| {
                    if allowed(a) {
                        self.score(q, a)
                    } else {
                        f64::NEG_INFINITY
                    }
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + s.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
            let lp = s.iter().map(|x| x - lse).collect();
            let qv = (0..self.n)
                .map(|a| self.score(g[0], a).min(self.score(g[1], a)))
                .collect();
            (lp, qv)
        }

        /// (loss, entropy, soft value, grad) of one row.
        fn soft(
            &self,
            q: &[f64],
            g: [&[f64]; 2],
            alpha: f64,
            mask: Option<&ActionMask>,
        ) -> (f64, f64, f64, Vec<f64>) {
            let (lp, qv) = self.row(q, g, mask);
            let (mut loss, mut h, mut e_q) = (0.0, 0.0, 0.0);
            for a in 0..self.n {
                if lp[a].is_finite() {
                    let p = lp[a].exp();
                    loss += p * (alpha * lp[a] - qv[a]);
                    h -= p * lp[a];
                    e_q += p * qv[a];
                }
            }
            let mut grad = vec![0.0; self.d];
            for a in 0..self.n {
                if lp[a].is_finite() {
                    let p = lp[a].exp();
                    let c = alpha * lp[a] - qv[a];
                    for k in 0..self.d {
                        grad[k] += p * (c - loss) * self.feature(a, k);
                    }
                }
            }
            (loss, h, e_q + alpha * h, grad)
        }
    }

    fn f64s(x: &[f32]) -> Vec<f64> {
        x.iter().map(|&v| f64::from(v)).collect()
    }

    fn near(got: f32, want: f64, scale: f64) -> bool {
        (f64::from(got) - want).abs() <= 2e-5 * (1.0 + want.abs() + scale)
    }

    fn row_masks(bits: &[Vec<bool>], n: usize) -> Vec<ActionMask> {
        bits.iter()
            .enumerate()
            .map(|(b, row)| {
                let mut m = ActionMask::none(n as u32);
                for (i, &on) in row.iter().enumerate().take(n) {
                    if on {
                        m.allow(i as u32).unwrap();
                    }
                }
                m.allow((b * 7 % n) as u32).unwrap(); // at least one available action
                m
            })
            .collect()
    }

    type Case = (
        usize,
        usize,
        usize,
        Vec<f32>,
        Vec<f32>,
        Vec<Vec<bool>>,
        Vec<u32>,
        f32,
    );

    fn case() -> impl Strategy<Value = Case> {
        (1usize..40, 1usize..7, 1usize..5).prop_flat_map(|(n, d, batch)| {
            (
                Just(n),
                Just(d),
                Just(batch),
                proptest::collection::vec(-2.0f32..2.0, n * d),
                // q, g1, g2 for table (d each) and identity (n each) scoring
                proptest::collection::vec(-3.0f32..3.0, 3 * batch * n.max(d)),
                proptest::collection::vec(proptest::collection::vec(any::<bool>(), n), batch),
                proptest::collection::vec(0..n as u32, batch),
                prop_oneof![Just(0.0f32), 0.01f32..2.0],
            )
        })
    }

    /// Runs every soft op on `sc` (all kernels copies) and compares with the f64 model.
    #[allow(clippy::too_many_arguments, reason = "a test driver")]
    fn check_soft(
        sc: &ChunkedScorer,
        naive: &Naive,
        vecs: &[f32],
        batch: usize,
        masks: Masks<'_>,
        actions: &[u32],
        alpha: f32,
    ) -> std::result::Result<(), TestCaseError> {
        let d = naive.d;
        let (q, rest) = vecs[..3 * batch * d].split_at(batch * d);
        let (g1, g2) = rest.split_at(batch * d);
        for isa in Isa::available() {
            let mut sc = sc.clone().with_isa(isa);
            let (mut loss, mut h, mut v) = (vec![0.0; batch], vec![0.0; batch], vec![0.0; batch]);
            let mut grad = vec![0.0; batch * d];
            sc.soft_policy_loss(q, [g1, g2], alpha, masks, &mut loss, &mut h, &mut grad)
                .unwrap();
            sc.soft_value(q, [g1, g2], alpha, masks, &mut v).unwrap();
            let mut qa = vec![0.0; batch];
            sc.action_scores(g1, actions, &mut qa).unwrap();
            let coeff: Vec<f32> = (0..batch).map(|b| b as f32 - 0.5).collect();
            let mut cg = g2.to_vec();
            sc.add_action_grad(actions, &coeff, &mut cg).unwrap();
            for b in 0..batch {
                let rows = b * d..(b + 1) * d;
                let (qb, g1b, g2b) = (
                    f64s(&q[rows.clone()]),
                    f64s(&g1[rows.clone()]),
                    f64s(&g2[rows.clone()]),
                );
                let mask = match masks {
                    Masks::None => None,
                    Masks::Shared(m) => Some(m),
                    Masks::PerRow(ms) => Some(&ms[b]),
                };
                let (wl, wh, wv, wg) = naive.soft(&qb, [&g1b, &g2b], f64::from(alpha), mask);
                // Scale of the terms that cancel: |Q| and alpha |log pi| under pi.
                let (lp, qv) = naive.row(&qb, [&g1b, &g2b], mask);
                let scale: f64 = lp
                    .iter()
                    .zip(&qv)
                    .filter(|(l, _)| l.is_finite())
                    .map(|(l, q)| l.exp() * (q.abs() + f64::from(alpha) * l.abs()))
                    .sum();
                prop_assert!(near(loss[b], wl, scale), "{isa:?} loss {} vs {wl}", loss[b]);
                prop_assert!(near(h[b], wh, 0.0), "{isa:?} entropy {} vs {wh}", h[b]);
                prop_assert!(near(v[b], wv, scale), "{isa:?} value {} vs {wv}", v[b]);
                for k in 0..d {
                    let fmax = if naive.identity { 1.0 } else { 2.0 };
                    prop_assert!(
                        near(grad[b * d + k], wg[k], scale * fmax),
                        "{isa:?} grad[{b}][{k}] {} vs {}",
                        grad[b * d + k],
                        wg[k]
                    );
                }
                let a = actions[b] as usize;
                prop_assert!(near(qa[b], naive.score(&g1b, a), 0.0));
                for k in 0..d {
                    let want = f64::from(g2[b * d + k]) + f64::from(coeff[b]) * naive.feature(a, k);
                    prop_assert!(near(cg[b * d + k], want, 0.0));
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn soft_ops_equal_the_naive_f64_model(
            (n, d, batch, f, vecs, bits, actions, alpha) in case()
        ) {
            let t = FeatureTable::new(n, d, f).unwrap();
            let masks_rows = row_masks(&bits, n);
            for masks in [Masks::None, Masks::Shared(&masks_rows[0]), Masks::PerRow(&masks_rows)] {
                for chunk in [1, 3, n, n + 5] {
                    let sc = ChunkedScorer::new(t.clone(), chunk, batch).unwrap();
                    check_soft(&sc, &Naive::table(&t), &vecs, batch, masks, &actions, alpha)?;
                    let sc = ChunkedScorer::identity(n as u32, chunk, batch).unwrap();
                    check_soft(&sc, &Naive::identity(n), &vecs, batch, masks, &actions, alpha)?;
                }
            }
        }
    }

    /// Runs the halves on two threads of its own.
    #[derive(Debug)]
    struct Threads;

    impl crate::Join for Threads {
        fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
            std::thread::scope(|scope| {
                scope.spawn(b);
                a();
            });
        }
    }

    /// Runs the second half first, on the calling thread.
    #[derive(Debug)]
    struct Reversed;

    impl crate::Join for Reversed {
        fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
            b();
            a();
        }
    }

    /// Bits of every soft output of `sc` on the case.
    fn soft_bits(
        sc: &mut ChunkedScorer,
        vecs: &[f32],
        batch: usize,
        masks: Masks<'_>,
        alpha: f32,
    ) -> Vec<u32> {
        let d = sc.dim();
        let (q, rest) = vecs[..3 * batch * d].split_at(batch * d);
        let (g1, g2) = rest.split_at(batch * d);
        let (mut loss, mut h, mut v) = (vec![0.0; batch], vec![0.0; batch], vec![0.0; batch]);
        let mut grad = vec![0.0; batch * d];
        sc.soft_policy_loss(q, [g1, g2], alpha, masks, &mut loss, &mut h, &mut grad)
            .unwrap();
        sc.soft_value(q, [g1, g2], alpha, masks, &mut v).unwrap();
        [loss, h, v, grad]
            .concat()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// Rows split over a `Join` (two threads, or the halves in reverse order) give
        /// the same bits as one pass over all rows.
        #[test]
        fn split_soft_passes_are_bit_identical(
            (n, d, batch, f, vecs, bits, _actions, alpha) in case()
        ) {
            let t = FeatureTable::new(n, d, f).unwrap();
            let masks_rows = row_masks(&bits, n);
            for masks in [Masks::None, Masks::PerRow(&masks_rows)] {
                for chunk in [1, 3, n + 5] {
                    for mut sc in [
                        ChunkedScorer::new(t.clone(), chunk, batch).unwrap(),
                        ChunkedScorer::identity(n as u32, chunk, batch).unwrap(),
                    ] {
                        let want = soft_bits(&mut sc, &vecs, batch, masks, alpha);
                        for join in [std::sync::Arc::new(Threads) as std::sync::Arc<dyn crate::Join>, std::sync::Arc::new(Reversed)] {
                            let mut split = sc.clone();
                            split.set_join(Some(join));
                            prop_assert_eq!(soft_bits(&mut split, &vecs, batch, masks, alpha), want.clone());
                        }
                    }
                }
            }
        }
    }

    /// The f64 model's loss of one row at `q`.
    fn naive_loss(
        naive: &Naive,
        q: &[f64],
        g: [&[f64]; 2],
        alpha: f64,
        mask: Option<&ActionMask>,
    ) -> f64 {
        naive.soft(q, g, alpha, mask).0
    }

    /// grad_q against central differences of the f64 loss: checks the maths of the
    /// gradient, not just agreement with the model's own gradient formula.
    fn finite_differences(sc: &mut ChunkedScorer, naive: &Naive, mask: &ActionMask, seed: u32) {
        let d = naive.d;
        let pseudo = |i: usize, s: f32| {
            (((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) % 1000) as f32
                / 1000.0
                * 2.0
                * s
                - s
        };
        let q: Vec<f32> = (0..d).map(|i| pseudo(i, 1.5)).collect();
        let g1: Vec<f32> = (0..d).map(|i| pseudo(i + 100, 2.0)).collect();
        let g2: Vec<f32> = (0..d).map(|i| pseudo(i + 200, 2.0)).collect();
        for alpha in [0.0f32, 0.3, 1.5] {
            let (mut loss, mut h, mut grad) = ([0.0], [0.0], vec![0.0; d]);
            sc.soft_policy_loss(
                &q,
                [&g1, &g2],
                alpha,
                Masks::Shared(mask),
                &mut loss,
                &mut h,
                &mut grad,
            )
            .unwrap();
            let (q64, g164, g264) = (f64s(&q), f64s(&g1), f64s(&g2));
            for k in 0..d {
                let eps = 1e-4;
                let (mut up, mut down) = (q64.clone(), q64.clone());
                up[k] += eps;
                down[k] -= eps;
                let fd = (naive_loss(naive, &up, [&g164, &g264], f64::from(alpha), Some(mask))
                    - naive_loss(naive, &down, [&g164, &g264], f64::from(alpha), Some(mask)))
                    / (2.0 * eps);
                assert!(
                    (f64::from(grad[k]) - fd).abs() <= 1e-3 * fd.abs() + 2e-5,
                    "alpha {alpha} k {k}: grad {} vs finite difference {fd}",
                    grad[k]
                );
            }
        }
    }

    #[test]
    fn policy_gradient_matches_finite_differences() {
        let (n, d) = (37, 5);
        let data = (0..n * d)
            .map(|x| ((x * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let t = FeatureTable::new(n, d, data).unwrap();
        let mut mask = ActionMask::all(n as u32);
        for a in [0, 4, 5, 17, 36] {
            mask.forbid(a).unwrap();
        }
        for isa in Isa::available() {
            for chunk in [1, 8, 64] {
                for tile in [chunk, 3] {
                    let mut sc = ChunkedScorer::new(t.clone(), chunk, 1)
                        .unwrap()
                        .with_isa(isa)
                        .with_tile(tile);
                    finite_differences(&mut sc, &Naive::table(&t), &mask, 11);
                }
                let mut sc = ChunkedScorer::identity(n as u32, chunk, 1)
                    .unwrap()
                    .with_isa(isa);
                finite_differences(&mut sc, &Naive::identity(n), &mask, 5);
            }
        }
    }

    #[test]
    fn large_action_sets_match_the_f64_model() {
        // 100k actions in many chunks: the per-chunk f32 sums and their f64 merging.
        let (n, d, batch) = (100_000, 8, 2);
        let data: Vec<f32> = (0..n * d)
            .map(|x| ((x * 31) % 97) as f32 / 97.0 - 0.5)
            .collect();
        let t = FeatureTable::new(n, d, data).unwrap();
        let vecs: Vec<f32> = (0..3 * batch * d)
            .map(|x| ((x * 13) % 11) as f32 / 2.0 - 2.5)
            .collect();
        let mut mask = ActionMask::all(n as u32);
        for a in (0..n as u32).step_by(3) {
            mask.forbid(a).unwrap();
        }
        let sc = ChunkedScorer::new(t.clone(), 2048, batch).unwrap();
        check_soft(
            &sc,
            &Naive::table(&t),
            &vecs,
            batch,
            Masks::Shared(&mask),
            &[1, 99_999],
            0.2,
        )
        .unwrap();
    }

    #[test]
    fn soft_ops_allocate_nothing_after_construction() {
        let (n, d, batch, chunk) = (1000, 8, 4, 64);
        let data = (0..n * d)
            .map(|x| ((x * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let mut table =
            ChunkedScorer::new(FeatureTable::new(n, d, data).unwrap(), chunk, batch).unwrap();
        let mut ident = ChunkedScorer::identity(n as u32, chunk, batch).unwrap();
        let mut mask = ActionMask::all(n as u32);
        mask.forbid(3).unwrap();
        let vt: Vec<f32> = (0..3 * batch * d)
            .map(|x| (x % 7) as f32 / 3.0 - 1.0)
            .collect();
        let vi: Vec<f32> = (0..3 * batch * n)
            .map(|x| (x % 7) as f32 / 3.0 - 1.0)
            .collect();
        let (mut loss, mut h, mut v) = (vec![0.0; batch], vec![0.0; batch], vec![0.0; batch]);
        let (mut gt, mut gi) = (vec![0.0; batch * d], vec![0.0; batch * n]);
        let actions = [0u32, 3, 999, 500];
        let (result, stats) = rl_testkit::measure(|| -> Result<()> {
            for masks in [Masks::None, Masks::Shared(&mask)] {
                for (sc, vecs, grad) in [(&mut table, &vt, &mut gt), (&mut ident, &vi, &mut gi)] {
                    let w = vecs.len() / 3;
                    let (q, g1, g2) = (&vecs[..w], &vecs[w..2 * w], &vecs[2 * w..]);
                    sc.soft_policy_loss(q, [g1, g2], 0.2, masks, &mut loss, &mut h, grad)?;
                    sc.soft_value(q, [g1, g2], 0.2, masks, &mut v)?;
                    sc.action_scores(g1, &actions, &mut v)?;
                    sc.add_action_grad(&actions, &loss, grad)?;
                }
            }
            Ok(())
        });
        result.unwrap();
        assert_eq!(stats.allocations, 0, "{stats:?}");
        assert!(loss.iter().chain(&h).all(|x| x.is_finite()));
    }

    #[test]
    fn soft_ops_refuse_bad_input_and_leave_outputs_untouched() {
        let t = FeatureTable::new(
            5,
            2,
            vec![1.0, 0.0, 0.5, 0.5, 0.0, 1.0, -1.0, 0.0, 0.2, -0.3],
        )
        .unwrap();
        for mut sc in [
            ChunkedScorer::new(t, 2, 2).unwrap(),
            ChunkedScorer::identity(5, 2, 2).unwrap(),
        ] {
            let d = sc.dim();
            let ok = vec![0.5f32; 2 * d];
            let none = ActionMask::none(5);
            let (mut loss, mut h, mut grad, mut v) =
                ([7.0f32; 2], [7.0f32; 2], vec![7.0f32; 2 * d], [7.0f32; 2]);
            let mut run = |q: &[f32], g1: &[f32], alpha: f32, masks: Masks<'_>, grad_len: usize| {
                let r1 = sc.soft_policy_loss(
                    q,
                    [g1, &ok],
                    alpha,
                    masks,
                    &mut loss,
                    &mut h,
                    &mut grad[..grad_len],
                );
                let r2 = sc.soft_value(q, [g1, &ok], alpha, masks, &mut v);
                (r1, r2)
            };
            for alpha in [f32::NAN, -0.1, f32::INFINITY] {
                let (r1, r2) = run(&ok, &ok, alpha, Masks::None, 2 * d);
                assert!(matches!(r1, Err(Error::InvalidConfig { .. })), "{alpha}");
                assert!(matches!(r2, Err(Error::InvalidConfig { .. })), "{alpha}");
            }
            let (r1, r2) = run(&ok, &ok, 0.2, Masks::Shared(&none), 2 * d);
            assert!(
                matches!(r1, Err(Error::InvalidConfig { .. }))
                    && matches!(r2, Err(Error::InvalidConfig { .. }))
            );
            let (r1, r2) = run(&ok, &ok[..d], 0.2, Masks::None, 2 * d);
            assert!(
                matches!(r1, Err(Error::ShapeMismatch { .. }))
                    && matches!(r2, Err(Error::ShapeMismatch { .. }))
            );
            let big = vec![0.5f32; 3 * d]; // batch 3 > max_batch 2
            let (r1, r2) = run(&big, &big, 0.2, Masks::None, 2 * d);
            assert!(
                matches!(r1, Err(Error::ShapeMismatch { .. }))
                    && matches!(r2, Err(Error::ShapeMismatch { .. }))
            );
            // A short gradient buffer: only the loss refuses (the soft value is fine).
            let (r1, r2) = run(&ok, &ok, 0.2, Masks::None, d);
            assert!(matches!(r1, Err(Error::ShapeMismatch { .. })) && r2.is_ok());
            assert!(
                loss.iter().chain(&h).chain(&grad).all(|&x| x == 7.0),
                "outputs were written"
            );

            let mut out = [7.0f32; 2];
            assert!(matches!(
                sc.action_scores(&ok, &[1, 5], &mut out),
                Err(Error::ActionOutOfRange { index: 5, n: 5 })
            ));
            assert!(matches!(
                sc.action_scores(&ok, &[1], &mut out),
                Err(Error::ShapeMismatch { .. })
            ));
            assert!(matches!(
                sc.action_scores(&ok, &[1, 2], &mut out[..1]),
                Err(Error::ShapeMismatch { .. })
            ));
            let mut g = vec![7.0f32; 2 * d];
            assert!(matches!(
                sc.add_action_grad(&[9, 0], &[1.0, 1.0], &mut g),
                Err(Error::ActionOutOfRange { index: 9, n: 5 })
            ));
            assert!(matches!(
                sc.add_action_grad(&[0, 0], &[1.0], &mut g),
                Err(Error::ShapeMismatch { .. })
            ));
            assert!(
                out.iter().chain(&g).all(|&x| x == 7.0),
                "outputs were written"
            );
        }
    }

    #[test]
    fn memory_plans_state_the_real_scratch() {
        let (n, d, batch, chunk) = (1000, 8, 4, 64);
        let t = FeatureTable::new(n, d, vec![0.5; n * d]).unwrap();
        let plan = ChunkedScorer::new(t, chunk, batch).unwrap().memory_plan();
        let bytes = |plan: &rl_core::MemoryPlan, what: &str| {
            plan.lines()
                .iter()
                .find(|l| l.component.contains(what))
                .map(|l| l.bytes)
        };
        assert_eq!(bytes(&plan, "table (shared)"), Some((n * d * 4) as u64));
        assert_eq!(bytes(&plan, "transposed"), Some((n * d * 4) as u64));
        // Tiles of 512 actions for d = 8, capped at the chunk (64 here).
        assert_eq!(
            bytes(&plan, "tile copies"),
            Some((2 * d * chunk * 4) as u64)
        );
        assert_eq!(
            bytes(&plan, "chunk scratch"),
            Some((2 * batch * chunk * 4) as u64)
        );
        assert_eq!(bytes(&plan, "gradient"), Some((2 * batch * d * 8) as u64));
        let plan = ChunkedScorer::identity(n as u32, chunk, batch)
            .unwrap()
            .memory_plan();
        assert_eq!(
            bytes(&plan, "table"),
            None,
            "identity scoring stores no table (nor tile copies of one)"
        );
        assert_eq!(
            bytes(&plan, "chunk scratch"),
            Some((2 * batch * chunk * 4) as u64)
        );
        assert_eq!(
            bytes(&plan, "gradient"),
            Some(0),
            "identity gradients are written per action"
        );
        assert!(plan.total(rl_core::Location::Ram) < (batch * n * 4) as u64);
    }

    #[test]
    fn masked_actions_with_infinite_critic_values_contribute_nothing() {
        // Identity critics often put -inf on masked actions: no NaN may come out.
        let mut sc = ChunkedScorer::identity(4, 3, 1).unwrap();
        let mut mask = ActionMask::all(4);
        mask.forbid(1).unwrap();
        let q = [0.1, f32::NEG_INFINITY, 0.3, -0.2];
        let g = [1.0, f32::NEG_INFINITY, 0.5, 2.0];
        let (mut loss, mut h, mut grad, mut v) = ([0.0], [0.0], [9.0; 4], [0.0]);
        sc.soft_policy_loss(
            &q,
            [&g, &g],
            0.5,
            Masks::Shared(&mask),
            &mut loss,
            &mut h,
            &mut grad,
        )
        .unwrap();
        sc.soft_value(&q, [&g, &g], 0.5, Masks::Shared(&mask), &mut v)
            .unwrap();
        assert!(loss[0].is_finite() && h[0].is_finite() && v[0].is_finite());
        assert_eq!(grad[1], 0.0);
        assert!(grad.iter().all(|x| x.is_finite()));
        let naive = Naive::identity(4);
        let (wl, _, wv, wg) = naive.soft(&f64s(&q), [&f64s(&g), &f64s(&g)], 0.5, Some(&mask));
        assert!(
            near(loss[0], wl, 1.0) && near(v[0], wv, 1.0),
            "{loss:?} {wl} {v:?} {wv}"
        );
        for k in [0, 2, 3] {
            assert!(near(grad[k], wg[k], 1.0));
        }
    }
}
