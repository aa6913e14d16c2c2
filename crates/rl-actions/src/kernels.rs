//! The scorer's hot loops: scores of a chunk of actions, its max, a branch-free `f32`
//! exponential and the softmax sums over it.
//!
//! Every kernel is written once, generic over how a multiply-add is done, with loops over
//! fixed-width lane arrays that LLVM vectorises across actions. On x86-64 the same code is
//! also compiled inside `#[target_feature]` functions (AVX2 + FMA, and AVX-512), and
//! [`Isa::detect`] runs the copy that rl-core's [`simd::Isa::detect`] chose for the
//! process, checked once when a scorer is built. Elsewhere only the portable copy exists.

#![allow(
    unsafe_code,
    reason = "calling the #[target_feature] copies of the kernels is unsafe; each call is \
              guarded by a runtime CPU feature check recorded in `Isa`"
)]

use std::fmt;

use rl_core::simd;

/// Which compiled copy of the kernels to run: an [`simd::Isa`] that this CPU was checked
/// to support. The field is private, so only this module builds one, after that check.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Isa(simd::Isa);

impl Isa {
    /// The kernels of this process: rl-core's choice (the widest set the CPU runs, unless
    /// `RL_NN_KERNEL` lowers it).
    pub(crate) fn detect() -> Self {
        // `detect` only returns a set the CPU supports; scalar runs everywhere anyway.
        Self::checked(simd::Isa::detect()).unwrap_or(Isa(simd::Isa::Scalar))
    }

    /// Every copy this CPU can run (tests compare them).
    #[cfg(test)]
    pub(crate) fn available() -> Vec<Self> {
        simd::Isa::supported().filter_map(Self::checked).collect()
    }

    /// `isa`, if this CPU supports it.
    fn checked(isa: simd::Isa) -> Option<Self> {
        isa.is_supported().then_some(Isa(isa))
    }
}

impl fmt::Debug for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// `a * b + c`, fused or not.
pub(crate) trait Mac {
    fn mac(a: f32, b: f32, c: f32) -> f32;
}

/// Separate multiply and add: what a target without FMA does fast.
#[derive(Debug)]
pub(crate) struct Plain;

/// `mul_add`: one instruction where FMA is enabled (a slow libm call elsewhere, hence
/// only used inside the `#[target_feature]` copies).
#[derive(Debug)]
pub(crate) struct Fused;

