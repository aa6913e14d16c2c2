//! Tests of both policies: closed forms, sampling frequencies, the minibatched pass
//! against the full pass, finite-difference gradient checks, and collectors driving them.

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{ActOutput, CollectorConfig, Policy, SyncCollector, ValuePolicy};
use rl_core::{BoxSpace, Column, DType, Env, Field, Schema, Space, TransitionSchema};
use rl_envs::{CartPole, Pendulum};
use rl_storage::{ram::RamStorage, replay::ReplayBuffer, rollout::RolloutBuffer, sampler::Uniform};

use rl_nn::{Activation, Architecture};

use crate::predict::Predict;

use super::*;
#[allow(unused_imports, reason = "the learner traits, for their methods")]
use crate::learner::{Learner as _, OffPolicyLearner as _, OnPolicyLearner as _};

/// `rows x len` values uniform in `[-scale, scale)`, from a fixed seed.
pub(super) fn uniform(rows: usize, len: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..rows * len)
        .map(|_| scale * (2.0 * rng.random::<f32>() - 1.0))
        .collect()
}

pub(super) fn discrete_actions(rows: usize, n: u32, seed: u64) -> Vec<u32> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..rows).map(|_| rng.random_range(0..n)).collect()
}

/// Calls `act` for `rows` rows and returns (actions, log-probs, values).
fn act<P: Policy<Obs = f32, State = ()>>(
    policy: &mut P,
    obs: &[f32],
    rows: usize,
    act_len: usize,
) -> (Vec<P::Act>, Vec<f32>, Vec<f32>) {
    let mut actions = vec![P::Act::default(); rows * act_len];
    let (mut log_probs, mut values) = (vec![f32::NAN; rows], vec![f32::NAN; rows]);
    let mut states = vec![(); rows];
    policy
        .act(
            obs,
            &mut states,
            ActOutput {
                actions: &mut actions,
                log_probs: &mut log_probs,
                values: &mut values,
            },
        )
        .unwrap();
    (actions, log_probs, values)
}

fn evaluate<P: ActorCritic<Obs = f32>>(
    policy: &P,
    obs: &[f32],
    actions: &[P::Act],
) -> (Vec<f32>, Vec<f32>) {
    let rows = obs.len() / policy.obs_len();
    let (mut log_probs, mut values) = (vec![f32::NAN; rows], vec![f32::NAN; rows]);
    policy
        .log_probs_and_values(obs, actions, &mut log_probs, &mut values)
        .unwrap();
    (log_probs, values)
}

/// A policy config with `hidden` two-layer width and heads that start far from uniform.
fn sharp(hidden: usize) -> PolicyConfig {
    PolicyConfig {
        hidden: vec![hidden, hidden],
        actor_head_scale: 1.0,
        log_std_init: -0.3,
        ..PolicyConfig::new()
    }
}

/// The default config with `hidden` two-layer width.
fn width(hidden: usize) -> PolicyConfig {
    PolicyConfig {
        hidden: vec![hidden, hidden],
        ..PolicyConfig::new()
    }
}

#[test]
fn categorical_log_probs_sum_exp_to_one() {
    let policy = CategoricalPolicy::new(4, 5, sharp(16), 1).unwrap();
    let obs = uniform(32, 4, 2.0, 2);
    let mut log_probs = vec![0.0; 32 * 5];
    policy.all_log_probs(&obs, &mut log_probs).unwrap();
    for row in log_probs.chunks_exact(5) {
        let total: f64 = row.iter().map(|&lp| f64::from(lp).exp()).sum();
        assert!((total - 1.0).abs() < 1e-5, "{row:?} sums to {total}");
        assert!(row.iter().all(|&lp| lp <= 0.0));
    }
    // Not uniform with a head scale of 1 (the test would be vacuous otherwise).
    let spread = log_probs[..5].iter().fold(0.0f32, |m, &l| m.max(l))
        - log_probs[..5].iter().fold(0.0f32, |m, &l| m.min(l));
    assert!(spread > 0.05, "{:?}", &log_probs[..5]);
    // The log-prob of given actions is the matching column.
    let actions = discrete_actions(32, 5, 3);
    let (chosen, _) = evaluate(&policy, &obs, &actions);
    for ((row, &a), &lp) in log_probs.chunks_exact(5).zip(&actions).zip(&chosen) {
        assert_eq!(row[a as usize].to_bits(), lp.to_bits());
    }
}

/// A Gaussian policy whose mean is the constant `mean` (zero output weights) and whose
/// standard deviations are `std`.
fn constant_gaussian(mean: [f32; 2], std: [f32; 2]) -> GaussianPolicy {
    let mut policy = GaussianPolicy::new(3, 2, width(8), 4).unwrap();
    let actor = policy.network_mut(0).unwrap();
    let tensors = actor.tensors();
    let (weight, bias) = (tensors[4].range(), tensors[5].range());
    actor.params_mut()[weight].fill(0.0);
    actor.params_mut()[bias].copy_from_slice(&mean);
    policy
        .network_mut(2)
        .unwrap()
        .params_mut()
        .copy_from_slice(&std.map(f32::ln));
    policy
}

#[test]
fn gaussian_log_prob_and_entropy_match_the_closed_form() {
    let policy = constant_gaussian([0.1, 0.5], [0.5, 2.0]);
    // By hand: dimension 1: z = (0.3 - 0.1) / 0.5 = 0.4, -z^2/2 - ln 0.5 - ln(2 pi)/2
    // = -0.08 + 0.693147 - 0.918939 = -0.305792; dimension 2: z = (-1 - 0.5) / 2 = -0.75,
    // -0.28125 - 0.693147 - 0.918939 = -1.893336; sum -2.199128.
    let expected_log_prob = -2.199_128;
    // Entropy: ln 0.5 + ln 2 + 2 * (1 + ln(2 pi)) / 2 = 2.837877.
    let expected_entropy = 2.837_877;
    let obs = [0.3, -0.7, 1.1, 0.0, 0.0, 0.0];
    let actions = [0.3, -1.0, 0.1, 0.5];
    let (log_probs, _) = evaluate(&policy, &obs, &actions);
    assert!(
        (log_probs[0] - expected_log_prob).abs() < 1e-5,
        "{log_probs:?}"
    );
    // At the mean: only the normalising terms remain.
    let at_mean = -(0.5f32.ln() + 2.0f32.ln()) - 2.0 * 0.918_938_5;
    assert!((log_probs[1] - at_mean).abs() < 1e-5, "{log_probs:?}");
    let mut ws = policy.workspace(2);
    policy.evaluate(&obs, &actions, &mut ws).unwrap();
    assert_eq!(
        ws.log_probs(),
        log_probs,
        "training and evaluation passes differ"
    );
    for &entropy in ws.entropies() {
        assert!((entropy - expected_entropy).abs() < 1e-5, "{entropy}");
    }
}

