//! SAC for continuous actions: tanh-squashed Gaussian actor, twin critics.

use rand::Rng;
use rand_distr::StandardNormal;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{ActOutput, Policy, PolicyError};
use rl_core::{DType, Env, Location, MemoryPlan, Schema, Space, TransitionSchema};
use rl_nn::{Checkpoint, Mlp, MlpWorkspace, Module};
use rl_storage::Batch;

use super::{
    ACT_ROWS, ActorPasses, Core, CoreShape, SacActor, SacConfig, SacState, SacStats, Transitions,
    half_squared_error,
};
use crate::error::{Error, Result};
use crate::learner::{OffPolicyBlueprint, Scaled, Sizes};
use crate::policy::{Mode, describe};

/// The `kind` of continuous SAC checkpoints.
pub const CHECKPOINT_KIND: &str = "sac";

/// Bounds of the actor's log standard deviation (Stable-Baselines3's).
const LOG_STD_MIN: f32 = -20.0;
const LOG_STD_MAX: f32 = 2.0;
/// Added inside `log(1 - tanh(u)^2 + EPS)` (Stable-Baselines3's), so that saturated
/// actions keep a finite log-probability.
const SQUASH_EPS: f32 = 1e-6;
/// `ln(2 pi) / 2`.
const HALF_LN_2PI: f32 = 0.918_938_5;

/// Soft actor-critic for `f32` box actions (Haarnoja et al. 2018, with Stable-Baselines3's
/// details).
///
/// - Actor: a `rl_nn::Mlp` `obs -> hidden -> 2 x dim(A)` giving the mean and the log
///   standard deviation (clamped to `[-20, 2]`) of a Gaussian; actions are
///   `tanh(mean + std * eps)`, with
///   `log pi = sum_j [log N(u_j) - log(1 - tanh(u_j)^2 + 1e-6)]`.
/// - Critics: two `rl_nn::Mlp`s `obs ++ action -> hidden -> 1` with polyak-averaged
///   targets. Target: `y = r + gamma (1 - terminated) (min_i Q'_i(s', a') - alpha log
///   pi(a' | s'))`; truncated transitions bootstrap.
/// - Entropy coefficient learned towards `-dim(A)` (see [`SacConfig`]).
/// - Actions live in `[-1, 1]` inside the trainer and are mapped affinely onto the
///   environment's bounds when acting, as Stable-Baselines3 does; the replay buffer holds
///   the environment's actions and [`Sac::update`] maps them back.
///
/// It is also the collector's [`Policy`]: [`Mode::Sample`] draws actions (training),
/// [`Mode::Deterministic`] takes `tanh(mean)`.
///
/// ```
/// use rl_algos::sac::{Sac, SacConfig};
/// use rl_envs::Pendulum;
/// use rl_storage::Batch;
///
/// # fn main() -> rl_algos::Result<()> {
/// let config = SacConfig { hidden: vec![32, 32], batch_size: 8, ..SacConfig::sb3() };
/// let mut sac = Sac::for_env(&Pendulum::new(0), config, 0)?;
/// let mut batch = Batch::new(&sac.replay_schema()?, 8)?;
/// // ... fill `batch` from a replay buffer, then:
/// # use rl_storage::{ColumnSlice, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};
/// # use rl_core::Flag;
/// # let mut replay = ReplayBuffer::new(RamStorage::new(sac.replay_schema()?, 64, None)?, Uniform::new(0));
/// # for i in 0..16 {
/// #     let obs = [1.0, 0.0, i as f32 / 16.0];
/// #     replay.push(&[ColumnSlice::F32(&obs), ColumnSlice::F32(&[0.5]), ColumnSlice::F32(&[-1.0]),
/// #         ColumnSlice::Bool(&[Flag(0)]), ColumnSlice::Bool(&[Flag(0)]), ColumnSlice::F32(&obs)])?;
/// # }
/// # replay.sample(&mut batch)?;
/// let stats = sac.update(&batch)?;
/// assert!(stats.critic_loss.is_finite());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Sac {
    pub(super) core: Core,
    /// What it holds, planned before it was built ([`Sac::blueprint`]).
    blueprint: OffPolicyBlueprint,
    obs_dim: usize,
    act_dim: usize,
    /// Environment action `= offset + scale * a` for `a` in `[-1, 1]`.
    scale: Vec<f32>,
    offset: Vec<f32>,
    passes: ActorPasses,
    pub(super) scratch: Scratch,
}

