use proptest::prelude::*;
use rl_core::Flag;

use super::*;
use crate::storage::RingState;
use crate::without_replacement::test_support::{Fixture, fixture};

/// Valid window starts (logical indices), by brute force.
fn valid_starts(context: &SampleContext<'_>, slice_len: usize) -> Vec<usize> {
    let ring = context.ring;
    (0..(ring.len + 1).saturating_sub(slice_len))
        .filter(|&s| {
            (s..s + slice_len - 1)
                .all(|i| !context.ends_episode(ring.position(i, context.capacity)))
        })
        .collect()
}

/// The logical index (0 = oldest) of a stored position.
fn logical(context: &SampleContext<'_>, position: usize) -> usize {
    let capacity = context.capacity;
    (position + capacity - context.ring.oldest(capacity)) % capacity
}

fn check_windows(
    f: &Fixture,
    flags: bool,
    slice_len: usize,
    windows: usize,
) -> Result<(), TestCaseError> {
    let context = if flags {
        f.context()
    } else {
        f.context_without_flags()
    };
    let rows = windows * slice_len;
    let mut sampler = SliceSampler::new(slice_len, f.ring.cursor as u64).unwrap();
    let (mut indices, mut weights) = (vec![usize::MAX; rows + 3], vec![0.0; rows + 3]);
    let result = sampler.sample(&context, rows, &mut indices, &mut weights);
    let valid = valid_starts(&context, slice_len);
    if f.ring.len == 0 {
        prop_assert!(matches!(result, Err(Error::Empty)));
        return Ok(());
    }
    if windows == 0 {
        prop_assert_eq!(result.unwrap(), 0);
        return Ok(());
    }
    if valid.is_empty() {
        let longest = (1..=f.ring.len)
            .rev()
            .find(|&l| !valid_starts(&context, l).is_empty())
            .unwrap_or(0);
        let expected = if slice_len > f.ring.len {
            f.ring.len
        } else {
            longest
        };
        let refused = matches!(
            result,
            Err(Error::NotEnoughRows { requested, available }) if requested == slice_len && available == expected
        );
        prop_assert!(refused, "{:?}", result);
        return Ok(());
    }
    prop_assert_eq!(result.unwrap(), rows);
    prop_assert!(
        indices[rows..].iter().all(|&i| i == usize::MAX),
        "wrote past the batch"
    );
    prop_assert!(weights[..rows].iter().all(|&w| w == 1.0));
    for window in indices[..rows].chunks(slice_len) {
        prop_assert!(
            window.iter().all(|&p| f.is_stored(p)),
            "{:?} not stored",
            window
        );
        let start = logical(&context, window[0]);
        prop_assert!(
            valid.contains(&start),
            "window {:?} starts at invalid {}",
            window,
            start
        );
        for (offset, &position) in window.iter().enumerate() {
            prop_assert_eq!(position, f.ring.position(start + offset, f.capacity));
        }
        for &position in &window[..slice_len - 1] {
            prop_assert!(
                !context.ends_episode(position),
                "{:?} crosses an episode end",
                window
            );
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn windows_are_contiguous_and_inside_one_episode(
        f in fixture(48, 0, 5),
        slice_len in 1usize..7,
        windows in 0usize..6,
        flags in any::<bool>(),
    ) {
        check_windows(&f, flags, slice_len, windows)?;
    }

    #[test]
    fn rare_valid_windows_are_found_by_counting(f in fixture(300, 200, 1), slice_len in 2usize..5) {
        // flag_odds 1: every row ends an episode, so no window of 2 or more rows fits...
        let mut f = f;
        // ...except where a few rows are cleared, making the valid starts rare.
        for i in [17, 18, 19, 120] {
            let position = f.ring.position(i % f.ring.len, f.capacity);
            f.terminated[position] = Flag::new(false);
            f.truncated[position] = Flag::new(false);
        }
        check_windows(&f, true, slice_len, 5)?;
    }
}

#[test]
fn windows_wrap_around_the_end_of_the_positions() {
    let context = SampleContext {
        ring: RingState {
            cursor: 3,
            len: 10,
            written: 23,
            ..RingState::default()
        },
        capacity: 10,
        terminated: None,
        truncated: None,
    };
    let mut sampler = SliceSampler::new(4, 11).unwrap();
    let (mut indices, mut weights) = ([0; 400], [0.0; 400]);
    sampler
        .sample(&context, 400, &mut indices, &mut weights)
        .unwrap();
    let mut seen = [0usize; 7];
    for window in indices.chunks(4) {
        let start = (window[0] + 10 - 3) % 10;
        let expected: Vec<usize> = (0..4).map(|j| (window[0] + j) % 10).collect();
        assert_eq!(window, expected, "windows follow ring order");
        seen[start] += 1;
    }
    // Every start is drawn; starts 4, 5 and 6 (first positions 7, 8, 9) wrap from 9 to 0.
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    assert!(
        indices
            .chunks(4)
            .any(|w| w[..3].contains(&9) && w.contains(&0))
    );
}

#[test]
fn starts_are_uniform_over_valid_windows() {
    let capacity = 64;
    let ring = RingState {
        cursor: 20,
        len: 64,
        written: 500,
        ..RingState::default()
    };
    let mut terminated = vec![Flag::new(false); capacity];
    let mut truncated = vec![Flag::new(false); capacity];
    for p in [3, 11, 12, 30, 47] {
        terminated[p] = Flag::new(true);
    }
    for p in [19, 55] {
        truncated[p] = Flag::new(true);
    }
    let context = SampleContext {
        ring,
        capacity,
        terminated: Some(&terminated),
        truncated: Some(&truncated),
    };
    let slice_len = 5;
    let valid = valid_starts(&context, slice_len);
    let mut sampler = SliceSampler::new(slice_len, 42).unwrap();
    let windows = 100;
    let (mut indices, mut weights) = (vec![0; windows * slice_len], vec![0.0; windows * slice_len]);
    let mut counts = vec![0u64; ring.len];
    let calls = 400;
    for _ in 0..calls {
        sampler
            .sample(&context, windows * slice_len, &mut indices, &mut weights)
            .unwrap();
        for window in indices.chunks(slice_len) {
            counts[logical(&context, window[0])] += 1;
        }
    }
    let draws = (calls * windows) as f64;
    let expected = draws / valid.len() as f64;
    let chi_square: f64 = valid
        .iter()
        .map(|&s| (counts[s] as f64 - expected).powi(2) / expected)
        .sum();
    let invalid: u64 = (0..ring.len)
        .filter(|s| !valid.contains(s))
        .map(|s| counts[s])
        .sum();
    assert_eq!(invalid, 0);
    // Chi-square with k - 1 degrees of freedom: mean k - 1, sd sqrt(2 (k - 1)); 5 sd.
    let df = (valid.len() - 1) as f64;
    assert!(
        chi_square < df + 5.0 * (2.0 * df).sqrt(),
        "chi-square {chi_square:.1} with {df} degrees of freedom"
    );
}

#[test]
fn the_counting_fallback_is_uniform_too() {
    // 1000 rows, all ending episodes but two 3-row stretches: 2 valid starts of 3 rows
    // among 998, so rejection almost always runs out and the scan picks.
    let capacity = 1000;
    let mut terminated = vec![Flag::new(true); capacity];
    for p in [100, 101, 700, 701] {
        terminated[p] = Flag::new(false);
    }
    let context = SampleContext {
        ring: RingState {
            cursor: 0,
            len: capacity,
            written: 5000,
            ..RingState::default()
        },
        capacity,
        terminated: Some(&terminated),
        truncated: None,
    };
    let mut sampler = SliceSampler::new(3, 9).unwrap();
    let (mut indices, mut weights) = ([0; 300], [0.0; 300]);
    let mut first = 0;
    for _ in 0..20 {
        sampler
            .sample(&context, 300, &mut indices, &mut weights)
            .unwrap();
        for window in indices.chunks(3) {
            assert!(
                window == [100, 101, 102] || window == [700, 701, 702],
                "{window:?}"
            );
            first += usize::from(window[0] == 100);
        }
    }
    // 2000 fair coin flips: sd 22.4, 5 sd.
    assert!(
        (first as f64 - 1000.0).abs() < 5.0 * 22.4,
        "{first} of 2000"
    );
}

#[test]
fn invalid_requests_are_refused() {
    assert!(SliceSampler::new(0, 0).is_err());
    let mut sampler = SliceSampler::new(4, 0).unwrap();
    let (mut indices, mut weights) = ([0; 8], [0.0; 8]);
    let context = |len| SampleContext {
        ring: RingState {
            cursor: len % 8,
            len,
            written: len as u64,
            ..RingState::default()
        },
        capacity: 8,
        terminated: None,
        truncated: None,
    };
    let message = sampler
        .sample(&context(8), 6, &mut indices, &mut weights)
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("not a multiple of the slice length 4"),
        "{message}"
    );
    assert!(matches!(
        sampler.sample(&context(0), 4, &mut indices, &mut weights),
        Err(Error::Empty)
    ));
    assert!(matches!(
        sampler.sample(&context(3), 4, &mut indices, &mut weights),
        Err(Error::NotEnoughRows {
            requested: 4,
            available: 3
        })
    ));
    // Room for fewer rows than asked: refused, not cut to one window.
    assert!(matches!(
        sampler.sample(&context(8), 8, &mut indices[..6], &mut weights),
        Err(Error::BatchTooSmall {
            requested: 8,
            room: 6
        })
    ));
    assert_eq!(
        sampler
            .sample(&context(8), 4, &mut indices[..6], &mut weights)
            .unwrap(),
        4
    );
    assert_eq!(
        sampler
            .sample(&context(8), 0, &mut indices, &mut weights)
            .unwrap(),
        0
    );
}

#[test]
fn sampling_allocates_nothing() {
    let capacity = 2000;
    let mut terminated = vec![Flag::new(false); capacity];
    for p in (0..capacity).step_by(7) {
        terminated[p] = Flag::new(true);
    }
    // Mostly ending rows: the fallback scan runs too.
    let truncated: Vec<Flag> = (0..capacity).map(|p| Flag::new(p < 1990)).collect();
    let dense = SampleContext {
        ring: RingState {
            cursor: 1500,
            len: capacity,
            written: 9000,
            ..RingState::default()
        },
        capacity,
        terminated: Some(&terminated),
        truncated: None,
    };
    let sparse = SampleContext {
        truncated: Some(&truncated),
        ..dense
    };
    let mut sampler = SliceSampler::new(4, 3).unwrap();
    let (mut indices, mut weights) = ([0; 64], [0.0; 64]);
    let ((), stats) = rl_testkit::measure(|| {
        for _ in 0..50 {
            for context in [&dense, &sparse] {
                sampler
                    .sample(context, 64, &mut indices, &mut weights)
                    .unwrap();
            }
        }
    });
    assert_eq!(stats.allocations, 0);
}
