//! Loading damaged trainer checkpoints: a PPO checkpoint with observation and reward
//! normalisers (every kind of state a trainer saves: networks, Adam moments, generators,
//! running statistics, counters) damaged at random, its JSON header included, then
//! loaded into a fresh trainer. Never a panic: a typed error (and the trainer unchanged)
//! or a trainer that collects and updates with finite losses.
#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use rl_algos::learner::{Learner, OnPolicyLearner};
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

fn collector(policy: CategoricalPolicy) -> SyncCollector<CartPole, CategoricalPolicy> {
    let envs: Vec<CartPole> = (0..ENVS as u64).map(CartPole::new).collect();
    SyncCollector::new(envs, policy, CollectorConfig::new(ENVS)).unwrap()
}

/// The bytes of a trainer's checkpoint after one update.
fn trained() -> Vec<u8> {
    let mut ppo = Ppo::new(policy(), config(), ENVS, 0).unwrap();
    let mut collector = collector(ppo.policy().clone());
    let mut rollout = ppo.rollout_buffer(None).unwrap();
    collector.collect_rollout(&mut rollout).unwrap();
    ppo.update(&mut rollout).unwrap();
    ppo.checkpoint().to_bytes().unwrap()
}

/// Loads `bytes` into a fresh trainer; when it loads, collects and trains one update
/// (with a collector of its own: one that hit a policy error stops).
fn load_and_train(bytes: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ppo.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let mut ppo = Ppo::new(policy(), config(), ENVS, 0).unwrap();
    let before = ppo.checkpoint().to_bytes().unwrap();
    if std::fs::read(&path)
        .map_err(|_| ())
        .and_then(|b| ppo.restore_bytes(&b, &path).map_err(|_| ()))
        .is_err()
    {
        assert_eq!(
            ppo.checkpoint().to_bytes().unwrap(),
            before,
            "a refused checkpoint changed the trainer"
        );
        return;
    }
    let mut collector = collector(policy());
    ppo.copy_policy_into(collector.policy_mut()).unwrap();
    let mut rollout = ppo.rollout_buffer(None).unwrap();
    // Finite but absurd weights (a damaged exponent byte: 1e21) load, and then act or
    // train into a typed error (`Diverged`): never a panic, never a NaN reported as a
    // loss.
    if collector.collect_rollout(&mut rollout).is_err() {
        return;
    }
    match ppo.update(&mut rollout) {
        Ok(stats) => {
            for value in [stats.policy_loss, stats.value_loss, stats.entropy] {
                assert!(value.is_finite(), "a loaded checkpoint trains to {stats:?}");
            }
        }
        Err(error) => assert!(
            matches!(error, rl_algos::Error::Diverged { .. }),
            "a loaded checkpoint fails to train with {error:?}"
        ),
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
        let pristine = trained();
        let header_len = u64::from_le_bytes(pristine[..8].try_into().unwrap()) as usize;
        // Bytes set anywhere.
        let mut bytes = pristine.clone();
        for &(at, value) in &sets {
            let at = at % bytes.len();
            bytes[at] = value;
        }
        load_and_train(&bytes);
        // Numbers of the JSON header (counters, statistics, shapes) changed.
        let mut bytes = pristine.clone();
        for &(at, value) in &header_sets {
            bytes[8 + at % header_len] = value;
        }
        load_and_train(&bytes);
        // The file cut short.
        load_and_train(&pristine[..cut % pristine.len()]);
    }
}
