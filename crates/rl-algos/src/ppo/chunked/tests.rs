//! Tests of recurrent PPO: minibatches of whole chunks replay what acting computed, the
//! first ratios are 1, updates allocate nothing, the plan comes first and is set by the
//! chunk length and chunks per minibatch, checkpoints resume exactly, errors are typed,
//! and the on-policy trainer drives it.

use rl_collect::{CollectorConfig, SyncCollector};
use rl_envs::MaskedCartPole;

use super::*;
#[allow(unused_imports, reason = "the learner traits, for their methods")]
use crate::learner::{Learner as _, OffPolicyLearner as _, OnPolicyLearner as _};
use crate::policy::{History, PolicyConfig};

const ENVS: usize = 4;

fn policy(history: History, seed: u64) -> RecurrentCategoricalPolicy {
    let config = PolicyConfig {
        hidden: vec![16],
        ..PolicyConfig::new()
    };
    RecurrentCategoricalPolicy::for_env(&MaskedCartPole::new(0), history, config, seed).unwrap()
}

fn config(chunk_len: usize) -> RecurrentPpoConfig {
    let ppo = PpoConfig {
        n_steps: 32,
        batch_size: 4 * chunk_len,
        epochs: 2,
        ..PpoConfig::new()
    };
    RecurrentPpoConfig::new(ppo, chunk_len)
}

/// A learner, a collector acting with a copy of its policy, and a rollout buffer.
fn setup(
    history: History,
    config: RecurrentPpoConfig,
) -> (
    RecurrentPpo,
    SyncCollector<MaskedCartPole, RecurrentCategoricalPolicy>,
    RolloutBuffer,
) {
    let policy = policy(history, 1);
    let envs: Vec<MaskedCartPole> = (0..ENVS as u64).map(MaskedCartPole::new).collect();
    let collector = SyncCollector::new(envs, policy.clone(), CollectorConfig::new(ENVS)).unwrap();
    let learner = RecurrentPpo::new(policy, config, ENVS, 0).unwrap();
    let rollout = learner.rollout_buffer(None).unwrap();
    (learner, collector, rollout)
}

fn collect(
    learner: &RecurrentPpo,
    collector: &mut SyncCollector<MaskedCartPole, RecurrentCategoricalPolicy>,
    rollout: &mut RolloutBuffer,
) {
    rollout.clear();
    learner.begin_rollout(collector.policy_mut()).unwrap();
    collector.collect_rollout(rollout).unwrap();
}

/// One collect-and-update iteration.
fn iterate(
    learner: &mut RecurrentPpo,
    collector: &mut SyncCollector<MaskedCartPole, RecurrentCategoricalPolicy>,
    rollout: &mut RolloutBuffer,
) -> UpdateStats {
    collect(learner, collector, rollout);
    let record = collector.policy().chunk_record().unwrap();
    let stats = learner.update(rollout, record).unwrap();
    learner.copy_policy_into(collector.policy_mut()).unwrap();
    stats
}

#[test]
fn minibatches_of_chunks_replay_what_acting_recorded() {
    for history in [History::Lstm { hidden: 8 }, History::Stack { k: 3 }] {
        let (mut learner, mut collector, mut rollout) = setup(history, config(8));
        // A second rollout too: its chunks start from states the first one left.
        for _ in 0..2 {
            collect(&learner, &mut collector, &mut rollout);
            let record = collector.policy().chunk_record().unwrap();
            learner.order.shuffle(&mut learner.rng);
            let per = learner.config.chunks_per_minibatch();
            for start in (0..learner.order.len()).step_by(per) {
                let end = (start + per).min(learner.order.len());
                let chunks = learner.gather(&rollout, record, (start, end)).unwrap();
                let rows = learner.config.chunk_len * chunks;
                let batch = ChunkBatch {
                    obs: learner.batch.obs().unwrap(),
                    steps: learner.config.chunk_len,
                    chunks,
                    resets: &learner.resets[..rows],
                    initial: &learner.initial[..chunks * learner.policy.state_len()],
                };
                let actions = learner.batch.field::<u32>(Field::Action).unwrap();
                learner
                    .policy
                    .evaluate_chunks(batch, actions, &mut learner.ws)
                    .unwrap();
                let recorded = learner.batch.field::<f32>(Field::LogProb).unwrap();
                let values = learner.batch.field::<f32>(Field::Value).unwrap();
                for (a, b) in learner.ws.log_probs().iter().zip(recorded) {
                    assert!((a - b).abs() <= 1e-6, "{history}: log-prob {a} vs {b}");
                }
                for (a, b) in learner.ws.values().iter().zip(values) {
                    assert!((a - b).abs() <= 1e-6, "{history}: value {a} vs {b}");
                }
            }
        }
    }
}

