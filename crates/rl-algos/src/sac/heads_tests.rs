//! Bootstrap heads on discrete SAC's critics (`heads.rs`): one head is the plain
//! learner bit for bit, the loss's gradient matches an f64 model with masks, a head no
//! row trains stays put, checkpoints resume and refuse other heads, updates allocate
//! nothing, the plan covers what is built, bad settings are typed errors.

#![allow(clippy::unwrap_used, reason = "tests")]

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Flag, Space};
use rl_nn::Weights;

use super::tests::{assert_matches_finite_differences, box_space, random_batch};
use super::*;
use crate::dqn::EnsembleConfig;
use crate::dqn::tests::{mlp64, to64};
#[allow(unused_imports, reason = "the learner traits, for their methods")]
use crate::learner::{Learner as _, OffPolicyLearner as _};

fn ensemble(heads: u32, mask_probability: f64) -> Option<EnsembleConfig> {
    Some(EnsembleConfig {
        heads,
        mask_probability,
        prior_scale: 0.0,
    })
}

fn learner(heads: Option<EnsembleConfig>, rows: usize, obs_dim: usize, n: u32) -> DiscreteSac {
    let config = SacConfig {
        hidden: vec![6, 5],
        batch_size: rows,
        ensemble: heads,
        ..SacConfig::sb3()
    };
    DiscreteSac::with_index(
        &box_space(-1.0, 1.0, obs_dim),
        &Space::discrete(n).unwrap(),
        config,
        3,
    )
    .unwrap()
}

fn params(sac: &DiscreteSac) -> Vec<Vec<f32>> {
    let c = &sac.core;
    vec![
        c.actor.params().to_vec(),
        c.critics.online[0].params().to_vec(),
        c.critics.online[1].params().to_vec(),
        c.critics.target[0].params().to_vec(),
        c.critics.target[1].params().to_vec(),
    ]
}

#[test]
fn one_critic_head_is_the_plain_learner_bit_for_bit() {
    let mut plain = learner(None, 16, 3, 5);
    let mut one = learner(ensemble(1, 1.0), 16, 3, 5);
    let schema = plain.replay_schema().unwrap();
    for seed in 0..5 {
        let batch = random_batch(&schema, 3, Err(5), 16, seed);
        let a = plain.update(&batch).unwrap();
        let b = one.update(&batch).unwrap();
        assert_eq!(a, b);
    }
    assert_eq!(params(&plain), params(&one));
}

#[test]
fn critic_head_observation_gradients_match_finite_differences() {
    // d (mean over heads of each head's masked critic loss, both critics) / d obs, what
    // a summarizer in front trains on. Rows terminate, so the targets are the rewards.
    let (rows, obs_dim, n, heads) = (8, 3, 4u32, 3usize);
    let config = ensemble(heads as u32, 0.5).unwrap();
    let mut sac = learner(Some(config), rows, obs_dim, n);
    sac.enable_obs_grads().unwrap();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
    let mut uniform = |len: usize, scale: f32| -> Vec<f32> {
        (0..len)
            .map(|_| scale * rng.random_range(-1.0..1.0))
            .collect()
    };
    let (obs, next_obs) = (uniform(rows * obs_dim, 1.0), uniform(rows * obs_dim, 1.0));
    let rewards = uniform(rows, 2.0);
    let actions: Vec<u32> = (0..rows as u32).map(|b| (b * 3 + 1) % n).collect();
    let terminated = vec![Flag::new(true); rows];
    let positions: Vec<usize> = (100..100 + rows).collect();
    let mut masks = vec![0i64; rows];
    crate::dqn::draw_masks(config, 3, 0, Some(&positions), &mut masks).unwrap();
    assert!(
        masks.iter().any(|&m| m != (1 << heads) - 1) && masks.iter().any(|&m| m != 0),
        "masks that leave some heads out of some rows"
    );
    let spec = sac.core.critics.online[0].spec().clone();
    let critics: Vec<Vec<f64>> = (0..2)
        .map(|i| to64(sac.core.critics.online[i].params()))
        .collect();
    let loss = |x: &[f64]| -> (f64, Vec<f64>) {
        let (mut loss, mut pre) = (0.0, Vec::new());
        for params in &critics {
            for b in 0..rows {
                let (q, p) = mlp64(&spec, params, &x[b * obs_dim..(b + 1) * obs_dim]);
                pre.extend(p);
                for k in 0..heads {
                    if (masks[b] >> k) & 1 == 1 {
                        let err = q[k * n as usize + actions[b] as usize] - f64::from(rewards[b]);
                        loss += 0.5 * err * err / rows as f64 / heads as f64;
                    }
                }
            }
        }
        (loss, pre)
    };
    let x = to64(&obs);
    let (_, pre) = loss(&x);
    assert!(
        pre.iter().all(|z| z.abs() > 1e-4),
        "a pre-activation sits at a ReLU kink: pick another seed"
    );
    let mut analytic = vec![0.0f32; rows * obs_dim];
    let transitions = Transitions {
        rows,
        obs: &obs,
        actions: &actions,
        rewards: &rewards,
        terminated: &terminated,
        next_obs: &next_obs,
        positions: Some(&positions),
    };
    let stats = sac
        .update_transitions(transitions, Some(&mut analytic))
        .unwrap();
    assert!((f64::from(stats.critic_loss) - loss(&x).0).abs() < 1e-5);
    assert_matches_finite_differences(&x, &analytic, |p| loss(p).0);
}

