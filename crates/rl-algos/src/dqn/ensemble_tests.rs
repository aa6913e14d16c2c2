//! Bootstrapped DQN ([`super::EnsembleConfig`]): gradients, masks, heads, checkpoints,
//! allocations and settings; the helpers of the plain-DQN tests are shared from `tests`.

#![allow(clippy::unwrap_used, reason = "tests")]

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{Field, Flag, Space};
use rl_nn::Activation;
use rl_storage::Batch;

use super::tests::*;
use super::*;
#[allow(unused_imports, reason = "the learner traits, for their methods")]
use crate::learner::{Learner, OffPolicyLearner, OnPolicyLearner};
use rl_core::Location;
use rl_nn::Checkpoint;

use crate::predict::Predict;

// ---------------------------------------------------------------------------------------
// Bootstrapped DQN.

fn ensemble(heads: u32, mask_probability: f64) -> DqnConfig {
    DqnConfig {
        hidden: vec![6, 5],
        activation: Activation::Tanh,
        batch_size: 8,
        gamma: 0.9,
        ensemble: Some(EnsembleConfig {
            heads,
            mask_probability,
            prior_scale: 0.0,
        }),
        ..DqnConfig::default()
    }
}

/// [`ensemble`] with a randomized prior of scale `beta`.
fn with_prior(mut config: DqnConfig, beta: f32) -> DqnConfig {
    if let Some(e) = config.ensemble.as_mut() {
        e.prior_scale = beta;
    }
    config
}

/// `q + scale prior(x)` in f64 where the learner has a prior network.
fn plus_prior64(dqn: &Dqn, x: &[f64], mut q: Vec<f64>) -> Vec<f64> {
    if let Some(prior) = &dqn.prior {
        let p = mlp64(&mlp_spec(dqn), &to64(prior.net.params()), x).0;
        for (q, p) in q.iter_mut().zip(p) {
            *q += f64::from(prior.scale) * p;
        }
    }
    q
}

/// Per-head targets in f64, `rows x heads`: each head bootstraps from its own target
/// head, its next action chosen by its own online head (double) or the target's max.
fn ensemble_targets64(dqn: &Dqn, batch: &Batch) -> Vec<f64> {
    let (spec, d, n, k) = (&mlp_spec(dqn), dqn.obs_dim, 2, dqn.heads);
    let (online, target) = (to64(dqn.q.params()), to64(dqn.target.params()));
    let next_obs = batch.next_obs().unwrap();
    let rewards = batch.rewards().unwrap();
    let terminated = batch.terminated().unwrap();
    let mut out = Vec::new();
    for b in 0..batch.len() {
        let x = to64(&next_obs[b * d..(b + 1) * d]);
        let q_target = plus_prior64(dqn, &x, mlp64(spec, &target, &x).0);
        let q_online = plus_prior64(dqn, &x, mlp64(spec, &online, &x).0);
        for h in 0..k {
            let head = &q_target[h * n..(h + 1) * n];
            let a = if dqn.config.double {
                argmax64(&q_online[h * n..(h + 1) * n])
            } else {
                argmax64(head)
            };
            let live = if terminated[b].get() { 0.0 } else { 1.0 };
            out.push(f64::from(rewards[b]) + f64::from(dqn.config.gamma) * live * head[a]);
        }
    }
    out
}

/// The heads' losses `L_h` in f64 (masked, weighted Huber, averaged over all rows).
fn head_losses64(dqn: &Dqn, params: &[f64], batch: &Batch, targets: &[f64]) -> Vec<f64> {
    let (d, n, k) = (dqn.obs_dim, 2, dqn.heads);
    let delta = f64::from(dqn.config.huber_delta);
    let obs = to64(batch.obs().unwrap());
    let actions = batch.field::<u32>(Field::Action).unwrap();
    let ensemble_config = dqn.config.ensemble.unwrap();
    let mut losses = vec![0.0; k];
    for b in 0..batch.len() {
        let x = &obs[b * d..(b + 1) * d];
        let q = plus_prior64(dqn, x, mlp64(&mlp_spec(dqn), params, x).0);
        let position = batch.positions()[b] as u64;
        let mask = ensemble::mask_at(ensemble_config, dqn.seed, position).unwrap() as u64;
        for (h, loss) in losses.iter_mut().enumerate() {
            let td = q[h * n + actions[b] as usize] - targets[b * k + h];
            let huber = if td.abs() <= delta {
                0.5 * td * td
            } else {
                delta * (td.abs() - 0.5 * delta)
            };
            let bit = ((mask >> h) & 1) as f64;
            *loss += bit * f64::from(batch.weights()[b]) * huber / batch.len() as f64;
        }
    }
    losses
}

