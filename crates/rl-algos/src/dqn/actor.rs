//! The acting part of [`Dqn`], for collectors that act in worker threads, and the
//! epsilon-greedy step both act with.

use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{ActOutput, Policy, PolicyError};
use std::marker::PhantomData;

use rl_nn::{Module, Network, NetworkWorkspace, Observation, Weights};

use super::ensemble::{Prior, argmax_with};
use super::{ActiveHead, Dqn, act_rows, argmax};
use crate::error::{Error, Result};
use crate::learner::ActorRng;

/// Seeds an actor's exploration from the learner's seed, apart from the learner's own.
const ACTOR_SEED: u64 = 0xD0AC_7000_D0AC_7000;

/// The acting part of a [`Dqn`]: the online Q network, epsilon as it was when the actor
/// last took the learner's state (the schedule at [`Dqn::env_steps`]), a workspace for
/// 64 rows and its own generator. It acts epsilon-greedily as [`Dqn`] does in
/// [`crate::policy::Mode::Sample`]; its epsilon changes only when it is refreshed.
///
/// A clone explores with other draws than its source (see
/// [`OffPolicyLearner::Actor`](crate::learner::OffPolicyLearner::Actor)); `clone_from` copies
/// the weights and epsilon in place and allocates nothing.
#[derive(Debug)]
pub struct DqnActor<O = f32> {
    q: Network,
    ws: NetworkWorkspace,
    epsilon: f32,
    n_actions: u32,
    heads: usize,
    /// The learner's fixed prior network (with a workspace of its own) and its scale.
    prior: Option<(Network, NetworkWorkspace, f32)>,
    rng: ActorRng,
    _obs: PhantomData<fn() -> O>,
}

impl<O: Observation> DqnActor<O> {
    pub(super) fn new(dqn: &Dqn<O>) -> Self {
        Self {
            ws: dqn.q.workspace(act_rows(&dqn.q.spec())),
            q: dqn.q.clone(),
            epsilon: dqn.epsilon(),
            n_actions: dqn.n_actions,
            heads: dqn.heads,
            prior: dqn.prior.as_ref().map(|p| {
                (
                    p.net.clone(),
                    p.net.workspace(act_rows(&p.net.spec())),
                    p.scale,
                )
            }),
            rng: ActorRng::new(dqn.seed ^ ACTOR_SEED),
            _obs: PhantomData,
        }
    }

    /// Takes `dqn`'s current weights and epsilon.
    pub(super) fn refresh(&mut self, dqn: &Dqn<O>) -> Result<()> {
        if !self.q.same_spec(&dqn.q) || self.n_actions != dqn.n_actions {
            return Err(Error::CheckpointMismatch {
                what: "Q network architecture".to_owned(),
                expected: dqn.q.architecture().to_string(),
                actual: self.q.architecture().to_string(),
            });
        }
        self.q.params_mut().copy_from_slice(dqn.q.params());
        if let (Some((net, ..)), Some(prior)) = (&mut self.prior, &dqn.prior) {
            // Fixed, but a restored learner may hold another one.
            net.params_mut().copy_from_slice(prior.net.params());
        }
        self.epsilon = dqn.epsilon();
        Ok(())
    }

    /// The epsilon it explores with.
    pub fn epsilon(&self) -> f32 {
        self.epsilon
    }

    /// The Q network.
    pub fn network(&self) -> &Network {
        &self.q
    }
}

impl<O> Clone for DqnActor<O> {
    fn clone(&self) -> Self {
        Self {
            q: self.q.clone(),
            ws: self.ws.clone(),
            epsilon: self.epsilon,
            n_actions: self.n_actions,
            heads: self.heads,
            prior: self.prior.clone(),
            rng: self.rng.clone(),
            _obs: PhantomData,
        }
    }

    /// Copies the weights and epsilon in place (no allocation); keeps this copy's draws.
    fn clone_from(&mut self, source: &Self) {
        if !self.q.same_spec(&source.q) {
            *self = source.clone();
            return;
        }
        self.q.params_mut().copy_from_slice(source.q.params());
        self.epsilon = source.epsilon;
        self.n_actions = source.n_actions;
        self.heads = source.heads;
    }
}

impl<O: Observation> Policy for DqnActor<O> {
    type Obs = O;
    type Act = u32;
    type State = ActiveHead;

