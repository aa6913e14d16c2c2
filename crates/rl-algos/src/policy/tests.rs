//! Tests of both policies: closed forms, sampling frequencies, the minibatched pass
//! against the full pass, finite-difference gradient checks, and collectors driving them.

use dfdx::prelude::{
    Backward, Cpu, MeanTo, NumParams, Rank0, Shape, SumTo, Tensor, TensorFromVec, ZeroGrads,
};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{ActOutput, CollectorConfig, Policy, SyncCollector, ValuePolicy};
use rl_core::{BoxSpace, Column, DType, Env, Schema, Space};
use rl_envs::{CartPole, Pendulum};
use rl_storage::{ActionShape, RamStorage, ReplayBuffer, RolloutBuffer, RolloutConfig, Uniform};

use super::*;

/// `rows x len` values uniform in `[-scale, scale)`, from a fixed seed.
fn uniform(rows: usize, len: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..rows * len)
        .map(|_| scale * (2.0 * rng.random::<f32>() - 1.0))
        .collect()
}

fn discrete_actions(rows: usize, n: u32, seed: u64) -> Vec<u32> {
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

fn evaluate<P: ActorCritic>(policy: &P, obs: &[f32], actions: &[P::Act]) -> (Vec<f32>, Vec<f32>) {
    let rows = obs.len() / P::OBS_LEN;
    let (mut log_probs, mut values) = (vec![f32::NAN; rows], vec![f32::NAN; rows]);
    policy
        .log_probs_and_values(obs, actions, &mut log_probs, &mut values)
        .unwrap();
    (log_probs, values)
}

const SHARP: PolicyConfig = PolicyConfig {
    actor_head_scale: 1.0,
    log_std_init: -0.3,
    ..PolicyConfig::new()
};

#[test]
fn categorical_log_probs_sum_exp_to_one() {
    let policy = CategoricalPolicy::<4, 16, 5>::new(SHARP, 1).unwrap();
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
fn constant_gaussian(mean: [f32; 2], std: [f32; 2]) -> GaussianPolicy<3, 8, 2> {
    let mut policy = GaussianPolicy::<3, 8, 2>::new(PolicyConfig::new(), 4).unwrap();
    let net = policy.net_mut();
    net.mean.l3.weight.copy_from(&[0.0; 16]);
    net.mean.l3.bias.copy_from(&mean);
    net.log_std.copy_from(&std.map(f32::ln));
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
    let evaluation = policy
        .evaluate_traced(&obs, &actions, policy.net().alloc_grads())
        .unwrap();
    assert_eq!(
        evaluation.log_probs.as_vec(),
        log_probs,
        "traced and untraced passes differ"
    );
    for entropy in evaluation.entropy.as_vec() {
        assert!((entropy - expected_entropy).abs() < 1e-5, "{entropy}");
    }
}

#[test]
fn categorical_sampling_frequencies_match_the_softmax() {
    const N: usize = 40_000;
    let mut policy = CategoricalPolicy::<3, 16, 4>::new(SHARP, 5).unwrap();
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
    let mut policy = CategoricalPolicy::<4, 16, 3>::new(
        PolicyConfig {
            mode: Mode::Deterministic,
            ..SHARP
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
        let mut policy = CategoricalPolicy::<4, 16, 2>::new(SHARP, seed).unwrap();
        act(&mut policy, &obs, 64, 1)
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3).0, run(4).0);
    let mut policy = CategoricalPolicy::<4, 16, 2>::new(SHARP, 3).unwrap();
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
    let mut policy = CategoricalPolicy::<4, 16, 2>::new(SHARP, 3).unwrap();
    act(&mut policy, &obs, 64, 1);
    let mut other = CategoricalPolicy::<4, 16, 2>::new(SHARP, 3).unwrap();
    other.set_sampling_state(policy.sampling_state());
    assert_eq!(other.sampling_state(), policy.sampling_state());
    assert_eq!(
        act(&mut policy, &obs, 64, 1).0,
        act(&mut other, &obs, 64, 1).0
    );
    // Through JSON (as in a checkpoint), for the Gaussian policy.
    let obs = uniform(16, 3, 1.0, 2);
    let mut gaussian = GaussianPolicy::<3, 8, 1>::new(PolicyConfig::new(), 5).unwrap();
    act(&mut gaussian, &obs, 16, 1);
    let json = serde_json::to_string(&gaussian.sampling_state()).unwrap();
    let mut copy = GaussianPolicy::<3, 8, 1>::new(PolicyConfig::new(), 6).unwrap();
    *copy.net_mut() = gaussian.net().clone();
    copy.set_sampling_state(serde_json::from_str(&json).unwrap());
    let (a, b) = (act(&mut gaussian, &obs, 16, 1), act(&mut copy, &obs, 16, 1));
    assert_eq!(
        a.0.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        b.0.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    // Architectures are named by kind, sizes and activation.
    assert_eq!(
        CategoricalPolicy::<4, 64, 2>::architecture(),
        "categorical 4-64-64-2 relu"
    );
    assert_eq!(
        GaussianPolicy::<3, 32, 1, Tanh>::architecture(),
        "gaussian 3-32-32-1 tanh"
    );
}

/// Checks the minibatched pass against the full pass for several minibatch sizes,
/// including 1, sizes that leave a partial last minibatch, and more than the rows.
fn check_minibatched<P: ActorCritic>(policy: &P, obs: &[f32], actions: &[P::Act]) {
    let rows = obs.len() / P::OBS_LEN;
    let (full_log_probs, full_values) = evaluate(policy, obs, actions);
    for minibatch in [1, 7, 64, 100, 333, rows, rows + 5] {
        let (mut log_probs, mut values) = (vec![f32::NAN; rows], vec![f32::NAN; rows]);
        policy
            .evaluate_minibatched(obs, actions, minibatch, &mut log_probs, &mut values)
            .unwrap();
        // Bit for bit: each output row depends only on its input row, and the gemm
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
    let (mut log_probs, mut values) = (vec![0.0; rows], vec![0.0; rows]);
    assert!(matches!(
        policy.evaluate_minibatched(obs, actions, 0, &mut log_probs, &mut values),
        Err(Error::Config { .. })
    ));
}

#[test]
fn minibatched_pass_equals_the_full_pass() {
    const ROWS: usize = 1000;
    let categorical = CategoricalPolicy::<4, 64, 2>::new(SHARP, 10).unwrap();
    check_minibatched(
        &categorical,
        &uniform(ROWS, 4, 2.0, 11),
        &discrete_actions(ROWS, 2, 12),
    );
    let tanh = CategoricalPolicy::<8, 32, 6, Tanh>::new(SHARP, 13).unwrap();
    check_minibatched(
        &tanh,
        &uniform(ROWS, 8, 2.0, 14),
        &discrete_actions(ROWS, 6, 15),
    );
    let gaussian = GaussianPolicy::<3, 64, 2>::new(SHARP, 16).unwrap();
    check_minibatched(
        &gaussian,
        &uniform(ROWS, 3, 2.0, 17),
        &uniform(ROWS, 2, 3.0, 18),
    );
}

#[test]
fn spaces_and_inputs_are_checked() {
    type Cart = CategoricalPolicy<4, 8, 2>;
    assert!(Cart::check_space(&Space::discrete(2).unwrap()).is_ok());
    let err = Cart::check_space(&Space::discrete(3).unwrap()).unwrap_err();
    assert!(matches!(
        err,
        Error::SpaceMismatch {
            what: "action space",
            ..
        }
    ));
    assert!(err.to_string().contains("3 actions"), "{err}");
    let boxed = Space::Box(BoxSpace::uniform(-1.0, 1.0, &[2], DType::F32).unwrap());
    assert!(Cart::check_space(&boxed).is_err());
    assert!(Cart::for_env(&CartPole::new(0), PolicyConfig::new(), 0).is_ok());
    assert!(matches!(
        CategoricalPolicy::<3, 8, 2>::for_env(&CartPole::new(0), PolicyConfig::new(), 0),
        Err(Error::SpaceMismatch {
            what: "observation space",
            ..
        })
    ));
    assert!(GaussianPolicy::<3, 8, 1>::for_env(&Pendulum::new(0), PolicyConfig::new(), 0).is_ok());
    assert!(matches!(
        GaussianPolicy::<3, 8, 2>::check_space(Pendulum::new(0).action_space()),
        Err(Error::SpaceMismatch { .. })
    ));
    assert!(GaussianPolicy::<3, 8, 2>::check_space(&Space::discrete(2).unwrap()).is_err());

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
    ] {
        assert!(matches!(Cart::new(bad, 0), Err(Error::Config { .. })));
    }

    let mut policy = Cart::new(PolicyConfig::new(), 0).unwrap();
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
    let categorical = CategoricalPolicy::<4, 64, 2>::new(PolicyConfig::new(), 0).unwrap();
    let actor = (4 * 64 + 64) + (64 * 64 + 64) + (64 * 2 + 2);
    let critic = (4 * 64 + 64) + (64 * 64 + 64) + (64 + 1);
    assert_eq!(categorical.net().num_trainable_params(), actor + critic);
    let gaussian = GaussianPolicy::<3, 64, 1>::new(PolicyConfig::new(), 0).unwrap();
    let mean = (3 * 64 + 64) + (64 * 64 + 64) + (64 + 1);
    // The log-std is a trainable tensor of its own.
    assert_eq!(gaussian.net().num_trainable_params(), 2 * mean + 1);
    // Same seed, same weights; the actor head starts small with a zero bias.
    let again = CategoricalPolicy::<4, 64, 2>::new(PolicyConfig::new(), 0).unwrap();
    assert_eq!(
        categorical.net().actor.l1.weight.as_vec(),
        again.net().actor.l1.weight.as_vec()
    );
    let head = categorical.net().actor.l3.weight.as_vec();
    assert!(
        head.iter().all(|w| w.abs() <= 0.01 / 8.0 + 1e-7),
        "{head:?}"
    );
    assert!(
        categorical
            .net()
            .actor
            .l3
            .bias
            .as_vec()
            .iter()
            .all(|&b| b == 0.0)
    );
    assert_eq!(gaussian.log_std(), [0.0]);
}

// ---------------------------------------------------------------------------------------
// Finite-difference gradient checks.

/// Which output a loss is made of.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Head {
    LogProb,
    Entropy,
    Value,
}

/// A batch and per-row weights: the loss is `sum_i weight_i * head_i`, weights drawn in
/// `[-1, 1]` so that no symmetry cancels a gradient.
struct Case<P: ActorCritic> {
    obs: Vec<f32>,
    actions: Vec<P::Act>,
    weights: Vec<f32>,
    /// Per-row entropies computed on the host in f64, independently of the traced pass.
    entropies: fn(&P, &[f32]) -> Vec<f64>,
}

impl<P: ActorCritic> Case<P> {
    fn loss_without_tape(&self, policy: &P, head: Head) -> f64 {
        let (log_probs, values) = evaluate(policy, &self.obs, &self.actions);
        let per_row: Vec<f64> = match head {
            Head::LogProb => log_probs.iter().map(|&v| v.into()).collect(),
            Head::Value => values.iter().map(|&v| v.into()).collect(),
            Head::Entropy => (self.entropies)(policy, &self.obs),
        };
        per_row
            .iter()
            .zip(&self.weights)
            .map(|(v, &w)| v * f64::from(w))
            .sum()
    }

    /// dfdx's gradient of the loss with respect to `param`. The two other outputs join
    /// the loss times 0, so that every part of the tape is there (an entropy loss needs
    /// `log_probs`' tape, as `Evaluation` documents) and parameters the head does not
    /// depend on get an exact zero; `tape_layout_matches_the_documentation` checks which
    /// output carries which part.
    fn analytic<S: Shape>(
        &self,
        policy: &mut P,
        head: Head,
        param: fn(&mut P::Net) -> &mut Tensor<S, f32, Cpu>,
    ) -> Vec<f32> {
        let grads = policy.net().alloc_grads();
        let Evaluation {
            log_probs,
            entropy,
            values,
        } = policy
            .evaluate_traced(&self.obs, &self.actions, grads)
            .unwrap();
        let weights = policy
            .device()
            .tensor_from_vec(self.weights.clone(), (self.weights.len(),));
        let weighted = |t: TracedRows| (t * weights.clone()).sum::<Rank0, _>();
        let zero = |t: TracedRows| (t * 0.0).sum::<Rank0, _>();
        let loss = match head {
            Head::LogProb => weighted(log_probs) + zero(entropy) + zero(values),
            Head::Entropy => weighted(entropy) + zero(log_probs) + zero(values),
            Head::Value => weighted(values) + zero(log_probs) + zero(entropy),
        };
        let grads = loss.backward();
        grads.get(&*param(policy.net_mut())).as_vec()
    }

    /// Checks dfdx's gradient against central differences at a few elements of
    /// `param`; `expect_zero` when the head does not depend on it (then the gradient must
    /// be exactly 0). Returns the largest analytic magnitude seen.
    fn check<S: Shape>(
        &self,
        policy: &mut P,
        head: Head,
        name: &str,
        param: fn(&mut P::Net) -> &mut Tensor<S, f32, Cpu>,
        expect_zero: bool,
    ) {
        const STEP: f32 = 1e-3;
        let analytic = self.analytic(policy, head, param);
        let original = param(policy.net_mut()).as_vec();
        let len = original.len();
        let mut largest = 0.0f32;
        let mut indices = vec![0, len / 3, len / 2, 2 * len / 3, len - 1];
        indices.dedup();
        for index in indices {
            let mut loss_at = |delta: f32| {
                let mut values = original.clone();
                values[index] += delta;
                param(policy.net_mut()).copy_from(&values);
                let loss = self.loss_without_tape(policy, head);
                param(policy.net_mut()).copy_from(&original);
                loss
            };
            let numeric = ((loss_at(STEP) - loss_at(-STEP)) / (2.0 * f64::from(STEP))) as f32;
            let g = analytic[index];
            if expect_zero {
                assert_eq!(g, 0.0, "{head:?} {name}[{index}] should not depend on it");
                assert!(numeric.abs() < 1e-3, "{head:?} {name}[{index}]: {numeric}");
                continue;
            }
            // f32 tolerance: the loss sums 24 rows of f32 outputs (rounding about 1e-7
            // each), so the central difference carries about 24 * 1e-7 / 2e-3 ~ 1e-3 of
            // absolute rounding noise; a ReLU kink inside the step adds an O(step) error.
            // Relative 1e-2 plus 2e-3 absolute covers both; a wrong or missing gradient
            // (the silent-zero failure) is off by 100 % and fails.
            let tolerance = 1e-2 * g.abs().max(numeric.abs()) + 2e-3;
            assert!(
                (g - numeric).abs() <= tolerance,
                "{head:?} {name}[{index}]: dfdx {g} vs central difference {numeric}"
            );
            largest = largest.max(g.abs());
            if std::env::var_os("FD_VERBOSE").is_some() {
                println!(
                    "{head:?} {name}[{index}]: dfdx {g:+.6} fd {numeric:+.6} diff {:.2e}",
                    g - numeric
                );
            }
        }
        if !expect_zero {
            assert!(
                largest > 1e-2,
                "{head:?} {name}: gradients all ~0 ({analytic:?})"
            );
        }
    }
}

#[test]
fn tape_layout_matches_the_documentation() {
    let policy = CategoricalPolicy::<4, 16, 3>::new(SHARP, 60).unwrap();
    let obs = uniform(8, 4, 1.0, 61);
    let actions = discrete_actions(8, 3, 62);
    let traced = || {
        policy
            .evaluate_traced(&obs, &actions, policy.net().alloc_grads())
            .unwrap()
    };
    let nonzero = |g: Vec<f32>| g.iter().any(|&x| x != 0.0);
    // `log_probs` alone reaches the whole actor, and carries `grads` (every parameter is
    // in the result, the critic's at zero).
    let grads = traced().log_probs.sum::<Rank0, _>().backward();
    assert!(nonzero(grads.get(&policy.net().actor.l1.weight).as_vec()));
    assert!(!nonzero(grads.get(&policy.net().critic.l1.weight).as_vec()));
    // `values` alone reaches the whole critic.
    let grads = traced().values.sum::<Rank0, _>().backward();
    assert!(nonzero(grads.get(&policy.net().critic.l1.weight).as_vec()));
    // The Gaussian's entropy depends on the log-std only, and carries its tape.
    let gaussian = GaussianPolicy::<3, 16, 2>::new(SHARP, 63).unwrap();
    let evaluation = gaussian
        .evaluate_traced(
            &uniform(8, 3, 1.0, 64),
            &uniform(8, 2, 1.0, 65),
            gaussian.net().alloc_grads(),
        )
        .unwrap();
    let grads = evaluation.entropy.sum::<Rank0, _>().backward();
    assert_eq!(grads.get(&gaussian.net().log_std).as_vec(), [8.0, 8.0]);
}

fn categorical_entropies<const O: usize, const H: usize, const N: usize, A: Activation>(
    policy: &CategoricalPolicy<O, H, N, A>,
    obs: &[f32],
) -> Vec<f64> {
    let mut log_probs = vec![0.0; obs.len() / O * N];
    policy.all_log_probs(obs, &mut log_probs).unwrap();
    log_probs
        .chunks_exact(N)
        .map(|row| {
            -row.iter()
                .map(|&lp| f64::from(lp).exp() * f64::from(lp))
                .sum::<f64>()
        })
        .collect()
}

fn gaussian_entropies<const O: usize, const H: usize, const N: usize, A: Activation>(
    policy: &GaussianPolicy<O, H, N, A>,
    obs: &[f32],
) -> Vec<f64> {
    let per_row: f64 = policy
        .log_std()
        .iter()
        .map(|&l| f64::from(l) + 0.5 * (1.0 + (2.0 * std::f64::consts::PI).ln()))
        .sum();
    vec![per_row; obs.len() / O]
}

const ROWS: usize = 24;

fn categorical_gradients<A: Activation>(seed: u64) {
    // A sharper head than `SHARP`: far from uniform, where the entropy's gradient is small.
    let config = PolicyConfig {
        actor_head_scale: 3.0,
        ..SHARP
    };
    let mut policy = CategoricalPolicy::<4, 16, 3, A>::new(config, seed).unwrap();
    let case = Case {
        obs: uniform(ROWS, 4, 2.0, seed + 1),
        actions: discrete_actions(ROWS, 3, seed + 2),
        weights: uniform(ROWS, 1, 1.0, seed + 3),
        entropies: categorical_entropies,
    };
    for head in [Head::LogProb, Head::Entropy] {
        case.check(
            &mut policy,
            head,
            "actor.l1.weight",
            |n| &mut n.actor.l1.weight,
            false,
        );
        case.check(
            &mut policy,
            head,
            "actor.l2.weight",
            |n| &mut n.actor.l2.weight,
            false,
        );
        case.check(
            &mut policy,
            head,
            "actor.l1.bias",
            |n| &mut n.actor.l1.bias,
            false,
        );
        case.check(
            &mut policy,
            head,
            "actor.l3.weight",
            |n| &mut n.actor.l3.weight,
            false,
        );
        case.check(
            &mut policy,
            head,
            "actor.l3.bias",
            |n| &mut n.actor.l3.bias,
            false,
        );
        case.check(
            &mut policy,
            head,
            "critic.l1.weight",
            |n| &mut n.critic.l1.weight,
            true,
        );
    }
    case.check(
        &mut policy,
        Head::Value,
        "critic.l1.weight",
        |n| &mut n.critic.l1.weight,
        false,
    );
    case.check(
        &mut policy,
        Head::Value,
        "critic.l2.weight",
        |n| &mut n.critic.l2.weight,
        false,
    );
    case.check(
        &mut policy,
        Head::Value,
        "critic.l2.bias",
        |n| &mut n.critic.l2.bias,
        false,
    );
    case.check(
        &mut policy,
        Head::Value,
        "critic.l3.weight",
        |n| &mut n.critic.l3.weight,
        false,
    );
    case.check(
        &mut policy,
        Head::Value,
        "critic.l3.bias",
        |n| &mut n.critic.l3.bias,
        false,
    );
    case.check(
        &mut policy,
        Head::Value,
        "actor.l1.weight",
        |n| &mut n.actor.l1.weight,
        true,
    );
}

fn gaussian_gradients<A: Activation>(seed: u64) {
    let mut policy = GaussianPolicy::<3, 16, 2, A>::new(SHARP, seed).unwrap();
    // Larger head weights than the default 0.01, so that the mean moves with the input.
    let head: Vec<f32> = uniform(16, 2, 0.5, seed + 9);
    policy.net_mut().mean.l3.weight.copy_from(&head);
    let case = Case {
        obs: uniform(ROWS, 3, 1.5, seed + 1),
        actions: uniform(ROWS, 2, 2.0, seed + 2),
        weights: uniform(ROWS, 1, 1.0, seed + 3),
        entropies: gaussian_entropies,
    };
    let lp = Head::LogProb;
    case.check(
        &mut policy,
        lp,
        "mean.l1.weight",
        |n| &mut n.mean.l1.weight,
        false,
    );
    case.check(
        &mut policy,
        lp,
        "mean.l2.weight",
        |n| &mut n.mean.l2.weight,
        false,
    );
    case.check(
        &mut policy,
        lp,
        "mean.l2.bias",
        |n| &mut n.mean.l2.bias,
        false,
    );
    case.check(
        &mut policy,
        lp,
        "mean.l3.weight",
        |n| &mut n.mean.l3.weight,
        false,
    );
    case.check(
        &mut policy,
        lp,
        "mean.l3.bias",
        |n| &mut n.mean.l3.bias,
        false,
    );
    case.check(&mut policy, lp, "log_std", |n| &mut n.log_std, false);
    case.check(
        &mut policy,
        lp,
        "critic.l1.weight",
        |n| &mut n.critic.l1.weight,
        true,
    );
    let ent = Head::Entropy;
    case.check(&mut policy, ent, "log_std", |n| &mut n.log_std, false);
    case.check(
        &mut policy,
        ent,
        "mean.l1.weight",
        |n| &mut n.mean.l1.weight,
        true,
    );
    let v = Head::Value;
    case.check(
        &mut policy,
        v,
        "critic.l1.weight",
        |n| &mut n.critic.l1.weight,
        false,
    );
    case.check(
        &mut policy,
        v,
        "critic.l2.bias",
        |n| &mut n.critic.l2.bias,
        false,
    );
    case.check(
        &mut policy,
        v,
        "critic.l3.weight",
        |n| &mut n.critic.l3.weight,
        false,
    );
    case.check(&mut policy, v, "log_std", |n| &mut n.log_std, true);
    case.check(
        &mut policy,
        v,
        "mean.l1.weight",
        |n| &mut n.mean.l1.weight,
        true,
    );
}

#[test]
fn categorical_gradients_match_finite_differences() {
    categorical_gradients::<Tanh>(20);
    categorical_gradients::<Relu>(30);
}

#[test]
fn gaussian_gradients_match_finite_differences() {
    gaussian_gradients::<Tanh>(40);
    gaussian_gradients::<Relu>(50);
}

/// Gradient steps through the path a learner takes (`alloc_grads`, traced pass, backward,
/// `clip_grad_norm`, `Adam`, `zero_grads`) move the policy the way the loss says.
#[test]
fn adam_steps_on_the_traced_pass_train_both_policies() {
    use crate::{Adam, AdamConfig, clip_grad_norm};
    let config = AdamConfig {
        lr: 1e-2,
        ..AdamConfig::default()
    };
    // Categorical: maximise the log-prob of action 2 and fit values to 1.
    let mut policy = CategoricalPolicy::<4, 16, 3>::new(PolicyConfig::new(), 70).unwrap();
    let mut adam = Adam::new(policy.net(), config).unwrap();
    let obs = uniform(16, 4, 1.0, 71);
    let actions = vec![2u32; 16];
    let (before, _) = evaluate(&policy, &obs, &actions);
    let mut grads = policy.net().alloc_grads();
    for _ in 0..20 {
        let evaluation = policy.evaluate_traced(&obs, &actions, grads).unwrap();
        let loss = evaluation.log_probs.mean::<Rank0, _>().negate()
            + (evaluation.values - 1.0).square().mean::<Rank0, _>();
        grads = loss.backward();
        clip_grad_norm(policy.net(), &mut grads, 0.5).unwrap();
        adam.update(policy.net_mut(), &grads).unwrap();
        policy.net().zero_grads(&mut grads);
    }
    let (after, values) = evaluate(&policy, &obs, &actions);
    let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
    assert!(
        mean(&after) > mean(&before) + 0.3,
        "{before:?} -> {after:?}"
    );
    assert!((mean(&values) - 1.0).abs() < 0.3, "{values:?}");

    // Gaussian: an entropy bonus alone raises the log-std.
    let mut gaussian = GaussianPolicy::<3, 16, 2>::new(PolicyConfig::new(), 72).unwrap();
    let mut adam = Adam::new(gaussian.net(), config).unwrap();
    let (obs, actions) = (uniform(8, 3, 1.0, 73), uniform(8, 2, 1.0, 74));
    let mut grads = gaussian.net().alloc_grads();
    for _ in 0..10 {
        let evaluation = gaussian.evaluate_traced(&obs, &actions, grads).unwrap();
        let loss = evaluation.entropy.mean::<Rank0, _>().negate()
            + (evaluation.log_probs * 0.0).sum::<Rank0, _>()
            + (evaluation.values * 0.0).sum::<Rank0, _>();
        grads = loss.backward();
        adam.update(gaussian.net_mut(), &grads).unwrap();
        gaussian.net().zero_grads(&mut grads);
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
fn check_recorded<P: ActorCritic>(policy: &P, rollout: &RolloutBuffer, actions: &[P::Act]) {
    let rows = rollout.rows();
    let (mut log_probs, mut values) = (vec![0.0; rows], vec![0.0; rows]);
    policy
        .evaluate_minibatched(rollout.obs(), actions, 10, &mut log_probs, &mut values)
        .unwrap();
    assert!(rollout.log_probs().iter().all(|lp| lp.is_finite()));
    // Bit for bit, although `act` saw 4 rows at a time and the evaluation 10: PPO's
    // first ratio is exactly 1 whichever way the old log-probs were obtained.
    assert_eq!(log_probs, rollout.log_probs());
    assert_eq!(values, rollout.values());
}

#[test]
fn sync_collector_drives_the_categorical_policy_on_cartpole() {
    let envs: Vec<CartPole> = (0..4).map(CartPole::new).collect();
    let policy = CategoricalPolicy::<4, 32, 2>::for_env(&envs[0], PolicyConfig::new(), 1).unwrap();
    let mut collector = SyncCollector::new(envs, policy, CollectorConfig::new(64)).unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(replay_schema(4, DType::U32, 1), 1_000).unwrap(),
        Uniform::new(0),
    );
    for _ in 0..3 {
        assert_eq!(collector.collect(&mut replay).unwrap().frames, 64);
    }
    assert_eq!(replay.len(), 192);

    let mut rollout =
        RolloutBuffer::new(RolloutConfig::new(32, 4, 4, ActionShape::Discrete)).unwrap();
    collector.collect_rollout(&mut rollout).unwrap();
    assert!(rollout.log_probs().iter().all(|&lp| lp <= 0.0));
    let actions = CategoricalPolicy::<4, 32, 2>::stored_actions(rollout.actions()).unwrap();
    assert!(GaussianPolicy::<4, 32, 1>::stored_actions(rollout.actions()).is_err());
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
    let policy = GaussianPolicy::<3, 32, 1>::for_env(&envs[0], config, 2).unwrap();
    let mut collector = SyncCollector::new(envs, policy, CollectorConfig::new(64)).unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(replay_schema(3, DType::F32, 1), 1_000).unwrap(),
        Uniform::new(0),
    );
    for _ in 0..3 {
        collector.collect(&mut replay).unwrap();
    }
    assert_eq!(replay.len(), 192);

    let mut rollout =
        RolloutBuffer::new(RolloutConfig::new(64, 4, 3, ActionShape::Continuous(1))).unwrap();
    collector.collect_rollout(&mut rollout).unwrap();
    let actions = GaussianPolicy::<3, 32, 1>::stored_actions(rollout.actions()).unwrap();
    assert!(CategoricalPolicy::<3, 32, 2>::stored_actions(rollout.actions()).is_err());
    // Stored unclipped: with a standard deviation of e^0.5 some exceed the torque limit 2.
    assert!(actions.iter().any(|a| a.abs() > 2.0));
    check_recorded(collector.policy(), &rollout, actions);
}

/// The Tianshou seed: old log-probs over a whole rollout in one pass run out of memory on
/// large rollouts. In minibatches, the peak of live bytes depends on the minibatch size,
/// not on the rollout size.
#[test]
fn minibatched_evaluation_peak_memory_does_not_grow_with_the_rollout() {
    let policy = CategoricalPolicy::<4, 64, 2>::new(PolicyConfig::new(), 0).unwrap();
    let peak = |rows: usize, minibatch: usize| {
        let obs = uniform(rows, 4, 1.0, 3);
        let actions: Vec<u32> = (0..rows as u32).map(|i| i % 2).collect();
        let (mut log_probs, mut values) = (vec![0.0; rows], vec![0.0; rows]);
        let (result, stats) = rl_testkit::measure(|| {
            policy.evaluate_minibatched(&obs, &actions, minibatch, &mut log_probs, &mut values)
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
