//! The input gradient of [`Conv2d`](super::Conv2d) as one stride-1 direct convolution of
//! the output gradients, run by the forward pass's tile over channels-last gradients
//! (`kernels.rs`).
//!
//! Cut the padded input into blocks of `sh x sw` positions. Input position `Y = sh I + r`
//! (block `I`, phase `r`) receives the output gradients of kernel rows `ky = r + sh m`
//! from output row `I - m`: which output rows reach a block depends on the block only,
//! not on the phase. So the input gradients of a block, `sh x sw x in` values, are one
//! row of a stride-1 convolution of the output gradients (staged zero-padded, through the
//! activation's derivative) with `ceil(kh / sh) x ceil(kw / sw)` taps, `out` input and
//! `sh sw in` output channels (the kernel rearranged, zero where a phase has fewer taps):
//! a transposed convolution as a convolution followed by a depth-to-space shuffle.
//!
//! Each tile is one block in six images (so its rows share their taps exactly: taps that
//! read only the frame's zeros are left out), broadcasting their staged gradients
//! (channels-last: a row's taps are consecutive floats) against the rearranged weight
//! packed as `[column tile][(m, n, o)][16]` panels. The tile's values go channels-last
//! into scratch, transposed into `dx` (NCHW) eight input rows at a time. Every input
//! gradient is written once, one chain of multiply-adds in `(m, n, o)` order whichever
//! thread computes it: no scatter-add and no zeroing.

#![allow(
    unsafe_code,
    reason = "SIMD intrinsics, and the pool's tasks writing disjoint parts of one buffer"
)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::ops::Range;

use rl_core::simd::Isa;

use super::backward::{activation, code, derivative, derivative8};
use super::implicit::{Geometry, MR, NR, Shared};
use crate::Activation;
use crate::pool::Pool;

/// Images staged and computed together: a tile is one block in each of them.
const IMAGES: usize = 6;
/// Tasks the input gradient can run as (one scratch slot each).
const TASKS: usize = 4;

/// The blocks along one dimension of a layer: kernel `k`, stride `s`, padding `p`, input
/// size `n`, output size `outputs`.
#[derive(Clone, Copy, Debug)]
struct Blocks {
    /// Taps per phase, `ceil(k / s)`.
    taps: usize,
    /// Stride: positions per block.
    stride: usize,
    /// Padding: where the unpadded input starts in the padded frame.
    pad: usize,
    /// Input size.
    size: usize,
    /// Output size.
    outputs: usize,
    /// Blocks holding unpadded input positions: `first..end`.
    first: usize,
    /// One past the last such block.
    end: usize,
    /// Zeros before the output gradients in the staged frame.
    lead: usize,
    /// The staged frame's length.
    len: usize,
}

impl Blocks {
    fn new(k: usize, s: usize, p: usize, n: usize, outputs: usize) -> Self {
        let taps = k.div_ceil(s);
        let (first, end) = (p / s, (p + n).div_ceil(s));
        // Tap `m'` of block `I` reads output row `I + m' - (taps - 1)`, at frame index
        // `I + m' - (taps - 1) + lead`: never below zero, and inside the frame.
        let lead = (taps - 1).saturating_sub(first);
        Self {
            taps,
            stride: s,
            pad: p,
            size: n,
            outputs,
            first,
            end,
            lead,
            len: end.max(outputs) + lead,
        }
    }

    /// The taps of block `b` that read output gradients rather than the frame's zeros.
    fn live(&self, b: usize) -> Range<usize> {
        // The frame index tap 0 reads.
        let start = b + self.lead + 1 - self.taps;
        let lo = self.lead.saturating_sub(start).min(self.taps);
        lo..(self.lead + self.outputs)
            .saturating_sub(start)
            .clamp(lo, self.taps)
    }

    /// The unpadded input coordinate of phase `r` of block `b`, if inside the input.
    fn input(&self, b: usize, r: usize) -> Option<usize> {
        (self.stride * b + r)
            .checked_sub(self.pad)
            .filter(|&x| x < self.size)
    }
}

