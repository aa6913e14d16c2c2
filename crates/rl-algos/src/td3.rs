//! Twin delayed DDPG ([`Td3`], Fujimoto et al. 2018) for box actions: a deterministic
//! tanh-squashed actor, SAC's twin critics with the minimum of their targets, target
//! policy smoothing, delayed actor and target updates, Gaussian exploration noise.
//!
//! Networks are `rl_nn::Mlp`s on flat parameters: every buffer an update touches is
//! allocated at construction, so memory is the [`Td3::memory_plan`](crate::learner::Learner::memory_plan)
//! from the first step to the last, and an update allocates nothing.

mod actor;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use rand::Rng;
use rand_distr::StandardNormal;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{ActOutput, Policy, PolicyError};
use rl_core::{DType, Env, Location, MemoryPlan, Space, TransitionSchema};
use rl_nn::{
    Adam, AdamConfig, Architecture, Checkpoint, Init, Mlp, MlpWorkspace, Module, NetworkState,
    Pool, Weights,
};
use rl_storage::Batch;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, adam_difference, first_difference};
use crate::learner::{OffPolicyBlueprint, Scaled, Sizes};
use crate::policy::Mode;
use crate::sac::{
    ACT_ROWS, ActorPasses, CoreShape, PlanNames, Transitions, TwinCritics, half_squared_error,
    join, seeded, spaces,
};

pub use actor::Td3Actor;

/// The `kind` of TD3 checkpoints.
pub const CHECKPOINT_KIND: &str = "td3";

/// TD3's plan names.
const NAMES: PlanNames = PlanNames {
    prefix: "td3",
    hidden: "td3.hidden",
    batch: "td3.batch_size",
};

/// Settings of [`Td3`]. [`Td3Config::sb3`] (also the `Default`) holds Stable-Baselines3's
/// defaults; change fields with struct update syntax.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Td3Config {
    /// Hidden layer widths of the actor and of each critic (ReLU between layers).
    /// Default `[400, 300]` (Stable-Baselines3's `TD3Policy`, from the paper).
    pub hidden: Vec<usize>,
    /// Transitions per gradient step. Default 256.
    pub batch_size: usize,
    /// The optimiser of the actor and of each critic: Adam with learning rate 1e-3,
    /// betas `[0.9, 0.999]` and `eps` 1e-8 by default.
    pub adam: AdamConfig,
    /// Discount. Default 0.99.
    pub gamma: f32,
    /// Polyak coefficient of the target actor and critics. Default 0.005.
    pub tau: f32,
    /// Critic updates per actor update; the targets move with the actor. Default 2.
    pub policy_delay: u64,
    /// Standard deviation of the Gaussian noise on the target actor's actions (target
    /// policy smoothing), in units of the action scale (actions live in `[-1, 1]`).
    /// Default 0.2.
    pub policy_noise: f32,
    /// That noise is clipped to `[-noise_clip, noise_clip]`. Default 0.5.
    pub noise_clip: f32,
    /// Standard deviation of the Gaussian noise added to actions when acting in
    /// [`Mode::Sample`], in units of the action scale; the noisy action is clipped to the
    /// box. Default 0.1 (the Stable-Baselines3 zoo's `NormalActionNoise`).
    pub exploration_noise: f32,
}

impl Default for Td3Config {
    fn default() -> Self {
        Self::sb3()
    }
}

impl Td3Config {
    /// Stable-Baselines3's `TD3` defaults (version 2): networks `[400, 300]`, batch 256,
    /// learning rate 1e-3, gamma 0.99, tau 0.005, `policy_delay` 2,
    /// `target_policy_noise` 0.2, `target_noise_clip` 0.5, and Gaussian action noise of
    /// 0.1 (the zoo's; SB3 itself defaults to none). The loop's defaults (a 1 000 000-row
    /// buffer, 100 random steps, one gradient step per environment step) are
    /// `rl_train::trainer::OffPolicyConfig::new`'s.
    pub fn sb3() -> Self {
        Self {
            hidden: vec![400, 300],
            batch_size: 256,
            adam: AdamConfig {
                lr: 1e-3,
                betas: [0.9, 0.999],
                eps: 1e-8,
                weight_decay: None,
            },
            gamma: 0.99,
            tau: 0.005,
            policy_delay: 2,
            policy_noise: 0.2,
            noise_clip: 0.5,
            exploration_noise: 0.1,
        }
    }

