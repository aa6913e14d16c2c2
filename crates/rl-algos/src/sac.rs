//! Soft actor-critic: continuous ([`Sac`], tanh-squashed Gaussian) and discrete
//! ([`DiscreteSac`], Christodoulou's expectations over the full policy, chunked over an
//! `rl-actions` scorer), sharing one configuration, twin critics with polyak targets,
//! automatic entropy tuning and checkpoints.
//!
//! Networks are [`DenseMlp`]s on flat parameters (see [`crate::DenseMlp`] for why not
//! dfdx here): every buffer an update touches is allocated at construction, so memory is
//! the [`Sac::memory_plan`] from the first step to the last.

mod continuous;
mod discrete;
#[cfg(test)]
mod tests;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::Policy;
use rl_core::{Element, Flag, Location, MemoryPlan, Schema};
use rl_storage::Batch;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, NetWeights};
use crate::error::{Error, Result};
use crate::nn::{DenseMlp, Workspace};
use crate::optim::{AdamConfig, AdamState, FlatAdam};
use crate::policy::Mode;

pub use continuous::Sac;
// `Core` is public so that both trainers can hand it out; it is built only here.
pub use discrete::{ActionMaskFn, DiscreteSac};

/// The entropy coefficient `alpha`: learned to hold a target entropy, or fixed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
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
pub struct SacConfig {
    /// Hidden layer widths of the actor and of each critic (ReLU between layers).
    /// Default `[256, 256]`.
    pub hidden: Vec<usize>,
    /// Transitions per gradient step. Default 256.
    pub batch_size: usize,
    /// Replay capacity the training loop should give its buffer (the trainer does not own
    /// the replay buffer; [`Sac::replay_schema`] gives its columns). Default 1 000 000.
    pub buffer_size: usize,
    /// Environment steps of uniformly random actions before the first update. Default 100.
    pub learning_starts: u64,
    /// Learning rate of the actor, the critics and the entropy coefficient. Default 3e-4.
    pub lr: f64,
    /// Adam's epsilon. Default 1e-8 (PyTorch's, which Stable-Baselines3 keeps for SAC).
    pub adam_eps: f64,
    /// Discount. Default 0.99.
    pub gamma: f32,
    /// Polyak coefficient of the target critics. Default 0.005.
    pub tau: f32,
    /// Environment steps between training phases. Default 1.
    pub train_freq: u64,
    /// Gradient steps per training phase. Default 1.
    pub gradient_steps: usize,
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
    /// Seed of the network initialisation and of the action noise. Default 0.
    pub seed: u64,
}

impl Default for SacConfig {
    fn default() -> Self {
        Self::sb3()
    }
}

impl SacConfig {
    /// Stable-Baselines3's `SAC` defaults (version 2): networks `[256, 256]`, batch 256,
    /// buffer 1 000 000, 100 random steps, learning rate 3e-4 for everything, gamma 0.99,
    /// tau 0.005, one gradient step per environment step, `ent_coef = "auto"` starting at
    /// 1.0 with target entropy `-dim(A)`, Adam epsilon 1e-8.
    pub fn sb3() -> Self {
        Self {
            hidden: vec![256, 256],
            batch_size: 256,
            buffer_size: 1_000_000,
            learning_starts: 100,
            lr: 3e-4,
            adam_eps: 1e-8,
            gamma: 0.99,
            tau: 0.005,
            train_freq: 1,
            gradient_steps: 1,
            target_update_interval: 1,
            ent_coef: EntropyCoef::Auto { initial: 1.0 },
            target_entropy: None,
            chunk: 2048,
            seed: 0,
        }
    }

