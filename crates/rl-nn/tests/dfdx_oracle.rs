//! dfdx as an independent oracle: its tape-based autodiff and its Adam against rl-nn's
//! hand-written backward passes and flat Adam, on the same parameters and inputs.
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
