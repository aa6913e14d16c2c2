//! [`DqnConfig`]: DQN's knobs, with its target update ([`TargetUpdate`]) and exploration
//! ([`EpsilonSchedule`]) schedules.

use rl_nn::{Activation, AdamConfig};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How the target network follows the online network.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum TargetUpdate {
    /// Copy the online network into the target after every `every`-th gradient step
    /// (counted over the learner's life, so a resumed run keeps the cadence).
    ///
    /// Stable-Baselines3's `target_update_interval` counts environment steps instead
    /// (calls to `_on_step`, one per vectorised step, divided by `n_envs`), and its copy
    /// happens while collecting. With `train_freq = F` environment steps and
    /// `gradient_steps = G` per training phase, an interval `I` that is a multiple of `F`
    /// is `Hard { every: I / F * G }`; an interval below `F` copies during every
    /// collection phase, while the online network does not change, so the target is the
    /// online network at the start of every phase: `Hard { every: G }`. SB3's defaults
    /// (`I = 10 000`, `F = 4`, `G = 1`) are `Hard { every: 2500 }`; rl-zoo's CartPole
    /// (`I = 10`, `F = 256`, `G = 128`) is `Hard { every: 128 }`.
    Hard {
        /// Gradient steps between copies, at least 1.
        every: u64,
    },
    /// After every gradient step, `target = (1 - tau) target + tau online`
    /// ([`rl_nn::polyak`]): SB3's `tau` below 1 with `target_update_interval = 1` and one
    /// gradient step per environment step (`train_freq = gradient_steps = 1`).
    Polyak {
        /// The coefficient, in `(0, 1]`.
        tau: f32,
    },
}

/// Epsilon of the epsilon-greedy behaviour policy: linear from `initial` to `end` over the
/// first `decay_steps` environment steps, then `end` (Stable-Baselines3's linear
/// exploration schedule, whose `exploration_fraction x total_timesteps` is
/// `decay_steps`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EpsilonSchedule {
    /// Epsilon at environment step 0, in `[0, 1]`. Default 1.0.
    pub initial: f32,
    /// Epsilon from `decay_steps` on, in `[0, 1]`. Default 0.05 (SB3's
    /// `exploration_final_eps`).
    pub end: f32,
    /// Environment steps over which epsilon falls linearly (0: `end` from the start).
    /// Default 10 000.
    pub decay_steps: u64,
}

impl Default for EpsilonSchedule {
    fn default() -> Self {
        Self {
            initial: 1.0,
            end: 0.05,
            decay_steps: 10_000,
        }
    }
}

impl EpsilonSchedule {
    /// Epsilon after `env_steps` environment steps.
    pub fn at(&self, env_steps: u64) -> f32 {
        if env_steps >= self.decay_steps {
            return self.end;
        }
        let progress = env_steps as f64 / self.decay_steps as f64;
        let (initial, end) = (f64::from(self.initial), f64::from(self.end));
        (initial + (end - initial) * progress) as f32
    }
}

/// Bootstrapped DQN (Osband et al. 2016): `heads` Q-heads on one shared torso, each
/// trained on its own bootstrap resample of the replay (a row reaches head `h` when bit
/// `h` of its mask is set, with probability `mask_probability`), one head acting per
/// episode. The `[dqn] ensemble = { heads = 10, mask_probability = 0.5 }` of a config.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnsembleConfig {
    /// Q-heads, 1 to 64 (one bit each in a row's `i64` mask).
    pub heads: u32,
    /// Probability that a row trains a given head, in `(0, 1]`: 1 trains every head on
    /// every row (the heads then differ only by their initialisation), 0.5 is a
    /// double-or-nothing bootstrap.
    pub mask_probability: f64,
    /// Randomized prior functions (Osband et al. 2018): each head's Q-values are its
    /// network's plus `prior_scale` times a fixed, randomly initialised prior network's
    /// (never trained), which keeps the heads apart where data is scarce. Default 0: no
    /// prior network.
    #[serde(default)]
    pub prior_scale: f32,
}

