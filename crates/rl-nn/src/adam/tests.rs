use proptest::prelude::*;

use super::*;

/// Parameters, first and second moments after `steps` updates on `isa`'s kernel.
fn run_on(isa: Isa, config: &AdamConfig, grads: &[Vec<f32>], start: &[f32]) -> [Vec<u32>; 3] {
    let mut params = start.to_vec();
    let mut first = vec![0.0; start.len()];
    let mut second = vec![0.0; start.len()];
    for (t, g) in (1..).zip(grads) {
        Kernel::new(config, t).apply_on(isa, &mut params, g, &mut first, &mut second);
    }
    [params, first, second].map(|v| v.iter().map(|x| x.to_bits()).collect())
}

/// A gradient value: often 0 or tiny (the cases the subnormal flush touches), else
/// anywhere from 1e-30 to 1e3 in size, either sign.
fn gradient() -> impl Strategy<Value = f32> {
    prop_oneof![
        1 => Just(0.0f32),
        1 => -1e-19f32..1e-19,
        4 => (-30i32..4, any::<bool>(), 1.0f32..10.0)
            .prop_map(|(e, neg, m)| m * 10f32.powi(e) * if neg { -1.0 } else { 1.0 }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every instruction set gives the same parameters and moments, bit for bit, for any
    /// length (tails shorter than a vector included), with and without weight decay.
    #[test]
    fn kernels_agree_bit_for_bit_across_instruction_sets(
        len in 0usize..70,
        steps in 1usize..6,
        decay in proptest::option::of(0.0f64..0.1),
        seed_grads in proptest::collection::vec(gradient(), 70 * 6),
        start in proptest::collection::vec(-2.0f32..2.0, 70),
    ) {
        let config = AdamConfig { weight_decay: decay, ..AdamConfig::default() };
        let grads: Vec<Vec<f32>> =
            seed_grads.chunks(70).take(steps).map(|g| g[..len].to_vec()).collect();
        let reference = run_on(Isa::Scalar, &config, &grads, &start[..len]);
        for isa in Isa::ALL.into_iter().filter(|isa| isa.is_supported()) {
            prop_assert_eq!(&run_on(isa, &config, &grads, &start[..len]), &reference, "{:?}", isa);
        }
    }
}

#[test]
fn moments_of_a_parameter_whose_gradient_vanished_reach_zero_not_subnormals() {
    // Ten steps of gradient, then none (a ReLU unit that died): the first moment decays
    // by beta1 = 0.9 a step. Unflushed it would sit at the smallest subnormal for ever
    // (0.9 times it rounds back to it), and every later step would do subnormal
    // arithmetic.
    let mut adam = Adam::new(3, AdamConfig::default()).unwrap();
    let mut params = vec![0.5f32, -0.25, 1.0];
    for _ in 0..10 {
        adam.update(&mut params, &[1e-3, -2e-2, 3e-4]).unwrap();
    }
    let moved = params.clone();
    for step in 0..2_000 {
        adam.update(&mut params, &[0.0; 3]).unwrap();
        for x in adam.first.iter().chain(&adam.second) {
            assert!(!x.is_subnormal(), "step {step}: moment {x:e} is subnormal");
        }
    }
    assert_eq!(adam.first, vec![0.0; 3], "the first moments decayed to 0");
    assert!(adam.second.iter().all(|&v| v > 0.0), "{:?}", adam.second);
    // The parameters kept moving while the moments were large, then stopped.
    assert!(params.iter().zip(&moved).all(|(p, m)| p != m));
    let settled = params.clone();
    adam.update(&mut params, &[0.0; 3]).unwrap();
    assert_eq!(params, settled);
}

#[test]
fn updates_split_across_a_pool_are_bit_identical_to_one_thread() {
    let pools = [1, 2, 3].map(|t| crate::Pool::new(t).unwrap());
    // Below the split size, just above it per thread, and a length no block divides.
    for n in [100, 2 * Adam::SPLIT_MIN + 3, 3 * Adam::SPLIT_MIN + 17] {
        let config = AdamConfig {
            weight_decay: Some(0.01),
            ..AdamConfig::default()
        };
        let start: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let grads: Vec<Vec<f32>> = (0..3)
            .map(|s| {
                (0..n)
                    .map(|i| ((i * 7 + s) as f32 * 0.11).cos() * 1e-2)
                    .collect()
            })
            .collect();
        let mut reference = (start.clone(), Adam::new(n, config).unwrap());
        for g in &grads {
            reference.1.update(&mut reference.0, g).unwrap();
        }
        for pool in &pools {
            let (mut params, mut adam) = (start.clone(), Adam::new(n, config).unwrap());
            for g in &grads {
                adam.update_on(pool, &mut params, g).unwrap();
            }
            let threads = pool.threads();
            assert_eq!(adam.steps(), 3);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&params),
                bits(&reference.0),
                "{n} params, {threads} threads"
            );
            assert_eq!(bits(&adam.first), bits(&reference.1.first));
            assert_eq!(bits(&adam.second), bits(&reference.1.second));
        }
        let (before, mut adam) = (start.clone(), Adam::new(n, config).unwrap());
        let mut params = before.clone();
        let err = adam
            .update_on(&pools[1], &mut params, &grads[0][1..])
            .unwrap_err();
        assert!(matches!(err, Error::ShapeMismatch { .. }), "{err}");
        assert_eq!(
            (params, adam.steps()),
            (before, 0),
            "nothing changed on error"
        );
    }
}
