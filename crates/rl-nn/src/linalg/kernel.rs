//! An allocation-free single-threaded `sgemm`: `dst (+)= lhs * rhs` over strided views.
//!
//! # Design
//!
//! - **Microkernels.** A register-blocked outer-product kernel computes an `MR x NR` tile
//!   of `dst` over `kc` steps of the inner dimension: per step it loads one row of `NR`
//!   values of `rhs` and broadcasts `MR` values of `lhs`, then issues `MR * NR / lanes`
//!   fused multiply-adds into accumulators that stay in registers. AVX-512: `12 x 32`
//!   (24 `zmm` accumulators), or `6 x 64` when `lhs` has at most 6 rows (a cut-down
//!   `12 x 32` tile would leave too few independent accumulators to hide the FMA
//!   latency); AVX2+FMA: `6 x 16` (12 `ymm`), or `3 x 32` for at most 3 rows; the
//!   portable fallback: `4 x 8` in plain Rust that the compiler vectorises. Column
//!   remainders use masked loads and stores (AVX-512 `k` masks, AVX2 `vmaskmovps`), row
//!   remainders a kernel instantiated for that many rows; the destination is overwritten
//!   or added to in the store, so `dst` is read at most once per `kc` block.
//! - **Operands in place when possible.** `lhs` is read in place: the kernel broadcasts
//!   its elements from their strided positions (a kernel specialised for row stride 1,
//!   the `dy^T` of a weight gradient, uses immediate offsets). `rhs` is read in place when
//!   its rows are contiguous (column stride 1, the `W` of an input gradient) and packed
//!   otherwise (the `W^T` of a forward pass): into `kc x NR` panels, 64-byte aligned, with
//!   16 x 16 (AVX-512) or 8 x 8 (AVX2) transposes in registers. Either operand is packed anyway when
//!   its stride is a multiple of 1024 floats: rows 4 KiB apart fall into the same L1 sets.
//! - **Blocking.** `kc <= KC` (256) steps per kernel call keep the kernel's `MR x kc`
//!   strip of `lhs` in L1 while it sweeps a `kc x nc` block of `rhs` (`nc <= NC`, 512
//!   columns) held in L2; the first `kc` block applies the caller's [`Accumulate`], later
//!   ones add.
//! - **Thin shapes**, where a tile would leave most lanes idle (on every path, the
//!   portable one in plain Rust):
//!   - at most 4 columns and `lhs` rows contiguous (a value head's `x * w^T`, the input
//!     gradient of a 3-4 input layer): dot products along the rows, 16 (8 on AVX2) of
//!     them reduced together by a shuffle tree into one vector store;
//!   - an inner dimension of at most 4 (the forward pass of a 3-4 input layer): rank-`k`
//!     updates, the `k` values of 4 (2) `lhs` rows held broadcast in registers while
//!     those rows of `dst` stream through once;
//!   - few columns and `lhs` with row stride 1 (the weight gradient `dy^T x` of a 3-4
//!     input layer): `dst^T = rhs^T * lhs^T` into scratch, then transposed back, so that
//!     the tiles run full width.
//!
//! # Allocation
//!
//! Scratch lives in two thread-local `Vec<f32>` that only grow: a call that needs more
//! than any earlier call on its thread resizes one (an allocation), every other call reuses
//! them. After one warm-up call with each shape (or with the largest shapes), a thread
//! multiplies without touching the allocator. What they grow to: for the blocked product,
//! at most `KC * NC + 12 * KC` floats plus alignment (about 524 KiB) whatever the shape;
//! for the thin shapes, `n * k` floats (dot products with a strided `rhs`, `n <= 4`),
//! `k * round_up(n, 16)` (rank updates of a transposed `rhs`, `k <= 4`), or `m * n` (the
//! transposed destination, `n <= 8`). The buffers are freed when their thread exits.
//!
//! # Paths
//!
//! [`matmul`] runs the AVX-512, AVX2+FMA or portable kernels as rl-core's
//! [`Isa::detect`] chose once per process from the CPU (the repository never sets
//! `target-cpu`; `RL_NN_KERNEL` lowers the choice, see [`rl_core::simd`]);
//! [`matmul_with`] takes the [`Isa`] explicitly so that tests run every path the machine
//! supports. [`Isa::Scalar`] is the portable path.

#![allow(
    unsafe_code,
    reason = "SIMD intrinsics and raw-pointer microkernels; bounds are checked once up front"
)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::cell::RefCell;

use rl_core::simd::Isa;

use super::{Accumulate, MatRef};

/// Inner-dimension block: steps of `k` per microkernel call.
const KC: usize = 256;
/// Column block of `rhs` packed (or swept in place) per `kc` block.
const NC: usize = 512;
/// Packed panels start on this many floats (64 bytes).
const ALIGN: usize = 16;

