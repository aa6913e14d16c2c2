//! The synchronous collector: `N` environments stepped in the caller's thread.

use std::ops::Range;
use std::sync::Arc;

use rl_core::{DType, Device, Env, Field, Flag, Location, MemoryPlan, NonFinite, ProcessMemory};
use rl_storage::{
    ColumnSlice, replay::ReplayBuffer, rollout::RolloutBuffer, sampler::Sampler,
    storage::HostStorage,
};

use crate::error::{Error, Result};
use crate::lanes::{self, Lanes};
use crate::policy::{ActOutput, ActionSampler, Policy, RandomAction, ValuePolicy};
use crate::saved::SavedCollector;
use crate::stats::EpisodeStats;

mod frames;
mod pipeline;

pub use pipeline::Beside;
use pipeline::Pending;

/// Settings shared by the collectors. Defaults in [`CollectorConfig::new`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CollectorConfig {
    /// Environment steps per call to a replay `collect` (all environments together); a
    /// multiple of the number of environments. Rollouts collect their own size instead.
    pub frames_per_batch: usize,
    /// Stop after this many environment steps (`None`: never).
    pub total_frames: Option<u64>,
    /// The first frames use uniformly random actions instead of the policy (warm-up for
    /// off-policy learning). Default 0.
    pub random_frames: u64,
    /// Environment `i` is first reset with seed `seed + i`; random actions are seeded
    /// from it too.
    pub seed: u64,
    /// Where the policy runs. Only the CPU is supported so far.
    pub policy_device: Device,
    /// Where collected data is stored. Only the CPU is supported so far.
    pub storing_device: Device,
    /// What NaN or infinite rewards and observations do: refused with an error naming
    /// the environment and step (default [`NonFinite::Reject`]), or passed on.
    pub non_finite: NonFinite,
    /// Episodes averaged in statistics (default 100).
    pub stats_window: usize,
    /// Read the process's resident memory into each [`BatchReport`] (default true; a
    /// few microseconds per batch, no allocation).
    pub report_memory: bool,
}

impl CollectorConfig {
    /// `frames_per_batch` frames per batch, everything else at its default: no total,
    /// no random frames, seed 0, CPU everywhere, finiteness checked, window 100, memory
    /// reported.
    pub fn new(frames_per_batch: usize) -> Self {
        Self {
            frames_per_batch,
            total_frames: None,
            random_frames: 0,
            seed: 0,
            policy_device: Device::Cpu,
            storing_device: Device::Cpu,
            non_finite: NonFinite::Reject,
            stats_window: 100,
            report_memory: true,
        }
    }

    /// Checks the configuration for `envs` environments. Never touches CUDA: a CUDA
    /// device is refused as data, before anything could initialise a driver.
    pub(crate) fn validate(&self, envs: usize) -> Result<()> {
        if envs == 0 {
            return Err(Error::config(
                "environments",
                "is empty: give at least one environment",
            ));
        }
        if self.frames_per_batch == 0 || !self.frames_per_batch.is_multiple_of(envs) {
            return Err(Error::config(
                "frames_per_batch",
                format!(
                    "is {}: it must be a positive multiple of the {envs} environments",
                    self.frames_per_batch
                ),
            ));
        }
        for (what, device) in [
            ("policy_device", self.policy_device),
            ("storing_device", self.storing_device),
        ] {
            if !device.is_cpu() {
                return Err(Error::config(
                    what,
                    format!(
                        "is {device}: collectors run on the CPU so far; GPU storage arrives with the GPU storage issue"
                    ),
                ));
            }
        }
        if self.total_frames == Some(0) {
            return Err(Error::config(
                "total_frames",
                "is zero: use None for no limit",
            ));
        }
        Ok(())
    }
}

/// What one batch collected, and the state of the run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchReport {
    /// Environment steps in this batch.
    pub frames: u64,
    /// Environment steps since the collector was created.
    pub total_frames: u64,
    /// Episodes completed so far.
    pub episodes: u64,
    /// Mean return over the statistics window (`None` before the first episode).
    pub mean_return: Option<f32>,
    /// Resident memory after the batch, when [`CollectorConfig::report_memory`] is on.
    pub memory: Option<ProcessMemory>,
    /// Whether the collector reached `total_frames`.
    pub done: bool,
}

