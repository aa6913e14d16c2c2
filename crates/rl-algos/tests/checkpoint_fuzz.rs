//! Loading damaged trainer checkpoints: a PPO checkpoint with observation and reward
//! normalisers (every kind of state a trainer saves: networks, Adam moments, generators,
//! running statistics, counters) damaged at random, its JSON header included, then
//! loaded into a fresh trainer. Never a panic: a typed error (and the trainer unchanged)
//! or a trainer that collects and updates with finite losses.
#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use rl_algos::policy::{CategoricalPolicy, PolicyConfig};
use rl_algos::ppo::{ObsNormalization, Ppo, PpoConfig, RewardNormalization};
use rl_collect::{CollectorConfig, SyncCollector};
use rl_envs::CartPole;

const ENVS: usize = 2;

fn config() -> PpoConfig {
    PpoConfig {
        n_steps: 16,
        batch_size: 16,
        epochs: 1,
        normalize_obs: Some(ObsNormalization::default()),
        normalize_reward: Some(RewardNormalization::default()),
        ..PpoConfig::new()
    }
}

fn policy() -> CategoricalPolicy {
    let config = PolicyConfig {
        hidden: vec![8],
        ..PolicyConfig::new()
    };
    CategoricalPolicy::new(4, 2, config, 1).unwrap()
}

/// A trainer, its collector, and the bytes of its checkpoint after one update.
fn trained() -> (
    Ppo<CategoricalPolicy>,
    SyncCollector<CartPole, CategoricalPolicy>,
    Vec<u8>,
) {
    let mut ppo = Ppo::new(policy(), config(), ENVS).unwrap();
    let envs: Vec<CartPole> = (0..ENVS as u64).map(CartPole::new).collect();
    let mut collector =
        SyncCollector::new(envs, ppo.policy().clone(), CollectorConfig::new(ENVS)).unwrap();
    let mut rollout = ppo.rollout_buffer(None).unwrap();
    collector.collect_rollout(&mut rollout).unwrap();
    ppo.update(&mut rollout).unwrap();
    let bytes = ppo.checkpoint().to_bytes().unwrap();
    (ppo, collector, bytes)
}

/// Loads `bytes` into a fresh trainer; when it loads, trains one more update.
fn load_and_train(bytes: &[u8], collector: &mut SyncCollector<CartPole, CategoricalPolicy>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ppo.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let mut ppo = Ppo::new(policy(), config(), ENVS).unwrap();
    let before = ppo.checkpoint().to_bytes().unwrap();
    if ppo.load(&path).is_err() {
        assert_eq!(
            ppo.checkpoint().to_bytes().unwrap(),
            before,
            "a refused checkpoint changed the trainer"
        );
        return;
    }
    ppo.copy_policy_into(collector.policy_mut()).unwrap();
    let mut rollout = ppo.rollout_buffer(None).unwrap();
    collector.collect_rollout(&mut rollout).unwrap();
    let stats = ppo.update(&mut rollout).unwrap();
    for value in [stats.policy_loss, stats.value_loss, stats.entropy] {
        assert!(value.is_finite(), "a loaded checkpoint trains to {stats:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn damaged_ppo_checkpoints_load_cleanly_or_not_at_all(
        sets in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..5),
        header_sets in proptest::collection::vec(
            (any::<usize>(), proptest::sample::select(b"0123456789-.e,[]".to_vec())),
            1..4,
        ),
        cut in any::<usize>(),
    ) {
        let (_, mut collector, pristine) = trained();
        let header_len = u64::from_le_bytes(pristine[..8].try_into().unwrap()) as usize;
        // Bytes set anywhere.
        let mut bytes = pristine.clone();
        for &(at, value) in &sets {
            let at = at % bytes.len();
            bytes[at] = value;
        }
        load_and_train(&bytes, &mut collector);
        // Numbers of the JSON header (counters, statistics, shapes) changed.
        let mut bytes = pristine.clone();
        for &(at, value) in &header_sets {
            bytes[8 + at % header_len] = value;
        }
        load_and_train(&bytes, &mut collector);
        // The file cut short.
        load_and_train(&pristine[..cut % pristine.len()], &mut collector);
    }
}
