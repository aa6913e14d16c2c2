//! Tests of the LSTM cell: an independent f64 reference, finite differences, the step
//! against the window, allocation and memory accounting, shape errors.
#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::*;
use crate::{Error, load_weights, save_weights};

fn rng(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed)
}

fn random(rng: &mut Xoshiro256PlusPlus, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-scale..scale)).collect()
}

fn wide(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// One window of the cell, naively in f64 and written from the equations alone
/// (PyTorch's `nn.LSTMCell` documentation), not from the code under test: weights read
/// element by element from the documented flat layout (`weight_ih`, `weight_hh`,
/// `bias_ih`, `bias_hh`, gates `i, f, g, o`), time-major windows. Returns the outputs
/// and the final `(h, c)`.
struct Reference {
    input: usize,
    hidden: usize,
}

struct Window<'a> {
    x: &'a [f64],
    steps: usize,
    rows: usize,
    resets: &'a [bool],
    h0: &'a [f64],
    c0: &'a [f64],
}

impl Reference {
    fn run(&self, p: &[f64], w: &Window<'_>) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let (ni, nh) = (self.input, self.hidden);
        let w_ih = |row: usize, col: usize| p[row * ni + col];
        let w_hh = |row: usize, col: usize| p[4 * nh * ni + row * nh + col];
        let b_ih = |row: usize| p[4 * nh * (ni + nh) + row];
        let b_hh = |row: usize| p[4 * nh * (ni + nh + 1) + row];
        let sig = |z: f64| 1.0 / (1.0 + (-z).exp());
        let (mut h, mut c) = (w.h0.to_vec(), w.c0.to_vec());
        let mut out = Vec::with_capacity(w.steps * w.rows * nh);
        for t in 0..w.steps {
            for r in 0..w.rows {
                if w.resets.get(t * w.rows + r).copied().unwrap_or(false) {
                    h[r * nh..(r + 1) * nh].fill(0.0);
                    c[r * nh..(r + 1) * nh].fill(0.0);
                }
            }
            let mut h_next = vec![0.0; w.rows * nh];
            for r in 0..w.rows {
                let x = &w.x[(t * w.rows + r) * ni..(t * w.rows + r + 1) * ni];
                let pre = |gate: usize, k: usize| {
                    let row = gate * nh + k;
                    b_ih(row)
                        + b_hh(row)
                        + (0..ni).map(|j| w_ih(row, j) * x[j]).sum::<f64>()
                        + (0..nh).map(|j| w_hh(row, j) * h[r * nh + j]).sum::<f64>()
                };
                for k in 0..nh {
                    let (i, f) = (sig(pre(0, k)), sig(pre(1, k)));
                    let (g, o) = (pre(2, k).tanh(), sig(pre(3, k)));
                    let cell = f * c[r * nh + k] + i * g;
                    c[r * nh + k] = cell;
                    h_next[r * nh + k] = o * cell.tanh();
                }
            }
            h = h_next;
            out.extend_from_slice(&h);
        }
        (out, h, c)
    }
}

/// A random window: inputs, resets at random places (never none when `steps > 1`),
/// initial states and output weights of the loss `sum(out * weights)`.
struct Case {
    lstm: Lstm,
    steps: usize,
    rows: usize,
    input: Vec<f32>,
    resets: Vec<bool>,
    h0: Vec<f32>,
    c0: Vec<f32>,
    weights: Vec<f32>,
}

fn case(input: usize, hidden: usize, steps: usize, rows: usize, seed: u64) -> Case {
    let mut g = rng(seed);
    let mut lstm = Lstm::new(input, hidden, &mut g).unwrap();
    // Larger weights than the default bound, so that gates saturate unevenly.
    for p in lstm.params_mut() {
        *p *= 2.0;
    }
    let n = steps * rows;
    let mut resets: Vec<bool> = (0..n).map(|_| g.random_bool(0.2)).collect();
    if steps > 1 {
        resets[(steps / 2) * rows + g.random_range(0..rows)] = true;
    }
    Case {
        input: random(&mut g, n * input, 1.0),
        h0: random(&mut g, rows * hidden, 0.8),
        c0: random(&mut g, rows * hidden, 1.5),
        weights: random(&mut g, n * hidden, 1.0),
        lstm,
        steps,
        rows,
        resets,
    }
}

impl Case {
    fn sequence(&self) -> Sequence<'_> {
        Sequence {
            input: &self.input,
            steps: self.steps,
            rows: self.rows,
            resets: Some(&self.resets),
            h0: &self.h0,
            c0: &self.c0,
        }
    }
}