/// Steps `N` environments in the caller's thread with one batched policy call per step
/// and writes the transitions straight into a replay buffer or a rollout buffer.
///
/// All buffers are allocated at construction: with a policy that does not allocate, a
/// batch allocates nothing. Episodes that end are reset automatically; the final
/// observation of a truncated episode is what gets stored as its next observation (and
/// what bootstraps a rollout), never the reset observation.
///
/// ```
/// use rl_collect::{CollectorConfig, ConstantPolicy, SyncCollector};
/// use rl_core::{Env, TransitionSchema};
/// use rl_envs::CartPole;
/// use rl_storage::{ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};
///
/// let envs: Vec<CartPole> = (0..8).map(CartPole::new).collect();
/// let schema = TransitionSchema::for_spaces(envs[0].observation_space(), envs[0].action_space())
///     .with_next_obs()
///     .build()?;
/// let mut collector = SyncCollector::new(envs, ConstantPolicy::new(&[1u32]), CollectorConfig::new(64))?;
/// let mut replay = ReplayBuffer::new(RamStorage::new(schema, 10_000, None)?, Uniform::new(0));
/// let report = collector.collect(&mut replay)?;
/// assert_eq!(report.frames, 64);
/// assert_eq!(replay.len(), 64);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SyncCollector<E: Env, P: Policy<Obs = E::Obs, Act = E::Act>> {
    lanes: Lanes<E>,
    policy: P,
    config: CollectorConfig,
    actions: Vec<E::Act>,
    log_probs: Vec<f32>,
    values: Vec<f32>,
    final_values: Vec<f32>,
    states: Vec<P::State>,
    random: ActionSampler,
    stats: EpisodeStats,
    frames: u64,
    steps: u64,
    failed: bool,
    /// The thread the policy acts on while the environments step (`None`: one thread).
    beside: Option<Arc<dyn Beside>>,
    /// A pipelined step's actions and extras while the next are computed.
    pending: Pending<E::Act>,
}

