use std::ops::Range;
use std::sync::atomic::Ordering;

use proptest::prelude::*;
use rl_core::{DType, Element, Flag};
use rl_testkit::measure;

use super::*;
use crate::batch::Batch;
use crate::device::FakeDevice;
use crate::device::test_support::FailingDevice;
use crate::ram::RamStorage;
use crate::replay::ReplayBuffer;
use crate::sampler::Uniform;
use crate::slice::SliceSampler;

fn schema() -> Schema {
    Schema::new([
        Column::new("obs", DType::F32, &[3]),
        Column::new("pixels", DType::U8, &[5]),
        Column::scalar("id", DType::I64),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
    ])
    .unwrap()
}

/// Rows whose every column encodes the row id, so any misplaced byte shows.
struct Rows {
    obs: Vec<f32>,
    pixels: Vec<u8>,
    id: Vec<i64>,
    reward: Vec<f32>,
    terminated: Vec<Flag>,
    truncated: Vec<Flag>,
}

impl Rows {
    fn new(ids: Range<i64>) -> Self {
        let ids: Vec<i64> = ids.collect();
        Self {
            obs: ids
                .iter()
                .flat_map(|&i| [i as f32, -(i as f32), 0.5])
                .collect(),
            pixels: ids
                .iter()
                .flat_map(|&i| (0..5).map(move |k| (i * 5 + k) as u8))
                .collect(),
            id: ids.clone(),
            reward: ids.iter().map(|&i| i as f32 * 0.25).collect(),
            terminated: ids.iter().map(|&i| Flag::new(i % 7 == 6)).collect(),
            truncated: ids.iter().map(|&i| Flag::new(i % 11 == 10)).collect(),
        }
    }

    fn columns(&self) -> [ColumnSlice<'_>; 6] {
        [
            (&self.obs).into(),
            (&self.pixels).into(),
            (&self.id).into(),
            (&self.reward).into(),
            (&self.terminated).into(),
            (&self.truncated).into(),
        ]
    }
}

fn create<D: DeviceBackend, P: Sampler>(
    dir: &Path,
    device: D,
    capacity: usize,
    hot_rows: usize,
    batch_rows: usize,
    sampler: P,
) -> TieredReplay<D, P> {
    let config = TieredConfig::new(hot_rows, batch_rows);
    TieredReplay::create(
        dir.join("replay.rlmm"),
        device,
        schema(),
        capacity,
        config,
        sampler,
        None,
    )
    .unwrap()
}

fn reference<P: Sampler>(capacity: usize, sampler: P) -> ReplayBuffer<RamStorage, P> {
    ReplayBuffer::new(RamStorage::new(schema(), capacity, None).unwrap(), sampler)
}

/// The gathered rows of every column of a device batch, as bytes.
fn device_rows<D: DeviceBackend>(device: &D, batch: &DeviceBatch<D>) -> Vec<Vec<u8>> {
    batch
        .schema()
        .columns()
        .iter()
        .map(|column| {
            let mut out = vec![0u8; batch.len() * column.row_bytes()];
            device
                .download(batch.column(column.name()).unwrap(), 0, &mut out)
                .unwrap();
            out
        })
        .collect()
}

fn typed_bytes<T: Element>(batch: &Batch, index: usize) -> Vec<u8> {
    bytemuck::cast_slice(batch.column_at::<T>(index).unwrap()).to_vec()
}

/// The gathered rows of every column of a host batch, as bytes.
fn host_rows(batch: &Batch) -> Vec<Vec<u8>> {
    (batch.schema().columns().iter().enumerate())
        .map(|(index, column)| match column.dtype() {
            DType::F32 => typed_bytes::<f32>(batch, index),
            DType::U32 => typed_bytes::<u32>(batch, index),
            DType::I64 => typed_bytes::<i64>(batch, index),
            DType::U8 => typed_bytes::<u8>(batch, index),
            DType::Bool => typed_bytes::<Flag>(batch, index),
        })
        .collect()
}

