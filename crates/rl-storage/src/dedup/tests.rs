use proptest::prelude::*;
use rl_core::Location;

use super::*;

fn columns(obs: usize) -> Vec<Column> {
    vec![
        Column::new("obs", DType::F32, &[obs]),
        Column::scalar("action", DType::U32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
    ]
}

fn dedup(capacity: usize) -> DedupReplay {
    let schema = DedupReplay::<RamStorage>::schema(columns(2)).unwrap();
    DedupReplay::new(
        RamStorage::new(schema, capacity, None).unwrap(),
        Uniform::new(5),
    )
    .unwrap()
}

/// Observation of step `t` of episode `e`: unique per (episode, step).
fn obs(e: u32, t: u32) -> [f32; 2] {
    [e as f32, t as f32]
}

proptest! {
    /// Every sampled transition's next observation is the true next observation,
    /// including the final observation of terminated and truncated episodes.
    #[test]
    fn next_obs_is_the_true_next_observation(
        capacity in 4usize..60,
        episodes in proptest::collection::vec((1u32..12, any::<bool>()), 1..12),
    ) {
        let mut buffer = dedup(capacity);
        for (e, &(length, cut)) in episodes.iter().enumerate() {
            let e = e as u32;
            for t in 0..length {
                let last = t + 1 == length;
                let terminated = [Flag::new(last && !cut)];
                let truncated = [Flag::new(last && cut)];
                let o = obs(e, t);
                let final_obs = obs(e, t + 1);
                let action = [t];
                let row = [(&o).into(), (&action).into(), (&terminated).into(), (&truncated).into()];
                buffer.push_step(&row, last.then(|| (&final_obs).into())).unwrap();
            }
        }
        let mut batch = Batch::new(buffer.batch_schema(), 64).unwrap();
        match buffer.sample(&mut batch) {
            Ok(()) => {}
            Err(Error::NotEnoughRows { .. }) => return Ok(()), // one final row stored only
            Err(other) => return Err(TestCaseError::fail(other.to_string())),
        }
        let o = batch.column::<f32>("obs").unwrap();
        let next = batch.column::<f32>(NEXT_OBS).unwrap();
        let action = batch.column::<u32>("action").unwrap();
        for j in 0..batch.len() {
            prop_assert_eq!(next[2 * j], o[2 * j], "same episode");
            prop_assert_eq!(next[2 * j + 1], o[2 * j + 1] + 1.0, "next step");
            prop_assert_eq!(action[j] as f32, o[2 * j + 1]);
        }
    }
}

#[test]
fn observations_are_stored_once() {
    let with_next = Schema::new(columns(1024).into_iter().chain([Column::new(
        "next_obs",
        DType::F32,
        &[1024],
    )]))
    .unwrap();
    let dedup_schema = DedupReplay::<RamStorage>::schema(columns(1024)).unwrap();
    let stored = RamStorage::plan(&with_next, 10_000)
        .unwrap()
        .total(Location::Ram);
    let deduplicated = RamStorage::plan(&dedup_schema, 10_000)
        .unwrap()
        .total(Location::Ram);
    assert!(
        deduplicated * 2 < stored + stored / 50,
        "{deduplicated} vs {stored}"
    );
}

#[test]
fn final_observations_are_checked_before_writing() {
    let mut buffer = dedup(10);
    let (no, yes) = ([Flag::new(false)], [Flag::new(true)]);
    let o = [1.0f32, 2.0];
    let ending = [(&o).into(), (&[0u32]).into(), (&yes).into(), (&no).into()];
    let running = [(&o).into(), (&[0u32]).into(), (&no).into(), (&no).into()];
    assert!(
        buffer.push_step(&ending, None).is_err(),
        "final obs missing"
    );
    assert!(
        buffer.push_step(&running, Some((&o).into())).is_err(),
        "unexpected final obs"
    );
    let nan = [f32::NAN, 0.0];
    assert!(matches!(
        buffer.push_step(&ending, Some((&nan).into())),
        Err(Error::NonFinite { .. })
    ));
    assert!(
        buffer.push_step(&ending, Some((&[1.0f32]).into())).is_err(),
        "wrong length"
    );
    assert!(
        buffer
            .push_step(&ending, Some((&[1u32, 2]).into()))
            .is_err(),
        "wrong dtype"
    );
    assert_eq!(buffer.buffer().len(), 0, "nothing was written");
    buffer.push_step(&ending, Some((&o).into())).unwrap();
    assert_eq!(buffer.buffer().len(), 2, "transition plus final row");
}

#[test]
fn pushing_and_sampling_allocate_nothing() {
    let mut buffer = dedup(100);
    let mut batch = Batch::new(buffer.batch_schema(), 32).unwrap();
    let (no, yes) = ([Flag::new(false)], [Flag::new(true)]);
    let o = [0.5f32, 0.5];
    let running = [(&o).into(), (&[1u32]).into(), (&no).into(), (&no).into()];
    let ending = [(&o).into(), (&[1u32]).into(), (&yes).into(), (&no).into()];
    buffer.push_step(&running, None).unwrap();
    buffer.push_step(&running, None).unwrap();
    let ((), stats) = rl_testkit::measure(|| {
        for t in 0..500 {
            if t % 9 == 8 {
                buffer.push_step(&ending, Some((&o).into())).unwrap();
            } else {
                buffer.push_step(&running, None).unwrap();
            }
            buffer.sample(&mut batch).unwrap();
        }
    });
    assert_eq!(stats.allocations, 0, "{stats:?}");
}

#[test]
fn frame_stacks_never_cross_an_episode_start() {
    // Frames are one byte: episode e, step t has frame 10 * e + t.
    let schema = DedupReplay::<RamStorage>::schema([
        Column::new("obs", DType::U8, &[1]),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
    ])
    .unwrap();
    let mut buffer = DedupReplay::new(RamStorage::new(schema, 64, None).unwrap(), Uniform::new(9))
        .unwrap()
        .with_frame_stack(4)
        .unwrap();
    let lengths = [2u8, 6, 1, 5];
    for (e, &length) in lengths.iter().enumerate() {
        for t in 0..length {
            let last = t + 1 == length;
            let frame = [10 * e as u8 + t];
            let final_frame = [10 * e as u8 + t + 1];
            let (terminated, truncated) = (
                [Flag::new(last && e % 2 == 0)],
                [Flag::new(last && e % 2 == 1)],
            );
            let row = [(&frame).into(), (&terminated).into(), (&truncated).into()];
            buffer
                .push_step(&row, last.then(|| (&final_frame).into()))
                .unwrap();
        }
    }
    let mut batch = Batch::new(buffer.batch_schema(), 200).unwrap();
    buffer.sample(&mut batch).unwrap();
    let obs = batch.column::<u8>("obs").unwrap();
    let next = batch.column::<u8>(NEXT_OBS).unwrap();
    for j in 0..batch.len() {
        let (stack, next_stack) = (&obs[4 * j..4 * j + 4], &next[4 * j..4 * j + 4]);
        let (e, t) = (stack[3] / 10, stack[3] % 10);
        // Expected: frames t-3..=t of episode e, clamped at the episode's first frame.
        let expected: Vec<u8> = (0..4).map(|s| 10 * e + (t + s).saturating_sub(3)).collect();
        assert_eq!(stack, &expected[..], "obs stack of row {j}");
        let expected_next: Vec<u8> = (0..4)
            .map(|s| 10 * e + (t + 1 + s).saturating_sub(3))
            .collect();
        assert_eq!(next_stack, &expected_next[..], "next_obs stack of row {j}");
    }
    assert!(buffer.with_frame_stack(0).is_err());
}

proptest! {
    /// After the ring has overwritten old rows, every sampled stack (and next stack) is
    /// still the one the episode showed: rows whose stack would reach past the oldest
    /// stored row are not drawn.
    #[test]
    fn stacks_stay_true_after_the_ring_wraps(
        capacity in 6usize..40,
        stack in 1usize..5,
        episodes in proptest::collection::vec(1u32..9, 2..20),
        seed in 0u64..1000,
    ) {
        let schema = DedupReplay::<RamStorage>::schema(columns(2)).unwrap();
        let mut buffer = DedupReplay::new(RamStorage::new(schema, capacity, None).unwrap(), Uniform::new(seed))
            .unwrap()
            .with_frame_stack(stack)
            .unwrap();
        for (e, &length) in episodes.iter().enumerate() {
            let e = e as u32;
            for t in 0..length {
                let last = t + 1 == length;
                let terminated = [Flag::new(last)];
                let no = [Flag::new(false)];
                let (o, final_obs, action) = (obs(e, t), obs(e, t + 1), [t]);
                let row = [(&o).into(), (&action).into(), (&terminated).into(), (&no).into()];
                buffer.push_step(&row, last.then(|| (&final_obs).into())).unwrap();
            }
        }
        let mut batch = Batch::new(buffer.batch_schema(), 64).unwrap();
        match buffer.sample(&mut batch) {
            Ok(()) => {}
            Err(Error::NotEnoughRows { .. }) => return Ok(()),
            Err(other) => return Err(TestCaseError::fail(other.to_string())),
        }
        let o = batch.column::<f32>("obs").unwrap();
        let next = batch.column::<f32>(NEXT_OBS).unwrap();
        let width = 2 * stack;
        for j in 0..batch.len() {
            let (row, next_row) = (&o[j * width..(j + 1) * width], &next[j * width..(j + 1) * width]);
            let (e, t) = (row[width - 2], row[width - 1]);
            for s in 0..stack {
                let back = (stack - 1 - s) as f32;
                prop_assert_eq!(row[2 * s], e, "obs slot {} of row {}", s, j);
                prop_assert_eq!(row[2 * s + 1], (t - back).max(0.0), "obs slot {} of row {}", s, j);
                prop_assert_eq!(next_row[2 * s], e);
                prop_assert_eq!(next_row[2 * s + 1], (t + 1.0 - back).max(0.0));
            }
        }
    }
}

/// On a file, frames of a page or more are read by copy (`pread`) instead of through the
/// mapping: the stacks and next observations sampled are still the ones the episodes
/// showed, with the ring wrapped, for stacks of 1 (a shifted gather) and 4.
#[test]
fn frames_read_from_a_file_are_the_frames_written() {
    use crate::memmap::{MemmapOptions, MemmapStorage};
    const WIDTH: usize = 1024; // 4 KiB frames: read by copy
    let frame = |e: u32, t: u32| [(e * 1000 + t) as f32; WIDTH];
    for stack in [1usize, 4] {
        let dir = tempfile::tempdir().unwrap();
        let schema = DedupReplay::<MemmapStorage>::schema(columns(WIDTH)).unwrap();
        let storage = MemmapStorage::create(
            dir.path().join("frames.rlmm"),
            schema,
            40,
            MemmapOptions::default(),
        )
        .unwrap();
        assert!(storage.reads_by_copy());
        let mut buffer = DedupReplay::new(storage, Uniform::new(3))
            .unwrap()
            .with_frame_stack(stack)
            .unwrap();
        for (e, length) in [7u32, 12, 3, 9, 15, 6].into_iter().enumerate() {
            let e = e as u32;
            for t in 0..length {
                let last = t + 1 == length;
                let (terminated, no) = ([Flag::new(last)], [Flag::new(false)]);
                let (o, final_obs, action) = (frame(e, t), frame(e, t + 1), [t]);
                let row = [
                    (&o).into(),
                    (&action).into(),
                    (&terminated).into(),
                    (&no).into(),
                ];
                buffer
                    .push_step(&row, last.then(|| (&final_obs).into()))
                    .unwrap();
            }
        }
        let mut batch = Batch::new(buffer.batch_schema(), 64).unwrap();
        buffer.sample(&mut batch).unwrap();
        let (o, next) = (
            batch.column::<f32>("obs").unwrap(),
            batch.column::<f32>(NEXT_OBS).unwrap(),
        );
        let action = batch.column::<u32>("action").unwrap();
        let row_len = WIDTH * stack;
        for j in 0..batch.len() {
            let (row, next_row) = (
                &o[j * row_len..(j + 1) * row_len],
                &next[j * row_len..(j + 1) * row_len],
            );
            let newest = row[row_len - 1] as u32;
            let (e, t) = (newest / 1000, newest % 1000);
            assert_eq!(action[j], t, "row {j}: the action of the frame's step");
            for s in 0..stack {
                let back = (stack - 1 - s) as u32;
                let slot = &row[s * WIDTH..(s + 1) * WIDTH];
                let next_slot = &next_row[s * WIDTH..(s + 1) * WIDTH];
                assert!(
                    slot.iter()
                        .all(|&v| v == frame(e, t.saturating_sub(back))[0])
                );
                assert!(
                    next_slot
                        .iter()
                        .all(|&v| v == frame(e, (t + 1).saturating_sub(back))[0])
                );
            }
        }
    }
}
