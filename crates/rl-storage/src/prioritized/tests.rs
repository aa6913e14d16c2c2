use proptest::prelude::*;

use super::*;

fn alpha(alpha: f64) -> PrioritizedConfig {
    PrioritizedConfig {
        alpha,
        ..PrioritizedConfig::default()
    }
}

/// Writes `rows` rows to `ring` and tells the sampler.
fn write(sampler: &mut Prioritized, ring: &mut RingState, rows: usize, capacity: usize) {
    sampler.rows_written(ring, rows, capacity);
    ring.cursor = (ring.cursor + rows) % capacity;
    ring.len = (ring.len + rows).min(capacity);
    ring.written += rows as u64;
}

fn context(ring: RingState, capacity: usize) -> SampleContext<'static> {
    SampleContext {
        ring,
        capacity,
        terminated: None,
        truncated: None,
    }
}

fn is_stored(ring: &RingState, capacity: usize, position: usize) -> bool {
    (0..ring.len).any(|i| ring.position(i, capacity) == position)
}

/// Every observable of the sampler's priorities.
fn snapshot(sampler: &Prioritized) -> (f64, Vec<Option<f64>>) {
    let priorities = (0..sampler.capacity + 2)
        .map(|p| sampler.priority(p))
        .collect();
    (sampler.total_priority(), priorities)
}

proptest! {
    #[test]
    fn draws_stored_rows_with_the_textbook_weights(
        capacity in 1usize..40,
        start in 0usize..40,
        writes in proptest::collection::vec(1usize..40, 1..6),
        updates in proptest::collection::vec((0usize..40, 0u32..6, -8i32..8), 0..30),
        rows in 1usize..64,
        config in (0.0f64..2.0, 0.0f64..=1.0),
        seed in any::<u64>(),
    ) {
        let config = PrioritizedConfig { alpha: config.0, beta: config.1, epsilon: 1e-6 };
        let mut sampler = Prioritized::new(capacity, config, seed).unwrap();
        let mut ring = RingState { cursor: start % capacity, ..RingState::default() };
        for &rows in &writes {
            write(&mut sampler, &mut ring, rows.min(capacity), capacity);
        }
        // Updates on positions the ring does not hold are refused and change nothing.
        for &(position, mantissa, exponent) in &updates {
            let priority = mantissa as f32 * 10f32.powi(exponent);
            let before = snapshot(&sampler);
            let result = sampler.update_priorities(&[position], &[priority]);
            if is_stored(&ring, capacity, position) {
                prop_assert!(result.is_ok(), "{:?}", result);
            } else {
                prop_assert!(result.is_err());
                prop_assert_eq!(snapshot(&sampler), before);
            }
        }
        let (mut indices, mut weights) = (vec![usize::MAX; rows], vec![f32::NAN; rows]);
        prop_assert_eq!(sampler.sample(&context(ring, capacity), rows, &mut indices, &mut weights).unwrap(), rows);

        let priorities: Vec<Option<f64>> = (0..capacity).map(|p| sampler.priority(p)).collect();
        for (p, priority) in priorities.iter().enumerate() {
            prop_assert_eq!(priority.is_some(), is_stored(&ring, capacity, p));
        }
        let n = ring.len as f64;
        let total: f64 = priorities.iter().flatten().sum();
        prop_assert!((total - sampler.total_priority()).abs() <= 1e-9 * total);
        let naive = |p: f64| (n * p / total).powf(-config.beta);
        let max_weight = priorities.iter().flatten().map(|&p| naive(p)).fold(0.0, f64::max);
        for (&position, &weight) in indices.iter().zip(&weights) {
            prop_assert!(is_stored(&ring, capacity, position), "position {} is not stored", position);
            let expected = naive(priorities[position].unwrap()) / max_weight;
            prop_assert!(weight > 0.0 && weight <= 1.0, "weight {}", weight);
            prop_assert!((f64::from(weight) - expected).abs() <= 1e-5 * expected, "{} vs {}", weight, expected);
        }
    }
}

