//! Recurrent PPO: [`Ppo`](super::Ppo)'s update for a
//! [`RecurrentCategoricalPolicy`], trained on fixed-length chunks of the rollout with
//! truncated back-propagation through time.
//!
//! # Chunks
//!
//! A rollout of `n_steps x envs` rows is cut into chunks of `chunk_len` (`L`) steps of
//! one environment: chunk `c` of environment `e` holds its steps `c L .. (c + 1) L`, so
//! there are `n_steps / L x envs` chunks. While the rollout is collected, the acting
//! policy records its summarizer state at every chunk's start and whether an episode
//! starts there ([`ChunkRecord`]: `n_steps / L x envs x state_len` floats, not a state
//! per step); [`RecurrentPpo::begin_rollout`] starts that record and
//! [`RecurrentPpo::update`] reads it.
//!
//! Every epoch shuffles the chunks (one permutation of chunk indices, the only shuffle)
//! and cuts them into minibatches of `batch_size / L` whole chunks. A minibatch's rows
//! are gathered from the rollout time-major (step 0 of every chunk, then step 1 ...);
//! the policy replays each chunk from its recorded state, resetting the state where an
//! episode starts inside the chunk (the previous row of the same environment terminated
//! or was truncated), and the loss's gradient flows back through the chunk to its start
//! and no further. The loss, the advantages (GAE once per update, on the whole rollout),
//! the normalisations, schedules, target KL, checkpoints and statistics are PPO's.
//!
//! The replay equals acting: with the weights that collected the rollout, the
//! log-probabilities and values a chunk replays are those recorded while acting, within
//! 1e-6 (the LSTM's batched products round differently from its one-step products), so
//! the first epoch's ratios start at 1.

use std::fmt;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Field, Flag, Location, MemoryBudget, MemoryPlan, Schema};
use rl_nn::{Adam, Checkpoint};
use rl_storage::{Batch, rollout::RolloutBuffer};
use serde::{Deserialize, Serialize};

use super::shared::{self, Scratch, StepSettings, Sums};
use super::{Advantages, PpoConfig, PpoState, RewardNormalizer, UpdateStats};
use crate::error::{Error, Result};
use crate::learner::{Learner, OnPolicyBlueprint, OnPolicyLearner, Sizes};
use crate::policy::{
    ChunkBatch, ChunkRecord, PolicyGradients, PolicyNetworks, RecurrentCategoricalPolicy,
    RecurrentPolicyShape, RecurrentWorkspace,
};

/// The `kind` of recurrent PPO checkpoints.
pub const RECURRENT_CHECKPOINT_KIND: &str = "recurrent_ppo";

/// [`RecurrentPpo`]'s hyperparameters: PPO's, and the chunk length.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecurrentPpoConfig {
    /// PPO's hyperparameters. `batch_size` counts rows (steps), a multiple of
    /// `chunk_len`: a minibatch is `batch_size / chunk_len` whole chunks.
    /// `recompute_old_log_probs` and `normalize_obs` are not supported (the recorded
    /// log-probabilities are used; the summarizer sees raw observations).
    pub ppo: PpoConfig,
    /// Steps per training chunk (`L`), the length of truncated back-propagation through
    /// time; at least 1 and a divisor of `ppo.n_steps`. Together with `batch_size` it is
    /// all that sets the training workspace.
    pub chunk_len: usize,
}

impl RecurrentPpoConfig {
    /// PPO's `ppo` with chunks of `chunk_len` steps.
    pub fn new(ppo: PpoConfig, chunk_len: usize) -> Self {
        Self { ppo, chunk_len }
    }

    /// Chunks per minibatch.
    pub fn chunks_per_minibatch(&self) -> usize {
        self.ppo.batch_size / self.chunk_len.max(1)
    }

