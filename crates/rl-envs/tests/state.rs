//! Saved environment states: a restored environment steps exactly as the one that saved
//! it, and a state of another environment or a damaged one is refused without change.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers may unwrap: a failure is a failed test"
)]

use proptest::prelude::*;
use rl_core::{Element, Env, Error};
use rl_envs::{CartPole, Catch, LargeDiscrete, MaskedCartPole, PartialLargeDiscrete, Pendulum};

/// `steps` steps of `env` with actions from `action(i)`, resetting (unseeded) after each
/// episode: every observation and reward, bit for bit (`f32` and `u8` observations are
/// exact as `f64`).
fn trajectory<E: Env>(
    env: &mut E,
    steps: usize,
    action: impl Fn(usize) -> Vec<E::Act>,
) -> Vec<u64> {
    let mut obs = vec![E::Obs::default(); env.observation_space().flat_len()];
    let mut out = Vec::new();
    for i in 0..steps {
        let step = env.step(&action(i), &mut obs).unwrap();
        out.push(f64::from(step.reward).to_bits());
        out.extend(obs.iter().map(|o| o.to_f64().to_bits()));
        if step.ends_episode() {
            env.reset(None, &mut obs).unwrap();
            out.extend(obs.iter().map(|o| o.to_f64().to_bits()));
        }
    }
    out
}

/// Runs `before` steps of `make(seed)`, saves, runs `after` more; restores the state
/// into another `make(seed)` reset with another seed, and checks it runs the same
/// `after` steps.
fn check_resumes<E: Env>(
    make: impl Fn(u64) -> E,
    seed: u64,
    before: usize,
    after: usize,
    action: impl Fn(usize) -> Vec<E::Act> + Copy,
) {
    let mut env = make(seed);
    let mut obs = vec![E::Obs::default(); env.observation_space().flat_len()];
    env.reset(Some(seed), &mut obs).unwrap();
    trajectory(&mut env, before, action);
    let state = env
        .save_state()
        .expect("the reference environments save their state");
    let expected = trajectory(&mut env, after, move |i| action(before + i));
    let mut other = make(seed);
    other.reset(Some(seed + 1), &mut obs).unwrap();
    other.restore_state(&state).unwrap();
    let got = trajectory(&mut other, after, move |i| action(before + i));
    assert_eq!(got, expected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn a_restored_environment_steps_as_the_saved_one(
        seed in 0u64..1000,
        before in 0usize..600,
        after in 1usize..300,
    ) {
        check_resumes(CartPole::new, seed, before, after, |i| vec![((i * 7) % 3 % 2) as u32]);
        check_resumes(MaskedCartPole::new, seed, before, after, |i| vec![(i % 2) as u32]);
        check_resumes(Pendulum::new, seed, before, after, |i| vec![((i % 5) as f32 - 2.0) * 0.9]);
        let large = |s| LargeDiscrete::with_actions(50, s).unwrap();
        check_resumes(large, seed, before, after, |i| vec![(i % 50) as u32]);
        let catch = |s| Catch::new(s).with_scale(2).unwrap();
        check_resumes(catch, seed, before, after, |i| vec![(i * 5 % 3) as u32]);
        check_resumes(PartialLargeDiscrete::new, seed, before % 40, after % 40 + 1, |i| vec![(i % 100) as u32]);
    }
}

#[test]
fn another_environments_state_is_refused_and_changes_nothing() {
    let mut obs = [0.0f32; 4];
    let mut cartpole = CartPole::new(0);
    cartpole.reset(Some(0), &mut obs).unwrap();
    let before = cartpole.save_state().unwrap();
    let mut pendulum = Pendulum::new(0);
    pendulum.reset(Some(0), &mut obs[..3]).unwrap();
    let foreign = pendulum.save_state().unwrap();
    let error = cartpole.restore_state(&foreign).unwrap_err();
    assert!(
        matches!(&error, Error::EnvState { problem } if problem.contains("of a Pendulum, not of a CartPole")),
        "{error}"
    );
    assert_eq!(cartpole.save_state().unwrap(), before);
}

#[test]
fn damaged_states_are_refused_and_change_nothing() {
    let mut obs = [0.0f32; 4];
    let mut env = CartPole::new(3);
    env.reset(Some(3), &mut obs).unwrap();
    let state = env.save_state().unwrap();
    let text = String::from_utf8(state.clone()).unwrap();
    let damaged = [
        state[..state.len() / 2].to_vec(),
        text.replace("\"elapsed\":0", "\"elapsed\":501")
            .into_bytes(),
        text.replacen('[', "[1e999,", 1).into_bytes(),
        b"not json".to_vec(),
    ];
    for bytes in damaged {
        assert_ne!(bytes, state, "the damage must change the bytes");
        let error = env.restore_state(&bytes).unwrap_err();
        assert!(matches!(error, Error::EnvState { .. }), "{error}");
        assert_eq!(env.save_state().unwrap(), state);
    }
}

/// An environment that implements neither method: cannot be saved, and says so.
struct Plain(rl_core::Space);

impl Env for Plain {
    type Obs = f32;
    type Act = u32;
    fn observation_space(&self) -> &rl_core::Space {
        &self.0
    }
    fn action_space(&self) -> &rl_core::Space {
        &self.0
    }
    fn reset(&mut self, _: Option<u64>, _: &mut [f32]) -> rl_core::Result<()> {
        Ok(())
    }
    fn step(&mut self, _: &[u32], _: &mut [f32]) -> rl_core::Result<rl_core::Step> {
        Ok(rl_core::Step::default())
    }
}

#[test]
fn an_environment_without_state_saving_says_so() {
    let mut env = Plain(rl_core::Space::Discrete { n: 2 });
    assert!(env.save_state().is_none());
    let error = env.restore_state(b"{}").unwrap_err();
    assert!(error.to_string().contains("episodes restart"), "{error}");
}
