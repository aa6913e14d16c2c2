//! Tests every summarizer must pass, and the identity's own.
#![allow(clippy::unwrap_used, reason = "tests")]

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::{Error, Identity, Lstm, Padding, Stack, Summarizer};

/// A random stream for `envs` environments: inputs and episode starts per step.
fn stream(envs: usize, len: usize, steps: usize, seed: u64) -> Vec<(Vec<f32>, Vec<bool>)> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..steps)
        .map(|t| {
            let inputs = (0..envs * len)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect();
            let starts = (0..envs).map(|_| t == 0 || rng.random_bool(0.1)).collect();
            (inputs, starts)
        })
        .collect()
}

/// What every summarizer promises: output widths, a state of the planned size, stepping
/// that allocates nothing, `starts` equal to `reset` before the step, and environments
/// that do not see each other.
fn contract<S: Summarizer>(summarizer: &S) {
    let (envs, len, out_len) = (5, summarizer.input_len(), summarizer.output_len());
    let (mut state, stats) = rl_testkit::measure(|| summarizer.state(envs));
    assert_eq!(stats.allocated_bytes, summarizer.state_bytes(envs));
    assert!(summarizer.memory_plan("s", envs).grand_total() >= summarizer.state_bytes(envs));
    let mut by_reset = summarizer.state(envs);
    let mut alone = summarizer.state(1);
    let steps = stream(envs, len, 40, 1);
    let mut out = vec![0.0; envs * out_len];
    let mut out_reset = vec![0.0; envs * out_len];
    let mut out_alone = vec![0.0; out_len];
    let no_starts = vec![false; envs];
    // Warm-up on throwaway states: the matrix kernel's per-thread scratch grows on the
    // first product of each shape.
    let (inputs, starts) = &steps[0];
    summarizer
        .step(&mut summarizer.state(envs), inputs, starts, &mut out)
        .unwrap();
    summarizer
        .step(
            &mut summarizer.state(1),
            &inputs[..len],
            &starts[..1],
            &mut out_alone,
        )
        .unwrap();
    let ((), stats) = rl_testkit::measure(|| {
        for (inputs, starts) in &steps {
            summarizer
                .step(&mut state, inputs, starts, &mut out)
                .unwrap();
            for (env, _) in starts.iter().enumerate().filter(|(_, s)| **s) {
                summarizer.reset(&mut by_reset, env).unwrap();
            }
            summarizer
                .step(&mut by_reset, inputs, &no_starts, &mut out_reset)
                .unwrap();
            assert_eq!(out, out_reset, "starts flags and reset() differ");
            // Environment 3 stepped alone gives what it gives among others.
            summarizer
                .step(
                    &mut alone,
                    &inputs[3 * len..4 * len],
                    &starts[3..4],
                    &mut out_alone,
                )
                .unwrap();
            assert_eq!(out_alone, out[3 * out_len..4 * out_len]);
        }
    });
    assert_eq!(stats.allocations, 0, "{stats:?}");

    // Wrong shapes are errors and change nothing.
    let before = out.clone();
    let (inputs, starts) = &steps[1];
    assert!(matches!(
        summarizer.step(&mut state, &inputs[1..], starts, &mut out),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(
        summarizer
            .step(&mut state, inputs, &starts[1..], &mut out)
            .is_err()
    );
    assert!(
        summarizer
            .step(&mut state, inputs, starts, &mut out[1..])
            .is_err()
    );
    assert!(matches!(
        summarizer.reset(&mut state, envs),
        Err(Error::OutOfRange { .. })
    ));
    assert_eq!(out, before);
    // The state was untouched by the refused calls: the next step matches a copy's.
    summarizer
        .step(&mut state, inputs, starts, &mut out)
        .unwrap();
    summarizer
        .step(&mut by_reset, inputs, starts, &mut out_reset)
        .unwrap();
    assert_eq!(out, out_reset);
}

#[test]
fn every_summarizer_keeps_the_contract() {
    contract(&Identity::new(3).unwrap());
    contract(&Stack::new(3, 4).unwrap());
    contract(&Stack::new(2, 1).unwrap().with_padding(Padding::Zeros));
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    contract(&Lstm::new(3, 7, &mut rng).unwrap());
}

#[test]
fn identity_passes_rows_through() {
    let identity = Identity::new(2).unwrap();
    assert_eq!(identity.output_len(), 2);
    assert_eq!(identity.state_bytes(1000), 0);
    let mut state = identity.state(2);
    assert_eq!(state.envs(), 2);
    let mut out = [0.0; 4];
    identity
        .step(&mut state, &[1.0, 2.0, 3.0, 4.0], &[false, true], &mut out)
        .unwrap();
    assert_eq!(out, [1.0, 2.0, 3.0, 4.0]);
    assert!(matches!(Identity::new(0), Err(Error::Config { .. })));
}