fn loss(out: &[f64], weights: &[f32]) -> f64 {
    out.iter()
        .zip(weights)
        .map(|(o, &w)| o * f64::from(w))
        .sum()
}

/// The analytic gradients (f32 passes) of `sum(out * weights)` for the parameters, the
/// inputs and the initial state against central differences of the f64 reference.
fn check_gradients(c: &Case) {
    let lstm = &c.lstm;
    let (ni, nh) = (lstm.input(), lstm.hidden());
    let mut ws = lstm.sequence_workspace(c.steps + 1, c.rows + 2);
    let out = lstm
        .forward_sequence(c.sequence(), &mut ws)
        .unwrap()
        .to_vec();
    let mut dp = vec![0.0; lstm.num_params()];
    let mut dx = vec![0.0; c.input.len()];
    let (mut dh0, mut dc0) = (vec![0.0; c.h0.len()], vec![0.0; c.c0.len()]);
    let grads = SequenceGrads {
        params: Some(&mut dp),
        input: Some(&mut dx),
        h0: Some(&mut dh0),
        c0: Some(&mut dc0),
    };
    lstm.backward_sequence(&mut ws, &c.weights, grads).unwrap();

    let reference = Reference {
        input: ni,
        hidden: nh,
    };
    // [params, inputs, h0, c0] in f64, perturbed one element at a time.
    let base = [
        wide(lstm.params()),
        wide(&c.input),
        wide(&c.h0),
        wide(&c.c0),
    ];
    let eval = |v: &[Vec<f64>; 4]| {
        let window = Window {
            x: &v[1],
            steps: c.steps,
            rows: c.rows,
            resets: &c.resets,
            h0: &v[2],
            c0: &v[3],
        };
        reference.run(&v[0], &window)
    };
    let (want, want_h, want_c) = eval(&base);
    for (o, w) in out.iter().zip(&want) {
        assert!(
            (f64::from(*o) - w).abs() < 2e-6,
            "forward {o} vs reference {w}"
        );
    }
    for (o, w) in ws.final_h().iter().zip(&want_h) {
        assert!((f64::from(*o) - w).abs() < 2e-6, "final h {o} vs {w}");
    }
    for (o, w) in ws.final_c().iter().zip(&want_c) {
        assert!((f64::from(*o) - w).abs() < 2e-5, "final c {o} vs {w}");
    }
    let h = 1e-6;
    for (which, analytic, name) in [
        (0, &dp, "parameter"),
        (1, &dx, "input"),
        (2, &dh0, "initial h"),
        (3, &dc0, "initial c"),
    ] {
        for (e, &a) in analytic.iter().enumerate() {
            let mut v = base.clone();
            v[which][e] += h;
            let up = loss(&eval(&v).0, &c.weights);
            v[which][e] -= 2.0 * h;
            let down = loss(&eval(&v).0, &c.weights);
            let numeric = (up - down) / (2.0 * h);
            assert!(
                (f64::from(a) - numeric).abs() <= 2e-4 + 1e-3 * numeric.abs(),
                "{name} {e} (input {ni}, hidden {nh}, {} steps x {} rows): analytic {a} vs numeric {numeric}",
                c.steps,
                c.rows
            );
        }
    }
}

#[test]
fn gradients_match_finite_differences_with_resets_inside_the_window() {
    for seed in 0..3 {
        check_gradients(&case(3, 5, 6, 3, seed));
    }
    // hidden 1 and input 1: the smallest products; one step; many rows.
    check_gradients(&case(1, 1, 4, 2, 7));
    check_gradients(&case(4, 3, 1, 5, 8));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn gradients_match_for_any_shape(
        input in 1usize..6,
        hidden in 1usize..7,
        steps in 1usize..7,
        rows in 1usize..5,
        seed in any::<u64>(),
    ) {
        check_gradients(&case(input, hidden, steps, rows, seed));
    }

    /// The state carried while acting is the state replayed while training: a window
    /// equals `steps` calls of `step` (resets applied to the acting state before the
    /// step), outputs and final state, within 1e-6.
    #[test]
    fn a_window_equals_steps_taken_one_at_a_time(
        input in 1usize..9,
        hidden in 1usize..40,
        steps in 1usize..20,
        rows in 1usize..70,
        seed in any::<u64>(),
    ) {
        let c = case(input, hidden, steps, rows, seed);
        assert_window_equals_steps(&c);
    }
}

