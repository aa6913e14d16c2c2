//! The on-policy rollout buffer of PPO-style algorithms: `steps x envs` transitions,
//! allocated once, filled step by step, turned into advantages and returns by GAE in
//! place, and read back in shuffled minibatches.
//!
//! See [`RolloutBuffer`] for one PPO iteration, which allocates nothing.
//!
//! Every column is a flat `Vec`, time-major: row `t * envs + e` is step `t` of
//! environment `e`. Discrete actions are `u32` indices (never one-hot). `terminated` and
//! `truncated` are kept apart: a time-limit cut bootstraps from the value of the final
//! observation, a termination does not.

use std::fmt;
use std::slice::Chunks;

use rand::Rng;
use rl_core::env::check_len;
use rl_core::{DType, Flag, Location, MemoryBudget, MemoryPlan};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How actions are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ActionShape {
    /// One `u32` index per row (never one-hot).
    Discrete,
    /// `dim` `f32` values per row.
    Continuous(usize),
}

impl ActionShape {
    /// Elements per row: 1 for an index, `dim` for a continuous action.
    pub const fn width(self) -> usize {
        match self {
            ActionShape::Discrete => 1,
            ActionShape::Continuous(dim) => dim,
        }
    }

    /// Element type of the action column.
    pub const fn dtype(self) -> DType {
        match self {
            ActionShape::Discrete => DType::U32,
            ActionShape::Continuous(_) => DType::F32,
        }
    }
}

/// Configuration of a [`RolloutBuffer`]: a plain struct, validated when a buffer, batch or
/// plan is made from it. Start from [`RolloutConfig::new`] (sizes, and the defaults for
/// the rest) and change fields with struct update syntax:
/// `RolloutConfig { gamma: 0.995, ..RolloutConfig::new(128, 8, 4, ActionShape::Discrete) }`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutConfig {
    /// Steps per rollout (`T`), at least 1.
    pub steps: usize,
    /// Environments stepped together (`N`), at least 1.
    pub envs: usize,
    /// `f32` elements per observation, at least 1.
    pub obs_len: usize,
    /// How actions are stored.
    pub action: ActionShape,
    /// Discount factor, in `[0, 1]`. Default [`RolloutConfig::DEFAULT_GAMMA`].
    pub gamma: f32,
    /// GAE's lambda, in `[0, 1]`: 0 is one-step TD, 1 is Monte-Carlo. Default
    /// [`RolloutConfig::DEFAULT_GAE_LAMBDA`].
    pub gae_lambda: f32,
    /// Refuse NaN and infinities in observations, continuous actions, rewards, values,
    /// log-probabilities, final values and last values. Default `true`.
    pub reject_non_finite: bool,
}

impl RolloutConfig {
    /// Default discount factor (as in CleanRL and Stable-Baselines3).
    pub const DEFAULT_GAMMA: f32 = 0.99;
    /// Default GAE lambda (as in CleanRL and Stable-Baselines3).
    pub const DEFAULT_GAE_LAMBDA: f32 = 0.95;

    /// A configuration with the given sizes and the defaults: `gamma` 0.99,
    /// `gae_lambda` 0.95, non-finite values rejected. Change the rest with struct update
    /// syntax. Nothing is validated until the configuration is used.
    pub const fn new(steps: usize, envs: usize, obs_len: usize, action: ActionShape) -> Self {
        Self {
            steps,
            envs,
            obs_len,
            action,
            gamma: Self::DEFAULT_GAMMA,
            gae_lambda: Self::DEFAULT_GAE_LAMBDA,
            reject_non_finite: true,
        }
    }

    /// Checks every setting.
    ///
    /// # Errors
    /// Invalid configuration for a zero size (steps, envs, obs_len, continuous action
    /// dimension), `gamma` or `gae_lambda` outside `[0, 1]` (or NaN), more than
    /// `u32::MAX` rows (`steps * envs`), or a column too large to address.
    pub fn validate(&self) -> Result<()> {
        Sizes::new(self, self.steps.checked_mul(self.envs)).map(|_| ())
    }

    /// Transitions a full rollout holds: `steps * envs` (saturating; exact once valid).
    pub const fn rows(&self) -> usize {
        self.steps.saturating_mul(self.envs)
    }
}

/// Element counts of each column for some number of rows, checked for overflow.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    rows: usize,
    envs: usize,
    obs: usize,
    actions: usize,
}