thread_local! {
    /// Packing scratch: grows to the largest size this thread ever needed, never shrinks.
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The transposed destination of `transposed_product`, which grows the same way.
    static TRANSPOSED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `dst (m x n, row-major) = lhs * rhs` (or `+=`) on the kernels [`Isa::detect`] chose.
///
/// # Panics
/// As [`matmul_with`].
pub(crate) fn matmul(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, accumulate: Accumulate) {
    matmul_with(Isa::detect(), dst, lhs, rhs, accumulate);
}

/// `dst (m x n, row-major) = lhs * rhs` (or `+=`) on the given kernels.
///
/// # Panics
/// If the shapes do not agree, a view leaves its slice, or the CPU lacks `isa`.
pub(crate) fn matmul_with(
    isa: Isa,
    dst: &mut [f32],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    accumulate: Accumulate,
) {
    let (m, k, n) = (lhs.rows(), lhs.cols(), rhs.cols());
    assert!(
        rhs.rows() == k
            && m.checked_mul(n) == Some(dst.len())
            && lhs.in_bounds()
            && rhs.in_bounds(),
        "matmul shapes: dst {} for {m}x{k} * {}x{n}",
        dst.len(),
        rhs.rows()
    );
    assert!(
        isa.is_supported(),
        "this CPU cannot run the {isa:?} kernels"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if accumulate == Accumulate::Overwrite {
            dst.fill(0.0);
        }
        return;
    }
    let add = accumulate == Accumulate::Add;
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            if n <= 4 && lhs.col_stride() == 1 {
                // SAFETY:
                // - `isa.is_supported()` was asserted: the CPU has AVX-512F.
                unsafe { dot_columns::<Avx512>(dst, lhs, rhs, add) };
            } else if k <= 4 {
                // SAFETY:
                // - `isa.is_supported()` was asserted: the CPU has AVX-512F.
                unsafe { rank_update::<Avx512>(dst, lhs, rhs, add) };
            } else if narrow(lhs, rhs, Avx512::NR) {
                transposed_product(dst, lhs, rhs, add, drive_avx512);
            } else {
                drive_avx512(dst, lhs, rhs, add);
            }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            if n <= 4 && lhs.col_stride() == 1 {
                // SAFETY:
                // - `isa.is_supported()` was asserted: the CPU has AVX2 and FMA.
                unsafe { dot_columns::<Avx2>(dst, lhs, rhs, add) };
            } else if k <= 4 {
                // SAFETY:
                // - `isa.is_supported()` was asserted: the CPU has AVX2 and FMA.
                unsafe { rank_update::<Avx2>(dst, lhs, rhs, add) };
            } else if narrow(lhs, rhs, Avx2::NR) {
                transposed_product(dst, lhs, rhs, add, drive_avx2);
            } else {
                drive_avx2(dst, lhs, rhs, add);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx512 | Isa::Avx2 => unreachable!("checked by Isa::is_supported"),
        Isa::Scalar => {
            if n <= 4 && lhs.col_stride() == 1 {
                portable_dot(dst, lhs, rhs, add);
            } else if k <= 4 {
                portable_rank(dst, lhs, rhs, add);
            } else if narrow(lhs, rhs, 2 * Portable::NR) {
                // Up to 4 columns: partial tiles take a slow scalar path here.
                transposed_product(dst, lhs, rhs, add, drive::<Portable>);
            } else {
                drive::<Portable>(dst, lhs, rhs, add);
            }
        }
    }
}

/// [`drive`] with the AVX-512 tile shape for `lhs`: 6 x 64 for at most 6 rows (more
/// independent accumulators than 12 x 32 tiles cut to a few rows), 12 x 32 otherwise.
#[cfg(target_arch = "x86_64")]
fn drive_avx512(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, add: bool) {
    if lhs.rows() <= Avx512Wide::MR {
        drive::<Avx512Wide>(dst, lhs, rhs, add);
    } else {
        drive::<Avx512>(dst, lhs, rhs, add);
    }
}

/// [`drive`] with the AVX2 tile shape for `lhs`: 3 x 32 for at most 3 rows, 6 x 16
/// otherwise.
#[cfg(target_arch = "x86_64")]
fn drive_avx2(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, add: bool) {
    if lhs.rows() <= Avx2Wide::MR {
        drive::<Avx2Wide>(dst, lhs, rhs, add);
    } else {
        drive::<Avx2>(dst, lhs, rhs, add);
    }
}

/// One microkernel call: `c[i][j] (+)= sum_p a[i * ars + p * acs] * b[p * brs + j]` for
/// `i < mr`, `j < nr`, `p < kc`, with `c[i][j]` at `c + i * ldc + j`.
#[derive(Clone, Copy, Debug)]
struct Tile {
    /// Rows of the tile, `1..=MR`.
    mr: usize,
    /// Columns of the tile, `1..=NR`.
    nr: usize,
    /// Steps of the inner dimension, at least 1.
    kc: usize,
    /// `lhs` element `(0, 0)` of the tile.
    a: *const f32,
    /// `lhs` row stride.
    ars: usize,
    /// `lhs` column stride.
    acs: usize,
    /// `rhs` element `(0, 0)` of the tile; its rows are contiguous.
    b: *const f32,
    /// `rhs` row stride.
    brs: usize,
    /// `dst` element `(0, 0)` of the tile.
    c: *mut f32,
    /// `dst` row stride.
    ldc: usize,
    /// Add to `c` instead of overwriting it.
    add: bool,
}

/// A microkernel and its tile shape.
trait Micro {
    /// Rows per tile.
    const MR: usize;
    /// Columns per tile.
    const NR: usize;

    /// Computes one tile.
    ///
    /// # Safety
    /// - the CPU supports the kernel's instruction set;
    /// - `1 <= t.mr <= MR`, `1 <= t.nr <= NR`, `t.kc >= 1`;
    /// - every `a[i * ars + p * acs]` and `b[p * brs + j]` (`i < mr`, `j < nr`, `p < kc`)
    ///   is readable, every `c[i * ldc + j]` readable and writable, and nothing else
    ///   accesses `c`'s elements during the call.
    unsafe fn tile(t: &Tile);

    /// Packs `rhs[pc..pc + kc, jc..jc + nc]` as [`pack_panels`] does with `NR` columns.
    ///
    /// # Safety
    /// The CPU supports the kernel's instruction set.
    unsafe fn pack(
        panels: &mut [f32],
        rhs: MatRef<'_>,
        pc: usize,
        kc: usize,
        jc: usize,
        nc: usize,
    ) {
        pack_panels(panels, rhs, pc, kc, jc, nc, Self::NR);
    }

    /// Packs `lhs[ir..ir + mr, pc..pc + kc]` as [`pack_strip`] does with `MR` rows.
    ///
    /// # Safety
    /// The CPU supports the kernel's instruction set.
    unsafe fn pack_lhs(
        strip: &mut [f32],
        lhs: MatRef<'_>,
        ir: usize,
        mr: usize,
        pc: usize,
        kc: usize,
    ) {
        pack_strip(strip, lhs, (ir, mr, Self::MR), pc, kc);
    }
}

/// Strides (in floats) that are multiples of this map the rows of an operand onto the
/// same L1 sets (4 KiB apart): such operands are packed even where they could be read in
/// place.
const ALIASING: usize = 1024;

/// The blocked product: `rhs` in place or packed, `lhs` in place or (for strides that
/// alias in L1) packed per `MR x kc` strip, then one [`Micro::tile`] per tile.
fn drive<K: Micro>(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, add: bool) {
    let (m, k, n) = (lhs.rows(), lhs.cols(), rhs.cols());
    let (ars, acs) = (lhs.row_stride(), lhs.col_stride());
    let (brs, bcs) = (rhs.row_stride(), rhs.col_stride());
    let pack_b = bcs != 1 || (m >= 4 * K::MR && brs.is_multiple_of(ALIASING));
    let pack_a = n > K::NR
        && m > 1
        && ((acs == 1 && ars.is_multiple_of(ALIASING))
            || (ars == 1 && acs.is_multiple_of(ALIASING)));
    let c = dst.as_mut_ptr();
    let b = rhs.data().as_ptr();
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let b_len = if pack_b {
            k.min(KC) * n.min(NC).next_multiple_of(K::NR)
        } else {
            0
        };
        // `lhs` strips start on an aligned boundary too: `b_len` is a multiple of 16.
        let a_len = if pack_a { K::MR * k.min(KC) } else { 0 };
        let (panels, strip) = aligned(&mut scratch, b_len.next_multiple_of(ALIGN) + a_len)
            .split_at_mut(b_len.next_multiple_of(ALIGN));
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                let (b_block, b_rs, panel_stride) = if pack_b {
                    // SAFETY:
                    // - `K` is only instantiated for an `Isa` whose `is_supported()`
                    //   `matmul_with` asserted.
                    unsafe { K::pack(panels, rhs, pc, kc, jc, nc) };
                    (panels.as_ptr(), K::NR, kc * K::NR)
                } else {
                    (b.wrapping_add(pc * brs + jc), brs, K::NR)
                };
                for ir in (0..m).step_by(K::MR) {
                    let mr = K::MR.min(m - ir);
                    let (a, a_rs, a_cs) = if pack_a {
                        // SAFETY:
                        // - `K` is only instantiated for an `Isa` whose `is_supported()`
                        //   `matmul_with` asserted.
                        unsafe { K::pack_lhs(strip, lhs, ir, mr, pc, kc) };
                        (strip.as_ptr(), 1, K::MR)
                    } else {
                        (lhs.data()[ir * ars + pc * acs..].as_ptr(), ars, acs)
                    };
                    for (q, jr) in (0..nc).step_by(K::NR).enumerate() {
                        let tile = Tile {
                            mr,
                            nr: K::NR.min(nc - jr),
                            kc,
                            a,
                            ars: a_rs,
                            acs: a_cs,
                            b: b_block.wrapping_add(q * panel_stride),
                            brs: b_rs,
                            c: c.wrapping_add(ir * n + jc + jr),
                            ldc: n,
                            add: add || pc > 0,
                        };
                        // SAFETY:
                        // - `K` is only instantiated by `matmul_with` for an `Isa` whose
                        //   `is_supported()` it asserted;
                        // - `mr`, `nr` and `kc` are clamped to the tile and block sizes and
                        //   are positive because `m`, `n` and `k` are;
                        // - `lhs` reads are elements `(ir + i, pc + p)` of the view, inside
                        //   its slice as `in_bounds` asserted, or of the strip `pack_lhs`
                        //   filled (`MR * kc` floats); `rhs` reads are elements
                        //   `(pc + p, jc + jr + j)` of the view (in place, column stride 1)
                        //   or of a panel `pack` filled inside `panels`, which holds
                        //   `kc * round_up(nc, NR)` floats;
                        // - `dst` elements `(ir + i, jc + jr + j)` lie inside `dst`
                        //   (`m * n` floats), borrowed mutably for the whole call.
                        unsafe { K::tile(&tile) };
                    }
                }
            }
        }
    });
}

