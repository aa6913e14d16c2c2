//! A batch of environments stepped together: the stepping core shared by the synchronous
//! collector and every worker of the asynchronous one.

use std::ops::Range;

use rl_core::{DType, Element, Env, Flag, Location, MemoryPlan, NonFinite, Space};

use crate::error::{Error, Result};
use crate::stats::EpisodeStats;

/// `N` environments with their observation, transition and episode buffers, all
/// allocated at construction.
///
/// One batched step: [`Lanes::step`] applies `actions` to every environment and writes the
/// transition (`obs`, reward, flags, and the true next observation: the final one for
/// episodes that ended); then [`Lanes::advance`] makes the next observations current and
/// resets the environments whose episode ended. Between the two, the transition can be
/// written anywhere (a replay buffer, a rollout, a chunk) straight from these buffers.
#[derive(Debug)]
pub(crate) struct Lanes<E: Env> {
    pub(crate) envs: Vec<E>,
    pub(crate) obs_len: usize,
    pub(crate) act_len: usize,
    /// Current observations, `N x obs_len`.
    pub(crate) obs: Vec<E::Obs>,
    /// Next observations of the last step (final observations where an episode ended).
    pub(crate) next_obs: Vec<E::Obs>,
    pub(crate) rewards: Vec<f32>,
    pub(crate) terminated: Vec<Flag>,
    pub(crate) truncated: Vec<Flag>,
    pub(crate) returns: Vec<f64>,
    pub(crate) lengths: Vec<u32>,
    check_finite: bool,
}

/// Checks that there is at least one environment and that all share the first one's
/// spaces; returns those spaces.
pub(crate) fn check_envs<E: Env>(envs: &[E]) -> Result<(Space, Space)> {
    let Some(first) = envs.first() else {
        return Err(Error::config(
            "environments",
            "is empty: give at least one environment",
        ));
    };
    let (observation_space, action_space) = (
        first.observation_space().clone(),
        first.action_space().clone(),
    );
    if let Some(i) = envs.iter().position(|e| {
        e.observation_space() != &observation_space || e.action_space() != &action_space
    }) {
        return Err(Error::config(
            format!("environment {i}"),
            "has other observation or action spaces than environment 0: all environments must match",
        ));
    }
    Ok((observation_space, action_space))
}

impl<E: Env> Lanes<E> {
    /// Takes the environments, checks they share their spaces, and resets environment `i`
    /// with seed `seed + i`.
    pub(crate) fn new(mut envs: Vec<E>, seed: u64, non_finite: NonFinite) -> Result<Self> {
        let check_finite = non_finite == NonFinite::Reject;
        let (observation_space, action_space) = check_envs(&envs)?;
        if observation_space.dtype() != E::Obs::DTYPE || action_space.dtype() != E::Act::DTYPE {
            return Err(Error::config(
                "environment spaces",
                "do not match the environment's element types",
            ));
        }
        let n = envs.len();
        let (obs_len, act_len) = (observation_space.flat_len(), action_space.flat_len());
        let mut obs = vec![E::Obs::default(); n * obs_len];
        for (i, (env, o)) in envs
            .iter_mut()
            .zip(obs.chunks_exact_mut(obs_len))
            .enumerate()
        {
            env.reset(Some(seed.wrapping_add(i as u64)), o)
                .map_err(|source| Error::Env {
                    env: i,
                    step: 0,
                    source,
                })?;
        }
        Ok(Self {
            envs,
            obs_len,
            act_len,
            next_obs: obs.clone(),
            obs,
            rewards: vec![0.0; n],
            terminated: vec![Flag::default(); n],
            truncated: vec![Flag::default(); n],
            returns: vec![0.0; n],
            lengths: vec![0; n],
            check_finite,
        })
    }

    /// Number of environments.
    pub(crate) fn len(&self) -> usize {
        self.envs.len()
    }

    /// Steps every environment with `actions` (row after row) into the next
    /// observations, rewards and flags.
    ///
    /// # Errors
    /// An environment's error, or a non-finite reward or observation where they are
    /// rejected.
    pub(crate) fn step(&mut self, actions: &[E::Act], step: u64) -> Result<()> {
        let all = 0..self.len();
        self.stepper(all).0.step(actions, step)
    }

    /// The environments `lanes` (a prefix or a suffix of them) with what their steps
    /// write, beside what those steps leave alone and another thread may read meanwhile:
    /// every current observation, and the next observations of the other lanes.
    pub(crate) fn stepper(
        &mut self,
        lanes: Range<usize>,
    ) -> (Stepper<'_, E>, &[E::Obs], &[E::Obs]) {
        let (n, obs_len) = (self.len(), self.obs_len);
        assert!(
            lanes.start <= lanes.end && lanes.end <= n && (lanes.start == 0 || lanes.end == n),
            "lanes {lanes:?} of {n} are not a prefix or a suffix"
        );
        let (head, tail) = self.next_obs.split_at_mut(lanes.start * obs_len);
        let (next_obs, rest) = if lanes.start == 0 {
            let (mine, rest) = tail.split_at_mut(lanes.len() * obs_len);
            (mine, &*rest)
        } else {
            (tail, &*head)
        };
        let stepper = Stepper {
            envs: &mut self.envs[lanes.clone()],
            next_obs,
            rewards: &mut self.rewards[lanes.clone()],
            terminated: &mut self.terminated[lanes.clone()],
            truncated: &mut self.truncated[lanes.clone()],
            first: lanes.start,
            obs_len,
            act_len: self.act_len,
            check_finite: self.check_finite,
        };
        (stepper, &self.obs, rest)
    }