/// Per-update buffers, sized for `batch_size` rows at construction.
#[derive(Clone, Debug)]
pub(super) struct Scratch {
    /// `rows x (obs + act)` critic inputs.
    critic_in: Vec<f32>,
    /// Gaussian noise of the batch's actions and of the next actions.
    pub(super) noise: Vec<f32>,
    next_noise: Vec<f32>,
    /// Squashed actions (in `[-1, 1]`) and their log-probs.
    pi_actions: Vec<f32>,
    pi_logp: Vec<f32>,
    next_actions: Vec<f32>,
    next_logp: Vec<f32>,
    /// Stored actions mapped into `[-1, 1]`.
    stored_actions: Vec<f32>,
    /// Critic targets `y`.
    target: Vec<f32>,
    /// `Q_i` of each row, per critic.
    q: [Vec<f32>; 2],
    /// Gradient of the loss with respect to each critic's output, per critic.
    dq: [Vec<f32>; 2],
    /// Gradient with respect to each critic's input (`rows x (obs + act)`).
    d_in: [Vec<f32>; 2],
    /// Gradient with respect to the actor's output (`rows x 2 act`).
    d_actor: Vec<f32>,
    act_noise: Vec<f32>,
    act_actions: Vec<f32>,
    act_logp: Vec<f32>,
}

impl Scratch {
    fn new(rows: usize, obs: usize, act: usize) -> Self {
        let z = |n: usize| vec![0.0; n];
        Self {
            critic_in: z(rows * (obs + act)),
            noise: z(rows * act),
            next_noise: z(rows * act),
            pi_actions: z(rows * act),
            pi_logp: z(rows),
            next_actions: z(rows * act),
            next_logp: z(rows),
            stored_actions: z(rows * act),
            target: z(rows),
            q: [z(rows), z(rows)],
            dq: [z(rows), z(rows)],
            d_in: [z(rows * (obs + act)), z(rows * (obs + act))],
            d_actor: z(rows * 2 * act),
            act_noise: z(ACT_ROWS * act),
            act_actions: z(ACT_ROWS * act),
            act_logp: z(ACT_ROWS),
        }
    }

    /// Bytes of [`Scratch::new`] for `rows` rows, before it exists: per row three
    /// critic inputs and their two gradients (`obs + act` each), seven action vectors
    /// (noise twice, squashed and next actions, stored actions, two for the actor's
    /// output gradient) and six scalars; `ACT_ROWS` rows of noise, actions and log-probs
    /// for acting.
    fn bytes_for(rows: usize, obs: usize, act: usize) -> Result<u64> {
        let sizes = Sizes::of("sac.batch_size");
        let per_row = sizes.add(&[
            sizes.count(&[3, sizes.add(&[obs, act])?])?,
            sizes.count(&[7, act])?,
            7,
        ])?;
        let acting = sizes.count(&[ACT_ROWS, sizes.add(&[2 * act, 1])?])?;
        sizes.f32s(&[sizes.add(&[sizes.count(&[rows, per_row])?, acting])?])
    }
}

/// The observation length (an `f32` box) and the affine map from `[-1, 1]` onto the
/// action box's bounds (scale, offset per element) of SAC's spaces.
pub(crate) fn spaces(
    observation_space: &Space,
    action_space: &Space,
) -> Result<(usize, Vec<f32>, Vec<f32>)> {
    let obs_dim = match observation_space {
        Space::Box(b) if b.dtype() == DType::F32 => b.flat_len(),
        other => {
            return Err(Error::SpaceMismatch {
                what: "observation space",
                expected: "a box of f32 elements".to_owned(),
                actual: describe(other),
            });
        }
    };
    let (scale, offset): (Vec<f32>, Vec<f32>) = match action_space {
        Space::Box(b)
            if b.dtype() == DType::F32
                && (0..b.flat_len()).all(|i| {
                    b.low(i).is_finite() && b.high(i).is_finite() && b.high(i) > b.low(i)
                }) =>
        {
            (0..b.flat_len())
                .map(|i| {
                    let (low, high) = (b.low(i), b.high(i));
                    ((high - low) / 2.0, (high + low) / 2.0)
                })
                .unzip()
        }
        other => {
            return Err(Error::SpaceMismatch {
                what: "action space",
                expected: "a box of f32 elements with finite bounds, low < high".to_owned(),
                actual: describe(other),
            });
        }
    };
    if obs_dim == 0 || scale.is_empty() {
        return Err(Error::config(
            "spaces",
            "have no elements: SAC and TD3 need at least one observation and one action element",
        ));
    }
    Ok((obs_dim, scale, offset))
}