#[test]
fn categorical_sampling_frequencies_match_the_softmax() {
    const N: usize = 40_000;
    let mut policy = CategoricalPolicy::new(3, 4, sharp(16), 5).unwrap();
    let one = [0.9f32, -1.4, 0.3];
    let mut probs = [0.0f32; 4];
    policy.all_log_probs(&one, &mut probs).unwrap();
    let probs = probs.map(f32::exp);
    let obs: Vec<f32> = one.iter().copied().cycle().take(N * 3).collect();
    let (actions, log_probs, _) = act(&mut policy, &obs, N, 1);
    let mut counts = [0usize; 4];
    for (&a, &lp) in actions.iter().zip(&log_probs) {
        counts[a as usize] += 1;
        assert_eq!(lp, probs[a as usize].ln(), "log-prob of the drawn action");
    }
    for (count, p) in counts.iter().zip(probs) {
        let frequency = *count as f32 / N as f32;
        // Five binomial standard deviations: fails by chance with probability < 1e-6.
        let tolerance = 5.0 * (p * (1.0 - p) / N as f32).sqrt();
        assert!(
            (frequency - p).abs() < tolerance,
            "frequencies {counts:?} vs probabilities {probs:?}"
        );
    }
    assert!(
        probs.iter().all(|&p| p > 0.02),
        "{probs:?}: exercise every action"
    );
}

#[test]
fn gaussian_samples_have_the_policy_mean_and_std() {
    const N: usize = 20_000;
    let mut policy = constant_gaussian([0.7, -0.2], [0.3, 1.5]);
    let obs = uniform(N, 3, 1.0, 6);
    let (actions, log_probs, _) = act(&mut policy, &obs, N, 2);
    for (dim, (mean, std)) in [(0.7f64, 0.3f64), (-0.2, 1.5)].into_iter().enumerate() {
        let values: Vec<f64> = actions
            .iter()
            .skip(dim)
            .step_by(2)
            .map(|&a| a.into())
            .collect();
        let m = values.iter().sum::<f64>() / N as f64;
        let s = (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / N as f64).sqrt();
        assert!(
            (m - mean).abs() < 5.0 * std / (N as f64).sqrt(),
            "mean {m} vs {mean}"
        );
        assert!((s - std).abs() < 0.03 * std, "std {s} vs {std}");
    }
    // Unclipped: the standard deviation 1.5 puts samples far outside [-1, 1].
    assert!(actions.iter().any(|&a| a.abs() > 3.0));
    // Recorded log-probs agree with a later evaluation of the stored actions.
    let (evaluated, _) = evaluate(&policy, &obs, &actions);
    // Bit for bit: `act` repeats the operations of the tensor pass in the same order.
    assert_eq!(
        log_probs, evaluated,
        "recorded and evaluated log-probs differ"
    );
}

#[test]
fn deterministic_mode_takes_the_argmax_and_the_mean() {
    let mut policy = CategoricalPolicy::new(
        4,
        3,
        PolicyConfig {
            mode: Mode::Deterministic,
            ..sharp(16)
        },
        7,
    )
    .unwrap();
    assert_eq!(policy.mode(), Mode::Deterministic);
    let obs = uniform(50, 4, 2.0, 8);
    let (actions, log_probs, values) = act(&mut policy, &obs, 50, 1);
    let mut all = vec![0.0; 150];
    policy.all_log_probs(&obs, &mut all).unwrap();
    for ((row, &a), &lp) in all.chunks_exact(3).zip(&actions).zip(&log_probs) {
        assert!(row.iter().all(|&l| l <= row[a as usize]));
        assert_eq!(lp, row[a as usize]);
    }
    let (evaluated, evaluated_values) = evaluate(&policy, &obs, &actions);
    assert_eq!(evaluated, log_probs);
    assert_eq!(evaluated_values, values);
    // Twice the same answer.
    assert_eq!(act(&mut policy, &obs, 50, 1).0, actions);

    let mut gaussian = constant_gaussian([0.25, -0.5], [0.5, 0.5]);
    gaussian.set_mode(Mode::Deterministic);
    let (actions, _, _) = act(&mut gaussian, &obs[..30], 10, 2);
    let mut means = vec![0.0; 20];
    gaussian.means(&obs[..30], &mut means).unwrap();
    assert_eq!(actions, means);
    assert!(actions.chunks_exact(2).all(|a| a == [0.25, -0.5]));
}

#[test]
fn sampling_is_reproducible_from_the_seed() {
    let obs = uniform(64, 4, 1.0, 9);
    let run = |seed| {
        let mut policy = CategoricalPolicy::new(4, 2, sharp(16), seed).unwrap();
        act(&mut policy, &obs, 64, 1)
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3).0, run(4).0);
    let mut policy = CategoricalPolicy::new(4, 2, sharp(16), 3).unwrap();
    let mut copy = policy.clone();
    copy.reseed(99);
    assert_ne!(
        act(&mut policy, &obs, 64, 1).0,
        act(&mut copy, &obs, 64, 1).0
    );
}

