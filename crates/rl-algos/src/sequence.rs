//! Off-policy learners with memory: a SAC (continuous or discrete) or a DQN behind one of `rl-history`'s
//! summarizers (an LSTM, a stack of the last `k` observations, or nothing), trained on
//! windows of consecutive steps that the replay buffer's slice sampler rebuilds from
//! row indices, with a burn-in that only warms the state (R2D2's "stored nothing, burn
//! in" variant: no recurrent state is stored per step, only the observations).
//!
//! **Acting.** [`Recurrent`] is the collector's policy: one summarizer step per
//! environment step for all environments at once, then the inner learner's heads on the
//! summary; the per-environment state lives batched in the learner and the collector's
//! [`HistorySlot`] says where episodes start. One step costs the same at step 10 and at
//! step 10 000 000 of an episode.
//!
//! **Training.** A batch holds `batch_size / seq_len` windows, each `burn_in + seq_len`
//! rows of one environment ([`SequenceSpec`]; the trainer samples them with
//! `rl_storage::sampler::SliceSampler`, the run's environments as its stride). Per
//! window:
//!
//! 1. the burn-in rows run through the summarizer from a zero state, forward only
//!    (the state resets after any row that ends an episode, so the burn-in never
//!    carries one episode's memory into the next);
//! 2. the `seq_len` proper rows are replayed from that state with gradients
//!    (back-propagation through time stops at the burn-in);
//! 3. a target summarizer (a polyak copy, `tau`) runs over the whole window and the last
//!    row's next observation, and gives the next-state summaries the targets are
//!    computed on;
//! 4. the inner learner takes one update on the summaries, and the gradient of its
//!    critic (SAC) or TD (DQN) loss with respect to them trains the summarizer (the
//!    actor's loss does not reach it, as in SAC-from-pixels and R2D2).
//!
//! Memory: everything above is sized at construction by the window length, the burn-in
//! and the number of windows, listed in [`Recurrent::memory_plan`](crate::learner::Learner::memory_plan), and reused; an update
//! allocates nothing.

mod acting;
mod learner;
#[cfg(test)]
mod tests;

use rl_core::{
    BoxSpace, DType, Element, Field, Flag, Location, MemoryPlan, Schema, Space, TransitionSchema,
};
use rl_nn::{Adam, AdamConfig, Weights, clip_grad_norm, polyak};
use rl_storage::Batch;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::learner::{OffPolicyBlueprint, OffPolicyLearner, Scaled, SequenceSpec, Sizes};
use crate::policy::{
    History, HistorySlot, Mode, ReplayWorkspace, Summary, SummaryShape, SummaryState, Window,
    describe,
};

use acting::Acting;
pub use acting::RecurrentActor;
pub use learner::{Features, SequenceLearner};

/// Offsets the summarizer's initialisation seed from the inner learner's.
const SEED_OFFSET: u64 = 0x5EED_0FF0_11CE_0002;

/// Checkpoint names of the summarizer and its target.
const HISTORY: &str = "history";
const HISTORY_TARGET: &str = "history_target";

/// Settings of a [`Recurrent`] learner's memory. The inner learner keeps its own
/// settings; its `batch_size` counts the proper rows of a batch (the rows with a loss),
/// a multiple of `seq_len`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecurrentConfig {
    /// What is remembered: an LSTM (default, 64 units), a stack of the last `k`
    /// observations, or nothing (the feed-forward baseline trained the same way).
    pub history: History,
    /// Proper rows per window: consecutive steps inside one episode with a loss.
    /// Default 8.
    pub seq_len: usize,
    /// Rows before each window that only warm the state (may be 0). Default 0.
    pub burn_in: usize,
    /// The summarizer's optimiser (Adam, PyTorch's defaults but `eps` 1e-5).
    pub adam: AdamConfig,
    /// Polyak coefficient of the target summarizer. Default 0.005.
    pub tau: f32,
    /// The summarizer's gradient is clipped to this global norm. Default `Some(10.0)`.
    pub max_grad_norm: Option<f32>,
}

