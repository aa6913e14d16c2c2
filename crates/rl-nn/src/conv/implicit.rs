//! Implicit GEMM for [`Conv2d`](super::Conv2d): the patches are never stored as a matrix.
//!
//! - **Staging.** Each image is copied once into the workspace, zero-padded and scaled
//!   (`/255` for bytes), image by image just before the tiles that read it, so that the
//!   copy is still in cache when they do. The backward pass reads the patches of the
//!   weight gradient from these copies.
//! - **Forward.** A direct microkernel: the product's rows are output positions, its
//!   columns output channels. Six rows at a time, it broadcasts each row's patch values
//!   straight from the staged image (six pointers, one per position, walked through the
//!   kernel's `(channel, ky, kx)` offsets) against `fan_in x 16` panels of `W^T` packed
//!   once per pass, with the 12 accumulators of the crate's 6 x 16 AVX2 tile. The tile is
//!   transposed in registers and stored NCHW with the bias (and ReLU) added, so there is
//!   no `rows x out` buffer and no separate sweep.
//! - **Weight gradient.** `dW = g patches` on the crate's blocked product, whose `rhs`
//!   panels [`Patches`] packs straight from the staged images (runs of `kw` floats, eight
//!   at a time with AVX2).
//! - **Input gradient.** Patch gradients of a few images at a time (a block that stays
//!   in L2), added back onto the input (col2im) with AVX2.
//!
//! Every output element is one chain of multiply-adds in a fixed order, whatever the
//! batch or the pool's size: results are bit-identical run to run on a given CPU kind.

#![allow(
    unsafe_code,
    reason = "SIMD intrinsics and raw-pointer microkernels; bounds are checked once up front"
)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use rl_core::simd::Isa;

use crate::linalg::PackRhs;
use crate::pool::Pool;

/// Rows (output positions) per forward tile.
pub(super) const MR: usize = 6;
/// Columns (output channels) per forward panel.
pub(super) const NR: usize = 16;

/// The shapes a convolution's kernels need, in the staged (padded) images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Geometry {
    /// Input channels.
    pub(super) cin: usize,
    /// Output channels.
    pub(super) out: usize,
    /// Kernel height and width.
    pub(super) kh: usize,
    /// Kernel width.
    pub(super) kw: usize,
    /// Vertical stride.
    pub(super) sh: usize,
    /// Horizontal stride.
    pub(super) sw: usize,
    /// Padding, vertically.
    pub(super) ph: usize,
    /// Padding, horizontally.
    pub(super) pw: usize,
    /// Input height.
    pub(super) h: usize,
    /// Input width.
    pub(super) w: usize,
    /// Output height.
    pub(super) oh: usize,
    /// Output width.
    pub(super) ow: usize,
}

impl Geometry {
    /// Padded height.
    pub(super) const fn hp(&self) -> usize {
        self.h + 2 * self.ph
    }

    /// Padded width.
    pub(super) const fn wp(&self) -> usize {
        self.w + 2 * self.pw
    }

    /// Floats of one staged channel.
    pub(super) const fn plane(&self) -> usize {
        self.hp() * self.wp()
    }

    /// Floats of one staged image.
    pub(super) const fn staged_len(&self) -> usize {
        self.cin * self.plane()
    }

    /// Output positions per image.
    pub(super) const fn positions(&self) -> usize {
        self.oh * self.ow
    }

    /// Patch length.
    pub(super) const fn fan_in(&self) -> usize {
        self.cin * self.kh * self.kw
    }

    /// Floats of the forward pass's `W^T` panels.
    pub(super) const fn panels_len(&self) -> usize {
        self.fan_in() * self.out.next_multiple_of(NR)
    }

    /// Where the patch of row `r` (image, output position) starts in the staged images.
    fn row_base(&self, r: usize) -> usize {
        let p = self.positions();
        let (b, pos) = (r / p, r % p);
        b * self.staged_len() + (pos / self.ow) * self.sh * self.wp() + (pos % self.ow) * self.sw
    }

    /// Where patch element `j` (channel, ky, kx) lies relative to its patch's start.
    fn col_offset(&self, j: usize) -> usize {
        let (c, rest) = (j / (self.kh * self.kw), j % (self.kh * self.kw));
        c * self.plane() + (rest / self.kw) * self.wp() + rest % self.kw
    }

