use super::*;
use proptest::prelude::*;
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_testkit::measure;

/// Owned data of one step, for tests.
#[derive(Clone, Debug)]
struct OwnedStep {
    obs: Vec<f32>,
    discrete: Vec<u32>,
    continuous: Vec<f32>,
    rewards: Vec<f32>,
    terminated: Vec<bool>,
    truncated: Vec<bool>,
    values: Vec<f32>,
    log_probs: Vec<f32>,
    final_values: Vec<f32>,
}

impl OwnedStep {
    /// Distinct values per (t, e) so gathers can be checked row by row.
    fn distinct(config: &RolloutConfig, t: usize) -> Self {
        let n = config.envs;
        let row = |e: usize| (t * n + e) as f32;
        Self {
            obs: (0..n * config.obs_len)
                .map(|k| row(k / config.obs_len) * 10.0 + (k % config.obs_len) as f32)
                .collect(),
            discrete: (0..n).map(|e| (t * n + e) as u32).collect(),
            continuous: (0..n * config.action.width())
                .map(|k| -row(k / config.action.width()))
                .collect(),
            rewards: (0..n).map(|e| row(e) * 0.5).collect(),
            terminated: vec![false; n],
            truncated: vec![false; n],
            values: (0..n).map(|e| row(e) * 0.25).collect(),
            log_probs: (0..n).map(|e| -row(e)).collect(),
            final_values: vec![0.0; n],
        }
    }

    fn data(&self, shape: ActionShape) -> StepData<'_> {
        StepData {
            obs: &self.obs,
            actions: match shape {
                ActionShape::Discrete => Actions::Discrete(&self.discrete),
                ActionShape::Continuous(_) => Actions::Continuous(&self.continuous),
            },
            rewards: &self.rewards,
            terminated: &self.terminated,
            truncated: &self.truncated,
            values: &self.values,
            log_probs: &self.log_probs,
            final_values: &self.final_values,
        }
    }
}

fn config(steps: usize, envs: usize) -> RolloutConfig {
    RolloutConfig::new(steps, envs, 3, ActionShape::Discrete)
}

fn filled(config: RolloutConfig) -> RolloutBuffer {
    let mut buffer = RolloutBuffer::new(config).unwrap();
    for t in 0..config.steps {
        let step = OwnedStep::distinct(&config, t);
        buffer.push_step(step.data(config.action)).unwrap();
    }
    buffer
}

fn is_config_error(err: &Error, what: &str) -> bool {
    matches!(err, Error::Core(rl_core::Error::InvalidConfig { what: w, .. }) if w == what)
}

// ---- configuration and memory ----------------------------------------------------

#[test]
fn invalid_configurations_are_refused_with_the_setting_named() {
    let ok = config(4, 2);
    assert!(ok.validate().is_ok());
    let cases: [(RolloutConfig, &str); 11] = [
        (RolloutConfig { steps: 0, ..ok }, "steps"),
        (RolloutConfig { envs: 0, ..ok }, "envs"),
        (RolloutConfig { obs_len: 0, ..ok }, "obs_len"),
        (
            RolloutConfig {
                action: ActionShape::Continuous(0),
                ..ok
            },
            "continuous action dimension",
        ),
        (RolloutConfig { gamma: -0.01, ..ok }, "gamma"),
        (RolloutConfig { gamma: 1.01, ..ok }, "gamma"),
        (
            RolloutConfig {
                gamma: f32::NAN,
                ..ok
            },
            "gamma",
        ),
        (
            RolloutConfig {
                gae_lambda: 1.5,
                ..ok
            },
            "gae_lambda",
        ),
        (
            RolloutConfig {
                steps: usize::MAX,
                ..ok
            },
            "rollout rows",
        ),
        (
            RolloutConfig {
                steps: 1 << 16,
                envs: 1 << 16,
                ..ok
            },
            "rollout rows",
        ),
        (
            RolloutConfig {
                steps: 1 << 20,
                obs_len: usize::MAX / 2,
                ..ok
            },
            "observation column",
        ),
    ];
    for (config, what) in cases {
        let err = RolloutBuffer::new(config).unwrap_err();
        assert!(is_config_error(&err, what), "{config:?}: {err}");
        assert!(RolloutBuffer::plan(&config).is_err());
        assert!(RolloutBatch::new(&config, 8).is_err());
    }
    // The bounds themselves are valid.
    for (gamma, gae_lambda) in [(0.0, 0.0), (1.0, 1.0)] {
        let edge = RolloutConfig {
            gamma,
            gae_lambda,
            ..ok
        };
        assert!(RolloutBuffer::new(edge).is_ok());
    }
    assert!(is_config_error(
        &RolloutBatch::new(&ok, 0).unwrap_err(),
        "max_rows"
    ));
}

