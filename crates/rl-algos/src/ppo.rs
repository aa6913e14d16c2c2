//! Proximal Policy Optimization (Schulman et al., 2017) over an [`ActorCritic`] policy and
//! `rl-storage`'s [`RolloutBuffer`], with memory fixed at construction.
//!
//! One iteration:
//!
//! 1. a collector fills a [`RolloutBuffer`] made from [`Ppo::rollout_config`] and
//!    computes its advantages (`rl-collect`'s `SyncCollector::collect_rollout` does both,
//!    recording each action's log-probability and value as it acts);
//! 2. [`Ppo::update`] runs `epochs` passes over the rollout in shuffled minibatches:
//!    gather, traced forward, clipped surrogate, value loss, entropy bonus, backward,
//!    global grad-norm clipping, Adam step;
//! 3. the caller copies the new weights into the collector's policy and clears the
//!    rollout.
//!
//! # Old log-probabilities
//!
//! The ratio `pi(a|s) / pi_old(a|s)` needs the log-probabilities of the stored actions
//! under the policy that collected them. Two sources, chosen by
//! [`PpoConfig::recompute_old_log_probs`]:
//!
//! - **recorded** (`false`, the default): the log-probabilities the acting policy wrote
//!   during collection, stored in the rollout. No extra pass and no extra memory. Correct
//!   whenever the rollout was collected with the weights being updated (the synchronous
//!   loop above).
//! - **recomputed** (`true`): before the first epoch, [`ActorCritic::evaluate_minibatched`]
//!   evaluates the whole rollout with the current weights, [`PpoConfig::eval_minibatch`]
//!   rows at a time, into two buffers of one `f32` per row allocated by [`Ppo::new`]: live
//!   memory beyond them is bounded by the evaluation minibatch, never by the rollout
//!   (the Tianshou failure mode: one pass over the whole batch). Use it when the
//!   collector's weights differ from the learner's (a stale copy, an asynchronous
//!   collector) or when the collector did not record log-probabilities. With the same
//!   weights it gives the recorded numbers up to float rounding of batched matmuls.
//!
//! # Loss
//!
//! Per minibatch of `n` rows, with `r = exp(log_prob - old_log_prob)` and advantages `A`
//! (normalised to zero mean and unit standard deviation within the minibatch when
//! [`PpoConfig::normalize_advantage`] is set and `n > 1`):
//!
//! - policy loss `-mean(min(r A, clamp(r, 1 - c, 1 + c) A))` ([`clipped_surrogate`]);
//! - value loss `mean((V - R)^2)` with `R` the GAE returns, or with value clipping
//!   `mean(max((V - R)^2, (V_old + clamp(V - V_old, -c_v, c_v) - R)^2))`;
//! - total `policy + vf_coef * value - ent_coef * mean(entropy)`.
//!
//! Stable-Baselines3's loss, except that the clipped value loss takes the larger of the
//! clipped and unclipped errors (the original PPO2 and CleanRL; SB3 uses the clipped
//! error alone).
//!
//! # Observation normalisation
//!
//! Off by default; [`PpoConfig::normalize_obs`] turns on running normalisation of the
//! policy's inputs ([`ObsNormalizer`]).
//!
//! # Reward normalisation
//!
//! Off by default; [`PpoConfig::normalize_reward`] turns on scaling of the rewards by a
//! running estimate of the discounted return's standard deviation
//! ([`RewardNormalizer`], SB3's `VecNormalize(norm_reward=True)`). Call
//! [`Ppo::normalize_rewards`] on each collected rollout (advantages computed) before
//! [`Ppo::update`]: it updates the statistics from the raw rewards, then scales the
//! rewards in the buffer and recomputes the advantages
//! ([`RolloutBuffer::scale_rewards`]).
//!
//! # Checkpoints
//!
//! [`Ppo::checkpoint`] / [`Ppo::restore`] (or [`Ppo::save`] / [`Ppo::load`] through a
//! file) capture and put back everything an update depends on: the weights, Adam's
//! moments and step counter, and a [`PpoState`] (configuration, policy architecture,
//! env-step and update counters, the minibatch-shuffling generator, the policy's
//! sampling generator and its observation-normalisation statistics). Given the same
//! rollouts, a restored trainer computes bit-identical updates (tested). A checkpoint of
//! another architecture or configuration is a typed error, and a failed restore changes
//! nothing. The environments, the collector's counters and its episode statistics are
//! not part of the trainer and are not saved.

use std::fmt;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{DType, Element, Location, MemoryPlan};
use rl_nn::{Adam, AdamConfig, Checkpoint, NetworkState};
use rl_storage::{ActionShape, RolloutBatch, RolloutBuffer, RolloutConfig};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::policy::{
    ActorCritic, ObsNormalizer, PolicyArchitecture, PolicyGradients, PolicyWorkspace,
};

mod loss;

pub use loss::{clipped_surrogate, value_loss};

/// The `kind` of PPO checkpoints.
pub const CHECKPOINT_KIND: &str = "ppo";

