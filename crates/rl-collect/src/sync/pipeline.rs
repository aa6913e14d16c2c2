//! Rollouts with the environments stepped on one thread while the policy acts on
//! another ([`SyncCollector::set_beside`]).
//!
//! The environments are split into two halves, `A` (the first `n / 2`) and `B`. Each
//! step runs in two phases: `A`'s environments step while the policy acts for `B`, then
//! `B`'s environments step while the policy acts for `A` on the observations `A`'s step
//! just gave. The policy acts for the halves in the order the whole batch would be
//! acted on (`A` then `B`, step after step), so a stateless policy whose rows do not
//! depend on each other draws the same actions and gives the same rollout as
//! [`SyncCollector::collect_rollout`] without a `Beside`: the environments only run at
//! other times. The environments stay on the calling thread (they may hold objects that
//! cannot leave it, as Python's do); only the policy moves.

use std::ops::Range;
use std::sync::Arc;

use rl_core::Env;
use rl_storage::rollout::RolloutBuffer;

use super::{Layout, SyncCollector};
use crate::error::{Error, Result};
use crate::policy::{ActOutput, RandomAction, ValuePolicy};

/// Runs one closure on the calling thread and another on a second thread at the same
/// time: what a [`SyncCollector`] needs of a thread pool to act for some environments
/// while it steps the others (`rl_nn::Pool::join` behind a newtype, as `rl-train` does).
pub trait Beside: Send + Sync + std::fmt::Debug {
    /// Runs `on_caller` on the calling thread and `on_worker` on another thread, side by
    /// side, each exactly once, and returns when both have (a collector panics if one
    /// did not run; a panic in either is the implementation's to propagate).
    fn beside(&self, on_caller: &mut dyn FnMut(), on_worker: &mut (dyn FnMut() + Send));
}

/// `a()` on the calling thread beside `b()` on another thread, through `beside`.
fn side_by_side<RA, RB: Send>(
    beside: &dyn Beside,
    a: impl FnOnce() -> RA,
    b: impl FnOnce() -> RB + Send,
) -> (RA, RB) {
    let (mut a, mut ra) = (Some(a), None);
    let (mut b, mut rb) = (Some(b), None);
    beside.beside(&mut || ra = a.take().map(|a| a()), &mut || {
        rb = b.take().map(|b| b())
    });
    match (ra, rb) {
        (Some(ra), Some(rb)) => (ra, rb),
        _ => panic!("a Beside returned before running both closures"),
    }
}

/// Where the policy reads the observations it acts on.
#[derive(Clone, Copy)]
enum Read {
    /// The current observations (`B` in the first phase of a step).
    Current,
    /// The next observations (`A` in the second phase: its next step's).
    Next,
}

