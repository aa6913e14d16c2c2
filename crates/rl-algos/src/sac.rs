//! Soft actor-critic: continuous ([`Sac`], tanh-squashed Gaussian) and discrete
//! ([`DiscreteSac`], Christodoulou's expectations over the full policy, chunked over an
//! `rl-actions` scorer), sharing one configuration, twin critics with polyak targets,
//! automatic entropy tuning and checkpoints.
//!
//! Networks are `rl_nn::Mlp`s on flat parameters: every buffer an update touches is
//! allocated at construction, so memory is the [`Sac::memory_plan`](crate::learner::Learner::memory_plan) from the first step
//! to the last, and an update allocates nothing.

mod actor;
mod continuous;
mod discrete;
mod heads;
#[cfg(test)]
mod heads_tests;
#[cfg(test)]
pub(crate) mod tests;

use std::sync::Arc;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Element, Field, Flag, Location, MemoryPlan};
use rl_storage::Batch;
use serde::{Deserialize, Serialize};

use rl_nn::{
    Activation, Adam, AdamConfig, Architecture, Checkpoint, Init, Mlp, MlpSpec, MlpWorkspace,
    Module, NetworkState, Parameters, Pool, Weights,
};

use crate::error::{Error, Result, adam_difference, first_difference};
use crate::learner::Sizes;
use crate::policy::Mode;

pub(crate) use actor::copy_weights;
pub use actor::{DiscreteSacActor, SacActor};
pub use continuous::{CHECKPOINT_KIND as SAC_CHECKPOINT_KIND, Sac};
pub(crate) use continuous::{join, spaces};
pub(crate) use discrete::obs_grads_line;
pub use discrete::{
    ActionMaskFn, ActionScoring, CHECKPOINT_KIND as DISCRETE_SAC_CHECKPOINT_KIND, DiscreteSac,
};

/// The entropy coefficient `alpha`: learned to hold a target entropy, or fixed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum EntropyCoef {
    /// Learned (Haarnoja et al. 2018b): `log alpha` follows the gradient of
    /// `-log alpha * (log pi + target_entropy)`, starting from `initial`.
    Auto {
        /// Starting value of `alpha` (Stable-Baselines3: 1.0).
        initial: f32,
    },
    /// A constant `alpha`.
    Fixed(f32),
}

/// Settings of [`Sac`] and [`DiscreteSac`]. [`SacConfig::sb3`] (also the `Default`) holds
/// Stable-Baselines3's defaults; change fields with struct update syntax.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SacConfig {
    /// Hidden layer widths of the actor and of each critic (ReLU between layers).
    /// Default `[256, 256]`.
    pub hidden: Vec<usize>,
    /// Transitions per gradient step. Default 256.
    pub batch_size: usize,
    /// The optimiser of the actor, the critics and the entropy coefficient: Adam with
    /// learning rate 3e-4, betas `[0.9, 0.999]` and `eps` 1e-8 (PyTorch's, which
    /// Stable-Baselines3 keeps for SAC) by default.
    pub adam: AdamConfig,
    /// Discount. Default 0.99.
    pub gamma: f32,
    /// Polyak coefficient of the target critics. Default 0.005.
    pub tau: f32,
    /// Updates between polyak steps of the targets, counted over the trainer's life
    /// (Stable-Baselines3 counts within each training phase and so always steps on a
    /// phase's first update; the two agree for the default). Default 1.
    pub target_update_interval: u64,
    /// The entropy coefficient. Default `Auto { initial: 1.0 }`.
    pub ent_coef: EntropyCoef,
    /// Entropy the automatic coefficient aims for. `None` (default): `-dim(A)` for
    /// continuous actions, `0.98 ln n` for `n` discrete actions (Christodoulou 2019).
    pub target_entropy: Option<f32>,
    /// Discrete SAC: actions scored per chunk (transient memory is about
    /// `batch_size x chunk` floats). Default 2048.
    pub chunk: usize,
    /// Discrete SAC: bootstrap heads on each critic (`heads` heads on one torso, each
    /// trained on the rows whose bootstrap mask has its bit; the actor and the entropy
    /// see their mean). `None` (default): one head, bit for bit what it was before.
    /// `prior_scale` must be 0 (the critic heads take no prior network). Continuous SAC
    /// refuses it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ensemble: Option<crate::dqn::EnsembleConfig>,
}

impl Default for SacConfig {
    fn default() -> Self {
        Self::sb3()
    }
}