/// How a layer's input gradient runs: its blocks and the product that computes them.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Blocks down the rows.
    rows: Blocks,
    /// Blocks across the columns.
    columns: Blocks,
    /// The stride-1 forward pass whose positions are the blocks and whose patches are
    /// the staged gradients: `out` channels in, `sh sw in` out.
    product: Geometry,
}

impl Plan {
    fn new(g: &Geometry) -> Self {
        let rows = Blocks::new(g.kh, g.sh, g.ph, g.h, g.oh);
        let columns = Blocks::new(g.kw, g.sw, g.pw, g.w, g.ow);
        let product = Geometry {
            cin: g.out,
            out: g.sh * g.sw * g.cin,
            kh: rows.taps,
            kw: columns.taps,
            sh: 1,
            sw: 1,
            ph: 0,
            pw: 0,
            h: rows.len,
            w: columns.len,
            oh: rows.end - rows.first,
            ow: columns.end - columns.first,
        };
        Self {
            rows,
            columns,
            product,
        }
    }

    /// Where block `(bi, bj)`'s patch starts in a staged image (channels-last).
    const fn base(&self, bi: usize, bj: usize) -> usize {
        let row = bi + self.rows.lead + 1 - self.rows.taps;
        let column = bj + self.columns.lead + 1 - self.columns.taps;
        (row * self.product.w + column) * self.product.cin
    }
}

/// Floats of the packed weight: `out x ceil(kh / sh) x ceil(kw / sw)` rows of `sh sw
/// in` rounded up to 16 columns.
pub(super) fn panels_len(g: &Geometry) -> Option<usize> {
    g.sh.checked_mul(g.sw)?
        .checked_mul(g.cin)?
        .checked_next_multiple_of(NR)?
        .checked_mul(g.out)?
        .checked_mul(g.kh.div_ceil(g.sh.max(1)))?
        .checked_mul(g.kw.div_ceil(g.sw.max(1)))
}

/// Floats of one task's scratch for up to `images` images: their staged output
/// gradients and a band of block rows of their input gradients, channels-last.
fn slot_len(g: &Geometry, plan: &Plan, images: usize) -> Option<usize> {
    let input = g
        .cin
        .checked_mul(band(g))?
        .checked_mul(g.sh)?
        .checked_mul(g.w)?;
    plan.product
        .staged_len()
        .checked_add(input)?
        .checked_mul(images)
}

/// Floats of the scratch the input gradient needs for batches of up to `max_batch`
/// images.
pub(super) fn scratch_len(g: &Geometry, max_batch: usize) -> Option<usize> {
    let plan = Plan::new(g);
    let tasks = max_batch.div_ceil(IMAGES).clamp(1, TASKS);
    slot_len(g, &plan, IMAGES.min(max_batch.max(1)))?.checked_mul(tasks)
}

/// Packs the rearranged weight as the product's panels, `[column tile][(m, n, o)][16]`:
/// column `(ry, rx, c)` (channel fastest) of row `(m, n, o)` holds `W[o, c, ry + sh
/// (taps_y - 1 - m), rx + sw (taps_x - 1 - n)]`, zero past the kernel or past the last
/// column.
fn pack(g: &Geometry, plan: &Plan, weight: &[f32], panels: &mut [f32]) {
    let pg = &plan.product;
    let (ty, tx) = (pg.kh, pg.kw);
    for (q, panel) in panels[..pg.panels_len()]
        .chunks_exact_mut(pg.fan_in() * NR)
        .enumerate()
    {
        for (k, row) in panel.chunks_exact_mut(NR).enumerate() {
            let (m, n, o) = (k / (tx * g.out), k / g.out % tx, k % g.out);
            for (l, v) in row.iter_mut().enumerate() {
                let column = q * NR + l;
                let (ry, rx, c) = (
                    column / (g.sw * g.cin),
                    column / g.cin % g.sw,
                    column % g.cin,
                );
                let (ky, kx) = (ry + g.sh * (ty - 1 - m), rx + g.sw * (tx - 1 - n));
                *v = if column < pg.out && ky < g.kh && kx < g.kw {
                    weight[((o * g.cin + c) * g.kh + ky) * g.kw + kx]
                } else {
                    0.0
                };
            }
        }
    }
}