#[test]
fn planned_bytes_equal_the_allocated_capacities() {
    for action in [ActionShape::Discrete, ActionShape::Continuous(3)] {
        let config = RolloutConfig::new(7, 5, 11, action);
        let buffer = RolloutBuffer::new(config).unwrap();
        let f = size_of::<f32>();
        let allocated = buffer.obs.capacity() * f
            + buffer.actions.capacity_bytes()
            + buffer.rewards.capacity() * f
            + buffer.terminated.capacity() * size_of::<Flag>()
            + buffer.truncated.capacity() * size_of::<Flag>()
            + buffer.values.capacity() * f
            + buffer.log_probs.capacity() * f
            + buffer.final_values.capacity() * f
            + buffer.advantages.capacity() * f
            + buffer.returns.capacity() * f
            + buffer.order.capacity() * size_of::<u32>()
            + buffer.last_values.capacity() * f;
        let plan = RolloutBuffer::plan(&config).unwrap();
        assert_eq!(plan.total(Location::Ram), allocated as u64);
        assert_eq!(plan, buffer.memory_plan());
        assert_eq!(plan.lines().len(), 12, "one line per column");
        // 35 rows: obs 35*11*4, actions 35*w*4, 6 f32 scalar columns + the order
        // (35*4 each), two flag columns (35 each).
        // Plus the 5 last values.
        let expected = 35 * 11 * 4 + 35 * action.width() * 4 + 7 * 35 * 4 + 2 * 35 + 5 * 4;
        assert_eq!(allocated, expected);

        let batch = RolloutBatch::new(&config, 6).unwrap();
        let batch_allocated = batch.obs.capacity() * f
            + batch.actions.capacity_bytes()
            + (batch.log_probs.capacity()
                + batch.values.capacity()
                + batch.advantages.capacity()
                + batch.returns.capacity())
                * f;
        let batch_plan = RolloutBatch::plan(&config, 6).unwrap();
        assert_eq!(batch_plan.total(Location::Ram), batch_allocated as u64);
        assert_eq!(batch_plan, batch.memory_plan());
        assert_eq!(
            batch_allocated,
            6 * 11 * 4 + 6 * action.width() * 4 + 4 * 6 * 4
        );
    }
}

