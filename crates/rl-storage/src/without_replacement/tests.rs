use proptest::prelude::*;

use super::test_support::{Fixture, fixture};
use super::*;
use rl_core::Flag;

fn context(cursor: usize, len: usize, capacity: usize) -> SampleContext<'static> {
    SampleContext {
        ring: RingState {
            cursor,
            len,
            written: len as u64,
            ..RingState::default()
        },
        capacity,
        terminated: None,
        truncated: None,
    }
}

/// Draws one whole epoch in batches of `rows`; returns the batches.
fn one_epoch(
    sampler: &mut WithoutReplacement,
    context: &SampleContext<'_>,
    rows: usize,
) -> Vec<Vec<usize>> {
    let (mut indices, mut weights) = (vec![usize::MAX; 2 * rows], vec![0.0; 2 * rows]);
    let epoch = sampler.epoch() + 1;
    let mut batches = Vec::new();
    loop {
        let n = sampler
            .sample(context, rows, &mut indices, &mut weights)
            .unwrap();
        assert_eq!(sampler.epoch(), epoch, "a batch never spans two epochs");
        assert!(weights[..n].iter().all(|&w| w == 1.0));
        batches.push(indices[..n].to_vec());
        let left = sampler.remaining();
        let over = match sampler.last_batch() {
            LastBatch::Drop => left < rows,
            LastBatch::Keep | LastBatch::Merge => left == 0,
        };
        if over {
            return batches;
        }
    }
}

fn check_epoch(f: &Fixture, last: LastBatch, rows: usize) -> Result<(), TestCaseError> {
    let len = f.ring.len;
    let mut sampler = WithoutReplacement::new(f.capacity, last, len as u64).unwrap();
    let context = f.context();
    for _ in 0..2 {
        let batches = one_epoch(&mut sampler, &context, rows);
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        let (full, remainder) = (len / rows, len % rows);
        let mut expected = vec![rows; full];
        match last {
            LastBatch::Keep if remainder > 0 => expected.push(remainder),
            LastBatch::Merge => *expected.last_mut().unwrap() += remainder,
            LastBatch::Keep | LastBatch::Drop => {}
        }
        prop_assert_eq!(&sizes, &expected);
        let mut seen = vec![0usize; f.capacity];
        for &position in batches.iter().flatten() {
            prop_assert!(f.is_stored(position), "position {} is not stored", position);
            seen[position] += 1;
        }
        prop_assert!(
            seen.iter().all(|&n| n <= 1),
            "a row was drawn twice: {:?}",
            seen
        );
        let missed = (0..f.capacity)
            .filter(|&p| f.is_stored(p) && seen[p] == 0)
            .count();
        match last {
            LastBatch::Keep | LastBatch::Merge => prop_assert_eq!(missed, 0),
            LastBatch::Drop => prop_assert_eq!(missed, remainder),
        }
    }
    prop_assert_eq!(sampler.epoch(), 2);
    Ok(())
}

proptest! {
    #[test]
    fn every_stored_row_once_per_epoch(
        f in fixture(40, 1, 4),
        rows_seed in 0usize..1000,
        mode in 0usize..3,
    ) {
        let rows = 1 + rows_seed % f.ring.len;
        let last = [LastBatch::Keep, LastBatch::Merge, LastBatch::Drop][mode];
        check_epoch(&f, last, rows)?;
    }

    #[test]
    fn batches_larger_than_the_buffer_are_refused(f in fixture(20, 0, 4), extra in 1usize..5) {
        for last in [LastBatch::Keep, LastBatch::Merge, LastBatch::Drop] {
            let mut sampler = WithoutReplacement::new(f.capacity, last, 0).unwrap();
            let rows = f.ring.len + extra;
            let (mut indices, mut weights) = (vec![0; 2 * rows], vec![0.0; 2 * rows]);
            let result = sampler.sample(&f.context(), rows, &mut indices, &mut weights);
            if f.ring.len == 0 {
                prop_assert!(matches!(result, Err(Error::Empty)));
            } else {
                let refused = matches!(
                    result,
                    Err(Error::NotEnoughRows { requested, available })
                        if requested == rows && available == f.ring.len
                );
                prop_assert!(refused, "{:?}", result);
            }
            prop_assert_eq!(sampler.epoch(), 0);
        }
    }
}

#[test]
fn merge_returns_the_remainder_with_the_last_batch() {
    let mut sampler = WithoutReplacement::new(16, LastBatch::Merge, 3).unwrap();
    let context = context(10, 10, 16);
    let sizes: Vec<usize> = one_epoch(&mut sampler, &context, 4)
        .iter()
        .map(Vec::len)
        .collect();
    assert_eq!(sizes, [4, 6]);
    let (mut indices, mut weights) = ([0; 7], [0.0; 7]);
    let refused = sampler.sample(&context, 4, &mut indices[..6], &mut weights[..6]);
    let message = refused.unwrap_err().to_string();
    assert!(message.contains("size the batch for merge"), "{message}");
    assert_eq!(sampler.epoch(), 1, "a refused call starts no epoch");
}

