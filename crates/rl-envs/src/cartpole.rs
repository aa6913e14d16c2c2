//! CartPole-v1, bit for bit as Gymnasium 1.x computes it, and its masked variant.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::env::{check_len, discrete_action};
use rl_core::{BoxSpace, DType, Env, Result, Space, Step};

use crate::Phase;

const GRAVITY: f64 = 9.8;
const MASS_POLE: f64 = 0.1;
const TOTAL_MASS: f64 = 0.1 + 1.0;
const HALF_LENGTH: f64 = 0.5;
const POLE_MASS_LENGTH: f64 = MASS_POLE * HALF_LENGTH;
const FORCE: f64 = 10.0;
const TAU: f64 = 0.02;
/// 12 degrees, computed as Gymnasium does (`12 * 2 * math.pi / 360`).
const THETA_LIMIT: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
const X_LIMIT: f64 = 2.4;
const RESET_BOUND: f64 = 0.05;

/// The classic cart-pole balancing task, matching Gymnasium's `CartPole-v1`.
///
/// - Observation: `[x, x_dot, theta, theta_dot]` as `f32` (dynamics run in `f64`).
/// - Action: `Discrete(2)`: 0 pushes left, 1 pushes right.
/// - Reward 1 per step, the terminating step included.
/// - Terminated when `|x| > 2.4` or `|theta| > 12°`; truncated when the step count
///   reaches the limit (500), which can coincide with termination, as in Gymnasium.
/// - Reset draws each state variable uniformly from `[-0.05, 0.05)`.
///
/// Stepping matches Gymnasium 1.4 bit for bit (golden fixture in `tests/fixtures`).
/// Gymnasium's own random stream (numpy PCG64) is not reproduced: seeds give
/// deterministic but different initial states.
///
/// ```
/// use rl_core::Env;
/// use rl_envs::CartPole;
///
/// let mut env = CartPole::new(7);
/// let mut obs = [0.0f32; 4];
/// env.reset(None, &mut obs)?;
/// let step = env.step(&[1], &mut obs)?;
/// assert_eq!(step.reward, 1.0);
/// # Ok::<(), rl_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct CartPole {
    state: [f64; 4],
    elapsed: u32,
    max_steps: u32,
    phase: Phase,
    rng: Xoshiro256PlusPlus,
    observation_space: Space,
    action_space: Space,
}

impl CartPole {
    /// Gymnasium's time limit for `CartPole-v1`.
    pub const MAX_EPISODE_STEPS: u32 = 500;

