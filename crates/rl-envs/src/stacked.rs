//! [`FrameStacked`]: any environment of `u8` frames with observations of its last `k`
//! frames, as Gymnasium's `FrameStackObservation` makes them.

use rl_core::env::check_len;
use rl_core::{BoxSpace, DType, Env, Error, Result, Space, Step};

use crate::pixels::{FrameStack, StackPadding};

/// An environment whose observations are the last `k` frames of `E`'s, oldest first,
/// stacked along the first dimension (a frame of shape `[c, h, w]` gives `[k c, h, w]`;
/// a frame of shape `[h, w]` gives `[k, h, w]`), an episode's first frame repeated
/// behind it ([`StackPadding::Repeat`], Gymnasium's default). The observations a
/// frame-stacked replay buffer stores once per frame
/// (`rl_storage::dedup::DedupReplay::with_frame_stack`, the trainer's
/// `off_policy.frame_stack`). Buffers are sized at construction; `step` and `reset`
/// allocate nothing.
///
/// ```
/// use rl_core::{Env, Space};
/// use rl_envs::{Catch, FrameStacked};
///
/// let mut env = FrameStacked::new(Catch::new(0), 2)?;
/// let Space::Box(space) = env.observation_space() else { unreachable!() };
/// assert_eq!(space.shape(), &[2, 10, 5]);
/// let mut obs = vec![0u8; 100];
/// env.reset(Some(0), &mut obs)?;
/// assert_eq!(obs[..50], obs[50..]); // the first frame, repeated
/// env.step(&[1], &mut obs)?;
/// assert_ne!(obs[..50], obs[50..]); // the ball fell one row
/// # Ok::<(), rl_core::Error>(())
/// ```
#[derive(Debug)]
pub struct FrameStacked<E> {
    env: E,
    stack: FrameStack,
    observation_space: Space,
}

impl<E: Env<Obs = u8>> FrameStacked<E> {
    /// Stacks the last `frames` frames of `env`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for zero frames or an observation space that is not a
    /// non-empty `u8` box.
    pub fn new(env: E, frames: usize) -> Result<Self> {
        let Space::Box(space) = env.observation_space() else {
            return Err(Error::config(
                "frame stack",
                "needs a Box observation space of u8 frames",
            ));
        };
        let shape = space.shape();
        let frame_len: usize = shape.iter().product();
        let stack = FrameStack::new(frames, frame_len)?;
        let stacked: Vec<usize> = match shape {
            [channels, rest @ ..] if shape.len() == 3 => std::iter::once(channels * frames)
                .chain(rest.iter().copied())
                .collect(),
            _ => std::iter::once(frames)
                .chain(shape.iter().copied())
                .collect(),
        };
        let bounds = |bound: &dyn Fn(usize) -> f32| -> Vec<f32> {
            (0..frames)
                .flat_map(|_| (0..frame_len).map(bound))
                .collect()
        };
        let observation_space = Space::Box(BoxSpace::new(
            bounds(&|i| space.low(i)),
            bounds(&|i| space.high(i)),
            &stacked,
            DType::U8,
        )?);
        Ok(Self {
            env,
            stack,
            observation_space,
        })
    }

    /// The wrapped environment.
    pub fn inner(&self) -> &E {
        &self.env
    }
}

impl<E: Env<Obs = u8>> Env for FrameStacked<E> {
    type Obs = u8;
    type Act = E::Act;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        self.env.action_space()
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [u8]) -> Result<()> {
        check_len("observation buffer", self.stack.stacked_len(), obs.len())?;
        let env = &mut self.env;
        self.stack.push_with(|frame| env.reset(seed, frame))?;
        self.stack.pad(StackPadding::Repeat);
        self.stack.write_stacked(obs)
    }

    fn set_evaluation(&mut self, evaluation: bool) {
        self.env.set_evaluation(evaluation);
    }

    /// Steps the wrapped environment into the newest slot of the stack. On its error
    /// the stack holds a partial frame: reset before stepping again.
    fn step(&mut self, action: &[E::Act], obs: &mut [u8]) -> Result<Step> {
        check_len("observation buffer", self.stack.stacked_len(), obs.len())?;
        let env = &mut self.env;
        let step = self.stack.push_with(|frame| env.step(action, frame))?;
        self.stack.write_stacked(obs)?;
        Ok(step)
    }
}

#[cfg(test)]
mod tests;