/// Packs `lhs[ir..ir + mr, pc..pc + kc]` into `strip` as `kc` columns of `mr_full`
/// contiguous values (`strip[p * mr_full + i]`); rows past `mr` are left as they are.
///
/// # Panics
/// If `strip` is shorter than `kc * mr_full` or the block leaves the view.
fn pack_strip(
    strip: &mut [f32],
    lhs: MatRef<'_>,
    (ir, mr, mr_full): (usize, usize, usize),
    pc: usize,
    kc: usize,
) {
    let (data, ars, acs) = (lhs.data(), lhs.row_stride(), lhs.col_stride());
    for (p, column) in strip[..kc * mr_full].chunks_exact_mut(mr_full).enumerate() {
        let start = ir * ars + (pc + p) * acs;
        if ars == 1 {
            column[..mr].copy_from_slice(&data[start..start + mr]);
        } else {
            for (i, x) in column[..mr].iter_mut().enumerate() {
                *x = data[start + i * ars];
            }
        }
    }
}

/// [`pack_strip`] for `lhs` with column stride 1 (rows contiguous) and `mr_full <= 16`,
/// 16 columns at a time transposed in registers.
///
/// # Safety
/// AVX-512F.
///
/// # Panics
/// If `lhs` has a column stride other than 1, `mr_full` exceeds 16, `strip` is shorter
/// than `kc * mr_full`, or the block leaves the view.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_pack_strip(
    strip: &mut [f32],
    lhs: MatRef<'_>,
    (ir, mr, mr_full): (usize, usize, usize),
    pc: usize,
    kc: usize,
) {
    let (data, ars) = (lhs.data(), lhs.row_stride());
    assert!(lhs.col_stride() == 1 && mr <= mr_full && mr_full <= 16);
    assert!(ir + mr <= lhs.rows() && pc + kc <= lhs.cols());
    let strip = &mut strip[..kc * mr_full];
    let lanes = mask16(mr_full);
    for p0 in (0..kc).step_by(16) {
        let depth = 16.min(kc - p0);
        let mask = mask16(depth);
        let mut rows = [_mm512_setzero_ps(); 16];
        for (i, row) in rows.iter_mut().enumerate().take(mr) {
            let start = (ir + i) * ars + pc + p0;
            let src = &data[start..start + depth];
            // SAFETY:
            // - the mask enables exactly `depth` lanes, all inside `src`.
            *row = unsafe { _mm512_maskz_loadu_ps(mask, src.as_ptr()) };
        }
        let columns = transpose16(rows);
        for (p, column) in columns.iter().enumerate().take(depth) {
            let start = (p0 + p) * mr_full;
            let dst = &mut strip[start..start + mr_full];
            // SAFETY:
            // - the mask enables exactly `mr_full` lanes, all inside `dst`.
            unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), lanes, *column) };
        }
    }
}

