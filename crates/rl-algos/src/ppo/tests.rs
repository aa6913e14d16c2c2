//! Tests of PPO: the clipped surrogate (exact ties included) and the value loss on
//! hand-computed cases, configuration checks, schedules, the two sources of old
//! log-probabilities, target-KL early stop, and a short CartPole run that must beat the
//! random policy clearly.

use rl_collect::{CollectorConfig, SyncCollector};
use rl_envs::CartPole;
use rl_storage::{ColumnSlice, rollout::RolloutBuffer};

use super::shared::{explained_variance, normalize};
use super::*;
use crate::error::Error;
#[allow(unused_imports, reason = "the learner traits, for their methods")]
use crate::learner::{Learner as _, OffPolicyLearner as _, OnPolicyLearner as _};
use crate::policy::{ActorCritic, CategoricalPolicy, PolicyConfig, PolicyNetworks};
use rl_nn::AdamConfig;

/// Loss and gradient with respect to the log-probs of `clipped_surrogate` for ratios
/// `ratios` (old log-probs 0).
fn surrogate(ratios: &[f32], advantages: &[f32], clip: f32) -> (f32, Vec<f32>) {
    let log_probs: Vec<f32> = ratios.iter().map(|r| r.ln()).collect();
    let old = vec![0.0; ratios.len()];
    let mut grads = vec![f32::NAN; ratios.len()];
    let loss =
        clipped_surrogate(&log_probs, &old, advantages, clip, &mut grads).expect("same rows");
    (loss, grads)
}

fn close(a: f32, b: f32) -> bool {
    (a - b).abs() <= 1e-5
}

#[test]
fn clipped_surrogate_hand_computed() {
    // clip 0.2, one row per case, n = 5:
    // r 1.1, A +1: inside, min(1.1, 1.1) = 1.1, d/dlogp = r A = 1.1
    // r 1.5, A +1: clipped above, min(1.5, 1.2) = 1.2, gradient 0
    // r 0.5, A +1: below the range, min(0.5, 0.8) = 0.5 (unclipped binds), gradient 0.5
    // r 0.7, A -1: below, min(-0.7, -0.8) = -0.8 (clipped binds), gradient 0
    // r 1.5, A -1: above, min(-1.5, -1.2) = -1.5 (unclipped binds), gradient -1.5
    // loss = -(1.1 + 1.2 + 0.5 - 0.8 - 1.5) / 5 = -0.1; d loss = -(r A) / 5 where unclipped.
    let (loss, grad) = surrogate(
        &[1.1, 1.5, 0.5, 0.7, 1.5],
        &[1.0, 1.0, 1.0, -1.0, -1.0],
        0.2,
    );
    assert!(close(loss, -0.1), "{loss}");
    let expected = [-1.1 / 5.0, 0.0, -0.5 / 5.0, 0.0, 1.5 / 5.0];
    for (g, e) in grad.iter().zip(expected) {
        assert!(close(*g, e), "{grad:?} vs {expected:?}");
    }
}

#[test]
fn clipped_surrogate_inside_the_range_is_the_plain_ratio_objective() {
    // r 0.9 and 1.05 with A 2 and -3: -(0.9 * 2 + 1.05 * -3) / 2 = 0.675.
    let (loss, grad) = surrogate(&[0.9, 1.05], &[2.0, -3.0], 0.2);
    assert!(close(loss, 0.675), "{loss}");
    assert!(close(grad[0], -0.9 * 2.0 / 2.0), "{grad:?}");
    assert!(close(grad[1], 1.05 * 3.0 / 2.0), "{grad:?}");
    // A ratio of exactly 1: the loss is -mean(A), the gradient -A / n.
    let (loss, grad) = surrogate(&[1.0, 1.0], &[1.0, -2.0], 0.1);
    assert!(close(loss, 0.5) && close(grad[0], -0.5) && close(grad[1], 1.0));
}

#[test]
fn clipped_surrogate_at_an_exact_tie_takes_the_unclipped_gradient() {
    // r = exp(0.2) and clip = r - 1 (exact in f32 for r in [1, 2)): the ratio lies exactly
    // on the upper bound, both terms are r A, and the documented subgradient is -r A / n.
    let r = 0.2f32.exp();
    let clip = r - 1.0;
    assert_eq!(
        r.clamp(1.0 - clip, 1.0 + clip),
        r,
        "the test needs an exact tie"
    );
    let mut grads = [f32::NAN; 2];
    let loss = clipped_surrogate(&[0.2, 0.2], &[0.0, 0.0], &[2.0, -1.0], clip, &mut grads)
        .expect("same rows");
    // Both rows tie (the clamp leaves a ratio on the bound unchanged), whatever the sign
    // of the advantage.
    assert!(close(loss, -(r * 2.0 - r) / 2.0), "{loss}");
    assert_eq!(grads, [-r * 2.0 / 2.0, r / 2.0]);
}

