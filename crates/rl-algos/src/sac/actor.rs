//! The acting parts of the SAC learners, for collectors that act in worker threads:
//! [`SacActor`] (actor network and action bounds) and [`DiscreteSacActor`] (actor
//! network, an acting scorer over the action table, action masks).

use std::sync::Arc;

use rl_actions::{ActionMask, ChunkedScorer};
use rl_collect::{ActOutput, Policy, PolicyError};
use rl_nn::{Mlp, MlpWorkspace, Module, Weights};

use super::continuous::Acting;
use super::discrete::DiscreteActing;
use super::{ACT_ROWS, ActionMaskFn, DiscreteSac, Sac};
use crate::error::{Error, Result};
use crate::learner::ActorRng;
use crate::policy::Mode;

/// Seeds an actor's noise from the learner's seed, apart from the learner's own noise.
const ACTOR_SEED: u64 = 0xAC70_5AC0_AC70_5AC0;

/// Copies `source`'s weights into `dest`, refusing another architecture. Allocates
/// nothing (but the error).
pub(crate) fn copy_weights(dest: &mut Mlp, source: &Mlp) -> Result<()> {
    if dest.spec() != source.spec() {
        return Err(Error::CheckpointMismatch {
            what: "actor architecture".to_owned(),
            expected: source.architecture().to_string(),
            actual: dest.architecture().to_string(),
        });
    }
    dest.params_mut().copy_from_slice(source.params());
    Ok(())
}

/// The acting part of a [`Sac`]: the actor network, the action bounds, a workspace and
/// noise buffers for 64 rows, its own noise generator. It samples
/// tanh-squashed Gaussian actions exactly as [`Sac`] does in [`Mode::Sample`].
///
/// A clone draws other noise than its source (see
/// [`OffPolicyLearner::Actor`](crate::learner::OffPolicyLearner::Actor)); `clone_from` copies
/// the weights in place and allocates nothing.
#[derive(Debug)]
pub struct SacActor {
    actor: Mlp,
    ws: MlpWorkspace,
    scale: Vec<f32>,
    offset: Vec<f32>,
    noise: Vec<f32>,
    squashed: Vec<f32>,
    logp: Vec<f32>,
    rng: ActorRng,
}

impl SacActor {
    pub(super) fn new(sac: &Sac) -> Self {
        let actor = sac.core.actor.clone();
        let (scale, offset) = sac.action_bounds();
        let act_dim = scale.len();
        Self {
            ws: actor.workspace(ACT_ROWS),
            actor,
            scale: scale.to_vec(),
            offset: offset.to_vec(),
            noise: vec![0.0; ACT_ROWS * act_dim],
            squashed: vec![0.0; ACT_ROWS * act_dim],
            logp: vec![0.0; ACT_ROWS],
            rng: ActorRng::new(sac.core.seed ^ ACTOR_SEED),
        }
    }

    /// Takes `sac`'s current weights.
    pub(super) fn refresh(&mut self, sac: &Sac) -> Result<()> {
        copy_weights(&mut self.actor, &sac.core.actor)
    }

    /// The actor network.
    pub fn network(&self) -> &Mlp {
        &self.actor
    }
}

impl Clone for SacActor {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            ws: self.ws.clone(),
            scale: self.scale.clone(),
            offset: self.offset.clone(),
            noise: self.noise.clone(),
            squashed: self.squashed.clone(),
            logp: self.logp.clone(),
            rng: self.rng.clone(),
        }
    }

    /// Copies the weights and bounds in place (no allocation); keeps this copy's noise.
    fn clone_from(&mut self, source: &Self) {
        if copy_weights(&mut self.actor, &source.actor).is_err()
            || self.scale.len() != source.scale.len()
        {
            *self = source.clone();
            return;
        }
        self.scale.copy_from_slice(&source.scale);
        self.offset.copy_from_slice(&source.offset);
    }
}

impl Policy for SacActor {
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
            noise: &mut self.noise,
            squashed: &mut self.squashed,
            logp: &mut self.logp,
            scale: &self.scale,
            offset: &self.offset,
            deterministic: false,
        }
        .act(obs, out.actions, out.log_probs)
        .map_err(|e| Box::new(e) as PolicyError)
    }
}