/// A 64-byte-aligned slice of `len` floats inside `scratch`, growing it if it is too short
/// (the only allocation of this module).
fn aligned(scratch: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if scratch.len() < len + ALIGN {
        scratch.resize(len + ALIGN, 0.0);
    }
    let misalign = (scratch.as_ptr() as usize / size_of::<f32>()) % ALIGN;
    let start = (ALIGN - misalign) % ALIGN;
    &mut scratch[start..start + len]
}

/// Packs `rhs[pc..pc + kc, jc..jc + nc]` into `kc x nr` panels of `nr` contiguous columns,
/// panel `q` at `panels[q * kc * nr..]`; columns past `nc` in the last panel are left as
/// they are (the kernels never read them).
fn pack_panels(
    panels: &mut [f32],
    rhs: MatRef<'_>,
    pc: usize,
    kc: usize,
    jc: usize,
    nc: usize,
    nr: usize,
) {
    let (data, brs, bcs) = (rhs.data(), rhs.row_stride(), rhs.col_stride());
    for (q, panel) in panels[..kc * nc.next_multiple_of(nr)]
        .chunks_exact_mut(kc * nr)
        .enumerate()
    {
        let j0 = jc + q * nr;
        let width = nr.min(jc + nc - j0);
        if bcs == 1 {
            for (p, row) in panel.chunks_exact_mut(nr).enumerate() {
                let start = (pc + p) * brs + j0;
                row[..width].copy_from_slice(&data[start..start + width]);
            }
        } else {
            // Column by column: contiguous reads when `rhs` is a transposed view.
            for j in 0..width {
                let base = j0 * bcs + j * bcs + pc * brs;
                for p in 0..kc {
                    panel[p * nr + j] = data[base + p * brs];
                }
            }
        }
    }
}

/// Expands to a `match` on a runtime row count that calls `$f::<ROWS, ...>`.
macro_rules! by_rows {
    ($rows:expr, $f:ident, $extra:tt, $args:tt, $($r:literal)*) => {
        match $rows {
            $($r => by_rows!(@call $f, $r, $extra, $args),)*
            _ => unreachable!("row count out of range"),
        }
    };
    (@call $f:ident, $r:literal, [$($extra:tt)*], ($($arg:expr),*)) => {
        $f::<$r, $($extra)*>($($arg),*)
    };
}

