//! The x86 kernels for thin products (at most 4 columns, or an inner dimension of at
//! most 4) where a tile of [`Micro`](super::Micro) would leave most lanes idle: dot
//! products reduced by shuffle trees, and rank-`k` updates.

#![allow(
    unsafe_code,
    reason = "SIMD intrinsics and raw-pointer kernels; bounds are checked once up front"
)]

use super::*;

/// Kernels for products with few columns or a short inner dimension, where a tile of
/// [`Micro`] would leave most lanes idle.
#[cfg(target_arch = "x86_64")]
pub(super) trait Narrow {
    /// Dot products reduced together into one vector (its lane count).
    const SUMS: usize;
    /// Rows of `dst` per rank update.
    const RANK_ROWS: usize;

    /// Dot products of `d.rows` rows with `n` columns: `SUMS / n.next_power_of_two()` rows
    /// if `full`, else one row at a time.
    ///
    /// # Safety
    /// - the CPU supports the instruction set;
    /// - `1 <= n <= 4`, and `d.rows == SUMS / n.next_power_of_two()` if `full`;
    /// - `d.k` floats from `d.a + r * d.ars` (`r < d.rows`) and from each of the first `n`
    ///   columns are readable;
    /// - `dst` elements `d.c + r * n + j` (`r < d.rows`, `j < n`) are readable, writable
    ///   and unaliased.
    unsafe fn dot(n: usize, full: bool, d: &Dot);

    /// A rank-`k` update of `r.rows` rows: `RANK_ROWS` if `full`, else one at a time.
    ///
    /// # Safety
    /// - the CPU supports the instruction set;
    /// - `1 <= k <= 4`, and `r.rows == RANK_ROWS` if `full`;
    /// - `lhs` elements `a[i * ars + p * acs]` (`i < rows`, `p < k`) and `rhs` elements
    ///   `b[p * brs + j]` (`p < k`, `j < n`) are readable;
    /// - `dst` elements `c[i * n + j]` (`i < rows`, `j < n`) are readable, writable and
    ///   unaliased.
    unsafe fn rank(k: usize, full: bool, r: &Rank);

    /// Packs all of `rhs` (`k x n`) into one panel `width` (a multiple of 16, at least
    /// `n`) columns wide.
    ///
    /// # Safety
    /// The CPU supports the instruction set.
    unsafe fn pack_width(panel: &mut [f32], rhs: MatRef<'_>, k: usize, n: usize, width: usize) {
        pack_panels(panel, rhs, 0, k, 0, n, width);
    }
}

#[cfg(target_arch = "x86_64")]
impl Narrow for Avx512 {
    const SUMS: usize = 16;
    const RANK_ROWS: usize = 4;

    unsafe fn dot(n: usize, full: bool, d: &Dot) {
        // SAFETY:
        // - the caller upholds the contract;
        // - the match picks `R` and `N` as it requires.
        unsafe {
            match (n, full) {
                (1, true) => avx512_dot::<16, 1>(d),
                (2, true) => avx512_dot::<8, 2>(d),
                (3, true) => avx512_dot::<4, 3>(d),
                (4, true) => avx512_dot::<4, 4>(d),
                (1, false) => avx512_dot::<1, 1>(d),
                (2, false) => avx512_dot::<1, 2>(d),
                (3, false) => avx512_dot::<1, 3>(d),
                _ => avx512_dot::<1, 4>(d),
            }
        }
    }

    unsafe fn rank(k: usize, full: bool, r: &Rank) {
        // SAFETY:
        // - the caller upholds the contract;
        // - the match picks `K` and `R` as it requires.
        unsafe {
            match (k, full) {
                (1, true) => avx512_rank::<1, 4>(r),
                (2, true) => avx512_rank::<2, 4>(r),
                (3, true) => avx512_rank::<3, 4>(r),
                (4, true) => avx512_rank::<4, 4>(r),
                (1, false) => avx512_rank::<1, 1>(r),
                (2, false) => avx512_rank::<2, 1>(r),
                (3, false) => avx512_rank::<3, 1>(r),
                _ => avx512_rank::<4, 1>(r),
            }
        }
    }

