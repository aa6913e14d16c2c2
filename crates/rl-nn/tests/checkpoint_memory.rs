//! Saving a checkpoint streams its tensors to the file: the bytes it allocates are the
//! header's, never a copy of the weights (a trainer saving a Nature-CNN DQN used to hold
//! three copies of its 26 MiB of weights and moments for a moment).

#![allow(clippy::unwrap_used, reason = "tests")]

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_nn::{Activation, Adam, AdamConfig, Checkpoint, Init, Mlp, MlpSpec, NetworkState, Weights};
use rl_testkit::{CountingAllocator, measure};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

#[test]
fn saving_allocates_the_header_not_the_weights() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0);
    // 1,000 x 1,000 x 2: about 2 M parameters, 8 MiB of weights and 16 MiB of moments.
    let net = Mlp::new(
        MlpSpec::new(1000, &[1000], 1000, Activation::Relu),
        Init::Uniform,
        &mut rng,
    )
    .unwrap();
    let adam = Adam::new(net.num_params(), AdamConfig::default()).unwrap();
    let checkpoint = Checkpoint {
        kind: "test".to_owned(),
        networks: vec![NetworkState::capture("q", &net, Some(&adam))],
        state: 7u64,
    };
    let weights_bytes = 3 * 4 * net.num_params();
    assert!(weights_bytes > 20 << 20);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.safetensors");
    let ((), stats) = measure(|| checkpoint.save(&path).unwrap());
    assert!(
        stats.peak_live_bytes < 256 << 10,
        "saving {weights_bytes} bytes of tensors held {} bytes at its peak",
        stats.peak_live_bytes
    );
    // What was written is the checkpoint, byte for byte.
    assert_eq!(
        std::fs::read(&path).unwrap(),
        checkpoint.to_bytes().unwrap()
    );
    let loaded = Checkpoint::<u64>::load(&path, "test").unwrap();
    assert_eq!(loaded, checkpoint);
}
