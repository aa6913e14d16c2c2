//! The recurrent categorical actor-critic: each environment's observations go through a
//! history summarizer of `rl-history` (an LSTM, a stack of the last `k`, or nothing),
//! whose output feeds an actor and a critic MLP.

mod history;
mod record;
#[cfg(test)]
mod tests;

use std::fmt;

use rl_collect::{ActOutput, Policy, PolicyError, ValuePolicy};
use rl_core::{Env, Location, MemoryPlan, Space};
use rl_nn::Weights;

use super::categorical::{check_actions, choose, head, output_grads};
use super::core::{CoreShape, PolicyCore, PolicyGradients, PolicyWorkspace};
use super::{
    Mode, ObsNormalizer, PolicyArchitecture, PolicyConfig, PolicyKind, PolicyNetworks, box_len,
    check_len, discrete_len,
};
use crate::error::{Error, Result};
use crate::learner::Sizes;

pub use history::History;
pub(crate) use history::{ReplayWorkspace, Summary, SummaryShape, SummaryState, Window};
pub use record::ChunkRecord;

/// What a collector keeps per environment for a [`RecurrentCategoricalPolicy`]: only
/// whether the environment's next observation starts an episode. The default (what the
/// collector puts back at every episode start) is fresh; acting marks it running. The
/// state itself, `(h, c)` or a stack per environment, lives in the policy, batched for
/// all the environments of a call, so that one step is one summarizer update for all of
/// them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HistorySlot {
    running: bool,
}

impl HistorySlot {
    /// Whether the environment's next observation starts an episode.
    pub fn is_fresh(&self) -> bool {
        !self.running
    }

    /// Marks the environment's episode as running (its next observation continues it).
    pub(crate) fn set_running(&mut self) {
        self.running = true;
    }
}

/// What a [`RecurrentCategoricalPolicy`] is by size alone: its summarizer, its heads'
/// networks and parameter counts, from its spaces, [`History`] and [`PolicyConfig`]
/// before anything exists ([`RecurrentCategoricalPolicy::shape_for`]).
/// [`RecurrentPpo::blueprint`](crate::ppo::RecurrentPpo::blueprint) plans with it; a built
/// policy's [`RecurrentCategoricalPolicy::shape`] is the same value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecurrentPolicyShape {
    summary: SummaryShape,
    core: CoreShape,
}

impl RecurrentPolicyShape {
    /// The policy over `actions` actions for observations of `obs_len` elements
    /// remembering `history`, its heads shaped by `config`.
    fn new(
        obs_len: usize,
        actions: usize,
        history: History,
        config: &PolicyConfig,
    ) -> Result<Self> {
        let summary = SummaryShape::new(history, obs_len)?;
        let core = CoreShape::new(&[summary.output_len], false, actions, config, false)?;
        Ok(Self { summary, core })
    }

    /// Elements of one observation.
    pub fn obs_len(&self) -> usize {
        self.summary.obs_len
    }

    /// Elements of the heads' input per environment (the summarizer's output).
    pub fn feature_len(&self) -> usize {
        self.summary.output_len
    }

    /// Floats of one environment's recorded state
    /// ([`RecurrentCategoricalPolicy::state_len`]).
    pub fn state_len(&self) -> usize {
        self.summary.state_len
    }