impl Sizes {
    /// Validates `config` and sizes columns of `rows` rows (`None`: the row count
    /// overflowed).
    fn new(config: &RolloutConfig, rows: Option<usize>) -> Result<Self> {
        let positive = |what: &str, value: usize| {
            if value == 0 {
                Err(Error::config(what, "is 0: it must be at least 1"))
            } else {
                Ok(())
            }
        };
        positive("steps", config.steps)?;
        positive("envs", config.envs)?;
        positive("obs_len", config.obs_len)?;
        positive("continuous action dimension", config.action.width())?;
        unit_interval("gamma", config.gamma)?;
        unit_interval("gae_lambda", config.gae_lambda)?;
        let rows = rows
            .filter(|&rows| u32::try_from(rows).is_ok())
            .ok_or_else(|| {
                Error::config(
                    "rollout rows",
                    format!(
                        "exceed {} (minibatch indices are u32): use fewer steps or environments",
                        u32::MAX
                    ),
                )
            })?;
        let column = |what: &str, per_row: usize| {
            rows.checked_mul(per_row)
                .filter(|&n| n.checked_mul(4).is_some_and(|b| isize::try_from(b).is_ok()))
                .ok_or_else(|| {
                    Error::config(
                        what,
                        format!("of {rows} rows x {per_row} elements is too large to allocate"),
                    )
                })
        };
        Ok(Self {
            rows,
            envs: config.envs,
            obs: column("observation column", config.obs_len)?,
            actions: column("action column", config.action.width())?,
        })
    }

    /// One line per column, exact bytes.
    fn buffer_plan(&self) -> MemoryPlan {
        let f32s = |n: usize| bytes::<f32>(n);
        MemoryPlan::new()
            .with("obs", Location::Ram, f32s(self.obs))
            .with("action", Location::Ram, bytes::<u32>(self.actions))
            .with("reward", Location::Ram, f32s(self.rows))
            .with("terminated", Location::Ram, bytes::<Flag>(self.rows))
            .with("truncated", Location::Ram, bytes::<Flag>(self.rows))
            .with("value", Location::Ram, f32s(self.rows))
            .with("log_prob", Location::Ram, f32s(self.rows))
            .with("final_value", Location::Ram, f32s(self.rows))
            .with("advantage", Location::Ram, f32s(self.rows))
            .with("return", Location::Ram, f32s(self.rows))
            .with("minibatch_order", Location::Ram, bytes::<u32>(self.rows))
            .with("last_value", Location::Ram, f32s(self.envs))
    }

    /// One line per batch column, exact bytes.
    fn batch_plan(&self) -> MemoryPlan {
        let f32s = |n: usize| bytes::<f32>(n);
        MemoryPlan::new()
            .with("obs", Location::Ram, f32s(self.obs))
            .with("action", Location::Ram, bytes::<u32>(self.actions))
            .with("log_prob", Location::Ram, f32s(self.rows))
            .with("value", Location::Ram, f32s(self.rows))
            .with("advantage", Location::Ram, f32s(self.rows))
            .with("return", Location::Ram, f32s(self.rows))
    }
}

/// Bytes of `n` elements of `T` (`u32`, `f32` and `u32` are all 4 bytes, so the action
/// line is exact for both kinds).
fn bytes<T>(n: usize) -> u64 {
    (n as u64).saturating_mul(size_of::<T>() as u64)
}

fn unit_interval(what: &str, value: f32) -> Result<()> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(Error::config(
            what,
            format!("is {value}: it must lie in [0, 1]"),
        ))
    }
}

/// A zeroed column of exactly `len` elements with every page touched, so resident memory
/// equals the plan from the start (not growing as the first rollout fills it).
fn column<T: Copy + Default>(len: usize) -> Vec<T> {
    let mut column = vec![T::default(); len];
    let per_page = (4096 / size_of::<T>().max(1)).max(1);
    for page in column.chunks_mut(per_page) {
        // `black_box`: the compiler knows calloc'd memory is zero and could drop the write.
        page[0] = std::hint::black_box(T::default());
    }
    column
}

