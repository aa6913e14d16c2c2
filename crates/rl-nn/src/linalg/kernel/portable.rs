//! The portable kernels in plain Rust that the compiler vectorises: the `4 x 8` tile,
//! dot products and rank updates.

#![allow(
    unsafe_code,
    reason = "raw-pointer microkernels; bounds are checked once up front"
)]

use super::*;

/// The portable kernel: plain Rust over arrays, vectorised by the compiler.
#[derive(Debug)]
pub(super) struct Portable;

impl Micro for Portable {
    const MR: usize = 4;
    const NR: usize = PORTABLE_NR;

    unsafe fn tile(t: &Tile) {
        // SAFETY:
        // - `by_rows!` picks the instantiation with exactly `t.mr` rows (`1..=4`);
        // - the caller upholds the memory contract, which the kernels share.
        unsafe { by_rows!(t.mr, portable_tile, [], (t), 1 2 3 4) }
    }
}

/// [`Portable`]'s kernel for `MR` rows.
///
/// # Safety
/// As [`Micro::tile`], with `t.mr == MR`.
pub(super) unsafe fn portable_tile<const MR: usize>(t: &Tile) {
    if t.nr == PORTABLE_NR {
        // SAFETY:
        // - `t.nr == NR`, as the full-width variant requires;
        // - the caller upholds the rest of the contract, which the variant shares.
        unsafe { portable_tile_width::<MR, true>(t) }
    } else {
        // SAFETY:
        // - the caller upholds the contract, which the variant shares.
        unsafe { portable_tile_width::<MR, false>(t) }
    }
}

/// Columns of a [`Portable`] tile.
pub(super) const PORTABLE_NR: usize = 8;

/// [`portable_tile`], with whole rows of `rhs` read at once if `FULL`.
///
/// # Safety
/// As [`Micro::tile`], with `t.mr == MR`, and `t.nr == 8` if `FULL`.
pub(super) unsafe fn portable_tile_width<const MR: usize, const FULL: bool>(t: &Tile) {
    const NR: usize = PORTABLE_NR;
    let mut acc = [[0.0f32; NR]; MR];
    let mut a = t.a;
    let mut b = t.b;
    for _ in 0..t.kc {
        let row = if FULL {
            // SAFETY:
            // - `FULL` means `nr == 8`: the row's 8 floats of the current step `p < kc` are
            //   readable by the contract (`read_unaligned` needs no alignment).
            unsafe { b.cast::<[f32; NR]>().read_unaligned() }
        } else {
            let mut row = [0.0f32; NR];
            for (j, r) in row.iter_mut().enumerate().take(t.nr) {
                // SAFETY:
                // - `j < nr` and the current step `p < kc`: readable by the contract.
                *r = unsafe { *b.wrapping_add(j) };
            }
            row
        };
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY:
            // - `i < mr` and the current step `p < kc`: readable by the contract.
            let x = unsafe { *a.wrapping_add(i * t.ars) };
            for (acc, r) in acc.iter_mut().zip(row) {
                *acc += x * r;
            }
        }
        a = a.wrapping_add(t.acs);
        b = b.wrapping_add(t.brs);
    }
    for (i, acc) in acc.iter().enumerate() {
        for (j, acc) in acc.iter().enumerate().take(t.nr) {
            let c = t.c.wrapping_add(i * t.ldc + j);
            // SAFETY:
            // - `i < mr`, `j < nr`: readable, writable and unaliased by the contract.
            unsafe { *c = if t.add { *c + acc } else { *acc } };
        }
    }
}

/// [`dot_columns`] in plain Rust: one row at a time, 8 partial sums per dot product.
pub(super) fn portable_dot(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, add: bool) {
    let (m, k, n) = (lhs.rows(), lhs.cols(), rhs.cols());
    let (data, brs, bcs) = (rhs.data(), rhs.row_stride(), rhs.col_stride());
    let (a, ars) = (lhs.data(), lhs.row_stride());
    let mut run = |columns: &[f32], stride: usize| {
        for (i, out) in dst.chunks_exact_mut(n).enumerate().take(m) {
            let row = &a[i * ars..i * ars + k];
            for (j, out) in out.iter_mut().enumerate() {
                let sum = dot8(row, &columns[j * stride..j * stride + k]);
                *out = if add { *out + sum } else { sum };
            }
        }
    };
    if brs == 1 {
        // Column `j` starts at `j * bcs`: the view's bounds cover its `k` elements.
        let len = (n - 1) * bcs + k;
        run(&data[..len], bcs);
    } else {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let packed = aligned(&mut scratch, n * k);
            for (j, packed) in packed.chunks_exact_mut(k).enumerate() {
                for (p, x) in packed.iter_mut().enumerate() {
                    *x = data[p * brs + j * bcs];
                }
            }
            run(packed, k);
        });
    }
}

/// The dot product of two slices of one length, in 8 independent partial sums (which the
/// compiler keeps in vector registers).
pub(super) fn dot8(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let tail: f32 = xc
        .remainder()
        .iter()
        .zip(yc.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (xs, ys) in xc.zip(yc) {
        for ((acc, a), b) in acc.iter_mut().zip(xs).zip(ys) {
            *acc += a * b;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// [`rank_update`] in plain Rust: each row of `dst` gets `k <= 4` scaled rows of `rhs`.
pub(super) fn portable_rank(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, add: bool) {
    let (k, n) = (lhs.cols(), rhs.cols());
    let (data, brs, bcs) = (rhs.data(), rhs.row_stride(), rhs.col_stride());
    let (a, ars, acs) = (lhs.data(), lhs.row_stride(), lhs.col_stride());
    let mut run = |b: &[f32], stride: usize| {
        for (i, out) in dst.chunks_exact_mut(n).enumerate() {
            if !add {
                out.fill(0.0);
            }
            for p in 0..k {
                let x = a[i * ars + p * acs];
                for (c, y) in out.iter_mut().zip(&b[p * stride..p * stride + n]) {
                    *c += x * y;
                }
            }
        }
    };
    if bcs == 1 {
        // Row `p` starts at `p * brs`: the view's bounds cover its `n` elements.
        let len = (k - 1) * brs + n;
        run(&data[..len], brs);
    } else {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let packed = aligned(&mut scratch, k * n);
            pack_panels(packed, rhs, 0, k, 0, n, n);
            run(packed, n);
        });
    }
}