#[test]
fn sampling_state_carries_the_generator_exactly() {
    let obs = uniform(64, 4, 1.0, 9);
    let mut policy = CategoricalPolicy::new(4, 2, sharp(16), 3).unwrap();
    act(&mut policy, &obs, 64, 1);
    let mut other = CategoricalPolicy::new(4, 2, sharp(16), 3).unwrap();
    other.set_sampling_state(policy.sampling_state());
    assert_eq!(other.sampling_state(), policy.sampling_state());
    assert_eq!(
        act(&mut policy, &obs, 64, 1).0,
        act(&mut other, &obs, 64, 1).0
    );
    // Through JSON (as in a checkpoint), for the Gaussian policy.
    let obs = uniform(16, 3, 1.0, 2);
    let mut gaussian = GaussianPolicy::new(3, 1, width(8), 5).unwrap();
    act(&mut gaussian, &obs, 16, 1);
    let json = serde_json::to_string(&gaussian.sampling_state()).unwrap();
    let mut copy = GaussianPolicy::new(3, 1, width(8), 6).unwrap();
    copy.copy_weights_from(&gaussian).unwrap();
    copy.set_sampling_state(serde_json::from_str(&json).unwrap());
    let (a, b) = (act(&mut gaussian, &obs, 16, 1), act(&mut copy, &obs, 16, 1));
    assert_eq!(
        a.0.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        b.0.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // Architectures are typed values: kind, and each network's sizes and activation.
    let relu = CategoricalPolicy::new(4, 2, width(64), 0)
        .unwrap()
        .architecture();
    assert_eq!(relu.kind, PolicyKind::Categorical);
    assert_eq!(
        relu.networks[0].1,
        Architecture::Mlp {
            sizes: vec![4, 64, 64, 2],
            activation: Activation::Relu
        }
    );
    let tanh_config = PolicyConfig {
        activation: Activation::Tanh,
        ..width(32)
    };
    let tanh = GaussianPolicy::new(3, 1, tanh_config, 0)
        .unwrap()
        .architecture();
    assert_eq!(tanh.kind, PolicyKind::Gaussian);
    assert_eq!(
        tanh.to_string(),
        "Gaussian; actor: mlp 3-32-32-1 tanh; critic: mlp 3-32-32-1 tanh; log_std: tensor [1]"
    );
    assert_ne!(
        tanh,
        GaussianPolicy::new(3, 1, width(32), 0)
            .unwrap()
            .architecture()
    );
}

/// Checks the minibatched pass against the full pass for several minibatch sizes,
/// including 1, sizes that leave a partial last minibatch, and more than the rows.
fn check_minibatched<P: ActorCritic<Obs = f32>>(policy: &P, obs: &[f32], actions: &[P::Act]) {
    let rows = obs.len() / policy.obs_len();
    let (full_log_probs, full_values) = evaluate(policy, obs, actions);
    for minibatch in [1, 7, 64, 100, 333, rows, rows + 5] {
        let (mut log_probs, mut values) = (vec![f32::NAN; rows], vec![f32::NAN; rows]);
        let mut ws = policy.workspace(minibatch);
        policy
            .evaluate_minibatched(obs, actions, &mut log_probs, &mut values, &mut ws)
            .unwrap();
        // Bit for bit: each output row depends only on its input row, and the matrix
        // kernels accumulate a row's dot products in the same order whatever the number
        // of rows.
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&log_probs),
            bits(&full_log_probs),
            "minibatch {minibatch}"
        );
        assert_eq!(bits(&values), bits(&full_values), "minibatch {minibatch}");
    }
    // A workspace of another policy is refused.
    let (mut log_probs, mut values) = (vec![0.0; rows], vec![0.0; rows]);
    let other = CategoricalPolicy::new(policy.obs_len() + 1, 3, width(8), 0).unwrap();
    let mut foreign = other.workspace(16);
    assert!(matches!(
        policy.evaluate_minibatched(obs, actions, &mut log_probs, &mut values, &mut foreign),
        Err(Error::Config { .. })
    ));
}

#[test]
fn minibatched_pass_equals_the_full_pass() {
    const ROWS: usize = 1000;
    let categorical = CategoricalPolicy::new(4, 2, sharp(64), 10).unwrap();
    check_minibatched(
        &categorical,
        &uniform(ROWS, 4, 2.0, 11),
        &discrete_actions(ROWS, 2, 12),
    );
    let tanh = CategoricalPolicy::new(
        8,
        6,
        PolicyConfig {
            activation: Activation::Tanh,
            ..sharp(32)
        },
        13,
    )
    .unwrap();
    check_minibatched(
        &tanh,
        &uniform(ROWS, 8, 2.0, 14),
        &discrete_actions(ROWS, 6, 15),
    );
    let gaussian = GaussianPolicy::new(3, 2, sharp(64), 16).unwrap();
    check_minibatched(
        &gaussian,
        &uniform(ROWS, 3, 2.0, 17),
        &uniform(ROWS, 2, 3.0, 18),
    );
}

#[test]
fn spaces_and_inputs_are_checked() {
    let cart = CategoricalPolicy::new(4, 2, width(8), 0).unwrap();
    assert!(cart.check_space(&Space::discrete(2).unwrap()).is_ok());
    let err = cart.check_space(&Space::discrete(3).unwrap()).unwrap_err();
    assert!(matches!(
        err,
        Error::SpaceMismatch {
            what: "action space",
            ..
        }
    ));
    assert!(err.to_string().contains("2 actions"), "{err}");
    let boxed = Space::Box(BoxSpace::uniform(-1.0, 1.0, &[2], DType::F32).unwrap());
    assert!(cart.check_space(&boxed).is_err());
    assert!(
        cart.check_observation_space(CartPole::new(0).observation_space())
            .is_ok()
    );
    assert!(
        cart.check_observation_space(Pendulum::new(0).observation_space())
            .is_err()
    );
    let from_env = CategoricalPolicy::for_env(&CartPole::new(0), width(8), 0).unwrap();
    assert_eq!((from_env.obs_len(), from_env.actions()), (4, 2));
    let pendulum = GaussianPolicy::for_env(&Pendulum::new(0), width(8), 0).unwrap();
    assert_eq!((pendulum.obs_len(), pendulum.act_len()), (3, 1));
    let wide = GaussianPolicy::new(3, 2, width(8), 0).unwrap();
    assert!(matches!(
        wide.check_space(Pendulum::new(0).action_space()),
        Err(Error::SpaceMismatch { .. })
    ));
    assert!(wide.check_space(&Space::discrete(2).unwrap()).is_err());

    for bad in [
        PolicyConfig {
            actor_head_scale: 0.0,
            ..PolicyConfig::new()
        },
        PolicyConfig {
            critic_head_scale: f32::NAN,
            ..PolicyConfig::new()
        },
        PolicyConfig {
            log_std_init: f32::INFINITY,
            ..PolicyConfig::new()
        },
        PolicyConfig {
            hidden: vec![],
            ..PolicyConfig::new()
        },
        PolicyConfig {
            hidden: vec![64, 0],
            ..PolicyConfig::new()
        },
    ] {
        assert!(matches!(
            CategoricalPolicy::new(4, 2, bad, 0),
            Err(Error::Config { .. })
        ));
    }
    assert!(CategoricalPolicy::new(0, 2, width(8), 0).is_err());
    assert!(GaussianPolicy::new(3, 0, width(8), 0).is_err());

    let mut policy = cart;
    let (mut log_probs, mut values) = ([0.0; 2], [0.0; 2]);
    let obs = [0.0f32; 8];
    assert!(matches!(
        policy.log_probs_and_values(&obs, &[0, 2], &mut log_probs, &mut values),
        Err(Error::ActionOutOfRange {
            row: 1,
            action: 2,
            actions: 2
        })
    ));
    assert!(matches!(
        policy.log_probs_and_values(&obs[..7], &[0, 1], &mut log_probs, &mut values),
        Err(Error::ShapeMismatch { .. })
    ));
    // More rows than the workspace holds, and gradients for another policy.
    let mut ws = policy.workspace(1);
    assert!(matches!(
        policy.evaluate(&obs, &[0, 1], &mut ws),
        Err(Error::ShapeMismatch { .. })
    ));
    let mut ws = policy.workspace(2);
    policy.evaluate(&obs, &[0, 1], &mut ws).unwrap();
    let mut foreign = PolicyGradients::new(&GaussianPolicy::new(3, 1, width(8), 0).unwrap());
    assert!(
        policy
            .backward(
                &[0, 1],
                &[1.0; 2],
                &[0.0; 2],
                &[0.0; 2],
                &mut ws,
                &mut foreign
            )
            .is_err()
    );
    let mut actions = [0u32; 2];
    let result = policy.act(
        &obs,
        &mut [(); 3],
        ActOutput {
            actions: &mut actions,
            log_probs: &mut log_probs,
            values: &mut values,
        },
    );
    assert!(result.is_err());
    // No rows: nothing to do, no error.
    assert!(policy.values(&[], &[], &mut []).is_ok());
    assert!(
        policy
            .log_probs_and_values(&[], &[], &mut [], &mut [])
            .is_ok()
    );
}

