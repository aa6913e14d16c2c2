//! What a [`Dqn`] checkpoint holds besides its networks, and [`Dqn`] as a [`Learner`]: its kind, plan, update count, checkpoint and restore.

use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::MemoryPlan;
use rl_nn::{Architecture, Checkpoint, NetworkState};
use serde::{Deserialize, Serialize};

use super::{CHECKPOINT_KIND, Dqn, DqnConfig, Q, Q_PRIOR, Q_TARGET};
use crate::error::{Error, Result, adam_difference, first_difference};
use crate::learner::Learner;

/// What a DQN learner is, as a comparable value: its Q network and number of actions. A
/// checkpoint of another architecture is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DqnArchitecture {
    /// The Q network (and its target): `obs -> hidden -> n_actions`.
    pub q: Architecture,
    /// Actions of the discrete action space.
    pub n_actions: u32,
}

/// Everything of a [`Dqn`] a checkpoint holds besides its networks (`q` with its Adam
/// state, and `q_target`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DqnState {
    /// The configuration; [`Dqn::restore`](crate::learner::Learner::restore) refuses another one.
    pub config: DqnConfig,
    /// The seed the learner was built with; a restored learner takes it (actors made
    /// after the restore explore as the saved learner's would).
    pub seed: u64,
    /// What the learner is; must match on restore.
    pub architecture: DqnArchitecture,
    /// Gradient steps done (the hard target copies count them).
    pub updates: u64,
    /// Environment steps of the run, as last given to
    /// [`OffPolicyLearner::set_env_steps`](crate::learner::OffPolicyLearner::set_env_steps).
    pub env_steps: u64,
    /// The generator of the exploration draws (so a resumed run acts the same).
    pub rng: Xoshiro256PlusPlus,
}

impl<O: rl_nn::Observation> Learner for Dqn<O> {
    type Saved = DqnState;

    fn kind(&self) -> &'static str {
        CHECKPOINT_KIND
    }

    /// Gradient steps done.
    fn updates(&self) -> u64 {
        self.updates
    }

    fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
        for ws in [&mut self.ws, &mut self.target_ws, &mut self.act_ws] {
            ws.set_pool(pool.clone());
        }
    }

    /// Everything the learner holds: the Q network, its gradients and Adam moments, the
    /// target, the workspaces of an update and of acting, and the per-update buffers.
    /// Constant for the learner's life; the replay buffer is the caller's.
    fn memory_plan(&self) -> MemoryPlan {
        self.blueprint.learner.clone()
    }

    /// The whole learner state: `q` with its Adam state, `q_target`, `q_prior` (the
    /// randomized prior network, if there is one), the counters and the exploration
    /// generator.
    fn checkpoint(&self) -> Checkpoint<'_, DqnState> {
        let mut networks = vec![
            NetworkState::capture(Q, &self.q, Some(&self.adam)),
            NetworkState::capture(Q_TARGET, &self.target, None),
        ];
        if let Some(prior) = &self.prior {
            networks.push(NetworkState::capture(Q_PRIOR, &prior.net, None));
        }
        Checkpoint {
            kind: CHECKPOINT_KIND.to_owned(),
            networks,
            state: DqnState {
                config: self.config.clone(),
                seed: self.seed,
                architecture: self.architecture(),
                updates: self.updates,
                env_steps: self.env_steps,
                rng: self.rng.clone(),
            },
        }
    }

    /// Restores a [`Dqn::checkpoint`](crate::learner::Learner::checkpoint); everything is checked first and on error nothing
    /// changes. The learner takes the checkpoint's seed (its generator continues) and
    /// keeps its mode; [`Dqn::priorities`] is empty until the next update.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`] for another configuration or
    /// architecture; [`Error::Nn`] for a checkpoint without the networks or with states
    /// that do not fit.
    fn restore(&mut self, checkpoint: &Checkpoint<DqnState>) -> Result<()> {
        let state = &checkpoint.state;
        let ours = self.architecture();
        if state.architecture != ours {
            return Err(Error::CheckpointMismatch {
                what: "DQN architecture".to_owned(),
                expected: format!("{ours:?}"),
                actual: format!("{:?}", state.architecture),
            });
        }
        first_difference!(
            DqnConfig,
            "dqn",
            &self.config,
            &state.config,
            [
                hidden,
                activation,
                encoder,
                batch_size,
                gamma,
                target_update,
                double,
                exploration,
                max_grad_norm,
                huber_delta,
                ensemble,
            ],
            // The learning rate may change on resume.
            except[adam]
        )?;
        adam_difference("dqn", &self.config.adam, &state.config.adam)?;
        let (q, target) = (checkpoint.network(Q)?, checkpoint.network(Q_TARGET)?);
        q.check_fits(&self.q, Some(&self.adam))?;
        target.check_fits(&self.target, None)?;
        let prior = match &self.prior {
            Some(ours) => {
                let saved = checkpoint.network(Q_PRIOR)?;
                saved.check_fits(&ours.net, None)?;
                Some(saved)
            }
            None => None,
        };
        q.restore_into(&mut self.q, Some(&mut self.adam))?;
        target.restore_into(&mut self.target, None)?;
        if let (Some(saved), Some(ours)) = (prior, &mut self.prior) {
            saved.restore_into(&mut ours.net, None)?;
        }
        // The optimiser keeps its saved moments and takes this learner's rate.
        self.adam.set_lr(self.config.adam.lr)?;
        self.updates = state.updates;
        self.env_steps = state.env_steps;
        self.rng = state.rng.clone();
        // The generator is the checkpoint's, so the seed that made it is too.
        self.seed = state.seed;
        self.scratch.priority_rows = 0;
        Ok(())
    }
}