/// Hot rows by the definition: the drawn positions whose logical index (0 = oldest)
/// is among the newest `min(hot_rows, len)`.
fn expected_hot(ring: RingState, capacity: usize, hot_rows: usize, positions: &[usize]) -> u64 {
    let first_hot = ring.len - hot_rows.min(ring.len);
    let oldest = ring.oldest(capacity);
    positions
        .iter()
        .filter(|&&p| (p + capacity - oldest) % capacity >= first_hot)
        .count() as u64
}

/// Every row the hot tier claims to hold equals the file's row at the same logical
/// index.
fn check_hot_tier<D: DeviceBackend, P: Sampler>(replay: &TieredReplay<D, P>) {
    let ring = replay.ring();
    let (capacity, hot_rows) = (replay.capacity(), replay.hot_rows());
    for i in ring.len - replay.hot_len()..ring.len {
        let position = ring.position(i, capacity);
        let hot = ((ring.written - (ring.len - i) as u64) % hot_rows as u64) as usize;
        for (index, column) in replay.schema().columns().iter().enumerate() {
            let row_bytes = column.row_bytes();
            let mut row = vec![0u8; row_bytes];
            replay
                .device
                .download(&replay.hot[index], hot * row_bytes, &mut row)
                .unwrap();
            assert_eq!(
                row,
                replay.storage.column(index)[position * row_bytes..][..row_bytes],
                "hot row {hot} (logical {i}) of column {}",
                column.name()
            );
        }
    }
}

/// The file holds exactly the reference's rows at the same positions.
fn check_file<D: DeviceBackend, P: Sampler, Q: Sampler>(
    replay: &TieredReplay<D, P>,
    reference: &ReplayBuffer<RamStorage, Q>,
) {
    assert_eq!(replay.ring(), reference.ring());
    for position in reference.positions() {
        for (index, column) in replay.schema().columns().iter().enumerate() {
            let row = column.row_bytes();
            assert_eq!(
                replay.storage.column(index)[position * row..][..row],
                reference.storage().column(index)[position * row..][..row]
            );
        }
    }
}

/// Gathers `positions` from both and compares rows, positions, weights and the split.
fn gather_both<D: DeviceBackend, P: Sampler, Q: Sampler>(
    replay: &mut TieredReplay<D, P>,
    reference: &ReplayBuffer<RamStorage, Q>,
    positions: &[usize],
    device_batch: &mut DeviceBatch<D>,
    host_batch: &mut Batch,
) {
    replay.gather(positions, device_batch).unwrap();
    reference.gather(positions, host_batch).unwrap();
    assert_eq!(device_batch.positions(), positions);
    assert_eq!(
        device_rows(replay.device(), device_batch),
        host_rows(host_batch)
    );
    let hot = expected_hot(
        replay.ring(),
        replay.capacity(),
        replay.hot_len(),
        positions,
    );
    assert_eq!(
        replay.last_sample_counts(),
        TierCounts {
            hot,
            cold: positions.len() as u64 - hot
        }
    );
}

/// Samples with both (same sampler, same seed) and compares everything.
fn sample_both<D: DeviceBackend, P: Sampler>(
    replay: &mut TieredReplay<D, P>,
    reference: &mut ReplayBuffer<RamStorage, P>,
    device_batch: &mut DeviceBatch<D>,
    host_batch: &mut Batch,
) {
    replay.sample(device_batch).unwrap();
    reference.sample(host_batch).unwrap();
    assert_eq!(device_batch.positions(), host_batch.positions());
    assert_eq!(device_batch.weights(), host_batch.weights());
    assert_eq!(
        device_rows(replay.device(), device_batch),
        host_rows(host_batch)
    );
    let hot = expected_hot(
        replay.ring(),
        replay.capacity(),
        replay.hot_len(),
        device_batch.positions(),
    );
    assert_eq!(replay.last_sample_counts().hot, hot);
    assert_eq!(
        replay.last_sample_counts().rows(),
        device_batch.len() as u64
    );
}