#[test]
fn networks_expose_every_parameter_to_optimisers() {
    let categorical = CategoricalPolicy::new(4, 2, width(64), 0).unwrap();
    let actor = (4 * 64 + 64) + (64 * 64 + 64) + (64 * 2 + 2);
    let critic = (4 * 64 + 64) + (64 * 64 + 64) + (64 + 1);
    let total = |p: &dyn PolicyNetworks| {
        (0..p.network_names().len())
            .map(|i| p.network(i).unwrap().num_params())
            .sum::<usize>()
    };
    assert_eq!(categorical.network_names(), ["actor", "critic"]);
    assert_eq!(total(&categorical), actor + critic);
    assert!(categorical.network(2).is_none());
    let gaussian = GaussianPolicy::new(3, 1, width(64), 0).unwrap();
    let mean = (3 * 64 + 64) + (64 * 64 + 64) + (64 + 1);
    // The log-std is a network of its own.
    assert_eq!(gaussian.network_names(), ["actor", "critic", "log_std"]);
    assert_eq!(total(&gaussian), 2 * mean + 1);
    assert_eq!(PolicyGradients::new(&gaussian).len(), 3);
    // Same seed, same weights; another seed, others; the actor head starts small with a
    // zero bias.
    let again = CategoricalPolicy::new(4, 2, width(64), 0).unwrap();
    let other = CategoricalPolicy::new(4, 2, width(64), 1).unwrap();
    assert_eq!(
        categorical.network(0).unwrap().params(),
        again.network(0).unwrap().params()
    );
    assert_ne!(
        categorical.network(0).unwrap().params(),
        other.network(0).unwrap().params()
    );
    let actor_net = categorical.network(0).unwrap();
    let tensors = actor_net.tensors();
    let head = &actor_net.params()[tensors[4].range()];
    assert!(
        head.iter().all(|w| w.abs() <= 0.01 / 8.0 + 1e-7),
        "{head:?}"
    );
    assert!(
        actor_net.params()[tensors[5].range()]
            .iter()
            .all(|&b| b == 0.0)
    );
    assert_eq!(gaussian.log_std(), [0.0]);
    // Orthogonal initialisation: rows of the first layer orthogonal with norm sqrt(2).
    let ortho = PolicyConfig {
        init: PolicyInit::Orthogonal,
        ..width(64)
    };
    let policy = CategoricalPolicy::new(4, 2, ortho, 0).unwrap();
    let actor = policy.network(0).unwrap();
    let w = &actor.params()[actor.tensors()[0].range()];
    for i in 0..4 {
        // 64 x 4: the columns are orthonormal times sqrt(2).
        let dot = |a: usize, b: usize| {
            (0..64)
                .map(|r| f64::from(w[r * 4 + a]) * f64::from(w[r * 4 + b]))
                .sum::<f64>()
        };
        assert!((dot(i, i) - 2.0).abs() < 1e-4, "{}", dot(i, i));
        assert!(dot(i, (i + 1) % 4).abs() < 1e-4);
    }
}

// ---------------------------------------------------------------------------------------
// Gradients of the training pass against finite differences of an f64 reference.

/// One row through an MLP in f64 (the reference): `(outputs, pre-activations)`.
pub(super) fn mlp64(arch: &Architecture, params: &[f64], x: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let Architecture::Mlp { sizes, activation } = arch else {
        panic!("an MLP")
    };
    let (mut x, mut pre, mut offset) = (x.to_vec(), Vec::new(), 0);
    for (l, pair) in sizes.windows(2).enumerate() {
        let (inputs, outputs) = (pair[0], pair[1]);
        let w = &params[offset..offset + inputs * outputs];
        let b = &params[offset + inputs * outputs..offset + (inputs + 1) * outputs];
        offset += (inputs + 1) * outputs;
        let last = l + 2 == sizes.len();
        x = (0..outputs)
            .map(|o| {
                let z = b[o] + (0..inputs).map(|i| w[o * inputs + i] * x[i]).sum::<f64>();
                if !last {
                    pre.push(z);
                }
                match (last, activation) {
                    (true, _) => z,
                    (false, Activation::Relu) => z.max(0.0),
                    (false, Activation::Tanh) => z.tanh(),
                }
            })
            .collect();
    }
    (x, pre)
}

/// A head's closed form in f64: `(actor outputs, every network's parameters, row) ->
/// (log_prob, entropy)`.
type Head<'a> = dyn Fn(&[f64], &[Vec<f64>], usize) -> (f64, f64) + 'a;