#[test]
fn value_loss_hand_computed_with_and_without_clipping() {
    let values = [3.0f32, 0.5, 3.0, -2.0];
    let returns = [2.0f32, 1.0, 0.0, 0.0];
    let mut grads = [f32::NAN; 4];
    // Unclipped: errors 1, -0.5, 3, -2: loss (1 + 0.25 + 9 + 4) / 4, gradient 2 e / 4.
    let loss = value_loss(&values, &returns, None, &mut grads).expect("same rows");
    assert!(close(loss, 14.25 / 4.0), "{loss}");
    assert_eq!(grads, [0.5, -0.25, 1.5, -1.0]);
    // Clipped with old values 0 and limit 1:
    // row 0: v 3 moved past the limit, clipped value 1, errors 1 and -1: a tie, the
    //   unclipped error's gradient 2 * 1 / 4;
    // row 1: v 0.5 inside the limit: both errors -0.5, gradient 2 * -0.5 / 4;
    // row 2: v 3 past the limit, clipped value 1: errors 3 and 1, unclipped binds, 2 * 3 / 4;
    // row 3: v -2 past the limit, clipped value -1, r 0: errors -2 and -1, unclipped binds;
    let old = [0.0f32; 4];
    let loss = value_loss(&values, &returns, Some((&old, 1.0)), &mut grads).expect("same rows");
    assert!(close(loss, 14.25 / 4.0), "{loss}");
    assert_eq!(grads, [0.5, -0.25, 1.5, -1.0]);
    // Where the clipped error is the larger and the value moved past the limit, the
    // gradient is 0: old 0, limit 1, v 3, R 4: errors -1 (unclipped) and -3 (clipped).
    let loss = value_loss(&[3.0], &[4.0], Some((&[0.0], 1.0)), &mut grads[..1]).expect("one row");
    assert!(close(loss, 9.0), "{loss}");
    assert_eq!(grads[0], 0.0);
    // Inside the limit the clipped error equals the unclipped one: old 2.5, v 3, R 4.
    let loss = value_loss(&[3.0], &[4.0], Some((&[2.5], 1.0)), &mut grads[..1]).expect("one row");
    assert!(close(loss, 1.0), "{loss}");
    assert_eq!(grads[0], -2.0);
    // Rows are checked, old values included.
    assert!(matches!(
        value_loss(&values, &returns, Some((&old[..3], 1.0)), &mut grads),
        Err(Error::ShapeMismatch {
            expected: 4,
            actual: 3,
            ..
        })
    ));
}

#[test]
fn clipped_surrogate_checks_rows() {
    let err = clipped_surrogate(&[0.0; 3], &[0.0; 2], &[0.0; 3], 0.2, &mut [0.0; 3]);
    assert!(matches!(
        err,
        Err(Error::ShapeMismatch {
            expected: 3,
            actual: 2,
            ..
        })
    ));
}