/// Hyperparameters of [`Ppo`]: a plain struct, validated by [`PpoConfig::validate`] (and
/// by [`Ppo::new`]). Start from [`PpoConfig::new`] or `default()` and change fields with
/// struct update syntax.
///
/// The defaults are Stable-Baselines3's `PPO` defaults (which solve CartPole in about
/// 130k steps); the `ppo_cartpole` and `ppo_pendulum` examples document tuned sets.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PpoConfig {
    /// Environment steps per environment in one rollout (`T`). Default 2048.
    pub n_steps: usize,
    /// Environments stepped together (`N`); a rollout holds `n_steps * n_envs` rows.
    /// Default 1.
    pub n_envs: usize,
    /// Rows per gradient step. Default 64. At most `n_steps * n_envs`; the last minibatch
    /// of an epoch is smaller when it does not divide the rollout.
    pub minibatch_size: usize,
    /// Passes over the rollout per update. Default 10.
    pub epochs: usize,
    /// Discount factor, in `[0, 1]`. Default 0.99.
    pub gamma: f32,
    /// GAE's lambda, in `[0, 1]`. Default 0.95.
    pub gae_lambda: f32,
    /// Clip range `c` of the probability ratio, positive. Default 0.2.
    pub clip_range: f32,
    /// With [`PpoConfig::schedule_steps`]: the clip range falls linearly from
    /// `clip_range` to this value (at least 0) over that many environment steps. Default
    /// `None` (constant).
    pub clip_range_end: Option<f32>,
    /// Value clipping: the value may move at most this far from the collected value per
    /// update (in return units, positive). Default `None` (no value clipping).
    pub clip_range_vf: Option<f32>,
    /// Weight of the entropy bonus, at least 0. Default 0.0.
    pub ent_coef: f32,
    /// Weight of the value loss, at least 0. Default 0.5.
    pub vf_coef: f32,
    /// Global L2 norm the gradient is clipped to, positive (infinity: no clipping).
    /// Default 0.5. (Checkpoints write infinity as the string `"inf"`: JSON has no
    /// infinity.)
    #[serde(with = "f32_or_inf")]
    pub max_grad_norm: f32,
    /// Early stop: an update stops (for the rest of its epochs) before the first
    /// minibatch whose approximate KL divergence from the collecting policy exceeds
    /// `1.5 * target_kl` (Stable-Baselines3's rule). Positive. Default `None`.
    pub target_kl: Option<f32>,
    /// Adam's learning rate, positive. Default `3e-4`.
    pub learning_rate: f64,
    /// With [`PpoConfig::schedule_steps`]: the learning rate falls linearly from
    /// `learning_rate` to this value (at least 0) over that many environment steps.
    /// Default `None` (constant). `Some(0.0)` is SB3's `lin_<lr>` schedule.
    pub learning_rate_end: Option<f64>,
    /// Environment steps over which the linear schedules run; required when either
    /// `*_end` is set. Progress is counted after the rollout being trained on (as SB3's
    /// `progress_remaining`), and stays at the end value afterwards. Default `None`.
    pub schedule_steps: Option<u64>,
    /// Adam's `betas`. Default `[0.9, 0.999]`.
    pub adam_betas: [f64; 2],
    /// Adam's `eps`. Default `1e-5` (PPO implementations; PyTorch's is `1e-8`).
    pub adam_eps: f64,
    /// Normalise advantages within each minibatch (of more than one row). Default `true`.
    pub normalize_advantage: bool,
    /// Recompute the old log-probabilities with the current weights before the first
    /// epoch instead of using those recorded during collection (see the module
    /// documentation). Default `false`.
    pub recompute_old_log_probs: bool,
    /// Rows per pass when recomputing old log-probabilities, at least 1. Default 1024.
    pub eval_minibatch: usize,
    /// Seeds the minibatch shuffling. Default 0.
    pub seed: u64,
    /// Running observation normalisation. Default `false`.
    ///
    /// [`Ppo::new`] gives the policy an [`ObsNormalizer`] (unless it has one), which
    /// normalises every input of the policy, acting and evaluating alike.
    /// [`Ppo::update`] merges the rollout's observations into its statistics after its
    /// gradient steps: a rollout is collected and trained on with the same statistics
    /// (the rollout stores raw observations and the ratio starts at 1). Copy the policy
    /// to the collector with [`Ppo::copy_policy_into`], which copies the statistics with
    /// the weights. Stable-Baselines3's `VecNormalize` updates at every environment step
    /// and stores normalised observations instead; here the statistics lag by one rollout.
    /// Checkpoints save the statistics. (For rewards see
    /// [`PpoConfig::normalize_reward`].)
    #[serde(default)]
    pub normalize_obs: bool,
    /// With [`PpoConfig::normalize_obs`], normalised observations are clipped to
    /// `[-obs_clip, obs_clip]`. Positive and finite. Default 10 (SB3's `clip_obs`).
    #[serde(default = "default_obs_clip")]
    pub obs_clip: f32,
    /// Scale rewards by a running estimate of the discounted return's standard
    /// deviation (SB3's `VecNormalize(norm_reward=True)`). Default false.
    ///
    /// [`Ppo::new`] makes a [`RewardNormalizer`] for `n_envs` environments and `gamma`;
    /// [`Ppo::normalize_rewards`], called on each rollout before [`Ppo::update`], merges
    /// the rollout's discounted returns into it and then multiplies the rollout's rewards
    /// by `1 / sqrt(var + 1e-8)` (clipped to [`PpoConfig::reward_clip`]) and recomputes
    /// the advantages. The values in the rollout come from the critic, which is trained
    /// on the scaled returns, so they stay as they are. SB3 updates the statistics and
    /// scales at every environment step; here a whole rollout is merged first and then
    /// scaled with the resulting statistics. Checkpoints save the statistics.
    #[serde(default)]
    pub normalize_reward: bool,
    /// With [`PpoConfig::normalize_reward`], scaled rewards are clipped to
    /// `[-reward_clip, reward_clip]`; `None` does not clip. Positive and finite when
    /// given. Default `Some(10)` (SB3's `clip_reward`).
    #[serde(default = "default_reward_clip")]
    pub reward_clip: Option<f32>,
}

const fn default_obs_clip() -> f32 {
    10.0
}

const fn default_reward_clip() -> Option<f32> {
    Some(10.0)
}

impl PpoConfig {
    /// Stable-Baselines3's defaults (see the field documentation).
    pub const fn new() -> Self {
        Self {
            n_steps: 2048,
            n_envs: 1,
            minibatch_size: 64,
            epochs: 10,
            gamma: 0.99,
            gae_lambda: 0.95,
            clip_range: 0.2,
            clip_range_end: None,
            clip_range_vf: None,
            ent_coef: 0.0,
            vf_coef: 0.5,
            max_grad_norm: 0.5,
            target_kl: None,
            learning_rate: 3e-4,
            learning_rate_end: None,
            schedule_steps: None,
            adam_betas: [0.9, 0.999],
            adam_eps: 1e-5,
            normalize_advantage: true,
            recompute_old_log_probs: false,
            eval_minibatch: 1024,
            seed: 0,
            normalize_obs: false,
            obs_clip: default_obs_clip(),
            normalize_reward: false,
            reward_clip: default_reward_clip(),
        }
    }

    /// Rows of one rollout: `n_steps * n_envs` (saturating).
    pub const fn rollout_rows(&self) -> usize {
        self.n_steps.saturating_mul(self.n_envs)
    }

    /// The Adam configuration these settings give (the initial learning rate).
    pub fn adam(&self) -> AdamConfig {
        AdamConfig {
            lr: self.learning_rate,
            betas: self.adam_betas,
            eps: self.adam_eps,
            weight_decay: None,
        }
    }