#[test]
fn over_budget_is_refused_before_allocating() {
    // 1000 x 64 x 1024 f32 observations: 250 MiB, far over a 1 MiB budget.
    let big = RolloutConfig::new(1000, 64, 1024, ActionShape::Discrete);
    let (result, stats) = measure(|| RolloutBuffer::with_budget(big, &MemoryBudget::ram(1 << 20)));
    let err = result.unwrap_err();
    assert!(
        matches!(err, Error::Core(rl_core::Error::OverBudget { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("obs (ram, 250.00 MiB)"), "{err}");
    // Only the plan and the message were allocated, never the columns.
    assert!(stats.peak_live_bytes < 1 << 16, "{stats:?}");
    let small = config(4, 2);
    let planned = RolloutBuffer::plan(&small).unwrap().total(Location::Ram);
    assert!(RolloutBuffer::with_budget(small, &MemoryBudget::ram(planned)).is_ok());
    assert!(RolloutBuffer::with_budget(small, &MemoryBudget::ram(planned - 1)).is_err());
}

// ---- pushing ---------------------------------------------------------------------

#[test]
fn push_stores_time_major_rows_and_flags_apart() {
    let config = RolloutConfig::new(2, 3, 2, ActionShape::Continuous(2));
    let mut buffer = RolloutBuffer::new(config).unwrap();
    assert!(buffer.is_empty());
    let mut step = OwnedStep::distinct(&config, 0);
    step.terminated = vec![true, false, true];
    step.truncated = vec![false, true, true];
    step.final_values = vec![5.0, 6.0, 7.0];
    buffer.push_step(step.data(config.action)).unwrap();
    assert_eq!(
        (buffer.len(), buffer.rows(), buffer.is_full()),
        (1, 3, false)
    );
    buffer
        .push_step(OwnedStep::distinct(&config, 1).data(config.action))
        .unwrap();
    assert!(buffer.is_full());
    assert_eq!(
        buffer.obs()[2 * 2..2 * 2 + 2],
        [20.0, 21.0],
        "row 2 = t0 e2"
    );
    assert_eq!(
        buffer.obs()[4 * 2..4 * 2 + 2],
        [40.0, 41.0],
        "row 4 = t1 e1"
    );
    assert_eq!(
        buffer.actions(),
        Actions::Continuous(&[
            -0.0, -0.0, -1.0, -1.0, -2.0, -2.0, -3.0, -3.0, -4.0, -4.0, -5.0, -5.0
        ])
    );
    let flags = |f: &[Flag]| f.iter().map(|f| f.get()).collect::<Vec<_>>();
    assert_eq!(
        flags(buffer.terminated()),
        [true, false, true, false, false, false]
    );
    assert_eq!(
        flags(buffer.truncated()),
        [false, true, true, false, false, false]
    );
    // Final values are kept only where the row bootstraps: truncated, not terminated.
    assert_eq!(buffer.final_values(), [0.0, 6.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(buffer.rewards(), [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
    assert_eq!(buffer.log_probs()[5], -5.0);
    assert!(buffer.advantages().is_none());
}

/// A copy of every column and the counters, to check that nothing changed.
fn snapshot(buffer: &RolloutBuffer) -> String {
    format!(
        "{} {} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
        buffer.len,
        buffer.gae_ready,
        buffer.obs,
        buffer.actions,
        buffer.rewards,
        buffer.terminated,
        buffer.truncated,
        buffer.values,
        buffer.log_probs,
        buffer.final_values,
        buffer.advantages,
        buffer.returns,
        buffer.order
    )
}

#[test]
fn a_rejected_push_changes_nothing() {
    let config = RolloutConfig::new(2, 3, 2, ActionShape::Discrete);
    let mut buffer = RolloutBuffer::new(config).unwrap();
    buffer
        .push_step(OwnedStep::distinct(&config, 0).data(config.action))
        .unwrap();
    let before = snapshot(&buffer);
    let good = OwnedStep::distinct(&config, 1);

    let shape = |what: &str, err: &Error| matches!(err, Error::Core(rl_core::Error::ShapeMismatch { what: w, .. }) if *w == what);
    let non_finite = |column: &str, row: usize, err: &Error| matches!(err, Error::NonFinite { column: c, row: r, .. } if c == column && *r == row);
    type Case = (
        &'static str,
        Box<dyn Fn(&mut OwnedStep)>,
        Box<dyn Fn(&Error) -> bool>,
    );
    let cases: Vec<Case> = vec![
        (
            "short obs",
            Box::new(|s| {
                s.obs.pop();
            }),
            Box::new(move |e| shape("obs", e)),
        ),
        (
            "long actions",
            Box::new(|s| s.discrete.push(0)),
            Box::new(move |e| shape("actions", e)),
        ),
        (
            "short rewards",
            Box::new(|s| {
                s.rewards.pop();
            }),
            Box::new(move |e| shape("rewards", e)),
        ),
        (
            "short terminated",
            Box::new(|s| {
                s.terminated.pop();
            }),
            Box::new(move |e| shape("terminated", e)),
        ),
        (
            "short truncated",
            Box::new(|s| {
                s.truncated.pop();
            }),
            Box::new(move |e| shape("truncated", e)),
        ),
        (
            "short values",
            Box::new(|s| {
                s.values.pop();
            }),
            Box::new(move |e| shape("values", e)),
        ),
        (
            "short log_probs",
            Box::new(|s| {
                s.log_probs.pop();
            }),
            Box::new(move |e| shape("log_probs", e)),
        ),
        (
            "short final_values",
            Box::new(|s| {
                s.final_values.pop();
            }),
            Box::new(move |e| shape("final_values", e)),
        ),
        (
            "nan in last obs",
            Box::new(|s| *s.obs.last_mut().unwrap() = f32::NAN),
            Box::new(move |e| non_finite("obs", 2, e)),
        ),
        (
            "inf reward",
            Box::new(|s| s.rewards[1] = f32::INFINITY),
            Box::new(move |e| non_finite("reward", 1, e)),
        ),
        (
            "nan value",
            Box::new(|s| s.values[2] = f32::NAN),
            Box::new(move |e| non_finite("value", 2, e)),
        ),
        (
            "nan log_prob",
            Box::new(|s| s.log_probs[0] = f32::NEG_INFINITY),
            Box::new(move |e| non_finite("log_prob", 0, e)),
        ),
        (
            "nan final value where truncated",
            Box::new(|s| {
                s.truncated[1] = true;
                s.final_values[1] = f32::NAN;
            }),
            Box::new(move |e| non_finite("final_value", 1, e)),
        ),
    ];
    for (name, spoil, expected) in &cases {
        let mut step = good.clone();
        spoil(&mut step);
        let err = buffer.push_step(step.data(config.action)).unwrap_err();
        assert!(expected(&err), "{name}: {err}");
        assert_eq!(snapshot(&buffer), before, "{name} changed the buffer");
    }
    // The wrong action kind.
    let err = buffer
        .push_step(good.data(ActionShape::Continuous(1)))
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::DTypeMismatch {
                expected: DType::U32,
                actual: DType::F32,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(snapshot(&buffer), before);

    // A NaN final value where it is not read (not truncated, or also terminated) is fine.
    let mut ignored = good.clone();
    ignored.final_values = vec![f32::NAN; 3];
    ignored.terminated[0] = true;
    ignored.truncated[0] = true;
    buffer.push_step(ignored.data(config.action)).unwrap();
    assert_eq!(buffer.final_values()[3..], [0.0, 0.0, 0.0]);

    // Full: refused with a message saying what to do, nothing changed.
    let full = snapshot(&buffer);
    let err = buffer.push_step(good.data(config.action)).unwrap_err();
    assert!(
        matches!(err, Error::RolloutFull { steps: 2, envs: 3 }),
        "{err}"
    );
    assert!(err.to_string().contains("compute_gae"), "{err}");
    assert!(err.to_string().contains("clear()"), "{err}");
    assert_eq!(snapshot(&buffer), full);
}

#[test]
fn non_finite_values_are_stored_when_allowed() {
    let config = RolloutConfig {
        reject_non_finite: false,
        ..RolloutConfig::new(1, 2, 1, ActionShape::Discrete)
    };
    let mut buffer = RolloutBuffer::new(config).unwrap();
    let mut step = OwnedStep::distinct(&config, 0);
    step.rewards[1] = f32::NAN;
    step.obs[0] = f32::INFINITY;
    buffer.push_step(step.data(config.action)).unwrap();
    assert!(buffer.rewards()[1].is_nan());
    buffer.compute_gae(&[f32::NAN, 0.0]).unwrap();
}

#[test]
fn clear_keeps_the_allocations_and_empties_the_buffer() {
    let config = config(3, 2);
    let mut buffer = filled(config);
    buffer.compute_gae(&[0.0, 0.0]).unwrap();
    let pointer = buffer.obs.as_ptr();
    buffer.clear();
    assert!(buffer.is_empty() && !buffer.is_full());
    assert!(buffer.obs().is_empty() && buffer.advantages().is_none());
    assert_eq!(buffer.obs.as_ptr(), pointer);
    assert_eq!(buffer.obs.capacity(), 3 * 2 * 3);
    let step = OwnedStep::distinct(&config, 0);
    buffer.push_step(step.data(config.action)).unwrap();
    assert_eq!(buffer.len(), 1);
}

// ---- GAE ---------------------------------------------------------------------------

/// GAE from its definition, in f64: per environment, cut the rollout into episode
/// segments (ending at a termination, a truncation or the rollout's end); within a
/// segment, the advantage at `t` is the `(gamma * lambda)`-discounted sum of the TD
/// residuals from `t` to the segment's end. The residual at a segment's end uses 0
/// after a termination, the final value after a truncation, and the last value at
/// the rollout's end. Returns the advantages and, per row, the scale of the sum (the
/// same discounted sum of the residuals' terms in absolute value).
struct Reference {
    advantages: Vec<f64>,
    scales: Vec<f64>,
}

#[expect(
    clippy::too_many_arguments,
    reason = "a test reference over plain columns"
)]
fn reference_gae(
    steps: usize,
    envs: usize,
    gamma: f64,
    lambda: f64,
    rewards: &[f32],
    values: &[f32],
    terminated: &[bool],
    truncated: &[bool],
    final_values: &[f32],
    last_values: &[f32],
) -> Reference {
    let mut advantages = vec![0.0; steps * envs];
    let mut scales = vec![0.0; steps * envs];
    let at = |t: usize, e: usize| t * envs + e;
    for e in 0..envs {
        let mut start = 0;
        while start < steps {
            // The segment is start..=end.
            let mut end = start;
            while end + 1 < steps && !terminated[at(end, e)] && !truncated[at(end, e)] {
                end += 1;
            }
            let next_value = |k: usize| -> f64 {
                let i = at(k, e);
                if k < end {
                    f64::from(values[at(k + 1, e)])
                } else if terminated[i] {
                    0.0
                } else if truncated[i] {
                    f64::from(final_values[i])
                } else {
                    f64::from(last_values[e])
                }
            };
            for t in start..=end {
                let (mut sum, mut scale) = (0.0, 0.0);
                for k in t..=end {
                    let i = at(k, e);
                    let weight = (gamma * lambda).powi((k - t) as i32);
                    let (r, v, next) = (f64::from(rewards[i]), f64::from(values[i]), next_value(k));
                    sum += weight * (r + gamma * next - v);
                    scale += weight * (r.abs() + gamma * next.abs() + v.abs());
                }
                advantages[at(t, e)] = sum;
                scales[at(t, e)] = scale;
            }
            start = end + 1;
        }
    }
    Reference { advantages, scales }
}

#[derive(Clone, Debug)]
struct GaeCase {
    steps: usize,
    envs: usize,
    gamma: f32,
    lambda: f32,
    rewards: Vec<f32>,
    values: Vec<f32>,
    terminated: Vec<bool>,
    truncated: Vec<bool>,
    final_values: Vec<f32>,
    last_values: Vec<f32>,
}

fn gae_case() -> impl Strategy<Value = GaeCase> {
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
                floats(envs),
            )
                .prop_map(
                    move |(rewards, values, terminated, truncated, final_values, last_values)| {
                        GaeCase {
                            steps,
                            envs,
                            gamma,
                            lambda,
                            rewards,
                            values,
                            terminated,
                            truncated,
                            final_values,
                            last_values,
                        }
                    },
                )
        },
    )
}

fn run_gae(case: &GaeCase) -> RolloutBuffer {
    let config = RolloutConfig {
        gamma: case.gamma,
        gae_lambda: case.lambda,
        ..RolloutConfig::new(case.steps, case.envs, 1, ActionShape::Discrete)
    };
    let mut buffer = RolloutBuffer::new(config).unwrap();
    let n = case.envs;
    let (obs, actions, log_probs) = (vec![0.0; n], vec![0u32; n], vec![0.0; n]);
    for t in 0..case.steps {
        let rows = t * n..(t + 1) * n;
        buffer
            .push_step(StepData {
                obs: &obs,
                actions: Actions::Discrete(&actions),
                rewards: &case.rewards[rows.clone()],
                terminated: &case.terminated[rows.clone()],
                truncated: &case.truncated[rows.clone()],
                values: &case.values[rows.clone()],
                log_probs: &log_probs,
                final_values: &case.final_values[rows],
            })
            .unwrap();
    }
    buffer.compute_gae(&case.last_values).unwrap();
    buffer
}

proptest! {
    /// Tolerance: the reverse scan accumulates in f32. Each step of the recursion
    /// `adv = (r + g*next - v) + g*l*adv_next` rounds about four times, each rounding
    /// off by at most 2^-24 (6e-8) of the magnitude involved, and `g*l <= 1` never
    /// amplifies earlier errors; so the error is at most ~4 * 32 * 6e-8 = 7.6e-6 of
    /// the `scale` (the discounted sum of |r| + g|next| + |v|) for segments of at
    /// most 32 steps. Relative to the value itself there is no bound (advantages can
    /// cancel to 0), so 1e-5 is relative to that scale.
    #[test]
    fn gae_matches_the_definition(case in gae_case()) {
        let buffer = run_gae(&case);
        let reference = reference_gae(
            case.steps,
            case.envs,
            f64::from(case.gamma),
            f64::from(case.lambda),
            &case.rewards,
            &case.values,
            &case.terminated,
            &case.truncated,
            &case.final_values,
            &case.last_values,
        );
        let advantages = buffer.advantages().unwrap();
        let returns = buffer.returns().unwrap();
        for i in 0..case.steps * case.envs {
            let want = reference.advantages[i];
            let scale = reference.scales[i].max(1.0);
            let got = f64::from(advantages[i]);
            prop_assert!(
                (got - want).abs() <= 1e-5 * scale,
                "row {}: advantage {} but the definition gives {} (scale {})", i, got, want, scale
            );
            let want_return = want + f64::from(case.values[i]);
            let return_scale = scale + f64::from(case.values[i].abs());
            prop_assert!(
                (f64::from(returns[i]) - want_return).abs() <= 1e-5 * return_scale,
                "row {}: return {} but the definition gives {}", i, returns[i], want_return
            );
        }
    }

    #[test]
    fn minibatches_cover_every_row_once_per_epoch(
        steps in 1usize..40,
        envs in 1usize..8,
        size in 1usize..70,
        seed in any::<u64>(),
    ) {
        let config = config(steps, envs);
        let mut buffer = filled(config);
        buffer.compute_gae(&vec![0.0; envs]).unwrap();
        let rows = steps * envs;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut batch = RolloutBatch::new(&config, size).unwrap();
        for _epoch in 0..2 {
            buffer.shuffle(&mut rng);
            let mut seen = vec![0u32; rows];
            let mut sizes = Vec::new();
            for indices in buffer.minibatches(size).unwrap() {
                buffer.gather(indices, &mut batch).unwrap();
                prop_assert_eq!(batch.len(), indices.len());
                for (k, &i) in indices.iter().enumerate() {
                    seen[i as usize] += 1;
                    prop_assert_eq!(batch.row_of(k), i);
                    let i = i as usize;
                    prop_assert_eq!(batch.advantages()[k], buffer.advantages().unwrap()[i]);
                    prop_assert_eq!(batch.returns()[k], buffer.returns().unwrap()[i]);
                }
                sizes.push(indices.len());
            }
            prop_assert!(seen.iter().all(|&c| c == 1), "{:?}", seen);
            let batches = rows.div_ceil(size);
            prop_assert_eq!(sizes.len(), batches);
            prop_assert!(sizes[..batches - 1].iter().all(|&s| s == size));
            prop_assert_eq!(sizes[batches - 1], rows - (batches - 1) * size);
        }
    }
}

impl RolloutBatch {
    /// The buffer row that batch row `k` came from, read from its action (row `i`
    /// of [`OwnedStep::distinct`] data has action `i`), after checking that every
    /// other column of the batch row came from the same buffer row.
    fn row_of(&self, k: usize) -> u32 {
        let Actions::Discrete(actions) = self.actions() else {
            panic!("discrete test data expected");
        };
        let i = actions[k] as f32;
        assert_eq!(self.values()[k], i * 0.25);
        assert_eq!(self.log_probs()[k], -i);
        assert_eq!(
            self.obs()[k * 3..k * 3 + 3],
            [i * 10.0, i * 10.0 + 1.0, i * 10.0 + 2.0]
        );
        actions[k]
    }
}

/// One environment, one episode of `rewards` that terminates at its last step.
fn single_episode(
    rewards: &[f32],
    values: &[f32],
    gamma: f32,
    lambda: f32,
    end: End,
) -> RolloutBuffer {
    let steps = rewards.len();
    let config = RolloutConfig {
        gamma,
        gae_lambda: lambda,
        ..RolloutConfig::new(steps, 1, 1, ActionShape::Discrete)
    };
    let mut buffer = RolloutBuffer::new(config).unwrap();
    for t in 0..steps {
        let last = t + 1 == steps;
        buffer
            .push_step(StepData {
                obs: &[0.0],
                actions: Actions::Discrete(&[0]),
                rewards: &rewards[t..=t],
                terminated: &[last && end == End::Terminated],
                truncated: &[last && end == End::Truncated],
                values: &values[t..=t],
                log_probs: &[0.0],
                final_values: &[FINAL_VALUE],
            })
            .unwrap();
    }
    // The last value is V of the next episode's first observation: never used at a cut.
    buffer.compute_gae(&[1000.0]).unwrap();
    buffer
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
    let buffer = single_episode(&rewards, &values, gamma, 1.0, End::Terminated);
    let returns = buffer.returns().unwrap();
    for t in 0..rewards.len() {
        let monte_carlo: f64 = rewards[t..]
            .iter()
            .enumerate()
            .map(|(k, &r)| f64::from(gamma).powi(k as i32) * f64::from(r))
            .sum();
        assert!(
            (f64::from(returns[t]) - monte_carlo).abs() < 1e-5,
            "t {t}: return {} but the Monte-Carlo return is {monte_carlo}",
            returns[t]
        );
        // And it does not depend on the values (they telescope away).
        assert!((returns[t] - (buffer.advantages().unwrap()[t] + values[t])).abs() < 1e-6);
    }
}

#[test]
fn lambda_zero_gives_one_step_td() {
    let rewards = [1.0, -2.0, 0.5, 3.0];
    let values = [0.3, -1.7, 4.0, 2.2];
    let gamma = 0.95f32;
    for end in [End::Terminated, End::Truncated] {
        let buffer = single_episode(&rewards, &values, gamma, 0.0, end);
        let advantages = buffer.advantages().unwrap();
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
                advantages[t],
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
    let terminated = single_episode(&rewards, &values, gamma, lambda, End::Terminated);
    let truncated = single_episode(&rewards, &values, gamma, lambda, End::Truncated);
    let (a, b) = (
        terminated.advantages().unwrap(),
        truncated.advantages().unwrap(),
    );
    // At the cut: exactly gamma * final value; before it, discounted by (gamma*lambda)^k.
    assert_eq!(b[2] - a[2], gamma * FINAL_VALUE);
    assert_eq!(b[1] - a[1], gamma * lambda * gamma * FINAL_VALUE);
    assert_eq!(b[0] - a[0], (gamma * lambda).powi(2) * gamma * FINAL_VALUE);
    assert_eq!(
        truncated.returns().unwrap()[2] - terminated.returns().unwrap()[2],
        gamma * FINAL_VALUE
    );
}

#[test]
fn the_chain_is_cut_at_episode_boundaries_and_the_rollout_end() {
    // Two environments: env 0 truncated at t = 1, env 1 never done.
    let config = RolloutConfig {
        gamma: 1.0,
        gae_lambda: 1.0,
        ..RolloutConfig::new(3, 2, 1, ActionShape::Discrete)
    };
    let mut buffer = RolloutBuffer::new(config).unwrap();
    for t in 0..3 {
        buffer
            .push_step(StepData {
                obs: &[0.0, 0.0],
                actions: Actions::Discrete(&[0, 0]),
                rewards: &[1.0, 1.0],
                terminated: &[false, false],
                truncated: &[t == 1, false],
                values: &[0.0, 0.0],
                log_probs: &[0.0, 0.0],
                final_values: &[10.0, 99.0],
            })
            .unwrap();
    }
    buffer.compute_gae(&[100.0, 200.0]).unwrap();
    // Env 0: [1 + 1 + 10, 1 + 10, 1 + 100]; env 1: [3 + 200, 2 + 200, 1 + 200].
    assert_eq!(
        buffer.returns().unwrap(),
        [12.0, 203.0, 11.0, 202.0, 101.0, 201.0]
    );
}

proptest! {
    /// Scaling the stored rewards by `s` and recomputing GAE equals GAE computed
    /// from scratch on rewards scaled by `s` with the same values: the same f32
    /// operations on the same inputs, so bit for bit.
    #[test]
    fn scaled_rewards_equal_gae_from_scaled_rewards(
        case in gae_case(),
        scale in 0.01f32..100.0,
        clip in proptest::option::of(0.5f32..50.0),
    ) {
        let mut scaled = run_gae(&case);
        scaled.scale_rewards(scale, clip).unwrap();
        let bound = clip.unwrap_or(f32::INFINITY);
        let fresh = run_gae(&GaeCase {
            rewards: case.rewards.iter().map(|r| (r * scale).clamp(-bound, bound)).collect(),
            ..case.clone()
        });
        prop_assert_eq!(scaled.rewards(), fresh.rewards());
        prop_assert_eq!(scaled.advantages(), fresh.advantages());
        prop_assert_eq!(scaled.returns(), fresh.returns());
        prop_assert_eq!(scaled.values(), fresh.values());
    }
}

#[test]
fn scaling_rewards_needs_gae_and_a_valid_scale() {
    let case = GaeCase {
        steps: 2,
        envs: 1,
        gamma: 0.9,
        lambda: 0.8,
        rewards: vec![1.0, 2.0],
        values: vec![0.5, 0.25],
        terminated: vec![false, false],
        truncated: vec![false, false],
        final_values: vec![0.0, 0.0],
        last_values: vec![3.0],
    };
    let mut buffer = run_gae(&case);
    let advantages = buffer.advantages().unwrap().to_vec();
    for (scale, clip) in [
        (0.0, None),
        (f32::NAN, None),
        (-1.0, None),
        (1.0, Some(0.0)),
    ] {
        assert!(matches!(
            buffer.scale_rewards(scale, clip),
            Err(Error::Core(_))
        ));
    }
    assert_eq!(buffer.rewards(), &[1.0, 2.0]);
    assert_eq!(buffer.advantages().unwrap(), &advantages[..]);
    buffer.clear();
    assert!(matches!(
        buffer.scale_rewards(2.0, None),
        Err(Error::AdvantagesNotComputed)
    ));
    // Hand-computed: rewards 0.5, 1; delta_1 = 1 + 0.9*3 - 0.25 = 3.45,
    // delta_0 = 0.5 + 0.9*0.25 - 0.5 = 0.225, adv_0 = 0.225 + 0.72*3.45 = 2.709.
    let mut buffer = run_gae(&case);
    buffer.scale_rewards(0.5, None).unwrap();
    assert_eq!(buffer.rewards(), &[0.5, 1.0]);
    let advantages = buffer.advantages().unwrap();
    assert!((advantages[1] - 3.45).abs() < 1e-6);
    assert!((advantages[0] - 2.709).abs() < 1e-6);
}

#[test]
fn gae_needs_a_full_buffer_and_matching_last_values() {
    let config = config(3, 2);
    let mut buffer = RolloutBuffer::new(config).unwrap();
    let step = OwnedStep::distinct(&config, 0);
    buffer.push_step(step.data(config.action)).unwrap();
    let err = buffer.compute_gae(&[0.0, 0.0]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::RolloutNotFull {
                pushed: 1,
                steps: 3
            }
        ),
        "{err}"
    );
    let mut buffer = filled(config);
    let err = buffer.compute_gae(&[0.0]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Core(rl_core::Error::ShapeMismatch {
                what: "last_values",
                expected: 2,
                actual: 1
            })
        ),
        "{err}"
    );
    let err = buffer.compute_gae(&[0.0, f32::NAN]).unwrap_err();
    assert!(
        matches!(&err, Error::NonFinite { column, row: 1, .. } if column == "last_value"),
        "{err}"
    );
    assert!(buffer.advantages().is_none());
    buffer.compute_gae(&[0.0, 0.0]).unwrap();
    assert!(buffer.advantages().is_some());
    // Writing values back invalidates the advantages; log-probs do not.
    buffer.log_probs_mut()[0] = 1.0;
    assert!(buffer.advantages().is_some());
    buffer.values_mut()[0] = 1.0;
    assert!(buffer.advantages().is_none() && buffer.returns().is_none());
}

// ---- minibatches and gather --------------------------------------------------------

#[test]
fn shuffle_is_a_seeded_permutation() {
    let config = config(16, 4);
    let mut buffer = filled(config);
    assert_eq!(buffer.order(), (0..64).collect::<Vec<u32>>());
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    buffer.shuffle(&mut rng);
    let first = buffer.order().to_vec();
    assert_ne!(first, (0..64).collect::<Vec<u32>>());
    buffer.shuffle(&mut rng);
    assert_ne!(buffer.order(), first, "each epoch has a new order");
    buffer.shuffle(&mut Xoshiro256PlusPlus::seed_from_u64(7));
    assert_eq!(buffer.order(), first, "the order depends only on the rng");
    let mut sorted = first.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..64).collect::<Vec<u32>>());
    assert!(is_config_error(
        &buffer.minibatches(0).unwrap_err(),
        "minibatch size"
    ));
    assert_eq!(buffer.minibatches(100).unwrap().len(), 1);
}