/// Squashes the actor's outputs (`rows x [mean, log_std]`) with `noise` (ignored when
/// `deterministic`) into actions in `[-1, 1]` and their log-probabilities.
pub(super) fn squash(
    out: &[f32],
    noise: &[f32],
    act_dim: usize,
    deterministic: bool,
    actions: &mut [f32],
    logp: &mut [f32],
) {
    for (((o, eps), a), lp) in out
        .chunks_exact(2 * act_dim)
        .zip(noise.chunks_exact(act_dim))
        .zip(actions.chunks_exact_mut(act_dim))
        .zip(logp.iter_mut())
    {
        let (mean, log_std) = o.split_at(act_dim);
        let mut sum = 0.0;
        for j in 0..act_dim {
            let ls = log_std[j].clamp(LOG_STD_MIN, LOG_STD_MAX);
            let e = if deterministic { 0.0 } else { eps[j] };
            let squashed = (mean[j] + ls.exp() * e).tanh();
            a[j] = squashed;
            sum += -0.5 * e * e - ls - HALF_LN_2PI - (1.0 - squashed * squashed + SQUASH_EPS).ln();
        }
        *lp = sum;
    }
}

/// Writes `[obs, actions]` rows into `dst`.
pub(crate) fn join(dst: &mut [f32], obs: &[f32], actions: &[f32], obs_dim: usize, act_dim: usize) {
    for ((row, o), a) in dst
        .chunks_exact_mut(obs_dim + act_dim)
        .zip(obs.chunks_exact(obs_dim))
        .zip(actions.chunks_exact(act_dim))
    {
        row[..obs_dim].copy_from_slice(o);
        row[obs_dim..].copy_from_slice(a);
    }
}

/// The actor's pass over a batch of `rows` observations, squashed with given noise.
#[derive(Clone, Copy)]
struct ActorPass<'a> {
    actor: &'a Mlp,
    rows: usize,
    act_dim: usize,
}

impl<'a> ActorPass<'a> {
    fn new(actor: &'a Mlp, rows: usize, act_dim: usize) -> Self {
        Self {
            actor,
            rows,
            act_dim,
        }
    }

    /// Runs the actor on `obs` in `ws` (kept for a backward pass) and writes the squashed
    /// actions and their log-probs for `noise`.
    fn run(
        self,
        obs: &[f32],
        ws: &mut MlpWorkspace,
        noise: &[f32],
        actions: &mut [f32],
        logp: &mut [f32],
    ) -> Result<()> {
        let (rows, act_dim) = (self.rows, self.act_dim);
        let out = self.actor.forward(obs, rows, ws)?;
        squash(
            out,
            noise,
            act_dim,
            false,
            &mut actions[..rows * act_dim],
            &mut logp[..rows],
        );
        Ok(())
    }
}

fn fill_normal(rng: &mut Xoshiro256PlusPlus, out: &mut [f32]) {
    for x in out {
        *x = rng.sample(StandardNormal);
    }
}

/// What acting for a collector reads and writes: the actor's forward pass over at most
/// [`ACT_ROWS`] rows at a time, noise, squashed actions and log-probs in `ACT_ROWS`-row
/// buffers, actions mapped onto the environment's bounds. Shared by [`Sac`] and
/// [`super::SacActor`], so both act alike.
pub(super) struct Acting<'a> {
    pub(super) actor: &'a Mlp,
    pub(super) ws: &'a mut MlpWorkspace,
    pub(super) rng: &'a mut Xoshiro256PlusPlus,
    pub(super) noise: &'a mut [f32],
    pub(super) squashed: &'a mut [f32],
    pub(super) logp: &'a mut [f32],
    pub(super) scale: &'a [f32],
    pub(super) offset: &'a [f32],
    pub(super) deterministic: bool,
}