impl Mac for Plain {
    #[inline(always)]
    fn mac(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

impl Mac for Fused {
    #[inline(always)]
    fn mac(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// Actions per vector block: one AVX-512 register, two AVX2 ones.
const LANES: usize = 16;

/// Lanes of the reductions and of the score products: four registers of independent
/// chains, so that throughput, not the latency of one add, bounds them.
const WIDE: usize = 64;

/// Lanes per block of the three-product and gradient kernels, per compiled copy: three
/// (gradient: eight) accumulator arrays of this width must stay in registers, and enough
/// of them must be independent to hide the multiply-add latency. AVX2 has 16 `ymm`
/// registers: 24 lanes (9 accumulators) for the scores and 8 for the gradient; AVX-512
/// has 32 `zmm`: 64 and 16. Wider arrays spill to the stack on every multiply-add (the
/// AVX2 copy used to run 64 lanes, 24 `ymm` accumulators, and was bound by the spills).
pub(crate) mod lanes {
    /// [`super::generic::dots3`] on AVX-512 / AVX2 / portable code.
    pub(crate) const DOTS3: [usize; 3] = [64, 24, 16];
    /// [`super::generic::grad4`] on AVX-512 / AVX2 / portable code.
    pub(crate) const GRAD: [usize; 3] = [16, 8, 8];
    /// [`super::generic::soft_weights`]: the exponential's temporaries and three sums
    /// per lane; at 16 lanes the AVX2 copy reloaded its constants and spilled its sums
    /// on every block (`exp_sums`, with no stores, stays at 16: at 8 lanes LLVM
    /// vectorises its AVX2 copy 3-4x slower).
    pub(crate) const SOFT: [usize; 3] = [16, 8, 16];
}

/// Below this a weight is flushed to zero: `exp(-87)` is the smallest normal result the
/// range reduction builds, and next to the row max (weight 1) it is nothing.
pub(crate) const EXP_MIN: f32 = -87.0;

pub(crate) mod generic {
    use super::{EXP_MIN, LANES, Mac, WIDE};

    const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// `1.5 * 2^23`: adding it rounds to an integer held in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Cephes `expf` coefficients for exp(r) on |r| <= ln2 / 2.
    const P0: f32 = 1.987_569_1e-4;
    const P1: f32 = 1.398_199_9e-3;
    const P2: f32 = 8.333_452e-3;
    const P3: f32 = 4.166_579_6e-2;
    const P4: f32 = 1.666_666_5e-1;
    const P5: f32 = 0.5;

    #[inline(always)]
    fn max(a: f32, b: f32) -> f32 {
        // Not `f32::max`: its NaN rules cost a compare and a blend per lane.
        if a > b { a } else { b }
    }

    #[inline(always)]
    fn min(a: f32, b: f32) -> f32 {
        if a < b { a } else { b }
    }

    /// `exp(t)` for `t <= 0` (or slightly above), `0` for `t <= EXP_MIN`, `-inf` and NaN.
    /// Branch-free: range reduction `t = k ln2 + r`, a degree-7 polynomial for `exp(r)`
    /// and `2^k` built in the exponent bits.
    #[inline(always)]
    pub(crate) fn exp_neg<M: Mac>(t: f32) -> f32 {
        let keep = t > EXP_MIN;
        let x = if keep { t } else { EXP_MIN };
        let j = M::mac(x, LOG2E, ROUND);
        let k = j - ROUND;
        let r = M::mac(k, -LN2_HI, x);
        let r = M::mac(k, -LN2_LO, r);
        let mut p = P0;
        p = M::mac(p, r, P1);
        p = M::mac(p, r, P2);
        p = M::mac(p, r, P3);
        p = M::mac(p, r, P4);
        p = M::mac(p, r, P5);
        let p = M::mac(p, r * r, r) + 1.0;
        // The low mantissa bits of `j` hold k (two's complement); shifted into the
        // exponent field and biased they make 2^k, normal for k >= -126.
        let scale = f32::from_bits((j.to_bits() << 23).wrapping_add(127 << 23));
        if keep { p * scale } else { 0.0 }
    }

    /// `out[j] = <q, f_{start + j}>`, with the table transposed (`d` rows of `n`).
    #[inline(always)]
    pub(crate) fn dots1<M: Mac>(q: &[f32], cols: &[f32], n: usize, start: usize, out: &mut [f32]) {
        let mut blocks = out.chunks_exact_mut(WIDE);
        let mut j = start;
        for blk in &mut blocks {
            let mut acc = [0.0f32; WIDE];
            for (col, &c) in cols.chunks_exact(n).zip(q) {
                if let Some(f) = col[j..].first_chunk::<WIDE>() {
                    for l in 0..WIDE {
                        acc[l] = M::mac(c, f[l], acc[l]);
                    }
                }
            }
            blk.copy_from_slice(&acc);
            j += WIDE;
        }
        for (i, o) in blocks.into_remainder().iter_mut().enumerate() {
            let mut s = 0.0;
            for (col, &c) in cols.chunks_exact(n).zip(q) {
                s = M::mac(c, col[j + i], s);
            }
            *o = s;
        }
    }

    /// `s[j] = <q, f>` and `v[j] = min(<g1, f>, <g2, f>)` for `f = f_{start + j}`: each
    /// feature is loaded once for the three products. Returns the largest `s[j]` (as
    /// [`max_of`] would, `-inf` for an empty range), taken while the scores are in
    /// registers.
    #[inline(always)]
    #[allow(
        clippy::too_many_arguments,
        reason = "a kernel: plain slices in, plain slices out"
    )]
    pub(crate) fn dots3<M: Mac, const L: usize>(
        q: &[f32],
        g1: &[f32],
        g2: &[f32],
        cols: &[f32],
        n: usize,
        start: usize,
        s: &mut [f32],
        v: &mut [f32],
    ) -> f32 {
        // Blocks of L lanes, then of 8 (so that a tile that is not a multiple of L keeps
        // its tail in vectors), then one action at a time.
        let (done, best) = dots3_blocks::<M, L>(q, g1, g2, cols, n, start, s, v);
        let (rest, best8) = dots3_blocks::<M, 8>(
            q,
            g1,
            g2,
            cols,
            n,
            start + done,
            &mut s[done..],
            &mut v[done..],
        );
        let done = done + rest;
        let mut top = max(best, best8);
        for i in done..s.len() {
            let (mut a0, mut a1, mut a2) = (0.0, 0.0, 0.0);
            for (((col, &c0), &c1), &c2) in cols.chunks_exact(n).zip(q).zip(g1).zip(g2) {
                let f = col[start + i];
                a0 = M::mac(c0, f, a0);
                a1 = M::mac(c1, f, a1);
                a2 = M::mac(c2, f, a2);
            }
            s[i] = a0;
            v[i] = min(a1, a2);
            top = max(a0, top);
        }
        top
    }

    /// [`dots3`] over the whole blocks of `L` actions of `s`: returns how many actions
    /// it did and their largest score.
    #[inline(always)]
    #[allow(
        clippy::too_many_arguments,
        reason = "a kernel: plain slices in, plain slices out"
    )]
    fn dots3_blocks<M: Mac, const L: usize>(
        q: &[f32],
        g1: &[f32],
        g2: &[f32],
        cols: &[f32],
        n: usize,
        start: usize,
        s: &mut [f32],
        v: &mut [f32],
    ) -> (usize, f32) {
        let mut best = [f32::NEG_INFINITY; L];
        let mut j = start;
        for (sb, vb) in s.chunks_exact_mut(L).zip(v.chunks_exact_mut(L)) {
            let (mut a0, mut a1, mut a2) = ([0.0f32; L], [0.0f32; L], [0.0f32; L]);
            for (((col, &c0), &c1), &c2) in cols.chunks_exact(n).zip(q).zip(g1).zip(g2) {
                if let Some(f) = col[j..].first_chunk::<L>() {
                    for l in 0..L {
                        a0[l] = M::mac(c0, f[l], a0[l]);
                        a1[l] = M::mac(c1, f[l], a1[l]);
                        a2[l] = M::mac(c2, f[l], a2[l]);
                    }
                }
            }
            sb.copy_from_slice(&a0);
            for l in 0..L {
                vb[l] = min(a1[l], a2[l]);
                best[l] = max(a0[l], best[l]);
            }
            j += L;
        }
        let top = best.iter().fold(f32::NEG_INFINITY, |a, &x| max(x, a));
        (j - start, top)
    }