#[test]
fn the_first_ratios_are_one() {
    // One epoch, one minibatch of every chunk: the KL before the only step measures
    // how far the replay is from acting.
    let ppo = PpoConfig {
        n_steps: 32,
        batch_size: 32 * ENVS,
        epochs: 1,
        ..PpoConfig::new()
    };
    let (mut learner, mut collector, mut rollout) =
        setup(History::Lstm { hidden: 8 }, RecurrentPpoConfig::new(ppo, 8));
    let stats = iterate(&mut learner, &mut collector, &mut rollout);
    assert_eq!(stats.minibatches, 1);
    assert!(stats.approx_kl.abs() < 1e-10, "{stats:?}");
    assert_eq!(stats.clip_fraction, 0.0);
}

#[test]
fn an_update_allocates_nothing_after_the_first() {
    for history in [
        History::Lstm { hidden: 16 },
        History::Stack { k: 4 },
        History::None,
    ] {
        let (mut learner, mut collector, mut rollout) = setup(history, config(8));
        iterate(&mut learner, &mut collector, &mut rollout);
        collect(&learner, &mut collector, &mut rollout);
        let record = collector.policy().chunk_record().unwrap();
        let (stats, alloc) = rl_testkit::measure(|| learner.update(&mut rollout, record));
        let stats = stats.unwrap();
        assert_eq!(alloc.allocations, 0, "{history}");
        assert_eq!(stats.minibatches, 2 * 4 * ENVS / 4);
        // Collecting the next rollout allocates nothing either.
        rollout.clear();
        let ((), alloc) = rl_testkit::measure(|| {
            learner.begin_rollout(collector.policy_mut()).unwrap();
            collector.collect_rollout(&mut rollout).unwrap();
        });
        assert_eq!(alloc.allocations, 0, "{history}: collecting");
    }
}

#[test]
fn the_plan_comes_first_and_is_set_by_chunks() {
    let history = History::Lstm { hidden: 32 };
    let p = policy(history, 0);
    let planned = RecurrentPpo::blueprint(&p.shape(), &config(8), ENVS)
        .unwrap()
        .learner;
    let learner = RecurrentPpo::new(p.clone(), config(8), ENVS, 0).unwrap();
    assert_eq!(learner.memory_plan(), planned);
    let line = |plan: &MemoryPlan| {
        plan.lines()
            .iter()
            .find(|l| l.component.starts_with("ppo/recurrent workspace"))
            .map(|l| l.bytes)
            .unwrap()
    };
    // A longer rollout: the same workspace (chunk length and chunks per minibatch).
    let mut longer = config(8);
    longer.ppo.n_steps = 4096;
    let long_plan = RecurrentPpo::blueprint(&p.shape(), &longer, ENVS)
        .unwrap()
        .learner;
    assert_eq!(line(&long_plan), line(&planned));
    // Longer chunks: a larger workspace, in proportion.
    let wide = RecurrentPpo::blueprint(&p.shape(), &config(16), ENVS)
        .unwrap()
        .learner;
    assert!(line(&wide) > line(&planned));
    assert_eq!(
        line(&planned),
        p.workspace_bytes(8, 4),
        "the plan is the workspace's bytes"
    );
    // What the workspace actually allocates.
    assert_eq!(learner.ws.memory_bytes(), line(&planned));
}