impl Acting<'_> {
    /// Actions for `obs` in the environment's bounds and their log-probabilities.
    pub(super) fn act(self, obs: &[f32], actions: &mut [f32], log_probs: &mut [f32]) -> Result<()> {
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
        for ((o, a), lp) in obs
            .chunks(ACT_ROWS * obs_dim)
            .zip(actions.chunks_mut(ACT_ROWS * act_dim))
            .zip(log_probs.chunks_mut(ACT_ROWS))
        {
            let n = lp.len();
            if !self.deterministic {
                fill_normal(self.rng, &mut self.noise[..n * act_dim]);
            }
            let out = self.actor.forward(o, n, self.ws)?;
            squash(
                out,
                self.noise,
                act_dim,
                self.deterministic,
                &mut self.squashed[..n * act_dim],
                &mut self.logp[..n],
            );
            for ((dst, &src), j) in a.iter_mut().zip(&*self.squashed).zip((0..act_dim).cycle()) {
                *dst = self.offset[j] + self.scale[j] * src;
            }
            lp.copy_from_slice(&self.logp[..n]);
        }
        Ok(())
    }
}

impl Sac {
    /// A trainer for observations in `observation_space` (an `f32` box) and actions in
    /// `action_space` (an `f32` box with finite bounds); `seed` seeds the networks and
    /// the action noise (a run passes its `RunConfig::seed`).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration; [`Error::SpaceMismatch`] for a
    /// space that is not an `f32` box or an action space with infinite or empty bounds.
    pub fn new(
        observation_space: &Space,
        action_space: &Space,
        config: SacConfig,
        seed: u64,
    ) -> Result<Self> {
        let blueprint = Self::blueprint(observation_space, action_space, &config)?;
        let (obs_dim, scale, offset) = spaces(observation_space, action_space)?;
        let act_dim = scale.len();
        let rows = config.batch_size;
        let core = Core::new(
            config,
            seed,
            obs_dim,
            2 * act_dim,
            obs_dim + act_dim,
            1,
            -(act_dim as f32),
            format!("box {act_dim}"),
        )?;
        Ok(Self {
            obs_dim,
            act_dim,
            scale,
            offset,
            passes: ActorPasses::new(&core.actor, rows),
            scratch: Scratch::new(rows, obs_dim, act_dim),
            core,
            blueprint,
        })
    }

    /// What a learner for `observation_space` and `action_space` with `config` holds,
    /// reads and asks of its actors, from the sizes alone: nothing is allocated.
    /// [`Sac::new`] plans the same (its
    /// [`memory_plan`](crate::learner::Learner::memory_plan) is this blueprint's) and
    /// refuses what this refuses.
    ///
    /// # Errors
    /// As [`Sac::new`]; [`Error::Config`] for sizes whose bytes overflow.
    pub fn blueprint(
        observation_space: &Space,
        action_space: &Space,
        config: &SacConfig,
    ) -> Result<OffPolicyBlueprint> {
        config.validate()?;
        if config.ensemble.is_some() {
            return Err(Error::config(
                "sac.ensemble",
                "is set, but continuous SAC has no critic heads: remove it (algo = \"discrete_sac\" and \"dqn\" take one)",
            ));
        }
        let (obs_dim, scale, _) = spaces(observation_space, action_space)?;
        let act_dim = scale.len();
        let sizes = Sizes::of("sac.hidden");
        let critic_in = sizes.add(&[obs_dim, act_dim])?;
        let shape = CoreShape::new(config, (obs_dim, 2 * act_dim), (critic_in, 1))?;
        let rows = config.batch_size;
        let mut plan = shape.plan(rows)?;
        plan.add(
            "sac/update buffers",
            Location::Ram,
            Scratch::bytes_for(rows, obs_dim, act_dim)?,
        );
        let schema = TransitionSchema::new(DType::F32, &[obs_dim], DType::F32, &[act_dim])
            .with_next_obs()
            .build()?;
        let mut blueprint = OffPolicyBlueprint::new(plan, schema, rows);
        let buffers = sizes
            .f32s(&[sizes.add(&[2 * act_dim, sizes.count(&[ACT_ROWS, 2 * act_dim + 1])?])?])?;
        blueprint.actor.push(Scaled::per(
            "sac actor x",
            " (weights, workspace, noise)",
            sizes.sum(&[shape.actor_copy_bytes()?, buffers])?,
        ));
        Ok(blueprint)
    }

    /// [`Sac::new`] with `env`'s spaces.
    ///
    /// # Errors
    /// As [`Sac::new`].
    pub fn for_env<E: Env<Obs = f32, Act = f32>>(
        env: &E,
        config: SacConfig,
        seed: u64,
    ) -> Result<Self> {
        Self::new(env.observation_space(), env.action_space(), config, seed)
    }

