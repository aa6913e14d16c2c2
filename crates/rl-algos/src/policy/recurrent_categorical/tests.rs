//! Tests of the recurrent policy: chunks replayed from recorded states against the steps
//! taken while acting, value peeks, gradients against finite differences of an f64
//! reference (LSTM and stacks), the collector driving it, plans, and errors.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{ActOutput, CollectorConfig, Policy, SyncCollector, ValuePolicy};
use rl_core::{Env, Field, Flag, TransitionSchema};
use rl_envs::{CartPole, MaskedCartPole};
use rl_nn::{Activation, Architecture};
use rl_storage::rollout::RolloutBuffer;

use super::*;
#[allow(unused_imports, reason = "the learner traits, for their methods")]
use crate::learner::{Learner as _, OffPolicyLearner as _, OnPolicyLearner as _};
use crate::policy::tests::{discrete_actions, mlp64, uniform};
use crate::predict::Predict;

/// What acting did over `steps x envs`: observations, episode starts (time-major, as
/// fed), actions, log-probs and values.
struct Trace {
    envs: usize,
    obs: Vec<f32>,
    starts: Vec<bool>,
    actions: Vec<u32>,
    log_probs: Vec<f32>,
    values: Vec<f32>,
}

/// Acts `steps` steps of `envs` environments on random observations, starting a new
/// episode in an environment with probability `p_start` per step, recording chunks of
/// `chunk_len`.
fn act_trace(
    policy: &mut RecurrentCategoricalPolicy,
    envs: usize,
    steps: usize,
    chunk_len: usize,
    p_start: f64,
    seed: u64,
) -> Trace {
    let mut slots = vec![HistorySlot::default(); envs];
    act_trace_from(policy, &mut slots, steps, chunk_len, p_start, seed)
}

/// As [`act_trace`], continuing from the collector's `slots`.
fn act_trace_from(
    policy: &mut RecurrentCategoricalPolicy,
    slots: &mut [HistorySlot],
    steps: usize,
    chunk_len: usize,
    p_start: f64,
    seed: u64,
) -> Trace {
    let (envs, obs_len) = (slots.len(), policy.obs_len());
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    policy.begin_rollout(chunk_len, steps, envs).unwrap();
    let mut trace = Trace {
        envs,
        obs: Vec::new(),
        starts: Vec::new(),
        actions: vec![0; steps * envs],
        log_probs: vec![0.0; steps * envs],
        values: vec![0.0; steps * envs],
    };
    for t in 0..steps {
        for slot in slots.iter_mut() {
            if rng.random_bool(p_start) {
                *slot = HistorySlot::default();
            }
        }
        trace.starts.extend(slots.iter().map(HistorySlot::is_fresh));
        let obs: Vec<f32> = (0..envs * obs_len)
            .map(|_| 2.0 * rng.random::<f32>() - 1.0)
            .collect();
        let span = t * envs..(t + 1) * envs;
        policy
            .act(
                &obs,
                slots,
                ActOutput {
                    actions: &mut trace.actions[span.clone()],
                    log_probs: &mut trace.log_probs[span.clone()],
                    values: &mut trace.values[span],
                },
            )
            .unwrap();
        trace.obs.extend(obs);
    }
    trace
}

/// Every chunk of the record as one batch (chunk `b = c * envs + e`), with resets from
/// the episode starts inside chunks and the record's at their first steps.
struct Chunked {
    obs: Vec<f32>,
    resets: Vec<bool>,
    initial: Vec<f32>,
    actions: Vec<u32>,
    /// Position in the trace (time-major) of every batch row.
    rows: Vec<usize>,
}

fn chunk_all(trace: &Trace, record: &ChunkRecord, obs_len: usize) -> Chunked {
    let (l, n) = (record.chunk_len(), trace.envs);
    let batch = record.chunks() * n;
    let mut out = Chunked {
        obs: Vec::new(),
        resets: Vec::new(),
        initial: Vec::new(),
        actions: Vec::new(),
        rows: Vec::new(),
    };
    for i in 0..l {
        for b in 0..batch {
            let (c, e) = (b / n, b % n);
            let row = (c * l + i) * n + e;
            out.rows.push(row);
            out.obs
                .extend_from_slice(&trace.obs[row * obs_len..(row + 1) * obs_len]);
            out.actions.push(trace.actions[row]);
            out.resets.push(if i == 0 {
                record.start(c, e).unwrap()
            } else {
                trace.starts[row]
            });
        }
    }
    for b in 0..batch {
        out.initial
            .extend_from_slice(record.state(b / n, b % n).unwrap());
    }
    out
}