#[test]
fn a_new_epoch_starts_when_the_buffer_grows() {
    let mut sampler = WithoutReplacement::new(20, LastBatch::Keep, 5).unwrap();
    let (mut indices, mut weights) = ([0; 3], [0.0; 3]);
    let small = context(10, 10, 20);
    assert_eq!(
        sampler
            .sample(&small, 3, &mut indices, &mut weights)
            .unwrap(),
        3
    );
    assert_eq!((sampler.epoch(), sampler.remaining()), (1, 7));
    assert_eq!(
        sampler
            .sample(&small, 3, &mut indices, &mut weights)
            .unwrap(),
        3
    );
    assert_eq!((sampler.epoch(), sampler.remaining()), (1, 4));

    // Two rows written: positions 10 and 11 are new, and the epoch restarts over 12.
    let grown = context(12, 12, 20);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let n = sampler
            .sample(&grown, 3, &mut indices, &mut weights)
            .unwrap();
        assert_eq!(sampler.epoch(), 2);
        seen.extend_from_slice(&indices[..n]);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..12).collect::<Vec<_>>());
    assert_eq!(sampler.remaining(), 0);
}

#[test]
fn a_full_buffer_keeps_its_epoch_while_rows_are_overwritten() {
    let mut sampler = WithoutReplacement::new(6, LastBatch::Keep, 9).unwrap();
    let (mut indices, mut weights) = ([0; 2], [0.0; 2]);
    let mut seen = Vec::new();
    for cursor in [0, 2, 4] {
        // Two rows are overwritten between calls; len stays 6.
        let n = sampler
            .sample(&context(cursor, 6, 6), 2, &mut indices, &mut weights)
            .unwrap();
        seen.extend_from_slice(&indices[..n]);
    }
    assert_eq!(sampler.epoch(), 1);
    seen.sort_unstable();
    assert_eq!(seen, [0, 1, 2, 3, 4, 5]);
    // A cleared and refilled ring with another cursor starts over.
    sampler
        .sample(&context(1, 3, 6), 2, &mut indices, &mut weights)
        .unwrap();
    sampler
        .sample(&context(2, 3, 6), 1, &mut indices, &mut weights)
        .unwrap();
    assert_eq!(sampler.epoch(), 3);
    assert!([5, 0, 1].contains(&indices[0]), "{indices:?}");
}

#[test]
fn invalid_requests_are_refused() {
    assert!(WithoutReplacement::new(0, LastBatch::Keep, 0).is_err());
    let mut sampler = WithoutReplacement::new(8, LastBatch::Drop, 0).unwrap();
    let (mut indices, mut weights) = ([0; 4], [0.0; 4]);
    let empty = context(3, 0, 8);
    assert!(matches!(
        sampler.sample(&empty, 1, &mut indices, &mut weights),
        Err(Error::Empty)
    ));
    let other_capacity = context(3, 3, 9);
    assert!(
        sampler
            .sample(&other_capacity, 1, &mut indices, &mut weights)
            .is_err()
    );
    let inconsistent = context(8, 3, 8);
    assert!(
        sampler
            .sample(&inconsistent, 1, &mut indices, &mut weights)
            .is_err()
    );
    let flags = [Flag::new(false); 4];
    let short_flags = SampleContext {
        terminated: Some(&flags),
        ..context(3, 3, 8)
    };
    assert!(
        sampler
            .sample(&short_flags, 1, &mut indices, &mut weights)
            .is_err()
    );
    assert_eq!(
        sampler
            .sample(&context(3, 3, 8), 0, &mut indices, &mut weights)
            .unwrap(),
        0
    );
    assert_eq!(sampler.epoch(), 0);
}

#[test]
fn shorter_indices_are_refused_and_the_epoch_is_untouched() {
    let mut sampler = WithoutReplacement::new(8, LastBatch::Keep, 0).unwrap();
    let (mut indices, mut weights) = ([0; 2], [0.0; 2]);
    assert!(matches!(
        sampler.sample(&context(5, 5, 8), 4, &mut indices, &mut weights),
        Err(Error::BatchTooSmall {
            requested: 4,
            room: 2
        })
    ));
    let n = sampler
        .sample(&context(5, 5, 8), 2, &mut indices, &mut weights)
        .unwrap();
    assert_eq!((n, sampler.remaining()), (2, 3));
}

#[test]
fn sampling_allocates_nothing() {
    let mut sampler = WithoutReplacement::new(1000, LastBatch::Merge, 1).unwrap();
    assert_eq!(sampler.memory_plan().total(Location::Ram), 4000);
    let (mut indices, mut weights) = (vec![0; 63], vec![0.0; 63]);
    let (drawn, stats) = rl_testkit::measure(|| {
        let mut drawn = 0;
        for len in [1000, 1000, 1000, 999, 500] {
            for _ in 0..40 {
                let context = context(len % 1000, len, 1000);
                drawn += sampler
                    .sample(&context, 32, &mut indices, &mut weights)
                    .unwrap();
            }
        }
        drawn
    });
    assert_eq!(stats.allocations, 0);
    assert!(drawn >= 200 * 32);
    assert!(sampler.epoch() >= 5);
}