/// Actions, borrowed: what a step writes and what the buffer and batches hand out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Actions<'a> {
    /// One index per row.
    Discrete(&'a [u32]),
    /// `dim` values per row, row-major.
    Continuous(&'a [f32]),
}

impl Actions<'_> {
    /// Elements (not rows).
    pub fn len(&self) -> usize {
        match self {
            Actions::Discrete(a) => a.len(),
            Actions::Continuous(a) => a.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn dtype(&self) -> DType {
        match self {
            Actions::Discrete(_) => DType::U32,
            Actions::Continuous(_) => DType::F32,
        }
    }
}

/// An owned action column.
#[derive(Clone, Debug)]
enum ActionColumn {
    Discrete(Vec<u32>),
    Continuous(Vec<f32>),
}

impl ActionColumn {
    fn new(shape: ActionShape, len: usize) -> Self {
        match shape {
            ActionShape::Discrete => ActionColumn::Discrete(column(len)),
            ActionShape::Continuous(_) => ActionColumn::Continuous(column(len)),
        }
    }

    fn as_actions(&self, len: usize) -> Actions<'_> {
        match self {
            ActionColumn::Discrete(a) => Actions::Discrete(&a[..len]),
            ActionColumn::Continuous(a) => Actions::Continuous(&a[..len]),
        }
    }

    #[cfg(test)]
    fn capacity_bytes(&self) -> usize {
        match self {
            ActionColumn::Discrete(a) => a.capacity() * size_of::<u32>(),
            ActionColumn::Continuous(a) => a.capacity() * size_of::<f32>(),
        }
    }
}

/// One vector-environment step: `N` transitions, one per environment.
///
/// Every slice is indexed by environment; `obs` holds `N * obs_len` values, environment
/// by environment, and is the observation the actions were chosen from.
#[derive(Clone, Copy, Debug)]
pub struct StepData<'a> {
    /// Observations the actions were taken in, `N * obs_len`.
    pub obs: &'a [f32],
    /// Actions taken: `N` indices, or `N * dim` values.
    pub actions: Actions<'a>,
    /// Rewards received, `N`.
    pub rewards: &'a [f32],
    /// Whether the episode ended in a terminal state (no bootstrap), `N`.
    pub terminated: &'a [bool],
    /// Whether the episode was cut by a time limit (bootstrap from `final_values`), `N`.
    pub truncated: &'a [bool],
    /// The value estimates `V(obs)`, `N`.
    pub values: &'a [f32],
    /// Log-probabilities of `actions` under the acting policy, `N`.
    pub log_probs: &'a [f32],
    /// `V` of the final observation of each truncated episode, `N`. Read only where
    /// `truncated` is set and `terminated` is not; stored as 0 elsewhere.
    pub final_values: &'a [f32],
}

/// Fixed-size on-policy storage of `steps x envs` transitions for PPO-style algorithms.
///
/// Every column is allocated once, at construction ([`RolloutBuffer::plan`] says how much
/// before). One PPO iteration, which allocates nothing:
///
/// 1. [`push_step`](Self::push_step) once per vector-environment step, `steps` times.
/// 2. Optionally recompute log-probabilities or values in minibatches (contiguous row
///    ranges of [`obs`](Self::obs)) and write them back through
///    [`log_probs_mut`](Self::log_probs_mut) / [`values_mut`](Self::values_mut).
/// 3. [`compute_gae`](Self::compute_gae) with the values of the observations after the
///    last step.
/// 4. Per epoch: [`shuffle`](Self::shuffle), then [`gather`](Self::gather) each slice of
///    [`minibatches`](Self::minibatches) into a reused [`RolloutBatch`].
/// 5. [`clear`](Self::clear).
///
/// Columns are time-major: row `t * envs + e` is step `t` of environment `e`.
pub struct RolloutBuffer {
    config: RolloutConfig,
    sizes: Sizes,
    /// Steps pushed, `0..=steps`.
    len: usize,
    /// Advantages and returns match the stored data.
    gae_ready: bool,
    obs: Vec<f32>,
    actions: ActionColumn,
    rewards: Vec<f32>,
    terminated: Vec<Flag>,
    truncated: Vec<Flag>,
    values: Vec<f32>,
    log_probs: Vec<f32>,
    final_values: Vec<f32>,
    advantages: Vec<f32>,
    returns: Vec<f32>,
    /// A permutation of `0..rows`: the minibatch order of the current epoch.
    order: Vec<u32>,
    /// The `last_values` of the latest [`compute_gae`](Self::compute_gae), `N`, for
    /// [`scale_rewards`](Self::scale_rewards).
    last_values: Vec<f32>,
}

impl fmt::Debug for RolloutBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RolloutBuffer")
            .field("config", &self.config)
            .field("len", &self.len)
            .field("gae_ready", &self.gae_ready)
            .finish_non_exhaustive()
    }
}

impl RolloutBuffer {
    /// What a buffer of `config` allocates: one line per column (`obs`, `action`,
    /// `reward`, `terminated`, `truncated`, `value`, `log_prob`, `final_value`,
    /// `advantage`, `return`, `minibatch_order`, and `last_value`: the `N` values given
    /// to [`compute_gae`](Self::compute_gae)), exact bytes, all in RAM.
    ///
    /// # Errors
    /// Invalid configuration, as [`RolloutConfig::validate`].
    pub fn plan(config: &RolloutConfig) -> Result<MemoryPlan> {
        Ok(Sizes::new(config, config.steps.checked_mul(config.envs))?.buffer_plan())
    }

