//! Remote collection: every chunk a source delivers is written once and whole, weights
//! reach the collectors with increasing versions, bad chunks and bad weights change
//! nothing.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::{Arc, Mutex};

use rl_core::MemoryPlan;
use rl_envs::Pendulum;
use rl_storage::ColumnSlice;

use super::*;
use crate::trainer::{CollectorChoice, OffPolicyConfig, OffPolicyTrainer, RunConfig};
use rl_algos::learner::Learner;
use rl_algos::sac::{Sac, SacConfig};

fn sac() -> Sac {
    let config = SacConfig {
        hidden: vec![16, 16],
        batch_size: 16,
        ..SacConfig::sb3()
    };
    Sac::for_env(&Pendulum::new(0), config, 0).unwrap()
}

fn collector(index: u64) -> ChunkCollector<Pendulum, Sac> {
    let envs = (0..2).map(Pendulum::new).collect();
    let config = ChunkConfig {
        steps_per_chunk: 4,
        random_frames: 16,
        seed: 100 * (index + 1),
    };
    ChunkCollector::new(envs, sac(), config).unwrap()
}

/// What the test source saw.
#[derive(Debug, Default)]
struct Log {
    /// (version, env_steps) of every publish.
    published: Vec<(u64, u64)>,
    /// Rows of every chunk delivered.
    delivered: Vec<usize>,
}

/// Two in-process collectors taking turns, each taking the newest weights before a chunk.
#[derive(Debug)]
struct Local {
    collectors: Vec<ChunkCollector<Pendulum, Sac>>,
    next: usize,
    weights: Option<(u64, u64, Vec<u8>)>,
    log: Arc<Mutex<Log>>,
    /// Deliver one chunk with a column missing before the real ones.
    corrupt_first: bool,
}

impl ChunkSource for Local {
    fn next_chunk(&mut self, sink: &mut ChunkSink<'_>) -> Result<()> {
        let collector = &mut self.collectors[self.next % 2];
        self.next += 1;
        if let Some((version, steps, bytes)) = &self.weights
            && collector.version() != *version
        {
            collector.set_weights(*version, *steps, bytes)?;
        }
        let episodes = collector.collect()?.to_vec();
        let slices = (0..collector.schema().columns().len())
            .map(|i| collector.column(i))
            .collect::<Result<Vec<ColumnSlice<'_>>>>()?;
        if std::mem::take(&mut self.corrupt_first) {
            assert!(sink.extend(&slices[1..]).is_err());
        }
        let rows = sink.extend(&slices)?;
        for episode in episodes {
            sink.episode(episode);
        }
        self.log.lock().unwrap().delivered.push(rows);
        Ok(())
    }

    fn publish(&mut self, version: u64, env_steps: u64, weights: &[u8]) -> Result<()> {
        self.log
            .lock()
            .unwrap()
            .published
            .push((version, env_steps));
        self.weights = Some((version, env_steps, weights.to_vec()));
        Ok(())
    }

    fn memory_plan(&self, _schema: &rl_core::Schema) -> MemoryPlan {
        MemoryPlan::new()
    }
}

fn config(total: u64) -> (OffPolicyConfig, RunConfig) {
    let config = OffPolicyConfig {
        buffer_capacity: 1_000,
        learning_starts: 32,
        ..OffPolicyConfig::new()
    };
    let run = RunConfig {
        n_envs: 2,
        ..RunConfig::new(total)
    };
    (config, run)
}

fn local(log: &Arc<Mutex<Log>>, corrupt_first: bool) -> Box<dyn ChunkSource> {
    Box::new(Local {
        collectors: vec![collector(0), collector(1)],
        next: 0,
        weights: None,
        log: Arc::clone(log),
        corrupt_first,
    })
}

#[test]
fn every_chunk_is_written_once_and_weights_reach_the_collectors() {
    let log = Arc::new(Mutex::new(Log::default()));
    let (config, run) = config(200);
    let mut trainer =
        OffPolicyTrainer::with_source(Pendulum::new, sac(), config, run, local(&log, true))
            .unwrap();
    let summary = trainer.train(&mut ()).unwrap();
    let log = log.lock().unwrap();
    // 8-row chunks until the budget: 25 chunks, every row in the buffer once.
    assert_eq!(log.delivered, vec![8; 25]);
    assert_eq!(summary.total_env_steps, 200);
    assert_eq!(trainer.replay().len(), 200);
    // Version 0 first, then one per training phase, each at the run's steps.
    assert_eq!(log.published[0], (0, 0));
    for (i, &(version, steps)) in log.published.iter().enumerate() {
        assert_eq!(version, i as u64);
        assert!(steps <= 200);
    }
    assert!(log.published.len() > 10);
    assert_eq!(trainer.policy_version(), log.published.len() as u64 - 1);
    assert!(trainer.learner().updates() > 0);
    // Pendulum episodes are 200 steps: two environments per collector, 100 steps each.
    assert!(trainer.evaluate(1).is_ok());
}

#[test]
fn published_weights_make_a_collector_act_as_the_learner() {
    let mut other = collector(0);
    let mut twin = collector(0);
    // A learner whose weights moved away from the collectors' initial ones.
    let moved = Sac::for_env(
        &Pendulum::new(0),
        SacConfig {
            hidden: vec![16, 16],
            batch_size: 16,
            ..SacConfig::sb3()
        },
        99,
    )
    .unwrap();
    let bytes = moved.checkpoint().to_bytes().unwrap();
    other.set_weights(5, 1_000, &bytes).unwrap();
    assert_eq!(other.version(), 5);
    // Past the random warm-up, the two collectors act differently: one has the moved
    // weights.
    for _ in 0..3 {
        other.collect().unwrap();
        twin.collect().unwrap();
    }
    let action = |c: &ChunkCollector<Pendulum, Sac>| c.column(1).unwrap().as_bytes().to_vec();
    assert_ne!(action(&other), action(&twin));
    // Bad bytes: refused, nothing changes.
    assert!(other.set_weights(6, 0, b"not a checkpoint").is_err());
    assert_eq!(other.version(), 5);
    let wrong_kind = rl_algos::dqn::Dqn::for_env(
        &rl_envs::CartPole::new(0),
        rl_algos::dqn::DqnConfig::default(),
        0,
    )
    .unwrap()
    .checkpoint()
    .to_bytes()
    .unwrap();
    assert!(other.set_weights(7, 0, &wrong_kind).is_err());
    assert_eq!(other.version(), 5);
}

#[test]
fn a_source_cannot_be_combined_with_the_async_collector() {
    let log = Arc::new(Mutex::new(Log::default()));
    let (mut config, run) = config(100);
    config.collector = CollectorChoice::Async {
        workers: 1,
        steps_per_chunk: 4,
    };
    let err = OffPolicyTrainer::with_source(Pendulum::new, sac(), config, run, local(&log, false))
        .unwrap_err();
    assert!(err.to_string().contains("collector"), "{err}");
    assert!(log.lock().unwrap().published.is_empty());
}

#[test]
fn zero_steps_per_chunk_is_refused() {
    let config = ChunkConfig {
        steps_per_chunk: 0,
        random_frames: 0,
        seed: 0,
    };
    let err = ChunkCollector::new(vec![Pendulum::new(0)], sac(), config).unwrap_err();
    assert!(err.to_string().contains("steps_per_chunk"), "{err}");
}
