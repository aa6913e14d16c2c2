#![allow(clippy::unwrap_used, reason = "tests")]

use rl_collect::{ActOutput, Policy, PolicyError};
use rl_core::{BoxSpace, DType, Env, Space, Step};
use rl_envs::CartPole;

use super::*;
use rl_algos::policy::{CategoricalPolicy, PolicyConfig};

/// Episode `i` (reset seed `i`) lasts `1 + i % 3` steps; each step pays the action.
struct Countdown {
    obs_space: Space,
    act_space: Space,
    left: u64,
}

impl Countdown {
    fn new() -> Self {
        Self {
            obs_space: Space::Box(BoxSpace::uniform(0.0, 10.0, &[1], DType::F32).unwrap()),
            act_space: Space::discrete(5).unwrap(),
            left: 0,
        }
    }
}

impl Env for Countdown {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.obs_space
    }

    fn action_space(&self) -> &Space {
        &self.act_space
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        self.left = 1 + seed.unwrap_or(0) % 3;
        obs[0] = self.left as f32;
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<Step> {
        self.left -= 1;
        obs[0] = self.left as f32;
        Ok(Step {
            reward: action[0] as f32,
            terminated: self.left == 0,
            truncated: false,
        })
    }
}

/// Plays 3 when deterministic and 1 when sampling; fails after `fail_after` calls.
struct Fixed {
    mode: Mode,
    calls: usize,
    fail_after: usize,
}

impl Policy for Fixed {
    type Obs = f32;
    type Act = u32;
    type State = ();

    fn act(
        &mut self,
        _obs: &[f32],
        _states: &mut [()],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        self.calls += 1;
        if self.calls > self.fail_after {
            return Err("out of patience".into());
        }
        out.actions.fill(if self.mode == Mode::Deterministic {
            3
        } else {
            1
        });
        Ok(())
    }
}

impl Predict for Fixed {
    fn mode(&self) -> Mode {
        self.mode
    }

    fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }
}

fn fixed(fail_after: usize) -> Fixed {
    Fixed {
        mode: Mode::Sample,
        calls: 0,
        fail_after,
    }
}

#[test]
fn reports_the_statistics_of_deterministic_episodes() {
    let mut policy = fixed(usize::MAX);
    let config = EvalConfig {
        episodes: 6,
        seed: 0,
        ..EvalConfig::default()
    };
    let report = evaluate(&mut Countdown::new(), &mut policy, &config).unwrap();
    // Lengths 1, 2, 3, 1, 2, 3 paying 3 per step (the deterministic action).
    assert_eq!(report.episodes, 6);
    assert_eq!((report.min_length, report.max_length), (1, 3));
    assert!((report.mean_length - 2.0).abs() < 1e-12);
    assert!((report.std_length - (2.0f64 / 3.0).sqrt()).abs() < 1e-12);
    assert!((report.mean_return - 6.0).abs() < 1e-12);
    assert_eq!((report.min_return, report.max_return), (3.0, 9.0));
    assert!((report.std_return - 3.0 * (2.0f64 / 3.0).sqrt()).abs() < 1e-12);
    assert_eq!(policy.mode(), Mode::Sample, "the mode is restored");
    // Another seed starts elsewhere in the cycle.
    let shifted = evaluate(
        &mut Countdown::new(),
        &mut policy,
        &EvalConfig {
            episodes: 1,
            seed: 2,
            ..config
        },
    )
    .unwrap();
    assert_eq!(shifted.max_length, 3);
}

#[test]
fn episodes_are_cut_and_bad_settings_and_errors_are_typed() {
    let mut policy = fixed(usize::MAX);
    let cut = EvalConfig {
        episodes: 3,
        seed: 2,
        max_episode_steps: 2,
    };
    assert_eq!(
        evaluate(&mut Countdown::new(), &mut policy, &cut)
            .unwrap()
            .max_length,
        2
    );
    for bad in [
        EvalConfig {
            episodes: 0,
            ..EvalConfig::default()
        },
        EvalConfig {
            max_episode_steps: 0,
            ..EvalConfig::default()
        },
    ] {
        assert!(matches!(
            evaluate(&mut Countdown::new(), &mut policy, &bad),
            Err(Error::Config { .. })
        ));
    }
    let mut failing = fixed(4);
    let err = evaluate(&mut Countdown::new(), &mut failing, &EvalConfig::default()).unwrap_err();
    assert!(matches!(err, Error::Policy { .. }), "{err}");
    assert!(err.to_string().contains("out of patience"));
    assert_eq!(
        failing.mode(),
        Mode::Sample,
        "the mode is restored on error too"
    );
}

#[test]
fn predict_is_deterministic_and_leaves_the_mode() {
    let mut policy = CategoricalPolicy::for_env(
        &CartPole::new(0),
        PolicyConfig {
            actor_head_scale: 1.0,
            ..PolicyConfig::new()
        },
        3,
    )
    .unwrap();
    let obs = [0.02f32, -0.1, 0.03, 0.2, -0.05, 0.3, 0.01, -0.2];
    let (mut a, mut b) = ([9u32; 2], [9u32; 2]);
    policy.predict(&obs, 2, &mut a).unwrap();
    policy.predict(&obs, 2, &mut b).unwrap();
    assert_eq!(a, b);
    assert!(a.iter().all(|&x| x < 2));
    assert_eq!(policy.mode(), Mode::Sample);
    // The argmax of the policy's log-probabilities.
    let mut log_probs = [0.0f32; 4];
    policy.all_log_probs(&obs, &mut log_probs).unwrap();
    for (row, &action) in log_probs.chunks(2).zip(&a) {
        let best = if row[1] > row[0] { 1 } else { 0 };
        assert_eq!(action, best);
    }
    assert!(policy.predict(&obs[..3], 2, &mut a).is_err());

    // A whole evaluation on CartPole repeats exactly.
    let config = EvalConfig {
        episodes: 3,
        seed: 7,
        ..EvalConfig::default()
    };
    let first = evaluate(&mut CartPole::new(0), &mut policy, &config).unwrap();
    let again = evaluate(&mut CartPole::new(1), &mut policy, &config).unwrap();
    assert_eq!(first, again);
    assert!(first.max_length <= 500 && first.min_length >= 1);
}
