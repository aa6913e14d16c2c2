//! With the CPU as policy and storing device, collectors never touch CUDA, even when the
//! `cuda` feature is compiled in (`cargo xtask ci` tests with `--all-features`).

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use rl_collect::{AsyncCollector, AsyncConfig, CollectorConfig, ConstantPolicy, SyncCollector};
use rl_core::{Column, DType, Schema};
use rl_envs::CartPole;
use rl_storage::{ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};

fn replay() -> ReplayBuffer {
    let schema = Schema::new([
        Column::new("obs", DType::F32, &[4]),
        Column::scalar("action", DType::U32),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
        Column::new("next_obs", DType::F32, &[4]),
    ])
    .unwrap();
    ReplayBuffer::new(
        RamStorage::new(schema, 50_000, None).unwrap(),
        Uniform::new(0),
    )
}

#[test]
fn cpu_collectors_never_touch_cuda() {
    println!("cuda feature compiled in: {}", cfg!(feature = "cuda"));
    // 128 environments in the caller's thread and 128 over two workers: 256 in total.
    let sync_envs: Vec<CartPole> = (0..128).map(CartPole::new).collect();
    let mut sync = SyncCollector::new(
        sync_envs,
        ConstantPolicy::new(&[1u32]),
        CollectorConfig::new(128 * 16),
    )
    .unwrap();
    let async_envs: Vec<CartPole> = (128..256).map(CartPole::new).collect();
    let config = AsyncConfig::new(2, 16, CollectorConfig::new(64 * 16));
    let mut collector =
        AsyncCollector::new(async_envs, ConstantPolicy::new(&[0u32]), config).unwrap();
    let mut replay = replay();
    for _ in 0..10 {
        sync.collect(&mut replay).unwrap();
        collector.collect(&mut replay).unwrap();
    }
    drop(collector);
    assert!(replay.len() >= 10 * (128 * 16 + 64 * 16));
    assert_eq!(
        rl_storage::device::cuda_initializations(),
        0,
        "a CPU-only run initialised CUDA"
    );
    assert!(
        !rl_storage::device::libcuda_loaded(),
        "a CPU-only run loaded the CUDA driver library"
    );
}
