//! Tests of stacking: acting against a simple model, training-time stacks rebuilt from
//! storage against the acting ones.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::VecDeque;

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::Flag;

use super::*;

/// The model: each environment's inputs since its episode started, in a `VecDeque`
/// (unbounded), stacked by reading its back.
fn model_stack(history: &VecDeque<Vec<f32>>, k: usize, padding: Padding) -> Vec<f32> {
    let mut out = Vec::new();
    for age in (0..k).rev() {
        match history.len().checked_sub(1 + age) {
            Some(i) => out.extend_from_slice(&history[i]),
            None => match padding {
                Padding::FirstFrame => out.extend_from_slice(&history[0]),
                Padding::Zeros => out.extend(std::iter::repeat_n(0.0, history[0].len())),
            },
        }
    }
    out
}

/// A stream of `steps` steps for `envs` environments: inputs (each row unique) and
/// episode starts (the first step, then at random).
fn stream(envs: usize, len: usize, steps: usize, p_start: f64, seed: u64) -> (Vec<f32>, Vec<bool>) {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let inputs = (0..steps * envs * len)
        .map(|i| i as f32 + rng.random_range(0.0..0.5))
        .collect();
    let starts = (0..steps * envs)
        .map(|i| i < envs || rng.random_bool(p_start))
        .collect();
    (inputs, starts)
}

/// Acts through the stream; returns the output of every step, `steps x envs x k x len`.
fn act(stack: &Stack, envs: usize, inputs: &[f32], starts: &[bool]) -> Vec<f32> {
    let len = stack.input_len();
    let steps = starts.len() / envs;
    let mut state = stack.state(envs);
    let mut all = Vec::new();
    let mut out = vec![0.0; envs * stack.output_len()];
    for t in 0..steps {
        stack
            .step(
                &mut state,
                &inputs[t * envs * len..(t + 1) * envs * len],
                &starts[t * envs..(t + 1) * envs],
                &mut out,
            )
            .unwrap();
        all.extend_from_slice(&out);
    }
    all
}