    /// Checks every field; the error names the first invalid one.
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(Error::config("td3.batch_size", "is 0: use at least 1"));
        }
        if self.policy_delay == 0 {
            return Err(Error::config(
                "td3.policy_delay",
                "is 0: use at least 1 (2 is usual)",
            ));
        }
        if self.hidden.contains(&0) {
            return Err(Error::config(
                "td3.hidden",
                format!(
                    "is {:?}: every hidden width must be at least 1",
                    self.hidden
                ),
            ));
        }
        if !(self.gamma.is_finite() && (0.0..=1.0).contains(&self.gamma)) {
            return Err(Error::config(
                "td3.gamma",
                format!(
                    "is {}: use a discount in [0, 1] (0.99 is usual)",
                    self.gamma
                ),
            ));
        }
        if !(self.tau.is_finite() && self.tau > 0.0 && self.tau <= 1.0) {
            return Err(Error::config(
                "td3.tau",
                format!(
                    "is {}: use a polyak coefficient in (0, 1] (0.005 is usual)",
                    self.tau
                ),
            ));
        }
        for (what, value, usual) in [
            ("td3.policy_noise", self.policy_noise, "0.2"),
            ("td3.noise_clip", self.noise_clip, "0.5"),
            ("td3.exploration_noise", self.exploration_noise, "0.1"),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(Error::config(
                    what,
                    format!("is {value}: use a finite value of at least 0 ({usual} is usual)"),
                ));
            }
        }
        self.adam.validate().map_err(|e| {
            Error::config("td3.adam", format!("{e} (1e-3 is the usual learning rate)"))
        })
    }
}

/// What one gradient step measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Td3Stats {
    /// `MSE(Q1, y) + MSE(Q2, y)`, Stable-Baselines3's critic loss.
    pub critic_loss: f32,
    /// `-mean(Q1(s, pi(s)))` of the last actor update (this step's when
    /// `actor_updated`).
    pub actor_loss: f32,
    /// Whether this step updated the actor and moved the targets (every
    /// `policy_delay`-th step).
    pub actor_updated: bool,
}

/// What a TD3 learner is, as a comparable value: the actor's and critics' architectures
/// and the action box. A checkpoint of another architecture is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Td3Architecture {
    /// The actor (and its target).
    pub actor: Architecture,
    /// Each of the twin critics (and their targets).
    pub critic: Architecture,
    /// The action side, e.g. `"box 1"`.
    pub action_side: String,
}

/// Everything of a learner a checkpoint holds besides its networks (`actor` and
/// `critic1`, `critic2` with their Adam states, `actor_target`, `critic1_target`,
/// `critic2_target`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Td3State {
    /// The configuration; [`Td3::restore`](crate::learner::Learner::restore) refuses
    /// another one (but for the learning rate and the exploration noise).
    pub config: Td3Config,
    /// The seed the learner was built with; a restored learner takes it.
    pub seed: u64,
    /// What the learner is; must match on restore.
    pub architecture: Td3Architecture,
    /// Gradient steps done.
    pub updates: u64,
    /// The generator of the smoothing and exploration noise.
    pub rng: Xoshiro256PlusPlus,
}

/// Per-update buffers, sized for `batch_size` rows at construction.
#[derive(Clone, Debug)]
struct Scratch {
    /// `rows x (obs + act)` critic inputs.
    critic_in: Vec<f32>,
    /// Clipped smoothing noise of the next actions (in `[-1, 1]` units).
    smoothing: Vec<f32>,
    /// Smoothed target actions, the policy's actions and the stored actions, in
    /// `[-1, 1]`.
    next_actions: Vec<f32>,
    pi_actions: Vec<f32>,
    stored_actions: Vec<f32>,
    /// Critic targets `y`.
    target: Vec<f32>,
    /// `Q_i` of each row, per critic.
    q: [Vec<f32>; 2],
    /// Gradient of the loss with respect to each critic's output, per critic.
    dq: [Vec<f32>; 2],
    /// Gradient of the actor loss with respect to the first critic's input.
    d_in: Vec<f32>,
    /// Gradient with respect to the actor's output (`rows x act`).
    d_actor: Vec<f32>,
}