impl SacConfig {
    /// Stable-Baselines3's `SAC` defaults (version 2): networks `[256, 256]`, batch 256,
    /// learning rate 3e-4 for everything, gamma 0.99, tau 0.005, `ent_coef = "auto"`
    /// starting at 1.0 with target entropy `-dim(A)`, Adam epsilon 1e-8. The loop's
    /// defaults (a 1 000 000-row buffer, 100 random steps, one gradient step per
    /// environment step) are `rl_train::trainer::OffPolicyConfig::new`'s.
    pub fn sb3() -> Self {
        Self {
            hidden: vec![256, 256],
            batch_size: 256,
            adam: AdamConfig {
                lr: 3e-4,
                betas: [0.9, 0.999],
                eps: 1e-8,
                weight_decay: None,
            },
            gamma: 0.99,
            tau: 0.005,
            target_update_interval: 1,
            ent_coef: EntropyCoef::Auto { initial: 1.0 },
            target_entropy: None,
            chunk: 2048,
            ensemble: None,
        }
    }

    /// Checks every field; the error names the first invalid one.
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("sac.batch_size", self.batch_size),
            ("sac.chunk", self.chunk),
        ];
        for (what, value) in positive {
            if value == 0 {
                return Err(Error::config(what, "is 0: use at least 1"));
            }
        }
        for (what, value) in [("sac.target_update_interval", self.target_update_interval)] {
            if value == 0 {
                return Err(Error::config(what, "is 0: use at least 1"));
            }
        }
        if self.hidden.contains(&0) {
            return Err(Error::config(
                "sac.hidden",
                format!(
                    "is {:?}: every hidden width must be at least 1",
                    self.hidden
                ),
            ));
        }
        if !(self.gamma.is_finite() && (0.0..=1.0).contains(&self.gamma)) {
            return Err(Error::config(
                "sac.gamma",
                format!(
                    "is {}: use a discount in [0, 1] (0.99 is usual)",
                    self.gamma
                ),
            ));
        }
        if !(self.tau.is_finite() && self.tau > 0.0 && self.tau <= 1.0) {
            return Err(Error::config(
                "sac.tau",
                format!(
                    "is {}: use a polyak coefficient in (0, 1] (0.005 is usual)",
                    self.tau
                ),
            ));
        }
        match self.ent_coef {
            EntropyCoef::Auto { initial } | EntropyCoef::Fixed(initial)
                if !(initial.is_finite() && initial > 0.0) =>
            {
                return Err(Error::config(
                    "sac.ent_coef",
                    format!("is {initial}: the entropy coefficient must be positive and finite"),
                ));
            }
            _ => {}
        }
        if let Some(target) = self.target_entropy
            && !target.is_finite()
        {
            return Err(Error::config(
                "sac.target_entropy",
                format!("is {target}: use a finite entropy (or None for the default)"),
            ));
        }
        if let Some(ensemble) = self.ensemble {
            ensemble.validate().map_err(|e| e.within("sac"))?;
            if ensemble.prior_scale != 0.0 {
                return Err(Error::config(
                    "sac.ensemble.prior_scale",
                    format!(
                        "is {}: discrete SAC's critic heads take no prior network, set 0 or \
                         leave it out (dqn.ensemble takes one)",
                        ensemble.prior_scale
                    ),
                ));
            }
        }
        self.adam.validate().map_err(|e| {
            Error::config("sac.adam", format!("{e} (3e-4 is the usual learning rate)"))
        })
    }

    fn spec(&self, input: usize, output: usize) -> MlpSpec {
        MlpSpec::new(input, &self.hidden, output, Activation::Relu)
    }
}

/// The names an actor-critic learner's plan lines and size errors use: `"sac"` with its
/// `sac.hidden` and `sac.batch_size` settings, or TD3's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PlanNames {
    /// The first part of every plan line (`"sac"`).
    pub(crate) prefix: &'static str,
    /// The setting the network sizes come from (`"sac.hidden"`).
    pub(crate) hidden: &'static str,
    /// The setting the batch's rows come from (`"sac.batch_size"`).
    pub(crate) batch: &'static str,
}

/// SAC's plan names.
const SAC_NAMES: PlanNames = PlanNames {
    prefix: "sac",
    hidden: "sac.hidden",
    batch: "sac.batch_size",
};