    /// Each network's name and parameter count, in
    /// [`PolicyNetworks::network_names`]' order (actor, critic and, with an LSTM, the
    /// cell).
    pub fn networks(&self) -> impl Iterator<Item = (&'static str, usize)> + '_ {
        let cell = match self.summary.history {
            History::Lstm { .. } => Some(("lstm", self.summary.cell_params)),
            _ => None,
        };
        ["actor", "critic"]
            .into_iter()
            .zip(self.core.params().iter().copied())
            .chain(cell)
    }

    /// Parameters over every network.
    pub fn num_params(&self) -> usize {
        self.networks().map(|(_, n)| n).sum()
    }

    /// Bytes of [`RecurrentCategoricalPolicy::workspace`] for `chunks` chunks of `steps`
    /// steps.
    ///
    /// # Errors
    /// [`Error::Config`] when the bytes overflow (naming `what`, the setting the sizes
    /// come from).
    pub fn workspace_bytes(&self, steps: usize, chunks: usize, what: &'static str) -> Result<u64> {
        let sizes = Sizes::of(what);
        let (steps, chunks) = (steps.max(1), chunks.max(1));
        let rows = sizes.count(&[steps, chunks])?;
        let d_inputs = match self.summary.history {
            History::Lstm { .. } => sizes.f32s(&[2, rows, self.feature_len()])?,
            _ => 0,
        };
        sizes.sum(&[
            self.summary.replay_workspace_bytes(steps, chunks, sizes)?,
            self.core.workspace_bytes(rows, sizes)?,
            d_inputs,
        ])
    }

    /// What acting on `envs` environments allocates, under `name`
    /// ([`RecurrentCategoricalPolicy::acting_plan`]).
    ///
    /// # Errors
    /// [`Error::Config`] when the bytes overflow (naming `what`, the setting `envs`
    /// comes from).
    pub fn acting_plan(&self, name: &str, envs: usize, what: &'static str) -> Result<MemoryPlan> {
        let sizes = Sizes::of(what);
        let mut plan = self.summary.state_plan(name, envs, sizes)?;
        let per_env = sizes.add(&[self.feature_len(), self.state_len()])?;
        plan.add(
            format!("{name}/features, snapshots and starts ({envs} envs)"),
            Location::Ram,
            sizes.sum(&[sizes.f32s(&[envs, per_env])?, envs as u64])?,
        );
        plan.add(
            format!("{name}/acting workspace ({envs} envs)"),
            Location::Ram,
            sizes.sum(&[
                self.summary.replay_workspace_bytes(1, envs, sizes)?,
                self.core.workspace_bytes(envs, sizes)?,
            ])?,
        );
        Ok(plan)
    }
}

/// A categorical actor-critic with memory, for partially observed tasks with discrete
/// actions: observation -> summarizer ([`History`]) -> actor MLP (logits) and critic MLP
/// (value), sizes chosen at run time.
///
/// **One LSTM, shared.** With [`History::Lstm`] one cell summarizes the history for both
/// heads (CleanRL's recurrent PPO does the same), and both heads' gradients train it.
/// sb3-contrib's `RecurrentPPO` runs a second LSTM for the critic by default, so that the
/// value loss cannot pull the policy's features; here the value loss is weighted
/// (`vf_coef`) and the gradient clipped, and a shared cell halves what recurrence costs:
/// one cell step per environment step while acting, one window pass per chunk while
/// training, one `(h, c)` per environment in the acting state and in each chunk's
/// recorded start. On `MaskedCartPole` the shared cell solves every seed tested.
///
/// **Acting.** [`Policy::act`] runs one summarizer step for all the environments of the
/// call, then both heads: its cost does not depend on how long episodes have run. The
/// per-environment state is held by the policy, one batch of it per number of rows acted
/// on (the collector's `N` environments, an evaluation's one), made on the first call
/// with that many rows; the collector's [`HistorySlot`] says which environments start an
/// episode. [`ValuePolicy::values`] values observations one step ahead without changing
/// the state (the bootstrap after a truncation or at a rollout's end). Calls with the
/// same number of rows share one state: with a single training environment, an
/// evaluation on the collector's copy restarts that environment's memory (it then
/// continues from the evaluation's last state), and a
/// [`Predict::predict`](crate::predict::Predict::predict) over as many rows as the collector
/// has restarts all of them; predict on a clone to keep a collection undisturbed.
///
/// **Training.** [`RecurrentCategoricalPolicy::begin_rollout`] makes the policy record its
/// state at the start of every chunk of the rollout it collects ([`ChunkRecord`]);
/// [`RecurrentCategoricalPolicy::evaluate_chunks`] replays whole chunks from those states
/// (truncated back-propagation through time, resets where episodes start) and
/// [`RecurrentCategoricalPolicy::backward`] takes the loss's gradient back through the
/// heads and the cell. The replay equals what acting computed (within 1e-6, tested).
///
/// Cloning copies the weights and the sampling generator, not the acting states or the
/// record: a clone starts every environment fresh.
///
/// ```
/// use rl_algos::policy::{History, PolicyConfig, RecurrentCategoricalPolicy};
/// use rl_envs::MaskedCartPole;
///
/// let history = History::Lstm { hidden: 32 };
/// let policy = RecurrentCategoricalPolicy::for_env(&MaskedCartPole::new(0), history, PolicyConfig::new(), 7)?;
/// println!("{}", policy.acting_plan("policy", 8)); // known before any state exists
/// assert_eq!(policy.state_len(), 64); // h and c
/// # Ok::<(), rl_algos::Error>(())
/// ```
pub struct RecurrentCategoricalPolicy {
    summary: Summary,
    core: PolicyCore,
    obs_len: usize,
    /// One acting state per number of rows acted on and mode: an evaluation acts
    /// deterministically, so it never shares the training environments' memory.
    acting: Vec<Acting>,
    /// The chunk starts of the rollout being collected.
    record: Option<ChunkRecord>,
}

impl Clone for RecurrentCategoricalPolicy {
    fn clone(&self) -> Self {
        Self {
            summary: self.summary.clone(),
            core: self.core.clone(),
            obs_len: self.obs_len,
            acting: Vec::new(),
            record: None,
        }
    }
}

impl fmt::Debug for RecurrentCategoricalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecurrentCategoricalPolicy")
            .field("history", &self.summary.history())
            .field("obs_len", &self.obs_len)
            .field("actor", &self.core.actor.architecture())
            .field("critic", &self.core.critic.architecture())
            .field("config", &self.core.config)
            .finish_non_exhaustive()
    }
}

