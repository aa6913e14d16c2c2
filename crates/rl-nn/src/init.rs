//! How a network's parameters start.

#![allow(
    unsafe_code,
    reason = "Gram-Schmidt's projections run in functions compiled for AVX2 or AVX-512, called once the CPU is checked"
)]

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use rl_core::simd::Isa;
use serde::{Deserialize, Serialize};
#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use crate::error::{Error, Result};

/// Initial values of a network's weights and biases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Init {
    /// PyTorch's default for `nn.Linear`: weights and biases uniform in
    /// `[-1/sqrt(fan_in), 1/sqrt(fan_in)]`. The default.
    #[default]
    Uniform,
    /// Orthogonal weights scaled by a gain and zero biases, as Stable-Baselines3 and
    /// CleanRL initialise PPO (`torch.nn.init.orthogonal_`): every hidden layer with
    /// `hidden_gain` (`sqrt(2)` there), the output layer with `output_gain` (0.01 for a
    /// policy head, 1 for a value head).
    Orthogonal {
        /// Gain of every layer but the last.
        hidden_gain: f32,
        /// Gain of the output layer.
        output_gain: f32,
    },
}

impl Init {
    /// Checks the gains: finite and at least 0.
    ///
    /// # Errors
    /// [`Error::Config`] naming the gain.
    pub fn validate(&self) -> Result<()> {
        if let Self::Orthogonal {
            hidden_gain,
            output_gain,
        } = *self
        {
            for (what, gain) in [("hidden_gain", hidden_gain), ("output_gain", output_gain)] {
                if !(gain.is_finite() && gain >= 0.0) {
                    return Err(Error::config(
                        format!("init.{what}"),
                        format!(
                            "is {gain}: use a finite gain of at least 0 (sqrt(2) hidden, 0.01 or 1 output)"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Fills a row-major `outputs x inputs` weight and its bias.
pub(crate) fn fill_layer<R: Rng + ?Sized>(
    init: Init,
    output_layer: bool,
    weight: &mut [f32],
    bias: &mut [f32],
    inputs: usize,
    rng: &mut R,
) {
    match init {
        Init::Uniform => {
            let bound = 1.0 / (inputs as f32).sqrt();
            for p in weight.iter_mut().chain(bias.iter_mut()) {
                *p = rng.random_range(-bound..=bound);
            }
        }
        Init::Orthogonal {
            hidden_gain,
            output_gain,
        } => {
            let gain = if output_layer {
                output_gain
            } else {
                hidden_gain
            };
            orthogonal(weight, bias.len(), inputs, gain, rng);
            bias.fill(0.0);
        }
    }
}

/// `torch.nn.init.orthogonal_` on a row-major `rows x cols` matrix: a Gaussian matrix
/// made orthonormal along its shorter side (modified Gram-Schmidt in f64, which gives
/// the QR factor with a positive diagonal, as PyTorch's sign correction does), times
/// `gain`.
pub(crate) fn orthogonal<R: Rng + ?Sized>(
    weight: &mut [f32],
    rows: usize,
    cols: usize,
    gain: f32,
    rng: &mut R,
) {
    // Work on `tall` (long x short, column-major vectors of length `long`).
    let (long, short) = (rows.max(cols), rows.min(cols));
    let mut vectors: Vec<Vec<f64>> = (0..short)
        .map(|_| (0..long).map(|_| StandardNormal.sample(rng)).collect())
        .collect();
    gram_schmidt(&mut vectors);
    for r in 0..rows {
        for c in 0..cols {
            // rows >= cols: column c of the matrix is vector c; else row r is vector r.
            let value = if rows >= cols {
                vectors[c][r]
            } else {
                vectors[r][c]
            };
            weight[r * cols + c] = (value * f64::from(gain)) as f32;
        }
    }
}

/// Vectors projected off the finished ones together, [`gram_schmidt`]'s block.
const BLOCK: usize = 32;

/// Modified Gram-Schmidt, in place: each vector, in order, loses its projection on
/// every earlier (finished) vector, one after the other, and is normalised. Vectors go
/// in blocks of [`BLOCK`]: their projections on the vectors finished before the block
/// are taken together, from a copy of the block with its vectors' elements interleaved
/// (element `i` of every vector side by side, so that the block's sums and updates run
/// as vectors), each dot product still a sum of its own in element order, so every
/// vector goes through exactly the operations of the one-at-a-time loop (the same bits)
/// while the block's sums run side by side instead of one latency-bound chain.
fn gram_schmidt(vectors: &mut [Vec<f64>]) {
    gram_schmidt_on(Isa::detect(), vectors);
}

/// [`gram_schmidt`] with the projections on `isa`'s instructions (the same bits on each).
fn gram_schmidt_on(isa: Isa, vectors: &mut [Vec<f64>]) {
    // `f64`'s `Sum` starts from this value (`-0.0` in current Rust); the sums below
    // start there too, so they match `sum()` bit for bit.
    let start: f64 = std::iter::empty::<f64>().sum();
    let long = vectors.first().map_or(0, Vec::len);
    let mut lanes = vec![0.0f64; long * BLOCK];
    for j0 in (0..vectors.len()).step_by(BLOCK) {
        let (done, rest) = vectors.split_at_mut(j0);
        let width = BLOCK.min(rest.len());
        let block = &mut rest[..width];
        if !done.is_empty() {
            // Lanes past the block's width stay zero: computed, never read.
            for (b, v) in block.iter().enumerate() {
                for (lane, &x) in lanes.iter_mut().skip(b).step_by(BLOCK).zip(v) {
                    *lane = x;
                }
            }
            project_off(isa, done, &mut lanes, start);
            for (b, v) in block.iter_mut().enumerate() {
                for (x, &lane) in v.iter_mut().zip(lanes.iter().skip(b).step_by(BLOCK)) {
                    *x = lane;
                }
            }
        }
        for b in 0..block.len() {
            let (finished, rest) = block.split_at_mut(b);
            let v = &mut rest[0];
            for q in finished.iter() {
                let dot: f64 = q.iter().zip(v.iter()).map(|(a, b)| a * b).sum();
                v.iter_mut().zip(q).for_each(|(x, &qq)| *x -= dot * qq);
            }
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            // A Gaussian vector in the span of the others has probability 0.
            let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
            v.iter_mut().for_each(|x| *x *= scale);
        }
    }
}

/// Takes each of `done`'s projections, in order, off every vector of the interleaved
/// block `lanes` (element `i` of vector `b` at `lanes[i * BLOCK + b]`): each dot product
/// summed from `start` in element order, then `x -= dot * q_i`, with separate multiplies
/// and adds (no fused multiply-add), so every instruction set gives the same bits.
fn project_off(isa: Isa, done: &[Vec<f64>], lanes: &mut [f64], start: f64) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `isa` was detected on this CPU (AVX-512F, or AVX2).
        Isa::Avx512 => unsafe { project_off_avx512(done, lanes, start) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Isa::Avx2 => unsafe { project_off_avx2(done, lanes, start) },
        _ => project_off_portable(done, lanes, start),
    }
}

/// Defines [`project_off_portable`] on vectors of `$width` lanes (`$feature`'s
/// intrinsics): the block's sums in `BLOCK / $width` vectors, the first projection's sums,
/// then one pass per projection that takes it off and sums the next one's on the updated
/// elements.
macro_rules! project_off_simd {
    (
        $(#[$doc:meta])*
        $name:ident, $feature:literal, $width:literal,
        $set1:ident, $load:ident, $store:ident, $add:ident, $sub:ident, $mul:ident
    ) => {
        $(#[$doc])*
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feature)]
        unsafe fn $name(done: &[Vec<f64>], lanes: &mut [f64], start: f64) {
            const V: usize = BLOCK / $width;
            let rows = lanes.len() / BLOCK;
            let at = lanes.as_mut_ptr();
            let Some(first) = done.first() else { return };
            assert!(done.iter().all(|q| q.len() == rows));
            let mut dots = [$set1(start); V];
            for (i, &qi) in first.iter().enumerate() {
                let qi = $set1(qi);
                for (v, dot) in dots.iter_mut().enumerate() {
                    // SAFETY: `i < rows` and `(v + 1) * width <= BLOCK`: inside `lanes`.
                    let x = unsafe { $load(at.add(i * BLOCK + v * $width)) };
                    *dot = $add(*dot, $mul(qi, x));
                }
            }
            for (k, q) in done.iter().enumerate() {
                let next = done.get(k + 1);
                let mut sums = [$set1(start); V];
                for (i, &qi) in q.iter().enumerate() {
                    let qi = $set1(qi);
                    let ni = $set1(next.map_or(0.0, |n| n[i]));
                    for (v, (dot, sum)) in dots.iter().zip(&mut sums).enumerate() {
                        // SAFETY: as above.
                        unsafe {
                            let p = at.add(i * BLOCK + v * $width);
                            let x = $sub($load(p), $mul(*dot, qi));
                            $store(p, x);
                            *sum = $add(*sum, $mul(ni, x));
                        }
                    }
                }
                dots = sums;
            }
        }
    };
}

project_off_simd!(
    /// [`project_off_portable`] with AVX-512: the block's 32 sums in four vectors.
    ///
    /// # Safety
    /// AVX-512F.
    project_off_avx512, "avx512f", 8,
    _mm512_set1_pd, _mm512_loadu_pd, _mm512_storeu_pd, _mm512_add_pd, _mm512_sub_pd, _mm512_mul_pd
);

project_off_simd!(
    /// [`project_off_portable`] with AVX2: the block's 32 sums in eight vectors.
    ///
    /// # Safety
    /// AVX2.
    project_off_avx2, "avx2", 4,
    _mm256_set1_pd, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_add_pd, _mm256_sub_pd, _mm256_mul_pd
);

/// [`project_off`] in plain Rust, which the compiler vectorises across the block.
fn project_off_portable(done: &[Vec<f64>], lanes: &mut [f64], start: f64) {
    let rows = lanes.as_chunks_mut::<BLOCK>().0;
    for q in done {
        let mut dots = [start; BLOCK];
        for (&qi, row) in q.iter().zip(rows.iter()) {
            for b in 0..BLOCK {
                dots[b] += qi * row[b];
            }
        }
        for (&qi, row) in q.iter().zip(rows.iter_mut()) {
            for b in 0..BLOCK {
                row[b] -= dots[b] * qi;
            }
        }
    }
}

#[cfg(test)]
mod tests;