/// The sizes [`Sac`], [`DiscreteSac`] and TD3 plan with: the actor's and critics' specs
/// and parameter counts, checked once.
#[derive(Clone, Debug)]
pub(crate) struct CoreShape {
    names: PlanNames,
    actor: MlpSpec,
    critic: MlpSpec,
    /// Bytes of the actor's and of one critic's parameters.
    pub(crate) actor_bytes: u64,
    critic_bytes: u64,
}

impl CoreShape {
    /// An actor `actor_in -> hidden -> actor_out` and critics `critic_in -> hidden ->
    /// critic_out` of `config`, validated.
    fn new(config: &SacConfig, actor: (usize, usize), critic: (usize, usize)) -> Result<Self> {
        config.validate()?;
        Self::with_hidden(SAC_NAMES, &config.hidden, actor, critic)
    }

    /// An actor `actor_in -> hidden -> actor_out` and critics `critic_in -> hidden ->
    /// critic_out` (ReLU between layers), planned under `names`.
    pub(crate) fn with_hidden(
        names: PlanNames,
        hidden: &[usize],
        (actor_in, actor_out): (usize, usize),
        (critic_in, critic_out): (usize, usize),
    ) -> Result<Self> {
        let actor = MlpSpec::new(actor_in, hidden, actor_out, Activation::Relu);
        let critic = MlpSpec::new(critic_in, hidden, critic_out, Activation::Relu);
        let sizes = Sizes::of(names.hidden);
        Ok(Self {
            actor_bytes: sizes.f32s(&[sizes.checked(actor.checked_num_params())?])?,
            critic_bytes: sizes.f32s(&[sizes.checked(critic.checked_num_params())?])?,
            names,
            actor,
            critic,
        })
    }

    /// What [`Core`] and its [`ActorPasses`] hold for batches of `rows` rows: parameters,
    /// gradients, moments and workspaces of the actor and the twin critics with their
    /// targets.
    pub(crate) fn plan(&self, rows: usize) -> Result<MemoryPlan> {
        let names = self.names;
        let prefix = names.prefix;
        let (sizes, batch) = (Sizes::of(names.hidden), Sizes::of(names.batch));
        let (actor, critic) = (self.actor_bytes, self.critic_bytes);
        let mut plan = MemoryPlan::new()
            .with(
                format!("{prefix}/actor (weights + gradients)"),
                Location::Ram,
                sizes.sum(&[actor, actor])?,
            )
            .with(
                format!("{prefix}/actor/adam moments"),
                Location::Ram,
                sizes.sum(&[actor, actor])?,
            )
            .with(
                format!("{prefix}/critics (online + target)"),
                Location::Ram,
                sizes.sum(&[critic, critic, critic, critic])?,
            )
            .with(
                format!("{prefix}/critics gradients"),
                Location::Ram,
                sizes.sum(&[critic, critic])?,
            );
        for i in 0..2 {
            plan.add(
                format!("{prefix}/critic {i}/adam moments"),
                Location::Ram,
                sizes.sum(&[critic, critic])?,
            );
        }
        let critic_ws = batch.checked(self.critic.workspace_bytes(rows))?;
        for i in 0..2 {
            for name in [format!("critic {i}"), format!("target critic {i}")] {
                plan.add(
                    format!("{prefix}/{name}/activations and gradients"),
                    Location::Ram,
                    critic_ws,
                );
            }
        }
        for (name, rows) in [
            ("actor", rows),
            ("actor (next obs)", rows),
            ("actor (acting)", ACT_ROWS),
        ] {
            plan.add(
                format!("{prefix}/{name}/activations and gradients"),
                Location::Ram,
                batch.checked(self.actor.workspace_bytes(rows))?,
            );
        }
        Ok(plan)
    }

    /// The actor's spec.
    pub(crate) fn actor_spec(&self) -> &MlpSpec {
        &self.actor
    }

    /// Each critic's spec.
    pub(crate) fn critic_spec(&self) -> &MlpSpec {
        &self.critic
    }

    /// Bytes of one actor copy's network and workspace.
    pub(crate) fn actor_copy_bytes(&self) -> Result<u64> {
        let sizes = Sizes::of(self.names.hidden);
        sizes.sum(&[
            self.actor_bytes,
            sizes.checked(self.actor.workspace_bytes(ACT_ROWS))?,
        ])
    }
}

