//! Deep Q-learning (Mnih et al. 2015) with Stable-Baselines3's semantics, plus double
//! Q-learning (van Hasselt et al. 2016): one file for the whole algorithm.
//!
//! Networks are `rl_nn::Mlp`s on flat parameters: every buffer an update or an action
//! touches is allocated at construction, so memory is the [`Dqn::memory_plan`] from the
//! first step to the last, and neither an update nor acting allocates.

mod actor;
#[cfg(test)]
pub(crate) mod tests;

pub use actor::DqnActor;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{ActOutput, Policy, PolicyError};
use rl_core::{DType, Env, Field, Flag, Location, MemoryPlan, Schema, Space, TransitionSchema};
use rl_nn::{
    Activation, Adam, AdamConfig, Architecture, Checkpoint, Init, Mlp, MlpSpec, MlpWorkspace,
    Module, NetworkState, Weights, clip_grad_norm,
};
use rl_storage::Batch;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, first_difference};
use crate::policy::{Mode, describe};

/// The `kind` of DQN checkpoints.
pub const CHECKPOINT_KIND: &str = "dqn";

/// Checkpoint names of the online Q network (with its Adam state) and of its target.
const Q: &str = "q";
const Q_TARGET: &str = "q_target";

/// Rows the collector-facing forward pass handles at once; larger inputs are split.
const ACT_ROWS: usize = 64;

/// Added to `|TD error|` in [`Dqn::priorities`], so that no row's priority is zero.
const PRIORITY_EPS: f32 = 1e-6;

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

/// Settings of [`Dqn`]: the algorithm's knobs only. The training loop's own settings
/// (replay capacity, environment steps before learning starts, environment steps between
/// training phases, gradient steps per phase) belong to the loop that drives the learner;
/// [`DqnConfig::rl_zoo_cartpole`] says which values rl-zoo uses for them.
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
    /// Transitions per gradient step (the most rows [`Dqn::update`] accepts). Default 64.
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
    /// Seed of the network initialisation and of the exploration draws. Default 0.
    pub seed: u64,
}

impl Default for DqnConfig {
    fn default() -> Self {
        Self {
            hidden: vec![256, 256],
            activation: Activation::Relu,
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
            seed: 0,
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
        self.adam.validate().map_err(|e| match Error::from(e) {
            Error::Config { what, problem } => Error::Config {
                what: format!("dqn.{what}"),
                problem,
            },
            other => other,
        })
    }
}

/// What one gradient step measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DqnStats {
    /// The importance-weighted Huber loss on the TD errors, averaged over the batch.
    pub loss: f32,
    /// Mean `Q(s, a)` of the batch's actions, before the step.
    pub mean_q: f32,
    /// Mean TD target `y`.
    pub mean_target: f32,
    /// Global L2 norm of the gradient before clipping.
    pub grad_norm: f32,
    /// Epsilon of the behaviour policy at this point of the run.
    pub epsilon: f32,
}

/// What a DQN learner is, as a comparable value: its Q network and number of actions. A
/// checkpoint of another architecture is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DqnArchitecture {
    /// The Q network (and its target): `obs -> hidden -> n_actions`.
    pub q: Architecture,
    /// Actions of the discrete action space.
    pub n_actions: u32,
}

/// Everything of a [`Dqn`] a checkpoint holds besides its networks (`q` with its Adam
/// state, and `q_target`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DqnState {
    /// The configuration; [`Dqn::restore`] refuses another one (the seed aside).
    pub config: DqnConfig,
    /// What the learner is; must match on restore.
    pub architecture: DqnArchitecture,
    /// Gradient steps done (the hard target copies count them).
    pub updates: u64,
    /// Environment steps of the run, as last given to
    /// [`OffPolicyLearner::set_env_steps`](crate::learner::OffPolicyLearner::set_env_steps).
    pub env_steps: u64,
    /// The generator of the exploration draws (so a resumed run acts the same).
    pub rng: Xoshiro256PlusPlus,
}

