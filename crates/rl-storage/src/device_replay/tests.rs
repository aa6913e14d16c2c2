use std::sync::atomic::Ordering;

use proptest::prelude::*;
use rl_core::{Column, DType, Device};
use rl_testkit::measure;

use super::*;
use crate::batch::Batch;
use crate::device::FakeDevice;
use crate::device::test_support::FailingDevice;
use crate::prioritized::{Prioritized, PrioritizedConfig};
use crate::ram::RamStorage;
use crate::replay::ReplayBuffer;
use crate::sampler::SampleContext;
use crate::slice::SliceSampler;

fn schema() -> Schema {
    Schema::new([
        Column::new("obs", DType::F32, &[3]),
        Column::scalar("action", DType::U32),
        Column::scalar("reward", DType::F32),
        Column::new("step", DType::I64, &[2]),
        Column::new("pixels", DType::U8, &[5]),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
    ])
    .unwrap()
}

/// Rows whose every column encodes the row id, so any misplaced byte shows.
struct Rows {
    obs: Vec<f32>,
    action: Vec<u32>,
    reward: Vec<f32>,
    step: Vec<i64>,
    pixels: Vec<u8>,
    terminated: Vec<Flag>,
    truncated: Vec<Flag>,
}

impl Rows {
    fn new(ids: std::ops::Range<u32>) -> Self {
        let ids: Vec<u32> = ids.collect();
        Self {
            obs: ids
                .iter()
                .flat_map(|&i| [i as f32, -(i as f32), 0.5])
                .collect(),
            action: ids.clone(),
            reward: ids.iter().map(|&i| i as f32 * 0.25).collect(),
            step: ids.iter().flat_map(|&i| [i64::from(i), -7]).collect(),
            pixels: ids
                .iter()
                .flat_map(|&i| [i as u8, (i >> 8) as u8, 1, 2, 3])
                .collect(),
            terminated: ids.iter().map(|&i| Flag::new(i % 7 == 6)).collect(),
            truncated: ids.iter().map(|&i| Flag::new(i % 11 == 10)).collect(),
        }
    }

    fn columns(&self) -> [ColumnSlice<'_>; 7] {
        [
            (&self.obs).into(),
            (&self.action).into(),
            (&self.reward).into(),
            (&self.step).into(),
            (&self.pixels).into(),
            (&self.terminated).into(),
            (&self.truncated).into(),
        ]
    }
}

fn options(gather_rows: usize) -> DeviceReplayOptions {
    DeviceReplayOptions {
        gather_rows,
        ..DeviceReplayOptions::default()
    }
}

fn device_replay<P: Sampler>(
    capacity: usize,
    sampler: P,
    gather_rows: usize,
) -> DeviceReplay<FakeDevice, P> {
    DeviceReplay::new(
        FakeDevice::new(),
        schema(),
        capacity,
        sampler,
        options(gather_rows),
        None,
    )
    .unwrap()
}

fn host_replay<P: Sampler>(capacity: usize, sampler: P) -> ReplayBuffer<RamStorage, P> {
    ReplayBuffer::new(RamStorage::new(schema(), capacity, None).unwrap(), sampler)
}

/// Every byte of every column of the device buffer equals the host buffer's, at every
/// position (stored or not: both start zeroed and write the same positions).
fn assert_same_columns<P: Sampler, Q: Sampler>(
    device: &DeviceReplay<FakeDevice, P>,
    host: &ReplayBuffer<RamStorage, Q>,
) {
    fn same<T: Element, P: Sampler, Q: Sampler>(
        device: &DeviceReplay<FakeDevice, P>,
        host: &ReplayBuffer<RamStorage, Q>,
        name: &str,
    ) {
        let expected = host.column::<T>(name).unwrap();
        let mut out = vec![T::default(); expected.len()];
        device.download_column(name, &mut out).unwrap();
        assert_eq!(out, expected, "column {name}");
    }
    same::<f32, P, Q>(device, host, "obs");
    same::<u32, P, Q>(device, host, "action");
    same::<f32, P, Q>(device, host, "reward");
    same::<i64, P, Q>(device, host, "step");
    same::<u8, P, Q>(device, host, "pixels");
    same::<Flag, P, Q>(device, host, "terminated");
    same::<Flag, P, Q>(device, host, "truncated");
    assert_eq!(device.ring(), host.ring());
    assert!(device.positions().eq(host.positions()));
}

