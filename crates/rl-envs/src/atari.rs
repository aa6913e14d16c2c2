//! The Atari preprocessing of DQN (Mnih et al. 2015) as Stable-Baselines3's
//! `AtariWrapper` arranges it, over any environment that produces raw RGB frames.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::env::{check_len, discrete_action};
use rl_core::{BoxSpace, DType, Env, Error, Result, Space, Step};

use crate::Phase;
use crate::pixels::{AreaResize, FrameStack, StackPadding, max_frames, rgb_to_gray};

/// An environment that can say how many lives its player has left, for
/// [`LifeLoss::Terminate`].
///
/// This is an extension of [`Env`] kept in `rl-envs` (the core trait has no lives): an
/// Atari binding implements it from ALE's `lives()`.
pub trait Lives {
    /// Lives left now (0 once the game is over, or for a game without lives).
    fn lives(&self) -> u32;
}

/// What [`AtariPreprocess::step`](Env::step) returns as the reward.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rewards {
    /// `sign(r)` of the skip's summed reward: −1, 0 or +1 (SB3's `ClipRewardEnv`, for
    /// training). The unclipped reward stays available from
    /// [`AtariPreprocess::raw_reward`] and [`AtariPreprocess::score`].
    #[default]
    Clipped,
    /// The skip's summed reward as the game gives it.
    Raw,
}

/// Whether losing a life ends the episode the learner sees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LifeLoss {
    /// Only the end of the game ends an episode.
    #[default]
    Continue,
    /// Losing a life (with lives left) reports `terminated`; the next unseeded `reset`
    /// then continues the same game with one no-op step instead of restarting it (SB3's
    /// `EpisodicLifeEnv`). Needs an environment that implements [`Lives`], wrapped with
    /// [`AtariPreprocess::with_lives`].
    Terminate,
}

/// The settings of [`AtariPreprocess`]; [`Default`] gives DQN's (and SB3's
/// `AtariWrapper`'s) values, each documented on its field. As a TOML or JSON table
/// (an `rl` config's `[atari]`), missing keys keep these defaults and enum values are
/// snake case (`life_loss = "terminate"`, `rewards = "raw"`, `padding = "zeros"`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AtariConfig {
    /// At most this many no-op actions after each reset, their number drawn uniformly
    /// from `1..=noop_max` (0 disables them). Default 30.
    pub noop_max: u32,
    /// The action that does nothing. Default 0 (ALE's `NOOP`).
    pub noop_action: u32,
    /// Raw frames per step, the action repeated and rewards summed. Default 4.
    pub frame_skip: u32,
    /// `[height, width]` of the processed frames, at most the raw frame's. Default
    /// `[84, 84]`.
    pub screen: [usize; 2],
    /// Processed frames stacked into one observation. Default 4.
    pub stack: usize,
    /// What fills the stack behind an episode's first frame. Default
    /// [`StackPadding::Repeat`].
    pub padding: StackPadding,
    /// Clipped or raw rewards. Default [`Rewards::Clipped`].
    pub rewards: Rewards,
    /// Whether a lost life ends the episode. Default [`LifeLoss::Continue`].
    pub life_loss: LifeLoss,
    /// Presses FIRE (action 1), then action 2, one step each after every reset (after a
    /// lost life too, under [`LifeLoss::Terminate`]): the games that wait for FIRE to
    /// launch a ball start at once (SB3's and CleanRL's `FireResetEnv`). Needs at least
    /// 3 actions, action 1 being FIRE. Default `false`.
    pub fire_reset: bool,
}

impl Default for AtariConfig {
    fn default() -> Self {
        Self {
            noop_max: 30,
            noop_action: 0,
            frame_skip: 4,
            screen: [84, 84],
            stack: 4,
            padding: StackPadding::Repeat,
            rewards: Rewards::Clipped,
            life_loss: LifeLoss::Continue,
            fire_reset: false,
        }
    }
}

