use super::*;
use proptest::prelude::*;
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{DType, Flag, TransitionSchema};
use rl_testkit::measure;

const OBS: usize = 3;

fn schema(action: &[usize]) -> Schema {
    let dtype = if action.is_empty() {
        DType::U32
    } else {
        DType::F32
    };
    TransitionSchema::new(DType::F32, &[OBS], dtype, action)
        .for_rollout()
        .build()
        .unwrap()
}

/// Owned columns of one step of `n` environments, distinct per row `t * n + e` so that
/// gathers can be checked row by row.
#[derive(Clone, Debug)]
struct Step {
    obs: Vec<f32>,
    discrete: Vec<u32>,
    continuous: Vec<f32>,
    rewards: Vec<f32>,
    terminated: Vec<Flag>,
    truncated: Vec<Flag>,
    log_probs: Vec<f32>,
    values: Vec<f32>,
    final_values: Vec<f32>,
}

impl Step {
    fn distinct(n: usize, t: usize, width: usize) -> Self {
        let row = |e: usize| (t * n + e) as f32;
        Self {
            obs: (0..n * OBS)
                .map(|k| row(k / OBS) * 10.0 + (k % OBS) as f32)
                .collect(),
            discrete: (0..n).map(|e| (t * n + e) as u32).collect(),
            continuous: (0..n * width).map(|k| -row(k / width)).collect(),
            rewards: (0..n).map(|e| row(e) * 0.5).collect(),
            terminated: (0..n)
                .map(|e| Flag::new((t + e).is_multiple_of(3)))
                .collect(),
            truncated: (0..n).map(|e| Flag::new((t + e) % 5 == 1)).collect(),
            log_probs: (0..n).map(|e| -row(e)).collect(),
            values: (0..n).map(|e| row(e) * 0.25).collect(),
            final_values: (0..n).map(|e| row(e) * 2.0).collect(),
        }
    }

    /// The columns in schema order, actions discrete when `continuous` is false.
    fn columns(&self, continuous: bool) -> [ColumnSlice<'_>; 8] {
        [
            (&self.obs).into(),
            if continuous {
                (&self.continuous).into()
            } else {
                (&self.discrete).into()
            },
            (&self.rewards).into(),
            (&self.terminated).into(),
            (&self.truncated).into(),
            (&self.log_probs).into(),
            (&self.values).into(),
            (&self.final_values).into(),
        ]
    }
}

fn filled(steps: usize, envs: usize) -> RolloutBuffer {
    let mut buffer = RolloutBuffer::new(schema(&[]), steps, envs, None).unwrap();
    for t in 0..steps {
        buffer
            .push_step(&Step::distinct(envs, t, 1).columns(false))
            .unwrap();
    }
    buffer
}

fn is_config_error(err: &Error, what: &str) -> bool {
    matches!(err, Error::Core(rl_core::Error::InvalidConfig { what: w, .. }) if w == what)
}

// ---- configuration and memory ----------------------------------------------------

#[test]
fn invalid_sizes_are_refused_with_the_setting_named() {
    let s = schema(&[]);
    for (steps, envs, what) in [
        (0, 4, "rollout steps"),
        (4, 0, "rollout envs"),
        (1 << 20, 1 << 20, "rollout steps"),
        (usize::MAX, 2, "rollout steps"),
    ] {
        let err = RolloutBuffer::plan(&s, steps, envs).unwrap_err();
        assert!(is_config_error(&err, what), "{steps} x {envs}: {err}");
        let err = RolloutBuffer::new(s.clone(), steps, envs, None).unwrap_err();
        assert!(is_config_error(&err, what), "{steps} x {envs}: {err}");
    }
}