/// The acting state of one batch size: the summarizer's state, the last features (a
/// stack's snapshot comes from them), and the scratch of a step and of a value peek.
#[derive(Debug)]
struct Acting {
    rows: usize,
    mode: Mode,
    /// A new state: its first step starts every row's episode.
    fresh: bool,
    state: SummaryState,
    starts: Vec<bool>,
    /// The features of the last step, `rows x output_len`.
    features: Vec<f32>,
    /// Every row's state before the next step, `rows x state_len`.
    snapshot: Vec<f32>,
    /// A one-step replay for [`ValuePolicy::values`].
    peek: ReplayWorkspace,
    heads: PolicyWorkspace,
}

impl RecurrentCategoricalPolicy {
    /// A policy over `actions` actions for observations of `obs_len` elements remembering
    /// `history`, its heads shaped by `config` (hidden widths, activation,
    /// initialisation, mode); weights drawn from `seed`.
    ///
    /// # Errors
    /// [`Error::Config`] for an invalid `config` or `history`, or a size of 0.
    pub fn new(
        obs_len: usize,
        actions: usize,
        history: History,
        config: PolicyConfig,
        seed: u64,
    ) -> Result<Self> {
        RecurrentPolicyShape::new(obs_len, actions, history, &config)?;
        let summary = Summary::new(history, obs_len, seed)?;
        let core = PolicyCore::new(&[summary.output_len()], false, actions, config, seed, false)?;
        Ok(Self {
            summary,
            core,
            obs_len,
            acting: Vec::new(),
            record: None,
        })
    }