/// Stages one image's output gradients `dy` through the derivative at its outputs `y`
/// (both `out x oh x ow`) into `slot`, the plan's frame channels-last (`[row][column]
/// [out]`), zeros around them; 8 channels by 8 positions at a time with AVX2 (the same
/// values: each is one call of the derivative).
fn stage(
    g: &Geometry,
    plan: &Plan,
    isa: Isa,
    activation: Option<Activation>,
    (dy, y): (&[f32], &[f32]),
    slot: &mut [f32],
) {
    let positions = g.positions();
    assert!(
        dy.len() == g.out * positions
            && y.len() == dy.len()
            && slot.len() == plan.product.staged_len()
    );
    // One sweep of zeros (short fills cost more), then the gradients.
    slot.fill(0.0);
    let (mut p8, mut c8) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx512 | Isa::Avx2) {
        (p8, c8) = (positions - positions % 8, g.out - g.out % 8);
        // SAFETY:
        // - AVX2: `isa` was detected on this CPU;
        // - lengths asserted above; `at` maps every position inside the frame.
        unsafe {
            let (at, blocks) = ((g, plan), (p8, c8));
            match code(activation) {
                0 => stage_avx2::<0>(at, (dy, y), blocks, slot),
                1 => stage_avx2::<1>(at, (dy, y), blocks, slot),
                _ => stage_avx2::<2>(at, (dy, y), blocks, slot),
            }
        };
    }
    let _ = isa;
    for p in 0..positions {
        let at = staged_at(g, plan, p);
        let from = if p < p8 { c8 } else { 0 };
        for c in from..g.out {
            let i = c * positions + p;
            slot[at + c] = derivative(activation, dy[i], y[i]);
        }
    }
}

/// Where output position `p`'s channel 0 goes in a staged frame.
fn staged_at(g: &Geometry, plan: &Plan, p: usize) -> usize {
    let (oy, ox) = (p / g.ow, p % g.ow);
    ((plan.rows.lead + oy) * plan.product.w + plan.columns.lead + ox) * g.out
}

/// The `8 x 8` blocks of [`stage`] below `p8` positions and `c8` channels, through the
/// derivative of activation [`code`] `A`.
///
/// # Safety
/// AVX2; `p8 <= positions` and `c8 <= out` are multiples of 8, `dy` and `y` hold `out x
/// positions` floats and `slot` one staged frame.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn stage_avx2<const A: u8>(
    (g, plan): (&Geometry, &Plan),
    (dy, y): (&[f32], &[f32]),
    (p8, c8): (usize, usize),
    slot: &mut [f32],
) {
    let activation = activation(A);
    let positions = g.positions();
    assert!(p8 <= positions && c8 <= g.out && dy.len() == g.out * positions);
    assert!(y.len() == dy.len() && slot.len() == plan.product.staged_len());
    for p0 in (0..p8).step_by(8) {
        let at: [usize; 8] = std::array::from_fn(|k| staged_at(g, plan, p0 + k));
        assert!(at.iter().all(|&a| a + g.out <= slot.len()));
        for c0 in (0..c8).step_by(8) {
            let v: [__m256; 8] = std::array::from_fn(|l| {
                let i = (c0 + l) * positions + p0;
                let (g, y) = (&dy[i..][..8], &y[i..][..8]);
                // SAFETY:
                // - `g` and `y` hold 8 floats each.
                let (g, y) = unsafe { (_mm256_loadu_ps(g.as_ptr()), _mm256_loadu_ps(y.as_ptr())) };
                derivative8(activation, g, y)
            });
            for (column, &at) in crate::linalg::transpose8(v).iter().zip(&at) {
                // SAFETY:
                // - channels `c0..c0 + 8 <= out` of a position inside the frame
                //   (asserted above).
                unsafe { _mm256_storeu_ps(slot.as_mut_ptr().add(at + c0), *column) };
            }
        }
    }
}

