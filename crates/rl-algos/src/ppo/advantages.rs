//! Advantages and returns of a rollout by generalised advantage estimation, and the
//! running reward normalisation that may scale the rewards first: the learning half of
//! a rollout, computed once per update from the rollout buffer's columns.

use rl_core::{Field, Flag, Location, MemoryPlan};
use rl_storage::rollout::RolloutBuffer;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How rewards enter the advantages: multiplied by `scale`, then clipped to
/// `[-clip, clip]`. [`RewardTransform::IDENTITY`] leaves them as they are (bit for bit).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RewardTransform {
    /// Factor, finite and positive.
    pub scale: f32,
    /// Bound of the scaled rewards, positive (infinity: no clipping).
    pub clip: f32,
}

impl RewardTransform {
    /// Rewards as they are.
    pub const IDENTITY: Self = Self {
        scale: 1.0,
        clip: f32::INFINITY,
    };

    fn check(&self) -> Result<()> {
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(Error::config(
                "reward scale",
                format!("is {}: it must be finite and above 0", self.scale),
            ));
        }
        if self.clip.is_nan() || self.clip <= 0.0 {
            return Err(Error::config(
                "reward clip",
                format!(
                    "is {}: it must be above 0 (infinity: no clipping)",
                    self.clip
                ),
            ));
        }
        Ok(())
    }
}

/// Advantages and returns of one rollout, `steps x envs` each (time-major, as the
/// rollout), allocated once and recomputed in place for every rollout.
#[derive(Clone, Debug)]
pub struct Advantages {
    advantages: Vec<f32>,
    returns: Vec<f32>,
}

impl Advantages {
    /// Room for rollouts of `rows` rows.
    pub fn new(rows: usize) -> Self {
        Self {
            advantages: vec![0.0; rows],
            returns: vec![0.0; rows],
        }
    }

    /// What [`Advantages::new`] allocates.
    pub fn plan(rows: usize) -> MemoryPlan {
        MemoryPlan::new().with(
            "advantages+returns",
            Location::Ram,
            (2 * rows * size_of::<f32>()) as u64,
        )
    }

    /// The advantages of the last [`Advantages::compute`].
    pub fn advantages(&self) -> &[f32] {
        &self.advantages
    }

    /// The returns (`advantage + value`) of the last [`Advantages::compute`].
    pub fn returns(&self) -> &[f32] {
        &self.returns
    }

    /// Generalised advantage estimation over a full rollout, in one reverse scan
    /// (no allocation), with rewards passed through `rewards` first.
    ///
    /// The rollout needs the columns `reward`, `value`, `final_value` (`f32`) and
    /// `terminated`, `truncated` (flags). For each step `t` (from the last) and
    /// environment:
    ///
    /// - terminated: next value 0 (no bootstrap), the GAE chain is cut;
    /// - else truncated, or the rollout's last step: next value is the stored
    ///   `final_value` (the value of the observation after the cut), the chain is cut;
    /// - else: next value `value[t + 1]`, the chain continues.
    ///
    /// `delta = r + gamma * next_value - V(t)`,
    /// `advantage = delta + gamma * lambda * (continues ? advantage[t + 1] : 0)`,
    /// `return = advantage + V(t)`.
    ///
    /// Accumulates in `f32`, like the networks that consume the result: with
    /// `gamma * lambda <= 1` each step adds at most a few `f32` roundings, relative to
    /// the magnitude of the discounted sum.
    ///
    /// # Errors
    /// [`Error::Config`] for a rollout that is not full or has more rows than this was
    /// made for, `gamma` or `lambda` outside `[0, 1]`, or an invalid transform;
    /// [`Error::Storage`] for a missing column. Nothing changes on error.
    pub fn compute(
        &mut self,
        rollout: &RolloutBuffer,
        gamma: f32,
        lambda: f32,
        rewards: RewardTransform,
    ) -> Result<()> {
        let columns = Columns::of(rollout)?;
        if !rollout.is_full() || columns.rewards.len() > self.advantages.len() {
            return Err(Error::config(
                "rollout buffer",
                format!(
                    "holds {} of {} steps x {} envs, for advantages of {} rows: compute them on a full rollout of at most that many rows",
                    rollout.len(),
                    rollout.steps(),
                    rollout.envs(),
                    self.advantages.len()
                ),
            ));
        }
        for (what, value) in [("gamma", gamma), ("gae_lambda", lambda)] {
            if !(0.0..=1.0).contains(&value) {
                return Err(Error::config(
                    what,
                    format!("is {value}: it must lie in [0, 1]"),
                ));
            }
        }
        rewards.check()?;
        let rows = columns.rewards.len();
        scan(
            &columns,
            rollout.envs(),
            (gamma, lambda),
            rewards,
            &mut self.advantages[..rows],
            &mut self.returns[..rows],
        );
        Ok(())
    }
}

