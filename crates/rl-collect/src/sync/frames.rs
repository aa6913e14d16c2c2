//! Collection into a deduplicating replay buffer whose observations are stacks of
//! frames ([`DedupReplay::with_frame_stack`]): each step stores only its newest frame,
//! the sampler rebuilds the stacks, so a frame is stored once instead of `2 x stack`
//! times (the stack in `obs` and again in `next_obs`).

use rl_core::Env;
use rl_storage::{ColumnSlice, dedup::DedupReplay, sampler::Sampler, storage::HostStorage};

use super::{BatchReport, Layout, SyncCollector, element_slice};
use crate::error::{Error, Result};
use crate::policy::{Policy, RandomAction};

impl<E, P> SyncCollector<E, P>
where
    E: Env,
    E::Act: RandomAction,
    P: Policy<Obs = E::Obs, Act = E::Act>,
{
    /// Collects `frames_per_batch` frames (fewer if `total_frames` is reached) into
    /// `replay`, whose observations are the environment's stacks of
    /// [`DedupReplay::frame_stack`] frames, oldest first: each step pushes its
    /// observation's newest frame with the action, reward and flags, and an episode's
    /// end its final observation's newest frame ([`DedupReplay::push_step`]).
    ///
    /// The environment's observations must be frame stacks as the buffer rebuilds them:
    /// every observation is the previous one shifted by one frame, and an episode's
    /// first observation repeats its one frame in every slot (Gymnasium's
    /// `FrameStackObservation` default padding, `rl_envs::StackPadding::Repeat`). Each
    /// step checks both (a comparison of the stack's bytes); a mismatch is an error
    /// before anything of that step is stored, so what the buffer gives back is what
    /// the environment showed.
    ///
    /// # Errors
    /// More than one environment (a deduplicating buffer holds one stream of steps), a
    /// schema without the five step columns or with others, observations that are not
    /// `frame_stack` frames of the buffer's `obs` column, observations that are not
    /// shifted stacks; an environment's or the policy's error (the collector then
    /// stops); a storage error.
    pub fn collect_frames<S: HostStorage, Q: Sampler>(
        &mut self,
        replay: &mut DedupReplay<S, Q>,
    ) -> Result<BatchReport> {
        self.check_running()?;
        if self.lanes.len() != 1 {
            return Err(Error::config(
                "environments",
                format!(
                    "are {}: a deduplicating replay buffer holds one stream of consecutive steps, collect into it with one environment",
                    self.lanes.len()
                ),
            ));
        }
        let columns = replay.buffer().schema().columns();
        let layout = Layout::frames(&columns[..columns.len() - 1])?;
        let stack = replay.frame_stack();
        let obs_column = replay
            .buffer()
            .schema()
            .index_of(rl_core::Field::Obs.name())
            .map(|i| &columns[i]);
        let frame = obs_column.map_or(0, |c| c.numel());
        if obs_column.is_none_or(|c| c.dtype() != <E::Obs as rl_core::Element>::DTYPE)
            || frame * stack != self.lanes.obs_len
        {
            return Err(Error::config(
                "deduplicating replay column `obs`",
                format!(
                    "holds {stack} frame(s) of {frame} elements per sampled observation; the environment's observations are {} x {}: store one frame of the stack per row (its shape without the leading stack dimension)",
                    <E::Obs as rl_core::Element>::DTYPE,
                    self.lanes.obs_len
                ),
            ));
        }
        Layout::check_widths::<E::Obs, E::Act>(
            replay.buffer().schema(),
            "deduplicating replay",
            frame,
            self.lanes.act_len,
        )?;
        let steps = self.batch_steps();
        for _ in 0..steps {
            let result = self.frames_step(replay, &layout, frame, stack);
            if result.is_err() {
                self.failed = true;
                return result.map(|()| self.report(0));
            }
        }
        Ok(self.report(steps as u64 * self.lanes.len() as u64))
    }

    fn frames_step<S: HostStorage, Q: Sampler>(
        &mut self,
        replay: &mut DedupReplay<S, Q>,
        layout: &Layout,
        frame: usize,
        stack: usize,
    ) -> Result<()> {
        let first = self.lanes.lengths[0] == 0;
        if first {
            check_padding(&self.lanes.obs, frame, self.steps)?;
        }
        self.decide()?;
        self.lanes.step(&self.actions, self.steps)?;
        let lanes = &self.lanes;
        check_shift(&lanes.obs, &lanes.next_obs, frame, self.steps)?;
        let newest = (stack - 1) * frame..stack * frame;
        let columns = layout.arrange([
            element_slice(&lanes.obs[newest.clone()]),
            element_slice(&self.actions),
            (&lanes.rewards).into(),
            (&lanes.terminated).into(),
            (&lanes.truncated).into(),
            ColumnSlice::F32(&[]),
            ColumnSlice::F32(&[]),
            ColumnSlice::F32(&[]),
            ColumnSlice::F32(&[]),
        ]);
        let ended = lanes.terminated[0].get() || lanes.truncated[0].get();
        let final_frame = ended.then(|| element_slice(&lanes.next_obs[newest]));
        replay.push_step(layout.columns(&columns), final_frame)?;
        self.advance()
    }
}

/// The error for observations that are not stacks of frames as a deduplicating buffer
/// rebuilds them.
fn not_stacked(step: u64, what: &str) -> Error {
    Error::config(
        "frame stack",
        format!(
            "environment 0 at step {step}: {what}; a deduplicating replay buffer stores one frame per step and rebuilds the stacks, so it needs observations stacked as Gymnasium's FrameStackObservation does (first frame repeated): stack the frames that way, or store whole observations (leave off_policy.frame_stack out)"
        ),
    )
}

/// Checks that an episode's first observation repeats its newest frame in every slot.
fn check_padding<O: rl_core::Element>(obs: &[O], frame: usize, step: u64) -> Result<()> {
    let bytes: &[u8] = bytemuck::cast_slice(obs);
    let frame_bytes = frame * size_of::<O>();
    let (older, newest) = bytes.split_at(bytes.len() - frame_bytes);
    if older.chunks_exact(frame_bytes).any(|slot| slot != newest) {
        return Err(not_stacked(
            step,
            "the first observation of an episode does not repeat its frame in every slot of the stack",
        ));
    }
    Ok(())
}

/// Checks that `next` is `obs` shifted by one frame (its older frames are `obs`'s newer
/// ones).
fn check_shift<O: rl_core::Element>(obs: &[O], next: &[O], frame: usize, step: u64) -> Result<()> {
    let (obs, next): (&[u8], &[u8]) = (bytemuck::cast_slice(obs), bytemuck::cast_slice(next));
    let frame_bytes = frame * size_of::<O>();
    if obs[frame_bytes..] != next[..next.len() - frame_bytes] {
        return Err(not_stacked(
            step,
            "the next observation is not the observation shifted by one frame",
        ));
    }
    Ok(())
}
