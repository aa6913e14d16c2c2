//! The weight and bias gradients of [`Conv2d`](super::Conv2d): a direct kernel over the
//! staged images, with no patch matrix and no packed copies of the patches (the input
//! gradient is `transposed.rs`).
//!
//! - **Output gradients.** `dY` through the activation is laid out as tiles of 16 output
//!   channels, `[tile][row][16]` (a row is one image and output position), with the bias
//!   gradient summed on the way; lanes past the last channel are zero.
//! - **Weight gradient.** Tiles of 6 patch columns x 16 output channels of `dW^T` (the 12
//!   accumulators of the crate's 6 x 16 AVX2 tile), summed over blocks of [`KC`] rows:
//!   each row broadcasts its six patch values straight from the staged image (as the
//!   forward kernel does) against the row's 16 output gradients. Tasks split the patch
//!   columns, so every element is one chain in row order whatever the pool.

#![allow(
    unsafe_code,
    reason = "SIMD intrinsics and raw-pointer microkernels; bounds are checked once up front"
)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::ops::Range;

use rl_core::simd::Isa;

use super::implicit::{Geometry, NR, Shared};
use crate::Activation;
use crate::pool::Pool;

/// Patch columns per weight-gradient tile.
pub(super) const COLS: usize = 6;
/// Rows per block of the weight gradient (each column tile's accumulators are loaded and
/// stored once a block). Blocks of 1024 rows beat 256 (the L1-sized 16 KiB slice of one
/// tile's output gradients) by 2% on the Nature CNN's backward (Zen 4): the slices stream
/// from L2 either way, and the blocks' overhead shrinks.
pub(super) const KC: usize = 1024;

/// Floats of the output-gradient tiles for `rows` rows.
pub(super) const fn grads_len(out: usize, rows: usize) -> usize {
    out.next_multiple_of(NR) * rows
}

/// Floats of the panels the weight gradient sums into (`[tile][fan_in][16]`).
pub(super) fn panels_len(g: &Geometry) -> Option<usize> {
    g.fan_in().checked_mul(g.out.checked_next_multiple_of(NR)?)
}

/// Lays out `dy` (NCHW, `out` channels of `positions`) through the activation's
/// derivative at the outputs `y` as `[tile][row][16]` in `gyp`, and adds each channel's
/// sum into `bias` if given (per image and channel, as `sum8` did: eight running lanes
/// over the positions, then the lanes pairwise). Eight channels by eight positions at a
/// time with AVX2 (the same values and sums, bit for bit). On `pool` by blocks of whole
/// tiles: each channel is laid out and summed by one task, over the images in order, so
/// the sums are those of one thread.
pub(super) fn gather(
    isa: Isa,
    activation: Option<Activation>,
    (out, positions): (usize, usize),
    (dy, y): (&[f32], &[f32]),
    gyp: &mut [f32],
    bias: Option<&mut [f32]>,
    pool: Option<&Pool>,
) {
    let image = out * positions;
    let rows = dy.len() / out.max(1);
    let tiles = out.div_ceil(NR);
    let gyp = &mut gyp[..tiles * rows * NR];
    if out % NR != 0 {
        let last = &mut gyp[(tiles - 1) * rows * NR..];
        for row in last.chunks_exact_mut(NR) {
            row[out % NR..].fill(0.0);
        }
    }
    let (gyp_at, gyp_len) = (Shared::new(gyp), gyp.len());
    let bias_at = bias.map(|bias| {
        assert!(bias.len() >= out, "a bias gradient per output channel");
        Shared::new(bias)
    });
    let threads = pool.map_or(1, Pool::threads).min(tiles);
    let per_task = tiles.div_ceil(threads.max(1));
    let tasks = tiles.div_ceil(per_task.max(1));
    let task = |task: usize| {
        let channels_of = task * per_task * NR..((task + 1) * per_task * NR).min(out);
        for (b, (dy, y)) in dy
            .chunks_exact(image)
            .zip(y.chunks_exact(image))
            .enumerate()
        {
            for o0 in channels_of.clone().step_by(8) {
                let channels = 8.min(out - o0);
                let start = ((o0 / NR) * rows + b * positions) * NR;
                assert!(start + positions * NR <= gyp_len);
                // SAFETY:
                // - `gyp` is borrowed mutably for this whole call, which returns only
                //   after every task has finished;
                // - the task writes rows of tiles `channels_of` only (disjoint between
                //   tasks), one slice at a time, within `gyp` (checked above).
                let tile =
                    unsafe { std::slice::from_raw_parts_mut(gyp_at.at(start), positions * NR) };
                let (dy, y) = (
                    &dy[o0 * positions..][..channels * positions],
                    &y[o0 * positions..][..channels * positions],
                );
                let mut lanes = [[0.0f32; 8]; 8];
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 | Isa::Avx2 if channels == 8 => {
                        // SAFETY:
                        // - AVX2 as `Isa::is_supported` guarantees for both paths.
                        unsafe {
                            let (at, l) = ((dy, y), &mut lanes);
                            match code(activation) {
                                0 => gather8_avx2::<0>(at, tile, o0 % NR, l),
                                1 => gather8_avx2::<1>(at, tile, o0 % NR, l),
                                _ => gather8_avx2::<2>(at, tile, o0 % NR, l),
                            }
                        };
                    }
                    _ => gather_portable(activation, (dy, y), tile, o0 % NR, &mut lanes),
                }
                if let Some(bias) = bias_at {
                    for (c, lanes) in (o0..o0 + channels).zip(&lanes) {
                        let [a, b, c2, d, e, f, g, h] = *lanes;
                        // SAFETY:
                        // - `bias` holds `out` floats (asserted) and is borrowed mutably
                        //   for the whole call; channel `c` belongs to this task alone.
                        unsafe { *bias.at(c) += ((a + e) + (c2 + g)) + ((b + f) + (d + h)) };
                    }
                }
            }
        }
    };
    match pool {
        Some(pool) if tasks > 1 => pool.run(tasks, &task),
        _ => (0..tasks).for_each(task),
    }
}

