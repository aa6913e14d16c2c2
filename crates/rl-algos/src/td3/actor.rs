//! The acting part of [`Td3`], for collectors that act in worker threads.

use rl_collect::{ActOutput, Policy, PolicyError};
use rl_nn::{Mlp, MlpWorkspace, Module};

use super::{ACT_ROWS, Acting, Td3};
use crate::error::Result;
use crate::learner::ActorRng;
use crate::sac::copy_weights;

/// Seeds an actor's noise from the learner's seed, apart from the learner's own noise.
const ACTOR_SEED: u64 = 0xAC70_7D30_AC70_7D30;

/// The acting part of a [`Td3`]: the actor network, the action bounds, a workspace for
/// 64 rows, the exploration noise and its own generator. It acts exactly as [`Td3`]
/// does in [`Mode::Sample`](crate::policy::Mode::Sample).
///
/// A clone draws other noise than its source (see
/// [`OffPolicyLearner::Actor`](crate::learner::OffPolicyLearner::Actor)); `clone_from`
/// copies the weights in place and allocates nothing.
#[derive(Debug)]
pub struct Td3Actor {
    actor: Mlp,
    ws: MlpWorkspace,
    scale: Vec<f32>,
    offset: Vec<f32>,
    noise: f32,
    rng: ActorRng,
}

impl Td3Actor {
    pub(super) fn new(td3: &Td3) -> Self {
        let actor = td3.actor.clone();
        Self {
            ws: actor.workspace(ACT_ROWS),
            actor,
            scale: td3.scale.clone(),
            offset: td3.offset.clone(),
            noise: td3.config.exploration_noise,
            rng: ActorRng::new(td3.seed ^ ACTOR_SEED),
        }
    }

    /// Takes `td3`'s current weights and exploration noise.
    pub(super) fn refresh(&mut self, td3: &Td3) -> Result<()> {
        copy_weights(&mut self.actor, &td3.actor)?;
        self.noise = td3.config.exploration_noise;
        Ok(())
    }

    /// The actor network (its outputs before `tanh`).
    pub fn network(&self) -> &Mlp {
        &self.actor
    }
}

impl Clone for Td3Actor {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            ws: self.ws.clone(),
            scale: self.scale.clone(),
            offset: self.offset.clone(),
            noise: self.noise,
            rng: self.rng.clone(),
        }
    }

    /// Copies the weights, bounds and noise in place (no allocation); keeps this copy's
    /// generator.
    fn clone_from(&mut self, source: &Self) {
        if copy_weights(&mut self.actor, &source.actor).is_err()
            || self.scale.len() != source.scale.len()
        {
            *self = source.clone();
            return;
        }
        self.scale.copy_from_slice(&source.scale);
        self.offset.copy_from_slice(&source.offset);
        self.noise = source.noise;
    }
}

impl Policy for Td3Actor {
    type Obs = f32;
    type Act = f32;
    type State = ();

    fn act(
        &mut self,
        obs: &[f32],
        _states: &mut [()],
        out: ActOutput<'_, f32>,
    ) -> Result<(), PolicyError> {
        Acting {
            actor: &self.actor,
            ws: &mut self.ws,
            rng: self.rng.rng(),
            scale: &self.scale,
            offset: &self.offset,
            noise: self.noise,
        }
        .act(obs, out.actions, out.log_probs)
        .map_err(|e| Box::new(e) as PolicyError)
    }
}