/// What one gradient step measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SacStats {
    /// `0.5 * (MSE(Q1, y) + MSE(Q2, y))`, Stable-Baselines3's critic loss.
    pub critic_loss: f32,
    /// `mean(alpha * log pi - min(Q1, Q2))` (discrete: the expectation under pi).
    pub actor_loss: f32,
    /// The entropy coefficient used in this step.
    pub alpha: f32,
    /// Mean policy entropy over the batch (continuous: `-mean(log pi)` of the sampled
    /// actions).
    pub entropy: f32,
}

/// What a SAC trainer is, as a comparable value: the actor's and critics' architectures
/// and the action side (box bounds, or how discrete actions are scored). A checkpoint
/// of another architecture is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SacArchitecture {
    /// The actor.
    pub actor: Architecture,
    /// Each of the twin critics (and their targets).
    pub critic: Architecture,
    /// The action side, e.g. `"box [-2.0] .. [2.0]"` or `"100000 scored by a learned
    /// 100000x8 table"`.
    pub action_side: String,
}

/// Everything of a trainer a checkpoint holds besides its networks (`actor`, `critic1`,
/// `critic2` and the actor's and critics' Adam states, `critic1_target`,
/// `critic2_target`, `log_alpha` with its Adam when the coefficient is learned, and
/// `action_table` with its Adam for a learned table).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SacState {
    /// The configuration; [`Sac::restore`](crate::learner::Learner::restore) refuses another one.
    pub config: SacConfig,
    /// The seed the trainer was built with; a restored trainer takes it (actors made
    /// after the restore draw the noise the saved trainer's would).
    pub seed: u64,
    /// What the trainer is; must match on restore.
    pub architecture: SacArchitecture,
    /// Gradient steps done.
    pub updates: u64,
    /// The generator of the action noise (so a resumed run draws the same actions).
    pub rng: Xoshiro256PlusPlus,
}

/// What [`Sac`] and [`DiscreteSac`] share beyond being an
/// [`OffPolicyLearner`](crate::learner::OffPolicyLearner): their configuration and entropy
/// coefficient.
pub trait SacTrainer: crate::learner::OffPolicyLearner<Saved = SacState, Stats = SacStats> {
    /// The configuration.
    fn config(&self) -> &SacConfig;

    /// The current entropy coefficient.
    fn alpha(&self) -> f32;

    /// The entropy the coefficient is tuned towards.
    fn target_entropy(&self) -> f32;
}

/// Implements [`SacTrainer`] for a learner holding a `core: Core`.
macro_rules! sac_trainer {
    ($learner:ty) => {
        impl SacTrainer for $learner {
            fn config(&self) -> &SacConfig {
                self.core.config()
            }

            fn alpha(&self) -> f32 {
                self.core.alpha()
            }

            fn target_entropy(&self) -> f32 {
                self.core.target_entropy()
            }
        }
    };
}
sac_trainer!(Sac);
sac_trainer!(DiscreteSac);

/// What continuous and discrete SAC share: the actor and its optimiser, the twin critics
/// and their targets, the entropy coefficient, the noise generator and the counters.
#[derive(Clone, Debug)]
pub(crate) struct Core {
    config: SacConfig,
    /// Seeds the networks, the action noise and the actors' noise.
    seed: u64,
    /// What the action side is (bounds or scoring): part of the architecture a
    /// checkpoint must match.
    action_side: String,
    actor: Mlp,
    actor_adam: Adam,
    actor_grads: Vec<f32>,
    critics: TwinCritics,
    temperature: Temperature,
    rng: Xoshiro256PlusPlus,
    mode: Mode,
    updates: u64,
}

