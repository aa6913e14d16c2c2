#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::*;
use crate::{Usage, Weights};

fn rng(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed)
}

fn random(rng: &mut Xoshiro256PlusPlus, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// The network computed naively in f64 from the same parameters: the reference the
/// f32 passes are checked against. Returns the outputs and every pre-activation.
fn reference(net: &Mlp, params: &[f64], input: &[f64], rows: usize) -> (Vec<f64>, Vec<f64>) {
    let mut x = input.to_vec();
    let mut pre = Vec::new();
    let last = net.layers().len() - 1;
    for (l, layer) in net.layers().iter().enumerate() {
        let (w, b) = (&params[layer.weight()], &params[layer.bias()]);
        let (inputs, outputs) = (layer.inputs(), layer.outputs());
        let mut y = vec![0.0; rows * outputs];
        for r in 0..rows {
            for o in 0..outputs {
                let z = b[o]
                    + (0..inputs)
                        .map(|i| w[o * inputs + i] * x[r * inputs + i])
                        .sum::<f64>();
                pre.push(z);
                y[r * outputs + o] = if l == last {
                    z
                } else {
                    match net.spec().activation {
                        Activation::Relu => z.max(0.0),
                        Activation::Tanh => z.tanh(),
                    }
                };
            }
        }
        x = y;
    }
    (x, pre)
}

fn weighted_sum(out: &[f64], weights: &[f32]) -> f64 {
    out.iter()
        .zip(weights)
        .map(|(o, &w)| o * f64::from(w))
        .sum()
}

/// Moves one parameter or input by the given step.
type Perturb<'a> = dyn FnMut(&mut Vec<f64>, &mut Vec<f64>, f64) + 'a;

/// Analytic gradients (f32 passes) against central finite differences of the f64
/// reference, for parameters and inputs, with ReLU and tanh.
fn check_gradients(activation: Activation, sizes: &[usize], rows: usize, seed: u64) {
    let mut g = rng(seed);
    let spec = MlpSpec {
        sizes: sizes.to_vec(),
        activation,
    };
    let net = Mlp::new(spec, Init::Uniform, &mut g).unwrap();
    let (inputs, outputs) = (net.input_dim(), net.output_dim());
    let input = random(&mut g, rows * inputs);
    let weights = random(&mut g, rows * outputs);
    let mut ws = net.workspace(rows + 3);
    let out = net.forward(&input, rows, &mut ws).unwrap().to_vec();
    let mut grads = vec![0.0; net.num_params()];
    let mut input_grads = vec![0.0; rows * inputs];
    net.backward(&mut ws, &weights, Some(&mut grads), Some(&mut input_grads))
        .unwrap();

    let params: Vec<f64> = net.params().iter().map(|&p| f64::from(p)).collect();
    let x: Vec<f64> = input.iter().map(|&v| f64::from(v)).collect();
    let (want, pre) = reference(&net, &params, &x, rows);
    for (o, w) in out.iter().zip(&want) {
        assert!(
            (f64::from(*o) - w).abs() < 1e-5,
            "forward {o} vs reference {w}"
        );
    }
    // ReLU has kinks: skip networks where a pre-activation sits within reach of h.
    let h = 1e-6;
    if activation == Activation::Relu && pre.iter().any(|z| z.abs() < 1e-4) {
        return;
    }
    let numeric = |params: &[f64], x: &[f64], which: &mut Perturb<'_>| {
        let (mut p, mut xx) = (params.to_vec(), x.to_vec());
        which(&mut p, &mut xx, h);
        let up = weighted_sum(&reference(&net, &p, &xx, rows).0, &weights);
        let (mut p, mut xx) = (params.to_vec(), x.to_vec());
        which(&mut p, &mut xx, -h);
        let down = weighted_sum(&reference(&net, &p, &xx, rows).0, &weights);
        (up - down) / (2.0 * h)
    };
    let close = |analytic: f32, numeric: f64| {
        (f64::from(analytic) - numeric).abs() <= 1e-4 + 1e-3 * numeric.abs()
    };
    for i in 0..net.num_params() {
        let n = numeric(&params, &x, &mut |p, _, d| p[i] += d);
        assert!(
            close(grads[i], n),
            "{activation} param {i}: analytic {} vs numeric {n}",
            grads[i]
        );
    }
    for i in 0..x.len() {
        let n = numeric(&params, &x, &mut |_, xx, d| xx[i] += d);
        assert!(
            close(input_grads[i], n),
            "{activation} input {i}: analytic {} vs numeric {n}",
            input_grads[i]
        );
    }
}

#[test]
fn relu_gradients_match_finite_differences() {
    for seed in 0..4 {
        check_gradients(Activation::Relu, &[4, 6, 5, 3], 5, seed);
    }
}

