#![allow(clippy::unwrap_used, reason = "tests")]

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{BoxSpace, DType, Flag, Space};
use rl_envs::Pendulum;
use rl_nn::{AdamConfig, Weights};
use rl_storage::{Batch, ColumnSlice, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};

use super::*;
use crate::dqn::tests::{mlp64, to64};
use crate::learner::{Learner as _, OffPolicyLearner as _};
use crate::predict::Predict;
use crate::sac::tests::assert_matches_finite_differences;

fn box_space(low: f32, high: f32, len: usize) -> Space {
    Space::Box(BoxSpace::uniform(low, high, &[len], DType::F32).unwrap())
}

fn small_config(batch: usize) -> Td3Config {
    Td3Config {
        hidden: vec![16, 16],
        batch_size: batch,
        ..Td3Config::sb3()
    }
}

/// A batch of `rows` random transitions (actions in `[-2, 2]`, every third row
/// terminated, or all of them).
fn random_batch(td3: &Td3, rows: usize, seed: u64, all_terminated: bool) -> Batch {
    let schema = td3.blueprint().replay_schema.clone();
    let (obs_dim, act_dim) = (td3.obs_dim, td3.act_dim);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), rows, None).unwrap(),
        Uniform::new(seed),
    );
    for i in 0..rows {
        let mut uniform =
            |n: usize, r: f32| -> Vec<f32> { (0..n).map(|_| rng.random_range(-r..r)).collect() };
        let (obs, next) = (uniform(obs_dim, 1.0), uniform(obs_dim, 1.0));
        let (action, reward) = (uniform(act_dim, 2.0), uniform(1, 1.0));
        replay
            .push(&[
                ColumnSlice::F32(&obs),
                ColumnSlice::F32(&action),
                ColumnSlice::F32(&reward),
                ColumnSlice::Bool(&[Flag::new(all_terminated || i % 3 == 0)]),
                ColumnSlice::Bool(&[Flag::new(false)]),
                ColumnSlice::F32(&next),
            ])
            .unwrap();
    }
    let mut batch = Batch::new(&schema, rows).unwrap();
    replay
        .gather(&(0..rows).collect::<Vec<_>>(), &mut batch)
        .unwrap();
    batch
}

/// A learner with 6-5 networks on 3 observations and 2 actions in `[-1, 1]`.
fn tiny(rows: usize, seed: u64) -> Td3 {
    let config = Td3Config {
        hidden: vec![6, 5],
        batch_size: rows,
        ..Td3Config::sb3()
    };
    Td3::new(
        &box_space(-1.0, 1.0, 3),
        &box_space(-1.0, 1.0, 2),
        config,
        seed,
    )
    .unwrap()
}

#[test]
fn critic_loss_gradients_match_f64_finite_differences() {
    // Every row terminates, so the targets are the rewards and the loss is
    // sum_i mean((Q_i(s, a) - r)^2) over the stored actions.
    let rows = 8;
    let mut td3 = tiny(rows, 4);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(12);
    let mut uniform =
        |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-1.0..1.0)).collect() };
    let (obs, next_obs, actions) = (uniform(rows * 3), uniform(rows * 3), uniform(rows * 2));
    let rewards: Vec<f32> = uniform(rows).iter().map(|r| 2.0 * r).collect();
    let terminated = vec![Flag::new(true); rows];
    let transitions = Transitions {
        rows,
        obs: &obs,
        actions: &actions,
        rewards: &rewards,
        terminated: &terminated,
        next_obs: &next_obs,
        positions: None,
    };
    td3.critic_gradients(&transitions).unwrap();
    let spec = td3.critics.online[0].spec().clone();
    for i in 0..2 {
        let analytic = td3.critics.grads[i].clone();
        let loss = |params: &[f64]| -> f64 {
            (0..rows)
                .map(|b| {
                    let mut input = to64(&obs[b * 3..(b + 1) * 3]);
                    input.extend(to64(&actions[b * 2..(b + 1) * 2]));
                    let err = mlp64(&spec, params, &input).0[0] - f64::from(rewards[b]);
                    err * err / rows as f64
                })
                .sum()
        };
        let params = to64(td3.critics.online[i].params());
        assert_matches_finite_differences(&params, &analytic, loss);
    }
}

