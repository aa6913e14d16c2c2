use super::*;
#[allow(unused_imports, reason = "the learner traits, for their methods")]
use crate::learner::{Learner as _, OffPolicyLearner as _, OnPolicyLearner as _};
use proptest::prelude::*;
use rl_core::{DType, TransitionSchema};
use rl_storage::ColumnSlice;

/// A GAE problem over plain columns, time-major (`steps x envs`).
#[derive(Clone, Debug)]
struct Case {
    steps: usize,
    envs: usize,
    gamma: f32,
    lambda: f32,
    rewards: Vec<f32>,
    values: Vec<f32>,
    terminated: Vec<bool>,
    truncated: Vec<bool>,
    /// The stored `final_value` column (read only at cuts and the last step).
    final_values: Vec<f32>,
}

/// A full rollout holding `case`'s columns (observations, actions and log-probs zero).
fn rollout(case: &Case) -> RolloutBuffer {
    let schema = TransitionSchema::new(DType::F32, &[1], DType::U32, &[])
        .for_rollout()
        .build()
        .unwrap();
    let mut buffer = RolloutBuffer::new(schema, case.steps, case.envs, None).unwrap();
    let n = case.envs;
    let (obs, actions, zeros) = (vec![0.0f32; n], vec![0u32; n], vec![0.0f32; n]);
    let flags = |v: &[bool]| v.iter().map(|&b| Flag::new(b)).collect::<Vec<_>>();
    for t in 0..case.steps {
        let rows = t * n..(t + 1) * n;
        let (terminated, truncated) = (
            flags(&case.terminated[rows.clone()]),
            flags(&case.truncated[rows.clone()]),
        );
        buffer
            .push_step(&[
                ColumnSlice::from(&obs),
                (&actions).into(),
                case.rewards[rows.clone()].into(),
                (&terminated).into(),
                (&truncated).into(),
                (&zeros).into(),
                case.values[rows.clone()].into(),
                case.final_values[rows].into(),
            ])
            .unwrap();
    }
    buffer
}

fn run(case: &Case, transform: RewardTransform) -> Advantages {
    let mut out = Advantages::new(case.steps * case.envs);
    out.compute(&rollout(case), case.gamma, case.lambda, transform)
        .unwrap();
    out
}

/// GAE by its definition, in f64: for each row, the `(gamma lambda)`-discounted sum of
/// TD residuals up to the end of its segment (a termination, a truncation or the
/// rollout's end). Returns the advantages and, per row, the scale of the sum (the same
/// discounted sum of the residuals' terms in absolute value).
fn reference(case: &Case) -> (Vec<f64>, Vec<f64>) {
    let (steps, envs) = (case.steps, case.envs);
    let (gamma, lambda) = (f64::from(case.gamma), f64::from(case.lambda));
    let mut advantages = vec![0.0; steps * envs];
    let mut scales = vec![0.0; steps * envs];
    let at = |t: usize, e: usize| t * envs + e;
    for e in 0..envs {
        let mut start = 0;
        while start < steps {
            let mut end = start;
            while end + 1 < steps && !case.terminated[at(end, e)] && !case.truncated[at(end, e)] {
                end += 1;
            }
            let next_value = |k: usize| -> f64 {
                let i = at(k, e);
                if k < end {
                    f64::from(case.values[at(k + 1, e)])
                } else if case.terminated[i] {
                    0.0
                } else {
                    // A truncation or the rollout's end: the value after the cut.
                    f64::from(case.final_values[i])
                }
            };
            for t in start..=end {
                let (mut sum, mut scale) = (0.0, 0.0);
                for k in t..=end {
                    let i = at(k, e);
                    let weight = (gamma * lambda).powi((k - t) as i32);
                    let (r, v, next) = (
                        f64::from(case.rewards[i]),
                        f64::from(case.values[i]),
                        next_value(k),
                    );
                    sum += weight * (r + gamma * next - v);
                    scale += weight * (r.abs() + gamma * next.abs() + v.abs());
                }
                advantages[at(t, e)] = sum;
                scales[at(t, e)] = scale;
            }
            start = end + 1;
        }
    }
    (advantages, scales)
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=32, 1usize..=6, 0.0f32..=1.0, 0.0f32..=1.0).prop_flat_map(
        |(steps, envs, gamma, lambda)| {
            let rows = steps * envs;
            let floats = |n| proptest::collection::vec(-10.0f32..10.0, n);
            // Flags set about one row in five each, both at once sometimes.
            let flags = |n| proptest::collection::vec(proptest::bool::weighted(0.2), n);
            (
                floats(rows),
                floats(rows),
                flags(rows),
                flags(rows),
                floats(rows),
            )
                .prop_map(
                    move |(rewards, values, terminated, truncated, final_values)| Case {
                        steps,
                        envs,
                        gamma,
                        lambda,
                        rewards,
                        values,
                        terminated,
                        truncated,
                        final_values,
                    },
                )
        },
    )
}