/// Atari-style preprocessing around an environment `E` whose observations are raw RGB
/// frames (`u8`, shape `[height, width, 3]`, as ALE gives them) and whose actions are a
/// discrete index. In the order of SB3's `AtariWrapper`:
///
/// 1. **No-op starts**: each reset takes 1 to `noop_max` no-op actions, their number
///    drawn from the wrapper's own random stream (seeded at construction and by
///    `reset(Some(seed))`, a stream apart from the wrapped environment's). An episode that
///    ends during them is reset again (no seed).
/// 2. **Frame skip**: each step repeats the action `frame_skip` times (stopping early
///    when the episode ends) and sums the rewards.
/// 3. **Max-pool**: the elementwise max of the step's last two raw RGB frames
///    ([`max_frames`]); a step that ran only one frame (a skip of 1, or an episode ending
///    on the first frame) uses that frame alone. (SB3 would max it with a stale frame of
///    an earlier step.) Reset observations are the last raw frame alone, as in SB3. Only
///    the frames a step can use are asked for: the earlier frames of a skip and all but
///    the last no-op go through [`Env::step_unobserved`], so an emulator need not render
///    their screens; an episode that ends before the last frame of a skip therefore ends
///    on its last frame alone (the frame before it was not rendered).
/// 4. **Grayscale** ([`rgb_to_gray`], OpenCV's `RGB2GRAY`) and **resize** to `screen`
///    ([`AreaResize`], OpenCV's `INTER_AREA`).
/// 5. **Frame stack** of the last `stack` processed frames, oldest first, channels
///    first: observations of shape `[stack, height, width]` ([`FrameStack`]).
/// 6. **Reward clipping** to `sign(r)` ([`Rewards::Clipped`]) and optional **end on
///    life loss** ([`LifeLoss::Terminate`]) and **FIRE after reset**
///    ([`AtariConfig::fire_reset`]).
///
/// Every buffer is sized at construction: `step` and `reset` allocate nothing. The true
/// game score is kept apart from the (clipped) rewards: [`AtariPreprocess::score`] for
/// the game running, [`AtariPreprocess::last_score`] for the last game that ended.
#[derive(Clone, Debug)]
pub struct AtariPreprocess<E> {
    env: E,
    config: AtariConfig,
    /// [`Lives::lives`] of `E`, when wrapped with [`AtariPreprocess::with_lives`].
    lives: Option<fn(&E) -> u32>,
    actions: u32,
    /// The last two raw RGB frames; `newest` indexes the later one.
    raw: [Vec<u8>; 2],
    newest: usize,
    /// Whether each raw slot holds its step's frame (a step through
    /// [`Env::step_unobserved`] that did not end the episode may have left it stale).
    observed: [bool; 2],
    maxed: Vec<u8>,
    gray: Vec<u8>,
    resize: AreaResize,
    stack: FrameStack,
    observation_space: Space,
    state: Progress,
    /// [`Env::set_evaluation`]: raw rewards, no episode end at a lost life.
    evaluation: bool,
}

/// What changes as the wrapper steps (besides the frames and the wrapped environment).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Progress {
    rng: Xoshiro256PlusPlus,
    phase: Phase,
    /// The wrapped environment's episode (the game) has ended: the next reset restarts it.
    game_over: bool,
    /// The last episode ended on a lost life, with the game going on.
    life_lost: bool,
    lives: u32,
    raw_reward: f32,
    score: f32,
    last_score: Option<f32>,
}

/// What [`AtariPreprocess`] saves besides its stack: the wrapped environment's own state.
#[derive(serde::Serialize, serde::Deserialize)]
struct Saved {
    progress: Progress,
    frames: Vec<u8>,
    newest_frame: usize,
    env: Vec<u8>,
}

/// Mixed into reset seeds so that the no-op stream differs from the wrapped
/// environment's stream seeded with the same number.
const NOOP_STREAM: u64 = 0x6e6f_6f70_5f73_7464;