    /// The replay columns [`Sac::update`] reads (and `rl-collect`'s collectors write):
    /// `obs` f32, `action` f32, `reward` f32, `terminated` and `truncated` bool,
    /// `next_obs` f32.
    ///
    /// # Errors
    /// None in practice (the schema is valid by construction); kept for `Schema::new`.
    pub fn replay_schema(&self) -> Result<Schema> {
        Ok(self.blueprint.replay_schema.clone())
    }

    /// One gradient step (critics, actor, entropy coefficient, then the targets every
    /// `target_update_interval` steps) on a batch sampled from a replay buffer with
    /// [`Sac::replay_schema`]'s columns, in Stable-Baselines3's order.
    ///
    /// # Errors
    /// [`Error::Storage`] for a batch without those columns; [`Error::ShapeMismatch`] for
    /// columns of other widths or more rows than `batch_size`; [`Error::Diverged`] if a
    /// loss is not finite: for the critic loss nothing is applied (the noise generator
    /// is rewound too); for the actor loss (computed through the updated critics) the
    /// critics have already stepped, the actor, the entropy coefficient and the targets
    /// have not.
    pub fn update(&mut self, batch: &Batch) -> Result<SacStats> {
        let transitions = Transitions::<f32>::read(
            batch,
            self.core.config.batch_size,
            self.obs_dim,
            self.act_dim,
        )?;
        self.update_transitions(transitions, None)
    }