impl Default for RecurrentConfig {
    fn default() -> Self {
        Self::new(History::Lstm { hidden: 64 })
    }
}

impl RecurrentConfig {
    /// `history` with the defaults above.
    pub fn new(history: History) -> Self {
        Self {
            history,
            seq_len: 8,
            burn_in: 0,
            adam: AdamConfig::default(),
            tau: 0.005,
            max_grad_norm: Some(10.0),
        }
    }

    /// Checks every field; the error names the first invalid one.
    ///
    /// # Errors
    /// [`Error::Config`].
    pub fn validate(&self) -> Result<()> {
        self.history.validate().map_err(|e| e.within("recurrent"))?;
        if self.seq_len == 0 {
            return Err(Error::config(
                "recurrent.seq_len",
                "is 0: a window needs at least one step",
            ));
        }
        if !(self.tau.is_finite() && self.tau > 0.0 && self.tau <= 1.0) {
            return Err(Error::config(
                "recurrent.tau",
                format!("is {}: use a value in (0, 1]", self.tau),
            ));
        }
        if let Some(norm) = self.max_grad_norm
            && !(norm.is_finite() && norm > 0.0)
        {
            return Err(Error::config(
                "recurrent.max_grad_norm",
                format!("is {norm}: use a positive norm, or None"),
            ));
        }
        self.adam
            .validate()
            .map_err(|e| crate::Error::from(e).within("recurrent"))?;
        Ok(())
    }
}

/// A learner with memory: [`RecurrentConfig::history`] in front of an inner off-policy
/// learner ([`crate::sac::Sac`], [`crate::sac::DiscreteSac`] or [`crate::dqn::Dqn`]) built for the
/// summaries. See the [module documentation](self) for acting and training.
///
/// ```
/// use rl_algos::dqn::{Dqn, DqnConfig};
/// use rl_algos::policy::History;
/// use rl_algos::sequence::{Recurrent, RecurrentConfig};
/// use rl_algos::learner::{Learner, OffPolicyLearner};
/// use rl_core::Env;
/// use rl_envs::MaskedCartPole;
///
/// let env = MaskedCartPole::new(0);
/// let config = RecurrentConfig { seq_len: 8, burn_in: 4, ..RecurrentConfig::new(History::Lstm { hidden: 32 }) };
/// let dqn = DqnConfig { batch_size: 64, hidden: vec![64], ..DqnConfig::default() };
/// let learner = Recurrent::new(env.observation_space(), config, 0, |summaries| {
///     Dqn::new(summaries, env.action_space(), dqn, 0)
/// })?;
/// // 8 windows of 4 burn-in and 8 proper rows per batch.
/// assert_eq!(learner.batch_size(), 8 * 12);
/// println!("{}", learner.memory_plan());
/// # Ok::<(), rl_algos::Error>(())
/// ```
#[derive(Debug)]
pub struct Recurrent<L: SequenceLearner> {
    inner: L,
    config: RecurrentConfig,
    /// What it holds, planned from its settings and the inner learner's blueprint
    /// ([`Recurrent::blueprint`]).
    blueprint: OffPolicyBlueprint,
    /// Seeds the summarizer's initialisation.
    seed: u64,
    obs_len: usize,
    summary: Summary,
    target: Summary,
    /// The summarizer's optimiser and gradients (an LSTM; nothing for the others).
    adam: Option<Adam>,
    grads: Vec<f32>,
    /// Windows per batch.
    windows: usize,
    train: Train<L::Act>,
    /// One acting state per number of rows acted on and mode (an evaluation acts
    /// deterministically: it never shares the training environments' memory).
    acting: Vec<Acting<L::State>>,
}

