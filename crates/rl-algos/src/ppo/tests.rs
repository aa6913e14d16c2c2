//! Tests of PPO: the clipped surrogate on hand-computed cases, configuration checks,
//! schedules, the two sources of old log-probabilities, target-KL early stop, and a short
//! CartPole run that must beat the random policy clearly.

use dfdx::prelude::{Backward, Cpu, Tensor, TensorFromVec};
use dfdx::tensor::Trace;
use rl_collect::{CollectorConfig, SyncCollector};
use rl_envs::CartPole;

use super::*;
use crate::policy::{CategoricalPolicy, PolicyConfig};

/// Loss and gradient with respect to the log-probs of `clipped_surrogate` for ratios
/// `ratios` (old log-probs 0).
fn surrogate(ratios: &[f32], advantages: &[f32], clip: f32) -> (f32, Vec<f32>) {
    let dev = Cpu::default();
    let log_probs: Tensor<(usize,), f32, Cpu> =
        dev.tensor_from_vec(ratios.iter().map(|r| r.ln()).collect(), (ratios.len(),));
    let old = vec![0.0; ratios.len()];
    let loss =
        clipped_surrogate(log_probs.leaky_trace(), &old, advantages, clip).expect("same rows");
    let value = scalar(&loss);
    let grads = loss.backward();
    (value, grads.get(&log_probs).as_vec())
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
fn clipped_surrogate_checks_rows() {
    let dev = Cpu::default();
    let log_probs: Tensor<(usize,), f32, Cpu> = dev.tensor_from_vec(vec![0.0; 3], (3,));
    let err = clipped_surrogate(log_probs.leaky_trace(), &[0.0; 2], &[0.0; 3], 0.2);
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
    PpoConfig::new().validate().expect("defaults are valid");
    let bad: [(&str, PpoConfig); 10] = [
        (
            "ppo.n_steps",
            PpoConfig {
                n_steps: 0,
                ..PpoConfig::new()
            },
        ),
        (
            "ppo.minibatch_size",
            PpoConfig {
                minibatch_size: 4096,
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
            "ppo.learning_rate",
            PpoConfig {
                learning_rate: -1e-3,
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
        match config.validate() {
            Err(Error::Config { what, .. }) => assert_eq!(what, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn linear_schedules() {
    let config = PpoConfig {
        learning_rate: 1e-3,
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

type Cart = CategoricalPolicy<4, 64, 2>;

fn cartpole_setup(config: PpoConfig, seed: u64) -> (SyncCollector<CartPole, Cart>, Ppo<Cart>) {
    let envs: Vec<CartPole> = (0..config.n_envs as u64)
        .map(|i| CartPole::new(seed * 1000 + i))
        .collect();
    let policy = Cart::for_env(&envs[0], PolicyConfig::new(), seed).expect("policy");
    let collector = SyncCollector::new(
        envs,
        policy.clone(),
        CollectorConfig {
            seed,
            stats_window: 20,
            ..CollectorConfig::new(config.n_envs)
        },
    )
    .expect("collector");
    (collector, Ppo::new(policy, config).expect("ppo"))
}

fn small_config() -> PpoConfig {
    PpoConfig {
        n_steps: 32,
        n_envs: 8,
        minibatch_size: 64,
        epochs: 4,
        gamma: 0.98,
        gae_lambda: 0.8,
        learning_rate: 1e-3,
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
        let (mut collector, mut ppo) = cartpole_setup(config, 3);
        let mut rollout = RolloutBuffer::new(ppo.rollout_config())?;
        collector.collect_rollout(&mut rollout).expect("collect");
        // Recorded log-probs equal the recomputed ones up to rounding.
        let mut lp = vec![0.0; rollout.rows()];
        let mut v = vec![0.0; rollout.rows()];
        let actions = Cart::stored_actions(rollout.actions())?;
        ppo.policy()
            .evaluate_minibatched(rollout.obs(), actions, 100, &mut lp, &mut v)?;
        for (a, b) in lp.iter().zip(rollout.log_probs()) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
        stats.push(ppo.update(&rollout)?);
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
    let (mut collector, mut ppo) = cartpole_setup(config, 5);
    let mut rollout = RolloutBuffer::new(ppo.rollout_config())?;
    collector.collect_rollout(&mut rollout).expect("collect");
    let stats = ppo.update(&rollout)?;
    assert!(stats.early_stopped, "{stats:?}");
    // The first minibatch has (almost) zero KL and steps; the second sees the change.
    assert!(
        stats.minibatches >= 1 && stats.minibatches < 16,
        "{stats:?}"
    );

    let other = RolloutBuffer::new(RolloutConfig {
        steps: 16,
        ..ppo.rollout_config()
    })?;
    assert!(matches!(ppo.update(&other), Err(Error::Config { .. })));
    let empty = RolloutBuffer::new(ppo.rollout_config())?;
    assert!(matches!(ppo.update(&empty), Err(Error::Storage { .. })));
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
        n_envs: 8,
        minibatch_size: 64,
        epochs: 5,
        gamma: 0.98,
        gae_lambda: 0.8,
        learning_rate: 2e-3,
        learning_rate_end: Some(0.0),
        clip_range_end: Some(0.0),
        schedule_steps: Some(100_000),
        seed,
        ..PpoConfig::new()
    };
    let (mut collector, mut ppo) = cartpole_setup(config, seed);
    let mut rollout = RolloutBuffer::new(ppo.rollout_config())?;
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
        let stats = ppo.update(&rollout)?;
        assert!(stats.policy_loss.is_finite() && stats.value_loss.is_finite());
        assert_eq!(stats.minibatches, 20);
        *collector.policy_mut().net_mut() = ppo.policy().net().clone();
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

    type Pend = GaussianPolicy<3, 32, 1>;
    let config = PpoConfig {
        n_steps: 64,
        n_envs: 2,
        minibatch_size: 32,
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
    let policy = Pend::for_env(&envs[0], PolicyConfig::new(), 4)?;
    let before = policy.log_std();
    let mut collector =
        SyncCollector::new(envs, policy.clone(), CollectorConfig::new(2)).expect("collector");
    let mut ppo = Ppo::new(policy, config)?;
    let mut rollout = RolloutBuffer::new(ppo.rollout_config())?;
    for update in 1..=3u64 {
        rollout.clear();
        collector.collect_rollout(&mut rollout).expect("collect");
        let stats = ppo.update(&rollout)?;
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
        *collector.policy_mut().net_mut() = ppo.policy().net().clone();
    }
    assert_ne!(ppo.policy().log_std(), before);
    assert!(ppo.memory_plan().grand_total() > 0);
    Ok(())
}
