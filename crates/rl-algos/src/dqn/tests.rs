#![allow(clippy::unwrap_used, reason = "tests")]

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{BoxSpace, Column, DType, Env, Field, Flag, Space, Step};
use rl_nn::{Activation, AdamConfig, MlpSpec, Network, NetworkSpec};
use rl_storage::{
    Batch, ColumnSlice,
    ram::RamStorage,
    replay::ReplayBuffer,
    sampler::{Prioritized, PrioritizedConfig, Sampler, Uniform},
};

use super::*;
#[allow(unused_imports, reason = "the learner traits, for their methods")]
use crate::learner::{Learner, OffPolicyLearner, OnPolicyLearner};
use rl_core::Location;
use rl_nn::Checkpoint;

use crate::predict::Predict;

pub(super) fn box_space(len: usize) -> Space {
    Space::Box(BoxSpace::uniform(-1.0, 1.0, &[len], DType::F32).unwrap())
}

pub(super) fn small(batch_size: usize) -> DqnConfig {
    DqnConfig {
        hidden: vec![16, 16],
        batch_size,
        ..DqnConfig::default()
    }
}

/// One transition.
#[derive(Clone, Debug)]
pub(super) struct Row {
    pub(super) obs: Vec<f32>,
    pub(super) action: u32,
    pub(super) reward: f32,
    pub(super) terminated: bool,
    pub(super) truncated: bool,
    pub(super) next_obs: Vec<f32>,
}

pub(super) fn random_rows(obs_dim: usize, n_actions: u32, rows: usize, seed: u64) -> Vec<Row> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..rows)
        .map(|i| Row {
            obs: (0..obs_dim).map(|_| rng.random_range(-1.0..1.0)).collect(),
            action: rng.random_range(0..n_actions),
            reward: rng.random_range(-1.0..1.0),
            terminated: i % 3 == 0,
            truncated: i % 4 == 1,
            next_obs: (0..obs_dim).map(|_| rng.random_range(-1.0..1.0)).collect(),
        })
        .collect()
}

pub(super) fn push_rows<P: Sampler>(replay: &mut ReplayBuffer<RamStorage, P>, rows: &[Row]) {
    for row in rows {
        replay
            .push(&[
                ColumnSlice::F32(&row.obs),
                ColumnSlice::U32(&[row.action]),
                ColumnSlice::F32(&[row.reward]),
                ColumnSlice::Bool(&[Flag::new(row.terminated)]),
                ColumnSlice::Bool(&[Flag::new(row.truncated)]),
                ColumnSlice::F32(&row.next_obs),
            ])
            .unwrap();
    }
}

/// A batch holding `rows` in order, with weights 1.
pub(super) fn batch_of(schema: &rl_core::Schema, rows: &[Row]) -> Batch {
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), rows.len(), None).unwrap(),
        Uniform::new(0),
    );
    push_rows(&mut replay, rows);
    let mut batch = Batch::new(schema, rows.len()).unwrap();
    replay
        .gather(&(0..rows.len()).collect::<Vec<_>>(), &mut batch)
        .unwrap();
    batch
}

/// A batch drawn by a prioritized sampler from `rows` given unequal priorities, so that
/// its importance weights differ from 1.
pub(super) fn weighted_batch_of(schema: &rl_core::Schema, rows: &[Row], seed: u64) -> Batch {
    let n = rows.len();
    let config = PrioritizedConfig {
        alpha: 1.0,
        beta: 1.0,
        ..PrioritizedConfig::default()
    };
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), n, None).unwrap(),
        Prioritized::new(n, config, seed).unwrap(),
    );
    push_rows(&mut replay, rows);
    let priorities: Vec<f32> = (0..n).map(|i| 0.5 + i as f32).collect();
    replay
        .sampler_mut()
        .update_priorities(&(0..n).collect::<Vec<_>>(), &priorities)
        .unwrap();
    let mut batch = Batch::new(schema, n).unwrap();
    replay.sample(&mut batch).unwrap();
    batch
}

/// The network's parameters as a checkpoint sees them (weights, Adam state, counters):
/// equal before and after an operation that must change nothing.
pub(super) fn snapshot(dqn: &Dqn) -> Checkpoint<'static, DqnState> {
    dqn.checkpoint().into_owned()
}

// ---------------------------------------------------------------------------------------
// The loss's gradient against finite differences of an f64 reference.

/// One row through an MLP in f64: `(outputs, hidden pre-activations)`.
/// The spec of a Q network that is an mlp.
pub(super) fn mlp_spec(dqn: &Dqn) -> MlpSpec {
    match dqn.q.spec() {
        NetworkSpec::Mlp(spec) => spec,
        other => panic!("not an mlp: {other}"),
    }
}

pub(crate) fn mlp64(spec: &MlpSpec, params: &[f64], x: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (mut x, mut pre, mut offset) = (x.to_vec(), Vec::new(), 0);
    for (l, pair) in spec.sizes.windows(2).enumerate() {
        let (inputs, outputs) = (pair[0], pair[1]);
        let w = &params[offset..offset + inputs * outputs];
        let b = &params[offset + inputs * outputs..offset + (inputs + 1) * outputs];
        offset += (inputs + 1) * outputs;
        let last = l + 2 == spec.sizes.len();
        x = (0..outputs)
            .map(|o| {
                let z = b[o] + (0..inputs).map(|i| w[o * inputs + i] * x[i]).sum::<f64>();
                if last {
                    return z;
                }
                pre.push(z);
                match spec.activation {
                    Activation::Relu => z.max(0.0),
                    Activation::Tanh => z.tanh(),
                }
            })
            .collect();
    }
    (x, pre)
}

