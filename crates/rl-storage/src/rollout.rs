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
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;
    use rl_testkit::measure;

    /// Owned data of one step, for tests.
    #[derive(Clone, Debug)]
    struct OwnedStep {
        obs: Vec<f32>,
        discrete: Vec<u32>,
        continuous: Vec<f32>,
        rewards: Vec<f32>,
        terminated: Vec<bool>,
        truncated: Vec<bool>,
        values: Vec<f32>,
        log_probs: Vec<f32>,
        final_values: Vec<f32>,
    }

    impl OwnedStep {
        /// Distinct values per (t, e) so gathers can be checked row by row.
        fn distinct(config: &RolloutConfig, t: usize) -> Self {
            let n = config.envs;
            let row = |e: usize| (t * n + e) as f32;
            Self {
                obs: (0..n * config.obs_len)
                    .map(|k| row(k / config.obs_len) * 10.0 + (k % config.obs_len) as f32)
                    .collect(),
                discrete: (0..n).map(|e| (t * n + e) as u32).collect(),
                continuous: (0..n * config.action.width())
                    .map(|k| -row(k / config.action.width()))
                    .collect(),
                rewards: (0..n).map(|e| row(e) * 0.5).collect(),
                terminated: vec![false; n],
                truncated: vec![false; n],
                values: (0..n).map(|e| row(e) * 0.25).collect(),
                log_probs: (0..n).map(|e| -row(e)).collect(),
                final_values: vec![0.0; n],
            }
        }

        fn data(&self, shape: ActionShape) -> StepData<'_> {
            StepData {
                obs: &self.obs,
                actions: match shape {
                    ActionShape::Discrete => Actions::Discrete(&self.discrete),
                    ActionShape::Continuous(_) => Actions::Continuous(&self.continuous),
                },
                rewards: &self.rewards,
                terminated: &self.terminated,
                truncated: &self.truncated,
                values: &self.values,
                log_probs: &self.log_probs,
                final_values: &self.final_values,
            }
        }
    }

    fn config(steps: usize, envs: usize) -> RolloutConfig {
        RolloutConfig::new(steps, envs, 3, ActionShape::Discrete)
    }

    fn filled(config: RolloutConfig) -> RolloutBuffer {
        let mut buffer = RolloutBuffer::new(config).unwrap();
        for t in 0..config.steps {
            let step = OwnedStep::distinct(&config, t);
            buffer.push_step(step.data(config.action)).unwrap();
        }
        buffer
    }

    fn is_config_error(err: &Error, what: &str) -> bool {
        matches!(err, Error::Core(rl_core::Error::InvalidConfig { what: w, .. }) if w == what)
    }

    // ---- configuration and memory ----------------------------------------------------

    #[test]
    fn invalid_configurations_are_refused_with_the_setting_named() {
        let ok = config(4, 2);
        assert!(ok.validate().is_ok());
        let cases: [(RolloutConfig, &str); 11] = [
            (RolloutConfig { steps: 0, ..ok }, "steps"),
            (RolloutConfig { envs: 0, ..ok }, "envs"),
            (RolloutConfig { obs_len: 0, ..ok }, "obs_len"),
            (
                RolloutConfig {
                    action: ActionShape::Continuous(0),
                    ..ok
                },
                "continuous action dimension",
            ),
            (RolloutConfig { gamma: -0.01, ..ok }, "gamma"),
            (RolloutConfig { gamma: 1.01, ..ok }, "gamma"),
            (
                RolloutConfig {
                    gamma: f32::NAN,
                    ..ok
                },
                "gamma",
            ),
            (
                RolloutConfig {
                    gae_lambda: 1.5,
                    ..ok
                },
                "gae_lambda",
            ),
            (
                RolloutConfig {
                    steps: usize::MAX,
                    ..ok
                },
                "rollout rows",
            ),
            (
                RolloutConfig {
                    steps: 1 << 16,
                    envs: 1 << 16,
                    ..ok
                },
                "rollout rows",
            ),
            (
                RolloutConfig {
                    steps: 1 << 20,
                    obs_len: usize::MAX / 2,
                    ..ok
                },
                "observation column",
            ),
        ];
        for (config, what) in cases {
            let err = RolloutBuffer::new(config).unwrap_err();
            assert!(is_config_error(&err, what), "{config:?}: {err}");
            assert!(RolloutBuffer::plan(&config).is_err());
            assert!(RolloutBatch::new(&config, 8).is_err());
        }
        // The bounds themselves are valid.
        for (gamma, gae_lambda) in [(0.0, 0.0), (1.0, 1.0)] {
            let edge = RolloutConfig {
                gamma,
                gae_lambda,
                ..ok
            };
            assert!(RolloutBuffer::new(edge).is_ok());
        }
        assert!(is_config_error(
            &RolloutBatch::new(&ok, 0).unwrap_err(),
            "max_rows"
        ));
    }

    #[test]
    fn planned_bytes_equal_the_allocated_capacities() {
        for action in [ActionShape::Discrete, ActionShape::Continuous(3)] {
            let config = RolloutConfig::new(7, 5, 11, action);
            let buffer = RolloutBuffer::new(config).unwrap();
            let f = size_of::<f32>();
            let allocated = buffer.obs.capacity() * f
                + buffer.actions.capacity_bytes()
                + buffer.rewards.capacity() * f
                + buffer.terminated.capacity() * size_of::<Flag>()
                + buffer.truncated.capacity() * size_of::<Flag>()
                + buffer.values.capacity() * f
                + buffer.log_probs.capacity() * f
                + buffer.final_values.capacity() * f
                + buffer.advantages.capacity() * f
                + buffer.returns.capacity() * f
                + buffer.order.capacity() * size_of::<u32>()
                + buffer.last_values.capacity() * f;
            let plan = RolloutBuffer::plan(&config).unwrap();
            assert_eq!(plan.total(Location::Ram), allocated as u64);
            assert_eq!(plan, buffer.memory_plan());
            assert_eq!(plan.lines().len(), 12, "one line per column");
            // 35 rows: obs 35*11*4, actions 35*w*4, 6 f32 scalar columns + the order
            // (35*4 each), two flag columns (35 each).
            // Plus the 5 last values.
            let expected = 35 * 11 * 4 + 35 * action.width() * 4 + 7 * 35 * 4 + 2 * 35 + 5 * 4;
            assert_eq!(allocated, expected);

            let batch = RolloutBatch::new(&config, 6).unwrap();
            let batch_allocated = batch.obs.capacity() * f
                + batch.actions.capacity_bytes()
                + (batch.log_probs.capacity()
                    + batch.values.capacity()
                    + batch.advantages.capacity()
                    + batch.returns.capacity())
                    * f;
            let batch_plan = RolloutBatch::plan(&config, 6).unwrap();
            assert_eq!(batch_plan.total(Location::Ram), batch_allocated as u64);
            assert_eq!(batch_plan, batch.memory_plan());
            assert_eq!(
                batch_allocated,
                6 * 11 * 4 + 6 * action.width() * 4 + 4 * 6 * 4
            );
        }
    }

    #[test]
    fn over_budget_is_refused_before_allocating() {
        // 1000 x 64 x 1024 f32 observations: 250 MiB, far over a 1 MiB budget.
        let big = RolloutConfig::new(1000, 64, 1024, ActionShape::Discrete);
        let (result, stats) =
            measure(|| RolloutBuffer::with_budget(big, &MemoryBudget::ram(1 << 20)));
        let err = result.unwrap_err();
        assert!(
            matches!(err, Error::Core(rl_core::Error::OverBudget { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("obs (ram, 250.00 MiB)"), "{err}");
        // Only the plan and the message were allocated, never the columns.
        assert!(stats.peak_live_bytes < 1 << 16, "{stats:?}");
        let small = config(4, 2);
        let planned = RolloutBuffer::plan(&small).unwrap().total(Location::Ram);
        assert!(RolloutBuffer::with_budget(small, &MemoryBudget::ram(planned)).is_ok());
        assert!(RolloutBuffer::with_budget(small, &MemoryBudget::ram(planned - 1)).is_err());
    }

    // ---- pushing ---------------------------------------------------------------------

    #[test]
    fn push_stores_time_major_rows_and_flags_apart() {
        let config = RolloutConfig::new(2, 3, 2, ActionShape::Continuous(2));
        let mut buffer = RolloutBuffer::new(config).unwrap();
        assert!(buffer.is_empty());
        let mut step = OwnedStep::distinct(&config, 0);
        step.terminated = vec![true, false, true];
        step.truncated = vec![false, true, true];
        step.final_values = vec![5.0, 6.0, 7.0];
        buffer.push_step(step.data(config.action)).unwrap();
        assert_eq!(
            (buffer.len(), buffer.rows(), buffer.is_full()),
            (1, 3, false)
        );
        buffer
            .push_step(OwnedStep::distinct(&config, 1).data(config.action))
            .unwrap();
        assert!(buffer.is_full());
        assert_eq!(
            buffer.obs()[2 * 2..2 * 2 + 2],
            [20.0, 21.0],
            "row 2 = t0 e2"
        );
        assert_eq!(
            buffer.obs()[4 * 2..4 * 2 + 2],
            [40.0, 41.0],
            "row 4 = t1 e1"
        );
        assert_eq!(
            buffer.actions(),
            Actions::Continuous(&[
                -0.0, -0.0, -1.0, -1.0, -2.0, -2.0, -3.0, -3.0, -4.0, -4.0, -5.0, -5.0
            ])
        );
        let flags = |f: &[Flag]| f.iter().map(|f| f.get()).collect::<Vec<_>>();
        assert_eq!(
            flags(buffer.terminated()),
            [true, false, true, false, false, false]
        );
        assert_eq!(
            flags(buffer.truncated()),
            [false, true, true, false, false, false]
        );
        // Final values are kept only where the row bootstraps: truncated, not terminated.
        assert_eq!(buffer.final_values(), [0.0, 6.0, 0.0, 0.0, 0.0, 0.0]);
        assert_eq!(buffer.rewards(), [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
        assert_eq!(buffer.log_probs()[5], -5.0);
        assert!(buffer.advantages().is_none());
    }

    /// A copy of every column and the counters, to check that nothing changed.
    fn snapshot(buffer: &RolloutBuffer) -> String {
        format!(
            "{} {} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
            buffer.len,
            buffer.gae_ready,
            buffer.obs,
            buffer.actions,
            buffer.rewards,
            buffer.terminated,
            buffer.truncated,
            buffer.values,
            buffer.log_probs,
            buffer.final_values,
            buffer.advantages,
            buffer.returns,
            buffer.order
        )
    }

    #[test]
    fn a_rejected_push_changes_nothing() {
        let config = RolloutConfig::new(2, 3, 2, ActionShape::Discrete);
        let mut buffer = RolloutBuffer::new(config).unwrap();
        buffer
            .push_step(OwnedStep::distinct(&config, 0).data(config.action))
            .unwrap();
        let before = snapshot(&buffer);
        let good = OwnedStep::distinct(&config, 1);

        let shape = |what: &str, err: &Error| matches!(err, Error::Core(rl_core::Error::ShapeMismatch { what: w, .. }) if *w == what);
        let non_finite = |column: &str, row: usize, err: &Error| matches!(err, Error::NonFinite { column: c, row: r, .. } if c == column && *r == row);
        type Case = (
            &'static str,
            Box<dyn Fn(&mut OwnedStep)>,
            Box<dyn Fn(&Error) -> bool>,
        );
        let cases: Vec<Case> = vec![
            (
                "short obs",
                Box::new(|s| {
                    s.obs.pop();
                }),
                Box::new(move |e| shape("obs", e)),
            ),
            (
                "long actions",
                Box::new(|s| s.discrete.push(0)),
                Box::new(move |e| shape("actions", e)),
            ),
            (
                "short rewards",
                Box::new(|s| {
                    s.rewards.pop();
                }),
                Box::new(move |e| shape("rewards", e)),
            ),
            (
                "short terminated",
                Box::new(|s| {
                    s.terminated.pop();
                }),
                Box::new(move |e| shape("terminated", e)),
            ),
            (
                "short truncated",
                Box::new(|s| {
                    s.truncated.pop();
                }),
                Box::new(move |e| shape("truncated", e)),
            ),
            (
                "short values",
                Box::new(|s| {
                    s.values.pop();
                }),
                Box::new(move |e| shape("values", e)),
            ),
            (
                "short log_probs",
                Box::new(|s| {
                    s.log_probs.pop();
                }),
                Box::new(move |e| shape("log_probs", e)),
            ),
            (
                "short final_values",
                Box::new(|s| {
                    s.final_values.pop();
                }),
                Box::new(move |e| shape("final_values", e)),
            ),
            (
                "nan in last obs",
                Box::new(|s| *s.obs.last_mut().unwrap() = f32::NAN),
                Box::new(move |e| non_finite("obs", 2, e)),
            ),
            (
                "inf reward",
                Box::new(|s| s.rewards[1] = f32::INFINITY),
                Box::new(move |e| non_finite("reward", 1, e)),
            ),
            (
                "nan value",
                Box::new(|s| s.values[2] = f32::NAN),
                Box::new(move |e| non_finite("value", 2, e)),
            ),
            (
                "nan log_prob",
                Box::new(|s| s.log_probs[0] = f32::NEG_INFINITY),
                Box::new(move |e| non_finite("log_prob", 0, e)),
            ),
            (
                "nan final value where truncated",
                Box::new(|s| {
                    s.truncated[1] = true;
                    s.final_values[1] = f32::NAN;
                }),
                Box::new(move |e| non_finite("final_value", 1, e)),
            ),
        ];
        for (name, spoil, expected) in &cases {
            let mut step = good.clone();
            spoil(&mut step);
            let err = buffer.push_step(step.data(config.action)).unwrap_err();
            assert!(expected(&err), "{name}: {err}");
            assert_eq!(snapshot(&buffer), before, "{name} changed the buffer");
        }
        // The wrong action kind.
        let err = buffer
            .push_step(good.data(ActionShape::Continuous(1)))
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::DTypeMismatch {
                    expected: DType::U32,
                    actual: DType::F32,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(snapshot(&buffer), before);

        // A NaN final value where it is not read (not truncated, or also terminated) is fine.
        let mut ignored = good.clone();
        ignored.final_values = vec![f32::NAN; 3];
        ignored.terminated[0] = true;
        ignored.truncated[0] = true;
        buffer.push_step(ignored.data(config.action)).unwrap();
        assert_eq!(buffer.final_values()[3..], [0.0, 0.0, 0.0]);

        // Full: refused with a message saying what to do, nothing changed.
        let full = snapshot(&buffer);
        let err = buffer.push_step(good.data(config.action)).unwrap_err();
        assert!(
            matches!(err, Error::RolloutFull { steps: 2, envs: 3 }),
            "{err}"
        );
        assert!(err.to_string().contains("compute_gae"), "{err}");
        assert!(err.to_string().contains("clear()"), "{err}");
        assert_eq!(snapshot(&buffer), full);
    }

    #[test]
    fn non_finite_values_are_stored_when_allowed() {
        let config = RolloutConfig {
            reject_non_finite: false,
            ..RolloutConfig::new(1, 2, 1, ActionShape::Discrete)
        };
        let mut buffer = RolloutBuffer::new(config).unwrap();
        let mut step = OwnedStep::distinct(&config, 0);
        step.rewards[1] = f32::NAN;
        step.obs[0] = f32::INFINITY;
        buffer.push_step(step.data(config.action)).unwrap();
        assert!(buffer.rewards()[1].is_nan());
        buffer.compute_gae(&[f32::NAN, 0.0]).unwrap();
    }

    #[test]
    fn clear_keeps_the_allocations_and_empties_the_buffer() {
        let config = config(3, 2);
        let mut buffer = filled(config);
        buffer.compute_gae(&[0.0, 0.0]).unwrap();
        let pointer = buffer.obs.as_ptr();
        buffer.clear();
        assert!(buffer.is_empty() && !buffer.is_full());
        assert!(buffer.obs().is_empty() && buffer.advantages().is_none());
        assert_eq!(buffer.obs.as_ptr(), pointer);
        assert_eq!(buffer.obs.capacity(), 3 * 2 * 3);
        let step = OwnedStep::distinct(&config, 0);
        buffer.push_step(step.data(config.action)).unwrap();
        assert_eq!(buffer.len(), 1);
    }

    // ---- GAE ---------------------------------------------------------------------------

    /// GAE from its definition, in f64: per environment, cut the rollout into episode
    /// segments (ending at a termination, a truncation or the rollout's end); within a
    /// segment, the advantage at `t` is the `(gamma * lambda)`-discounted sum of the TD
    /// residuals from `t` to the segment's end. The residual at a segment's end uses 0
    /// after a termination, the final value after a truncation, and the last value at
    /// the rollout's end. Returns the advantages and, per row, the scale of the sum (the
    /// same discounted sum of the residuals' terms in absolute value).
    struct Reference {
        advantages: Vec<f64>,
        scales: Vec<f64>,
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "a test reference over plain columns"
    )]
    fn reference_gae(
        steps: usize,
        envs: usize,
        gamma: f64,
        lambda: f64,
        rewards: &[f32],
        values: &[f32],
        terminated: &[bool],
        truncated: &[bool],
        final_values: &[f32],
        last_values: &[f32],
    ) -> Reference {
        let mut advantages = vec![0.0; steps * envs];
        let mut scales = vec![0.0; steps * envs];
        let at = |t: usize, e: usize| t * envs + e;
        for e in 0..envs {
            let mut start = 0;
            while start < steps {
                // The segment is start..=end.
                let mut end = start;
                while end + 1 < steps && !terminated[at(end, e)] && !truncated[at(end, e)] {
                    end += 1;
                }
                let next_value = |k: usize| -> f64 {
                    let i = at(k, e);
                    if k < end {
                        f64::from(values[at(k + 1, e)])
                    } else if terminated[i] {
                        0.0
                    } else if truncated[i] {
                        f64::from(final_values[i])
                    } else {
                        f64::from(last_values[e])
                    }
                };
                for t in start..=end {
                    let (mut sum, mut scale) = (0.0, 0.0);
                    for k in t..=end {
                        let i = at(k, e);
                        let weight = (gamma * lambda).powi((k - t) as i32);
                        let (r, v, next) =
                            (f64::from(rewards[i]), f64::from(values[i]), next_value(k));
                        sum += weight * (r + gamma * next - v);
                        scale += weight * (r.abs() + gamma * next.abs() + v.abs());
                    }
                    advantages[at(t, e)] = sum;
                    scales[at(t, e)] = scale;
                }
                start = end + 1;
            }
        }
        Reference { advantages, scales }
    }

    #[derive(Clone, Debug)]
    struct GaeCase {
        steps: usize,
        envs: usize,
        gamma: f32,
        lambda: f32,
        rewards: Vec<f32>,
        values: Vec<f32>,
        terminated: Vec<bool>,
        truncated: Vec<bool>,
        final_values: Vec<f32>,
        last_values: Vec<f32>,
    }

    fn gae_case() -> impl Strategy<Value = GaeCase> {
        (1usize..=32, 1usize..=6, 0.0f32..=1.0, 0.0f32..=1.0).prop_flat_map(
            |(steps, envs, gamma, lambda)| {
                let rows = steps * envs;
                let floats = |n| proptest::collection::vec(-10.0f32..10.0, n);
                // Flags set about one row in five each, both at once sometimes.
                let flags = |n| proptest::collection::vec(proptest::bool::weighted(0.2), n);
                (
                    floats(rows),
                    floats(rows),
                    flags(rows),
                    flags(rows),
                    floats(rows),
                    floats(envs),
                )
                    .prop_map(
                        move |(
                            rewards,
                            values,
                            terminated,
                            truncated,
                            final_values,
                            last_values,
                        )| {
                            GaeCase {
                                steps,
                                envs,
                                gamma,
                                lambda,
                                rewards,
                                values,
                                terminated,
                                truncated,
                                final_values,
                                last_values,
                            }
                        },
                    )
            },
        )
    }

    fn run_gae(case: &GaeCase) -> RolloutBuffer {
        let config = RolloutConfig {
            gamma: case.gamma,
            gae_lambda: case.lambda,
            ..RolloutConfig::new(case.steps, case.envs, 1, ActionShape::Discrete)
        };
        let mut buffer = RolloutBuffer::new(config).unwrap();
        let n = case.envs;
        let (obs, actions, log_probs) = (vec![0.0; n], vec![0u32; n], vec![0.0; n]);
        for t in 0..case.steps {
            let rows = t * n..(t + 1) * n;
            buffer
                .push_step(StepData {
                    obs: &obs,
                    actions: Actions::Discrete(&actions),
                    rewards: &case.rewards[rows.clone()],
                    terminated: &case.terminated[rows.clone()],
                    truncated: &case.truncated[rows.clone()],
                    values: &case.values[rows.clone()],
                    log_probs: &log_probs,
                    final_values: &case.final_values[rows],
                })
                .unwrap();
        }
        buffer.compute_gae(&case.last_values).unwrap();
        buffer
    }

    proptest! {
        /// Tolerance: the reverse scan accumulates in f32. Each step of the recursion
        /// `adv = (r + g*next - v) + g*l*adv_next` rounds about four times, each rounding
        /// off by at most 2^-24 (6e-8) of the magnitude involved, and `g*l <= 1` never
        /// amplifies earlier errors; so the error is at most ~4 * 32 * 6e-8 = 7.6e-6 of
        /// the `scale` (the discounted sum of |r| + g|next| + |v|) for segments of at
        /// most 32 steps. Relative to the value itself there is no bound (advantages can
        /// cancel to 0), so 1e-5 is relative to that scale.
        #[test]
        fn gae_matches_the_definition(case in gae_case()) {
            let buffer = run_gae(&case);
            let reference = reference_gae(
                case.steps,
                case.envs,
                f64::from(case.gamma),
                f64::from(case.lambda),
                &case.rewards,
                &case.values,
                &case.terminated,
                &case.truncated,
                &case.final_values,
                &case.last_values,
            );
            let advantages = buffer.advantages().unwrap();
            let returns = buffer.returns().unwrap();
            for i in 0..case.steps * case.envs {
                let want = reference.advantages[i];
                let scale = reference.scales[i].max(1.0);
                let got = f64::from(advantages[i]);
                prop_assert!(
                    (got - want).abs() <= 1e-5 * scale,
                    "row {}: advantage {} but the definition gives {} (scale {})", i, got, want, scale
                );
                let want_return = want + f64::from(case.values[i]);
                let return_scale = scale + f64::from(case.values[i].abs());
                prop_assert!(
                    (f64::from(returns[i]) - want_return).abs() <= 1e-5 * return_scale,
                    "row {}: return {} but the definition gives {}", i, returns[i], want_return
                );
            }
        }

        #[test]
        fn minibatches_cover_every_row_once_per_epoch(
            steps in 1usize..40,
            envs in 1usize..8,
            size in 1usize..70,
            seed in any::<u64>(),
        ) {
            let config = config(steps, envs);
            let mut buffer = filled(config);
            buffer.compute_gae(&vec![0.0; envs]).unwrap();
            let rows = steps * envs;
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
            let mut batch = RolloutBatch::new(&config, size).unwrap();
            for _epoch in 0..2 {
                buffer.shuffle(&mut rng);
                let mut seen = vec![0u32; rows];
                let mut sizes = Vec::new();
                for indices in buffer.minibatches(size).unwrap() {
                    buffer.gather(indices, &mut batch).unwrap();
                    prop_assert_eq!(batch.len(), indices.len());
                    for (k, &i) in indices.iter().enumerate() {
                        seen[i as usize] += 1;
                        prop_assert_eq!(batch.row_of(k), i);
                        let i = i as usize;
                        prop_assert_eq!(batch.advantages()[k], buffer.advantages().unwrap()[i]);
                        prop_assert_eq!(batch.returns()[k], buffer.returns().unwrap()[i]);
                    }
                    sizes.push(indices.len());
                }
                prop_assert!(seen.iter().all(|&c| c == 1), "{:?}", seen);
                let batches = rows.div_ceil(size);
                prop_assert_eq!(sizes.len(), batches);
                prop_assert!(sizes[..batches - 1].iter().all(|&s| s == size));
                prop_assert_eq!(sizes[batches - 1], rows - (batches - 1) * size);
            }
        }
    }

    impl RolloutBatch {
        /// The buffer row that batch row `k` came from, read from its action (row `i`
        /// of [`OwnedStep::distinct`] data has action `i`), after checking that every
        /// other column of the batch row came from the same buffer row.
        fn row_of(&self, k: usize) -> u32 {
            let Actions::Discrete(actions) = self.actions() else {
                panic!("discrete test data expected");
            };
            let i = actions[k] as f32;
            assert_eq!(self.values()[k], i * 0.25);
            assert_eq!(self.log_probs()[k], -i);
            assert_eq!(
                self.obs()[k * 3..k * 3 + 3],
                [i * 10.0, i * 10.0 + 1.0, i * 10.0 + 2.0]
            );
            actions[k]
        }
    }

    /// One environment, one episode of `rewards` that terminates at its last step.
    fn single_episode(
        rewards: &[f32],
        values: &[f32],
        gamma: f32,
        lambda: f32,
        end: End,
    ) -> RolloutBuffer {
        let steps = rewards.len();
        let config = RolloutConfig {
            gamma,
            gae_lambda: lambda,
            ..RolloutConfig::new(steps, 1, 1, ActionShape::Discrete)
        };
        let mut buffer = RolloutBuffer::new(config).unwrap();
        for t in 0..steps {
            let last = t + 1 == steps;
            buffer
                .push_step(StepData {
                    obs: &[0.0],
                    actions: Actions::Discrete(&[0]),
                    rewards: &rewards[t..=t],
                    terminated: &[last && end == End::Terminated],
                    truncated: &[last && end == End::Truncated],
                    values: &values[t..=t],
                    log_probs: &[0.0],
                    final_values: &[FINAL_VALUE],
                })
                .unwrap();
        }
        // The last value is V of the next episode's first observation: never used at a cut.
        buffer.compute_gae(&[1000.0]).unwrap();
        buffer
    }

    const FINAL_VALUE: f32 = 2.0;

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum End {
        Terminated,
        Truncated,
    }

    #[test]
    fn lambda_one_gives_monte_carlo_returns_on_a_terminated_episode() {
        let rewards = [1.0, -2.0, 0.5, 3.0, 1.5];
        let values = [0.3, -1.7, 4.0, 2.2, -0.9];
        let gamma = 0.9f32;
        let buffer = single_episode(&rewards, &values, gamma, 1.0, End::Terminated);
        let returns = buffer.returns().unwrap();
        for t in 0..rewards.len() {
            let monte_carlo: f64 = rewards[t..]
                .iter()
                .enumerate()
                .map(|(k, &r)| f64::from(gamma).powi(k as i32) * f64::from(r))
                .sum();
            assert!(
                (f64::from(returns[t]) - monte_carlo).abs() < 1e-5,
                "t {t}: return {} but the Monte-Carlo return is {monte_carlo}",
                returns[t]
            );
            // And it does not depend on the values (they telescope away).
            assert!((returns[t] - (buffer.advantages().unwrap()[t] + values[t])).abs() < 1e-6);
        }
    }

    #[test]
    fn lambda_zero_gives_one_step_td() {
        let rewards = [1.0, -2.0, 0.5, 3.0];
        let values = [0.3, -1.7, 4.0, 2.2];
        let gamma = 0.95f32;
        for end in [End::Terminated, End::Truncated] {
            let buffer = single_episode(&rewards, &values, gamma, 0.0, end);
            let advantages = buffer.advantages().unwrap();
            for t in 0..rewards.len() {
                let next = if t + 1 < rewards.len() {
                    values[t + 1]
                } else if end == End::Truncated {
                    FINAL_VALUE
                } else {
                    0.0
                };
                // The same f32 operations: bit-identical.
                assert_eq!(
                    advantages[t],
                    rewards[t] + gamma * next - values[t],
                    "t {t} {end:?}"
                );
            }
        }
    }

    #[test]
    fn truncation_and_termination_differ_by_the_discounted_final_value() {
        // Values chosen so that every operation is exact in binary floating point.
        let rewards = [1.0, 0.5, 1.0];
        let values = [0.5, 0.25, 0.5];
        let (gamma, lambda) = (0.5f32, 0.5f32);
        let terminated = single_episode(&rewards, &values, gamma, lambda, End::Terminated);
        let truncated = single_episode(&rewards, &values, gamma, lambda, End::Truncated);
        let (a, b) = (
            terminated.advantages().unwrap(),
            truncated.advantages().unwrap(),
        );
        // At the cut: exactly gamma * final value; before it, discounted by (gamma*lambda)^k.
        assert_eq!(b[2] - a[2], gamma * FINAL_VALUE);
        assert_eq!(b[1] - a[1], gamma * lambda * gamma * FINAL_VALUE);
        assert_eq!(b[0] - a[0], (gamma * lambda).powi(2) * gamma * FINAL_VALUE);
        assert_eq!(
            truncated.returns().unwrap()[2] - terminated.returns().unwrap()[2],
            gamma * FINAL_VALUE
        );
    }

    #[test]
    fn the_chain_is_cut_at_episode_boundaries_and_the_rollout_end() {
        // Two environments: env 0 truncated at t = 1, env 1 never done.
        let config = RolloutConfig {
            gamma: 1.0,
            gae_lambda: 1.0,
            ..RolloutConfig::new(3, 2, 1, ActionShape::Discrete)
        };
        let mut buffer = RolloutBuffer::new(config).unwrap();
        for t in 0..3 {
            buffer
                .push_step(StepData {
                    obs: &[0.0, 0.0],
                    actions: Actions::Discrete(&[0, 0]),
                    rewards: &[1.0, 1.0],
                    terminated: &[false, false],
                    truncated: &[t == 1, false],
                    values: &[0.0, 0.0],
                    log_probs: &[0.0, 0.0],
                    final_values: &[10.0, 99.0],
                })
                .unwrap();
        }
        buffer.compute_gae(&[100.0, 200.0]).unwrap();
        // Env 0: [1 + 1 + 10, 1 + 10, 1 + 100]; env 1: [3 + 200, 2 + 200, 1 + 200].
        assert_eq!(
            buffer.returns().unwrap(),
            [12.0, 203.0, 11.0, 202.0, 101.0, 201.0]
        );
    }

    proptest! {
        /// Scaling the stored rewards by `s` and recomputing GAE equals GAE computed
        /// from scratch on rewards scaled by `s` with the same values: the same f32
        /// operations on the same inputs, so bit for bit.
        #[test]
        fn scaled_rewards_equal_gae_from_scaled_rewards(
            case in gae_case(),
            scale in 0.01f32..100.0,
            clip in proptest::option::of(0.5f32..50.0),
        ) {
            let mut scaled = run_gae(&case);
            scaled.scale_rewards(scale, clip).unwrap();
            let bound = clip.unwrap_or(f32::INFINITY);
            let fresh = run_gae(&GaeCase {
                rewards: case.rewards.iter().map(|r| (r * scale).clamp(-bound, bound)).collect(),
                ..case.clone()
            });
            prop_assert_eq!(scaled.rewards(), fresh.rewards());
            prop_assert_eq!(scaled.advantages(), fresh.advantages());
            prop_assert_eq!(scaled.returns(), fresh.returns());
            prop_assert_eq!(scaled.values(), fresh.values());
        }
    }

    #[test]
    fn scaling_rewards_needs_gae_and_a_valid_scale() {
        let case = GaeCase {
            steps: 2,
            envs: 1,
            gamma: 0.9,
            lambda: 0.8,
            rewards: vec![1.0, 2.0],
            values: vec![0.5, 0.25],
            terminated: vec![false, false],
            truncated: vec![false, false],
            final_values: vec![0.0, 0.0],
            last_values: vec![3.0],
        };
        let mut buffer = run_gae(&case);
        let advantages = buffer.advantages().unwrap().to_vec();
        for (scale, clip) in [
            (0.0, None),
            (f32::NAN, None),
            (-1.0, None),
            (1.0, Some(0.0)),
        ] {
            assert!(matches!(
                buffer.scale_rewards(scale, clip),
                Err(Error::Core(_))
            ));
        }
        assert_eq!(buffer.rewards(), &[1.0, 2.0]);
        assert_eq!(buffer.advantages().unwrap(), &advantages[..]);
        buffer.clear();
        assert!(matches!(
            buffer.scale_rewards(2.0, None),
            Err(Error::AdvantagesNotComputed)
        ));
        // Hand-computed: rewards 0.5, 1; delta_1 = 1 + 0.9*3 - 0.25 = 3.45,
        // delta_0 = 0.5 + 0.9*0.25 - 0.5 = 0.225, adv_0 = 0.225 + 0.72*3.45 = 2.709.
        let mut buffer = run_gae(&case);
        buffer.scale_rewards(0.5, None).unwrap();
        assert_eq!(buffer.rewards(), &[0.5, 1.0]);
        let advantages = buffer.advantages().unwrap();
        assert!((advantages[1] - 3.45).abs() < 1e-6);
        assert!((advantages[0] - 2.709).abs() < 1e-6);
    }

    #[test]
    fn gae_needs_a_full_buffer_and_matching_last_values() {
        let config = config(3, 2);
        let mut buffer = RolloutBuffer::new(config).unwrap();
        let step = OwnedStep::distinct(&config, 0);
        buffer.push_step(step.data(config.action)).unwrap();
        let err = buffer.compute_gae(&[0.0, 0.0]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::RolloutNotFull {
                    pushed: 1,
                    steps: 3
                }
            ),
            "{err}"
        );
        let mut buffer = filled(config);
        let err = buffer.compute_gae(&[0.0]).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Core(rl_core::Error::ShapeMismatch {
                    what: "last_values",
                    expected: 2,
                    actual: 1
                })
            ),
            "{err}"
        );
        let err = buffer.compute_gae(&[0.0, f32::NAN]).unwrap_err();
        assert!(
            matches!(&err, Error::NonFinite { column, row: 1, .. } if column == "last_value"),
            "{err}"
        );
        assert!(buffer.advantages().is_none());
        buffer.compute_gae(&[0.0, 0.0]).unwrap();
        assert!(buffer.advantages().is_some());
        // Writing values back invalidates the advantages; log-probs do not.
        buffer.log_probs_mut()[0] = 1.0;
        assert!(buffer.advantages().is_some());
        buffer.values_mut()[0] = 1.0;
        assert!(buffer.advantages().is_none() && buffer.returns().is_none());
    }

    // ---- minibatches and gather --------------------------------------------------------

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let config = config(16, 4);
        let mut buffer = filled(config);
        assert_eq!(buffer.order(), (0..64).collect::<Vec<u32>>());
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        buffer.shuffle(&mut rng);
        let first = buffer.order().to_vec();
        assert_ne!(first, (0..64).collect::<Vec<u32>>());
        buffer.shuffle(&mut rng);
        assert_ne!(buffer.order(), first, "each epoch has a new order");
        buffer.shuffle(&mut Xoshiro256PlusPlus::seed_from_u64(7));
        assert_eq!(buffer.order(), first, "the order depends only on the rng");
        let mut sorted = first.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..64).collect::<Vec<u32>>());
        assert!(is_config_error(
            &buffer.minibatches(0).unwrap_err(),
            "minibatch size"
        ));
        assert_eq!(buffer.minibatches(100).unwrap().len(), 1);
    }

    #[test]
    fn shuffle_draws_every_permutation_equally_often() {
        // 3 rows have 6 orders; a correct Fisher-Yates draws each with probability 1/6.
        // (Classic mistakes, e.g. `random_range(0..i)` (Sattolo: cycles only) or
        // `random_range(0..n)` (biased), fail this.)
        let mut buffer = filled(config(3, 1));
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..6000 {
            buffer.shuffle(&mut rng);
            *counts.entry(buffer.order().to_vec()).or_insert(0u32) += 1;
        }
        assert_eq!(counts.len(), 6, "{counts:?}");
        // Each count is Binomial(6000, 1/6): mean 1000, sd 29; 150 is over 5 sd.
        assert!(
            counts.values().all(|&c| c.abs_diff(1000) < 150),
            "{counts:?}"
        );
    }

    #[test]
    fn gather_copies_continuous_rows() {
        let config = RolloutConfig::new(3, 2, 2, ActionShape::Continuous(3));
        let mut buffer = filled(config);
        buffer.compute_gae(&[0.0, 0.0]).unwrap();
        let mut batch = RolloutBatch::new(&config, 4).unwrap();
        assert!(batch.is_empty());
        buffer.gather(&[5, 0, 5], &mut batch).unwrap();
        assert_eq!(batch.len(), 3);
        assert_eq!(batch.obs(), [50.0, 51.0, 0.0, 1.0, 50.0, 51.0]);
        assert_eq!(
            batch.actions(),
            Actions::Continuous(&[-5.0, -5.0, -5.0, -0.0, -0.0, -0.0, -5.0, -5.0, -5.0])
        );
        let advantages = buffer.advantages().unwrap();
        assert_eq!(
            batch.advantages(),
            [advantages[5], advantages[0], advantages[5]]
        );
        assert_eq!(batch.returns()[1], buffer.returns().unwrap()[0]);
        assert_eq!(batch.log_probs(), [-5.0, -0.0, -5.0]);
        // Per-minibatch normalisation in place.
        batch.advantages_mut().fill(0.0);
        assert_eq!(batch.advantages(), [0.0; 3]);
        // A smaller gather replaces the rows.
        buffer.gather(&[1], &mut batch).unwrap();
        assert_eq!((batch.len(), batch.obs()), (1, &[10.0, 11.0][..]));
    }

    #[test]
    fn gather_refuses_bad_requests_and_leaves_the_batch_unchanged() {
        let config = config(2, 2);
        let mut buffer = RolloutBuffer::new(config).unwrap();
        let mut batch = RolloutBatch::new(&config, 2).unwrap();
        let step = OwnedStep::distinct(&config, 0);
        buffer.push_step(step.data(config.action)).unwrap();
        let err = buffer.gather(&[0], &mut batch).unwrap_err();
        assert!(
            matches!(
                err,
                Error::RolloutNotFull {
                    pushed: 1,
                    steps: 2
                }
            ),
            "{err}"
        );
        let step = OwnedStep::distinct(&config, 1);
        buffer.push_step(step.data(config.action)).unwrap();
        let err = buffer.gather(&[0], &mut batch).unwrap_err();
        assert!(matches!(err, Error::AdvantagesNotComputed), "{err}");
        buffer.compute_gae(&[0.0, 0.0]).unwrap();
        buffer.gather(&[3, 2], &mut batch).unwrap();
        let before = format!("{batch:?}");
        let err = buffer.gather(&[0, 4], &mut batch).unwrap_err();
        assert!(is_config_error(&err, "minibatch index"), "{err}");
        let err = buffer.gather(&[0, 1, 2], &mut batch).unwrap_err();
        assert!(
            matches!(
                err,
                Error::NotEnoughRows {
                    requested: 3,
                    available: 2
                }
            ),
            "{err}"
        );
        let other = RolloutConfig::new(2, 2, 3, ActionShape::Continuous(1));
        let mut wrong = RolloutBatch::new(&other, 2).unwrap();
        let err = buffer.gather(&[0], &mut wrong).unwrap_err();
        assert!(is_config_error(&err, "rollout batch"), "{err}");
        assert_eq!(format!("{batch:?}"), before);
    }

    /// The example proposed for the crate docs, with crate-internal paths.
    #[test]
    fn the_documented_iteration_runs() -> Result<()> {
        let config = RolloutConfig::new(128, 8, 4, ActionShape::Discrete);
        println!("{}", RolloutBuffer::plan(&config)?);
        let mut buffer = RolloutBuffer::new(config)?;
        let mut batch = RolloutBatch::new(&config, 256)?;
        let (obs, actions) = (vec![0.0; 8 * 4], vec![0u32; 8]);
        let (zeros, no) = (vec![0.0; 8], vec![false; 8]);
        for _ in 0..config.steps {
            buffer.push_step(StepData {
                obs: &obs,
                actions: Actions::Discrete(&actions),
                rewards: &zeros,
                terminated: &no,
                truncated: &no,
                values: &zeros,
                log_probs: &zeros,
                final_values: &zeros,
            })?;
        }
        buffer.compute_gae(&zeros)?;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(0);
        buffer.shuffle(&mut rng);
        for indices in buffer.minibatches(256)? {
            buffer.gather(indices, &mut batch)?;
        }
        buffer.clear();
        Ok(())
    }

    #[test]
    fn the_hot_loop_allocates_nothing_after_construction() {
        for action in [ActionShape::Discrete, ActionShape::Continuous(2)] {
            let config = RolloutConfig::new(32, 4, 5, action);
            let mut buffer = RolloutBuffer::new(config).unwrap();
            let mut batch = RolloutBatch::new(&config, 24).unwrap();
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
            let steps: Vec<OwnedStep> = (0..32)
                .map(|t| {
                    let mut step = OwnedStep::distinct(&config, t);
                    step.terminated[t % 4] = t % 5 == 0;
                    step.truncated[(t + 1) % 4] = t % 3 == 0;
                    step.final_values.fill(1.0);
                    step
                })
                .collect();
            for iteration in 0..2 {
                let (result, stats) = measure(|| -> Result<f32> {
                    for step in &steps {
                        buffer.push_step(step.data(action))?;
                    }
                    buffer.log_probs_mut()[..8].fill(0.5);
                    buffer.values_mut()[..8].fill(0.5);
                    buffer.compute_gae(&[0.1, 0.2, 0.3, 0.4])?;
                    buffer.scale_rewards(0.5, Some(10.0))?;
                    let mut sum = 0.0;
                    for _epoch in 0..3 {
                        buffer.shuffle(&mut rng);
                        for indices in buffer.minibatches(24)? {
                            buffer.gather(indices, &mut batch)?;
                            sum += batch.advantages().iter().sum::<f32>();
                        }
                    }
                    buffer.clear();
                    Ok(sum)
                });
                assert!(result.unwrap().is_finite());
                assert_eq!(
                    stats.allocations, 0,
                    "{action:?} iteration {iteration}: {stats:?}"
                );
            }
        }
    }
}