/// The derivative at output `y` times `g`, as `Activation::backward` computes it.
pub(super) fn derivative(activation: Option<Activation>, g: f32, y: f32) -> f32 {
    match activation {
        None => g,
        Some(Activation::Relu) => {
            if y > 0.0 {
                g
            } else {
                0.0
            }
        }
        Some(Activation::Tanh) => g * (1.0 - y * y),
    }
}

/// `activation` as a const parameter of the 8-lane kernels, so that [`derivative8`]'s
/// match folds away inside their loops (left to the loop, it cost a compare and a branch
/// per vector and spilled the vectors: the output gradients' layout ran at 4.6 cycles a
/// float): 0 none, 1 ReLU, 2 tanh.
pub(super) const fn code(activation: Option<Activation>) -> u8 {
    match activation {
        None => 0,
        Some(Activation::Relu) => 1,
        Some(Activation::Tanh) => 2,
    }
}

/// The activation of [`code`] `c`.
pub(super) const fn activation(c: u8) -> Option<Activation> {
    match c {
        1 => Some(Activation::Relu),
        2 => Some(Activation::Tanh),
        _ => None,
    }
}

/// [`derivative`] on 8 lanes: the same operations, the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn derivative8(activation: Option<Activation>, g: __m256, y: __m256) -> __m256 {
    match activation {
        None => g,
        Some(Activation::Relu) => {
            _mm256_and_ps(g, _mm256_cmp_ps::<_CMP_GT_OQ>(y, _mm256_setzero_ps()))
        }
        Some(Activation::Tanh) => {
            _mm256_mul_ps(g, _mm256_sub_ps(_mm256_set1_ps(1.0), _mm256_mul_ps(y, y)))
        }
    }
}

/// One image's channels `dy`, `y` (`channels x positions`, at most 8) into lanes
/// `lane..` of `tile` (`positions x 16`), summing channel `l`'s position `p` into
/// `lanes[l][p % 8]`.
fn gather_portable(
    activation: Option<Activation>,
    (dy, y): (&[f32], &[f32]),
    tile: &mut [f32],
    lane: usize,
    lanes: &mut [[f32; 8]; 8],
) {
    let positions = tile.len() / NR;
    for (l, (dy, y)) in dy
        .chunks_exact(positions)
        .zip(y.chunks_exact(positions))
        .enumerate()
    {
        for (p, ((dst, &g), &y)) in tile.chunks_exact_mut(NR).zip(dy).zip(y).enumerate() {
            let v = derivative(activation, g, y);
            dst[lane + l] = v;
            lanes[l][p % 8] += v;
        }
    }
}