    /// Checks every field.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first invalid field (`"ppo.<field>"`) and the fix.
    pub fn validate(&self) -> Result<()> {
        let at_least_one = |what: &str, value: usize| {
            if value == 0 {
                Err(Error::config(
                    format!("ppo.{what}"),
                    "is 0: it must be at least 1",
                ))
            } else {
                Ok(())
            }
        };
        at_least_one("n_steps", self.n_steps)?;
        at_least_one("n_envs", self.n_envs)?;
        at_least_one("minibatch_size", self.minibatch_size)?;
        at_least_one("epochs", self.epochs)?;
        at_least_one("eval_minibatch", self.eval_minibatch)?;
        let rows = self.n_steps.checked_mul(self.n_envs).ok_or_else(|| {
            Error::config("ppo.n_steps", "times n_envs overflows: use smaller sizes")
        })?;
        if self.minibatch_size > rows {
            return Err(Error::config(
                "ppo.minibatch_size",
                format!(
                    "is {} but a rollout holds only n_steps * n_envs = {rows} rows: use at most {rows}",
                    self.minibatch_size
                ),
            ));
        }
        for (what, value) in [("gamma", self.gamma), ("gae_lambda", self.gae_lambda)] {
            if !(0.0..=1.0).contains(&value) {
                return Err(Error::config(
                    format!("ppo.{what}"),
                    format!("is {value}: it must lie in [0, 1]"),
                ));
            }
        }
        positive("clip_range", self.clip_range, "0.2 is the usual value")?;
        if let Some(end) = self.clip_range_end {
            non_negative("clip_range_end", end, "0 decays the clip range to nothing")?;
        }
        if let Some(vf) = self.clip_range_vf {
            positive(
                "clip_range_vf",
                vf,
                "use None for no value clipping, or a distance in return units",
            )?;
        }
        positive("obs_clip", self.obs_clip, "10 is usual")?;
        if let Some(clip) = self.reward_clip {
            positive("reward_clip", clip, "10 is usual; None does not clip")?;
        }
        non_negative("ent_coef", self.ent_coef, "0 or 0.01 are usual")?;
        non_negative("vf_coef", self.vf_coef, "0.5 is usual")?;
        if self.max_grad_norm.is_nan() || self.max_grad_norm <= 0.0 {
            return Err(Error::config(
                "ppo.max_grad_norm",
                format!(
                    "is {}: it must be above 0 (0.5 is usual; infinity disables clipping)",
                    self.max_grad_norm
                ),
            ));
        }
        if let Some(kl) = self.target_kl {
            positive("target_kl", kl, "0.01 to 0.05 are usual; None disables it")?;
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return Err(Error::config(
                "ppo.learning_rate",
                format!(
                    "is {}: it must be finite and above 0 (3e-4 is usual)",
                    self.learning_rate
                ),
            ));
        }
        if let Some(end) = self.learning_rate_end
            && !(end.is_finite() && end >= 0.0)
        {
            return Err(Error::config(
                "ppo.learning_rate_end",
                format!("is {end}: it must be finite and at least 0"),
            ));
        }
        let scheduled = self.learning_rate_end.is_some() || self.clip_range_end.is_some();
        match self.schedule_steps {
            Some(0) => {
                return Err(Error::config(
                    "ppo.schedule_steps",
                    "is 0: use the run's environment-step budget, or None for constant values",
                ));
            }
            None if scheduled => {
                return Err(Error::config(
                    "ppo.schedule_steps",
                    "is None but learning_rate_end or clip_range_end is set: give the environment steps the schedule runs over",
                ));
            }
            _ => {}
        }
        Ok(self.adam().validate()?)
    }

    /// The learning rate and clip range after `env_steps` environment steps.
    pub fn scheduled(&self, env_steps: u64) -> (f64, f32) {
        let progress = match self.schedule_steps {
            Some(total) if total > 0 => (env_steps as f64 / total as f64).min(1.0),
            _ => 0.0,
        };
        let lr = match self.learning_rate_end {
            Some(end) => self.learning_rate + (end - self.learning_rate) * progress,
            None => self.learning_rate,
        };
        let clip = match self.clip_range_end {
            Some(end) => {
                (f64::from(self.clip_range) + f64::from(end - self.clip_range) * progress) as f32
            }
            None => self.clip_range,
        };
        (lr.max(0.0), clip.max(0.0))
    }
}

impl Default for PpoConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// Serde for an `f32` that may be positive infinity, which JSON cannot hold: written as
/// the string `"inf"`, any other value as a number.
mod f32_or_inf {
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error as _};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f32),
        Text(String),
    }

    pub(super) fn serialize<S: Serializer>(value: &f32, s: S) -> Result<S::Ok, S::Error> {
        if *value == f32::INFINITY {
            Repr::Text("inf".to_owned()).serialize(s)
        } else {
            Repr::Number(*value).serialize(s)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f32, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Number(value) => Ok(value),
            Repr::Text(text) if text == "inf" => Ok(f32::INFINITY),
            Repr::Text(text) => Err(D::Error::custom(format!(
                "expected a number or \"inf\", found {text:?}"
            ))),
        }
    }
}

fn positive(what: &str, value: f32, hint: &str) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(Error::config(
            format!("ppo.{what}"),
            format!("is {value}: it must be finite and above 0 ({hint})"),
        ))
    }
}

fn non_negative(what: &str, value: f32, hint: &str) -> Result<()> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(Error::config(
            format!("ppo.{what}"),
            format!("is {value}: it must be finite and at least 0 ({hint})"),
        ))
    }
}

/// What one [`Ppo::update`] did. Losses and diagnostics are means over the minibatch
/// steps taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpdateStats {
    /// Clipped-surrogate loss (negated objective).
    pub policy_loss: f32,
    /// Value loss (before `vf_coef`).
    pub value_loss: f32,
    /// Mean entropy of the action distribution.
    pub entropy: f32,
    /// Approximate KL divergence from the collecting policy, `mean((r - 1) - ln r)`
    /// (Schulman's low-variance estimator), measured before each step.
    pub approx_kl: f32,
    /// Fraction of rows whose ratio lay outside `[1 - c, 1 + c]`.
    pub clip_fraction: f32,
    /// `1 - Var(R - V_old) / Var(R)` over the rollout: 1 is a perfect critic, 0 no
    /// better than a constant, negative worse.
    pub explained_variance: f32,
    /// Global gradient norm before clipping.
    pub grad_norm: f32,
    /// Learning rate used.
    pub learning_rate: f64,
    /// Clip range used.
    pub clip_range: f32,
    /// Gradient steps taken.
    pub minibatches: usize,
    /// Whether the target-KL rule stopped the update early.
    pub early_stopped: bool,
}