#[test]
fn ensemble_gradients_match_finite_differences_with_osband_normalisation() {
    for (double, beta, seed) in [(true, 0.0, 11), (false, 0.0, 12), (true, 3.0, 13)] {
        let config = DqnConfig {
            double,
            ..with_prior(ensemble(3, 0.5), beta)
        };
        let mut dqn = Dqn::new(&box_space(3), &Space::discrete(2).unwrap(), config, seed).unwrap();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(200 + seed);
        for p in dqn.target.params_mut() {
            *p += rng.random_range(-0.5..0.5);
        }
        let rows = random_rows(3, 2, 8, seed);
        let batch = weighted_batch_of(&dqn.replay_schema().unwrap(), &rows, seed);
        let transitions = Transitions::read(&batch, 8, 3, 2).unwrap();
        let pass = dqn.gradients(transitions, None).unwrap();
        let analytic = dqn.grads.clone();
        dqn.grads.fill(0.0);
        // The masks leave some rows out of some heads, and keep some in.
        let masks = &dqn.scratch.masks[..batch.len()];
        assert!(masks.iter().any(|&m| m & 0b111 != 0b111), "{masks:?}");
        assert!(masks.iter().any(|&m| m & 0b111 != 0), "{masks:?}");

        let targets = ensemble_targets64(&dqn, &batch);
        for (ours, reference) in dqn.scratch.targets.iter().zip(&targets) {
            assert!((f64::from(*ours) - reference).abs() < 1e-5);
        }
        let params = to64(dqn.q.params());
        let mean = |p: &[f64]| head_losses64(&dqn, p, &batch, &targets).iter().sum::<f64>() / 3.0;
        let base = mean(&params);
        assert!((f64::from(pass.loss) - base).abs() < 1e-5 * base.max(1.0));
        // Heads: grad L_h = 3 x grad mean (a head's parameters reach only its loss);
        // torso: (1/3) sum_h grad L_h = grad mean.
        let [weight, bias] = ensemble::output_layer(&dqn.q);
        let h = 1e-6;
        for i in 0..params.len() {
            let mut p = params.clone();
            p[i] += h;
            let up = mean(&p);
            p[i] -= 2.0 * h;
            let down = mean(&p);
            let scale = if weight.contains(&i) || bias.contains(&i) {
                3.0
            } else {
                1.0
            };
            let numeric = scale * (up - down) / (2.0 * h);
            let a = f64::from(analytic[i]);
            assert!(
                (a - numeric).abs() <= 1e-4 + 1e-3 * numeric.abs(),
                "double {double}, prior {beta}: parameter {i}: analytic {a} vs numeric {numeric}"
            );
        }
        assert!(analytic.iter().any(|g| g.abs() > 1e-3), "gradients all ~0");
    }
}

#[test]
fn a_row_outside_a_heads_mask_does_not_move_that_head() {
    let config = ensemble(4, 0.5);
    let n = 2;
    // A storage position whose mask leaves some heads out and keeps some in.
    let position = (0..64u64)
        .find(|&p| {
            let m = ensemble::mask_at(config.ensemble.unwrap(), 5, p).unwrap() & 0b1111;
            m != 0 && m != 0b1111
        })
        .unwrap();
    let mask = ensemble::mask_at(config.ensemble.unwrap(), 5, position).unwrap() as u64;
    let mut dqn = Dqn::new(&box_space(3), &Space::discrete(2).unwrap(), config, 5).unwrap();
    let before = dqn.q.params().to_vec();
    let row = &random_rows(3, 2, 1, 9)[0];
    let positions = [position as usize];
    let terminated = [Flag::new(false)];
    let (actions, rewards) = ([row.action], [row.reward + 3.0]);
    let transitions = Transitions {
        rows: 1,
        obs: &row.obs,
        actions: &actions,
        rewards: &rewards,
        terminated: &terminated,
        next_obs: &row.next_obs,
        weights: &[1.0],
        positions: Some(&positions),
    }
    .check(3, 2)
    .unwrap();
    dqn.update_transitions(transitions, None).unwrap();
    let after = dqn.q.params();
    let [weight, bias] = ensemble::output_layer(&dqn.q);
    let inputs = weight.len() / bias.len();
    for head in 0..4 {
        let outputs = head * n..(head + 1) * n;
        let w = weight.start + outputs.start * inputs..weight.start + outputs.end * inputs;
        let b = bias.start + outputs.start..bias.start + outputs.end;
        let moved = after[w.clone()] != before[w] || after[b.clone()] != before[b];
        assert_eq!(
            moved,
            (mask >> head) & 1 == 1,
            "head {head}, mask {mask:04b}"
        );
    }
    // The torso learns from the heads that saw the row.
    assert_ne!(after[..weight.start], before[..weight.start]);
}