/// `rows` stored positions picked by a small LCG seeded with `state`.
fn pick_positions(ring: RingState, capacity: usize, rows: usize, state: &mut u64) -> Vec<usize> {
    (0..rows)
        .map(|_| {
            *state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ring.position((*state >> 33) as usize % ring.len, capacity)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Rows gathered through the tiers (explicit positions and a seeded sampler) are
    /// exactly those a host replay buffer fed the same writes returns; the split
    /// matches the definition; the hot tier mirrors the newest rows of the file.
    /// Writes range from empty to over twice the capacity (so over `hot_rows` too).
    #[test]
    fn tiers_return_what_a_host_replay_returns(
        capacity in 1usize..40,
        hot_pick in any::<usize>(),
        batch_rows in 1usize..24,
        writes in proptest::collection::vec(0i64..90, 1..10),
        seed in any::<u64>(),
    ) {
        let hot_rows = 1 + hot_pick % capacity;
        let dir = tempfile::tempdir().unwrap();
        let device = FakeDevice::new();
        let mut replay = create(dir.path(), device, capacity, hot_rows, batch_rows, Uniform::new(seed));
        let mut host = reference(capacity, Uniform::new(seed));
        let mut device_batch = replay.new_batch().unwrap();
        let mut host_batch = Batch::new(&schema(), batch_rows).unwrap();
        let (mut next, mut state) = (0i64, seed);
        for rows in writes {
            let data = Rows::new(next..next + rows);
            next += rows;
            prop_assert_eq!(replay.extend(&data.columns()).unwrap(), rows as usize);
            host.extend(&data.columns()).unwrap();
            check_file(&replay, &host);
            prop_assert_eq!(replay.hot_len(), hot_rows.min(replay.len()));
            check_hot_tier(&replay);
            if host.is_empty() {
                prop_assert!(matches!(replay.sample(&mut device_batch), Err(Error::Empty)));
                continue;
            }
            let positions = pick_positions(replay.ring(), capacity, batch_rows, &mut state);
            gather_both(&mut replay, &host, &positions, &mut device_batch, &mut host_batch);
            sample_both(&mut replay, &mut host, &mut device_batch, &mut host_batch);
        }
    }

    /// After a commit and a reopen (with another hot size), the ring, the rows and the
    /// hot tier are intact, samples match the host buffer, and later writes continue
    /// the same hot ring.
    #[test]
    fn reopening_keeps_rows_and_refills_the_hot_tier(
        capacity in 1usize..40,
        hot_picks in any::<(usize, usize)>(),
        writes in proptest::collection::vec(0i64..90, 1..6),
        more in proptest::collection::vec(0i64..90, 0..4),
        seed in any::<u64>(),
    ) {
        let (hot_before, hot_after) = (1 + hot_picks.0 % capacity, 1 + hot_picks.1 % capacity);
        let batch_rows = 8;
        let dir = tempfile::tempdir().unwrap();
        let mut replay = create(dir.path(), FakeDevice::new(), capacity, hot_before, batch_rows, Uniform::new(seed));
        let mut host = reference(capacity, Uniform::new(seed));
        let mut next = 0i64;
        for rows in writes {
            let data = Rows::new(next..next + rows);
            next += rows;
            replay.extend(&data.columns()).unwrap();
            host.extend(&data.columns()).unwrap();
        }
        replay.commit().unwrap();
        let committed = replay.ring();
        drop(replay);

        let device = FakeDevice::new();
        let config = TieredConfig::new(hot_after, batch_rows);
        let mut replay = TieredReplay::open(dir.path().join("replay.rlmm"), device.clone(), config, Uniform::new(seed), None).unwrap();
        prop_assert_eq!(replay.ring(), committed);
        prop_assert_eq!(replay.hot_len(), hot_after.min(committed.len));
        prop_assert_eq!(device.allocated_bytes(), config.plan(&schema(), capacity).unwrap().total(Location::Gpu));
        check_file(&replay, &host);
        check_hot_tier(&replay);
        let mut device_batch = replay.new_batch().unwrap();
        let mut host_batch = Batch::new(&schema(), batch_rows).unwrap();
        let mut state = seed;
        for rows in std::iter::once(0).chain(more) {
            let data = Rows::new(next..next + rows);
            next += rows;
            replay.extend(&data.columns()).unwrap();
            host.extend(&data.columns()).unwrap();
            check_file(&replay, &host);
            prop_assert_eq!(replay.hot_len(), hot_after.min(replay.len()));
            check_hot_tier(&replay);
            if host.is_empty() {
                continue;
            }
            let positions = pick_positions(replay.ring(), capacity, batch_rows, &mut state);
            gather_both(&mut replay, &host, &positions, &mut device_batch, &mut host_batch);
            sample_both(&mut replay, &mut host, &mut device_batch, &mut host_batch);
        }
    }
}

#[test]
fn samplers_that_read_episode_flags_see_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let sampler = || SliceSampler::new(4, 9).unwrap();
    let mut replay = create(dir.path(), FakeDevice::new(), 50, 10, 16, sampler());
    let mut host = reference(50, sampler());
    let mut device_batch = replay.new_batch().unwrap();
    let mut host_batch = Batch::new(&schema(), 16).unwrap();
    for start in (0..130).step_by(13) {
        let data = Rows::new(start..start + 13);
        replay.extend(&data.columns()).unwrap();
        host.extend(&data.columns()).unwrap();
        sample_both(&mut replay, &mut host, &mut device_batch, &mut host_batch);
    }
    let total = replay.total_counts();
    assert!(total.hot > 0 && total.cold > 0, "{total:?}");
}

#[test]
fn device_bytes_are_the_planned_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let device = FakeDevice::new();
    let config = TieredConfig::new(100, 32);
    let plan = config.plan(&schema(), 1000).unwrap();
    // Hot tier 100 rows x 31 bytes, scratch 32 x 12 (obs, the widest), 2 x 32 pairs.
    assert_eq!(plan.total(Location::Gpu), 3100 + 384 + 512);
    assert_eq!(
        plan.total(Location::Ram),
        32 * 31 + 512 + 32 * SPLIT_BYTES as u64
    );
    let path = dir.path().join("replay.rlmm");
    let replay = TieredReplay::create(
        &path,
        device.clone(),
        schema(),
        1000,
        config,
        Uniform::new(0),
        None,
    )
    .unwrap();
    assert_eq!(device.allocated_bytes(), plan.total(Location::Gpu));
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        plan.total(Location::File)
    );
    assert_eq!(replay.memory_plan(), plan, "Uniform holds nothing");
    let batch = replay.new_batch().unwrap();
    let batch_plan = DeviceBatch::<FakeDevice>::plan(&schema(), 32).unwrap();
    assert_eq!(
        device.allocated_bytes(),
        plan.total(Location::Gpu) + batch_plan.total(Location::Gpu)
    );
    drop((batch, replay));
    assert_eq!(device.allocated_bytes(), 0);
}