impl Scratch {
    fn new(rows: usize, obs: usize, act: usize) -> Self {
        let z = |n: usize| vec![0.0; n];
        Self {
            critic_in: z(rows * (obs + act)),
            smoothing: z(rows * act),
            next_actions: z(rows * act),
            pi_actions: z(rows * act),
            stored_actions: z(rows * act),
            target: z(rows),
            q: [z(rows), z(rows)],
            dq: [z(rows), z(rows)],
            d_in: z(rows * (obs + act)),
            d_actor: z(rows * act),
        }
    }

    /// Bytes of [`Scratch::new`] for `rows` rows, before it exists: per row two critic
    /// inputs (`obs + act` each), five action vectors and five scalars.
    fn bytes_for(rows: usize, obs: usize, act: usize) -> Result<u64> {
        let sizes = Sizes::of("td3.batch_size");
        let per_row = sizes.add(&[
            sizes.count(&[2, sizes.add(&[obs, act])?])?,
            sizes.count(&[5, act])?,
            5,
        ])?;
        sizes.f32s(&[rows, per_row])
    }
}

/// Twin delayed DDPG for `f32` box actions (Fujimoto et al. 2018, with
/// Stable-Baselines3's details).
///
/// - Actor: a `rl_nn::Mlp` `obs -> hidden -> dim(A)`; actions are `tanh` of its outputs,
///   in `[-1, 1]`, mapped affinely onto the environment's bounds when acting (the replay
///   buffer holds the environment's actions and [`Td3::update`] maps them back).
/// - Critics: two `rl_nn::Mlp`s `obs ++ action -> hidden -> 1` (SAC's twin critics).
///   Target: `y = r + gamma (1 - terminated) min_i Q'_i(s', clip(mu'(s') + clip(eps,
///   -c, c), -1, 1))` with `eps ~ N(0, policy_noise^2)`; truncated transitions
///   bootstrap.
/// - Every `policy_delay`-th update also steps the actor on `-mean(Q1(s, mu(s)))` and
///   moves the target actor and critics by polyak averaging.
///
/// It is also the collector's [`Policy`]: [`Mode::Sample`] adds Gaussian noise of
/// `exploration_noise` to the actor's action and clips it to the box (training),
/// [`Mode::Deterministic`] takes the actor's action.
///
/// ```
/// use rl_algos::learner::OffPolicyLearner;
/// use rl_algos::td3::{Td3, Td3Config};
/// use rl_envs::Pendulum;
/// use rl_storage::Batch;
///
/// # fn main() -> rl_algos::Result<()> {
/// let config = Td3Config { hidden: vec![32, 32], batch_size: 8, ..Td3Config::sb3() };
/// let mut td3 = Td3::for_env(&Pendulum::new(0), config, 0)?;
/// let mut batch = Batch::new(&td3.blueprint().replay_schema, 8)?;
/// // ... fill `batch` from a replay buffer, then:
/// # use rl_storage::{ColumnSlice, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};
/// # use rl_core::Flag;
/// # let mut replay = ReplayBuffer::new(RamStorage::new(td3.blueprint().replay_schema.clone(), 64, None)?, Uniform::new(0));
/// # for i in 0..16 {
/// #     let obs = [1.0, 0.0, i as f32 / 16.0];
/// #     replay.push(&[ColumnSlice::F32(&obs), ColumnSlice::F32(&[0.5]), ColumnSlice::F32(&[-1.0]),
/// #         ColumnSlice::Bool(&[Flag(0)]), ColumnSlice::Bool(&[Flag(0)]), ColumnSlice::F32(&obs)])?;
/// # }
/// # replay.sample(&mut batch)?;
/// let stats = td3.update(&batch)?;
/// assert!(stats.critic_loss.is_finite());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Td3 {
    config: Td3Config,
    /// Seeds the networks, the noise and the actors' noise.
    seed: u64,
    /// What it holds, planned before it was built ([`Td3::blueprint`]).
    blueprint: OffPolicyBlueprint,
    obs_dim: usize,
    act_dim: usize,
    /// Environment action `= offset + scale * a` for `a` in `[-1, 1]`.
    scale: Vec<f32>,
    offset: Vec<f32>,
    actor: Mlp,
    actor_target: Mlp,
    actor_adam: Adam,
    actor_grads: Vec<f32>,
    critics: TwinCritics,
    /// `batch`: the actor on the batch's observations (kept for its backward pass);
    /// `next`: the target actor on the next observations; `act`: acting.
    passes: ActorPasses,
    scratch: Scratch,
    rng: Xoshiro256PlusPlus,
    mode: Mode,
    updates: u64,
    /// The actor loss of the last actor update.
    last_actor_loss: f32,
}