fn padding(zeros: bool) -> Padding {
    if zeros {
        Padding::Zeros
    } else {
        Padding::FirstFrame
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Acting equals the model for any k, width, number of environments and starts.
    #[test]
    fn acting_equals_the_model(
        envs in 1usize..5,
        len in 1usize..4,
        k in 1usize..6,
        steps in 1usize..40,
        p_start in 0.0f64..0.5,
        zeros in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let stack = Stack::new(len, k).unwrap().with_padding(padding(zeros));
        let (inputs, starts) = stream(envs, len, steps, p_start, seed);
        let acted = act(&stack, envs, &inputs, &starts);
        let mut histories = vec![VecDeque::new(); envs];
        let row = k * len;
        for t in 0..steps {
            for (e, history) in histories.iter_mut().enumerate() {
                if starts[t * envs + e] {
                    history.clear();
                }
                let at = (t * envs + e) * len;
                history.push_back(inputs[at..at + len].to_vec());
                let want = model_stack(history, k, stack.padding());
                let at = (t * envs + e) * row;
                prop_assert_eq!(&acted[at..at + row], &want[..], "step {} env {}", t, e);
            }
        }
    }

    /// Stacks rebuilt from a rollout-like column (`steps x envs` rows, stride `envs`),
    /// with start flags or with terminated/truncated flags, equal the acting ones for
    /// every row, whatever order the rows are asked in.
    #[test]
    fn gathered_stacks_equal_acting_stacks(
        envs in 1usize..5,
        len in 1usize..4,
        k in 1usize..6,
        steps in 1usize..40,
        p_start in 0.0f64..0.5,
        zeros in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let stack = Stack::new(len, k).unwrap().with_padding(padding(zeros));
        let (inputs, starts) = stream(envs, len, steps, p_start, seed);
        let acted = act(&stack, envs, &inputs, &starts);
        let n = steps * envs;
        let start_flags: Vec<Flag> = starts.iter().map(|&s| Flag::new(s)).collect();
        // Ends: row r ended its episode if the environment's next row starts one; split
        // at random between terminated and truncated. The last step's flags are free.
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 1);
        let (mut terminated, mut truncated) = (vec![Flag::new(false); n], vec![Flag::new(false); n]);
        for r in 0..n.saturating_sub(envs) {
            if starts[r + envs] {
                if rng.random_bool(0.5) { terminated[r] = Flag::new(true) } else { truncated[r] = Flag::new(true) }
            }
        }
        let mut rows: Vec<usize> = (0..n).collect();
        rows.reverse();
        rows.rotate_left(n / 3);
        let mut out = vec![0.0; n * stack.output_len()];
        for episodes in [
            Episodes::Starts(&start_flags),
            Episodes::Ends { terminated: &terminated, truncated: &truncated },
        ] {
            let stored = StoredRows { obs: &inputs, episodes, stride: envs, written: Written::All };
            stack.gather(&stored, &rows, &mut out).unwrap();
            let row_len = stack.output_len();
            for (j, &r) in rows.iter().enumerate() {
                prop_assert_eq!(
                    &out[j * row_len..(j + 1) * row_len],
                    &acted[r * row_len..(r + 1) * row_len],
                    "row {}", r
                );
            }
        }
    }

    /// A ring that has wrapped: the stored rows are the `len` before `cursor`. A row's
    /// stack equals the acting one wherever the rows it needs are still held; a row
    /// whose history was overwritten is padded from its oldest held row, never reads an
    /// overwritten one.
    #[test]
    fn gathered_stacks_from_a_wrapped_ring(
        envs in 1usize..4,
        k in 1usize..5,
        capacity_steps in 2usize..12,
        steps in 1usize..40,
        p_start in 0.0f64..0.3,
        seed in any::<u64>(),
    ) {
        let len = 2;
        let stack = Stack::new(len, k).unwrap();
        let (inputs, starts) = stream(envs, len, steps, p_start, seed);
        let acted = act(&stack, envs, &inputs, &starts);
        let capacity = capacity_steps * envs;
        let written = steps * envs;
        // Write the stream into the ring row after row.
        let mut ring = vec![f32::NAN; capacity * len];
        let mut ring_starts = vec![Flag::new(false); capacity];
        for r in 0..written {
            let p = r % capacity;
            ring[p * len..(p + 1) * len].copy_from_slice(&inputs[r * len..(r + 1) * len]);
            ring_starts[p] = Flag::new(starts[r]);
        }
        let held = written.min(capacity);
        let stored = StoredRows {
            obs: &ring,
            episodes: Episodes::Starts(&ring_starts),
            stride: envs,
            written: Written::Ring { cursor: written % capacity, len: held },
        };
        let row_len = stack.output_len();
        let mut out = vec![0.0; row_len];
        for r in written - held..written {
            stack.gather(&stored, &[r % capacity], &mut out).unwrap();
            prop_assert!(out.iter().all(|v| v.is_finite()), "read an unwritten row");
            // Walk back in the stream: is every row the acting stack used still held?
            let mut oldest = r;
            let mut complete = true;
            for _ in 1..k {
                if starts[oldest] { break; }
                if oldest < envs || oldest - envs < written - held { complete = false; break; }
                oldest -= envs;
            }
            if complete {
                prop_assert_eq!(&out[..], &acted[r * row_len..(r + 1) * row_len], "row {}", r);
            } else {
                // The newest slot is the row itself.
                prop_assert_eq!(&out[row_len - len..], &inputs[r * len..(r + 1) * len]);
            }
        }
        // A position the ring does not hold is refused.
        if held < capacity {
            let missing = written % capacity;
            let refused = matches!(
                stack.gather(&stored, &[missing], &mut out),
                Err(Error::OutOfRange { .. })
            );
            prop_assert!(refused);
        }
    }
}

