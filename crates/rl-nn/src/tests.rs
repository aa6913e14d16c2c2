//! Tests of the optimiser and the whole-vector operations.
#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;

use crate::{Activation, Adam, AdamConfig, Error, clip_grad_norm, polyak};

#[test]
fn adam_first_step_moves_each_parameter_by_lr() {
    // With bias correction, Adam's first step is lr * g / (|g| + eps'), about lr * sign(g).
    let mut params = vec![1.0f32, -1.0, 0.5];
    let grads = [0.3f32, -2.0, 0.0];
    let mut adam = Adam::new(
        3,
        AdamConfig {
            lr: 0.1,
            eps: 1e-8,
            ..AdamConfig::default()
        },
    )
    .unwrap();
    adam.update(&mut params, &grads).unwrap();
    assert!((params[0] - 0.9).abs() < 1e-5, "{params:?}");
    assert!((params[1] - -0.9).abs() < 1e-5, "{params:?}");
    assert_eq!(params[2], 0.5, "a zero gradient moves nothing");
    assert_eq!(adam.steps(), 1);
}

#[test]
fn adam_matches_a_hand_computed_second_step_with_weight_decay() {
    let config = AdamConfig {
        lr: 0.01,
        betas: [0.8, 0.9],
        eps: 1e-3,
        weight_decay: Some(0.5),
    };
    let mut p = vec![2.0f32];
    let mut adam = Adam::new(1, config).unwrap();
    let (mut m, mut v, mut want) = (0.0f64, 0.0f64, 2.0f64);
    for (t, g) in [(1, 0.4f64), (2, -0.1)] {
        adam.update(&mut p, &[g as f32]).unwrap();
        let g = g + 0.5 * want;
        m = 0.8 * m + 0.2 * g;
        v = 0.9 * v + 0.1 * g * g;
        let (m_hat, v_hat) = (m / (1.0 - 0.8f64.powi(t)), v / (1.0 - 0.9f64.powi(t)));
        want -= 0.01 * m_hat / (v_hat.sqrt() + 1e-3);
    }
    assert!((f64::from(p[0]) - want).abs() < 1e-6, "{} vs {want}", p[0]);
}

#[test]
fn adam_state_resumes_bit_for_bit_and_refusals_change_nothing() {
    let mut params = vec![0.3f32, -0.7, 1.1, 0.0];
    let mut adam = Adam::new(4, AdamConfig::default()).unwrap();
    let grads = [
        [0.1f32, -0.2, 0.3, 0.05],
        [-0.4, 0.1, 0.0, 0.2],
        [0.2, 0.2, -0.1, 0.3],
    ];
    adam.update(&mut params, &grads[0]).unwrap();
    let (saved_params, saved) = (params.clone(), adam.state().into_owned());
    adam.update(&mut params, &grads[1]).unwrap();
    adam.update(&mut params, &grads[2]).unwrap();

    let mut resumed_params = saved_params;
    let mut resumed = Adam::new(
        4,
        AdamConfig {
            lr: 1.0,
            ..AdamConfig::default()
        },
    )
    .unwrap();
    resumed.load_state(&saved).unwrap();
    resumed.update(&mut resumed_params, &grads[1]).unwrap();
    resumed.update(&mut resumed_params, &grads[2]).unwrap();
    assert_eq!(resumed_params, params);
    assert_eq!(resumed.state(), adam.state());

    let before = resumed.state().into_owned();
    let mut short = saved.clone();
    short.second.to_mut().pop();
    assert!(matches!(
        resumed.load_state(&short),
        Err(Error::StateMismatch { .. })
    ));
    let mut bad = saved;
    bad.config.betas[0] = 1.0;
    assert!(matches!(
        resumed.load_state(&bad),
        Err(Error::Config { .. })
    ));
    assert_eq!(resumed.state(), before, "a refused state changes nothing");
    assert!(resumed.update(&mut [0.0; 3], &[0.0; 3]).is_err());
    assert_eq!(resumed.state(), before, "a refused update changes nothing");
}

