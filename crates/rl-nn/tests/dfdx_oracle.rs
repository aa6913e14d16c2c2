//! dfdx as an independent oracle: its tape-based autodiff and its Adam against rl-nn's
//! hand-written backward passes (MLPs, the LSTM cell through a window with resets, and
//! convolutions: one layer and a small convolutional network)
//! and flat Adam, on the same parameters and inputs.
//!
//! dfdx is a dev-dependency only. It earns its place here because its gradients come
//! from a different mechanism (a recorded tape over generic tensor ops), so an error in
//! a hand-derived backward pass that a finite-difference test tolerates (a transposed
//! product on a square layer, a bias gradient off by a row) shows up as a mismatch.
#![allow(clippy::unwrap_used, reason = "tests")]

use dfdx::nn::builders::{Linear, ReLU, Tanh};
use dfdx::nn::{DeviceBuildExt, ModuleMut, ZeroGrads};
use dfdx::optim::{Adam as DfdxAdam, AdamConfig as DfdxAdamConfig, Optimizer};
use dfdx::prelude::{Backward, Const, Cpu, Gradients, SumTo, Tensor, TensorFromVec, Trace};
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_nn::{Activation, Adam, AdamConfig, Init, Mlp, MlpSpec, Module, Weights};

const ROWS: usize = 6;
type Input = Tensor<(Const<ROWS>, Const<5>), f32, Cpu>;

/// The rl-nn network, its inputs and the output weighting of the loss `sum(out * w)`.
fn setup(activation: Activation, seed: u64) -> (Mlp, Vec<f32>, Vec<f32>) {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let init = Init::Orthogonal {
        hidden_gain: 1.4,
        output_gain: 0.7,
    };
    let mut net = Mlp::new(MlpSpec::new(5, &[16, 12], 3, activation), init, &mut rng).unwrap();
    // Non-zero biases, so that bias gradients and their use in the forward pass count.
    for p in net.params_mut() {
        *p += rng.random_range(-0.1..0.1);
    }
    let input = (0..ROWS * 5).map(|_| rng.random_range(-1.0..1.0)).collect();
    let weights = (0..ROWS * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
    (net, input, weights)
}

/// Copies rl-nn's flat parameters into a dfdx model's tensors, layer by layer.
macro_rules! load {
    ($model:expr, $net:expr) => {{
        let params = $net.params();
        let t = $net.tensors();
        $model.0.weight.copy_from(&params[t[0].range()]);
        $model.0.bias.copy_from(&params[t[1].range()]);
        $model.2.weight.copy_from(&params[t[2].range()]);
        $model.2.bias.copy_from(&params[t[3].range()]);
        $model.4.weight.copy_from(&params[t[4].range()]);
        $model.4.bias.copy_from(&params[t[5].range()]);
    }};
}

/// dfdx's gradients, flattened in rl-nn's order.
macro_rules! flat_grads {
    ($model:expr, $grads:expr) => {{
        let g: &Gradients<f32, Cpu> = &$grads;
        [
            g.get(&$model.0.weight).as_vec(),
            g.get(&$model.0.bias).as_vec(),
            g.get(&$model.2.weight).as_vec(),
            g.get(&$model.2.bias).as_vec(),
            g.get(&$model.4.weight).as_vec(),
            g.get(&$model.4.bias).as_vec(),
        ]
        .concat()
    }};
}

/// Compares rl-nn's gradients of `sum(out * w)` with dfdx's, within 1e-4 relative.
macro_rules! check_activation {
    ($act:ty, $activation:expr, $seed:expr) => {{
        let (net, input, weights) = setup($activation, $seed);
        let dev = Cpu::default();
        let mut model =
            dev.build_module::<(Linear<5, 16>, $act, Linear<16, 12>, $act, Linear<12, 3>), f32>();
        load!(model, net);
        let x: Input = dev.tensor_from_vec(input.clone(), (Const, Const));
        let w = dev.tensor_from_vec(weights.clone(), (Const::<ROWS>, Const::<3>));
        let grads = model.alloc_grads();
        let out = model.forward_mut(x.trace(grads));
        let theirs_out = out.as_vec();
        let loss = (out * w).sum::<(), _>();
        let theirs = flat_grads!(model, loss.backward());

        let mut ws = net.workspace(ROWS);
        let ours_out = net.forward(&input, ROWS, &mut ws).unwrap().to_vec();
        let mut ours = vec![0.0; net.num_params()];
        net.backward(&mut ws, &weights, Some(&mut ours), None)
            .unwrap();
        for (a, b) in ours_out.iter().zip(&theirs_out) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "forward {a} vs dfdx {b}"
            );
        }
        assert_eq!(ours.len(), theirs.len());
        let scale = theirs.iter().fold(0.0f32, |m, g| m.max(g.abs()));
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs().max(1e-2 * scale),
                "{} parameter {i}: rl-nn {a} vs dfdx {b}",
                $activation
            );
        }
        (net, model, ours)
    }};
}