/// Writes the input gradients `dx` (NCHW) of a batch from its output gradients `dy` and
/// outputs `y` (NCHW, through `activation`'s derivative) and the weight (`out x in x kh x
/// kw`, packed into `panels`, at least [`panels_len`] floats), divided by 255 if
/// `div255`; on `pool` by groups of images, each in a slot of `scratch` (at least
/// [`scratch_len`] floats).
#[expect(clippy::too_many_arguments, reason = "the workspace's slices")]
pub(super) fn input_grad(
    g: &Geometry,
    isa: Isa,
    pool: Option<&Pool>,
    activation: Option<Activation>,
    (dy, y): (&[f32], &[f32]),
    weight: &[f32],
    panels: &mut [f32],
    scratch: &mut [f32],
    dx: &mut [f32],
    div255: bool,
) {
    let input_len = g.cin * g.h * g.w;
    let output_len = g.out * g.positions();
    let batch = dx.len() / input_len;
    assert!(
        batch * input_len == dx.len()
            && dy.len() == batch * output_len
            && y.len() == dy.len()
            && weight.len() == g.out * g.fan_in()
    );
    if batch == 0 {
        return;
    }
    let plan = Plan::new(g);
    pack(g, &plan, weight, panels);
    let panels = &*panels;
    let slot = slot_len(g, &plan, IMAGES.min(batch)).unwrap_or(usize::MAX);
    let groups = batch.div_ceil(IMAGES);
    let threads = pool
        .map_or(1, Pool::threads)
        .min(groups)
        .min(scratch.len() / slot);
    assert!(threads >= 1, "no scratch for the input gradient");
    let per_task = groups.div_ceil(threads);
    let tasks = groups.div_ceil(per_task);
    let (dx_at, scratch_at) = (Shared::new(dx), Shared::new(scratch));
    let task = |task: usize| {
        let images = task * per_task * IMAGES..((task + 1) * per_task * IMAGES).min(batch);
        // SAFETY:
        // - `dx` and `scratch` are borrowed mutably for this whole call, which returns
        //   only after every task has finished;
        // - task `task` touches the input gradients of its images and scratch slot
        //   `task` only: disjoint between tasks, inside the slices (`images.end <=
        //   batch`, `tasks * slot <= scratch.len()`).
        let (dx, scratch) = unsafe {
            (
                std::slice::from_raw_parts_mut(
                    dx_at.at(images.start * input_len),
                    images.len() * input_len,
                ),
                std::slice::from_raw_parts_mut(scratch_at.at(task * slot), slot),
            )
        };
        for (k, dx) in dx.chunks_mut(IMAGES * input_len).enumerate() {
            let b0 = images.start + k * IMAGES;
            let n = dx.len() / input_len;
            let outputs = b0 * output_len..(b0 + n) * output_len;
            let (dy, y) = (&dy[outputs.clone()], &y[outputs]);
            group(g, &plan, isa, activation, (dy, y), panels, scratch, dx);
            if div255 {
                dx.iter_mut().for_each(|v| *v /= 255.0);
            }
        }
    };
    match pool {
        Some(pool) if tasks > 1 => pool.run(tasks, &task),
        _ => (0..tasks).for_each(task),
    }
}

