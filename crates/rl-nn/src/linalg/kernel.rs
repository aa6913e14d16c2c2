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
//! - **Operands.** `lhs` is read in place: the kernel broadcasts its elements from their
//!   strided positions (packed into `MR x kc` strips only when its strides are multiples
//!   of 1024 floats: rows 4 KiB apart fall into the same L1 sets). `rhs` is packed into
//!   `kc x NR` panels, 64-byte aligned, when its rows are not contiguous (the `W^T` of a
//!   forward pass, with 16 x 16 or 8 x 8 transposes in registers), when they alias, or
//!   when it is larger than an eighth of L2 and several strips reuse it; otherwise it is
//!   read in place. The AVX2 6 x 16 tile has an unrolled variant for full tiles (with
//!   immediate offsets on packed operands).
//! - **Blocking** (BLIS loop order, sizes from [`cache::Blocking`]: the CPU's caches from
//!   sysfs or CPUID): for each `kc x nc` block of `rhs`, each `mc x kc` block of `lhs`,
//!   each `kc x NR` panel (in L1) and each strip of `lhs` (from L2). `kc` (256 on every
//!   current x86 core) is the same for every tile shape, so the order of summation never
//!   depends on which kernel a block of rows takes; the first `kc` block applies the
//!   caller's [`Accumulate`], later ones add.
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
//! at most `kc * nc + mc * kc` floats plus alignment (at most 4 MiB for `rhs` panels of
//! 4096 columns, 256 KiB on Zen 3 for 256-wide layers);
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

/// Multiply-adds below which [`parallel_rows`] keeps a product on one thread.
const PARALLEL_MIN: usize = 1 << 20;
/// Row blocks of a split product are multiples of this: every tile height (12, 6, 4, 3)
/// divides it, so no thread gets a ragged strip in the middle of `dst`.
const PARALLEL_ROWS: usize = 12;

/// Rows per thread when a `m x k x n` product is split across `threads` threads: `m`
/// (no split) for small or thin products. A split only ever takes the blocked paths,
/// whose arithmetic per element (one chain of FMAs over `k` in `kc` blocks) does not
/// depend on how many rows a call has, so any split gives the same bits.
pub(crate) fn parallel_rows(m: usize, k: usize, n: usize, threads: usize) -> usize {
    let thin = k <= 4 || n <= 4;
    if threads < 2 || thin || m.saturating_mul(k).saturating_mul(n) < PARALLEL_MIN {
        return m;
    }
    m.div_ceil(threads).next_multiple_of(PARALLEL_ROWS)
}

/// Columns per thread when a product too short to split by rows (see [`parallel_rows`])
/// is split by blocks of columns instead: `n` (no split) for small or thin products or
/// fewer columns than two tiles of 64. Blocks are this many columns, a multiple of 64,
/// except the last, which takes the rest (at least as many): no block is narrow enough
/// to take another path than the whole product's. Each element's arithmetic is then the
/// same chain of FMAs over `k` in whichever block it falls, so any split gives the same
/// bits.
pub(crate) fn parallel_cols(m: usize, k: usize, n: usize, threads: usize) -> usize {
    let thin = k <= 4 || n < 2 * PARALLEL_COLS;
    if threads < 2 || thin || m.saturating_mul(k).saturating_mul(n) < PARALLEL_MIN {
        return n;
    }
    (n / threads / PARALLEL_COLS).max(1) * PARALLEL_COLS
}

