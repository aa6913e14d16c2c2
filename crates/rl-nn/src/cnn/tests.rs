#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use rand::Rng;

use super::*;
use crate::conv::tests::{activate, bits, random, reference_conv, rng};
use crate::{Adam, AdamConfig, Usage, load_weights, save_weights};

/// The network in f64 by direct loops; returns the outputs and every pre-activation.
fn reference(net: &ConvNet, params: &[f64], x: &[f64], rows: usize) -> (Vec<f64>, Vec<f64>) {
    let mut pre = Vec::new();
    let mut act = x.to_vec();
    if net.spec().input_scale == InputScale::Div255 {
        act.iter_mut().for_each(|v| *v /= 255.0);
    }
    for conv in net.convs() {
        let z = reference_conv(
            conv.spec(),
            conv.input_size(),
            &params[conv.weight()],
            &params[conv.bias()],
            &act,
            rows,
        );
        act = z.iter().map(|&z| activate(conv.activation(), z)).collect();
        pre.extend(z);
    }
    let last = net.linears().len().wrapping_sub(1);
    for (j, layer) in net.linears().iter().enumerate() {
        let (w, b) = (&params[layer.weight()], &params[layer.bias()]);
        let (n_in, n_out) = (layer.inputs(), layer.outputs());
        let activation = (j < last || net.spec().output == CnnOutput::Activated)
            .then_some(net.spec().activation);
        let mut y = vec![0.0; rows * n_out];
        for r in 0..rows {
            for o in 0..n_out {
                let z = b[o]
                    + (0..n_in)
                        .map(|i| w[o * n_in + i] * act[r * n_in + i])
                        .sum::<f64>();
                pre.push(z);
                y[r * n_out + o] = activate(activation, z);
            }
        }
        act = y;
    }
    (act, pre)
}

fn to_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// Forward against the f64 reference; parameter and input gradients of `sum(out * w)`
/// against central finite differences.
fn check_net(spec: CnnSpec, rows: usize, seed: u64) {
    let mut g = rng(seed);
    let net = ConvNet::new(spec, Init::Uniform, &mut g).unwrap();
    let x = random(&mut g, rows * net.input_dim());
    let weights = random(&mut g, rows * net.output_dim());
    let mut ws = net.workspace(rows + 2);
    let out = net.forward(&x, rows, &mut ws).unwrap().to_vec();
    let mut grads = vec![0.0; net.num_params()];
    let mut dx = vec![0.0; x.len()];
    net.backward(&mut ws, &weights, Some(&mut grads), Some(&mut dx))
        .unwrap();
    let (p, xs) = (to_f64(net.params()), to_f64(&x));
    let (want, pre) = reference(&net, &p, &xs, rows);
    for (a, w) in out.iter().zip(&want) {
        assert!((f64::from(*a) - w).abs() < 1e-5, "{a} vs reference {w}");
    }
    if net.spec().activation == Activation::Relu && pre.iter().any(|z| z.abs() < 1e-4) {
        return;
    }
    let loss = |p: &[f64], xs: &[f64]| -> f64 {
        let out = reference(&net, p, xs, rows).0;
        out.iter()
            .zip(&weights)
            .map(|(o, &w)| o * f64::from(w))
            .sum()
    };
    let h = 1e-6;
    let close = |a: f32, n: f64| (f64::from(a) - n).abs() <= 1e-4 + 1e-3 * n.abs();
    for i in 0..p.len() {
        let (mut up, mut down) = (p.clone(), p.clone());
        up[i] += h;
        down[i] -= h;
        let n = (loss(&up, &xs) - loss(&down, &xs)) / (2.0 * h);
        assert!(close(grads[i], n), "param {i}: {} vs numeric {n}", grads[i]);
    }
    for i in 0..xs.len() {
        let (mut up, mut down) = (xs.clone(), xs.clone());
        up[i] += h;
        down[i] -= h;
        let n = (loss(&p, &up) - loss(&p, &down)) / (2.0 * h);
        assert!(close(dx[i], n), "input {i}: {} vs numeric {n}", dx[i]);
    }
}

