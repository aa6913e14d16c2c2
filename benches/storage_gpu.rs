//! `cargo xtask bench storage-gpu`: transfers and device gathers on a CUDA GPU.
//!
//! Without a CUDA driver it prints one line saying it skipped, and succeeds. With one:
//!
//! - `{"bench":"storage-gpu","op":"h2d","memory":"pinned"|"pageable","gb_per_s":X}`: a
//!   plain 64 MiB host-to-device copy;
//! - `{"bench":"storage-gpu","op":"to_device","backend":"memmap","obs_dim":D,...,
//!   "rows_per_s":X,"gb_per_s":Y}`: uniform batches of 256 sampled from a memmap replay
//!   buffer and moved to the GPU through a reused pinned staging buffer;
//! - `{"bench":"storage-gpu","op":"sample","backend":"cuda"|"tiered",...,"rows_per_s":X}`:
//!   batches gathered on the device from CUDA storage, and from tiered storage whose
//!   newest 10% of rows are on the GPU (the rest in a memmap file).
//!
//! Same shapes as the storage bench: D = 4 with 1M rows, D = 1024 with 200k rows.

use std::time::Instant;

use rl_core::{DType, Flag, Schema, TransitionSchema};
use rl_storage::{
    Batch, ColumnSlice,
    device::{
        CudaDevice, DeviceBackend, DeviceReplay, DeviceReplayOptions, TieredConfig, TieredReplay,
        ToDevice,
    },
    memmap::{MemmapOptions, MemmapStorage},
    replay::ReplayBuffer,
    sampler::Uniform,
};

mod common;

const BATCH: usize = 256;
const CHUNK: usize = 1024;
const CONFIGS: [(usize, usize); 2] = [(4, 1_000_000), (1024, 200_000)];

fn main() -> anyhow::Result<()> {
    let device = match CudaDevice::open(0) {
        Ok(device) => device,
        Err(error) => {
            let line = serde_json::json!({"bench": "storage-gpu", "skipped": error.to_string()});
            println!("{line}");
            return Ok(());
        }
    };
    device.load_kernels()?;
    host_to_device(&device)?;
    for (dim, capacity) in CONFIGS {
        to_device(&device, dim, capacity)?;
        device_sample(&device, dim, capacity)?;
        tiered_sample(&device, dim, capacity)?;
    }
    Ok(())
}

fn schema(dim: usize) -> anyhow::Result<Schema> {
    Ok(TransitionSchema::new(DType::F32, &[dim], DType::U32, &[])
        .with_next_obs()
        .build()?)
}

/// Chunk data reused for every write.
struct Chunk {
    obs: Vec<f32>,
    action: Vec<u32>,
    reward: Vec<f32>,
    flags: Vec<Flag>,
}

impl Chunk {
    fn new(dim: usize) -> Self {
        Self {
            obs: (0..CHUNK * dim).map(|i| (i % 97) as f32).collect(),
            action: (0..CHUNK as u32).collect(),
            reward: vec![1.0; CHUNK],
            flags: (0..CHUNK).map(|i| Flag::new(i % 300 == 299)).collect(),
        }
    }

    fn columns(&self) -> [ColumnSlice<'_>; 6] {
        [
            (&self.obs).into(),
            (&self.action).into(),
            (&self.reward).into(),
            (&self.flags).into(),
            (&self.flags).into(),
            (&self.obs).into(),
        ]
    }
}

fn print(line: serde_json::Value) {
    println!("{line}");
}

/// A plain 64 MiB copy from pageable and from pinned memory.
fn host_to_device(device: &CudaDevice) -> anyhow::Result<()> {
    const BYTES: usize = 64 << 20;
    let mut target = device.alloc(BYTES)?;
    let pageable = vec![1u8; BYTES];
    let mut pinned = device.alloc_staging(BYTES)?;
    device.staging_mut(&mut pinned)?.fill(1);
    for memory in ["pageable", "pinned"] {
        let mut rates = Vec::new();
        for _ in 0..10 {
            let start = Instant::now();
            if memory == "pinned" {
                device.upload_staging(&pinned, BYTES, &mut target, 0)?;
            } else {
                device.upload(&pageable, &mut target, 0)?;
            }
            device.synchronize()?;
            rates.push(BYTES as f64 / start.elapsed().as_secs_f64() / 1e9);
        }
        print(serde_json::json!({
            "bench": "storage-gpu", "op": "h2d", "memory": memory,
            "gb_per_s": (common::median(&mut rates) * 100.0).round() / 100.0,
        }));
    }
    Ok(())
}

