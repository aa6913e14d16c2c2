//! Pendulum-v1, bit for bit as Gymnasium 1.x (with numpy 2) computes it.

use std::f64::consts::PI;
use std::hint::black_box;

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::env::{check_len, finite_action};
use rl_core::{BoxSpace, DType, Env, Result, Space, Step};

use crate::Phase;

const MAX_SPEED: f64 = 8.0;
const MAX_TORQUE: f32 = 2.0;
const DT: f64 = 0.05;
const G: f64 = 10.0;

/// Swing a pendulum up and hold it, matching Gymnasium's `Pendulum-v1` (g = 10).
///
/// - Observation: `[cos theta, sin theta, theta_dot]` as `f32`.
/// - Action: one torque in `[-2, 2]`; larger values are clipped (as Gymnasium does),
///   non-finite values are an error.
/// - Reward: `-(angle^2 + 0.1 theta_dot^2 + 0.001 torque^2)`, at most 0.
/// - Never terminates; truncated at 200 steps.
/// - Reset draws `theta` uniformly from `[-pi, pi)` and `theta_dot` from `[-1, 1)`.
///
/// Matches Gymnasium 1.4 with numpy 2 bit for bit (golden fixture in `tests/fixtures`).
/// Under numpy 2's promotion rules the torque terms are computed in `f32` and squares go
/// through `pow`, and this implementation does the same.
#[derive(Clone, Debug)]
pub struct Pendulum {
    state: [f64; 2],
    elapsed: u32,
    max_steps: u32,
    phase: Phase,
    rng: Xoshiro256PlusPlus,
    observation_space: Space,
    action_space: Space,
}

impl Pendulum {
    /// Gymnasium's time limit for `Pendulum-v1`.
    pub const MAX_EPISODE_STEPS: u32 = 200;

    /// A pendulum whose resets draw from a stream seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        let spaces = (
            BoxSpace::new(
                vec![-1.0, -1.0, -8.0],
                vec![1.0, 1.0, 8.0],
                &[3],
                DType::F32,
            ),
            BoxSpace::uniform(-MAX_TORQUE, MAX_TORQUE, &[1], DType::F32),
        );
        let (Ok(observation_space), Ok(action_space)) = spaces else {
            unreachable!("constant bounds are valid")
        };
        Self {
            state: [0.0; 2],
            elapsed: 0,
            max_steps: Self::MAX_EPISODE_STEPS,
            phase: crate::Phase::NotStarted,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            observation_space: Space::Box(observation_space),
            action_space: Space::Box(action_space),
        }
    }

    /// The same task with another time limit.
    ///
    /// # Errors
    /// [`rl_core::Error::InvalidConfig`] if `steps` is zero.
    pub fn with_max_episode_steps(mut self, steps: u32) -> Result<Self> {
        self.max_steps = crate::nonzero_limit(steps)?;
        Ok(self)
    }

    /// The time limit.
    pub fn max_episode_steps(&self) -> u32 {
        self.max_steps
    }

    /// The `f64` state `[theta, theta_dot]`.
    pub fn state(&self) -> [f64; 2] {
        self.state
    }

    /// Starts a new episode from `state` (step count 0) and writes its observation.
    ///
    /// # Errors
    /// [`rl_core::Error::InvalidConfig`] for a non-finite state,
    /// [`rl_core::Error::ShapeMismatch`] for a wrong-length `obs`.
    pub fn set_state(&mut self, state: [f64; 2], obs: &mut [f32]) -> Result<()> {
        check_len("observation buffer", 3, obs.len())?;
        crate::finite_state(&state)?;
        self.state = state;
        self.elapsed = 0;
        self.phase = Phase::Running;
        self.observe(obs);
        Ok(())
    }

    fn observe(&self, obs: &mut [f32]) {
        let [theta, theta_dot] = self.state;
        obs[0] = theta.cos() as f32;
        obs[1] = theta.sin() as f32;
        obs[2] = theta_dot as f32;
    }
}