/// Deep Q-learning for discrete actions, with Stable-Baselines3's semantics and double
/// Q-learning on request.
///
/// - Q network: a `rl_nn::Mlp` `obs -> hidden -> n_actions`, trained by Adam; a target
///   copy follows it by [`TargetUpdate`].
/// - Targets: `y = r + gamma (1 - terminated) Q'(s', a*)` with
///   `a* = argmax_a Q(s', a)` of the online network (double, the default) or
///   `argmax_a Q'(s', a)` of the target network (SB3); only `terminated` cuts the
///   bootstrap, truncated transitions bootstrap from their final observation.
/// - Loss: the Huber loss of `Q(s, a) - y` (delta [`DqnConfig::huber_delta`]), weighted
///   per row by the batch's importance weights ([`Batch::weights`], all 1 unless a
///   prioritized sampler drew it) and averaged over the rows; its gradient reaches only
///   the output of each row's stored action. Gradients are clipped to
///   [`DqnConfig::max_grad_norm`], then Adam steps. [`Dqn::priorities`] gives
///   `|Q(s, a) - y| + 1e-6` per row for prioritized replay.
/// - Acting: it is the collector's [`Policy`]. In [`Mode::Sample`] each row is
///   epsilon-greedy (epsilon from [`DqnConfig::exploration`] at the step count given to
///   `set_env_steps`), with a coin per row (SB3 flips one coin for all environments of a
///   vectorised step); [`Mode::Deterministic`] is greedy. Ties go to the lowest action
///   index.
///
/// ```
/// use rl_algos::dqn::{Dqn, DqnConfig};
/// use rl_core::Flag;
/// use rl_envs::CartPole;
/// use rl_storage::{Batch, ColumnSlice, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};
///
/// # fn main() -> rl_algos::Result<()> {
/// let config = DqnConfig { hidden: vec![32, 32], batch_size: 8, ..DqnConfig::default() };
/// let mut dqn = Dqn::for_env(&CartPole::new(0), config)?;
/// let schema = dqn.replay_schema()?;
/// let mut replay = ReplayBuffer::new(RamStorage::new(schema.clone(), 64, None)?, Uniform::new(0));
/// # for i in 0..16 {
/// #     let obs = [0.0, 0.1, i as f32 / 16.0, 0.0];
/// #     replay.push(&[ColumnSlice::F32(&obs), ColumnSlice::U32(&[i % 2]), ColumnSlice::F32(&[1.0]),
/// #         ColumnSlice::Bool(&[Flag(0)]), ColumnSlice::Bool(&[Flag(0)]), ColumnSlice::F32(&obs)])?;
/// # }
/// // ... a collector fills `replay` with `dqn` as its policy, then:
/// let mut batch = Batch::new(&schema, 8)?;
/// replay.sample(&mut batch)?;
/// let stats = dqn.update(&batch)?;
/// assert!(stats.loss.is_finite());
/// assert_eq!(dqn.priorities().len(), 8); // new priorities of the sampled rows
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Dqn {
    config: DqnConfig,
    obs_dim: usize,
    n_actions: u32,
    q: Mlp,
    target: Mlp,
    adam: Adam,
    grads: Vec<f32>,
    /// The online network's passes over a batch (next observations, then observations,
    /// kept for the backward pass).
    ws: MlpWorkspace,
    target_ws: MlpWorkspace,
    act_ws: MlpWorkspace,
    scratch: Scratch,
    rng: Xoshiro256PlusPlus,
    mode: Mode,
    updates: u64,
    env_steps: u64,
}

/// Per-update buffers, sized for `batch_size` rows at construction.
#[derive(Clone, Debug)]
struct Scratch {
    /// TD targets `y`.
    targets: Vec<f32>,
    /// The online network's greedy next actions (double Q-learning).
    next_actions: Vec<u32>,
    /// `Q(s, a) - y`.
    td: Vec<f32>,
    /// Gradient of the loss with respect to the network's outputs (`rows x n_actions`).
    d_out: Vec<f32>,
    /// `|td| + 1e-6` of the last applied update's first `priority_rows` rows.
    priorities: Vec<f32>,
    priority_rows: usize,
}

impl Scratch {
    fn new(rows: usize, n_actions: usize) -> Self {
        Self {
            targets: vec![0.0; rows],
            next_actions: vec![0; rows],
            td: vec![0.0; rows],
            d_out: vec![0.0; rows * n_actions],
            priorities: vec![0.0; rows],
            priority_rows: 0,
        }
    }

