//! The TD targets and the Huber loss of a batch, and their gradient: the learning step of
//! [`Dqn`] before clipping and Adam.

use rl_core::{Field, Flag};
use rl_nn::{Module, Observation};
use rl_storage::Batch;

use super::ensemble::{Prior, with_prior};
use super::{Dqn, argmax};
use crate::error::{Error, Result};
use crate::learner::Sizes;

/// Per-update buffers, sized for `batch_size` rows and the heads at construction.
#[derive(Clone, Debug)]
pub(super) struct Scratch {
    /// TD targets `y`, `rows x heads`.
    pub(super) targets: Vec<f32>,
    /// The online network's greedy next actions (double Q-learning), `rows x heads`.
    pub(super) next_actions: Vec<u32>,
    /// `Q(s, a) - y`, `rows x heads`.
    pub(super) td: Vec<f32>,
    /// Gradient of the loss with respect to the network's outputs
    /// (`rows x heads x n_actions`).
    pub(super) d_out: Vec<f32>,
    /// Each row's bootstrap mask (bootstrapped DQN only; empty otherwise).
    pub(super) masks: Vec<i64>,
    /// `|td| + 1e-6` (averaged over the heads) of the last applied update's first
    /// `priority_rows` rows.
    pub(super) priorities: Vec<f32>,
    pub(super) priority_rows: usize,
}

impl Scratch {
    pub(super) fn new(rows: usize, n_actions: usize, heads: usize, masked: bool) -> Self {
        Self {
            targets: vec![0.0; rows * heads],
            next_actions: vec![0; rows * heads],
            td: vec![0.0; rows * heads],
            d_out: vec![0.0; rows * heads * n_actions],
            masks: vec![0; if masked { rows } else { 0 }],
            priorities: vec![0.0; rows],
            priority_rows: 0,
        }
    }