/// A batch and the per-row weights of the loss
/// `sum_i (w_lp_i log_prob_i + w_h_i entropy_i + w_v_i value_i)`.
struct GradCase<A> {
    obs: Vec<f32>,
    actions: Vec<A>,
    w_lp: Vec<f32>,
    w_h: Vec<f32>,
    w_v: Vec<f32>,
}

impl<A> GradCase<A> {
    fn new(rows: usize, obs_len: usize, actions: Vec<A>, seed: u64) -> Self {
        Self {
            obs: uniform(rows, obs_len, 1.5, seed),
            actions,
            w_lp: uniform(rows, 1, 1.0, seed + 1),
            w_h: uniform(rows, 1, 1.0, seed + 2),
            w_v: uniform(rows, 1, 1.0, seed + 3),
        }
    }
}

/// The loss in f64 from parameters `params` (one vector per network), with the head's
/// closed form `head(actor outputs, row) -> (log_prob, entropy)`. Also returns every
/// pre-activation (to skip ReLU kinks).
fn reference_loss<P: ActorCritic<Obs = f32>>(
    policy: &P,
    params: &[Vec<f64>],
    case: &GradCase<P::Act>,
    head: &Head<'_>,
) -> (f64, Vec<f64>) {
    let arch = policy.architecture();
    let obs_len = policy.obs_len();
    let rows = case.obs.len() / obs_len;
    let mut normalised = case.obs.clone();
    if let Some(n) = policy.obs_normalizer() {
        n.normalize_to(&case.obs, &mut normalised);
    }
    let (mut loss, mut pre) = (0.0, Vec::new());
    for r in 0..rows {
        let x: Vec<f64> = normalised[r * obs_len..(r + 1) * obs_len]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let (out, p1) = mlp64(&arch.networks[0].1, &params[0], &x);
        let (value, p2) = mlp64(&arch.networks[1].1, &params[1], &x);
        pre.extend(p1.into_iter().chain(p2));
        let (lp, h) = head(&out, params, r);
        loss += f64::from(case.w_lp[r]) * lp
            + f64::from(case.w_h[r]) * h
            + f64::from(case.w_v[r]) * value[0];
    }
    (loss, pre)
}

/// The policy's gradients of the case's loss against central finite differences of the
/// f64 reference, for every parameter of every network.
fn check_policy_gradients<P: ActorCritic<Obs = f32>>(
    policy: &P,
    case: &GradCase<P::Act>,
    head: &Head<'_>,
) {
    let rows = case.w_lp.len();
    let mut ws = policy.workspace(rows);
    policy.evaluate(&case.obs, &case.actions, &mut ws).unwrap();
    let mut grads = PolicyGradients::new(policy);
    policy
        .backward(
            &case.actions,
            &case.w_lp,
            &case.w_h,
            &case.w_v,
            &mut ws,
            &mut grads,
        )
        .unwrap();
    let params: Vec<Vec<f64>> = (0..policy.network_names().len())
        .map(|i| {
            policy
                .network(i)
                .unwrap()
                .params()
                .iter()
                .map(|&p| f64::from(p))
                .collect()
        })
        .collect();
    let (base, pre) = reference_loss(policy, &params, case, head);
    // The f32 passes against the f64 reference, before any gradient.
    let ours: f64 = (0..rows)
        .map(|r| {
            f64::from(case.w_lp[r]) * f64::from(ws.log_probs()[r])
                + f64::from(case.w_h[r]) * f64::from(ws.entropies()[r])
                + f64::from(case.w_v[r]) * f64::from(ws.values()[r])
        })
        .sum();
    assert!(
        (ours - base).abs() < 1e-4 * base.abs().max(1.0),
        "loss {ours} vs reference {base}"
    );
    let h = 1e-6;
    let relu = matches!(
        policy.architecture().networks[0].1,
        Architecture::Mlp {
            activation: Activation::Relu,
            ..
        }
    );
    // A ReLU kink within reach of the step would make finite differences wrong: the
    // seeds below avoid it; fail loudly rather than pass without checking.
    assert!(
        !relu || pre.iter().all(|z| z.abs() > 1e-4),
        "a hidden pre-activation sits at a ReLU kink: pick another seed"
    );
    let mut checked = 0;
    for (n, values) in params.iter().enumerate() {
        let analytic = grads.get(n).unwrap();
        for i in 0..values.len() {
            let mut p = params.clone();
            p[n][i] += h;
            let up = reference_loss(policy, &p, case, head).0;
            p[n][i] -= 2.0 * h;
            let down = reference_loss(policy, &p, case, head).0;
            let numeric = (up - down) / (2.0 * h);
            let a = f64::from(analytic[i]);
            assert!(
                (a - numeric).abs() <= 1e-4 + 1e-3 * numeric.abs(),
                "{} parameter {i}: analytic {a} vs numeric {numeric}",
                policy.network_names()[n]
            );
            checked += 1;
        }
    }
    assert_eq!(checked, grads_len(&grads));
    assert!(
        grads.get(0).unwrap().iter().any(|&g| g != 0.0),
        "actor gradients all zero"
    );
    assert!(
        grads.get(1).unwrap().iter().any(|&g| g != 0.0),
        "critic gradients all zero"
    );
}

fn grads_len(grads: &PolicyGradients) -> usize {
    (0..grads.len()).map(|i| grads.get(i).unwrap().len()).sum()
}

/// Log-prob and entropy of a categorical row from its logits, in f64.
fn categorical_head(actions: &[u32]) -> impl Fn(&[f64], &[Vec<f64>], usize) -> (f64, f64) + '_ {
    move |logits, _, r| {
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + logits.iter().map(|z| (z - max).exp()).sum::<f64>().ln();
        let l: Vec<f64> = logits.iter().map(|z| z - lse).collect();
        (
            l[actions[r] as usize],
            -l.iter().map(|x| x.exp() * x).sum::<f64>(),
        )
    }
}

/// Log-prob and entropy of a Gaussian row from its means and the log-std network, in f64.
fn gaussian_head(
    actions: &[f32],
    d: usize,
) -> impl Fn(&[f64], &[Vec<f64>], usize) -> (f64, f64) + '_ {
    move |means, params, r| {
        let half_ln_2pi = 0.5 * (2.0 * std::f64::consts::PI).ln();
        let (mut lp, mut h) = (0.0, 0.0);
        for i in 0..d {
            let s = params[2][i];
            let z = (f64::from(actions[r * d + i]) - means[i]) * (-s).exp();
            lp += -0.5 * z * z - s - half_ln_2pi;
            h += s + 0.5 + half_ln_2pi;
        }
        (lp, h)
    }
}