/// [`gather_portable`] for 8 channels, 8 positions at a time: each block through the
/// derivative of activation [`code`] `A` in vectors, summed, transposed and stored as 8
/// rows of 8 lanes.
///
/// # Safety
/// AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gather8_avx2<const A: u8>(
    (dy, y): (&[f32], &[f32]),
    tile: &mut [f32],
    lane: usize,
    lanes: &mut [[f32; 8]; 8],
) {
    let activation = activation(A);
    let positions = tile.len() / NR;
    assert!(dy.len() == 8 * positions && y.len() == 8 * positions && lane + 8 <= NR);
    let mut sums = [_mm256_setzero_ps(); 8];
    let full = positions - positions % 8;
    let zero = _mm256_setzero_ps();
    for p0 in (0..full).step_by(8) {
        let mut v = [zero; 8];
        for (l, v) in v.iter_mut().enumerate() {
            let (g, y) = (
                &dy[l * positions + p0..][..8],
                &y[l * positions + p0..][..8],
            );
            // SAFETY:
            // - `g` and `y` hold 8 floats each.
            let (g, y) = unsafe { (_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(y.as_ptr())) };
            *v = derivative8(activation, g, y);
            sums[l] = _mm256_add_ps(sums[l], *v);
        }
        for (k, row) in crate::linalg::transpose8(v).iter().enumerate() {
            let dst = &mut tile[(p0 + k) * NR + lane..][..8];
            // SAFETY:
            // - `dst` holds 8 floats.
            unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), *row) };
        }
    }
    for (lanes, sum) in lanes.iter_mut().zip(&sums) {
        // SAFETY:
        // - `lanes` holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), *sum) };
    }
    for (l, lanes) in lanes.iter_mut().enumerate() {
        for p in full..positions {
            let v = derivative(activation, dy[l * positions + p], y[l * positions + p]);
            tile[p * NR + lane + l] = v;
            lanes[p % 8] += v;
        }
    }
}

/// Adds `dW = g patches` to `grads` (the weight, `out x fan_in` row-major) for the
/// `rows` rows of the staged images, summing in `dwt` (`[tile][fan_in][16]`, at least
/// [`panels_len`] floats) first; on `pool` by blocks of patch columns.
#[expect(clippy::too_many_arguments, reason = "the workspace's slices")]
pub(super) fn weight_grad(
    g: &Geometry,
    isa: Isa,
    pool: Option<&Pool>,
    staged: &[f32],
    gyp: &[f32],
    rows: usize,
    dwt: &mut [f32],
    grads: &mut [f32],
) {
    let (fan_in, out) = (g.fan_in(), g.out);
    if rows == 0 {
        return;
    }
    let tiles = out.div_ceil(NR);
    let dwt = &mut dwt[..tiles * fan_in * NR];
    let gyp = &gyp[..tiles * rows * NR];
    let column_tiles = fan_in.div_ceil(COLS);
    let threads = pool.map_or(1, Pool::threads).min(column_tiles);
    let per_task = column_tiles.div_ceil(threads);
    let tasks = column_tiles.div_ceil(per_task);
    let at = Shared::new(dwt);
    let task = |task: usize| {
        let columns = task * per_task * COLS..((task + 1) * per_task * COLS).min(fan_in);
        let mut bases = [0usize; KC];
        for r0 in (0..rows).step_by(KC) {
            let bases = &mut bases[..KC.min(rows - r0)];
            g.fill_bases(r0, bases, staged.len());
            // Tile `q`'s columns of this task and its output gradients of this block.
            let slices = |q: usize| {
                let n = columns.len() * NR;
                let start = (q * fan_in + columns.start) * NR;
                // SAFETY:
                // - `dwt` is borrowed mutably for this whole call, which returns only
                //   after every task has finished;
                // - task `task` writes columns `columns` of each tile only: disjoint
                //   between tasks and between tiles, and `start + n <= tiles * fan_in *
                //   16 == dwt.len()`.
                let dwt = unsafe { std::slice::from_raw_parts_mut(at.at(start), n) };
                (dwt, &gyp[(q * rows + r0) * NR..][..bases.len() * NR])
            };
            let mut q = 0;
            while q < tiles {
                if isa == Isa::Avx512 && q + 1 < tiles {
                    let (pair, first) = ([slices(q), slices(q + 1)], r0 == 0);
                    weight_pair(g, staged, bases, pair, columns.clone(), first);
                    q += 2;
                    continue;
                }
                let (dwt, gy) = slices(q);
                weight_block(g, isa, staged, bases, gy, dwt, columns.clone(), r0 == 0);
                q += 1;
            }
        }
    };
    match pool {
        Some(pool) if tasks > 1 => pool.run(tasks, &task),
        _ => (0..tasks).for_each(task),
    }
    for (o, row) in grads[..out * fan_in].chunks_exact_mut(fan_in).enumerate() {
        let tile = &dwt[(o / NR) * fan_in * NR..][..fan_in * NR];
        for (d, column) in row.iter_mut().zip(tile.chunks_exact(NR)) {
            *d += column[o % NR];
        }
    }
}