impl<L: SequenceLearner + Clone> Clone for Recurrent<L> {
    /// Copies the weights, optimisers and the inner learner; acting states start fresh.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: self.config.clone(),
            blueprint: self.blueprint.clone(),
            seed: self.seed,
            obs_len: self.obs_len,
            summary: self.summary.clone(),
            target: self.target.clone(),
            adam: self.adam.clone(),
            grads: self.grads.clone(),
            windows: self.windows,
            train: Train::new(
                &self.summary,
                self.obs_len,
                self.windows,
                &self.config,
                self.train.act_len,
            ),
            acting: Vec::new(),
        }
    }
}

/// The buffers of an update, sized for `windows` windows at construction.
#[derive(Debug)]
struct Train<A> {
    act_len: usize,
    /// Burn-in states (online and target), `windows` rows.
    online: SummaryState,
    target: SummaryState,
    step_obs: Vec<f32>,
    starts: Vec<bool>,
    step_out: Vec<f32>,
    snapshot: Vec<f32>,
    /// The proper rows, time-major, and where their episodes start.
    window_obs: Vec<f32>,
    resets: Vec<bool>,
    replay: ReplayWorkspace,
    /// Whether each batch row ends an episode.
    ends: Vec<bool>,
    /// The inner learner's transitions, batch-major (`windows x seq_len` rows).
    features: Vec<f32>,
    next_features: Vec<f32>,
    actions: Vec<A>,
    rewards: Vec<f32>,
    terminated: Vec<Flag>,
    weights: Vec<f32>,
    /// Storage positions of the proper rows (bootstrap masks are drawn from them).
    positions: Vec<usize>,
    /// The loss's gradient with respect to the summaries, batch-major then time-major.
    d_features: Vec<f32>,
    d_window: Vec<f32>,
}

impl<A: Element> Train<A> {
    fn new(
        summary: &Summary,
        obs_len: usize,
        windows: usize,
        config: &RecurrentConfig,
        act_len: usize,
    ) -> Self {
        let (len, h) = (config.seq_len, summary.output_len());
        let proper = windows * len;
        let z = |n: usize| vec![0.0f32; n];
        Self {
            act_len,
            online: summary.state(windows),
            target: summary.state(windows),
            step_obs: z(windows * obs_len),
            starts: vec![true; windows],
            step_out: z(windows * h),
            snapshot: z(windows * summary.state_len()),
            window_obs: z(proper * obs_len),
            resets: vec![false; proper],
            replay: summary.replay_workspace(len, windows),
            ends: vec![false; windows * (config.burn_in + len)],
            features: z(proper * h),
            next_features: z(proper * h),
            actions: vec![A::default(); proper * act_len],
            rewards: z(proper),
            terminated: vec![Flag::default(); proper],
            weights: z(proper),
            positions: vec![0; proper],
            d_features: z(proper * h),
            d_window: z(proper * h),
        }
    }
}

/// Bytes of an update's buffers for `windows` windows (the states and the replay
/// workspace are planned apart): per window a step's observations, summaries, snapshot,
/// start flag and the end flags of its rows; per proper row its observation, four
/// summary rows (features, next features and their two gradients), reward, weight,
/// reset and termination flags, storage position and its action (`action` bytes).
fn train_bytes(
    shape: &SummaryShape,
    windows: usize,
    config: &RecurrentConfig,
    action: usize,
) -> Result<u64> {
    let sizes = Sizes::of("batch_size");
    let (obs, h) = (shape.obs_len, shape.output_len);
    let proper = sizes.count(&[windows, config.seq_len])?;
    let per_window = sizes.f32s(&[windows, sizes.add(&[obs, h, shape.state_len])?])?;
    let per_row = sizes.sum(&[
        sizes.f32s(&[sizes.add(&[obs, sizes.count(&[4, h])?, 2])?])?,
        (1 + size_of::<Flag>() + size_of::<usize>()) as u64,
        action as u64,
    ])?;
    let flags = sizes.add(&[
        windows,
        sizes.count(&[windows, sizes.add(&[config.burn_in, config.seq_len])?])?,
    ])?;
    sizes.sum(&[
        per_window,
        sizes.checked(per_row.checked_mul(proper as u64))?,
        flags as u64,
    ])
}

