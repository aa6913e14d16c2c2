//! The on-policy rollout buffer: `steps x envs` rows of a [`Schema`], allocated once,
//! filled one step of every environment at a time, read back in shuffled minibatches.
//!
//! It is plain columnar storage on the same model as the replay buffer (a
//! [`RamStorage`] of the schema's columns, flags as [`Flag`](rl_core::Flag)): it stores, it never
//! learns. Advantages, returns and reward normalisation belong to the learner
//! (`rl-algos` computes them once per update from these columns). Rows are time-major:
//! row `t * envs + e` is step `t` of environment `e`. The usual layout is
//! [`TransitionSchema::for_rollout`](rl_core::TransitionSchema::for_rollout): `obs`,
//! `action`, `reward`, `terminated`, `truncated`, `log_prob`, `value`, `final_value`.

use std::fmt;
use std::slice::Chunks;

use rand::Rng;
use rl_core::{Element, Field, Location, MemoryBudget, MemoryPlan, Schema};

use crate::batch::Batch;
use crate::column::{ColumnSlice, column_index, typed};
use crate::error::{Error, Result};
use crate::ram::RamStorage;
use crate::ring;
use crate::storage::{HostStorage, Storage};
use rl_core::NonFinite;

/// A fixed-size on-policy buffer of `steps x envs` rows of a schema.
///
/// One PPO iteration, which allocates nothing:
///
/// 1. [`push_step`](Self::push_step) `steps` times: the columns of one step of all `N`
///    environments, in schema order (a collector does this:
///    `rl_collect::SyncCollector::collect_rollout`).
/// 2. Read the columns ([`field`](Self::field), [`column`](Self::column)) to compute
///    advantages.
/// 3. Per epoch: [`shuffle`](Self::shuffle), then [`gather`](Self::gather) each slice of
///    [`minibatches`](Self::minibatches) into a reused [`Batch`].
/// 4. [`clear`](Self::clear).
///
/// ```
/// use rand::SeedableRng;
/// use rand_xoshiro::Xoshiro256PlusPlus;
/// use rl_core::{DType, Field, Flag, TransitionSchema};
/// use rl_storage::{Batch, ColumnSlice, rollout::RolloutBuffer};
///
/// let schema = TransitionSchema::new(DType::F32, &[2], DType::U32, &[])
///     .for_rollout()
///     .build()?;
/// let mut rollout = RolloutBuffer::new(schema.clone(), 3, 2, None)?; // 3 steps of 2 envs
/// let no = [Flag::new(false); 2];
/// for t in 0..3 {
///     let obs = [t as f32, 0.0, t as f32, 1.0];
///     rollout.push_step(&[
///         ColumnSlice::from(&obs),
///         (&[0u32, 1]).into(),     // action
///         (&[1.0f32, 1.0]).into(), // reward
///         (&no).into(),            // terminated
///         (&no).into(),            // truncated
///         (&[-0.7f32, -0.7]).into(), // log_prob
///         (&[0.5f32, 0.5]).into(), // value
///         (&[0.0f32, 0.0]).into(), // final_value
///     ])?;
/// }
/// assert!(rollout.is_full());
/// assert_eq!(rollout.field::<f32>(Field::Reward)?.len(), 6);
///
/// let mut batch = Batch::new(&schema, 4)?;
/// rollout.shuffle(&mut Xoshiro256PlusPlus::seed_from_u64(0));
/// for indices in rollout.minibatches(4)? {
///     rollout.gather(indices, &mut batch)?;
///     assert_eq!(batch.obs()?.len(), indices.len() * 2);
/// }
/// # Ok::<(), rl_storage::Error>(())
/// ```
pub struct RolloutBuffer {
    storage: RamStorage,
    steps: usize,
    envs: usize,
    /// Steps pushed, `0..=steps`.
    len: usize,
    /// A permutation of `0..rows`: the minibatch order of the current epoch.
    order: Vec<u32>,
    non_finite: NonFinite,
}

impl fmt::Debug for RolloutBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RolloutBuffer")
            .field("steps", &self.steps)
            .field("envs", &self.envs)
            .field("len", &self.len)
            .field("schema", self.storage.schema())
            .finish_non_exhaustive()
    }
}

impl RolloutBuffer {
    /// What a buffer of `steps x envs` rows of `schema` allocates: one line per column,
    /// exact bytes (as [`RamStorage::plan`]), plus `minibatch_order` (one `u32` per row),
    /// all in RAM.
    ///
    /// # Errors
    /// Invalid configuration for zero steps or environments, more than `u32::MAX` rows,
    /// or a column too large to address.
    pub fn plan(schema: &Schema, steps: usize, envs: usize) -> Result<MemoryPlan> {
        let rows = rows_of(steps, envs)?;
        let mut plan = RamStorage::plan(schema, rows)?;
        plan.add(
            "minibatch_order",
            Location::Ram,
            (rows * size_of::<u32>()) as u64,
        );
        Ok(plan)
    }

    /// Allocates every column (zeroed, pages touched), refusing first, without
    /// allocating, a plan that does not fit `budget`.
    ///
    /// # Errors
    /// As [`RolloutBuffer::plan`], plus over-budget naming the largest columns.
    pub fn new(
        schema: Schema,
        steps: usize,
        envs: usize,
        budget: Option<&MemoryBudget>,
    ) -> Result<Self> {
        let rows = rows_of(steps, envs)?;
        if let Some(budget) = budget {
            Self::plan(&schema, steps, envs)?.check(budget)?;
        }
        let storage = RamStorage::new(schema, rows, None)?;
        Ok(Self {
            storage,
            steps,
            envs,
            len: 0,
            // `rows <= u32::MAX` was checked by `rows_of`.
            order: (0..).take(rows).collect(),
            non_finite: NonFinite::default(),
        })
    }