    /// The largest value (`-inf` for an empty or fully masked row; NaN is skipped).
    #[inline(always)]
    pub(crate) fn max_of<M: Mac>(row: &[f32]) -> f32 {
        let mut m = [f32::NEG_INFINITY; WIDE];
        let (blocks, rest) = row.as_chunks::<WIDE>();
        for blk in blocks {
            m = std::array::from_fn(|l| max(blk[l], m[l]));
        }
        let best = rest.iter().fold(f32::NEG_INFINITY, |a, &x| max(x, a));
        m.iter().fold(best, |a, &x| max(x, a))
    }

    /// `sum(row)` with lane-parallel partial sums.
    #[inline(always)]
    pub(crate) fn sum_of<M: Mac>(row: &[f32]) -> f32 {
        let mut acc = [0.0f32; WIDE];
        let (blocks, rest) = row.as_chunks::<WIDE>();
        for blk in blocks {
            acc = std::array::from_fn(|l| acc[l] + blk[l]);
        }
        acc.iter().sum::<f32>() + rest.iter().sum::<f32>()
    }

    /// `(sum w, sum w t, sum w v)` with `t = s - max`, `w = exp(t)`, masked (`-inf`)
    /// scores weighing nothing; `v` empty means `sum w v = 0`.
    #[inline(always)]
    pub(crate) fn exp_sums<M: Mac>(s: &[f32], max: f32, v: &[f32]) -> (f32, f32, f32) {
        let (mut s0, mut s1, mut s2) = ([0.0f32; LANES], [0.0f32; LANES], [0.0f32; LANES]);
        let one = |x: f32, v: f32, s0: &mut f32, s1: &mut f32, s2: &mut f32| {
            let t = x - max;
            let w = exp_neg::<M>(t);
            // Clamped so that a masked `-inf` gives 0 * finite, not NaN.
            let tc = super::generic_clamp(t);
            *s0 += w;
            *s1 = M::mac(w, tc, *s1);
            *s2 += if w > 0.0 { w * v } else { 0.0 };
        };
        let done = s.len() / LANES * LANES;
        if v.is_empty() {
            for blk in s.chunks_exact(LANES) {
                for l in 0..LANES {
                    one(blk[l], 0.0, &mut s0[l], &mut s1[l], &mut s2[l]);
                }
            }
            for &x in &s[done..] {
                one(x, 0.0, &mut s0[0], &mut s1[0], &mut s2[0]);
            }
        } else {
            for (blk, vb) in s.chunks_exact(LANES).zip(v.chunks_exact(LANES)) {
                for l in 0..LANES {
                    one(blk[l], vb[l], &mut s0[l], &mut s1[l], &mut s2[l]);
                }
            }
            for (&x, &y) in s[done..].iter().zip(&v[done..]) {
                one(x, y, &mut s0[0], &mut s1[0], &mut s2[0]);
            }
        }
        (s0.iter().sum(), s1.iter().sum(), s2.iter().sum())
    }