/// Per-minibatch numbers, summed over an update.
#[derive(Clone, Copy, Debug, Default)]
struct Sums {
    policy_loss: f64,
    value_loss: f64,
    entropy: f64,
    approx_kl: f64,
    clip_fraction: f64,
    grad_norm: f64,
    steps: usize,
}

/// The part of [`Ppo`] one gradient step needs, all allocated by [`Ppo::new`].
struct Learner<P: ActorCritic> {
    policy: P,
    /// One Adam per network of the policy (Adam is element-wise: the same steps as one
    /// Adam over all of them).
    adams: Vec<Adam>,
    grads: PolicyGradients,
    ws: PolicyWorkspace,
    /// `minibatch_size` each: old log-probs, normalised advantages, new log-probs, and
    /// the loss's gradients with respect to log-probs, entropies and values.
    old_log_probs: Vec<f32>,
    advantages: Vec<f32>,
    new_log_probs: Vec<f32>,
    d_log_probs: Vec<f32>,
    d_entropies: Vec<f32>,
    d_values: Vec<f32>,
}

/// Settings of one update, after the schedules.
#[derive(Clone, Copy)]
struct StepSettings {
    clip: f32,
    target_kl: Option<f32>,
}

impl<P: ActorCritic> Learner<P> {
    /// One gradient step on `batch`, whose old log-probs are in `self.old_log_probs`.
    /// `Ok(false)`: the target-KL rule stopped before stepping. Allocates nothing.
    fn step(
        &mut self,
        batch: &RolloutBatch,
        config: &PpoConfig,
        settings: StepSettings,
        sums: &mut Sums,
    ) -> Result<bool> {
        let rows = batch.len();
        let old = &self.old_log_probs[..rows];
        let advantages = &mut self.advantages[..rows];
        advantages.copy_from_slice(batch.advantages());
        if config.normalize_advantage && rows > 1 {
            normalize(advantages);
        }
        let actions = P::stored_actions(batch.actions())?;
        self.policy.evaluate(batch.obs(), actions, &mut self.ws)?;

        // Diagnostics before the step: approximate KL and clip fraction.
        let new = &mut self.new_log_probs[..rows];
        new.copy_from_slice(self.ws.log_probs());
        let (mut kl, mut clipped) = (0.0f64, 0usize);
        for (&new, &old) in new.iter().zip(old) {
            let log_ratio = f64::from(new - old);
            let ratio = log_ratio.exp();
            kl += (ratio - 1.0) - log_ratio;
            clipped += usize::from((ratio - 1.0).abs() > f64::from(settings.clip));
        }
        let kl = kl / rows as f64;
        if let Some(target) = settings.target_kl
            && kl > 1.5 * f64::from(target)
        {
            return Ok(false);
        }

        let d_log_probs = &mut self.d_log_probs[..rows];
        let policy_loss = clipped_surrogate(new, old, advantages, settings.clip, d_log_probs)?;
        let d_values = &mut self.d_values[..rows];
        let old_values = config.clip_range_vf.map(|limit| (batch.values(), limit));
        let value_loss = value_loss(self.ws.values(), batch.returns(), old_values, d_values)?;
        let entropies = self.ws.entropies();
        let entropy = (entropies.iter().map(|&h| f64::from(h)).sum::<f64>() / rows as f64) as f32;
        for (what, value) in [
            ("policy loss", policy_loss),
            ("value loss", value_loss),
            ("entropy", entropy),
        ] {
            if !value.is_finite() {
                return Err(Error::Diverged { what, value });
            }
        }
        // loss = policy + vf_coef * value - ent_coef * mean(entropy)
        d_values.iter_mut().for_each(|g| *g *= config.vf_coef);
        let d_entropies = &mut self.d_entropies[..rows];
        d_entropies.fill(-config.ent_coef / rows as f32);
        self.grads.zero();
        self.policy.backward(
            actions,
            d_log_probs,
            d_entropies,
            d_values,
            &mut self.ws,
            &mut self.grads,
        )?;
        let norm = self.grads.clip_norm(config.max_grad_norm)?;
        if !norm.is_finite() {
            return Err(Error::Diverged {
                what: "gradient norm",
                value: norm,
            });
        }
        for (i, adam) in self.adams.iter_mut().enumerate() {
            if let (Some(net), Some(grads)) = (self.policy.network_mut(i), self.grads.get(i)) {
                adam.update(net.params_mut(), grads)?;
            }
        }

        sums.policy_loss += f64::from(policy_loss);
        sums.value_loss += f64::from(value_loss);
        sums.entropy += f64::from(entropy);
        sums.approx_kl += kl;
        sums.clip_fraction += clipped as f64 / rows as f64;
        sums.grad_norm += f64::from(norm);
        sums.steps += 1;
        Ok(true)
    }
}

/// Normalises to zero mean and unit (sample) standard deviation, `+ 1e-8` in the
/// denominator as Stable-Baselines3.
fn normalize(values: &mut [f32]) {
    let n = values.len() as f64;
    let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = values
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / (n - 1.0).max(1.0);
    let scale = 1.0 / (var.sqrt() + 1e-8);
    for v in values {
        *v = ((f64::from(*v) - mean) * scale) as f32;
    }
}

/// `1 - Var(returns - values) / Var(returns)` (NaN-free: 0 when the returns are constant).
fn explained_variance(values: &[f32], returns: &[f32]) -> f32 {
    let n = returns.len() as f64;
    if n == 0.0 {
        return 0.0;
    }
    let mean = |it: &mut dyn Iterator<Item = f64>| it.sum::<f64>() / n;
    let mean_r = mean(&mut returns.iter().map(|&r| f64::from(r)));
    let var_r = mean(&mut returns.iter().map(|&r| (f64::from(r) - mean_r).powi(2)));
    let diff = |(&v, &r): (&f32, &f32)| f64::from(r) - f64::from(v);
    let mean_d = mean(&mut values.iter().zip(returns).map(diff));
    let var_d = mean(
        &mut values
            .iter()
            .zip(returns)
            .map(|p| (diff(p) - mean_d).powi(2)),
    );
    if var_r == 0.0 {
        0.0
    } else {
        (1.0 - var_d / var_r) as f32
    }
}