    /// Bytes of [`Scratch::new`] for `rows` rows, `n_actions` actions and `heads` heads
    /// without the masks, before it exists: two floats and an action per row and head, a
    /// float per row, and a float per row, head and action.
    pub(super) fn bytes_for(
        rows: usize,
        n_actions: usize,
        heads: usize,
        sizes: Sizes,
    ) -> Result<u64> {
        sizes.sum(&[
            sizes.bytes(&[rows, heads, 2 * size_of::<f32>() + size_of::<u32>()])?,
            sizes.f32s(&[rows])?,
            sizes.f32s(&[rows, heads, n_actions])?,
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
    /// Storage positions of the rows (what bootstrap masks are drawn from); `None` where
    /// the rows have none (a recurrent learner's summaries).
    pub(crate) positions: Option<&'b [usize]>,
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
            positions: Some(batch.positions()),
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

/// The prior's outputs of chunk `j` (`n` wide), with its scale.
fn chunk(prior: Option<(&[f32], f32)>, j: usize, n: usize) -> Option<(&[f32], f32)> {
    prior.map(|(p, scale)| (&p[j * n..(j + 1) * n], scale))
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
    ///
    /// With `K` heads ([`DqnConfig::ensemble`](super::DqnConfig::ensemble)) each head
    /// `h` has its own targets (from its own head of the target network) and its own
    /// loss `L_h`, the Huber loss of its TD errors weighted by the rows' importance
    /// weights times bit `h` of their masks, averaged over all rows; the loss reported
    /// is the mean of the `L_h`. As in Osband et al. (2016, appendix), head `h`'s
    /// parameters (its slice of the output layer) get `grad L_h`, and the shared torso
    /// gets `(1/K) sum_h grad L_h` (and so do the observation gradients). One head is
    /// plain DQN exactly. With a prior network (`prior_scale` β), every Q-value here,
    /// online and target, is the network's plus β times the prior's; the prior is
    /// constant, so the gradient is the same expression.
    pub(super) fn gradients(
        &mut self,
        transitions: Transitions<'_, O>,
        obs_grads: Option<&mut [f32]>,
    ) -> Result<Pass> {
        let n = self.n_actions as usize;
        let heads = self.heads;
        let width = heads * n;
        let Transitions {
            rows,
            obs,
            actions,
            rewards,
            terminated,
            next_obs,
            weights,
            positions,
        } = transitions;
        let s = &mut self.scratch;
        let gamma = self.config.gamma;
        if let Some(ensemble) = self.config.ensemble {
            super::ensemble::draw_masks(
                ensemble,
                self.seed,
                self.updates,
                positions,
                &mut s.masks[..rows],
            )?;
        }

        // The prior's outputs, where there is one.
        let (prior_next, prior_obs) = match self.prior.as_mut() {
            Some(Prior {
                net,
                scale,
                ws_obs,
                ws_next,
                ..
            }) => (
                Some((Prior::forward(net, next_obs, rows, ws_next)?, *scale)),
                Some((Prior::forward(net, obs, rows, ws_obs)?, *scale)),
            ),
            None => (None, None),
        };
        let greedy = |row: &[f32], prior: Option<(&[f32], f32)>| match prior {
            Some(_) => super::ensemble::argmax_with(row, prior),
            None => argmax(row),
        };

        // Targets, per head: the next action by the online head (double) or the target
        // head's max.
        if self.config.double {
            let q_next = self.q.forward_obs(next_obs, rows, &mut self.ws)?;
            for (j, (a, row)) in s
                .next_actions
                .iter_mut()
                .zip(q_next.chunks_exact(n))
                .enumerate()
            {
                *a = greedy(row, chunk(prior_next, j, n)) as u32;
            }
        }
        let q_target = self
            .target
            .forward_obs(next_obs, rows, &mut self.target_ws)?;
        for (b, outputs) in q_target.chunks_exact(width).enumerate() {
            for (h, row) in outputs.chunks_exact(n).enumerate() {
                let i = b * heads + h;
                s.targets[i] = if terminated[b].get() {
                    rewards[b]
                } else {
                    let prior = chunk(prior_next, i, n);
                    let next = if self.config.double {
                        with_prior(row, prior, s.next_actions[i] as usize)
                    } else {
                        with_prior(row, prior, greedy(row, prior))
                    };
                    rewards[b] + gamma * next
                };
            }
        }

        // Weighted Huber loss on Q_h(s, a) - y_h; the gradient reaches only Q_h(s, a) of
        // the heads whose mask bit is set.
        let q = self.q.forward_obs(obs, rows, &mut self.ws)?;
        let d_out = &mut s.d_out[..rows * width];
        d_out.fill(0.0);
        let inv_rows = 1.0 / rows as f32;
        let delta = self.config.huber_delta;
        let (mut loss, mut sum_q, mut sum_y) = (0.0f32, 0.0f32, 0.0f32);
        for b in 0..rows {
            let mask = s.masks.get(b).map_or(u64::MAX, |&m| m as u64);
            for h in 0..heads {
                let i = b * heads + h;
                let k = b * width + h * n + actions[b] as usize;
                let q_k = with_prior(q, prior_obs, k);
                let td = q_k - s.targets[i];
                let (value, slope) = huber(td, delta);
                s.td[i] = td;
                let weight = if (mask >> h) & 1 == 1 {
                    weights[b]
                } else {
                    0.0
                };
                loss += weight * value;
                d_out[k] = weight * slope * inv_rows;
                sum_q += q_k;
                sum_y += s.targets[i];
            }
        }
        // One head divides by 1.0: exact, so plain DQN is unchanged.
        let per_head = heads as f32;
        let loss = loss * inv_rows / per_head;
        if !loss.is_finite() {
            return Err(Error::Diverged {
                what: "TD loss",
                value: loss,
            });
        }
        let torso = heads > 1;
        let mut obs_grads = obs_grads;
        self.q.backward(
            &mut self.ws,
            d_out,
            Some(&mut self.grads),
            obs_grads.as_deref_mut(),
        )?;
        if torso {
            super::ensemble::scale_torso(&self.q, &mut self.grads, 1.0 / per_head);
            if let Some(grads) = obs_grads {
                grads.iter_mut().for_each(|g| *g /= per_head);
            }
        }
        Ok(Pass {
            rows,
            loss,
            mean_q: sum_q * inv_rows / per_head,
            mean_target: sum_y * inv_rows / per_head,
        })
    }
}