/// Column blocks of a split product are multiples of this (every tile width divides it).
const PARALLEL_COLS: usize = 64;

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
    if settled_without_kernels(isa, dst, (m, k, n), accumulate) {
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

/// Whether an `m x k x n` product is done before any kernel runs: nothing to write
/// (`m` or `n` is 0), or an empty sum (`k` is 0: `dst` cleared when overwriting).
///
/// # Panics
/// If the CPU lacks `isa`.
pub(crate) fn settled_without_kernels(
    isa: Isa,
    dst: &mut [f32],
    (m, k, n): (usize, usize, usize),
    accumulate: Accumulate,
) -> bool {
    assert!(
        isa.is_supported(),
        "this CPU cannot run the {isa:?} kernels"
    );
    if k == 0 && m > 0 && n > 0 && accumulate == Accumulate::Overwrite {
        dst.fill(0.0);
    }
    m == 0 || n == 0 || k == 0
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

/// The blocked product, loops in the order of BLIS (Goto's algorithm): for each `kc x nc`
/// block of `rhs` (packed into `kc x NR` panels, or read in place), for each `mc x kc`
/// block of `lhs` (packed into `MR x kc` strips, or read in place), the tiles column
/// panel by column panel, so that one `kc x NR` panel of `rhs` stays in L1 while the
/// strips of `lhs` stream from L2. Block sizes come from the CPU's caches
/// ([`cache::Blocking`]).
fn drive<K: Micro>(dst: &mut [f32], lhs: MatRef<'_>, rhs: MatRef<'_>, add: bool) {
    drive_blocked::<K>(cache::Blocking::new(K::MR, K::NR), dst, lhs, rhs, add, None);
}

/// A whole `k x n` `rhs` packed as [`drive_blocked`] reads it, so that products with an
/// unchanged operand (a layer's weight) skip the packing: for each `kc` block of its
/// rows, starting at float `pc * n_pad` (`n_pad` is `n` rounded up to `nr`), panels of
/// `nr` columns, `kc x nr` floats each, panel `q` at `pc * n_pad + q * kc * nr`. A view
/// of the columns from panel `first` on serves a block of columns of a split product.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Panels<'a> {
    /// The packed floats, 64-byte aligned ([`packed_len`] of them).
    pub(crate) data: &'a [f32],
    /// Columns per panel: the tile width of the kernel that packed them.
    pub(crate) nr: usize,
    /// Columns of the whole operand rounded up to `nr`.
    pub(crate) n_pad: usize,
    /// The panel holding column 0 of the product that reads them.
    pub(crate) first: usize,
}

/// Floats of a `k x n` operand packed in panels `nr` wide.
pub(crate) fn packed_len(k: usize, n: usize, nr: usize) -> usize {
    k * n.next_multiple_of(nr)
}

/// The panel width of the kernel that a product of `lhs * rhs` on `isa` runs, or `None`
/// when it takes a thin path, which reads `rhs` unpacked (see the module's design).
pub(crate) fn panel_width(isa: Isa, lhs: MatRef<'_>, rhs: MatRef<'_>) -> Option<usize> {
    let (m, k, n) = (lhs.rows(), lhs.cols(), rhs.cols());
    let thin = |nr| (n <= 4 && lhs.col_stride() == 1) || k <= 4 || narrow(lhs, rhs, nr);
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 if !thin(Avx512::NR) => Some(if m <= Avx512Wide::MR {
            Avx512Wide::NR
        } else {
            Avx512::NR
        }),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 if !thin(Avx2::NR) => Some(if m <= Avx2Wide::MR {
            Avx2Wide::NR
        } else {
            Avx2::NR
        }),
        Isa::Scalar if !thin(2 * Portable::NR) => Some(Portable::NR),
        _ => None,
    }
}

/// Runs `$body` with `$k` the kernel type of `isa` whose tiles are `nr` columns wide.
macro_rules! with_kernel {
    ($isa:expr, $nr:expr, $k:ident => $body:expr) => {
        match ($isa, $nr) {
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx512, nr) if nr == Avx512::NR => {
                type $k = Avx512;
                $body
            }
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx512, nr) if nr == Avx512Wide::NR => {
                type $k = Avx512Wide;
                $body
            }
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx2, nr) if nr == Avx2::NR => {
                type $k = Avx2;
                $body
            }
            #[cfg(target_arch = "x86_64")]
            (Isa::Avx2, nr) if nr == Avx2Wide::NR => {
                type $k = Avx2Wide;
                $body
            }
            (Isa::Scalar, nr) if nr == Portable::NR => {
                type $k = Portable;
                $body
            }
            (isa, nr) => panic!("no {isa:?} kernel has {nr}-column tiles"),
        }
    };
}