/// `tanh` of the actor's outputs (`rows x act`), in `[-1, 1]`.
fn squash(out: &[f32], actions: &mut [f32]) {
    for (a, &o) in actions.iter_mut().zip(out) {
        *a = o.tanh();
    }
}

/// What acting for a collector reads and writes: the actor's forward pass over at most
/// [`ACT_ROWS`] rows at a time, noise of `noise` (0: none) added and clipped, actions
/// mapped onto the environment's bounds. Shared by [`Td3`] and [`Td3Actor`], so both
/// act alike.
pub(crate) struct Acting<'a> {
    pub(crate) actor: &'a Mlp,
    pub(crate) ws: &'a mut MlpWorkspace,
    pub(crate) rng: &'a mut Xoshiro256PlusPlus,
    pub(crate) scale: &'a [f32],
    pub(crate) offset: &'a [f32],
    pub(crate) noise: f32,
}

impl Acting<'_> {
    /// Actions for `obs` in the environment's bounds; `log_probs` (one per row) get 0.
    pub(crate) fn act(self, obs: &[f32], actions: &mut [f32], log_probs: &mut [f32]) -> Result<()> {
        let (obs_dim, act_dim) = (self.actor.input_dim(), self.scale.len());
        let rows = obs.len() / obs_dim;
        for (what, expected, actual) in [
            ("observations", rows * obs_dim, obs.len()),
            ("actions", rows * act_dim, actions.len()),
            ("log-prob output", rows, log_probs.len()),
        ] {
            if expected != actual {
                return Err(Error::shape(what, expected, actual));
            }
        }
        for (o, a) in obs
            .chunks(ACT_ROWS * obs_dim)
            .zip(actions.chunks_mut(ACT_ROWS * act_dim))
        {
            let out = self.actor.forward(o, o.len() / obs_dim, self.ws)?;
            for ((dst, &u), j) in a.iter_mut().zip(out).zip((0..act_dim).cycle()) {
                let mut x = u.tanh();
                if self.noise > 0.0 {
                    let eps: f32 = self.rng.sample(StandardNormal);
                    x = (x + self.noise * eps).clamp(-1.0, 1.0);
                }
                *dst = self.offset[j] + self.scale[j] * x;
            }
        }
        log_probs.fill(0.0);
        Ok(())
    }
}

impl Td3 {
    /// A learner for observations in `observation_space` (an `f32` box) and actions in
    /// `action_space` (an `f32` box with finite bounds); `seed` seeds the networks and
    /// the noise (a run passes its `RunConfig::seed`).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration; [`Error::SpaceMismatch`] for a
    /// space that is not an `f32` box or an action space with infinite or empty bounds.
    pub fn new(
        observation_space: &Space,
        action_space: &Space,
        config: Td3Config,
        seed: u64,
    ) -> Result<Self> {
        let blueprint = Self::blueprint(observation_space, action_space, &config)?;
        let (obs_dim, scale, offset) = spaces(observation_space, action_space)?;
        let act_dim = scale.len();
        let rows = config.batch_size;
        let shape = CoreShape::with_hidden(
            NAMES,
            &config.hidden,
            (obs_dim, act_dim),
            (obs_dim + act_dim, 1),
        )?;
        let mut rng = seeded(seed);
        let actor = Mlp::new(shape.actor_spec().clone(), Init::Uniform, &mut rng)?;
        let critics = TwinCritics::new(shape.critic_spec(), config.adam, rows, &mut rng)?;
        Ok(Self {
            actor_target: actor.clone(),
            actor_adam: Adam::new(actor.num_params(), config.adam)?,
            actor_grads: vec![0.0; actor.num_params()],
            passes: ActorPasses::new(&actor, rows),
            scratch: Scratch::new(rows, obs_dim, act_dim),
            actor,
            critics,
            rng: seeded(seed ^ 0x7d37_d37d_37d3_7d37),
            mode: Mode::Sample,
            updates: 0,
            last_actor_loss: 0.0,
            blueprint,
            obs_dim,
            act_dim,
            scale,
            offset,
            seed,
            config,
        })
    }