    fn bytes(&self) -> u64 {
        let floats = self.targets.len() + self.td.len() + self.d_out.len() + self.priorities.len();
        (floats * size_of::<f32>() + self.next_actions.len() * size_of::<u32>()) as u64
    }
}

/// The columns of a sampled batch, checked against a learner's widths and actions.
pub(crate) struct Transitions<'b> {
    pub(crate) rows: usize,
    pub(crate) obs: &'b [f32],
    pub(crate) actions: &'b [u32],
    pub(crate) rewards: &'b [f32],
    pub(crate) terminated: &'b [Flag],
    pub(crate) next_obs: &'b [f32],
    pub(crate) weights: &'b [f32],
}

impl<'b> Transitions<'b> {
    /// Reads the columns of `batch`: 1 to `max_rows` rows of `obs_dim` observations and
    /// one action index below `n_actions` each.
    fn read(batch: &'b Batch, max_rows: usize, obs_dim: usize, n_actions: u32) -> Result<Self> {
        let rows = batch.len();
        if rows == 0 || rows > max_rows {
            return Err(Error::shape("batch rows (1 to batch_size)", max_rows, rows));
        }
        Self {
            rows,
            obs: batch.obs()?,
            actions: batch.field::<u32>(Field::Action)?,
            rewards: batch.rewards()?,
            terminated: batch.terminated()?,
            next_obs: batch.next_obs()?,
            weights: batch.weights(),
        }
        .check(obs_dim, n_actions)
    }

    /// Checks the columns' lengths against `rows` and the action indices.
    pub(crate) fn check(self, obs_dim: usize, n_actions: u32) -> Result<Self> {
        let (rows, columns) = (self.rows, self);
        for (what, expected, actual) in [
            ("batch obs", rows * obs_dim, columns.obs.len()),
            (
                "batch actions (one index per row)",
                rows,
                columns.actions.len(),
            ),
            ("batch rewards (one per row)", rows, columns.rewards.len()),
            (
                "batch terminated flags (one per row)",
                rows,
                columns.terminated.len(),
            ),
            ("batch next_obs", rows * obs_dim, columns.next_obs.len()),
            ("batch weights (one per row)", rows, columns.weights.len()),
        ] {
            if expected != actual {
                return Err(Error::shape(what, expected, actual));
            }
        }
        if let Some((row, &action)) = columns
            .actions
            .iter()
            .enumerate()
            .find(|(_, a)| **a >= n_actions)
        {
            return Err(Error::ActionOutOfRange {
                row,
                action,
                actions: n_actions as usize,
            });
        }
        Ok(columns)
    }
}

/// What [`Dqn::gradients`] measured.
#[derive(Clone, Copy, Debug)]
struct Pass {
    rows: usize,
    loss: f32,
    mean_q: f32,
    mean_target: f32,
}

/// The index of the largest value; ties go to the lowest index (NaNs never win).
fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate().skip(1) {
        if v > row[best] {
            best = i;
        }
    }
    best
}

/// The Huber loss of `x` and its derivative.
fn huber(x: f32, delta: f32) -> (f32, f32) {
    if x.abs() <= delta {
        (0.5 * x * x, x)
    } else {
        (delta * (x.abs() - 0.5 * delta), delta * x.signum())
    }
}

/// Epsilon-greedy acting over the Q network, at most [`ACT_ROWS`] rows at a time: with
/// probability `epsilon` a uniformly random action, else the greedy one; greedy only
/// when not `sample`. Shared by [`Dqn`] and [`DqnActor`], so both act alike.
struct EpsilonGreedy<'a> {
    q: &'a Mlp,
    ws: &'a mut MlpWorkspace,
    rng: &'a mut Xoshiro256PlusPlus,
    epsilon: f32,
    sample: bool,
    n_actions: u32,
}

impl EpsilonGreedy<'_> {
    fn act(self, obs: &[f32], actions: &mut [u32]) -> Result<()> {
        let obs_dim = self.q.input_dim();
        for (o, a) in crate::predict::action_chunks(obs, obs_dim, actions, ACT_ROWS)? {
            let q = self.q.forward(o, a.len(), self.ws)?;
            for (action, row) in a.iter_mut().zip(q.chunks_exact(self.n_actions as usize)) {
                *action = if self.sample && self.rng.random::<f32>() < self.epsilon {
                    self.rng.random_range(0..self.n_actions)
                } else {
                    argmax(row) as u32
                };
            }
        }
        Ok(())
    }
}