    /// As [`exp_sums`] with `v` given, and overwrites `s` with the weights `w` and `v`
    /// with `c = alpha t - v` (`0` where `w = 0`).
    #[inline(always)]
    pub(crate) fn soft_weights<M: Mac, const L: usize>(
        s: &mut [f32],
        v: &mut [f32],
        max: f32,
        alpha: f32,
    ) -> (f32, f32, f32) {
        let (mut s0, mut s1, mut s2) = ([0.0f32; L], [0.0f32; L], [0.0f32; L]);
        let one = |x: &mut f32, q: &mut f32, s0: &mut f32, s1: &mut f32, s2: &mut f32| {
            let t = *x - max;
            let w = exp_neg::<M>(t);
            let tc = super::generic_clamp(t);
            let live = w > 0.0;
            *s0 += w;
            *s1 = M::mac(w, tc, *s1);
            *s2 += if live { w * *q } else { 0.0 };
            *q = if live { M::mac(alpha, tc, -*q) } else { 0.0 };
            *x = w;
        };
        let done = s.len() / L * L;
        for (blk, vb) in s.chunks_exact_mut(L).zip(v.chunks_exact_mut(L)) {
            for l in 0..L {
                one(&mut blk[l], &mut vb[l], &mut s0[l], &mut s1[l], &mut s2[l]);
            }
        }
        for (x, q) in s[done..].iter_mut().zip(&mut v[done..]) {
            one(x, q, &mut s0[0], &mut s1[0], &mut s2[0]);
        }
        (s0.iter().sum(), s1.iter().sum(), s2.iter().sum())
    }

    /// `sum x y`.
    #[inline(always)]
    fn dot<M: Mac>(x: &[f32], y: &[f32]) -> f32 {
        // WIDE lanes: several independent chains, so the adds' latency is hidden.
        let mut acc = [0.0f32; WIDE];
        let (xb, xr) = x.as_chunks::<WIDE>();
        let (yb, yr) = y.as_chunks::<WIDE>();
        let tail = xr.iter().zip(yr).fold(0.0, |t, (&a, &b)| M::mac(a, b, t));
        for (a, b) in xb.iter().zip(yb) {
            acc = std::array::from_fn(|l| M::mac(a[l], b[l], acc[l]));
        }
        acc.iter().sum::<f32>() + tail
    }

