//! Proximal Policy Optimization (Schulman et al., 2017) over an [`ActorCritic`] policy and
//! `rl-storage`'s [`RolloutBuffer`], with memory fixed at construction; and its recurrent
//! form, [`RecurrentPpo`], over a
//! [`RecurrentCategoricalPolicy`](crate::policy::RecurrentCategoricalPolicy) (chunks of
//! the rollout replayed from recorded states; see its documentation).
//!
//! One iteration (`rl-train`'s `OnPolicyTrainer` runs it):
//!
//! 1. a collector fills a [`RolloutBuffer`] made by [`Ppo::rollout_buffer`]
//!    (`rl-collect`'s `SyncCollector::collect_rollout`, recording each action's
//!    log-probability and value, and the values where trajectories are cut);
//! 2. [`Ppo::update`] computes the advantages once ([`Advantages`], after reward
//!    normalisation when configured), then runs `epochs` passes over the rollout in the
//!    buffer's shuffled minibatches: gather, traced forward, clipped surrogate, value
//!    loss, entropy bonus, backward, global grad-norm clipping, Adam step;
//! 3. the new weights reach the collector's policy ([`Ppo::copy_policy_into`]) and the
//!    rollout is cleared.
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
//! ([`RewardNormalizer`], SB3's `VecNormalize(norm_reward=True)`): [`Ppo::update`]
//! merges the rollout's raw rewards into the statistics, then computes the advantages
//! from the scaled rewards. The rollout keeps the raw rewards.
//!
//! # Checkpoints
//!
//! [`Ppo::checkpoint`](crate::learner::Learner::checkpoint) / [`Ppo::restore`](crate::learner::Learner::restore) (or the bytes of [`Learner::to_bytes`](crate::learner::Learner::to_bytes), which a
//! trainer writes to a file) capture and put back everything an update depends on: the weights, Adam's
//! moments and step counter, and a [`PpoState`] (configuration, policy architecture,
//! env-step and update counters, the minibatch-shuffling generator, the policy's
//! sampling generator and its observation-normalisation statistics). Given the same
//! rollouts, a restored trainer computes bit-identical updates (tested). A checkpoint of
//! another architecture or configuration is a typed error, and a failed restore changes
//! nothing. The environments, the collector's counters and its episode statistics are
//! not part of the trainer and are not saved.

use std::fmt;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Field, Location, MemoryBudget, MemoryPlan, Schema};
use rl_nn::{Adam, Checkpoint};
use rl_storage::{Batch, rollout::RolloutBuffer};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::learner::{OnPolicyBlueprint, OnPolicyLearner, Sizes};
use crate::policy::{
    ActorCritic, ObsNormalizer, PolicyArchitecture, PolicyGradients, PolicyShape, PolicyWorkspace,
};
use crate::predict::Predict;

mod advantages;
mod chunked;
mod config;
mod loss;
mod shared;

use shared::{Scratch, StepSettings, Sums};

pub use advantages::{Advantages, RewardNormalizer, RewardTransform};
pub use chunked::{RECURRENT_CHECKPOINT_KIND, RecurrentPpo, RecurrentPpoConfig, RecurrentPpoState};
pub use config::{ObsNormalization, PpoConfig, RewardNormalization};
pub use loss::{clipped_surrogate, value_loss};

/// The `kind` of PPO checkpoints.
pub const CHECKPOINT_KIND: &str = "ppo";

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

/// The part of [`Ppo`] one gradient step needs, all allocated by [`Ppo::new`].
struct Learner<P: ActorCritic> {
    policy: P,
    /// One Adam per network of the policy (Adam is element-wise: the same steps as one
    /// Adam over all of them).
    adams: Vec<Adam>,
    grads: PolicyGradients,
    ws: PolicyWorkspace,
    scratch: Scratch,
}