#[test]
fn config_defaults_validate_and_bad_fields_are_named() {
    PpoConfig::new().validate(1).expect("defaults are valid");
    let bad: [(&str, PpoConfig); 10] = [
        (
            "ppo.n_steps",
            PpoConfig {
                n_steps: 0,
                ..PpoConfig::new()
            },
        ),
        (
            "ppo.batch_size",
            PpoConfig {
                batch_size: 4096,
                ..PpoConfig::new()
            },
        ),
        (
            "ppo.epochs",
            PpoConfig {
                epochs: 0,
                ..PpoConfig::new()
            },
        ),
        (
            "ppo.gamma",
            PpoConfig {
                gamma: 1.5,
                ..PpoConfig::new()
            },
        ),
        (
            "ppo.clip_range",
            PpoConfig {
                clip_range: 0.0,
                ..PpoConfig::new()
            },
        ),
        (
            "ppo.ent_coef",
            PpoConfig {
                ent_coef: f32::NAN,
                ..PpoConfig::new()
            },
        ),
        (
            "ppo.max_grad_norm",
            PpoConfig {
                max_grad_norm: -1.0,
                ..PpoConfig::new()
            },
        ),
        (
            "ppo.target_kl",
            PpoConfig {
                target_kl: Some(0.0),
                ..PpoConfig::new()
            },
        ),
        (
            "ppo.adam",
            PpoConfig {
                adam: AdamConfig {
                    lr: -1e-3,
                    ..PpoConfig::new().adam
                },
                ..PpoConfig::new()
            },
        ),
        (
            "ppo.schedule_steps",
            PpoConfig {
                learning_rate_end: Some(0.0),
                ..PpoConfig::new()
            },
        ),
    ];
    for (field, config) in bad {
        match config.validate(1) {
            Err(Error::Config { key, .. }) => assert_eq!(key, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn linear_schedules() {
    let config = PpoConfig {
        adam: AdamConfig {
            lr: 1e-3,
            ..PpoConfig::new().adam
        },
        learning_rate_end: Some(0.0),
        clip_range: 0.2,
        clip_range_end: Some(0.1),
        schedule_steps: Some(1000),
        ..PpoConfig::new()
    };
    let (lr, clip) = config.scheduled(0);
    assert!((lr - 1e-3).abs() < 1e-12 && close(clip, 0.2));
    let (lr, clip) = config.scheduled(250);
    assert!((lr - 7.5e-4).abs() < 1e-12 && close(clip, 0.175));
    let (lr, clip) = config.scheduled(5000);
    assert!(lr == 0.0 && close(clip, 0.1));
    let constant = PpoConfig::new().scheduled(1_000_000);
    assert_eq!(constant, (3e-4, 0.2));
}

#[test]
fn normalize_and_explained_variance() {
    let mut v = [1.0f32, 2.0, 3.0];
    normalize(&mut v);
    assert!(
        close(v[0], -1.0) && close(v[1], 0.0) && close(v[2], 1.0),
        "{v:?}"
    );
    assert!(close(
        explained_variance(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]),
        1.0
    ));
    assert!(close(
        explained_variance(&[2.0, 2.0, 2.0], &[1.0, 2.0, 3.0]),
        0.0
    ));
    assert_eq!(explained_variance(&[0.0; 3], &[5.0; 3]), 0.0);
}

type Cart = CategoricalPolicy;

/// Environments of the CartPole tests.
const ENVS: usize = 8;

/// `seed` seeds the environments, the policy and the collector; `ppo_seed` the learner.
fn cartpole_setup(
    config: PpoConfig,
    seed: u64,
    ppo_seed: u64,
) -> (SyncCollector<CartPole, Cart>, Ppo<Cart>) {
    let envs: Vec<CartPole> = (0..ENVS as u64)
        .map(|i| CartPole::new(seed * 1000 + i))
        .collect();
    let policy = Cart::for_env(&envs[0], PolicyConfig::new(), seed).expect("policy");
    let mut collector = SyncCollector::new(
        envs,
        policy.clone(),
        CollectorConfig {
            seed,
            stats_window: 20,
            ..CollectorConfig::new(ENVS)
        },
    )
    .expect("collector");
    let ppo = Ppo::new(policy, config, ENVS, ppo_seed).expect("ppo");
    // The normaliser `Ppo::new` may install goes to the collector's copy too.
    ppo.copy_policy_into(collector.policy_mut()).expect("copy");
    (collector, ppo)
}

fn small_config() -> PpoConfig {
    PpoConfig {
        n_steps: 32,
        batch_size: 64,
        epochs: 4,
        gamma: 0.98,
        gae_lambda: 0.8,
        adam: AdamConfig {
            lr: 1e-3,
            ..PpoConfig::new().adam
        },
        ..PpoConfig::new()
    }
}

#[test]
fn recorded_and_recomputed_old_log_probs_agree() -> Result<()> {
    let mut stats = Vec::new();
    for recompute in [false, true] {
        let config = PpoConfig {
            recompute_old_log_probs: recompute,
            eval_minibatch: 100,
            ..small_config()
        };
        let (mut collector, mut ppo) = cartpole_setup(config, 3, 0);
        let mut rollout = ppo.rollout_buffer(None)?;
        collector.collect_rollout(&mut rollout).expect("collect");
        // Recorded log-probs equal the recomputed ones up to rounding.
        let mut lp = vec![0.0; rollout.rows()];
        let mut v = vec![0.0; rollout.rows()];
        let actions = rollout.field::<u32>(Field::Action)?;
        let obs = rollout.field::<f32>(Field::Obs)?;
        let mut ws = ppo.policy().workspace(100);
        ppo.policy()
            .evaluate_minibatched(obs, actions, &mut lp, &mut v, &mut ws)?;
        for (a, b) in lp.iter().zip(rollout.field::<f32>(Field::LogProb)?) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        stats.push(ppo.update(&mut rollout)?);
    }
    let (a, b) = (stats[0], stats[1]);
    assert_eq!(a.minibatches, b.minibatches);
    assert!((a.policy_loss - b.policy_loss).abs() < 1e-4, "{a:?} {b:?}");
    assert!((a.value_loss - b.value_loss).abs() < 1e-3 * a.value_loss.abs().max(1.0));
    assert!(a.approx_kl >= 0.0 && a.approx_kl.is_finite());
    Ok(())
}

#[test]
fn target_kl_stops_early_and_rollout_shape_is_checked() -> Result<()> {
    let config = PpoConfig {
        target_kl: Some(1e-9),
        ..small_config()
    };
    let (mut collector, mut ppo) = cartpole_setup(config, 5, 0);
    let mut rollout = ppo.rollout_buffer(None)?;
    collector.collect_rollout(&mut rollout).expect("collect");
    let stats = ppo.update(&mut rollout)?;
    assert!(stats.early_stopped, "{stats:?}");
    // The first minibatch has (almost) zero KL and steps; the second sees the change.
    assert!(
        stats.minibatches >= 1 && stats.minibatches < 16,
        "{stats:?}"
    );

    let mut other = RolloutBuffer::new(ppo.rollout_schema().clone(), 16, ENVS, None)?;
    assert!(matches!(ppo.update(&mut other), Err(Error::Config { .. })));
    let mut empty = ppo.rollout_buffer(None)?;
    let err = ppo.update(&mut empty).unwrap_err();
    assert!(err.to_string().contains("full rollouts"), "{err}");
    Ok(())
}

/// A short CartPole run (the `ppo_cartpole` example's hyperparameters, fixed seed, at most
/// 20k env steps) must lift the mean return of the last 20 episodes far above the random
/// policy's ~22.
#[test]
fn short_cartpole_run_beats_random_clearly() -> Result<()> {
    let seed = 1;
    let config = PpoConfig {
        n_steps: 32,
        batch_size: 64,
        epochs: 5,
        gamma: 0.98,
        gae_lambda: 0.8,
        adam: AdamConfig {
            lr: 2e-3,
            ..PpoConfig::new().adam
        },
        learning_rate_end: Some(0.0),
        clip_range_end: Some(0.0),
        schedule_steps: Some(100_000),
        ..PpoConfig::new()
    };
    let (mut collector, mut ppo) = cartpole_setup(config, seed, seed);
    let mut rollout = ppo.rollout_buffer(None)?;
    let mut best = 0.0f32;
    while collector.frames() < 20_000 {
        rollout.clear();
        let report = collector.collect_rollout(&mut rollout).expect("collect");
        if collector.stats().window_len() == 20 {
            best = best.max(report.mean_return.unwrap_or(0.0));
        }
        if best >= 150.0 {
            break;
        }
        let stats = ppo.update(&mut rollout)?;
        assert!(stats.policy_loss.is_finite() && stats.value_loss.is_finite());
        assert_eq!(stats.minibatches, 20);
        ppo.copy_policy_into(collector.policy_mut())?;
    }
    assert!(
        best >= 150.0,
        "mean return over 20 episodes only reached {best}"
    );
    Ok(())
}

/// Continuous actions, value clipping, entropy bonus, KL target and schedules together:
/// a few Pendulum updates run, give finite statistics and change the weights.
#[test]
fn gaussian_updates_with_every_option_on() -> Result<()> {
    use crate::policy::GaussianPolicy;
    use rl_envs::Pendulum;

    type Pend = GaussianPolicy;
    let config = PpoConfig {
        n_steps: 64,
        batch_size: 32,
        epochs: 2,
        clip_range_vf: Some(1.0),
        ent_coef: 0.01,
        target_kl: Some(0.5),
        learning_rate_end: Some(0.0),
        clip_range_end: Some(0.1),
        schedule_steps: Some(1024),
        recompute_old_log_probs: true,
        eval_minibatch: 50,
        ..PpoConfig::new()
    };
    let envs: Vec<Pendulum> = (0..2).map(Pendulum::new).collect();
    let config32 = PolicyConfig {
        hidden: vec![32, 32],
        ..PolicyConfig::new()
    };
    let policy = Pend::for_env(&envs[0], config32, 4)?;
    let before = policy.log_std().to_vec();
    let mut collector =
        SyncCollector::new(envs, policy.clone(), CollectorConfig::new(2)).expect("collector");
    let mut ppo = Ppo::new(policy, config, 2, 0)?;
    let mut rollout = ppo.rollout_buffer(None)?;
    for update in 1..=3u64 {
        rollout.clear();
        collector.collect_rollout(&mut rollout).expect("collect");
        let stats = ppo.update(&mut rollout)?;
        for value in [
            stats.policy_loss,
            stats.value_loss,
            stats.entropy,
            stats.approx_kl,
            stats.grad_norm,
        ] {
            assert!(value.is_finite(), "{stats:?}");
        }
        assert!(stats.minibatches >= 1);
        assert_eq!(ppo.env_steps(), update * 128);
        assert!(stats.clip_range < 0.2 && stats.learning_rate < 3e-4);
        ppo.copy_policy_into(collector.policy_mut())?;
    }
    assert_ne!(ppo.policy().log_std(), before.as_slice());
    assert!(ppo.memory_plan().grand_total() > 0);
    Ok(())
}

/// The weights and Adam moments as bits, for bit-identity checks (`f32`'s `==` would
/// equate 0.0 and -0.0).
fn bits(checkpoint: &Checkpoint<PpoState>) -> Vec<Vec<u32>> {
    let tensors = checkpoint.networks.iter().flat_map(|n| {
        let adam = n
            .optimizer
            .as_ref()
            .expect("trained networks have Adam states");
        [&n.params, &adam.first, &adam.second]
    });
    tensors
        .map(|t| t.iter().map(|v| v.to_bits()).collect())
        .collect()
}

/// Collects one rollout and updates on it; copies the new weights into the collector.
fn train_once(
    collector: &mut SyncCollector<CartPole, Cart>,
    ppo: &mut Ppo<Cart>,
    rollout: &mut RolloutBuffer,
) -> Result<UpdateStats> {
    rollout.clear();
    collector.collect_rollout(rollout).expect("collect");
    let stats = ppo.update(rollout)?;
    ppo.copy_policy_into(collector.policy_mut())?;
    Ok(stats)
}

/// A copy of a full CartPole rollout, through the public interface.
fn replay(source: &RolloutBuffer) -> RolloutBuffer {
    let (steps, n) = (source.steps(), source.envs());
    let mut copy = RolloutBuffer::new(source.schema().clone(), steps, n, None).expect("buffer");
    let f32s = |field| source.field::<f32>(field).expect("f32 column");
    let flags = |field| source.field::<rl_core::Flag>(field).expect("flag column");
    let actions = source.field::<u32>(Field::Action).expect("actions");
    let obs_len = f32s(Field::Obs).len() / (steps * n);
    for t in 0..steps {
        let rows = t * n..(t + 1) * n;
        copy.push_step(&[
            ColumnSlice::from(&f32s(Field::Obs)[t * n * obs_len..(t + 1) * n * obs_len]),
            (&actions[rows.clone()]).into(),
            (&f32s(Field::Reward)[rows.clone()]).into(),
            (&flags(Field::Terminated)[rows.clone()]).into(),
            (&flags(Field::Truncated)[rows.clone()]).into(),
            (&f32s(Field::LogProb)[rows.clone()]).into(),
            (&f32s(Field::Value)[rows.clone()]).into(),
            (&f32s(Field::FinalValue)[rows]).into(),
        ])
        .expect("push");
    }
    copy
}

#[test]
fn checkpoint_round_trip_through_a_file_resumes_bit_identically() -> Result<()> {
    round_trip(false, false)
}

#[test]
fn checkpoint_round_trip_with_observation_normalisation() -> Result<()> {
    round_trip(true, false)
}

#[test]
fn checkpoint_round_trip_with_reward_normalisation() -> Result<()> {
    round_trip(false, true)?;
    round_trip(true, true)
}

fn round_trip(normalize_obs: bool, normalize_reward: bool) -> Result<()> {
    let config = PpoConfig {
        normalize_obs: normalize_obs.then(ObsNormalization::default),
        normalize_reward: normalize_reward.then(RewardNormalization::default),
        learning_rate_end: Some(0.0),
        clip_range_end: Some(0.0),
        schedule_steps: Some(10_000),
        max_grad_norm: f32::INFINITY,
        ..small_config()
    };
    let (mut collector, mut ppo) = cartpole_setup(config, 3, 3);
    let mut rollout = ppo.rollout_buffer(None)?;
    for _ in 0..3 {
        train_once(&mut collector, &mut ppo, &mut rollout)?;
    }
    // Carry the collector's sampling generator, as the example does.
    let sampling = collector.policy().sampling_state();
    ppo.policy_mut().set_sampling_state(sampling);

    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("ppo.safetensors");
    std::fs::write(&path, ppo.to_bytes()?).unwrap();
    let saved = ppo.checkpoint().into_owned();
    assert_eq!(Checkpoint::<PpoState>::load(&path, CHECKPOINT_KIND)?, saved);
    assert_eq!(saved.state.env_steps, 3 * 256);
    assert_eq!(saved.state.updates, 3);
    assert_eq!(saved.state.config.max_grad_norm, f32::INFINITY);
    if normalize_obs {
        let normalizer = saved
            .state
            .obs_normalizer
            .as_ref()
            .expect("statistics saved");
        assert!((normalizer.count - (1e-4 + 3.0 * 256.0)).abs() < 1e-9);
        assert!(normalizer.var.iter().all(|&v| v != 1.0));
        // The collector acted with the same statistics.
        assert_eq!(
            collector.policy().obs_normalizer(),
            ppo.policy().obs_normalizer()
        );
    } else {
        assert!(saved.state.obs_normalizer.is_none());
    }
    if normalize_reward {
        let normalizer = saved
            .state
            .reward_normalizer
            .as_ref()
            .expect("reward statistics saved");
        // 3 rollouts of 32 steps, 8 returns merged per step.
        assert!((normalizer.count - (1e-4 + 3.0 * 32.0 * 8.0)).abs() < 1e-9);
        assert!(normalizer.var != 1.0 && normalizer.mean > 0.0);
        assert!(normalizer.returns.iter().any(|&r| r > 0.0));
        assert_eq!(normalizer.gamma, f64::from(config.gamma));
    } else {
        assert!(saved.state.reward_normalizer.is_none());
    }

    // A fresh trainer built with another seed (other weights, other generators).
    let (_, mut resumed) = cartpole_setup(config, 77, 77);
    assert_ne!(bits(&resumed.checkpoint()), bits(&saved));
    assert_eq!(resumed.policy().obs_normalizer().is_some(), normalize_obs);
    if normalize_obs {
        assert_ne!(
            resumed.policy().obs_normalizer(),
            saved.state.obs_normalizer.as_ref()
        );
    }
    assert_eq!(resumed.reward_normalizer().is_some(), normalize_reward);
    if normalize_reward {
        assert_ne!(
            resumed.reward_normalizer(),
            saved.state.reward_normalizer.as_ref()
        );
    }
    resumed.restore_bytes(&std::fs::read(&path).unwrap(), &path)?;
    assert_eq!(resumed.reward_normalizer(), ppo.reward_normalizer());
    let restored = resumed.checkpoint().into_owned();
    assert_eq!(bits(&restored), bits(&saved));
    assert_eq!(restored, saved);
    assert_eq!(resumed.env_steps(), ppo.env_steps());
    assert_eq!(resumed.updates(), ppo.updates());
    let steps = |p: &Ppo<Cart>| p.adams().iter().map(|a| a.steps()).collect::<Vec<_>>();
    assert_eq!(steps(&resumed), steps(&ppo));
    assert_eq!(
        resumed.policy().sampling_state(),
        collector.policy().sampling_state()
    );

    // One more update on the same rollout: bit-identical parameters, moments, statistics.
    rollout.clear();
    collector.collect_rollout(&mut rollout).expect("collect");
    let mut copy = replay(&rollout);
    let a = ppo.update(&mut rollout)?;
    let b = resumed.update(&mut copy)?;
    assert_eq!(ppo.advantages.returns(), resumed.advantages.returns());
    // The rollout keeps the raw rewards (CartPole's are all 1).
    assert!(
        rollout
            .field::<f32>(Field::Reward)?
            .iter()
            .all(|&r| r == 1.0)
    );
    if normalize_reward {
        // The returns were computed from scaled rewards.
        let max = ppo
            .advantages
            .returns()
            .iter()
            .fold(0.0f32, |m, &r| m.max(r));
        assert!(
            max < 20.0,
            "returns up to {max}: the rewards were not scaled"
        );
    }
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let (after_a, after_b) = (ppo.checkpoint(), resumed.checkpoint());
    assert_ne!(bits(&after_a), bits(&saved));
    assert_eq!(bits(&after_a), bits(&after_b));
    assert_eq!(after_a, after_b);
    Ok(())
}

#[test]
fn checkpoint_of_another_architecture_or_config_is_refused_and_changes_nothing() -> Result<()> {
    let (mut collector, mut ppo) = cartpole_setup(small_config(), 5, 0);
    let mut rollout = ppo.rollout_buffer(None)?;
    train_once(&mut collector, &mut ppo, &mut rollout)?;
    let saved = ppo.checkpoint().into_owned();

    let (mut target_collector, mut target) = cartpole_setup(small_config(), 6, 0);
    let mut target_rollout = target.rollout_buffer(None)?;
    train_once(&mut target_collector, &mut target, &mut target_rollout)?;
    train_once(&mut target_collector, &mut target, &mut target_rollout)?;
    let before = target.checkpoint().into_owned();
    let unchanged = |target: &Ppo<Cart>| {
        let now = target.checkpoint().into_owned();
        assert_eq!(bits(&now), bits(&before));
        assert_eq!(now, before);
    };

    // Another configuration: refused, naming the field.
    let mut other_config = saved.clone();
    other_config.state.config.epochs = 5;
    let err = target.restore(&other_config).unwrap_err();
    assert!(
        matches!(&err, Error::CheckpointMismatch { what, .. } if what == "ppo.epochs"),
        "{err:?}"
    );
    unchanged(&target);

    // Another architecture: other sizes, or the same shapes with another activation.
    let config32 = PolicyConfig {
        hidden: vec![32, 32],
        ..PolicyConfig::new()
    };
    let small = CategoricalPolicy::new(4, 2, config32, 1)?;
    let small_ckpt = Ppo::new(small, small_config(), ENVS, 0)?
        .checkpoint()
        .into_owned();
    let tanh_config = PolicyConfig {
        activation: rl_nn::Activation::Tanh,
        ..PolicyConfig::new()
    };
    let tanh = CategoricalPolicy::new(4, 2, tanh_config, 1)?;
    let tanh_ckpt = Ppo::new(tanh, small_config(), ENVS, 0)?
        .checkpoint()
        .into_owned();
    for other in [&small_ckpt, &tanh_ckpt] {
        let err = target.restore(other).unwrap_err();
        assert!(
            matches!(&err, Error::CheckpointMismatch { what, .. } if what == "policy architecture"),
            "{err:?}"
        );
        unchanged(&target);
    }

    // A checkpoint claiming the architecture but holding other weights or moments: the
    // shape checks refuse it before anything is written.
    let mut forged = small_ckpt.clone();
    forged.state.architecture = target.policy().architecture();
    let err = target.restore(&forged).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Nn {
                source: rl_nn::Error::ArchitectureMismatch { .. }
            }
        ),
        "{err:?}"
    );
    unchanged(&target);
    let mut forged = saved.clone();
    if let Some(adam) = &mut forged.networks[1].optimizer {
        adam.second.to_mut().pop();
    }
    let err = target.restore(&forged).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Nn {
                source: rl_nn::Error::StateMismatch { .. }
            }
        ),
        "{err:?}"
    );
    unchanged(&target);
    // A checkpoint missing a network.
    let mut forged = saved.clone();
    forged.networks.pop();
    assert!(target.restore(&forged).is_err());
    unchanged(&target);

    // The genuine checkpoint still restores afterwards.
    target.restore(&saved)?;
    assert_eq!(target.checkpoint(), saved);
    Ok(())
}