    /// Checks every field for rollouts of `envs` environments.
    ///
    /// # Errors
    /// [`Error::Config`] naming the first invalid field.
    pub fn validate(&self, envs: usize) -> Result<()> {
        self.ppo.validate(envs)?;
        ChunkRecord::check(self.chunk_len, self.ppo.n_steps, envs)?;
        if !self.ppo.batch_size.is_multiple_of(self.chunk_len) {
            return Err(Error::config(
                "ppo.batch_size",
                format!(
                    "is {} rows: recurrent PPO trains on whole chunks, so it must be a multiple of chunk_len {}",
                    self.ppo.batch_size, self.chunk_len
                ),
            ));
        }
        if self.ppo.recompute_old_log_probs {
            return Err(Error::config(
                "ppo.recompute_old_log_probs",
                "is not supported by recurrent PPO: it trains on the log-probabilities recorded while acting (set it to false)",
            ));
        }
        if self.ppo.normalize_obs.is_some() {
            return Err(Error::config(
                "ppo.normalize_obs",
                "is not supported by recurrent PPO: the summarizer sees raw observations (set it to None)",
            ));
        }
        Ok(())
    }
}

/// What a recurrent PPO checkpoint holds besides the weights and Adam's state: PPO's
/// state and the chunk length (a checkpoint of another chunk length is refused).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecurrentPpoState {
    /// Everything [`PpoState`] holds.
    #[serde(flatten)]
    pub ppo: PpoState,
    /// Steps per training chunk.
    pub chunk_len: usize,
}

/// PPO on whole chunks of the rollout for a [`RecurrentCategoricalPolicy`] it owns (see
/// the module documentation), with one [`Adam`] per network (actor, critic and, with an
/// LSTM, the cell).
///
/// Everything an update uses is allocated by [`RecurrentPpo::new`] and listed by
/// [`RecurrentPpo::blueprint`] before: Adam's moments, gradients, the policy's workspace for
/// `batch_size / L` chunks of `L` steps (its size is set by those two numbers only,
/// never by an episode's length), a minibatch, the advantages (two `f32` per rollout
/// row), the chunk order, and per minibatch row an index, a reset flag and seven `f32`
/// of scratch. An update allocates nothing (tested with a counting allocator).
///
/// ```no_run
/// use rl_algos::policy::{History, PolicyConfig, RecurrentCategoricalPolicy};
/// use rl_algos::learner::OnPolicyLearner;
/// use rl_algos::ppo::{PpoConfig, RecurrentPpo, RecurrentPpoConfig};
/// use rl_collect::{CollectorConfig, SyncCollector};
/// use rl_envs::MaskedCartPole;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ppo = PpoConfig { n_steps: 64, batch_size: 128, ..PpoConfig::new() };
/// let config = RecurrentPpoConfig::new(ppo, 16);
/// let envs: Vec<MaskedCartPole> = (0..8).map(MaskedCartPole::new).collect();
/// let history = History::Lstm { hidden: 64 };
/// let policy = RecurrentCategoricalPolicy::for_env(&envs[0], history, PolicyConfig::new(), 0)?;
/// let mut collector = SyncCollector::new(envs, policy.clone(), CollectorConfig::new(8))?;
/// let mut learner = RecurrentPpo::new(policy, config, 8, 0)?;
/// let mut rollout = learner.rollout_buffer(None)?;
/// for _ in 0..10 {
///     rollout.clear();
///     learner.begin_rollout(collector.policy_mut())?; // record each chunk's start
///     collector.collect_rollout(&mut rollout)?;
///     let record = collector.policy().chunk_record().expect("begun");
///     let stats = learner.update(&mut rollout, record)?;
///     learner.copy_policy_into(collector.policy_mut())?;
///     println!("{stats:?}");
/// }
/// # Ok(()) }
/// ```
pub struct RecurrentPpo {
    config: RecurrentPpoConfig,
    /// What it holds, planned before it was built ([`RecurrentPpo::blueprint`]).
    blueprint: OnPolicyBlueprint,
    envs: usize,
    policy: RecurrentCategoricalPolicy,
    adams: Vec<Adam>,
    grads: PolicyGradients,
    ws: RecurrentWorkspace,
    scratch: Scratch,
    batch: Batch,
    advantages: Advantages,
    /// Chunk indices `c x envs + e`, shuffled every epoch.
    order: Vec<u32>,
    /// A minibatch's rollout rows, time-major.
    indices: Vec<u32>,
    /// A minibatch's resets, time-major.
    resets: Vec<bool>,
    /// A minibatch's initial states, `chunks x state_len`.
    initial: Vec<f32>,
    /// Shuffles the chunk order.
    rng: Xoshiro256PlusPlus,
    reward_normalizer: Option<RewardNormalizer>,
    env_steps: u64,
    updates: u64,
}

