//! dfdx as an independent oracle: its tape-based autodiff and its Adam against rl-nn's
//! hand-written backward passes (MLPs, and the LSTM cell through a window with resets)
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