impl Dqn {
    /// A learner for observations in `observation_space` (an `f32` box, flattened) and
    /// actions in `action_space` (discrete).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration; [`Error::SpaceMismatch`] for an
    /// observation space that is not an `f32` box or an action space that is not
    /// discrete.
    pub fn new(observation_space: &Space, action_space: &Space, config: DqnConfig) -> Result<Self> {
        config.validate()?;
        let obs_dim = match observation_space {
            Space::Box(b) if b.dtype() == DType::F32 && b.flat_len() > 0 => b.flat_len(),
            other => {
                return Err(Error::SpaceMismatch {
                    what: "observation space",
                    expected: "a box of f32 elements (flattened into one vector)".to_owned(),
                    actual: describe(other),
                });
            }
        };
        let n_actions = match action_space {
            Space::Discrete { n } => *n,
            other => {
                return Err(Error::SpaceMismatch {
                    what: "action space",
                    expected: "a discrete space (DQN scores every action; use SAC for boxes)"
                        .to_owned(),
                    actual: describe(other),
                });
            }
        };
        let n = n_actions as usize;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(config.seed);
        let spec = MlpSpec::new(obs_dim, &config.hidden, n, config.activation);
        let q = Mlp::new(spec, Init::Uniform, &mut rng)?;
        let rows = config.batch_size;
        Ok(Self {
            obs_dim,
            n_actions,
            target: q.clone(),
            adam: Adam::new(q.num_params(), config.adam)?,
            grads: vec![0.0; q.num_params()],
            ws: q.workspace(rows),
            target_ws: q.workspace(rows),
            act_ws: q.workspace(ACT_ROWS),
            scratch: Scratch::new(rows, n),
            q,
            rng,
            mode: Mode::Sample,
            updates: 0,
            env_steps: 0,
            config,
        })
    }

    /// [`Dqn::new`] with `env`'s spaces.
    ///
    /// # Errors
    /// As [`Dqn::new`].
    pub fn for_env<E: Env<Obs = f32, Act = u32>>(env: &E, config: DqnConfig) -> Result<Self> {
        Self::new(env.observation_space(), env.action_space(), config)
    }

    /// The configuration.
    pub fn config(&self) -> &DqnConfig {
        &self.config
    }

    /// Actions of the action space.
    pub fn n_actions(&self) -> u32 {
        self.n_actions
    }

    /// The online Q network.
    pub fn q_network(&self) -> &Mlp {
        &self.q
    }

    /// The target Q network.
    pub fn target_network(&self) -> &Mlp {
        &self.target
    }

    /// Gradient steps done.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// Elements of the observations it takes.
    pub(crate) fn obs_dim(&self) -> usize {
        self.obs_dim
    }

    /// Environment steps of the run, as last set.
    pub fn env_steps(&self) -> u64 {
        self.env_steps
    }

    /// Epsilon of the behaviour policy now ([`DqnConfig::exploration`] at
    /// [`Dqn::env_steps`]).
    pub fn epsilon(&self) -> f32 {
        self.config.exploration.at(self.env_steps)
    }

    /// What the learner is: its Q network and number of actions.
    pub fn architecture(&self) -> DqnArchitecture {
        DqnArchitecture {
            q: self.q.architecture(),
            n_actions: self.n_actions,
        }
    }

    /// The replay columns [`Dqn::update`] reads (and `rl-collect`'s collectors write):
    /// `obs` f32, `action` u32, `reward` f32, `terminated` and `truncated` bool,
    /// `next_obs` f32.
    ///
    /// # Errors
    /// None in practice (the schema is valid by construction).
    pub fn replay_schema(&self) -> Result<Schema> {
        Ok(
            TransitionSchema::new(DType::F32, &[self.obs_dim], DType::U32, &[])
                .with_next_obs()
                .build()?,
        )
    }

