//! The synchronous collector into a frame-stacked deduplicating buffer: one frame per
//! row, the stacks rebuilt equal the observations, refusals before anything is stored,
//! no allocation per batch.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use rl_collect::{CollectorConfig, ConstantPolicy, Error, RandomPolicy, SyncCollector};
use rl_core::{Column, DType, Field, Space};
use rl_envs::{Catch, FrameStacked};
use rl_storage::{Batch, dedup::DedupReplay, ram::RamStorage, sampler::Uniform};
use rl_testkit::{CountingAllocator, measure};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Catch frames: 10 x 5 bytes.
const FRAME: usize = 50;

fn buffer(capacity: usize, frames: usize) -> DedupReplay {
    let schema = DedupReplay::<RamStorage>::schema([
        Column::new("obs", DType::U8, &[FRAME]),
        Column::scalar("action", DType::U32),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
    ])
    .unwrap();
    DedupReplay::new(
        RamStorage::new(schema, capacity, None).unwrap(),
        Uniform::new(1),
    )
    .unwrap()
    .with_frame_stack(frames)
    .unwrap()
}

fn stacked(n: u64) -> Vec<FrameStacked<Catch>> {
    (0..n)
        .map(|seed| FrameStacked::new(Catch::new(seed), 3).unwrap())
        .collect()
}

#[test]
fn each_step_stores_one_frame_and_sampled_stacks_are_observations() {
    let random = RandomPolicy::new(&Space::discrete(3).unwrap(), 7).unwrap();
    let mut collector = SyncCollector::new(stacked(1), random, CollectorConfig::new(30)).unwrap();
    let mut replay = buffer(1000, 3);
    let report = collector.collect_frames(&mut replay).unwrap();
    assert_eq!(report.frames, 30);
    // 30 steps of 9-step episodes: 3 ended, each with its final row.
    assert_eq!(replay.buffer().len(), 33);
    // Every stacked observation sampled is one the environment could show: three frames
    // of one episode, the ball one row lower in each newer frame (or the first repeated).
    let mut batch = Batch::new(replay.batch_schema(), 64).unwrap();
    replay.sample(&mut batch).unwrap();
    let obs = batch.column::<u8>(Field::Obs.name()).unwrap();
    let next = batch.column::<u8>(Field::NextObs.name()).unwrap();
    for row in 0..batch.len() {
        let (stack, next_stack) = (&obs[row * 150..][..150], &next[row * 150..][..150]);
        // next_obs is obs shifted by one frame.
        assert_eq!(stack[FRAME..], next_stack[..2 * FRAME], "row {row}");
    }
}

#[test]
fn more_than_one_environment_or_a_wrong_frame_is_refused_before_a_step() {
    let policy = || ConstantPolicy::new(&[1u32]);
    let mut two = SyncCollector::new(stacked(2), policy(), CollectorConfig::new(2)).unwrap();
    let mut replay = buffer(100, 3);
    let error = two.collect_frames(&mut replay).unwrap_err();
    assert!(error.to_string().contains("one environment"), "{error}");
    assert_eq!(two.frames(), 0);
    // A buffer stacking 2 frames of 50 bytes for observations of 3 frames.
    let mut one = SyncCollector::new(stacked(1), policy(), CollectorConfig::new(1)).unwrap();
    let mut wrong = buffer(100, 2);
    let error = one.collect_frames(&mut wrong).unwrap_err();
    assert!(matches!(error, Error::Config(_)), "{error}");
    assert!(error.to_string().contains("2 frame(s)"), "{error}");
    assert_eq!((one.frames(), wrong.buffer().len()), (0, 0));
}

#[test]
fn a_thousand_batches_after_the_first_allocate_nothing() {
    let mut collector = SyncCollector::new(
        stacked(1),
        ConstantPolicy::new(&[1u32]),
        CollectorConfig::new(8),
    )
    .unwrap();
    let mut replay = buffer(500, 3);
    collector.collect_frames(&mut replay).unwrap();
    let (result, stats) = measure(|| -> Result<(), Error> {
        for _ in 0..1000 {
            collector.collect_frames(&mut replay)?;
        }
        Ok(())
    });
    result.unwrap();
    assert_eq!(stats.allocations, 0, "{stats:?}");
}
