//! The input gradient's product kernels: the forward pass's direct tile (six rows, 16 or
//! 2 x 16 columns) over staged gradients laid out channels-last, `[row][column][channel]`
//! per image, summing over `(ky, kx, channel)` with the channel fastest.
//!
//! Channels-last keeps a tile's reads together: its six rows are one block in six
//! images, and with planes (`[channel][row][column]`) each row touched a cache line per
//! channel and tap row (48 KiB for the Nature CNN's second layer: more than L1, so every
//! broadcast came from L2, and AVX2's two passes per 32 columns paid it twice). Here a
//! row's taps are `taps x channels` consecutive floats (1-2 KiB), and the loop over the
//! channels is the long inner loop.

#![allow(
    unsafe_code,
    reason = "SIMD intrinsics and raw-pointer microkernels; bounds are checked once up front"
)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use crate::conv::implicit::{Geometry, MR, NR, Window};

/// The float a tap `(ky, kx)` of channel 0 reads, from a row's start, in a product
/// `g` staged channels-last (`g.w` columns of `g.cin` channels per frame row).
const fn tap(g: &Geometry, ky: usize, kx: usize) -> usize {
    (ky * g.w + kx) * g.cin
}

/// The furthest float a row's patch reaches from its start.
pub(super) const fn reach(g: &Geometry) -> usize {
    tap(g, g.kh - 1, g.kw - 1) + g.cin - 1
}

/// Where the panel row of tap `(ky, kx)`, channel 0, starts (`[(ky, kx, c)][16]`).
const fn panel_row(g: &Geometry, ky: usize, kx: usize) -> usize {
    (ky * g.kw + kx) * g.cin * NR
}

/// `acc[i][j] = sum staged[bases[i] + tap(ky, kx) + c] * panel[((ky, kx, c)) * 16 + j]`
/// over the taps in `window` and every channel, in `(ky, kx, c)` order.
pub(super) fn portable(
    g: &Geometry,
    staged: &[f32],
    (bases, window): (&[usize; MR], &Window),
    panel: &[f32],
    acc: &mut [[f32; NR]; MR],
) {
    *acc = [[0.0; NR]; MR];
    for ky in window[0].clone() {
        for kx in window[1].clone() {
            let (off, row) = (tap(g, ky, kx), panel_row(g, ky, kx));
            for c in 0..g.cin {
                let w = &panel[row + c * NR..][..NR];
                for (acc, &base) in acc.iter_mut().zip(bases) {
                    let x = staged[base + off + c];
                    for (a, &w) in acc.iter_mut().zip(w) {
                        *a += x * w;
                    }
                }
            }
        }
    }
}

/// [`portable`] with AVX2 and FMA: each element the same chain of multiply-adds.
///
/// # Safety
/// AVX2 and FMA; `panel` holds `fan_in * 16` floats and every `bases[i] + reach(g)` is
/// inside `staged`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn avx2(
    g: &Geometry,
    staged: &[f32],
    (bases, window): (&[usize; MR], &Window),
    panel: &[f32],
    out: &mut [[f32; NR]; MR],
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; MR];
    let s = staged.as_ptr();
    for ky in window[0].clone() {
        for kx in window[1].clone() {
            let off = tap(g, ky, kx);
            let rows: [*const f32; MR] = std::array::from_fn(|i| s.wrapping_add(bases[i] + off));
            let mut b = panel.as_ptr().wrapping_add(panel_row(g, ky, kx));
            for c in 0..g.cin {
                // SAFETY:
                // - this step's 16 panel floats and each row's float are inside `panel`
                //   and `staged` by the contract.
                unsafe {
                    let b0 = _mm256_loadu_ps(b);
                    let b1 = _mm256_loadu_ps(b.add(8));
                    for (acc, row) in acc.iter_mut().zip(&rows) {
                        let x = _mm256_broadcast_ss(&*row.add(c));
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

/// [`avx2`] over two panels at once with AVX-512: `out[h]` is panel `panels[h]`'s tile,
/// each element the same chain (the same bits).
///
/// # Safety
/// AVX-512F; both panels hold `fan_in * 16` floats and every `bases[i] + reach(g)` is
/// inside `staged`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn avx512(
    g: &Geometry,
    staged: &[f32],
    (bases, window): (&[usize; MR], &Window),
    panels: [&[f32]; 2],
    out: &mut [[[f32; NR]; MR]; 2],
) {
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    let s = staged.as_ptr();
    for ky in window[0].clone() {
        for kx in window[1].clone() {
            let off = tap(g, ky, kx);
            let rows: [*const f32; MR] = std::array::from_fn(|i| s.wrapping_add(bases[i] + off));
            let step = panel_row(g, ky, kx);
            let (mut b0, mut b1) = (
                panels[0].as_ptr().wrapping_add(step),
                panels[1].as_ptr().wrapping_add(step),
            );
            for c in 0..g.cin {
                // SAFETY:
                // - this step's 16 floats of each panel and each row's float are inside
                //   `panels` and `staged` by the contract.
                unsafe {
                    let w0 = _mm512_loadu_ps(b0);
                    let w1 = _mm512_loadu_ps(b1);
                    for (acc, row) in acc.iter_mut().zip(&rows) {
                        let x = _mm512_set1_ps(*row.add(c));
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