    /// Copies image `b` of `x` into slot `b` of `staged`, scaled through `load`, inside
    /// its zero border (the border is never written: zero since the workspace was made).
    pub(super) fn stage<T: Copy>(
        &self,
        x: &[T],
        b: usize,
        staged: &mut [f32],
        load: &impl Fn(T) -> f32,
    ) {
        let (h, w, wp) = (self.h, self.w, self.wp());
        let image = &x[b * self.cin * h * w..][..self.cin * h * w];
        let slot = &mut staged[b * self.staged_len()..][..self.staged_len()];
        for (src, dst) in image
            .chunks_exact(h * w)
            .zip(slot.chunks_exact_mut(self.plane()))
        {
            for (row, out) in src.chunks_exact(w).zip(dst[self.ph * wp..].chunks_mut(wp)) {
                for (d, &s) in out[self.pw..self.pw + w].iter_mut().zip(row) {
                    *d = load(s);
                }
            }
        }
    }

    /// Packs the weight (`[out, in, kh, kw]`) as `fan_in x 16` panels of `W^T`, panel `q`
    /// at `panels[q * fan_in * 16..]`, columns past `out` zero.
    pub(super) fn pack_weight(&self, weight: &[f32], panels: &mut [f32]) {
        let fan_in = self.fan_in();
        for (q, panel) in panels[..self.panels_len()]
            .chunks_exact_mut(fan_in * NR)
            .enumerate()
        {
            for (p, row) in panel.chunks_exact_mut(NR).enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    let o = q * NR + j;
                    *v = if o < self.out {
                        weight[o * fan_in + p]
                    } else {
                        0.0
                    };
                }
            }
        }
    }

    /// The forward pass over the images of `x` (this task's share): stages each image
    /// into `staged`, then computes `output` (NCHW, these images) from the packed
    /// `panels` and `bias`, with ReLU if `relu`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one task's slices of the workspace"
    )]
    pub(super) fn forward<T: Copy>(
        &self,
        isa: Isa,
        x: &[T],
        load: &impl Fn(T) -> f32,
        staged: &mut [f32],
        panels: &[f32],
        bias: &[f32],
        relu: bool,
        output: &mut [f32],
    ) {
        let (p, out) = (self.positions(), self.out);
        let images = output.len() / (out * p);
        assert!(
            staged.len() == images * self.staged_len()
                && panels.len() >= self.panels_len()
                && bias.len() == out
        );
        let rows = images * p;
        let mut ready = 0;
        for r0 in (0..rows).step_by(MR) {
            let mr = MR.min(rows - r0);
            let last = (r0 + mr - 1) / p;
            while ready <= last {
                self.stage(x, ready, staged, load);
                ready += 1;
            }
            let bases: [usize; MR] = std::array::from_fn(|i| self.row_base(r0 + i.min(mr - 1)));
            // The furthest float any row's patch reaches must be staged.
            let reach = self.col_offset(self.fan_in() - 1);
            assert!(bases.iter().all(|&b| b + reach < staged.len()));
            for q in 0..out.div_ceil(NR) {
                let panel = &panels[q * self.fan_in() * NR..][..self.fan_in() * NR];
                let nr = NR.min(out - q * NR);
                let mut acc = [[0.0f32; NR]; MR];
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 | Isa::Avx2 => {
                        // SAFETY:
                        // - `isa` was detected on this CPU, and both paths imply AVX2 and
                        //   FMA (`Isa::is_supported`);
                        // - every row's patch lies inside `staged` (asserted: the patch's
                        //   last float, `bases[i] + reach`, is the largest offset read) and
                        //   `panel` holds `fan_in * 16` floats.
                        unsafe { direct_avx2(self, staged, &bases, panel, &mut acc) }
                    }
                    _ => direct_portable(self, staged, &bases, panel, &mut acc),
                }
                self.store(isa, &acc, (r0, mr), (q * NR, nr), bias, relu, output);
            }
        }
    }

    /// Stores tile `acc` (rows `r0..r0 + mr`, channels `o0..o0 + nr`) into the NCHW
    /// `output` with the bias (and ReLU).
    #[expect(clippy::too_many_arguments, reason = "a tile and where it goes")]
    fn store(
        &self,
        isa: Isa,
        acc: &[[f32; NR]; MR],
        (r0, mr): (usize, usize),
        (o0, nr): (usize, usize),
        bias: &[f32],
        relu: bool,
        output: &mut [f32],
    ) {
        let p = self.positions();
        let (b, pos) = (r0 / p, r0 % p);
        // Full tile inside one image, with room for 8-lane stores along each channel:
        // the two extra lanes land on positions the next tile of this image writes.
        #[cfg(target_arch = "x86_64")]
        if matches!(isa, Isa::Avx512 | Isa::Avx2) && mr == MR && nr == NR && pos + 8 <= p {
            let image = &mut output[b * self.out * p..][..self.out * p];
            // SAFETY:
            // - AVX2 as above;
            // - channel `o0 + j < out` and positions `pos..pos + 8 <= p` lie inside
            //   `image`, and `bias` holds `o0 + 16 <= out` floats (`nr == 16`).
            unsafe { store_avx2(acc, &bias[o0..o0 + NR], relu, &mut image[o0 * p + pos..], p) };
            return;
        }
        let _ = isa;
        for (i, row) in acc.iter().enumerate().take(mr) {
            let (b, pos) = ((r0 + i) / p, (r0 + i) % p);
            for (j, &v) in row.iter().enumerate().take(nr) {
                let o = o0 + j;
                let z = v + bias[o];
                output[(b * self.out + o) * p + pos] = if relu { z.max(0.0) } else { z };
            }
        }
    }
}