impl<P: ActorCritic> Learner<P> {
    /// One gradient step on `batch`, whose old log-probs, advantages and returns are in
    /// `self.scratch`. `Ok(false)`: the target-KL rule stopped before stepping.
    /// Allocates nothing.
    fn step(
        &mut self,
        batch: &Batch,
        config: &PpoConfig,
        settings: StepSettings,
        sums: &mut Sums,
    ) -> Result<bool> {
        let rows = batch.len();
        let scratch = &mut self.scratch;
        if config.normalize_advantage && rows > 1 {
            shared::normalize(&mut scratch.advantages[..rows]);
        }
        let actions = batch.field::<P::Act>(Field::Action)?;
        self.policy
            .evaluate(batch.field::<P::Obs>(Field::Obs)?, actions, &mut self.ws)?;
        let old_values = match config.clip_range_vf {
            Some(_) => Some(batch.field::<f32>(Field::Value)?),
            None => None,
        };
        let outputs = (self.ws.log_probs(), self.ws.entropies(), self.ws.values());
        let Some(losses) = shared::minibatch_loss(scratch, outputs, old_values, config, settings)?
        else {
            return Ok(false);
        };
        self.grads.zero();
        self.policy.backward(
            actions,
            &scratch.d_log_probs[..rows],
            &scratch.d_entropies[..rows],
            &scratch.d_values[..rows],
            &mut self.ws,
            &mut self.grads,
        )?;
        let norm = shared::apply_gradients(
            &mut self.policy,
            &mut self.grads,
            (&mut self.adams, self.ws.pool().map(|pool| &**pool)),
            config.max_grad_norm,
        )?;
        sums.add(&losses, norm);
        Ok(true)
    }
}

/// What a PPO checkpoint holds besides the weights and Adam's state (the `extra` of a
/// [`Checkpoint<PpoState>`]): everything else [`Ppo::update`] depends on, so that a
/// restored trainer given the same rollouts computes bit-identical updates.
///
/// It does not hold what lives outside the trainer: the environments' states, the
/// collector's episode statistics and frame counter, and the collector's copy of the
/// policy. Put the collector policy's sampling generator into the trainer's policy with
/// [`PolicyNetworks::set_sampling_state`](crate::policy::PolicyNetworks::set_sampling_state) before
/// [`Ppo::checkpoint`](crate::learner::Learner::checkpoint) to carry it along (the `ppo_cartpole` example does).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PpoState {
    /// The configuration. [`Ppo::restore`](crate::learner::Learner::restore) refuses a checkpoint whose configuration
    /// differs from the trainer's.
    pub config: PpoConfig,
    /// The policy's architecture ([`PolicyNetworks::architecture`](crate::policy::PolicyNetworks::architecture));
    /// must match on restore.
    pub architecture: PolicyArchitecture,
    /// Environment steps trained on ([`Ppo::env_steps`]; drives the schedules).
    pub env_steps: u64,
    /// Updates completed ([`Learner::updates`](crate::learner::Learner::updates)).
    pub updates: u64,
    /// The generator that shuffles minibatches.
    pub shuffle_rng: Xoshiro256PlusPlus,
    /// The trainer's policy's action-sampling generator
    /// ([`PolicyNetworks::sampling_state`](crate::policy::PolicyNetworks::sampling_state)).
    pub sampling_rng: Xoshiro256PlusPlus,
    /// The trainer's policy's observation normaliser
    /// ([`PolicyNetworks::obs_normalizer`](crate::policy::PolicyNetworks::obs_normalizer)),
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
/// Everything an update uses is allocated by [`Ppo::new`] ([`Ppo::memory_plan`](crate::learner::Learner::memory_plan)): Adam's
/// moments, one gradient buffer per network, a policy workspace of `batch_size` rows
/// (and one of `eval_minibatch` rows with [`PpoConfig::recompute_old_log_probs`], plus
/// two `f32` per rollout row), the [`Advantages`] (two `f32` per rollout row), one
/// minibatch [`Batch`] of `batch_size` rows and seven `f32` scratch rows of that size.
/// An update allocates nothing (tested with a counting allocator).
///
/// ```no_run
/// use rl_algos::learner::OnPolicyLearner;
/// use rl_algos::{policy::{CategoricalPolicy, PolicyConfig}, ppo::{Ppo, PpoConfig}};
/// use rl_collect::{CollectorConfig, SyncCollector};
/// use rl_envs::CartPole;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = PpoConfig { n_steps: 32, batch_size: 256, ..PpoConfig::new() };
/// let envs: Vec<CartPole> = (0..8).map(CartPole::new).collect();
/// let policy = CategoricalPolicy::for_env(&envs[0], PolicyConfig::new(), 0)?;
/// let mut collector = SyncCollector::new(envs, policy.clone(), CollectorConfig::new(8))?;
/// let mut ppo = Ppo::new(policy, config, 8, 0)?;
/// let mut rollout = ppo.rollout_buffer(None)?;
/// for _ in 0..10 {
///     rollout.clear();
///     collector.collect_rollout(&mut rollout)?;
///     let stats = ppo.update(&mut rollout)?;
///     ppo.copy_policy_into(collector.policy_mut())?;
///     println!("{stats:?}");
/// }
/// # Ok(()) }
/// ```
pub struct Ppo<P: ActorCritic> {
    config: PpoConfig,
    /// What it holds, planned before it was built ([`Ppo::blueprint`]).
    blueprint: OnPolicyBlueprint,
    /// Environments per rollout.
    envs: usize,
    learner: Learner<P>,
    batch: Batch,
    advantages: Advantages,
    /// Recomputed old log-probs and values, one per rollout row (empty unless
    /// `recompute_old_log_probs`).
    recomputed_log_probs: Vec<f32>,
    recomputed_values: Vec<f32>,
    /// With `recompute_old_log_probs`: a workspace of `eval_minibatch` rows.
    eval_ws: Option<PolicyWorkspace>,
    /// Shuffles the rollout's minibatch order.
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
            .field("envs", &self.envs)
            .field("adams", &self.learner.adams)
            .field("env_steps", &self.env_steps)
            .field("updates", &self.updates)
            .finish_non_exhaustive()
    }
}