/// Packs columns `cols` of `rhs` (`k x n`) into their panels of a whole packed operand
/// (see [`Panels`]) at `panels`, for the kernel of `isa` that is `nr` columns wide.
///
/// # Safety
/// - the CPU supports `isa` and `nr` is a tile width of one of its kernels;
/// - `cols.start` is a multiple of `nr`, and `cols.end` is one too or is `n`;
/// - `panels` is valid for writes of [`packed_len`]`(k, n, nr)` floats, 64-byte aligned,
///   and nothing else accesses the panels of `cols` during the call (other columns may be
///   packed at the same time by other threads).
///
/// # Panics
/// If `cols` leaves `rhs`.
pub(crate) unsafe fn pack_columns(
    isa: Isa,
    nr: usize,
    panels: *mut f32,
    rhs: MatRef<'_>,
    cols: std::ops::Range<usize>,
) {
    let (k, n) = (rhs.rows(), rhs.cols());
    assert!(cols.start <= cols.end && cols.end <= n && rhs.in_bounds());
    if cols.is_empty() || k == 0 {
        return;
    }
    let n_pad = n.next_multiple_of(nr);
    with_kernel!(isa, nr, K => {
        let kc_max = cache::Blocking::new(K::MR, K::NR).kc.min(k);
        for pc in (0..k).step_by(kc_max) {
            let kc = kc_max.min(k - pc);
            let len = kc * cols.len().next_multiple_of(nr);
            // SAFETY:
            // - the caller gives `packed_len(k, n, nr) = k * n_pad` writable floats, and
            //   this block's panels of `cols` lie at `pc * n_pad + (cols.start / nr) *
            //   kc * nr` onwards, `len` floats, inside the block's `kc * n_pad`;
            // - nothing else accesses them during the call (the caller's contract).
            let block = unsafe {
                std::slice::from_raw_parts_mut(
                    panels.add(pc * n_pad + cols.start / nr * kc * nr),
                    len,
                )
            };
            // SAFETY:
            // - the caller guarantees the CPU supports `isa`.
            unsafe { K::pack(block, rhs, pc, kc, cols.start, cols.len()) };
        }
    })
}

/// `dst (m x n) (+)= lhs * rhs` reading `rhs` from `panels`, which hold it packed by
/// [`pack_columns`] (`rhs` gives the shape: columns `panels.first * panels.nr` onwards of
/// the packed operand). Every element is the same chain of FMAs as in [`matmul_with`].
///
/// # Panics
/// If the shapes do not agree, `panels` is too short for them, or the CPU lacks `isa`.
pub(crate) fn matmul_prepacked(
    isa: Isa,
    dst: &mut [f32],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    panels: Panels<'_>,
    accumulate: Accumulate,
) {
    let (m, k, n) = (lhs.rows(), lhs.cols(), rhs.cols());
    assert!(
        rhs.rows() == k
            && m.checked_mul(n) == Some(dst.len())
            && lhs.in_bounds()
            && (panels.first * panels.nr + n).next_multiple_of(panels.nr) <= panels.n_pad
            && panels.data.len() >= k * panels.n_pad,
        "prepacked matmul shapes: dst {} for {m}x{k} * {}x{n}",
        dst.len(),
        rhs.rows()
    );
    if settled_without_kernels(isa, dst, (m, k, n), accumulate) {
        return;
    }
    let add = accumulate == Accumulate::Add;
    with_kernel!(isa, panels.nr, K => drive_blocked::<K>(
        cache::Blocking::new(K::MR, K::NR),
        dst,
        lhs,
        rhs,
        add,
        Some(panels),
    ))
}

