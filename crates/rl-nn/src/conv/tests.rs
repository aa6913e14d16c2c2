#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use super::*;

pub(crate) fn rng(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed)
}

pub(crate) fn random(rng: &mut Xoshiro256PlusPlus, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// The convolution computed by direct loops in f64 (no im2col, no product): the
/// reference every pass is checked against. `weight` is `[out, in, kh, kw]`; returns the
/// outputs NCHW before any activation.
pub(crate) fn reference_conv(
    spec: &Conv2dSpec,
    input: [usize; 2],
    weight: &[f64],
    bias: &[f64],
    x: &[f64],
    batch: usize,
) -> Vec<f64> {
    let [h, w] = input;
    let [kh, kw] = spec.kernel;
    let [oh, ow] = spec.output_size(input).unwrap();
    let (cin, cout) = (spec.in_channels, spec.out_channels);
    let mut y = vec![0.0; batch * cout * oh * ow];
    for b in 0..batch {
        for o in 0..cout {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut sum = bias[o];
                    for c in 0..cin {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy =
                                    (oy * spec.stride[0] + ky) as isize - spec.padding[0] as isize;
                                let ix =
                                    (ox * spec.stride[1] + kx) as isize - spec.padding[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                    continue;
                                }
                                let (iy, ix) = (iy as usize, ix as usize);
                                sum += weight[((o * cin + c) * kh + ky) * kw + kx]
                                    * x[((b * cin + c) * h + iy) * w + ix];
                            }
                        }
                    }
                    y[((b * cout + o) * oh + oy) * ow + ox] = sum;
                }
            }
        }
    }
    y
}

/// The reference's activation.
pub(crate) fn activate(activation: Option<Activation>, z: f64) -> f64 {
    match activation {
        None => z,
        Some(Activation::Relu) => z.max(0.0),
        Some(Activation::Tanh) => z.tanh(),
    }
}

fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// Forward against the f64 reference, and the input, weight and bias gradients of
/// `sum(y * weights)` against central finite differences of the reference.
fn check_layer(
    spec: Conv2dSpec,
    input: [usize; 2],
    batch: usize,
    activation: Option<Activation>,
    seed: u64,
) {
    let mut g = rng(seed);
    let conv = Conv2d::new(spec, input, 0)
        .unwrap()
        .with_activation(activation);
    let params = random(&mut g, conv.num_params());
    let x = random(&mut g, batch * conv.input_len());
    let weights = random(&mut g, batch * conv.output_len());
    let mut ws = conv.workspace(batch + 1);
    let y = conv.forward(&params, &x, batch, &mut ws).unwrap().to_vec();
    let mut grads = vec![0.0; conv.num_params()];
    let mut dx = vec![0.0; x.len()];
    conv.backward(&params, &mut ws, &weights, Some(&mut grads), Some(&mut dx))
        .unwrap();

    let p = to_f64(&params);
    let xs = to_f64(&x);
    let run = |p: &[f64], xs: &[f64]| -> (f64, Vec<f64>) {
        let z = reference_conv(&spec, input, &p[conv.weight()], &p[conv.bias()], xs, batch);
        let loss = z
            .iter()
            .zip(&weights)
            .map(|(&z, &w)| activate(activation, z) * f64::from(w))
            .sum();
        (loss, z)
    };
    let (_, z) = run(&p, &xs);
    for (i, (&a, &z)) in y.iter().zip(&z).enumerate() {
        let want = activate(activation, z);
        assert!(
            (f64::from(a) - want).abs() < 1e-5,
            "{spec:?} output {i}: {a} vs reference {want}"
        );
    }
    let h = 1e-6;
    // ReLU's kink: skip layers with a pre-activation within reach of the step.
    if activation == Some(Activation::Relu) && z.iter().any(|z| z.abs() < 1e-4) {
        return;
    }
    let close = |analytic: f32, numeric: f64| {
        (f64::from(analytic) - numeric).abs() <= 1e-4 + 1e-3 * numeric.abs()
    };
    for i in 0..p.len() {
        let (mut up, mut down) = (p.clone(), p.clone());
        up[i] += h;
        down[i] -= h;
        let n = (run(&up, &xs).0 - run(&down, &xs).0) / (2.0 * h);
        let what = if conv.bias().contains(&i) {
            "bias"
        } else {
            "weight"
        };
        assert!(
            close(grads[i], n),
            "{spec:?} {what} {i}: {} vs numeric {n}",
            grads[i]
        );
    }
    for i in 0..xs.len() {
        let (mut up, mut down) = (xs.clone(), xs.clone());
        up[i] += h;
        down[i] -= h;
        let n = (run(&p, &up).0 - run(&p, &down).0) / (2.0 * h);
        assert!(
            close(dx[i], n),
            "{spec:?} input {i}: {} vs numeric {n}",
            dx[i]
        );
    }
}