#[test]
fn adam_config_and_learning_rate_are_checked() {
    for bad in [
        AdamConfig {
            lr: 0.0,
            ..AdamConfig::default()
        },
        AdamConfig {
            lr: f64::NAN,
            ..AdamConfig::default()
        },
        AdamConfig {
            betas: [0.9, 1.0],
            ..AdamConfig::default()
        },
        AdamConfig {
            eps: 0.0,
            ..AdamConfig::default()
        },
        AdamConfig {
            weight_decay: Some(-1.0),
            ..AdamConfig::default()
        },
    ] {
        assert!(Adam::new(2, bad).is_err(), "{bad:?}");
    }
    let mut adam = Adam::new(2, AdamConfig::default()).unwrap();
    adam.set_lr(0.0).unwrap();
    assert!(adam.set_lr(-1e-3).is_err());
    assert_eq!(adam.lr(), 0.0);
}

proptest! {
    /// After clipping, the global norm is at most the bound and the direction is kept;
    /// below the bound nothing changes; the norm returned is the norm before.
    #[test]
    fn clipping_bounds_the_global_norm(
        a in proptest::collection::vec(-10.0f32..10.0, 0..20),
        b in proptest::collection::vec(-10.0f32..10.0, 1..20),
        max in 0.01f32..20.0,
    ) {
        let (mut a2, mut b2) = (a.clone(), b.clone());
        let norm = clip_grad_norm(&mut [&mut a2, &mut b2], max).unwrap();
        let before = a.iter().chain(&b).map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        prop_assert!((f64::from(norm) - before).abs() <= 1e-5 * before.max(1.0));
        let after = a2.iter().chain(&b2).map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        prop_assert!(after <= f64::from(max) * (1.0 + 1e-5));
        let scale = if before > f64::from(max) { f64::from(max) / before } else { 1.0 };
        for (x, y) in a.iter().chain(&b).zip(a2.iter().chain(&b2)) {
            prop_assert!((f64::from(*x) * scale - f64::from(*y)).abs() <= 1e-5 * f64::from(x.abs()).max(1e-3));
        }
    }
}

#[test]
fn clipping_reports_non_finite_norms_without_touching_gradients() {
    let mut g = vec![1.0, f32::NAN, 3.0];
    let norm = clip_grad_norm(&mut [&mut g], 0.5).unwrap();
    assert!(norm.is_nan());
    assert_eq!(g[0], 1.0);
    assert_eq!(g[2], 3.0);
    assert!(clip_grad_norm(&mut [&mut g], 0.0).is_err());
    assert!(clip_grad_norm(&mut [&mut g], f32::NAN).is_err());
    let mut fine = vec![3.0, 4.0];
    assert_eq!(
        clip_grad_norm(&mut [&mut fine], f32::INFINITY).unwrap(),
        5.0
    );
    assert_eq!(fine, [3.0, 4.0], "an infinite bound only measures");
}

#[test]
fn polyak_moves_a_fraction_of_the_way_and_checks_its_input() {
    let online = [1.0f32, 2.0, -4.0];
    let mut target = vec![0.0f32, 2.0, 4.0];
    polyak(&mut target, &online, 0.25).unwrap();
    assert_eq!(target, [0.25, 2.0, 2.0]);
    polyak(&mut target, &online, 1.0).unwrap();
    assert_eq!(target, online);
    let before = target.clone();
    assert!(polyak(&mut target, &online[..2], 0.5).is_err());
    assert!(polyak(&mut target, &online, 1.5).is_err());
    assert!(polyak(&mut target, &online, f32::NAN).is_err());
    assert_eq!(target, before);
}

#[test]
fn activations_parse_and_name_themselves() {
    for a in [Activation::Relu, Activation::Tanh] {
        assert_eq!(a.name().parse::<Activation>().unwrap(), a);
    }
    assert!("sigmoid".parse::<Activation>().is_err());
    let mut v = [-2.0f32, 0.0, 0.5, 30.0, -30.0];
    Activation::Tanh.apply(&mut v);
    for (got, x) in v.iter().zip([-2.0f32, 0.0, 0.5, 30.0, -30.0]) {
        assert!(
            (got - x.tanh()).abs() <= 2.0 * f32::EPSILON,
            "tanh({x}) = {got}"
        );
    }
}