/// numpy's `%` on floats: the remainder takes the sign of the divisor.
fn floor_mod(a: f64, b: f64) -> f64 {
    let m = a % b;
    if m == 0.0 {
        0.0f64.copysign(b)
    } else if (b < 0.0) != (m < 0.0) {
        m + b
    } else {
        m
    }
}

/// `x ** 2` as numpy computes it for a float64 scalar: a call to `pow`, which can differ
/// from `x * x` in the last bit. `black_box` keeps the optimiser from folding it to `x * x`.
fn pow2(x: f64) -> f64 {
    x.powf(black_box(2.0))
}

/// `u ** 2` for a float32 scalar: `powf`, for the same reason.
fn pow2_f32(u: f32) -> f32 {
    u.powf(black_box(2.0))
}

impl Env for Pendulum {
    type Obs = f32;
    type Act = f32;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        &self.action_space
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> Result<()> {
        check_len("observation buffer", 3, obs.len())?;
        if let Some(seed) = seed {
            self.rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        }
        self.state = [
            self.rng.random_range(-PI..PI),
            self.rng.random_range(-1.0..1.0),
        ];
        self.elapsed = 0;
        self.phase = Phase::Running;
        self.observe(obs);
        Ok(())
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> Result<Step> {
        check_len("observation buffer", 3, obs.len())?;
        finite_action(action, 1)?;
        self.phase.check_running()?;
        let [th, thdot] = self.state;
        let u = action[0].clamp(-MAX_TORQUE, MAX_TORQUE);
        let angle = floor_mod(th + PI, 2.0 * PI) - PI;
        let costs = pow2(angle) + 0.1 * pow2(thdot) + f64::from(0.001f32 * pow2_f32(u));
        let new_thdot = (thdot + (3.0 * G / 2.0 * th.sin() + f64::from(3.0f32 * u)) * DT)
            .clamp(-MAX_SPEED, MAX_SPEED);
        self.state = [th + new_thdot * DT, new_thdot];
        self.elapsed += 1;
        let truncated = self.elapsed >= self.max_steps;
        if truncated {
            self.phase = Phase::Ended;
        }
        self.observe(obs);
        Ok(Step {
            reward: -costs as f32,
            terminated: false,
            truncated,
        })
    }

    fn save_state(&self) -> Option<Vec<u8>> {
        crate::save_state(
            "Pendulum",
            crate::Episodic {
                state: self.state,
                elapsed: self.elapsed,
                phase: self.phase,
                rng: self.rng.clone(),
            },
        )
    }

    fn restore_state(&mut self, state: &[u8]) -> Result<()> {
        let saved = crate::Episodic::<2>::load("Pendulum", state, self.max_steps)?;
        self.state = saved.state;
        self.elapsed = saved.elapsed;
        self.phase = saved.phase;
        self.rng = saved.rng;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rl_core::Error;

    #[test]
    fn floor_mod_takes_the_divisor_sign() {
        assert_eq!(floor_mod(-1.0, 3.0), 2.0);
        assert_eq!(floor_mod(4.0, 3.0), 1.0);
        assert_eq!(floor_mod(-3.0, 3.0), 0.0);
        assert_eq!(floor_mod(1.0, -3.0), -2.0);
    }

    #[test]
    fn non_finite_torque_is_refused() {
        let mut env = Pendulum::new(0);
        let mut obs = [0.0f32; 3];
        env.reset(None, &mut obs).unwrap();
        let before = env.state();
        assert!(matches!(
            env.step(&[f32::NAN], &mut obs),
            Err(Error::NonFiniteAction { .. })
        ));
        assert!(env.step(&[0.0, 0.0], &mut obs).is_err());
        assert_eq!(env.state(), before);
        // Out-of-range torque is clipped, not refused: Gymnasium semantics.
        let step = env.step(&[100.0], &mut obs).unwrap();
        assert!(step.reward <= 0.0);
    }
}