    /// What a learner for `observation_space` and `action_space` with `config` holds,
    /// reads and asks of its actors, from the sizes alone: nothing is allocated.
    /// [`Td3::new`] plans the same (its
    /// [`memory_plan`](crate::learner::Learner::memory_plan) is this blueprint's) and
    /// refuses what this refuses.
    ///
    /// # Errors
    /// As [`Td3::new`]; [`Error::Config`] for sizes whose bytes overflow.
    pub fn blueprint(
        observation_space: &Space,
        action_space: &Space,
        config: &Td3Config,
    ) -> Result<OffPolicyBlueprint> {
        config.validate()?;
        let (obs_dim, scale, _) = spaces(observation_space, action_space)?;
        let act_dim = scale.len();
        let sizes = Sizes::of(NAMES.hidden);
        let critic_in = sizes.add(&[obs_dim, act_dim])?;
        let shape =
            CoreShape::with_hidden(NAMES, &config.hidden, (obs_dim, act_dim), (critic_in, 1))?;
        let rows = config.batch_size;
        let mut plan = shape.plan(rows)?;
        plan.add("td3/actor target", Location::Ram, shape.actor_bytes);
        plan.add(
            "td3/update buffers",
            Location::Ram,
            Scratch::bytes_for(rows, obs_dim, act_dim)?,
        );
        let schema = TransitionSchema::new(DType::F32, &[obs_dim], DType::F32, &[act_dim])
            .with_next_obs()
            .build()?;
        let mut blueprint = OffPolicyBlueprint::new(plan, schema, rows);
        let bounds = sizes.f32s(&[2, act_dim])?;
        blueprint.actor.push(Scaled::per(
            "td3 actor x",
            " (weights, workspace, bounds)",
            sizes.sum(&[shape.actor_copy_bytes()?, bounds])?,
        ));
        Ok(blueprint)
    }

    /// [`Td3::new`] with `env`'s spaces.
    ///
    /// # Errors
    /// As [`Td3::new`].
    pub fn for_env<E: Env<Obs = f32, Act = f32>>(
        env: &E,
        config: Td3Config,
        seed: u64,
    ) -> Result<Self> {
        Self::new(env.observation_space(), env.action_space(), config, seed)
    }

    /// The configuration.
    pub fn config(&self) -> &Td3Config {
        &self.config
    }

    /// The actor network (its outputs before `tanh`).
    pub fn actor_network(&self) -> &Mlp {
        &self.actor
    }

    /// One gradient step on a batch sampled from a replay buffer with the blueprint's
    /// columns (`obs`, `action`, `reward`, `terminated`, `truncated`, `next_obs`), in
    /// Stable-Baselines3's order: the critics; then, every `policy_delay`-th step, the
    /// actor and the polyak targets.
    ///
    /// # Errors
    /// [`Error::Storage`] for a batch without those columns; [`Error::ShapeMismatch`] for
    /// columns of other widths or more rows than `batch_size`; [`Error::Diverged`] if a
    /// loss is not finite: for the critic loss nothing is applied (the noise generator
    /// is rewound too); for the actor loss (computed through the updated critics) the
    /// critics have stepped, the actor and the targets have not, and the step is not
    /// counted.
    pub fn update(&mut self, batch: &Batch) -> Result<Td3Stats> {
        let transitions =
            Transitions::<f32>::read(batch, self.config.batch_size, self.obs_dim, self.act_dim)?;
        self.update_transitions(transitions)
    }