/// [`direct_avx2`] in plain Rust.
fn direct_portable(
    g: &Geometry,
    staged: &[f32],
    bases: &[usize; MR],
    panel: &[f32],
    acc: &mut [[f32; NR]; MR],
) {
    let mut b = panel.chunks_exact(NR);
    for c in 0..g.cin {
        for ky in 0..g.kh {
            let off = c * g.plane() + ky * g.wp();
            for kx in 0..g.kw {
                let Some(w) = b.next() else { return };
                for (acc, &base) in acc.iter_mut().zip(bases) {
                    let x = staged[base + off + kx];
                    for (a, &w) in acc.iter_mut().zip(w) {
                        *a += x * w;
                    }
                }
            }
        }
    }
}

/// The forward tile: `acc[i][j] = sum_p staged[bases[i] + offset(p)] * panel[p * 16 + j]`
/// over the patch, `p` in `(channel, ky, kx)` order, one FMA chain per element.
///
/// # Safety
/// AVX2 and FMA; `panel` holds `fan_in * 16` floats and every `bases[i] + offset(p)` is
/// inside `staged`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn direct_avx2(
    g: &Geometry,
    staged: &[f32],
    bases: &[usize; MR],
    panel: &[f32],
    out: &mut [[f32; NR]; MR],
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    let s = staged.as_ptr();
    let mut b = panel.as_ptr();
    let (plane, wp, kw) = (g.plane(), g.wp(), g.kw);
    for c in 0..g.cin {
        for ky in 0..g.kh {
            let off = c * plane + ky * wp;
            let rows: [*const f32; MR] = std::array::from_fn(|i| s.wrapping_add(bases[i] + off));
            for kx in 0..kw {
                // SAFETY:
                // - this step's 16 panel floats and each row's patch float are inside
                //   `panel` and `staged` by the contract.
                unsafe {
                    let b0 = _mm256_loadu_ps(b);
                    let b1 = _mm256_loadu_ps(b.add(8));
                    for (acc, row) in acc.iter_mut().zip(&rows) {
                        let x = _mm256_broadcast_ss(&*row.add(kx));
                        acc[0] = _mm256_fmadd_ps(x, b0, acc[0]);
                        acc[1] = _mm256_fmadd_ps(x, b1, acc[1]);
                    }
                    b = b.add(NR);
                }
            }
        }
    }
    for (dst, acc) in out.iter_mut().zip(&acc) {
        // SAFETY:
        // - each row of `out` holds 16 floats.
        unsafe {
            _mm256_storeu_ps(dst.as_mut_ptr(), acc[0]);
            _mm256_storeu_ps(dst.as_mut_ptr().add(8), acc[1]);
        }
    }
}