/// The device batch holds exactly the host batch's rows, positions and weights.
fn assert_same_batch(device: &FakeDevice, batch: &DeviceBatch<FakeDevice>, host: &Batch) {
    fn same<T: Element>(
        device: &FakeDevice,
        batch: &DeviceBatch<FakeDevice>,
        host: &Batch,
        name: &str,
    ) {
        let expected = host.column::<T>(name).unwrap();
        let mut out = vec![T::default(); expected.len()];
        batch.download(device, name, &mut out).unwrap();
        assert_eq!(out, expected, "column {name}");
    }
    assert_eq!(batch.len(), host.len());
    assert_eq!(batch.positions(), host.positions());
    assert_eq!(batch.weights(), host.weights());
    same::<f32>(device, batch, host, "obs");
    same::<u32>(device, batch, host, "action");
    same::<f32>(device, batch, host, "reward");
    same::<i64>(device, batch, host, "step");
    same::<u8>(device, batch, host, "pixels");
    same::<Flag>(device, batch, host, "terminated");
    same::<Flag>(device, batch, host, "truncated");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Fed the same writes (wraps and writes longer than the ring included), the device
    /// buffer stores exactly what the host buffer stores, at the same positions, with
    /// the same ring; the same sampler seed draws the same positions, and the rows
    /// gathered on the device equal the host's gather of those positions.
    #[test]
    fn behaves_like_the_host_replay_buffer(
        capacity in 1usize..40,
        writes in proptest::collection::vec(0u32..90, 1..12),
        batch_rows in 1usize..50,
        gather_rows in 1usize..20,
        seed in 0u64..1000,
    ) {
        let mut device = device_replay(capacity, Uniform::new(seed), gather_rows);
        let mut host = host_replay(capacity, Uniform::new(seed));
        let fake = device.device().clone();
        let mut device_batch = DeviceBatch::new(&fake, &schema(), batch_rows).unwrap();
        let (mut host_batch, mut gathered) = (
            Batch::new(&schema(), batch_rows).unwrap(),
            Batch::new(&schema(), batch_rows).unwrap(),
        );
        let mut next = 0u32;
        for rows in writes {
            let data = Rows::new(next..next + rows);
            next += rows;
            prop_assert_eq!(device.extend(&data.columns()).unwrap(), rows as usize);
            host.extend(&data.columns()).unwrap();
            assert_same_columns(&device, &host);
            if host.is_empty() {
                prop_assert!(matches!(device.sample(&mut device_batch), Err(Error::Empty)));
                continue;
            }
            device.sample(&mut device_batch).unwrap();
            host.sample(&mut host_batch).unwrap();
            assert_same_batch(&fake, &device_batch, &host_batch);
            host.gather(device_batch.positions(), &mut gathered).unwrap();
            assert_same_batch(&fake, &device_batch, &gathered);
        }
    }

    /// Episode-aware sampling sees the same flags through the host copies as the host
    /// buffer sees in its storage: a slice sampler draws the same windows.
    #[test]
    fn slice_sampling_matches_the_host_buffer(
        capacity in 4usize..40,
        writes in proptest::collection::vec(1u32..60, 1..8),
        seed in 0u64..1000,
    ) {
        let slice = || SliceSampler::new(2, seed).unwrap();
        let mut device = device_replay(capacity, slice(), 3);
        let mut host = host_replay(capacity, slice());
        let fake = device.device().clone();
        let mut device_batch = DeviceBatch::new(&fake, &schema(), 8).unwrap();
        let mut host_batch = Batch::new(&schema(), 8).unwrap();
        let mut next = 0u32;
        for rows in writes {
            let data = Rows::new(next..next + rows);
            next += rows;
            device.extend(&data.columns()).unwrap();
            host.extend(&data.columns()).unwrap();
            match (device.sample(&mut device_batch), host.sample(&mut host_batch)) {
                (Ok(()), Ok(())) => assert_same_batch(&fake, &device_batch, &host_batch),
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => prop_assert!(false, "device {:?}, host {:?}", a, b),
            }
        }
    }
}

