//! `cargo xtask bench peak` (and first of every `cargo xtask bench`): the machine's limit.
//!
//! One JSON line: `{"bench":"peak","op":"fma","isa":"avx2"|"avx512"|"scalar","gflops":X}`,
//! the single-core f32 FMA rate of a register-only loop with 12 independent accumulators
//! on the widest vectors the kernels run on (`rl_core::simd::Isa::detect`: AVX-512 where
//! present, else AVX2+FMA; `RL_NN_KERNEL` lowers it), the best of 201 runs of 1 ms (the
//! core's limit: on a shared machine slower runs measure the other work).
//! Kernel figures of the other benches are read as a fraction of it.

mod common;

use std::time::Duration;

use rl::core::simd::Isa;

fn main() {
    let _ = common::args();
    let peak = rl_nn::fma_peak(Isa::detect(), 201, Duration::from_millis(1));
    println!(
        "{}",
        serde_json::json!({
            "bench": "peak", "op": "fma", "isa": peak.isa.name(),
            "gflops": (peak.gflops * 10.0).round() / 10.0,
        })
    );
}