    unsafe fn pack_width(panel: &mut [f32], rhs: MatRef<'_>, k: usize, n: usize, width: usize) {
        if rhs.row_stride() == 1 {
            // SAFETY:
            // - the caller guarantees AVX-512F.
            unsafe { avx512_pack_transposed(panel, rhs, 0, k, 0, n, width) };
        } else {
            pack_panels(panel, rhs, 0, k, 0, n, width);
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Narrow for Avx2 {
    const SUMS: usize = 8;
    const RANK_ROWS: usize = 2;

    unsafe fn dot(n: usize, full: bool, d: &Dot) {
        // SAFETY:
        // - the caller upholds the contract;
        // - the match picks `R` and `N` as it requires.
        unsafe {
            match (n, full) {
                (1, true) => avx2_dot::<8, 1>(d),
                (2, true) => avx2_dot::<4, 2>(d),
                (3, true) => avx2_dot::<2, 3>(d),
                (4, true) => avx2_dot::<2, 4>(d),
                (1, false) => avx2_dot::<1, 1>(d),
                (2, false) => avx2_dot::<1, 2>(d),
                (3, false) => avx2_dot::<1, 3>(d),
                _ => avx2_dot::<1, 4>(d),
            }
        }
    }

    unsafe fn rank(k: usize, full: bool, r: &Rank) {
        // SAFETY:
        // - the caller upholds the contract;
        // - the match picks `K` and `R` as it requires.
        unsafe {
            match (k, full) {
                (1, true) => avx2_rank::<1, 2>(r),
                (2, true) => avx2_rank::<2, 2>(r),
                (3, true) => avx2_rank::<3, 2>(r),
                (4, true) => avx2_rank::<4, 2>(r),
                (1, false) => avx2_rank::<1, 1>(r),
                (2, false) => avx2_rank::<2, 1>(r),
                (3, false) => avx2_rank::<3, 1>(r),
                _ => avx2_rank::<4, 1>(r),
            }
        }
    }

    unsafe fn pack_width(panel: &mut [f32], rhs: MatRef<'_>, k: usize, n: usize, width: usize) {
        if rhs.row_stride() == 1 {
            // SAFETY:
            // - the caller guarantees AVX2.
            unsafe { avx2_pack_transposed(panel, rhs, 0, k, 0, n, width) };
        } else {
            pack_panels(panel, rhs, 0, k, 0, n, width);
        }
    }
}

/// `dst (m x n) (+)= lhs * rhs` for `n <= 4` and `lhs` column stride 1, as dot products
/// along `lhs` rows. `rhs` columns are copied to scratch unless contiguous.
///
/// # Safety
/// The CPU supports `I`'s instruction set.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn dot_columns<I: Narrow>(
    dst: &mut [f32],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    add: bool,
) {
    let (m, k, n) = (lhs.rows(), lhs.cols(), rhs.cols());
    assert!((1..=4).contains(&n) && lhs.col_stride() == 1);
    let (data, brs, bcs) = (rhs.data(), rhs.row_stride(), rhs.col_stride());
    let mut run = |cols: [*const f32; 4]| {
        let ars = lhs.row_stride();
        let a = lhs.data().as_ptr();
        let c = dst.as_mut_ptr();
        // Rows per group: `rows * n <= SUMS` dot products reduced together.
        let group = I::SUMS / n.next_power_of_two();
        let full = m - m % group;
        for i in (0..m).step_by(group) {
            let dot = Dot {
                rows: group.min(m - i),
                k,
                a: a.wrapping_add(i * ars),
                ars,
                cols,
                c: c.wrapping_add(i * n),
                add,
            };
            // SAFETY:
            // - the caller guarantees `I`'s instruction set;
            // - `1 <= n <= 4` (asserted), and `dot.rows == group` for the full groups
            //   (`i < full`);
            // - `lhs` rows `i..i + rows` are in the view (`in_bounds` asserted) with column
            //   stride 1, so `k` contiguous floats from each row start are readable;
            // - each `cols[j]` (`j < n`) starts `k` contiguous readable floats: column `j`
            //   of `rhs` (row stride 1, inside the view) or a copy in scratch;
            // - `dst` rows `i..i + rows` (`n` floats each) lie inside `dst`, borrowed
            //   mutably for the whole call.
            unsafe { I::dot(n, i < full, &dot) };
        }
    };
    let mut cols = [std::ptr::null::<f32>(); 4];
    if brs == 1 {
        for (j, col) in cols.iter_mut().enumerate().take(n) {
            *col = data[j * bcs..].as_ptr();
        }
        run(cols);
    } else {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let packed = aligned(&mut scratch, n * k);
            for (j, packed) in packed.chunks_exact_mut(k).enumerate() {
                for (p, x) in packed.iter_mut().enumerate() {
                    *x = data[p * brs + j * bcs];
                }
            }
            for (j, col) in cols.iter_mut().enumerate().take(n) {
                *col = packed[j * k..].as_ptr();
            }
            run(cols);
        });
    }
}