    /// Acts with each environment's [`ActiveHead`] (drawn at its episode's first step).
    fn act(
        &mut self,
        obs: &[O],
        states: &mut [ActiveHead],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        if out.actions.len() != states.len() {
            return Err(Box::new(Error::shape(
                "actions (one per environment)",
                states.len(),
                out.actions.len(),
            )));
        }
        EpsilonGreedy {
            q: &self.q,
            ws: &mut self.ws,
            prior: self.prior.as_mut().map(|(n, ws, s)| (&*n, ws, *s)),
            rng: self.rng.rng(),
            epsilon: self.epsilon,
            sample: true,
            n_actions: self.n_actions,
            heads: self.heads,
        }
        .act(obs, out.actions, Some(states))
        .map_err(|e| Box::new(e) as PolicyError)
    }

    /// One head: the states stay at their default ([`Dqn`]'s `stateless`).
    fn stateless(&self) -> bool {
        self.heads == 1
    }
}

/// Epsilon-greedy acting over the Q network, at most [`act_rows`] rows at a time: with
/// probability `epsilon` a uniformly random action, else the greedy one; greedy only
/// when not `sample`. Shared by [`Dqn`] and [`DqnActor`], so both act alike.
///
/// With several heads, "greedy" is the argmax of the row's active head when sampling
/// with per-environment states, and of the mean over the heads otherwise (greedy
/// evaluation, or rows without states).
pub(super) struct EpsilonGreedy<'a> {
    pub(super) q: &'a Network,
    pub(super) ws: &'a mut NetworkWorkspace,
    /// A prior network, its acting workspace and its scale: Q-values are the network's
    /// plus scale times the prior's.
    pub(super) prior: Option<(&'a Network, &'a mut NetworkWorkspace, f32)>,
    pub(super) rng: &'a mut Xoshiro256PlusPlus,
    pub(super) epsilon: f32,
    pub(super) sample: bool,
    pub(super) n_actions: u32,
    pub(super) heads: usize,
}

impl EpsilonGreedy<'_> {
    pub(super) fn act<O: Observation>(
        self,
        obs: &[O],
        actions: &mut [u32],
        mut states: Option<&mut [ActiveHead]>,
    ) -> Result<()> {
        let obs_dim = self.q.input_dim();
        let n = self.n_actions as usize;
        let width = n * self.heads;
        let mut done = 0;
        let mut prior = self.prior;
        for (o, a) in crate::predict::action_chunks(obs, obs_dim, actions, self.ws.max_rows())? {
            let q = self.q.forward_obs(o, a.len(), self.ws)?;
            let p = match prior.as_mut() {
                Some((net, ws, scale)) => Some((Prior::forward(net, o, a.len(), ws)?, *scale)),
                None => None,
            };
            for (r, (action, row)) in a.iter_mut().zip(q.chunks_exact(width)).enumerate() {
                let p = p.map(|(p, scale)| (&p[r * width..(r + 1) * width], scale));
                let active = match states.as_deref_mut() {
                    Some(states) if self.sample => {
                        Some(states[done].get_or_draw(self.heads, self.rng))
                    }
                    _ => None,
                };
                done += 1;
                *action = if self.sample && self.rng.random::<f32>() < self.epsilon {
                    self.rng.random_range(0..self.n_actions)
                } else if self.heads == 1 && p.is_none() {
                    argmax(row) as u32
                } else if let Some(h) = active {
                    let head = p.map(|(p, scale)| (&p[h * n..(h + 1) * n], scale));
                    argmax_with(&row[h * n..(h + 1) * n], head) as u32
                } else {
                    mean_argmax(row, p, n) as u32
                };
            }
        }
        Ok(())
    }
}

/// The action with the largest mean over the heads of `row` (`heads x n`, plus `scale`
/// times the prior's outputs); ties go to the lowest index.
fn mean_argmax(row: &[f32], prior: Option<(&[f32], f32)>, n: usize) -> usize {
    let sum = |a: usize| {
        (a..row.len())
            .step_by(n)
            .map(|i| super::ensemble::with_prior(row, prior, i))
            .sum::<f32>()
    };
    let mut best = (0, sum(0));
    for a in 1..n {
        let v = sum(a);
        if v > best.1 {
            best = (a, v);
        }
    }
    best.0
}