/// Replays every chunk of `trace` and checks the log-probs and values against acting's.
fn check_replay(policy: &RecurrentCategoricalPolicy, trace: &Trace, tolerance: f32) {
    let record = policy.chunk_record().unwrap();
    assert!(record.is_complete());
    let chunked = chunk_all(trace, record, policy.obs_len());
    let chunks = record.chunks() * trace.envs;
    for (b, &start) in chunked.resets[..chunks].iter().enumerate() {
        let (c, e) = (b / trace.envs, b % trace.envs);
        assert_eq!(start, trace.starts[c * record.chunk_len() * trace.envs + e]);
    }
    let mut ws = policy.workspace(record.chunk_len(), chunks);
    let batch = ChunkBatch {
        obs: &chunked.obs,
        steps: record.chunk_len(),
        chunks,
        resets: &chunked.resets,
        initial: &chunked.initial,
    };
    policy
        .evaluate_chunks(batch, &chunked.actions, &mut ws)
        .unwrap();
    for (k, &row) in chunked.rows.iter().enumerate() {
        let (lp, v) = (ws.log_probs()[k], ws.values()[k]);
        assert!(
            (lp - trace.log_probs[row]).abs() <= tolerance,
            "row {row}: log-prob {lp} replayed, {} acted",
            trace.log_probs[row]
        );
        assert!(
            (v - trace.values[row]).abs() <= tolerance,
            "row {row}: value {v} replayed, {} acted",
            trace.values[row]
        );
    }
}

fn heads() -> PolicyConfig {
    PolicyConfig {
        hidden: vec![16],
        actor_head_scale: 1.0,
        ..PolicyConfig::new()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The state carried while acting is the state replayed while training: every chunk
    /// replayed from its recorded start gives acting's log-probs and values (stacks and
    /// no history exactly, the LSTM within 1e-6).
    #[test]
    fn chunks_replayed_from_recorded_states_equal_acting(
        kind in 0usize..3,
        envs in 1usize..5,
        chunks in 1usize..4,
        chunk_len in 1usize..7,
        p_start in 0.0f64..0.3,
        seed in 0u64..1000,
    ) {
        let (history, tolerance) = match kind {
            0 => (History::None, 0.0),
            1 => (History::Stack { k: 3 }, 0.0),
            _ => (History::Lstm { hidden: 8 }, 1e-6),
        };
        let mut policy = RecurrentCategoricalPolicy::new(3, 4, history, heads(), seed).unwrap();
        let trace = act_trace(&mut policy, envs, chunks * chunk_len, chunk_len, p_start, seed);
        check_replay(&policy, &trace, tolerance);
    }
}

#[test]
fn a_second_rollout_replays_from_the_state_the_first_left() {
    let mut policy =
        RecurrentCategoricalPolicy::new(2, 2, History::Lstm { hidden: 6 }, heads(), 3).unwrap();
    let mut slots = [HistorySlot::default(); 3];
    let _first = act_trace_from(&mut policy, &mut slots, 8, 4, 0.1, 1);
    // The second rollout's first chunk starts from the state the first rollout left,
    // not from zeros: a replay that ignored the record would differ.
    let second = act_trace_from(&mut policy, &mut slots, 8, 4, 0.0, 2);
    let record = policy.chunk_record().unwrap();
    assert!(record.state(0, 0).unwrap().iter().any(|&v| v != 0.0));
    assert!(!record.start(0, 0).unwrap());
    check_replay(&policy, &second, 1e-6);
}

#[test]
fn acting_from_an_explicit_state_equals_acting_with_the_kept_one() {
    for (history, mode) in [
        (History::None, Mode::Sample),
        (History::Stack { k: 3 }, Mode::Deterministic),
        (History::Lstm { hidden: 8 }, Mode::Sample),
        (History::Lstm { hidden: 8 }, Mode::Deterministic),
    ] {
        let (envs, steps) = (3, 40);
        let mut kept = RecurrentCategoricalPolicy::new(3, 4, history, heads(), 11).unwrap();
        kept.set_mode(mode);
        let mut explicit = kept.clone();
        let trace = act_trace(&mut kept, envs, steps, 5, 0.1, 4);
        assert!(
            trace.starts[envs..].iter().any(|&s| s),
            "{history}: no restart"
        );
        let mut state = vec![0.0; envs * explicit.state_len()];
        let (mut actions, mut log_probs, mut values) = ([0u32; 3], [0.0f32; 3], [0.0f32; 3]);
        for t in 0..steps {
            let span = t * envs..(t + 1) * envs;
            let obs = &trace.obs[t * envs * 3..(t + 1) * envs * 3];
            let output = out(&mut actions, &mut log_probs, &mut values);
            explicit
                .act_with_state(obs, &mut state, &trace.starts[span.clone()], output)
                .unwrap();
            assert_eq!(actions, trace.actions[span.clone()], "{history} step {t}");
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&log_probs), bits(&trace.log_probs[span.clone()]));
            assert_eq!(bits(&values), bits(&trace.values[span]));
        }
        if history != History::None {
            assert!(
                state.iter().any(|&v| v != 0.0),
                "{history}: state never written"
            );
        }
    }
}

