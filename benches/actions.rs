//! `cargo xtask bench actions`: the chunked scorer over a large action set, one thread.
//!
//! Prints one JSON line per operation:
//! `{"bench":"actions","op":OP,"scores":"table","n":100000,"d":8,"batch":B,"chunk":2048,
//!   "tile":T,"isa":I,"median_ms":X,"ns_per_row_action":Y}` for `soft_policy_loss` (the
//! discrete-SAC actor loss and its gradient) and `soft_value` (batch 256, two critics),
//! `log_softmax`, `sample_inverse_cdf` and `top_k` (k = 10) at
//! batch 1. Each figure is the median over 21 timed repetitions after a warm-up, with
//! scores of moderate spread (a softmax that is neither uniform nor one-hot) and no mask.

use std::hint::black_box;

use rl_actions::rand::RngCore;
use rl_actions::{ChunkedScorer, Masks, Sampling};
use rl_core::FeatureTable;

mod common;

use common::SplitMix;

const N: usize = 100_000;
const D: usize = 8;
const CHUNK: usize = 2048;
const BATCH: usize = 256;
const REPS: usize = 21;

/// The shared generator, as the `RngCore` that `ChunkedScorer::sample` takes.
struct Rng(SplitMix);

impl RngCore for Rng {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn next_u32(&mut self) -> u32 {
        (self.0.next_u64() >> 32) as u32
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.0.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// Median milliseconds of `REPS` runs of `f`, after one warm-up run.
fn median_ms(f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    common::median_ms(1, REPS, f)
}

fn report(scorer: &ChunkedScorer, op: &str, batch: usize, ms: f64) {
    let line = serde_json::json!({
        "bench": "actions",
        "op": op,
        "scores": "table",
        "n": N,
        "d": D,
        "batch": batch,
        "chunk": CHUNK,
        "tile": scorer.tile(),
        "isa": rl_core::simd::Isa::detect().name(),
        "median_ms": (ms * 1e4).round() / 1e4,
        "ns_per_row_action": (ms * 1e6 / (batch * N) as f64 * 1e4).round() / 1e4,
    });
    println!("{line}");
}

fn main() -> anyhow::Result<()> {
    if !common::args().is_empty() {
        anyhow::bail!("the actions bench takes no arguments");
    }
    let mut rng = Rng(SplitMix(7));
    let table = FeatureTable::new(N, D, rng.0.floats(N * D, 1.0))?;
    let mut scorer = ChunkedScorer::new(table, CHUNK, BATCH)?;
    let q = rng.0.floats(BATCH * D, 1.5);
    let g1 = rng.0.floats(BATCH * D, 1.0);
    let g2 = rng.0.floats(BATCH * D, 1.0);
    let (mut loss, mut entropy, mut grad) =
        (vec![0.0; BATCH], vec![0.0; BATCH], vec![0.0; BATCH * D]);

    let ms = median_ms(|| {
        scorer.soft_policy_loss(
            &q,
            [&g1, &g2],
            0.2,
            Masks::None,
            &mut loss,
            &mut entropy,
            &mut grad,
        )?;
        black_box(&grad);
        Ok(())
    })?;
    report(&scorer, "soft_policy_loss", BATCH, ms);

    let ms = median_ms(|| {
        scorer.soft_value(&q, [&g1, &g2], 0.2, Masks::None, &mut loss)?;
        black_box(&loss);
        Ok(())
    })?;
    report(&scorer, "soft_value", BATCH, ms);

    let q1 = &q[..D];
    let mut out = [0.0f32];
    let ms = median_ms(|| {
        scorer.log_softmax(q1, &[12_345], Masks::None, &mut out)?;
        black_box(&out);
        Ok(())
    })?;
    report(&scorer, "log_softmax", 1, ms);

    let mut pick = [0u32];
    let ms = median_ms(|| {
        scorer.sample(q1, Masks::None, Sampling::InverseCdf, &mut rng, &mut pick)?;
        black_box(&pick);
        Ok(())
    })?;
    report(&scorer, "sample_inverse_cdf", 1, ms);

    let (mut top, mut scores) = ([0u32; 10], [0.0f32; 10]);
    let ms = median_ms(|| {
        scorer.top_k(q1, Masks::None, 10, &mut top, &mut scores)?;
        black_box(&top);
        Ok(())
    })?;
    report(&scorer, "top_k", 1, ms);
    Ok(())
}