type Snapshot = (RingState, usize, Vec<Vec<u8>>, Vec<Vec<u8>>);

fn snapshot<D: DeviceBackend, P: Sampler>(replay: &TieredReplay<D, P>) -> Snapshot {
    let columns = replay.schema().columns().len();
    let file = (0..columns)
        .map(|i| replay.storage.column(i).to_vec())
        .collect();
    let hot = replay
        .hot
        .iter()
        .map(|buffer| {
            let mut bytes = vec![0u8; replay.device.len(buffer)];
            replay.device.download(buffer, 0, &mut bytes).unwrap();
            bytes
        })
        .collect();
    (replay.ring(), replay.hot_len(), file, hot)
}

#[test]
fn refused_writes_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut replay = create(dir.path(), FakeDevice::new(), 10, 4, 8, Uniform::new(0));
    replay.extend(&Rows::new(0..7).columns()).unwrap();
    let before = snapshot(&replay);
    let good = Rows::new(7..12);
    let mut bad = Rows::new(7..12);
    bad.reward[3] = f32::NAN;
    assert!(matches!(
        replay.extend(&bad.columns()),
        Err(Error::NonFinite { row: 3, .. })
    ));
    let mut short = good.columns();
    short[2] = ColumnSlice::I64(&[7]);
    assert!(matches!(
        replay.extend(&short),
        Err(Error::RowMismatch { .. })
    ));
    let mut wrong_type = good.columns();
    wrong_type[3] = ColumnSlice::U32(&[1, 2, 3, 4, 5]);
    assert!(matches!(
        replay.extend(&wrong_type),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        replay.extend(&good.columns()[..5]),
        Err(Error::ColumnCount { .. })
    ));
    assert!(matches!(
        replay.push(&good.columns()),
        Err(Error::RowMismatch { .. })
    ));
    assert!(replay.extend(&[]).is_err());
    assert_eq!(snapshot(&replay), before);
    // Allowed on request; the NaN reaches both tiers.
    let mut replay = replay.with_non_finite(NonFinite::Allow);
    replay.extend(&bad.columns()).unwrap();
    check_hot_tier(&replay);
}