/// One block of rows of the weight gradient for patch columns `columns`: `dwt` holds
/// those columns of one tile (`columns.len() x 16`), overwritten if `first`, else added
/// to; `gy` is the tile's output gradients of the rows whose patches start at `bases`.
#[expect(clippy::too_many_arguments, reason = "one block's slices")]
fn weight_block(
    g: &Geometry,
    isa: Isa,
    staged: &[f32],
    bases: &[usize],
    gy: &[f32],
    dwt: &mut [f32],
    columns: Range<usize>,
    first: bool,
) {
    assert!(gy.len() == bases.len() * NR && dwt.len() == columns.len() * NR);
    for j0 in columns.clone().step_by(COLS) {
        let n = COLS.min(columns.end - j0);
        // Columns past the tile repeat its last one (computed, never stored).
        let offsets: [usize; COLS] = std::array::from_fn(|i| g.col_offset(j0 + i.min(n - 1)));
        let dst = &mut dwt[(j0 - columns.start) * NR..][..n * NR];
        let mut acc = [[0.0f32; NR]; COLS];
        if !first {
            for (acc, src) in acc.iter_mut().zip(dst.chunks_exact(NR)) {
                acc.copy_from_slice(src);
            }
        }
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 | Isa::Avx2 => {
                // SAFETY:
                // - `isa` was detected on this CPU, and both paths imply AVX2 and FMA
                //   (`Isa::is_supported`);
                // - every `bases[r] + offsets[i]` is inside `staged` (`Geometry::fill_bases`
                //   asserted `bases[r]` plus the patch's furthest offset is) and `gy`
                //   holds 16 floats per base (asserted).
                unsafe { weight_avx2(staged, bases, &offsets, gy, &mut acc) }
            }
            _ => weight_portable(staged, bases, &offsets, gy, &mut acc),
        }
        for (src, dst) in acc.iter().zip(dst.chunks_exact_mut(NR)) {
            dst.copy_from_slice(src);
        }
    }
}