    /// Allocates every column (zeroed, pages touched).
    ///
    /// # Errors
    /// Invalid configuration, as [`RolloutConfig::validate`].
    pub fn new(config: RolloutConfig) -> Result<Self> {
        Self::with_budget(config, &MemoryBudget::unlimited())
    }

    /// As [`RolloutBuffer::new`], but refuses, before allocating anything, a
    /// configuration whose plan does not fit `budget`.
    ///
    /// # Errors
    /// As [`RolloutBuffer::new`], plus over-budget naming the largest columns.
    pub fn with_budget(config: RolloutConfig, budget: &MemoryBudget) -> Result<Self> {
        let sizes = Sizes::new(&config, config.steps.checked_mul(config.envs))?;
        sizes.buffer_plan().check(budget)?;
        let rows = sizes.rows;
        Ok(Self {
            config,
            sizes,
            len: 0,
            gae_ready: false,
            obs: column(sizes.obs),
            actions: ActionColumn::new(config.action, sizes.actions),
            rewards: column(rows),
            terminated: column(rows),
            truncated: column(rows),
            values: column(rows),
            log_probs: column(rows),
            final_values: column(rows),
            advantages: column(rows),
            returns: column(rows),
            // `rows <= u32::MAX` was checked by `Sizes::new`.
            order: (0..).take(rows).collect(),
            last_values: column(config.envs),
        })
    }

    /// What this buffer holds, as [`RolloutBuffer::plan`].
    pub fn memory_plan(&self) -> MemoryPlan {
        self.sizes.buffer_plan()
    }

    /// The configuration.
    pub fn config(&self) -> &RolloutConfig {
        &self.config
    }

    /// Steps pushed since construction or the last [`clear`](Self::clear), `0..=steps`.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no step has been pushed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether all `steps` steps have been pushed.
    pub fn is_full(&self) -> bool {
        self.len == self.config.steps
    }

    /// Transitions pushed: `len() * envs`.
    pub fn rows(&self) -> usize {
        self.len * self.config.envs
    }

    /// Empties the buffer for the next rollout; keeps every allocation. Advantages and
    /// returns are gone until the next [`compute_gae`](Self::compute_gae).
    pub fn clear(&mut self) {
        self.len = 0;
        self.gae_ready = false;
    }

    /// Appends one step of all `N` environments, at row `len() * N ..`.
    ///
    /// Everything is checked before anything is written: a rejected step changes
    /// nothing.
    ///
    /// # Errors
    /// - Invalid configuration (buffer full) when `steps` steps are stored already: call
    ///   [`compute_gae`](Self::compute_gae), train, then [`clear`](Self::clear).
    /// - [`Error::DTypeMismatch`] when the action kind differs from the configured one.
    /// - Shape mismatch naming the field (`obs`, `actions`, `rewards`, ...) whose length
    ///   is not `N` (or `N * obs_len`, `N * dim`).
    /// - [`Error::NonFinite`] naming the column and environment, when non-finite values
    ///   are rejected (final values are checked only where they are read).
    pub fn push_step(&mut self, step: StepData<'_>) -> Result<()> {
        if self.is_full() {
            return Err(errors::full(&self.config));
        }
        self.check_step(&step)?;

        let n = self.config.envs;
        let base = self.len * n;
        let obs_len = self.config.obs_len;
        self.obs[base * obs_len..(base + n) * obs_len].copy_from_slice(step.obs);
        let width = self.config.action.width();
        let actions = base * width..(base + n) * width;
        match (&mut self.actions, step.actions) {
            (ActionColumn::Discrete(column), Actions::Discrete(given)) => {
                column[actions].copy_from_slice(given);
            }
            (ActionColumn::Continuous(column), Actions::Continuous(given)) => {
                column[actions].copy_from_slice(given);
            }
            // Excluded by `check_step`; kept total rather than panicking.
            _ => return Err(errors::action_kind(&self.config, step.actions)),
        }
        let rows = base..base + n;
        self.rewards[rows.clone()].copy_from_slice(step.rewards);
        self.values[rows.clone()].copy_from_slice(step.values);
        self.log_probs[rows.clone()].copy_from_slice(step.log_probs);
        let flags = self.terminated[rows.clone()]
            .iter_mut()
            .zip(&mut self.truncated[rows.clone()])
            .zip(&mut self.final_values[rows]);
        for (e, ((terminated, truncated), final_value)) in flags.enumerate() {
            *terminated = Flag::new(step.terminated[e]);
            *truncated = Flag::new(step.truncated[e]);
            *final_value = if bootstraps(step.terminated[e], step.truncated[e]) {
                step.final_values[e]
            } else {
                0.0
            };
        }
        self.len += 1;
        self.gae_ready = false;
        Ok(())
    }