/// The portable kernel: plain Rust over arrays, vectorised by the compiler.
#[derive(Debug)]
struct Portable;

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
unsafe fn portable_tile<const MR: usize>(t: &Tile) {
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
const PORTABLE_NR: usize = 8;

/// [`portable_tile`], with whole rows of `rhs` read at once if `FULL`.
///
/// # Safety
/// As [`Micro::tile`], with `t.mr == MR`, and `t.nr == 8` if `FULL`.
unsafe fn portable_tile_width<const MR: usize, const FULL: bool>(t: &Tile) {
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
fn portable_dot(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, add: bool) {
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
fn dot8(x: &[f32], y: &[f32]) -> f32 {
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
fn portable_rank(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, add: bool) {
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

/// The AVX-512 kernel: 12 x 32 tiles.
#[cfg(target_arch = "x86_64")]
#[derive(Debug)]
struct Avx512;

#[cfg(target_arch = "x86_64")]
impl Micro for Avx512 {
    const MR: usize = 12;
    const NR: usize = 32;

    unsafe fn tile(t: &Tile) {
        // SAFETY:
        // - the caller guarantees AVX-512F;
        // - `by_rows!` picks the instantiation with exactly `t.mr` rows, the vector count
        //   covers `t.nr` columns, and the unit-stride variant only runs when `ars == 1`;
        // - the caller upholds the memory contract, which the kernels share.
        unsafe {
            match (t.nr > 16, t.ars == 1) {
                (true, true) => {
                    by_rows!(t.mr, avx512_tile, [2, true], (t), 1 2 3 4 5 6 7 8 9 10 11 12)
                }
                (true, false) => {
                    by_rows!(t.mr, avx512_tile, [2, false], (t), 1 2 3 4 5 6 7 8 9 10 11 12)
                }
                (false, true) => {
                    by_rows!(t.mr, avx512_tile, [1, true], (t), 1 2 3 4 5 6 7 8 9 10 11 12)
                }
                (false, false) => {
                    by_rows!(t.mr, avx512_tile, [1, false], (t), 1 2 3 4 5 6 7 8 9 10 11 12)
                }
            }
        }
    }

    unsafe fn pack(
        panels: &mut [f32],
        rhs: MatRef<'_>,
        pc: usize,
        kc: usize,
        jc: usize,
        nc: usize,
    ) {
        if rhs.row_stride() == 1 {
            // SAFETY:
            // - the caller guarantees AVX-512F.
            unsafe { avx512_pack_transposed(panels, rhs, pc, kc, jc, nc, Self::NR) };
        } else {
            pack_panels(panels, rhs, pc, kc, jc, nc, Self::NR);
        }
    }

    unsafe fn pack_lhs(
        strip: &mut [f32],
        lhs: MatRef<'_>,
        ir: usize,
        mr: usize,
        pc: usize,
        kc: usize,
    ) {
        if lhs.col_stride() == 1 {
            // SAFETY:
            // - the caller guarantees AVX-512F.
            unsafe { avx512_pack_strip(strip, lhs, (ir, mr, Self::MR), pc, kc) };
        } else {
            pack_strip(strip, lhs, (ir, mr, Self::MR), pc, kc);
        }
    }
}

/// The AVX-512 kernel with 6 x 64 tiles.
#[cfg(target_arch = "x86_64")]
#[derive(Debug)]
struct Avx512Wide;

#[cfg(target_arch = "x86_64")]
impl Micro for Avx512Wide {
    const MR: usize = 6;
    const NR: usize = 64;

    unsafe fn tile(t: &Tile) {
        // SAFETY:
        // - the caller guarantees AVX-512F;
        // - `by_rows!` picks the instantiation with exactly `t.mr` rows, the vector count
        //   covers `t.nr` columns, and the unit-stride variant only runs when `ars == 1`;
        // - the caller upholds the memory contract, which the kernels share.
        unsafe {
            match (t.nr.div_ceil(16), t.ars == 1) {
                (4, true) => by_rows!(t.mr, avx512_tile, [4, true], (t), 1 2 3 4 5 6),
                (4, false) => by_rows!(t.mr, avx512_tile, [4, false], (t), 1 2 3 4 5 6),
                (3, true) => by_rows!(t.mr, avx512_tile, [3, true], (t), 1 2 3 4 5 6),
                (3, false) => by_rows!(t.mr, avx512_tile, [3, false], (t), 1 2 3 4 5 6),
                (2, true) => by_rows!(t.mr, avx512_tile, [2, true], (t), 1 2 3 4 5 6),
                (2, false) => by_rows!(t.mr, avx512_tile, [2, false], (t), 1 2 3 4 5 6),
                (_, true) => by_rows!(t.mr, avx512_tile, [1, true], (t), 1 2 3 4 5 6),
                (_, false) => by_rows!(t.mr, avx512_tile, [1, false], (t), 1 2 3 4 5 6),
            }
        }
    }

    unsafe fn pack(
        panels: &mut [f32],
        rhs: MatRef<'_>,
        pc: usize,
        kc: usize,
        jc: usize,
        nc: usize,
    ) {
        if rhs.row_stride() == 1 {
            // SAFETY:
            // - the caller guarantees AVX-512F.
            unsafe { avx512_pack_transposed(panels, rhs, pc, kc, jc, nc, Self::NR) };
        } else {
            pack_panels(panels, rhs, pc, kc, jc, nc, Self::NR);
        }
    }

    unsafe fn pack_lhs(
        strip: &mut [f32],
        lhs: MatRef<'_>,
        ir: usize,
        mr: usize,
        pc: usize,
        kc: usize,
    ) {
        if lhs.col_stride() == 1 {
            // SAFETY:
            // - the caller guarantees AVX-512F.
            unsafe { avx512_pack_strip(strip, lhs, (ir, mr, Self::MR), pc, kc) };
        } else {
            pack_strip(strip, lhs, (ir, mr, Self::MR), pc, kc);
        }
    }
}

/// [`pack_panels`] for a `rhs` with row stride 1 (a transposed view: its columns are
/// contiguous), 16 x 16 blocks at a time transposed in registers.
///
/// # Safety
/// AVX-512F.
///
/// # Panics
/// If `rhs` has a row stride other than 1, `nr` is not a multiple of 16, or `panels` is
/// shorter than `kc * round_up(nc, nr)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_pack_transposed(
    panels: &mut [f32],
    rhs: MatRef<'_>,
    pc: usize,
    kc: usize,
    jc: usize,
    nc: usize,
    nr: usize,
) {
    let (data, bcs) = (rhs.data(), rhs.col_stride());
    assert!(
        rhs.row_stride() == 1
            && nr.is_multiple_of(16)
            && pc + kc <= rhs.rows()
            && jc + nc <= rhs.cols()
    );
    let panels = &mut panels[..kc * nc.next_multiple_of(nr)];
    for (q, panel) in panels.chunks_exact_mut(kc * nr).enumerate() {
        for v in 0..nr / 16 {
            let j0 = jc + q * nr + 16 * v;
            if j0 >= jc + nc {
                break;
            }
            let width = 16.min(jc + nc - j0);
            for p0 in (0..kc).step_by(16) {
                let depth = 16.min(kc - p0);
                let mask = mask16(depth);
                let mut cols = [_mm512_setzero_ps(); 16];
                for (j, col) in cols.iter_mut().enumerate().take(width) {
                    // Column `j0 + j`, rows `pc + p0..pc + p0 + depth`: in the view, whose
                    // bounds `matmul_with` asserted; sliced here so the load is checked.
                    let start = (j0 + j) * bcs + pc + p0;
                    let src = &data[start..start + depth];
                    // SAFETY:
                    // - the mask enables exactly `depth` lanes, all inside `src`.
                    *col = unsafe { _mm512_maskz_loadu_ps(mask, src.as_ptr()) };
                }
                let rows = transpose16(cols);
                for (p, row) in rows.iter().enumerate().take(depth) {
                    let start = (p0 + p) * nr + 16 * v;
                    let dst = &mut panel[start..start + 16];
                    // SAFETY:
                    // - `dst` holds 16 floats.
                    unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), *row) };
                }
            }
        }
    }
}

/// [`avx512_pack_transposed`] on AVX2: 8 x 8 blocks transposed in registers.
///
/// # Safety
/// AVX2.
///
/// # Panics
/// If `rhs` has a row stride other than 1, `nr` is not a multiple of 8, or `panels` is
/// shorter than `kc * round_up(nc, nr)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_pack_transposed(
    panels: &mut [f32],
    rhs: MatRef<'_>,
    pc: usize,
    kc: usize,
    jc: usize,
    nc: usize,
    nr: usize,
) {
    let (data, bcs) = (rhs.data(), rhs.col_stride());
    assert!(
        rhs.row_stride() == 1
            && nr.is_multiple_of(8)
            && pc + kc <= rhs.rows()
            && jc + nc <= rhs.cols()
    );
    let panels = &mut panels[..kc * nc.next_multiple_of(nr)];
    for (q, panel) in panels.chunks_exact_mut(kc * nr).enumerate() {
        for v in 0..nr / 8 {
            let j0 = jc + q * nr + 8 * v;
            if j0 >= jc + nc {
                break;
            }
            let width = 8.min(jc + nc - j0);
            for p0 in (0..kc).step_by(8) {
                let depth = 8.min(kc - p0);
                let mask = mask8(depth);
                let mut cols = [_mm256_setzero_ps(); 8];
                for (j, col) in cols.iter_mut().enumerate().take(width) {
                    // Column `j0 + j`, rows `pc + p0..pc + p0 + depth`: in the view, whose
                    // bounds `matmul_with` asserted; sliced here so the load is checked.
                    let start = (j0 + j) * bcs + pc + p0;
                    let src = &data[start..start + depth];
                    // SAFETY:
                    // - with `depth == 8` all 8 lanes are inside `src`;
                    // - otherwise the mask enables exactly `depth` lanes, all inside `src`,
                    //   and `vmaskmovps` does not access the others.
                    *col = unsafe {
                        if depth == 8 {
                            _mm256_loadu_ps(src.as_ptr())
                        } else {
                            _mm256_maskload_ps(src.as_ptr(), mask)
                        }
                    };
                }
                let rows = transpose8(cols);
                for (p, row) in rows.iter().enumerate().take(depth) {
                    let start = (p0 + p) * nr + 8 * v;
                    let dst = &mut panel[start..start + 8];
                    // SAFETY:
                    // - `dst` holds 8 floats.
                    unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), *row) };
                }
            }
        }
    }
}

