//! The AVX2+FMA microkernels (6 x 16 and 3 x 32 tiles) and their packing routines.

#![allow(
    unsafe_code,
    reason = "SIMD intrinsics and raw-pointer microkernels; bounds are checked once up front"
)]

use super::*;

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
pub(super) unsafe fn avx2_pack_transposed(
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
#[inline]
pub(crate) fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
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

/// The AVX2+FMA kernel: 6 x 16 tiles.
#[cfg(target_arch = "x86_64")]
#[derive(Debug)]
pub(super) struct Avx2;

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
            if t.mr == 6 && t.nr == 16 {
                return if t.ars == 1 && t.acs == 6 && t.brs == 16 {
                    avx2_full_6x16::<true>(t)
                } else {
                    avx2_full_6x16::<false>(t)
                };
            }
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
        // SAFETY:
        // - the caller guarantees AVX2.
        unsafe { avx2_pack(panels, rhs, (pc, kc, jc, nc), Self::NR) };
    }

    unsafe fn pack_lhs(
        strip: &mut [f32],
        lhs: MatRef<'_>,
        ir: usize,
        mr: usize,
        pc: usize,
        kc: usize,
    ) {
        // SAFETY:
        // - the caller guarantees AVX2.
        unsafe { avx2_pack_lhs(strip, lhs, (ir, mr, Self::MR), pc, kc) };
    }
}

/// The AVX2+FMA kernel with 3 x 32 tiles.
#[cfg(target_arch = "x86_64")]
#[derive(Debug)]
pub(super) struct Avx2Wide;

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
        // SAFETY:
        // - the caller guarantees AVX2.
        unsafe { avx2_pack(panels, rhs, (pc, kc, jc, nc), Self::NR) };
    }

    unsafe fn pack_lhs(
        strip: &mut [f32],
        lhs: MatRef<'_>,
        ir: usize,
        mr: usize,
        pc: usize,
        kc: usize,
    ) {
        // SAFETY:
        // - the caller guarantees AVX2.
        unsafe { avx2_pack_lhs(strip, lhs, (ir, mr, Self::MR), pc, kc) };
    }
}

/// [`Avx2`]'s full 6 x 16 tile, 4 steps of the inner dimension per loop iteration. With
/// `PACKED` (`lhs` strips of 6 rows and `rhs` panels of 16 columns, both contiguous)
/// every address is an immediate offset.
///
/// # Safety
/// As [`Micro::tile`], with AVX2 and FMA, `t.mr == 6`, `t.nr == 16`, and if `PACKED`
/// `t.ars == 1`, `t.acs == 6` and `t.brs == 16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_full_6x16<const PACKED: bool>(t: &Tile) {
    let (ars, acs, brs) = if PACKED {
        (1, 6, 16)
    } else {
        (t.ars, t.acs, t.brs)
    };
    let mut acc = [[_mm256_setzero_ps(); 2]; 6];
    let (mut a, mut b) = (t.a, t.b);
    let mut step = |a: *const f32, b: *const f32| {
        // SAFETY:
        // - this step's 16 `rhs` floats and 6 `lhs` floats are readable by the contract
        //   (the loops below only call it for steps `p < kc`).
        unsafe {
            let r0 = _mm256_loadu_ps(b);
            let r1 = _mm256_loadu_ps(b.add(8));
            for (i, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*a.add(i * ars));
                acc[0] = _mm256_fmadd_ps(x, r0, acc[0]);
                acc[1] = _mm256_fmadd_ps(x, r1, acc[1]);
            }
        }
    };
    let mut left = t.kc;
    while left >= 4 {
        for u in 0..4 {
            step(a.wrapping_add(acs * u), b.wrapping_add(brs * u));
        }
        a = a.wrapping_add(4 * acs);
        b = b.wrapping_add(4 * brs);
        left -= 4;
    }
    for _ in 0..left {
        step(a, b);
        a = a.wrapping_add(acs);
        b = b.wrapping_add(brs);
    }
    for (i, acc) in acc.iter().enumerate() {
        for (v, &acc) in acc.iter().enumerate() {
            let c = t.c.wrapping_add(i * t.ldc + 8 * v);
            // SAFETY:
            // - all 16 columns of the 6 rows are `dst` elements of the tile: readable,
            //   writable and unaliased by the contract.
            unsafe {
                let sum = if t.add {
                    _mm256_add_ps(acc, _mm256_loadu_ps(c))
                } else {
                    acc
                };
                _mm256_storeu_ps(c, sum);
            }
        }
    }
}

