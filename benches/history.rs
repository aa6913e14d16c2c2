//! `cargo xtask bench history`: history summarizers, on one thread.
//!
//! JSON lines on stdout:
//! - `{"bench":"history","op":"lstm_step","envs":64,"input":4,"hidden":64,"ms":X,
//!   "env_steps_per_s":Y}`: one acting step of the LSTM summarizer for 64 environments
//!   (two matrix products over the 64 rows and the gate sweep, outputs copied out);
//! - `{"bench":"history","op":"lstm_chunk","chunks":32,"length":16,"input":4,
//!   "hidden":64,"forward_ms":X,"forward_backward_ms":Y}`: one training window, 32
//!   sequences of 16 steps with resets inside, forward, then forward and backward
//!   (parameter, input and initial-state gradients);
//! - `{"bench":"history","op":"stack_gather","rows":256,"k":4,"input":4,"ms":X}`:
//!   frame stacks of 256 sampled rows rebuilt from a 100 000-row column of 8
//!   interleaved environments.
//!
//! Medians of many timed repetitions after warm-up. `cargo xtask bench history -- lstm`
//! or `-- stack` runs one part.

mod common;

use std::hint::black_box;

use common::SplitMix;
use rand::SeedableRng;
use rl_core::Flag;
use rl_history::{Episodes, Lstm, Stack, StoredRows, Summarizer, Written};
use rl_nn::{Sequence, SequenceGrads, Weights};

fn round(ms: f64) -> f64 {
    (ms * 1e4).round() / 1e4
}

fn lstm_step(envs: usize, input: usize, hidden: usize, rng: &mut SplitMix) -> anyhow::Result<()> {
    let mut seed = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(rng.next_u64());
    let lstm = Lstm::new(input, hidden, &mut seed)?;
    let mut state = lstm.state(envs);
    let obs = rng.floats(envs * input, 1.0);
    let starts = vec![false; envs];
    let mut out = vec![0.0f32; envs * hidden];
    let ms = common::median_ms(1000, 20001, || {
        lstm.step(&mut state, black_box(&obs), &starts, &mut out)?;
        black_box(&out);
        Ok(())
    })?;
    println!(
        "{}",
        serde_json::json!({
            "bench": "history", "op": "lstm_step", "envs": envs, "input": input,
            "hidden": hidden, "ms": round(ms),
            "env_steps_per_s": (envs as f64 / (ms / 1e3)).round(),
        })
    );
    Ok(())
}

fn lstm_chunk(
    chunks: usize,
    length: usize,
    input: usize,
    hidden: usize,
    rng: &mut SplitMix,
) -> anyhow::Result<()> {
    let mut seed = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(rng.next_u64());
    let lstm = Lstm::new(input, hidden, &mut seed)?;
    let cell = lstm.cell();
    let mut ws = cell.sequence_workspace(length, chunks);
    let x = rng.floats(length * chunks * input, 1.0);
    // About one episode start per 20 steps.
    let resets: Vec<bool> = (0..length * chunks).map(|_| rng.below(20) == 0).collect();
    let h0 = rng.floats(chunks * hidden, 0.5);
    let c0 = rng.floats(chunks * hidden, 0.5);
    let out_grads = rng.floats(length * chunks * hidden, 1.0);
    let mut grads = vec![0.0f32; cell.num_params()];
    let mut dx = vec![0.0f32; x.len()];
    let (mut dh0, mut dc0) = (vec![0.0f32; h0.len()], vec![0.0f32; c0.len()]);
    let sequence = Sequence {
        input: &x,
        steps: length,
        rows: chunks,
        resets: Some(&resets),
        h0: &h0,
        c0: &c0,
    };
    let forward_ms = common::median_ms(50, 1001, || {
        black_box(cell.forward_sequence(sequence, &mut ws)?);
        Ok(())
    })?;
    let forward_backward_ms = common::median_ms(50, 1001, || {
        cell.forward_sequence(sequence, &mut ws)?;
        let g = SequenceGrads {
            params: Some(&mut grads),
            input: Some(&mut dx),
            h0: Some(&mut dh0),
            c0: Some(&mut dc0),
        };
        cell.backward_sequence(&mut ws, &out_grads, g)?;
        Ok(())
    })?;
    println!(
        "{}",
        serde_json::json!({
            "bench": "history", "op": "lstm_chunk", "chunks": chunks, "length": length,
            "input": input, "hidden": hidden, "forward_ms": round(forward_ms),
            "forward_backward_ms": round(forward_backward_ms),
        })
    );
    Ok(())
}

fn stack_gather(rows: usize, k: usize, input: usize, rng: &mut SplitMix) -> anyhow::Result<()> {
    const STORED: usize = 100_000;
    const ENVS: usize = 8;
    let stack = Stack::new(input, k)?;
    let obs = rng.floats(STORED * input, 1.0);
    let starts: Vec<Flag> = (0..STORED)
        .map(|_| Flag::new(rng.below(200) == 0))
        .collect();
    let stored = StoredRows {
        obs: &obs,
        episodes: Episodes::Starts(&starts),
        stride: ENVS,
        written: Written::All,
    };
    let sampled: Vec<usize> = (0..rows)
        .map(|_| rng.below(STORED as u32) as usize)
        .collect();
    let mut out = vec![0.0f32; rows * stack.output_len()];
    let ms = common::median_ms(100, 5001, || {
        stack.gather(&stored, black_box(&sampled), &mut out)?;
        black_box(&out);
        Ok(())
    })?;
    println!(
        "{}",
        serde_json::json!({
            "bench": "history", "op": "stack_gather", "rows": rows, "k": k,
            "input": input, "ms": round(ms),
        })
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let only = common::args();
    let wants = |part: &str| only.is_empty() || only.iter().any(|a| a == part);
    let mut rng = SplitMix(13);
    if wants("lstm") {
        lstm_step(64, 4, 64, &mut rng)?;
        lstm_chunk(32, 16, 4, 64, &mut rng)?;
    }
    if wants("stack") {
        stack_gather(256, 4, 4, &mut rng)?;
    }
    Ok(())
}