impl EnsembleConfig {
    /// Checks every field; the error names the first invalid one under `ensemble`
    /// (the caller puts it in its table: `dqn.ensemble.heads`, `sac.ensemble.heads`).
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<()> {
        if !(1..=64).contains(&self.heads) {
            return Err(Error::config(
                "ensemble.heads",
                format!(
                    "is {}: use 1 to 64 heads (one bit each in a row's mask; 10 is \
                     Osband et al.'s)",
                    self.heads
                ),
            ));
        }
        let p = self.mask_probability;
        if !(p > 0.0 && p <= 1.0) {
            return Err(Error::config(
                "ensemble.mask_probability",
                format!("is {p}: use a probability in (0, 1] (0.5 or 1 are usual)"),
            ));
        }
        let beta = self.prior_scale;
        if !(beta.is_finite() && beta >= 0.0) {
            return Err(Error::config(
                "ensemble.prior_scale",
                format!("is {beta}: use 0 (no prior) or a positive scale (1 to 10 are usual)"),
            ));
        }
        Ok(())
    }
}

/// Settings of [`Dqn`](super::Dqn): the algorithm's knobs only. The training loop's own
/// settings (replay capacity, environment steps before learning starts, environment steps
/// between training phases, gradient steps per phase) belong to the loop that drives the
/// learner; [`DqnConfig::rl_zoo_cartpole`] says which values rl-zoo uses for them.
///
/// The `Default` holds Stable-Baselines3's `DQN` choices where they are algorithm
/// settings (Adam learning rate 1e-4 with PyTorch's epsilon 1e-8, gamma 0.99, gradients
/// clipped to norm 10, epsilon from 1.0 to 0.05, Huber loss with delta 1), with larger
/// networks and batches than SB3's (`[64, 64]`, batch 32), double Q-learning on (SB3 has
/// none) and a hard target copy every 1000 gradient steps (SB3: every 10 000
/// environment steps, 2500 gradient steps at its `train_freq = 4`; see
/// [`TargetUpdate::Hard`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DqnConfig {
    /// Hidden layer widths of the Q network. Default `[256, 256]`.
    pub hidden: Vec<usize>,
    /// The nonlinearity between layers. Default ReLU (SB3's).
    pub activation: Activation,
    /// What reads the observations (default `mlp`): `nature_cnn` for 84x84 Atari
    /// frames, `small_cnn` for small grids; frames of bytes need one of them. With a
    /// convolutional encoder, `hidden` gives the linear layers after the flatten
    /// (`[512]` for the Nature network).
    pub encoder: crate::policy::Encoder,
    /// Transitions per gradient step (the most rows
    /// [`Dqn::update`](super::Dqn::update) accepts). Default 64.
    pub batch_size: usize,
    /// Adam of the Q network. Default learning rate 1e-4, betas `[0.9, 0.999]`, epsilon
    /// 1e-8, no weight decay (SB3's `DQN`, which keeps PyTorch's Adam defaults).
    pub adam: AdamConfig,
    /// Discount. Default 0.99.
    pub gamma: f32,
    /// How the target network follows. Default `Hard { every: 1000 }`.
    pub target_update: TargetUpdate,
    /// Double Q-learning: the next action is chosen by the online network and valued by
    /// the target network. `false`: the target network's maximum (SB3's DQN). Default
    /// `true`.
    pub double: bool,
    /// The epsilon-greedy schedule over environment steps. Default 1.0 -> 0.05 over
    /// 10 000 steps.
    pub exploration: EpsilonSchedule,
    /// Clip the gradient's global L2 norm to this value; `None` only measures it.
    /// Default `Some(10.0)` (SB3's `max_grad_norm`).
    pub max_grad_norm: Option<f32>,
    /// Delta of the Huber loss on the TD error: `0.5 x^2` for `|x| <= delta`, else
    /// `delta (|x| - delta / 2)`. Default 1.0, which is PyTorch's `smooth_l1_loss` as
    /// SB3 calls it (for other values `smooth_l1_loss(beta)` is this loss divided by
    /// `beta`).
    pub huber_delta: f32,
    /// Bootstrapped DQN's heads and masks; `None` (the default) is plain DQN, a single
    /// head, bit for bit what it was before ensembles existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ensemble: Option<EnsembleConfig>,
}