#[test]
fn a_head_no_row_trains_keeps_its_output_rows() {
    // Two heads, half masks: pick rows whose masks leave head 1 out; after one update
    // (Adam's first step is zero where the gradient is) head 1's rows of each critic's
    // output layer are unchanged and head 0's moved.
    let (rows, obs_dim, n) = (8, 3, 4u32);
    let config = ensemble(2, 0.5).unwrap();
    let mut sac = learner(Some(config), rows, obs_dim, n);
    let mut candidates: Vec<usize> = (0..4096).collect();
    let mut masks = vec![0i64; candidates.len()];
    crate::dqn::draw_masks(config, 3, 0, Some(&candidates), &mut masks).unwrap();
    let keep: Vec<usize> = candidates
        .drain(..)
        .zip(&masks)
        .filter(|(_, m)| **m == 0b01)
        .map(|(p, _)| p)
        .take(rows)
        .collect();
    assert_eq!(keep.len(), rows);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
    let obs: Vec<f32> = (0..rows * obs_dim)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let actions: Vec<u32> = (0..rows as u32).map(|b| b % n).collect();
    let rewards = vec![1.5f32; rows];
    let terminated = vec![Flag::new(true); rows];
    let before = params(&sac);
    let transitions = Transitions {
        rows,
        obs: &obs,
        actions: &actions,
        rewards: &rewards,
        terminated: &terminated,
        next_obs: &obs,
        positions: Some(&keep),
    };
    sac.update_transitions(transitions, None).unwrap();
    let after = params(&sac);
    for i in 0..2 {
        let critic = &sac.core.critics.online[i];
        let last = critic.layers()[critic.layers().len() - 1];
        let (weight, bias) = (last.weight(), last.bias());
        let inputs = weight.len() / (2 * n as usize);
        let head_rows = |k: usize| {
            let w = weight.start + k * n as usize * inputs
                ..weight.start + (k + 1) * n as usize * inputs;
            let b = bias.start + k * n as usize..bias.start + (k + 1) * n as usize;
            (w, b)
        };
        let (w1, b1) = head_rows(1);
        assert_eq!(before[1 + i][w1.clone()], after[1 + i][w1]);
        assert_eq!(before[1 + i][b1.clone()], after[1 + i][b1]);
        let (w0, _) = head_rows(0);
        assert_ne!(before[1 + i][w0.clone()], after[1 + i][w0]);
    }
}

#[test]
fn checkpoints_with_heads_resume_bit_for_bit_and_refuse_other_heads() {
    let mut sac = learner(ensemble(4, 0.5), 16, 3, 5);
    let schema = sac.replay_schema().unwrap();
    for seed in 0..3 {
        sac.update(&random_batch(&schema, 3, Err(5), 16, seed))
            .unwrap();
    }
    let saved = sac.checkpoint().into_owned();
    let mut restored = learner(ensemble(4, 0.5), 16, 3, 5);
    restored.restore(&saved).unwrap();
    let batch = random_batch(&schema, 3, Err(5), 16, 9);
    assert_eq!(
        sac.update(&batch).unwrap(),
        restored.update(&batch).unwrap()
    );
    assert_eq!(params(&sac), params(&restored));
    for other in [None, ensemble(3, 0.5), ensemble(4, 1.0)] {
        let mut different = learner(other, 16, 3, 5);
        let error = different.restore(&saved).unwrap_err();
        assert!(
            matches!(error, Error::CheckpointMismatch { .. }),
            "{other:?}: {error}"
        );
    }
}

#[test]
fn an_update_with_heads_allocates_nothing_after_the_first_and_the_plan_holds_it() {
    let (sac, stats) = rl_testkit::measure(|| learner(ensemble(10, 0.5), 64, 3, 50));
    let retained = (stats.allocated_bytes - stats.freed_bytes) as f64;
    let planned = sac.memory_plan().total(rl_core::Location::Ram) as f64;
    assert!(
        (planned - retained).abs() <= 0.02 * retained,
        "planned {planned} vs allocated {retained}"
    );
    let mut sac = sac;
    let batch = random_batch(&sac.replay_schema().unwrap(), 3, Err(50), 64, 1);
    sac.update(&batch).unwrap();
    let (result, alloc) = rl_testkit::measure(|| sac.update(&batch));
    assert!(result.unwrap().critic_loss.is_finite());
    assert_eq!(alloc.allocations, 0, "{alloc:?}");
}

#[test]
fn bad_critic_head_settings_are_typed_errors_naming_the_key() {
    let space = box_space(-1.0, 1.0, 3);
    let discrete = Space::discrete(5).unwrap();
    let with = |e: EnsembleConfig| SacConfig {
        ensemble: Some(e),
        ..SacConfig::sb3()
    };
    for (config, key) in [
        (
            EnsembleConfig {
                heads: 0,
                mask_probability: 0.5,
                prior_scale: 0.0,
            },
            "sac.ensemble.heads",
        ),
        (
            EnsembleConfig {
                heads: 4,
                mask_probability: 0.0,
                prior_scale: 0.0,
            },
            "sac.ensemble.mask_probability",
        ),
        (
            EnsembleConfig {
                heads: 4,
                mask_probability: 0.5,
                prior_scale: 3.0,
            },
            "sac.ensemble.prior_scale",
        ),
    ] {
        let error = DiscreteSac::with_index(&space, &discrete, with(config), 0).unwrap_err();
        assert!(
            matches!(&error, Error::Config { key: k, .. } if *k == *key),
            "{error}"
        );
    }
    // Continuous SAC has no critic heads.
    let config = with(ensemble(4, 0.5).unwrap());
    let error = Sac::new(&space, &box_space(-1.0, 1.0, 1), config, 0).unwrap_err();
    assert!(
        matches!(&error, Error::Config { key, .. } if *key == *"sac.ensemble"),
        "{error}"
    );
}
