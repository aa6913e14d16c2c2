//! Collecting without learning: environments, a collector, a replay buffer, samples.
//!
//! ```text
//! cargo run --release --example collect_replay -- --n-envs 16 --steps 100000
//! ```
//!
//! The second step of the curriculum (after `reference_envs`, before the trainers): 16
//! CartPole environments stepped by a `SyncCollector` with uniformly random actions,
//! every transition written into a RAM `ReplayBuffer` whose columns come from the spaces
//! (`TransitionSchema`, with `next_obs` holding the final observation when an episode
//! ends), then batches sampled into one reused `Batch` and read through its typed
//! accessors. Prints the memory plan, what was collected and the first sampled rows.

use std::num::NonZeroUsize;

use clap::Parser;
use rl::collect::{CollectorConfig, RandomPolicy, SyncCollector};
use rl::core::{Env, TransitionSchema};
use rl::envs::CartPole;
use rl::storage::{Batch, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};

/// Environments, a collector with random actions and a replay buffer sampled through
/// typed accessors: the curriculum step before the trainers (no learning).
#[derive(Debug, Parser)]
struct Args {
    /// Seed of the environments, the actions and the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Environments stepped together.
    #[arg(long, default_value_t = NonZeroUsize::new(16).expect("16 > 0"))]
    n_envs: NonZeroUsize,
    /// Env steps to collect (rounded up to whole collector steps).
    #[arg(long, default_value_t = 100_000)]
    steps: u64,
    /// Rows per sampled batch.
    #[arg(long, default_value_t = NonZeroUsize::new(256).expect("256 > 0"))]
    batch: NonZeroUsize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let n = args.n_envs.get();
    let envs: Vec<CartPole> = (0..n as u64)
        .map(|i| CartPole::new(args.seed * 1000 + i))
        .collect();
    let schema = TransitionSchema::for_spaces(envs[0].observation_space(), envs[0].action_space())
        .with_next_obs()
        .build()?;
    let policy = RandomPolicy::new(envs[0].action_space(), args.seed)?;
    let config = CollectorConfig {
        seed: args.seed,
        ..CollectorConfig::new(n * 64)
    };
    let mut collector = SyncCollector::new(envs, policy, config)?;
    let capacity = args.steps as usize;
    println!("replay plan\n{}", RamStorage::plan(&schema, capacity)?);
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), capacity, None)?,
        Uniform::new(args.seed),
    );
    while collector.frames() < args.steps {
        collector.collect(&mut replay)?;
    }
    let stats = collector.stats();
    println!(
        "{} transitions stored, {} episodes ({} terminated, {} truncated), mean return {:.1}",
        replay.len(),
        stats.episodes(),
        stats.terminated(),
        stats.truncated(),
        stats.mean_return().unwrap_or(f32::NAN)
    );
    let mut batch = Batch::new(&schema, args.batch.get())?; // allocated once, reused
    replay.sample(&mut batch)?;
    let (obs, next, rewards) = (batch.obs()?, batch.next_obs()?, batch.rewards()?);
    for row in 0..3.min(batch.len()) {
        let end = if batch.terminated()?[row].get() {
            "terminated"
        } else {
            ""
        };
        println!(
            "row {}: obs {:?} reward {} next_obs {:?} {end}",
            batch.positions()[row],
            &obs[row * 4..row * 4 + 4],
            rewards[row],
            &next[row * 4..row * 4 + 4],
        );
    }
    Ok(())
}