/// A short CartPole training loop as the example runs it: the final weights and the JSON
/// summary line.
fn short_training(seed: u64) -> (Vec<Vec<u32>>, String) {
    {
        let config = PpoConfig {
            learning_rate_end: Some(0.0),
            clip_range_end: Some(0.0),
            schedule_steps: Some(100_000),
            ..small_config()
        };
        let (mut collector, mut ppo) = cartpole_setup(config, seed, seed);
        let mut rollout = ppo.rollout_buffer(None).expect("rollout");
        while collector.frames() < 6 * 256 {
            train_once(&mut collector, &mut ppo, &mut rollout).expect("update");
        }
        let summary = serde_json::json!({
            "env_steps": collector.frames(),
            "mean_return": collector.stats().mean_return(),
            "window": collector.stats().window_len(),
            "episodes": collector.stats().episodes(),
            "updates": ppo.updates(),
        })
        .to_string();
        (bits(&ppo.checkpoint()), summary)
    }
}

#[test]
fn same_seed_trains_identically_and_another_seed_differs() {
    let (weights, summary) = short_training(11);
    let (again_weights, again_summary) = short_training(11);
    assert_eq!(summary, again_summary);
    assert!(weights == again_weights, "same seed, different weights");
    let (other_weights, other_summary) = short_training(12);
    eprintln!("seed 11: {summary}\nseed 12: {other_summary}");
    assert!(weights != other_weights, "another seed, same weights");
    assert_ne!(summary, other_summary);
}