pub(crate) fn to64(values: &[f32]) -> Vec<f64> {
    values.iter().map(|&v| f64::from(v)).collect()
}

pub(super) fn argmax64(row: &[f64]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

/// The TD targets in f64: the next action by the online network (double) or the
/// target's max, valued by the target network; terminated rows do not bootstrap.
pub(super) fn targets64(dqn: &Dqn, batch: &Batch) -> Vec<f64> {
    let (spec, d) = (&mlp_spec(dqn), dqn.obs_dim);
    let (online, target) = (to64(dqn.q.params()), to64(dqn.target.params()));
    let next_obs = batch.next_obs().unwrap();
    let rewards = batch.rewards().unwrap();
    let terminated = batch.terminated().unwrap();
    (0..batch.len())
        .map(|b| {
            let x = to64(&next_obs[b * d..(b + 1) * d]);
            let q_target = mlp64(spec, &target, &x).0;
            let a = if dqn.config.double {
                argmax64(&mlp64(spec, &online, &x).0)
            } else {
                argmax64(&q_target)
            };
            let live = if terminated[b].get() { 0.0 } else { 1.0 };
            f64::from(rewards[b]) + f64::from(dqn.config.gamma) * live * q_target[a]
        })
        .collect()
}

/// The weighted Huber loss in f64 for online parameters `params` and fixed targets:
/// `(loss, TD errors, hidden pre-activations)`.
pub(super) fn loss64(
    dqn: &Dqn,
    params: &[f64],
    batch: &Batch,
    targets: &[f64],
) -> (f64, Vec<f64>, Vec<f64>) {
    loss64_at(dqn, params, &to64(batch.obs().unwrap()), batch, targets)
}

/// [`loss64`] at observations `obs` instead of the batch's.
pub(super) fn loss64_at(
    dqn: &Dqn,
    params: &[f64],
    obs: &[f64],
    batch: &Batch,
    targets: &[f64],
) -> (f64, Vec<f64>, Vec<f64>) {
    let d = dqn.obs_dim;
    let delta = f64::from(dqn.config.huber_delta);
    let actions = batch.field::<u32>(Field::Action).unwrap();
    let weights = batch.weights();
    let (mut loss, mut tds, mut pre) = (0.0, Vec::new(), Vec::new());
    for b in 0..batch.len() {
        let (q, p) = mlp64(&mlp_spec(dqn), params, &obs[b * d..(b + 1) * d]);
        pre.extend(p);
        let td = q[actions[b] as usize] - targets[b];
        let huber = if td.abs() <= delta {
            0.5 * td * td
        } else {
            delta * (td.abs() - 0.5 * delta)
        };
        loss += f64::from(weights[b]) * huber;
        tds.push(td);
    }
    (loss / batch.len() as f64, tds, pre)
}

#[test]
fn td_loss_gradients_match_finite_differences_inside_and_outside_the_huber_region() {
    let cases = [
        (Activation::Tanh, true, 1),
        (Activation::Tanh, false, 2),
        (Activation::Relu, true, 3),
        (Activation::Relu, false, 4),
    ];
    for (activation, double, seed) in cases {
        let config = DqnConfig {
            hidden: vec![6, 5],
            activation,
            batch_size: 8,
            double,
            gamma: 0.9,
            ..DqnConfig::default()
        };
        let mut dqn = Dqn::new(&box_space(3), &Space::discrete(4).unwrap(), config, seed).unwrap();
        // A target network unlike the online one, so that the two choices of the next
        // action differ.
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(100 + seed);
        for p in dqn.target.params_mut() {
            *p += rng.random_range(-0.5..0.5);
        }
        let mut rows = random_rows(3, 4, 8, seed);
        // Rewards on both sides of the Huber kink (|td| = 1).
        for (row, r) in rows
            .iter_mut()
            .zip([-3.0, 0.1, 2.5, -0.2, 4.0, 0.05, -1.8, 0.3])
        {
            row.reward = r;
        }
        let batch = weighted_batch_of(&dqn.replay_schema().unwrap(), &rows, seed);
        assert!(
            batch.weights().iter().any(|w| (w - 1.0).abs() > 0.05),
            "weights {:?}",
            batch.weights()
        );

        let (batch_size, obs_dim, n) = (dqn.config.batch_size, dqn.obs_dim, dqn.n_actions);
        let transitions = Transitions::read(&batch, batch_size, obs_dim, n).unwrap();
        let pass = dqn.gradients(transitions, None).unwrap();
        let analytic = dqn.grads.clone();
        dqn.grads.fill(0.0);
        let targets = targets64(&dqn, &batch);
        for (ours, reference) in dqn.scratch.targets.iter().zip(&targets) {
            assert!((f64::from(*ours) - reference).abs() < 1e-5);
        }
        let params = to64(dqn.q.params());
        let (base, tds, pre) = loss64(&dqn, &params, &batch, &targets);
        assert!(
            (f64::from(pass.loss) - base).abs() < 1e-5 * base.max(1.0),
            "loss {} vs reference {base}",
            pass.loss
        );
        let delta = f64::from(dqn.config.huber_delta);
        assert!(
            tds.iter().any(|td| td.abs() < delta),
            "none inside: {tds:?}"
        );
        assert!(
            tds.iter().any(|td| td.abs() > delta),
            "none outside: {tds:?}"
        );
        // Finite differences are only right away from the kinks (ReLU and Huber):
        // fail loudly rather than pass without checking.
        assert!(
            tds.iter().all(|td| (td.abs() - delta).abs() > 1e-3),
            "a TD error sits at the Huber kink: pick another seed"
        );
        assert!(
            activation != Activation::Relu || pre.iter().all(|z| z.abs() > 1e-4),
            "a pre-activation sits at a ReLU kink: pick another seed"
        );
        let h = 1e-6;
        for i in 0..params.len() {
            let mut p = params.clone();
            p[i] += h;
            let up = loss64(&dqn, &p, &batch, &targets).0;
            p[i] -= 2.0 * h;
            let down = loss64(&dqn, &p, &batch, &targets).0;
            let numeric = (up - down) / (2.0 * h);
            let a = f64::from(analytic[i]);
            assert!(
                (a - numeric).abs() <= 1e-4 + 1e-3 * numeric.abs(),
                "{activation:?} double {double}: parameter {i}: analytic {a} vs numeric {numeric}"
            );
        }
        assert!(analytic.iter().any(|g| g.abs() > 1e-3), "gradients all ~0");
    }
}

// ---------------------------------------------------------------------------------------
// Targets, target networks, exploration.

/// A `1 -> 3` linear network whose weights are `w` and biases `b`.
pub(super) fn set_linear(net: &mut Network, w: [f32; 3], b: [f32; 3]) {
    let params = net.params_mut();
    params[..3].copy_from_slice(&w);
    params[3..].copy_from_slice(&b);
}

#[test]
fn double_and_standard_targets_match_a_hand_computation() {
    // Online Q(s) = [0, s, 0.5], target Q'(s) = [2, -1, 0], gamma 0.9.
    let rows: Vec<Row> = [
        // (reward, next obs, terminated, truncated)
        (1.0, 1.0, false, false),
        (0.5, 0.0, true, false),
        (0.0, 0.5, false, true),
        (-1.0, 0.0, false, true),
        (2.0, 1.0, true, true),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(reward, next, terminated, truncated))| Row {
        obs: vec![0.0],
        action: i as u32 % 3,
        reward,
        terminated,
        truncated,
        next_obs: vec![next],
    })
    .collect();
    // Double: the online argmax at s' = 1 is action 1 (valued -1 by the target); at
    // s' = 0.5 actions 1 and 2 tie and the lowest wins; at s' = 0 it is action 2 (0).
    // Standard: the target's max, 2. Terminated rows keep only their reward; truncated
    // rows bootstrap.
    for (double, expected) in [
        (true, [0.1f32, 0.5, -0.9, -1.0, 2.0]),
        (false, [2.8, 0.5, 1.8, 0.8, 2.0]),
    ] {
        let config = DqnConfig {
            hidden: vec![],
            batch_size: 5,
            gamma: 0.9,
            double,
            ..DqnConfig::default()
        };
        let mut dqn = Dqn::new(&box_space(1), &Space::discrete(3).unwrap(), config, 0).unwrap();
        set_linear(&mut dqn.q, [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]);
        set_linear(&mut dqn.target, [0.0; 3], [2.0, -1.0, 0.0]);
        let batch = batch_of(&dqn.replay_schema().unwrap(), &rows);
        let stats = dqn.update(&batch).unwrap();
        for (b, (&y, want)) in dqn.scratch.targets.iter().zip(expected).enumerate() {
            assert!(
                (y - want).abs() < 1e-6,
                "double {double} row {b}: {y} vs {want}"
            );
        }
        let mean = expected.iter().sum::<f32>() / 5.0;
        assert!((stats.mean_target - mean).abs() < 1e-6);
        // Priorities: |Q(0, a) - y| + 1e-6 with Q(0) = [0, 0, 0.5], before the step.
        for (b, (&p, want)) in dqn.priorities().iter().zip(expected).enumerate() {
            let q = [0.0, 0.0, 0.5][b % 3];
            assert!((p - ((q - want).abs() + 1e-6)).abs() < 1e-6, "row {b}: {p}");
        }
    }
}