impl<L: SequenceLearner> Recurrent<L> {
    /// What a learner for observations from `observation_space` with `config` in front
    /// of an inner learner holds, reads and asks of its actors, from the sizes alone:
    /// `inner` gives the inner learner's blueprint for the space of the summaries it is
    /// given (its `blueprint` function, e.g. `|summaries| Dqn::blueprint(summaries,
    /// &actions, &dqn)`). Nothing is allocated. [`Recurrent::new`] plans the same (its
    /// [`memory_plan`](crate::learner::Learner::memory_plan) is this blueprint's) and
    /// refuses what this refuses.
    ///
    /// # Errors
    /// As [`Recurrent::new`]; [`Error::Config`] for sizes whose bytes overflow.
    pub fn blueprint(
        observation_space: &Space,
        config: &RecurrentConfig,
        inner: impl FnOnce(&Space) -> Result<OffPolicyBlueprint>,
    ) -> Result<OffPolicyBlueprint> {
        config.validate()?;
        let obs_len = obs_len(observation_space)?;
        let shape = SummaryShape::new(config.history, obs_len)?;
        let inner = inner(&summaries_space(shape.output_len)?)?;
        let inner = L::blueprint_for_summaries(inner, shape.output_len)?;
        compose(&shape, config, inner)
    }

    /// A learner for observations from `observation_space` (an `f32` box): the
    /// summarizer `config.history`, and the inner learner `make_inner` builds for the
    /// space of the summaries it is given (an `f32` box of the summary's width). `seed`
    /// seeds the summarizer's initialisation (a run passes its `RunConfig::seed`; the
    /// inner learner takes its own).
    ///
    /// # Errors
    /// [`Error::SpaceMismatch`] for another observation space; [`Error::Config`] for an
    /// invalid `config`, an inner `batch_size` that is not a multiple of `seq_len`, or
    /// an inner learner that cannot train on summaries (per-state action masks read raw
    /// observations); the inner learner's errors.
    pub fn new(
        observation_space: &Space,
        config: RecurrentConfig,
        seed: u64,
        make_inner: impl FnOnce(&Space) -> Result<L>,
    ) -> Result<Self> {
        config.validate()?;
        let obs_len = obs_len(observation_space)?;
        let shape = SummaryShape::new(config.history, obs_len)?;
        let h = shape.output_len;
        let mut inner = make_inner(&summaries_space(h)?)?;
        inner.prepare_for_summaries(h)?;
        let blueprint = compose(&shape, &config, inner.blueprint().clone())?;
        let summary = Summary::new(config.history, obs_len, seed.wrapping_add(SEED_OFFSET))?;
        let windows = OffPolicyLearner::batch_size(&inner) / config.seq_len;
        let adam = match summary.cell() {
            Some(cell) => Some(Adam::new(cell.num_params(), config.adam)?),
            None => None,
        };
        let grads = vec![0.0; summary.cell().map_or(0, Weights::num_params)];
        let act_len = inner.action_len();
        let train = Train::new(&summary, obs_len, windows, &config, act_len);
        Ok(Self {
            target: summary.clone(),
            inner,
            config,
            blueprint,
            seed,
            obs_len,
            summary,
            adam,
            grads,
            windows,
            train,
            acting: Vec::new(),
        })
    }

    /// The inner learner (trained on summaries).
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The settings.
    pub fn config(&self) -> &RecurrentConfig {
        &self.config
    }

    /// Windows per batch: the inner `batch_size / seq_len`.
    pub fn windows(&self) -> usize {
        self.windows
    }

    /// What acting on `rows` environments adds: the summarizer's state and the summaries
    /// of one step (made on the first call with that many rows).
    pub fn acting_plan(&self, rows: usize) -> MemoryPlan {
        self.blueprint.acting_plan(rows)
    }

