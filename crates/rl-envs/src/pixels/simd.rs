//! AVX2 forms of the pixel functions' inner loops, each computing exactly what the plain
//! Rust loop beside its caller computes (the same integer arithmetic for grayscale; the
//! same `f32` multiplies and adds, in the same order per output, for the area resize's
//! horizontal taps), so that every instruction set gives the same bytes.

#![allow(
    unsafe_code,
    reason = "SIMD intrinsics in functions compiled for AVX2, called once the CPU is checked"
)]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use rl_core::simd::Isa;

use super::{GRAY_SHIFT, GRAY_WEIGHTS};

/// Converts as many leading pixels of `rgb` to `gray` as `isa`'s loop takes (a multiple
/// of 16 with AVX2, none without), as [`rgb_to_gray`](super::rgb_to_gray) does, and
/// returns how many; the caller converts the rest.
///
/// # Panics
/// Unless `rgb.len() >= 3 * gray.len()`.
pub(super) fn gray(isa: Isa, rgb: &[u8], gray: &mut [u8]) -> usize {
    assert!(rgb.len() >= 3 * gray.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` was detected on this CPU (both imply AVX2); lengths asserted.
        Isa::Avx512 | Isa::Avx2 => unsafe { gray_avx2(rgb, gray) },
        _ => 0,
    }
}

/// The horizontal taps of an area resize laid out for AVX2 gathers: each output's first
/// source pixel and its `k` weights, by chunks of 8 outputs.
#[derive(Clone, Debug)]
pub(super) struct GatherTaps {
    isa: Isa,
    firsts: Vec<i32>,
    /// `[chunk][j][lane]`, whole chunks only.
    weights: Vec<f32>,
    k: usize,
    /// Per whole chunk, where its window of [`WINDOW`] source pixels starts, when all of
    /// its taps lie inside one (else `None`: its taps are gathered).
    windows: Vec<Option<usize>>,
    /// `[chunk][j][lane]`: each tap's pixel in its chunk's window.
    in_window: Vec<i32>,
    /// Floats a line must hold: the furthest `first + k` or window end.
    reach: usize,
}

/// Source pixels one chunk of 8 outputs reads from registers (three of 8) instead of
/// gathering: enough for shrinking by up to `(24 - k) / 7` (about 3 for `k = 3`).
const WINDOW: usize = 24;

impl GatherTaps {
    /// From each output's first pixel `first[d]` and weights `weights[d * k..][..k]`;
    /// the taps stay with the plain loop (`isa` [`Isa::Scalar`]) where the indices do
    /// not fit `i32`.
    pub(super) fn new(isa: Isa, first: &[usize], weights: &[f32], k: usize) -> Self {
        let chunks = first.len() / TAP_LANES;
        let mut windows = Vec::with_capacity(chunks);
        let mut in_window = Vec::with_capacity(chunks * k * TAP_LANES);
        for chunk in first.chunks_exact(TAP_LANES) {
            let base = chunk.iter().copied().min().unwrap_or(0);
            let end = chunk.iter().map(|&f| f + k).max().unwrap_or(0);
            let fits = end - base <= WINDOW;
            windows.push(fits.then_some(base));
            for j in 0..k {
                in_window.extend(
                    chunk
                        .iter()
                        .map(|&f| if fits { (f + j - base) as i32 } else { 0 }),
                );
            }
        }
        let reach = first
            .iter()
            .map(|&f| f + k)
            .chain(windows.iter().flatten().map(|&base| base + WINDOW))
            .max()
            .unwrap_or(0);
        let isa = if i32::try_from(reach).is_ok() {
            isa
        } else {
            Isa::Scalar
        };
        let mut by_tap = Vec::with_capacity(first.len() / TAP_LANES * TAP_LANES * k);
        for chunk in weights.chunks_exact(TAP_LANES * k) {
            for j in 0..k {
                by_tap.extend((0..TAP_LANES).map(|lane| chunk[lane * k + j]));
            }
        }
        Self {
            isa,
            firsts: first.iter().map(|&f| f as i32).collect(),
            weights: by_tap,
            k,
            windows,
            in_window,
            reach,
        }
    }

    /// Floats a line must hold for [`GatherTaps::sum`] (its zeros past the image are
    /// read, times zero weights or not at all).
    pub(super) fn reach(&self) -> usize {
        self.reach
    }

    /// Sums as many leading outputs of `out` as the instruction set takes (whole chunks
    /// of 8 with AVX2, none without) from `line`, as the plain loop would, and returns
    /// how many.
    ///
    /// # Panics
    /// Unless `line` holds the taps' reach and `out` at most the outputs they were made
    /// for.
    pub(super) fn sum(&self, line: &[f32], out: &mut [f32]) -> usize {
        assert!(line.len() >= self.reach && out.len() <= self.firsts.len());
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `isa` was detected on this CPU (both imply AVX2); the firsts and
            // weights cover `out` (asserted: `out.len() <= firsts.len()`, and the
            // weights hold every whole chunk), every `first + k <= reach <= line.len()`
            // and `reach` fits `i32`.
            Isa::Avx512 | Isa::Avx2 => unsafe { taps_avx2(self, line, out) },
            _ => 0,
        }
    }
}

/// Pixels [`gray_avx2`] converts per iteration.
const GRAY_BLOCK: usize = 16;

/// Converts the first `gray.len() / 16 * 16` pixels of `rgb` to `gray` as
/// [`rgb_to_gray`](super::rgb_to_gray) does, and returns how many it converted: each 16
/// pixels are split into their red, green and blue bytes by byte shuffles, widened to 16
/// bits, weighted in pairs (`madd`: `r wr + g wg` and `b wb + 2^14`) into 32-bit sums,
/// shifted and packed back to bytes.
///
/// # Safety
/// AVX2; `rgb.len() >= 3 * gray.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gray_avx2(rgb: &[u8], gray: &mut [u8]) -> usize {
    assert!(rgb.len() >= 3 * gray.len());
    // Where each channel's bytes sit in the three 16-byte loads of 16 pixels (-1: none).
    const fn mask(channel: usize, part: usize) -> [i8; 16] {
        let mut m = [-1i8; 16];
        let mut p = 0;
        while p < 16 {
            let byte = 3 * p + channel;
            if byte / 16 == part {
                m[p] = (byte % 16) as i8;
            }
            p += 1;
        }
        m
    }
    let load = |m: [i8; 16]| {
        // SAFETY: `m` holds 16 bytes.
        unsafe { _mm_loadu_si128(m.as_ptr().cast()) }
    };
    let masks: [[__m128i; 3]; 3] =
        std::array::from_fn(|c| std::array::from_fn(|part| load(mask(c, part))));
    let [wr, wg, wb] = GRAY_WEIGHTS.map(|w| w as i16);
    let rg_weights = _mm256_set1_epi32(i32::from(wr) & 0xffff | i32::from(wg) << 16);
    let b_weights = _mm256_set1_epi32(i32::from(wb) & 0xffff | 1 << 16);
    let round = _mm256_set1_epi16(1 << (GRAY_SHIFT - 1));
    let blocks = gray.len() / GRAY_BLOCK;
    let (src, dst) = (rgb.as_ptr(), gray.as_mut_ptr());
    for i in 0..blocks {
        // SAFETY: block `i`'s 48 source bytes and 16 destination bytes are inside the
        // slices (`i < blocks`, `rgb.len() >= 3 * gray.len()`).
        unsafe {
            let at = src.add(3 * GRAY_BLOCK * i);
            let parts = [0, 16, 32].map(|o| _mm_loadu_si128(at.add(o).cast()));
            let channel = |c: usize| {
                let [a, b, d] = masks[c];
                _mm_or_si128(
                    _mm_or_si128(_mm_shuffle_epi8(parts[0], a), _mm_shuffle_epi8(parts[1], b)),
                    _mm_shuffle_epi8(parts[2], d),
                )
            };
            let (r, g, b) = (
                _mm256_cvtepu8_epi16(channel(0)),
                _mm256_cvtepu8_epi16(channel(1)),
                _mm256_cvtepu8_epi16(channel(2)),
            );
            // Pairs (r, g) and (b, 2^14) per pixel, weighted and summed in 32 bits.
            let sum = |rg: __m256i, b1: __m256i| {
                _mm256_srli_epi32::<{ GRAY_SHIFT as i32 }>(_mm256_add_epi32(
                    _mm256_madd_epi16(rg, rg_weights),
                    _mm256_madd_epi16(b1, b_weights),
                ))
            };
            let low = sum(_mm256_unpacklo_epi16(r, g), _mm256_unpacklo_epi16(b, round));
            let high = sum(_mm256_unpackhi_epi16(r, g), _mm256_unpackhi_epi16(b, round));
            // `packus` undoes the unpacks' order within each 128-bit lane.
            let words = _mm256_packus_epi32(low, high);
            let bytes = _mm_packus_epi16(
                _mm256_castsi256_si128(words),
                _mm256_extracti128_si256::<1>(words),
            );
            _mm_storeu_si128(dst.add(GRAY_BLOCK * i).cast(), bytes);
        }
    }
    blocks * GRAY_BLOCK
}

/// Output columns [`taps_avx2`] sums side by side.
const TAP_LANES: usize = 8;

/// The horizontal taps of the first `out.len() / 8 * 8` outputs, as
/// [`Horizontal::sum_line`](super::Horizontal) sums them: output `d`'s sum starts at
/// `+0.0` and adds `line[first[d] + j] * weight[d][j]` for `j` in `0..k`, in order, one
/// multiply and one add each. A chunk whose taps lie in one window of 24 pixels reads
/// them from three registers by permutes and blends; another gathers them. Returns how
/// many outputs it wrote.
///
/// # Safety
/// AVX2; `taps` were made for at least `out.len()` outputs, `line.len() >= taps.reach`,
/// and `taps.reach` fits `i32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn taps_avx2(taps: &GatherTaps, line: &[f32], out: &mut [f32]) -> usize {
    let (k, chunks) = (taps.k, out.len() / TAP_LANES);
    assert!(
        taps.firsts.len() >= out.len()
            && taps.windows.len() >= chunks
            && taps.weights.len() >= chunks * TAP_LANES * k
            && taps.in_window.len() >= chunks * TAP_LANES * k
            && line.len() >= taps.reach
    );
    let (seven, fifteen) = (_mm256_set1_epi32(7), _mm256_set1_epi32(15));
    for (c, window) in taps.windows[..chunks].iter().enumerate() {
        let at = c * TAP_LANES * k;
        // SAFETY:
        // - chunk `c`'s 8 firsts, its `8 k` weights and window indices, and its 8
        //   outputs are inside the slices (asserted);
        // - a window `base..base + 24` and each gathered `firsts[d] + j` lie below
        //   `reach <= line.len()`.
        unsafe {
            let w = taps.weights.as_ptr().add(at);
            let mut sum = _mm256_setzero_ps();
            if let Some(base) = *window {
                let p = line.as_ptr().add(base);
                let regs = [
                    _mm256_loadu_ps(p),
                    _mm256_loadu_ps(p.add(8)),
                    _mm256_loadu_ps(p.add(16)),
                ];
                let idx = taps.in_window.as_ptr().add(at);
                for j in 0..k {
                    let index = _mm256_loadu_si256(idx.add(j * TAP_LANES).cast());
                    // Lanes whose pixel is in the second (third) register: index > 7 (15).
                    let second = _mm256_castsi256_ps(_mm256_cmpgt_epi32(index, seven));
                    let third = _mm256_castsi256_ps(_mm256_cmpgt_epi32(index, fifteen));
                    let v = _mm256_blendv_ps(
                        _mm256_permutevar8x32_ps(regs[0], index),
                        _mm256_permutevar8x32_ps(regs[1], index),
                        second,
                    );
                    let v = _mm256_blendv_ps(v, _mm256_permutevar8x32_ps(regs[2], index), third);
                    sum =
                        _mm256_add_ps(sum, _mm256_mul_ps(v, _mm256_loadu_ps(w.add(j * TAP_LANES))));
                }
            } else {
                let first = _mm256_loadu_si256(taps.firsts.as_ptr().add(c * TAP_LANES).cast());
                for j in 0..k {
                    let index = _mm256_add_epi32(first, _mm256_set1_epi32(j as i32));
                    let v = _mm256_i32gather_ps::<4>(line.as_ptr(), index);
                    sum =
                        _mm256_add_ps(sum, _mm256_mul_ps(v, _mm256_loadu_ps(w.add(j * TAP_LANES))));
                }
            }
            _mm256_storeu_ps(out.as_mut_ptr().add(c * TAP_LANES), sum);
        }
    }
    chunks * TAP_LANES
}