    fn check_step(&self, step: &StepData<'_>) -> Result<()> {
        let n = self.config.envs;
        check_len("obs", n * self.config.obs_len, step.obs.len())?;
        if step.actions.dtype() != self.config.action.dtype() {
            return Err(errors::action_kind(&self.config, step.actions));
        }
        check_len(
            "actions",
            n * self.config.action.width(),
            step.actions.len(),
        )?;
        check_len("rewards", n, step.rewards.len())?;
        check_len("terminated", n, step.terminated.len())?;
        check_len("truncated", n, step.truncated.len())?;
        check_len("values", n, step.values.len())?;
        check_len("log_probs", n, step.log_probs.len())?;
        check_len("final_values", n, step.final_values.len())?;
        if !self.config.reject_non_finite {
            return Ok(());
        }
        finite("obs", step.obs, self.config.obs_len)?;
        if let Actions::Continuous(actions) = step.actions {
            finite("action", actions, self.config.action.width())?;
        }
        finite("reward", step.rewards, 1)?;
        finite("value", step.values, 1)?;
        finite("log_prob", step.log_probs, 1)?;
        for (e, &value) in step.final_values.iter().enumerate() {
            if bootstraps(step.terminated[e], step.truncated[e]) && !value.is_finite() {
                return Err(non_finite("final_value", e, value));
            }
        }
        Ok(())
    }

    /// Computes advantages and returns by generalised advantage estimation, in place,
    /// in one reverse scan over the full buffer (no allocation).
    ///
    /// `last_values[e]` is `V` of environment `e`'s observation after the final step.
    /// For each step `t` (from the last) and environment:
    ///
    /// - terminated: next value 0 (no bootstrap), the GAE chain is cut;
    /// - else truncated: next value is the stored final value (bootstrap at a time-limit
    ///   cut), the chain is cut (the next row belongs to a new episode);
    /// - else last step: next value `last_values[e]`, the chain ends with the rollout;
    /// - else: next value `value[t + 1]`, the chain continues.
    ///
    /// `delta = r + gamma * next_value - V(t)`,
    /// `advantage = delta + gamma * lambda * (continues ? advantage[t + 1] : 0)`,
    /// `return = advantage + V(t)`.
    ///
    /// Accumulates in `f32`, like the networks that consume the result: with
    /// `gamma * lambda <= 1` each step adds at most a few `f32` roundings, relative to
    /// the magnitude of the discounted sum, so the error grows at most linearly in the
    /// episode segment length. May be called again (after [`values_mut`](Self::values_mut)).
    /// Remembers `last_values` (copied into a column allocated at construction) for
    /// [`scale_rewards`](Self::scale_rewards).
    ///
    /// # Errors
    /// - [`Error::NotEnoughRows`] unless the buffer is full.
    /// - Shape mismatch when `last_values` does not hold `N` values.
    /// - [`Error::NonFinite`] (column `last_value`) when non-finite values are rejected.
    pub fn compute_gae(&mut self, last_values: &[f32]) -> Result<()> {
        if !self.is_full() {
            return Err(errors::not_full(self));
        }
        let n = self.config.envs;
        check_len("last_values", n, last_values.len())?;
        if self.config.reject_non_finite {
            finite("last_value", last_values, 1)?;
        }
        self.last_values.copy_from_slice(last_values);
        self.gae();
        Ok(())
    }

    /// Multiplies every stored reward by `scale`, clips the products to `[-clip, clip]`
    /// when `clip` is given, and recomputes advantages and returns in place, as
    /// [`compute_gae`](Self::compute_gae) with the `last_values` it was last given.
    /// Allocates nothing.
    ///
    /// For running reward normalisation (Stable-Baselines3's
    /// `VecNormalize(norm_reward=True)`): the values, final values and last values are
    /// left as they are, because they come from a critic trained on returns of scaled
    /// rewards and are therefore already on the scaled scale. Scaling again scales the
    /// already scaled rewards.
    ///
    /// # Errors
    /// - [`Error::AdvantagesNotComputed`] unless [`compute_gae`](Self::compute_gae) has
    ///   run on the current data (nothing changes then).
    /// - Invalid configuration for a `scale` that is not finite and positive, or a
    ///   `clip` that is not positive (NaN included); nothing changes then.
    pub fn scale_rewards(&mut self, scale: f32, clip: Option<f32>) -> Result<()> {
        if !self.gae_ready {
            return Err(errors::gae_missing());
        }
        if !(scale.is_finite() && scale > 0.0) {
            return Err(Error::config(
                "reward scale",
                format!("is {scale}: it must be finite and above 0"),
            ));
        }
        let clip = match clip {
            Some(clip) if clip > 0.0 => clip,
            Some(clip) => {
                return Err(Error::config(
                    "reward clip",
                    format!("is {clip}: it must be above 0"),
                ));
            }
            None => f32::INFINITY,
        };
        for reward in &mut self.rewards {
            *reward = (*reward * scale).clamp(-clip, clip);
        }
        self.gae();
        Ok(())
    }