impl<E: Env<Obs = u8, Act = u32>> AtariPreprocess<E> {
    /// Wraps `env`; `seed` seeds the no-op stream until a `reset(Some(_))`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when `env`'s observations are not a `[h, w, 3]` box or its
    /// actions not discrete, when the configuration is out of range (zero skip or stack,
    /// a screen larger than the frame or empty, a no-op action out of range), or for
    /// [`LifeLoss::Terminate`] (that needs [`AtariPreprocess::with_lives`]).
    pub fn new(env: E, config: AtariConfig, seed: u64) -> Result<Self> {
        if config.life_loss == LifeLoss::Terminate {
            return Err(Error::config(
                "atari life loss",
                "is Terminate but the environment reports no lives: wrap it with \
                 AtariPreprocess::with_lives (it must implement rl_envs::Lives)",
            ));
        }
        Self::build(env, config, seed, None)
    }

    fn build(env: E, config: AtariConfig, seed: u64, lives: Option<fn(&E) -> u32>) -> Result<Self> {
        let [height, width] = match env.observation_space() {
            Space::Box(b)
                if b.shape().len() == 3 && b.shape()[2] == 3 && b.dtype() == DType::U8 =>
            {
                [b.shape()[0], b.shape()[1]]
            }
            other => {
                return Err(Error::config(
                    "atari preprocessing",
                    format!(
                        "needs raw RGB frames, a u8 box of shape [height, width, 3], but the environment observes {other}"
                    ),
                ));
            }
        };
        let actions = match env.action_space() {
            Space::Discrete { n } => *n,
            other => {
                return Err(Error::config(
                    "atari preprocessing",
                    format!("needs discrete actions, but the environment acts in {other}"),
                ));
            }
        };
        if config.fire_reset && actions < 3 {
            return Err(Error::config(
                "atari fire reset",
                format!(
                    "presses actions 1 (FIRE) and 2 after each reset, but the environment has {actions} actions: set it to false"
                ),
            ));
        }
        if config.noop_action >= actions {
            return Err(Error::config(
                "atari noop action",
                format!(
                    "is {} but the environment has {actions} actions: give the index of its no-op",
                    config.noop_action
                ),
            ));
        }
        if config.frame_skip == 0 {
            return Err(Error::config(
                "atari frame skip",
                "is zero: repeat each action at least once",
            ));
        }
        let resize = AreaResize::new([height, width], config.screen)?;
        let [h, w] = config.screen;
        let stack = FrameStack::new(config.stack, h * w)?;
        let observation_space = Space::Box(BoxSpace::uniform(
            0.0,
            255.0,
            &[config.stack, h, w],
            DType::U8,
        )?);
        let frame_len = height * width * 3;
        Ok(Self {
            env,
            config,
            lives,
            actions,
            raw: [vec![0; frame_len], vec![0; frame_len]],
            newest: 0,
            observed: [false; 2],
            maxed: vec![0; frame_len],
            gray: vec![0; height * width],
            resize,
            stack,
            observation_space,
            state: Progress {
                rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ NOOP_STREAM),
                phase: Phase::NotStarted,
                game_over: true,
                life_lost: false,
                lives: 0,
                raw_reward: 0.0,
                score: 0.0,
                last_score: None,
            },
            evaluation: false,
        })
    }

    /// The wrapped environment.
    pub fn inner(&self) -> &E {
        &self.env
    }

    /// Unwraps the environment.
    pub fn into_inner(self) -> E {
        self.env
    }

    /// The settings.
    pub fn config(&self) -> &AtariConfig {
        &self.config
    }

    /// The last step's reward before clipping: the sum over its skipped frames.
    pub fn raw_reward(&self) -> f32 {
        self.state.raw_reward
    }

    /// The unclipped return of the game running (or just ended), over all its lives.
    pub fn score(&self) -> f32 {
        self.state.score
    }

    /// The unclipped return of the last game that ended, if one has: the score to report
    /// for evaluation, whatever [`Rewards`] and [`LifeLoss`] the learner sees.
    pub fn last_score(&self) -> Option<f32> {
        self.state.last_score
    }

    /// Lives left when the last step or reset ended (0 without [`Lives`]).
    pub fn lives(&self) -> u32 {
        self.state.lives
    }

    fn current_lives(&self) -> u32 {
        self.lives.map_or(0, |lives| lives(&self.env))
    }

    /// Steps the wrapped environment once into the older raw slot, which becomes the
    /// newer; unless `observe`, through [`Env::step_unobserved`]. On its error the
    /// wrapper needs a reset.
    fn raw_step(&mut self, action: u32, observe: bool) -> Result<Step> {
        let slot = 1 - self.newest;
        let raw = &mut self.raw[slot];
        let stepped = if observe {
            self.env.step(&[action], raw)
        } else {
            self.env.step_unobserved(&[action], raw)
        };
        match stepped {
            Ok(step) => {
                self.newest = slot;
                self.observed[slot] = observe || step.ends_episode();
                Ok(step)
            }
            Err(e) => {
                self.state.phase = Phase::NotStarted;
                self.state.game_over = true;
                Err(e)
            }
        }
    }

    /// Resets the wrapped environment into the older raw slot.
    fn raw_reset(&mut self, seed: Option<u64>) -> Result<()> {
        let slot = 1 - self.newest;
        self.env.reset(seed, &mut self.raw[slot])?;
        self.newest = slot;
        self.observed[slot] = true;
        Ok(())
    }

    /// Repeats `action` up to `frame_skip` times: the summed step and the frames run.
    fn skip(&mut self, action: u32) -> Result<(Step, u32)> {
        let mut total = Step::default();
        let mut frames = 0;
        while frames < self.config.frame_skip {
            // Only the last two frames of a skip are looked at (unless the episode ends).
            let observe = frames + 2 >= self.config.frame_skip;
            let step = self.raw_step(action, observe)?;
            frames += 1;
            total.reward += step.reward;
            if step.ends_episode() {
                total.terminated = step.terminated;
                total.truncated = step.truncated;
                break;
            }
        }
        Ok((total, frames))
    }

    /// Processes the newest raw frame (max-pooled with the one before when `pool` and that
    /// frame was observed) into a new stack frame.
    fn push_frame(&mut self, pool: bool) -> Result<()> {
        debug_assert!(
            self.observed[self.newest],
            "the newest frame is always observed"
        );
        let newest = &self.raw[self.newest];
        let rgb = if pool && self.observed[1 - self.newest] {
            max_frames(newest, &self.raw[1 - self.newest], &mut self.maxed)?;
            &self.maxed
        } else {
            newest
        };
        rgb_to_gray(rgb, &mut self.gray)?;
        let (resize, gray) = (&mut self.resize, &self.gray);
        self.stack.push_with(|slot| resize.resize(gray, slot))
    }

    /// [`AtariConfig::fire_reset`]'s two steps (FIRE, then action 2), the game restarted
    /// if one ends it; whether the last step ran two frames or more (to max-pool).
    fn fire(&mut self) -> Result<bool> {
        let mut pool = false;
        for action in [1, 2] {
            let (step, frames) = self.skip(action)?;
            self.state.score += step.reward;
            pool = frames >= 2;
            if step.ends_episode() {
                self.state.last_score = Some(self.state.score);
                self.restart_game(None)?;
                pool = false;
            }
        }
        Ok(pool)
    }

    /// Restarts the game: wrapped reset, then the no-ops.
    fn restart_game(&mut self, seed: Option<u64>) -> Result<()> {
        if let Some(seed) = seed {
            self.state.rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ NOOP_STREAM);
        }
        self.raw_reset(seed)?;
        let noops = match self.config.noop_max {
            0 => 0,
            max => self.state.rng.random_range(1..=max),
        };
        for noop in 0..noops {
            // Only the last no-op's frame is looked at.
            let observe = noop + 1 == noops;
            if self
                .raw_step(self.config.noop_action, observe)?
                .ends_episode()
            {
                self.raw_reset(None)?;
            }
        }
        self.state.game_over = false;
        self.state.score = 0.0;
        Ok(())
    }
}