/// Stores a full tile transposed: channel `j` of `acc` (six positions) plus `bias[j]`
/// (ReLU if `relu`) at `dst[j * positions..]`, eight lanes wide (two lanes past the tile).
///
/// # Safety
/// AVX2; `bias` holds 16 floats and `dst` at least `15 * positions + 8`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn store_avx2(
    acc: &[[f32; NR]; MR],
    bias: &[f32],
    relu: bool,
    dst: &mut [f32],
    positions: usize,
) {
    assert!(bias.len() >= NR && dst.len() >= (NR - 1) * positions + 8);
    for v in 0..2 {
        let rows: [__m256; 8] = std::array::from_fn(|i| {
            if i < MR {
                // SAFETY:
                // - row `i` holds 16 floats: lanes `8v..8v + 8` are inside it.
                unsafe { _mm256_loadu_ps(acc[i][8 * v..].as_ptr()) }
            } else {
                _mm256_setzero_ps()
            }
        });
        let columns = crate::linalg::transpose8(rows);
        for (j, col) in columns.iter().enumerate() {
            let o = 8 * v + j;
            let mut z = _mm256_add_ps(*col, _mm256_set1_ps(bias[o]));
            if relu {
                z = _mm256_max_ps(z, _mm256_setzero_ps());
            }
            let at = &mut dst[o * positions..o * positions + 8];
            // SAFETY:
            // - `at` holds 8 floats.
            unsafe { _mm256_storeu_ps(at.as_mut_ptr(), z) };
        }
    }
}

/// The patches of a batch as the `rows x fan_in` right operand of the weight gradient
/// (`dW = g patches`), packed block by block from the staged images.
pub(super) struct Patches<'a> {
    /// The geometry.
    pub(super) geometry: Geometry,
    /// The staged images.
    pub(super) staged: &'a [f32],
    /// Rows: images times output positions.
    pub(super) rows: usize,
    /// The instruction set the copies use.
    pub(super) isa: Isa,
}

impl PackRhs for Patches<'_> {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.geometry.fan_in()
    }

    fn pack(&self, panels: &mut [f32], pc: usize, kc: usize, jc: usize, nc: usize, nr: usize) {
        let g = &self.geometry;
        assert!(nr <= 64, "panels wider than 64 columns");
        // Each row's patch start, walked incrementally (no division per row), in blocks.
        const BLOCK: usize = 256;
        let mut bases = [0usize; BLOCK];
        let (p_len, ow, wp) = (g.positions(), g.ow, g.wp());
        let (mut b, pos) = (pc / p_len, pc % p_len);
        let (mut oy, mut ox) = (pos / ow, pos % ow);
        for p0 in (0..kc).step_by(BLOCK) {
            let rows = BLOCK.min(kc - p0);
            for base in &mut bases[..rows] {
                *base = b * g.staged_len() + oy * g.sh * wp + ox * g.sw;
                ox += 1;
                if ox == ow {
                    ox = 0;
                    oy += 1;
                    if oy == g.oh {
                        oy = 0;
                        b += 1;
                    }
                }
            }
            let packed = kc * nc.next_multiple_of(nr);
            for q in 0..packed / (kc * nr) {
                // This panel and the ones after it: an 8-lane copy may spill into the
                // next row, which is written after it.
                let panel = &mut panels[q * kc * nr..packed];
                let j0 = jc + q * nr;
                let width = nr.min(jc + nc - j0);
                // Runs of the panel's columns that are contiguous in a patch: (offset in
                // the patch, first column in the panel, length), at most `nr` of them.
                let mut runs = [(0usize, 0usize, 0usize); 64];
                let mut count = 0;
                let mut j = 0;
                while j < width {
                    let len = (g.kw - (j0 + j) % g.kw).min(width - j);
                    runs[count] = (g.col_offset(j0 + j), j, len);
                    count += 1;
                    j += len;
                }
                let runs = &runs[..count];
                for (p, &base) in (p0..p0 + rows).zip(&bases[..rows]) {
                    copy_runs(self.isa, self.staged, base, runs, &mut panel[p * nr..]);
                }
            }
        }
    }
}

/// Copies each run `(offset, column, len)` of `staged[base + offset..]` into
/// `row[column..column + len]`; `row` may go on past the row (later rows, which are
/// written after it).
fn copy_runs(
    isa: Isa,
    staged: &[f32],
    base: usize,
    runs: &[(usize, usize, usize)],
    row: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx512 | Isa::Avx2) {
        // SAFETY:
        // - AVX2 as `Isa::is_supported` guarantees for both paths.
        unsafe { copy_runs_avx2(staged, base, runs, row) };
        return;
    }
    let _ = isa;
    for &(offset, column, len) in runs {
        row[column..column + len].copy_from_slice(&staged[base + offset..][..len]);
    }
}