#[test]
fn frequencies_match_priorities() {
    // 8 positions, 5 stored: the padding and unstored leaves must never be drawn.
    let mut sampler = Prioritized::new(8, alpha(1.0), 2016).unwrap();
    let mut ring = RingState {
        cursor: 6,
        ..RingState::default()
    };
    write(&mut sampler, &mut ring, 5, 8); // positions 6, 7, 0, 1, 2
    let positions = [6, 7, 0, 1, 2];
    let given = [1.0f32, 2.0, 3.0, 4.0, 10.0];
    sampler.update_priorities(&positions, &given).unwrap();
    let context = context(ring, 8);
    // Small batches: with few strata, each draw within its segment must be uniform too.
    let (mut indices, mut weights) = ([0; 3], [0.0; 3]);
    let mut counts = [0u64; 8];
    let calls = 70_000;
    for _ in 0..calls {
        sampler
            .sample(&context, 3, &mut indices, &mut weights)
            .unwrap();
        for &i in &indices {
            counts[i] += 1;
        }
    }
    let draws = (calls * 3) as f64;
    let sum: f64 = given.iter().map(|&p| f64::from(p) + 1e-6).sum();
    for (&position, &p) in positions.iter().zip(&given) {
        let expected = (f64::from(p) + 1e-6) / sum;
        // Binomial standard deviation; stratification only lowers the variance.
        let sigma = (draws * expected * (1.0 - expected)).sqrt();
        let deviation = (counts[position] as f64 - draws * expected).abs();
        assert!(
            deviation <= 5.0 * sigma,
            "position {position}: {} draws, {} expected (sigma {sigma:.1})",
            counts[position],
            draws * expected
        );
    }
    assert_eq!(counts[3] + counts[4] + counts[5], 0, "unstored rows drawn");
}

#[test]
fn invalid_updates_change_nothing() {
    let mut sampler = Prioritized::new(10, alpha(0.7), 1).unwrap();
    let mut ring = RingState::default();
    write(&mut sampler, &mut ring, 4, 10);
    sampler.update_priorities(&[0, 1], &[0.5, 2.0]).unwrap();
    let before = snapshot(&sampler);
    let invalid: [(&[usize], &[f32]); 8] = [
        (&[0, 1], &[1.0]),
        (&[2, 0], &[1.0, f32::NAN]),
        (&[2, 0], &[1.0, -0.5]),
        (&[2, 0], &[1.0, f32::INFINITY]),
        (&[2, 10], &[1.0, 1.0]),
        (&[2, usize::MAX], &[1.0, 1.0]),
        // Position 7 holds no row yet.
        (&[2, 7], &[1.0, 1.0]),
        (&[2, 3], &[1.0, f32::NEG_INFINITY]),
    ];
    for (positions, priorities) in invalid {
        assert!(
            sampler.update_priorities(positions, priorities).is_err(),
            "{positions:?} {priorities:?}"
        );
        assert_eq!(snapshot(&sampler), before);
    }
    // Nor did they raise the priority of new rows: max is still 2 + epsilon.
    write(&mut sampler, &mut ring, 1, 10);
    let expected = (2.0f64 + 1e-6).powf(0.7);
    assert!((sampler.priority(4).unwrap() - expected).abs() < 1e-12);
    assert_eq!(sampler.priority(7), None);
}

#[test]
fn unstored_positions_are_never_drawn() {
    let mut sampler = Prioritized::new(10, alpha(1.0), 3).unwrap();
    let mut ring = RingState {
        cursor: 8,
        ..RingState::default()
    };
    write(&mut sampler, &mut ring, 3, 10); // positions 8, 9, 0
    assert!(sampler.update_priorities(&[5], &[1e6]).is_err());
    // Extreme magnitudes: a tiny priority next to huge ones.
    sampler
        .update_priorities(&[8, 9, 0], &[0.0, 1e30, 3e38])
        .unwrap();
    let context = context(ring, 10);
    let (mut indices, mut weights) = ([0; 64], [0.0; 64]);
    for _ in 0..200 {
        sampler
            .sample(&context, 64, &mut indices, &mut weights)
            .unwrap();
        assert!(indices.iter().all(|i| [8, 9, 0].contains(i)), "{indices:?}");
        assert!(weights.iter().all(|w| (0.0..=1.0).contains(w)));
    }
    // Points at or past the total still land on a stored row.
    for point in [0.0, sampler.total_priority(), f64::MAX, f64::INFINITY] {
        assert!([8, 9, 0].contains(&sampler.find(point)));
    }
}