#[test]
fn categorical_gradients_match_finite_differences() {
    for (activation, seed) in [(Activation::Tanh, 40), (Activation::Relu, 41)] {
        let config = PolicyConfig {
            hidden: vec![6, 5],
            activation,
            actor_head_scale: 1.0,
            ..PolicyConfig::new()
        };
        let policy = CategoricalPolicy::new(4, 3, config, seed).unwrap();
        let case = GradCase::new(5, 4, discrete_actions(5, 3, seed), seed);
        check_policy_gradients(&policy, &case, &categorical_head(&case.actions));
    }
    // Through an observation normaliser.
    let mut policy = CategoricalPolicy::new(4, 3, sharp(5), 42).unwrap();
    let mut normalizer = ObsNormalizer::new(4, 3.0).unwrap();
    normalizer.update(&uniform(20, 4, 2.0, 43)).unwrap();
    policy.set_obs_normalizer(Some(normalizer)).unwrap();
    let case = GradCase::new(4, 4, discrete_actions(4, 3, 44), 44);
    check_policy_gradients(&policy, &case, &categorical_head(&case.actions));
}

#[test]
fn gaussian_gradients_match_finite_differences() {
    for (activation, seed) in [(Activation::Tanh, 50), (Activation::Relu, 51)] {
        let config = PolicyConfig {
            hidden: vec![5, 4],
            activation,
            actor_head_scale: 1.0,
            log_std_init: -0.4,
            ..PolicyConfig::new()
        };
        let policy = GaussianPolicy::new(3, 2, config, seed).unwrap();
        let case = GradCase::new(5, 3, uniform(5, 2, 1.5, seed), seed);
        check_policy_gradients(&policy, &case, &gaussian_head(&case.actions, 2));
    }
}

/// PPO's loss functions: their gradients against finite differences of the loss values.
#[test]
fn ppo_loss_gradients_match_finite_differences() {
    let rows = 7;
    let log_probs = uniform(rows, 1, 0.5, 60);
    let old = uniform(rows, 1, 0.5, 61);
    let advantages = uniform(rows, 1, 2.0, 62);
    let mut grads = vec![0.0; rows];
    crate::ppo::clipped_surrogate(&log_probs, &old, &advantages, 0.2, &mut grads).unwrap();
    let h = 1e-3f32;
    for i in 0..rows {
        let mut up = log_probs.clone();
        up[i] += h;
        let mut down = log_probs.clone();
        down[i] -= h;
        let f = |lp: &[f32]| {
            crate::ppo::clipped_surrogate(lp, &old, &advantages, 0.2, &mut vec![0.0; rows]).unwrap()
        };
        let numeric = (f(&up) - f(&down)) / (2.0 * h);
        // Away from the clip boundaries the loss is smooth in each log-prob.
        let ratio = (log_probs[i] - old[i]).exp();
        if ((ratio - 0.8).abs() > 0.01) && ((ratio - 1.2).abs() > 0.01) {
            assert!(
                (grads[i] - numeric).abs() < 1e-3,
                "row {i}: {} vs {numeric}",
                grads[i]
            );
        }
    }
    let values = uniform(rows, 1, 2.0, 63);
    let returns = uniform(rows, 1, 2.0, 64);
    let old_values = uniform(rows, 1, 2.0, 65);
    for clip in [None, Some(0.5f32)] {
        let mut grads = vec![0.0; rows];
        crate::ppo::value_loss(
            &values,
            &returns,
            clip.map(|c| (old_values.as_slice(), c)),
            &mut grads,
        )
        .unwrap();
        for i in 0..rows {
            let f = |v: &[f32]| {
                crate::ppo::value_loss(
                    v,
                    &returns,
                    clip.map(|c| (old_values.as_slice(), c)),
                    &mut vec![0.0; rows],
                )
                .unwrap()
            };
            let (mut up, mut down) = (values.clone(), values.clone());
            up[i] += h;
            down[i] -= h;
            let numeric = (f(&up) - f(&down)) / (2.0 * h);
            let moved = (values[i] - old_values[i]).abs();
            if clip.is_none_or(|c| (moved - c).abs() > 0.01) {
                assert!(
                    (grads[i] - numeric).abs() < 2e-3,
                    "{clip:?} row {i}: {} vs {numeric}",
                    grads[i]
                );
            }
        }
    }
}

#[test]
fn adam_steps_on_the_training_pass_train_both_policies() {
    use rl_nn::{Adam, AdamConfig};
    let config = AdamConfig {
        lr: 1e-2,
        ..AdamConfig::default()
    };
    // Categorical: maximise the log-prob of action 2 and fit values to 1.
    let mut policy = CategoricalPolicy::new(4, 3, width(16), 70).unwrap();
    let mut adams: Vec<Adam> = (0..2)
        .map(|i| Adam::new(policy.network(i).unwrap().num_params(), config).unwrap())
        .collect();
    let obs = uniform(16, 4, 1.0, 71);
    let actions = vec![2u32; 16];
    let (before, _) = evaluate(&policy, &obs, &actions);
    let mut ws = policy.workspace(16);
    let mut grads = PolicyGradients::new(&policy);
    for _ in 0..20 {
        policy.evaluate(&obs, &actions, &mut ws).unwrap();
        let d_values: Vec<f32> = ws.values().iter().map(|v| 2.0 * (v - 1.0) / 16.0).collect();
        grads.zero();
        policy
            .backward(
                &actions,
                &[-1.0 / 16.0; 16],
                &[0.0; 16],
                &d_values,
                &mut ws,
                &mut grads,
            )
            .unwrap();
        grads.clip_norm(0.5).unwrap();
        for (i, adam) in adams.iter_mut().enumerate() {
            adam.update(
                policy.network_mut(i).unwrap().params_mut(),
                grads.get(i).unwrap(),
            )
            .unwrap();
        }
    }
    let (after, values) = evaluate(&policy, &obs, &actions);
    let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
    assert!(
        mean(&after) > mean(&before) + 0.3,
        "{before:?} -> {after:?}"
    );
    assert!((mean(&values) - 1.0).abs() < 0.3, "{values:?}");

    // Gaussian: an entropy bonus alone raises the log-std.
    let mut gaussian = GaussianPolicy::new(3, 2, width(16), 72).unwrap();
    let mut adam = Adam::new(2, config).unwrap();
    let (obs, actions) = (uniform(8, 3, 1.0, 73), uniform(8, 2, 1.0, 74));
    let mut ws = gaussian.workspace(8);
    let mut grads = PolicyGradients::new(&gaussian);
    for _ in 0..10 {
        gaussian.evaluate(&obs, &actions, &mut ws).unwrap();
        grads.zero();
        gaussian
            .backward(
                &actions,
                &[0.0; 8],
                &[-1.0 / 8.0; 8],
                &[0.0; 8],
                &mut ws,
                &mut grads,
            )
            .unwrap();
        assert!(
            grads.get(0).unwrap().iter().all(|&g| g == 0.0),
            "the entropy does not depend on the mean"
        );
        adam.update(
            gaussian.network_mut(2).unwrap().params_mut(),
            grads.get(2).unwrap(),
        )
        .unwrap();
    }
    assert!(
        gaussian.log_std().iter().all(|&l| l > 0.05),
        "{:?}",
        gaussian.log_std()
    );
}

