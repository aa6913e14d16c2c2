//! [`PpoConfig`]: PPO's hyperparameters, and nothing of the loop around it.

use rl_nn::AdamConfig;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Hyperparameters of [`Ppo`](crate::ppo::Ppo): a plain struct, validated by
/// [`PpoConfig::validate`] (and by [`Ppo::new`](crate::ppo::Ppo::new)). Start from [`PpoConfig::new`] or `default()` and change fields with
/// struct update syntax.
///
/// The defaults are Stable-Baselines3's `PPO` defaults (which solve CartPole in about
/// 130k steps); the `ppo_cartpole` and `ppo_pendulum` examples document tuned sets.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PpoConfig {
    /// Environment steps per environment in one rollout (`T`). Default 2048. A rollout
    /// holds `n_steps x envs` rows, the environments being the trainer's.
    pub n_steps: usize,
    /// Rows per gradient step (the minibatch). Default 64. At most a rollout's rows; the
    /// last minibatch of an epoch is smaller when it does not divide the rollout.
    pub batch_size: usize,
    /// Passes over the rollout per update. Default 10.
    pub epochs: usize,
    /// Discount factor, in `[0, 1]`. Default 0.99. Its one owner: advantages and reward
    /// normalisation both read it.
    pub gamma: f32,
    /// GAE's lambda, in `[0, 1]`: 0 is one-step TD, 1 Monte-Carlo. Default 0.95.
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
    /// The optimiser: Adam with learning rate `3e-4`, betas `[0.9, 0.999]` and `eps`
    /// `1e-5` (PPO implementations; PyTorch's is `1e-8`) by default. `adam.lr` is the
    /// initial learning rate of the schedule.
    pub adam: AdamConfig,
    /// With [`PpoConfig::schedule_steps`]: the learning rate falls linearly from
    /// `adam.lr` to this value (at least 0) over that many environment steps.
    /// Default `None` (constant). `Some(0.0)` is SB3's `lin_<lr>` schedule.
    pub learning_rate_end: Option<f64>,
    /// Environment steps over which the linear schedules run; required when either
    /// `*_end` is set. Progress is counted after the rollout being trained on (as SB3's
    /// `progress_remaining`), and stays at the end value afterwards. Default `None`.
    pub schedule_steps: Option<u64>,
    /// Normalise advantages within each minibatch (of more than one row). Default `true`.
    pub normalize_advantage: bool,
    /// Recompute the old log-probabilities with the current weights before the first
    /// epoch instead of using those recorded during collection (see the module
    /// documentation). Default `false`.
    pub recompute_old_log_probs: bool,
    /// Rows per pass when recomputing old log-probabilities, at least 1. Default 1024.
    pub eval_minibatch: usize,
    /// Running observation normalisation, off (`None`) by default.
    ///
    /// [`Ppo::new`](crate::ppo::Ppo::new) gives the policy an
    /// [`ObsNormalizer`](crate::policy::ObsNormalizer) (unless it has one), which normalises
    /// every input of the policy, acting and evaluating alike. [`Ppo::update`](crate::ppo::Ppo::update)
    /// merges the rollout's observations into its statistics after its gradient steps: a
    /// rollout is collected and trained on with the same statistics (the rollout stores
    /// raw observations and the ratio starts at 1). Stable-Baselines3's `VecNormalize`
    /// updates at every environment step and stores normalised observations instead;
    /// here the statistics lag by one rollout. Checkpoints save the statistics.
    pub normalize_obs: Option<ObsNormalization>,
    /// Scaling of the rewards by a running estimate of the discounted return's standard
    /// deviation (SB3's `VecNormalize(norm_reward=True)`), off (`None`) by default.
    ///
    /// [`Ppo::update`](crate::ppo::Ppo::update) merges each rollout's discounted returns into
    /// a [`RewardNormalizer`](crate::ppo::RewardNormalizer), then computes the advantages
    /// from the rewards times `1 / sqrt(var + 1e-8)`, clipped. The rollout keeps the raw
    /// rewards. The values come from the critic, which is trained on the scaled returns,
    /// so they are used as they are. SB3 updates the statistics and scales at every
    /// environment step; here a whole rollout is merged first and then scaled with the
    /// resulting statistics. Checkpoints save the statistics.
    pub normalize_reward: Option<RewardNormalization>,
}

/// Settings of running observation normalisation ([`PpoConfig::normalize_obs`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ObsNormalization {
    /// Normalised observations are clipped to `[-clip, clip]`. Positive and finite.
    /// Default 10 (SB3's `clip_obs`).
    pub clip: f32,
}

impl Default for ObsNormalization {
    fn default() -> Self {
        Self { clip: 10.0 }
    }
}

/// Settings of reward normalisation ([`PpoConfig::normalize_reward`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewardNormalization {
    /// Scaled rewards are clipped to `[-clip, clip]`; `None` does not clip. Positive and
    /// finite when given. Default `Some(10)` (SB3's `clip_reward`).
    pub clip: Option<f32>,
}

impl Default for RewardNormalization {
    fn default() -> Self {
        Self { clip: Some(10.0) }
    }
}

impl PpoConfig {
    /// Stable-Baselines3's defaults (see the field documentation).
    pub const fn new() -> Self {
        Self {
            n_steps: 2048,
            batch_size: 64,
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
            adam: AdamConfig {
                lr: 3e-4,
                betas: [0.9, 0.999],
                eps: 1e-5,
                weight_decay: None,
            },
            learning_rate_end: None,
            schedule_steps: None,
            normalize_advantage: true,
            recompute_old_log_probs: false,
            eval_minibatch: 1024,
            normalize_obs: None,
            normalize_reward: None,
        }
    }

    /// Checks every field, for a trainer stepping `envs` environments.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first invalid field (`"ppo.<field>"`) and the fix.
    pub fn validate(&self, envs: usize) -> Result<()> {
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
        at_least_one("batch_size", self.batch_size)?;
        at_least_one("epochs", self.epochs)?;
        at_least_one("eval_minibatch", self.eval_minibatch)?;
        if envs == 0 {
            return Err(Error::config(
                "environments",
                "is 0: PPO needs at least one environment",
            ));
        }
        let rows = self.n_steps.checked_mul(envs).ok_or_else(|| {
            Error::config(
                "ppo.n_steps",
                "times the environments overflows: use smaller sizes",
            )
        })?;
        if self.batch_size > rows {
            return Err(Error::config(
                "ppo.batch_size",
                format!(
                    "is {} but a rollout holds only n_steps x envs = {} x {envs} = {rows} rows: use at most {rows}",
                    self.batch_size, self.n_steps
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
        if let Some(obs) = self.normalize_obs {
            positive("normalize_obs.clip", obs.clip, "10 is usual")?;
        }
        if let Some(RewardNormalization { clip: Some(clip) }) = self.normalize_reward {
            positive(
                "normalize_reward.clip",
                clip,
                "10 is usual; None does not clip",
            )?;
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
        self.adam.validate().map_err(|e| {
            Error::config("ppo.adam", format!("{e} (3e-4 is the usual learning rate)"))
        })
    }

    /// The learning rate and clip range after `env_steps` environment steps.
    pub fn scheduled(&self, env_steps: u64) -> (f64, f32) {
        let progress = match self.schedule_steps {
            Some(total) if total > 0 => (env_steps as f64 / total as f64).min(1.0),
            _ => 0.0,
        };
        let start = self.adam.lr;
        let lr = match self.learning_rate_end {
            Some(end) => start + (end - start) * progress,
            None => start,
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
