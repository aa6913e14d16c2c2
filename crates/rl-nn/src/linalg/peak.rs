//! The machine's limit: the single-core f32 FMA rate of a register-only loop, against
//! which benches read the matrix product's GFLOP/s.
//!
//! The loop keeps 12 independent accumulators (enough to cover the FMA latency of every
//! x86 core of the last decade: 4 cycles times 2 FMA units needs 8) in registers and
//! issues nothing but fused multiply-adds, on the widest vectors [`Isa`] allows.

#![allow(unsafe_code, reason = "SIMD intrinsics of the measuring loop")]

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::hint::black_box;
use std::time::{Duration, Instant};

use rl_core::simd::Isa;

/// What [`fma_peak`] measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FmaPeak {
    /// The instruction set the loop ran on.
    pub isa: Isa,
    /// Billions of f32 floating-point operations per second (an FMA counts 2 per lane).
    pub gflops: f64,
}

/// Accumulators of the loop.
const ACCUMULATORS: usize = 12;
/// FMA steps per timed call (each step is one FMA per accumulator).
const STEPS: usize = 1 << 16;

/// The single-core f32 FMA peak on `isa` ([`Isa::detect`]'s choice is the one the kernels
/// run): the best rate of `reps` timed runs of about `run` each (after one warm-up run).
/// The best, not the median: it is the core's limit, and on a machine shared with other
/// work every slower run is the other work's doing (kernel figures, medians of their own
/// runs, are read as a fraction of it).
///
/// # Panics
/// If the CPU cannot run `isa`.
pub fn fma_peak(isa: Isa, reps: usize, run: Duration) -> FmaPeak {
    assert!(isa.is_supported(), "this CPU cannot run {isa}");
    let flops_per_call = (2 * ACCUMULATORS * STEPS * isa_lanes(isa)) as f64;
    let once = || {
        let start = Instant::now();
        black_box(fma_loop(isa, black_box(STEPS)));
        start.elapsed()
    };
    let calls = (run.as_secs_f64() / once().as_secs_f64().max(1e-9))
        .ceil()
        .max(1.0) as usize;
    let rates: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let start = Instant::now();
            for _ in 0..calls {
                black_box(fma_loop(isa, black_box(STEPS)));
            }
            flops_per_call * calls as f64 / start.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    FmaPeak {
        isa,
        gflops: rates.into_iter().fold(0.0, f64::max),
    }
}

/// f32 lanes per FMA on `isa` (the portable loop is counted as SSE2's 4).
fn isa_lanes(isa: Isa) -> usize {
    match isa {
        Isa::Avx512 => 16,
        Isa::Avx2 => 8,
        Isa::Scalar => 4,
    }
}

/// `steps` FMAs into each accumulator; returns their sum so the loop is not removed.
fn fma_loop(isa: Isa, steps: usize) -> f32 {
    match isa {
        // SAFETY:
        // - `fma_peak` asserted `isa.is_supported()`: the CPU has AVX-512F.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { avx512_loop(steps) },
        // SAFETY:
        // - `fma_peak` asserted `isa.is_supported()`: the CPU has AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { avx2_loop(steps) },
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx512 | Isa::Avx2 => unreachable!("checked by Isa::is_supported"),
        Isa::Scalar => portable_loop(steps),
    }
}

/// The AVX2+FMA loop: 12 `ymm` accumulators.
///
/// # Safety
/// AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_loop(steps: usize) -> f32 {
    let x = _mm256_set1_ps(black_box(0.999_999));
    let y = _mm256_set1_ps(black_box(1e-7));
    let mut acc: [__m256; ACCUMULATORS] =
        std::array::from_fn(|i| _mm256_set1_ps(black_box(i as f32)));
    for _ in 0..steps {
        for acc in &mut acc {
            *acc = _mm256_fmadd_ps(*acc, x, y);
        }
    }
    let sum = acc
        .iter()
        .fold(_mm256_setzero_ps(), |s, &a| _mm256_add_ps(s, a));
    let mut lanes = [0.0f32; 8];
    // SAFETY:
    // - `lanes` holds 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    lanes.iter().sum()
}

/// The AVX-512 loop: 12 `zmm` accumulators.
///
/// # Safety
/// AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn avx512_loop(steps: usize) -> f32 {
    let x = _mm512_set1_ps(black_box(0.999_999));
    let y = _mm512_set1_ps(black_box(1e-7));
    let mut acc: [__m512; ACCUMULATORS] =
        std::array::from_fn(|i| _mm512_set1_ps(black_box(i as f32)));
    for _ in 0..steps {
        for acc in &mut acc {
            *acc = _mm512_fmadd_ps(*acc, x, y);
        }
    }
    let sum = acc
        .iter()
        .fold(_mm512_setzero_ps(), |s, &a| _mm512_add_ps(s, a));
    _mm512_reduce_add_ps(sum)
}

/// The portable loop: 12 accumulators of 4 lanes, multiply and add (SSE2 has no FMA).
fn portable_loop(steps: usize) -> f32 {
    let (x, y) = (black_box(0.999_999f32), black_box(1e-7f32));
    let mut acc = [[0.0f32; 4]; ACCUMULATORS];
    for (i, acc) in acc.iter_mut().enumerate() {
        *acc = [black_box(i as f32); 4];
    }
    for _ in 0..steps {
        for acc in &mut acc {
            for a in acc.iter_mut() {
                *a = *a * x + y;
            }
        }
    }
    acc.iter().flatten().sum()
}

#[cfg(test)]
mod tests;