#[test]
fn obs_normalizer_statistics_and_clipping() -> Result<()> {
    let rows: Vec<f32> = (0..40).map(|i| ((i * 37) % 11) as f32 - 3.0).collect();
    let mut whole = ObsNormalizer::new(2, 5.0)?;
    whole.update(&rows)?;
    let mut parts = ObsNormalizer::new(2, 5.0)?;
    parts.update(&rows[..14])?;
    parts.update(&rows[14..])?;
    for j in 0..2 {
        let column: Vec<f64> = rows
            .iter()
            .skip(j)
            .step_by(2)
            .map(|&x| f64::from(x))
            .collect();
        let mean = column.iter().sum::<f64>() / 20.0;
        let var = column.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 20.0;
        assert!((whole.mean[j] - mean).abs() < 1e-4, "{whole:?}");
        assert!(
            (whole.var[j] - var).abs() < 1e-4 * var.max(1.0),
            "{whole:?}"
        );
        assert!((parts.mean[j] - whole.mean[j]).abs() < 1e-12);
        assert!((parts.var[j] - whole.var[j]).abs() < 1e-12);
    }
    assert!((whole.count - 20.0001).abs() < 1e-12);
    assert!(matches!(
        whole.update(&[1.0; 3]),
        Err(Error::ShapeMismatch { .. })
    ));

    let hand = ObsNormalizer {
        mean: vec![1.0, 0.0],
        var: vec![4.0, 1.0],
        count: 10.0,
        clip: 5.0,
    };
    let mut out = Vec::new();
    hand.normalize_into(&[5.0, -100.0, 1.0, 100.0], &mut out);
    assert!((out[0] - 2.0).abs() < 1e-6 && out[1] == -5.0 && out[2] == 0.0 && out[3] == 5.0);
    assert!(ObsNormalizer::new(0, 5.0).is_err() && ObsNormalizer::new(2, 0.0).is_err());
    assert!(hand.check(3).is_err());

    // A policy given a normaliser of another length refuses it and keeps its own.
    let mut policy = Cart::new(4, 2, PolicyConfig::new(), 1)?;
    assert!(policy.set_obs_normalizer(Some(hand)).is_err());
    assert!(policy.obs_normalizer().is_none());
    Ok(())
}