impl Core {
    /// Builds the networks `actor_in -> hidden -> actor_out` and two critics
    /// `critic_in -> hidden -> critic_out` from `seed`.
    #[expect(
        clippy::too_many_arguments,
        reason = "private, called by the two trainers"
    )]
    fn new(
        config: SacConfig,
        seed: u64,
        actor_in: usize,
        actor_out: usize,
        critic_in: usize,
        critic_out: usize,
        default_target_entropy: f32,
        action_side: String,
    ) -> Result<Self> {
        config.validate()?;
        let mut rng = seeded(seed);
        let actor = Mlp::new(config.spec(actor_in, actor_out), Init::Uniform, &mut rng)?;
        let critics = TwinCritics::new(
            &config.spec(critic_in, critic_out),
            config.adam,
            config.batch_size,
            &mut rng,
        )?;
        let target_entropy = config.target_entropy.unwrap_or(default_target_entropy);
        Ok(Self {
            actor_adam: Adam::new(actor.num_params(), config.adam)?,
            actor_grads: vec![0.0; actor.num_params()],
            critics,
            temperature: Temperature::new(config.ent_coef, target_entropy, config.adam)?,
            actor,
            rng: seeded(seed ^ 0x5ac5_ac5a_c5ac_5ac5),
            mode: Mode::Sample,
            updates: 0,
            config,
            seed,
            action_side,
        })
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &SacConfig {
        &self.config
    }

    /// The current entropy coefficient.
    pub(crate) fn alpha(&self) -> f32 {
        self.temperature.alpha()
    }

    /// The entropy the coefficient is tuned towards.
    pub(crate) fn target_entropy(&self) -> f32 {
        self.temperature.target_entropy
    }

    /// Gradient steps done.
    pub(crate) fn updates(&self) -> u64 {
        self.updates
    }

    /// The critics' passes run on `pool`; the actor's batch passes are the trainers'.
    fn set_pool(&mut self, pool: Option<&Arc<Pool>>) {
        self.critics.set_pool(pool);
    }

    /// Applies and clears the actor's gradients, then the entropy coefficient's step.
    fn step_actor(&mut self, mean_entropy: f32) -> Result<()> {
        let (params, grads) = (self.actor.params_mut(), &self.actor_grads);
        match self.critics.pool() {
            Some(pool) => self.actor_adam.update_on(pool, params, grads)?,
            None => self.actor_adam.update(params, grads)?,
        }
        self.actor_grads.fill(0.0);
        self.temperature.update(mean_entropy)
    }

    /// Counts the update and moves the targets when due.
    fn finish_update(&mut self) -> Result<()> {
        self.updates += 1;
        if self
            .updates
            .is_multiple_of(self.config.target_update_interval)
        {
            self.critics.polyak(self.config.tau)?;
        }
        Ok(())
    }

    fn architecture(&self) -> SacArchitecture {
        SacArchitecture {
            actor: self.actor.architecture(),
            critic: self.critics.online[0].architecture(),
            action_side: self.action_side.clone(),
        }
    }

    /// The networks and state of a checkpoint of `kind` (`"sac"` or `"discrete_sac"`).
    fn checkpoint(&self, kind: &str) -> Checkpoint<'_, SacState> {
        let critics = &self.critics;
        let mut networks = vec![
            NetworkState::capture("actor", &self.actor, Some(&self.actor_adam)),
            NetworkState::capture("critic1", &critics.online[0], Some(&critics.adam[0])),
            NetworkState::capture("critic2", &critics.online[1], Some(&critics.adam[1])),
            NetworkState::capture("critic1_target", &critics.target[0], None),
            NetworkState::capture("critic2_target", &critics.target[1], None),
        ];
        // One float, built for the checkpoint: its copy is the state's own.
        networks.push(
            NetworkState::capture(
                "log_alpha",
                &self.temperature.as_parameters(),
                self.temperature.adam.as_ref(),
            )
            .into_owned(),
        );
        Checkpoint {
            kind: kind.to_owned(),
            networks,
            state: SacState {
                config: self.config.clone(),
                seed: self.seed,
                architecture: self.architecture(),
                updates: self.updates,
                rng: self.rng.clone(),
            },
        }
    }

    /// Puts a checkpoint back; every network and optimiser state is checked before
    /// anything changes.
    fn restore(&mut self, checkpoint: &Checkpoint<SacState>) -> Result<()> {
        let state = &checkpoint.state;
        if state.architecture != self.architecture() {
            return Err(Error::CheckpointMismatch {
                what: "SAC architecture".to_owned(),
                expected: format!("{:?}", self.architecture()),
                actual: format!("{:?}", state.architecture),
            });
        }
        check_config(&self.config, &state.config)?;
        let mut fresh = self.clone();
        let mut log_alpha = fresh.temperature.as_parameters();
        {
            let critics = &mut fresh.critics;
            let [online1, online2] = &mut critics.online;
            let [target1, target2] = &mut critics.target;
            let [adam1, adam2] = &mut critics.adam;
            let parts: [(&str, &mut dyn Weights, Option<&mut Adam>); 6] = [
                ("actor", &mut fresh.actor, Some(&mut fresh.actor_adam)),
                ("critic1", online1, Some(adam1)),
                ("critic2", online2, Some(adam2)),
                ("critic1_target", target1, None),
                ("critic2_target", target2, None),
                ("log_alpha", &mut log_alpha, fresh.temperature.adam.as_mut()),
            ];
            for (name, net, adam) in parts {
                checkpoint.network(name)?.restore_into(net, adam)?;
            }
        }
        let saved_alpha = log_alpha.params()[0];
        if !saved_alpha.is_finite() {
            return Err(Error::CheckpointMismatch {
                what: "log_alpha".to_owned(),
                expected: "a finite value".to_owned(),
                actual: saved_alpha.to_string(),
            });
        }
        fresh.temperature.log_alpha = saved_alpha;
        // The optimisers keep the moments they saved and take this learner's rate.
        let lr = fresh.config.adam.lr;
        fresh.actor_adam.set_lr(lr)?;
        for adam in fresh
            .critics
            .adam
            .iter_mut()
            .chain(fresh.temperature.adam.as_mut())
        {
            adam.set_lr(lr)?;
        }
        fresh.updates = state.updates;
        fresh.rng = state.rng.clone();
        fresh.seed = state.seed;
        *self = fresh;
        Ok(())
    }
}