fn assert_window_equals_steps(c: &Case) {
    let lstm = &c.lstm;
    let nh = lstm.hidden();
    let mut ws = lstm.sequence_workspace(c.steps, c.rows);
    let out = lstm.forward_sequence(c.sequence(), &mut ws).unwrap();
    let mut state = lstm.state(c.rows);
    let (h, cc) = state.h_c_mut();
    h.copy_from_slice(&c.h0);
    cc.copy_from_slice(&c.c0);
    let ni = lstm.input();
    for t in 0..c.steps {
        for r in 0..c.rows {
            if c.resets[t * c.rows + r] {
                state.reset_row(r).unwrap();
            }
        }
        let x = &c.input[t * c.rows * ni..(t + 1) * c.rows * ni];
        let h = lstm.step(x, &mut state).unwrap();
        let window = &out[t * c.rows * nh..(t + 1) * c.rows * nh];
        for (a, b) in h.iter().zip(window) {
            assert!((a - b).abs() <= 1e-6, "step {t}: {a} vs {b}");
        }
    }
    for (a, b) in state.h().iter().zip(ws.final_h()) {
        assert!((a - b).abs() <= 1e-6);
    }
    for (a, b) in state.c().iter().zip(ws.final_c()) {
        assert!((a - b).abs() <= 1e-6);
    }
}

#[test]
fn acting_64_environments_equals_the_window() {
    // The bench's shape: 64 environments, hidden 64, windows of 16.
    assert_window_equals_steps(&case(4, 64, 16, 64, 11));
}

#[test]
fn module_forward_is_one_step_from_the_carried_state() {
    let c = case(3, 6, 5, 4, 2);
    let lstm = &c.lstm;
    let mut ws = lstm.workspace(4);
    let mut state = lstm.state(4);
    for t in 0..5 {
        let x = &c.input[t * 12..(t + 1) * 12];
        if t == 3 {
            ws.reset_row(1).unwrap();
            state.reset_row(1).unwrap();
        }
        let a = Module::forward(lstm, x, 4, &mut ws).unwrap().to_vec();
        let b = lstm.step(x, &mut state).unwrap();
        assert_eq!(a, b, "step {t}");
    }
    assert_eq!(ws.final_c(), state.c());
    // Its backward is a one-step window's: parameter and input gradients as
    // backward_sequence gives for a window of one step from the same state.
    let (h0, c0) = (ws.final_h().to_vec(), ws.final_c().to_vec());
    let x = &c.input[..12];
    Module::forward(lstm, x, 4, &mut ws).unwrap();
    let mut dp = vec![0.0; lstm.num_params()];
    let mut dx = vec![0.0; 12];
    Module::backward(
        lstm,
        &mut ws,
        &c.weights[..24],
        Some(&mut dp),
        Some(&mut dx),
    )
    .unwrap();
    let mut seq = lstm.sequence_workspace(1, 4);
    let sequence = Sequence {
        input: x,
        steps: 1,
        rows: 4,
        resets: None,
        h0: &h0,
        c0: &c0,
    };
    lstm.forward_sequence(sequence, &mut seq).unwrap();
    let (mut dp2, mut dx2) = (vec![0.0; lstm.num_params()], vec![0.0; 12]);
    let grads = SequenceGrads {
        params: Some(&mut dp2),
        input: Some(&mut dx2),
        ..SequenceGrads::default()
    };
    lstm.backward_sequence(&mut seq, &c.weights[..24], grads)
        .unwrap();
    assert_eq!(dp, dp2);
    assert_eq!(dx, dx2);
}

#[test]
fn passes_accumulate_and_allocate_nothing() {
    let c = case(4, 16, 8, 12, 5);
    let lstm = &c.lstm;
    let mut ws = lstm.sequence_workspace(8, 12);
    let mut state = lstm.state(12);
    let mut once = vec![0.0; lstm.num_params()];
    lstm.forward_sequence(c.sequence(), &mut ws).unwrap();
    let grads = SequenceGrads {
        params: Some(&mut once),
        ..SequenceGrads::default()
    };
    lstm.backward_sequence(&mut ws, &c.weights, grads).unwrap();
    lstm.step(&c.input[..48], &mut state).unwrap();
    let mut module_ws = lstm.workspace(12);
    Module::forward(lstm, &c.input[..48], 12, &mut module_ws).unwrap();

    let mut twice = vec![0.0; lstm.num_params()];
    let mut dx = vec![0.0; c.input.len()];
    let (mut dh0, mut dc0) = (vec![0.0; 12 * 16], vec![0.0; 12 * 16]);
    let ((), stats) = rl_testkit::measure(|| {
        for _ in 0..2 {
            lstm.forward_sequence(c.sequence(), &mut ws).unwrap();
            let grads = SequenceGrads {
                params: Some(&mut twice),
                input: Some(&mut dx),
                h0: Some(&mut dh0),
                c0: Some(&mut dc0),
            };
            lstm.backward_sequence(&mut ws, &c.weights, grads).unwrap();
        }
        for t in 0..1000 {
            state.reset_row(t % 12).unwrap();
            lstm.step(&c.input[..48], &mut state).unwrap();
        }
        Module::forward(lstm, &c.input[..48], 12, &mut module_ws).unwrap();
        Module::backward(lstm, &mut module_ws, &c.weights[..12 * 16], None, None).unwrap();
    });
    assert_eq!(stats.allocations, 0, "{stats:?}");
    for (a, b) in once.iter().zip(&twice) {
        assert!(
            (2.0 * a - b).abs() <= 1e-5 * a.abs().max(1.0),
            "{a} twice is not {b}"
        );
    }
}