/// The transpose of the 8 x 8 matrix whose rows are `r`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t: [__m256; 8] = std::array::from_fn(|i| {
        let (a, b) = (r[i & !1], r[i | 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // u[4g + c] holds, in half h, rows 4g..4g+4 of column 4h + c.
    let mut u = [_mm256_setzero_ps(); 8];
    for g in 0..2 {
        let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        u[4 * g] = _mm256_shuffle_ps::<0x44>(a, c);
        u[4 * g + 1] = _mm256_shuffle_ps::<0xEE>(a, c);
        u[4 * g + 2] = _mm256_shuffle_ps::<0x44>(b, d);
        u[4 * g + 3] = _mm256_shuffle_ps::<0xEE>(b, d);
    }
    std::array::from_fn(|col| {
        let c = col % 4;
        if col < 4 {
            _mm256_permute2f128_ps::<0x20>(u[c], u[4 + c])
        } else {
            _mm256_permute2f128_ps::<0x31>(u[c], u[4 + c])
        }
    })
}

/// The transpose of the 16 x 16 matrix whose rows are `r`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    // Pairs of rows interleaved within 128-bit lanes, then groups of four, then lanes.
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm512_setzero_ps(); 16];
    for g in 0..4 {
        let (a, b, c, d) = (t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]);
        u[4 * g] = _mm512_shuffle_ps::<0x44>(a, c);
        u[4 * g + 1] = _mm512_shuffle_ps::<0xEE>(a, c);
        u[4 * g + 2] = _mm512_shuffle_ps::<0x44>(b, d);
        u[4 * g + 3] = _mm512_shuffle_ps::<0xEE>(b, d);
    }
    // u[4g + c] holds, in lane l, rows 4g..4g+4 of column 4l + c.
    let mut w = [_mm512_setzero_ps(); 16];
    for c in 0..4 {
        w[c] = _mm512_shuffle_f32x4::<0x88>(u[c], u[4 + c]);
        w[4 + c] = _mm512_shuffle_f32x4::<0xDD>(u[c], u[4 + c]);
        w[8 + c] = _mm512_shuffle_f32x4::<0x88>(u[8 + c], u[12 + c]);
        w[12 + c] = _mm512_shuffle_f32x4::<0xDD>(u[8 + c], u[12 + c]);
    }
    let mut out = [_mm512_setzero_ps(); 16];
    for c in 0..4 {
        out[c] = _mm512_shuffle_f32x4::<0x88>(w[c], w[8 + c]);
        out[4 + c] = _mm512_shuffle_f32x4::<0x88>(w[4 + c], w[12 + c]);
        out[8 + c] = _mm512_shuffle_f32x4::<0xDD>(w[c], w[8 + c]);
        out[12 + c] = _mm512_shuffle_f32x4::<0xDD>(w[4 + c], w[12 + c]);
    }
    out
}