/// `dst (m x n) (+)= lhs * rhs` for `k <= 4`, as rank-`k` updates of rows of `dst`: the
/// `k` values of a few `lhs` rows stay broadcast in registers while those rows of `dst`
/// stream through once. `rhs` is read in place when its rows are contiguous and packed
/// into one `k x round_up(n, 16)` panel otherwise.
///
/// # Safety
/// The CPU supports `I`'s instruction set.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn rank_update<I: Narrow>(
    dst: &mut [f32],
    lhs: MatRef<'_>,
    rhs: MatRef<'_>,
    add: bool,
) {
    let (m, k, n) = (lhs.rows(), lhs.cols(), rhs.cols());
    assert!((1..=4).contains(&k));
    let mut run = |b: *const f32, brs: usize| {
        let (ars, acs) = (lhs.row_stride(), lhs.col_stride());
        let a = lhs.data().as_ptr();
        let c = dst.as_mut_ptr();
        let group = I::RANK_ROWS;
        let full = m - m % group;
        for i in (0..m).step_by(group) {
            let rank = Rank {
                rows: group.min(m - i),
                n,
                a: a.wrapping_add(i * ars),
                ars,
                acs,
                b,
                brs,
                c: c.wrapping_add(i * n),
                add,
            };
            // SAFETY:
            // - the caller guarantees `I`'s instruction set;
            // - `1 <= k <= 4` (asserted), and `rank.rows == RANK_ROWS` for the full
            //   groups (`i < full`);
            // - `lhs` elements `(i + r, p)` (`r < rows`, `p < k`) are in the view, whose
            //   bounds `matmul_with` asserted;
            // - `b` starts `k` rows of `n` contiguous readable floats `brs` apart: `rhs`
            //   itself (column stride 1, inside the view) or the packed panel;
            // - `dst` rows `i..i + rows` lie inside `dst`, borrowed mutably for the call.
            unsafe { I::rank(k, i < full, &rank) };
        }
    };
    if rhs.col_stride() == 1 {
        run(rhs.data().as_ptr(), rhs.row_stride());
    } else {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let width = n.next_multiple_of(16);
            let panel = aligned(&mut scratch, k * width);
            // SAFETY:
            // - the caller guarantees `I`'s instruction set.
            unsafe { I::pack_width(panel, rhs, k, n, width) };
            run(panel.as_ptr(), width);
        });
    }
}

/// Up to 4 rows of a rank-`k` update.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub(super) struct Rank {
    /// Rows.
    rows: usize,
    /// Columns of `dst` and `rhs`; also the `dst` row stride.
    n: usize,
    /// `lhs` element `(0, 0)`.
    a: *const f32,
    /// `lhs` row stride.
    ars: usize,
    /// `lhs` column stride.
    acs: usize,
    /// `rhs` element `(0, 0)`; its rows are contiguous.
    b: *const f32,
    /// `rhs` row stride.
    brs: usize,
    /// `dst` element `(0, 0)`.
    c: *mut f32,
    /// Add to `dst` instead of overwriting it.
    add: bool,
}