    /// A cart-pole whose resets draw from a stream seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        let high = [
            (X_LIMIT * 2.0) as f32,
            f32::INFINITY,
            (THETA_LIMIT * 2.0) as f32,
            f32::INFINITY,
        ];
        let observation_space =
            BoxSpace::new(high.map(|h| -h).to_vec(), high.to_vec(), &[4], DType::F32)
                .map(Space::Box)
                .unwrap_or_else(|_| unreachable!("constant bounds are valid"));
        Self {
            state: [0.0; 4],
            elapsed: 0,
            max_steps: Self::MAX_EPISODE_STEPS,
            phase: Phase::NotStarted,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            observation_space,
            action_space: Space::Discrete { n: 2 },
        }
    }

    /// The same task with another time limit.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](rl_core::Error::InvalidConfig) if `steps` is zero.
    pub fn with_max_episode_steps(mut self, steps: u32) -> Result<Self> {
        self.max_steps = crate::nonzero_limit(steps)?;
        Ok(self)
    }

    /// The time limit.
    pub fn max_episode_steps(&self) -> u32 {
        self.max_steps
    }

    /// The full `f64` state `[x, x_dot, theta, theta_dot]`.
    pub fn state(&self) -> [f64; 4] {
        self.state
    }

    /// Starts a new episode from `state` instead of a random one (step count 0) and writes
    /// its observation into `obs`.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](rl_core::Error::InvalidConfig) for a non-finite state, [`Error::ShapeMismatch`](rl_core::Error::ShapeMismatch) for a
    /// wrong-length `obs`; the environment is unchanged on error.
    pub fn set_state(&mut self, state: [f64; 4], obs: &mut [f32]) -> Result<()> {
        check_len("observation buffer", 4, obs.len())?;
        crate::finite_state(&state)?;
        self.state = state;
        self.elapsed = 0;
        self.phase = Phase::Running;
        self.observe(obs);
        Ok(())
    }

    /// Steps the dynamics without writing an observation; `MaskedCartPole` shares it.
    #[inline]
    fn advance(&mut self, action: &[u32]) -> Result<Step> {
        let push_right = discrete_action(action, 2)? == 1;
        self.phase.check_running()?;
        self.state = dynamics(self.state, push_right);
        let [x, _, theta, _] = self.state;
        // Gymnasium's comparisons, kept literally: a NaN state does not terminate there.
        #[expect(
            clippy::manual_range_contains,
            reason = "same comparisons as Gymnasium"
        )]
        let terminated = x < -X_LIMIT || x > X_LIMIT || theta < -THETA_LIMIT || theta > THETA_LIMIT;
        self.elapsed += 1;
        let truncated = self.elapsed >= self.max_steps;
        if terminated || truncated {
            self.phase = Phase::Ended;
        }
        Ok(Step {
            reward: 1.0,
            terminated,
            truncated,
        })
    }

    fn restart(&mut self, seed: Option<u64>) {
        if let Some(seed) = seed {
            self.rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        }
        for value in &mut self.state {
            *value = self.rng.random_range(-RESET_BOUND..RESET_BOUND);
        }
        self.elapsed = 0;
        self.phase = Phase::Running;
    }

    #[inline]
    fn observe(&self, obs: &mut [f32]) {
        for (o, s) in obs.iter_mut().zip(self.state) {
            *o = s as f32;
        }
    }
}

/// One Euler step of the cart-pole, with Gymnasium's order of floating-point operations
/// (Python evaluates `a * b * c` as `(a * b) * c`; `np.square(x)` is `x * x`).
#[inline]
fn dynamics([x, x_dot, theta, theta_dot]: [f64; 4], push_right: bool) -> [f64; 4] {
    let force = if push_right { FORCE } else { -FORCE };
    let (sintheta, costheta) = theta.sin_cos();
    let temp = (force + POLE_MASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS;
    let thetaacc = (GRAVITY * sintheta - costheta * temp)
        / (HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * (costheta * costheta) / TOTAL_MASS));
    let xacc = temp - POLE_MASS_LENGTH * thetaacc * costheta / TOTAL_MASS;
    [
        x + TAU * x_dot,
        x_dot + TAU * xacc,
        theta + TAU * theta_dot,
        theta_dot + TAU * thetaacc,
    ]
}

impl Env for CartPole {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        &self.action_space
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        check_len("observation buffer", 4, obs.len())?;
        self.restart(seed);
        self.observe(obs);
        Ok(())
    }

    #[inline]
    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> Result<Step> {
        check_len("observation buffer", 4, obs.len())?;
        let step = self.advance(action)?;
        self.observe(obs);
        Ok(step)
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        crate::save_state("CartPole", self.episodic())
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<()> {
        self.restore_episodic("CartPole", state)
    }
}

impl CartPole {
    fn episodic(&self) -> crate::Episodic<4> {
        crate::Episodic {
            state: self.state,
            elapsed: self.elapsed,
            phase: self.phase,
            rng: self.rng.clone(),
        }
    }

    fn restore_episodic(&mut self, env: &str, bytes: &[u8]) -> Result<()> {
        let saved = crate::Episodic::<4>::load(env, bytes, self.max_steps)?;
        self.state = saved.state;
        self.elapsed = saved.elapsed;
        self.phase = saved.phase;
        self.rng = saved.rng;
        Ok(())
    }
}