fn small_spec(activation: Activation, output: CnnOutput, linear: Vec<usize>) -> CnnSpec {
    CnnSpec {
        input: [2, 7, 6],
        input_scale: InputScale::Identity,
        convs: vec![
            ConvLayer::square(3, 3, 2, 1),
            ConvLayer {
                out_channels: 2,
                kernel: [2, 3],
                stride: [1, 1],
                padding: [0, 1],
            },
        ],
        linear,
        activation,
        output,
    }
}

#[test]
fn network_gradients_match_finite_differences() {
    for seed in 0..3 {
        for output in [CnnOutput::Activated, CnnOutput::Linear] {
            for linear in [vec![], vec![5], vec![4, 3]] {
                check_net(
                    small_spec(Activation::Tanh, output, linear.clone()),
                    3,
                    seed,
                );
                check_net(small_spec(Activation::Relu, output, linear), 2, seed);
            }
        }
    }
    // Scaled inputs: the input gradients carry the 1/255.
    let mut spec = small_spec(Activation::Tanh, CnnOutput::Linear, vec![3]);
    spec.input_scale = InputScale::Div255;
    check_net(spec, 2, 9);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]
    /// Outputs, parameter and input gradients are bit-identical on the calling thread and
    /// on pools of 1, 2 and 3 threads (the products are large enough to be split).
    #[test]
    fn pools_give_identical_bits(
        batch in 6usize..12, channels in 1usize..4, seed in any::<u64>(), stride in 1usize..3,
    ) {
        let mut g = rng(seed);
        let spec = CnnSpec {
            input: [channels, 24, 20],
            input_scale: InputScale::Div255,
            convs: vec![ConvLayer::square(16, 3, stride, 1), ConvLayer::square(32, 3, 1, 0)],
            linear: vec![64, 5],
            activation: Activation::Relu,
            output: CnnOutput::Linear,
        };
        let net = ConvNet::new(spec, Init::Uniform, &mut g).unwrap();
        let x: Vec<u8> = (0..batch * net.input_dim()).map(|_| g.random()).collect();
        let dy = random(&mut g, batch * net.output_dim());
        let run = |pool: Option<Arc<Pool>>| {
            let mut ws = net.workspace(batch);
            ws.set_pool(pool);
            let out = net.forward_u8(&x, batch, &mut ws).unwrap().to_vec();
            let mut grads = vec![0.0; net.num_params()];
            let mut dx = vec![0.0; x.len()];
            net.backward(&mut ws, &dy, Some(&mut grads), Some(&mut dx)).unwrap();
            (bits(&out), bits(&grads), bits(&dx))
        };
        let alone = run(None);
        for threads in 1..=3 {
            let pool = Arc::new(Pool::new(threads).unwrap());
            prop_assert!(run(Some(Arc::clone(&pool))) == alone, "{threads} threads");
            if threads > 1 {
                prop_assert!(pool.splits() > 0, "nothing was split");
            }
        }
    }

    /// The network on bytes equals the network on the same bytes as `f32`.
    #[test]
    fn u8_network_is_the_f32_network(batch in 1usize..4, seed in any::<u64>()) {
        let mut g = rng(seed);
        let mut spec = CnnSpec::small_cnn([2, 10, 5], 16);
        spec.input_scale = InputScale::Div255;
        let net = ConvNet::new(spec, Init::Uniform, &mut g).unwrap();
        let x: Vec<u8> = (0..batch * net.input_dim()).map(|_| g.random()).collect();
        let as_f32: Vec<f32> = x.iter().map(|&b| f32::from(b)).collect();
        let mut ws = net.workspace(batch);
        let a = net.forward_u8(&x, batch, &mut ws).unwrap().to_vec();
        let b = net.forward(&as_f32, batch, &mut ws).unwrap().to_vec();
        prop_assert_eq!(bits(&a), bits(&b));
    }
}

