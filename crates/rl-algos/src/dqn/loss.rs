//! The TD targets and the Huber loss of a batch, and their gradient: the learning step of
//! [`Dqn`] before clipping and Adam.

use rl_core::{Field, Flag};
use rl_nn::{Module, Observation};
use rl_storage::Batch;

use super::{Dqn, argmax};
use crate::error::{Error, Result};
use crate::learner::Sizes;

/// Per-update buffers, sized for `batch_size` rows at construction.
#[derive(Clone, Debug)]
pub(super) struct Scratch {
    /// TD targets `y`.
    pub(super) targets: Vec<f32>,
    /// The online network's greedy next actions (double Q-learning).
    pub(super) next_actions: Vec<u32>,
    /// `Q(s, a) - y`.
    pub(super) td: Vec<f32>,
    /// Gradient of the loss with respect to the network's outputs (`rows x n_actions`).
    pub(super) d_out: Vec<f32>,
    /// `|td| + 1e-6` of the last applied update's first `priority_rows` rows.
    pub(super) priorities: Vec<f32>,
    pub(super) priority_rows: usize,
}

impl Scratch {
    pub(super) fn new(rows: usize, n_actions: usize) -> Self {
        Self {
            targets: vec![0.0; rows],
            next_actions: vec![0; rows],
            td: vec![0.0; rows],
            d_out: vec![0.0; rows * n_actions],
            priorities: vec![0.0; rows],
            priority_rows: 0,
        }
    }

    /// Bytes of [`Scratch::new`] for `rows` rows and `n_actions` actions, before it
    /// exists: three floats and an action per row, and a float per row and action.
    pub(super) fn bytes_for(rows: usize, n_actions: usize, sizes: Sizes) -> Result<u64> {
        sizes.sum(&[
            sizes.bytes(&[rows, 3 * size_of::<f32>() + size_of::<u32>()])?,
            sizes.f32s(&[rows, n_actions])?,
        ])
    }
}

/// The columns of a sampled batch, checked against a learner's widths and actions.
pub(crate) struct Transitions<'b, O = f32> {
    pub(crate) rows: usize,
    pub(crate) obs: &'b [O],
    pub(crate) actions: &'b [u32],
    pub(crate) rewards: &'b [f32],
    pub(crate) terminated: &'b [Flag],
    pub(crate) next_obs: &'b [O],
    pub(crate) weights: &'b [f32],
}

impl<'b, O: Observation> Transitions<'b, O> {
    /// Reads the columns of `batch`: 1 to `max_rows` rows of `obs_dim` observations and
    /// one action index below `n_actions` each.
    pub(super) fn read(
        batch: &'b Batch,
        max_rows: usize,
        obs_dim: usize,
        n_actions: u32,
    ) -> Result<Self> {
        let rows = batch.len();
        if rows == 0 || rows > max_rows {
            return Err(Error::shape("batch rows (1 to batch_size)", max_rows, rows));
        }
        Self {
            rows,
            obs: batch.field::<O>(Field::Obs)?,
            actions: batch.field::<u32>(Field::Action)?,
            rewards: batch.rewards()?,
            terminated: batch.terminated()?,
            next_obs: batch.field::<O>(Field::NextObs)?,
            weights: batch.weights(),
        }
        .check(obs_dim, n_actions)
    }

    /// Checks the columns' lengths against `rows` and the action indices.
    pub(crate) fn check(self, obs_dim: usize, n_actions: u32) -> Result<Self> {
        let (rows, columns) = (self.rows, self);
        for (what, expected, actual) in [
            ("batch obs", rows * obs_dim, columns.obs.len()),
            (
                "batch actions (one index per row)",
                rows,
                columns.actions.len(),
            ),
            ("batch rewards (one per row)", rows, columns.rewards.len()),
            (
                "batch terminated flags (one per row)",
                rows,
                columns.terminated.len(),
            ),
            ("batch next_obs", rows * obs_dim, columns.next_obs.len()),
            ("batch weights (one per row)", rows, columns.weights.len()),
        ] {
            if expected != actual {
                return Err(Error::shape(what, expected, actual));
            }
        }
        if let Some((row, &action)) = columns
            .actions
            .iter()
            .enumerate()
            .find(|(_, a)| **a >= n_actions)
        {
            return Err(Error::ActionOutOfRange {
                row,
                action,
                actions: n_actions as usize,
            });
        }
        Ok(columns)
    }
}

/// What [`Dqn::gradients`] measured.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pass {
    pub(super) rows: usize,
    pub(super) loss: f32,
    pub(super) mean_q: f32,
    pub(super) mean_target: f32,
}

/// The Huber loss of `x` and its derivative.
fn huber(x: f32, delta: f32) -> (f32, f32) {
    if x.abs() <= delta {
        (0.5 * x * x, x)
    } else {
        (delta * (x.abs() - 0.5 * delta), delta * x.signum())
    }
}

impl<O: Observation> Dqn<O> {
    /// The loss of `batch` and its gradient, added into `self.grads` (which must be
    /// zero); nothing else of the learner's state changes. On error the gradients stay
    /// zero.
    pub(super) fn gradients(
        &mut self,
        transitions: Transitions<'_, O>,
        obs_grads: Option<&mut [f32]>,
    ) -> Result<Pass> {
        let n = self.n_actions as usize;
        let Transitions {
            rows,
            obs,
            actions,
            rewards,
            terminated,
            next_obs,
            weights,
        } = transitions;
        let s = &mut self.scratch;
        let gamma = self.config.gamma;

        // Targets: the next action by the online network (double) or the target's max.
        if self.config.double {
            let q_next = self.q.forward_obs(next_obs, rows, &mut self.ws)?;
            for (a, row) in s.next_actions.iter_mut().zip(q_next.chunks_exact(n)) {
                *a = argmax(row) as u32;
            }
        }
        let q_target = self
            .target
            .forward_obs(next_obs, rows, &mut self.target_ws)?;
        for (b, row) in q_target.chunks_exact(n).enumerate() {
            s.targets[b] = if terminated[b].get() {
                rewards[b]
            } else {
                let next = if self.config.double {
                    row[s.next_actions[b] as usize]
                } else {
                    row[argmax(row)]
                };
                rewards[b] + gamma * next
            };
        }

        // Weighted Huber loss on Q(s, a) - y; the gradient reaches only Q(s, a).
        let q = self.q.forward_obs(obs, rows, &mut self.ws)?;
        let d_out = &mut s.d_out[..rows * n];
        d_out.fill(0.0);
        let inv_rows = 1.0 / rows as f32;
        let delta = self.config.huber_delta;
        let (mut loss, mut sum_q, mut sum_y) = (0.0f32, 0.0f32, 0.0f32);
        for b in 0..rows {
            let k = b * n + actions[b] as usize;
            let td = q[k] - s.targets[b];
            let (value, slope) = huber(td, delta);
            s.td[b] = td;
            loss += weights[b] * value;
            d_out[k] = weights[b] * slope * inv_rows;
            sum_q += q[k];
            sum_y += s.targets[b];
        }
        let loss = loss * inv_rows;
        if !loss.is_finite() {
            return Err(Error::Diverged {
                what: "TD loss",
                value: loss,
            });
        }
        self.q
            .backward(&mut self.ws, d_out, Some(&mut self.grads), obs_grads)?;
        Ok(Pass {
            rows,
            loss,
            mean_q: sum_q * inv_rows,
            mean_target: sum_y * inv_rows,
        })
    }
}