/// The input gradients `dx` of a group of images (at most [`IMAGES`]) from their output
/// gradients and outputs, staged in `scratch`.
#[expect(clippy::too_many_arguments, reason = "one group's slices")]
fn group(
    g: &Geometry,
    plan: &Plan,
    isa: Isa,
    activation: Option<Activation>,
    (dy, y): (&[f32], &[f32]),
    panels: &[f32],
    scratch: &mut [f32],
    dx: &mut [f32],
) {
    let n = dx.len() / (g.cin * g.h * g.w);
    let pg = &plan.product;
    let staged_len = pg.staged_len();
    let (staged, lanes) = scratch.split_at_mut(IMAGES.min(n.max(1)) * staged_len);
    let staged = &mut staged[..n * staged_len];
    // A band of block rows of each image, channels-last: `[image][row][x][in]`.
    let band = band(g);
    let lanes = &mut lanes[..n * band * g.sh * g.w * g.cin];
    for ((slot, dy), y) in staged
        .chunks_exact_mut(staged_len)
        .zip(dy.chunks_exact(g.out * g.positions()))
        .zip(y.chunks_exact(g.out * g.positions()))
    {
        stage(g, plan, isa, activation, (dy, y), slot);
    }
    let staged = &*staged;
    // The furthest float a patch reaches from its start.
    let reach = kernels::reach(pg);
    let tiles = pg.out.div_ceil(NR);
    let panel = |q: usize| &panels[q * pg.fan_in() * NR..][..pg.fan_in() * NR];
    let store = Store {
        g,
        n,
        band: (plan.rows.first, band),
        bi: 0,
        bj: 0,
    };
    // Each row of blocks runs column tile by column tile, so that a tile's panel is read
    // from L1 by the whole row.
    for bi in plan.rows.first..plan.rows.end {
        let rows = plan.rows.live(bi);
        let mut q = 0;
        while q < tiles {
            let pair = cfg!(target_arch = "x86_64") && isa == Isa::Avx512 && q + 1 < tiles;
            for bj in plan.columns.first..plan.columns.end {
                let window = [rows.clone(), plan.columns.live(bj)];
                let store = Store { bi, bj, ..store };
                if window.iter().any(Range::is_empty) {
                    // No tap reads a gradient: the block's input gradients are zero.
                    let zeros = [[0.0; NR]; MR];
                    store.put(plan, &zeros, q * NR, lanes);
                    if pair {
                        store.put(plan, &zeros, (q + 1) * NR, lanes);
                    }
                    continue;
                }
                // Six rows: this block in each image (the last repeated, not stored).
                let base = plan.base(bi, bj);
                let bases: [usize; MR] = std::array::from_fn(|i| i.min(n - 1) * staged_len + base);
                assert!(bases.iter().all(|&b| b + reach < staged.len()));
                let at = (&bases, &window);
                #[cfg(target_arch = "x86_64")]
                if pair {
                    let mut acc = [[[0.0f32; NR]; MR]; 2];
                    // SAFETY:
                    // - `isa` was detected on this CPU: AVX-512F;
                    // - every row's patch lies inside `staged` (asserted above: the
                    //   furthest float is `bases[i] + reach`) and both panels hold
                    //   `fan_in * 16` floats.
                    unsafe { kernels::avx512(pg, staged, at, [panel(q), panel(q + 1)], &mut acc) };
                    store.put(plan, &acc[0], q * NR, lanes);
                    store.put(plan, &acc[1], (q + 1) * NR, lanes);
                    continue;
                }
                let mut acc = [[0.0f32; NR]; MR];
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 | Isa::Avx2 => {
                        // SAFETY:
                        // - both paths imply AVX2 and FMA (`Isa::is_supported`) and `isa`
                        //   was detected on this CPU;
                        // - patches and panel as above.
                        unsafe { kernels::avx2(pg, staged, at, panel(q), &mut acc) }
                    }
                    _ => kernels::portable(pg, staged, at, panel(q), &mut acc),
                }
                store.put(plan, &acc, q * NR, lanes);
            }
            q += if pair { 2 } else { 1 };
        }
        // A band is done: its input rows go into `dx`, NCHW.
        let top = plan.rows.first + (bi - plan.rows.first) / band * band;
        if bi + 1 == top + band || bi + 1 == plan.rows.end {
            // Rows `top sh - ph..` of the input, those inside it.
            let first = (g.sh * top).saturating_sub(g.ph);
            let last = (g.sh * (bi + 1))
                .saturating_sub(g.ph)
                .clamp(first, g.h.max(first));
            let skip = first + g.ph - g.sh * top;
            let plane = g.h * g.w;
            for (lanes, dx) in lanes
                .chunks_exact(band * g.sh * g.w * g.cin)
                .zip(dx.chunks_exact_mut(g.cin * plane))
            {
                let rows = &lanes[skip * g.w * g.cin..(skip + last - first) * g.w * g.cin];
                to_planes(isa, rows, g.cin, (&mut dx[first * g.w..], plane));
            }
        }
    }
}

/// Block rows transposed into `dx` together: enough for 8 input rows.
fn band(g: &Geometry) -> usize {
    8usize.div_ceil(g.sh)
}

/// Where a tile's values go: block `(bi, bj)` of images `0..n`.
#[derive(Clone, Copy)]
struct Store<'g> {
    g: &'g Geometry,
    n: usize,
    /// The first block row and the band's length.
    band: (usize, usize),
    bi: usize,
    bj: usize,
}