/// A network's workspace keeps its packed weights between passes: after every way the
/// parameters can change (`params_mut`, the output-layer scaling, Adam, a polyak step, a
/// clone changed on its own), the next pass computes with the new values, bit for bit as
/// a network built with them and a fresh workspace does; passes of two networks through
/// one workspace each see their own weights.
#[test]
fn passes_after_the_parameters_change_use_the_new_values() {
    use rand::SeedableRng;

    use crate::{CnnSpec, ConvNet, Init, Lstm, Mlp, MlpSpec, Module, Network, Weights};

    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(4);
    let mlp = Mlp::new(
        MlpSpec::new(12, &[40, 40], 6, Activation::Relu),
        Init::Uniform,
        &mut rng,
    )
    .unwrap();
    let cnn = ConvNet::new(CnnSpec::small_cnn([2, 10, 10], 48), Init::Uniform, &mut rng).unwrap();
    for net in [Network::Mlp(mlp), Network::Cnn(cnn)] {
        let rows = 5;
        let input: Vec<f32> = (0..rows * net.input_dim())
            .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
            .collect();
        // The output of `net` on `input` through a workspace that never saw it.
        let fresh = |net: &Network| {
            let mut ws = net.workspace(rows);
            net.forward(&input, rows, &mut ws).unwrap().to_vec()
        };
        let mut net = net;
        let mut ws = net.workspace(rows);
        let check = |net: &Network, ws: &mut <Network as Module>::Workspace, what: &str| {
            let got = net.forward(&input, rows, ws).unwrap().to_vec();
            assert_eq!(got, fresh(net), "{what}");
        };
        check(&net, &mut ws, "first pass");
        check(&net, &mut ws, "second pass, same weights");
        net.params_mut().iter_mut().for_each(|p| *p *= -0.75);
        check(&net, &mut ws, "after params_mut");
        match &mut net {
            Network::Mlp(n) => n.scale_output_layer(3.0),
            Network::Cnn(n) => n.scale_output_layer(3.0),
        }
        check(&net, &mut ws, "after scale_output_layer");
        let grads = vec![0.01; net.num_params()];
        let mut adam = Adam::new(net.num_params(), AdamConfig::default()).unwrap();
        adam.update(net.params_mut(), &grads).unwrap();
        check(&net, &mut ws, "after an Adam step");
        let mut other = net.clone();
        check(&other, &mut ws, "a clone, unchanged");
        polyak(other.params_mut(), &vec![0.5; net.num_params()], 0.5).unwrap();
        check(&other, &mut ws, "the clone after a polyak step");
        check(&net, &mut ws, "the original again");
    }

    // The recurrent cell packs W_hh^T for the steps of a sequence and W_hh for the
    // backward pass: a changed cell gives what a new one with its weights gives.
    let mut lstm = Lstm::new(6, 20, &mut rng).unwrap();
    let (steps, rows) = (4, 3);
    let input: Vec<f32> = (0..steps * rows * 6)
        .map(|i| (i % 13) as f32 / 6.0 - 1.0)
        .collect();
    let mut ws = lstm.sequence_workspace(steps, rows);
    let run = |lstm: &Lstm, ws: &mut crate::LstmWorkspace| {
        let zeros = vec![0.0; rows * 20];
        let sequence = crate::Sequence {
            input: &input,
            steps,
            rows,
            resets: None,
            h0: &zeros,
            c0: &zeros,
        };
        let out = lstm.forward_sequence(sequence, ws).unwrap().to_vec();
        let mut grads = vec![0.0; lstm.num_params()];
        let mut dx = vec![0.0; input.len()];
        lstm.backward_sequence(
            ws,
            &vec![1.0; out.len()],
            crate::SequenceGrads {
                params: Some(&mut grads),
                input: Some(&mut dx),
                h0: None,
                c0: None,
            },
        )
        .unwrap();
        (out, grads, dx)
    };
    let first = run(&lstm, &mut ws);
    assert_eq!(first, run(&lstm, &mut ws), "the same cell again");
    lstm.params_mut().iter_mut().for_each(|p| *p *= 1.5);
    let changed = run(&lstm, &mut ws);
    assert_ne!(changed, first);
    assert_eq!(
        changed,
        run(&lstm, &mut lstm.sequence_workspace(steps, rows))
    );
}