/// What a PPO checkpoint holds besides the weights and Adam's state (the `extra` of a
/// [`Checkpoint<PpoState>`]): everything else [`Ppo::update`] depends on, so that a
/// restored trainer given the same rollouts computes bit-identical updates.
///
/// It does not hold what lives outside the trainer: the environments' states, the
/// collector's episode statistics and frame counter, and the collector's copy of the
/// policy. Put the collector policy's sampling generator into the trainer's policy with
/// [`PolicyNetworks::set_sampling_state`](crate::PolicyNetworks::set_sampling_state) before
/// [`Ppo::checkpoint`] to carry it along (the `ppo_cartpole` example does).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PpoState {
    /// The configuration. [`Ppo::restore`] refuses a checkpoint whose configuration
    /// differs from the trainer's in any field but `seed`.
    pub config: PpoConfig,
    /// The policy's architecture ([`PolicyNetworks::architecture`](crate::PolicyNetworks::architecture));
    /// must match on restore.
    pub architecture: PolicyArchitecture,
    /// Environment steps trained on ([`Ppo::env_steps`]; drives the schedules).
    pub env_steps: u64,
    /// Updates completed ([`Ppo::updates`]).
    pub updates: u64,
    /// The generator that shuffles minibatches.
    pub shuffle_rng: Xoshiro256PlusPlus,
    /// The trainer's policy's action-sampling generator
    /// ([`PolicyNetworks::sampling_state`](crate::PolicyNetworks::sampling_state)).
    pub sampling_rng: Xoshiro256PlusPlus,
    /// The trainer's policy's observation normaliser
    /// ([`PolicyNetworks::obs_normalizer`](crate::PolicyNetworks::obs_normalizer)),
    /// if it has one ([`PpoConfig::normalize_obs`]).
    #[serde(default)]
    pub obs_normalizer: Option<ObsNormalizer>,
    /// The reward-normalisation statistics, with [`PpoConfig::normalize_reward`]
    /// (absent from older checkpoints, which load with `None`).
    #[serde(default)]
    pub reward_normalizer: Option<RewardNormalizer>,
}

/// PPO over an [`ActorCritic`] policy it owns, with one [`Adam`] per network whose state
/// it owns.
///
/// Everything an update uses is allocated by [`Ppo::new`] ([`Ppo::memory_plan`]): Adam's
/// moments, one gradient buffer per network, a policy workspace of `minibatch_size` rows
/// (and one of `eval_minibatch` rows with
/// [`PpoConfig::recompute_old_log_probs`], plus two `f32` per rollout row), the
/// minibatch order (one `u32` per rollout row), one [`RolloutBatch`] of
/// `minibatch_size` rows and six `f32` scratch rows of that size. An update allocates
/// nothing (tested with a counting allocator).
///
/// ```no_run
/// use rl_algos::{CategoricalPolicy, PolicyConfig, Ppo, PpoConfig};
/// use rl_collect::{CollectorConfig, SyncCollector};
/// use rl_envs::CartPole;
/// use rl_storage::RolloutBuffer;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = PpoConfig { n_steps: 32, n_envs: 8, minibatch_size: 256, ..PpoConfig::new() };
/// let envs: Vec<CartPole> = (0..8).map(CartPole::new).collect();
/// let policy = CategoricalPolicy::for_env(&envs[0], PolicyConfig::new(), 0)?;
/// let mut collector = SyncCollector::new(envs, policy.clone(), CollectorConfig::new(8))?;
/// let mut ppo = Ppo::new(policy, config)?;
/// let mut rollout = RolloutBuffer::new(ppo.rollout_config())?;
/// for _ in 0..10 {
///     rollout.clear();
///     collector.collect_rollout(&mut rollout)?;
///     let stats = ppo.update(&rollout)?;
///     ppo.copy_policy_into(collector.policy_mut())?;
///     println!("{stats:?}");
/// }
/// # Ok(()) }
/// ```
pub struct Ppo<P: ActorCritic> {
    config: PpoConfig,
    learner: Learner<P>,
    batch: RolloutBatch,
    /// Minibatch order: a permutation of the rollout's rows, reshuffled every epoch.
    order: Vec<u32>,
    /// Recomputed old log-probs and values, one per rollout row (empty unless
    /// `recompute_old_log_probs`).
    recomputed_log_probs: Vec<f32>,
    recomputed_values: Vec<f32>,
    /// With `recompute_old_log_probs`: a workspace of `eval_minibatch` rows.
    eval_ws: Option<PolicyWorkspace>,
    rng: Xoshiro256PlusPlus,
    /// With `normalize_reward`: the running return statistics.
    reward_normalizer: Option<RewardNormalizer>,
    env_steps: u64,
    updates: u64,
}

impl<P: ActorCritic> fmt::Debug for Ppo<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ppo")
            .field("config", &self.config)
            .field("adams", &self.learner.adams)
            .field("env_steps", &self.env_steps)
            .field("updates", &self.updates)
            .finish_non_exhaustive()
    }
}