#[test]
fn weighted_samples_carry_the_host_weights() {
    let sampler = || Prioritized::new(30, PrioritizedConfig::default(), 11).unwrap();
    let mut device = device_replay(30, sampler(), 7);
    let mut host = host_replay(30, sampler());
    let data = Rows::new(0..45);
    device.extend(&data.columns()).unwrap();
    host.extend(&data.columns()).unwrap();
    let stored: Vec<usize> = host.positions().collect();
    let priorities: Vec<f32> = (0..stored.len()).map(|i| 0.5 + i as f32).collect();
    for sampler in [device.sampler_mut(), host.sampler_mut()] {
        sampler.update_priorities(&stored, &priorities).unwrap();
    }
    let fake = device.device().clone();
    let mut device_batch = DeviceBatch::new(&fake, &schema(), 25).unwrap();
    let mut host_batch = Batch::new(&schema(), 25).unwrap();
    device.sample(&mut device_batch).unwrap();
    host.sample(&mut host_batch).unwrap();
    assert!(host_batch.weights().iter().any(|&w| w != 1.0));
    assert_same_batch(&fake, &device_batch, &host_batch);
    assert!(device.memory_plan().total(Location::Ram) > device.plan.total(Location::Ram));
}

#[test]
fn refused_writes_change_nothing() {
    let mut device = device_replay(8, Uniform::new(0), 4);
    let mut host = host_replay(8, Uniform::new(0));
    let first = Rows::new(0..6);
    device.extend(&first.columns()).unwrap();
    host.extend(&first.columns()).unwrap();
    let good = Rows::new(6..9);
    let mut bad = Rows::new(6..9);
    bad.reward[2] = f32::INFINITY;
    let err = device.extend(&bad.columns()).unwrap_err();
    assert!(
        matches!(&err, Error::NonFinite { column, row: 2, .. } if column == "reward"),
        "{err}"
    );
    let mut short = good.columns();
    short[4] = ColumnSlice::U8(&[1, 2, 3]);
    assert!(matches!(
        device.extend(&short),
        Err(Error::RowMismatch { .. })
    ));
    let mut wrong_type = good.columns();
    wrong_type[1] = ColumnSlice::F32(&[6.0, 7.0, 8.0]);
    assert!(matches!(
        device.extend(&wrong_type),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        device.extend(&good.columns()[..6]),
        Err(Error::ColumnCount { .. })
    ));
    assert!(matches!(
        device.push(&good.columns()),
        Err(Error::RowMismatch { .. })
    ));
    // Nothing reached the device or the host flag copies: still the host's twin.
    assert_same_columns(&device, &host);
    let flags = |h: &Option<HostFlags>| h.as_ref().unwrap().flags.clone();
    assert_eq!(
        flags(&device.terminated),
        host.column::<Flag>("terminated").unwrap()
    );
    assert_eq!(
        flags(&device.truncated),
        host.column::<Flag>("truncated").unwrap()
    );
    // Allowed on request.
    let mut device = DeviceReplay::new(
        FakeDevice::new(),
        schema(),
        8,
        Uniform::new(0),
        DeviceReplayOptions {
            non_finite: NonFinite::Allow,
            ..options(4)
        },
        None,
    )
    .unwrap();
    device.extend(&bad.columns()).unwrap();
    let mut reward = [0.0f32; 8];
    device.download_column("reward", &mut reward).unwrap();
    assert_eq!(reward[2], f32::INFINITY);
}

#[test]
fn sampling_errors_leave_an_empty_batch() {
    let mut device = device_replay(4, Uniform::new(0), 4);
    let fake = device.device().clone();
    let mut batch = DeviceBatch::new(&fake, &schema(), 3).unwrap();
    assert!(matches!(device.sample(&mut batch), Err(Error::Empty)));
    device.extend(&Rows::new(0..2).columns()).unwrap();
    device.sample(&mut batch).unwrap();
    assert_eq!(batch.len(), 3);
    let other = Schema::new([Column::scalar("x", DType::F32)]).unwrap();
    let mut foreign = DeviceBatch::new(&fake, &other, 2).unwrap();
    assert!(matches!(
        device.sample(&mut foreign),
        Err(Error::BatchSchema)
    ));
    assert!(
        device.gather(&[2], &mut batch).is_err(),
        "position 2 holds no row"
    );
    assert!(batch.is_empty());
    assert!(matches!(
        device.gather(&[0, 1, 0, 1], &mut batch),
        Err(Error::NotEnoughRows { .. })
    ));
    device.gather(&[1, 0], &mut batch).unwrap();
    let mut actions = [0u32; 2];
    batch.download(&fake, "action", &mut actions).unwrap();
    assert_eq!(actions, [1, 0]);
    let mut wrong = [0u32; 4];
    assert!(device.download_column("reward", &mut wrong).is_err());
    assert!(device.download_column("action", &mut wrong[..3]).is_err());
    assert!(device.download_column("nope", &mut wrong).is_err());
}