impl Store<'_> {
    /// Stores rows `0..n` of tile `acc` (row `i`: image `i`; columns `c0..c0 + 16` of
    /// `(ry, rx, c)`) into `lanes` (per image the band's `band sh x w x in`,
    /// channels-last), the input positions inside the image only.
    fn put(&self, plan: &Plan, acc: &[[f32; NR]; MR], c0: usize, lanes: &mut [f32]) {
        let g = self.g;
        let (first, band) = self.band;
        let (columns, image) = (plan.product.out, band * g.sh * g.w * g.cin);
        // This block row's place in its band.
        let row = (self.bi - first) % band * g.sh;
        let mut l = 0;
        while l < NR && c0 + l < columns {
            // A run of channels of one phase.
            let column = c0 + l;
            let (ry, rx, c) = (
                column / (g.sw * g.cin),
                column / g.cin % g.sw,
                column % g.cin,
            );
            let run = (NR - l).min(g.cin - c);
            let inside = plan
                .rows
                .input(self.bi, ry)
                .zip(plan.columns.input(self.bj, rx));
            if let Some((_, ix)) = inside {
                let at = ((row + ry) * g.w + ix) * g.cin + c;
                for (i, row) in acc.iter().enumerate().take(self.n) {
                    lanes[i * image + at..][..run].copy_from_slice(&row[l..l + run]);
                }
            }
            l += run;
        }
    }
}

/// Transposes `src` (`positions x channels`, channels-last) into `dst`: position `p` of
/// channel `c` at `dst[c * stride + p]` (`stride >= positions`), 8 x 8 blocks at a time
/// with AVX2.
fn to_planes(isa: Isa, src: &[f32], channels: usize, (dst, stride): (&mut [f32], usize)) {
    assert!(channels > 0 && src.len().is_multiple_of(channels));
    let positions = src.len() / channels;
    assert!(stride >= positions && dst.len() >= (channels - 1) * stride + positions);
    let (mut p8, mut c8) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx512 | Isa::Avx2) {
        (p8, c8) = (positions - positions % 8, channels - channels % 8);
        // SAFETY:
        // - AVX2: `isa` was detected on this CPU;
        // - the blocks lie inside both slices (`p8 <= positions`, `c8 <= channels`).
        unsafe { to_planes_avx2(src, (positions, channels), (p8, c8), (dst, stride)) };
    }
    let _ = isa;
    // What the blocks left out: channels past `c8` at every position, all channels at
    // positions past `p8` (position by position: `src` is read in order).
    for (p, src) in src.chunks_exact(channels).enumerate() {
        let from = if p < p8 { c8 } else { 0 };
        for (c, &v) in src.iter().enumerate().skip(from) {
            dst[c * stride + p] = v;
        }
    }
}

/// The `8 x 8` blocks of [`to_planes`] below `p8` positions and `c8` channels.
///
/// # Safety
/// AVX2; `p8 <= positions` and `c8 <= channels` are multiples of 8, `src` holds
/// `positions * channels` floats and `dst` `(channels - 1) * stride + positions`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn to_planes_avx2(
    src: &[f32],
    (positions, channels): (usize, usize),
    (p8, c8): (usize, usize),
    (dst, stride): (&mut [f32], usize),
) {
    assert!(
        p8 <= positions
            && c8 <= channels
            && src.len() == positions * channels
            && stride >= positions
            && dst.len() >= (channels - 1) * stride + positions
    );
    let (src, dst) = (src.as_ptr(), dst.as_mut_ptr());
    for p0 in (0..p8).step_by(8) {
        for c0 in (0..c8).step_by(8) {
            // SAFETY:
            // - positions `p0..p0 + 8 <= positions` and channels `c0..c0 + 8 <=
            //   channels`: every row read and column written lies inside the slices.
            unsafe {
                let at = src.add(p0 * channels + c0);
                let rows: [__m256; 8] =
                    std::array::from_fn(|k| _mm256_loadu_ps(at.add(k * channels)));
                let columns = crate::linalg::transpose8(rows);
                let to = dst.add(c0 * stride + p0);
                for (k, column) in columns.iter().enumerate() {
                    _mm256_storeu_ps(to.add(k * stride), *column);
                }
            }
        }
    }
}

mod kernels;
#[cfg(test)]
mod tests;