impl<E, P> SyncCollector<E, P>
where
    E: Env,
    E::Act: RandomAction,
    P: Policy<Obs = E::Obs, Act = E::Act>,
{
    /// A collector over `envs` (all with the same spaces), resetting environment `i`
    /// with seed `config.seed + i`.
    ///
    /// # Errors
    /// Invalid configuration (no environments, spaces that differ, a `frames_per_batch`
    /// that is not a multiple of the environments, a CUDA device), or an environment's
    /// reset error.
    pub fn new(envs: Vec<E>, policy: P, config: CollectorConfig) -> Result<Self> {
        config.validate(envs.len())?;
        let random = ActionSampler::new(envs[0].action_space(), config.seed ^ 0x5EED)?;
        let lanes = Lanes::new(envs, config.seed, config.non_finite)?;
        let n = lanes.len();
        Ok(Self {
            actions: vec![E::Act::default(); n * lanes.act_len],
            log_probs: vec![0.0; n],
            values: vec![0.0; n],
            final_values: vec![0.0; n],
            states: vec![P::State::default(); n],
            random,
            stats: EpisodeStats::new(config.stats_window),
            frames: 0,
            steps: 0,
            failed: false,
            beside: None,
            pending: Pending::new(n, lanes.act_len),
            lanes,
            policy,
            config,
        })
    }

    /// Number of environments.
    pub fn envs(&self) -> usize {
        self.lanes.len()
    }

    /// Episode statistics so far.
    pub fn stats(&self) -> &EpisodeStats {
        &self.stats
    }

    /// Episode statistics, mutably: to keep and drain finished episodes
    /// ([`EpisodeStats::keep_ended`]).
    pub fn stats_mut(&mut self) -> &mut EpisodeStats {
        &mut self.stats
    }

    /// Environment steps so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// The current observation of every environment, one after another: what the next
    /// step acts on (a reset observation after an episode ended).
    pub fn observations(&self) -> &[E::Obs] {
        &self.lanes.obs
    }

    /// The policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// The policy, mutably (to update its weights between batches).
    pub fn policy_mut(&mut self) -> &mut P {
        &mut self.policy
    }

    /// Acts on `beside`'s second thread while the environments step on this one
    /// (`None`, the default: everything on this thread). Rollouts then run in two phases
    /// per step, each half of the environments stepping while the policy acts for the
    /// other half, with the same results for a feed-forward policy whose rows do not
    /// depend on each other: the policy acts for the same rows in the same order. Other
    /// collections, recurrent policies and a single environment run as before.
    pub fn set_beside(&mut self, beside: Option<Arc<dyn Beside>>) {
        self.beside = beside;
    }

    /// Memory the collector holds besides its environments and policy.
    pub fn memory_plan(&self) -> MemoryPlan {
        Self::plan(self.envs(), self.lanes.obs_len, self.lanes.act_len)
    }

    /// What [`SyncCollector::memory_plan`] will report for `envs` environments with
    /// observations of `obs_len` and actions of `act_len` elements, before anything
    /// exists.
    pub fn plan(envs: usize, obs_len: usize, act_len: usize) -> MemoryPlan {
        let n = envs as u64;
        let mut plan = MemoryPlan::new();
        plan.nest("sync_collector", &lanes::plan::<E::Obs>(envs, obs_len));
        plan.add(
            "sync_collector/actions+extras",
            Location::Ram,
            // Actions, log-probs, values and final values, and a pipelined step's
            // pending actions, log-probs and values.
            n * (2 * act_len * size_of::<E::Act>() + 20) as u64,
        );
        plan
    }

    fn check_running(&self) -> Result<()> {
        if self.failed {
            return Err(Error::Stopped {
                reason: " after a failure",
            });
        }
        if self
            .config
            .total_frames
            .is_some_and(|total| self.frames >= total)
        {
            return Err(Error::Stopped {
                reason: ": it collected its total frames",
            });
        }
        Ok(())
    }

    /// Fills `actions` (and extras) for the current observations: random during the
    /// warm-up frames, the policy after.
    fn decide(&mut self) -> Result<()> {
        if self.frames < self.config.random_frames {
            E::Act::fill(&mut self.random, &mut self.actions)?;
            self.log_probs.fill(0.0);
            self.values.fill(0.0);
            return Ok(());
        }
        self.act_on(0..self.lanes.len())
    }

    /// The policy's actions for environments `lanes` on this thread, from their
    /// current observations.
    fn act_on(&mut self, lanes: Range<usize>) -> Result<()> {
        let (obs_len, act_len) = (self.lanes.obs_len, self.lanes.act_len);
        let out = ActOutput {
            actions: &mut self.actions[lanes.start * act_len..lanes.end * act_len],
            log_probs: &mut self.log_probs[lanes.clone()],
            values: &mut self.values[lanes.clone()],
        };
        self.policy
            .act(
                &self.lanes.obs[lanes.start * obs_len..lanes.end * obs_len],
                &mut self.states[lanes],
                out,
            )
            .map_err(|source| Error::Policy {
                step: self.steps,
                source,
            })
    }

    /// Ends a step: makes next observations current, resets finished episodes.
    fn advance(&mut self) -> Result<()> {
        let states = &mut self.states;
        self.lanes.advance(&mut self.stats, self.steps, |i| {
            states[i] = Default::default()
        })?;
        self.steps += 1;
        self.frames += self.lanes.len() as u64;
        Ok(())
    }

    fn report(&self, frames: u64) -> BatchReport {
        BatchReport {
            frames,
            total_frames: self.frames,
            episodes: self.stats.episodes(),
            mean_return: self.stats.mean_return(),
            memory: self
                .config
                .report_memory
                .then(ProcessMemory::read)
                .and_then(|m| m.ok()),
            done: self.config.total_frames.is_some_and(|t| self.frames >= t),
        }
    }

    /// Collects `frames_per_batch` frames (fewer if `total_frames` is reached) into a
    /// replay buffer whose schema has the columns `obs`, `action`, `reward`,
    /// `terminated`, `truncated` and `next_obs`, optionally `log_prob` and `value`
    /// (f32), and no others. One `extend` per step writes all environments' rows.
    ///
    /// # Errors
    /// A schema with other columns; an environment's or the policy's error, naming the
    /// environment and step (the collector then stops); a storage error.
    pub fn collect<S: HostStorage, Q: Sampler>(
        &mut self,
        replay: &mut ReplayBuffer<S, Q>,
    ) -> Result<BatchReport> {
        self.check_running()?;
        let layout = Layout::replay(replay.schema())?;
        // Before any environment steps: a wrong width would fail only at the write.
        Layout::check_widths::<E::Obs, E::Act>(
            replay.schema(),
            "replay",
            self.lanes.obs_len,
            self.lanes.act_len,
        )?;
        let steps = self.batch_steps();
        for _ in 0..steps {
            let result = self.replay_step(replay, &layout);
            if result.is_err() {
                self.failed = true;
                return result.map(|()| self.report(0));
            }
        }
        Ok(self.report(steps as u64 * self.lanes.len() as u64))
    }

    fn batch_steps(&self) -> usize {
        let per_batch = self.config.frames_per_batch / self.lanes.len();
        match self.config.total_frames {
            Some(total) => {
                let left = (total - self.frames).div_ceil(self.lanes.len() as u64);
                per_batch.min(left as usize)
            }
            None => per_batch,
        }
    }

    fn replay_step<S: HostStorage, Q: Sampler>(
        &mut self,
        replay: &mut ReplayBuffer<S, Q>,
        layout: &Layout,
    ) -> Result<()> {
        self.decide()?;
        self.lanes.step(&self.actions, self.steps)?;
        let lanes = &self.lanes;
        let columns = layout.arrange([
            element_slice(&lanes.obs),
            element_slice(&self.actions),
            (&lanes.rewards).into(),
            (&lanes.terminated).into(),
            (&lanes.truncated).into(),
            element_slice(&lanes.next_obs),
            (&self.log_probs).into(),
            (&self.values).into(),
            ColumnSlice::F32(&[]),
        ]);
        replay.extend(layout.columns(&columns))?;
        self.advance()
    }
}