impl fmt::Debug for RecurrentPpo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecurrentPpo")
            .field("config", &self.config)
            .field("envs", &self.envs)
            .field("policy", &self.policy)
            .field("env_steps", &self.env_steps)
            .field("updates", &self.updates)
            .finish_non_exhaustive()
    }
}

impl RecurrentPpo {
    /// A learner for `policy` on rollouts of `envs` environments, allocating everything
    /// an update uses; `seed` seeds the chunk shuffling (a run passes its
    /// `RunConfig::seed`).
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid `config` or `envs` of 0.
    pub fn new(
        policy: RecurrentCategoricalPolicy,
        config: RecurrentPpoConfig,
        envs: usize,
        seed: u64,
    ) -> Result<Self> {
        let blueprint = Self::blueprint(&policy.shape(), &config, envs)?;
        let ppo = config.ppo;
        let schema = shared::rollout_schema::<f32, u32>(policy.obs_len(), 1)?;
        let adams = (0..policy.network_names().len())
            .filter_map(|i| {
                policy
                    .network(i)
                    .map(|n| Adam::new(n.num_params(), ppo.adam))
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let chunks = config.chunks_per_minibatch();
        let reward_normalizer = match ppo.normalize_reward {
            Some(_) => Some(RewardNormalizer::new(envs, f64::from(ppo.gamma))?),
            None => None,
        };
        let total_chunks = ppo.n_steps / config.chunk_len * envs;
        let order_len = u32::try_from(total_chunks).map_err(|_| {
            Error::config(
                "ppo.n_steps",
                "times the environments is too large: use fewer",
            )
        })?;
        Ok(Self {
            grads: PolicyGradients::new(&policy),
            ws: policy.workspace(config.chunk_len, chunks),
            scratch: Scratch::new(ppo.batch_size),
            batch: Batch::new(&schema, ppo.batch_size)?,
            advantages: Advantages::new(ppo.n_steps * envs),
            order: (0..order_len).collect(),
            indices: vec![0; ppo.batch_size],
            resets: vec![false; ppo.batch_size],
            initial: vec![0.0; chunks * policy.state_len()],
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            reward_normalizer,
            env_steps: 0,
            updates: 0,
            adams,
            policy,
            config,
            blueprint,
            envs,
        })
    }

    /// What a learner for a policy of shape `policy`
    /// ([`RecurrentCategoricalPolicy::shape_for`]) trained with `config` on rollouts of
    /// `envs` environments holds, and what its rollouts and the collector's copy of the
    /// policy cost (its state and chunk record), from the sizes alone: nothing is
    /// allocated. Beyond the rollout-sized advantages and chunk order, the learner's
    /// lines are set by the networks, the chunk length and the chunks per minibatch
    /// alone. [`RecurrentPpo::new`] plans the same and refuses what this refuses.
    ///
    /// # Errors
    /// As [`RecurrentPpoConfig::validate`]; sizes whose bytes overflow; a rollout of more
    /// than `u32::MAX` rows.
    pub fn blueprint(
        policy: &RecurrentPolicyShape,
        config: &RecurrentPpoConfig,
        envs: usize,
    ) -> Result<OnPolicyBlueprint> {
        config.validate(envs)?;
        let (ppo, l) = (&config.ppo, config.chunk_len);
        let schema = shared::rollout_schema::<f32, u32>(policy.obs_len(), 1)?;
        let rows = shared::rollout_rows(ppo, envs)?;
        let rollout = RolloutBuffer::plan(&schema, ppo.n_steps, envs)?;
        let chunks = config.chunks_per_minibatch();
        let (mut plan, params) = shared::network_lines(policy.networks())?;
        plan.add(
            format!("ppo/recurrent workspace ({chunks} chunks x {l} steps)"),
            Location::Ram,
            policy.workspace_bytes(l, chunks, "ppo.batch_size")?,
        );
        shared::minibatch_lines(&mut plan, &schema, ppo, rows)?;
        let batch = Sizes::of("ppo.batch_size");
        let total_chunks = ppo.n_steps / l * envs;
        plan.add(
            format!("ppo/chunk order ({total_chunks} chunks)"),
            Location::Ram,
            Sizes::of("ppo.n_steps").bytes(&[total_chunks, size_of::<u32>()])?,
        );
        plan.add(
            "ppo/minibatch indices, resets and initial states",
            Location::Ram,
            batch.sum(&[
                batch.bytes(&[ppo.batch_size, size_of::<u32>() + 1])?,
                batch.f32s(&[chunks, policy.state_len()])?,
            ])?,
        );
        let record = Sizes::of("recurrent.history");
        record.bytes(&[
            total_chunks,
            record.add(&[record.count(&[policy.state_len(), size_of::<f32>()])?, 1])?,
        ])?;
        let mut acting = policy.acting_plan("policy", envs, "run.n_envs")?;
        // An evaluation's own state: one row, deterministic (never the training one's).
        acting.nest("evaluation", &policy.acting_plan("policy", 1, "run.eval")?);
        acting.nest(
            "policy",
            &ChunkRecord::plan("record", l, ppo.n_steps, envs, policy.state_len()),
        );
        Ok(OnPolicyBlueprint {
            envs,
            learner: plan,
            rollout,
            policy_params: params,
            acting,
        })
    }

    /// The schema of the rollouts [`RecurrentPpo::update`] trains on.
    pub fn rollout_schema(&self) -> &Schema {
        self.batch.schema()
    }

    /// The configuration.
    pub fn config(&self) -> &RecurrentPpoConfig {
        &self.config
    }

    /// The trained policy, consuming the learner.
    pub fn into_policy(self) -> RecurrentCategoricalPolicy {
        self.policy
    }

    /// The optimisers, one per network in
    /// [`PolicyNetworks::network_names`]' order.
    pub fn adams(&self) -> &[Adam] {
        &self.adams
    }

    /// Environment steps trained on so far; drives the schedules.
    pub fn env_steps(&self) -> u64 {
        self.env_steps
    }

    /// The reward-normalisation statistics (`None` without).
    pub fn reward_normalizer(&self) -> Option<&RewardNormalizer> {
        self.reward_normalizer.as_ref()
    }

    /// One update on a full rollout and the chunk starts its collector recorded
    /// (`record`, from [`RecurrentCategoricalPolicy::chunk_record`] of the acting policy
    /// after [`RecurrentPpo::begin_rollout`]): advantages once, then `epochs` passes over
    /// the shuffled chunks in minibatches of whole chunks (see the module
    /// documentation). Allocates nothing.
    ///
    /// # Errors
    /// - [`Error::Config`] for a rollout of another schema or size or not full, or a
    ///   record of another shape or not complete (nothing changes then);
    /// - [`Error::Diverged`] when a loss or the gradient norm is not finite;
    /// - the policy's errors.
    pub fn update(
        &mut self,
        rollout: &mut RolloutBuffer,
        record: &ChunkRecord,
    ) -> Result<UpdateStats> {
        let (l, n) = (self.config.chunk_len, self.envs);
        let expected = (l, self.config.ppo.n_steps, n, self.policy.state_len());
        let shape = (
            record.chunk_len(),
            record.steps(),
            record.envs(),
            record.state_len(),
        );
        if shape != expected || !record.is_complete() {
            return Err(Error::config(
                "chunk record",
                format!(
                    "holds {} of {} steps in chunks of {} for {} envs ({} floats per state) but this learner needs all {} steps in chunks of {} for {} envs ({} floats): call begin_rollout on the collector's policy before collecting",
                    record.acted(),
                    shape.1,
                    shape.0,
                    shape.2,
                    shape.3,
                    expected.1,
                    expected.0,
                    expected.2,
                    expected.3,
                ),
            ));
        }
        let config = self.config.ppo;
        let prepared = shared::prepare(
            shared::UpdateState {
                config: &config,
                envs: n,
                schema: self.batch.schema(),
                reward_normalizer: &mut self.reward_normalizer,
                advantages: &mut self.advantages,
                adams: &mut self.adams,
                env_steps: self.env_steps,
            },
            rollout,
        )?;
        let settings = StepSettings {
            clip: prepared.clip,
            target_kl: config.target_kl,
        };
        let chunks_per_minibatch = self.config.chunks_per_minibatch();
        let mut sums = Sums::default();
        let mut early_stopped = false;
        'epochs: for _ in 0..config.epochs {
            for (i, slot) in self.order.iter_mut().enumerate() {
                *slot = i as u32;
            }
            self.order.shuffle(&mut self.rng);
            for group in 0..self.order.len().div_ceil(chunks_per_minibatch) {
                let start = group * chunks_per_minibatch;
                let end = (start + chunks_per_minibatch).min(self.order.len());
                if !self.step(rollout, record, (start, end), settings, &mut sums)? {
                    early_stopped = true;
                    break 'epochs;
                }
            }
        }
        self.env_steps = prepared.env_steps;
        self.updates += 1;
        Ok(sums.stats(&prepared, early_stopped))
    }

    /// Gathers the minibatch of chunks `order[start..end]`: their rows (time-major) into
    /// the batch, their resets and initial states. Returns the number of chunks.
    fn gather(
        &mut self,
        rollout: &RolloutBuffer,
        record: &ChunkRecord,
        (start, end): (usize, usize),
    ) -> Result<usize> {
        let (l, n) = (self.config.chunk_len, self.envs);
        let chunks = end - start;
        let state_len = self.policy.state_len();
        let terminated = rollout.field::<Flag>(Field::Terminated)?;
        let truncated = rollout.field::<Flag>(Field::Truncated)?;
        for (k, &id) in self.order[start..end].iter().enumerate() {
            let (c, e) = (id as usize / n, id as usize % n);
            for i in 0..l {
                let row = (c * l + i) * n + e;
                self.indices[i * chunks + k] = row as u32;
                // An episode starts here if the environment's previous row ended one.
                self.resets[i * chunks + k] = if i == 0 {
                    record.start(c, e)?
                } else {
                    terminated[row - n].get() || truncated[row - n].get()
                };
            }
            self.initial[k * state_len..(k + 1) * state_len].copy_from_slice(record.state(c, e)?);
        }
        rollout.gather(&self.indices[..l * chunks], &mut self.batch)?;
        Ok(chunks)
    }

    /// One gradient step on the chunks `order[start..end]`. `Ok(false)`: the target-KL
    /// rule stopped before stepping.
    fn step(
        &mut self,
        rollout: &RolloutBuffer,
        record: &ChunkRecord,
        range: (usize, usize),
        settings: StepSettings,
        sums: &mut Sums,
    ) -> Result<bool> {
        let chunks = self.gather(rollout, record, range)?;
        let rows = self.config.chunk_len * chunks;
        let config = &self.config.ppo;
        let indices = &self.indices[..rows];
        let scratch = &mut self.scratch;
        scratch.take_targets(&self.advantages, indices);
        scratch.old_log_probs[..rows].copy_from_slice(self.batch.field(Field::LogProb)?);
        if config.normalize_advantage && rows > 1 {
            shared::normalize(&mut scratch.advantages[..rows]);
        }
        let actions = self.batch.field::<u32>(Field::Action)?;
        let batch = ChunkBatch {
            obs: self.batch.obs()?,
            steps: self.config.chunk_len,
            chunks,
            resets: &self.resets[..rows],
            initial: &self.initial[..chunks * self.policy.state_len()],
        };
        self.policy.evaluate_chunks(batch, actions, &mut self.ws)?;
        let old_values = match config.clip_range_vf {
            Some(_) => Some(self.batch.field::<f32>(Field::Value)?),
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

impl Learner for RecurrentPpo {
    type Saved = RecurrentPpoState;

    fn kind(&self) -> &'static str {
        RECURRENT_CHECKPOINT_KIND
    }

    /// Updates completed.
    fn updates(&self) -> u64 {
        self.updates
    }

    /// The actor and critic heads run on `pool`; the LSTM's steps stay on the caller
    /// (each is a product of a few rows).
    fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
        self.ws.set_pool(pool);
    }

    /// What the learner holds ([`RecurrentPpo::blueprint`] of its own policy and
    /// configuration).
    fn memory_plan(&self) -> MemoryPlan {
        self.blueprint.learner.clone()
    }

    /// Everything needed to resume training exactly (kind
    /// [`RECURRENT_CHECKPOINT_KIND`]).
    fn checkpoint(&self) -> Checkpoint<'_, RecurrentPpoState> {
        Checkpoint {
            kind: RECURRENT_CHECKPOINT_KIND.to_owned(),
            networks: shared::capture_networks(&self.policy, &self.adams),
            state: RecurrentPpoState {
                ppo: PpoState {
                    config: self.config.ppo,
                    architecture: self.policy.architecture(),
                    env_steps: self.env_steps,
                    updates: self.updates,
                    shuffle_rng: self.rng.clone(),
                    sampling_rng: self.policy.sampling_state(),
                    obs_normalizer: None,
                    reward_normalizer: self.reward_normalizer.clone(),
                },
                chunk_len: self.config.chunk_len,
            },
        }
    }

    /// Puts a checkpoint from [`RecurrentPpo::checkpoint`] back; checks everything first:
    /// on error nothing has changed.
    ///
    /// # Errors
    /// As [`Ppo::restore`](super::Ppo::restore), and [`Error::CheckpointMismatch`] for
    /// another chunk length.
    fn restore(&mut self, checkpoint: &Checkpoint<RecurrentPpoState>) -> Result<()> {
        let state = &checkpoint.state;
        if state.chunk_len != self.config.chunk_len {
            return Err(Error::CheckpointMismatch {
                what: "chunk_len".to_owned(),
                expected: self.config.chunk_len.to_string(),
                actual: state.chunk_len.to_string(),
            });
        }
        let obs_len = self.policy.obs_len();
        shared::restore_policy(
            &mut self.policy,
            &mut self.adams,
            (&self.config.ppo, self.envs, obs_len),
            checkpoint,
            &state.ppo,
        )?;
        self.env_steps = state.ppo.env_steps;
        self.updates = state.ppo.updates;
        self.rng = state.ppo.shuffle_rng.clone();
        self.reward_normalizer = state.ppo.reward_normalizer.clone();
        Ok(())
    }
}

impl OnPolicyLearner for RecurrentPpo {
    type Policy = RecurrentCategoricalPolicy;
    type Stats = UpdateStats;

