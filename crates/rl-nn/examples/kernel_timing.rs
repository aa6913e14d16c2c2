//! Times `rl_nn::matmul` (the allocation-free kernel) against `gemm` 0.19 on the shapes of
//! the layers: forward `x * W^T`, weight gradient `dy^T * x` and input gradient `dy * W`.
//!
//! `cargo run --release -p rl-nn --example kernel_timing [-- REPS]`: for each shape, the
//! median GFLOP/s of both over REPS (default 101) interleaved batches, one thread. Larger
//! square and tall products follow the layer shapes. `RL_NN_KERNEL=avx2` (or `scalar`, also
//! spelled `portable`; see `rl_core::simd`) times the kernel a CPU without AVX-512 would
//! run (gemm keeps its own choice).

use std::hint::black_box;
use std::time::Instant;

use rl_nn::{Accumulate, MatRef, matmul};

/// A product to time: `dst (m x n) (+)= lhs (m x k) * rhs (k x n)` with the views'
/// strides as (row, column).
#[derive(Clone, Copy, Debug)]
struct Case {
    /// Which layer pass.
    name: &'static str,
    /// Rows of `dst`.
    m: usize,
    /// Inner dimension.
    k: usize,
    /// Columns of `dst`.
    n: usize,
    /// Whether `lhs` is the transpose of a row-major `k x m` matrix.
    lhs_t: bool,
    /// Whether `rhs` is the transpose of a row-major `n x k` matrix.
    rhs_t: bool,
    /// Whether the pass adds into `dst`.
    add: bool,
}

/// Runs the product with `rl_nn::matmul`.
fn ours(c: &Case, dst: &mut [f32], a: &[f32], b: &[f32]) {
    let lhs = if c.lhs_t {
        MatRef::transposed(a, c.m, c.k)
    } else {
        MatRef::row_major(a, c.m, c.k)
    };
    let rhs = if c.rhs_t {
        MatRef::transposed(b, c.k, c.n)
    } else {
        MatRef::row_major(b, c.k, c.n)
    };
    let acc = if c.add {
        Accumulate::Add
    } else {
        Accumulate::Overwrite
    };
    matmul(dst, lhs, rhs, acc);
}

/// Runs the product with `gemm::gemm`, as `rl_nn` 0.1 did.
fn theirs(c: &Case, dst: &mut [f32], a: &[f32], b: &[f32]) {
    let (ars, acs) = if c.lhs_t { (1, c.m) } else { (c.k, 1) };
    let (brs, bcs) = if c.rhs_t { (1, c.k) } else { (c.n, 1) };
    assert!(dst.len() == c.m * c.n && a.len() == c.m * c.k && b.len() == c.k * c.n);
    #[allow(unsafe_code, reason = "gemm's raw-pointer API, lengths asserted above")]
    // SAFETY:
    // - `a`, `b` and `dst` hold exactly the `m x k`, `k x n` and `m x n` elements the
    //   strides address (asserted above);
    // - `dst` is borrowed mutably for the call, so nothing aliases it.
    unsafe {
        gemm::gemm(
            c.m,
            c.n,
            c.k,
            dst.as_mut_ptr(),
            1,
            c.n as isize,
            c.add,
            a.as_ptr(),
            acs as isize,
            ars as isize,
            b.as_ptr(),
            bcs as isize,
            brs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// The median of `xs`.
fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(101);
    let layers = [
        (256, 3, 256),
        (256, 4, 256),
        (256, 256, 256),
        (256, 256, 1),
        (256, 256, 2),
        (64, 4, 64),
        (64, 64, 64),
        (64, 64, 2),
        (64, 64, 1),
        // The Nature CNN's 3136 -> 512 layer: a PPO minibatch, and acting for 8 envs.
        (256, 3136, 512),
        (8, 3136, 512),
    ];
    let mut cases = Vec::new();
    for (rows, inputs, outputs) in layers {
        cases.push(Case {
            name: "forward x*W^T",
            m: rows,
            k: inputs,
            n: outputs,
            lhs_t: false,
            rhs_t: true,
            add: true,
        });
        cases.push(Case {
            name: "dW += dy^T*x",
            m: outputs,
            k: rows,
            n: inputs,
            lhs_t: true,
            rhs_t: false,
            add: true,
        });
        cases.push(Case {
            name: "dx = dy*W",
            m: rows,
            k: outputs,
            n: inputs,
            lhs_t: false,
            rhs_t: false,
            add: false,
        });
    }
    for (m, k, n) in [(512, 512, 512), (1024, 1024, 1024), (4096, 256, 256)] {
        for (name, lhs_t, rhs_t) in [
            ("larger", false, false),
            ("larger x*W^T", false, true),
            ("larger dy^T*x", true, false),
        ] {
            cases.push(Case {
                name,
                m,
                k,
                n,
                lhs_t,
                rhs_t,
                add: false,
            });
        }
    }
    println!(
        "{:<15} {:>16} {:>9} {:>9} {:>7}",
        "pass", "m x k x n", "ours", "gemm", "ratio"
    );
    for c in &cases {
        let a: Vec<f32> = (0..c.m * c.k).map(|i| (i % 17) as f32 * 0.01).collect();
        let b: Vec<f32> = (0..c.k * c.n).map(|i| (i % 13) as f32 * 0.01).collect();
        let mut dst = vec![0.0f32; c.m * c.n];
        let flops = 2.0 * (c.m * c.k * c.n) as f64;
        let iters = (2e7 / flops).ceil().max(1.0) as usize;
        let mut t_ours = Vec::with_capacity(reps);
        let mut t_gemm = Vec::with_capacity(reps);
        for _ in 0..3 {
            ours(c, &mut dst, &a, &b);
            theirs(c, &mut dst, &a, &b);
        }
        for _ in 0..reps {
            let start = Instant::now();
            for _ in 0..iters {
                ours(c, black_box(&mut dst), black_box(&a), black_box(&b));
            }
            t_ours.push(start.elapsed().as_secs_f64() / iters as f64);
            let start = Instant::now();
            for _ in 0..iters {
                theirs(c, black_box(&mut dst), black_box(&a), black_box(&b));
            }
            t_gemm.push(start.elapsed().as_secs_f64() / iters as f64);
        }
        let (o, g) = (
            flops / median(&mut t_ours) / 1e9,
            flops / median(&mut t_gemm) / 1e9,
        );
        println!(
            "{:<15} {:>16} {:>9.1} {:>9.1} {:>7.2}",
            c.name,
            format!("{}x{}x{}", c.m, c.k, c.n),
            o,
            g,
            o / g
        );
    }
}