/// The acting part of a [`DiscreteSac`]: the actor network, a scorer over the action
/// representation sized for 64 rows, the action masks, its own noise
/// generator. It samples actions exactly as [`DiscreteSac`] does in [`Mode::Sample`].
///
/// A fixed table is shared, never copied (the scorer's transposed copy is made once, in
/// [`crate::learner::OffPolicyLearner::actor`], and shared by clones). A learned table is copied:
/// [`crate::learner::OffPolicyLearner::refresh_actor`] copies the learner's values (a new table
/// and transposed copy whenever clones still hold the previous ones), and `clone_from`
/// of a newer table re-clones the scorer (its buffers included).
pub struct DiscreteSacActor {
    actor: Mlp,
    ws: MlpWorkspace,
    scorer: ChunkedScorer,
    masking: Option<(Arc<ActionMaskFn>, Vec<ActionMask>)>,
    scores: Vec<f32>,
    /// Learned-table version: bumped by every refresh that copies the table.
    table_version: u64,
    learned: bool,
    rng: ActorRng,
}

impl std::fmt::Debug for DiscreteSacActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscreteSacActor")
            .field("actor", &self.actor.architecture())
            .field("scorer", &self.scorer)
            .field("masked", &self.masking.is_some())
            .field("table_version", &self.table_version)
            .field("learned", &self.learned)
            .finish_non_exhaustive()
    }
}

impl DiscreteSacActor {
    pub(super) fn new(sac: &DiscreteSac) -> Result<Self> {
        let (scorer, available, learned) = sac.acting_parts();
        let (n, chunk) = (scorer.n() as u32, scorer.chunk());
        let mut acting = match scorer.table() {
            Some(table) => ChunkedScorer::new(table.clone(), chunk, ACT_ROWS)?,
            None => ChunkedScorer::identity(n, chunk, ACT_ROWS)?,
        };
        if learned {
            // Its own copy of the values now, so that the learner's table stays unshared
            // (its updates then never copy).
            acting.update_table(|_| ())?;
        }
        let actor = sac.core.actor.clone();
        Ok(Self {
            ws: actor.workspace(ACT_ROWS),
            actor,
            scorer: acting,
            masking: available.map(|f| (Arc::clone(f), vec![ActionMask::all(n); ACT_ROWS])),
            scores: vec![0.0; ACT_ROWS],
            table_version: 0,
            learned,
            rng: ActorRng::new(sac.core.seed ^ ACTOR_SEED),
        })
    }

    /// Takes `sac`'s current weights (and learned table).
    pub(super) fn refresh(&mut self, sac: &DiscreteSac) -> Result<()> {
        copy_weights(&mut self.actor, &sac.core.actor)?;
        if self.learned
            && let Some(table) = sac.acting_parts().0.table()
        {
            let values = table.as_slice();
            let mut fits = true;
            self.scorer.update_table(|mine| {
                fits = mine.len() == values.len();
                if fits {
                    mine.copy_from_slice(values);
                }
            })?;
            if !fits {
                return Err(Error::CheckpointMismatch {
                    what: "learned action table".to_owned(),
                    expected: format!("{} values", values.len()),
                    actual: "another size".to_owned(),
                });
            }
            self.table_version += 1;
        }
        Ok(())
    }

    /// The actor network.
    pub fn network(&self) -> &Mlp {
        &self.actor
    }
}

impl Clone for DiscreteSacActor {
    fn clone(&self) -> Self {
        Self {
            actor: self.actor.clone(),
            ws: self.ws.clone(),
            scorer: self.scorer.clone(),
            masking: self.masking.clone(),
            scores: self.scores.clone(),
            table_version: self.table_version,
            learned: self.learned,
            rng: self.rng.clone(),
        }
    }

    /// Copies the weights in place; takes a newer learned table by cloning the scorer
    /// (sharing the table); keeps this copy's noise and masks.
    fn clone_from(&mut self, source: &Self) {
        if copy_weights(&mut self.actor, &source.actor).is_err() {
            *self = source.clone();
            return;
        }
        if self.table_version != source.table_version {
            self.scorer = source.scorer.clone();
            self.table_version = source.table_version;
        }
    }
}

impl Policy for DiscreteSacActor {
    type Obs = f32;
    type Act = u32;
    type State = ();

    fn act(
        &mut self,
        obs: &[f32],
        _states: &mut [()],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        DiscreteActing {
            actor: &self.actor,
            ws: &mut self.ws,
            scorer: &mut self.scorer,
            masking: self
                .masking
                .as_mut()
                .map(|(f, masks)| (&**f, masks.as_mut_slice())),
            rng: self.rng.rng(),
            scores: &mut self.scores,
            mode: Mode::Sample,
        }
        .act(obs, out.actions)
        .map_err(|e| Box::new(e) as PolicyError)
    }
}