/// The mask of the first `n` of 16 lanes.
#[cfg(target_arch = "x86_64")]
fn mask16(n: usize) -> __mmask16 {
    if n >= 16 { u16::MAX } else { (1u16 << n) - 1 }
}

/// [`Avx512`]'s kernel for `MR` rows and `NV` vectors of 16 columns; `UNIT` when the `lhs`
/// row stride is 1.
///
/// # Safety
/// As [`Micro::tile`], with AVX-512F, `t.mr == MR`, `t.nr <= 16 * NV`, and `t.ars == 1`
/// if `UNIT`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_tile<const MR: usize, const NV: usize, const UNIT: bool>(t: &Tile) {
    let masks: [__mmask16; NV] = std::array::from_fn(|v| mask16(t.nr.saturating_sub(16 * v)));
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    let ars = if UNIT { 1 } else { t.ars };
    let mut a = t.a;
    let mut b = t.b;
    for _ in 0..t.kc {
        let mut row = [_mm512_setzero_ps(); NV];
        for (v, row) in row.iter_mut().enumerate() {
            // SAFETY:
            // - the masked lanes are columns `j < nr` of the current step `p < kc`,
            //   readable by the contract;
            // - masked-off lanes are not accessed.
            *row = unsafe { _mm512_maskz_loadu_ps(masks[v], b.wrapping_add(16 * v)) };
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY:
            // - `i < mr` and the current step `p < kc`: readable by the contract.
            let x = _mm512_set1_ps(unsafe { *a.wrapping_add(i * ars) });
            for (acc, &r) in acc.iter_mut().zip(&row) {
                *acc = _mm512_fmadd_ps(x, r, *acc);
            }
        }
        a = a.wrapping_add(t.acs);
        b = b.wrapping_add(t.brs);
    }
    for (i, acc) in acc.iter().enumerate() {
        for (v, &acc) in acc.iter().enumerate() {
            let c = t.c.wrapping_add(i * t.ldc + 16 * v);
            // SAFETY:
            // - the masked lanes are `dst` columns `j < nr` of row `i < mr`: readable,
            //   writable and unaliased by the contract;
            // - masked-off lanes are not accessed.
            unsafe {
                let sum = if t.add {
                    _mm512_add_ps(acc, _mm512_maskz_loadu_ps(masks[v], c))
                } else {
                    acc
                };
                _mm512_mask_storeu_ps(c, masks[v], sum);
            }
        }
    }
}

/// The AVX2+FMA kernel: 6 x 16 tiles.
#[cfg(target_arch = "x86_64")]
#[derive(Debug)]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Micro for Avx2 {
    const MR: usize = 6;
    const NR: usize = 16;

    unsafe fn tile(t: &Tile) {
        // SAFETY:
        // - the caller guarantees AVX2 and FMA;
        // - `by_rows!` picks the instantiation with exactly `t.mr` rows, the vector count
        //   covers `t.nr` columns, and the unit-stride variant only runs when `ars == 1`;
        // - the caller upholds the memory contract, which the kernels share.
        unsafe {
            match (t.nr > 8, t.ars == 1) {
                (true, true) => by_rows!(t.mr, avx2_tile, [2, true], (t), 1 2 3 4 5 6),
                (true, false) => by_rows!(t.mr, avx2_tile, [2, false], (t), 1 2 3 4 5 6),
                (false, true) => by_rows!(t.mr, avx2_tile, [1, true], (t), 1 2 3 4 5 6),
                (false, false) => by_rows!(t.mr, avx2_tile, [1, false], (t), 1 2 3 4 5 6),
            }
        }
    }

    unsafe fn pack(
        panels: &mut [f32],
        rhs: MatRef<'_>,
        pc: usize,
        kc: usize,
        jc: usize,
        nc: usize,
    ) {
        if rhs.row_stride() == 1 {
            // SAFETY:
            // - the caller guarantees AVX2.
            unsafe { avx2_pack_transposed(panels, rhs, pc, kc, jc, nc, Self::NR) };
        } else {
            pack_panels(panels, rhs, pc, kc, jc, nc, Self::NR);
        }
    }
}

/// The AVX2+FMA kernel with 3 x 32 tiles.
#[cfg(target_arch = "x86_64")]
#[derive(Debug)]
struct Avx2Wide;

#[cfg(target_arch = "x86_64")]
impl Micro for Avx2Wide {
    const MR: usize = 3;
    const NR: usize = 32;

    unsafe fn tile(t: &Tile) {
        // SAFETY:
        // - the caller guarantees AVX2 and FMA;
        // - `by_rows!` picks the instantiation with exactly `t.mr` rows, the vector count
        //   covers `t.nr` columns, and the unit-stride variant only runs when `ars == 1`;
        // - the caller upholds the memory contract, which the kernels share.
        unsafe {
            match (t.nr.div_ceil(8), t.ars == 1) {
                (4, true) => by_rows!(t.mr, avx2_tile, [4, true], (t), 1 2 3),
                (4, false) => by_rows!(t.mr, avx2_tile, [4, false], (t), 1 2 3),
                (3, true) => by_rows!(t.mr, avx2_tile, [3, true], (t), 1 2 3),
                (3, false) => by_rows!(t.mr, avx2_tile, [3, false], (t), 1 2 3),
                (2, true) => by_rows!(t.mr, avx2_tile, [2, true], (t), 1 2 3),
                (2, false) => by_rows!(t.mr, avx2_tile, [2, false], (t), 1 2 3),
                (_, true) => by_rows!(t.mr, avx2_tile, [1, true], (t), 1 2 3),
                (_, false) => by_rows!(t.mr, avx2_tile, [1, false], (t), 1 2 3),
            }
        }
    }