/// [`weight_block`] for two tiles at once on AVX-512 (`pair[h]` is tile `h`'s `dwt`
/// columns and output gradients): each element the same chain as `weight_block`'s.
fn weight_pair(
    g: &Geometry,
    staged: &[f32],
    bases: &[usize],
    pair: [(&mut [f32], &[f32]); 2],
    columns: Range<usize>,
    first: bool,
) {
    let [(dwt0, gy0), (dwt1, gy1)] = pair;
    assert!(
        gy0.len() == bases.len() * NR
            && gy1.len() == bases.len() * NR
            && dwt0.len() == columns.len() * NR
            && dwt1.len() == columns.len() * NR
    );
    for j0 in columns.clone().step_by(COLS) {
        let n = COLS.min(columns.end - j0);
        // Columns past the tile repeat its last one (computed, never stored).
        let offsets: [usize; COLS] = std::array::from_fn(|i| g.col_offset(j0 + i.min(n - 1)));
        let at = (j0 - columns.start) * NR..(j0 - columns.start + n) * NR;
        let mut acc = [[[0.0f32; NR]; COLS]; 2];
        if !first {
            for (acc, dwt) in acc.iter_mut().zip([&*dwt0, &*dwt1]) {
                for (acc, src) in acc.iter_mut().zip(dwt[at.clone()].chunks_exact(NR)) {
                    acc.copy_from_slice(src);
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY:
        // - only called with `Isa::Avx512`, detected on this CPU: AVX-512F;
        // - every `bases[r] + offsets[i]` is inside `staged` (`Geometry::fill_bases` asserted
        //   `bases[r]` plus the patch's furthest offset is) and each `gy` holds 16 floats
        //   per base (asserted).
        unsafe {
            weight_avx512(staged, bases, &offsets, [gy0, gy1], &mut acc);
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("AVX-512 is x86_64 only");
        for (acc, dwt) in acc.iter().zip([&mut *dwt0, &mut *dwt1]) {
            for (src, dst) in acc.iter().zip(dwt[at.clone()].chunks_exact_mut(NR)) {
                dst.copy_from_slice(src);
            }
        }
    }
}

/// [`weight_avx2`] for two tiles of output gradients at once with AVX-512: `acc[h]` sums
/// against `gy[h]`, each element one FMA chain in row order (the same bits).
///
/// # Safety
/// AVX-512F; each `gy[h]` holds `16 * bases.len()` floats and every `bases[r] +
/// offsets[i]` is inside `staged`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn weight_avx512(
    staged: &[f32],
    bases: &[usize],
    offsets: &[usize; COLS],
    gy: [&[f32]; 2],
    acc: &mut [[[f32; NR]; COLS]; 2],
) {
    let mut a = [[_mm512_setzero_ps(); 2]; COLS];
    for (i, a) in a.iter_mut().enumerate() {
        // SAFETY:
        // - each row of `acc` holds 16 floats.
        unsafe {
            a[0] = _mm512_loadu_ps(acc[0][i].as_ptr());
            a[1] = _mm512_loadu_ps(acc[1][i].as_ptr());
        }
    }
    let s = staged.as_ptr();
    let columns: [*const f32; COLS] = std::array::from_fn(|i| s.wrapping_add(offsets[i]));
    let (mut g0, mut g1) = (gy[0].as_ptr(), gy[1].as_ptr());
    for &base in bases {
        // SAFETY:
        // - this row's 16 gradients of each tile are inside `gy`, and each column's
        //   patch float inside `staged`, by the contract.
        unsafe {
            let y0 = _mm512_loadu_ps(g0);
            let y1 = _mm512_loadu_ps(g1);
            for (a, column) in a.iter_mut().zip(&columns) {
                let x = _mm512_set1_ps(*column.add(base));
                a[0] = _mm512_fmadd_ps(x, y0, a[0]);
                a[1] = _mm512_fmadd_ps(x, y1, a[1]);
            }
            g0 = g0.add(NR);
            g1 = g1.add(NR);
        }
    }
    for (i, a) in a.iter().enumerate() {
        // SAFETY:
        // - each row of `acc` holds 16 floats.
        unsafe {
            _mm512_storeu_ps(acc[0][i].as_mut_ptr(), a[0]);
            _mm512_storeu_ps(acc[1][i].as_mut_ptr(), a[1]);
        }
    }
}

/// [`weight_avx2`] in plain Rust.
fn weight_portable(
    staged: &[f32],
    bases: &[usize],
    offsets: &[usize; COLS],
    gy: &[f32],
    acc: &mut [[f32; NR]; COLS],
) {
    for (&base, gy) in bases.iter().zip(gy.chunks_exact(NR)) {
        for (acc, &offset) in acc.iter_mut().zip(offsets) {
            let x = staged[base + offset];
            for (a, &g) in acc.iter_mut().zip(gy) {
                *a += x * g;
            }
        }
    }
}

/// The weight-gradient tile: `acc[i][l] += sum_r staged[bases[r] + offsets[i]] *
/// gy[r * 16 + l]`, rows in order, one FMA chain per element.
///
/// # Safety
/// AVX2 and FMA; `gy` holds `16 * bases.len()` floats and every `bases[r] + offsets[i]`
/// is inside `staged`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn weight_avx2(
    staged: &[f32],
    bases: &[usize],
    offsets: &[usize; COLS],
    gy: &[f32],
    acc: &mut [[f32; NR]; COLS],
) {
    let mut a = [[_mm256_setzero_ps(); 2]; COLS];
    for (a, acc) in a.iter_mut().zip(acc.iter()) {
        // SAFETY:
        // - each row of `acc` holds 16 floats.
        unsafe {
            a[0] = _mm256_loadu_ps(acc.as_ptr());
            a[1] = _mm256_loadu_ps(acc.as_ptr().add(8));
        }
    }
    let s = staged.as_ptr();
    let columns: [*const f32; COLS] = std::array::from_fn(|i| s.wrapping_add(offsets[i]));
    let mut gp = gy.as_ptr();
    for &base in bases {
        // SAFETY:
        // - this row's 16 gradients are inside `gy`, and each column's patch float
        //   inside `staged`, by the contract.
        unsafe {
            let g0 = _mm256_loadu_ps(gp);
            let g1 = _mm256_loadu_ps(gp.add(8));
            for (a, column) in a.iter_mut().zip(&columns) {
                let x = _mm256_broadcast_ss(&*column.add(base));
                a[0] = _mm256_fmadd_ps(x, g0, a[0]);
                a[1] = _mm256_fmadd_ps(x, g1, a[1]);
            }
            gp = gp.add(NR);
        }
    }
    for (dst, a) in acc.iter_mut().zip(&a) {
        // SAFETY:
        // - each row of `acc` holds 16 floats.
        unsafe {
            _mm256_storeu_ps(dst.as_mut_ptr(), a[0]);
            _mm256_storeu_ps(dst.as_mut_ptr().add(8), a[1]);
        }
    }
}

#[cfg(test)]
mod tests;