#[test]
fn memory_plans_are_what_is_allocated() {
    let lstm = Lstm::new(7, 33, &mut rng(4)).unwrap();
    let (ws, stats) = rl_testkit::measure(|| lstm.sequence_workspace(16, 32));
    let planned = lstm.sequence_workspace_bytes(16, 32);
    assert_eq!(ws.memory_bytes(), planned);
    assert!(stats.allocated_bytes >= planned, "{stats:?} vs {planned}");
    assert!(
        stats.allocated_bytes - planned < 512,
        "{stats:?} vs {planned}"
    );
    let (state, stats) = rl_testkit::measure(|| lstm.state(64));
    assert_eq!(state.memory_bytes(), lstm.state_bytes(64));
    assert_eq!(stats.allocated_bytes, lstm.state_bytes(64));
    let params = (lstm.num_params() * 4) as u64;
    let plan = lstm.sequence_memory_plan("lstm", 16, 32, Usage::Training);
    assert_eq!(plan.grand_total(), 4 * params + planned);
    let inference = lstm.memory_plan("lstm", 32, Usage::Inference);
    assert_eq!(
        inference.grand_total(),
        params + lstm.sequence_workspace_bytes(1, 32)
    );
    assert_eq!(lstm.workspace(32).memory_bytes(), lstm.workspace_bytes(32));
}

#[test]
fn tensors_are_pytorch_lstm_cell_tensors() {
    let mut g = rng(1);
    let lstm = Lstm::new(5, 9, &mut g).unwrap();
    let tensors = lstm.tensors();
    let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]);
    assert_eq!(tensors[0].shape, [36, 5]);
    assert_eq!(tensors[1].shape, [36, 9]);
    assert_eq!(tensors[2].shape, [36]);
    assert_eq!(tensors[3].shape, [36]);
    let mut next = 0;
    for t in &tensors {
        assert_eq!(t.offset, next);
        next += t.len();
    }
    assert_eq!(next, lstm.num_params());
    assert_eq!(Lstm::params_for(5, 9), lstm.num_params());
    // PyTorch's default: every parameter uniform in +-1/sqrt(hidden), spread out.
    let bound = 1.0 / 3.0;
    assert!(lstm.params().iter().all(|p| p.abs() <= bound));
    assert!(lstm.params().iter().any(|p| p.abs() > 0.9 * bound));
    assert_eq!(
        lstm.architecture(),
        Architecture::Lstm {
            input: 5,
            hidden: 9
        }
    );
    assert_eq!(lstm.architecture().to_string(), "lstm 5-9");
}

#[test]
fn gates_follow_pytorch_order() {
    // Only bias_ih set: i = sigmoid(a), f = sigmoid(b), g = tanh(gc), o = sigmoid(d).
    // From c = 0: c' = i g, h' = o tanh(c').
    let mut lstm = Lstm::zeros(1, 1).unwrap();
    let (a, b, gc, d) = (0.3f32, -1.0f32, 0.7f32, 2.0f32);
    lstm.params_mut()[8..12].copy_from_slice(&[a, b, gc, d]);
    let sig = |z: f32| 1.0 / (1.0 + (-z).exp());
    let mut state = lstm.state(1);
    lstm.step(&[0.0], &mut state).unwrap();
    let c1 = sig(a) * gc.tanh();
    assert!((state.c()[0] - c1).abs() < 1e-6);
    assert!((state.h()[0] - sig(d) * c1.tanh()).abs() < 1e-6);
    // A second step: the forget gate keeps sigmoid(b) of the old cell.
    lstm.step(&[0.0], &mut state).unwrap();
    let c2 = sig(b) * c1 + c1;
    assert!((state.c()[0] - c2).abs() < 1e-6);
}