    /// A policy for `env`'s spaces (an `f32` box of observations, discrete actions).
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] for other spaces, or as [`Self::new`].
    pub fn for_env<E: Env<Obs = f32, Act = u32>>(
        env: &E,
        history: History,
        config: PolicyConfig,
        seed: u64,
    ) -> Result<Self> {
        let shape = Self::shape_for(
            env.observation_space(),
            env.action_space(),
            history,
            &config,
        )?;
        Self::new(shape.obs_len(), shape.core.out, history, config, seed)
    }

    /// What a policy for `observation_space` (an `f32` box) and `action_space`
    /// (discrete) remembering `history`, its heads shaped by `config`, is by size alone,
    /// before anything exists.
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] for other spaces; [`Error::Config`] as [`Self::new`], or
    /// sizes whose parameters overflow.
    pub fn shape_for(
        observation_space: &Space,
        action_space: &Space,
        history: History,
        config: &PolicyConfig,
    ) -> Result<RecurrentPolicyShape> {
        let obs_len = box_len("observation space", observation_space)?;
        let actions = discrete_len(action_space)?;
        RecurrentPolicyShape::new(obs_len, actions, history, config)
    }

    /// This policy's shape: what [`RecurrentCategoricalPolicy::shape_for`] gives for its
    /// spaces and settings.
    pub fn shape(&self) -> RecurrentPolicyShape {
        RecurrentPolicyShape {
            summary: self.summary.shape(),
            core: self.core.shape.clone(),
        }
    }

    /// What the policy remembers.
    pub fn history(&self) -> History {
        self.summary.history()
    }

    /// Elements of one observation.
    pub fn obs_len(&self) -> usize {
        self.obs_len
    }

    /// Number of actions.
    pub fn actions(&self) -> usize {
        self.core.out()
    }

    /// Elements of the heads' input per environment (the summarizer's output).
    pub fn feature_len(&self) -> usize {
        self.summary.output_len()
    }

    /// Floats of one environment's recorded state ([`ChunkRecord`]): `2 x hidden` for an
    /// LSTM (`h`, `c`), `(k - 1) x obs_len` for a stack of `k`, 0 without history.
    pub fn state_len(&self) -> usize {
        self.summary.state_len()
    }

    /// The configuration of the heads (with the current mode).
    pub fn config(&self) -> &PolicyConfig {
        &self.core.config
    }

    /// Restarts the sampling generator from `seed` (the weights stay).
    pub fn reseed(&mut self, seed: u64) {
        self.core.reseed(seed);
    }

    /// What acting on `envs` environments allocates on the first call with that many
    /// rows, under `name`: the summarizer's state, the last features and a snapshot per
    /// environment, the scratch of a one-step value peek, and the heads' workspace. Set
    /// by the sizes and `envs` only, never by an episode's length.
    pub fn acting_plan(&self, name: &str, envs: usize) -> MemoryPlan {
        // Saturating lines for sizes no plan checked (a plan over any budget).
        self.shape()
            .acting_plan(name, envs, "envs")
            .unwrap_or_else(|_| MemoryPlan::new().with(name, Location::Ram, u64::MAX))
    }

    /// Starts recording the state at every chunk's start for the next `steps` steps of
    /// `envs` environments, chunks of `chunk_len` steps (a rollout collected next): the
    /// record ([`RecurrentCategoricalPolicy::chunk_record`]) is made on the first call
    /// and reused by later calls of the same shape, so collecting allocates nothing
    /// more. Calls with another number of rows than `envs` (an evaluation) are not
    /// recorded.
    ///
    /// # Errors
    /// As [`ChunkRecord::new`].
    pub fn begin_rollout(&mut self, chunk_len: usize, steps: usize, envs: usize) -> Result<()> {
        match &mut self.record {
            Some(record)
                if (record.chunk_len(), record.steps(), record.envs())
                    == (chunk_len, steps, envs) =>
            {
                record.restart();
            }
            _ => {
                self.record = Some(ChunkRecord::new(chunk_len, steps, envs, self.state_len())?);
            }
        }
        Ok(())
    }

    /// The chunk starts recorded since [`RecurrentCategoricalPolicy::begin_rollout`].
    pub fn chunk_record(&self) -> Option<&ChunkRecord> {
        self.record.as_ref()
    }

    /// Acts on `starts.len()` rows from an explicit state instead of the one the policy
    /// keeps: `state` holds each row's state (`rows x state_len`, zeros for a new
    /// episode), `starts` marks the rows whose episode starts with this observation
    /// (their state is cleared first). Writes the actions (as [`Policy::act`], in the
    /// current mode) and each row's state after the step back into `state`, so feeding
    /// it to the next call continues the episodes: the actions equal those of
    /// [`Policy::act`] with the kept state, bit for bit. Uses (and disturbs) the kept
    /// state of that many rows, which then starts fresh; allocates nothing after the
    /// first call with a given number of rows.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for buffers of another length than `rows` needs.
    pub fn act_with_state(
        &mut self,
        obs: &[f32],
        state: &mut [f32],
        starts: &[bool],
        out: ActOutput<'_, u32>,
    ) -> Result<()> {
        let rows = starts.len();
        check_len("state", rows * self.state_len(), state.len())?;
        self.check_act(rows, obs, &out)?;
        let index = self.acting_index(rows);
        let Self {
            summary,
            core,
            acting,
            ..
        } = self;
        let a = &mut acting[index];
        summary.step_from(
            &mut a.state,
            &mut a.peek,
            (obs, starts),
            state,
            &mut a.features,
        )?;
        // The kept state now holds this call's rows: its next `act` starts afresh.
        a.fresh = true;
        core.forward(&a.features, rows, &mut a.heads)?;
        choose(core, &mut a.heads, out);
        Ok(())
    }

    /// Scratch for [`RecurrentCategoricalPolicy::evaluate_chunks`] over up to `chunks`
    /// chunks of up to `steps` steps, allocated here and reused by every pass.
    pub fn workspace(&self, steps: usize, chunks: usize) -> RecurrentWorkspace {
        let (steps, chunks) = (steps.max(1), chunks.max(1));
        let rows = steps * chunks;
        let d_inputs = if self.summary.cell().is_some() {
            rows * self.feature_len()
        } else {
            0
        };
        RecurrentWorkspace {
            feature_len: self.feature_len(),
            replay: self.summary.replay_workspace(steps, chunks),
            heads: self.core.workspace(rows),
            d_actor_in: vec![0.0; d_inputs],
            d_critic_in: vec![0.0; d_inputs],
        }
    }

    /// Bytes of [`RecurrentCategoricalPolicy::workspace`], known before it exists: set by
    /// the chunk length and the chunks per minibatch only.
    pub fn workspace_bytes(&self, steps: usize, chunks: usize) -> u64 {
        self.shape()
            .workspace_bytes(steps, chunks, "chunks")
            .unwrap_or(u64::MAX)
    }

    /// The training pass over whole chunks: replays the summarizer over `batch` from each
    /// chunk's recorded state, with resets where episodes start, then runs both heads;
    /// leaves the log-probs of `actions` (one per row, time-major like the observations),
    /// entropies and values in `ws` with what [`RecurrentCategoricalPolicy::backward`]
    /// needs. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for slices of the wrong length;
    /// [`Error::ActionOutOfRange`]; [`Error::Config`] for a window larger than `ws` or a
    /// workspace of another policy.
    pub fn evaluate_chunks(
        &self,
        batch: ChunkBatch<'_>,
        actions: &[u32],
        ws: &mut RecurrentWorkspace,
    ) -> Result<()> {
        let rows = batch.steps * batch.chunks;
        check_len("actions (steps x chunks)", rows, actions.len())?;
        check_actions(self.actions(), actions)?;
        if ws.feature_len != self.feature_len() {
            return Err(Error::config(
                "recurrent workspace",
                "was made for another policy: make it with this policy's workspace()",
            ));
        }
        let window = Window {
            obs: batch.obs,
            steps: batch.steps,
            rows: batch.chunks,
            resets: batch.resets,
            initial: batch.initial,
        };
        let RecurrentWorkspace { replay, heads, .. } = ws;
        let features = self.summary.replay(window, replay)?;
        self.core.forward(features, rows, heads)?;
        head(self.actions(), actions, heads, true);
        Ok(())
    }

    /// The backward pass of the last [`RecurrentCategoricalPolicy::evaluate_chunks`]
    /// through `ws`, given the gradient of a loss with respect to each row's log-prob,
    /// entropy and value: adds the parameter gradients of the actor, the critic and the
    /// LSTM (through both heads, back to each chunk's start) into `grads`. Allocates
    /// nothing.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for per-row slices or gradient buffers of the wrong
    /// length; [`Error::ActionOutOfRange`].
    pub fn backward(
        &self,
        actions: &[u32],
        d_log_probs: &[f32],
        d_entropies: &[f32],
        d_values: &[f32],
        ws: &mut RecurrentWorkspace,
        grads: &mut PolicyGradients,
    ) -> Result<()> {
        let rows = ws.heads.rows();
        for (what, len) in [
            ("actions", actions.len()),
            ("log-prob gradients", d_log_probs.len()),
            ("entropy gradients", d_entropies.len()),
            ("value gradients", d_values.len()),
        ] {
            check_len(what, rows, len)?;
        }
        check_len(
            "gradient buffers (one per network)",
            self.network_names().len(),
            grads.len(),
        )?;
        for i in 0..grads.len() {
            let expected = self.network(i).map_or(0, Weights::num_params);
            check_len(
                "network gradients",
                expected,
                grads.get(i).map_or(0, <[f32]>::len),
            )?;
        }
        check_actions(self.actions(), actions)?;
        let RecurrentWorkspace {
            replay,
            heads,
            d_actor_in,
            d_critic_in,
            ..
        } = ws;
        output_grads(
            self.actions(),
            actions,
            (d_log_probs, d_entropies, d_values),
            heads,
        );
        if self.summary.cell().is_none() {
            return self.core.backward_heads(heads, grads, None);
        }
        self.core
            .backward_heads(heads, grads, Some((d_actor_in, d_critic_in)))?;
        let n = rows * self.feature_len();
        let d_features = &mut d_actor_in[..n];
        for (a, &c) in d_features.iter_mut().zip(&d_critic_in[..n]) {
            *a += c;
        }
        let lstm_grads = grads.buffer_mut(2).map(Vec::as_mut_slice);
        self.summary.replay_backward(replay, d_features, lstm_grads)
    }

    /// The lengths of acting on `rows` rows: observations and every output.
    fn check_act(&self, rows: usize, obs: &[f32], out: &ActOutput<'_, u32>) -> Result<()> {
        check_len("observations", rows * self.obs_len, obs.len())?;
        check_len("action output", rows, out.actions.len())?;
        check_len("log-prob output", rows, out.log_probs.len())?;
        check_len("value output", rows, out.values.len())
    }

    /// The index of the acting state for `rows` rows in the current mode, made on first
    /// use.
    fn acting_index(&mut self, rows: usize) -> usize {
        let mode = self.core.config.mode;
        if let Some(i) = self
            .acting
            .iter()
            .position(|a| a.rows == rows && a.mode == mode)
        {
            return i;
        }
        let mut heads = self.core.workspace(rows);
        heads.set_pool(self.core.pool.clone());
        self.acting.push(Acting {
            rows,
            mode,
            fresh: true,
            state: self.summary.state(rows),
            starts: vec![true; rows],
            features: vec![0.0; rows * self.feature_len()],
            snapshot: vec![0.0; rows * self.state_len()],
            peek: self.summary.replay_workspace(1, rows),
            heads,
        });
        self.acting.len() - 1
    }

    fn act_rows(
        &mut self,
        obs: &[f32],
        slots: &mut [HistorySlot],
        out: ActOutput<'_, u32>,
    ) -> Result<()> {
        let rows = slots.len();
        self.check_act(rows, obs, &out)?;
        let index = self.acting_index(rows);
        let Self {
            summary,
            core,
            acting,
            record,
            ..
        } = self;
        let a = &mut acting[index];
        for (start, slot) in a.starts.iter_mut().zip(slots.iter()) {
            *start = a.fresh || slot.is_fresh();
        }
        // A rollout's record follows the sampling state only (never an evaluation's).
        let recording = a.mode == Mode::Sample;
        if let Some(record) = record
            && recording
            && record.envs() == rows
            && record.wants_snapshot()
        {
            summary.snapshot(&a.state, &a.features, &mut a.snapshot)?;
        }
        if let Some(record) = record
            && recording
            && record.envs() == rows
        {
            record.record(&a.starts, &a.snapshot);
        }
        summary.step(&mut a.state, obs, &a.starts, &mut a.features)?;
        a.fresh = false;
        core.forward(&a.features, rows, &mut a.heads)?;
        choose(core, &mut a.heads, out);
        slots.iter_mut().for_each(|slot| slot.running = true);
        Ok(())
    }

    fn write_values(
        &mut self,
        obs: &[f32],
        slots: &[HistorySlot],
        values: &mut [f32],
    ) -> Result<()> {
        let rows = slots.len();
        check_len("observations", rows * self.obs_len, obs.len())?;
        check_len("value output", rows, values.len())?;
        let index = self.acting_index(rows);
        let Self {
            summary,
            core,
            acting,
            ..
        } = self;
        let Acting {
            fresh,
            state,
            starts,
            features,
            snapshot,
            peek,
            heads,
            ..
        } = &mut acting[index];
        for (start, slot) in starts.iter_mut().zip(slots) {
            *start = *fresh || slot.is_fresh();
        }
        summary.snapshot(state, features, snapshot)?;
        let window = Window {
            obs,
            steps: 1,
            rows,
            resets: starts,
            initial: snapshot,
        };
        let next = summary.replay(window, peek)?;
        core.forward(next, rows, heads)?;
        values.copy_from_slice(heads.values());
        Ok(())
    }
}

