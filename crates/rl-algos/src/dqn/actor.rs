//! The acting part of [`Dqn`], for collectors that act in worker threads, and the
//! epsilon-greedy step both act with.

use rand::Rng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{ActOutput, Policy, PolicyError};
use std::marker::PhantomData;

use rl_nn::{Module, Network, NetworkWorkspace, Observation, Weights};

use super::{ACT_ROWS, Dqn, argmax};
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
    rng: ActorRng,
    _obs: PhantomData<fn() -> O>,
}

impl<O: Observation> DqnActor<O> {
    pub(super) fn new(dqn: &Dqn<O>) -> Self {
        Self {
            ws: dqn.q.workspace(ACT_ROWS),
            q: dqn.q.clone(),
            epsilon: dqn.epsilon(),
            n_actions: dqn.n_actions,
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
    }
}

impl<O: Observation> Policy for DqnActor<O> {
    type Obs = O;
    type Act = u32;
    type State = ();

    fn act(
        &mut self,
        obs: &[O],
        _states: &mut [()],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        EpsilonGreedy {
            q: &self.q,
            ws: &mut self.ws,
            rng: self.rng.rng(),
            epsilon: self.epsilon,
            sample: true,
            n_actions: self.n_actions,
        }
        .act(obs, out.actions)
        .map_err(|e| Box::new(e) as PolicyError)
    }
}

/// Epsilon-greedy acting over the Q network, at most [`ACT_ROWS`] rows at a time: with
/// probability `epsilon` a uniformly random action, else the greedy one; greedy only
/// when not `sample`. Shared by [`Dqn`] and [`DqnActor`], so both act alike.
pub(super) struct EpsilonGreedy<'a> {
    pub(super) q: &'a Network,
    pub(super) ws: &'a mut NetworkWorkspace,
    pub(super) rng: &'a mut Xoshiro256PlusPlus,
    pub(super) epsilon: f32,
    pub(super) sample: bool,
    pub(super) n_actions: u32,
}

impl EpsilonGreedy<'_> {
    pub(super) fn act<O: Observation>(self, obs: &[O], actions: &mut [u32]) -> Result<()> {
        let obs_dim = self.q.input_dim();
        for (o, a) in crate::predict::action_chunks(obs, obs_dim, actions, ACT_ROWS)? {
            let q = self.q.forward_obs(o, a.len(), self.ws)?;
            for (action, row) in a.iter_mut().zip(q.chunks_exact(self.n_actions as usize)) {
                *action = if self.sample && self.rng.random::<f32>() < self.epsilon {
                    self.rng.random_range(0..self.n_actions)
                } else {
                    argmax(row) as u32
                };
            }
        }
        Ok(())
    }
}