#[test]
fn the_plan_is_the_storage_plan_plus_the_order() {
    for action in [&[][..], &[3][..]] {
        let s = schema(action);
        let (buffer, stats) = measure(|| RolloutBuffer::new(s.clone(), 7, 5, None).unwrap());
        let plan = RolloutBuffer::plan(&s, 7, 5).unwrap();
        assert_eq!(plan, buffer.memory_plan());
        // The columns are the RAM storage's (anonymous mapping, pre-faulted: its own
        // tests check residency); the order is the one heap allocation.
        let storage = RamStorage::plan(&s, 35).unwrap();
        assert_eq!(plan.lines()[..8], storage.lines()[..]);
        assert_eq!(plan.lines().len(), 9);
        let order = plan.lines()[8].bytes;
        assert_eq!(order, 35 * 4);
        assert_eq!(
            plan.total(Location::Ram),
            storage.total(Location::Ram) + order
        );
        assert!(
            stats.peak_live_bytes as u64 >= order && stats.peak_live_bytes < 4096,
            "{stats:?}"
        );
    }
}

#[test]
fn over_budget_is_refused_before_allocating() {
    let big = TransitionSchema::new(DType::F32, &[1024], DType::U32, &[])
        .for_rollout()
        .build()
        .unwrap();
    let budget = MemoryBudget::ram(1 << 20);
    let (result, stats) = measure(|| RolloutBuffer::new(big.clone(), 1000, 64, Some(&budget)));
    let err = result.unwrap_err();
    assert!(
        matches!(err, Error::Core(rl_core::Error::OverBudget { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("obs (ram, 250.00 MiB)"), "{err}");
    assert!(stats.peak_live_bytes < 1 << 16, "{stats:?}");
    let s = schema(&[]);
    let planned = RolloutBuffer::plan(&s, 4, 2).unwrap().total(Location::Ram);
    assert!(RolloutBuffer::new(s.clone(), 4, 2, Some(&MemoryBudget::ram(planned))).is_ok());
    assert!(RolloutBuffer::new(s, 4, 2, Some(&MemoryBudget::ram(planned - 1))).is_err());
}

// ---- pushing ---------------------------------------------------------------------

#[test]
fn push_stores_time_major_rows() {
    let mut buffer = RolloutBuffer::new(schema(&[2]), 2, 3, None).unwrap();
    assert!(buffer.is_empty());
    let steps = [Step::distinct(3, 0, 2), Step::distinct(3, 1, 2)];
    for step in &steps {
        buffer.push_step(&step.columns(true)).unwrap();
    }
    assert!(buffer.is_full());
    assert_eq!((buffer.len(), buffer.rows()), (2, 6));
    let concat = |f: fn(&Step) -> &Vec<f32>| -> Vec<f32> {
        steps.iter().flat_map(|s| f(s).iter().copied()).collect()
    };
    assert_eq!(buffer.field::<f32>(Field::Obs).unwrap(), concat(|s| &s.obs));
    assert_eq!(
        buffer.field::<f32>(Field::Action).unwrap(),
        concat(|s| &s.continuous)
    );
    assert_eq!(
        buffer.field::<f32>(Field::FinalValue).unwrap(),
        concat(|s| &s.final_values)
    );
    let flags: Vec<Flag> = steps.iter().flat_map(|s| s.truncated.clone()).collect();
    assert_eq!(buffer.field::<Flag>(Field::Truncated).unwrap(), flags);
    let err = buffer.field::<u32>(Field::Action).unwrap_err();
    assert!(matches!(err, Error::DTypeMismatch { .. }), "{err}");
    let err = buffer.column::<f32>("next_obs").unwrap_err();
    assert!(matches!(err, Error::UnknownColumn { .. }), "{err}");
}

/// The buffer's observable state, to show that a refused push changed nothing.
fn snapshot(buffer: &RolloutBuffer) -> (usize, Vec<f32>, Vec<u32>, Vec<f32>) {
    (
        buffer.len(),
        buffer.field::<f32>(Field::Obs).unwrap().to_vec(),
        buffer.field::<u32>(Field::Action).unwrap().to_vec(),
        buffer.field::<f32>(Field::Reward).unwrap().to_vec(),
    )
}

#[test]
fn a_refused_push_changes_nothing() {
    let mut buffer = RolloutBuffer::new(schema(&[]), 2, 2, None).unwrap();
    let good = Step::distinct(2, 0, 1);
    buffer.push_step(&good.columns(false)).unwrap();
    let before = snapshot(&buffer);

    let mut nan = Step::distinct(2, 1, 1);
    nan.values[1] = f32::NAN;
    let err = buffer.push_step(&nan.columns(false)).unwrap_err();
    assert!(
        matches!(&err, Error::NonFinite { column, row: 1, .. } if column == "value"),
        "{err}"
    );
    let err = buffer.push_step(&good.columns(false)[..7]).unwrap_err();
    assert!(matches!(err, Error::ColumnCount { .. }), "{err}");
    let err = buffer.push_step(&good.columns(true)).unwrap_err();
    assert!(
        matches!(&err, Error::DTypeMismatch { column, .. } if column == "action"),
        "{err}"
    );
    let three = Step::distinct(3, 1, 1);
    let err = buffer.push_step(&three.columns(false)).unwrap_err();
    assert!(matches!(err, Error::RowMismatch { rows: 2, .. }), "{err}");
    let mut short = Step::distinct(2, 1, 1);
    short.rewards.pop();
    let err = buffer.push_step(&short.columns(false)).unwrap_err();
    assert!(
        matches!(&err, Error::RowMismatch { column, .. } if column == "reward"),
        "{err}"
    );
    assert_eq!(snapshot(&buffer), before);

    buffer.push_step(&good.columns(false)).unwrap();
    let full = snapshot(&buffer);
    let err = buffer.push_step(&good.columns(false)).unwrap_err();
    assert!(
        matches!(err, Error::RolloutFull { steps: 2, envs: 2 }),
        "{err}"
    );
    assert_eq!(snapshot(&buffer), full);
}

#[test]
fn non_finite_values_are_stored_when_allowed() {
    let mut buffer = RolloutBuffer::new(schema(&[]), 1, 2, None)
        .unwrap()
        .with_non_finite(NonFinite::Allow);
    let mut step = Step::distinct(2, 0, 1);
    step.rewards[0] = f32::INFINITY;
    buffer.push_step(&step.columns(false)).unwrap();
    assert_eq!(
        buffer.field::<f32>(Field::Reward).unwrap()[0],
        f32::INFINITY
    );
}

#[test]
fn clear_keeps_the_allocation_and_empties_the_buffer() {
    let mut buffer = filled(3, 2);
    let obs = buffer.storage.column(0).as_ptr();
    buffer.clear();
    assert!(buffer.is_empty() && buffer.field::<f32>(Field::Obs).unwrap().is_empty());
    buffer
        .push_step(&Step::distinct(2, 7, 1).columns(false))
        .unwrap();
    assert_eq!(buffer.storage.column(0).as_ptr(), obs);
    assert_eq!(buffer.field::<u32>(Field::Action).unwrap(), [14, 15]);
}

// ---- minibatches and gather --------------------------------------------------------

/// The buffer row that batch row `k` came from (row `i` of [`Step::distinct`] data has
/// action `i`), after checking that every other column came from the same row.
fn row_of(batch: &Batch, k: usize) -> u32 {
    let i = batch.field::<u32>(Field::Action).unwrap()[k];
    let x = i as f32;
    assert_eq!(batch.field::<f32>(Field::Value).unwrap()[k], x * 0.25);
    assert_eq!(batch.field::<f32>(Field::LogProb).unwrap()[k], -x);
    assert_eq!(batch.field::<f32>(Field::FinalValue).unwrap()[k], x * 2.0);
    assert_eq!(batch.rewards().unwrap()[k], x * 0.5);
    assert_eq!(
        batch.obs().unwrap()[k * OBS..(k + 1) * OBS],
        [x * 10.0, x * 10.0 + 1.0, x * 10.0 + 2.0]
    );
    i
}

proptest! {
    #[test]
    fn minibatches_cover_every_row_once_per_epoch(
        steps in 1usize..40,
        envs in 1usize..8,
        size in 1usize..70,
        seed in any::<u64>(),
    ) {
        let mut buffer = filled(steps, envs);
        let rows = steps * envs;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut batch = Batch::new(buffer.schema(), size).unwrap();
        for _epoch in 0..2 {
            buffer.shuffle(&mut rng);
            let mut seen = vec![0u32; rows];
            let mut sizes = Vec::new();
            for indices in buffer.minibatches(size).unwrap() {
                buffer.gather(indices, &mut batch).unwrap();
                prop_assert_eq!(batch.len(), indices.len());
                for (k, &i) in indices.iter().enumerate() {
                    seen[i as usize] += 1;
                    prop_assert_eq!(row_of(&batch, k), i);
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

#[test]
fn shuffle_is_a_seeded_permutation() {
    let mut buffer = filled(16, 4);
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
    let mut buffer = filled(3, 1);
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
    let mut buffer = RolloutBuffer::new(schema(&[3]), 3, 2, None).unwrap();
    for t in 0..3 {
        buffer
            .push_step(&Step::distinct(2, t, 3).columns(true))
            .unwrap();
    }
    let mut batch = Batch::new(buffer.schema(), 4).unwrap();
    buffer.gather(&[5, 0, 5], &mut batch).unwrap();
    assert_eq!(batch.len(), 3);
    assert_eq!(
        batch.obs().unwrap(),
        [50.0, 51.0, 52.0, 0.0, 1.0, 2.0, 50.0, 51.0, 52.0]
    );
    assert_eq!(
        batch.field::<f32>(Field::Action).unwrap(),
        [-5.0, -5.0, -5.0, -0.0, -0.0, -0.0, -5.0, -5.0, -5.0]
    );
    assert_eq!(batch.weights(), [1.0; 3]);
    buffer.gather(&[1], &mut batch).unwrap();
    assert_eq!(
        (batch.len(), batch.obs().unwrap()),
        (1, &[10.0, 11.0, 12.0][..])
    );
}

#[test]
fn gather_refuses_bad_requests_and_leaves_the_batch_unchanged() {
    let mut buffer = RolloutBuffer::new(schema(&[]), 2, 2, None).unwrap();
    let mut batch = Batch::new(buffer.schema(), 2).unwrap();
    buffer
        .push_step(&Step::distinct(2, 0, 1).columns(false))
        .unwrap();
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
    buffer
        .push_step(&Step::distinct(2, 1, 1).columns(false))
        .unwrap();
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
    let mut wrong = Batch::new(&schema(&[1]), 2).unwrap();
    let err = buffer.gather(&[0], &mut wrong).unwrap_err();
    assert!(matches!(err, Error::BatchSchema), "{err}");
    assert_eq!(format!("{batch:?}"), before);
}

#[test]
fn the_hot_loop_allocates_nothing_after_construction() {
    for continuous in [false, true] {
        let action: &[usize] = if continuous { &[2] } else { &[] };
        let mut buffer = RolloutBuffer::new(schema(action), 32, 4, None).unwrap();
        let mut batch = Batch::new(buffer.schema(), 24).unwrap();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
        let steps: Vec<Step> = (0..32).map(|t| Step::distinct(4, t, 2)).collect();
        for iteration in 0..2 {
            let (result, stats) = measure(|| -> Result<f32> {
                for step in &steps {
                    buffer.push_step(&step.columns(continuous))?;
                }
                let mut sum = 0.0;
                for _epoch in 0..3 {
                    buffer.shuffle(&mut rng);
                    for indices in buffer.minibatches(24)? {
                        buffer.gather(indices, &mut batch)?;
                        sum += batch.rewards()?.iter().sum::<f32>();
                    }
                }
                buffer.clear();
                Ok(sum)
            });
            assert!(result.unwrap().is_finite());
            assert_eq!(
                stats.allocations, 0,
                "continuous {continuous} iteration {iteration}: {stats:?}"
            );
        }
    }
}