#[test]
fn nature_cnn_is_the_paper_and_pytorch_names() {
    let net = ConvNet::zeros(CnnSpec::nature_cnn(4, 512)).unwrap();
    let sizes: Vec<[usize; 2]> = net.convs().iter().map(Conv2d::output_size).collect();
    assert_eq!(sizes, [[20, 20], [9, 9], [7, 7]]);
    assert_eq!(net.input_dim(), 4 * 84 * 84);
    assert_eq!(net.output_dim(), 512);
    let want = (4 * 64 + 1) * 32 + (32 * 16 + 1) * 64 + (64 * 9 + 1) * 64 + (3136 + 1) * 512;
    assert_eq!(net.num_params(), want);
    assert_eq!(net.spec().checked_num_params(), Some(want));
    let tensors = net.tensors();
    let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias", "7.weight", "7.bias"
        ]
    );
    assert_eq!(tensors[0].shape, [32, 4, 8, 8]);
    assert_eq!(tensors[2].shape, [64, 32, 4, 4]);
    assert_eq!(tensors[6].shape, [512, 3136]);
    // The tensors tile the parameters in order.
    let mut next = 0;
    for t in &tensors {
        assert_eq!(t.offset, next, "{}", t.name);
        next += t.len();
    }
    assert_eq!(next, net.num_params());
    assert_eq!(
        torch_description(net.spec()).unwrap(),
        "nn.Sequential(nn.Conv2d(4, 32, kernel_size=(8, 8), stride=(4, 4), padding=(0, 0)), nn.ReLU(), \
         nn.Conv2d(32, 64, kernel_size=(4, 4), stride=(2, 2), padding=(0, 0)), nn.ReLU(), \
         nn.Conv2d(64, 64, kernel_size=(3, 3), stride=(1, 1), padding=(0, 0)), nn.ReLU(), \
         nn.Flatten(), nn.Linear(3136, 512), nn.ReLU()) applied to input / 255"
    );
    assert_eq!(
        net.architecture().to_string(),
        "cnn 4x84x84/255 conv 32k8x8s4x4p0x0 64k4x4s2x2p0x0 64k3x3s1x1p0x0 linear 512 relu"
    );
    // Small grids from 10x5 up.
    for input in [[1, 10, 5], [4, 10, 10], [7, 16, 16]] {
        let net = ConvNet::zeros(CnnSpec::small_cnn(input, 256)).unwrap();
        assert_eq!(net.output_dim(), 256);
        let [_, h, w] = input;
        assert_eq!(net.linears()[0].inputs(), 32 * (h - 4) * (w - 4));
    }
}

#[test]
fn init_is_pytorch_default() {
    let mut g = rng(1);
    let net = ConvNet::new(CnnSpec::small_cnn([3, 8, 8], 32), Init::Uniform, &mut g).unwrap();
    for conv in net.convs() {
        let bound = 1.0 / (conv.spec().fan_in() as f32).sqrt();
        let values = &net.params()[conv.weight().start..conv.bias().end];
        assert!(values.iter().all(|v| v.abs() <= bound));
        assert!(values.iter().any(|v| v.abs() > 0.9 * bound));
    }
    let init = Init::Orthogonal {
        hidden_gain: 2.0f32.sqrt(),
        output_gain: 0.01,
    };
    let net = ConvNet::new(CnnSpec::small_cnn([3, 8, 8], 32), init, &mut g).unwrap();
    let conv = net.convs()[0];
    let w = &net.params()[conv.weight()];
    let fan_in = conv.spec().fan_in();
    // 16 rows of 27: orthonormal rows times sqrt(2).
    for i in 0..16 {
        for j in 0..16 {
            let dot: f32 = (0..fan_in)
                .map(|k| w[i * fan_in + k] * w[j * fan_in + k])
                .sum();
            let want = if i == j { 2.0 } else { 0.0 };
            assert!((dot - want).abs() < 1e-4, "({i}, {j}) {dot}");
        }
    }
    let last = net.linears()[0];
    let norm: f32 = net.params()[last.weight()].iter().map(|v| v * v).sum();
    assert!((norm - 32.0 * 0.01 * 0.01).abs() < 1e-5, "{norm}");
    assert!(net.params()[conv.bias()].iter().all(|&b| b == 0.0));
}