#[test]
fn relu_mlp_gradients_match_dfdx() {
    for seed in 0..3 {
        check_activation!(ReLU, Activation::Relu, seed);
    }
}

#[test]
fn tanh_mlp_gradients_match_dfdx() {
    for seed in 0..3 {
        check_activation!(Tanh, Activation::Tanh, seed);
    }
}

#[test]
fn adam_steps_match_dfdx_bit_for_bit() {
    let (mut net, mut model, grads) = check_activation!(ReLU, Activation::Relu, 7);
    let config = AdamConfig {
        lr: 1e-2,
        betas: [0.9, 0.99],
        eps: 1e-6,
        weight_decay: None,
    };
    let mut ours = Adam::new(net.num_params(), config).unwrap();
    let mut theirs = DfdxAdam::new(
        &model,
        DfdxAdamConfig {
            lr: config.lr,
            betas: config.betas,
            eps: config.eps,
            weight_decay: None,
        },
    );
    for step in 0..4 {
        // The same gradients for both: dfdx's own, scaled per step.
        let dev = Cpu::default();
        let x: Input = dev.tensor_from_vec(vec![0.1 * step as f32; ROWS * 5], (Const, Const));
        let g = model.alloc_grads();
        let loss = model.forward_mut(x.trace(g)).sum::<(), _>();
        let g = loss.backward();
        let flat = flat_grads!(model, g);
        theirs.update(&mut model, &g).unwrap();
        ours.update(net.params_mut(), &flat).unwrap();
        let mut reference = Mlp::zeros(net.spec().clone()).unwrap();
        let t = reference.tensors();
        let values = [
            model.0.weight.as_vec(),
            model.0.bias.as_vec(),
            model.2.weight.as_vec(),
            model.2.bias.as_vec(),
            model.4.weight.as_vec(),
            model.4.bias.as_vec(),
        ]
        .concat();
        reference.params_mut().copy_from_slice(&values);
        assert_eq!(t.len(), 6);
        let bits = |p: &[f32]| p.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(net.params()), bits(reference.params()), "step {step}");
    }
    assert!(grads.iter().any(|&g| g != 0.0));
}

/// The LSTM cell against dfdx's autodiff. dfdx 0.13 has no recurrent module, so the
/// cell is written out of dfdx tensor operations from PyTorch's equations (one weight
/// and bias tensor per gate, resets as multiplication by a 0/1 mask), unrolled over the
/// window on dfdx's tape; the gradients of `sum(out * w)` for every parameter, input
/// and initial state are compared with `backward_sequence`'s.
mod lstm {
    use dfdx::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;
    use rl_nn::{Sequence, SequenceGrads, Weights};

    const R: usize = 3;
    const I: usize = 4;
    const H: usize = 5;
    const T: usize = 6;
    type Tape = OwnedTape<f32, Cpu>;
    type Rows<const C: usize, Tp = NoneTape> = Tensor<(Const<R>, Const<C>), f32, Cpu, Tp>;
    type Gate<const C: usize> = Tensor<(Const<H>, Const<C>), f32, Cpu>;
    type Bias = Tensor<(Const<H>,), f32, Cpu>;