/// [`pack_strip`] for `lhs` with column stride 1 (rows contiguous) and `mr_full <= 8`,
/// 8 columns at a time transposed in registers.
///
/// # Safety
/// AVX2.
///
/// # Panics
/// If `lhs` has a column stride other than 1, `mr_full` exceeds 8, `strip` is shorter
/// than `kc * mr_full`, or the block leaves the view.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2_pack_strip(
    strip: &mut [f32],
    lhs: MatRef<'_>,
    (ir, mr, mr_full): (usize, usize, usize),
    pc: usize,
    kc: usize,
) {
    let (data, ars) = (lhs.data(), lhs.row_stride());
    assert!(lhs.col_stride() == 1 && mr <= mr_full && mr_full <= 8);
    assert!(ir + mr <= lhs.rows() && pc + kc <= lhs.cols());
    let strip = &mut strip[..kc * mr_full];
    let lanes = mask8(mr_full);
    for p0 in (0..kc).step_by(8) {
        let depth = 8.min(kc - p0);
        let mask = mask8(depth);
        let mut rows = [_mm256_setzero_ps(); 8];
        for (i, row) in rows.iter_mut().enumerate().take(mr) {
            let start = (ir + i) * ars + pc + p0;
            let src = &data[start..start + depth];
            // SAFETY:
            // - with `depth == 8` all 8 lanes are inside `src`;
            // - otherwise the mask enables exactly `depth` lanes, all inside `src`, and
            //   `vmaskmovps` does not access the others.
            *row = unsafe {
                if depth == 8 {
                    _mm256_loadu_ps(src.as_ptr())
                } else {
                    _mm256_maskload_ps(src.as_ptr(), mask)
                }
            };
        }
        let columns = transpose8(rows);
        for (p, column) in columns.iter().enumerate().take(depth) {
            let start = (p0 + p) * mr_full;
            let dst = &mut strip[start..start + mr_full];
            // SAFETY:
            // - the mask enables exactly `mr_full` lanes, all inside `dst`.
            unsafe { _mm256_maskstore_ps(dst.as_mut_ptr(), lanes, *column) };
        }
    }
}

/// [`Micro::pack`] of the AVX2 kernels: transposes in registers for a transposed `rhs`,
/// [`pack_panels`] otherwise.
///
/// # Safety
/// AVX2.
#[cfg(target_arch = "x86_64")]
unsafe fn avx2_pack(
    panels: &mut [f32],
    rhs: MatRef<'_>,
    (pc, kc, jc, nc): (usize, usize, usize, usize),
    nr: usize,
) {
    if rhs.row_stride() == 1 {
        // SAFETY:
        // - the caller guarantees AVX2.
        unsafe { avx2_pack_transposed(panels, rhs, pc, kc, jc, nc, nr) };
    } else {
        pack_panels(panels, rhs, pc, kc, jc, nc, nr);
    }
}

/// [`Micro::pack_lhs`] of the AVX2 kernels: transposes in registers for rows of `lhs`
/// that are contiguous, [`pack_strip`] otherwise.
///
/// # Safety
/// AVX2.
#[cfg(target_arch = "x86_64")]
unsafe fn avx2_pack_lhs(
    strip: &mut [f32],
    lhs: MatRef<'_>,
    rows: (usize, usize, usize),
    pc: usize,
    kc: usize,
) {
    if lhs.col_stride() == 1 {
        // SAFETY:
        // - the caller guarantees AVX2.
        unsafe { avx2_pack_strip(strip, lhs, rows, pc, kc) };
    } else {
        pack_strip(strip, lhs, rows, pc, kc);
    }
}

/// A `vmaskmovps` mask of the first `n` of 8 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) fn mask8(n: usize) -> __m256i {
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
pub(super) unsafe fn avx2_tile<const MR: usize, const NV: usize, const UNIT: bool>(t: &Tile) {
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