/// A sampler that draws a position outside the ring.
#[derive(Debug)]
struct Broken;

impl Sampler for Broken {
    fn sample(
        &mut self,
        _: &SampleContext<'_>,
        rows: usize,
        indices: &mut [usize],
        weights: &mut [f32],
    ) -> Result<usize> {
        indices[..rows].fill(3);
        weights[..rows].fill(1.0);
        Ok(rows)
    }
}

#[test]
fn positions_outside_the_ring_never_reach_the_device() {
    let mut device = device_replay(4, Broken, 4);
    device.extend(&Rows::new(0..2).columns()).unwrap();
    let fake = device.device().clone();
    let mut batch = DeviceBatch::new(&fake, &schema(), 2).unwrap();
    let err = device.sample(&mut batch).unwrap_err();
    assert!(err.to_string().contains("position 3"), "{err}");
    assert!(batch.is_empty());
}

#[test]
fn over_budget_is_refused_before_allocating_with_the_plan_in_the_error() {
    let fake = FakeDevice::new();
    let options = options(64);
    let plan = DeviceReplay::<FakeDevice>::plan(&schema(), 1000, &options).unwrap();
    let gpu = plan.total(Location::Gpu);
    assert_eq!(gpu, (1000 * schema().row_bytes() + 64 * 8) as u64);
    assert_eq!(plan.total(Location::Ram), 64 * 8 + 2 * 1000);
    let budget = MemoryBudget::unlimited().with_gpu(gpu - 1);
    let err = DeviceReplay::new(
        fake.clone(),
        schema(),
        1000,
        Uniform::new(0),
        options,
        Some(&budget),
    )
    .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Core(rl_core::Error::OverBudget {
                location: Location::Gpu,
                ..
            })
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains("device_replay/obs"), "{message}");
    assert_eq!(fake.allocated_bytes(), 0, "nothing allocated");
    // The host copies of the flags count against the RAM budget.
    let ram = MemoryBudget::ram(plan.total(Location::Ram) - 1);
    let err = DeviceReplay::new(
        fake.clone(),
        schema(),
        1000,
        Uniform::new(0),
        options,
        Some(&ram),
    )
    .unwrap_err();
    assert!(err.to_string().contains("host_copy"), "{err}");
    // Exactly at the budget it fits.
    let exact = MemoryBudget::ram(plan.total(Location::Ram)).with_gpu(gpu);
    DeviceReplay::new(fake, schema(), 1000, Uniform::new(0), options, Some(&exact)).unwrap();
}

#[test]
fn bad_configurations_are_errors() {
    let schema = schema();
    assert!(DeviceReplay::<FakeDevice>::plan(&schema, 0, &options(1)).is_err());
    assert!(DeviceReplay::<FakeDevice>::plan(&schema, 10, &options(0)).is_err());
    assert!(DeviceReplay::<FakeDevice>::plan(&schema, usize::MAX, &options(1)).is_err());
    let one = Schema::new([Column::scalar("x", DType::U8)]).unwrap();
    assert!(
        DeviceReplay::<FakeDevice>::plan(&one, (1 << 32) + 1, &options(1)).is_err(),
        "positions are u32: position 2^32 cannot be gathered"
    );
    assert!(DeviceReplay::<FakeDevice>::plan(&one, 1 << 32, &options(1)).is_ok());
    let wide = Schema::new([Column::new("x", DType::F32, &[1 << 40])]).unwrap();
    let err = DeviceReplay::<FakeDevice>::plan(&wide, 1 << 30, &options(1)).unwrap_err();
    assert!(err.to_string().contains("overflows"), "{err}");
    assert!(DeviceReplay::<FakeDevice>::plan(&one, 10, &options(usize::MAX)).is_err());
}