#[test]
fn bad_specs_name_the_field() {
    let what = |spec: CnnSpec| match ConvNet::zeros(spec) {
        Err(Error::Config { what, .. }) => what,
        other => panic!("{other:?}"),
    };
    let base = CnnSpec::small_cnn([2, 10, 5], 8);
    assert_eq!(
        what(CnnSpec {
            input: [2, 0, 5],
            ..base.clone()
        }),
        "cnn.input"
    );
    assert_eq!(
        what(CnnSpec {
            convs: vec![],
            ..base.clone()
        }),
        "cnn.convs"
    );
    assert_eq!(
        what(CnnSpec {
            linear: vec![8, 0],
            ..base.clone()
        }),
        "cnn.linear[1]"
    );
    let mut spec = base.clone();
    spec.convs[1].stride = [1, 0];
    assert_eq!(what(spec), "cnn.convs[1].stride");
    // 10x5 -> 8x3; a 5x5 kernel does not fit 8x3.
    let mut spec = base.clone();
    spec.convs[1].kernel = [5, 5];
    assert_eq!(what(spec), "cnn.convs[1].kernel");
    assert_eq!(
        what(CnnSpec::small_cnn([2, 4, 4], 8)),
        "cnn.convs[1].kernel"
    );
    let mut spec = base.clone();
    spec.convs[0].out_channels = 0;
    assert_eq!(what(spec.clone()), "cnn.convs[0].out_channels");
    assert!(spec.validate().is_err());
    assert_eq!(spec.checked_num_params(), None);
    assert_eq!(spec.workspace_bytes(4), None);
    let huge = CnnSpec::small_cnn([2, 10, 5], usize::MAX / 8);
    assert_eq!(what(huge), "cnn");
    assert!(matches!(
        ConvNet::new(
            base,
            Init::Orthogonal {
                hidden_gain: -1.0,
                output_gain: 1.0
            },
            &mut rng(0)
        ),
        Err(Error::Config { .. })
    ));
}

#[test]
fn wrong_lengths_are_errors() {
    let net = ConvNet::zeros(CnnSpec::small_cnn([2, 10, 5], 8)).unwrap();
    let mut ws = net.workspace(3);
    let x = vec![0.5; 3 * net.input_dim()];
    let what = |r: Result<()>| match r {
        Err(Error::ShapeMismatch { what, .. }) => what,
        other => panic!("{other:?}"),
    };
    assert!(what(net.forward(&x[1..], 3, &mut ws).map(|_| ())).starts_with("network input"));
    assert!(what(net.forward_u8(&[0; 7], 3, &mut ws).map(|_| ())).starts_with("network input"));
    assert!(what(net.forward(&[0.0; 400], 4, &mut ws).map(|_| ())).starts_with("batch rows"));
    let other = ConvNet::zeros(CnnSpec::small_cnn([2, 10, 6], 8)).unwrap();
    assert!(matches!(
        net.forward(&x, 3, &mut other.workspace(3)),
        Err(Error::ArchitectureMismatch { .. })
    ));
    net.forward(&x, 3, &mut ws).unwrap();
    let dy = vec![1.0; 3 * 8];
    let mut grads = vec![0.0; net.num_params()];
    let mut dx = vec![0.0; x.len()];
    assert!(what(net.backward(&mut ws, &dy[1..], None, None)).starts_with("output gradients"));
    assert!(what(net.backward(&mut ws, &dy, Some(&mut grads[1..]), None)).starts_with("parameter"));
    assert!(what(net.backward(&mut ws, &dy, None, Some(&mut dx[1..]))).starts_with("input"));
    net.backward(&mut ws, &dy, Some(&mut grads), Some(&mut dx))
        .unwrap();
}