    fn update_transitions(&mut self, transitions: Transitions<'_, f32>) -> Result<Td3Stats> {
        let rng_before = self.rng.clone();
        let critic_loss = match self.critic_gradients(&transitions) {
            Ok(loss) if loss.is_finite() => loss,
            result => {
                self.critics.grads.iter_mut().for_each(|g| g.fill(0.0));
                self.rng = rng_before;
                return Err(match result {
                    Err(e) => e,
                    Ok(value) => Error::Diverged {
                        what: "critic loss",
                        value,
                    },
                });
            }
        };
        self.critics.step()?;
        let actor_updated = (self.updates + 1).is_multiple_of(self.config.policy_delay);
        if actor_updated {
            let loss = self.actor_gradients(transitions.obs, transitions.rows)?;
            if !loss.is_finite() {
                self.actor_grads.fill(0.0);
                return Err(Error::Diverged {
                    what: "policy loss",
                    value: loss,
                });
            }
            let (params, grads) = (self.actor.params_mut(), &self.actor_grads);
            match self.critics.pool() {
                Some(pool) => self.actor_adam.update_on(pool, params, grads)?,
                None => self.actor_adam.update(params, grads)?,
            }
            self.actor_grads.fill(0.0);
            self.critics.polyak(self.config.tau)?;
            rl_nn::polyak(
                self.actor_target.params_mut(),
                self.actor.params(),
                self.config.tau,
            )?;
            self.last_actor_loss = loss;
        }
        self.updates += 1;
        Ok(Td3Stats {
            critic_loss,
            actor_loss: self.last_actor_loss,
            actor_updated,
        })
    }

    /// Adds the gradients of `MSE(Q1, y) + MSE(Q2, y)` into the critics' gradient
    /// buffers (drawing the smoothing noise) and returns the loss.
    fn critic_gradients(&mut self, transitions: &Transitions<'_, f32>) -> Result<f32> {
        let (obs_dim, act_dim) = (self.obs_dim, self.act_dim);
        let &Transitions {
            rows,
            obs,
            actions,
            rewards,
            terminated,
            next_obs,
            positions: _,
        } = transitions;
        let s = &mut self.scratch;
        let (sigma, clip) = (self.config.policy_noise, self.config.noise_clip);
        for e in &mut s.smoothing[..rows * act_dim] {
            let eps: f32 = self.rng.sample(StandardNormal);
            *e = (sigma * eps).clamp(-clip, clip);
        }
        // Smoothed target actions at the next observations.
        let out = self
            .actor_target
            .forward(next_obs, rows, &mut self.passes.next)?;
        let next = &mut s.next_actions[..rows * act_dim];
        squash(out, next);
        for (a, &e) in next.iter_mut().zip(&s.smoothing) {
            *a = (*a + e).clamp(-1.0, 1.0);
        }
        let critic_in = &mut s.critic_in[..rows * (obs_dim + act_dim)];
        join(critic_in, next_obs, next, obs_dim, act_dim);
        let input = &*critic_in;
        let [q0, q1] = &mut s.q;
        self.critics.both([q0, q1], |critic, q| {
            let out = critic.target.forward(input, rows, critic.target_ws)?;
            q[..rows].copy_from_slice(out);
            Ok(())
        })?;
        for b in 0..rows {
            let live = if terminated[b].0 == 0 { 1.0 } else { 0.0 };
            let next = s.q[0][b].min(s.q[1][b]);
            s.target[b] = rewards[b] + self.config.gamma * live * next;
        }

        // Critics on the stored actions (mapped back into [-1, 1]).
        for ((stored, &a), j) in s.stored_actions[..rows * act_dim]
            .iter_mut()
            .zip(actions)
            .zip((0..act_dim).cycle())
        {
            *stored = (a - self.offset[j]) / self.scale[j];
        }
        join(critic_in, obs, &s.stored_actions, obs_dim, act_dim);
        let (input, target) = (&*critic_in, &s.target[..rows]);
        let [dq0, dq1] = &mut s.dq;
        let losses = self.critics.both([dq0, dq1], |critic, dq| {
            let q = critic.online.forward(input, rows, critic.ws)?;
            // MSE = 2 x half the squared error, and so its gradient.
            let dq = &mut dq[..rows];
            let loss = 2.0 * half_squared_error(q, target, dq);
            dq.iter_mut().for_each(|d| *d *= 2.0);
            critic
                .online
                .backward(critic.ws, dq, Some(critic.grads), None)?;
            Ok(loss)
        })?;
        Ok(losses[0] + losses[1])
    }