#[test]
fn weights_round_trip_through_safetensors() {
    let lstm = Lstm::new(3, 4, &mut rng(6)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lstm.safetensors");
    save_weights(&path, &[("memory", &lstm)]).unwrap();
    let mut loaded = Lstm::zeros(3, 4).unwrap();
    load_weights(&path, "memory", &mut loaded).unwrap();
    assert_eq!(loaded, lstm);
    let mut other = Lstm::zeros(3, 5).unwrap();
    assert!(matches!(
        load_weights(&path, "memory", &mut other),
        Err(Error::ArchitectureMismatch { .. })
    ));
}

#[test]
fn bad_shapes_and_foreign_workspaces_are_errors() {
    assert!(Lstm::zeros(0, 3).is_err());
    assert!(Lstm::zeros(usize::MAX / 2, 3).is_err());
    assert!(Lstm::zeros(3, usize::MAX / 4).is_err());
    assert!(Lstm::zeros(3, usize::MAX / 2).is_err());
    assert!(Lstm::new(3, 0, &mut rng(0)).is_err());
    let c = case(2, 3, 4, 2, 9);
    let lstm = &c.lstm;
    let other = Lstm::zeros(2, 4).unwrap();
    let mut ws = lstm.sequence_workspace(4, 2);
    let shape = |r: Result<&[f32]>| matches!(r, Err(Error::ShapeMismatch { .. }));
    let mut short = c.sequence();
    short.input = &c.input[1..];
    assert!(shape(lstm.forward_sequence(short, &mut ws)));
    let mut long = c.sequence();
    long.steps = 5;
    assert!(shape(lstm.forward_sequence(long, &mut ws)), "steps > max");
    let mut wide_rows = c.sequence();
    wide_rows.rows = 3;
    assert!(
        shape(lstm.forward_sequence(wide_rows, &mut ws)),
        "rows > max"
    );
    let mut resets = c.sequence();
    resets.resets = Some(&c.resets[1..]);
    assert!(shape(lstm.forward_sequence(resets, &mut ws)));
    let mut h0 = c.sequence();
    h0.h0 = &c.h0[1..];
    assert!(shape(lstm.forward_sequence(h0, &mut ws)));
    assert!(matches!(
        other.forward_sequence(c.sequence(), &mut ws),
        Err(Error::ArchitectureMismatch { .. })
    ));
    lstm.forward_sequence(c.sequence(), &mut ws).unwrap();
    assert!(
        lstm.backward_sequence(&mut ws, &c.weights[1..], SequenceGrads::default())
            .is_err()
    );
    let mut dp = vec![0.0; 3];
    let grads = SequenceGrads {
        params: Some(&mut dp),
        ..SequenceGrads::default()
    };
    assert!(lstm.backward_sequence(&mut ws, &c.weights, grads).is_err());
    let mut dh = vec![0.0; 5];
    let grads = SequenceGrads {
        h0: Some(&mut dh),
        ..SequenceGrads::default()
    };
    assert!(lstm.backward_sequence(&mut ws, &c.weights, grads).is_err());
    let mut state = lstm.state(2);
    assert!(lstm.step(&[0.0; 3], &mut state).is_err());
    assert!(matches!(
        other.step(&[0.0; 4], &mut state),
        Err(Error::ArchitectureMismatch { .. })
    ));
    assert!(state.reset_row(2).is_err());
    assert!(ws.reset_row(2).is_err());
}

#[test]
fn sizes_from_widths_are_the_built_cells() {
    for (input, hidden) in [(1, 1), (7, 33), (12, 5)] {
        let lstm = Lstm::zeros(input, hidden).unwrap();
        assert_eq!(
            Lstm::checked_params_for(input, hidden),
            Some(lstm.num_params())
        );
        assert_eq!(
            Lstm::state_bytes_for(hidden, 9),
            Some(lstm.state(9).memory_bytes())
        );
        assert_eq!(
            Lstm::sequence_workspace_bytes_for(input, hidden, 4, 6),
            Some(lstm.sequence_workspace(4, 6).memory_bytes())
        );
    }
    assert_eq!(Lstm::checked_params_for(4, 1 << 40), None);
    assert_eq!(Lstm::state_bytes_for(1 << 62, 2), None);
    assert_eq!(
        Lstm::sequence_workspace_bytes_for(4, 8, usize::MAX, 2),
        None
    );
    assert!(Lstm::zeros(4, 1 << 40).is_err());
}