#[test]
fn an_explicit_state_of_the_wrong_length_is_refused() {
    let mut policy =
        RecurrentCategoricalPolicy::new(2, 2, History::Lstm { hidden: 4 }, heads(), 5).unwrap();
    let mut state = vec![0.0; 7];
    let (mut a, mut l, mut v) = ([0u32; 1], [0.0f32; 1], [0.0f32; 1]);
    let err = policy
        .act_with_state(
            &[0.0, 0.0],
            &mut state,
            &[true],
            out(&mut a, &mut l, &mut v),
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ShapeMismatch {
                what: "state",
                expected: 8,
                actual: 7
            }
        ),
        "{err}"
    );
}

/// An action output over three arrays.
fn out<'a>(
    actions: &'a mut [u32],
    log_probs: &'a mut [f32],
    values: &'a mut [f32],
) -> ActOutput<'a, u32> {
    ActOutput {
        actions,
        log_probs,
        values,
    }
}

#[test]
fn values_peek_one_step_ahead_without_changing_the_state() {
    for history in [
        History::None,
        History::Stack { k: 2 },
        History::Lstm { hidden: 5 },
    ] {
        let mut a = RecurrentCategoricalPolicy::new(2, 3, history, heads(), 9).unwrap();
        let mut b = a.clone();
        let mut slots = [HistorySlot::default(); 2];
        let mut slots_b = slots;
        let (mut actions, mut lp, mut v) = ([0u32; 2], [0.0f32; 2], [0.0f32; 2]);
        let (mut actions_b, mut lp_b, mut v_b) = ([0u32; 2], [0.0f32; 2], [0.0f32; 2]);
        for t in 0..5 {
            let obs = uniform(2, 2, 1.0, t);
            if t == 3 {
                slots[1] = HistorySlot::default();
                slots_b[1] = HistorySlot::default();
            }
            // `a` peeks first; `b` does not.
            let mut peek = [0.0f32; 2];
            a.values(&obs, &slots, &mut peek).unwrap();
            a.set_mode(Mode::Deterministic);
            b.set_mode(Mode::Deterministic);
            a.act(&obs, &mut slots, out(&mut actions, &mut lp, &mut v))
                .unwrap();
            b.act(&obs, &mut slots_b, out(&mut actions_b, &mut lp_b, &mut v_b))
                .unwrap();
            assert_eq!((actions, lp, v), (actions_b, lp_b, v_b), "{history}");
            for (p, v) in peek.iter().zip(v) {
                assert!((p - v).abs() <= 1e-6, "{history}: peek {p} vs acted {v}");
            }
        }
    }
}