    /// Everything the learner holds: the Q network, its gradients and Adam moments, the
    /// target, the workspaces of an update and of acting, and the per-update buffers.
    /// Constant for the learner's life; the replay buffer is the caller's.
    pub fn memory_plan(&self) -> MemoryPlan {
        let params = (self.q.num_params() * size_of::<f32>()) as u64;
        let mut plan = MemoryPlan::new()
            .with("dqn/q/parameters", Location::Ram, params)
            .with("dqn/q/gradients", Location::Ram, params);
        plan.nest("dqn", &self.adam.memory_plan(Q));
        plan.add("dqn/q_target/parameters", Location::Ram, params);
        for (name, ws) in [
            ("q/workspace (update)", &self.ws),
            ("q_target/workspace (update)", &self.target_ws),
            ("q/workspace (acting)", &self.act_ws),
        ] {
            plan.add(
                format!("dqn/{name}, {} rows", ws.max_rows()),
                Location::Ram,
                ws.memory_bytes(),
            );
        }
        plan.add(
            "dqn/update buffers (targets, TD errors, output gradients, priorities)",
            Location::Ram,
            self.scratch.bytes(),
        );
        plan
    }

    /// One gradient step on a batch sampled from a replay buffer with
    /// [`Dqn::replay_schema`]'s columns (1 to `batch_size` rows), then the target update
    /// ([`TargetUpdate`]). Allocates nothing.
    ///
    /// # Errors
    /// [`Error::Storage`] for a batch without those columns or of other types;
    /// [`Error::ShapeMismatch`] for columns of other widths, no rows or more rows than
    /// `batch_size`; [`Error::ActionOutOfRange`] for an action index out of range;
    /// [`Error::Diverged`] for a non-finite loss or gradient norm. On every error nothing
    /// changes (networks, optimiser, counters and priorities).
    pub fn update(&mut self, batch: &Batch) -> Result<DqnStats> {
        let transitions =
            Transitions::read(batch, self.config.batch_size, self.obs_dim, self.n_actions)?;
        self.update_transitions(transitions, None)
    }

    /// [`Dqn::update`] on transitions already read and checked, writing the TD loss's
    /// gradient with respect to the observations into `obs_grads` (`rows x obs_dim`)
    /// when given: what a history summarizer in front of the Q network trains on.
    pub(crate) fn update_transitions(
        &mut self,
        transitions: Transitions<'_>,
        obs_grads: Option<&mut [f32]>,
    ) -> Result<DqnStats> {
        if let Some(grads) = &obs_grads
            && grads.len() != transitions.rows * self.obs_dim
        {
            return Err(Error::shape(
                "observation gradients",
                transitions.rows * self.obs_dim,
                grads.len(),
            ));
        }
        let pass = self.gradients(transitions, obs_grads)?;
        let max_norm = self.config.max_grad_norm.unwrap_or(f32::INFINITY);
        let grad_norm = clip_grad_norm(&mut [&mut self.grads[..]], max_norm)?;
        if !grad_norm.is_finite() {
            self.grads.fill(0.0);
            return Err(Error::Diverged {
                what: "gradient norm",
                value: grad_norm,
            });
        }
        self.adam.update(self.q.params_mut(), &self.grads)?;
        self.grads.fill(0.0);
        self.updates += 1;
        match self.config.target_update {
            TargetUpdate::Hard { every } => {
                if self.updates.is_multiple_of(every) {
                    self.target.params_mut().copy_from_slice(self.q.params());
                }
            }
            TargetUpdate::Polyak { tau } => {
                rl_nn::polyak(self.target.params_mut(), self.q.params(), tau)?;
            }
        }
        let s = &mut self.scratch;
        for (p, td) in s.priorities.iter_mut().zip(&s.td[..pass.rows]) {
            *p = td.abs() + PRIORITY_EPS;
        }
        s.priority_rows = pass.rows;
        Ok(DqnStats {
            loss: pass.loss,
            mean_q: pass.mean_q,
            mean_target: pass.mean_target,
            grad_norm,
            epsilon: self.epsilon(),
        })
    }