    /// One update on a batch of windows (see the module documentation), with the
    /// columns of [`OffPolicyLearner::replay_schema`]: `windows` windows of `burn_in +
    /// seq_len` rows one after the other.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] for a batch of another number of rows or widths;
    /// [`Error::Storage`] for missing columns; the inner learner's errors
    /// ([`Error::Diverged`] ...) and a non-finite summarizer gradient (nothing of the
    /// summarizer applied).
    pub fn update(&mut self, batch: &Batch) -> Result<L::Stats> {
        let (len, burn_in, windows) = (self.config.seq_len, self.config.burn_in, self.windows);
        let span = burn_in + len;
        let rows = windows * span;
        if batch.len() != rows {
            return Err(Error::shape(
                "batch rows (windows x (burn_in + seq_len))",
                rows,
                batch.len(),
            ));
        }
        let (obs_len, h, act_len) = (self.obs_len, self.summary.output_len(), self.train.act_len);
        let obs = batch.obs()?;
        let next_obs = batch.next_obs()?;
        let actions = batch.field::<L::Act>(Field::Action)?;
        let rewards = batch.rewards()?;
        let terminated = batch.terminated()?;
        let truncated = batch.truncated()?;
        let weights = batch.weights();
        let positions = batch.positions();
        for (what, expected, actual) in [
            ("batch obs", rows * obs_len, obs.len()),
            ("batch next_obs", rows * obs_len, next_obs.len()),
            ("batch actions", rows * act_len, actions.len()),
            ("batch rewards", rows, rewards.len()),
            ("batch terminated flags", rows, terminated.len()),
            ("batch truncated flags", rows, truncated.len()),
            ("batch weights", rows, weights.len()),
            ("batch positions", rows, positions.len()),
        ] {
            if expected != actual {
                return Err(Error::shape(what, expected, actual));
            }
        }
        let t = &mut self.train;
        for ((end, term), trunc) in t.ends.iter_mut().zip(terminated).zip(truncated) {
            *end = term.get() || trunc.get();
        }
        let row = |w: usize, step: usize| w * span + step;
        let obs_row = |r: usize| &obs[r * obs_len..(r + 1) * obs_len];

        // 1. Burn-in, forward only, then the proper rows replayed with gradients.
        for step in 0..burn_in {
            for w in 0..windows {
                let r = row(w, step);
                t.step_obs[w * obs_len..(w + 1) * obs_len].copy_from_slice(obs_row(r));
                t.starts[w] = step == 0 || t.ends[r - 1];
            }
            self.summary
                .step(&mut t.online, &t.step_obs, &t.starts, &mut t.step_out)?;
        }
        if burn_in > 0 {
            self.summary
                .snapshot(&t.online, &t.step_out, &mut t.snapshot)?;
        } else {
            t.snapshot.fill(0.0);
        }
        for step in 0..len {
            for w in 0..windows {
                let r = row(w, burn_in + step);
                let at = step * windows + w;
                t.window_obs[at * obs_len..(at + 1) * obs_len].copy_from_slice(obs_row(r));
                t.resets[at] = burn_in + step == 0 || t.ends[r - 1];
            }
        }
        let window = Window {
            obs: &t.window_obs,
            steps: len,
            rows: windows,
            resets: &t.resets,
            initial: &t.snapshot,
        };
        let summaries = self.summary.replay(window, &mut t.replay)?;
        for step in 0..len {
            for w in 0..windows {
                let (src, dst) = (step * windows + w, w * len + step);
                t.features[dst * h..(dst + 1) * h]
                    .copy_from_slice(&summaries[src * h..(src + 1) * h]);
            }
        }

        // 2. The target summarizer over the window and the last next observation.
        for step in 0..=span {
            for w in 0..windows {
                let input = if step < span {
                    obs_row(row(w, step))
                } else {
                    let r = row(w, span - 1);
                    &next_obs[r * obs_len..(r + 1) * obs_len]
                };
                t.step_obs[w * obs_len..(w + 1) * obs_len].copy_from_slice(input);
                // The last next observation continues its row's episode (a truncated
                // row's next observation is the one the episode was cut at).
                t.starts[w] = step == 0 || (step < span && t.ends[row(w, step) - 1]);
            }
            self.target
                .step(&mut t.target, &t.step_obs, &t.starts, &mut t.step_out)?;
            if step > burn_in {
                let k = step - burn_in - 1;
                for w in 0..windows {
                    let dst = w * len + k;
                    t.next_features[dst * h..(dst + 1) * h]
                        .copy_from_slice(&t.step_out[w * h..(w + 1) * h]);
                }
            }
        }

        // 3. The inner update on the summaries, and its gradient with respect to them.
        for w in 0..windows {
            for step in 0..len {
                let (src, dst) = (row(w, burn_in + step), w * len + step);
                t.actions[dst * act_len..(dst + 1) * act_len]
                    .copy_from_slice(&actions[src * act_len..(src + 1) * act_len]);
                t.rewards[dst] = rewards[src];
                t.terminated[dst] = terminated[src];
                t.weights[dst] = weights[src];
                t.positions[dst] = positions[src];
            }
        }
        let features = Features {
            rows: windows * len,
            obs: &t.features,
            actions: &t.actions,
            rewards: &t.rewards,
            terminated: &t.terminated,
            next_obs: &t.next_features,
            weights: &t.weights,
            positions: Some(&t.positions),
        };
        let stats = self.inner.update_summaries(features, &mut t.d_features)?;

        // 4. The summarizer's step: back through the replayed window, clipped, Adam.
        if let Some(adam) = &mut self.adam {
            for w in 0..windows {
                for step in 0..len {
                    let (src, dst) = (w * len + step, step * windows + w);
                    t.d_window[dst * h..(dst + 1) * h]
                        .copy_from_slice(&t.d_features[src * h..(src + 1) * h]);
                }
            }
            self.summary
                .replay_backward(&mut t.replay, &t.d_window, Some(&mut self.grads))?;
            let norm = clip_grad_norm(
                &mut [&mut self.grads[..]],
                self.config.max_grad_norm.unwrap_or(f32::INFINITY),
            )?;
            if !norm.is_finite() {
                self.grads.fill(0.0);
                return Err(Error::Diverged {
                    what: "summarizer gradient norm",
                    value: norm,
                });
            }
            if let Some(cell) = self.summary.cell_mut() {
                adam.update(cell.params_mut(), &self.grads)?;
            }
            self.grads.fill(0.0);
            if let (Some(target), Some(online)) = (self.target.cell_mut(), self.summary.cell()) {
                polyak(target.params_mut(), online.params(), self.config.tau)?;
            }
        }
        Ok(stats)
    }