// ---------------------------------------------------------------------------------------
// Collectors driving the policies.

fn replay_schema(obs: usize, action: DType, act_len: usize) -> Schema {
    let action = if act_len == 1 && action == DType::U32 {
        Column::scalar("action", action)
    } else {
        Column::new("action", action, &[act_len])
    };
    Schema::new([
        Column::new("obs", DType::F32, &[obs]),
        action,
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
        Column::new("next_obs", DType::F32, &[obs]),
        Column::scalar("log_prob", DType::F32),
        Column::scalar("value", DType::F32),
    ])
    .unwrap()
}

/// After a rollout, evaluates the stored actions in minibatches and compares with the
/// log-probs and values recorded during collection.
fn check_recorded<P: ActorCritic<Obs = f32>>(
    policy: &P,
    rollout: &RolloutBuffer,
    actions: &[P::Act],
) {
    let rows = rollout.rows();
    let (mut log_probs, mut values) = (vec![0.0; rows], vec![0.0; rows]);
    let mut ws = policy.workspace(10);
    let obs = rollout.field::<f32>(Field::Obs).unwrap();
    policy
        .evaluate_minibatched(obs, actions, &mut log_probs, &mut values, &mut ws)
        .unwrap();
    let recorded = rollout.field::<f32>(Field::LogProb).unwrap();
    assert!(recorded.iter().all(|lp| lp.is_finite()));
    // Bit for bit, although `act` saw 4 rows at a time and the evaluation 10: PPO's
    // first ratio is exactly 1 whichever way the old log-probs were obtained.
    assert_eq!(log_probs, recorded);
    assert_eq!(values, rollout.field::<f32>(Field::Value).unwrap());
}

#[test]
fn sync_collector_drives_the_categorical_policy_on_cartpole() {
    let envs: Vec<CartPole> = (0..4).map(CartPole::new).collect();
    let policy = CategoricalPolicy::for_env(&envs[0], width(32), 1).unwrap();
    let mut collector = SyncCollector::new(envs, policy, CollectorConfig::new(64)).unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(replay_schema(4, DType::U32, 1), 1_000, None).unwrap(),
        Uniform::new(0),
    );
    for _ in 0..3 {
        assert_eq!(collector.collect(&mut replay).unwrap().frames, 64);
    }
    assert_eq!(replay.len(), 192);

    let schema = TransitionSchema::new(DType::F32, &[4], DType::U32, &[])
        .for_rollout()
        .build()
        .unwrap();
    let mut rollout = RolloutBuffer::new(schema, 32, 4, None).unwrap();
    collector.collect_rollout(&mut rollout).unwrap();
    let log_probs = rollout.field::<f32>(Field::LogProb).unwrap();
    assert!(log_probs.iter().all(|&lp| lp <= 0.0));
    let actions = rollout.field::<u32>(Field::Action).unwrap();
    assert!(rollout.field::<f32>(Field::Action).is_err());
    check_recorded(collector.policy(), &rollout, actions);
    assert!(actions.contains(&0) && actions.contains(&1));
}

#[test]
fn sync_collector_drives_the_gaussian_policy_on_pendulum() {
    let envs: Vec<Pendulum> = (0..4).map(Pendulum::new).collect();
    let config = PolicyConfig {
        log_std_init: 0.5,
        ..PolicyConfig::new()
    };
    let policy = GaussianPolicy::for_env(
        &envs[0],
        PolicyConfig {
            hidden: vec![32, 32],
            ..config
        },
        2,
    )
    .unwrap();
    let mut collector = SyncCollector::new(envs, policy, CollectorConfig::new(64)).unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(replay_schema(3, DType::F32, 1), 1_000, None).unwrap(),
        Uniform::new(0),
    );
    for _ in 0..3 {
        collector.collect(&mut replay).unwrap();
    }
    assert_eq!(replay.len(), 192);

    let schema = TransitionSchema::new(DType::F32, &[3], DType::F32, &[1])
        .for_rollout()
        .build()
        .unwrap();
    let mut rollout = RolloutBuffer::new(schema, 64, 4, None).unwrap();
    collector.collect_rollout(&mut rollout).unwrap();
    let actions = rollout.field::<f32>(Field::Action).unwrap();
    assert!(rollout.field::<u32>(Field::Action).is_err());
    // Stored unclipped: with a standard deviation of e^0.5 some exceed the torque limit 2.
    assert!(actions.iter().any(|a| a.abs() > 2.0));
    check_recorded(collector.policy(), &rollout, actions);
}

/// The Tianshou seed: old log-probs over a whole rollout in one pass run out of memory on
/// large rollouts. In minibatches, the peak of live bytes depends on the minibatch size,
/// not on the rollout size.
#[test]
fn minibatched_evaluation_peak_memory_does_not_grow_with_the_rollout() {
    let policy = CategoricalPolicy::new(4, 2, width(64), 0).unwrap();
    let peak = |rows: usize, minibatch: usize| {
        let obs = uniform(rows, 4, 1.0, 3);
        let actions: Vec<u32> = (0..rows as u32).map(|i| i % 2).collect();
        let (mut log_probs, mut values) = (vec![0.0; rows], vec![0.0; rows]);
        let (result, stats) = rl_testkit::measure(|| {
            let mut ws = policy.workspace(minibatch);
            policy.evaluate_minibatched(&obs, &actions, &mut log_probs, &mut values, &mut ws)
        });
        result.unwrap();
        stats.peak_live_bytes
    };
    let small = peak(1_024, 256);
    let large = peak(32_768, 256);
    // 32x the rollout; the peak may differ by allocator noise, not by rollout size.
    assert!(
        large < small + small / 4,
        "peak {large} B for 32k rows vs {small} B for 1k rows"
    );
    // The full pass, for contrast, grows with the rollout.
    let full = peak(32_768, 32_768);
    assert!(
        full > 8 * large,
        "full pass {full} B vs minibatched {large} B"
    );
}