#[test]
fn extend_sample_gather_and_commit_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut replay = create(
        dir.path(),
        FakeDevice::new(),
        1000,
        128,
        64,
        Uniform::new(1),
    );
    let data = Rows::new(0..256);
    let columns = data.columns();
    let one = Rows::new(7..8);
    let mut batch = replay.new_batch().unwrap();
    let positions: Vec<usize> = (0..64).map(|i| i * 3).collect();
    replay.extend(&columns).unwrap();
    let (result, stats) = measure(|| -> Result<()> {
        for _ in 0..20 {
            replay.extend(&columns)?;
            replay.push(&one.columns())?;
            replay.sample(&mut batch)?;
            replay.gather(&positions, &mut batch)?;
            replay.sample_rows(&mut batch, 10)?;
            replay.commit()?;
        }
        Ok(())
    });
    result.unwrap();
    assert_eq!(stats.allocations, 0, "{stats:?}");
    let total = replay.total_counts();
    assert!(
        total.hot > 0 && total.cold > 0,
        "both tiers used: {total:?}"
    );
    assert_eq!(total.rows(), 20 * (64 + 64 + 10));
}

#[test]
fn bad_configurations_are_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("replay.rlmm");
    let device = FakeDevice::new();
    for (hot, batch) in [(0, 8), (11, 8), (4, 0)] {
        let config = TieredConfig::new(hot, batch);
        assert!(config.plan(&schema(), 10).is_err());
        let created = TieredReplay::create(
            &path,
            device.clone(),
            schema(),
            10,
            config,
            Uniform::new(0),
            None,
        );
        assert!(created.is_err(), "hot {hot}, batch {batch}");
        assert!(!path.exists());
    }
    let config = TieredConfig::new(4, 8);
    let tight = MemoryBudget::unlimited().with_gpu(100);
    let err = TieredReplay::create(
        &path,
        device.clone(),
        schema(),
        10,
        config,
        Uniform::new(0),
        Some(&tight),
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Core(rl_core::Error::OverBudget {
                location: Location::Gpu,
                ..
            })
        ),
        "{err}"
    );
    assert!(!path.exists());
    assert_eq!(device.allocated_bytes(), 0);
    // A file of 10 rows cannot be reopened with a hot tier of 11.
    let mut replay = TieredReplay::create(
        &path,
        device.clone(),
        schema(),
        10,
        config,
        Uniform::new(0),
        None,
    )
    .unwrap();
    replay.commit().unwrap();
    drop(replay);
    let open = TieredReplay::open(
        &path,
        device.clone(),
        TieredConfig::new(11, 8),
        Uniform::new(0),
        None,
    );
    assert!(open.is_err());
    let budget = TieredReplay::open(&path, device.clone(), config, Uniform::new(0), Some(&tight));
    assert!(budget.is_err());
    assert_eq!(device.allocated_bytes(), 0);
    // The file is left as it was: it opens fine.
    TieredReplay::open(&path, device, config, Uniform::new(0), None).unwrap();
}