#[test]
fn tanh_gradients_match_finite_differences() {
    for seed in 0..4 {
        check_gradients(Activation::Tanh, &[4, 6, 5, 3], 5, seed);
        check_gradients(Activation::Tanh, &[3, 17, 1], 9, seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn gradients_match_for_any_shape(
        sizes in proptest::collection::vec(1usize..9, 2..5),
        rows in 1usize..7,
        tanh in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let activation = if tanh { Activation::Tanh } else { Activation::Relu };
        check_gradients(activation, &sizes, rows, seed);
    }
}

#[test]
fn workspace_bytes_are_what_it_allocates() {
    let mut g = rng(4);
    let net = Mlp::new(
        MlpSpec::new(7, &[64, 33], 5, Activation::Relu),
        Init::Uniform,
        &mut g,
    )
    .unwrap();
    let (ws, stats) = rl_testkit::measure(|| net.workspace(48));
    let planned = net.workspace_bytes(48);
    assert!(stats.allocated_bytes >= planned, "{stats:?} vs {planned}");
    // The plan counts the buffers; the vector of buffers and the spec are small change.
    assert!(
        stats.allocated_bytes - planned < 512,
        "{stats:?} vs {planned}"
    );
    drop(ws);
    let plan = net.memory_plan("net", 48, Usage::Training);
    let params = (net.num_params() * 4) as u64;
    assert_eq!(plan.grand_total(), 4 * params + planned);
}

#[test]
fn bad_shapes_and_foreign_workspaces_are_errors() {
    let mut g = rng(3);
    assert!(
        Mlp::new(
            MlpSpec {
                sizes: vec![3],
                activation: Activation::Relu
            },
            Init::Uniform,
            &mut g
        )
        .is_err()
    );
    assert!(
        Mlp::new(
            MlpSpec::new(3, &[0], 1, Activation::Relu),
            Init::Uniform,
            &mut g
        )
        .is_err()
    );
    let bad_gain = Init::Orthogonal {
        hidden_gain: f32::NAN,
        output_gain: 1.0,
    };
    assert!(Mlp::new(MlpSpec::new(3, &[4], 1, Activation::Relu), bad_gain, &mut g).is_err());
    let net = Mlp::new(
        MlpSpec::new(3, &[4], 1, Activation::Relu),
        Init::Uniform,
        &mut g,
    )
    .unwrap();
    let tanh = Mlp::new(
        MlpSpec::new(3, &[4], 1, Activation::Tanh),
        Init::Uniform,
        &mut g,
    )
    .unwrap();
    let mut ws = net.workspace(2);
    assert!(
        matches!(
            net.forward(&[0.0; 9], 3, &mut ws),
            Err(Error::ShapeMismatch { .. })
        ),
        "rows > max_rows"
    );
    assert!(
        matches!(
            net.forward(&[0.0; 5], 2, &mut ws),
            Err(Error::ShapeMismatch { .. })
        ),
        "ragged input"
    );
    assert!(
        matches!(
            tanh.forward(&[0.0; 6], 2, &mut ws),
            Err(Error::ArchitectureMismatch { .. })
        ),
        "a workspace of a network with another activation"
    );
    net.forward(&[0.0; 6], 2, &mut ws).unwrap();
    assert!(
        net.backward(&mut ws, &[0.0; 3], None, None).is_err(),
        "output gradients of 3 rows"
    );
    let mut short = vec![0.0; 3];
    assert!(
        net.backward(&mut ws, &[0.0; 2], Some(&mut short), None)
            .is_err()
    );
}

#[test]
fn tensors_tile_the_parameters_with_pytorch_names() {
    let mut g = rng(1);
    let net = Mlp::new(
        MlpSpec::new(4, &[64, 32], 2, Activation::Relu),
        Init::Uniform,
        &mut g,
    )
    .unwrap();
    let tensors = net.tensors();
    let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"
        ]
    );
    assert_eq!(tensors[0].shape, [64, 4]);
    assert_eq!(tensors[5].shape, [2]);
    let mut next = 0;
    for t in &tensors {
        assert_eq!(t.offset, next);
        next += t.len();
    }
    assert_eq!(next, net.num_params());
    assert_eq!(net.num_params(), net.spec().num_params());
}