    /// This buffer with another policy for non-finite `f32` values (rejected by default).
    pub fn with_non_finite(mut self, policy: NonFinite) -> Self {
        self.non_finite = policy;
        self
    }

    /// What this buffer holds, as [`RolloutBuffer::plan`].
    pub fn memory_plan(&self) -> MemoryPlan {
        let mut plan = self.storage.memory_plan();
        plan.add(
            "minibatch_order",
            Location::Ram,
            (self.order.len() * size_of::<u32>()) as u64,
        );
        plan
    }

    /// The row layout.
    pub fn schema(&self) -> &Schema {
        self.storage.schema()
    }

    /// Steps per rollout (`T`).
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Environments per step (`N`).
    pub fn envs(&self) -> usize {
        self.envs
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
        self.len == self.steps
    }

    /// Rows pushed: `len() * envs`.
    pub fn rows(&self) -> usize {
        self.len * self.envs
    }

    /// Empties the buffer for the next rollout; keeps every allocation.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Appends one step of all `N` environments (rows `len() * N ..`): one slice per
    /// schema column, in schema order, each holding `N` rows.
    ///
    /// Everything is checked before anything is written: a rejected step changes
    /// nothing.
    ///
    /// # Errors
    /// - [`Error::RolloutFull`] when `steps` steps are stored already: train on it, then
    ///   [`clear`](Self::clear).
    /// - A column count, dtype or row count that does not match the schema and `N`
    ///   (naming the column).
    /// - [`Error::NonFinite`] naming the column and environment (unless allowed).
    pub fn push_step(&mut self, columns: &[ColumnSlice<'_>]) -> Result<()> {
        if self.is_full() {
            return Err(Error::RolloutFull {
                steps: self.steps,
                envs: self.envs,
            });
        }
        let rows = ring::validate_write(self.schema(), columns, self.non_finite)?;
        if rows != self.envs {
            return Err(Error::RowMismatch {
                column: self.schema().columns()[0].name().to_owned(),
                elements: columns[0].len(),
                rows: self.envs,
                per_row: self.schema().columns()[0].numel(),
                expected: self.envs * self.schema().columns()[0].numel(),
            });
        }
        let first = self.len * self.envs;
        for (index, slice) in columns.iter().enumerate() {
            let row_bytes = self.storage.schema().columns()[index].row_bytes();
            let target =
                &mut self.storage.column_mut(index)[first * row_bytes..(first + rows) * row_bytes];
            target.copy_from_slice(slice.as_bytes());
        }
        self.len += 1;
        Ok(())
    }

    /// The pushed rows (`rows()` of them, time-major) of column `name`.
    ///
    /// # Errors
    /// Unknown column or a dtype other than the column's.
    pub fn column<T: Element>(&self, name: &str) -> Result<&[T]> {
        let index = column_index(self.schema(), name)?;
        let column = &self.schema().columns()[index];
        let bytes = &self.storage.column(index)[..self.rows() * column.row_bytes()];
        typed(column, bytes)
    }

    /// The pushed rows of a transition field's column ([`Field`]).
    ///
    /// # Errors
    /// As [`RolloutBuffer::column`].
    pub fn field<T: Element>(&self, field: Field) -> Result<&[T]> {
        self.column(field.name())
    }

    /// Reshuffles the minibatch order: resets it to `0..steps * envs` and applies
    /// Fisher-Yates in place, so the order depends only on `rng`'s state. Allocates
    /// nothing.
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
    /// does not divide `steps * envs` the last minibatch is smaller (kept, not dropped).
    /// Allocates nothing.
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

    /// Copies the rows at `indices` (row `t * envs + e`) into `out` (made with
    /// [`Batch::new`] for this buffer's schema), in that order, replacing what it held.
    /// Allocates nothing.
    ///
    /// # Errors
    /// - [`Error::RolloutNotFull`] when the buffer is not full;
    /// - [`Error::NotEnoughRows`] when `indices` holds more rows than `out` has room for;
    /// - [`Error::BatchSchema`] when `out` was made for another schema;
    /// - invalid configuration when an index is out of range.
    ///
    /// On error `out` is unchanged.
    pub fn gather(&self, indices: &[u32], out: &mut Batch) -> Result<()> {
        if out.schema() != self.schema() {
            return Err(Error::BatchSchema);
        }
        if !self.is_full() {
            return Err(Error::RolloutNotFull {
                pushed: self.len,
                steps: self.steps,
            });
        }
        if indices.len() > out.room() {
            return Err(Error::NotEnoughRows {
                requested: indices.len(),
                available: out.room(),
            });
        }
        let rows = self.rows();
        if let Some(&index) = indices.iter().find(|&&i| i as usize >= rows) {
            return Err(Error::config(
                "minibatch index",
                format!(
                    "{index} is out of range for a rollout of {rows} rows: use indices from minibatches()"
                ),
            ));
        }
        out.gather_indices(&self.storage, indices)
    }
}

/// `steps * envs`, checked: both at least 1, at most `u32::MAX` rows.
fn rows_of(steps: usize, envs: usize) -> Result<usize> {
    for (what, value) in [("rollout steps", steps), ("rollout envs", envs)] {
        if value == 0 {
            return Err(Error::config(what, "is 0: it must be at least 1"));
        }
    }
    steps
        .checked_mul(envs)
        .filter(|&rows| u32::try_from(rows).is_ok())
        .ok_or_else(|| {
            Error::config(
                "rollout steps",
                format!(
                    "times envs ({steps} x {envs}) exceeds u32::MAX rows: use fewer steps or environments"
                ),
            )
        })
}

#[cfg(test)]
mod tests;