    /// Adds the gradient of `-mean(Q1(s, tanh(actor(s))))` with respect to the actor's
    /// parameters into its gradient buffer, through the first critic (which gets no
    /// gradient); returns the loss.
    fn actor_gradients(&mut self, obs: &[f32], rows: usize) -> Result<f32> {
        let (obs_dim, act_dim) = (self.obs_dim, self.act_dim);
        let width = obs_dim + act_dim;
        let s = &mut self.scratch;
        let out = self.actor.forward(obs, rows, &mut self.passes.batch)?;
        let pi = &mut s.pi_actions[..rows * act_dim];
        squash(out, pi);
        let critic_in = &mut s.critic_in[..rows * width];
        join(critic_in, obs, pi, obs_dim, act_dim);
        let (critic, ws) = (&self.critics.online[0], &mut self.critics.ws[0]);
        let q = critic.forward(critic_in, rows, ws)?;
        let n = rows as f32;
        let loss = -q.iter().sum::<f32>() / n;
        let dq = &mut s.dq[0][..rows];
        dq.fill(-1.0 / n);
        let d_in = &mut s.d_in[..rows * width];
        critic.backward(ws, dq, None, Some(d_in))?;
        for ((d, row), a) in s.d_actor[..rows * act_dim]
            .chunks_exact_mut(act_dim)
            .zip(d_in.chunks_exact(width))
            .zip(pi.chunks_exact(act_dim))
        {
            for j in 0..act_dim {
                d[j] = row[obs_dim + j] * (1.0 - a[j] * a[j]);
            }
        }
        self.actor.backward(
            &mut self.passes.batch,
            &s.d_actor[..rows * act_dim],
            Some(&mut self.actor_grads),
            None,
        )?;
        Ok(loss)
    }

    /// Actions for `obs` (`rows x obs_dim`) in the environment's bounds by the current
    /// [`Mode`] (`log_probs`, one per row, get 0: the policy is deterministic).
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong length.
    pub fn act_rows(
        &mut self,
        obs: &[f32],
        actions: &mut [f32],
        log_probs: &mut [f32],
    ) -> Result<()> {
        Acting {
            actor: &self.actor,
            ws: &mut self.passes.act,
            rng: &mut self.rng,
            scale: &self.scale,
            offset: &self.offset,
            noise: match self.mode {
                Mode::Sample => self.config.exploration_noise,
                Mode::Deterministic => 0.0,
            },
        }
        .act(obs, actions, log_probs)
    }

    fn architecture(&self) -> Td3Architecture {
        Td3Architecture {
            actor: self.actor.architecture(),
            critic: self.critics.online[0].architecture(),
            action_side: format!("box {}", self.act_dim),
        }
    }
}

/// The configuration fields that must agree for a checkpoint to resume exactly.
fn check_config(ours: &Td3Config, theirs: &Td3Config) -> Result<()> {
    first_difference!(
        Td3Config,
        "td3",
        ours,
        theirs,
        [
            hidden,
            batch_size,
            gamma,
            tau,
            policy_delay,
            policy_noise,
            noise_clip,
        ],
        // The learning rate and the exploration (acting only) may change on resume.
        except[adam, exploration_noise]
    )?;
    adam_difference("td3", &ours.adam, &theirs.adam)
}

impl crate::predict::Predict for Td3 {
    fn mode(&self) -> Mode {
        self.mode
    }

    fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }
}

impl crate::learner::Learner for Td3 {
    type Saved = Td3State;