/// A rank-`K` update of `R` rows of `dst` (with `R == 1`, one row at a time over
/// `r.rows` rows).
///
/// # Safety
/// - AVX-512F;
/// - `K` is the inner dimension of the product, and `r.rows == R` unless `R == 1`;
/// - `lhs` elements `a[i * ars + p * acs]` (`i < rows`, `p < K`) and `rhs` elements
///   `b[p * brs + j]` (`p < K`, `j < n`) are readable;
/// - `dst` elements `c[i * n + j]` (`i < rows`, `j < n`) are readable, writable and
///   unaliased.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_rank<const K: usize, const R: usize>(r: &Rank) {
    let groups = if R == 1 { r.rows } else { 1 };
    for g in 0..groups {
        let mut a = [[_mm512_setzero_ps(); K]; R];
        for (i, a) in a.iter_mut().enumerate() {
            for (p, a) in a.iter_mut().enumerate() {
                // SAFETY:
                // - `lhs` element `(g + i, p)`, readable by the contract.
                *a = _mm512_set1_ps(unsafe { *r.a.wrapping_add((g + i) * r.ars + p * r.acs) });
            }
        }
        for j in (0..r.n).step_by(16) {
            let mask = mask16(r.n - j);
            let mut b = [_mm512_setzero_ps(); K];
            for (p, b) in b.iter_mut().enumerate() {
                // SAFETY:
                // - the masked lanes are `rhs` elements `(p, j..j + 16)` clipped to `n`,
                //   readable by the contract;
                // - masked-off lanes are not accessed.
                *b = unsafe { _mm512_maskz_loadu_ps(mask, r.b.wrapping_add(p * r.brs + j)) };
            }
            for (i, a) in a.iter().enumerate() {
                let c = r.c.wrapping_add((g + i) * r.n + j);
                // SAFETY:
                // - the masked lanes are `dst` elements `(g + i, j..j + 16)` clipped to
                //   `n`: readable, writable and unaliased by the contract;
                // - masked-off lanes are not accessed.
                unsafe {
                    let mut acc = if r.add {
                        _mm512_maskz_loadu_ps(mask, c)
                    } else {
                        _mm512_setzero_ps()
                    };
                    for (&a, &b) in a.iter().zip(&b) {
                        acc = _mm512_fmadd_ps(a, b, acc);
                    }
                    _mm512_mask_storeu_ps(c, mask, acc);
                }
            }
        }
    }
}

/// Up to 16 rows of a product with `n <= 4` columns, as dot products.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub(super) struct Dot {
    /// Rows, at most 16.
    rows: usize,
    /// Length of each dot product.
    k: usize,
    /// First `lhs` row; rows are contiguous.
    a: *const f32,
    /// `lhs` row stride.
    ars: usize,
    /// The `rhs` columns, contiguous; only the first `n` are used.
    cols: [*const f32; 4],
    /// `dst` element `(0, 0)`; its row stride is `n`.
    c: *mut f32,
    /// Add to `dst` instead of overwriting it.
    add: bool,
}