#[test]
fn evaluation_rows_keep_their_own_state() {
    // The collector's 4 environments and an evaluation's single one do not share state.
    let mut policy =
        RecurrentCategoricalPolicy::new(2, 2, History::Lstm { hidden: 4 }, heads(), 5).unwrap();
    let mut reference = policy.clone();
    let mut slots = [HistorySlot::default(); 4];
    let mut slots_ref = slots;
    let mut one = [HistorySlot::default(); 1];
    let (mut act4, mut lp4, mut v4) = ([0u32; 4], [0.0; 4], [0.0; 4]);
    let (mut act1, mut lp1, mut v1) = ([0u32; 1], [0.0; 1], [0.0; 1]);
    let (mut act_r, mut lp_r, mut v_r) = ([0u32; 4], [0.0; 4], [0.0; 4]);
    policy.set_mode(Mode::Deterministic);
    reference.set_mode(Mode::Deterministic);
    for t in 0..6 {
        let obs = uniform(4, 2, 1.0, 100 + t);
        let out4 = ActOutput {
            actions: &mut act4,
            log_probs: &mut lp4,
            values: &mut v4,
        };
        policy.act(&obs, &mut slots, out4).unwrap();
        let out1 = ActOutput {
            actions: &mut act1,
            log_probs: &mut lp1,
            values: &mut v1,
        };
        policy.act(&obs[..2], &mut one, out1).unwrap();
        let out_r = ActOutput {
            actions: &mut act_r,
            log_probs: &mut lp_r,
            values: &mut v_r,
        };
        reference.act(&obs, &mut slots_ref, out_r).unwrap();
        assert_eq!((lp4, v4), (lp_r, v_r));
    }
}

#[test]
fn the_collector_fills_a_rollout_the_chunks_replay() {
    for history in [History::Stack { k: 4 }, History::Lstm { hidden: 8 }] {
        let policy =
            RecurrentCategoricalPolicy::for_env(&MaskedCartPole::new(0), history, heads(), 1)
                .unwrap();
        let envs: Vec<MaskedCartPole> = (0..3).map(MaskedCartPole::new).collect();
        let schema =
            TransitionSchema::for_spaces(envs[0].observation_space(), envs[0].action_space())
                .for_rollout()
                .build()
                .unwrap();
        let mut collector = SyncCollector::new(envs, policy, CollectorConfig::new(3)).unwrap();
        let (steps, chunk_len) = (48, 8);
        let mut rollout = RolloutBuffer::new(schema, steps, 3, None).unwrap();
        for _ in 0..2 {
            rollout.clear();
            collector
                .policy_mut()
                .begin_rollout(chunk_len, steps, 3)
                .unwrap();
            collector.collect_rollout(&mut rollout).unwrap();
        }
        // Episode starts inside chunks from the previous row's flags.
        let terminated = rollout.field::<Flag>(Field::Terminated).unwrap();
        let truncated = rollout.field::<Flag>(Field::Truncated).unwrap();
        // Starts at the rollout's first step are the record's only (the previous row is
        // the previous rollout's).
        let record = collector.policy().chunk_record().unwrap();
        let mut starts: Vec<bool> = (0..3).map(|e| record.start(0, e).unwrap()).collect();
        starts.resize(steps * 3, false);
        for row in 3..steps * 3 {
            starts[row] = terminated[row - 3].get() || truncated[row - 3].get();
        }
        assert!(
            starts.iter().any(|&s| s),
            "some episode ends inside the rollout"
        );
        let trace = Trace {
            envs: 3,
            obs: rollout.field::<f32>(Field::Obs).unwrap().to_vec(),
            starts,
            actions: rollout.field::<u32>(Field::Action).unwrap().to_vec(),
            log_probs: rollout.field::<f32>(Field::LogProb).unwrap().to_vec(),
            values: rollout.field::<f32>(Field::Value).unwrap().to_vec(),
        };
        check_replay(collector.policy(), &trace, 1e-6);
    }
}

// Gradients against finite differences of an f64 reference.

/// The loss weights and inputs of a gradient check over `steps x chunks` rows.
struct GradCase {
    steps: usize,
    chunks: usize,
    obs: Vec<f32>,
    resets: Vec<bool>,
    initial: Vec<f32>,
    actions: Vec<u32>,
    w_lp: Vec<f32>,
    w_h: Vec<f32>,
    w_v: Vec<f32>,
}

impl GradCase {
    fn new(policy: &RecurrentCategoricalPolicy, steps: usize, chunks: usize, seed: u64) -> Self {
        let rows = steps * chunks;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        // Starts at step 0 of chunk 0 and inside chunk 1 (when there are two).
        let resets = (0..rows)
            .map(|r| (r == 0) || (chunks > 1 && r == 2 * chunks + 1) || rng.random_bool(0.05))
            .collect();
        Self {
            steps,
            chunks,
            obs: uniform(rows, policy.obs_len(), 1.5, seed),
            resets,
            initial: uniform(chunks, policy.state_len(), 0.8, seed + 1),
            actions: discrete_actions(rows, policy.actions() as u32, seed + 2),
            w_lp: uniform(rows, 1, 1.0, seed + 3),
            w_h: uniform(rows, 1, 1.0, seed + 4),
            w_v: uniform(rows, 1, 1.0, seed + 5),
        }
    }
}