#[test]
fn hard_targets_copy_exactly_every_n_updates() {
    let config = DqnConfig {
        target_update: TargetUpdate::Hard { every: 3 },
        ..small(8)
    };
    let mut dqn = Dqn::new(&box_space(3), &Space::discrete(4).unwrap(), config, 0).unwrap();
    let batch = batch_of(&dqn.replay_schema().unwrap(), &random_rows(3, 4, 8, 5));
    assert_eq!(dqn.target.params(), dqn.q.params());
    let mut copied = dqn.target.params().to_vec();
    for k in 1..=7u64 {
        dqn.update(&batch).unwrap();
        if k % 3 == 0 {
            assert_eq!(dqn.target.params(), dqn.q.params(), "update {k}");
            copied = dqn.target.params().to_vec();
        } else {
            assert_eq!(dqn.target.params(), &copied[..], "update {k}");
            assert_ne!(dqn.target.params(), dqn.q.params(), "update {k}");
        }
    }
    assert_eq!(dqn.updates(), 7);
}

#[test]
fn polyak_targets_match_rl_nn_polyak_after_every_update() {
    let config = DqnConfig {
        target_update: TargetUpdate::Polyak { tau: 0.3 },
        ..small(8)
    };
    let mut dqn = Dqn::new(&box_space(3), &Space::discrete(4).unwrap(), config, 0).unwrap();
    let batch = batch_of(&dqn.replay_schema().unwrap(), &random_rows(3, 4, 8, 6));
    for _ in 0..3 {
        let mut expected = dqn.target.params().to_vec();
        dqn.update(&batch).unwrap();
        rl_nn::polyak(&mut expected, dqn.q.params(), 0.3).unwrap();
        assert_eq!(dqn.target.params(), &expected[..]);
        assert_ne!(dqn.target.params(), dqn.q.params());
    }
}