    /// Makes the next observations current, records finished episodes in `stats`, and
    /// resets their environments (calling `on_reset(i)`, e.g. to clear policy state).
    pub(crate) fn advance(
        &mut self,
        stats: &mut EpisodeStats,
        step: u64,
        on_reset: impl FnMut(usize),
    ) -> Result<()> {
        self.finish(0..self.len(), stats, step, on_reset)?;
        self.swap_observations();
        Ok(())
    }

    /// The part of [`Lanes::advance`] for environments `lanes`, before the observation
    /// buffers are swapped: adds the step to their returns and lengths, records finished
    /// episodes in `stats` (frames counted for all environments at `step`), and resets
    /// their environments into the next observations (calling `on_reset(i)`).
    pub(crate) fn finish(
        &mut self,
        lanes: Range<usize>,
        stats: &mut EpisodeStats,
        step: u64,
        mut on_reset: impl FnMut(usize),
    ) -> Result<()> {
        for i in lanes {
            self.returns[i] += f64::from(self.rewards[i]);
            self.lengths[i] += 1;
            let (terminated, truncated) = (self.terminated[i].get(), self.truncated[i].get());
            if terminated || truncated {
                let frames = (step + 1) * self.len() as u64;
                stats.record_at(
                    self.returns[i] as f32,
                    self.lengths[i],
                    terminated,
                    Some(frames),
                );
                self.returns[i] = 0.0;
                self.lengths[i] = 0;
                let obs = &mut self.next_obs[i * self.obs_len..(i + 1) * self.obs_len];
                self.envs[i].reset(None, obs).map_err(|source| Error::Env {
                    env: i,
                    step,
                    source,
                })?;
                on_reset(i);
            }
        }
        Ok(())
    }

    /// Swaps the current and next observations (after [`Lanes::finish`] of every lane).
    pub(crate) fn swap_observations(&mut self) {
        std::mem::swap(&mut self.obs, &mut self.next_obs);
    }
}

/// Some of the lanes' environments and what their steps write ([`Lanes::stepper`]).
pub(crate) struct Stepper<'a, E: Env> {
    envs: &'a mut [E],
    next_obs: &'a mut [E::Obs],
    rewards: &'a mut [f32],
    terminated: &'a mut [Flag],
    truncated: &'a mut [Flag],
    /// The index of `envs[0]` among all lanes (errors name environments by it).
    first: usize,
    obs_len: usize,
    act_len: usize,
    check_finite: bool,
}

impl<E: Env> Stepper<'_, E> {
    /// Steps each environment with its action of `actions` (one per environment, row
    /// after row).
    ///
    /// # Errors
    /// An environment's error, or a non-finite reward or observation where they are
    /// rejected.
    pub(crate) fn step(&mut self, actions: &[E::Act], step: u64) -> Result<()> {
        let (obs_len, act_len) = (self.obs_len, self.act_len);
        for (i, (env, next)) in self
            .envs
            .iter_mut()
            .zip(self.next_obs.chunks_exact_mut(obs_len))
            .enumerate()
        {
            let env_index = self.first + i;
            let outcome = env
                .step(&actions[i * act_len..(i + 1) * act_len], next)
                .map_err(|source| Error::Env {
                    env: env_index,
                    step,
                    source,
                })?;
            if self.check_finite && !outcome.reward.is_finite() {
                return Err(Error::NonFiniteReward {
                    env: env_index,
                    step,
                    value: outcome.reward,
                });
            }
            self.rewards[i] = outcome.reward;
            self.terminated[i] = Flag::new(outcome.terminated);
            self.truncated[i] = Flag::new(outcome.truncated);
        }
        if self.check_finite && E::Obs::DTYPE == DType::F32 {
            let values: &[f32] = bytemuck::cast_slice(self.next_obs);
            // A branch-free scan first (it vectorises); the position only on failure.
            const EXPONENT: u32 = 0x7f80_0000;
            let any = values.iter().fold(false, |found, v| {
                found | (v.to_bits() & EXPONENT == EXPONENT)
            });
            if let Some(at) = any
                .then(|| values.iter().position(|v| !v.is_finite()))
                .flatten()
            {
                return Err(Error::NonFiniteObservation {
                    env: self.first + at / obs_len,
                    step,
                    element: at % obs_len,
                    value: values[at],
                });
            }
        }
        Ok(())
    }
}

/// What the lanes of `n` environments with observations of `obs_len` elements of `O`
/// hold: both observation buffers and the per-environment scalars (reward, two flags,
/// return, length). Known before any environment exists.
pub(crate) fn plan<O: Element>(n: usize, obs_len: usize) -> MemoryPlan {
    let n = n as u64;
    let obs = 2 * n * (obs_len * size_of::<O>()) as u64;
    let per_env = n * (4 + 2 + 8 + 4) as u64;
    MemoryPlan::new()
        .with("lanes/observations", Location::Ram, obs)
        .with("lanes/per-environment", Location::Ram, per_env)
}
