//! What an inner learner does for [`Recurrent`]: train on summaries and return their
//! gradient; and [`Recurrent`] as an [`OffPolicyLearner`] the trainer drives.

use rl_core::{DType, Field, Flag, Location, MemoryPlan, Schema, TransitionSchema};
use rl_nn::Checkpoint;
use rl_nn::NetworkState;
use rl_storage::Batch;

use super::{HISTORY, HISTORY_TARGET, Recurrent, RecurrentActor, RecurrentConfig, RecurrentState};
use crate::dqn::{self, Dqn, DqnStats};
use crate::error::{Error, Result, first_difference};
use crate::learner::{Learner, OffPolicyBlueprint, OffPolicyLearner};
use crate::policy::{HistorySlot, Mode};
use crate::predict::Predict;
use crate::sac::{self, DiscreteSac, Sac, SacStats};

/// Transitions whose observations are summaries, batch-major, as a [`Recurrent`]
/// learner hands them to its inner learner.
#[derive(Clone, Copy, Debug)]
pub struct Features<'a, A> {
    /// Rows.
    pub rows: usize,
    /// `rows x summary width`.
    pub obs: &'a [f32],
    /// `rows x action length`.
    pub actions: &'a [A],
    /// One per row.
    pub rewards: &'a [f32],
    /// One per row.
    pub terminated: &'a [Flag],
    /// The next observations' summaries (by the target summarizer), `rows x width`.
    pub next_obs: &'a [f32],
    /// Importance weights, one per row.
    pub weights: &'a [f32],
    /// Storage positions of the rows (bootstrap masks are drawn from them, so a row
    /// keeps its mask in every window it is replayed in); `None` where there are none.
    pub positions: Option<&'a [usize]>,
}

mod seal {
    /// Implemented by this crate's learners only.
    pub trait Sealed {}
}

impl seal::Sealed for DiscreteSac {}
impl seal::Sealed for Sac {}
impl seal::Sealed for Dqn<f32> {}

/// An off-policy learner that can sit behind a summarizer in a [`Recurrent`]
/// learner: [`Sac`], [`DiscreteSac`] and [`Dqn`] (sealed). It learns from [`Features`] and gives
/// the gradient of the loss that trains the summarizer (critics' for SAC, TD for DQN)
/// with respect to the summaries.
pub trait SequenceLearner:
    OffPolicyLearner<Obs = f32, State: 'static> + seal::Sealed + std::fmt::Debug
{
    /// The checkpoint kind of the recurrent form (`recurrent_` and the inner kind).
    const RECURRENT_KIND: &'static str;

    /// Elements of one action in the replay buffer.
    fn action_len(&self) -> usize;

    /// Checks the learner can train on summaries `width` wide and sizes what returning
    /// their gradient needs.
    ///
    /// # Errors
    /// [`Error::Config`] when it cannot.
    fn prepare_for_summaries(&mut self, width: usize) -> Result<()>;

    /// The blueprint of such a learner behind a summarizer, from its own `blueprint` for
    /// summaries `width` wide: what [`SequenceLearner::prepare_for_summaries`] adds, so
    /// that [`Recurrent::blueprint`] plans what [`Recurrent::new`] builds.
    ///
    /// # Errors
    /// [`Error::Config`] for a blueprint of another width.
    fn blueprint_for_summaries(
        blueprint: OffPolicyBlueprint,
        width: usize,
    ) -> Result<OffPolicyBlueprint>
    where
        Self: Sized,
    {
        check_width(obs_width(&blueprint), width)?;
        Ok(blueprint)
    }

    /// The replay columns for observations of `obs_len` elements.
    ///
    /// # Errors
    /// None in practice.
    fn schema_for(&self, obs_len: usize) -> Result<Schema>;

    /// One update on `features`; writes the loss's gradient with respect to
    /// `features.obs` into `obs_grads`.
    ///
    /// # Errors
    /// As the learner's own update.
    fn update_summaries(
        &mut self,
        features: Features<'_, Self::Act>,
        obs_grads: &mut [f32],
    ) -> Result<Self::Stats>;
}

/// The replay columns of a learner with `u32` action indices.
fn index_schema(obs_len: usize) -> Result<Schema> {
    Ok(
        TransitionSchema::new(DType::F32, &[obs_len], DType::U32, &[])
            .with_next_obs()
            .build()?,
    )
}