#[test]
fn one_head_with_every_row_is_plain_dqn_bit_for_bit() {
    let plain = small(8);
    let one = DqnConfig {
        ensemble: Some(EnsembleConfig {
            heads: 1,
            mask_probability: 1.0,
            prior_scale: 0.0,
        }),
        ..small(8)
    };
    let (obs, act) = (box_space(3), Space::discrete(4).unwrap());
    let mut a = Dqn::new(&obs, &act, plain, 3).unwrap();
    let mut b = Dqn::new(&obs, &act, one, 3).unwrap();
    assert_eq!(a.q.params(), b.q.params());
    let batch = weighted_batch_of(&a.replay_schema().unwrap(), &random_rows(3, 4, 8, 1), 1);
    for _ in 0..5 {
        assert_eq!(a.update(&batch).unwrap(), b.update(&batch).unwrap());
        assert_eq!(a.priorities(), b.priorities());
    }
    assert_eq!(a.q.params(), b.q.params());
    let observations = vec![0.3f32; 3 * 10];
    let (mut x, mut y) = (vec![0u32; 10], vec![0u32; 10]);
    let (mut lx, mut vx) = (vec![0.0f32; 10], vec![0.0f32; 10]);
    let (mut ly, mut vy) = (vec![0.0f32; 10], vec![0.0f32; 10]);
    let (mut sx, mut sy) = (
        vec![ActiveHead::default(); 10],
        vec![ActiveHead::default(); 10],
    );
    for _ in 0..20 {
        a.act(
            &observations,
            &mut sx,
            ActOutput {
                actions: &mut x,
                log_probs: &mut lx,
                values: &mut vx,
            },
        )
        .unwrap();
        b.act(
            &observations,
            &mut sy,
            ActOutput {
                actions: &mut y,
                log_probs: &mut ly,
                values: &mut vy,
            },
        )
        .unwrap();
        assert_eq!(x, y);
    }
}

#[test]
fn an_episode_acts_with_one_head_and_greedy_acting_takes_the_mean() {
    let config = DqnConfig {
        exploration: EpsilonSchedule {
            initial: 0.0,
            end: 0.0,
            decay_steps: 0,
        },
        // Q-values (and so actions) include the prior's.
        ..with_prior(ensemble(5, 0.5), 3.0)
    };
    let mut dqn = Dqn::new(&box_space(3), &Space::discrete(2).unwrap(), config, 4).unwrap();
    let rows = 16;
    let observations: Vec<f32> = (0..rows * 3).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut q = vec![0.0f32; rows * 10];
    dqn.q_values(&observations, &mut q).unwrap();
    let mut states = vec![ActiveHead::default(); rows];
    let mut actions = vec![0u32; rows];
    let (mut l, mut v) = (vec![0.0f32; rows], vec![0.0f32; rows]);
    let mut act = |dqn: &mut Dqn, states: &mut [ActiveHead], actions: &mut [u32]| {
        dqn.act(
            &observations,
            states,
            ActOutput {
                actions,
                log_probs: &mut l,
                values: &mut v,
            },
        )
        .unwrap();
    };
    act(&mut dqn, &mut states, &mut actions);
    let drawn: Vec<usize> = states.iter().map(|s| s.head().unwrap()).collect();
    assert!(drawn.iter().any(|&h| h != drawn[0]), "{drawn:?}");
    for (r, (&h, &a)) in drawn.iter().zip(&actions).enumerate() {
        let head = &q[r * 10 + h * 2..r * 10 + h * 2 + 2];
        assert_eq!(a as usize, argmax(head), "row {r}");
    }
    act(&mut dqn, &mut states, &mut actions);
    assert_eq!(
        states.iter().map(|s| s.head().unwrap()).collect::<Vec<_>>(),
        drawn,
        "heads hold for the episode"
    );
    dqn.set_mode(Mode::Deterministic);
    act(&mut dqn, &mut states, &mut actions);
    for (r, &a) in actions.iter().enumerate() {
        let row = &q[r * 10..(r + 1) * 10];
        let mean: Vec<f32> = (0..2)
            .map(|a| (0..5).map(|h| row[h * 2 + a]).sum::<f32>())
            .collect();
        assert_eq!(a as usize, argmax(&mean), "row {r}");
    }
}