    fn kind(&self) -> &'static str {
        CHECKPOINT_KIND
    }

    fn updates(&self) -> u64 {
        self.updates
    }

    /// The critics run side by side on `pool` (`TwinCritics::both`) and every batch
    /// pass splits its products across it.
    fn set_pool(&mut self, pool: Option<Arc<Pool>>) {
        self.critics.set_pool(pool.as_ref());
        self.passes.set_pool(pool.as_ref());
    }

    /// Everything the learner holds: networks, targets, gradients, Adam moments,
    /// workspaces and per-update buffers ([`Td3::blueprint`]). Constant for its life;
    /// the replay buffer is the caller's.
    fn memory_plan(&self) -> MemoryPlan {
        self.blueprint.learner.clone()
    }

    /// The whole learner state: actor, critics, targets, optimisers, update count and
    /// noise generator.
    fn checkpoint(&self) -> Checkpoint<'_, Td3State> {
        let critics = &self.critics;
        Checkpoint {
            kind: CHECKPOINT_KIND.to_owned(),
            networks: vec![
                NetworkState::capture("actor", &self.actor, Some(&self.actor_adam)),
                NetworkState::capture("actor_target", &self.actor_target, None),
                NetworkState::capture("critic1", &critics.online[0], Some(&critics.adam[0])),
                NetworkState::capture("critic2", &critics.online[1], Some(&critics.adam[1])),
                NetworkState::capture("critic1_target", &critics.target[0], None),
                NetworkState::capture("critic2_target", &critics.target[1], None),
            ],
            state: Td3State {
                config: self.config.clone(),
                seed: self.seed,
                architecture: self.architecture(),
                updates: self.updates,
                rng: self.rng.clone(),
            },
        }
    }

    /// Restores a [`Td3::checkpoint`](crate::learner::Learner::checkpoint); every network
    /// and optimiser state is checked first and on error nothing changes.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`] for another configuration or architecture;
    /// checkpoint shape and optimiser-state errors.
    fn restore(&mut self, checkpoint: &Checkpoint<Td3State>) -> Result<()> {
        let state = &checkpoint.state;
        if state.architecture != self.architecture() {
            return Err(Error::CheckpointMismatch {
                what: "TD3 architecture".to_owned(),
                expected: format!("{:?}", self.architecture()),
                actual: format!("{:?}", state.architecture),
            });
        }
        check_config(&self.config, &state.config)?;
        let mut fresh = self.clone();
        {
            let critics = &mut fresh.critics;
            let [online1, online2] = &mut critics.online;
            let [target1, target2] = &mut critics.target;
            let [adam1, adam2] = &mut critics.adam;
            let parts: [(&str, &mut dyn Weights, Option<&mut Adam>); 6] = [
                ("actor", &mut fresh.actor, Some(&mut fresh.actor_adam)),
                ("actor_target", &mut fresh.actor_target, None),
                ("critic1", online1, Some(adam1)),
                ("critic2", online2, Some(adam2)),
                ("critic1_target", target1, None),
                ("critic2_target", target2, None),
            ];
            for (name, net, adam) in parts {
                checkpoint.network(name)?.restore_into(net, adam)?;
            }
        }
        // The optimisers keep the moments they saved and take this learner's rate.
        let lr = fresh.config.adam.lr;
        for adam in std::iter::once(&mut fresh.actor_adam).chain(&mut fresh.critics.adam) {
            adam.set_lr(lr)?;
        }
        fresh.updates = state.updates;
        fresh.rng = state.rng.clone();
        fresh.seed = state.seed;
        *self = fresh;
        Ok(())
    }
}

impl crate::learner::OffPolicyLearner for Td3 {
    type Stats = Td3Stats;
    type Actor = Td3Actor;

    fn actor(&self) -> Result<Td3Actor> {
        Ok(Td3Actor::new(self))
    }

    fn refresh_actor(&self, actor: &mut Td3Actor) -> Result<()> {
        actor.refresh(self)
    }

    fn blueprint(&self) -> &OffPolicyBlueprint {
        &self.blueprint
    }

    fn update(&mut self, batch: &Batch) -> Result<Td3Stats> {
        Td3::update(self, batch)
    }
}

impl Policy for Td3 {
    type Obs = f32;
    type Act = f32;
    type State = ();

    fn act(
        &mut self,
        obs: &[f32],
        states: &mut [()],
        out: ActOutput<'_, f32>,
    ) -> Result<(), PolicyError> {
        let rows = states.len();
        if out.log_probs.len() != rows {
            return Err(Box::new(Error::shape(
                "log-prob output",
                rows,
                out.log_probs.len(),
            )));
        }
        Ok(self.act_rows(obs, out.actions, out.log_probs)?)
    }
}