    fn random(rng: &mut Xoshiro256PlusPlus, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-scale..scale)).collect()
    }

    fn check(seed: u64) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut cell = rl_nn::Lstm::new(I, H, &mut rng).unwrap();
        for p in cell.params_mut() {
            *p *= 2.0;
        }
        let x = random(&mut rng, T * R * I, 1.0);
        let h0 = random(&mut rng, R * H, 0.8);
        let c0 = random(&mut rng, R * H, 1.5);
        let w = random(&mut rng, T * R * H, 1.0);
        let mut resets = vec![false; T * R];
        resets[1] = true; // row 1 from zero at step 0: no gradient to its initial state
        resets[2 * R] = true;
        resets[4 * R + 2] = true;

        // rl-nn.
        let mut ws = cell.sequence_workspace(T, R);
        let sequence = Sequence {
            input: &x,
            steps: T,
            rows: R,
            resets: Some(&resets),
            h0: &h0,
            c0: &c0,
        };
        let ours_out = cell.forward_sequence(sequence, &mut ws).unwrap().to_vec();
        let mut dp = vec![0.0; cell.num_params()];
        let mut dx = vec![0.0; x.len()];
        let (mut dh0, mut dc0) = (vec![0.0; R * H], vec![0.0; R * H]);
        let grads = SequenceGrads {
            params: Some(&mut dp),
            input: Some(&mut dx),
            h0: Some(&mut dh0),
            c0: Some(&mut dc0),
        };
        cell.backward_sequence(&mut ws, &w, grads).unwrap();

        // dfdx.
        let dev = Cpu::default();
        let p = cell.params();
        let w_ih: Vec<Gate<I>> = (0..4)
            .map(|k| dev.tensor_from_vec(p[k * H * I..(k + 1) * H * I].to_vec(), (Const, Const)))
            .collect();
        let hh = 4 * H * I;
        let w_hh: Vec<Gate<H>> = (0..4)
            .map(|k| {
                dev.tensor_from_vec(
                    p[hh + k * H * H..hh + (k + 1) * H * H].to_vec(),
                    (Const, Const),
                )
            })
            .collect();
        let bias = |start: usize| -> Vec<Bias> {
            (0..4)
                .map(|k| {
                    dev.tensor_from_vec(p[start + k * H..start + (k + 1) * H].to_vec(), (Const,))
                })
                .collect()
        };
        let (b_ih, b_hh) = (bias(4 * H * (I + H)), bias(4 * H * (I + H + 1)));
        let xs: Vec<Rows<I>> = (0..T)
            .map(|t| dev.tensor_from_vec(x[t * R * I..(t + 1) * R * I].to_vec(), (Const, Const)))
            .collect();
        let masks: Vec<Rows<H>> = (0..T)
            .map(|t| {
                let m = (0..R * H)
                    .map(|e| if resets[t * R + e / H] { 0.0 } else { 1.0 })
                    .collect();
                dev.tensor_from_vec(m, (Const, Const))
            })
            .collect();
        let ws_t: Vec<Rows<H>> = (0..T)
            .map(|t| dev.tensor_from_vec(w[t * R * H..(t + 1) * R * H].to_vec(), (Const, Const)))
            .collect();
        let h0t: Rows<H> = dev.tensor_from_vec(h0.clone(), (Const, Const));
        let c0t: Rows<H> = dev.tensor_from_vec(c0.clone(), (Const, Const));

        let mut h: Rows<H, Tape> = h0t.retaped();
        let mut c: Rows<H, Tape> = c0t.retaped();
        let mut loss: Tensor<(), f32, Cpu, Tape> = dev.zeros::<()>().retaped();
        let mut theirs_out = Vec::new();
        for t in 0..T {
            let hm = h * masks[t].clone();
            let cm = c * masks[t].clone();
            let pre = |k: usize, hm: Rows<H, Tape>| -> Rows<H, Tape> {
                xs[t].retaped::<Tape>().matmul(w_ih[k].clone().permute())
                    + b_ih[k].clone().broadcast()
                    + hm.matmul(w_hh[k].clone().permute())
                    + b_hh[k].clone().broadcast()
            };
            let i = pre(0, hm.retaped()).sigmoid();
            let f = pre(1, hm.retaped()).sigmoid();
            let g = pre(2, hm.retaped()).tanh();
            let o = pre(3, hm).sigmoid(); // carries the history's tape
            let c_new = f * cm + i * g;
            let (c_plain, c_tape) = c_new.split_tape();
            let h_new = o * c_plain.retaped::<Tape>().tanh();
            let (h_plain, h_tape) = h_new.split_tape();
            theirs_out.extend(h_plain.as_vec());
            loss = loss + (h_plain.retaped::<Tape>() * ws_t[t].clone()).sum::<(), _>();
            h = h_plain.put_tape(h_tape.merge(c_tape));
            c = c_plain.retaped();
        }
        let (loss, loss_tape) = loss.split_tape();
        let (_, h_tape) = h.split_tape();
        let g = loss.put_tape(loss_tape.merge(h_tape)).backward();
        let mut theirs_params: Vec<f32> = w_ih.iter().flat_map(|t| g.get(t).as_vec()).collect();
        theirs_params.extend(w_hh.iter().flat_map(|t| g.get(t).as_vec()));
        theirs_params.extend(b_ih.iter().chain(&b_hh).flat_map(|t| g.get(t).as_vec()));
        let theirs_x: Vec<f32> = xs.iter().flat_map(|x| g.get(x).as_vec()).collect();
        let (theirs_h0, theirs_c0) = (g.get(&h0t).as_vec(), g.get(&c0t).as_vec());

        for (a, b) in ours_out.iter().zip(&theirs_out) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                "output {a} vs dfdx {b}"
            );
        }
        for (what, ours, theirs) in [
            ("parameter", &dp, &theirs_params),
            ("input", &dx, &theirs_x),
            ("initial h", &dh0, &theirs_h0),
            ("initial c", &dc0, &theirs_c0),
        ] {
            assert_eq!(ours.len(), theirs.len(), "{what}");
            let scale = theirs.iter().fold(0.0f32, |m, g| m.max(g.abs()));
            for (e, (a, b)) in ours.iter().zip(theirs).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-4 * b.abs().max(1e-2 * scale),
                    "{what} {e}: rl-nn {a} vs dfdx {b}"
                );
            }
        }
        // Row 1 was reset before step 0: its initial state has no influence.
        assert!(dh0[H..2 * H].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn lstm_gradients_match_dfdx() {
        for seed in 0..3 {
            check(seed);
        }
    }
}