#[test]
fn shuffle_draws_every_permutation_equally_often() {
    // 3 rows have 6 orders; a correct Fisher-Yates draws each with probability 1/6.
    // (Classic mistakes, e.g. `random_range(0..i)` (Sattolo: cycles only) or
    // `random_range(0..n)` (biased), fail this.)
    let mut buffer = filled(config(3, 1));
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
    let mut counts = std::collections::BTreeMap::new();
    for _ in 0..6000 {
        buffer.shuffle(&mut rng);
        *counts.entry(buffer.order().to_vec()).or_insert(0u32) += 1;
    }
    assert_eq!(counts.len(), 6, "{counts:?}");
    // Each count is Binomial(6000, 1/6): mean 1000, sd 29; 150 is over 5 sd.
    assert!(
        counts.values().all(|&c| c.abs_diff(1000) < 150),
        "{counts:?}"
    );
}

#[test]
fn gather_copies_continuous_rows() {
    let config = RolloutConfig::new(3, 2, 2, ActionShape::Continuous(3));
    let mut buffer = filled(config);
    buffer.compute_gae(&[0.0, 0.0]).unwrap();
    let mut batch = RolloutBatch::new(&config, 4).unwrap();
    assert!(batch.is_empty());
    buffer.gather(&[5, 0, 5], &mut batch).unwrap();
    assert_eq!(batch.len(), 3);
    assert_eq!(batch.obs(), [50.0, 51.0, 0.0, 1.0, 50.0, 51.0]);
    assert_eq!(
        batch.actions(),
        Actions::Continuous(&[-5.0, -5.0, -5.0, -0.0, -0.0, -0.0, -5.0, -5.0, -5.0])
    );
    let advantages = buffer.advantages().unwrap();
    assert_eq!(
        batch.advantages(),
        [advantages[5], advantages[0], advantages[5]]
    );
    assert_eq!(batch.returns()[1], buffer.returns().unwrap()[0]);
    assert_eq!(batch.log_probs(), [-5.0, -0.0, -5.0]);
    // Per-minibatch normalisation in place.
    batch.advantages_mut().fill(0.0);
    assert_eq!(batch.advantages(), [0.0; 3]);
    // A smaller gather replaces the rows.
    buffer.gather(&[1], &mut batch).unwrap();
    assert_eq!((batch.len(), batch.obs()), (1, &[10.0, 11.0][..]));
}