proptest! {
    /// Tolerance: the reverse scan accumulates in f32. Each step of the recursion
    /// rounds about four times, each off by at most 2^-24 of the magnitude involved,
    /// and `g*l <= 1` never amplifies earlier errors; so the error is at most
    /// ~4 * 32 * 6e-8 = 7.6e-6 of the `scale` for segments of at most 32 steps.
    #[test]
    fn gae_matches_the_definition(case in case()) {
        let out = run(&case, RewardTransform::IDENTITY);
        let (want, scales) = reference(&case);
        for i in 0..case.steps * case.envs {
            let scale = scales[i].max(1.0);
            let got = f64::from(out.advantages()[i]);
            prop_assert!(
                (got - want[i]).abs() <= 1e-5 * scale,
                "row {}: advantage {} but the definition gives {} (scale {})", i, got, want[i], scale
            );
            let want_return = want[i] + f64::from(case.values[i]);
            let return_scale = scale + f64::from(case.values[i].abs());
            prop_assert!(
                (f64::from(out.returns()[i]) - want_return).abs() <= 1e-5 * return_scale,
                "row {}: return {} but the definition gives {}", i, out.returns()[i], want_return
            );
        }
    }

    /// A transform equals GAE on rewards scaled and clipped beforehand: the same f32
    /// operations on the same inputs, so bit for bit; the identity changes nothing.
    #[test]
    fn transformed_rewards_equal_gae_on_transformed_rewards(
        case in case(),
        scale in 0.01f32..100.0,
        clip in proptest::option::of(0.5f32..50.0),
    ) {
        let clip = clip.unwrap_or(f32::INFINITY);
        let transformed = run(&case, RewardTransform { scale, clip });
        let fresh = run(&Case {
            rewards: case.rewards.iter().map(|r| (r * scale).clamp(-clip, clip)).collect(),
            ..case.clone()
        }, RewardTransform::IDENTITY);
        prop_assert_eq!(transformed.advantages(), fresh.advantages());
        prop_assert_eq!(transformed.returns(), fresh.returns());
        let scaled_by_one = run(&case, RewardTransform { scale: 1.0, clip: f32::INFINITY });
        let plain = run(&case, RewardTransform::IDENTITY);
        prop_assert_eq!(scaled_by_one.advantages(), plain.advantages());
    }
}

/// One environment, one episode of `rewards` that ends at its last step as `end` says.
fn single_episode(
    rewards: &[f32],
    values: &[f32],
    gamma: f32,
    lambda: f32,
    end: End,
) -> Advantages {
    let steps = rewards.len();
    let last = |t: usize, kind: End| t + 1 == steps && end == kind;
    run(
        &Case {
            steps,
            envs: 1,
            gamma,
            lambda,
            rewards: rewards.to_vec(),
            values: values.to_vec(),
            terminated: (0..steps).map(|t| last(t, End::Terminated)).collect(),
            truncated: (0..steps).map(|t| last(t, End::Truncated)).collect(),
            // Read only at the cut, as the value of the final observation.
            final_values: vec![FINAL_VALUE; steps],
        },
        RewardTransform::IDENTITY,
    )
}

const FINAL_VALUE: f32 = 2.0;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    Terminated,
    Truncated,
}

#[test]
fn lambda_one_gives_monte_carlo_returns_on_a_terminated_episode() {
    let rewards = [1.0, -2.0, 0.5, 3.0, 1.5];
    let values = [0.3, -1.7, 4.0, 2.2, -0.9];
    let gamma = 0.9f32;
    let out = single_episode(&rewards, &values, gamma, 1.0, End::Terminated);
    for t in 0..rewards.len() {
        let monte_carlo: f64 = rewards[t..]
            .iter()
            .enumerate()
            .map(|(k, &r)| f64::from(gamma).powi(k as i32) * f64::from(r))
            .sum();
        assert!(
            (f64::from(out.returns()[t]) - monte_carlo).abs() < 1e-5,
            "t {t}: return {} but the Monte-Carlo return is {monte_carlo}",
            out.returns()[t]
        );
        assert!((out.returns()[t] - (out.advantages()[t] + values[t])).abs() < 1e-6);
    }
}