/// Whole chunks for [`RecurrentCategoricalPolicy::evaluate_chunks`], time-major: the
/// rows of step 0 of every chunk, then step 1 ... (the layout of a rollout's rows, and
/// of the LSTM's windows).
#[derive(Clone, Copy, Debug)]
pub struct ChunkBatch<'a> {
    /// `steps x chunks x obs_len` observations.
    pub obs: &'a [f32],
    /// Steps per chunk.
    pub steps: usize,
    /// Chunks.
    pub chunks: usize,
    /// `steps x chunks` flags: where set, the chunk's episode starts at that step (its
    /// state is reset before the step).
    pub resets: &'a [bool],
    /// Each chunk's summarizer state before its first step, `chunks x state_len`
    /// ([`ChunkRecord::state`]).
    pub initial: &'a [f32],
}

/// Everything [`RecurrentCategoricalPolicy::evaluate_chunks`] and
/// [`RecurrentCategoricalPolicy::backward`] need for up to `chunks` chunks of `steps`
/// steps, allocated once ([`RecurrentCategoricalPolicy::workspace`]).
#[derive(Clone, Debug)]
pub struct RecurrentWorkspace {
    feature_len: usize,
    replay: ReplayWorkspace,
    heads: PolicyWorkspace,
    /// The loss's gradient with respect to the features through the actor and through
    /// the critic (an LSTM's only).
    d_actor_in: Vec<f32>,
    d_critic_in: Vec<f32>,
}