#[test]
fn passes_allocate_nothing() {
    let mut g = rng(3);
    let net = ConvNet::new(CnnSpec::small_cnn([3, 12, 9], 32), Init::Uniform, &mut g).unwrap();
    let batch = 6;
    let x: Vec<u8> = (0..batch * net.input_dim()).map(|_| g.random()).collect();
    let xf = random(&mut g, batch * net.input_dim());
    let dy = random(&mut g, batch * net.output_dim());
    let mut ws = net.workspace(batch);
    let mut grads = vec![0.0; net.num_params()];
    let mut dx = vec![0.0; xf.len()];
    net.forward(&xf, batch, &mut ws).unwrap();
    net.backward(&mut ws, &dy, Some(&mut grads), Some(&mut dx))
        .unwrap();
    let ((), stats) = rl_testkit::measure(|| {
        for _ in 0..2 {
            net.forward_u8(&x, batch, &mut ws).unwrap();
            net.backward(&mut ws, &dy, Some(&mut grads), None).unwrap();
            net.forward(&xf, batch, &mut ws).unwrap();
            net.backward(&mut ws, &dy, Some(&mut grads), Some(&mut dx))
                .unwrap();
        }
    });
    assert_eq!(stats.allocations, 0, "{stats:?}");
}

#[test]
fn workspace_bytes_are_what_it_allocates() {
    for (spec, rows) in [
        (CnnSpec::nature_cnn(4, 512), 2),
        (CnnSpec::small_cnn([2, 10, 5], 16), 7),
        (small_spec(Activation::Tanh, CnnOutput::Linear, vec![]), 3),
    ] {
        let net = ConvNet::zeros(spec.clone()).unwrap();
        let (ws, stats) = rl_testkit::measure(|| net.workspace(rows));
        let planned = net.workspace_bytes(rows);
        assert_eq!(spec.workspace_bytes(rows), Some(planned));
        assert_eq!(ws.memory_bytes(), planned);
        assert!(stats.allocated_bytes >= planned);
        assert!(
            stats.allocated_bytes - planned < 2048,
            "{stats:?} vs {planned}"
        );
        let plan = net.memory_plan("cnn", rows, Usage::Training);
        assert_eq!(plan.grand_total(), 16 * net.num_params() as u64 + planned);
    }
    assert_eq!(
        CnnSpec::nature_cnn(4, 512).workspace_bytes(usize::MAX),
        None
    );
}

#[test]
fn weights_save_load_and_train_with_adam() {
    let mut g = rng(4);
    let spec = CnnSpec::small_cnn([2, 6, 6], 8);
    let mut net = ConvNet::new(spec.clone(), Init::Uniform, &mut g).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cnn.safetensors");
    save_weights(&path, &[("torso", &net)]).unwrap();
    let mut loaded = ConvNet::zeros(spec).unwrap();
    load_weights(&path, "torso", &mut loaded).unwrap();
    assert_eq!(loaded, net);
    // Another architecture is refused even with the same parameter count.
    let mut other = ConvNet::zeros(CnnSpec {
        output: CnnOutput::Linear,
        ..net.spec().clone()
    })
    .unwrap();
    assert!(matches!(
        load_weights(&path, "torso", &mut other),
        Err(Error::ArchitectureMismatch { .. })
    ));
    // A few Adam steps lower a regression loss.
    let x = random(&mut g, 4 * net.input_dim());
    let target: Vec<f32> = random(&mut g, 4 * 8).iter().map(|t| t.abs()).collect();
    let mut ws = net.workspace(4);
    let config = AdamConfig {
        lr: 1e-2,
        ..AdamConfig::default()
    };
    let mut adam = Adam::new(net.num_params(), config).unwrap();
    let mut grads = vec![0.0; net.num_params()];
    let mut losses = Vec::new();
    for _ in 0..30 {
        let out = net.forward(&x, 4, &mut ws).unwrap();
        let dy: Vec<f32> = out
            .iter()
            .zip(&target)
            .map(|(o, t)| 2.0 * (o - t) / 32.0)
            .collect();
        losses.push(
            out.iter()
                .zip(&target)
                .map(|(o, t)| (o - t) * (o - t))
                .sum::<f32>(),
        );
        grads.fill(0.0);
        net.backward(&mut ws, &dy, Some(&mut grads), None).unwrap();
        adam.update(net.params_mut(), &grads).unwrap();
    }
    assert!(losses[29] < 0.5 * losses[0], "{losses:?}");
}