/// [`drive`] with the given block sizes (tests use small ones to cross every block).
fn drive_blocked<K: Micro>(
    blocking: cache::Blocking,
    dst: &mut [f32],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    add: bool,
    prepacked: Option<Panels<'_>>,
) {
    let (m, k) = (lhs.rows(), lhs.cols());
    let (ars, acs) = (lhs.row_stride(), lhs.col_stride());
    let n = rhs.cols();
    let (brs, bcs) = (rhs.row_stride(), rhs.col_stride());
    // Packing `rhs` costs one pass over it; it pays when its rows are not contiguous,
    // when they alias in L1, or when several strips of `lhs` reuse a block too large to
    // stay in L1 and the L2 prefetchers as it is (measured on Zen 3: 128 x 128 in place
    // is faster, 256 x 256 packed).
    let pack_b = prepacked.is_none()
        && (bcs != 1
            || (m >= 4 * K::MR && brs.is_multiple_of(ALIASING))
            || (m > 2 * K::MR && k * n * size_of::<f32>() > blocking.l2 / 8));
    // `lhs` is read in place (each strip's rows stream through L1 with the hardware
    // prefetchers; packing it cost more than it saved on Zen 3 up to 1024 rows), except
    // when its strides alias in L1.
    let pack_a = n > K::NR
        && m > 1
        && ((acs == 1 && ars.is_multiple_of(ALIASING))
            || (ars == 1 && acs.is_multiple_of(ALIASING)));
    let (kc_max, mc_max, nc_max) = (
        blocking.kc.min(k),
        blocking.mc_for(m, K::MR),
        blocking.nc_for(n, K::NR),
    );
    let c = dst.as_mut_ptr();
    let b = rhs.data().as_ptr();
    SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let b_len = if pack_b {
            (kc_max * nc_max.next_multiple_of(K::NR)).next_multiple_of(ALIGN)
        } else {
            0
        };
        // `lhs` strips start on an aligned boundary too: `b_len` is a multiple of 16.
        let a_len = if pack_a {
            mc_max.next_multiple_of(K::MR) * kc_max
        } else {
            0
        };
        let (panels, strips) = aligned(&mut scratch, b_len + a_len).split_at_mut(b_len);
        for jc in (0..n).step_by(nc_max) {
            let nc = nc_max.min(n - jc);
            for pc in (0..k).step_by(kc_max) {
                let kc = kc_max.min(k - pc);
                let (b_block, b_rs, panel_stride) = if let Some(packed) = prepacked {
                    debug_assert!(packed.nr == K::NR && jc.is_multiple_of(K::NR));
                    let start = pc * packed.n_pad + (packed.first + jc / K::NR) * kc * K::NR;
                    (packed.data[start..].as_ptr(), K::NR, kc * K::NR)
                } else if pack_b {
                    // SAFETY:
                    // - `K` is only instantiated for an `Isa` whose `is_supported()`
                    //   `matmul_with` asserted.
                    unsafe { K::pack(panels, rhs, pc, kc, jc, nc) };
                    (panels.as_ptr(), K::NR, kc * K::NR)
                } else {
                    (b.wrapping_add(pc * brs + jc), brs, K::NR)
                };
                for ic in (0..m).step_by(mc_max) {
                    let mc = mc_max.min(m - ic);
                    if pack_a {
                        for (s, ir) in (ic..ic + mc).step_by(K::MR).enumerate() {
                            let mr = K::MR.min(ic + mc - ir);
                            let strip = &mut strips[s * K::MR * kc..(s + 1) * K::MR * kc];
                            // SAFETY:
                            // - `K` is only instantiated for an `Isa` whose
                            //   `is_supported()` `matmul_with` asserted.
                            unsafe { K::pack_lhs(strip, lhs, ir, mr, pc, kc) };
                        }
                    }
                    for (q, jr) in (0..nc).step_by(K::NR).enumerate() {
                        for (s, ir) in (ic..ic + mc).step_by(K::MR).enumerate() {
                            let (a, a_rs, a_cs) = if pack_a {
                                (strips[s * K::MR * kc..].as_ptr(), 1, K::MR)
                            } else {
                                (lhs.data()[ir * ars + pc * acs..].as_ptr(), ars, acs)
                            };
                            let tile = Tile {
                                mr: K::MR.min(ic + mc - ir),
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
                            // - `K` is only instantiated by `matmul_with` for an `Isa`
                            //   whose `is_supported()` it asserted;
                            // - `mr`, `nr` and `kc` are clamped to the tile and block sizes
                            //   and are positive because `m`, `n` and `k` are;
                            // - `lhs` reads are elements `(ir + i, pc + p)` of the view,
                            //   inside its slice as `in_bounds` asserted, or of strip `s`
                            //   that `pack_lhs` filled (`MR * kc` floats inside `strips`,
                            //   which holds `round_up(mc, MR) * kc`); `rhs` reads are
                            //   elements `(pc + p, jc + jr + j)` of the view (in place,
                            //   column stride 1) or of a panel `pack` filled inside
                            //   `panels`, which holds `kc * round_up(nc, NR)` floats;
                            // - `dst` elements `(ir + i, jc + jr + j)` lie inside `dst`
                            //   (`m * n` floats), borrowed mutably for the whole call.
                            unsafe { K::tile(&tile) };
                        }
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
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod cache;
mod portable;
#[cfg(target_arch = "x86_64")]
mod thin;
#[cfg(target_arch = "x86_64")]
use avx2::{Avx2, Avx2Wide, avx2_pack_transposed};
#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::{mask8, transpose8};
#[cfg(target_arch = "x86_64")]
use avx512::{Avx512, Avx512Wide, avx512_pack_transposed, mask16};
use portable::{Portable, portable_dot, portable_rank};
#[cfg(target_arch = "x86_64")]
use thin::{dot_columns, rank_update};

#[cfg(test)]
pub(super) mod tests;