#[test]
fn ensemble_checkpoints_resume_bit_for_bit_and_refuse_plain_dqn() {
    let config = with_prior(ensemble(4, 0.5), 2.0);
    let (obs, act) = (box_space(3), Space::discrete(2).unwrap());
    let mut dqn = Dqn::new(&obs, &act, config.clone(), 0).unwrap();
    let batch = batch_of(&dqn.replay_schema().unwrap(), &random_rows(3, 2, 8, 8));
    for _ in 0..3 {
        dqn.update(&batch).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dqn.safetensors");
    dqn.checkpoint().save(&path).unwrap();
    let loaded = Checkpoint::<DqnState>::load(&path, dqn.kind()).unwrap();
    assert_eq!(loaded, dqn.checkpoint());
    assert_eq!(loaded.networks.len(), 3, "q, q_target and q_prior");
    let mut resumed = Dqn::new(&obs, &act, config, 99).unwrap();
    resumed.restore(&loaded).unwrap();
    let (ours, theirs) = (dqn.prior.as_ref(), resumed.prior.as_ref());
    assert_eq!(ours.unwrap().net.params(), theirs.unwrap().net.params());
    assert_eq!(dqn.update(&batch).unwrap(), resumed.update(&batch).unwrap());
    assert_eq!(dqn.q.params(), resumed.q.params());
    let mut plain = Dqn::new(&obs, &act, with_prior(ensemble(4, 0.5), 2.0), 0).unwrap();
    plain.config.ensemble = None;
    assert!(plain.restore(&loaded).is_err());
    let mut other = Dqn::new(&obs, &act, with_prior(ensemble(4, 0.9), 2.0), 0).unwrap();
    assert!(other.restore(&loaded).is_err());
}

#[test]
fn ensemble_updates_and_acting_allocate_nothing_and_the_plan_counts_them() {
    let (dqn, stats) = rl_testkit::measure(|| {
        Dqn::new(
            &box_space(4),
            &Space::discrete(2).unwrap(),
            DqnConfig {
                ensemble: Some(EnsembleConfig {
                    heads: 10,
                    mask_probability: 0.5,
                    prior_scale: 3.0,
                }),
                ..DqnConfig::default()
            },
            0,
        )
        .unwrap()
    });
    let retained = (stats.allocated_bytes - stats.freed_bytes) as f64;
    let plan = dqn.memory_plan();
    let planned = plan.total(Location::Ram) as f64;
    assert!(
        (planned - retained).abs() <= 0.02 * retained,
        "planned {planned} vs allocated {retained}:\n{plan}"
    );
    assert!(
        plan.lines()
            .iter()
            .any(|l| l.component.contains("bootstrap masks"))
    );

    let mut dqn = Dqn::new(
        &box_space(4),
        &Space::discrete(2).unwrap(),
        ensemble(10, 0.5),
        0,
    );
    let dqn = dqn.as_mut().unwrap();
    let schema = dqn.replay_schema().unwrap();
    let batch = batch_of(&schema, &random_rows(4, 2, 8, 0));
    dqn.update(&batch).unwrap();
    let (stats, alloc) = rl_testkit::measure(|| dqn.update(&batch));
    assert!(stats.unwrap().loss.is_finite());
    assert_eq!(alloc.allocations, 0, "update: {alloc:?}");
    let obs = vec![0.1f32; 100 * 4];
    let mut actions = vec![0u32; 100];
    let (mut log_probs, mut values) = (vec![0.0f32; 100], vec![0.0f32; 100]);
    let mut states = vec![ActiveHead::default(); 100];
    let mut actor = dqn.actor().unwrap();
    let (result, alloc) = rl_testkit::measure(|| {
        for mode in [Mode::Sample, Mode::Deterministic] {
            dqn.set_mode(mode);
            let out = ActOutput {
                actions: &mut actions,
                log_probs: &mut log_probs,
                values: &mut values,
            };
            dqn.act(&obs, &mut states, out).unwrap();
        }
        let out = ActOutput {
            actions: &mut actions,
            log_probs: &mut log_probs,
            values: &mut values,
        };
        actor.act(&obs, &mut states, out)
    });
    result.unwrap();
    assert_eq!(alloc.allocations, 0, "acting: {alloc:?}");
}

#[test]
fn ensemble_settings_are_validated_and_parse() {
    for (heads, p, field) in [
        (0, 0.5, "dqn.ensemble.heads"),
        (65, 0.5, "dqn.ensemble.heads"),
        (4, 0.0, "dqn.ensemble.mask_probability"),
        (4, 1.5, "dqn.ensemble.mask_probability"),
    ] {
        let error = ensemble(heads, p).validate().unwrap_err().to_string();
        assert!(error.contains(field), "{error}");
    }
    for beta in [-1.0, f32::NAN] {
        let error = with_prior(ensemble(4, 0.5), beta).validate().unwrap_err();
        assert!(
            error.to_string().contains("dqn.ensemble.prior_scale"),
            "{error}"
        );
    }
    let parsed: DqnConfig =
        serde_json::from_str(r#"{"ensemble": {"heads": 10, "mask_probability": 0.5}}"#).unwrap();
    assert_eq!(parsed.ensemble.unwrap().heads, 10);
    assert_eq!(parsed.ensemble.unwrap().prior_scale, 0.0);
    assert!(serde_json::from_str::<DqnConfig>(r#"{"ensemble": {"heads": 10}}"#).is_err());
    let plain = serde_json::to_string(&DqnConfig::default()).unwrap();
    assert!(!plain.contains("ensemble"), "{plain}");
}