/// [`copy_runs`] eight floats at a time: a run of at most 8 is one unaligned 8-lane copy
/// when both sides have room (the extra lanes land on columns later runs or rows
/// overwrite, or past the panel's width, which the kernels never read), else masked.
///
/// # Safety
/// AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_runs_avx2(
    staged: &[f32],
    base: usize,
    runs: &[(usize, usize, usize)],
    row: &mut [f32],
) {
    for &(offset, column, len) in runs {
        let start = base + offset;
        if len <= 8 && column + 8 <= row.len() && start + 8 <= staged.len() {
            let src = &staged[start..start + 8];
            let dst = &mut row[column..column + 8];
            // SAFETY:
            // - `src` and `dst` hold 8 floats each.
            unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), _mm256_loadu_ps(src.as_ptr())) };
        } else if len <= 8 {
            let src = &staged[start..start + len];
            let dst = &mut row[column..column + len];
            let mask = crate::linalg::mask8(len);
            // SAFETY:
            // - the mask enables exactly `len` lanes, inside `src` and `dst`, and
            //   `vmaskmovps` does not access the others.
            unsafe {
                _mm256_maskstore_ps(
                    dst.as_mut_ptr(),
                    mask,
                    _mm256_maskload_ps(src.as_ptr(), mask),
                );
            }
        } else {
            row[column..column + len].copy_from_slice(&staged[start..start + len]);
        }
    }
}

/// Adds the patch gradients of `images` images (`dcols`, `rows x fan_in`) onto their
/// input gradients `dx` (col2im), rows in order.
pub(super) fn col2im(g: &Geometry, isa: Isa, dcols: &[f32], images: usize, dx: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if matches!(isa, Isa::Avx512 | Isa::Avx2) {
        // SAFETY:
        // - AVX2 as `Isa::is_supported` guarantees for both paths.
        unsafe { col2im_avx2(g, dcols, images, dx) };
        return;
    }
    let _ = isa;
    col2im_portable(g, dcols, images, dx);
}