    /// Acts for `slots.len()` environments: one summarizer step, then the inner
    /// learner's policy on the summaries.
    fn act_rows(
        &mut self,
        obs: &[f32],
        slots: &mut [HistorySlot],
        out: rl_collect::ActOutput<'_, L::Act>,
    ) -> Result<()> {
        let mode = self.mode();
        let state = acting::state_for(&mut self.acting, &self.summary, slots.len(), mode);
        acting::act(
            &self.summary,
            state,
            self.obs_len,
            &mut self.inner,
            obs,
            slots,
            out,
        )
    }

    fn mode(&self) -> Mode {
        crate::predict::Predict::mode(&self.inner)
    }
}

/// The elements of an `f32` box of observations.
fn obs_len(observation_space: &Space) -> Result<usize> {
    match observation_space {
        Space::Box(b) if b.dtype() == DType::F32 => Ok(b.flat_len()),
        other => Err(Error::SpaceMismatch {
            what: "observation space",
            expected: "a box of f32 elements".to_owned(),
            actual: describe(other),
        }),
    }
}

/// The space of summaries `width` wide: what the inner learner is built for.
fn summaries_space(width: usize) -> Result<Space> {
    Ok(Space::Box(BoxSpace::uniform(
        f32::NEG_INFINITY,
        f32::INFINITY,
        &[width],
        DType::F32,
    )?))
}