/// A categorical policy with a convolutional encoder: the actor and critic are linear
/// heads on one shared torso (three networks, named so in checkpoints), and the
/// gradients of a weighted loss of log-probs, entropies and values through heads and
/// torso match central finite differences of the policy's own passes (tanh, so the loss
/// is smooth; f32 passes, so the tolerance is f32's).
#[test]
fn a_cnn_encoder_is_a_torso_shared_by_the_heads_with_true_gradients() {
    let config = PolicyConfig {
        hidden: vec![6],
        activation: Activation::Tanh,
        encoder: Encoder::SmallCnn,
        actor_head_scale: 1.0,
        init: PolicyInit::Orthogonal,
        ..PolicyConfig::new()
    };
    let policy = CategoricalPolicy::<f32>::with_obs_shape(&[2, 5, 6], 3, config, 9).unwrap();
    assert_eq!(policy.network_names(), &["actor", "critic", "encoder"]);
    let arch = policy.architecture();
    assert!(matches!(arch.networks[2].1, Architecture::Cnn(_)), "{arch}");
    assert_eq!(
        policy.network(0).unwrap().num_params(),
        6 * 3 + 3,
        "a linear head"
    );
    assert_eq!(
        policy.shape().num_params(),
        (0..3)
            .map(|i| policy.network(i).unwrap().num_params())
            .sum::<usize>()
    );
    let rows = 4;
    let case = GradCase::new(rows, 60, discrete_actions(rows, 3, 5), 5);
    let loss = |p: &CategoricalPolicy<f32>| -> f64 {
        let mut ws = p.workspace(rows);
        p.evaluate(&case.obs, &case.actions, &mut ws).unwrap();
        (0..rows)
            .map(|r| {
                f64::from(case.w_lp[r]) * f64::from(ws.log_probs()[r])
                    + f64::from(case.w_h[r]) * f64::from(ws.entropies()[r])
                    + f64::from(case.w_v[r]) * f64::from(ws.values()[r])
            })
            .sum()
    };
    let mut ws = policy.workspace(rows);
    policy.evaluate(&case.obs, &case.actions, &mut ws).unwrap();
    let mut grads = PolicyGradients::new(&policy);
    assert_eq!(grads.len(), 3);
    policy
        .backward(
            &case.actions,
            &case.w_lp,
            &case.w_h,
            &case.w_v,
            &mut ws,
            &mut grads,
        )
        .unwrap();
    let eps = 1e-3f32;
    for net in 0..3 {
        let n = policy.network(net).unwrap().num_params();
        let analytic = grads.get(net).unwrap().to_vec();
        assert!(
            analytic.iter().any(|&g| g != 0.0),
            "network {net} got no gradient"
        );
        for i in (0..n).step_by((n / 40).max(1)) {
            let mut plus = policy.clone();
            plus.network_mut(net).unwrap().params_mut()[i] += eps;
            let mut minus = policy.clone();
            minus.network_mut(net).unwrap().params_mut()[i] -= eps;
            let numeric = (loss(&plus) - loss(&minus)) / (2.0 * f64::from(eps));
            let a = f64::from(analytic[i]);
            assert!(
                (numeric - a).abs() <= 2e-3 + 2e-2 * a.abs(),
                "network {net} param {i}: analytic {a}, numeric {numeric}"
            );
        }
    }
}

/// Acting on a pool (`PolicyNetworks::set_pool`, what a trainer's collector does with
/// `run.threads` above 1): a batch of 8 Nature-CNN frames, as PPO Atari acts on, splits
/// its convolutions across the pool's threads and gives the same actions, log-probs and
/// values, bit for bit, as acting on the calling thread; a clone keeps the pool, and
/// `None` takes it away.
#[test]
fn acting_on_a_pool_splits_the_passes_and_changes_no_number() {
    let config = PolicyConfig {
        hidden: vec![64],
        encoder: Encoder::NatureCnn,
        init: PolicyInit::Orthogonal,
        ..PolicyConfig::new()
    };
    let policy = CategoricalPolicy::<u8>::with_obs_shape(&[4, 84, 84], 6, config, 3).unwrap();
    let rows = 8;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
    let obs: Vec<u8> = (0..rows * 4 * 84 * 84).map(|_| rng.random()).collect();
    let act = |p: &mut CategoricalPolicy<u8>| {
        let (mut actions, mut log_probs, mut values) =
            (vec![0u32; rows], vec![0f32; rows], vec![0f32; rows]);
        let out = ActOutput {
            actions: &mut actions,
            log_probs: &mut log_probs,
            values: &mut values,
        };
        p.act(&obs, &mut [(); 8], out).unwrap();
        let mut final_values = vec![0f32; rows];
        p.values(&obs, &[(); 8], &mut final_values).unwrap();
        (
            actions,
            log_probs.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            values
                .iter()
                .chain(&final_values)
                .map(|x| x.to_bits())
                .collect::<Vec<_>>(),
        )
    };
    let mut alone = policy.clone();
    let mut pooled = policy.clone();
    let pool = std::sync::Arc::new(rl_nn::Pool::new(2).unwrap());
    pooled.set_pool(Some(std::sync::Arc::clone(&pool)));
    for round in 0..3 {
        let before = pool.splits();
        assert_eq!(act(&mut pooled), act(&mut alone), "round {round}");
        assert!(
            pool.splits() > before,
            "round {round}: acting never used both threads"
        );
    }
    // A clone acts on the same pool (and draws what a clone of the other draws).
    let (mut cloned, mut alone_cloned) = (pooled.clone(), alone.clone());
    let before = pool.splits();
    assert_eq!(act(&mut cloned), act(&mut alone_cloned));
    assert!(pool.splits() > before, "the clone lost the pool");
    pooled.set_pool(None);
    let before = pool.splits();
    assert_eq!(act(&mut pooled), act(&mut alone));
    assert_eq!(
        pool.splits(),
        before,
        "acting still split after set_pool(None)"
    );
}