/// SAC's view of [`Features`] (SAC reads no importance weights).
fn sac_transitions<A>(f: Features<'_, A>) -> sac::Transitions<'_, A> {
    sac::Transitions {
        rows: f.rows,
        obs: f.obs,
        actions: f.actions,
        rewards: f.rewards,
        terminated: f.terminated,
        next_obs: f.next_obs,
        positions: f.positions,
    }
}

/// The observation width of a blueprint's replay columns.
fn obs_width(blueprint: &OffPolicyBlueprint) -> usize {
    blueprint
        .replay_schema
        .column(Field::Obs.name())
        .map_or(0, |c| c.numel())
}

/// Refuses an inner learner built for observations of another width than the summaries.
fn check_width(expected: usize, width: usize) -> Result<()> {
    if expected != width {
        return Err(Error::config(
            "recurrent inner learner",
            format!(
                "takes observations of {expected} elements but the summaries have {width}: build it for the space it is given"
            ),
        ));
    }
    Ok(())
}

impl SequenceLearner for DiscreteSac {
    const RECURRENT_KIND: &'static str = "recurrent_discrete_sac";

    fn action_len(&self) -> usize {
        1
    }

    fn prepare_for_summaries(&mut self, width: usize) -> Result<()> {
        check_width(self.obs_dim(), width)?;
        if self.is_masked() {
            return Err(Error::config(
                "action masks",
                "read raw observations, which a recurrent learner replaces by summaries: drop the mask function or the history",
            ));
        }
        self.enable_obs_grads()
    }

    fn blueprint_for_summaries(
        mut blueprint: OffPolicyBlueprint,
        width: usize,
    ) -> Result<OffPolicyBlueprint> {
        check_width(obs_width(&blueprint), width)?;
        let (name, bytes) = sac::obs_grads_line(blueprint.batch_size, width)?;
        blueprint.learner.add(name, Location::Ram, bytes);
        Ok(blueprint)
    }

    fn schema_for(&self, obs_len: usize) -> Result<Schema> {
        index_schema(obs_len)
    }

    fn update_summaries(
        &mut self,
        f: Features<'_, u32>,
        obs_grads: &mut [f32],
    ) -> Result<SacStats> {
        self.update_transitions(sac_transitions(f), Some(obs_grads))
    }
}

impl SequenceLearner for Sac {
    const RECURRENT_KIND: &'static str = "recurrent_sac";

    fn action_len(&self) -> usize {
        self.dims().1
    }

    fn prepare_for_summaries(&mut self, width: usize) -> Result<()> {
        check_width(self.dims().0, width)
    }

    fn schema_for(&self, obs_len: usize) -> Result<Schema> {
        Ok(
            TransitionSchema::new(DType::F32, &[obs_len], DType::F32, &[self.dims().1])
                .with_next_obs()
                .build()?,
        )
    }

    fn update_summaries(
        &mut self,
        f: Features<'_, f32>,
        obs_grads: &mut [f32],
    ) -> Result<SacStats> {
        self.update_transitions(sac_transitions(f), Some(obs_grads))
    }
}

impl SequenceLearner for Dqn<f32> {
    const RECURRENT_KIND: &'static str = "recurrent_dqn";

    fn action_len(&self) -> usize {
        1
    }

    fn prepare_for_summaries(&mut self, width: usize) -> Result<()> {
        check_width(self.obs_dim(), width)
    }

    fn schema_for(&self, obs_len: usize) -> Result<Schema> {
        index_schema(obs_len)
    }

    fn update_summaries(
        &mut self,
        f: Features<'_, u32>,
        obs_grads: &mut [f32],
    ) -> Result<DqnStats> {
        let transitions = dqn::Transitions {
            rows: f.rows,
            obs: f.obs,
            actions: f.actions,
            rewards: f.rewards,
            terminated: f.terminated,
            next_obs: f.next_obs,
            weights: f.weights,
            positions: f.positions,
        }
        .check(self.obs_dim(), self.n_actions())?;
        self.update_transitions(transitions, Some(obs_grads))
    }
}

impl<L: SequenceLearner> rl_collect::Policy for Recurrent<L> {
    type Obs = f32;
    type Act = L::Act;
    type State = HistorySlot;

    fn act(
        &mut self,
        obs: &[f32],
        states: &mut [HistorySlot],
        out: rl_collect::ActOutput<'_, L::Act>,
    ) -> std::result::Result<(), rl_collect::PolicyError> {
        Ok(self.act_rows(obs, states, out)?)
    }
}

impl<L: SequenceLearner> Predict for Recurrent<L> {
    fn mode(&self) -> Mode {
        Recurrent::mode(self)
    }

    fn set_mode(&mut self, mode: Mode) {
        self.inner.set_mode(mode);
    }
}

impl<L: SequenceLearner> Learner for Recurrent<L> {
    type Saved = RecurrentState<L::Saved>;

    fn kind(&self) -> &'static str {
        L::RECURRENT_KIND
    }

    fn updates(&self) -> u64 {
        self.inner.updates()
    }

    /// The inner learner's products run on `pool`; the summarizer's steps stay on the
    /// caller (each is a product of a few rows).
    fn set_pool(&mut self, pool: Option<std::sync::Arc<rl_nn::Pool>>) {
        self.inner.set_pool(pool);
    }

    /// Everything the learner holds: the inner learner's plan, the summarizer and its
    /// target (an LSTM's parameters, gradients and Adam moments), the update's states,
    /// replay workspace and buffers ([`Recurrent::blueprint`]). Acting states come on
    /// top, one per number of rows acted on (`Recurrent::acting_plan`). Constant for the
    /// learner's life.
    fn memory_plan(&self) -> MemoryPlan {
        self.blueprint.learner.clone()
    }

    /// The whole learner: the inner learner's networks and state, the summarizer
    /// (`history`, with its Adam moments) and its target (`history_target`), and this
    /// configuration.
    fn checkpoint(&self) -> Checkpoint<'_, Self::Saved> {
        let inner = self.inner.checkpoint();
        let mut networks = inner.networks;
        if let (Some(cell), Some(target)) = (self.summary.cell(), self.target.cell()) {
            networks.push(NetworkState::capture(HISTORY, cell, self.adam.as_ref()));
            networks.push(NetworkState::capture(HISTORY_TARGET, target, None));
        }
        Checkpoint {
            kind: L::RECURRENT_KIND.to_owned(),
            networks,
            state: RecurrentState {
                config: self.config.clone(),
                seed: self.seed,
                inner: inner.state,
            },
        }
    }

    /// Restores a [`Recurrent::checkpoint`](crate::learner::Learner::checkpoint) of a learner built the same way; everything
    /// is checked first, and on error nothing changes.
    ///
    /// # Errors
    /// [`Error::CheckpointMismatch`] for another configuration or architecture, and the
    /// inner learner's restore errors.
    fn restore(&mut self, checkpoint: &Checkpoint<Self::Saved>) -> Result<()> {
        first_difference!(
            RecurrentConfig,
            "recurrent",
            &self.config,
            &checkpoint.state.config,
            [history, seq_len, burn_in, adam, tau, max_grad_norm],
            except []
        )?;
        if self.seed != checkpoint.state.seed {
            return Err(Error::CheckpointMismatch {
                what: "recurrent.seed".to_owned(),
                expected: self.seed.to_string(),
                actual: checkpoint.state.seed.to_string(),
            });
        }
        let (ours, theirs): (Vec<_>, Vec<_>) = checkpoint
            .networks
            .iter()
            .cloned()
            .partition(|n| n.name == HISTORY || n.name == HISTORY_TARGET);
        let mut summary = self.summary.clone();
        let mut target = self.target.clone();
        let mut adam = self.adam.clone();
        if let (Some(cell), Some(target_cell)) = (summary.cell_mut(), target.cell_mut()) {
            let find = |name: &str| {
                ours.iter()
                    .find(|n| n.name == name)
                    .ok_or_else(|| Error::CheckpointMismatch {
                        what: format!("network {name}"),
                        expected: "the summarizer's weights".to_owned(),
                        actual: "none in the checkpoint".to_owned(),
                    })
            };
            find(HISTORY)?.restore_into(cell, adam.as_mut())?;
            find(HISTORY_TARGET)?.restore_into(target_cell, None)?;
        } else if !ours.is_empty() {
            return Err(Error::CheckpointMismatch {
                what: "summarizer".to_owned(),
                expected: format!("{} (no weights)", self.config.history),
                actual: "a summarizer with weights".to_owned(),
            });
        }
        let inner = Checkpoint {
            kind: self.inner.kind().to_owned(),
            networks: theirs,
            state: checkpoint.state.inner.clone(),
        };
        self.inner.restore(&inner)?;
        self.summary = summary;
        self.target = target;
        self.adam = adam;
        Ok(())
    }
}

impl<L: SequenceLearner> OffPolicyLearner for Recurrent<L> {
    type Stats = L::Stats;
    type Actor = RecurrentActor<L::Actor, L::State>;

    /// What it holds, reads (replay columns of raw observations, batches of `windows x
    /// (burn_in + seq_len)` rows, windows of [`SequenceSpec`](crate::learner::SequenceSpec)) and asks of its actors.
    fn blueprint(&self) -> &OffPolicyBlueprint {
        &self.blueprint
    }

    fn update(&mut self, batch: &Batch) -> Result<L::Stats> {
        Recurrent::update(self, batch)
    }

    fn priorities(&self) -> Option<&[f32]> {
        None
    }

    fn set_env_steps(&mut self, env_steps: u64) {
        self.inner.set_env_steps(env_steps);
    }

    fn actor(&self) -> Result<Self::Actor> {
        Ok(RecurrentActor::new(
            self.summary.clone(),
            self.obs_len,
            self.inner.actor()?,
        ))
    }

    fn refresh_actor(&self, actor: &mut Self::Actor) -> Result<()> {
        actor.refresh(&self.summary, |inner| self.inner.refresh_actor(inner))
    }
}