#[test]
fn epsilon_falls_linearly_then_stays_at_its_end() {
    let schedule = EpsilonSchedule {
        initial: 1.0,
        end: 0.1,
        decay_steps: 1000,
    };
    for (steps, want) in [
        (0, 1.0),
        (250, 0.775),
        (500, 0.55),
        (999, 0.1009),
        (1000, 0.1),
        (50_000, 0.1),
    ] {
        let got = schedule.at(steps);
        assert!((got - want).abs() < 1e-6, "step {steps}: {got} vs {want}");
    }
    let immediate = EpsilonSchedule {
        decay_steps: 0,
        ..schedule
    };
    assert_eq!(immediate.at(0), 0.1);
    // The learner follows the step count the loop gives it.
    let config = DqnConfig {
        exploration: schedule,
        ..small(8)
    };
    let mut dqn = Dqn::new(&box_space(3), &Space::discrete(4).unwrap(), config, 0).unwrap();
    assert_eq!(dqn.epsilon(), 1.0);
    dqn.set_env_steps(500);
    assert!((dqn.epsilon() - 0.55).abs() < 1e-6);
    let batch = batch_of(&dqn.replay_schema().unwrap(), &random_rows(3, 4, 8, 7));
    assert_eq!(dqn.update(&batch).unwrap().epsilon, dqn.epsilon());
    dqn.set_env_steps(2000);
    assert_eq!(dqn.epsilon(), 0.1);
}

/// A learner with a `1 -> 4` linear Q network that ignores the observation: Q = `bias`.
pub(super) fn constant_q(bias: [f32; 4], epsilon: f32, seed: u64) -> Dqn {
    let config = DqnConfig {
        hidden: vec![],
        exploration: EpsilonSchedule {
            initial: epsilon,
            end: epsilon,
            decay_steps: 0,
        },
        ..small(4)
    };
    let mut dqn = Dqn::new(&box_space(1), &Space::discrete(4).unwrap(), config, seed).unwrap();
    let params = dqn.q.params_mut();
    params[..4].fill(0.0);
    params[4..].copy_from_slice(&bias);
    dqn
}

#[test]
fn greedy_actions_take_the_lowest_index_among_ties() {
    assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    assert_eq!(argmax(&[0.0, 0.0, 0.0]), 0);
    assert_eq!(argmax(&[-1.0, f32::NAN, 0.0]), 2);
    assert_eq!(argmax(&[5.0]), 0);
    let mut dqn = constant_q([0.5, 2.0, 2.0, 1.0], 0.0, 0);
    let obs = vec![0.3f32; 70];
    let mut actions = vec![9u32; 70];
    for mode in [Mode::Deterministic, Mode::Sample] {
        dqn.set_mode(mode);
        dqn.act_rows(&obs, &mut actions).unwrap();
        assert!(actions.iter().all(|&a| a == 1), "{mode:?}: {actions:?}");
    }
    let mut all_equal = constant_q([0.0; 4], 0.0, 0);
    all_equal.act_rows(&obs, &mut actions).unwrap();
    assert!(actions.iter().all(|&a| a == 0));
    // predict is greedy whatever the mode, and leaves the mode as it was.
    dqn.set_mode(Mode::Sample);
    let mut one = [7u32];
    dqn.predict(&[0.1], 1, &mut one).unwrap();
    assert_eq!((one[0], dqn.mode()), (1, Mode::Sample));
}

#[test]
fn epsilon_greedy_frequencies_are_within_five_sigma() {
    let (epsilon, n) = (0.4f32, 4usize);
    let mut dqn = constant_q([0.0, 0.0, 1.0, 0.0], epsilon, 3);
    dqn.set_mode(Mode::Sample);
    let obs = vec![0.2f32; 200];
    let mut actions = vec![0u32; 200];
    let mut counts = [0usize; 4];
    let draws = 100;
    for _ in 0..draws {
        dqn.act_rows(&obs, &mut actions).unwrap();
        for &a in &actions {
            counts[a as usize] += 1;
        }
    }
    let total = (draws * obs.len()) as f64;
    let explore = f64::from(epsilon) / n as f64;
    for (a, &count) in counts.iter().enumerate() {
        let p = if a == 2 {
            1.0 - f64::from(epsilon) + explore
        } else {
            explore
        };
        let sigma = (total * p * (1.0 - p)).sqrt();
        assert!(
            (count as f64 - total * p).abs() < 5.0 * sigma,
            "action {a}: {count} of {total}, expected {}",
            total * p
        );
    }
    // Deterministic mode never explores.
    dqn.set_mode(Mode::Deterministic);
    dqn.act_rows(&obs, &mut actions).unwrap();
    assert!(actions.iter().all(|&a| a == 2));
}

// ---------------------------------------------------------------------------------------
// Checkpoints, configurations, bad input.