#[test]
fn gather_refuses_bad_requests_and_leaves_the_batch_unchanged() {
    let config = config(2, 2);
    let mut buffer = RolloutBuffer::new(config).unwrap();
    let mut batch = RolloutBatch::new(&config, 2).unwrap();
    let step = OwnedStep::distinct(&config, 0);
    buffer.push_step(step.data(config.action)).unwrap();
    let err = buffer.gather(&[0], &mut batch).unwrap_err();
    assert!(
        matches!(
            err,
            Error::RolloutNotFull {
                pushed: 1,
                steps: 2
            }
        ),
        "{err}"
    );
    let step = OwnedStep::distinct(&config, 1);
    buffer.push_step(step.data(config.action)).unwrap();
    let err = buffer.gather(&[0], &mut batch).unwrap_err();
    assert!(matches!(err, Error::AdvantagesNotComputed), "{err}");
    buffer.compute_gae(&[0.0, 0.0]).unwrap();
    buffer.gather(&[3, 2], &mut batch).unwrap();
    let before = format!("{batch:?}");
    let err = buffer.gather(&[0, 4], &mut batch).unwrap_err();
    assert!(is_config_error(&err, "minibatch index"), "{err}");
    let err = buffer.gather(&[0, 1, 2], &mut batch).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotEnoughRows {
                requested: 3,
                available: 2
            }
        ),
        "{err}"
    );
    let other = RolloutConfig::new(2, 2, 3, ActionShape::Continuous(1));
    let mut wrong = RolloutBatch::new(&other, 2).unwrap();
    let err = buffer.gather(&[0], &mut wrong).unwrap_err();
    assert!(is_config_error(&err, "rollout batch"), "{err}");
    assert_eq!(format!("{batch:?}"), before);
}