/// The blueprint of a [`Recurrent`] learner with summarizer `shape` and `config`, in
/// front of an inner learner of blueprint `inner` (for the summaries): the inner plan,
/// the summarizer and its target, the update's states, replay workspace and buffers;
/// replay columns of the raw observations; batches of whole windows; per-environment
/// acting state and the summarizer's copies in the actors.
fn compose(
    shape: &SummaryShape,
    config: &RecurrentConfig,
    inner: OffPolicyBlueprint,
) -> Result<OffPolicyBlueprint> {
    let rows = inner.batch_size;
    if !rows.is_multiple_of(config.seq_len) {
        return Err(Error::config(
            "batch_size",
            format!(
                "is {rows}: with recurrent.seq_len {} it must be a multiple of it (each window gives seq_len rows)",
                config.seq_len
            ),
        ));
    }
    let windows = rows / config.seq_len;
    let sizes = Sizes::of("recurrent.history");
    let history = config.history;
    let name = format!("history ({history})");
    let mut plan = inner.learner;
    let params = sizes.f32s(&[shape.cell_params])?;
    if let History::Lstm { .. } = history {
        plan.add(format!("{name}/parameters"), Location::Ram, params);
        plan.add(format!("{name}/gradients"), Location::Ram, params);
        plan.add(format!("{name}/target parameters"), Location::Ram, params);
        plan.add(
            format!("{name}/summarizer/adam moments"),
            Location::Ram,
            sizes.sum(&[params, params])?,
        );
    }
    for state in ["burn-in (online)", "burn-in (target)"] {
        plan.nest(&name, &shape.state_plan(state, windows, sizes)?);
    }
    plan.add(
        format!(
            "{name}/window replay, {} steps x {windows} windows",
            config.seq_len
        ),
        Location::Ram,
        shape.replay_workspace_bytes(config.seq_len, windows, sizes)?,
    );
    let schema = &inner.replay_schema;
    let action = schema
        .column(Field::Action.name())
        .ok_or_else(|| Error::config("recurrent inner learner", "reads no action column"))?;
    plan.add(
        format!("{name}/update buffers (windows, summaries, gradients)"),
        Location::Ram,
        train_bytes(shape, windows, config, action.row_bytes())?,
    );
    let replay_schema: Schema =
        TransitionSchema::new(DType::F32, &[shape.obs_len], action.dtype(), action.shape())
            .with_next_obs()
            .build()?;
    let batch_size = sizes.count(&[windows, sizes.add(&[config.burn_in, config.seq_len])?])?;
    let mut blueprint = OffPolicyBlueprint::new(plan, replay_schema, batch_size);
    blueprint.sequence = Some(SequenceSpec {
        len: config.seq_len,
        burn_in: config.burn_in,
    });
    let (before, after) = shape.state_line("history acting");
    blueprint
        .acting
        .push(Scaled::per(before, after, shape.state_bytes_per_env()));
    blueprint.acting.push(Scaled::per(
        "history acting summaries (",
        " rows)",
        sizes.bytes(&[sizes.add(&[sizes.count(&[shape.output_len, size_of::<f32>()])?, 1])?])?,
    ));
    blueprint.actor = inner.actor;
    if let History::Lstm { .. } = history {
        blueprint.actor.push(Scaled::per(
            format!("history ({history}) copies x "),
            "",
            params,
        ));
    }
    Ok(blueprint)
}

/// What a [`Recurrent`] checkpoint carries besides the networks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecurrentState<S> {
    /// The memory's settings.
    pub config: RecurrentConfig,
    /// The seed of the summarizer's initialisation; must match on restore.
    pub seed: u64,
    /// The inner learner's state.
    pub inner: S,
}

impl<L: SequenceLearner> Recurrent<L> {}
