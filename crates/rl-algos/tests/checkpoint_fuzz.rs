//! Loading damaged trainer checkpoints: a PPO checkpoint with observation and reward
//! normalisers (every kind of state a trainer saves: networks, Adam moments, generators,
//! running statistics, counters) damaged at random, its JSON header included, then
//! loaded into a fresh trainer. Never a panic: checkpoints carry checksums over every
//! tensor and the header, so a damaged file is a typed error (and the trainer
//! unchanged); only bytes the damage left as they were load, and train with finite
//! losses. And single flipped bytes and bits in PPO, SAC, DQN and recurrent DQN
//! checkpoints: every one refused, the learner unchanged.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::path::Path;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_algos::dqn::{Dqn, DqnConfig};
use rl_algos::learner::{Learner, OnPolicyLearner};
use rl_algos::policy::{CategoricalPolicy, History, PolicyConfig};
use rl_algos::ppo::{ObsNormalization, Ppo, PpoConfig, RewardNormalization};
use rl_algos::sac::{Sac, SacConfig};
use rl_algos::sequence::{Recurrent, RecurrentConfig};
use rl_collect::{CollectorConfig, SyncCollector};
use rl_core::{BoxSpace, DType, Space};
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

/// Loads `bytes` into a fresh trainer; when it loads (only the `pristine` bytes do),
/// collects and trains one update (with a collector of its own: one that hit a policy
/// error stops).
fn load_and_train(bytes: &[u8], pristine: &[u8]) {
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
    assert!(bytes == pristine, "a damaged checkpoint loaded");
    let mut collector = collector(policy());
    ppo.copy_policy_into(collector.policy_mut()).unwrap();
    let mut rollout = ppo.rollout_buffer(None).unwrap();
    // Before checksums, finite but absurd weights (a damaged exponent byte: 1e21)
    // loaded and trained into `Diverged`; now they are refused at load. An intact
    // checkpoint still acts, or trains into a typed error: never a panic, never a NaN
    // reported as a loss.
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
        load_and_train(&bytes, &pristine);
        // Numbers of the JSON header (counters, statistics, shapes) changed.
        let mut bytes = pristine.clone();
        for &(at, value) in &header_sets {
            bytes[8 + at % header_len] = value;
        }
        load_and_train(&bytes, &pristine);
        // The file cut short.
        load_and_train(&pristine[..cut % pristine.len()], &pristine);
    }
}

const FLIPS: usize = 500;

/// Flips one random byte (XOR with a random non-zero value) or one random bit of
/// `saved`'s checkpoint [`FLIPS`] times and restores each into `target`: every flip must
/// be refused (a typed error, never a panic) and leave `target` as it was. Returns how
/// many were refused.
fn flips_are_refused<L: Learner>(kind: &str, saved: &L, target: &mut L) -> usize {
    let pristine = saved.to_bytes().unwrap();
    let before = target.to_bytes().unwrap();
    assert_ne!(
        pristine, before,
        "{kind}: the target must differ from the saved learner"
    );
    let path = Path::new("flipped.safetensors");
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(kind.len() as u64);
    let mut refused = 0;
    let mut bytes = pristine.clone();
    for i in 0..FLIPS {
        let at = rng.random_range(0..bytes.len());
        let xor = if i % 2 == 0 {
            rng.random_range(1..=255u8)
        } else {
            1 << rng.random_range(0..8)
        };
        bytes[at] ^= xor;
        match target.restore_bytes(&bytes, path) {
            Ok(()) => panic!("{kind}: byte {at} ^ {xor:#04x} loads"),
            Err(error) => {
                assert!(
                    error.to_string().contains("flipped.safetensors"),
                    "{kind}: {error}"
                );
                refused += 1;
            }
        }
        assert!(
            target.to_bytes().unwrap() == before,
            "{kind}: a refused checkpoint changed the learner"
        );
        bytes[at] ^= xor;
    }
    // The intact checkpoint still restores.
    target.restore_bytes(&pristine, path).unwrap();
    assert!(target.to_bytes().unwrap() == pristine);
    eprintln!("{kind}: {refused} of {FLIPS} flips refused");
    refused
}

fn box_space(len: usize) -> Space {
    Space::Box(BoxSpace::uniform(-1.0, 1.0, &[len], DType::F32).unwrap())
}

#[test]
fn every_flip_in_a_ppo_checkpoint_is_refused() {
    let saved = Ppo::new(policy(), config(), ENVS, 0).unwrap();
    let trained = trained();
    let mut saved = saved;
    saved.restore_bytes(&trained, Path::new("trained")).unwrap();
    let mut target = Ppo::new(policy(), config(), ENVS, 1).unwrap();
    assert_eq!(flips_are_refused("ppo", &saved, &mut target), FLIPS);
}

#[test]
fn every_flip_in_a_sac_checkpoint_is_refused() {
    let config = SacConfig {
        hidden: vec![16, 16],
        batch_size: 8,
        ..SacConfig::sb3()
    };
    let (obs, act) = (box_space(3), box_space(1));
    let saved = Sac::new(&obs, &act, config.clone(), 0).unwrap();
    let mut target = Sac::new(&obs, &act, config, 1).unwrap();
    assert_eq!(flips_are_refused("sac", &saved, &mut target), FLIPS);
}

fn dqn_config(batch_size: usize) -> DqnConfig {
    DqnConfig {
        hidden: vec![16, 16],
        batch_size,
        ..DqnConfig::default()
    }
}

#[test]
fn every_flip_in_a_dqn_checkpoint_is_refused() {
    let actions = Space::discrete(4).unwrap();
    let saved = Dqn::new(&box_space(3), &actions, dqn_config(8), 0).unwrap();
    let mut target = Dqn::new(&box_space(3), &actions, dqn_config(8), 1).unwrap();
    assert_eq!(flips_are_refused("dqn", &saved, &mut target), FLIPS);
}

#[test]
fn every_flip_in_a_recurrent_checkpoint_is_refused() {
    let recurrent = |seed: u64| {
        let config = RecurrentConfig {
            seq_len: 4,
            burn_in: 1,
            ..RecurrentConfig::new(History::Lstm { hidden: 6 })
        };
        // The summarizer's seed is the run's, which a restore checks; the inner
        // learner's initialisation differs.
        Recurrent::new(&box_space(3), config, 0, |summaries| {
            Dqn::new(summaries, &Space::discrete(4).unwrap(), dqn_config(8), seed)
        })
        .unwrap()
    };
    let saved = recurrent(0);
    let mut target = recurrent(1);
    assert_eq!(
        flips_are_refused("recurrent_dqn", &saved, &mut target),
        FLIPS
    );
}
