//! Golden tests: CartPole-v1 and Pendulum-v1 against trajectories recorded from
//! Gymnasium 1.4.0 with numpy 2.4.6 (`tests/fixtures/record_gymnasium.py`).
//!
//! Each episode starts from the recorded `f64` state (Gymnasium's numpy seeding cannot be
//! reproduced), replays the recorded actions and compares, at every step, the full `f64`
//! state and the `f32` observation bit for bit, the reward after the cast to `f32`, and
//! both flags.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers may unwrap: a failure is a failed test"
)]

use rl_core::Env;
use rl_envs::{CartPole, Pendulum};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fixture<A> {
    gymnasium: String,
    max_episode_steps: u32,
    episodes: Vec<Episode<A>>,
}

#[derive(Deserialize)]
struct Episode<A> {
    name: String,
    initial_state: Vec<f64>,
    initial_obs: Vec<f32>,
    actions: Vec<A>,
    steps: Vec<Recorded>,
}

#[derive(Deserialize)]
struct Recorded {
    state: Vec<f64>,
    obs: Vec<f32>,
    reward: f64,
    terminated: bool,
    truncated: bool,
}

fn load<A: for<'de> Deserialize<'de>>(json: &str) -> Fixture<A> {
    let fixture: Fixture<A> = serde_json::from_str(json).expect("fixture parses");
    assert!(
        fixture.gymnasium.starts_with("1."),
        "recorded with Gymnasium 1.x"
    );
    assert!(!fixture.episodes.is_empty());
    fixture
}

/// Compares one step bit for bit; `state` is the environment's state after the step.
fn check_step(
    episode: &str,
    t: usize,
    recorded: &Recorded,
    state: &[f64],
    obs: &[f32],
    step: rl_core::Step,
) {
    let at = format!("episode `{episode}`, step {t}");
    assert_eq!(
        state.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        recorded
            .state
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>(),
        "{at}: state {state:?} != recorded {:?}",
        recorded.state
    );
    assert_eq!(obs, recorded.obs.as_slice(), "{at}: observation");
    assert_eq!(step.reward, recorded.reward as f32, "{at}: reward");
    assert_eq!(step.terminated, recorded.terminated, "{at}: terminated");
    assert_eq!(step.truncated, recorded.truncated, "{at}: truncated");
}

#[test]
fn cartpole_matches_gymnasium_bit_for_bit() {
    let fixture = load::<u32>(include_str!("fixtures/cartpole_v1.json"));
    assert_eq!(fixture.max_episode_steps, CartPole::MAX_EPISODE_STEPS);
    let mut steps = 0;
    let mut truncations = 0;
    for episode in &fixture.episodes {
        let mut env = CartPole::new(0);
        let mut obs = [0.0f32; 4];
        let initial: [f64; 4] = episode.initial_state.as_slice().try_into().unwrap();
        env.set_state(initial, &mut obs).unwrap();
        assert_eq!(
            obs.as_slice(),
            episode.initial_obs.as_slice(),
            "{}",
            episode.name
        );
        assert_eq!(episode.actions.len(), episode.steps.len());
        for (t, (action, recorded)) in episode.actions.iter().zip(&episode.steps).enumerate() {
            let step = env.step(&[*action], &mut obs).unwrap();
            check_step(&episode.name, t, recorded, &env.state(), &obs, step);
            steps += 1;
            truncations += usize::from(step.truncated);
        }
        let last = episode.steps.last().unwrap();
        assert!(
            last.terminated || last.truncated,
            "{}: episode ends",
            episode.name
        );
    }
    assert!(steps > 1000, "fixture covers {steps} steps");
    assert!(truncations >= 2, "fixture reaches the time limit");
}

#[test]
fn pendulum_matches_gymnasium_bit_for_bit() {
    let fixture = load::<f32>(include_str!("fixtures/pendulum_v1.json"));
    assert_eq!(fixture.max_episode_steps, Pendulum::MAX_EPISODE_STEPS);
    let mut clipped = 0;
    for episode in &fixture.episodes {
        let mut env = Pendulum::new(0);
        let mut obs = [0.0f32; 3];
        let initial: [f64; 2] = episode.initial_state.as_slice().try_into().unwrap();
        env.set_state(initial, &mut obs).unwrap();
        assert_eq!(
            obs.as_slice(),
            episode.initial_obs.as_slice(),
            "{}",
            episode.name
        );
        for (t, (action, recorded)) in episode.actions.iter().zip(&episode.steps).enumerate() {
            let step = env.step(&[*action], &mut obs).unwrap();
            check_step(&episode.name, t, recorded, &env.state(), &obs, step);
            clipped += usize::from(action.abs() > 2.0);
        }
        assert_eq!(episode.steps.len(), 200, "{}", episode.name);
    }
    assert!(
        clipped > 100,
        "fixture exercises torque clipping ({clipped} steps)"
    );
}
