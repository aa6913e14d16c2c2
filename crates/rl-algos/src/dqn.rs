//! Deep Q-learning (Mnih et al. 2015) with Stable-Baselines3's semantics, plus double
//! Q-learning (van Hasselt et al. 2016).
//!
//! Networks are `rl_nn::Mlp`s on flat parameters: every buffer an update or an action
//! touches is allocated at construction, so memory is the [`Dqn::memory_plan`](crate::learner::Learner::memory_plan) from the
//! first step to the last, and neither an update nor acting allocates.
//!
//! [`Dqn`] and its update are here; `config.rs` holds [`DqnConfig`] and its schedules,
//! `loss.rs` the TD targets and the Huber loss's gradient, `checkpoint.rs` what a
//! checkpoint holds and its restore, `actor.rs` epsilon-greedy acting and
//! [`DqnActor`], and `ensemble.rs` bootstrapped DQN's masks, gradient normalisation and
//! [`ActiveHead`].

mod actor;
mod checkpoint;
mod config;
mod ensemble;
mod loss;

#[cfg(test)]
mod ensemble_tests;
#[cfg(test)]
pub(crate) mod tests;

pub use actor::DqnActor;
pub use checkpoint::{DqnArchitecture, DqnState};
pub use config::{DqnConfig, EnsembleConfig, EpsilonSchedule, TargetUpdate};
pub use ensemble::ActiveHead;
pub(crate) use ensemble::draw_masks;
pub(crate) use loss::Transitions;

use std::marker::PhantomData;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{ActOutput, Policy, PolicyError};
use rl_core::{DType, Env, Location, MemoryPlan, Schema, Space, TransitionSchema};
use rl_nn::{
    Adam, Init, Module, Network, NetworkSpec, NetworkWorkspace, Observation, Weights,
    clip_grad_norm,
};
use rl_storage::Batch;
use serde::{Deserialize, Serialize};

use actor::EpsilonGreedy;
use ensemble::Prior;
use loss::Scratch;

use crate::error::{Error, Result};
use crate::learner::{OffPolicyBlueprint, Scaled, Sizes};
use crate::policy::{Mode, describe};

/// The `kind` of DQN checkpoints.
pub const CHECKPOINT_KIND: &str = "dqn";

/// Checkpoint names of the online Q network (with its Adam state) and of its target.
const Q: &str = "q";
const Q_TARGET: &str = "q_target";
/// Checkpoint name of bootstrapped DQN's randomized prior network.
const Q_PRIOR: &str = "q_prior";

/// Rows the collector-facing forward pass handles at once; larger inputs are split: 64
/// for an MLP, 8 for a convolutional network, whose workspace per row is large (about
/// 0.46 MiB for the Nature CNN) and whose work per row amortises any call overhead.
pub(crate) fn act_rows(spec: &NetworkSpec) -> usize {
    match spec {
        NetworkSpec::Mlp(_) => 64,
        NetworkSpec::Cnn(_) => 8,
    }
}

/// Added to `|TD error|` in [`Dqn::priorities`], so that no row's priority is zero.
const PRIORITY_EPS: f32 = 1e-6;

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
/// - Bootstrapped DQN ([`DqnConfig::ensemble`], Osband et al. 2016): `K` Q-heads share
///   the torso (the network's output layer has `K x n_actions` outputs); each head has
///   its own targets from its own target head and learns only from the rows whose
///   bootstrap mask has its bit; each episode acts with one head drawn at its start
///   ([`ActiveHead`]); greedy acting ([`Mode::Deterministic`]) takes the argmax of the
///   mean over the heads. With [`EnsembleConfig::prior_scale`] β > 0 (Osband et al.
///   2018) each Q-value is the network's plus β times a fixed random prior network's.
///   Details in `ensemble.rs`.
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
/// let mut dqn = Dqn::for_env(&CartPole::new(0), config, 0)?;
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
#[derive(Debug)]
pub struct Dqn<O = f32> {
    config: DqnConfig,
    /// What it holds, planned before it was built ([`Dqn::blueprint`]).
    blueprint: OffPolicyBlueprint,
    /// Seeds the network initialisation, the exploration draws and the actors'.
    seed: u64,
    obs_dim: usize,
    n_actions: u32,
    /// Q-heads: 1 for plain DQN, [`EnsembleConfig::heads`] for bootstrapped DQN.
    heads: usize,
    q: Network,
    target: Network,
    adam: Adam,
    grads: Vec<f32>,
    /// The online network's passes over a batch (next observations, then observations,
    /// kept for the backward pass).
    ws: NetworkWorkspace,
    target_ws: NetworkWorkspace,
    act_ws: NetworkWorkspace,
    /// The randomized prior function, if [`EnsembleConfig::prior_scale`] is positive.
    prior: Option<Prior>,
    scratch: Scratch,
    rng: Xoshiro256PlusPlus,
    mode: Mode,
    updates: u64,
    env_steps: u64,
    _obs: PhantomData<fn() -> O>,
}