#[test]
fn a_restored_learner_updates_bit_identically() {
    let history = History::Lstm { hidden: 8 };
    let (mut learner, mut collector, mut rollout) = setup(history, config(8));
    iterate(&mut learner, &mut collector, &mut rollout);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("learner.safetensors");
    std::fs::write(&path, learner.to_bytes().unwrap()).unwrap();
    let mut restored = RecurrentPpo::new(policy(history, 99), config(8), ENVS, 0).unwrap();
    restored
        .restore_bytes(&std::fs::read(&path).unwrap(), &path)
        .unwrap();
    collect(&learner, &mut collector, &mut rollout);
    let record = collector.policy().chunk_record().unwrap();
    let a = learner.update(&mut rollout, record).unwrap();
    let b = restored.update(&mut rollout, record).unwrap();
    assert_eq!(a, b);
    for i in 0..3 {
        assert_eq!(
            learner.policy().network(i).unwrap().params(),
            restored.policy().network(i).unwrap().params()
        );
    }
    // Another chunk length or history is refused, and nothing changes.
    let mut other = RecurrentPpo::new(policy(history, 5), config(16), ENVS, 0).unwrap();
    let before = other.policy().network(2).unwrap().params().to_vec();
    assert!(matches!(
        other.restore_bytes(&std::fs::read(&path).unwrap(), &path),
        Err(Error::CheckpointMismatch { .. })
    ));
    assert_eq!(other.policy().network(2).unwrap().params(), before);
    let mut stack =
        RecurrentPpo::new(policy(History::Stack { k: 2 }, 5), config(8), ENVS, 0).unwrap();
    assert!(matches!(
        stack.restore_bytes(&std::fs::read(&path).unwrap(), &path),
        Err(Error::CheckpointMismatch { .. })
    ));
}

#[test]
fn configurations_and_records_are_checked() {
    let p = policy(History::Lstm { hidden: 4 }, 0);
    let bad = |c: RecurrentPpoConfig| RecurrentPpo::new(p.clone(), c, ENVS, 0).unwrap_err();
    for (config, field) in [
        (config(5), "chunk_len"),
        (
            RecurrentPpoConfig {
                ppo: PpoConfig {
                    batch_size: 12,
                    ..config(8).ppo
                },
                ..config(8)
            },
            "ppo.batch_size",
        ),
        (
            RecurrentPpoConfig {
                ppo: PpoConfig {
                    recompute_old_log_probs: true,
                    ..config(8).ppo
                },
                ..config(8)
            },
            "ppo.recompute_old_log_probs",
        ),
        (
            RecurrentPpoConfig {
                ppo: PpoConfig {
                    normalize_obs: Some(super::super::ObsNormalization::default()),
                    ..config(8).ppo
                },
                ..config(8)
            },
            "ppo.normalize_obs",
        ),
    ] {
        match bad(config) {
            Error::Config { key, .. } => assert_eq!(key, field),
            other => panic!("{other}"),
        }
    }
    // A rollout collected without begin_rollout, or a record of another shape.
    let (mut learner, mut collector, mut rollout) = setup(History::Lstm { hidden: 4 }, config(8));
    collector.collect_rollout(&mut rollout).unwrap();
    let mut other = policy(History::Lstm { hidden: 4 }, 0);
    other.begin_rollout(4, 32, ENVS).unwrap();
    let record = other.chunk_record().unwrap();
    assert!(matches!(
        learner.update(&mut rollout, record),
        Err(Error::Config { .. })
    ));
    assert_eq!(learner.updates(), 0);
}