impl<E, P> SyncCollector<E, P>
where
    E: Env,
    E::Act: RandomAction,
    P: ValuePolicy<Obs = E::Obs, Act = E::Act> + Send,
    P::State: Send,
{
    /// Fills `rollout` with its `steps` steps of all environments. It must be empty, sized
    /// for this collector's environments and hold the columns of
    /// [`TransitionSchema::for_rollout`](rl_core::TransitionSchema::for_rollout) (in
    /// any order, no others). The acting policy records each action's log-probability
    /// and value; `final_value` is the policy's value of the next observation where the
    /// trajectory is cut without terminating (at a truncation, the final observation's;
    /// at the rollout's last step, the next one's), 0 elsewhere. Advantages are the
    /// learner's to compute.
    ///
    /// # Errors
    /// A rollout of another shape or with other columns; an environment's or the
    /// policy's error, naming the environment and step (the collector then stops); a
    /// storage error.
    pub fn collect_rollout(&mut self, rollout: &mut RolloutBuffer) -> Result<BatchReport> {
        self.check_running()?;
        let layout = Layout::rollout(rollout.schema())?;
        Layout::check_widths::<E::Obs, E::Act>(
            rollout.schema(),
            "rollout",
            self.lanes.obs_len,
            self.lanes.act_len,
        )?;
        if rollout.envs() != self.lanes.len() || !rollout.is_empty() {
            return Err(Error::config(
                "rollout buffer",
                format!(
                    "holds {} of {} steps of {} environments; the collector fills an empty one of {} environments: clear() it, or build it for these environments",
                    rollout.len(),
                    rollout.steps(),
                    rollout.envs(),
                    self.lanes.len(),
                ),
            ));
        }
        let steps = rollout.steps();
        let result = self.fill_rollout(rollout, &layout, steps);
        if result.is_err() {
            self.failed = true;
        }
        result.map(|()| self.report((steps * self.lanes.len()) as u64))
    }

    fn fill_rollout(
        &mut self,
        rollout: &mut RolloutBuffer,
        layout: &Layout,
        steps: usize,
    ) -> Result<()> {
        if let Some(beside) = self.pipelines() {
            return self.fill_rollout_beside(&*beside, rollout, layout, steps);
        }
        let n = self.lanes.len();
        for t in 0..steps {
            self.decide()?;
            self.lanes.step(&self.actions, self.steps)?;
            self.final_values(0..n, t + 1 == steps)?;
            self.push(rollout, layout, false)?;
            self.advance()?;
        }
        Ok(())
    }

    /// Writes the final values of environments `lanes` for the step just taken: the
    /// policy's value of the next observation where the trajectory is cut without
    /// terminating (a truncation, or any environment at the rollout's `last` step), 0
    /// elsewhere.
    fn final_values(&mut self, lanes: Range<usize>, last: bool) -> Result<()> {
        let obs_len = self.lanes.obs_len;
        let (terminated, truncated) = (&self.lanes.terminated, &self.lanes.truncated);
        if last || truncated[lanes.clone()].iter().any(|t| t.get()) {
            self.policy
                .values(
                    &self.lanes.next_obs[lanes.start * obs_len..lanes.end * obs_len],
                    &self.states[lanes.clone()],
                    &mut self.final_values[lanes.clone()],
                )
                .map_err(|source| Error::Policy {
                    step: self.steps,
                    source,
                })?;
        }
        for i in lanes {
            if terminated[i].get() || !(last || truncated[i].get()) {
                self.final_values[i] = 0.0;
            }
        }
        Ok(())
    }

    /// Writes the step just taken into `rollout`: the current observations, the actions
    /// and extras (the `pending` copies in a pipelined step), rewards, flags and final
    /// values.
    fn push(&mut self, rollout: &mut RolloutBuffer, layout: &Layout, pending: bool) -> Result<()> {
        let (actions, log_probs, values) = if pending {
            let p = &self.pending;
            (&p.actions, &p.log_probs, &p.values)
        } else {
            (&self.actions, &self.log_probs, &self.values)
        };
        let lanes = &self.lanes;
        let columns = layout.arrange([
            element_slice(&lanes.obs),
            element_slice(actions),
            (&lanes.rewards).into(),
            (&lanes.terminated).into(),
            (&lanes.truncated).into(),
            ColumnSlice::F32(&[]),
            log_probs.into(),
            values.into(),
            (&self.final_values).into(),
        ]);
        rollout.push_step(layout.columns(&columns))?;
        Ok(())
    }
}