#[test]
fn a_normalising_policy_equals_the_plain_one_on_normalised_inputs() -> Result<()> {
    let plain = Cart::new(4, 2, PolicyConfig::new(), 2)?;
    let mut normalizer = ObsNormalizer::new(4, 10.0)?;
    let obs: Vec<f32> = (0..64)
        .map(|i| (i as f32 * 0.37).sin() * 3.0 + 1.0)
        .collect();
    normalizer.update(&obs)?;
    let mut normalising = plain.clone();
    normalising.set_obs_normalizer(Some(normalizer.clone()))?;
    let mut normalised = Vec::new();
    normalizer.normalize_into(&obs, &mut normalised);
    let actions: Vec<u32> = (0..16).map(|i| i % 2).collect();
    let run = |policy: &Cart, obs: &[f32]| {
        let (mut lp, mut v) = (vec![0.0f32; 16], vec![0.0f32; 16]);
        policy
            .log_probs_and_values(obs, &actions, &mut lp, &mut v)
            .expect("evaluate");
        (lp, v)
    };
    assert_eq!(run(&normalising, &obs), run(&plain, &normalised));
    assert_ne!(run(&normalising, &obs), run(&plain, &obs));
    Ok(())
}

/// SB3's running return statistics on a hand-checked sequence: two environments,
/// gamma 0.5, rewards `[1, 2]` then `[1, 0]`, environment 1's episode ending at step 0.
/// Returns: step 0 `[1, 2]`; environment 1 resets; step 1 `[0.5 + 1, 0 + 0] = [1.5, 0]`.
/// The four returns have mean 1.125 and population variance
/// `(1 + 4 + 2.25 + 0) / 4 - 1.125^2 = 0.546875`; merged with the prior (count 1e-4,
/// mean 0, variance 1) that gives the figures below (Chan's merge is exact in reals, so
/// the per-step merges equal one merge of all four).
#[test]
fn reward_normalizer_statistics_with_resets() -> Result<()> {
    let mut normalizer = RewardNormalizer::new(2, 0.5)?;
    assert_eq!(normalizer.scale(), (1.0 / (1.0f64 + 1e-8).sqrt()) as f32);
    let done = [false, true, false, false];
    normalizer.update(&[1.0, 2.0, 1.0, 0.0], |row| done[row])?;
    assert_eq!(normalizer.returns, [1.5, 0.0]);
    let (prior, n) = (1e-4, 4.0);
    let total = prior + n;
    let mean = 1.125 * n / total;
    let var = (prior * 1.0 + 0.546875 * n + 1.125f64.powi(2) * prior * n / total) / total;
    assert!((normalizer.count - total).abs() < 1e-12);
    assert!(
        (normalizer.mean - mean).abs() < 1e-12,
        "{}",
        normalizer.mean
    );
    assert!((normalizer.var - var).abs() < 1e-12, "{}", normalizer.var);
    assert!((normalizer.var - 0.546875).abs() < 1e-3);
    assert_eq!(normalizer.scale(), (1.0 / (var + 1e-8).sqrt()) as f32);
    normalizer.check(2, 0.5)?;
    assert!(normalizer.check(3, 0.5).is_err());
    assert!(normalizer.check(2, 0.9).is_err());

    // Not a whole number of steps: refused, nothing changes.
    let before = normalizer.clone();
    assert!(matches!(
        normalizer.update(&[1.0, 2.0, 3.0], |_| false),
        Err(Error::ShapeMismatch { .. })
    ));
    assert_eq!(normalizer, before);
    // Returns carry over to the next call and the reset applies to the ending step only.
    normalizer.update(&[2.0, 4.0], |row| row == 0)?;
    assert_eq!(normalizer.returns, [0.0, 4.0]);
    assert!(RewardNormalizer::new(0, 0.5).is_err());
    assert!(RewardNormalizer::new(1, 1.5).is_err());
    Ok(())
}