    /// The policy being trained.
    /// The policy being trained, mutably.
    fn policy_mut(&mut self) -> &mut RecurrentCategoricalPolicy {
        &mut self.policy
    }

    fn policy(&self) -> &RecurrentCategoricalPolicy {
        &self.policy
    }

    /// What it holds, what its rollouts cost and what the acting copy of the policy adds
    /// while collecting (its state for `envs` environments and the chunk record):
    /// [`RecurrentPpo::blueprint`].
    fn blueprint(&self) -> &OnPolicyBlueprint {
        &self.blueprint
    }

    /// A rollout buffer for [`RecurrentPpo::update`], refused first if its plan does not
    /// fit `budget`.
    ///
    /// # Errors
    /// As [`RolloutBuffer::new`].
    fn rollout_buffer(&self, budget: Option<&MemoryBudget>) -> Result<RolloutBuffer> {
        Ok(RolloutBuffer::new(
            self.rollout_schema().clone(),
            self.config.ppo.n_steps,
            self.envs,
            budget,
        )?)
    }

    fn update(
        &mut self,
        rollout: &mut RolloutBuffer,
        acting: &RecurrentCategoricalPolicy,
    ) -> Result<UpdateStats> {
        let record = acting.chunk_record().ok_or_else(|| {
            Error::config(
                "chunk record",
                "is missing: the collector's policy recorded no chunk starts (call begin_rollout before collecting)",
            )
        })?;
        RecurrentPpo::update(self, rollout, record)
    }

    /// Copies the weights into `target` (the collector's copy); its sampling generator
    /// and acting state stay.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`] for a target of another architecture; nothing
    /// changes then.
    fn copy_policy_into(&self, target: &mut RecurrentCategoricalPolicy) -> Result<()> {
        shared::copy_policy(&self.policy, target)
    }

    /// Makes `acting` (the collector's copy) record the state at every chunk's start of
    /// the rollout collected next ([`RecurrentCategoricalPolicy::begin_rollout`] with
    /// this learner's chunk length, `n_steps` and environments).
    ///
    /// # Errors
    /// As [`RecurrentCategoricalPolicy::begin_rollout`].
    fn begin_rollout(&self, acting: &mut RecurrentCategoricalPolicy) -> Result<()> {
        acting.begin_rollout(self.config.chunk_len, self.config.ppo.n_steps, self.envs)
    }
}

#[cfg(test)]
mod tests;