    unsafe fn pack(
        panels: &mut [f32],
        rhs: MatRef<'_>,
        pc: usize,
        kc: usize,
        jc: usize,
        nc: usize,
    ) {
        if rhs.row_stride() == 1 {
            // SAFETY:
            // - the caller guarantees AVX2.
            unsafe { avx2_pack_transposed(panels, rhs, pc, kc, jc, nc, Self::NR) };
        } else {
            pack_panels(panels, rhs, pc, kc, jc, nc, Self::NR);
        }
    }
}

/// A `vmaskmovps` mask of the first `n` of 8 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn mask8(n: usize) -> __m256i {
    let n = n.min(8) as i32;
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(n),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// [`Avx2`]'s kernel for `MR` rows and `NV` vectors of 8 columns; `UNIT` when the `lhs`
/// row stride is 1.
///
/// # Safety
/// As [`Micro::tile`], with AVX2 and FMA, `t.mr == MR`, `t.nr <= 8 * NV`, and
/// `t.ars == 1` if `UNIT`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_tile<const MR: usize, const NV: usize, const UNIT: bool>(t: &Tile) {
    let full = t.nr == 8 * NV;
    let masks: [__m256i; NV] = std::array::from_fn(|v| mask8(t.nr.saturating_sub(8 * v)));
    let mut acc = [[_mm256_setzero_ps(); NV]; MR];
    let ars = if UNIT { 1 } else { t.ars };
    let mut a = t.a;
    let mut b = t.b;
    for _ in 0..t.kc {
        let mut row = [_mm256_setzero_ps(); NV];
        for (v, row) in row.iter_mut().enumerate() {
            let p = b.wrapping_add(8 * v);
            // SAFETY:
            // - with `full`, all 8 lanes are columns `j < nr` of the current step `p < kc`,
            //   readable by the contract;
            // - otherwise only the masked lanes are, and `vmaskmovps` does not access the
            //   others.
            *row = unsafe {
                if full {
                    _mm256_loadu_ps(p)
                } else {
                    _mm256_maskload_ps(p, masks[v])
                }
            };
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY:
            // - `i < mr` and the current step `p < kc`: readable by the contract.
            let x = _mm256_set1_ps(unsafe { *a.wrapping_add(i * ars) });
            for (acc, &r) in acc.iter_mut().zip(&row) {
                *acc = _mm256_fmadd_ps(x, r, *acc);
            }
        }
        a = a.wrapping_add(t.acs);
        b = b.wrapping_add(t.brs);
    }
    for (i, acc) in acc.iter().enumerate() {
        for (v, &acc) in acc.iter().enumerate() {
            let c = t.c.wrapping_add(i * t.ldc + 8 * v);
            // SAFETY:
            // - the masked lanes are `dst` columns `j < nr` of row `i < mr`: readable,
            //   writable and unaliased by the contract;
            // - `vmaskmovps` does not access the other lanes.
            unsafe {
                let sum = if t.add {
                    _mm256_add_ps(acc, _mm256_maskload_ps(c, masks[v]))
                } else {
                    acc
                };
                _mm256_maskstore_ps(c, masks[v], sum);
            }
        }
    }
}

/// `dst (m x n) (+)= lhs * rhs` for narrow `dst` (few columns, many rows) and `lhs` with
/// row stride 1: computes `dst^T = rhs^T * lhs^T` (whose `rhs` then has contiguous rows
/// and whose tiles are full) into a second thread-local scratch, and transposes it back.
fn transposed_product(
    dst: &mut [f32],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    add: bool,
    product: impl FnOnce(&mut [f32], MatRef<'_>, MatRef<'_>, bool),
) {
    let (m, n) = (lhs.rows(), rhs.cols());
    TRANSPOSED.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let dst_t = aligned(&mut scratch, m * n);
        if add {
            for (i, row) in dst.chunks_exact(n).enumerate() {
                for (j, &x) in row.iter().enumerate() {
                    dst_t[j * m + i] = x;
                }
            }
        }
        product(dst_t, transpose(rhs), transpose(lhs), add);
        for (i, row) in dst.chunks_exact_mut(n).enumerate() {
            for (j, x) in row.iter_mut().enumerate() {
                *x = dst_t[j * m + i];
            }
        }
    });
}

/// The transpose of a view, without copying.
fn transpose(v: MatRef<'_>) -> MatRef<'_> {
    MatRef {
        data: v.data(),
        rows: v.cols(),
        cols: v.rows(),
        row_stride: v.col_stride(),
        col_stride: v.row_stride(),
    }
}

/// Whether `transposed_product` beats a direct product on tiles `nr` columns wide.
fn narrow(lhs: MatRef<'_>, rhs: MatRef<'_>, nr: usize) -> bool {
    lhs.row_stride() == 1 && lhs.col_stride() != 1 && rhs.cols() * 4 <= nr && lhs.rows() >= nr
}

#[cfg(target_arch = "x86_64")]
mod thin;
#[cfg(target_arch = "x86_64")]
use thin::{dot_columns, rank_update};

#[cfg(test)]
mod tests;