impl<O> Clone for Dqn<O> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            blueprint: self.blueprint.clone(),
            seed: self.seed,
            obs_dim: self.obs_dim,
            n_actions: self.n_actions,
            heads: self.heads,
            q: self.q.clone(),
            target: self.target.clone(),
            adam: self.adam.clone(),
            grads: self.grads.clone(),
            ws: self.ws.clone(),
            target_ws: self.target_ws.clone(),
            act_ws: self.act_ws.clone(),
            prior: self.prior.clone(),
            scratch: self.scratch.clone(),
            rng: self.rng.clone(),
            mode: self.mode,
            updates: self.updates,
            env_steps: self.env_steps,
            _obs: PhantomData,
        }
    }
}

/// The setting that names DQN's encoder.
const ENCODER_KEY: &str = "dqn.encoder";

/// The Q network's spec (through `config`'s encoder, for observations of element type
/// `O`) and the number of actions (a discrete space) of DQN's spaces.
fn spaces<O: Observation>(
    observation_space: &Space,
    action_space: &Space,
    config: &DqnConfig,
) -> Result<(NetworkSpec, u32)> {
    let shape = match observation_space {
        Space::Box(b) if b.dtype() == O::DTYPE && b.flat_len() > 0 => {
            crate::policy::obs_shape(observation_space, config.encoder, ENCODER_KEY)?
        }
        other => {
            return Err(Error::SpaceMismatch {
                what: "observation space",
                expected: format!("a box of {} elements", O::DTYPE),
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
    let spec = config.encoder.network(
        ENCODER_KEY,
        &shape,
        O::DTYPE == DType::U8,
        &config.hidden,
        n_actions as usize * heads_of(config),
        config.activation,
    )?;
    Ok((spec, n_actions))
}

/// Q-heads of `config`: 1 unless it is an ensemble.
fn heads_of(config: &DqnConfig) -> usize {
    config.ensemble.map_or(1, |e| e.heads as usize)
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

impl Dqn<f32> {
    /// [`Dqn::for_spaces`] for vector observations (`f32`).
    ///
    /// # Errors
    /// As [`Dqn::for_spaces`].
    pub fn new(
        observation_space: &Space,
        action_space: &Space,
        config: DqnConfig,
        seed: u64,
    ) -> Result<Self> {
        Self::for_spaces(observation_space, action_space, config, seed)
    }

    /// [`Dqn::blueprint_for`] for vector observations (`f32`).
    ///
    /// # Errors
    /// As [`Dqn::blueprint_for`].
    pub fn blueprint(
        observation_space: &Space,
        action_space: &Space,
        config: &DqnConfig,
    ) -> Result<OffPolicyBlueprint> {
        Self::blueprint_for(observation_space, action_space, config)
    }
}

impl<O: Observation> Dqn<O> {
    /// A learner for observations in `observation_space` (a box of `O`: `f32` vectors
    /// or images, `u8` frames through a convolutional [`DqnConfig::encoder`]) and
    /// actions in `action_space` (discrete); `seed` seeds the network initialisation
    /// and the exploration draws (a run passes its `RunConfig::seed`).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid configuration; [`Error::SpaceMismatch`] for an
    /// observation space that is not an `f32` box or an action space that is not
    /// discrete.
    pub fn for_spaces(
        observation_space: &Space,
        action_space: &Space,
        config: DqnConfig,
        seed: u64,
    ) -> Result<Self> {
        let blueprint = Self::blueprint_for(observation_space, action_space, &config)?;
        let (spec, n_actions) = spaces::<O>(observation_space, action_space, &config)?;
        let obs_dim = spec.input_len();
        let n = n_actions as usize;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let q = Network::new(spec, Init::Uniform, &mut rng)?;
        let rows = config.batch_size;
        let heads = heads_of(&config);
        let prior = match config.ensemble {
            Some(e) if e.prior_scale > 0.0 => Some(Prior::new(
                q.spec(),
                e.prior_scale,
                seed,
                rows,
                act_rows(&q.spec()),
            )?),
            _ => None,
        };
        Ok(Self {
            prior,
            obs_dim,
            n_actions,
            heads,
            target: q.clone(),
            adam: Adam::new(q.num_params(), config.adam)?,
            grads: vec![0.0; q.num_params()],
            ws: q.workspace(rows),
            target_ws: q.workspace(rows),
            act_ws: q.workspace(act_rows(&q.spec())),
            scratch: Scratch::new(rows, n, heads, config.ensemble.is_some()),
            q,
            rng,
            mode: Mode::Sample,
            updates: 0,
            env_steps: 0,
            config,
            blueprint,
            seed,
            _obs: PhantomData,
        })
    }

    /// What a learner for `observation_space` and `action_space` with `config` holds,
    /// reads and asks of its actors, from the sizes alone: nothing is allocated.
    /// [`Dqn::new`] plans the same (its
    /// [`memory_plan`](crate::learner::Learner::memory_plan) is this blueprint's) and
    /// refuses what this refuses.
    ///
    /// # Errors
    /// As [`Dqn::new`]; [`Error::Config`] for sizes whose bytes overflow.
    pub fn blueprint_for(
        observation_space: &Space,
        action_space: &Space,
        config: &DqnConfig,
    ) -> Result<OffPolicyBlueprint> {
        config.validate()?;
        let (spec, n_actions) = spaces::<O>(observation_space, action_space, config)?;
        let obs_dim = spec.input_len();
        let sizes = Sizes::of("dqn.hidden");
        let params = sizes.f32s(&[sizes.checked(spec.checked_num_params())?])?;
        let rows = config.batch_size;
        let batch = Sizes::of("dqn.batch_size");
        let mut plan = MemoryPlan::new()
            .with("dqn/q/parameters", Location::Ram, params)
            .with("dqn/q/gradients", Location::Ram, params)
            .with(
                format!("dqn/{Q}/adam moments"),
                Location::Ram,
                sizes.sum(&[params, params])?,
            )
            .with("dqn/q_target/parameters", Location::Ram, params);
        for (name, rows, sizes) in [
            ("q/workspace (update)", rows, batch),
            ("q_target/workspace (update)", rows, batch),
            ("q/workspace (acting)", act_rows(&spec), sizes),
        ] {
            plan.add(
                format!("dqn/{name}, {rows} rows"),
                Location::Ram,
                sizes.checked(spec.workspace_bytes(rows))?,
            );
        }
        let heads = heads_of(config);
        plan.add(
            "dqn/update buffers (targets, TD errors, output gradients, priorities)",
            Location::Ram,
            Scratch::bytes_for(rows, n_actions as usize, heads, batch)?,
        );
        if let Some(e) = config.ensemble
            && e.prior_scale > 0.0
        {
            plan.add("dqn/q_prior/parameters", Location::Ram, params);
            for (name, rows, sizes) in [
                ("q_prior/workspace (update observations)", rows, batch),
                ("q_prior/workspace (update next observations)", rows, batch),
                ("q_prior/workspace (acting)", act_rows(&spec), sizes),
            ] {
                plan.add(
                    format!("dqn/{name}, {rows} rows"),
                    Location::Ram,
                    sizes.checked(spec.workspace_bytes(rows))?,
                );
            }
        }
        if config.ensemble.is_some() {
            // The masks of a batch, drawn when it is sampled (`ensemble.rs` says why
            // they are not a replay column).
            plan.add(
                format!("dqn/bootstrap masks ({heads} heads, one i64 per batch row)"),
                Location::Ram,
                batch.bytes(&[rows, size_of::<i64>()])?,
            );
        }
        let schema = TransitionSchema::new(O::DTYPE, &[obs_dim], DType::U32, &[])
            .with_next_obs()
            .build()?;
        let mut blueprint = OffPolicyBlueprint::new(plan, schema, rows);
        let actor = sizes.sum(&[
            params,
            sizes.checked(spec.workspace_bytes(act_rows(&spec)))?,
        ])?;
        blueprint
            .actor
            .push(Scaled::per("dqn actor x", " (q weights, workspace)", actor));
        Ok(blueprint)
    }

    /// [`Dqn::new`] with `env`'s spaces.
    ///
    /// # Errors
    /// As [`Dqn::new`].
    pub fn for_env<E: Env<Obs = O, Act = u32>>(
        env: &E,
        config: DqnConfig,
        seed: u64,
    ) -> Result<Self> {
        Self::for_spaces(env.observation_space(), env.action_space(), config, seed)
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
    pub fn q_network(&self) -> &Network {
        &self.q
    }

    /// The target Q network.
    pub fn target_network(&self) -> &Network {
        &self.target
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
        Ok(self.blueprint.replay_schema.clone())
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
        transitions: Transitions<'_, O>,
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
        let heads = self.heads;
        for (p, td) in s
            .priorities
            .iter_mut()
            .zip(s.td[..pass.rows * heads].chunks_exact(heads))
        {
            // One head: |td| / 1.0, exactly plain DQN's.
            *p = td.iter().map(|t| t.abs()).sum::<f32>() / heads as f32 + PRIORITY_EPS;
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

    /// `|Q(s, a) - y| + 1e-6` for each row of the last applied [`Dqn::update`] (empty
    /// before the first), the new sampling priorities of those rows; with several heads,
    /// the mean of the heads' `|Q_h(s, a) - y_h|`.
    pub fn priorities(&self) -> &[f32] {
        &self.scratch.priorities[..self.scratch.priority_rows]
    }

    /// Writes `Q(s, a)` for every action of each observation row of `obs` into `out`
    /// (`rows x n_actions`; `rows x heads x n_actions` for bootstrapped DQN, head after
    /// head). Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong length.
    pub fn q_values(&mut self, obs: &[O], out: &mut [f32]) -> Result<()> {
        let (obs_dim, n) = (self.obs_dim, self.n_actions as usize * self.heads);
        let rows = obs.len() / obs_dim;
        for (what, expected, actual) in [
            ("observations", rows * obs_dim, obs.len()),
            ("Q-value output (rows x actions)", rows * n, out.len()),
        ] {
            if expected != actual {
                return Err(Error::shape(what, expected, actual));
            }
        }
        let chunk = self.act_ws.max_rows();
        for (o, dst) in obs.chunks(chunk * obs_dim).zip(out.chunks_mut(chunk * n)) {
            let q = self.q.forward_obs(o, dst.len() / n, &mut self.act_ws)?;
            dst.copy_from_slice(q);
            if let Some(prior) = &mut self.prior {
                let p = Prior::forward(&prior.net, o, dst.len() / n, &mut prior.ws_act)?;
                for (d, p) in dst.iter_mut().zip(p) {
                    *d += prior.scale * p;
                }
            }
        }
        Ok(())
    }

    /// Actions for the observation rows `obs`, one per row, by the current [`Mode`]:
    /// epsilon-greedy ([`Mode::Sample`]) or greedy ([`Mode::Deterministic`]); with several
    /// heads, greedy is the argmax of their mean (no episode picks a head here: the
    /// collector's [`Policy::act`] does). Inputs of more than 64 rows are evaluated 64
    /// at a time. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of the wrong length.
    pub fn act_rows(&mut self, obs: &[O], actions: &mut [u32]) -> Result<()> {
        self.epsilon_greedy().act(obs, actions, None)
    }

    /// Acting's epsilon-greedy step over this learner's networks, by its [`Mode`].
    fn epsilon_greedy(&mut self) -> EpsilonGreedy<'_> {
        EpsilonGreedy {
            epsilon: self.epsilon(),
            q: &self.q,
            ws: &mut self.act_ws,
            prior: self
                .prior
                .as_mut()
                .map(|p| (&p.net, &mut p.ws_act, p.scale)),
            rng: &mut self.rng,
            sample: self.mode == Mode::Sample,
            n_actions: self.n_actions,
            heads: self.heads,
        }
    }
}

impl<O: Observation> crate::predict::Predict for Dqn<O> {
    fn mode(&self) -> Mode {
        self.mode
    }

    fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }
}

impl<O: Observation> crate::learner::OffPolicyLearner for Dqn<O> {
    type Stats = DqnStats;
    type Actor = DqnActor<O>;

    fn actor(&self) -> Result<DqnActor<O>> {
        Ok(DqnActor::new(self))
    }

    fn refresh_actor(&self, actor: &mut DqnActor<O>) -> Result<()> {
        actor.refresh(self)
    }

    fn blueprint(&self) -> &OffPolicyBlueprint {
        &self.blueprint
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
}

impl<O: Observation> Policy for Dqn<O> {
    type Obs = O;
    type Act = u32;
    type State = ActiveHead;

    /// Writes actions only (no log-probabilities or values: DQN's replay needs none).
    /// In [`Mode::Sample`] each environment's episode acts with its [`ActiveHead`]
    /// (bootstrapped DQN; plain DQN has one head and draws nothing).
    fn act(
        &mut self,
        obs: &[O],
        states: &mut [ActiveHead],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        if out.actions.len() != states.len() {
            return Err(Box::new(Error::shape(
                "actions (one per environment)",
                states.len(),
                out.actions.len(),
            )));
        }
        Ok(self.epsilon_greedy().act(obs, out.actions, Some(states))?)
    }

    /// Plain DQN (one head) never draws an [`ActiveHead`]: its states stay at their
    /// default, so a run of it resumes mid-episode exactly.
    fn stateless(&self) -> bool {
        self.heads == 1
    }
}