impl<E, P> SyncCollector<E, P>
where
    E: Env,
    E::Act: RandomAction,
    P: ValuePolicy<Obs = E::Obs, Act = E::Act> + Send,
    P::State: Send,
{
    /// The second thread a rollout may act on, or `None` for the one-thread loop: only
    /// for a feed-forward policy (acting for `A` ahead of `B`'s step must not change a
    /// state the step's values read), at least two environments, and no random frames
    /// left.
    pub(super) fn pipelines(&self) -> Option<Arc<dyn Beside>> {
        let ready = self.lanes.len() >= 2
            && self.policy.stateless()
            && self.frames >= self.config.random_frames;
        self.beside.clone().filter(|_| ready)
    }

    /// [`SyncCollector::fill_rollout`] in two phases per step (see the module's doc).
    pub(super) fn fill_rollout_beside(
        &mut self,
        beside: &dyn Beside,
        rollout: &mut RolloutBuffer,
        layout: &Layout,
        steps: usize,
    ) -> Result<()> {
        let n = self.lanes.len();
        if steps == 0 {
            return Ok(());
        }
        let (a, b) = (0..n / 2, n / 2..n);
        // The first step's actions for `A`, with the whole pool.
        self.act_on(a.clone())?;
        for t in 0..steps {
            let last = t + 1 == steps;
            self.phase(beside, a.clone(), b.clone(), Read::Current)?;
            if last {
                // Nothing to act on ahead: the next rollout acts with new weights.
                let actions = &self.actions[b.start * self.lanes.act_len..];
                self.lanes.stepper(b.clone()).0.step(actions, self.steps)?;
                self.final_values(0..n, true)?;
                self.push(rollout, layout, false)?;
                self.advance()?;
                break;
            }
            self.final_values(a.clone(), false)?;
            self.pending.actions.copy_from_slice(&self.actions);
            self.pending.log_probs.copy_from_slice(&self.log_probs);
            self.pending.values.copy_from_slice(&self.values);
            let states = &mut self.states;
            self.lanes
                .finish(a.clone(), &mut self.stats, self.steps, |i| {
                    states[i] = Default::default();
                })?;
            self.phase(beside, b.clone(), a.clone(), Read::Next)?;
            self.final_values(b.clone(), false)?;
            self.push(rollout, layout, true)?;
            let states = &mut self.states;
            self.lanes
                .finish(b.clone(), &mut self.stats, self.steps, |i| {
                    states[i] = Default::default();
                })?;
            self.lanes.swap_observations();
            self.steps += 1;
            self.frames += n as u64;
        }
        Ok(())
    }

    /// Steps the environments `step` on this thread while the policy acts for `act`
    /// (reading `read`) on `beside`'s other thread.
    fn phase(
        &mut self,
        beside: &dyn Beside,
        step: Range<usize>,
        act: Range<usize>,
        read: Read,
    ) -> Result<()> {
        let (obs_len, act_len, at) = (self.lanes.obs_len, self.lanes.act_len, self.steps);
        let (mut stepper, obs, next_obs) = self.lanes.stepper(step.clone());
        // `next_obs` holds the lanes outside `step`, which are `act` (the other half).
        let rows = match read {
            Read::Current => &obs[act.start * obs_len..act.end * obs_len],
            Read::Next => next_obs,
        };
        let (stepped, acting) = split_halves(&mut self.actions, act_len, &step);
        let (_, log_probs) = split_halves(&mut self.log_probs, 1, &step);
        let (_, values) = split_halves(&mut self.values, 1, &step);
        let (policy, states) = (&mut self.policy, &mut self.states[act]);
        let (stepped_ok, acted) = side_by_side(
            beside,
            || stepper.step(stepped, at),
            || {
                let out = ActOutput {
                    actions: acting,
                    log_probs,
                    values,
                };
                policy.act(rows, states, out)
            },
        );
        stepped_ok?;
        acted.map_err(|source| Error::Policy { step: at, source })
    }
}

/// `(the part of `all` for the lanes `step`, the rest)`, `width` elements per lane;
/// `step` is a prefix or a suffix of the lanes.
fn split_halves<'a, T>(
    all: &'a mut [T],
    width: usize,
    step: &Range<usize>,
) -> (&'a [T], &'a mut [T])
where
    T: Copy,
{
    if step.start == 0 {
        let (mine, rest) = all.split_at_mut(step.end * width);
        (mine, rest)
    } else {
        let (rest, mine) = all.split_at_mut(step.start * width);
        (mine, rest)
    }
}

/// Step `t`'s actions and extras, kept while the policy acts for `A`'s step `t + 1`.
#[derive(Debug)]
pub(super) struct Pending<A> {
    pub(super) actions: Vec<A>,
    pub(super) log_probs: Vec<f32>,
    pub(super) values: Vec<f32>,
}

impl<A: Copy + Default> Pending<A> {
    /// Room for `n` environments' actions of `act_len` elements.
    pub(super) fn new(n: usize, act_len: usize) -> Self {
        Self {
            actions: vec![A::default(); n * act_len],
            log_probs: vec![0.0; n],
            values: vec![0.0; n],
        }
    }
}