#[test]
fn device_bytes_equal_the_planned_gpu_bytes() {
    let fake = FakeDevice::new();
    let options = options(100);
    let buffer =
        DeviceReplay::new(fake.clone(), schema(), 777, Uniform::new(0), options, None).unwrap();
    let plan = DeviceReplay::<FakeDevice>::plan(&schema(), 777, &options).unwrap();
    assert_eq!(fake.allocated_bytes(), plan.total(Location::Gpu));
    assert_eq!(buffer.memory_plan(), plan, "Uniform holds nothing");
    assert_eq!(buffer.device().device(), Device::Cuda(0));
    assert_eq!(buffer.capacity(), 777);
    assert!(buffer.is_empty());
    let batch = DeviceBatch::new(&fake, &schema(), 32).unwrap();
    let batch_plan = DeviceBatch::<FakeDevice>::plan(&schema(), 32).unwrap();
    assert_eq!(
        fake.allocated_bytes(),
        plan.total(Location::Gpu) + batch_plan.total(Location::Gpu)
    );
    drop((buffer, batch));
    assert_eq!(fake.allocated_bytes(), 0);
    // Without flag columns there are no host copies.
    let plain = Schema::new([Column::scalar("x", DType::F32)]).unwrap();
    let plan = DeviceReplay::<FakeDevice>::plan(&plain, 10, &options).unwrap();
    assert_eq!(plan.total(Location::Ram), 100 * 8);
}

#[test]
fn writing_and_sampling_allocate_nothing() {
    let mut buffer = device_replay(1000, Uniform::new(1), 16);
    let fake = buffer.device().clone();
    let data = Rows::new(0..256);
    let long = Rows::new(0..1500);
    let one = Rows::new(7..8);
    let (columns, long, one) = (data.columns(), long.columns(), one.columns());
    let mut batch = DeviceBatch::new(&fake, &schema(), 64).unwrap();
    buffer.extend(&columns).unwrap();
    let positions: Vec<usize> = (0..64).map(|i| i * 3).collect();
    let (result, stats) = measure(|| -> Result<()> {
        for _ in 0..20 {
            buffer.extend(&columns)?;
            buffer.extend(&long)?;
            buffer.push(&one)?;
            buffer.sample(&mut batch)?;
            buffer.sample_rows(&mut batch, 40)?;
            buffer.gather(&positions, &mut batch)?;
        }
        Ok(())
    });
    result.unwrap();
    assert_eq!(stats.allocations, 0, "{stats:?}");
}

#[test]
fn a_device_failure_mid_write_drops_the_rows_it_may_have_overwritten() {
    let flaky = FailingDevice::new();
    let mut buffer =
        DeviceReplay::new(flaky, schema(), 10, Uniform::new(0), options(4), None).unwrap();
    buffer.extend(&Rows::new(0..10).columns()).unwrap();
    let before = buffer.ring();
    // The next write of 3 rows overwrites positions 0..3 (rows 0, 1, 2); fail after
    // two columns were uploaded.
    buffer.device.uploads_left.store(2, Ordering::Relaxed);
    assert!(buffer.extend(&Rows::new(10..13).columns()).is_err());
    let ring = buffer.ring();
    assert_eq!((ring.cursor, ring.len), (0, 7), "{ring:?}");
    assert_eq!(
        (ring.written, ring.episodes),
        (before.written, before.episodes)
    );
    assert!(buffer.positions().eq(3..10));
    // Every sampled row is an intact old row.
    let mut batch = DeviceBatch::new(&buffer.device, &schema(), 200).unwrap();
    buffer.sample(&mut batch).unwrap();
    let mut actions = [0u32; 200];
    batch
        .download(&buffer.device, "action", &mut actions)
        .unwrap();
    assert!(actions.iter().all(|&a| (3..10).contains(&a)), "{actions:?}");
    // The buffer keeps working once the device does.
    buffer
        .device
        .uploads_left
        .store(usize::MAX, Ordering::Relaxed);
    buffer.extend(&Rows::new(10..13).columns()).unwrap();
    assert_eq!(buffer.len(), 10);
    let mut action = [0u32; 10];
    buffer.download_column("action", &mut action).unwrap();
    assert_eq!(action, [10, 11, 12, 3, 4, 5, 6, 7, 8, 9]);
}