/// The rollout columns GAE reads.
struct Columns<'a> {
    rewards: &'a [f32],
    values: &'a [f32],
    final_values: &'a [f32],
    terminated: &'a [Flag],
    truncated: &'a [Flag],
}

impl<'a> Columns<'a> {
    fn of(rollout: &'a RolloutBuffer) -> Result<Self> {
        Ok(Self {
            rewards: rollout.field(Field::Reward)?,
            values: rollout.field(Field::Value)?,
            final_values: rollout.field(Field::FinalValue)?,
            terminated: rollout.field(Field::Terminated)?,
            truncated: rollout.field(Field::Truncated)?,
        })
    }
}

/// The reverse GAE scan of [`Advantages::compute`] over `rows = steps x envs` rows.
fn scan(
    c: &Columns<'_>,
    envs: usize,
    (gamma, lambda): (f32, f32),
    transform: RewardTransform,
    advantages: &mut [f32],
    returns: &mut [f32],
) {
    let rows = c.rewards.len();
    let gamma_lambda = gamma * lambda;
    let clip = transform.clip;
    for i in (0..rows).rev() {
        let last = i + envs >= rows;
        let (next_value, next_advantage) = if c.terminated[i].get() {
            (0.0, 0.0)
        } else if last || c.truncated[i].get() {
            (c.final_values[i], 0.0)
        } else {
            (c.values[i + envs], advantages[i + envs])
        };
        let value = c.values[i];
        let reward = (c.rewards[i] * transform.scale).clamp(-clip, clip);
        let delta = reward + gamma * next_value - value;
        let advantage = delta + gamma_lambda * next_advantage;
        advantages[i] = advantage;
        returns[i] = advantage + value;
    }
}

/// Running reward normalisation (Stable-Baselines3's `VecNormalize(norm_reward=True)`):
/// the running variance of each environment's discounted return, and the scale
/// `1 / sqrt(var + 1e-8)` that divides the rewards by its standard deviation.
///
/// Per environment `e` and step `t`, as SB3's `VecNormalize`:
/// `returns[e] = returns[e] * gamma + r_t`; the `N` returns of the step are merged into
/// the running statistics as one batch (mean 0, variance 1 and count `1e-4` to start,
/// Chan et al.'s parallel formula in `f64`, as [`ObsNormalizer`](crate::policy::ObsNormalizer)); then
/// `returns[e] = 0` where the step ended the episode (terminated or truncated).
/// The rewards themselves are not centred, only scaled.
///
/// PPO with [`PpoConfig::normalize_reward`](crate::ppo::PpoConfig::normalize_reward) updates
/// it from each rollout's raw rewards and computes the advantages from the scaled ones
/// ([`Advantages::compute`]). Checkpoints save it, returns in flight included.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RewardNormalizer {
    /// Discounted return in flight of each environment.
    pub returns: Vec<f64>,
    /// Running mean of the discounted returns.
    pub mean: f64,
    /// Running (population) variance of the discounted returns.
    pub var: f64,
    /// Returns counted (starts at `1e-4`).
    pub count: f64,
    /// The discount of the returns.
    pub gamma: f64,
}

