//! Property tests every reference environment must satisfy: determinism given a seed,
//! observations inside the declared space, truncation exactly at the time limit, and
//! invalid actions refused without changing anything.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers may unwrap: a failure is a failed test"
)]

use proptest::prelude::*;
use rl_core::{Env, Step};
use rl_envs::{CartPole, Catch, LargeDiscrete, MaskedCartPole, Pendulum};

/// Runs `actions` from `reset(Some(seed))`, resetting at episode ends, and records every
/// observation and step.
fn rollout<E: Env>(env: &mut E, seed: u64, actions: &[Vec<E::Act>]) -> (Vec<E::Obs>, Vec<Step>) {
    let len = env.observation_space().flat_len();
    let mut obs = vec![E::Obs::default(); len];
    env.reset(Some(seed), &mut obs).unwrap();
    let mut trace = obs.clone();
    let mut steps = Vec::new();
    for action in actions {
        let step = env.step(action, &mut obs).unwrap();
        trace.extend_from_slice(&obs);
        steps.push(step);
        if step.ends_episode() {
            env.reset(None, &mut obs).unwrap();
            trace.extend_from_slice(&obs);
        }
    }
    (trace, steps)
}

fn discrete_actions(n: u32, len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<Vec<u32>>> {
    proptest::collection::vec((0..n).prop_map(|a| vec![a]), len)
}

/// Checks determinism and that every observation lies in the observation space.
fn check_env<E: Env>(
    make: impl Fn() -> E,
    seed: u64,
    actions: &[Vec<E::Act>],
) -> Result<(), TestCaseError> {
    let (trace_a, steps_a) = rollout(&mut make(), seed, actions);
    let (trace_b, steps_b) = rollout(&mut make(), seed, actions);
    prop_assert_eq!(
        &trace_a,
        &trace_b,
        "same seed, same actions: same observations"
    );
    prop_assert_eq!(&steps_a, &steps_b);
    let env = make();
    let space = env.observation_space();
    for obs in trace_a.chunks_exact(space.flat_len()) {
        prop_assert!(space.contains(obs), "{:?} outside {}", obs, space);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn cartpole_is_deterministic_and_in_space(seed: u64, actions in discrete_actions(2, 0..300)) {
        check_env(|| CartPole::new(0), seed, &actions)?;
    }

    #[test]
    fn masked_cartpole_is_deterministic_and_in_space(seed: u64, actions in discrete_actions(2, 0..300)) {
        check_env(|| MaskedCartPole::new(0), seed, &actions)?;
    }

    #[test]
    fn pendulum_is_deterministic_and_in_space(
        seed: u64,
        actions in proptest::collection::vec((-3.0f32..3.0).prop_map(|a| vec![a]), 0..450),
    ) {
        check_env(|| Pendulum::new(0), seed, &actions)?;
    }

    #[test]
    fn large_discrete_is_deterministic_and_in_space(seed: u64, actions in discrete_actions(500, 0..50)) {
        check_env(|| LargeDiscrete::with_actions(500, 11).unwrap(), seed, &actions)?;
    }

    #[test]
    fn catch_is_deterministic_and_in_space(seed: u64, actions in discrete_actions(3, 0..100), scale in 1usize..4) {
        check_env(|| Catch::new(0).with_scale(scale).unwrap(), seed, &actions)?;
    }

    /// Every Catch episode lasts exactly 9 steps, terminates (never truncates) and pays
    /// only on its last step, +1 or -1.
    #[test]
    fn catch_pays_once_at_the_ninth_step(seed: u64, actions in discrete_actions(3, 9..10)) {
        let mut env = Catch::new(seed);
        let mut obs = [0u8; 50];
        env.reset(None, &mut obs).unwrap();
        for (t, action) in (1..=9).zip(&actions) {
            let step = env.step(action, &mut obs).unwrap();
            prop_assert!(!step.truncated);
            prop_assert_eq!(step.terminated, t == 9);
            let pays = if t == 9 { step.reward.abs() == 1.0 } else { step.reward == 0.0 };
            prop_assert!(pays, "reward {} at step {}", step.reward, t);
        }
    }

    #[test]
    fn different_seeds_give_different_starts(a: u64, b: u64) {
        prop_assume!(a != b);
        let (mut x, mut y) = ([0.0f32; 4], [0.0f32; 4]);
        CartPole::new(0).reset(Some(a), &mut x).unwrap();
        CartPole::new(0).reset(Some(b), &mut y).unwrap();
        prop_assert_ne!(x, y);
    }

    /// With any time limit, `truncated` is set exactly on the step that reaches it, unless
    /// the pole fell first, and never elsewhere.
    #[test]
    fn cartpole_truncates_exactly_at_the_limit(limit in 1u32..60, seed: u64) {
        let mut env = CartPole::new(seed).with_max_episode_steps(limit).unwrap();
        let mut obs = [0.0f32; 4];
        env.reset(None, &mut obs).unwrap();
        for t in 1..=limit {
            // Balance, so that most episodes reach the limit.
            let action = u32::from(obs[2] + 0.5 * obs[3] > 0.0);
            let step = env.step(&[action], &mut obs).unwrap();
            prop_assert_eq!(step.truncated, t == limit, "step {}", t);
            if step.terminated {
                break;
            }
            prop_assert!(t < limit || step.truncated);
        }
    }

    #[test]
    fn pendulum_truncates_exactly_at_the_limit(limit in 1u32..300, seed: u64) {
        let mut env = Pendulum::new(seed).with_max_episode_steps(limit).unwrap();
        let mut obs = [0.0f32; 3];
        env.reset(None, &mut obs).unwrap();
        for t in 1..=limit {
            let step = env.step(&[1.0], &mut obs).unwrap();
            prop_assert!(!step.terminated);
            prop_assert_eq!(step.truncated, t == limit, "step {}", t);
        }
        prop_assert!(env.step(&[1.0], &mut obs).is_err(), "the episode is over");
    }

    /// Invalid actions are refused and leave the state exactly as it was.
    #[test]
    fn invalid_actions_change_nothing(seed: u64, bad in 2u32..) {
        let mut env = CartPole::new(seed);
        let mut obs = [0.0f32; 4];
        env.reset(None, &mut obs).unwrap();
        let (state, seen) = (env.state(), obs);
        prop_assert!(env.step(&[bad], &mut obs).is_err());
        prop_assert!(env.step(&[0, 1], &mut obs).is_err());
        prop_assert_eq!(env.state(), state);
        prop_assert_eq!(obs, seen);
    }
}

#[test]
fn cartpole_reaches_the_default_limit_of_500_with_a_controller() {
    let mut env = CartPole::new(4);
    let mut obs = [0.0f32; 4];
    env.reset(None, &mut obs).unwrap();
    for t in 1..=CartPole::MAX_EPISODE_STEPS {
        let action = u32::from(10.0 * obs[2] + 2.0 * obs[3] + 0.3 * obs[0] + 0.8 * obs[1] > 0.0);
        let step = env.step(&[action], &mut obs).unwrap();
        assert!(!step.terminated, "fell at step {t}");
        assert_eq!(step.truncated, t == 500);
    }
}