    /// [`Sac::update`] on transitions already read, writing the critics' loss gradient
    /// with respect to the observations into `obs_grads` (`rows x obs_dim`) when given:
    /// what a history summarizer in front of the critics trains on.
    pub(crate) fn update_transitions(
        &mut self,
        transitions: Transitions<'_, f32>,
        mut obs_grads: Option<&mut [f32]>,
    ) -> Result<SacStats> {
        let (obs_dim, act_dim) = (self.obs_dim, self.act_dim);
        let Transitions {
            rows,
            obs,
            actions,
            rewards,
            terminated,
            next_obs,
            positions: _,
        } = transitions;
        if let Some(grads) = &obs_grads
            && grads.len() != rows * obs_dim
        {
            return Err(Error::shape(
                "observation gradients",
                rows * obs_dim,
                grads.len(),
            ));
        }
        let s = &mut self.scratch;
        let n = rows as f32;

        // The policy's actions for the batch (kept for the actor's backward pass).
        let rng_before = self.core.rng.clone();
        fill_normal(&mut self.core.rng, &mut s.noise[..rows * act_dim]);
        fill_normal(&mut self.core.rng, &mut s.next_noise[..rows * act_dim]);
        // And at the next observations, side by side on a pool.
        let Scratch {
            noise,
            next_noise,
            pi_actions,
            pi_logp,
            next_actions,
            next_logp,
            ..
        } = &mut self.scratch;
        let pass = ActorPass::new(&self.core.actor, rows, act_dim);
        let ActorPasses { batch, next, .. } = &mut self.passes;
        let (now, later) = self.core.critics.join(
            || pass.run(obs, batch, noise, pi_actions, pi_logp),
            || pass.run(next_obs, next, next_noise, next_actions, next_logp),
        );
        now?;
        later?;
        let s = &mut self.scratch;
        let alpha = self.core.temperature.alpha();
        let entropy = -s.pi_logp[..rows].iter().sum::<f32>() / n;

        // Targets from the target critics at the next observations.
        let critic_in = &mut s.critic_in[..rows * (obs_dim + act_dim)];
        join(critic_in, next_obs, &s.next_actions, obs_dim, act_dim);
        let input = &*critic_in;
        let [q0, q1] = &mut s.q;
        self.core.critics.both([q0, q1], |critic, q| {
            let out = critic.target.forward(input, rows, critic.target_ws)?;
            q[..rows].copy_from_slice(out);
            Ok(())
        })?;
        for b in 0..rows {
            let next = s.q[0][b].min(s.q[1][b]) - alpha * s.next_logp[b];
            let live = if terminated[b].0 == 0 { 1.0 } else { 0.0 };
            s.target[b] = rewards[b] + self.core.config.gamma * live * next;
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
        let width = obs_dim + act_dim;
        let want_input_grads = obs_grads.is_some();
        let [dq0, dq1] = &mut s.dq;
        let [d0, d1] = &mut s.d_in;
        let losses = self
            .core
            .critics
            .both([(dq0, d0), (dq1, d1)], |critic, (dq, d_in)| {
                let q = critic.online.forward(input, rows, critic.ws)?;
                let loss = half_squared_error(q, target, &mut dq[..rows]);
                critic.online.backward(
                    critic.ws,
                    &dq[..rows],
                    Some(critic.grads),
                    want_input_grads.then_some(&mut d_in[..rows * width]),
                )?;
                Ok(loss)
            })?;
        let critic_loss = losses[0] + losses[1];
        // The observation part of the critics' input gradients, summed.
        if let Some(grads) = &mut obs_grads {
            for (i, d_in) in s.d_in.iter().enumerate() {
                for (g, d) in grads
                    .chunks_exact_mut(obs_dim)
                    .zip(d_in[..rows * width].chunks_exact(width))
                {
                    for (g, &d) in g.iter_mut().zip(&d[..obs_dim]) {
                        *g = if i == 0 { d } else { *g + d };
                    }
                }
            }
        }
        if !critic_loss.is_finite() {
            self.core.critics.grads.iter_mut().for_each(|g| g.fill(0.0));
            self.core.rng = rng_before;
            return Err(Error::Diverged {
                what: "critic loss",
                value: critic_loss,
            });
        }
        self.core.critics.step()?;

        let actor_loss = self.actor_gradients(obs, rows, alpha)?;
        self.core.step_actor(entropy)?;
        self.core.finish_update()?;
        Ok(SacStats {
            critic_loss,
            actor_loss,
            alpha,
            entropy,
        })
    }

    /// Elements of the observations and of the actions it takes.
    pub(crate) fn dims(&self) -> (usize, usize) {
        (self.obs_dim, self.act_dim)
    }

    /// The actor's squashed actions and log-probs for the batch's observations with the
    /// noise in the scratch; keeps the pass in `passes.batch` for the backward pass.
    #[cfg(test)]
    pub(super) fn policy_actions(&mut self, obs: &[f32], rows: usize) -> Result<()> {
        let s = &mut self.scratch;
        let (actions, logp) = (&mut s.pi_actions, &mut s.pi_logp);
        let pass = ActorPass::new(&self.core.actor, rows, self.act_dim);
        pass.run(obs, &mut self.passes.batch, &s.noise, actions, logp)
    }

    /// Adds the gradient of `mean(alpha log pi - min_i Q_i(s, pi(s)))` with respect to
    /// the actor's parameters into its gradient buffer, through the critics (which get
    /// no gradient) and the squashing; returns the loss. Needs [`Sac::policy_actions`]
    /// first.
    pub(super) fn actor_gradients(&mut self, obs: &[f32], rows: usize, alpha: f32) -> Result<f32> {
        let (obs_dim, act_dim) = (self.obs_dim, self.act_dim);
        let s = &mut self.scratch;
        let n = rows as f32;
        let critic_in = &mut s.critic_in[..rows * (obs_dim + act_dim)];
        join(critic_in, obs, &s.pi_actions, obs_dim, act_dim);
        let input = &*critic_in;
        let [q0, q1] = &mut s.q;
        self.core.critics.both([q0, q1], |critic, q| {
            let out = critic.online.forward(input, rows, critic.ws)?;
            q[..rows].copy_from_slice(out);
            Ok(())
        })?;
        let mut actor_loss = 0.0;
        for (i, dq) in s.dq.iter_mut().enumerate() {
            for (b, d) in dq[..rows].iter_mut().enumerate() {
                let chosen = if s.q[0][b] <= s.q[1][b] { 0 } else { 1 };
                *d = if chosen == i { -1.0 / n } else { 0.0 };
            }
        }
        let width = obs_dim + act_dim;
        let [dq0, dq1] = &s.dq;
        let [d0, d1] = &mut s.d_in;
        self.core
            .critics
            .both([(dq0, d0), (dq1, d1)], |critic, (dq, d_in)| {
                critic.online.backward(
                    critic.ws,
                    &dq[..rows],
                    None,
                    Some(&mut d_in[..rows * width]),
                )?;
                Ok(())
            })?;
        let out = self.passes.batch.output();
        for b in 0..rows {
            actor_loss += (alpha * s.pi_logp[b] - s.q[0][b].min(s.q[1][b])) / n;
            let o = &out[b * 2 * act_dim..(b + 1) * 2 * act_dim];
            let d = &mut s.d_actor[b * 2 * act_dim..(b + 1) * 2 * act_dim];
            for j in 0..act_dim {
                let k = b * (obs_dim + act_dim) + obs_dim + j;
                let d_action = s.d_in[0][k] + s.d_in[1][k];
                let a = s.pi_actions[b * act_dim + j];
                let one_minus = 1.0 - a * a;
                // d/du of alpha * log pi / n: only the squash correction depends on u.
                let d_u = d_action * one_minus
                    + alpha / n * 2.0 * a * one_minus / (one_minus + SQUASH_EPS);
                let raw_log_std = o[act_dim + j];
                let inside = (LOG_STD_MIN..=LOG_STD_MAX).contains(&raw_log_std);
                let std = raw_log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp();
                d[j] = d_u;
                // u = mean + std * eps: du/dlog_std = std * eps; log N adds -1 per dim.
                d[act_dim + j] = if inside {
                    d_u * std * s.noise[b * act_dim + j] - alpha / n
                } else {
                    0.0
                };
            }
        }
        if !actor_loss.is_finite() {
            return Err(Error::Diverged {
                what: "policy loss",
                value: actor_loss,
            });
        }
        self.core.actor.backward(
            &mut self.passes.batch,
            &s.d_actor[..rows * 2 * act_dim],
            Some(&mut self.core.actor_grads),
            None,
        )?;
        Ok(actor_loss)
    }

    /// Actions for `obs` (`rows x obs_dim`) in the environment's bounds, and their
    /// log-probabilities, by the current [`Mode`].
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong length.
    pub fn act_rows(
        &mut self,
        obs: &[f32],
        actions: &mut [f32],
        log_probs: &mut [f32],
    ) -> Result<()> {
        let s = &mut self.scratch;
        Acting {
            actor: &self.core.actor,
            ws: &mut self.passes.act,
            rng: &mut self.core.rng,
            noise: &mut s.act_noise,
            squashed: &mut s.act_actions,
            logp: &mut s.act_logp,
            scale: &self.scale,
            offset: &self.offset,
            deterministic: self.core.mode == Mode::Deterministic,
        }
        .act(obs, actions, log_probs)
    }

    /// The action mapping onto the environment's bounds: `offset + scale * a`.
    pub(super) fn action_bounds(&self) -> (&[f32], &[f32]) {
        (&self.scale, &self.offset)
    }
}

impl crate::predict::Predict for Sac {
    fn mode(&self) -> Mode {
        self.core.mode
    }