impl RewardNormalizer {
    /// Statistics for `envs` environments discounting by `gamma`: returns 0, mean 0,
    /// variance 1, count `1e-4`.
    ///
    /// # Errors
    /// [`Error::Config`] for `envs` of 0 or a `gamma` outside `[0, 1]`.
    pub fn new(envs: usize, gamma: f64) -> Result<Self> {
        if envs == 0 {
            return Err(Error::config(
                "reward normalizer environments",
                "is 0: use the number of environments",
            ));
        }
        if !(0.0..=1.0).contains(&gamma) {
            return Err(Error::config(
                "reward normalizer gamma",
                format!("is {gamma}: it must lie in [0, 1]"),
            ));
        }
        Ok(Self {
            returns: vec![0.0; envs],
            mean: 0.0,
            var: 1.0,
            count: 1e-4,
            gamma,
        })
    }

    /// Environments.
    pub fn envs(&self) -> usize {
        self.returns.len()
    }

    /// Advances the returns through time-major steps of `envs()` rewards each (row
    /// `t * envs + e`), merging each step's returns into the statistics, and resets the
    /// returns of environments whose episode ended (`done[row]`, terminated or
    /// truncated). Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] if `rewards` is not a whole number of steps; nothing
    /// changes then.
    pub fn update(&mut self, rewards: &[f32], done: impl Fn(usize) -> bool) -> Result<()> {
        let envs = self.envs();
        let whole = rewards.len() / envs * envs;
        if whole != rewards.len() {
            return Err(Error::ShapeMismatch {
                what: "rewards",
                expected: whole,
                actual: rewards.len(),
            });
        }
        let n = envs as f64;
        for (t, step) in rewards.chunks_exact(envs).enumerate() {
            for (ret, &reward) in self.returns.iter_mut().zip(step) {
                *ret = *ret * self.gamma + f64::from(reward);
            }
            let batch_mean = self.returns.iter().sum::<f64>() / n;
            let batch_var = self
                .returns
                .iter()
                .map(|x| (x - batch_mean).powi(2))
                .sum::<f64>()
                / n;
            let total = self.count + n;
            let delta = batch_mean - self.mean;
            let m2 = self.var * self.count + batch_var * n + delta * delta * self.count * n / total;
            self.mean += delta * n / total;
            self.var = m2 / total;
            self.count = total;
            for (e, ret) in self.returns.iter_mut().enumerate() {
                if done(t * envs + e) {
                    *ret = 0.0;
                }
            }
        }
        Ok(())
    }

    /// The factor that normalises rewards: `1 / sqrt(var + 1e-8)`.
    pub fn scale(&self) -> f32 {
        (1.0 / (self.var + 1e-8).sqrt()) as f32
    }

    /// Checks that the statistics are usable for `envs` environments discounting by
    /// `gamma`: that many returns, finite values, a non-negative variance, a positive
    /// count, the same discount.
    ///
    /// # Errors
    /// [`Error::Config`] naming what is wrong.
    pub fn check(&self, envs: usize, gamma: f64) -> Result<()> {
        if self.returns.len() != envs {
            return Err(Error::config(
                "reward normalizer",
                format!(
                    "holds the returns of {} environments but there are {envs}",
                    self.returns.len()
                ),
            ));
        }
        if self.gamma != gamma {
            return Err(Error::config(
                "reward normalizer",
                format!("discounts by {} but gamma is {gamma}", self.gamma),
            ));
        }
        let finite = self.returns.iter().all(|r| r.is_finite())
            && self.mean.is_finite()
            && self.var.is_finite()
            && self.var >= 0.0
            && self.count.is_finite()
            && self.count > 0.0;
        if finite {
            Ok(())
        } else {
            Err(Error::config(
                "reward normalizer",
                "holds a non-finite or negative statistic: build it anew",
            ))
        }
    }
}

#[cfg(test)]
mod tests;