    /// The loss of `batch` and its gradient, added into `self.grads` (which must be
    /// zero); nothing else of the learner's state changes. On error the gradients stay
    /// zero.
    fn gradients(
        &mut self,
        transitions: Transitions<'_>,
        obs_grads: Option<&mut [f32]>,
    ) -> Result<Pass> {
        let n = self.n_actions as usize;
        let Transitions {
            rows,
            obs,
            actions,
            rewards,
            terminated,
            next_obs,
            weights,
        } = transitions;
        let s = &mut self.scratch;
        let gamma = self.config.gamma;

        // Targets: the next action by the online network (double) or the target's max.
        if self.config.double {
            let q_next = self.q.forward(next_obs, rows, &mut self.ws)?;
            for (a, row) in s.next_actions.iter_mut().zip(q_next.chunks_exact(n)) {
                *a = argmax(row) as u32;
            }
        }
        let q_target = self.target.forward(next_obs, rows, &mut self.target_ws)?;
        for (b, row) in q_target.chunks_exact(n).enumerate() {
            s.targets[b] = if terminated[b].get() {
                rewards[b]
            } else {
                let next = if self.config.double {
                    row[s.next_actions[b] as usize]
                } else {
                    row[argmax(row)]
                };
                rewards[b] + gamma * next
            };
        }

        // Weighted Huber loss on Q(s, a) - y; the gradient reaches only Q(s, a).
        let q = self.q.forward(obs, rows, &mut self.ws)?;
        let d_out = &mut s.d_out[..rows * n];
        d_out.fill(0.0);
        let inv_rows = 1.0 / rows as f32;
        let delta = self.config.huber_delta;
        let (mut loss, mut sum_q, mut sum_y) = (0.0f32, 0.0f32, 0.0f32);
        for b in 0..rows {
            let k = b * n + actions[b] as usize;
            let td = q[k] - s.targets[b];
            let (value, slope) = huber(td, delta);
            s.td[b] = td;
            loss += weights[b] * value;
            d_out[k] = weights[b] * slope * inv_rows;
            sum_q += q[k];
            sum_y += s.targets[b];
        }
        let loss = loss * inv_rows;
        if !loss.is_finite() {
            return Err(Error::Diverged {
                what: "TD loss",
                value: loss,
            });
        }
        self.q
            .backward(&mut self.ws, d_out, Some(&mut self.grads), obs_grads)?;
        Ok(Pass {
            rows,
            loss,
            mean_q: sum_q * inv_rows,
            mean_target: sum_y * inv_rows,
        })
    }

    /// `|Q(s, a) - y| + 1e-6` for each row of the last applied [`Dqn::update`] (empty
    /// before the first), the new sampling priorities of those rows.
    pub fn priorities(&self) -> &[f32] {
        &self.scratch.priorities[..self.scratch.priority_rows]
    }

    /// Writes `Q(s, a)` for every action of each observation row of `obs` into `out`
    /// (`rows x n_actions`). Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong length.
    pub fn q_values(&mut self, obs: &[f32], out: &mut [f32]) -> Result<()> {
        let (obs_dim, n) = (self.obs_dim, self.n_actions as usize);
        let rows = obs.len() / obs_dim;
        for (what, expected, actual) in [
            ("observations", rows * obs_dim, obs.len()),
            ("Q-value output (rows x actions)", rows * n, out.len()),
        ] {
            if expected != actual {
                return Err(Error::shape(what, expected, actual));
            }
        }
        for (o, dst) in obs
            .chunks(ACT_ROWS * obs_dim)
            .zip(out.chunks_mut(ACT_ROWS * n))
        {
            let q = self.q.forward(o, dst.len() / n, &mut self.act_ws)?;
            dst.copy_from_slice(q);
        }
        Ok(())
    }

    /// Actions for the observation rows `obs`, one per row, by the current [`Mode`]:
    /// epsilon-greedy ([`Mode::Sample`]) or greedy ([`Mode::Deterministic`]). Inputs of
    /// more than 64 rows are evaluated 64 at a time. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong length.
    pub fn act_rows(&mut self, obs: &[f32], actions: &mut [u32]) -> Result<()> {
        let epsilon = self.epsilon();
        EpsilonGreedy {
            q: &self.q,
            ws: &mut self.act_ws,
            rng: &mut self.rng,
            epsilon,
            sample: self.mode == Mode::Sample,
            n_actions: self.n_actions,
        }
        .act(obs, actions)
    }