/// Convolutions against dfdx's tape. dfdx 0.13's own `conv2d` (`TryConv2D`) cannot be
/// used: its module is compiled only with dfdx's `nightly` feature
/// (`#[cfg(feature = "nightly")] mod conv2d;` in `src/tensor_ops/mod.rs`), which turns on
/// `#![feature(generic_const_exprs)]` and so does not build on a stable toolchain. The
/// convolution is therefore written out of dfdx operations that do build: the patches as
/// a product with a constant 0/1 gather matrix built by direct loops (zero rows for the
/// padding), then the patches times the weight's transpose plus the bias, permuted to
/// NCHW. The gradients come from dfdx's tape through those products, a mechanism
/// independent of rl-nn's im2col, col2im and backward products; any geometry
/// (non-square kernels, unequal strides and paddings) can be checked.
mod conv {
    use dfdx::prelude::*;
    use rand::{Rng, SeedableRng};
    use rand_xoshiro::Xoshiro256PlusPlus;
    use rl_nn::{
        Activation, CnnOutput, CnnSpec, Conv2d, Conv2dSpec, ConvLayer, ConvNet, Init, InputScale,
        Module, Weights,
    };

    type Tape = OwnedTape<f32, Cpu>;
    type Matrix<T = NoneTape> = Tensor<(usize, usize), f32, Cpu, T>;