/// One LSTM step in f64 (PyTorch's `LSTMCell`: gates `i, f, g, o`).
fn lstm_step64(
    params: &[f64],
    input: usize,
    hidden: usize,
    x: &[f64],
    h: &mut [f64],
    c: &mut [f64],
) {
    let w_ih = &params[..4 * hidden * input];
    let w_hh = &params[4 * hidden * input..4 * hidden * (input + hidden)];
    let b_ih = &params[4 * hidden * (input + hidden)..4 * hidden * (input + hidden + 1)];
    let b_hh = &params[4 * hidden * (input + hidden + 1)..];
    let sigmoid = |z: f64| 1.0 / (1.0 + (-z).exp());
    let gate = |g: usize| -> f64 {
        b_ih[g]
            + b_hh[g]
            + (0..input).map(|k| w_ih[g * input + k] * x[k]).sum::<f64>()
            + (0..hidden)
                .map(|k| w_hh[g * hidden + k] * h[k])
                .sum::<f64>()
    };
    let z: Vec<f64> = (0..4 * hidden).map(gate).collect();
    for k in 0..hidden {
        let (i, f) = (sigmoid(z[k]), sigmoid(z[hidden + k]));
        let (g, o) = (z[2 * hidden + k].tanh(), sigmoid(z[3 * hidden + k]));
        c[k] = f * c[k] + i * g;
        h[k] = o * c[k].tanh();
    }
}

/// The features of every row (time-major) in f64, from the LSTM's parameters or by
/// stacking.
fn features64(
    policy: &RecurrentCategoricalPolicy,
    lstm: Option<&[f64]>,
    case: &GradCase,
) -> Vec<Vec<f64>> {
    let (obs_len, state_len) = (policy.obs_len(), policy.state_len());
    let mut features = vec![Vec::new(); case.steps * case.chunks];
    for b in 0..case.chunks {
        let initial: Vec<f64> = case.initial[b * state_len..(b + 1) * state_len]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        let mut state = initial;
        for t in 0..case.steps {
            let row = t * case.chunks + b;
            let x: Vec<f64> = case.obs[row * obs_len..(row + 1) * obs_len]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            features[row] = match (policy.history(), lstm) {
                (History::Lstm { hidden }, Some(params)) => {
                    if case.resets[row] {
                        state.fill(0.0);
                    }
                    let (h, c) = state.split_at_mut(hidden);
                    lstm_step64(params, obs_len, hidden, &x, h, c);
                    h.to_vec()
                }
                (History::Stack { k }, _) => {
                    // A model of the stack: the episode's rows so far, first one repeated.
                    if case.resets[row] {
                        state = x.iter().copied().cycle().take((k - 1) * obs_len).collect();
                    }
                    let mut stack = state.clone();
                    stack.extend_from_slice(&x);
                    state = stack[obs_len..].to_vec();
                    stack
                }
                _ => x,
            };
        }
    }
    features
}

/// The case's loss in f64 from every network's parameters, and every hidden
/// pre-activation of the heads.
fn loss64(
    policy: &RecurrentCategoricalPolicy,
    params: &[Vec<f64>],
    case: &GradCase,
) -> (f64, Vec<f64>) {
    let arch = policy.architecture();
    let features = features64(policy, params.get(2).map(Vec::as_slice), case);
    let (mut loss, mut pre) = (0.0, Vec::new());
    for (r, x) in features.iter().enumerate() {
        let (logits, p1) = mlp64(&arch.networks[0].1, &params[0], x);
        let (value, p2) = mlp64(&arch.networks[1].1, &params[1], x);
        pre.extend(p1.into_iter().chain(p2));
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + logits.iter().map(|z| (z - max).exp()).sum::<f64>().ln();
        let l: Vec<f64> = logits.iter().map(|z| z - lse).collect();
        let entropy = -l.iter().map(|x| x.exp() * x).sum::<f64>();
        loss += f64::from(case.w_lp[r]) * l[case.actions[r] as usize]
            + f64::from(case.w_h[r]) * entropy
            + f64::from(case.w_v[r]) * value[0];
    }
    (loss, pre)
}