impl<E, P> SyncCollector<E, P>
where
    E: Env,
    E::Act: RandomAction,
    P: Policy<Obs = E::Obs, Act = E::Act>,
{
    /// The collector's state for a later [`SyncCollector::restore`].
    pub fn saved(&self) -> SavedCollector {
        let exact = self.policy.stateless();
        let lanes = exact.then(|| self.lanes.saved()).flatten();
        SavedCollector {
            stats: self.stats.saved(),
            random: lanes.as_ref().map(|_| self.random.rng().clone()),
            lanes,
        }
    }

    /// Restores a saved state into this collector (built as the saved one, with the
    /// same environments): the statistics always, and the environments mid-episode
    /// where they were saved. Returns whether the environments were restored (the
    /// collector then continues exactly); otherwise they start new episodes. Changes
    /// nothing on error.
    ///
    /// # Errors
    /// Saved data of another collector or damaged; an environment that refuses its
    /// saved state.
    pub fn restore(&mut self, saved: &SavedCollector) -> Result<bool> {
        saved.stats.check()?;
        let exact = match (&saved.lanes, &saved.random) {
            (Some(lanes), Some(random)) if self.policy.stateless() => {
                self.lanes.restore(lanes)?;
                *self.random.rng_mut() = random.clone();
                true
            }
            _ => false,
        };
        self.stats.restore(&saved.stats)?;
        Ok(exact)
    }
}

/// Any element slice as a column slice.
pub(crate) fn element_slice<T: rl_core::Element>(values: &[T]) -> ColumnSlice<'_> {
    let bytes: &[u8] = bytemuck::cast_slice(values);
    match T::DTYPE {
        DType::F32 => ColumnSlice::F32(bytemuck::cast_slice(bytes)),
        DType::U32 => ColumnSlice::U32(bytemuck::cast_slice(bytes)),
        DType::I64 => ColumnSlice::I64(bytemuck::cast_slice(bytes)),
        DType::U8 => ColumnSlice::U8(bytes),
        DType::Bool => ColumnSlice::Bool(bytemuck::cast_slice::<u8, Flag>(bytes)),
    }
}

/// How a collector's columns fill a buffer's schema: for each schema column, the
/// transition field (index into [`Field::ALL`]) whose data it takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    fields: [usize; Field::ALL.len()],
    count: usize,
}