/// CartPole with reward normalisation: a short run trains without error, the rewards
/// the update sees are scaled, and the statistics follow the rollouts.
#[test]
fn short_cartpole_run_with_reward_normalisation() -> Result<()> {
    let config = PpoConfig {
        normalize_reward: Some(RewardNormalization::default()),
        ..small_config()
    };
    let (mut collector, mut ppo) = cartpole_setup(config, 2, 2);
    let mut rollout = ppo.rollout_buffer(None)?;
    // An empty rollout is refused before the statistics change.
    assert!(matches!(
        ppo.update(&mut rollout),
        Err(Error::Config { .. })
    ));
    assert_eq!(ppo.reward_normalizer().map(|n| n.count), Some(1e-4));
    for update in 1..=20u32 {
        let stats = train_once(&mut collector, &mut ppo, &mut rollout)?;
        assert!(stats.policy_loss.is_finite() && stats.value_loss.is_finite());
        let normalizer = ppo.reward_normalizer().expect("statistics");
        let expected = 1e-4 + f64::from(update) * 32.0 * 8.0;
        assert!((normalizer.count - expected).abs() < 1e-9);
        let scale = normalizer.scale();
        assert!(scale.is_finite() && scale > 0.0);
        // CartPole pays 1 per step: the update's returns are those of rewards equal to
        // the scale (at most 10), while the rollout keeps the raw ones.
        assert!(
            rollout
                .field::<f32>(Field::Reward)?
                .iter()
                .all(|&r| r == 1.0)
        );
        let mut scaled = replay(&rollout);
        let mut reference = Advantages::new(scaled.rows());
        let rewards = vec![scale.min(10.0); scaled.rows()];
        scaled.clear();
        let source = replay(&rollout);
        for t in 0..source.steps() {
            let rows = t * ENVS..(t + 1) * ENVS;
            let column = |field| &source.field::<f32>(field).expect("f32")[rows.clone()];
            let flags = |field| &source.field::<rl_core::Flag>(field).expect("flags")[rows.clone()];
            scaled
                .push_step(&[
                    ColumnSlice::from(
                        &source.field::<f32>(Field::Obs)?[t * ENVS * 4..(t + 1) * ENVS * 4],
                    ),
                    (&source.field::<u32>(Field::Action)?[rows.clone()]).into(),
                    (&rewards[rows.clone()]).into(),
                    flags(Field::Terminated).into(),
                    flags(Field::Truncated).into(),
                    column(Field::LogProb).into(),
                    column(Field::Value).into(),
                    column(Field::FinalValue).into(),
                ])
                .expect("push");
        }
        reference.compute(
            &scaled,
            config.gamma,
            config.gae_lambda,
            RewardTransform::IDENTITY,
        )?;
        assert_eq!(reference.returns(), ppo.advantages.returns());
    }
    // Without the option the returns are those of the raw rewards.
    let (mut collector, mut plain) = cartpole_setup(small_config(), 2, 0);
    rollout.clear();
    collector.collect_rollout(&mut rollout).expect("collect");
    plain.update(&mut rollout)?;
    assert!(plain.reward_normalizer().is_none());
    let mut reference = Advantages::new(rollout.rows());
    let config = small_config();
    reference.compute(
        &rollout,
        config.gamma,
        config.gae_lambda,
        RewardTransform::IDENTITY,
    )?;
    assert_eq!(reference.returns(), plain.advantages.returns());
    Ok(())
}