impl RecurrentWorkspace {
    /// The actor and critic heads run on `pool` (`None`: on the calling thread); the
    /// history's steps stay on the caller.
    pub fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
        self.heads.set_pool(pool);
    }

    /// The pool the heads run on, if any.
    pub fn pool(&self) -> Option<&std::sync::Arc<rl_nn::Pool>> {
        self.heads.pool()
    }

    /// Rows (steps x chunks) of the last pass.
    pub fn rows(&self) -> usize {
        self.heads.rows()
    }

    /// Largest number of rows.
    pub fn max_rows(&self) -> usize {
        self.heads.max_rows()
    }

    /// Log-probabilities of the last pass, time-major.
    pub fn log_probs(&self) -> &[f32] {
        self.heads.log_probs()
    }

    /// Entropies of the last pass.
    pub fn entropies(&self) -> &[f32] {
        self.heads.entropies()
    }

    /// Values of the last pass.
    pub fn values(&self) -> &[f32] {
        self.heads.values()
    }

    /// Bytes held by its buffers.
    pub fn memory_bytes(&self) -> u64 {
        self.replay.memory_bytes()
            + self.heads.memory_bytes()
            + ((self.d_actor_in.len() + self.d_critic_in.len()) * size_of::<f32>()) as u64
    }
}