    /// `sum x (y - mean) f` over one feature row with [`WIDE`] lanes of partial sums
    /// (several independent chains, so the adds' latency is hidden); `mean` 0 is a dot.
    #[inline(always)]
    fn dot_centred<M: Mac>(x: &[f32], y: &[f32], mean: f32, f: &[f32]) -> f32 {
        let mut acc = [0.0f32; WIDE];
        let (xb, xr) = x.as_chunks::<WIDE>();
        let (yb, yr) = y.as_chunks::<WIDE>();
        let (fb, fr) = f.as_chunks::<WIDE>();
        let tail = xr
            .iter()
            .zip(yr)
            .zip(fr)
            .fold(0.0, |t, ((&a, &b), &z)| M::mac(a * (b - mean), z, t));
        for ((a, b), z) in xb.iter().zip(yb).zip(fb) {
            acc = std::array::from_fn(|l| M::mac(a[l] * (b[l] - mean), z[l], acc[l]));
        }
        acc.iter().sum::<f32>() + tail
    }

    /// `(sum w f_k, sum u f_k)` with `u = w (c - mean)` for four feature rows `f` at
    /// once, in blocks of `L` lanes: each load of `w` and `c` serves eight products (a
    /// loop per row would be bound by loads), and centring `c` on the tile's mean keeps
    /// `sum w c f - mean sum w f` from cancelling in `f32`. All slices have one length.
    #[inline(always)]
    pub(crate) fn grad4<M: Mac, const L: usize>(
        w: &[f32],
        c: &[f32],
        mean: f32,
        f: [&[f32]; 4],
    ) -> ([f32; 4], [f32; 4]) {
        let mut aw = [[0.0f32; L]; 4];
        let mut au = [[0.0f32; L]; 4];
        let (wb, wr) = w.as_chunks::<L>();
        let (cb, cr) = c.as_chunks::<L>();
        let fb = f.map(|f| f.as_chunks::<L>());
        for (i, (x, y)) in wb.iter().zip(cb).enumerate() {
            let u: [f32; L] = std::array::from_fn(|l| x[l] * (y[l] - mean));
            for k in 0..4 {
                if let Some(z) = fb[k].0.get(i) {
                    aw[k] = std::array::from_fn(|l| M::mac(x[l], z[l], aw[k][l]));
                    au[k] = std::array::from_fn(|l| M::mac(u[l], z[l], au[k][l]));
                }
            }
        }
        let mut out = ([0.0f32; 4], [0.0f32; 4]);
        for k in 0..4 {
            let rest = fb[k].1;
            out.0[k] = aw[k].iter().sum::<f32>()
                + wr.iter().zip(rest).fold(0.0, |t, (&a, &b)| M::mac(a, b, t));
            out.1[k] = au[k].iter().sum::<f32>()
                + wr.iter()
                    .zip(cr)
                    .zip(rest)
                    .fold(0.0, |t, ((&a, &y), &b)| M::mac(a * (y - mean), b, t));
        }
        out
    }

    /// `(sum w f, sum w (c - mean) f)` for one feature row.
    #[inline(always)]
    pub(crate) fn grad1<M: Mac>(w: &[f32], c: &[f32], mean: f32, f: &[f32]) -> (f32, f32) {
        (dot::<M>(w, f), dot_centred::<M>(w, c, mean, f))
    }

    /// `s[j] = exp((s[j] - max) - ln_sum)`: probabilities, given the row's log-sum-exp
    /// as `max + ln_sum` (kept apart so large scores lose no precision).
    #[inline(always)]
    pub(crate) fn exp_shift<M: Mac>(s: &mut [f32], max: f32, ln_sum: f32) {
        let mut blocks = s.chunks_exact_mut(LANES);
        for blk in &mut blocks {
            for x in blk.iter_mut() {
                *x = exp_neg::<M>((*x - max) - ln_sum);
            }
        }
        for x in blocks.into_remainder() {
            *x = exp_neg::<M>((*x - max) - ln_sum);
        }
    }
}

#[inline(always)]
fn generic_clamp(t: f32) -> f32 {
    if t > EXP_MIN { t } else { EXP_MIN }
}