/// A full PPO update (minibatch gathers, training passes, losses, backward passes,
/// clipping, Adam) allocates nothing after the first one, for both policies, with every
/// option that adds work turned on.
#[test]
fn a_full_update_allocates_nothing_after_the_first() -> Result<()> {
    let config = PpoConfig {
        recompute_old_log_probs: true,
        eval_minibatch: 100,
        clip_range_vf: Some(1.0),
        ent_coef: 0.01,
        normalize_obs: Some(ObsNormalization::default()),
        normalize_reward: Some(RewardNormalization::default()),
        learning_rate_end: Some(0.0),
        schedule_steps: Some(100_000),
        ..small_config()
    };
    let (mut collector, mut ppo) = cartpole_setup(config, 9, 0);
    let mut rollout = ppo.rollout_buffer(None)?;
    train_once(&mut collector, &mut ppo, &mut rollout)?;
    rollout.clear();
    collector.collect_rollout(&mut rollout).expect("collect");
    let (stats, alloc) = rl_testkit::measure(|| ppo.update(&mut rollout));
    assert_eq!(stats?.minibatches, 16);
    assert_eq!(alloc.allocations, 0, "{alloc:?}");

    use crate::policy::GaussianPolicy;
    use rl_envs::Pendulum;
    let envs: Vec<Pendulum> = (0..2).map(Pendulum::new).collect();
    let policy = GaussianPolicy::for_env(&envs[0], PolicyConfig::new(), 4)?;
    let mut collector =
        SyncCollector::new(envs, policy.clone(), CollectorConfig::new(2)).expect("collector");
    let config = PpoConfig {
        n_steps: 64,
        batch_size: 32,
        epochs: 2,
        ..config
    };
    let mut ppo = Ppo::new(policy, config, 2, 0)?;
    ppo.copy_policy_into(collector.policy_mut())?;
    let mut rollout = ppo.rollout_buffer(None)?;
    collector.collect_rollout(&mut rollout).expect("collect");
    ppo.update(&mut rollout)?;
    let (stats, alloc) = rl_testkit::measure(|| ppo.update(&mut rollout));
    assert_eq!(stats?.minibatches, 8);
    assert_eq!(alloc.allocations, 0, "{alloc:?}");
    Ok(())
}

/// A policy's weights written with `rl_nn::save_weights` read back into a fresh policy;
/// a file of another architecture is refused with a typed error and changes nothing.
#[test]
fn policy_weights_round_trip_through_safetensors_and_other_architectures_are_refused() -> Result<()>
{
    let policy = Cart::new(4, 2, PolicyConfig::new(), 1)?;
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("policy.safetensors");
    let networks: Vec<(&str, &dyn rl_nn::Weights)> = policy
        .network_names()
        .iter()
        .enumerate()
        .map(|(i, name)| (*name, policy.network(i).expect("network")))
        .collect();
    rl_nn::save_weights(&path, &networks)?;
    let mut fresh = Cart::new(4, 2, PolicyConfig::new(), 2)?;
    for (i, name) in ["actor", "critic"].into_iter().enumerate() {
        assert_ne!(
            fresh.network(i).expect("network").params(),
            policy.network(i).expect("network").params()
        );
        rl_nn::load_weights(&path, name, fresh.network_mut(i).expect("network"))?;
        assert_eq!(
            fresh.network(i).expect("network").params(),
            policy.network(i).expect("network").params()
        );
    }
    let obs = [0.1f32, -0.2, 0.03, 0.4];
    let (mut a, mut b) = ([0.0f32; 1], [0.0f32; 1]);
    let (mut va, mut vb) = ([0.0f32; 1], [0.0f32; 1]);
    policy.log_probs_and_values(&obs, &[1], &mut a, &mut va)?;
    fresh.log_probs_and_values(&obs, &[1], &mut b, &mut vb)?;
    assert_eq!((a, va), (b, vb));

    for config in [
        PolicyConfig {
            hidden: vec![32, 32],
            ..PolicyConfig::new()
        },
        PolicyConfig {
            activation: rl_nn::Activation::Tanh,
            ..PolicyConfig::new()
        },
    ] {
        let mut other = Cart::new(4, 2, config, 3)?;
        let before = other.network(0).expect("actor").params().to_vec();
        let err =
            rl_nn::load_weights(&path, "actor", other.network_mut(0).expect("actor")).unwrap_err();
        assert!(
            matches!(err, rl_nn::Error::ArchitectureMismatch { .. }),
            "{err}"
        );
        assert_eq!(other.network(0).expect("actor").params(), before.as_slice());
    }
    Ok(())
}