/// The training pass's gradients (heads and LSTM, through the window with its resets
/// and initial states) against central finite differences of the f64 reference.
fn check_gradients(policy: &RecurrentCategoricalPolicy, case: &GradCase) {
    let mut ws = policy.workspace(case.steps, case.chunks);
    let batch = ChunkBatch {
        obs: &case.obs,
        steps: case.steps,
        chunks: case.chunks,
        resets: &case.resets,
        initial: &case.initial,
    };
    policy
        .evaluate_chunks(batch, &case.actions, &mut ws)
        .unwrap();
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
            let net = policy.network(i).unwrap();
            net.params().iter().map(|&p| f64::from(p)).collect()
        })
        .collect();
    let (base, pre) = loss64(policy, &params, case);
    let ours: f64 = (0..case.w_lp.len())
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
    let relu = matches!(
        policy.architecture().networks[0].1,
        Architecture::Mlp {
            activation: Activation::Relu,
            ..
        }
    );
    assert!(
        !relu || pre.iter().all(|z| z.abs() > 1e-4),
        "a hidden pre-activation sits at a ReLU kink: pick another seed"
    );
    let h = 1e-6;
    for (n, values) in params.iter().enumerate() {
        let analytic = grads.get(n).unwrap();
        assert!(analytic.iter().any(|&g| g != 0.0), "network {n}: all zero");
        for i in 0..values.len() {
            let mut p = params.clone();
            p[n][i] += h;
            let up = loss64(policy, &p, case).0;
            p[n][i] -= 2.0 * h;
            let down = loss64(policy, &p, case).0;
            let numeric = (up - down) / (2.0 * h);
            let a = f64::from(analytic[i]);
            assert!(
                (a - numeric).abs() <= 1e-4 + 1e-3 * numeric.abs(),
                "{} parameter {i}: analytic {a} vs numeric {numeric}",
                policy.network_names()[n]
            );
        }
    }
}

#[test]
fn lstm_gradients_match_finite_differences() {
    for (activation, seed) in [(Activation::Tanh, 50), (Activation::Relu, 51)] {
        let config = PolicyConfig {
            hidden: vec![6],
            activation,
            actor_head_scale: 1.0,
            ..PolicyConfig::new()
        };
        let policy =
            RecurrentCategoricalPolicy::new(3, 3, History::Lstm { hidden: 5 }, config, seed)
                .unwrap();
        check_gradients(&policy, &GradCase::new(&policy, 4, 3, seed));
    }
}

#[test]
fn stack_and_identity_gradients_match_finite_differences() {
    let config = PolicyConfig {
        hidden: vec![5],
        activation: Activation::Tanh,
        actor_head_scale: 1.0,
        ..PolicyConfig::new()
    };
    for (history, seed) in [(History::Stack { k: 3 }, 60), (History::None, 61)] {
        let policy = RecurrentCategoricalPolicy::new(2, 3, history, config.clone(), seed).unwrap();
        check_gradients(&policy, &GradCase::new(&policy, 4, 2, seed));
    }
}

#[test]
fn plans_are_known_before_and_equal_what_is_allocated() {
    for history in [
        History::None,
        History::Stack { k: 4 },
        History::Lstm { hidden: 32 },
    ] {
        let mut policy =
            RecurrentCategoricalPolicy::for_env(&MaskedCartPole::new(0), history, heads(), 0)
                .unwrap();
        let planned = policy.workspace_bytes(16, 8);
        assert_eq!(policy.workspace(16, 8).memory_bytes(), planned);
        // The record: `steps / chunk_len x envs x state_len` floats and a flag each.
        let plan = ChunkRecord::plan("record", 16, 128, 8, policy.state_len());
        policy.begin_rollout(16, 128, 8).unwrap();
        assert_eq!(
            plan.total(rl_core::Location::Ram),
            policy.chunk_record().unwrap().memory_bytes()
        );
        // Acting's plan is set by the number of environments only.
        let acting = policy
            .acting_plan("policy", 8)
            .total(rl_core::Location::Ram);
        assert!(acting > 0);
        let lstm_state = match history {
            History::Lstm { hidden } => 6 * hidden * 4 * 8,
            _ => 0,
        };
        assert!(acting as usize >= lstm_state);
    }
}