/// [`col2im`] with each kernel row of at most 8 floats added as one masked 8-lane
/// vector (lanes past the row add nothing: `vmaskmovps` reads them as `+0.0`, and
/// `x + 0.0 == x` for every `x` a sum from `+0.0` can reach).
///
/// # Safety
/// AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn col2im_avx2(g: &Geometry, dcols: &[f32], images: usize, dx: &mut [f32]) {
    if g.kw > 8 {
        col2im_portable(g, dcols, images, dx);
        return;
    }
    let (height, width) = (g.h, g.w);
    let (kh, kw, sh, sw, ph, pw) = (g.kh, g.kw, g.sh, g.sw, g.ph, g.pw);
    let plane = height * width;
    let fan_in = g.fan_in();
    let mut rows = dcols[..images * g.positions() * fan_in].chunks_exact(fan_in);
    for image in dx.chunks_exact_mut(g.cin * plane).take(images) {
        for oy in 0..g.oh {
            let y0 = oy * sh;
            for ox in 0..g.ow {
                let Some(row) = rows.next() else { return };
                let x0 = ox * sw;
                let lo = pw.saturating_sub(x0).min(kw);
                let hi = (width + pw).saturating_sub(x0).clamp(lo, kw);
                if lo == hi {
                    continue;
                }
                let mask = crate::linalg::mask8(hi - lo);
                for (c, channel) in row.chunks_exact(kh * kw).enumerate() {
                    for (ky, seg) in channel.chunks_exact(kw).enumerate() {
                        let iy = y0 + ky;
                        if iy < ph || iy - ph >= height {
                            continue;
                        }
                        let start = c * plane + (iy - ph) * width + x0 + lo - pw;
                        let src = &seg[lo..hi];
                        let wide = start + 8 <= image.len();
                        let dst = &mut image[start..start + if wide { 8 } else { hi - lo }];
                        // SAFETY:
                        // - the mask enables exactly `hi - lo` lanes, inside `src`; `dst`
                        //   holds all 8 lanes when `wide` (the others stored back
                        //   unchanged: `x + 0.0`), else exactly the masked ones, and
                        //   `vmaskmovps` does not access the others.
                        unsafe {
                            let g = _mm256_maskload_ps(src.as_ptr(), mask);
                            let d = dst.as_mut_ptr();
                            if wide {
                                _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), g));
                            } else {
                                let sum = _mm256_add_ps(_mm256_maskload_ps(d, mask), g);
                                _mm256_maskstore_ps(d, mask, sum);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The scatter of [`col2im`].
fn col2im_portable(g: &Geometry, dcols: &[f32], images: usize, dx: &mut [f32]) {
    let (height, width) = (g.h, g.w);
    let (kh, kw, sh, sw, ph, pw) = (g.kh, g.kw, g.sh, g.sw, g.ph, g.pw);
    let plane = height * width;
    let fan_in = g.fan_in();
    let mut rows = dcols[..images * g.positions() * fan_in].chunks_exact(fan_in);
    for image in dx.chunks_exact_mut(g.cin * plane).take(images) {
        for oy in 0..g.oh {
            let y0 = oy * sh;
            for ox in 0..g.ow {
                let Some(row) = rows.next() else { return };
                let x0 = ox * sw;
                let lo = pw.saturating_sub(x0).min(kw);
                let hi = (width + pw).saturating_sub(x0).clamp(lo, kw);
                if lo == hi {
                    continue;
                }
                for (c, channel) in row.chunks_exact(kh * kw).enumerate() {
                    for (ky, seg) in channel.chunks_exact(kw).enumerate() {
                        let iy = y0 + ky;
                        if iy < ph || iy - ph >= height {
                            continue;
                        }
                        let start = c * plane + (iy - ph) * width + x0 + lo - pw;
                        let dst = &mut image[start..start + (hi - lo)];
                        for (d, &g) in dst.iter_mut().zip(&seg[lo..hi]) {
                            *d += g;
                        }
                    }
                }
            }
        }
    }
}

/// One task of [`by_images`]: its images, their staged slots and their outputs.
pub(super) type ImageTask<'a> = dyn Fn(std::ops::Range<usize>, &mut [f32], &mut [f32]) + Sync + 'a;

/// Runs `run(images, staged, output)` over blocks of whole images, one block per thread
/// of `pool` (all on the calling thread without one): `staged` and `output` hold
/// `staged_len` and `out_len` floats per image, and each call gets its images' slots.
pub(super) fn by_images(
    pool: Option<&Pool>,
    (staged, staged_len): (&mut [f32], usize),
    (output, out_len): (&mut [f32], usize),
    run: &ImageTask<'_>,
) {
    let batch = output.len() / out_len.max(1);
    assert!(staged.len() == batch * staged_len && output.len() == batch * out_len);
    let threads = pool.map_or(1, Pool::threads).min(batch);
    let (Some(pool), true) = (pool, threads > 1) else {
        run(0..batch, staged, output);
        return;
    };
    let per_task = batch.div_ceil(threads);
    let tasks = batch.div_ceil(per_task);
    let (staged_at, output_at) = (Shared(staged.as_mut_ptr()), Shared(output.as_mut_ptr()));
    pool.run(tasks, &|task| {
        let images = task * per_task..((task + 1) * per_task).min(batch);
        let n = images.len();
        // SAFETY:
        // - `staged` and `output` are borrowed mutably for this whole call, which returns
        //   only after every task has finished;
        // - task `task` touches the slots of images `images` only: disjoint between tasks,
        //   inside the slices (`images.end <= batch`, asserted lengths).
        let (staged, output) = unsafe {
            (
                std::slice::from_raw_parts_mut(
                    staged_at.at(images.start * staged_len),
                    n * staged_len,
                ),
                std::slice::from_raw_parts_mut(output_at.at(images.start * out_len), n * out_len),
            )
        };
        run(images, staged, output);
    });
}

/// A workspace buffer's pointer, shared with the pool's tasks (each writes its own
/// images).
#[derive(Clone, Copy)]
struct Shared(*mut f32);

impl Shared {
    /// The pointer `offset` floats in (a method, so closures capture the whole wrapper).
    fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

// SAFETY:
// - `by_images` gives each task disjoint images behind the pointer and waits for all of
//   them before the borrow it came from ends.
unsafe impl Sync for Shared {}