impl Policy for RecurrentCategoricalPolicy {
    type Obs = f32;
    type Act = u32;
    type State = HistorySlot;

    fn act(
        &mut self,
        obs: &[f32],
        states: &mut [HistorySlot],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        Ok(self.act_rows(obs, states, out)?)
    }
}

impl ValuePolicy for RecurrentCategoricalPolicy {
    fn values(
        &mut self,
        obs: &[f32],
        states: &[HistorySlot],
        values: &mut [f32],
    ) -> Result<(), PolicyError> {
        Ok(self.write_values(obs, states, values)?)
    }
}

impl crate::predict::Predict for RecurrentCategoricalPolicy {
    fn mode(&self) -> Mode {
        self.core.config.mode
    }

    fn set_mode(&mut self, mode: Mode) {
        self.core.config.mode = mode;
    }
}

impl PolicyNetworks for RecurrentCategoricalPolicy {
    fn network_names(&self) -> &'static [&'static str] {
        match self.summary.cell() {
            Some(_) => &["actor", "critic", "lstm"],
            None => &["actor", "critic"],
        }
    }

    fn network(&self, index: usize) -> Option<&dyn Weights> {
        match index {
            0 => Some(&self.core.actor),
            1 => Some(&self.core.critic),
            2 => self.summary.cell().map(|c| c as &dyn Weights),
            _ => None,
        }
    }

    fn network_mut(&mut self, index: usize) -> Option<&mut dyn Weights> {
        match index {
            0 => Some(&mut self.core.actor),
            1 => Some(&mut self.core.critic),
            2 => self.summary.cell_mut().map(|c| c as &mut dyn Weights),
            _ => None,
        }
    }

    fn architecture(&self) -> PolicyArchitecture {
        let mut networks = vec![
            ("actor".to_owned(), self.core.actor.architecture()),
            ("critic".to_owned(), self.core.critic.architecture()),
        ];
        if let Some(cell) = self.summary.cell() {
            networks.push(("lstm".to_owned(), cell.architecture()));
        }
        PolicyArchitecture {
            kind: PolicyKind::RecurrentCategorical(self.history()),
            networks,
        }
    }

    fn sampling_state(&self) -> rand_xoshiro::Xoshiro256PlusPlus {
        self.core.rng.clone()
    }

    fn set_sampling_state(&mut self, state: rand_xoshiro::Xoshiro256PlusPlus) {
        self.core.rng = state;
    }

    fn obs_normalizer(&self) -> Option<&ObsNormalizer> {
        None
    }

    fn obs_normalizer_mut(&mut self) -> Option<&mut ObsNormalizer> {
        None
    }

    fn set_obs_normalizer(&mut self, normalizer: Option<ObsNormalizer>) -> Result<()> {
        match normalizer {
            None => Ok(()),
            Some(_) => Err(Error::config(
                "observation normalisation",
                "is not supported by the recurrent policy: leave ppo.normalize_obs at None",
            )),
        }
    }

    /// The actor and critic heads act on `pool`; the history's steps stay on the caller.
    fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
        for acting in &mut self.acting {
            acting.heads.set_pool(pool.clone());
        }
        self.core.set_pool(pool);
    }
}