    /// The reverse GAE scan of [`compute_gae`](Self::compute_gae) over the full buffer,
    /// with the remembered last values.
    fn gae(&mut self) {
        let n = self.config.envs;
        let gamma = self.config.gamma;
        let gamma_lambda = gamma * self.config.gae_lambda;
        let steps = self.config.steps;
        for t in (0..steps).rev() {
            let base = t * n;
            for (e, &last_value) in self.last_values.iter().enumerate() {
                let i = base + e;
                let (next_value, next_advantage) = if self.terminated[i].get() {
                    (0.0, 0.0)
                } else if self.truncated[i].get() {
                    (self.final_values[i], 0.0)
                } else if t + 1 == steps {
                    (last_value, 0.0)
                } else {
                    (self.values[i + n], self.advantages[i + n])
                };
                let value = self.values[i];
                let delta = self.rewards[i] + gamma * next_value - value;
                let advantage = delta + gamma_lambda * next_advantage;
                self.advantages[i] = advantage;
                self.returns[i] = advantage + value;
            }
        }
        self.gae_ready = true;
    }

    /// Reshuffles the minibatch order: resets it to `0..rows` and applies Fisher-Yates in
    /// place, so the order depends only on `rng`'s state. Allocates nothing.
    pub fn shuffle<R: Rng + ?Sized>(&mut self, rng: &mut R) {
        for (slot, index) in self.order.iter_mut().zip(0u32..) {
            *slot = index;
        }
        for i in (1..self.order.len()).rev() {
            let j = rng.random_range(0..=i);
            self.order.swap(i, j);
        }
    }

    /// The current minibatch order: a permutation of `0..steps * envs` (row indices,
    /// time-major), the identity until the first [`shuffle`](Self::shuffle).
    pub fn order(&self) -> &[u32] {
        &self.order
    }