#[test]
fn gradients_match_finite_differences() {
    let cases = [
        // (spec, input, batch)
        (Conv2dSpec::square(1, 1, 1, 1, 0), [3, 3], 1),
        (Conv2dSpec::square(2, 3, 3, 1, 0), [5, 6], 2),
        (Conv2dSpec::square(2, 3, 3, 2, 1), [7, 6], 3),
        (Conv2dSpec::square(3, 2, 4, 2, 0), [9, 8], 2),
        (
            Conv2dSpec {
                in_channels: 2,
                out_channels: 4,
                kernel: [3, 2],
                stride: [1, 2],
                padding: [2, 1],
            },
            [5, 7],
            3,
        ),
        (
            Conv2dSpec {
                in_channels: 3,
                out_channels: 2,
                kernel: [2, 5],
                stride: [3, 1],
                padding: [0, 2],
            },
            [8, 4],
            2,
        ),
        // Kernel as large as the padded input: one output position.
        (Conv2dSpec::square(2, 3, 5, 1, 1), [3, 3], 2),
    ];
    for (seed, (spec, input, batch)) in cases.into_iter().enumerate() {
        for activation in [None, Some(Activation::Tanh), Some(Activation::Relu)] {
            check_layer(spec, input, batch, activation, seed as u64);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn gradients_match_for_any_geometry(
        cin in 1usize..4, cout in 1usize..4,
        kernel in [1usize..5, 1usize..5], stride in [1usize..4, 1usize..4],
        padding in [0usize..3, 0usize..3], extra in [0usize..5, 0usize..5],
        batch in 1usize..4, tanh in any::<bool>(), seed in any::<u64>(),
    ) {
        let spec = Conv2dSpec { in_channels: cin, out_channels: cout, kernel, stride, padding };
        // Inputs from the smallest the kernel allows.
        let input = [0, 1].map(|d| (kernel[d].saturating_sub(2 * padding[d])).max(1) + extra[d]);
        let activation = if tanh { Some(Activation::Tanh) } else { None };
        check_layer(spec, input, batch, activation, seed);
    }

    /// Bytes through the `/255` scaling give exactly the `f32` pass on `x / 255.0`, and
    /// an `f32` pass with the scaling; input gradients carry the 1/255.
    #[test]
    fn u8_input_is_the_f32_pass_on_scaled_bytes(
        cin in 1usize..4, kernel in 1usize..4, stride in 1usize..3, padding in 0usize..2,
        size in [4usize..9, 4usize..9], batch in 1usize..4, seed in any::<u64>(),
    ) {
        let mut g = rng(seed);
        let spec = Conv2dSpec::square(cin, 3, kernel, stride, padding);
        let plain = Conv2d::new(spec, size, 0).unwrap().with_activation(Some(Activation::Relu));
        let scaled = plain.with_input_scale(InputScale::Div255);
        let params = random(&mut g, plain.num_params());
        let bytes: Vec<u8> = (0..batch * plain.input_len()).map(|_| g.random()).collect();
        let divided: Vec<f32> = bytes.iter().map(|&b| f32::from(b) / 255.0).collect();
        let as_f32: Vec<f32> = bytes.iter().map(|&b| f32::from(b)).collect();
        let mut ws = [plain.workspace(batch), scaled.workspace(batch), scaled.workspace(batch)];
        let a = plain.forward(&params, &divided, batch, &mut ws[0]).unwrap().to_vec();
        let b = scaled.forward_u8(&params, &bytes, batch, &mut ws[1]).unwrap().to_vec();
        let c = scaled.forward(&params, &as_f32, batch, &mut ws[2]).unwrap().to_vec();
        prop_assert_eq!(bits(&a), bits(&b));
        prop_assert_eq!(bits(&a), bits(&c));
        let dy = random(&mut g, a.len());
        let mut dx = [vec![0.0; divided.len()], vec![0.0; divided.len()]];
        plain.backward(&params, &mut ws[0], &dy, None, Some(&mut dx[0])).unwrap();
        scaled.backward(&params, &mut ws[1], &dy, None, Some(&mut dx[1])).unwrap();
        for (p, s) in dx[0].iter().zip(&dx[1]) {
            prop_assert!((p / 255.0 - s).abs() <= 1e-6 * p.abs().max(1e-3), "{p} / 255 vs {s}");
        }
    }
}

/// An input gradient alone (a frozen layer) is the one a full backward pass writes, bit
/// for bit, and leaves the parameter gradients alone; the weight and bias gradients
/// alone are those of the full pass.
#[test]
fn gradients_alone_are_those_of_the_full_pass() {
    let mut g = rng(7);
    let spec = Conv2dSpec::square(5, 19, 3, 2, 1);
    for activation in [None, Some(Activation::Relu), Some(Activation::Tanh)] {
        let conv = Conv2d::new(spec, [11, 9], 0)
            .unwrap()
            .with_activation(activation);
        let params = random(&mut g, conv.num_params());
        let batch = 8;
        let x = random(&mut g, batch * conv.input_len());
        let dy = random(&mut g, batch * conv.output_len());
        let mut ws = conv.workspace(batch);
        conv.forward(&params, &x, batch, &mut ws).unwrap();
        let (mut grads, mut dx) = (vec![0.5; conv.num_params()], vec![0.0; x.len()]);
        conv.backward(&params, &mut ws, &dy, Some(&mut grads), Some(&mut dx))
            .unwrap();
        let mut alone = vec![f32::NAN; x.len()];
        conv.backward(&params, &mut ws, &dy, None, Some(&mut alone))
            .unwrap();
        assert_eq!(bits(&alone), bits(&dx), "{activation:?}");
        let mut grads_alone = vec![0.5; conv.num_params()];
        conv.backward(&params, &mut ws, &dy, Some(&mut grads_alone), None)
            .unwrap();
        assert_eq!(bits(&grads_alone), bits(&grads), "{activation:?}");
        assert!(grads.iter().any(|&v| v != 0.5));
    }
}

/// Bit patterns, for exact comparisons that print the values.
pub(crate) fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn bad_specs_name_the_field() {
    let ok = Conv2dSpec::square(2, 3, 3, 1, 0);
    let message = |spec: Conv2dSpec, input: [usize; 2]| match Conv2d::new(spec, input, 0) {
        Err(Error::Config { what, problem }) => format!("{what} {problem}"),
        other => panic!("{spec:?} on {input:?}: {other:?}"),
    };
    assert!(
        message(
            Conv2dSpec {
                in_channels: 0,
                ..ok
            },
            [5, 5]
        )
        .starts_with("conv2d.in_channels is 0")
    );
    assert!(
        message(
            Conv2dSpec {
                out_channels: 0,
                ..ok
            },
            [5, 5]
        )
        .starts_with("conv2d.out_channels")
    );
    assert!(
        message(
            Conv2dSpec {
                kernel: [3, 0],
                ..ok
            },
            [5, 5]
        )
        .starts_with("conv2d.kernel is [3, 0]")
    );
    assert!(
        message(
            Conv2dSpec {
                stride: [0, 1],
                ..ok
            },
            [5, 5]
        )
        .starts_with("conv2d.stride")
    );
    assert!(message(ok, [0, 5]).starts_with("conv2d input size is [0, 5]"));
    let large = message(Conv2dSpec::square(2, 3, 8, 4, 1), [5, 5]);
    assert!(
        large.starts_with("conv2d.kernel is [8, 8] but the padded input is only 7 x 7"),
        "{large}"
    );
    let huge = Conv2dSpec::square(usize::MAX / 2, 4, 3, 1, 0);
    assert!(message(huge, [5, 5]).contains("overflows"));
    // The error's text, as users see it.
    let err = Conv2d::new(
        Conv2dSpec {
            kernel: [9, 1],
            ..ok
        },
        [4, 4],
        0,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid configuration: conv2d.kernel is [9, 1]"),
        "{err}"
    );
    assert_eq!(ok.output_size([5, 7]).unwrap(), [3, 5]);
    assert_eq!(
        Conv2dSpec::square(4, 32, 8, 4, 0)
            .output_size([84, 84])
            .unwrap(),
        [20, 20]
    );
}

#[test]
fn wrong_lengths_are_errors() {
    let conv = Conv2d::new(Conv2dSpec::square(2, 3, 3, 1, 1), [4, 4], 0).unwrap();
    let params = vec![0.1; conv.num_params()];
    let mut ws = conv.workspace(2);
    let x = vec![0.5; 2 * conv.input_len()];
    let shape = |r: Result<()>| match r {
        Err(Error::ShapeMismatch { what, .. }) => what,
        other => panic!("{other:?}"),
    };
    let fwd = |p: &[f32], x: &[f32], batch, ws: &mut Conv2dWorkspace| {
        conv.forward(p, x, batch, ws).map(|_| ())
    };
    assert!(shape(fwd(&params, &x[1..], 2, &mut ws)).starts_with("conv2d input"));
    assert!(shape(fwd(&params[1..], &x, 2, &mut ws)).starts_with("conv2d parameters"));
    assert!(shape(fwd(&params, &[0.0; 96], 3, &mut ws)).starts_with("conv2d batch"));
    let bytes = vec![0u8; 5];
    assert!(conv.forward_u8(&params, &bytes, 2, &mut ws).is_err());
    // A workspace of another layer.
    let other = Conv2d::new(Conv2dSpec::square(2, 3, 3, 1, 0), [4, 4], 0).unwrap();
    assert!(matches!(
        conv.forward(&params, &x, 2, &mut other.workspace(2)),
        Err(Error::Config { .. })
    ));
    fwd(&params, &x, 2, &mut ws).unwrap();
    let dy = vec![1.0; 2 * conv.output_len()];
    let mut grads = vec![0.0; conv.num_params()];
    let mut dx = vec![0.0; x.len()];
    assert!(
        shape(conv.backward(&params, &mut ws, &dy[1..], None, None))
            .starts_with("conv2d output gradients")
    );
    assert!(
        shape(conv.backward(&params, &mut ws, &dy, Some(&mut grads[1..]), None))
            .starts_with("conv2d parameter gradients")
    );
    assert!(
        shape(conv.backward(&params, &mut ws, &dy, None, Some(&mut dx[1..])))
            .starts_with("conv2d input gradients")
    );
    conv.backward(&params, &mut ws, &dy, Some(&mut grads), Some(&mut dx))
        .unwrap();
}

#[test]
fn passes_allocate_nothing() {
    let mut g = rng(5);
    let conv = Conv2d::new(Conv2dSpec::square(3, 8, 3, 2, 1), [12, 10], 0)
        .unwrap()
        .with_activation(Some(Activation::Relu));
    let params = random(&mut g, conv.num_params());
    let x = random(&mut g, 4 * conv.input_len());
    let dy = random(&mut g, 4 * conv.output_len());
    let mut grads = vec![0.0; conv.num_params()];
    let mut dx = vec![0.0; x.len()];
    let mut ws = conv.workspace(4);
    // Warm-up: the product's packing scratch is per thread and grows once.
    conv.forward(&params, &x, 4, &mut ws).unwrap();
    conv.backward(&params, &mut ws, &dy, Some(&mut grads), Some(&mut dx))
        .unwrap();
    let ((), stats) = rl_testkit::measure(|| {
        for batch in [4, 1, 3] {
            conv.forward(&params, &x[..batch * conv.input_len()], batch, &mut ws)
                .unwrap();
            conv.backward(
                &params,
                &mut ws,
                &dy[..batch * conv.output_len()],
                Some(&mut grads),
                Some(&mut dx[..batch * conv.input_len()]),
            )
            .unwrap();
        }
    });
    assert_eq!(stats.allocations, 0, "{stats:?}");
}

#[test]
fn workspace_bytes_are_what_it_allocates() {
    let conv = Conv2d::new(Conv2dSpec::square(4, 32, 8, 4, 0), [84, 84], 0).unwrap();
    let (ws, stats) = rl_testkit::measure(|| conv.workspace(3));
    let planned = conv.workspace_bytes(3).unwrap();
    assert_eq!(ws.memory_bytes(), planned);
    assert!(stats.allocated_bytes >= planned && stats.allocated_bytes - planned < 256);
    assert_eq!(conv.workspace_bytes(usize::MAX), None);
    assert_eq!(conv.output_size(), [20, 20]);
    assert_eq!(conv.macs_per_image(), 400 * 256 * 32);
    assert_eq!(conv.weight(), 0..32 * 256);
    assert_eq!(conv.bias(), 32 * 256..32 * 257);
}

/// The forward kernels of every SIMD instruction set give the same bits (AVX-512 runs
/// two 16-channel panels as one tile; AVX2 one at a time), with an odd panel count (40
/// channels: a pair and a single panel) and edge tiles of positions.
#[test]
fn forward_kernels_agree_bit_for_bit_across_instruction_sets() {
    use rl_core::simd::Isa;
    let conv = Conv2d::new(Conv2dSpec::square(3, 40, 3, 2, 1), [11, 9], 0)
        .unwrap()
        .with_activation(Some(Activation::Relu));
    let g = conv.geometry();
    let batch = 5;
    let mut r = rng(11);
    let params = random(&mut r, conv.num_params());
    let x = random(&mut r, batch * conv.input_len());
    let mut panels = vec![f32::NAN; g.panels_len()];
    g.pack_weight(&params[conv.weight()], &mut panels);
    let outputs: Vec<Vec<u32>> = Isa::ALL
        .into_iter()
        .filter(|&isa| isa != Isa::Scalar && isa.is_supported())
        .map(|isa| {
            let mut staged = vec![0.0; batch * g.staged_len()];
            let mut output = vec![f32::NAN; batch * conv.output_len()];
            let bias = &params[conv.bias()];
            g.forward(
                isa,
                &x,
                &|v| v,
                &mut staged,
                &panels,
                bias,
                true,
                &mut output,
            );
            bits(&output)
        })
        .collect();
    for pair in outputs.windows(2) {
        assert_eq!(pair[0], pair[1]);
    }
}