impl Default for DqnConfig {
    fn default() -> Self {
        Self {
            hidden: vec![256, 256],
            activation: Activation::Relu,
            encoder: crate::policy::Encoder::Mlp,
            batch_size: 64,
            adam: AdamConfig {
                lr: 1e-4,
                betas: [0.9, 0.999],
                eps: 1e-8,
                weight_decay: None,
            },
            gamma: 0.99,
            target_update: TargetUpdate::Hard { every: 1000 },
            double: true,
            exploration: EpsilonSchedule::default(),
            max_grad_norm: Some(10.0),
            huber_delta: 1.0,
            ensemble: None,
        }
    }
}

impl DqnConfig {
    /// rl-baselines3-zoo's tuned `CartPole-v1` settings (`hyperparams/dqn.yml`, 50 000
    /// environment steps): networks `[256, 256]`, learning rate 2.3e-3, batch 64, gamma
    /// 0.99, epsilon from 1.0 to 0.04 over the first 16% of the run (8000 steps), SB3's
    /// DQN (no double Q-learning) and `target_update_interval = 10` environment steps,
    /// which with its training phases is a copy every 128 gradient steps (see
    /// [`TargetUpdate::Hard`]).
    ///
    /// The loop settings that go with it: replay capacity 100 000, learning starts after
    /// 1000 environment steps, a training phase every 256 environment steps
    /// (`train_freq`) of 128 gradient steps (`gradient_steps`), one environment.
    pub fn rl_zoo_cartpole() -> Self {
        Self {
            adam: AdamConfig {
                lr: 2.3e-3,
                ..Self::default().adam
            },
            target_update: TargetUpdate::Hard { every: 128 },
            double: false,
            exploration: EpsilonSchedule {
                initial: 1.0,
                end: 0.04,
                decay_steps: 8_000,
            },
            ..Self::default()
        }
    }

    /// Checks every field; the error names the first invalid one (`dqn.<field>`).
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<()> {
        if self.hidden.contains(&0) {
            return Err(Error::config(
                "dqn.hidden",
                format!(
                    "is {:?}: every hidden width must be at least 1",
                    self.hidden
                ),
            ));
        }
        if self.batch_size == 0 {
            return Err(Error::config("dqn.batch_size", "is 0: use at least 1"));
        }
        if !(self.gamma.is_finite() && (0.0..=1.0).contains(&self.gamma)) {
            return Err(Error::config(
                "dqn.gamma",
                format!(
                    "is {}: use a discount in [0, 1] (0.99 is usual)",
                    self.gamma
                ),
            ));
        }
        match self.target_update {
            TargetUpdate::Hard { every: 0 } => {
                return Err(Error::config(
                    "dqn.target_update.every",
                    "is 0: copy the target every 1 or more gradient steps",
                ));
            }
            TargetUpdate::Polyak { tau } if !(tau.is_finite() && tau > 0.0 && tau <= 1.0) => {
                return Err(Error::config(
                    "dqn.target_update.tau",
                    format!("is {tau}: use a polyak coefficient in (0, 1] (0.005 is usual)"),
                ));
            }
            _ => {}
        }
        for (what, value) in [
            ("dqn.exploration.initial", self.exploration.initial),
            ("dqn.exploration.end", self.exploration.end),
        ] {
            if !(value.is_finite() && (0.0..=1.0).contains(&value)) {
                return Err(Error::config(
                    what,
                    format!("is {value}: epsilon is a probability, use a value in [0, 1]"),
                ));
            }
        }
        if let Some(norm) = self.max_grad_norm
            && !(norm.is_finite() && norm > 0.0)
        {
            return Err(Error::config(
                "dqn.max_grad_norm",
                format!("is {norm}: use a positive finite norm (10 is SB3's) or None"),
            ));
        }
        if !(self.huber_delta.is_finite() && self.huber_delta > 0.0) {
            return Err(Error::config(
                "dqn.huber_delta",
                format!(
                    "is {}: use a positive finite delta (1.0 is SB3's smooth L1)",
                    self.huber_delta
                ),
            ));
        }
        if let Some(ensemble) = self.ensemble {
            ensemble.validate().map_err(|e| e.within("dqn"))?;
        }
        self.adam
            .validate()
            .map_err(|e| Error::from(e).within("dqn"))
    }
}