impl<E: Env<Obs = u8, Act = u32> + Lives> AtariPreprocess<E> {
    /// Wraps `env` as [`AtariPreprocess::new`] does, reading its lives for
    /// [`LifeLoss::Terminate`].
    ///
    /// # Errors
    /// As [`AtariPreprocess::new`], but any [`LifeLoss`] is accepted.
    pub fn with_lives(env: E, config: AtariConfig, seed: u64) -> Result<Self> {
        Self::build(env, config, seed, Some(<E as Lives>::lives))
    }
}

impl<E: Env<Obs = u8, Act = u32>> Env for AtariPreprocess<E> {
    type Obs = u8;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        self.env.action_space()
    }

    /// Restarts the game with no-op starts; after a life lost under
    /// [`LifeLoss::Terminate`] an unseeded reset continues the game with one no-op step
    /// instead (a seeded one always restarts it).
    fn reset(&mut self, seed: Option<u64>, obs: &mut [u8]) -> Result<()> {
        check_len("observation buffer", self.stack.stacked_len(), obs.len())?;
        let mut pool = false;
        if !self.state.life_lost || self.state.game_over || seed.is_some() {
            self.restart_game(seed)?;
        } else {
            // A life was lost: the game goes on, one no-op step later.
            let (step, frames) = self.skip(self.config.noop_action)?;
            self.state.score += step.reward;
            if step.ends_episode() {
                self.state.last_score = Some(self.state.score);
                self.restart_game(None)?;
            } else {
                pool = frames >= 2;
            }
        }
        if self.config.fire_reset {
            pool = self.fire()?;
        }
        self.state.lives = self.current_lives();
        self.state.life_lost = false;
        self.state.raw_reward = 0.0;
        self.push_frame(pool)?;
        self.stack.pad(self.config.padding);
        self.stack.write_stacked(obs)?;
        self.state.phase = Phase::Running;
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [u8]) -> Result<Step> {
        check_len("observation buffer", self.stack.stacked_len(), obs.len())?;
        let action = discrete_action(action, self.actions)?;
        self.state.phase.check_running()?;
        let (mut step, frames) = self.skip(action)?;
        self.push_frame(frames >= 2)?;
        self.stack.write_stacked(obs)?;
        let lives = self.current_lives();
        let state = &mut self.state;
        state.raw_reward = step.reward;
        state.score += step.reward;
        if step.ends_episode() {
            state.game_over = true;
            state.last_score = Some(state.score);
        }
        if self.config.life_loss == LifeLoss::Terminate
            && !self.evaluation
            && 0 < lives
            && lives < state.lives
        {
            state.life_lost = !state.game_over;
            step.terminated = true;
        }
        state.lives = lives;
        if step.ends_episode() {
            state.phase = Phase::Ended;
        }
        if self.config.rewards == Rewards::Clipped && !self.evaluation {
            step.reward = sign(step.reward);
        }
        Ok(step)
    }

    /// In evaluation the rewards are the game's own (the episode's return is the score)
    /// and a lost life does not end the episode, whatever the configuration says for
    /// training.
    fn set_evaluation(&mut self, evaluation: bool) {
        self.evaluation = evaluation;
    }

    /// The wrapped environment's state with the wrapper's (stack, no-op stream, score);
    /// `None` when the wrapped environment cannot save its state.
    fn save_state(&self) -> Option<Vec<u8>> {
        let env = self.env.save_state()?;
        let (frames, newest_frame) = self.stack.as_ring();
        crate::save_state(
            "AtariPreprocess",
            Saved {
                progress: self.state.clone(),
                frames: frames.to_vec(),
                newest_frame,
                env,
            },
        )
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<()> {
        let saved: Saved = crate::load_state("AtariPreprocess", state)?;
        let mut stack = self.stack.clone();
        if !stack.set_ring(&saved.frames, saved.newest_frame) {
            return Err(Error::EnvState {
                problem: format!(
                    "the saved state of an AtariPreprocess holds {} stacked pixels where this \
                     one stacks {}: restore it into a wrapper with the same screen and stack",
                    saved.frames.len(),
                    self.stack.stacked_len()
                ),
            });
        }
        self.env.restore_state(&saved.env)?;
        self.stack = stack;
        self.state = saved.progress;
        Ok(())
    }
}

/// `sign(r)` as numpy's `np.sign`: 0 stays 0 (and NaN gives 0 here).
#[inline]
fn sign(reward: f32) -> f32 {
    if reward > 0.0 {
        1.0
    } else if reward < 0.0 {
        -1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests;