#[test]
fn checkpoints_resume_bit_for_bit_and_refuse_other_runs() {
    let config = small(8);
    let (obs, act) = (box_space(3), Space::discrete(4).unwrap());
    let mut dqn = Dqn::new(&obs, &act, config.clone(), 0).unwrap();
    let batch = batch_of(&dqn.replay_schema().unwrap(), &random_rows(3, 4, 8, 8));
    for _ in 0..3 {
        dqn.update(&batch).unwrap();
    }
    dqn.set_env_steps(4000);
    let observations = vec![0.25f32; 3 * 20];
    let mut actions = vec![0u32; 20];
    dqn.act_rows(&observations, &mut actions).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dqn.safetensors");
    dqn.checkpoint().save(&path).unwrap();
    assert!(matches!(
        Checkpoint::<DqnState>::load(&path, "sac"),
        Err(rl_nn::Error::CheckpointKind { .. })
    ));
    let loaded = Checkpoint::<DqnState>::load(&path, dqn.kind()).unwrap();
    assert_eq!(loaded, dqn.checkpoint());

    let mut resumed = Dqn::new(&obs, &act, config.clone(), 99).unwrap();
    assert_ne!(resumed.q.params(), dqn.q.params());
    resumed.restore(&loaded).unwrap();
    assert_eq!((resumed.updates(), resumed.env_steps()), (3, 4000));
    let (a, b) = (dqn.update(&batch).unwrap(), resumed.update(&batch).unwrap());
    assert_eq!(a, b);
    assert_eq!(dqn.q.params(), resumed.q.params());
    assert_eq!(dqn.target.params(), resumed.target.params());
    assert_eq!(dqn.priorities(), resumed.priorities());
    // The exploration generator resumes too.
    let mut again = vec![0u32; 20];
    dqn.act_rows(&observations, &mut actions).unwrap();
    resumed.act_rows(&observations, &mut again).unwrap();
    assert_eq!(actions, again);

    // Another architecture, number of actions or optimiser setting (but the learning
    // rate) is refused and changes nothing.
    let others = [
        Dqn::new(
            &obs,
            &act,
            DqnConfig {
                hidden: vec![32, 16],
                ..config.clone()
            },
            0,
        )
        .unwrap(),
        Dqn::new(&obs, &Space::discrete(5).unwrap(), config.clone(), 0).unwrap(),
        Dqn::new(
            &obs,
            &act,
            DqnConfig {
                adam: AdamConfig {
                    eps: 1e-3,
                    ..config.adam
                },
                ..config.clone()
            },
            0,
        )
        .unwrap(),
    ];
    for mut other in others {
        let before = snapshot(&other);
        let result = other.restore(&loaded);
        assert!(
            matches!(result, Err(Error::CheckpointMismatch { .. })),
            "{result:?}"
        );
        assert_eq!(snapshot(&other), before);
    }
    // Another learning rate is taken: it may change on resume.
    let mut slower = Dqn::new(
        &obs,
        &act,
        DqnConfig {
            adam: AdamConfig {
                lr: 1e-5,
                ..config.adam
            },
            ..config.clone()
        },
        0,
    )
    .unwrap();
    slower.restore(&loaded).unwrap();
    assert_eq!(slower.adam.lr(), 1e-5);
    assert_eq!((slower.updates(), slower.env_steps()), (3, 4000));
    // A checkpoint whose networks do not fit is refused before anything changes.
    let mut broken = loaded.clone();
    broken.networks.retain(|n| n.name != Q_TARGET);
    let before = snapshot(&resumed);
    assert!(resumed.restore(&broken).is_err());
    assert_eq!(snapshot(&resumed), before);
}

#[test]
fn invalid_configurations_are_errors_naming_the_field() {
    let (obs, act) = (box_space(3), Space::discrete(4).unwrap());
    let base = DqnConfig::default();
    let cases = [
        (
            DqnConfig {
                hidden: vec![64, 0],
                ..base.clone()
            },
            "dqn.hidden",
        ),
        (
            DqnConfig {
                batch_size: 0,
                ..base.clone()
            },
            "dqn.batch_size",
        ),
        (
            DqnConfig {
                gamma: 1.5,
                ..base.clone()
            },
            "dqn.gamma",
        ),
        (
            DqnConfig {
                target_update: TargetUpdate::Hard { every: 0 },
                ..base.clone()
            },
            "dqn.target_update.every",
        ),
        (
            DqnConfig {
                target_update: TargetUpdate::Polyak { tau: 0.0 },
                ..base.clone()
            },
            "dqn.target_update.tau",
        ),
        (
            DqnConfig {
                exploration: EpsilonSchedule {
                    initial: 1.2,
                    ..base.exploration
                },
                ..base.clone()
            },
            "dqn.exploration.initial",
        ),
        (
            DqnConfig {
                exploration: EpsilonSchedule {
                    end: f32::NAN,
                    ..base.exploration
                },
                ..base.clone()
            },
            "dqn.exploration.end",
        ),
        (
            DqnConfig {
                max_grad_norm: Some(0.0),
                ..base.clone()
            },
            "dqn.max_grad_norm",
        ),
        (
            DqnConfig {
                huber_delta: -1.0,
                ..base.clone()
            },
            "dqn.huber_delta",
        ),
        (
            DqnConfig {
                adam: AdamConfig {
                    lr: -1.0,
                    ..base.adam
                },
                ..base.clone()
            },
            "dqn.adam.lr",
        ),
    ];
    for (config, field) in cases {
        match Dqn::new(&obs, &act, config, 0) {
            Err(Error::Config { key, problem }) => {
                assert_eq!(key, field, "{problem}");
                assert!(!problem.is_empty());
            }
            other => panic!("{field}: {other:?}"),
        }
    }
    // Spaces DQN cannot serve.
    let u8_obs = Space::Box(BoxSpace::uniform(0.0, 255.0, &[4], DType::U8).unwrap());
    for (obs, act) in [
        (box_space(3), box_space(2)),
        (Space::discrete(3).unwrap(), Space::discrete(2).unwrap()),
        (u8_obs, Space::discrete(2).unwrap()),
    ] {
        assert!(matches!(
            Dqn::new(&obs, &act, small(4), 0),
            Err(Error::SpaceMismatch { .. })
        ));
    }
}