/// CartPole whose observation hides both velocities: `[x, theta]` only.
///
/// A memoryless policy cannot tell which way the pole is falling, so this is the
/// reference task for history summarizers (frame stacks, LSTMs). Dynamics, rewards,
/// termination and truncation are exactly [`CartPole`]'s.
#[derive(Clone, Debug)]
pub struct MaskedCartPole {
    inner: CartPole,
    observation_space: Space,
}

impl MaskedCartPole {
    /// A masked cart-pole whose resets draw from a stream seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        let high = [(X_LIMIT * 2.0) as f32, (THETA_LIMIT * 2.0) as f32];
        let observation_space =
            BoxSpace::new(high.map(|h| -h).to_vec(), high.to_vec(), &[2], DType::F32)
                .map(Space::Box)
                .unwrap_or_else(|_| unreachable!("constant bounds are valid"));
        Self {
            inner: CartPole::new(seed),
            observation_space,
        }
    }

    /// The same task with another time limit.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](rl_core::Error::InvalidConfig) if `steps` is zero.
    pub fn with_max_episode_steps(mut self, steps: u32) -> Result<Self> {
        self.inner = self.inner.with_max_episode_steps(steps)?;
        Ok(self)
    }

    /// The full hidden state `[x, x_dot, theta, theta_dot]`.
    pub fn state(&self) -> [f64; 4] {
        self.inner.state
    }

    #[inline]
    fn observe(&self, obs: &mut [f32]) {
        obs[0] = self.inner.state[0] as f32;
        obs[1] = self.inner.state[2] as f32;
    }
}

impl Env for MaskedCartPole {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        &self.inner.action_space
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        check_len("observation buffer", 2, obs.len())?;
        self.inner.restart(seed);
        self.observe(obs);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> Result<Step> {
        check_len("observation buffer", 2, obs.len())?;
        let step = self.inner.advance(action)?;
        self.observe(obs);
        Ok(step)
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        crate::save_state("MaskedCartPole", self.inner.episodic())
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<()> {
        self.inner.restore_episodic("MaskedCartPole", state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rl_core::Error;

    #[test]
    fn invalid_input_is_refused_and_changes_nothing() {
        let mut env = CartPole::new(0);
        let mut obs = [0.0f32; 4];
        assert!(matches!(
            env.step(&[1], &mut obs),
            Err(Error::NeedsReset { .. })
        ));
        env.reset(Some(3), &mut obs).unwrap();
        let before = env.state();
        assert!(matches!(
            env.step(&[2], &mut obs),
            Err(Error::ActionOutOfRange { index: 2, n: 2 })
        ));
        assert!(matches!(
            env.step(&[], &mut obs),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(env.step(&[0], &mut [0.0; 3]).is_err());
        assert!(env.reset(None, &mut [0.0; 5]).is_err());
        assert_eq!(env.state(), before);
        assert!(env.set_state([f64::NAN, 0.0, 0.0, 0.0], &mut obs).is_err());
        assert!(CartPole::new(0).with_max_episode_steps(0).is_err());
    }

    #[test]
    fn stepping_after_the_end_needs_a_reset() {
        let mut env = CartPole::new(0);
        let mut obs = [0.0f32; 4];
        env.set_state([2.39, 5.0, 0.0, 0.0], &mut obs).unwrap();
        let step = env.step(&[1], &mut obs).unwrap();
        assert!(step.terminated && !step.truncated);
        assert!(matches!(
            env.step(&[1], &mut obs),
            Err(Error::NeedsReset { .. })
        ));
        env.reset(None, &mut obs).unwrap();
        env.step(&[1], &mut obs).unwrap();
    }

    #[test]
    fn masked_observation_hides_velocities() {
        let mut env = MaskedCartPole::new(1);
        let mut obs = [0.0f32; 2];
        env.reset(None, &mut obs).unwrap();
        for _ in 0..5 {
            env.step(&[0], &mut obs).unwrap();
            let [x, _, theta, _] = env.state();
            assert_eq!(obs, [x as f32, theta as f32]);
        }
        assert_eq!(env.observation_space().flat_len(), 2);
    }
}