/// Dot products of `R` rows with `N` columns (`R * N <= 16`) into `R * N` contiguous
/// elements of `dst`; with `R == 1`, one row at a time over `d.rows` rows.
///
/// # Safety
/// - AVX-512F;
/// - `N` is the column count of the product, `R * N <= 16`, and `d.rows == R` unless
///   `R == 1` (then any `d.rows`);
/// - `k` floats from `d.a + r * d.ars` (`r < d.rows`) and from each of the first `N`
///   columns are readable;
/// - `dst` elements `d.c + r * N + j` are readable, writable and unaliased.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_dot<const R: usize, const N: usize>(d: &Dot) {
    let groups = if R == 1 { d.rows } else { 1 };
    for g in 0..groups {
        let a = d.a.wrapping_add(g * d.ars);
        let mut acc = [[_mm512_setzero_ps(); N]; R];
        let mut p = 0;
        while p < d.k {
            let mask = mask16(d.k - p);
            let mut cols = [_mm512_setzero_ps(); N];
            for (col, &src) in cols.iter_mut().zip(&d.cols) {
                // SAFETY:
                // - lanes `p..p + 16` clipped to `k` of a column with `k` readable floats;
                // - masked-off lanes are not accessed.
                *col = unsafe { _mm512_maskz_loadu_ps(mask, src.wrapping_add(p)) };
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY:
                // - lanes `p..p + 16` clipped to `k` of row `g + r < rows` of `lhs`, which
                //   has `k` readable floats;
                // - masked-off lanes are not accessed.
                let x = unsafe { _mm512_maskz_loadu_ps(mask, a.wrapping_add(r * d.ars + p)) };
                for (acc, &col) in acc.iter_mut().zip(&cols) {
                    *acc = _mm512_fmadd_ps(x, col, *acc);
                }
            }
            p += 16;
        }
        let mut all = [_mm512_setzero_ps(); 16];
        for (slot, acc) in all.iter_mut().zip(acc.iter().flatten()) {
            *slot = *acc;
        }
        let sums = reduce16(all);
        let mask = mask16(R * N);
        let c = d.c.wrapping_add(g * N);
        // SAFETY:
        // - the masked lanes are the `R * N` contiguous `dst` elements of rows `g..g + R`,
        //   readable, writable and unaliased;
        // - masked-off lanes are not accessed.
        unsafe {
            let sums = if d.add {
                _mm512_add_ps(sums, _mm512_maskz_loadu_ps(mask, c))
            } else {
                sums
            };
            _mm512_mask_storeu_ps(c, mask, sums);
        }
    }
}

/// Lane `i` of the result is the sum of the lanes of `v[i]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn reduce16(v: [__m512; 16]) -> __m512 {
    // Pairs: per 128-bit lane, partial sums of v[2i] and v[2i + 1] interleaved.
    let x: [__m512; 8] = std::array::from_fn(|i| {
        let (a, b) = (v[2 * i], v[2 * i + 1]);
        _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b))
    });
    // Fours: per 128-bit lane, one partial sum of each of v[4i..4i + 4].
    let z: [__m512; 4] = std::array::from_fn(|i| {
        let (a, b) = (x[2 * i], x[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_ps::<0x44>(a, b),
            _mm512_shuffle_ps::<0xEE>(a, b),
        )
    });
    // Eights: lanes 0-1 hold halves of v[8i..8i + 4], lanes 2-3 of v[8i + 4..8i + 8].
    let w: [__m512; 2] = std::array::from_fn(|i| {
        let (a, b) = (z[2 * i], z[2 * i + 1]);
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0x88>(a, b),
            _mm512_shuffle_f32x4::<0xDD>(a, b),
        )
    });
    _mm512_add_ps(
        _mm512_shuffle_f32x4::<0x88>(w[0], w[1]),
        _mm512_shuffle_f32x4::<0xDD>(w[0], w[1]),
    )
}

/// [`avx512_dot`] on AVX2 and FMA: `R * N <= 8`.
///
/// # Safety
/// As [`avx512_dot`], with AVX2 and FMA instead of AVX-512F and `R * N <= 8`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_dot<const R: usize, const N: usize>(d: &Dot) {
    let groups = if R == 1 { d.rows } else { 1 };
    for g in 0..groups {
        let a = d.a.wrapping_add(g * d.ars);
        let mut acc = [[_mm256_setzero_ps(); N]; R];
        let mut p = 0;
        while p < d.k {
            let full = d.k - p >= 8;
            let mask = mask8(d.k - p);
            let load = |src: *const f32| {
                // SAFETY:
                // - `src` is lane `p` of a row or column with `k` readable floats (the only
                //   arguments below);
                // - with `full` all 8 lanes are inside it, otherwise the mask enables only
                //   those before `k`, and `vmaskmovps` does not access the others.
                unsafe {
                    if full {
                        _mm256_loadu_ps(src)
                    } else {
                        _mm256_maskload_ps(src, mask)
                    }
                }
            };
            let mut cols = [_mm256_setzero_ps(); N];
            for (col, &src) in cols.iter_mut().zip(&d.cols) {
                *col = load(src.wrapping_add(p));
            }
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = load(a.wrapping_add(r * d.ars + p));
                for (acc, &col) in acc.iter_mut().zip(&cols) {
                    *acc = _mm256_fmadd_ps(x, col, *acc);
                }
            }
            p += 8;
        }
        let mut all = [_mm256_setzero_ps(); 8];
        for (slot, acc) in all.iter_mut().zip(acc.iter().flatten()) {
            *slot = *acc;
        }
        let sums = reduce8(all);
        let mask = mask8(R * N);
        let c = d.c.wrapping_add(g * N);
        // SAFETY:
        // - the masked lanes are the `R * N` contiguous `dst` elements of rows `g..g + R`,
        //   readable, writable and unaliased;
        // - `vmaskmovps` does not access the other lanes.
        unsafe {
            let sums = if d.add {
                _mm256_add_ps(sums, _mm256_maskload_ps(c, mask))
            } else {
                sums
            };
            _mm256_maskstore_ps(c, mask, sums);
        }
    }
}