impl Layout {
    /// A replay buffer's: every field but `final_value`, the first six required.
    pub(crate) fn replay(schema: &rl_core::Schema) -> Result<Self> {
        let available = &Field::ALL[..8];
        Self::new(
            schema.columns(),
            "replay schema",
            available,
            &available[..6],
        )
    }

    /// A deduplicating buffer's transition `columns` (its storage's, `final_obs` left
    /// out): the five step fields, no `next_obs` (the next row holds it).
    pub(crate) fn frames(columns: &[rl_core::Column]) -> Result<Self> {
        let step = &Field::ALL[..5];
        Self::new(columns, "deduplicating replay schema", step, step)
    }

    /// A rollout buffer's: every field but `next_obs`, all of them required.
    pub(crate) fn rollout(schema: &rl_core::Schema) -> Result<Self> {
        let fields = [
            Field::Obs,
            Field::Action,
            Field::Reward,
            Field::Terminated,
            Field::Truncated,
            Field::LogProb,
            Field::Value,
            Field::FinalValue,
        ];
        Self::new(schema.columns(), "rollout schema", &fields, &fields)
    }

    fn new(
        columns: &[rl_core::Column],
        what: &str,
        available: &[Field],
        required: &[Field],
    ) -> Result<Self> {
        let names = |fields: &[Field]| fields.iter().map(|f| f.name()).collect::<Vec<_>>();
        let mut layout = Self {
            fields: [0; Field::ALL.len()],
            count: columns.len(),
        };
        if layout.count > available.len() {
            return Err(Error::config(
                what,
                format!(
                    "has {} columns; a collector fills at most {:?}",
                    layout.count,
                    names(available)
                ),
            ));
        }
        for (slot, column) in layout.fields.iter_mut().zip(columns) {
            let field = Field::from_name(column.name())
                .filter(|f| available.contains(f))
                .ok_or_else(|| {
                    Error::config(
                        format!("{what} column `{}`", column.name()),
                        format!("is not one a collector fills: use {:?}", names(available)),
                    )
                })?;
            *slot = Field::ALL.iter().position(|&f| f == field).unwrap_or(0);
        }
        if let Some(missing) = required
            .iter()
            .find(|f| !columns.iter().any(|c| c.name() == f.name()))
        {
            return Err(Error::config(
                what,
                format!(
                    "has no `{missing}` column: a collector writes {:?} (build it with rl_core::TransitionSchema)",
                    names(required)
                ),
            ));
        }
        Ok(layout)
    }

    /// Checks that the schema's `obs`, `next_obs` and `action` columns (those it has)
    /// hold what the environments give: `O` x `obs_len` and `A` x `act_len` per row.
    pub(crate) fn check_widths<O: rl_core::Element, A: rl_core::Element>(
        schema: &rl_core::Schema,
        what: &str,
        obs_len: usize,
        act_len: usize,
    ) -> Result<()> {
        for (field, dtype, numel) in [
            (Field::Obs, O::DTYPE, obs_len),
            (Field::NextObs, O::DTYPE, obs_len),
            (Field::Action, A::DTYPE, act_len),
        ] {
            let column = schema.index_of(field.name()).map(|i| &schema.columns()[i]);
            if let Some(column) = column
                && (column.dtype() != dtype || column.numel() != numel)
            {
                return Err(Error::config(
                    format!("{what} column `{field}`"),
                    format!(
                        "holds {} x {} per row; the collector's environments give {dtype} x {numel}: build the schema from their spaces (rl_core::TransitionSchema)",
                        column.dtype(),
                        column.numel()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Puts `all` (the data of each field, in [`Field::ALL`]'s order) in schema order;
    /// the first [`Layout::columns`] entries are meaningful.
    pub(crate) fn arrange<'a>(
        &self,
        all: [ColumnSlice<'a>; Field::ALL.len()],
    ) -> [ColumnSlice<'a>; Field::ALL.len()] {
        let mut columns = [ColumnSlice::U8(&[]); Field::ALL.len()];
        for (slot, &source) in columns.iter_mut().zip(&self.fields).take(self.count) {
            *slot = all[source];
        }
        columns
    }

    /// The schema's columns of an [`Layout::arrange`]d array.
    pub(crate) fn columns<'s, 'a>(&self, arranged: &'s [ColumnSlice<'a>]) -> &'s [ColumnSlice<'a>] {
        &arranged[..self.count]
    }
}
