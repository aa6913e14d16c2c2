//! A replay buffer over a memory-mapped file: what was committed comes back after a
//! reopen, and the hot loop (extend, sample, commit) allocates nothing.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use rl_core::{Column, DType, Flag, Schema};
use rl_storage::{
    Batch, ColumnSlice,
    memmap::{MemmapOptions, MemmapStorage},
    replay::ReplayBuffer,
    sampler::{Uniform, WithoutReplacement},
};
use rl_testkit::{CountingAllocator, measure};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn schema() -> Schema {
    Schema::new([
        Column::new("obs", DType::F32, &[3]),
        Column::scalar("id", DType::I64),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
    ])
    .unwrap()
}

struct Rows {
    obs: Vec<f32>,
    id: Vec<i64>,
    terminated: Vec<Flag>,
    truncated: Vec<Flag>,
}

impl Rows {
    fn new(ids: std::ops::Range<i64>) -> Self {
        Self {
            obs: ids.clone().flat_map(|i| [i as f32, 1.0, -1.0]).collect(),
            id: ids.clone().collect(),
            terminated: ids.clone().map(|i| Flag::new(i % 50 == 49)).collect(),
            truncated: ids.map(|_| Flag::new(false)).collect(),
        }
    }

    fn columns(&self) -> [ColumnSlice<'_>; 4] {
        [
            (&self.obs).into(),
            (&self.id).into(),
            (&self.terminated).into(),
            (&self.truncated).into(),
        ]
    }
}

fn stored_ids<P: rl_storage::sampler::Sampler>(
    buffer: &ReplayBuffer<MemmapStorage, P>,
) -> Vec<i64> {
    let id = buffer.column::<i64>("id").unwrap();
    let obs = buffer.column::<f32>("obs").unwrap();
    buffer
        .positions()
        .map(|p| {
            assert_eq!(obs[p * 3], id[p] as f32, "row {p} is whole");
            id[p]
        })
        .collect()
}

#[test]
fn committed_rows_come_back_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replay.rl");
    let storage = MemmapStorage::create(&path, schema(), 1000, MemmapOptions::default()).unwrap();
    let mut buffer = ReplayBuffer::new(storage, Uniform::new(0));
    buffer.extend(&Rows::new(0..2500).columns()).unwrap();
    buffer.commit().unwrap();
    let committed = stored_ids(&buffer);
    let ring = buffer.ring();
    drop(buffer);

    let storage =
        MemmapStorage::open_with(&path, &schema(), 1000, MemmapOptions::default()).unwrap();
    let mut reopened = ReplayBuffer::new(
        storage,
        WithoutReplacement::new(1000, Default::default(), 1).unwrap(),
    );
    assert_eq!(stored_ids(&reopened), committed);
    assert_eq!(
        reopened.ring(),
        ring,
        "cursor, counters and episodes survive"
    );
    assert_eq!(committed, (1500..2500).collect::<Vec<_>>());
    // The reopened buffer samples and keeps writing where it stopped.
    let mut batch = Batch::new(&schema(), 100).unwrap();
    reopened.sample(&mut batch).unwrap();
    assert!(
        batch
            .column::<i64>("id")
            .unwrap()
            .iter()
            .all(|id| (1500..2500).contains(id))
    );
    reopened.extend(&Rows::new(2500..2510).columns()).unwrap();
    assert_eq!(stored_ids(&reopened).last(), Some(&2509));
}

#[test]
fn extend_sample_and_commit_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let storage = MemmapStorage::create(
        dir.path().join("replay.rl"),
        schema(),
        4096,
        MemmapOptions::default(),
    )
    .unwrap();
    let mut buffer = ReplayBuffer::new(storage, Uniform::new(0));
    let rows = Rows::new(0..512);
    let columns = rows.columns();
    let mut batch = Batch::new(&schema(), 256).unwrap();
    buffer.extend(&columns).unwrap();
    buffer.commit().unwrap();
    let (result, stats) = measure(|| -> rl_storage::Result<()> {
        for _ in 0..40 {
            buffer.extend(&columns)?; // wraps the ring several times: reservations included
            buffer.sample(&mut batch)?;
            buffer.commit()?;
        }
        Ok(())
    });
    result.unwrap();
    assert_eq!(stats.allocations, 0, "{stats:?}");
}
