//! Acting with memory: one summarizer step for all environments of a call, then an
//! inner policy on the summaries; and the actor copy that collector workers act with.

use rl_collect::{ActOutput, Policy, PolicyError};
use rl_nn::Weights;

use crate::error::{Error, Result};
use crate::policy::{HistorySlot, Mode, Summary, SummaryState};

/// The acting state of one number of rows in one mode: the summarizer's state for each
/// row, its last summaries, which rows start an episode, and the inner policy's per-row
/// states (reset where a row starts an episode). Keyed by the mode too, so that an
/// evaluation (deterministic, one row) never continues from, nor leaves its memory in,
/// the state of training environments that act on as many rows.
#[derive(Debug)]
pub(super) struct Acting<S = ()> {
    rows: usize,
    mode: Mode,
    /// A new state: its first step starts every row's episode.
    fresh: bool,
    state: SummaryState,
    starts: Vec<bool>,
    pub(super) summaries: Vec<f32>,
    /// The inner policy's per-row states (empty for most; DQN's active head).
    units: Vec<S>,
}

impl<S: Default + Clone> Acting<S> {
    fn new(summary: &Summary, rows: usize, mode: Mode) -> Self {
        Self {
            rows,
            mode,
            fresh: true,
            state: summary.state(rows),
            starts: vec![true; rows],
            summaries: vec![0.0; rows * summary.output_len()],
            units: vec![S::default(); rows],
        }
    }
}

/// The acting state of `rows` rows in `mode`, made on the first call with them (later
/// calls allocate nothing).
pub(super) fn state_for<'a, S: Default + Clone>(
    acting: &'a mut Vec<Acting<S>>,
    summary: &Summary,
    rows: usize,
    mode: Mode,
) -> &'a mut Acting<S> {
    let index = match acting.iter().position(|a| a.rows == rows && a.mode == mode) {
        Some(index) => index,
        None => {
            acting.push(Acting::new(summary, rows, mode));
            acting.len() - 1
        }
    };
    &mut acting[index]
}

/// One step for `slots.len()` environments from their state `a` (of that many rows,
/// [`state_for`]): the summarizer's step from each environment's state (restarted
/// where the slot is fresh), then `head` on the summaries.
pub(super) fn act<P: Policy<Obs = f32>>(
    summary: &Summary,
    a: &mut Acting<P::State>,
    obs_len: usize,
    head: &mut P,
    obs: &[f32],
    slots: &mut [HistorySlot],
    out: ActOutput<'_, P::Act>,
) -> Result<()> {
    let rows = slots.len();
    if obs.len() != rows * obs_len {
        return Err(Error::shape("observations", rows * obs_len, obs.len()));
    }
    for ((start, slot), unit) in a.starts.iter_mut().zip(slots.iter()).zip(&mut a.units) {
        *start = a.fresh || slot.is_fresh();
        if *start {
            *unit = P::State::default();
        }
    }
    summary.step(&mut a.state, obs, &a.starts, &mut a.summaries)?;
    a.fresh = false;
    head.act(&a.summaries, &mut a.units, out)
        .map_err(|source| Error::Policy { source })?;
    slots.iter_mut().for_each(HistorySlot::set_running);
    Ok(())
}

/// The acting part of a [`super::Recurrent`] learner, for collectors that act in worker
/// threads: a copy of the summarizer, the inner learner's actor, and the acting states.
/// A clone starts every environment fresh; `clone_from` takes the source's weights in
/// place and keeps the destination's states.
///
/// `S` is the inner actor's per-environment state (`A::State`).
#[derive(Debug)]
pub struct RecurrentActor<A, S = ()> {
    pub(super) summary: Summary,
    obs_len: usize,
    inner: A,
    pub(super) acting: Vec<Acting<S>>,
}

impl<A: Clone, S> Clone for RecurrentActor<A, S> {
    fn clone(&self) -> Self {
        Self {
            summary: self.summary.clone(),
            obs_len: self.obs_len,
            inner: self.inner.clone(),
            acting: Vec::new(),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        copy_weights(&mut self.summary, &source.summary);
        self.obs_len = source.obs_len;
        self.inner.clone_from(&source.inner);
    }
}

/// Copies `source`'s weights into `dst` in place when both are the same cell.
fn copy_weights(dst: &mut Summary, source: &Summary) {
    match (dst.cell_mut(), source.cell()) {
        (Some(d), Some(s)) if d.num_params() == s.num_params() => {
            d.params_mut().copy_from_slice(s.params());
        }
        (None, None) => {}
        _ => *dst = source.clone(),
    }
}

impl<A, S> RecurrentActor<A, S> {
    pub(super) fn new(summary: Summary, obs_len: usize, inner: A) -> Self {
        Self {
            summary,
            obs_len,
            inner,
            acting: Vec::new(),
        }
    }

    /// Takes `summary`'s weights (in place) and lets `refresh` update the inner actor.
    pub(super) fn refresh(
        &mut self,
        summary: &Summary,
        refresh: impl FnOnce(&mut A) -> Result<()>,
    ) -> Result<()> {
        refresh(&mut self.inner)?;
        copy_weights(&mut self.summary, summary);
        Ok(())
    }
}

impl<A: Policy<Obs = f32>> Policy for RecurrentActor<A, A::State> {
    type Obs = f32;
    type Act = A::Act;
    type State = HistorySlot;

    fn act(
        &mut self,
        obs: &[f32],
        states: &mut [HistorySlot],
        out: ActOutput<'_, A::Act>,
    ) -> std::result::Result<(), PolicyError> {
        // A collector's copy acts for training only: one state per number of rows.
        let a = state_for(&mut self.acting, &self.summary, states.len(), Mode::Sample);
        Ok(act(
            &self.summary,
            a,
            self.obs_len,
            &mut self.inner,
            obs,
            states,
            out,
        )?)
    }
}
