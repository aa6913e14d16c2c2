//! The AVX-512 microkernels (12 x 32 and 6 x 64 tiles) and their packing routines.

#![allow(
    unsafe_code,
    reason = "SIMD intrinsics and raw-pointer microkernels; bounds are checked once up front"
)]

use super::*;

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
pub(super) unsafe fn avx512_pack_strip(
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

/// The AVX-512 kernel: 12 x 32 tiles.
#[cfg(target_arch = "x86_64")]
#[derive(Debug)]
pub(super) struct Avx512;

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
pub(super) struct Avx512Wide;

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
pub(super) unsafe fn avx512_pack_transposed(
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

/// The transpose of the 16 x 16 matrix whose rows are `r`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
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
pub(super) fn mask16(n: usize) -> __mmask16 {
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
pub(super) unsafe fn avx512_tile<const MR: usize, const NV: usize, const UNIT: bool>(t: &Tile) {
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