    /// The current order cut into minibatches of `size` row indices, for
    /// [`gather`](Self::gather). Every row appears exactly once per epoch; when `size`
    /// does not divide `steps * envs` the last minibatch is smaller (kept, not dropped;
    /// skip it if your update needs equal sizes). Allocates nothing.
    ///
    /// # Errors
    /// Invalid configuration when `size` is 0.
    pub fn minibatches(&self, size: usize) -> Result<Chunks<'_, u32>> {
        if size == 0 {
            return Err(Error::config(
                "minibatch size",
                "is 0: it must be at least 1",
            ));
        }
        Ok(self.order.chunks(size))
    }

    /// Copies the rows at `indices` (row `t * envs + e`) into `out`, in that order,
    /// replacing what it held. Allocates nothing.
    ///
    /// # Errors
    /// - [`Error::NotEnoughRows`] when the buffer is not full, or when `indices` holds
    ///   more rows than `out` was made for.
    /// - Invalid configuration when advantages are not computed (call
    ///   [`compute_gae`](Self::compute_gae)), when an index is out of range, or when
    ///   `out` was made for another observation length or action shape.
    ///
    /// On error `out` is unchanged.
    pub fn gather(&self, indices: &[u32], out: &mut RolloutBatch) -> Result<()> {
        if out.obs_len != self.config.obs_len || out.action != self.config.action {
            return Err(errors::batch_config());
        }
        if indices.len() > out.max_rows {
            return Err(Error::NotEnoughRows {
                requested: indices.len(),
                available: out.max_rows,
            });
        }
        if !self.is_full() {
            return Err(errors::not_full(self));
        }
        if !self.gae_ready {
            return Err(errors::gae_missing());
        }
        let rows = self.sizes.rows;
        if let Some(&index) = indices.iter().find(|&&i| i as usize >= rows) {
            return Err(errors::index_out_of_range(index, rows));
        }

        let obs_len = self.config.obs_len;
        let width = self.config.action.width();
        for (k, &index) in indices.iter().enumerate() {
            let i = index as usize;
            out.obs[k * obs_len..(k + 1) * obs_len]
                .copy_from_slice(&self.obs[i * obs_len..(i + 1) * obs_len]);
            let (to, from) = (k * width..(k + 1) * width, i * width..(i + 1) * width);
            match (&mut out.actions, &self.actions) {
                (ActionColumn::Discrete(to_column), ActionColumn::Discrete(from_column)) => {
                    to_column[to].copy_from_slice(&from_column[from]);
                }
                (ActionColumn::Continuous(to_column), ActionColumn::Continuous(from_column)) => {
                    to_column[to].copy_from_slice(&from_column[from]);
                }
                // Excluded by the shape check above.
                _ => return Err(errors::batch_config()),
            }
            out.log_probs[k] = self.log_probs[i];
            out.values[k] = self.values[i];
            out.advantages[k] = self.advantages[i];
            out.returns[k] = self.returns[i];
        }
        out.rows = indices.len();
        Ok(())
    }

    /// Observations pushed, `rows() * obs_len`, row-major.
    pub fn obs(&self) -> &[f32] {
        &self.obs[..self.rows() * self.config.obs_len]
    }

    /// Actions pushed: `rows()` indices or `rows() * dim` values.
    pub fn actions(&self) -> Actions<'_> {
        self.actions
            .as_actions(self.rows() * self.config.action.width())
    }

    /// Rewards pushed, `rows()`.
    pub fn rewards(&self) -> &[f32] {
        &self.rewards[..self.rows()]
    }

    /// Termination flags pushed, `rows()`.
    pub fn terminated(&self) -> &[Flag] {
        &self.terminated[..self.rows()]
    }

    /// Truncation flags pushed, `rows()`.
    pub fn truncated(&self) -> &[Flag] {
        &self.truncated[..self.rows()]
    }

    /// Value estimates, `rows()`.
    pub fn values(&self) -> &[f32] {
        &self.values[..self.rows()]
    }

    /// Value estimates, `rows()`, writable (e.g. recomputed in minibatches). Borrowing
    /// them discards computed advantages: call [`compute_gae`](Self::compute_gae) again.
    pub fn values_mut(&mut self) -> &mut [f32] {
        self.gae_ready = false;
        let rows = self.rows();
        &mut self.values[..rows]
    }

    /// Log-probabilities of the actions, `rows()`.
    pub fn log_probs(&self) -> &[f32] {
        &self.log_probs[..self.rows()]
    }

    /// Log-probabilities of the actions, `rows()`, writable: PPO computes the old
    /// log-probabilities in minibatches (contiguous row ranges) and writes them back.
    /// Advantages do not depend on them and stay valid.
    pub fn log_probs_mut(&mut self) -> &mut [f32] {
        let rows = self.rows();
        &mut self.log_probs[..rows]
    }

    /// Values of the final observations of truncated episodes, `rows()`; 0 where the row
    /// is not truncated or is terminated.
    pub fn final_values(&self) -> &[f32] {
        &self.final_values[..self.rows()]
    }

    /// Advantages, `steps * envs`, once [`compute_gae`](Self::compute_gae) has run on the
    /// current data; `None` before.
    pub fn advantages(&self) -> Option<&[f32]> {
        self.gae_ready.then_some(&self.advantages[..])
    }

    /// The `last_values` given to the latest [`compute_gae`](Self::compute_gae), `N`,
    /// while its advantages are current; `None` before.
    pub fn last_values(&self) -> Option<&[f32]> {
        self.gae_ready.then_some(&self.last_values[..])
    }

    /// Returns (advantage + value, the value-function targets), `steps * envs`, once
    /// [`compute_gae`](Self::compute_gae) has run on the current data; `None` before.
    pub fn returns(&self) -> Option<&[f32]> {
        self.gae_ready.then_some(&self.returns[..])
    }
}

/// Whether a transition bootstraps from its stored final value: a time-limit cut that is
/// not also a termination (termination wins when both are set).
fn bootstraps(terminated: bool, truncated: bool) -> bool {
    truncated && !terminated
}

/// The first non-finite value of `values` as [`Error::NonFinite`], its row being the
/// environment (`per_row` values per environment).
fn finite(column: &str, values: &[f32], per_row: usize) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(position) => Err(non_finite(column, position / per_row, values[position])),
    }
}

fn non_finite(column: &str, row: usize, value: f32) -> Error {
    Error::NonFinite {
        column: column.to_owned(),
        row,
        value,
    }
}

/// Errors without a dedicated variant in [`Error`] yet, in one place.
mod errors {
    use super::{Actions, Error, RolloutBuffer, RolloutConfig};

    pub(super) fn full(config: &RolloutConfig) -> Error {
        Error::RolloutFull {
            steps: config.steps,
            envs: config.envs,
        }
    }