    fn set_mode(&mut self, mode: Mode) {
        self.core.mode = mode;
    }
}

impl crate::learner::Learner for Sac {
    type Saved = SacState;

    fn kind(&self) -> &'static str {
        CHECKPOINT_KIND
    }

    fn updates(&self) -> u64 {
        self.core.updates()
    }

    fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
        self.core.set_pool(pool.as_ref());
        self.passes.set_pool(pool.as_ref());
    }

    /// Everything the trainer holds: networks, targets, gradients, Adam moments,
    /// workspaces and per-update buffers ([`Sac::blueprint`]). Constant for the
    /// trainer's life; the replay buffer is the caller's (plan it with
    /// `RamStorage::plan`).
    fn memory_plan(&self) -> MemoryPlan {
        self.blueprint.learner.clone()
    }

    /// The whole trainer state: actor, critics, targets, optimisers, `log alpha`, update
    /// count and noise generator.
    fn checkpoint(&self) -> Checkpoint<'_, SacState> {
        self.core.checkpoint(CHECKPOINT_KIND)
    }

    /// Restores a [`Sac::checkpoint`](crate::learner::Learner::checkpoint); everything is checked first and on error nothing
    /// changes.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`] for another configuration or
    /// architecture; checkpoint shape and optimiser-state errors.
    fn restore(&mut self, checkpoint: &Checkpoint<SacState>) -> Result<()> {
        self.core.restore(checkpoint)
    }
}

impl crate::learner::OffPolicyLearner for Sac {
    type Stats = SacStats;
    type Actor = SacActor;

    fn actor(&self) -> Result<SacActor> {
        Ok(SacActor::new(self))
    }

    fn refresh_actor(&self, actor: &mut SacActor) -> Result<()> {
        actor.refresh(self)
    }

    fn blueprint(&self) -> &OffPolicyBlueprint {
        &self.blueprint
    }

    fn update(&mut self, batch: &Batch) -> Result<SacStats> {
        Sac::update(self, batch)
    }
}

impl Policy for Sac {
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