/// Rows the collector-facing forward pass handles at once.
pub(crate) const ACT_ROWS: usize = 64;

/// The actor's workspaces: the batch's observations (kept for the backward pass), the
/// next observations (targets) and acting for a collector.
#[derive(Clone, Debug)]
pub(crate) struct ActorPasses {
    pub(crate) batch: MlpWorkspace,
    pub(crate) next: MlpWorkspace,
    pub(crate) act: MlpWorkspace,
}

impl ActorPasses {
    pub(crate) fn new(actor: &Mlp, rows: usize) -> Self {
        Self {
            batch: actor.workspace(rows),
            next: actor.workspace(rows),
            act: actor.workspace(ACT_ROWS),
        }
    }

    /// The batch passes run on `pool` (acting, a few rows, stays on the caller).
    pub(crate) fn set_pool(&mut self, pool: Option<&Arc<Pool>>) {
        for ws in [&mut self.batch, &mut self.next] {
            ws.set_pool(pool.cloned());
        }
    }
}

/// The columns of a sampled batch, checked against a trainer's widths.
pub(crate) struct Transitions<'b, A> {
    pub(crate) rows: usize,
    pub(crate) obs: &'b [f32],
    pub(crate) actions: &'b [A],
    pub(crate) rewards: &'b [f32],
    pub(crate) terminated: &'b [Flag],
    pub(crate) next_obs: &'b [f32],
    /// Storage positions of the rows (what bootstrap masks are drawn from, discrete SAC
    /// with [`SacConfig::ensemble`]); `None` where the rows have none.
    pub(crate) positions: Option<&'b [usize]>,
}

impl<'b, A: Element> Transitions<'b, A> {
    /// Reads the columns of `batch` (1 to `max_rows` rows of `obs_dim` observations and
    /// `act_len` action elements).
    pub(crate) fn read(
        batch: &'b Batch,
        max_rows: usize,
        obs_dim: usize,
        act_len: usize,
    ) -> Result<Self> {
        let rows = batch.len();
        if rows == 0 || rows > max_rows {
            return Err(Error::shape("batch rows (1 to batch_size)", max_rows, rows));
        }
        let columns = Self {
            rows,
            obs: batch.obs()?,
            actions: batch.field::<A>(Field::Action)?,
            rewards: batch.rewards()?,
            terminated: batch.terminated()?,
            next_obs: batch.next_obs()?,
            positions: Some(batch.positions()),
        };
        for (what, expected, actual) in [
            ("batch obs", rows * obs_dim, columns.obs.len()),
            ("batch actions", rows * act_len, columns.actions.len()),
            ("batch rewards (one per row)", rows, columns.rewards.len()),
            (
                "batch terminated flags (one per row)",
                rows,
                columns.terminated.len(),
            ),
            ("batch next_obs", rows * obs_dim, columns.next_obs.len()),
        ] {
            if expected != actual {
                return Err(Error::shape(what, expected, actual));
            }
        }
        Ok(columns)
    }
}