/// Defines, for each kernel of [`generic`], a public function taking an [`Isa`] first
/// that runs the matching compiled copy.
macro_rules! dispatched {
    ($( $(#[$meta:meta])* fn $name:ident $([$lanes:path])? ($($arg:ident: $ty:ty),* $(,)?)
        $(-> $ret:ty)?; )*) => {
        #[cfg(target_arch = "x86_64")]
        mod avx2 {
            use super::{generic, lanes, Fused};
            $(
                #[target_feature(enable = "avx2,fma")]
                #[allow(clippy::too_many_arguments, reason = "mirrors the generic kernel")]
                pub(super) fn $name($($arg: $ty),*) $(-> $ret)? {
                    generic::$name::<Fused $(, { $lanes[1] })?>($($arg),*)
                }
            )*
        }

        #[cfg(target_arch = "x86_64")]
        mod avx512 {
            use super::{generic, lanes, Fused};
            $(
                #[target_feature(enable = "avx512f,avx2,fma")]
                #[allow(clippy::too_many_arguments, reason = "mirrors the generic kernel")]
                pub(super) fn $name($($arg: $ty),*) $(-> $ret)? {
                    generic::$name::<Fused $(, { $lanes[0] })?>($($arg),*)
                }
            )*
        }

        $(
            $(#[$meta])*
            #[inline]
            #[allow(clippy::too_many_arguments, reason = "mirrors the generic kernel")]
            pub(crate) fn $name(isa: Isa, $($arg: $ty),*) $(-> $ret)? {
                match isa.0 {
                    simd::Isa::Scalar => generic::$name::<Plain $(, { $lanes[2] })?>($($arg),*),
                    #[cfg(target_arch = "x86_64")]
                    simd::Isa::Avx2 => {
                        // SAFETY: an `Isa` is only built by `Isa::checked`, after
                        // `simd::Isa::Avx2.is_supported()` reported avx2 and fma on this
                        // CPU.
                        unsafe { avx2::$name($($arg),*) }
                    }
                    #[cfg(target_arch = "x86_64")]
                    simd::Isa::Avx512 => {
                        // SAFETY: an `Isa` is only built by `Isa::checked`, after
                        // `simd::Isa::Avx512.is_supported()` reported avx512f, avx2 and fma.
                        unsafe { avx512::$name($($arg),*) }
                    }
                    #[cfg(not(target_arch = "x86_64"))]
                    simd::Isa::Avx2 | simd::Isa::Avx512 => {
                        unreachable!("no CPU of this target supports {:?}", isa.0)
                    }
                }
            }
        )*
    };
}

dispatched! {
    /// See [`generic::dots1`].
    fn dots1(q: &[f32], cols: &[f32], n: usize, start: usize, out: &mut [f32]);
    /// See [`generic::dots3`].
    fn dots3[lanes::DOTS3](q: &[f32], g1: &[f32], g2: &[f32], cols: &[f32], n: usize, start: usize,
             s: &mut [f32], v: &mut [f32]) -> f32;
    /// See [`generic::max_of`].
    fn max_of(row: &[f32]) -> f32;
    /// See [`generic::sum_of`].
    fn sum_of(row: &[f32]) -> f32;
    /// See [`generic::exp_sums`].
    fn exp_sums(s: &[f32], max: f32, v: &[f32]) -> (f32, f32, f32);
    /// See [`generic::soft_weights`].
    fn soft_weights[lanes::SOFT](s: &mut [f32], v: &mut [f32], max: f32, alpha: f32)
        -> (f32, f32, f32);
    /// See [`generic::grad1`].
    fn grad1(w: &[f32], c: &[f32], mean: f32, f: &[f32]) -> (f32, f32);
    /// See [`generic::grad4`].
    fn grad4[lanes::GRAD](w: &[f32], c: &[f32], mean: f32, f: [&[f32]; 4])
        -> ([f32; 4], [f32; 4]);
    /// See [`generic::exp_shift`].
    fn exp_shift(s: &mut [f32], max: f32, ln_sum: f32);
}

/// [`generic::grad4`] as the scorer calls it: on AVX2 the hand-written copy
/// ([`avx2_direct::grad4`]), elsewhere the compiled generic one.
#[inline]
pub(crate) fn grad_block(
    isa: Isa,
    w: &[f32],
    c: &[f32],
    mean: f32,
    f: [&[f32]; 4],
) -> ([f32; 4], [f32; 4]) {
    #[cfg(target_arch = "x86_64")]
    if isa.0 == simd::Isa::Avx2 {
        // SAFETY: an `Isa` is only built by `Isa::checked`, after
        // `simd::Isa::Avx2.is_supported()` reported avx2 and fma on this CPU.
        return unsafe { avx2_direct::grad4(w, c, mean, f) };
    }
    grad4(isa, w, c, mean, f)
}

/// Kernels written with AVX2 intrinsics where LLVM vectorises the generic code the wrong
/// way round.
#[cfg(target_arch = "x86_64")]
mod avx2_direct {
    use std::arch::x86_64::{
        __m256, _mm_add_ps, _mm_storeu_ps, _mm256_castps256_ps128, _mm256_extractf128_ps,
        _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_set1_ps, _mm256_setzero_ps,
        _mm256_sub_ps,
    };

    /// [`super::generic::grad4`] in blocks of 8 actions: eight accumulators (`sum w f_k`
    /// and `sum u f_k` for four rows), each load of `w` and `c` serving eight
    /// multiply-adds. Generic code with the four rows in one loop body is vectorised by
    /// LLVM across the rows instead of the actions (shuffles and scalar loads, 2.5x
    /// slower), and with a branch per row it ran at about half its multiply-add rate.
    ///
    /// # Panics
    /// Unless `c` and the four rows are as long as `w`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn grad4(w: &[f32], c: &[f32], mean: f32, f: [&[f32]; 4]) -> ([f32; 4], [f32; 4]) {
        let len = w.len();
        assert!(c.len() == len && f.iter().all(|f| f.len() == len));
        let blocks = len / 8;
        let m = _mm256_set1_ps(mean);
        let mut aw = [_mm256_setzero_ps(); 4];
        let mut au = [_mm256_setzero_ps(); 4];
        for i in 0..blocks {
            let at = i * 8;
            // SAFETY: `at + 8 <= blocks * 8 <= len`, and every slice holds `len` floats
            // (asserted above); unaligned loads.
            unsafe {
                let x = _mm256_loadu_ps(w.as_ptr().add(at));
                let u = _mm256_mul_ps(x, _mm256_sub_ps(_mm256_loadu_ps(c.as_ptr().add(at)), m));
                let z = f.map(|f| _mm256_loadu_ps(f.as_ptr().add(at)));
                for k in 0..4 {
                    aw[k] = _mm256_fmadd_ps(x, z[k], aw[k]);
                    au[k] = _mm256_fmadd_ps(u, z[k], au[k]);
                }
            }
        }
        let done = blocks * 8;
        let mut out = ([0.0f32; 4], [0.0f32; 4]);
        for k in 0..4 {
            let (mut tw, mut tu) = (hsum(aw[k]), hsum(au[k]));
            for j in done..len {
                tw = w[j].mul_add(f[k][j], tw);
                tu = (w[j] * (c[j] - mean)).mul_add(f[k][j], tu);
            }
            out.0[k] = tw;
            out.1[k] = tu;
        }
        out
    }

    /// The sum of the eight lanes of `v`.
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let mut lanes = [0.0f32; 4];
        // SAFETY: `lanes` holds 4 floats; an unaligned store.
        unsafe { _mm_storeu_ps(lanes.as_mut_ptr(), half) };
        (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
    }
}

/// `exp(t)` with the given kernels, one value at a time (tests and scalar tails).
#[cfg(test)]
pub(crate) fn exp_one(isa: Isa, t: f32) -> f32 {
    let mut x = [t];
    exp_shift(isa, &mut x, 0.0, 0.0);
    x[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_is_within_a_few_ulps_of_f64_exp_on_its_range() {
        for isa in Isa::available() {
            let mut worst = 0.0f64;
            let steps = 2_000_000;
            for i in 0..=steps {
                let t = EXP_MIN * 0.999_999 * (i as f32 / steps as f32);
                let want = f64::from(t).exp();
                let got = f64::from(exp_one(isa, t));
                worst = worst.max((got - want).abs() / want);
            }
            // Also the chunked path (16-lane blocks plus a tail).
            let ts: Vec<f32> = (0..1000).map(|i| -(i as f32) * 0.0867).collect();
            let mut xs = ts.clone();
            exp_shift(isa, &mut xs, 0.0, 0.0);
            for (t, x) in ts.iter().zip(&xs) {
                let want = f64::from(*t).exp();
                worst = worst.max((f64::from(*x) - want).abs() / want);
            }
            assert!(worst < 1.5e-7, "{isa:?}: max relative error {worst:e}");
        }
    }

    #[test]
    fn fast_exp_flushes_masked_and_tiny_inputs_to_zero() {
        for isa in Isa::available() {
            for t in [f32::NEG_INFINITY, f32::NAN, -87.5, -1000.0] {
                assert_eq!(exp_one(isa, t), 0.0, "{isa:?} {t}");
            }
            assert_eq!(exp_one(isa, 0.0), 1.0);
            assert!(exp_one(isa, -86.9) > 0.0);
        }
    }

    /// The gradient block (AVX2: the hand-written copy) against f64 sums, at lengths
    /// with and without a tail after the last whole block.
    #[test]
    fn gradient_blocks_match_f64_sums() {
        for isa in Isa::available() {
            for len in [0usize, 1, 7, 8, 9, 16, 33, 512, 517] {
                let val = |i: usize, a: usize, b: usize| ((i * a) % b) as f32 * 0.25 - 1.0;
                let w: Vec<f32> = (0..len).map(|i| val(i, 7, 9).abs()).collect();
                let c: Vec<f32> = (0..len).map(|i| val(i, 5, 13)).collect();
                let rows: Vec<Vec<f32>> = (0..4)
                    .map(|k| (0..len).map(|i| val(i + k, 3 + k, 11)).collect())
                    .collect();
                let mean = 0.3f32;
                let (fw, fc) =
                    grad_block(isa, &w, &c, mean, [&rows[0], &rows[1], &rows[2], &rows[3]]);
                for k in 0..4 {
                    let (mut ew, mut ec) = (0.0f64, 0.0f64);
                    for i in 0..len {
                        let (x, y, z) = (f64::from(w[i]), f64::from(c[i]), f64::from(rows[k][i]));
                        ew += x * z;
                        ec += x * (y - f64::from(mean)) * z;
                    }
                    for (got, want) in [(fw[k], ew), (fc[k], ec)] {
                        assert!(
                            (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                            "{isa:?} len {len} row {k}: {got} against {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn kernels_agree_with_scalar_sums() {
        for isa in Isa::available() {
            for len in [0usize, 1, 15, 16, 17, 40] {
                let s: Vec<f32> = (0..len)
                    .map(|i| ((i * 37) % 11) as f32 * 0.3 - 1.0)
                    .collect();
                let v: Vec<f32> = (0..len).map(|i| ((i * 13) % 7) as f32 - 3.0).collect();
                let m = max_of(isa, &s);
                let want_m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                assert_eq!(m, want_m);
                let (s0, s1, s2) = exp_sums(isa, &s, m, &v);
                let w: Vec<f64> = s.iter().map(|x| f64::from(x - m).exp()).collect();
                let e0: f64 = w.iter().sum();
                let e1: f64 = w.iter().zip(&s).map(|(w, x)| w * f64::from(x - m)).sum();
                let e2: f64 = w.iter().zip(&v).map(|(w, v)| w * f64::from(*v)).sum();
                for (got, want) in [(s0, e0), (s1, e1), (s2, e2)] {
                    assert!(
                        (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
                        "{isa:?} {len}"
                    );
                }
                assert!(
                    (f64::from(sum_of(isa, &s)) - s.iter().map(|&x| f64::from(x)).sum::<f64>())
                        .abs()
                        < 1e-4
                );
            }
        }
    }
}
