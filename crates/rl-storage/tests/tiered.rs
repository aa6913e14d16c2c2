//! A tiered replay through the public API only: a prioritized sampler drawing over both
//! tiers, priorities fed back from the batch, commits and a reopen, and a hot loop that
//! allocates nothing.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use rl_core::{Column, DType, Flag, Location, Schema};
use rl_storage::{
    ColumnSlice,
    device::{FakeDevice, TieredConfig, TieredReplay},
    sampler::{Prioritized, PrioritizedConfig},
};
use rl_testkit::{CountingAllocator, measure};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn schema() -> Schema {
    Schema::new([
        Column::new("obs", DType::F32, &[4]),
        Column::scalar("id", DType::I64),
        Column::scalar("terminated", DType::Bool),
    ])
    .unwrap()
}

struct Rows {
    obs: Vec<f32>,
    id: Vec<i64>,
    terminated: Vec<Flag>,
}

impl Rows {
    fn new(ids: std::ops::Range<i64>) -> Self {
        Self {
            obs: ids
                .clone()
                .flat_map(|i| [i as f32, 1.0, 2.0, 3.0])
                .collect(),
            id: ids.clone().collect(),
            terminated: ids.map(|i| Flag::new(i % 25 == 24)).collect(),
        }
    }

    fn columns(&self) -> [ColumnSlice<'_>; 3] {
        [
            (&self.obs).into(),
            (&self.id).into(),
            (&self.terminated).into(),
        ]
    }
}

const CAPACITY: usize = 500;

fn sampler() -> Prioritized {
    Prioritized::new(CAPACITY, PrioritizedConfig::default(), 5).unwrap()
}

#[test]
fn prioritized_sampling_over_both_tiers_survives_a_reopen_and_allocates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiered.rlmm");
    let device = FakeDevice::new();
    let config = TieredConfig::new(100, 32);
    let mut replay = TieredReplay::create(
        &path,
        device.clone(),
        schema(),
        CAPACITY,
        config,
        sampler(),
        None,
    )
    .unwrap();
    assert_eq!(
        device.allocated_bytes(),
        config
            .plan(&schema(), CAPACITY)
            .unwrap()
            .total(Location::Gpu)
    );
    let data = Rows::new(0..64);
    let mut batch = replay.new_batch().unwrap();
    let mut ids = vec![0i64; 32];
    let mut priorities = [1.0f32; 32];
    let mut positions = [0usize; 32];
    replay.extend(&data.columns()).unwrap();
    let (result, stats) = measure(|| -> rl_storage::Result<()> {
        for step in 0..30 {
            replay.extend(&data.columns())?;
            replay.sample(&mut batch)?;
            batch.download(&device, "id", &mut ids)?;
            // Rows written later carry higher priorities: recency-weighted, like most
            // training loops end up, which the hot tier serves.
            for (p, &id) in priorities.iter_mut().zip(&ids) {
                *p = 1.0 + (id % 64) as f32 + step as f32;
            }
            positions.copy_from_slice(batch.positions());
            replay
                .sampler_mut()
                .update_priorities(&positions, &priorities)?;
            replay.commit()?;
        }
        Ok(())
    });
    result.unwrap();
    assert_eq!(stats.allocations, 0, "{stats:?}");
    let total = replay.total_counts();
    assert_eq!(total.rows(), 30 * 32);
    assert!(total.hot > 0 && total.cold > 0, "{total:?}");

    let ring = replay.ring();
    drop(batch);
    drop(replay);
    assert_eq!(device.allocated_bytes(), 0);

    // Reopen with a smaller hot tier: same rows, hot tier refilled from the file.
    let config = TieredConfig::new(50, 32);
    let mut replay = TieredReplay::open(&path, device.clone(), config, sampler(), None).unwrap();
    assert_eq!(replay.ring(), ring);
    assert_eq!(replay.hot_len(), 50);
    let mut batch = replay.new_batch().unwrap();
    let newest: Vec<usize> = (0..32)
        .map(|i| replay.ring().position(CAPACITY - 1 - i, CAPACITY))
        .collect();
    replay.gather(&newest, &mut batch).unwrap();
    assert_eq!(
        replay.last_sample_counts().hot,
        32,
        "the newest rows are hot"
    );
    batch.download(&device, "id", &mut ids).unwrap();
    // Every write holds ids 0..64, so the newest row is id 63, then 62, ...
    let expected: Vec<i64> = (0..32).map(|i| 63 - i).collect();
    assert_eq!(ids, expected);
    let mut obs = vec![0f32; 32 * 4];
    batch.download(&device, "obs", &mut obs).unwrap();
    for (row, &id) in obs.chunks_exact(4).zip(&ids) {
        assert_eq!(row, [id as f32, 1.0, 2.0, 3.0]);
    }
}