#[test]
fn acting_allocates_nothing_after_the_first_step() {
    let mut policy =
        RecurrentCategoricalPolicy::new(2, 2, History::Lstm { hidden: 16 }, heads(), 0).unwrap();
    policy.begin_rollout(8, 64, 4).unwrap();
    let mut slots = [HistorySlot::default(); 4];
    let (mut actions, mut lp, mut v) = ([0u32; 4], [0.0; 4], [0.0; 4]);
    let obs = uniform(4, 2, 1.0, 0);
    let mut step = |policy: &mut RecurrentCategoricalPolicy, slots: &mut [HistorySlot; 4]| {
        let out = ActOutput {
            actions: &mut actions,
            log_probs: &mut lp,
            values: &mut v,
        };
        policy.act(&obs, slots, out).unwrap();
        let mut values = [0.0; 4];
        policy.values(&obs, slots, &mut values).unwrap();
    };
    step(&mut policy, &mut slots);
    let ((), stats) = rl_testkit::measure(|| {
        for t in 0..63 {
            if t % 10 == 0 {
                slots[t % 4] = HistorySlot::default();
            }
            step(&mut policy, &mut slots);
        }
    });
    assert_eq!(stats.allocations, 0);
    assert!(policy.chunk_record().unwrap().is_complete());
}

#[test]
fn errors_are_typed_and_change_nothing() {
    assert!(matches!(
        RecurrentCategoricalPolicy::new(2, 2, History::Stack { k: 0 }, heads(), 0),
        Err(Error::Config { .. })
    ));
    assert!(matches!(
        RecurrentCategoricalPolicy::new(2, 2, History::Lstm { hidden: 0 }, heads(), 0),
        Err(Error::Config { .. })
    ));
    assert!(matches!(
        RecurrentCategoricalPolicy::new(0, 2, History::None, heads(), 0),
        Err(Error::Config { .. })
    ));
    let mut policy =
        RecurrentCategoricalPolicy::new(4, 2, History::Lstm { hidden: 3 }, heads(), 0).unwrap();
    assert!(matches!(
        policy.begin_rollout(5, 12, 2),
        Err(Error::Config { .. })
    ));
    assert!(matches!(
        policy.set_obs_normalizer(Some(ObsNormalizer::new(4, 5.0).unwrap())),
        Err(Error::Config { .. })
    ));
    // Wrong observation length: refused before any state is touched.
    let mut slots = [HistorySlot::default(); 2];
    let (mut actions, mut lp, mut v) = ([0u32; 2], [0.0; 2], [0.0; 2]);
    let out = ActOutput {
        actions: &mut actions,
        log_probs: &mut lp,
        values: &mut v,
    };
    assert!(policy.act(&[0.0; 7], &mut slots, out).is_err());
    assert!(slots.iter().all(HistorySlot::is_fresh));
    // An action out of range, and a window larger than the workspace.
    let mut ws = policy.workspace(2, 1);
    let batch = ChunkBatch {
        obs: &[0.0; 8],
        steps: 2,
        chunks: 1,
        resets: &[true, false],
        initial: &[0.0; 6],
    };
    assert!(matches!(
        policy.evaluate_chunks(batch, &[0, 2], &mut ws),
        Err(Error::ActionOutOfRange { row: 1, .. })
    ));
    let long = ChunkBatch {
        obs: &[0.0; 12],
        steps: 3,
        resets: &[true, false, false],
        ..batch
    };
    assert!(matches!(
        policy.evaluate_chunks(long, &[0, 1, 1], &mut ws),
        Err(Error::Config { .. })
    ));
    // Spaces: a CartPole works, a continuous action space does not.
    assert!(
        RecurrentCategoricalPolicy::for_env(&CartPole::new(0), History::None, heads(), 0).is_ok()
    );
}

#[test]
fn architecture_names_the_history_and_every_network() {
    let lstm =
        RecurrentCategoricalPolicy::new(2, 2, History::Lstm { hidden: 8 }, heads(), 0).unwrap();
    let stack = RecurrentCategoricalPolicy::new(2, 2, History::Stack { k: 4 }, heads(), 0).unwrap();
    assert_eq!(lstm.network_names(), ["actor", "critic", "lstm"]);
    assert_eq!(stack.network_names(), ["actor", "critic"]);
    assert_ne!(lstm.architecture(), stack.architecture());
    assert_eq!(
        lstm.architecture().kind,
        PolicyKind::RecurrentCategorical(History::Lstm { hidden: 8 })
    );
    assert_eq!(stack.feature_len(), 8);
    assert_eq!(stack.state_len(), 6);
    assert_eq!(lstm.state_len(), 16);
    assert_eq!(PolicyGradients::new(&lstm).len(), 3);
}