#[test]
fn uniform_init_stays_in_pytorch_bounds() {
    let mut g = rng(9);
    let net = Mlp::new(
        MlpSpec::new(16, &[9], 4, Activation::Relu),
        Init::Uniform,
        &mut g,
    )
    .unwrap();
    for layer in net.layers() {
        let bound = 1.0 / (layer.inputs() as f32).sqrt();
        let values = &net.params()[layer.weight().start..layer.bias().end];
        assert!(values.iter().all(|v| v.abs() <= bound));
        // Spread over the range, not collapsed near 0.
        assert!(values.iter().any(|v| v.abs() > 0.8 * bound));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Orthogonal layers: rows (or columns, for tall weights) orthonormal times the gain,
    /// biases 0; the output layer gets its own gain.
    #[test]
    fn orthogonal_init_is_orthogonal(
        sizes in proptest::collection::vec(1usize..40, 2..4),
        hidden_gain in 0.1f32..3.0,
        output_gain in 0.01f32..2.0,
        seed in any::<u64>(),
    ) {
        let mut g = rng(seed);
        let init = Init::Orthogonal { hidden_gain, output_gain };
        let net = Mlp::new(MlpSpec { sizes, activation: Activation::Tanh }, init, &mut g).unwrap();
        let last = net.layers().len() - 1;
        for (l, layer) in net.layers().iter().enumerate() {
            let gain = f64::from(if l == last { output_gain } else { hidden_gain });
            let w = &net.params()[layer.weight()];
            let (rows, cols) = (layer.outputs(), layer.inputs());
            let at = |r: usize, c: usize| f64::from(w[r * cols + c]);
            // Gram matrix along the shorter side.
            let (n, len, transposed) = if rows <= cols { (rows, cols, false) } else { (cols, rows, true) };
            let get = |i: usize, k: usize| if transposed { at(k, i) } else { at(i, k) };
            for i in 0..n {
                for j in 0..n {
                    let dot: f64 = (0..len).map(|k| get(i, k) * get(j, k)).sum();
                    let want = if i == j { gain * gain } else { 0.0 };
                    prop_assert!((dot - want).abs() < 1e-4 * (1.0 + gain * gain), "layer {l} gram ({i},{j}) = {dot}, want {want}");
                }
            }
            prop_assert!(net.params()[layer.bias()].iter().all(|&b| b == 0.0));
        }
    }
}

#[test]
fn output_layer_scaling_and_zero_networks() {
    let mut g = rng(2);
    let mut net = Mlp::new(
        MlpSpec::new(2, &[3], 2, Activation::Relu),
        Init::Uniform,
        &mut g,
    )
    .unwrap();
    let before = net.clone();
    net.scale_output_layer(0.5);
    let last = net.layers()[1];
    for i in last.weight() {
        assert_eq!(net.params()[i], 0.5 * before.params()[i]);
    }
    assert!(net.params()[last.bias()].iter().all(|&b| b == 0.0));
    assert_eq!(
        net.params()[..last.weight().start],
        before.params()[..last.weight().start]
    );
    let zeros = Mlp::zeros(net.spec().clone()).unwrap();
    assert!(zeros.params().iter().all(|&p| p == 0.0));
    assert_eq!(zeros.architecture(), net.architecture());
}

#[test]
fn parameters_are_weights() {
    let mut p = Parameters::filled(vec![3], -0.5).unwrap();
    assert_eq!(p.params(), [-0.5; 3]);
    p.params_mut()[1] = 2.0;
    assert_eq!(p.tensors()[0].shape, [3]);
    assert_eq!(p.architecture(), Architecture::Tensor { shape: vec![3] });
    assert!(Parameters::filled(vec![], 0.0).is_err());
    assert!(Parameters::filled(vec![2, 0], 0.0).is_err());
}
#[test]
fn passes_accumulate_and_allocate_nothing() {
    let mut g = rng(3);
    let net = Mlp::new(
        MlpSpec::new(3, &[32, 32], 1, Activation::Tanh),
        Init::Uniform,
        &mut g,
    )
    .unwrap();
    let mut ws = net.workspace(16);
    let input = random(&mut g, 16 * 3);
    let mut once = vec![0.0; net.num_params()];
    net.forward(&input, 16, &mut ws).unwrap();
    net.backward(&mut ws, &[1.0; 16], Some(&mut once), None)
        .unwrap();
    let mut twice = vec![0.0; net.num_params()];
    let mut dx = vec![0.0; 16 * 3];
    let ((), stats) = rl_testkit::measure(|| {
        for _ in 0..2 {
            net.forward(&input, 16, &mut ws).unwrap();
            net.backward(&mut ws, &[1.0; 16], Some(&mut twice), Some(&mut dx))
                .unwrap();
        }
    });
    assert_eq!(stats.allocations, 0, "{stats:?}");
    for (a, b) in once.iter().zip(&twice) {
        assert!(
            (2.0 * a - b).abs() <= 1e-5 * a.abs().max(1.0),
            "{a} twice is not {b}"
        );
    }
}

proptest! {
    /// The sizes a plan reads from widths alone are the built network's.
    #[test]
    fn sizes_from_widths_are_the_built_networks(
        sizes in prop::collection::vec(1usize..40, 2..5),
        rows in 1usize..70,
    ) {
        let spec = MlpSpec { sizes, activation: Activation::Tanh };
        let net = Mlp::zeros(spec.clone()).unwrap();
        prop_assert_eq!(spec.checked_num_params(), Some(net.num_params()));
        prop_assert_eq!(spec.workspace_bytes(rows), Some(net.workspace(rows).memory_bytes()));
        prop_assert_eq!(spec.workspace_bytes(rows), Some(net.workspace_bytes(rows)));
    }
}

#[test]
fn sizes_that_overflow_are_none() {
    let spec = MlpSpec::new(4, &[1 << 40, 1 << 40], 2, Activation::Relu);
    assert_eq!(spec.checked_num_params(), None);
    let wide = MlpSpec::new(4, &[usize::MAX / 4], 2, Activation::Relu);
    assert_eq!(wide.workspace_bytes(1), None);
    assert_eq!(
        MlpSpec::new(4, &[8], 2, Activation::Relu).workspace_bytes(usize::MAX),
        None
    );
}