    pub(super) fn not_full(buffer: &RolloutBuffer) -> Error {
        Error::RolloutNotFull {
            pushed: buffer.len(),
            steps: buffer.config.steps,
        }
    }

    pub(super) fn action_kind(config: &RolloutConfig, given: Actions<'_>) -> Error {
        Error::DTypeMismatch {
            column: "action".to_owned(),
            expected: config.action.dtype(),
            actual: given.dtype(),
        }
    }

    pub(super) fn gae_missing() -> Error {
        Error::AdvantagesNotComputed
    }

    pub(super) fn index_out_of_range(index: u32, rows: usize) -> Error {
        Error::config(
            "minibatch index",
            format!(
                "{index} is out of range for a rollout of {rows} rows: use indices from minibatches()"
            ),
        )
    }

    pub(super) fn batch_config() -> Error {
        Error::config(
            "rollout batch",
            "was made for another observation length or action shape: create it with RolloutBatch::new(buffer.config(), max_rows)",
        )
    }
}

/// A caller-owned minibatch of rollout rows, allocated once and refilled by
/// [`RolloutBuffer::gather`] without allocating.
#[derive(Clone, Debug)]
pub struct RolloutBatch {
    obs_len: usize,
    action: ActionShape,
    sizes: Sizes,
    max_rows: usize,
    rows: usize,
    obs: Vec<f32>,
    actions: ActionColumn,
    log_probs: Vec<f32>,
    values: Vec<f32>,
    advantages: Vec<f32>,
    returns: Vec<f32>,
}

impl RolloutBatch {
    /// What a batch of up to `max_rows` rows for buffers of `config` allocates: one line
    /// per column (`obs`, `action`, `log_prob`, `value`, `advantage`, `return`).
    ///
    /// # Errors
    /// Invalid configuration, as [`RolloutConfig::validate`], or a `max_rows` of 0.
    pub fn plan(config: &RolloutConfig, max_rows: usize) -> Result<MemoryPlan> {
        Ok(Self::sizes(config, max_rows)?.batch_plan())
    }

    fn sizes(config: &RolloutConfig, max_rows: usize) -> Result<Sizes> {
        if max_rows == 0 {
            return Err(Error::config("max_rows", "is 0: it must be at least 1"));
        }
        // The whole configuration, so that a batch is never made for an impossible buffer.
        config.validate()?;
        Sizes::new(config, Some(max_rows))
    }

    /// An empty batch that holds up to `max_rows` rows (normally the minibatch size).
    ///
    /// # Errors
    /// As [`RolloutBatch::plan`].
    pub fn new(config: &RolloutConfig, max_rows: usize) -> Result<Self> {
        let sizes = Self::sizes(config, max_rows)?;
        Ok(Self {
            obs_len: config.obs_len,
            action: config.action,
            sizes,
            max_rows,
            rows: 0,
            obs: column(sizes.obs),
            actions: ActionColumn::new(config.action, sizes.actions),
            log_probs: column(max_rows),
            values: column(max_rows),
            advantages: column(max_rows),
            returns: column(max_rows),
        })
    }

    /// What this batch holds, as [`RolloutBatch::plan`].
    pub fn memory_plan(&self) -> MemoryPlan {
        self.sizes.batch_plan()
    }

    /// Rows gathered by the last [`RolloutBuffer::gather`].
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether the batch holds no rows.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The most rows the batch can hold.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Observations, `len() * obs_len`, row-major.
    pub fn obs(&self) -> &[f32] {
        &self.obs[..self.rows * self.obs_len]
    }

    /// Actions: `len()` indices or `len() * dim` values.
    pub fn actions(&self) -> Actions<'_> {
        self.actions.as_actions(self.rows * self.action.width())
    }

    /// Log-probabilities stored in the buffer (the old policy's), `len()`.
    pub fn log_probs(&self) -> &[f32] {
        &self.log_probs[..self.rows]
    }

    /// Value estimates stored in the buffer (the old value function's), `len()`.
    pub fn values(&self) -> &[f32] {
        &self.values[..self.rows]
    }

    /// Advantages, `len()`.
    pub fn advantages(&self) -> &[f32] {
        &self.advantages[..self.rows]
    }

    /// Advantages, `len()`, writable: normalise them per minibatch in place.
    pub fn advantages_mut(&mut self) -> &mut [f32] {
        &mut self.advantages[..self.rows]
    }

    /// Returns (value targets), `len()`.
    pub fn returns(&self) -> &[f32] {
        &self.returns[..self.rows]
    }
}

#[cfg(test)]
mod tests;