/// Two critics, their polyak targets, optimisers, gradients and workspaces.
#[derive(Clone, Debug)]
pub(crate) struct TwinCritics {
    pub(crate) online: [Mlp; 2],
    pub(crate) target: [Mlp; 2],
    pub(crate) adam: [Adam; 2],
    pub(crate) grads: [Vec<f32>; 2],
    pub(crate) ws: [MlpWorkspace; 2],
    pub(crate) target_ws: [MlpWorkspace; 2],
    /// With a pool: the two critics' passes run side by side ([`TwinCritics::both`]).
    pool: Option<Arc<Pool>>,
}

/// An `rl_nn::Pool` as the `rl_actions::Join` a scorer splits its rows with.
#[derive(Debug)]
pub(crate) struct PoolJoin(pub(crate) Arc<Pool>);

impl rl_actions::Join for PoolJoin {
    fn join(&self, a: &mut (dyn FnMut() + Send), b: &mut (dyn FnMut() + Send)) {
        self.0.join(a, b);
    }
}

/// One critic's network, target, optimiser, gradients and workspaces, borrowed apart
/// from the other's so that the two can run on two threads.
pub(crate) struct Critic<'a> {
    pub(crate) online: &'a mut Mlp,
    pub(crate) target: &'a Mlp,
    pub(crate) adam: &'a mut Adam,
    pub(crate) grads: &'a mut [f32],
    pub(crate) ws: &'a mut MlpWorkspace,
    pub(crate) target_ws: &'a mut MlpWorkspace,
}

impl TwinCritics {
    pub(crate) fn new(
        spec: &MlpSpec,
        adam: AdamConfig,
        rows: usize,
        rng: &mut Xoshiro256PlusPlus,
    ) -> Result<Self> {
        let online = [
            Mlp::new(spec.clone(), Init::Uniform, rng)?,
            Mlp::new(spec.clone(), Init::Uniform, rng)?,
        ];
        let target = online.clone();
        let adam = [
            Adam::new(online[0].num_params(), adam)?,
            Adam::new(online[1].num_params(), adam)?,
        ];
        let grads = [
            vec![0.0; online[0].num_params()],
            vec![0.0; online[1].num_params()],
        ];
        let ws = [online[0].workspace(rows), online[1].workspace(rows)];
        let target_ws = ws.clone();
        Ok(Self {
            online,
            target,
            adam,
            grads,
            ws,
            target_ws,
            pool: None,
        })
    }