    /// Checks every field; the error names the first invalid one.
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<()> {
        let positive = [
            ("sac.batch_size", self.batch_size),
            ("sac.buffer_size", self.buffer_size),
            ("sac.gradient_steps", self.gradient_steps),
            ("sac.chunk", self.chunk),
        ];
        for (what, value) in positive {
            if value == 0 {
                return Err(Error::config(what, "is 0: use at least 1"));
            }
        }
        for (what, value) in [
            ("sac.train_freq", self.train_freq),
            ("sac.target_update_interval", self.target_update_interval),
        ] {
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
        self.adam().validate()
    }

    fn adam(&self) -> AdamConfig {
        AdamConfig {
            lr: self.lr,
            betas: [0.9, 0.999],
            eps: self.adam_eps,
            weight_decay: None,
        }
    }

    fn sizes(&self, input: usize, output: usize) -> Vec<usize> {
        let mut sizes = Vec::with_capacity(self.hidden.len() + 2);
        sizes.push(input);
        sizes.extend_from_slice(&self.hidden);
        sizes.push(output);
        sizes
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

/// Everything of a trainer a checkpoint holds besides the actor's weights and moments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SacState {
    /// The configuration; [`Sac::restore`] refuses another one (the seed aside).
    pub config: SacConfig,
    /// Network sizes (`actor`, `critic`), which must match on restore.
    pub architecture: String,
    /// The two online critics (the checkpoint's `weights` are the actor's).
    pub critics: [NetWeights; 2],
    /// The two target critics.
    pub target_critics: [NetWeights; 2],
    /// Moments of the two critics' optimisers.
    pub critic_optimizers: [AdamState; 2],
    /// `log alpha` and its optimiser's state (none for a fixed coefficient).
    pub log_alpha: f32,
    /// Moments of the entropy coefficient's optimiser.
    pub alpha_optimizer: Option<AdamState>,
    /// Gradient steps done.
    pub updates: u64,
    /// The generator of the action noise (so a resumed run draws the same actions).
    pub rng: Xoshiro256PlusPlus,
    /// A learned action table ([`DiscreteSac::with_learnable_table`]), with its
    /// optimiser; `None` for fixed tables and continuous SAC.
    #[serde(default)]
    pub table: Option<LearnedTable>,
}

/// The values and optimiser state of a learned action table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LearnedTable {
    /// Actions (rows).
    pub rows: usize,
    /// Features per action.
    pub dim: usize,
    /// `rows x dim` values, row-major.
    pub values: Vec<f32>,
    /// Its Adam moments and step counter.
    pub optimizer: AdamState,
}

/// What an off-policy training loop needs from [`Sac`] and [`DiscreteSac`]: they act
/// for a collector (as its [`Policy`]), name their replay columns and learn from sampled
/// batches.
pub trait SacTrainer: Policy<Obs = f32> {
    /// The shared learner state (configuration, networks, counters).
    fn core(&self) -> &Core;

    /// The replay columns [`SacTrainer::update`] reads.
    ///
    /// # Errors
    /// None in practice (the schema is valid by construction).
    fn replay_schema(&self) -> Result<Schema>;

    /// One gradient step on a sampled batch.
    ///
    /// # Errors
    /// A batch of another schema or size; [`Error::Diverged`] for a non-finite loss.
    fn update(&mut self, batch: &Batch) -> Result<SacStats>;

    /// Everything the trainer holds, constant for its life.
    fn memory_plan(&self) -> MemoryPlan;

    /// How [`Policy::act`] chooses actions.
    fn set_mode(&mut self, mode: Mode);

    /// The whole trainer state, for [`Checkpoint::save`].
    fn checkpoint(&self) -> Checkpoint<SacState>;