#[test]
fn bad_samples_are_errors_and_leave_the_batch_empty() {
    let dir = tempfile::tempdir().unwrap();
    let device = FakeDevice::new();
    let mut replay = create(dir.path(), device.clone(), 10, 4, 8, Uniform::new(0));
    let mut batch = replay.new_batch().unwrap();
    assert!(matches!(replay.sample(&mut batch), Err(Error::Empty)));
    assert!(replay.gather(&[0], &mut batch).is_err(), "nothing stored");
    replay.extend(&Rows::new(0..6).columns()).unwrap();
    replay.gather(&[5, 0], &mut batch).unwrap();
    assert_eq!(batch.len(), 2);
    assert_eq!(replay.last_sample_counts(), TierCounts { hot: 1, cold: 1 });
    assert_eq!(replay.hot_fraction_last_sample(), 0.5);
    let mut ids = [0i64; 2];
    batch.download(&device, "id", &mut ids).unwrap();
    assert_eq!(ids, [5, 0]);
    for positions in [&[6usize][..], &[10], &[usize::MAX]] {
        assert!(
            replay.gather(positions, &mut batch).is_err(),
            "{positions:?}"
        );
        assert!(batch.is_empty());
    }
    let other = Schema::new([Column::scalar("x", DType::F32)]).unwrap();
    let mut foreign = DeviceBatch::new(&device, &other, 8).unwrap();
    assert!(matches!(
        replay.sample(&mut foreign),
        Err(Error::BatchSchema)
    ));
    let mut too_large = DeviceBatch::new(&device, &schema(), 9).unwrap();
    assert!(replay.sample(&mut too_large).is_err());
    replay.sample_rows(&mut too_large, 8).unwrap();
    assert_eq!(too_large.len(), 8);
    let mut small = DeviceBatch::new(&device, &schema(), 2).unwrap();
    assert!(matches!(
        replay.gather(&[0, 1, 2], &mut small),
        Err(Error::NotEnoughRows { .. })
    ));
    replay.sample_rows(&mut batch, 3).unwrap();
    assert_eq!(batch.len(), 3);
    assert!(replay.sample(&mut too_large).is_err());
    assert!(
        too_large.is_empty(),
        "a batch that could not be filled is empty"
    );
}

#[test]
fn a_device_error_mid_write_changes_nothing_stored_and_rows_come_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let device = FailingDevice::new();
    let mut replay = create(dir.path(), device.clone(), 20, 8, 16, Uniform::new(0));
    let mut host = reference(20, Uniform::new(0));
    let mut device_batch = replay.new_batch().unwrap();
    let mut host_batch = Batch::new(&schema(), 16).unwrap();
    let first = Rows::new(0..12);
    replay.extend(&first.columns()).unwrap();
    host.extend(&first.columns()).unwrap();
    let all: Vec<usize> = (0..12).collect();

    // Two columns reach the hot ring (overwriting the rows of ids 4..7 there), then
    // the device fails.
    device.uploads_left.store(2, Ordering::Relaxed);
    let second = Rows::new(12..15);
    assert!(replay.extend(&second.columns()).is_err());
    let (_, _, file, _) = snapshot(&replay);
    device.uploads_left.store(usize::MAX, Ordering::Relaxed);
    check_file(&replay, &host);
    assert_eq!(replay.hot_len(), 0);
    gather_both(&mut replay, &host, &all, &mut device_batch, &mut host_batch);
    assert_eq!(
        replay.last_sample_counts().hot,
        0,
        "every row from the file"
    );
    assert_eq!(snapshot(&replay).2, file);

    // Later writes fill the hot tier again; a refill restores all of it.
    replay.extend(&second.columns()).unwrap();
    host.extend(&second.columns()).unwrap();
    assert_eq!(replay.hot_len(), 3);
    check_hot_tier(&replay);
    let all: Vec<usize> = (0..15).collect();
    gather_both(&mut replay, &host, &all, &mut device_batch, &mut host_batch);
    assert_eq!(replay.last_sample_counts().hot, 3);
    replay.refill_hot().unwrap();
    assert_eq!(replay.hot_len(), 8);
    check_hot_tier(&replay);
    gather_both(&mut replay, &host, &all, &mut device_batch, &mut host_batch);
    assert_eq!(replay.last_sample_counts().hot, 8);

    // A failed refill leaves the hot tier empty, still correct.
    device.uploads_left.store(1, Ordering::Relaxed);
    assert!(replay.refill_hot().is_err());
    device.uploads_left.store(usize::MAX, Ordering::Relaxed);
    assert_eq!(replay.hot_len(), 0);
    gather_both(&mut replay, &host, &all, &mut device_batch, &mut host_batch);

    // A failed gather leaves the batch empty.
    device.gathers_left.store(3, Ordering::Relaxed);
    assert!(replay.sample(&mut device_batch).is_err());
    assert!(device_batch.is_empty());
    device.gathers_left.store(usize::MAX, Ordering::Relaxed);
    host.sample(&mut host_batch).unwrap(); // the sampler drew once on both sides
    sample_both(&mut replay, &mut host, &mut device_batch, &mut host_batch);
}