#[test]
fn bad_batches_are_refused_and_change_nothing() {
    let (obs, act) = (box_space(3), Space::discrete(4).unwrap());
    let mut dqn = Dqn::new(&obs, &act, small(8), 0).unwrap();
    let schema = dqn.replay_schema().unwrap();
    let good = batch_of(&schema, &random_rows(3, 4, 8, 9));
    dqn.update(&good).unwrap();
    let reference = dqn.clone();
    let before = snapshot(&dqn);
    let priorities = dqn.priorities().to_vec();

    let mut rows = random_rows(3, 4, 8, 10);
    rows[5].action = 7;
    let out_of_range = batch_of(&schema, &rows);
    let too_many = batch_of(&schema, &random_rows(3, 4, 16, 11));
    let wider = Dqn::new(&box_space(5), &act, small(8), 0).unwrap();
    let wide_obs = batch_of(&wider.replay_schema().unwrap(), &random_rows(5, 4, 8, 12));
    // Actions stored as one f32 element: a continuous learner's schema.
    let continuous = TransitionSchema::new(DType::F32, &[3], DType::F32, &[1])
        .with_next_obs()
        .build()
        .unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(continuous.clone(), 8, None).unwrap(),
        Uniform::new(0),
    );
    for row in random_rows(3, 4, 8, 13) {
        replay
            .push(&[
                ColumnSlice::F32(&row.obs),
                ColumnSlice::F32(&[0.5]),
                ColumnSlice::F32(&[row.reward]),
                ColumnSlice::Bool(&[Flag::new(row.terminated)]),
                ColumnSlice::Bool(&[Flag::new(row.truncated)]),
                ColumnSlice::F32(&row.next_obs),
            ])
            .unwrap();
    }
    let mut continuous_batch = Batch::new(&continuous, 8).unwrap();
    replay
        .gather(&(0..8).collect::<Vec<_>>(), &mut continuous_batch)
        .unwrap();
    // Two rewards per row.
    let wide_reward = rl_core::Schema::new([
        Column::new(Field::Obs.name(), DType::F32, &[3]),
        Column::scalar(Field::Action.name(), DType::U32),
        Column::new(Field::Reward.name(), DType::F32, &[2]),
        Column::scalar(Field::Terminated.name(), DType::Bool),
        Column::scalar(Field::Truncated.name(), DType::Bool),
        Column::new(Field::NextObs.name(), DType::F32, &[3]),
    ])
    .unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(wide_reward.clone(), 8, None).unwrap(),
        Uniform::new(0),
    );
    for row in random_rows(3, 4, 8, 14) {
        replay
            .push(&[
                ColumnSlice::F32(&row.obs),
                ColumnSlice::U32(&[row.action]),
                ColumnSlice::F32(&[row.reward, row.reward]),
                ColumnSlice::Bool(&[Flag::new(row.terminated)]),
                ColumnSlice::Bool(&[Flag::new(row.truncated)]),
                ColumnSlice::F32(&row.next_obs),
            ])
            .unwrap();
    }
    let mut wide_reward_batch = Batch::new(&wide_reward, 8).unwrap();
    replay
        .gather(&(0..8).collect::<Vec<_>>(), &mut wide_reward_batch)
        .unwrap();
    // Rewards whose weighted losses overflow f32: the step diverges.
    let mut huge = random_rows(3, 4, 8, 15);
    huge.iter_mut().for_each(|r| r.reward = 3e38);
    let huge = batch_of(&schema, &huge);

    let result = dqn.update(&out_of_range);
    assert!(
        matches!(
            result,
            Err(Error::ActionOutOfRange {
                row: 5,
                action: 7,
                actions: 4
            })
        ),
        "{result:?}"
    );
    for (what, batch) in [
        ("too many rows", &too_many),
        ("wide observations", &wide_obs),
        ("two rewards per row", &wide_reward_batch),
    ] {
        let result = dqn.update(batch);
        assert!(
            matches!(result, Err(Error::ShapeMismatch { .. })),
            "{what}: {result:?}"
        );
    }
    let result = dqn.update(&continuous_batch);
    assert!(matches!(result, Err(Error::Storage { .. })), "{result:?}");
    let result = dqn.update(&huge);
    assert!(
        matches!(
            result,
            Err(Error::Diverged {
                what: "TD loss",
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(snapshot(&dqn), before);
    assert_eq!(dqn.priorities(), &priorities[..]);

    // No gradient was left behind: the next good update is the one a learner that never
    // saw the bad batches makes.
    let mut reference = reference;
    assert_eq!(dqn.update(&good).unwrap(), reference.update(&good).unwrap());
    assert_eq!(snapshot(&dqn), snapshot(&reference));
}

#[test]
fn the_replay_schema_names_the_transition_columns() {
    let dqn = Dqn::new(&box_space(3), &Space::discrete(4).unwrap(), small(8), 0).unwrap();
    let schema = OffPolicyLearner::replay_schema(&dqn).unwrap();
    let names: Vec<&str> = schema.columns().iter().map(|c| c.name()).collect();
    let fields = [
        Field::Obs,
        Field::Action,
        Field::Reward,
        Field::Terminated,
        Field::Truncated,
        Field::NextObs,
    ];
    assert_eq!(names, fields.map(Field::name));
    assert_eq!(schema.columns()[1].dtype(), DType::U32);
    assert_eq!(OffPolicyLearner::batch_size(&dqn), 8);
    assert_eq!(dqn.kind(), crate::dqn::CHECKPOINT_KIND);
    assert_eq!(OffPolicyLearner::priorities(&dqn), Some(&[][..]));
}

#[test]
fn the_rl_zoo_preset_holds_its_cartpole_settings() {
    // rl-baselines3-zoo hyperparams/dqn.yml, CartPole-v1.
    let c = DqnConfig::rl_zoo_cartpole();
    assert_eq!(c.hidden, vec![256, 256]);
    assert_eq!((c.batch_size, c.adam.lr, c.gamma), (64, 2.3e-3, 0.99));
    assert_eq!(c.target_update, TargetUpdate::Hard { every: 128 });
    assert!(!c.double);
    assert_eq!(
        c.exploration,
        EpsilonSchedule {
            initial: 1.0,
            end: 0.04,
            decay_steps: 8_000
        }
    );
    assert_eq!(c.max_grad_norm, Some(10.0));
    c.validate().unwrap();
    let d = DqnConfig::default();
    assert_eq!((d.adam.lr, d.adam.eps), (1e-4, 1e-8));
    assert_eq!((d.max_grad_norm, d.huber_delta), (Some(10.0), 1.0));
}

// ---------------------------------------------------------------------------------------
// Memory.

/// A full update with the default sizes (256-256 network, batch 64, double targets,
/// clipping, Adam, target copy) and acting allocate nothing after the first call.
#[test]
fn a_full_update_and_acting_allocate_nothing_after_the_first() {
    for double in [true, false] {
        let config = DqnConfig {
            double,
            target_update: TargetUpdate::Hard { every: 1 },
            ..DqnConfig::default()
        };
        let mut dqn = Dqn::new(&box_space(4), &Space::discrete(2).unwrap(), config, 0).unwrap();
        let batch = batch_of(&dqn.replay_schema().unwrap(), &random_rows(4, 2, 64, 16));
        dqn.update(&batch).unwrap();
        let (stats, alloc) = rl_testkit::measure(|| dqn.update(&batch));
        assert!(stats.unwrap().loss.is_finite());
        assert_eq!(alloc.allocations, 0, "double {double}: {alloc:?}");
    }
    let mut dqn = Dqn::new(&box_space(4), &Space::discrete(2).unwrap(), small(8), 0).unwrap();
    // More rows than one acting pass holds: chunked, still nothing allocated.
    let obs = vec![0.1f32; 100 * 4];
    let mut actions = vec![0u32; 100];
    let (mut log_probs, mut values) = (vec![0.0f32; 100], vec![0.0f32; 100]);
    let mut states = vec![ActiveHead::default(); 100];
    let mut q = vec![0.0f32; 200];
    dqn.act_rows(&obs, &mut actions).unwrap();
    let (result, alloc) = rl_testkit::measure(|| {
        dqn.act(
            &obs,
            &mut states,
            ActOutput {
                actions: &mut actions,
                log_probs: &mut log_probs,
                values: &mut values,
            },
        )
        .unwrap();
        dqn.q_values(&obs, &mut q)
    });
    result.unwrap();
    assert_eq!(alloc.allocations, 0, "{alloc:?}");
}

#[test]
fn the_memory_plan_states_what_construction_allocates() {
    let (dqn, stats) = rl_testkit::measure(|| {
        Dqn::new(
            &box_space(4),
            &Space::discrete(2).unwrap(),
            DqnConfig::default(),
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
    assert!(plan.lines().iter().all(|l| l.component.starts_with("dqn/")));
    assert_eq!(Learner::memory_plan(&dqn), plan);
}

// ---------------------------------------------------------------------------------------
// Learning.

/// A corridor of `LEN` cells, observed one-hot: action 1 moves right, 0 left (the wall
/// at cell 0 holds). Reaching the last cell ends the episode with reward 1; every other
/// step costs 0.05; episodes are cut after `LIMIT` steps. The best return is
/// `1 - 0.05 (LEN - 2)` in `LEN - 1` steps.
pub(super) struct Corridor {
    cell: usize,
    steps: u32,
    obs_space: Space,
    act_space: Space,
}

pub(super) const LEN: usize = 6;
pub(super) const LIMIT: u32 = 20;

impl Corridor {
    fn new() -> Self {
        Self {
            cell: 0,
            steps: 0,
            obs_space: Space::Box(BoxSpace::uniform(0.0, 1.0, &[LEN], DType::F32).unwrap()),
            act_space: Space::discrete(2).unwrap(),
        }
    }

    fn observe(&self, obs: &mut [f32]) {
        obs.fill(0.0);
        obs[self.cell] = 1.0;
    }
}

impl Env for Corridor {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.obs_space
    }

    fn action_space(&self) -> &Space {
        &self.act_space
    }

    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        (self.cell, self.steps) = (0, 0);
        self.observe(obs);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<Step> {
        self.cell = if action[0] == 1 {
            self.cell + 1
        } else {
            self.cell.saturating_sub(1)
        };
        self.steps += 1;
        self.observe(obs);
        let goal = self.cell == LEN - 1;
        Ok(Step {
            reward: if goal { 1.0 } else { -0.05 },
            terminated: goal,
            truncated: !goal && self.steps >= LIMIT,
        })
    }
}

#[test]
fn dqn_learns_the_shortest_path_of_a_corridor() {
    let config = DqnConfig {
        hidden: vec![32, 32],
        batch_size: 32,
        adam: AdamConfig {
            lr: 1e-3,
            ..DqnConfig::default().adam
        },
        gamma: 0.9,
        target_update: TargetUpdate::Hard { every: 100 },
        exploration: EpsilonSchedule {
            initial: 1.0,
            end: 0.05,
            decay_steps: 1_000,
        },
        ..DqnConfig::default()
    };
    let dqn = Dqn::for_env(&Corridor::new(), config, 0).unwrap();
    let schema = dqn.replay_schema().unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), 10_000, None).unwrap(),
        Uniform::new(0),
    );
    let mut batch = Batch::new(&schema, 32).unwrap();
    let learning_starts = 200;
    let mut collector = rl_collect::SyncCollector::new(
        vec![Corridor::new()],
        dqn,
        rl_collect::CollectorConfig {
            random_frames: learning_starts,
            ..rl_collect::CollectorConfig::new(1)
        },
    )
    .unwrap();
    while collector.frames() < 3_000 {
        let frames = collector.frames();
        collector.policy_mut().set_env_steps(frames);
        collector.collect(&mut replay).unwrap();
        if collector.frames() > learning_starts {
            replay.sample(&mut batch).unwrap();
            collector.policy_mut().update(&batch).unwrap();
        }
    }
    let dqn = collector.policy_mut();

    // The uniformly random policy, for comparison.
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    let (mut env, mut obs) = (Corridor::new(), vec![0.0f32; LEN]);
    let episodes = 500;
    let mut random_return = 0.0;
    for _ in 0..episodes {
        env.reset(None, &mut obs).unwrap();
        loop {
            let step = env.step(&[rng.random_range(0..2)], &mut obs).unwrap();
            random_return += f64::from(step.reward) / f64::from(episodes);
            if step.terminated || step.truncated {
                break;
            }
        }
    }
    let best = 1.0 - 0.05 * (LEN - 2) as f64;
    // One greedy episode (the corridor and the greedy policy are deterministic).
    let (mut env, mut obs, mut action) = (Corridor::new(), vec![0.0f32; LEN], [0u32]);
    let (mut greedy_return, mut length) = (0.0f64, 0);
    env.reset(Some(0), &mut obs).unwrap();
    loop {
        dqn.predict(&obs, 1, &mut action).unwrap();
        let step = env.step(&action, &mut obs).unwrap();
        (greedy_return, length) = (greedy_return + f64::from(step.reward), length + 1);
        if step.terminated || step.truncated {
            break;
        }
    }
    assert!(
        (greedy_return - best).abs() < 1e-5,
        "greedy return {greedy_return} (best {best}, random {random_return})"
    );
    assert_eq!(length, LEN - 1);
    assert!(random_return < best - 0.5, "random return {random_return}");
    // The Q-values at the start approach the optimal ones: right, the discounted return
    // of the shortest path; left (against the wall), one more step's cost and discount.
    let mut q = [0.0f32; 2];
    let mut start = [0.0f32; LEN];
    start[0] = 1.0;
    dqn.q_values(&start, &mut q).unwrap();
    let right = (0..LEN - 2)
        .map(|k| -0.05 * 0.9f64.powi(k as i32))
        .sum::<f64>()
        + 0.9f64.powi(LEN as i32 - 2);
    let left = -0.05 + 0.9 * right;
    for (got, want) in [(q[1], right), (q[0], left)] {
        assert!(
            (f64::from(got) - want).abs() < 0.02,
            "Q(start) {q:?} vs {left}, {right}"
        );
    }
}

#[test]
fn observation_gradients_match_finite_differences() {
    // What a summarizer in front of the Q network trains on: d loss / d obs.
    let config = DqnConfig {
        hidden: vec![6, 5],
        activation: Activation::Tanh,
        batch_size: 8,
        gamma: 0.9,
        ..DqnConfig::default()
    };
    let mut dqn = Dqn::new(&box_space(3), &Space::discrete(4).unwrap(), config, 5).unwrap();
    let rows = random_rows(3, 4, 8, 9);
    let batch = weighted_batch_of(&dqn.replay_schema().unwrap(), &rows, 9);
    let targets = targets64(&dqn, &batch);
    let params = to64(dqn.q.params());
    let obs = to64(batch.obs().unwrap());
    let (batch_size, obs_dim, n) = (dqn.config.batch_size, dqn.obs_dim, dqn.n_actions);
    let transitions = Transitions::read(&batch, batch_size, obs_dim, n).unwrap();
    let mut analytic = vec![0.0f32; 8 * 3];
    dqn.gradients(transitions, Some(&mut analytic)).unwrap();
    let h = 1e-6;
    for i in 0..obs.len() {
        let mut x = obs.clone();
        x[i] += h;
        let up = loss64_at(&dqn, &params, &x, &batch, &targets).0;
        x[i] -= 2.0 * h;
        let down = loss64_at(&dqn, &params, &x, &batch, &targets).0;
        let numeric = (up - down) / (2.0 * h);
        let a = f64::from(analytic[i]);
        assert!(
            (a - numeric).abs() <= 1e-4 + 1e-3 * numeric.abs(),
            "observation element {i}: analytic {a} vs numeric {numeric}"
        );
    }
    assert!(analytic.iter().any(|g| g.abs() > 1e-3), "gradients all ~0");
}