    /// Restores a checkpoint of a trainer built the same way; on error nothing changes.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`] and checkpoint shape or state errors.
    fn restore(&mut self, checkpoint: &Checkpoint<SacState>) -> Result<()>;
}

/// What continuous and discrete SAC share: the actor and its optimiser, the twin critics
/// and their targets, the entropy coefficient, the noise generator and the counters.
#[derive(Clone, Debug)]
pub struct Core {
    config: SacConfig,
    /// What the action side is (bounds or scoring): part of the architecture a
    /// checkpoint must match.
    action_side: String,
    actor: DenseMlp,
    actor_adam: FlatAdam,
    actor_grads: Vec<f32>,
    critics: TwinCritics,
    temperature: Temperature,
    rng: Xoshiro256PlusPlus,
    mode: Mode,
    updates: u64,
}

impl Core {
    /// Builds the networks `actor_in -> hidden -> actor_out` and two critics
    /// `critic_in -> hidden -> critic_out` from `config.seed`.
    fn new(
        config: SacConfig,
        actor_in: usize,
        actor_out: usize,
        critic_in: usize,
        critic_out: usize,
        default_target_entropy: f32,
        action_side: String,
    ) -> Result<Self> {
        config.validate()?;
        let mut rng = seeded(config.seed);
        let actor = DenseMlp::new(&config.sizes(actor_in, actor_out), &mut rng)?;
        let critics = TwinCritics::new(
            &config.sizes(critic_in, critic_out),
            config.adam(),
            config.batch_size,
            &mut rng,
        )?;
        let target_entropy = config.target_entropy.unwrap_or(default_target_entropy);
        Ok(Self {
            actor_adam: FlatAdam::new(actor.tensor_lengths(), config.adam())?,
            actor_grads: vec![0.0; actor.num_params()],
            critics,
            temperature: Temperature::new(config.ent_coef, target_entropy, config.adam())?,
            actor,
            rng: seeded(config.seed ^ 0x5ac5_ac5a_c5ac_5ac5),
            mode: Mode::Sample,
            updates: 0,
            config,
            action_side,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SacConfig {
        &self.config
    }

    /// The current entropy coefficient.
    pub fn alpha(&self) -> f32 {
        self.temperature.alpha()
    }

    /// The entropy the coefficient is tuned towards.
    pub fn target_entropy(&self) -> f32 {
        self.temperature.target_entropy
    }

    /// Gradient steps done.
    pub fn updates(&self) -> u64 {
        self.updates
    }

    /// How the policy acts for a collector.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The actor network.
    pub fn actor(&self) -> &DenseMlp {
        &self.actor
    }

    /// The online critics.
    pub fn critics(&self) -> &[DenseMlp; 2] {
        &self.critics.online
    }

    /// The target critics.
    pub fn target_critics(&self) -> &[DenseMlp; 2] {
        &self.critics.target
    }

    /// Parameters, gradients and moments of every network.
    fn memory_plan(&self, plan: &mut MemoryPlan) {
        let actor = self.actor.num_params();
        plan.add(
            "sac/actor (weights + gradients)",
            Location::Ram,
            f32_bytes(2 * actor),
        );
        plan.nest("sac", &self.actor_adam.memory_plan("actor"));
        self.critics.memory_plan(plan);
    }

    /// Applies and clears the actor's gradients, then the entropy coefficient's step.
    fn step_actor(&mut self, mean_entropy: f32) -> Result<()> {
        self.actor_adam
            .update(self.actor.params_mut(), &self.actor_grads)?;
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

    fn architecture(&self) -> String {
        format!(
            "sac actor {:?} critic {:?} actions {}",
            self.actor.sizes(),
            self.critics.online[0].sizes(),
            self.action_side
        )
    }

    fn checkpoint(&self) -> Checkpoint<SacState> {
        let pair = |nets: &[DenseMlp; 2]| [net_weights(&nets[0]), net_weights(&nets[1])];
        Checkpoint::new(
            net_weights(&self.actor),
            self.actor_adam.state(),
            SacState {
                config: self.config.clone(),
                architecture: self.architecture(),
                critics: pair(&self.critics.online),
                target_critics: pair(&self.critics.target),
                critic_optimizers: [self.critics.adam[0].state(), self.critics.adam[1].state()],
                log_alpha: self.temperature.log_alpha,
                alpha_optimizer: self.temperature.adam.as_ref().map(FlatAdam::state),
                updates: self.updates,
                rng: self.rng.clone(),
                table: None,
            },
        )
    }

    fn restore(&mut self, checkpoint: &Checkpoint<SacState>) -> Result<()> {
        let state = &checkpoint.extra;
        if state.architecture != self.architecture() {
            return Err(Error::CheckpointMismatch {
                what: "SAC architecture".to_owned(),
                expected: self.architecture(),
                actual: state.architecture.clone(),
            });
        }
        check_config(&self.config, &state.config)?;
        if !state.log_alpha.is_finite() {
            return Err(Error::CheckpointNonFinite {
                what: "log_alpha",
                tensor: 0,
                element: 0,
                value: state.log_alpha,
            });
        }
        let mut fresh = self.clone();
        load_net(&checkpoint.weights, &mut fresh.actor)?;
        for (nets, saved) in [
            (&mut fresh.critics.online, &state.critics),
            (&mut fresh.critics.target, &state.target_critics),
        ] {
            for (net, weights) in nets.iter_mut().zip(saved) {
                load_net(weights, net)?;
            }
        }
        fresh.actor_adam.load_state(&checkpoint.optimizer)?;
        for (adam, saved) in fresh.critics.adam.iter_mut().zip(&state.critic_optimizers) {
            adam.load_state(saved)?;
        }
        match (&mut fresh.temperature.adam, &state.alpha_optimizer) {
            (Some(adam), Some(saved)) => adam.load_state(saved)?,
            (None, None) => {}
            _ => {
                return Err(Error::CheckpointMismatch {
                    what: "entropy coefficient".to_owned(),
                    expected: format!("{:?}", self.config.ent_coef),
                    actual: "a checkpoint of the other kind".to_owned(),
                });
            }
        }
        fresh.temperature.log_alpha = state.log_alpha;
        fresh.updates = state.updates;
        fresh.rng = state.rng.clone();
        *self = fresh;
        Ok(())
    }
}

/// Rows the collector-facing forward pass handles at once.
const ACT_ROWS: usize = 64;

/// The actor's workspaces: the batch's observations (kept for the backward pass), the
/// next observations (targets) and acting for a collector.
#[derive(Clone, Debug)]
struct ActorPasses {
    batch: Workspace,
    next: Workspace,
    act: Workspace,
}

impl ActorPasses {
    fn new(actor: &DenseMlp, rows: usize) -> Self {
        Self {
            batch: Workspace::new(actor, rows),
            next: Workspace::new(actor, rows),
            act: Workspace::new(actor, ACT_ROWS),
        }
    }

    fn memory_plan(&self, plan: &mut MemoryPlan) {
        for (name, ws) in [
            ("actor", &self.batch),
            ("actor (next obs)", &self.next),
            ("actor (acting)", &self.act),
        ] {
            plan.nest("sac", &ws.memory_plan(name));
        }
    }
}

/// The columns of a sampled batch, checked against a trainer's widths.
struct Transitions<'b, A> {
    rows: usize,
    obs: &'b [f32],
    actions: &'b [A],
    rewards: &'b [f32],
    terminated: &'b [Flag],
    next_obs: &'b [f32],
}

impl<'b, A: Element> Transitions<'b, A> {
    /// Reads the columns of `batch` (1 to `max_rows` rows of `obs_dim` observations and
    /// `act_len` action elements).
    fn read(batch: &'b Batch, max_rows: usize, obs_dim: usize, act_len: usize) -> Result<Self> {
        let rows = batch.len();
        if rows == 0 || rows > max_rows {
            return Err(Error::shape("batch rows (1 to batch_size)", max_rows, rows));
        }
        let columns = Self {
            rows,
            obs: batch.column::<f32>("obs")?,
            actions: batch.column::<A>("action")?,
            rewards: batch.column::<f32>("reward")?,
            terminated: batch.column::<Flag>("terminated")?,
            next_obs: batch.column::<f32>("next_obs")?,
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
struct TwinCritics {
    online: [DenseMlp; 2],
    target: [DenseMlp; 2],
    adam: [FlatAdam; 2],
    grads: [Vec<f32>; 2],
    ws: [Workspace; 2],
    target_ws: [Workspace; 2],
}

impl TwinCritics {
    fn new(
        sizes: &[usize],
        adam: AdamConfig,
        rows: usize,
        rng: &mut Xoshiro256PlusPlus,
    ) -> Result<Self> {
        let online = [DenseMlp::new(sizes, rng)?, DenseMlp::new(sizes, rng)?];
        let target = online.clone();
        let adam = [
            FlatAdam::new(online[0].tensor_lengths(), adam)?,
            FlatAdam::new(online[1].tensor_lengths(), adam)?,
        ];
        let grads = [
            vec![0.0; online[0].num_params()],
            vec![0.0; online[1].num_params()],
        ];
        let ws = [
            Workspace::new(&online[0], rows),
            Workspace::new(&online[1], rows),
        ];
        let target_ws = ws.clone();
        Ok(Self {
            online,
            target,
            adam,
            grads,
            ws,
            target_ws,
        })
    }

    /// Applies and clears the gradients of both critics.
    fn step(&mut self) -> Result<()> {
        for i in 0..2 {
            self.adam[i].update(self.online[i].params_mut(), &self.grads[i])?;
            self.grads[i].fill(0.0);
        }
        Ok(())
    }

    fn polyak(&mut self, tau: f32) -> Result<()> {
        for (target, online) in self.target.iter_mut().zip(&self.online) {
            target.polyak_from(online, tau)?;
        }
        Ok(())
    }

    fn memory_plan(&self, plan: &mut MemoryPlan) {
        let params = self.online[0].num_params() + self.online[1].num_params();
        plan.add(
            "sac/critics (online + target)",
            Location::Ram,
            f32_bytes(2 * params),
        );
        plan.add("sac/critics gradients", Location::Ram, f32_bytes(params));
        for (i, adam) in self.adam.iter().enumerate() {
            plan.nest("sac", &adam.memory_plan(&format!("critic {i}")));
        }
        for (i, (ws, target_ws)) in self.ws.iter().zip(&self.target_ws).enumerate() {
            plan.nest("sac", &ws.memory_plan(&format!("critic {i}")));
            plan.nest("sac", &target_ws.memory_plan(&format!("target critic {i}")));
        }
    }
}

/// The entropy coefficient and, when learned, its optimiser.
#[derive(Clone, Debug)]
struct Temperature {
    log_alpha: f32,
    adam: Option<FlatAdam>,
    target_entropy: f32,
}

impl Temperature {
    fn new(coef: EntropyCoef, target_entropy: f32, adam: AdamConfig) -> Result<Self> {
        Ok(match coef {
            EntropyCoef::Auto { initial } => Self {
                log_alpha: initial.ln(),
                adam: Some(FlatAdam::new(vec![1], adam)?),
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
fn half_squared_error(q: &[f32], target: &[f32], dq: &mut [f32]) -> f32 {
    let n = q.len() as f32;
    let mut loss = 0.0;
    for ((&q, &y), d) in q.iter().zip(target).zip(dq.iter_mut()) {
        let err = q - y;
        loss += 0.5 * err * err / n;
        *d = err / n;
    }
    loss
}

fn f32_bytes(count: usize) -> u64 {
    (count * size_of::<f32>()) as u64
}

/// A network's tensors as checkpoint weights.
fn net_weights(net: &DenseMlp) -> NetWeights {
    let mut tensors = Vec::new();
    let mut start = 0;
    for len in net.tensor_lengths() {
        tensors.push(net.params()[start..start + len].to_vec());
        start += len;
    }
    NetWeights {
        tensors,
        shapes: net.tensor_shapes(),
    }
}

/// Copies checkpoint weights into `net` after checking every shape and value.
fn load_net(weights: &NetWeights, net: &mut DenseMlp) -> Result<()> {
    let shapes = net.tensor_shapes();
    if weights.tensors.len() != shapes.len() || weights.shapes.len() != shapes.len() {
        return Err(Error::CheckpointTensorCount {
            expected: shapes.len(),
            actual: weights.tensors.len(),
        });
    }
    for (tensor, ((shape, saved_shape), values)) in shapes
        .iter()
        .zip(&weights.shapes)
        .zip(&weights.tensors)
        .enumerate()
    {
        if saved_shape != shape || values.len() != shape.iter().product::<usize>() {
            return Err(Error::CheckpointShape {
                tensor,
                expected: shape.clone(),
                actual: saved_shape.clone(),
            });
        }
        if let Some((element, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(Error::CheckpointNonFinite {
                what: "weights",
                tensor,
                element,
                value,
            });
        }
    }
    let mut start = 0;
    let params = net.params_mut();
    for values in &weights.tensors {
        params[start..start + values.len()].copy_from_slice(values);
        start += values.len();
    }
    Ok(())
}

/// The configuration fields that must agree for a checkpoint to resume exactly.
fn check_config(ours: &SacConfig, theirs: &SacConfig) -> Result<()> {
    let comparable = SacConfig {
        seed: ours.seed,
        ..theirs.clone()
    };
    if &comparable != ours {
        return Err(Error::CheckpointMismatch {
            what: "SAC configuration".to_owned(),
            expected: format!("{ours:?}"),
            actual: format!("{theirs:?}"),
        });
    }
    Ok(())
}

fn seeded(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed)
}