    /// Each critic's parts, borrowed apart, with `extra[i]` (its rows of the scratch).
    fn sides<T>(&mut self, extra: [T; 2]) -> [(Critic<'_>, T); 2] {
        let [o0, o1] = &mut self.online;
        let [t0, t1] = &self.target;
        let [a0, a1] = &mut self.adam;
        let [g0, g1] = &mut self.grads;
        let [w0, w1] = &mut self.ws;
        let [v0, v1] = &mut self.target_ws;
        let [e0, e1] = extra;
        [
            (
                Critic {
                    online: o0,
                    target: t0,
                    adam: a0,
                    grads: g0,
                    ws: w0,
                    target_ws: v0,
                },
                e0,
            ),
            (
                Critic {
                    online: o1,
                    target: t1,
                    adam: a1,
                    grads: g1,
                    ws: w1,
                    target_ws: v1,
                },
                e1,
            ),
        ]
    }

    /// Runs `f` on each critic (with its `extra`): side by side on two threads of the
    /// pool when there is one, one after the other otherwise. Each critic's work is done
    /// by one thread in the same order either way, so the results are bit-identical.
    ///
    /// # Errors
    /// The first critic's error, else the second's.
    pub(crate) fn both<T: Send, R: Send>(
        &mut self,
        extra: [T; 2],
        f: impl Fn(Critic<'_>, T) -> Result<R> + Sync,
    ) -> Result<[R; 2]> {
        let pool = self.pool.clone();
        let [(c0, e0), (c1, e1)] = self.sides(extra);
        let (r0, r1) = join_on(pool.as_deref(), || f(c0, e0), || f(c1, e1));
        Ok([r0?, r1?])
    }

    /// The pool the critics run on, if any (for the actor's steps beside them).
    pub(crate) fn pool(&self) -> Option<&Pool> {
        self.pool.as_deref()
    }

    /// Runs `a` and `b` side by side on the pool when there is one (each on one thread:
    /// products inside run there alone, so the results are bit-identical), one after the
    /// other otherwise.
    pub(crate) fn join<RA: Send, RB: Send>(
        &self,
        a: impl FnOnce() -> RA + Send,
        b: impl FnOnce() -> RB + Send,
    ) -> (RA, RB) {
        join_on(self.pool.as_deref(), a, b)
    }

    /// The two critics run side by side on `pool`, and every critic pass outside
    /// [`TwinCritics::both`] splits its products across it.
    pub(crate) fn set_pool(&mut self, pool: Option<&Arc<Pool>>) {
        for ws in self.ws.iter_mut().chain(&mut self.target_ws) {
            ws.set_pool(pool.cloned());
        }
        self.pool = pool.cloned();
    }

    /// Applies and clears the gradients of both critics.
    pub(crate) fn step(&mut self) -> Result<()> {
        self.both([(), ()], |critic, ()| {
            critic
                .adam
                .update(critic.online.params_mut(), critic.grads)?;
            critic.grads.fill(0.0);
            Ok(())
        })?;
        Ok(())
    }

    /// Moves both targets towards their critics, side by side on a pool.
    pub(crate) fn polyak(&mut self, tau: f32) -> Result<()> {
        let [t0, t1] = &mut self.target;
        let [o0, o1] = &self.online;
        let (r0, r1) = join_on(
            self.pool.as_deref(),
            || rl_nn::polyak(t0.params_mut(), o0.params(), tau),
            || rl_nn::polyak(t1.params_mut(), o1.params(), tau),
        );
        r0?;
        r1?;
        Ok(())
    }
}

/// `a` and `b` side by side on `pool` when there is one, one after the other otherwise.
fn join_on<RA: Send, RB: Send>(
    pool: Option<&Pool>,
    a: impl FnOnce() -> RA + Send,
    b: impl FnOnce() -> RB + Send,
) -> (RA, RB) {
    match pool {
        Some(pool) => pool.join(a, b),
        None => (a(), b()),
    }
}

/// The entropy coefficient and, when learned, its optimiser.
#[derive(Clone, Debug)]
struct Temperature {
    log_alpha: f32,
    adam: Option<Adam>,
    target_entropy: f32,
}

impl Temperature {
    fn new(coef: EntropyCoef, target_entropy: f32, adam: AdamConfig) -> Result<Self> {
        Ok(match coef {
            EntropyCoef::Auto { initial } => Self {
                log_alpha: initial.ln(),
                adam: Some(Adam::new(1, adam)?),
                target_entropy,
            },
            EntropyCoef::Fixed(alpha) => Self {
                log_alpha: alpha.ln(),
                adam: None,
                target_entropy,
            },
        })
    }

    fn alpha(&self) -> f32 {
        self.log_alpha.exp()
    }

    /// `log alpha` as a one-element tensor, for checkpoints.
    fn as_parameters(&self) -> Parameters {
        let mut p = Parameters::filled(vec![1], 0.0).expect("shape [1] is valid");
        p.params_mut()[0] = self.log_alpha;
        p
    }

    /// One step on `-log alpha * (log pi + target)` averaged over the batch, given the
    /// batch's mean entropy `-mean(log pi)`: the gradient is `entropy - target`.
    fn update(&mut self, mean_entropy: f32) -> Result<()> {
        if let Some(adam) = &mut self.adam {
            let grad = [mean_entropy - self.target_entropy];
            let mut param = [self.log_alpha];
            adam.update(&mut param, &grad)?;
            self.log_alpha = param[0];
        }
        Ok(())
    }
}

/// `0.5 * mean((q - target)^2)`, with its gradient with respect to `q` written to `dq`.
pub(crate) fn half_squared_error(q: &[f32], target: &[f32], dq: &mut [f32]) -> f32 {
    let n = q.len() as f32;
    let mut loss = 0.0;
    for ((&q, &y), d) in q.iter().zip(target).zip(dq.iter_mut()) {
        let err = q - y;
        loss += 0.5 * err * err / n;
        *d = err / n;
    }
    loss
}

/// The configuration fields that must agree for a checkpoint to resume exactly.
fn check_config(ours: &SacConfig, theirs: &SacConfig) -> Result<()> {
    first_difference!(
        SacConfig,
        "sac",
        ours,
        theirs,
        [
            hidden,
            batch_size,
            gamma,
            tau,
            target_update_interval,
            ent_coef,
            target_entropy,
            chunk,
            ensemble,
        ],
        // The learning rate may change on resume.
        except[adam]
    )?;
    adam_difference("sac", &ours.adam, &theirs.adam)
}

pub(crate) fn seeded(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed)
}