impl<P: ActorCritic> Ppo<P> {
    /// A learner for `policy`, allocating everything an update uses.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid `config`.
    pub fn new(mut policy: P, config: PpoConfig) -> Result<Self> {
        config.validate()?;
        if config.normalize_obs && policy.obs_normalizer().is_none() {
            policy
                .set_obs_normalizer(Some(ObsNormalizer::new(policy.obs_len(), config.obs_clip)?))?;
        }
        let rollout = rollout_config_of(&config, &policy);
        let batch = RolloutBatch::new(&rollout, config.minibatch_size)?;
        let adams = (0..policy.network_names().len())
            .filter_map(|i| {
                policy
                    .network(i)
                    .map(|n| Adam::new(n.num_params(), config.adam()))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let rows = config.rollout_rows();
        let (recompute, eval_ws) = if config.recompute_old_log_probs {
            (
                rows,
                Some(policy.workspace(config.eval_minibatch.min(rows))),
            )
        } else {
            (0, None)
        };
        let mb = config.minibatch_size;
        let grads = PolicyGradients::new(&policy);
        let ws = policy.workspace(mb);
        let reward_normalizer = if config.normalize_reward {
            Some(RewardNormalizer::new(
                config.n_envs,
                f64::from(config.gamma),
            )?)
        } else {
            None
        };
        Ok(Self {
            learner: Learner {
                policy,
                adams,
                grads,
                ws,
                old_log_probs: vec![0.0; mb],
                advantages: vec![0.0; mb],
                new_log_probs: vec![0.0; mb],
                d_log_probs: vec![0.0; mb],
                d_entropies: vec![0.0; mb],
                d_values: vec![0.0; mb],
            },
            batch,
            order: (0..).take(rows).collect(),
            recomputed_log_probs: vec![0.0; recompute],
            recomputed_values: vec![0.0; recompute],
            eval_ws,
            rng: Xoshiro256PlusPlus::seed_from_u64(config.seed),
            reward_normalizer,
            env_steps: 0,
            updates: 0,
            config,
        })
    }

    /// The configuration of the rollout buffers [`Ppo::update`] accepts: `n_steps` x
    /// `n_envs` rows of this policy's observations and actions, with this `gamma` and
    /// `gae_lambda`.
    pub fn rollout_config(&self) -> RolloutConfig {
        rollout_config_of(&self.config, &self.learner.policy)
    }

    /// The configuration.
    pub fn config(&self) -> &PpoConfig {
        &self.config
    }

    /// The policy being trained.
    pub fn policy(&self) -> &P {
        &self.learner.policy
    }

    /// The policy being trained, mutably.
    pub fn policy_mut(&mut self) -> &mut P {
        &mut self.learner.policy
    }

    /// The trained policy, consuming the learner.
    pub fn into_policy(self) -> P {
        self.learner.policy
    }

    /// The optimisers, one per network of the policy in
    /// [`PolicyNetworks::network_names`](crate::PolicyNetworks::network_names)' order
    /// (their states go into checkpoints).
    pub fn adams(&self) -> &[Adam] {
        &self.learner.adams
    }

    /// Environment steps trained on so far (rows of the rollouts given to
    /// [`Ppo::update`]); drives the schedules.
    pub fn env_steps(&self) -> u64 {
        self.env_steps
    }

    /// Updates completed.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// What the learner holds besides the policy's weights: Adam's moments and scratch,
    /// the minibatch, the order and scratch rows, and the recomputed old log-probs and
    /// values when configured.
    pub fn memory_plan(&self) -> MemoryPlan {
        let f32s = |n: usize| (n * size_of::<f32>()) as u64;
        let mut plan = MemoryPlan::new();
        let policy = &self.learner.policy;
        for (i, name) in policy.network_names().iter().enumerate() {
            if let (Some(net), Some(adam)) = (policy.network(i), self.learner.adams.get(i)) {
                plan.add(
                    format!("ppo/{name}/parameters"),
                    Location::Ram,
                    f32s(net.num_params()),
                );
                plan.nest(&format!("ppo/{name}"), &adam.memory_plan("optimizer"));
            }
        }
        plan.nest("ppo", &self.learner.grads.memory_plan("policy"));
        plan.add(
            format!("ppo/policy workspace ({} rows)", self.learner.ws.max_rows()),
            Location::Ram,
            self.learner.ws.memory_bytes(),
        );
        if let Some(ws) = &self.eval_ws {
            plan.add(
                format!("ppo/evaluation workspace ({} rows)", ws.max_rows()),
                Location::Ram,
                ws.memory_bytes(),
            );
        }
        plan.nest("ppo/minibatch", &self.batch.memory_plan());
        plan.add(
            "ppo/minibatch_order",
            Location::Ram,
            (self.order.len() * size_of::<u32>()) as u64,
        );
        plan.add(
            "ppo/scratch_rows",
            Location::Ram,
            f32s(6 * self.config.minibatch_size),
        );
        if self.config.recompute_old_log_probs {
            plan.add(
                "ppo/recomputed_log_probs+values",
                Location::Ram,
                f32s(self.recomputed_log_probs.len() + self.recomputed_values.len()),
            );
        }
        plan
    }

    /// Everything needed to resume training exactly: every network's weights with its
    /// Adam's moments and step counter (kind [`CHECKPOINT_KIND`]), and a [`PpoState`]
    /// (configuration, architecture, counters, the shuffling and sampling generators,
    /// normalisers).
    pub fn checkpoint(&self) -> Checkpoint<PpoState> {
        let policy = &self.learner.policy;
        let networks = policy
            .network_names()
            .iter()
            .enumerate()
            .filter_map(|(i, name)| {
                let net = policy.network(i)?;
                Some(NetworkState::capture(*name, net, self.learner.adams.get(i)))
            })
            .collect();
        Checkpoint {
            kind: CHECKPOINT_KIND.to_owned(),
            networks,
            state: PpoState {
                config: self.config,
                architecture: policy.architecture(),
                env_steps: self.env_steps,
                updates: self.updates,
                shuffle_rng: self.rng.clone(),
                sampling_rng: policy.sampling_state(),
                obs_normalizer: policy.obs_normalizer().cloned(),
                reward_normalizer: self.reward_normalizer.clone(),
            },
        }
    }

    /// Puts a checkpoint from [`Ppo::checkpoint`] back: weights, Adam's state, counters
    /// and generators. Checks everything first: on error nothing has changed.
    ///
    /// The trainer must have been built with the same configuration (the seed aside: the
    /// generators come from the checkpoint, and the configuration's `seed` becomes the
    /// checkpoint's) and a policy of the same architecture.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`] for another architecture or configuration (naming
    /// the first differing field) or a missing or extra network, [`Error::Nn`] for
    /// weights or optimiser states that do not fit the policy, [`Error::Config`] for an
    /// invalid optimiser configuration or observation normaliser.
    pub fn restore(&mut self, checkpoint: &Checkpoint<PpoState>) -> Result<()> {
        let state = &checkpoint.state;
        let policy = &self.learner.policy;
        let architecture = policy.architecture();
        if state.architecture != architecture {
            return Err(Error::CheckpointMismatch {
                what: "policy architecture".to_owned(),
                expected: architecture.to_string(),
                actual: state.architecture.to_string(),
            });
        }
        config_difference(&self.config, &state.config)?;
        if let Some(normalizer) = &state.obs_normalizer {
            normalizer.check(policy.obs_len())?;
        }
        match (&state.reward_normalizer, self.config.normalize_reward) {
            (Some(normalizer), true) => {
                normalizer.check(self.config.n_envs, f64::from(self.config.gamma))?;
            }
            (None, false) => {}
            (Some(_), false) | (None, true) => {
                return Err(Error::config(
                    "checkpoint reward normalizer",
                    "is present without ppo.normalize_reward or missing with it",
                ));
            }
        }
        // Every network and optimiser state is checked before anything is written.
        let names = policy.network_names();
        for (i, name) in names.iter().enumerate() {
            let saved = checkpoint.network(name)?;
            if let Some(net) = policy.network(i) {
                saved.check_fits(net, self.learner.adams.get(i))?;
            }
        }
        if checkpoint.networks.len() != names.len() {
            return Err(Error::CheckpointMismatch {
                what: "networks".to_owned(),
                expected: format!("{names:?}"),
                actual: format!(
                    "{:?}",
                    checkpoint
                        .networks
                        .iter()
                        .map(|n| n.name.as_str())
                        .collect::<Vec<_>>()
                ),
            });
        }
        let learner = &mut self.learner;
        for (i, name) in names.iter().enumerate() {
            if let Some(net) = learner.policy.network_mut(i) {
                checkpoint
                    .network(name)?
                    .restore_into(net, learner.adams.get_mut(i))?;
            }
        }
        self.env_steps = state.env_steps;
        self.updates = state.updates;
        self.rng = state.shuffle_rng.clone();
        self.config.seed = state.config.seed;
        self.reward_normalizer = state.reward_normalizer.clone();
        learner
            .policy
            .set_sampling_state(state.sampling_rng.clone());
        // Checked above: cannot fail.
        learner
            .policy
            .set_obs_normalizer(state.obs_normalizer.clone())
    }

    /// Copies what acting depends on into `target` (the collector's copy of the policy):
    /// every network's weights and the observation normaliser. The sampling generator
    /// stays. Allocates nothing beyond the normaliser's copy.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`] for a target of another architecture; nothing
    /// changes then.
    pub fn copy_policy_into(&self, target: &mut P) -> Result<()> {
        let source = &self.learner.policy;
        for i in 0..source.network_names().len() {
            let (Some(from), Some(to)) = (source.network(i), target.network(i)) else {
                continue;
            };
            if from.architecture() != to.architecture() {
                return Err(Error::CheckpointMismatch {
                    what: "policy architecture".to_owned(),
                    expected: from.architecture().to_string(),
                    actual: to.architecture().to_string(),
                });
            }
        }
        target.set_obs_normalizer(source.obs_normalizer().cloned())?;
        for i in 0..source.network_names().len() {
            if let (Some(from), Some(to)) = (source.network(i), target.network_mut(i)) {
                to.params_mut().copy_from_slice(from.params());
            }
        }
        Ok(())
    }

    /// [`Ppo::checkpoint`] written to `path` atomically ([`Checkpoint::save`]).
    ///
    /// # Errors
    /// As [`Ppo::checkpoint`] and [`Checkpoint::save`].
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        Ok(self.checkpoint().save(path)?)
    }

    /// Reads the checkpoint at `path` ([`Checkpoint::load`]) and [`Ppo::restore`]s it; on
    /// error the trainer is unchanged.
    ///
    /// # Errors
    /// As [`Checkpoint::load`] and [`Ppo::restore`].
    pub fn load(&mut self, path: impl AsRef<Path>) -> Result<()> {
        self.restore(&Checkpoint::load(path, CHECKPOINT_KIND)?)
    }

    /// The reward-normalisation statistics ([`PpoConfig::normalize_reward`]; `None`
    /// without).
    pub fn reward_normalizer(&self) -> Option<&RewardNormalizer> {
        self.reward_normalizer.as_ref()
    }

    /// With [`PpoConfig::normalize_reward`], prepares a collected rollout (full, with
    /// advantages computed) for [`Ppo::update`]: merges its discounted returns (raw
    /// rewards, episodes ended by `terminated` or `truncated`) into the
    /// [`RewardNormalizer`], then multiplies its rewards by the new scale, clips them to
    /// [`PpoConfig::reward_clip`] and recomputes its advantages
    /// ([`RolloutBuffer::scale_rewards`]). Without, does nothing. Call it once per
    /// rollout: the statistics assume each rollout continues the previous one.
    /// Allocates nothing.
    ///
    /// # Errors
    /// - [`Error::Config`] for a rollout of another number of environments;
    /// - [`Error::Storage`] for a rollout that is not full or has no advantages (the
    ///   statistics are then unchanged).
    pub fn normalize_rewards(&mut self, rollout: &mut RolloutBuffer) -> Result<()> {
        let Some(normalizer) = &mut self.reward_normalizer else {
            return Ok(());
        };
        if rollout.config().envs != normalizer.envs() {
            return Err(Error::config(
                "rollout buffer",
                format!(
                    "holds {} environments but the reward normalizer {}: make it from Ppo::rollout_config()",
                    rollout.config().envs,
                    normalizer.envs()
                ),
            ));
        }
        if !rollout.is_full() || rollout.advantages().is_none() {
            return Err(rl_storage::Error::AdvantagesNotComputed.into());
        }
        let (terminated, truncated) = (rollout.terminated(), rollout.truncated());
        normalizer.update(rollout.rewards(), |row| {
            terminated[row].get() || truncated[row].get()
        })?;
        rollout.scale_rewards(normalizer.scale(), self.config.reward_clip)?;
        Ok(())
    }

    /// One PPO update on a full rollout with advantages computed (see the module
    /// documentation for the loss and the two sources of old log-probabilities).
    ///
    /// # Errors
    /// - [`Error::Config`] for a rollout of another shape than [`Ppo::rollout_config`]
    ///   (steps, environments, observation length, action shape);
    /// - [`Error::Storage`] for a rollout that is not full or has no advantages;
    /// - [`Error::Diverged`] when a loss or the gradient norm is not finite (the step is
    ///   not applied; earlier steps of this update were);
    /// - the policy's errors (an action out of range ...).
    pub fn update(&mut self, rollout: &RolloutBuffer) -> Result<UpdateStats> {
        let expected = self.rollout_config();
        let given = rollout.config();
        if (given.steps, given.envs, given.obs_len, given.action)
            != (
                expected.steps,
                expected.envs,
                expected.obs_len,
                expected.action,
            )
        {
            return Err(Error::config(
                "rollout buffer",
                format!(
                    "is {} steps x {} envs of {} observation elements and {:?} actions, but this PPO trains on {} x {} of {} and {:?}: make it from Ppo::rollout_config()",
                    given.steps,
                    given.envs,
                    given.obs_len,
                    given.action,
                    expected.steps,
                    expected.envs,
                    expected.obs_len,
                    expected.action
                ),
            ));
        }
        let returns = rollout
            .returns()
            .ok_or(rl_storage::Error::AdvantagesNotComputed)?;
        let explained_variance = explained_variance(rollout.values(), returns);

        let env_steps = self.env_steps + rollout.rows() as u64;
        let (lr, clip) = self.config.scheduled(env_steps);
        for adam in &mut self.learner.adams {
            adam.set_lr(lr)?;
        }
        if let Some(ws) = &mut self.eval_ws {
            let actions = P::stored_actions(rollout.actions())?;
            self.learner.policy.evaluate_minibatched(
                rollout.obs(),
                actions,
                &mut self.recomputed_log_probs,
                &mut self.recomputed_values,
                ws,
            )?;
        }
        let settings = StepSettings {
            clip,
            target_kl: self.config.target_kl,
        };

        let mut sums = Sums::default();
        let mut early_stopped = false;
        'epochs: for _ in 0..self.config.epochs {
            shuffle(&mut self.order, &mut self.rng);
            for indices in self.order.chunks(self.config.minibatch_size) {
                rollout.gather(indices, &mut self.batch)?;
                let old = &mut self.learner.old_log_probs[..indices.len()];
                if self.config.recompute_old_log_probs {
                    for (slot, &row) in old.iter_mut().zip(indices) {
                        *slot = self.recomputed_log_probs[row as usize];
                    }
                } else {
                    old.copy_from_slice(self.batch.log_probs());
                }
                if !self
                    .learner
                    .step(&self.batch, &self.config, settings, &mut sums)?
                {
                    early_stopped = true;
                    break 'epochs;
                }
            }
        }
        if self.config.normalize_obs
            && let Some(normalizer) = self.learner.policy.obs_normalizer_mut()
        {
            normalizer.update(rollout.obs())?;
        }
        self.env_steps = env_steps;
        self.updates += 1;

        let steps = sums.steps.max(1) as f64;
        Ok(UpdateStats {
            policy_loss: (sums.policy_loss / steps) as f32,
            value_loss: (sums.value_loss / steps) as f32,
            entropy: (sums.entropy / steps) as f32,
            approx_kl: (sums.approx_kl / steps) as f32,
            clip_fraction: (sums.clip_fraction / steps) as f32,
            explained_variance,
            grad_norm: (sums.grad_norm / steps) as f32,
            learning_rate: lr,
            clip_range: clip,
            minibatches: sums.steps,
            early_stopped,
        })
    }
}

