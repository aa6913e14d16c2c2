//! `cargo xtask bench collect`: collector throughput and memory on CartPole.
//!
//! One JSON line per figure, each configuration in its own process (peak RSS is per
//! process):
//!
//! `{"bench":"collect","collector":"sync"|"async","envs":64,"workers":W,
//!   "policy":"constant","env_steps_per_s":X,"peak_rss_bytes":Y}`
//!
//! Collectors write every transition (`obs`, `action`, `reward`, `terminated`,
//! `truncated`, `next_obs`) into a 1M-row RAM replay buffer, as a training run would.
//! Rates are the median over rounds. `"policy":"mlp"` is the PPO CartPole policy
//! (4-64-64-2 ReLU actor and critic, sampling actions, recording log-probs and values) on
//! a one-thread pool. Then a 10-million-step synchronous run prints the
//! resident memory after every million steps, and a summary line with the spread of RSS
//! after the first million (`"run":"soak"`).

use std::time::Instant;

use anyhow::bail;
use rl_collect::{AsyncCollector, AsyncConfig, CollectorConfig, ConstantPolicy, SyncCollector};
use rl_core::{DType, ProcessMemory, TransitionSchema};
use rl_envs::CartPole;
use rl_storage::{ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};

mod common;

const ENVS: usize = 64;
const ROUNDS: usize = 7;
const REPLAY_ROWS: usize = 1_000_000;

fn main() -> anyhow::Result<()> {
    match common::args().as_slice() {
        [] => run_all(),
        [flag, collector, workers] if flag == "--config" => one_config(collector, workers.parse()?),
        [flag] if flag == "--mlp" => mlp(),
        [flag] if flag == "--soak" => soak(),
        other => bail!(
            "unknown arguments {other:?}: use no arguments, --soak, or --config sync|async WORKERS"
        ),
    }
}

fn run_all() -> anyhow::Result<()> {
    for (collector, workers) in [("sync", 1), ("async", 1), ("async", 2)] {
        let args = ["--config", collector, &workers.to_string()].map(String::from);
        let lines = common::run_children(&args, 3)?;
        let all: Vec<&serde_json::Value> = lines.iter().collect();
        if let Some(line) = common::median_line(&all, "env_steps_per_s") {
            println!("{line}");
        }
    }
    let mlp = common::run_children(&["--mlp".to_owned()], 3)?;
    let all: Vec<&serde_json::Value> = mlp.iter().collect();
    if let Some(line) = common::median_line(&all, "env_steps_per_s") {
        println!("{line}");
    }
    for line in common::run_children(&["--soak".to_owned()], 1)? {
        println!("{line}");
    }
    Ok(())
}

fn replay() -> anyhow::Result<ReplayBuffer> {
    let schema = TransitionSchema::new(DType::F32, &[4], DType::U32, &[])
        .with_next_obs()
        .build()?;
    Ok(ReplayBuffer::new(
        RamStorage::new(schema, REPLAY_ROWS, None)?,
        Uniform::new(0),
    ))
}

fn envs() -> Vec<CartPole> {
    (0..ENVS as u64).map(CartPole::new).collect()
}

fn one_config(collector: &str, workers: usize) -> anyhow::Result<()> {
    let mut replay = replay()?;
    let policy = ConstantPolicy::new(&[1u32]);
    let frames_per_batch = ENVS * 256;
    let mut rates = Vec::with_capacity(ROUNDS);
    match collector {
        "sync" => {
            let mut sync =
                SyncCollector::new(envs(), policy, CollectorConfig::new(frames_per_batch))?;
            sync.collect(&mut replay)?;
            for _ in 0..ROUNDS {
                let start = Instant::now();
                let mut frames = 0;
                for _ in 0..60 {
                    frames += sync.collect(&mut replay)?.frames;
                }
                rates.push(frames as f64 / start.elapsed().as_secs_f64());
            }
        }
        "async" => {
            let chunk = 256 * ENVS / workers;
            let config = AsyncConfig::new(workers, 256, CollectorConfig::new(chunk));
            let mut collector = AsyncCollector::new(envs(), policy, config)?;
            collector.collect(&mut replay)?;
            for _ in 0..ROUNDS {
                let start = Instant::now();
                let mut frames = 0;
                for _ in 0..60 {
                    frames += collector.collect(&mut replay)?.frames;
                }
                rates.push(frames as f64 / start.elapsed().as_secs_f64());
            }
        }
        other => bail!("unknown collector `{other}`: use sync or async"),
    }
    let line = serde_json::json!({
        "bench": "collect",
        "collector": collector,
        "envs": ENVS,
        "workers": workers,
        "policy": "constant",
        "env_steps_per_s": common::median(&mut rates).round(),
        "peak_rss_bytes": ProcessMemory::read()?.peak_rss_bytes,
    });
    println!("{line}");
    Ok(())
}

/// Ten million steps of the synchronous collector; RSS after every million.
fn soak() -> anyhow::Result<()> {
    const MILLION: usize = 1_000_000;
    let mut replay = replay()?;
    let config = CollectorConfig::new(ENVS * (MILLION / ENVS));
    let mut sync = SyncCollector::new(envs(), ConstantPolicy::new(&[1u32]), config)?;
    let mut after_first = Vec::new();
    for million in 1..=10 {
        let report = sync.collect(&mut replay)?;
        let memory = ProcessMemory::read()?;
        let line = serde_json::json!({
            "bench": "collect",
            "collector": "sync",
            "run": "soak",
            "env_steps": report.total_frames,
            "rss_bytes": memory.rss_bytes,
            "rss_anon_bytes": memory.rss_anon_bytes,
        });
        println!("{line}");
        if million > 1 {
            after_first.push(memory.rss_bytes);
        }
    }
    let spread = after_first.iter().max().unwrap_or(&0) - after_first.iter().min().unwrap_or(&0);
    let line = serde_json::json!({
        "bench": "collect",
        "collector": "sync",
        "run": "soak",
        "env_steps": sync.frames(),
        "rss_spread_after_first_million_bytes": spread,
    });
    println!("{line}");
    Ok(())
}

/// The PPO CartPole policy (4-64-64-2 actor and critic on rl-nn) driving the synchronous
/// collector, on one thread.
fn mlp() -> anyhow::Result<()> {
    let mut replay = replay()?;
    let policy =
        rl_algos::policy::CategoricalPolicy::new(4, 2, rl_algos::policy::PolicyConfig::new(), 0)?;
    let mut sync = SyncCollector::new(envs(), policy, CollectorConfig::new(ENVS * 64))?;
    sync.collect(&mut replay)?;
    let mut rates = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let mut frames = 0;
        for _ in 0..10 {
            frames += sync.collect(&mut replay)?.frames;
        }
        rates.push(frames as f64 / start.elapsed().as_secs_f64());
    }
    let line = serde_json::json!({
        "bench": "collect",
        "collector": "sync",
        "envs": ENVS,
        "workers": 1,
        "policy": "mlp",
        "env_steps_per_s": common::median(&mut rates).round(),
        "peak_rss_bytes": ProcessMemory::read()?.peak_rss_bytes,
    });
    println!("{line}");
    Ok(())
}