#[test]
fn both_paddings_at_an_episode_start() {
    let stack = Stack::new(1, 4).unwrap();
    let mut state = stack.state(1);
    let mut out = [0.0; 4];
    stack.step(&mut state, &[5.0], &[true], &mut out).unwrap();
    assert_eq!(out, [5.0; 4]);
    stack.step(&mut state, &[6.0], &[false], &mut out).unwrap();
    assert_eq!(out, [5.0, 5.0, 5.0, 6.0]);
    let zeros = stack.with_padding(Padding::Zeros);
    let mut state = zeros.state(1);
    zeros.step(&mut state, &[5.0], &[false], &mut out).unwrap();
    assert_eq!(
        out,
        [0.0, 0.0, 0.0, 5.0],
        "a fresh state is an episode start"
    );
    zeros.step(&mut state, &[6.0], &[false], &mut out).unwrap();
    assert_eq!(out, [0.0, 0.0, 5.0, 6.0]);
    zeros.reset(&mut state, 0).unwrap();
    zeros.step(&mut state, &[7.0], &[false], &mut out).unwrap();
    assert_eq!(out, [0.0, 0.0, 0.0, 7.0]);
}

#[test]
fn gather_refuses_bad_columns_and_rows_and_writes_nothing() {
    let stack = Stack::new(2, 2).unwrap();
    let obs = [0.0f32; 8];
    let starts = [Flag::new(true); 4];
    let good = StoredRows {
        obs: &obs,
        episodes: Episodes::Starts(&starts),
        stride: 1,
        written: Written::All,
    };
    let mut out = [9.0f32; 8];
    let shape = |r: Result<()>| matches!(r, Err(Error::ShapeMismatch { .. }));
    assert!(shape(stack.gather(&good, &[0], &mut out)), "out for 2 rows");
    assert!(matches!(
        stack.gather(&good, &[0, 4], &mut out),
        Err(Error::OutOfRange { .. })
    ));
    let ragged = StoredRows {
        obs: &obs[..7],
        ..good
    };
    assert!(shape(stack.gather(&ragged, &[0, 1], &mut out)));
    let short_flags = StoredRows {
        episodes: Episodes::Starts(&starts[..3]),
        ..good
    };
    assert!(shape(stack.gather(&short_flags, &[0, 1], &mut out)));
    let ends = StoredRows {
        episodes: Episodes::Ends {
            terminated: &starts,
            truncated: &starts[..2],
        },
        ..good
    };
    assert!(shape(stack.gather(&ends, &[0, 1], &mut out)));
    let stride = StoredRows { stride: 0, ..good };
    assert!(matches!(
        stack.gather(&stride, &[0, 1], &mut out),
        Err(Error::Config { .. })
    ));
    for written in [
        Written::Ring { cursor: 4, len: 2 },
        Written::Ring { cursor: 0, len: 5 },
    ] {
        let ring = StoredRows { written, ..good };
        assert!(matches!(
            stack.gather(&ring, &[0, 1], &mut out),
            Err(Error::Config { .. })
        ));
    }
    assert_eq!(out, [9.0; 8], "nothing written");
    assert!(Stack::new(2, 0).is_err());
    assert!(Stack::new(0, 2).is_err());
    let ((), stats) = rl_testkit::measure(|| stack.gather(&good, &[3, 1], &mut out).unwrap());
    assert_eq!(stats.allocations, 0);
}

#[test]
fn state_bytes_are_what_the_state_holds() {
    let stack = Stack::new(84, 4).unwrap();
    let (state, stats) = rl_testkit::measure(|| stack.state(16));
    assert_eq!(state.memory_bytes(), stack.state_bytes(16));
    assert_eq!(stats.allocated_bytes, stack.state_bytes(16));
    assert_eq!(
        stack.memory_plan("stack", 16).grand_total(),
        stack.state_bytes(16)
    );
    assert_eq!(state.envs(), 16);
}

#[test]
fn state_bytes_from_sizes_are_the_built_stacks() {
    for (len, k, envs) in [(1, 1, 1), (3, 4, 5), (6, 2, 0)] {
        let stack = Stack::new(len, k).unwrap();
        assert_eq!(
            Stack::state_bytes_for(len, k, envs),
            Some(stack.state_bytes(envs))
        );
    }
    assert_eq!(Stack::state_bytes_for(1 << 40, 1 << 30, 1), None);
}