    fn random(rng: &mut Xoshiro256PlusPlus, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    /// Within 1e-4 relative (of the larger of the value and 1% of the largest).
    fn assert_close(what: &str, ours: &[f32], theirs: &[f32]) {
        assert_eq!(ours.len(), theirs.len(), "{what}");
        let scale = theirs.iter().fold(0.0f32, |m, g| m.max(g.abs()));
        for (e, (a, b)) in ours.iter().zip(theirs).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * b.abs().max(1e-2 * scale).max(1e-3),
                "{what} {e}: rl-nn {a} vs dfdx {b}"
            );
        }
    }

    /// The gather matrix of `conv` as `in_len x (positions * fan_in)` (transposed):
    /// column `(p, k)` picks the input element patch `p` holds at `k`, or none.
    fn gather(conv: &Conv2d) -> Vec<f32> {
        let s = conv.spec();
        let [h, w] = conv.input_size();
        let [oh, ow] = conv.output_size();
        let [kh, kw] = s.kernel;
        let fan_in = s.fan_in();
        let cols = oh * ow * fan_in;
        let mut g = vec![0.0; conv.input_len() * cols];
        for oy in 0..oh {
            for ox in 0..ow {
                for c in 0..s.in_channels {
                    for ky in 0..kh {
                        for kx in 0..kw {
                            let iy = (oy * s.stride[0] + ky) as isize - s.padding[0] as isize;
                            let ix = (ox * s.stride[1] + kx) as isize - s.padding[1] as isize;
                            if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                continue;
                            }
                            let input = (c * h + iy as usize) * w + ix as usize;
                            let col = (oy * ow + ox) * fan_in + (c * kh + ky) * kw + kx;
                            g[input * cols + col] = 1.0;
                        }
                    }
                }
            }
        }
        g
    }

    /// One convolution on dfdx's tape: `x` is `batch x in_len`, the result
    /// `batch x out_len` (NCHW per row), before any activation.
    fn dfdx_conv(
        dev: &Cpu,
        conv: &Conv2d,
        x: Matrix<Tape>,
        weight: &Matrix,
        bias: &Tensor<(usize,), f32, Cpu>,
        batch: usize,
    ) -> Matrix<Tape> {
        let s = conv.spec();
        let positions = conv.output_size()[0] * conv.output_size()[1];
        let gt: Matrix =
            dev.tensor_from_vec(gather(conv), (conv.input_len(), positions * s.fan_in()));
        let cols = x.matmul(gt).reshape_like(&(batch * positions, s.fan_in()));
        let y = cols.matmul(weight.clone().permute::<_, Axes2<1, 0>>());
        let y = y + bias
            .clone()
            .broadcast_like::<_, Axis<0>>(&(batch * positions, s.out_channels));
        y.reshape_like(&(batch, positions, s.out_channels))
            .permute::<_, Axes3<0, 2, 1>>()
            .reshape_like(&(batch, conv.output_len()))
    }

    /// One layer `y = conv(x, W) + b` and `sum(y * w)`.
    fn check_layer(spec: Conv2dSpec, hw: [usize; 2], batch: usize, seed: u64) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let conv = Conv2d::new(spec, hw, 0).unwrap();
        let params = random(&mut rng, conv.num_params());
        let x = random(&mut rng, batch * conv.input_len());
        let w = random(&mut rng, batch * conv.output_len());
        let mut ws = conv.workspace(batch);
        let ours_y = conv.forward(&params, &x, batch, &mut ws).unwrap().to_vec();
        let mut dp = vec![0.0; conv.num_params()];
        let mut dx = vec![0.0; x.len()];
        conv.backward(&params, &mut ws, &w, Some(&mut dp), Some(&mut dx))
            .unwrap();

        let dev = Cpu::default();
        let xt: Matrix = dev.tensor_from_vec(x.clone(), (batch, conv.input_len()));
        let wt: Matrix = dev.tensor_from_vec(
            params[conv.weight()].to_vec(),
            (spec.out_channels, spec.fan_in()),
        );
        let bt = dev.tensor_from_vec(params[conv.bias()].to_vec(), (spec.out_channels,));
        let y = dfdx_conv(&dev, &conv, xt.leaky_trace(), &wt, &bt, batch);
        let theirs_y = y.as_vec();
        let loss = (y * dev.tensor_from_vec(w.clone(), (batch, conv.output_len()))).sum::<(), _>();
        let g = loss.backward();
        let theirs_p = [g.get(&wt).as_vec(), g.get(&bt).as_vec()].concat();

        assert_close("output", &ours_y, &theirs_y);
        assert_close("parameter gradient", &dp, &theirs_p);
        assert_close("input gradient", &dx, &g.get(&xt).as_vec());
    }

    #[test]
    fn conv2d_layer_matches_dfdx() {
        check_layer(Conv2dSpec::square(3, 4, 3, 1, 0), [6, 5], 2, 0);
        check_layer(Conv2dSpec::square(3, 4, 3, 2, 1), [9, 7], 3, 1);
        check_layer(Conv2dSpec::square(2, 5, 4, 3, 2), [11, 8], 2, 2);
        check_layer(Conv2dSpec::square(4, 2, 1, 1, 0), [3, 4], 1, 3);
        let odd = Conv2dSpec {
            in_channels: 2,
            out_channels: 3,
            kernel: [3, 2],
            stride: [2, 1],
            padding: [1, 2],
        };
        check_layer(odd, [7, 5], 3, 4);
        // Nature's second layer on a small batch.
        check_layer(Conv2dSpec::square(32, 64, 4, 2, 0), [20, 20], 2, 5);
    }

    #[test]
    fn conv_net_matches_dfdx() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
        let (batch, cin, h, wd) = (3, 2, 11, 9);
        let spec = CnnSpec {
            input: [cin, h, wd],
            input_scale: InputScale::Div255,
            convs: vec![
                ConvLayer::square(4, 3, 2, 1),
                ConvLayer {
                    out_channels: 5,
                    kernel: [2, 3],
                    stride: [1, 1],
                    padding: [0, 1],
                },
            ],
            linear: vec![6],
            activation: Activation::Relu,
            output: CnnOutput::Activated,
        };
        let mut net = ConvNet::new(spec, Init::Uniform, &mut rng).unwrap();
        // Biases away from 0, so that ReLU's kink and the bias gradients both count.
        for p in net.params_mut() {
            *p += rng.random_range(-0.1..0.1);
        }
        let bytes: Vec<u8> = (0..batch * net.input_dim()).map(|_| rng.random()).collect();
        let w = random(&mut rng, batch * 6);
        let mut ws = net.workspace(batch);
        let ours_out = net.forward_u8(&bytes, batch, &mut ws).unwrap().to_vec();
        let mut dp = vec![0.0; net.num_params()];
        let mut dx = vec![0.0; bytes.len()];
        net.backward(&mut ws, &w, Some(&mut dp), Some(&mut dx))
            .unwrap();

        let dev = Cpu::default();
        let p = net.params();
        let t = net.tensors();
        assert_eq!(t[4].name, "5.weight");
        let (c0, c1) = (net.convs()[0], net.convs()[1]);
        let flat = c1.output_len();
        let x: Vec<f32> = bytes.iter().map(|&b| f32::from(b) / 255.0).collect();
        let xt: Matrix = dev.tensor_from_vec(x, (batch, net.input_dim()));
        let matrix = |i: usize, rows: usize| -> Matrix {
            let range = t[i].range();
            let cols = range.len() / rows;
            dev.tensor_from_vec(p[range].to_vec(), (rows, cols))
        };
        let vector = |i: usize| dev.tensor_from_vec(p[t[i].range()].to_vec(), (t[i].len(),));
        let (w0, b0, w1, b1, w2, b2) = (
            matrix(0, 4),
            vector(1),
            matrix(2, 5),
            vector(3),
            matrix(4, 6),
            vector(5),
        );
        let y = dfdx_conv(&dev, &c0, xt.leaky_trace(), &w0, &b0, batch).relu();
        let y = dfdx_conv(&dev, &c1, y, &w1, &b1, batch).relu();
        let y = y.matmul(w2.clone().permute::<_, Axes2<1, 0>>());
        let y = (y + b2.clone().broadcast_like::<_, Axis<0>>(&(batch, 6usize))).relu();
        let theirs_out = y.as_vec();
        let loss = (y * dev.tensor_from_vec(w.clone(), (batch, 6usize))).sum::<(), _>();
        let g = loss.backward();
        let theirs_p: Vec<f32> = g
            .get(&w0)
            .as_vec()
            .into_iter()
            .chain(g.get(&b0).as_vec())
            .chain(g.get(&w1).as_vec())
            .chain(g.get(&b1).as_vec())
            .chain(g.get(&w2).as_vec())
            .chain(g.get(&b2).as_vec())
            .collect();
        // dfdx's input is x / 255: its gradient is 255 times ours (ours is per byte).
        let theirs_x: Vec<f32> = g.get(&xt).as_vec().iter().map(|v| v / 255.0).collect();
        assert_eq!(flat, 5 * 5 * 5);

        assert_close("output", &ours_out, &theirs_out);
        assert_close("parameter gradient", &dp, &theirs_p);
        assert_close("input gradient", &dx, &theirs_x);
        assert!(dp.iter().any(|&v| v != 0.0));
    }
}
