//! Tests of the LSTM summarizer: acting replayed as training windows, plans, errors.
#![allow(clippy::unwrap_used, reason = "tests")]

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_nn::{Sequence, Weights};

use super::*;
use crate::Error;

/// Acting through a stream, recording the state at every chunk start, then replaying
/// each chunk as one window from its recorded state (episode starts as resets) gives
/// the acting outputs within 1e-6: what recurrent PPO will store (one state per chunk,
/// not per step) is enough to rebuild every step.
#[test]
fn chunks_replayed_from_their_recorded_state_equal_acting() {
    let (envs, input, hidden, steps, chunk) = (6, 3, 10, 40, 8);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(4);
    let lstm = Lstm::new(input, hidden, &mut rng).unwrap();
    let inputs: Vec<f32> = (0..steps * envs * input)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let starts: Vec<bool> = (0..steps * envs)
        .map(|i| i < envs || rng.random_bool(0.08))
        .collect();
    let mut state = lstm.state(envs);
    let mut acted = vec![0.0; steps * envs * hidden];
    let mut recorded = Vec::new();
    for t in 0..steps {
        if t % chunk == 0 {
            recorded.push((state.h().to_vec(), state.c().to_vec()));
        }
        let span = t * envs * hidden..(t + 1) * envs * hidden;
        lstm.step(
            &mut state,
            &inputs[t * envs * input..(t + 1) * envs * input],
            &starts[t * envs..(t + 1) * envs],
            &mut acted[span],
        )
        .unwrap();
    }
    let mut ws = lstm.cell().sequence_workspace(chunk, envs);
    for (c, (h0, c0)) in recorded.iter().enumerate() {
        let t0 = c * chunk;
        let sequence = Sequence {
            input: &inputs[t0 * envs * input..(t0 + chunk) * envs * input],
            steps: chunk,
            rows: envs,
            resets: Some(&starts[t0 * envs..(t0 + chunk) * envs]),
            h0,
            c0,
        };
        let replayed = lstm.cell().forward_sequence(sequence, &mut ws).unwrap();
        let want = &acted[t0 * envs * hidden..(t0 + chunk) * envs * hidden];
        for (a, b) in replayed.iter().zip(want) {
            assert!((a - b).abs() <= 1e-6, "chunk {c}: {a} vs {b}");
        }
    }
}

#[test]
fn plans_count_parameters_state_and_training() {
    let lstm = Lstm::new(4, 64, &mut Xoshiro256PlusPlus::seed_from_u64(0)).unwrap();
    let params = (lstm.cell().num_params() * 4) as u64;
    assert_eq!(
        lstm.memory_plan("h", 64).grand_total(),
        params + lstm.state_bytes(64)
    );
    // h, c and a row of gates per environment: 6 x 64 floats, whatever the episode.
    assert_eq!(lstm.state_bytes(64), 64 * 6 * 64 * 4);
    let (state, stats) = rl_testkit::measure(|| lstm.state(64));
    assert_eq!(stats.allocated_bytes, lstm.state_bytes(64));
    assert_eq!(state.memory_bytes(), lstm.state_bytes(64));
    let training = lstm.training_plan("h", 16, 32);
    assert_eq!(
        training.grand_total(),
        4 * params + lstm.cell().sequence_workspace_bytes(16, 32)
    );
    assert_eq!(lstm.output_len(), 64);
    assert_eq!(lstm.input_len(), 4);
}

#[test]
fn a_state_of_another_cell_is_refused_before_anything_changes() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    let lstm = Lstm::new(3, 4, &mut rng).unwrap();
    let other = Lstm::new(2, 4, &mut rng).unwrap();
    let mut state = other.state(2);
    other
        .step(&mut state, &[0.5; 4], &[true, true], &mut [0.0; 8])
        .unwrap();
    let before = state.h().to_vec();
    assert!(matches!(
        lstm.step(&mut state, &[0.5; 6], &[true, true], &mut [0.0; 8]),
        Err(Error::Nn(rl_nn::Error::ArchitectureMismatch { .. }))
    ));
    assert_eq!(state.h(), before, "the refused step reset nothing");
    assert!(Lstm::new(0, 4, &mut rng).is_err());
    assert!(Lstm::new(3, 0, &mut rng).is_err());
    let from = Lstm::from_cell(lstm.cell().clone());
    assert_eq!(from, lstm);
}