#[test]
fn actor_loss_gradients_match_f64_finite_differences() {
    // -mean_b Q1(s_b, tanh(actor(s_b))) as a function of the actor's parameters.
    let rows = 6;
    let mut td3 = tiny(rows, 5);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    let obs: Vec<f32> = (0..rows * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
    td3.actor_gradients(&obs, rows).unwrap();
    let analytic = td3.actor_grads.clone();
    let (actor_spec, critic_spec) = (
        td3.actor.spec().clone(),
        td3.critics.online[0].spec().clone(),
    );
    let critic = to64(td3.critics.online[0].params());
    let loss = |params: &[f64]| -> f64 {
        -(0..rows)
            .map(|b| {
                let mut input = to64(&obs[b * 3..(b + 1) * 3]);
                let (out, _) = mlp64(&actor_spec, params, &input);
                input.extend(out.iter().map(|u| u.tanh()));
                mlp64(&critic_spec, &critic, &input).0[0]
            })
            .sum::<f64>()
            / rows as f64
    };
    assert_matches_finite_differences(&to64(td3.actor.params()), &analytic, loss);
}

#[test]
fn the_actor_and_the_targets_move_only_every_policy_delay_steps() {
    let mut td3 = Td3::new(
        &box_space(-1.0, 1.0, 3),
        &box_space(-2.0, 2.0, 1),
        Td3Config {
            policy_delay: 3,
            ..small_config(8)
        },
        0,
    )
    .unwrap();
    let batch = random_batch(&td3, 8, 1, false);
    let snapshot = |td3: &Td3| {
        (
            td3.actor.params().to_vec(),
            td3.actor_target.params().to_vec(),
            td3.critics.target[0].params().to_vec(),
            td3.critics.online[0].params().to_vec(),
        )
    };
    for step in 1..=6u64 {
        let before = snapshot(&td3);
        let stats = td3.update(&batch).unwrap();
        let after = snapshot(&td3);
        let delayed = step % 3 == 0;
        assert_eq!(stats.actor_updated, delayed, "step {step}");
        assert_ne!(before.3, after.3, "the critics step every update");
        if delayed {
            assert_ne!(before.0, after.0, "step {step}: actor");
            // Targets move a tau fraction towards the online networks.
            let tau = td3.config.tau;
            for ((t, o), n) in after.1.iter().zip(&before.1).zip(&after.0) {
                assert!((t - (o + tau * (n - o))).abs() < 1e-6);
            }
            assert_ne!(before.2, after.2, "step {step}: critic target");
        } else {
            assert_eq!(before.0, after.0, "step {step}: actor");
            assert_eq!(before.1, after.1, "step {step}: actor target");
            assert_eq!(before.2, after.2, "step {step}: critic target");
        }
    }
    assert_eq!(td3.updates(), 6);
}

#[test]
fn target_smoothing_noise_is_clipped() {
    let mut td3 = Td3::new(
        &box_space(-1.0, 1.0, 3),
        &box_space(-2.0, 2.0, 2),
        Td3Config {
            policy_noise: 1.0,
            noise_clip: 0.3,
            ..small_config(64)
        },
        0,
    )
    .unwrap();
    let batch = random_batch(&td3, 64, 2, false);
    td3.update(&batch).unwrap();
    let noise = &td3.scratch.smoothing;
    assert!(noise.iter().all(|e| e.abs() <= 0.3), "{noise:?}");
    assert!(noise.iter().filter(|e| e.abs() == 0.3).count() > noise.len() / 4);
    assert!(noise.iter().any(|e| e.abs() < 0.3));
    // The smoothed target actions stay in the box.
    assert!(td3.scratch.next_actions.iter().all(|a| a.abs() <= 1.0));
}

#[test]
fn acting_adds_clipped_exploration_noise_only_when_sampling() {
    let mut td3 = Td3::new(
        &box_space(-1.0, 1.0, 3),
        &box_space(-2.0, 2.0, 1),
        small_config(8),
        0,
    )
    .unwrap();
    let obs = vec![0.3f32; 3 * 200];
    let (mut sampled, mut logp) = (vec![0.0f32; 200], vec![1.0f32; 200]);
    td3.act_rows(&obs, &mut sampled, &mut logp).unwrap();
    td3.set_mode(Mode::Deterministic);
    let mut exact = vec![0.0f32; 200];
    td3.act_rows(&obs, &mut exact, &mut logp).unwrap();
    assert!(exact.iter().all(|&a| a == exact[0]));
    assert!(logp.iter().all(|&l| l == 0.0));
    // Noise of 0.1 in [-1, 1] units is 0.2 in the box [-2, 2].
    let deviations: Vec<f32> = sampled.iter().map(|a| a - exact[0]).collect();
    let std = (deviations.iter().map(|d| d * d).sum::<f32>() / 200.0).sqrt();
    assert!((std - 0.2).abs() < 0.05, "std {std}");
    assert!(sampled.iter().all(|a| a.abs() <= 2.0));
    // The actor acts as the learner does when sampling, with its own noise.
    let mut actor = td3.actor().unwrap();
    let mut from_actor = vec![0.0f32; 200];
    let mut states = vec![(); 200];
    Policy::act(
        &mut actor,
        &obs,
        &mut states,
        ActOutput {
            actions: &mut from_actor,
            log_probs: &mut logp,
            values: &mut [],
        },
    )
    .unwrap();
    let spread = from_actor.iter().map(|a| (a - exact[0]).abs()).sum::<f32>() / 200.0;
    assert!(spread > 0.05 && spread < 0.4, "{spread}");
}

#[test]
fn checkpoints_resume_bit_for_bit_and_refuse_other_runs() {
    let config = small_config(8);
    let (obs, act) = (box_space(-1.0, 1.0, 3), box_space(-2.0, 2.0, 1));
    let mut td3 = Td3::new(&obs, &act, config.clone(), 0).unwrap();
    let batch = random_batch(&td3, 8, 2, false);
    for _ in 0..3 {
        td3.update(&batch).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("td3.safetensors");
    td3.checkpoint().save(&path).unwrap();
    assert!(matches!(
        Checkpoint::<Td3State>::load(&path, "sac"),
        Err(rl_nn::Error::CheckpointKind { .. })
    ));
    let mut resumed = Td3::new(&obs, &act, config.clone(), 99).unwrap();
    resumed
        .restore(&Checkpoint::load(&path, CHECKPOINT_KIND).unwrap())
        .unwrap();
    // The fourth update moves the actor and the targets: all must agree to the bit.
    for _ in 0..2 {
        let (a, b) = (td3.update(&batch).unwrap(), resumed.update(&batch).unwrap());
        assert_eq!(a, b);
    }
    assert_eq!(td3.actor.params(), resumed.actor.params());
    assert_eq!(td3.actor_target.params(), resumed.actor_target.params());
    assert_eq!(
        td3.critics.target[1].params(),
        resumed.critics.target[1].params()
    );
    assert_eq!(resumed.updates(), 5);

    // Another architecture is refused and changes nothing.
    let mut other = Td3::new(
        &obs,
        &act,
        Td3Config {
            hidden: vec![32, 16],
            ..config.clone()
        },
        0,
    )
    .unwrap();
    let untouched = other.actor.params().to_vec();
    let result = other.restore(&td3.checkpoint());
    assert!(
        matches!(&result, Err(Error::CheckpointMismatch { what, .. }) if what == "TD3 architecture"),
        "{result:?}"
    );
    assert_eq!(other.actor.params(), &untouched[..]);
    // Another smoothing setting is refused by name; another learning rate is taken.
    let mut other = Td3::new(
        &obs,
        &act,
        Td3Config {
            noise_clip: 0.1,
            ..config.clone()
        },
        0,
    )
    .unwrap();
    let result = other.restore(&td3.checkpoint());
    assert!(
        matches!(&result, Err(Error::CheckpointMismatch { what, .. }) if what == "td3.noise_clip"),
        "{result:?}"
    );
    let mut slower = Td3::new(
        &obs,
        &act,
        Td3Config {
            adam: AdamConfig {
                lr: 1e-5,
                ..config.adam
            },
            ..config
        },
        0,
    )
    .unwrap();
    slower.restore(&td3.checkpoint()).unwrap();
    assert_eq!(slower.actor_adam.lr(), 1e-5);
    assert!(slower.critics.adam.iter().all(|a| a.lr() == 1e-5));
}

#[test]
fn invalid_configurations_are_typed_errors() {
    let (obs, act) = (box_space(-1.0, 1.0, 3), box_space(-2.0, 2.0, 1));
    for (bad, key) in [
        (
            Td3Config {
                policy_delay: 0,
                ..Td3Config::sb3()
            },
            "td3.policy_delay",
        ),
        (
            Td3Config {
                noise_clip: -1.0,
                ..Td3Config::sb3()
            },
            "td3.noise_clip",
        ),
        (
            Td3Config {
                tau: 0.0,
                ..Td3Config::sb3()
            },
            "td3.tau",
        ),
    ] {
        let result = Td3::new(&obs, &act, bad, 0);
        assert!(
            matches!(&result, Err(e) if e.to_string().contains(key)),
            "{key}: {result:?}"
        );
    }
    let unbounded = box_space(f32::NEG_INFINITY, f32::INFINITY, 1);
    assert!(matches!(
        Td3::new(&obs, &unbounded, Td3Config::sb3(), 0),
        Err(Error::SpaceMismatch { .. })
    ));
}

/// A full update with Stable-Baselines3's sizes (400-300 networks, batch 256), on both
/// a critic-only and an actor step, and acting, allocate nothing after the first call.
#[test]
fn updates_and_acting_allocate_nothing_after_the_first() {
    let (obs, act) = (box_space(-1.0, 1.0, 3), box_space(-2.0, 2.0, 1));
    let (mut td3, built) =
        rl_testkit::measure(|| Td3::new(&obs, &act, Td3Config::sb3(), 0).unwrap());
    // The plan states what construction allocates.
    let retained = (built.allocated_bytes - built.freed_bytes) as f64;
    let planned = td3.memory_plan().total(rl_core::Location::Ram) as f64;
    assert!(
        (planned - retained).abs() <= 0.02 * retained,
        "planned {planned} vs allocated {retained}"
    );
    let batch = random_batch(&td3, 256, 7, false);
    td3.update(&batch).unwrap();
    td3.update(&batch).unwrap();
    for actor_step in [false, true] {
        let (stats, alloc) = rl_testkit::measure(|| td3.update(&batch));
        assert_eq!(stats.unwrap().actor_updated, actor_step);
        assert_eq!(alloc.allocations, 0, "{alloc:?}");
    }
    let obs_rows = vec![0.1f32; 8 * 3];
    let (mut actions, mut log_probs) = (vec![0.0f32; 8], vec![0.0f32; 8]);
    td3.act_rows(&obs_rows, &mut actions, &mut log_probs)
        .unwrap();
    let (result, alloc) =
        rl_testkit::measure(|| td3.act_rows(&obs_rows, &mut actions, &mut log_probs));
    result.unwrap();
    assert_eq!(alloc.allocations, 0, "{alloc:?}");
    let mut actor = td3.actor().unwrap();
    let mut states = vec![(); 8];
    let (result, alloc) = rl_testkit::measure(|| {
        Policy::act(
            &mut actor,
            &obs_rows,
            &mut states,
            ActOutput {
                actions: &mut actions,
                log_probs: &mut log_probs,
                values: &mut [],
            },
        )
    });
    result.unwrap();
    assert_eq!(alloc.allocations, 0, "{alloc:?}");
    let (result, alloc) = rl_testkit::measure(|| td3.refresh_actor(&mut actor));
    result.unwrap();
    assert_eq!(alloc.allocations, 0, "{alloc:?}");
}

#[test]
fn td3_learns_pendulum() {
    let config = Td3Config {
        hidden: vec![64, 64],
        batch_size: 128,
        ..Td3Config::sb3()
    };
    let td3 = Td3::for_env(&Pendulum::new(0), config, 0).unwrap();
    let schema = td3.blueprint().replay_schema.clone();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), 20_000, None).unwrap(),
        Uniform::new(0),
    );
    let mut batch = Batch::new(&schema, td3.batch_size()).unwrap();
    let mut collector = rl_collect::SyncCollector::new(
        vec![Pendulum::new(1)],
        td3,
        rl_collect::CollectorConfig {
            random_frames: 1_000,
            stats_window: 5,
            ..rl_collect::CollectorConfig::new(1)
        },
    )
    .unwrap();
    let steps = 7_000;
    while collector.frames() < steps {
        collector.collect(&mut replay).unwrap();
        if collector.frames() > 1_000 {
            replay.sample(&mut batch).unwrap();
            collector.policy_mut().update(&batch).unwrap();
        }
    }
    let mean = collector.stats().mean_return().unwrap();
    assert!(mean > -400.0, "mean return of the last 5 episodes {mean}");
}