impl<P: ActorCritic> Ppo<P> {
    /// A learner for `policy` on rollouts of `envs` environments, allocating everything
    /// an update uses; `seed` seeds the minibatch shuffling (a run passes its
    /// `RunConfig::seed`).
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) for an invalid `config` or `envs` of 0.
    pub fn new(mut policy: P, config: PpoConfig, envs: usize, seed: u64) -> Result<Self> {
        let blueprint = Self::blueprint(&policy.shape(), &config, envs)?;
        if let Some(obs) = config.normalize_obs
            && policy.obs_normalizer().is_none()
        {
            policy.set_obs_normalizer(Some(ObsNormalizer::new(policy.obs_len(), obs.clip)?))?;
        }
        let schema = shared::rollout_schema::<P::Obs, P::Act>(policy.obs_len(), policy.act_len())?;
        let mb = config.batch_size;
        let batch = Batch::new(&schema, mb)?;
        let adams = (0..policy.network_names().len())
            .filter_map(|i| {
                policy
                    .network(i)
                    .map(|n| Adam::new(n.num_params(), config.adam))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let rows = config.n_steps * envs;
        let (recompute, eval_ws) = if config.recompute_old_log_probs {
            (
                rows,
                Some(policy.workspace(config.eval_minibatch.min(rows))),
            )
        } else {
            (0, None)
        };
        let grads = PolicyGradients::new(&policy);
        let ws = policy.workspace(mb);
        let reward_normalizer = match config.normalize_reward {
            Some(_) => Some(RewardNormalizer::new(envs, f64::from(config.gamma))?),
            None => None,
        };
        Ok(Self {
            learner: Learner {
                policy,
                adams,
                grads,
                ws,
                scratch: Scratch::new(mb),
            },
            envs,
            batch,
            advantages: Advantages::new(rows),
            recomputed_log_probs: vec![0.0; recompute],
            recomputed_values: vec![0.0; recompute],
            eval_ws,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            reward_normalizer,
            env_steps: 0,
            updates: 0,
            config,
            blueprint,
        })
    }

    /// What a learner for a policy of shape `policy` ([`ActorCritic::shape_for`]) trained
    /// with `config` on rollouts of `envs` environments holds, and what its rollouts and
    /// the collector's copy of the policy cost, from the sizes alone: nothing is
    /// allocated. [`Ppo::new`] plans the same (its
    /// [`memory_plan`](crate::learner::Learner::memory_plan) is this blueprint's) and
    /// refuses what this refuses.
    ///
    /// # Errors
    /// [`Error::Config`](crate::Error::Config) for an invalid `config` or `envs` of 0,
    /// sizes whose bytes overflow; [`Error::Storage`](crate::Error::Storage) for a rollout
    /// of more than `u32::MAX` rows.
    pub fn blueprint(
        policy: &PolicyShape,
        config: &PpoConfig,
        envs: usize,
    ) -> Result<OnPolicyBlueprint> {
        config.validate(envs)?;
        let schema = shared::rollout_schema::<P::Obs, P::Act>(policy.obs_len(), policy.act_len())?;
        let rows = shared::rollout_rows(config, envs)?;
        let rollout = RolloutBuffer::plan(&schema, config.n_steps, envs)?;
        let (mut plan, params) = shared::network_lines(policy.networks())?;
        let mb = config.batch_size.max(1);
        plan.add(
            format!("ppo/policy workspace ({mb} rows)"),
            Location::Ram,
            policy.workspace_bytes(mb, "ppo.batch_size")?,
        );
        if config.recompute_old_log_probs {
            let eval_rows = config.eval_minibatch.min(rows).max(1);
            plan.add(
                format!("ppo/evaluation workspace ({eval_rows} rows)"),
                Location::Ram,
                policy.workspace_bytes(eval_rows, "ppo.eval_minibatch")?,
            );
        }
        shared::minibatch_lines(&mut plan, &schema, config, rows)?;
        if config.recompute_old_log_probs {
            plan.add(
                "ppo/recomputed_log_probs+values",
                Location::Ram,
                Sizes::of("ppo.n_steps").f32s(&[2, rows])?,
            );
        }
        Ok(OnPolicyBlueprint {
            envs,
            learner: plan,
            rollout,
            policy_params: params,
            acting: MemoryPlan::new(),
        })
    }

    /// The schema of the rollouts [`Ppo::update`] trains on: this policy's observations
    /// and actions in the layout of
    /// [`TransitionSchema::for_rollout`](rl_core::TransitionSchema::for_rollout).
    pub fn rollout_schema(&self) -> &Schema {
        self.batch.schema()
    }

    /// The configuration.
    pub fn config(&self) -> &PpoConfig {
        &self.config
    }

    /// The trained policy, consuming the learner.
    pub fn into_policy(self) -> P {
        self.learner.policy
    }

    /// The optimisers, one per network of the policy in
    /// [`PolicyNetworks::network_names`](crate::policy::PolicyNetworks::network_names)' order
    /// (their states go into checkpoints).
    pub fn adams(&self) -> &[Adam] {
        &self.learner.adams
    }

    /// Environment steps trained on so far (rows of the rollouts given to
    /// [`Ppo::update`]); drives the schedules.
    pub fn env_steps(&self) -> u64 {
        self.env_steps
    }

    /// The reward-normalisation statistics ([`PpoConfig::normalize_reward`]; `None`
    /// without).
    pub fn reward_normalizer(&self) -> Option<&RewardNormalizer> {
        self.reward_normalizer.as_ref()
    }

    /// One PPO update on a full rollout from [`Ppo::rollout_buffer`] (see the module
    /// documentation for the loss and the two sources of old log-probabilities). With
    /// [`PpoConfig::normalize_reward`] the rollout's rewards first update the
    /// [`RewardNormalizer`] (once per rollout: the statistics assume each rollout
    /// continues the previous one). The advantages are computed once; the epochs then
    /// read the rollout in its own shuffled minibatch order.
    ///
    /// # Errors
    /// - [`Error::Config`](crate::Error::Config) for a rollout of another schema or size than
    ///   [`Ppo::rollout_buffer`]'s, or one that is not full (nothing changes then);
    /// - [`Error::Diverged`](crate::Error::Diverged) when a loss or the gradient norm is not finite (the step is
    ///   not applied; earlier steps of this update were);
    /// - the policy's errors (an action out of range ...).
    pub fn update(&mut self, rollout: &mut RolloutBuffer) -> Result<UpdateStats> {
        let prepared = shared::prepare(
            shared::UpdateState {
                config: &self.config,
                envs: self.envs,
                schema: self.batch.schema(),
                reward_normalizer: &mut self.reward_normalizer,
                advantages: &mut self.advantages,
                adams: &mut self.learner.adams,
                env_steps: self.env_steps,
            },
            rollout,
        )?;
        if let Some(ws) = &mut self.eval_ws {
            let actions = rollout.field::<P::Act>(Field::Action)?;
            self.learner.policy.evaluate_minibatched(
                rollout.field::<P::Obs>(Field::Obs)?,
                actions,
                &mut self.recomputed_log_probs,
                &mut self.recomputed_values,
                ws,
            )?;
        }
        let settings = StepSettings {
            clip: prepared.clip,
            target_kl: self.config.target_kl,
        };

        let mut sums = Sums::default();
        let mut early_stopped = false;
        'epochs: for _ in 0..self.config.epochs {
            rollout.shuffle(&mut self.rng);
            for indices in rollout.minibatches(self.config.batch_size)? {
                rollout.gather(indices, &mut self.batch)?;
                let scratch = &mut self.learner.scratch;
                scratch.take_targets(&self.advantages, indices);
                let old = &mut scratch.old_log_probs[..indices.len()];
                if self.config.recompute_old_log_probs {
                    for (slot, &row) in old.iter_mut().zip(indices) {
                        *slot = self.recomputed_log_probs[row as usize];
                    }
                } else {
                    old.copy_from_slice(self.batch.field(Field::LogProb)?);
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
        if self.config.normalize_obs.is_some()
            && let Some(normalizer) = self.learner.policy.obs_normalizer_mut()
        {
            normalizer.update(rollout.field::<f32>(Field::Obs)?)?;
        }
        self.env_steps = prepared.env_steps;
        self.updates += 1;
        Ok(sums.stats(&prepared, early_stopped))
    }
}

impl<P: ActorCritic + Predict + Clone> crate::learner::Learner for Ppo<P> {
    type Saved = PpoState;

    fn kind(&self) -> &'static str {
        CHECKPOINT_KIND
    }

    /// Updates completed.
    fn updates(&self) -> u64 {
        self.updates
    }

    fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
        if let Some(ws) = &mut self.eval_ws {
            ws.set_pool(pool.clone());
        }
        self.learner.ws.set_pool(pool);
    }

    /// What the learner holds: the policy's weights, Adam's moments, gradients and
    /// workspaces, the minibatch, the advantages and scratch rows, and the recomputed old
    /// log-probs and values when configured ([`Ppo::blueprint`]).
    fn memory_plan(&self) -> MemoryPlan {
        self.blueprint.learner.clone()
    }

    /// Everything needed to resume training exactly: every network's weights with its
    /// Adam's moments and step counter (kind [`CHECKPOINT_KIND`]), and a [`PpoState`]
    /// (configuration, architecture, counters, the shuffling and sampling generators,
    /// normalisers).
    fn checkpoint(&self) -> Checkpoint<'_, PpoState> {
        let policy = &self.learner.policy;
        let networks = shared::capture_networks(policy, &self.learner.adams);
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

    /// Puts a checkpoint from [`Ppo::checkpoint`](crate::learner::Learner::checkpoint) back: weights, Adam's state, counters
    /// and generators. Checks everything first: on error nothing has changed.
    ///
    /// The trainer must have been built with the same configuration (its seed may
    /// differ: the generators come from the checkpoint) and a policy of the same
    /// architecture.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`](crate::Error::CheckpointMismatch) for another architecture or configuration (naming
    /// the first differing field) or a missing or extra network, [`Error::Nn`](crate::Error::Nn) for
    /// weights or optimiser states that do not fit the policy, [`Error::Config`](crate::Error::Config) for an
    /// invalid optimiser configuration or observation normaliser.
    fn restore(&mut self, checkpoint: &Checkpoint<PpoState>) -> Result<()> {
        let state = &checkpoint.state;
        let learner = &mut self.learner;
        let obs_len = learner.policy.obs_len();
        shared::restore_policy(
            &mut learner.policy,
            &mut learner.adams,
            (&self.config, self.envs, obs_len),
            checkpoint,
            state,
        )?;
        self.env_steps = state.env_steps;
        self.updates = state.updates;
        self.rng = state.shuffle_rng.clone();
        self.reward_normalizer = state.reward_normalizer.clone();
        Ok(())
    }
}

impl<P: ActorCritic + Predict + Clone> OnPolicyLearner for Ppo<P> {
    type Policy = P;
    type Stats = UpdateStats;

    /// The policy being trained.
    /// The policy being trained, mutably.
    fn policy_mut(&mut self) -> &mut P {
        &mut self.learner.policy
    }

    fn policy(&self) -> &P {
        &self.learner.policy
    }

    /// What it holds and what its rollouts cost ([`Ppo::blueprint`]).
    fn blueprint(&self) -> &OnPolicyBlueprint {
        &self.blueprint
    }

    /// A rollout buffer for [`Ppo::update`]: `n_steps x envs` rows of
    /// [`Ppo::rollout_schema`], refused first if its plan does not fit `budget`.
    ///
    /// # Errors
    /// As [`RolloutBuffer::new`].
    fn rollout_buffer(&self, budget: Option<&MemoryBudget>) -> Result<RolloutBuffer> {
        Ok(RolloutBuffer::new(
            self.rollout_schema().clone(),
            self.config.n_steps,
            self.envs,
            budget,
        )?)
    }

    fn update(&mut self, rollout: &mut RolloutBuffer, _acting: &P) -> Result<UpdateStats> {
        Ppo::update(self, rollout)
    }

    /// Copies what acting depends on into `target` (the collector's copy of the policy):
    /// every network's weights and the observation normaliser. The sampling generator
    /// stays. Allocates nothing beyond the normaliser's copy.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`](crate::Error::CheckpointMismatch) for a target of another architecture; nothing
    /// changes then.
    fn copy_policy_into(&self, target: &mut P) -> Result<()> {
        shared::copy_policy(&self.learner.policy, target)
    }
}

#[cfg(test)]
mod tests;
