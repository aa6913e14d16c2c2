//! Running observation normalisation (Stable-Baselines3's `VecNormalize` for
//! observations).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Per-element running mean and variance of observations, and the normalisation a policy
/// applies to its inputs with them: `clamp((x - mean) / sqrt(var + 1e-8), -clip, clip)`.
///
/// Statistics as Stable-Baselines3's `RunningMeanStd`: they start at mean 0, variance 1
/// and a count of `1e-4`, and [`ObsNormalizer::update`] merges each batch's population
/// mean and variance (Chan et al.'s parallel formula), in `f64`.
///
/// A policy holding one (see
/// [`PolicyNetworks::set_obs_normalizer`](crate::policy::PolicyNetworks::set_obs_normalizer))
/// normalises every input with it, in acting and in evaluation alike; PPO with
/// [`PpoConfig::normalize_obs`](crate::ppo::PpoConfig::normalize_obs) updates it after each
/// update (see there).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObsNormalizer {
    /// Running mean of each element.
    pub mean: Vec<f64>,
    /// Running (population) variance of each element.
    pub var: Vec<f64>,
    /// Observations counted (starts at `1e-4`).
    pub count: f64,
    /// Normalised values are clipped to `[-clip, clip]`.
    pub clip: f32,
}

impl ObsNormalizer {
    /// Statistics for observations of `len` elements: mean 0, variance 1, count `1e-4`.
    ///
    /// # Errors
    /// [`Error::Config`] for a `len` of 0 or a `clip` that is not positive and finite.
    pub fn new(len: usize, clip: f32) -> Result<Self> {
        if len == 0 {
            return Err(Error::config(
                "obs normalizer length",
                "is 0: use the observation length",
            ));
        }
        if !(clip.is_finite() && clip > 0.0) {
            return Err(Error::config(
                "obs normalizer clip",
                format!("is {clip}: it must be finite and above 0 (10 is usual)"),
            ));
        }
        Ok(Self {
            mean: vec![0.0; len],
            var: vec![1.0; len],
            count: 1e-4,
            clip,
        })
    }

    /// Elements of one observation.
    pub fn len(&self) -> usize {
        self.mean.len()
    }

    /// Whether observations have no elements (never, for one built by
    /// [`ObsNormalizer::new`]).
    pub fn is_empty(&self) -> bool {
        self.mean.is_empty()
    }

    /// Merges the statistics of the observation rows in `obs` (a whole number of rows).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `obs` is not a whole number of rows.
    pub fn update(&mut self, obs: &[f32]) -> Result<()> {
        let len = self.len();
        let rows = obs.len() / len.max(1);
        super::check_len("observations", rows * len, obs.len())?;
        if rows == 0 {
            return Ok(());
        }
        let n = rows as f64;
        let total = self.count + n;
        for j in 0..len {
            let column = obs.iter().skip(j).step_by(len).map(|&x| f64::from(x));
            let batch_mean = column.clone().sum::<f64>() / n;
            let batch_var = column.map(|x| (x - batch_mean).powi(2)).sum::<f64>() / n;
            let delta = batch_mean - self.mean[j];
            let m2 =
                self.var[j] * self.count + batch_var * n + delta * delta * self.count * n / total;
            self.mean[j] += delta * n / total;
            self.var[j] = m2 / total;
        }
        self.count = total;
        Ok(())
    }

    /// Writes the normalised rows of `obs` into `out` (as long as `obs`). Allocates
    /// nothing.
    pub fn normalize_to(&self, obs: &[f32], out: &mut [f32]) {
        let len = self.len().max(1);
        let clip = f64::from(self.clip);
        for (i, (o, &x)) in out.iter_mut().zip(obs).enumerate() {
            let j = i % len;
            *o = ((f64::from(x) - self.mean[j]) / (self.var[j] + 1e-8).sqrt()).clamp(-clip, clip)
                as f32;
        }
    }

    /// Writes the normalised rows of `obs` into `out` (cleared first).
    pub fn normalize_into(&self, obs: &[f32], out: &mut Vec<f32>) {
        let len = self.len().max(1);
        let clip = f64::from(self.clip);
        out.clear();
        out.extend(obs.iter().enumerate().map(|(i, &x)| {
            let j = i % len;
            ((f64::from(x) - self.mean[j]) / (self.var[j] + 1e-8).sqrt()).clamp(-clip, clip) as f32
        }));
    }

    /// Checks that the statistics are usable for observations of `len` elements: that
    /// length, finite values, non-negative variances, a positive count and clip.
    ///
    /// # Errors
    /// [`Error::Config`] naming what is wrong.
    pub fn check(&self, len: usize) -> Result<()> {
        if self.mean.len() != len || self.var.len() != len {
            return Err(Error::config(
                "obs normalizer",
                format!(
                    "holds {} means and {} variances but observations have {len} elements",
                    self.mean.len(),
                    self.var.len()
                ),
            ));
        }
        let finite = self.mean.iter().all(|m| m.is_finite())
            && self.var.iter().all(|v| v.is_finite() && *v >= 0.0)
            && self.count.is_finite()
            && self.count > 0.0
            && self.clip.is_finite()
            && self.clip > 0.0;
        if finite {
            Ok(())
        } else {
            Err(Error::config(
                "obs normalizer",
                "holds a non-finite or negative statistic: build it anew",
            ))
        }
    }
}