#[test]
fn lambda_zero_gives_one_step_td() {
    let rewards = [1.0, -2.0, 0.5, 3.0];
    let values = [0.3, -1.7, 4.0, 2.2];
    let gamma = 0.95f32;
    for end in [End::Terminated, End::Truncated] {
        let out = single_episode(&rewards, &values, gamma, 0.0, end);
        for t in 0..rewards.len() {
            let next = if t + 1 < rewards.len() {
                values[t + 1]
            } else if end == End::Truncated {
                FINAL_VALUE
            } else {
                0.0
            };
            // The same f32 operations: bit-identical.
            assert_eq!(
                out.advantages()[t],
                rewards[t] + gamma * next - values[t],
                "t {t} {end:?}"
            );
        }
    }
}

#[test]
fn truncation_and_termination_differ_by_the_discounted_final_value() {
    // Values chosen so that every operation is exact in binary floating point.
    let rewards = [1.0, 0.5, 1.0];
    let values = [0.5, 0.25, 0.5];
    let (gamma, lambda) = (0.5f32, 0.5f32);
    let a = single_episode(&rewards, &values, gamma, lambda, End::Terminated);
    let b = single_episode(&rewards, &values, gamma, lambda, End::Truncated);
    let (a, b) = (a.advantages(), b.advantages());
    assert_eq!(b[2] - a[2], gamma * FINAL_VALUE);
    assert_eq!(b[1] - a[1], gamma * lambda * gamma * FINAL_VALUE);
    assert_eq!(b[0] - a[0], (gamma * lambda).powi(2) * gamma * FINAL_VALUE);
}

#[test]
fn the_chain_is_cut_at_episode_boundaries_and_the_rollout_end() {
    // Two environments: env 0 truncated at t = 1, env 1 never done. The final values
    // are read at env 0's truncation (10) and at the last step (100, 200) only.
    let case = Case {
        steps: 3,
        envs: 2,
        gamma: 1.0,
        lambda: 1.0,
        rewards: vec![1.0; 6],
        values: vec![0.0; 6],
        terminated: vec![false; 6],
        truncated: vec![false, false, true, false, false, false],
        final_values: vec![-5.0, -5.0, 10.0, -5.0, 100.0, 200.0],
    };
    let out = run(&case, RewardTransform::IDENTITY);
    // Env 0: [1 + 1 + 10, 1 + 10, 1 + 100]; env 1: [3 + 200, 2 + 200, 1 + 200].
    assert_eq!(out.returns(), [12.0, 203.0, 11.0, 202.0, 101.0, 201.0]);
    // A termination at the last step ignores the final value.
    let terminated = run(
        &Case {
            terminated: vec![false, false, false, false, true, false],
            ..case
        },
        RewardTransform::IDENTITY,
    );
    assert_eq!(terminated.returns()[4], 1.0);
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let case = Case {
        steps: 2,
        envs: 1,
        gamma: 0.9,
        lambda: 0.8,
        rewards: vec![1.0, 2.0],
        values: vec![0.5, 0.25],
        terminated: vec![false, false],
        truncated: vec![false, false],
        final_values: vec![0.0, 3.0],
    };
    let full = rollout(&case);
    let mut out = run(&case, RewardTransform::IDENTITY);
    let before = out.advantages().to_vec();
    // Hand-computed: delta_1 = 2 + 0.9*3 - 0.25 = 4.45, delta_0 = 1 + 0.9*0.25 - 0.5
    // = 0.725, adv_0 = 0.725 + 0.72*4.45 = 3.929.
    assert!((before[1] - 4.45).abs() < 1e-6 && (before[0] - 3.929).abs() < 1e-6);
    for transform in [
        RewardTransform {
            scale: 0.0,
            clip: 1.0,
        },
        RewardTransform {
            scale: f32::NAN,
            clip: 1.0,
        },
        RewardTransform {
            scale: 1.0,
            clip: 0.0,
        },
        RewardTransform {
            scale: 1.0,
            clip: f32::NAN,
        },
    ] {
        let err = out.compute(&full, 0.9, 0.8, transform).unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err}");
    }
    for (gamma, lambda) in [(1.5, 0.8), (0.9, -0.1), (f32::NAN, 0.9)] {
        let err = out
            .compute(&full, gamma, lambda, RewardTransform::IDENTITY)
            .unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err}");
    }
    let mut partial = rollout(&case);
    partial.clear();
    let err = out
        .compute(&partial, 0.9, 0.8, RewardTransform::IDENTITY)
        .unwrap_err();
    assert!(err.to_string().contains("full rollout"), "{err}");
    let mut small = Advantages::new(1);
    assert!(
        small
            .compute(&full, 0.9, 0.8, RewardTransform::IDENTITY)
            .is_err()
    );
    assert_eq!(out.advantages(), before);
}
