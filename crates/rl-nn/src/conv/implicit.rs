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
//! - **Backward.** `backward.rs` reads the patches of the weight gradient from the same
//!   staged images.
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

use crate::pool::Pool;

/// Rows (output positions) per forward tile.
pub(super) const MR: usize = 6;
/// Columns (output channels) per forward panel.
pub(super) const NR: usize = 16;

/// The kernel taps a tile sums: rows `ky` and columns `kx`.
pub(super) type Window = [std::ops::Range<usize>; 2];

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

    /// Where the patch of each row `r0..r0 + bases.len()` (image, output position) starts
    /// in the staged images, walked without a division per row; asserts that every patch
    /// lies inside `staged_len` floats.
    pub(super) fn fill_bases(&self, r0: usize, bases: &mut [usize], staged_len: usize) {
        let p = self.positions();
        let (mut b, pos) = (r0 / p, r0 % p);
        let (mut oy, mut ox) = (pos / self.ow, pos % self.ow);
        let reach = self.col_offset(self.fan_in() - 1);
        for base in bases {
            *base = b * self.staged_len() + oy * self.sh * self.wp() + ox * self.sw;
            assert!(
                *base + reach < staged_len,
                "a patch outside the staged images"
            );
            ox += 1;
            if ox == self.ow {
                ox = 0;
                oy += 1;
                if oy == self.oh {
                    oy = 0;
                    b += 1;
                }
            }
        }
    }

    /// Where patch element `j` (channel, ky, kx) lies relative to its patch's start.
    pub(super) fn col_offset(&self, j: usize) -> usize {
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
            self.tile(isa, staged, panels, bias, relu, (r0, mr), output);
        }
    }

    /// Computes rows `r0..r0 + mr` (`mr <= 6`) of the product, every channel panel, from
    /// the staged images (the patches at [`Geometry::fill_bases`] in `staged`),
    /// and stores them NCHW into `output` with the bias (and ReLU if `relu`).
    #[expect(clippy::too_many_arguments, reason = "a row tile and its operands")]
    fn tile(
        &self,
        isa: Isa,
        staged: &[f32],
        panels: &[f32],
        bias: &[f32],
        relu: bool,
        (r0, mr): (usize, usize),
        output: &mut [f32],
    ) {
        let out = self.out;
        assert!((1..=MR).contains(&mr) && panels.len() >= self.panels_len());
        let window = [0..self.kh, 0..self.kw];
        // Rows past `mr` repeat the last (computed, never stored); every patch is staged.
        let mut bases = [0; MR];
        self.fill_bases(r0, &mut bases[..mr], staged.len());
        let last = bases[mr - 1];
        bases[mr..].fill(last);
        let panel_count = out.div_ceil(NR);
        let mut q = 0;
        while q < panel_count {
            let panel = &panels[q * self.fan_in() * NR..][..self.fan_in() * NR];
            let nr = NR.min(out - q * NR);
            #[cfg(target_arch = "x86_64")]
            if isa == Isa::Avx512 && q + 1 < panel_count {
                // Two panels side by side: one 32-channel AVX-512 tile.
                let next = &panels[(q + 1) * self.fan_in() * NR..][..self.fan_in() * NR];
                let mut acc = [[[0.0f32; NR]; MR]; 2];
                // SAFETY:
                // - `isa` was detected on this CPU: AVX-512F;
                // - every row's patch lies inside `staged` (asserted above) and both
                //   panels hold `fan_in * 16` floats.
                unsafe { direct_avx512(self, staged, (&bases, &window), [panel, next], &mut acc) };
                let nr2 = NR.min(out - (q + 1) * NR);
                self.store(isa, &acc[0], (r0, mr), (q * NR, nr), bias, relu, output);
                self.store(
                    isa,
                    &acc[1],
                    (r0, mr),
                    ((q + 1) * NR, nr2),
                    bias,
                    relu,
                    output,
                );
                q += 2;
                continue;
            }
            let mut acc = [[0.0f32; NR]; MR];
            match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 | Isa::Avx2 => {
                    // SAFETY:
                    // - `isa` was detected on this CPU, and both paths imply AVX2 and
                    //   FMA (`Isa::is_supported`);
                    // - every row's patch lies inside `staged` (`fill_bases` asserted
                    //   that its last float, the largest offset read, is) and
                    //   `panel` holds `fan_in * 16` floats.
                    unsafe { direct_avx2(self, staged, (&bases, &window), panel, &mut acc) }
                }
                _ => direct_portable(self, staged, (&bases, &window), panel, &mut acc),
            }
            self.store(isa, &acc, (r0, mr), (q * NR, nr), bias, relu, output);
            q += 1;
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
pub(super) fn direct_portable(
    g: &Geometry,
    staged: &[f32],
    (bases, window): (&[usize; MR], &Window),
    panel: &[f32],
    acc: &mut [[f32; NR]; MR],
) {
    for c in 0..g.cin {
        for ky in window[0].clone() {
            let off = c * g.plane() + ky * g.wp();
            for kx in window[1].clone() {
                let w = &panel[((c * g.kh + ky) * g.kw + kx) * NR..][..NR];
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
/// over the patch elements `p` whose taps `(ky, kx)` are in `window`, in `(channel, ky,
/// kx)` order, one FMA chain per element.
///
/// # Safety
/// AVX2 and FMA; `panel` holds `fan_in * 16` floats and every `bases[i] + offset(p)` is
/// inside `staged`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn direct_avx2(
    g: &Geometry,
    staged: &[f32],
    (bases, window): (&[usize; MR], &Window),
    panel: &[f32],
    out: &mut [[f32; NR]; MR],
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    let s = staged.as_ptr();
    let (plane, wp) = (g.plane(), g.wp());
    for c in 0..g.cin {
        for ky in window[0].clone() {
            let off = c * plane + ky * wp;
            let rows: [*const f32; MR] = std::array::from_fn(|i| s.wrapping_add(bases[i] + off));
            let mut b = panel
                .as_ptr()
                .wrapping_add(((c * g.kh + ky) * g.kw + window[1].start) * NR);
            for kx in window[1].clone() {
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

/// [`direct_avx2`] over two panels at once with AVX-512: `acc[h][i][j]` is element `(i,
/// j)` of panel `panels[h]`'s tile, each one FMA chain in the same order as
/// [`direct_avx2`]'s (the same bits).
///
/// # Safety
/// AVX-512F; both panels hold `fan_in * 16` floats and every `bases[i] + offset(p)` is
/// inside `staged`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn direct_avx512(
    g: &Geometry,
    staged: &[f32],
    (bases, window): (&[usize; MR], &Window),
    panels: [&[f32]; 2],
    out: &mut [[[f32; NR]; MR]; 2],
) {
    assert!(panels.iter().all(|p| p.len() >= g.fan_in() * NR));
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let s = staged.as_ptr();
    let (plane, wp) = (g.plane(), g.wp());
    for c in 0..g.cin {
        for ky in window[0].clone() {
            let off = c * plane + ky * wp;
            let rows: [*const f32; MR] = std::array::from_fn(|i| s.wrapping_add(bases[i] + off));
            let step = ((c * g.kh + ky) * g.kw + window[1].start) * NR;
            let (mut b0, mut b1) = (
                panels[0].as_ptr().wrapping_add(step),
                panels[1].as_ptr().wrapping_add(step),
            );
            for kx in window[1].clone() {
                // SAFETY:
                // - this step's 16 floats of each panel and each row's patch float are
                //   inside `panels` and `staged` by the contract.
                unsafe {
                    let w0 = _mm512_loadu_ps(b0);
                    let w1 = _mm512_loadu_ps(b1);
                    for (acc, row) in acc.iter_mut().zip(&rows) {
                        let x = _mm512_set1_ps(*row.add(kx));
                        acc[0] = _mm512_fmadd_ps(x, w0, acc[0]);
                        acc[1] = _mm512_fmadd_ps(x, w1, acc[1]);
                    }
                    b0 = b0.add(NR);
                    b1 = b1.add(NR);
                }
            }
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        // SAFETY:
        // - each row of each tile holds 16 floats.
        unsafe {
            _mm512_storeu_ps(out[0][i].as_mut_ptr(), acc[0]);
            _mm512_storeu_ps(out[1][i].as_mut_ptr(), acc[1]);
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
    let (staged_at, output_at) = (Shared::new(staged), Shared::new(output));
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

/// A workspace buffer's pointer, shared with the pool's tasks, each of which writes its
/// own part of the buffer (the convolution's passes: `by_images`, the output-gradient
/// layout, the weight and input gradients).
#[derive(Clone, Copy)]
pub(super) struct Shared(*mut f32);

impl Shared {
    /// Shares `buffer`'s pointer.
    pub(super) fn new(buffer: &mut [f32]) -> Self {
        Self(buffer.as_mut_ptr())
    }

    /// The pointer `offset` floats in (a method, so closures capture the whole wrapper).
    pub(super) fn at(self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

// SAFETY:
// - every user hands each task disjoint parts of the buffer behind the pointer and waits
//   for all tasks before the mutable borrow the pointer came from ends (`by_images`:
//   whole images; `backward.rs`: whole tiles of channels or blocks of patch columns;
//   `transposed.rs`: groups of images and one scratch slot per task).
unsafe impl Sync for Shared {}