    /// The whole learner state: `q` with its Adam state, `q_target`, the counters and the
    /// exploration generator.
    pub fn checkpoint(&self) -> Checkpoint<DqnState> {
        Checkpoint {
            kind: CHECKPOINT_KIND.to_owned(),
            networks: vec![
                NetworkState::capture(Q, &self.q, Some(&self.adam)),
                NetworkState::capture(Q_TARGET, &self.target, None),
            ],
            state: DqnState {
                config: self.config.clone(),
                architecture: self.architecture(),
                updates: self.updates,
                env_steps: self.env_steps,
                rng: self.rng.clone(),
            },
        }
    }

    /// Restores a [`Dqn::checkpoint`]; everything is checked first and on error nothing
    /// changes. The learner keeps its own seed (the checkpoint's generator continues) and
    /// its mode; [`Dqn::priorities`] is empty until the next update.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`] for another configuration (the seed aside) or
    /// architecture; [`Error::Nn`] for a checkpoint without the networks or with states
    /// that do not fit.
    pub fn restore(&mut self, checkpoint: &Checkpoint<DqnState>) -> Result<()> {
        let state = &checkpoint.state;
        let ours = self.architecture();
        if state.architecture != ours {
            return Err(Error::CheckpointMismatch {
                what: "DQN architecture".to_owned(),
                expected: format!("{ours:?}"),
                actual: format!("{:?}", state.architecture),
            });
        }
        first_difference!(
            DqnConfig,
            "dqn",
            &self.config,
            &state.config,
            [
                hidden,
                activation,
                batch_size,
                adam,
                gamma,
                target_update,
                double,
                exploration,
                max_grad_norm,
                huber_delta,
            ],
            except[seed]
        )?;
        let (q, target) = (checkpoint.network(Q)?, checkpoint.network(Q_TARGET)?);
        q.check_fits(&self.q, Some(&self.adam))?;
        target.check_fits(&self.target, None)?;
        q.restore_into(&mut self.q, Some(&mut self.adam))?;
        target.restore_into(&mut self.target, None)?;
        self.updates = state.updates;
        self.env_steps = state.env_steps;
        self.rng = state.rng.clone();
        // The generator is the checkpoint's, so the seed that made it is too (the one
        // setting the comparison above leaves free).
        self.config.seed = state.config.seed;
        self.scratch.priority_rows = 0;
        Ok(())
    }
}

impl crate::predict::Predict for Dqn {
    fn mode(&self) -> Mode {
        self.mode
    }

    fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }
}

impl crate::learner::OffPolicyLearner for Dqn {
    type Saved = DqnState;
    type Stats = DqnStats;
    type Actor = DqnActor;

    fn actor(&self) -> Result<DqnActor> {
        Ok(DqnActor::new(self))
    }

    fn refresh_actor(&self, actor: &mut DqnActor) -> Result<()> {
        actor.refresh(self)
    }

    fn actor_memory_plan(&self, copies: usize) -> MemoryPlan {
        DqnActor::plan(self, copies)
    }

    fn replay_schema(&self) -> Result<Schema> {
        Dqn::replay_schema(self)
    }

    fn batch_size(&self) -> usize {
        self.config.batch_size
    }

    fn update(&mut self, batch: &Batch) -> Result<DqnStats> {
        Dqn::update(self, batch)
    }

    fn priorities(&self) -> Option<&[f32]> {
        Some(Dqn::priorities(self))
    }

    fn set_env_steps(&mut self, env_steps: u64) {
        self.env_steps = env_steps;
    }

    fn updates(&self) -> u64 {
        self.updates
    }

    fn memory_plan(&self) -> MemoryPlan {
        Dqn::memory_plan(self)
    }

    fn checkpoint(&self) -> Checkpoint<DqnState> {
        Dqn::checkpoint(self)
    }

    fn checkpoint_kind(&self) -> &'static str {
        CHECKPOINT_KIND
    }

    fn restore(&mut self, checkpoint: &Checkpoint<DqnState>) -> Result<()> {
        Dqn::restore(self, checkpoint)
    }
}

impl Policy for Dqn {
    type Obs = f32;
    type Act = u32;
    type State = ();

    /// Writes actions only (no log-probabilities or values: DQN's replay needs none).
    fn act(
        &mut self,
        obs: &[f32],
        states: &mut [()],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        if out.actions.len() != states.len() {
            return Err(Box::new(Error::shape(
                "actions (one per environment)",
                states.len(),
                out.actions.len(),
            )));
        }
        Ok(self.act_rows(obs, out.actions)?)
    }
}