/// Lane `i` of the result is the sum of the lanes of `v[i]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn reduce8(v: [__m256; 8]) -> __m256 {
    // Per 128-bit half: sums of lane pairs, then of the four lanes of that half.
    let h: [__m256; 4] = std::array::from_fn(|i| _mm256_hadd_ps(v[2 * i], v[2 * i + 1]));
    let lo = _mm256_hadd_ps(h[0], h[1]);
    let hi = _mm256_hadd_ps(h[2], h[3]);
    _mm256_add_ps(
        _mm256_permute2f128_ps::<0x20>(lo, hi),
        _mm256_permute2f128_ps::<0x31>(lo, hi),
    )
}

/// [`avx512_rank`] on AVX2 and FMA.
///
/// # Safety
/// As [`avx512_rank`], with AVX2 and FMA instead of AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_rank<const K: usize, const R: usize>(r: &Rank) {
    let groups = if R == 1 { r.rows } else { 1 };
    for g in 0..groups {
        let mut a = [[_mm256_setzero_ps(); K]; R];
        for (i, a) in a.iter_mut().enumerate() {
            for (p, a) in a.iter_mut().enumerate() {
                // SAFETY:
                // - `lhs` element `(g + i, p)`, readable by the contract.
                *a = _mm256_set1_ps(unsafe { *r.a.wrapping_add((g + i) * r.ars + p * r.acs) });
            }
        }
        for j in (0..r.n).step_by(8) {
            let full = r.n - j >= 8;
            let mask = mask8(r.n - j);
            let mut b = [_mm256_setzero_ps(); K];
            for (p, b) in b.iter_mut().enumerate() {
                let src = r.b.wrapping_add(p * r.brs + j);
                // SAFETY:
                // - with `full`, `rhs` elements `(p, j..j + 8)`, readable by the contract;
                // - otherwise only the masked lanes (clipped to `n`) are, and `vmaskmovps`
                //   does not access the others.
                *b = unsafe {
                    if full {
                        _mm256_loadu_ps(src)
                    } else {
                        _mm256_maskload_ps(src, mask)
                    }
                };
            }
            for (i, a) in a.iter().enumerate() {
                let c = r.c.wrapping_add((g + i) * r.n + j);
                // SAFETY:
                // - with `full`, `dst` elements `(g + i, j..j + 8)`, otherwise the masked
                //   lanes clipped to `n`: readable, writable and unaliased by the contract;
                // - `vmaskmovps` does not access masked-off lanes.
                unsafe {
                    let mut acc = if !r.add {
                        _mm256_setzero_ps()
                    } else if full {
                        _mm256_loadu_ps(c)
                    } else {
                        _mm256_maskload_ps(c, mask)
                    };
                    for (&a, &b) in a.iter().zip(&b) {
                        acc = _mm256_fmadd_ps(a, b, acc);
                    }
                    if full {
                        _mm256_storeu_ps(c, acc);
                    } else {
                        _mm256_maskstore_ps(c, mask, acc);
                    }
                }
            }
        }
    }
}