#[test]
fn new_rows_get_the_largest_priority() {
    let mut sampler = Prioritized::new(4, alpha(0.5), 0).unwrap();
    let mut ring = RingState::default();
    write(&mut sampler, &mut ring, 2, 4);
    assert_eq!(sampler.priority(0), Some(1.0));
    assert_eq!(sampler.total_priority(), 2.0);
    sampler.update_priorities(&[0, 1], &[8.0, 0.0]).unwrap();
    write(&mut sampler, &mut ring, 3, 4); // positions 2, 3, and 0 again
    let max = (8.0f64 + 1e-6).sqrt();
    for position in [2, 3, 0] {
        assert!((sampler.priority(position).unwrap() - max).abs() < 1e-12);
    }
    assert!((sampler.priority(1).unwrap() - 1e-3).abs() < 1e-15);
    assert!((sampler.total_priority() - 3.0 * max - 1e-3).abs() < 1e-12);
}

#[test]
fn config_is_validated() {
    let bad = [
        PrioritizedConfig {
            alpha: -0.1,
            ..PrioritizedConfig::default()
        },
        PrioritizedConfig {
            alpha: f64::NAN,
            ..PrioritizedConfig::default()
        },
        PrioritizedConfig {
            beta: 1.5,
            ..PrioritizedConfig::default()
        },
        PrioritizedConfig {
            beta: f64::NAN,
            ..PrioritizedConfig::default()
        },
        PrioritizedConfig {
            epsilon: 0.0,
            ..PrioritizedConfig::default()
        },
        PrioritizedConfig {
            epsilon: f64::INFINITY,
            ..PrioritizedConfig::default()
        },
    ];
    for config in bad {
        assert!(Prioritized::new(8, config, 0).is_err(), "{config:?}");
    }
    assert!(Prioritized::new(0, PrioritizedConfig::default(), 0).is_err());
    assert!(Prioritized::new(usize::MAX, PrioritizedConfig::default(), 0).is_err());
    let mut sampler = Prioritized::new(3, PrioritizedConfig::default(), 0).unwrap();
    assert!(sampler.set_beta(-0.1).is_err());
    assert!(sampler.set_beta(f64::NAN).is_err());
    assert_eq!(sampler.config().beta, 0.4);
    sampler.set_beta(1.0).unwrap();
    assert_eq!(sampler.config().beta, 1.0);
    // 3 leaves round up to 4: two trees of 8 nodes.
    assert_eq!(sampler.memory_plan().total(Location::Ram), 2 * 8 * 8);
}

#[test]
fn sampling_out_of_step_with_the_buffer_is_refused() {
    let mut sampler = Prioritized::new(6, PrioritizedConfig::default(), 0).unwrap();
    let (mut indices, mut weights) = ([0; 4], [0.0; 4]);
    let mut ring = RingState::default();
    assert!(matches!(
        sampler.sample(&context(ring, 6), 4, &mut indices, &mut weights),
        Err(Error::Empty)
    ));
    // The buffer holds rows the sampler was never told about.
    let restored = RingState {
        cursor: 3,
        len: 3,
        written: 3,
        ..RingState::default()
    };
    assert!(
        sampler
            .sample(&context(restored, 6), 4, &mut indices, &mut weights)
            .is_err()
    );
    write(&mut sampler, &mut ring, 3, 6);
    assert_eq!(
        sampler
            .sample(&context(ring, 6), 4, &mut indices, &mut weights)
            .unwrap(),
        4
    );
    assert!(
        sampler
            .sample(&context(ring, 7), 4, &mut indices, &mut weights)
            .is_err()
    );
}

#[test]
fn sampling_and_updates_allocate_nothing() {
    let mut sampler = Prioritized::new(1000, PrioritizedConfig::default(), 5).unwrap();
    let mut ring = RingState::default();
    let (mut indices, mut weights) = ([0; 64], [0.0; 64]);
    let priorities = [0.25f32; 64];
    let ((), stats) = rl_testkit::measure(|| {
        for _ in 0..40 {
            write(&mut sampler, &mut ring, 50, 1000);
            sampler
                .sample(&context(ring, 1000), 64, &mut indices, &mut weights)
                .unwrap();
            sampler.update_priorities(&indices, &priorities).unwrap();
        }
    });
    assert_eq!(stats.allocations, 0);
    assert_eq!(ring.len, 1000);
}