/// Running reward normalisation (Stable-Baselines3's `VecNormalize(norm_reward=True)`):
/// the running variance of each environment's discounted return, and the scale
/// `1 / sqrt(var + 1e-8)` that divides the rewards by its standard deviation.
///
/// Per environment `e` and step `t`, as SB3's `VecNormalize`:
/// `returns[e] = returns[e] * gamma + r_t`; the `N` returns of the step are merged into
/// the running statistics as one batch (mean 0, variance 1 and count `1e-4` to start,
/// Chan et al.'s parallel formula in `f64`, as [`ObsNormalizer`](crate::ObsNormalizer)); then
/// `returns[e] = 0` where the step ended the episode (terminated or truncated).
/// The rewards themselves are not centred, only scaled.
///
/// PPO with [`PpoConfig::normalize_reward`] updates
/// it from each rollout and scales the rollout's rewards
/// ([`Ppo::normalize_rewards`]). Checkpoints save it,
/// returns in flight included.
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

/// The first field (other than `seed`) where the checkpoint's configuration differs from
/// the trainer's, as an error.
fn config_difference(ours: &PpoConfig, theirs: &PpoConfig) -> Result<()> {
    let theirs = PpoConfig {
        seed: ours.seed,
        ..*theirs
    };
    if *ours == theirs {
        return Ok(());
    }
    let fields = |config: &PpoConfig| match serde_json::to_value(config) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (expected, actual) = (fields(ours), fields(&theirs));
    let differing = expected
        .iter()
        .find(|(key, value)| actual.get(*key) != Some(*value));
    Err(match differing {
        Some((key, value)) => Error::CheckpointMismatch {
            what: format!("ppo.{key}"),
            expected: value.to_string(),
            actual: actual
                .get(key)
                .map_or_else(|| "missing".to_owned(), ToString::to_string),
        },
        // Values equal as JSON but not as floats (a NaN): name the whole configuration.
        None => Error::CheckpointMismatch {
            what: "ppo configuration".to_owned(),
            expected: format!("{ours:?}"),
            actual: format!("{theirs:?}"),
        },
    })
}

/// Fisher-Yates over the identity, as `RolloutBuffer::shuffle`: the order depends only on
/// the generator's state.
fn shuffle(order: &mut [u32], rng: &mut Xoshiro256PlusPlus) {
    for (slot, index) in order.iter_mut().zip(0u32..) {
        *slot = index;
    }
    for i in (1..order.len()).rev() {
        let j = rng.random_range(0..=i);
        order.swap(i, j);
    }
}

/// The rollout buffers a PPO over `policy` trains on: `n_steps` x `n_envs` rows of its
/// observations and actions, with `gamma` and `gae_lambda`.
fn rollout_config_of<P: ActorCritic>(config: &PpoConfig, policy: &P) -> RolloutConfig {
    let action = if <P::Act as Element>::DTYPE == DType::U32 {
        ActionShape::Discrete
    } else {
        ActionShape::Continuous(policy.act_len())
    };
    RolloutConfig {
        gamma: config.gamma,
        gae_lambda: config.gae_lambda,
        ..RolloutConfig::new(config.n_steps, config.n_envs, policy.obs_len(), action)
    }
}

#[cfg(test)]
mod tests;
