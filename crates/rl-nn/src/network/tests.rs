#![allow(clippy::unwrap_used, reason = "tests")]

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::*;
use crate::{Activation, CnnOutput, InputScale};

fn cnn_spec() -> CnnSpec {
    let mut spec = CnnSpec::small_cnn([2, 6, 5], 8);
    spec.input_scale = InputScale::Div255;
    spec.linear = vec![8, 3];
    spec.output = CnnOutput::Linear;
    spec
}

fn rng() -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(3)
}

/// A `Network` is its inner network: the same parameters from the same draws, the same
/// outputs and gradients, bit for bit.
#[test]
fn a_network_passes_through_to_its_inner_network() {
    let spec = cnn_spec();
    let inner = ConvNet::new(spec.clone(), Init::Uniform, &mut rng()).unwrap();
    let net = Network::new(NetworkSpec::Cnn(spec.clone()), Init::Uniform, &mut rng()).unwrap();
    assert_eq!(net.params(), inner.params());
    assert_eq!(net.architecture(), inner.architecture());
    assert_eq!(net.spec(), NetworkSpec::Cnn(spec));
    let frames: Vec<u8> = (0..4 * 60).map(|i| (i * 37 % 256) as u8).collect();
    let mut ws = net.workspace(4);
    let mut inner_ws = inner.workspace(4);
    let ours = net.forward_obs(&frames, 4, &mut ws).unwrap().to_vec();
    let theirs = inner
        .forward_u8(&frames, 4, &mut inner_ws)
        .unwrap()
        .to_vec();
    assert_eq!(ours, theirs);
    assert_eq!(ws.output(), &theirs[..]);
    assert_eq!(ws.rows(), 4);
    // Bytes divided by 255 in the first layer are the same as floats divided before.
    let floats: Vec<f32> = frames.iter().map(|&b| f32::from(b)).collect();
    let from_floats = net.forward_obs(&floats, 4, &mut ws).unwrap();
    assert_eq!(from_floats, &theirs[..]);
    let dy = vec![0.5; 4 * 3];
    let (mut g, mut g_inner) = (vec![0.0; net.num_params()], vec![0.0; net.num_params()]);
    net.backward(&mut ws, &dy, Some(&mut g), None).unwrap();
    inner.forward(&floats, 4, &mut inner_ws).unwrap();
    inner
        .backward(&mut inner_ws, &dy, Some(&mut g_inner), None)
        .unwrap();
    assert_eq!(g, g_inner);
}

/// Bytes into an MLP are refused with what to pick instead; a workspace of the other
/// kind is refused, not misread.
#[test]
fn bytes_into_an_mlp_and_foreign_workspaces_are_errors() {
    let mlp = Network::new(
        NetworkSpec::Mlp(MlpSpec::new(60, &[4], 3, Activation::Relu)),
        Init::Uniform,
        &mut rng(),
    )
    .unwrap();
    let mut ws = mlp.workspace(2);
    let error = mlp
        .forward_obs(&[0u8; 120], 2, &mut ws)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("nature_cnn") && error.contains("small_cnn"),
        "{error}"
    );
    assert!(mlp.forward_obs(&[0.0f32; 120], 2, &mut ws).is_ok());
    let cnn = Network::new(NetworkSpec::Cnn(cnn_spec()), Init::Uniform, &mut rng()).unwrap();
    let mut cnn_ws = cnn.workspace(2);
    assert!(matches!(
        mlp.forward(&[0.0; 120], 2, &mut cnn_ws),
        Err(Error::ArchitectureMismatch { .. })
    ));
    assert!(matches!(
        cnn.forward_obs(&[0u8; 120], 2, &mut ws),
        Err(Error::ArchitectureMismatch { .. })
    ));
    assert!(!mlp.same_spec(&cnn));
    assert!(cnn.same_spec(&cnn.clone()));
    let (_, stats) = rl_testkit::measure(|| cnn.same_spec(&cnn));
    assert_eq!(stats.allocations, 0, "comparing specs allocates nothing");
}

/// Scaling the output layer scales the last layer only and zeroes its bias, for both
/// kinds (a policy head starts near uniform).
#[test]
fn scaling_the_output_layer_touches_the_last_layer_only() {
    let mut net = Network::new(NetworkSpec::Cnn(cnn_spec()), Init::Uniform, &mut rng()).unwrap();
    let before = net.params().to_vec();
    net.scale_output_layer(0.5);
    let after = net.params();
    let changed = before.iter().zip(after).filter(|(a, b)| a != b).count();
    // The last linear layer: 8 x 3 weights and 3 biases (a zero bias may stay zero).
    assert!((24..=27).contains(&changed), "{changed}");
    assert_eq!(after[..before.len() - 27], before[..before.len() - 27]);
    assert!(after[after.len() - 3..].iter().all(|&b| b == 0.0));
}