/// The example proposed for the crate docs, with crate-internal paths.
#[test]
fn the_documented_iteration_runs() -> Result<()> {
    let config = RolloutConfig::new(128, 8, 4, ActionShape::Discrete);
    println!("{}", RolloutBuffer::plan(&config)?);
    let mut buffer = RolloutBuffer::new(config)?;
    let mut batch = RolloutBatch::new(&config, 256)?;
    let (obs, actions) = (vec![0.0; 8 * 4], vec![0u32; 8]);
    let (zeros, no) = (vec![0.0; 8], vec![false; 8]);
    for _ in 0..config.steps {
        buffer.push_step(StepData {
            obs: &obs,
            actions: Actions::Discrete(&actions),
            rewards: &zeros,
            terminated: &no,
            truncated: &no,
            values: &zeros,
            log_probs: &zeros,
            final_values: &zeros,
        })?;
    }
    buffer.compute_gae(&zeros)?;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0);
    buffer.shuffle(&mut rng);
    for indices in buffer.minibatches(256)? {
        buffer.gather(indices, &mut batch)?;
    }
    buffer.clear();
    Ok(())
}

#[test]
fn the_hot_loop_allocates_nothing_after_construction() {
    for action in [ActionShape::Discrete, ActionShape::Continuous(2)] {
        let config = RolloutConfig::new(32, 4, 5, action);
        let mut buffer = RolloutBuffer::new(config).unwrap();
        let mut batch = RolloutBatch::new(&config, 24).unwrap();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        let steps: Vec<OwnedStep> = (0..32)
            .map(|t| {
                let mut step = OwnedStep::distinct(&config, t);
                step.terminated[t % 4] = t % 5 == 0;
                step.truncated[(t + 1) % 4] = t % 3 == 0;
                step.final_values.fill(1.0);
                step
            })
            .collect();
        for iteration in 0..2 {
            let (result, stats) = measure(|| -> Result<f32> {
                for step in &steps {
                    buffer.push_step(step.data(action))?;
                }
                buffer.log_probs_mut()[..8].fill(0.5);
                buffer.values_mut()[..8].fill(0.5);
                buffer.compute_gae(&[0.1, 0.2, 0.3, 0.4])?;
                buffer.scale_rewards(0.5, Some(10.0))?;
                let mut sum = 0.0;
                for _epoch in 0..3 {
                    buffer.shuffle(&mut rng);
                    for indices in buffer.minibatches(24)? {
                        buffer.gather(indices, &mut batch)?;
                        sum += batch.advantages().iter().sum::<f32>();
                    }
                }
                buffer.clear();
                Ok(sum)
            });
            assert!(result.unwrap().is_finite());
            assert_eq!(
                stats.allocations, 0,
                "{action:?} iteration {iteration}: {stats:?}"
            );
        }
    }
}
