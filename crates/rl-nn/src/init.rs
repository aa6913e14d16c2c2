//! How a network's parameters start.

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

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
const BLOCK: usize = 8;

/// Modified Gram-Schmidt, in place: each vector, in order, loses its projection on
/// every earlier (finished) vector, one after the other, and is normalised. Vectors go
/// in blocks of [`BLOCK`]: their projections on the vectors finished before the block
/// are taken together, each dot product a sum of its own in element order, so every
/// vector goes through exactly the operations of the one-at-a-time loop (the same bits)
/// while the block's sums run side by side instead of one latency-bound chain.
fn gram_schmidt(vectors: &mut [Vec<f64>]) {
    // `f64`'s `Sum` starts from this value (`-0.0` in current Rust); the sums below
    // start there too, so they match `sum()` bit for bit.
    let start: f64 = std::iter::empty::<f64>().sum();
    for j0 in (0..vectors.len()).step_by(BLOCK) {
        let (done, rest) = vectors.split_at_mut(j0);
        let width = BLOCK.min(rest.len());
        let block = &mut rest[..width];
        for q in done.iter() {
            let mut dots = [start; BLOCK];
            for (i, &qi) in q.iter().enumerate() {
                for (dot, v) in dots.iter_mut().zip(block.iter()) {
                    *dot += qi * v[i];
                }
            }
            for (v, &dot) in block.iter_mut().zip(&dots) {
                v.iter_mut().zip(q).for_each(|(x, &qq)| *x -= dot * qq);
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

#[cfg(test)]
mod tests;