/// Memmap storage sampled on the host, batches moved to the GPU through pinned staging.
fn to_device(device: &CudaDevice, dim: usize, capacity: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let storage = MemmapStorage::create(
        dir.path().join("replay.rl"),
        schema(dim)?,
        capacity,
        MemmapOptions::default(),
    )?;
    let mut replay = ReplayBuffer::new(storage, Uniform::new(0));
    let chunk = Chunk::new(dim);
    for _ in 0..capacity.div_ceil(CHUNK) {
        replay.extend(&chunk.columns())?;
    }
    let mut batch = Batch::new(&schema(dim)?, BATCH)?;
    let mut transfer = ToDevice::new(device.clone(), &schema(dim)?, BATCH, None)?;
    let rounds = if dim > 64 { 400 } else { 4000 };
    let start = Instant::now();
    for _ in 0..rounds {
        replay.sample(&mut batch)?;
        transfer.to_device(&batch)?;
    }
    device.synchronize()?;
    let seconds = start.elapsed().as_secs_f64();
    let rows = (rounds * BATCH) as f64;
    print(serde_json::json!({
        "bench": "storage-gpu", "op": "to_device", "backend": "memmap", "obs_dim": dim,
        "capacity": capacity, "batch": BATCH, "rows_per_s": (rows / seconds).round(),
        "gb_per_s": ((rows * schema(dim)?.row_bytes() as f64 / seconds / 1e9) * 100.0).round() / 100.0,
    }));
    Ok(())
}

/// Columns on the GPU, batches gathered on the GPU.
fn device_sample(device: &CudaDevice, dim: usize, capacity: usize) -> anyhow::Result<()> {
    let mut replay = DeviceReplay::new(
        device.clone(),
        schema(dim)?,
        capacity,
        Uniform::new(1),
        DeviceReplayOptions::default(),
        None,
    )?;
    let chunk = Chunk::new(dim);
    for _ in 0..capacity.div_ceil(CHUNK) {
        replay.extend(&chunk.columns())?;
    }
    let mut batch = rl_storage::device::DeviceBatch::new(device, &schema(dim)?, BATCH)?;
    let rounds = 4000;
    let start = Instant::now();
    for _ in 0..rounds {
        replay.sample(&mut batch)?;
    }
    device.synchronize()?;
    print(serde_json::json!({
        "bench": "storage-gpu", "op": "sample", "backend": "cuda", "obs_dim": dim,
        "capacity": capacity, "batch": BATCH,
        "rows_per_s": ((rounds * BATCH) as f64 / start.elapsed().as_secs_f64()).round(),
    }));
    Ok(())
}

/// Every row in a memmap file, the newest 10% also on the GPU.
fn tiered_sample(device: &CudaDevice, dim: usize, capacity: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let config = TieredConfig::new(capacity / 10, BATCH);
    let mut replay = TieredReplay::create(
        dir.path().join("tiered.rl"),
        device.clone(),
        schema(dim)?,
        capacity,
        config,
        Uniform::new(2),
        None,
    )?;
    let chunk = Chunk::new(dim);
    for _ in 0..capacity.div_ceil(CHUNK) {
        replay.extend(&chunk.columns())?;
    }
    let mut batch = replay.new_batch()?;
    let rounds = if dim > 64 { 400 } else { 4000 };
    let start = Instant::now();
    for _ in 0..rounds {
        replay.sample(&mut batch)?;
    }
    device.synchronize()?;
    print(serde_json::json!({
        "bench": "storage-gpu", "op": "sample", "backend": "tiered", "hot_fraction": 0.1,
        "obs_dim": dim, "capacity": capacity, "batch": BATCH,
        "rows_per_s": ((rounds * BATCH) as f64 / start.elapsed().as_secs_f64()).round(),
        "hot_share_sampled": replay.total_counts().hot_fraction(),
    }));
    Ok(())
}
