//! `cargo xtask bench nn`: the network layer's floor, on one thread (and on two where
//! said).
//!
//! Kernel figures are read against the machine's limit: the bench first measures the
//! single-core f32 FMA peak (`rl_nn::fma_peak`, on the ISA the kernels run) and every
//! product line carries `"peak_gflops"` and its `"peak_fraction"`.
//!
//! JSON lines on stdout:
//! - `{"bench":"nn","op":"matmul","m":M,"k":K,"n":N,"layout":"nn|nt|tn","gflops":X,
//!   "peak_gflops":P,"peak_fraction":F}` for the raw 256^3 product and every product the
//!   layers run: forward `x (rows x in) * W^T` (`nt`), weight gradient `dy^T * x` (`tn`)
//!   and input gradient `dy * W` (`nn`) of the 4-256-256-1 (3 and 4 inputs, 1 and 2
//!   outputs) and 4-64-64-2 networks;
//! - part `peers`: `{"bench":"nn","op":"matmul-peers","m":M,"k":K,"n":N,"layout":L,
//!   "rl_nn_gflops":X,"faer_gflops":Y,"gemm_gflops":Z,"vs_faer":X/Y,"vs_gemm":X/Z,
//!   "peak_gflops":P,"peak_fraction":X/P}` for the same shapes, the three libraries timed
//!   in interleaved rounds in one process (faer 0.24 `Par::Seq`, gemm 0.19
//!   `Parallelism::None`; both are dev-dependencies of these benches only);
//! - part `threads`: `{"bench":"nn","op":"matmul","m":256,"k":256,"n":256,"layout":L,
//!   "threads":T,"gflops":X}` and `{"bench":"nn","op":"mlp","sizes":"4-256-256-1",
//!   "batch":256,"activation":"relu","threads":T,"forward_ms":X,"forward_backward_ms":Y}`
//!   for T = 1 and 2 (`rl_nn::Pool`, SAC's critic shape), timed in alternation;
//! - `{"bench":"nn","op":"mlp","sizes":"4-256-256-1","batch":256,"activation":"relu",
//!   "forward_ms":X,"forward_backward_ms":Y}` and the same for 4-64-64-2 at batch 64 with
//!   ReLU and with tanh.
//!
//! - part `conv`: `{"bench":"nn","op":"fma_peak","gflops":X}`, then
//!   `{"bench":"nn","op":"conv2d","layer":"nature1|nature2|nature3","direction":
//!   "forward|backward|backward_weights","batch":B,"gflops":X,"peak_gflops":P,
//!   "peak_fraction":F}` for the three Nature DQN convolutions (4->32 8x8 stride 4 on
//!   84x84, 32->64 4x4 stride 2 on 20x20, 64->64 3x3 stride 1 on 9x9, ReLU fused) at
//!   batch 32 and 256, one thread: forward is the NCHW outputs with bias and ReLU;
//!   backward is the weight, bias and input gradients (twice the forward's
//!   multiply-adds), backward_weights the weight and bias gradients alone (a network's
//!   first layer: as many multiply-adds as the forward), timed after one forward; then
//!   per batch `"layer":"nature"` lines, the three layers' summed work over their summed
//!   time: `"direction":"forward_backward"` (forward and full backward of each) and
//!   `"network"` (as a network runs them: no input gradient for the first layer).
//!
//! - part `adam`: `{"bench":"nn","op":"adam","params":72449,"dead_fraction":F,
//!   "threads":T,"us":X,"ns_per_param":Y}`: one Adam step over a SAC HalfCheetah critic's
//!   parameters, a fraction `F` (0 or 0.3) of whose gradients vanished 1 000 steps before,
//!   on one thread and split over two.
//!
//! Medians of many timed repetitions after warm-up. `cargo xtask bench nn -- matmul`,
//! `-- peers`, `-- threads`, `-- mlp`, `-- conv` or `-- adam` runs one part.

mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::SplitMix;
use rand::SeedableRng;
use rl::core::simd::Isa;
use rl_nn::{
    Accumulate, Activation, Adam, AdamConfig, Conv2d, Conv2dSpec, Init, MatRef, Mlp, MlpSpec,
    Module, Pool, Weights, fma_peak, matmul, matmul_on,
};

/// `dst (m x n) = lhs (m x k) * rhs (k x n)`; `layout` names which operand is a
/// transposed view: `nn` none, `nt` the right one, `tn` the left one.
#[derive(Clone, Copy)]
struct Product {
    m: usize,
    k: usize,
    n: usize,
    layout: &'static str,
}

/// The three products of one layer `inputs -> outputs` at `rows` rows.
fn layer(rows: usize, inputs: usize, outputs: usize) -> [Product; 3] {
    [
        Product {
            m: rows,
            k: inputs,
            n: outputs,
            layout: "nt",
        },
        Product {
            m: outputs,
            k: rows,
            n: inputs,
            layout: "tn",
        },
        Product {
            m: rows,
            k: outputs,
            n: inputs,
            layout: "nn",
        },
    ]
}

/// The operands of one product.
struct Operands {
    p: Product,
    a: Vec<f32>,
    b: Vec<f32>,
    dst: Vec<f32>,
}

impl Operands {
    fn new(p: Product, rng: &mut SplitMix) -> Self {
        Operands {
            p,
            a: rng.floats(p.m * p.k, 1.0),
            b: rng.floats(p.k * p.n, 1.0),
            dst: vec![0.0f32; p.m * p.n],
        }
    }

    /// Multiply-adds times two.
    fn flops(&self) -> f64 {
        2.0 * (self.p.m * self.p.k * self.p.n) as f64
    }

    /// Products per timing: enough that one timing takes about 0.2 ms or more.
    fn inner(&self) -> usize {
        ((2e7 / self.flops()).ceil() as usize).max(1)
    }

    /// rl-nn's product, on `pool` if given.
    fn ours(&mut self, pool: Option<&Pool>) {
        let p = self.p;
        let lhs = if p.layout == "tn" {
            MatRef::transposed(&self.a, p.m, p.k)
        } else {
            MatRef::row_major(&self.a, p.m, p.k)
        };
        let rhs = if p.layout == "nt" {
            MatRef::transposed(&self.b, p.k, p.n)
        } else {
            MatRef::row_major(&self.b, p.k, p.n)
        };
        let dst = black_box(&mut self.dst[..]);
        match pool {
            Some(pool) => matmul_on(pool, dst, lhs, rhs, Accumulate::Overwrite),
            None => matmul(dst, lhs, rhs, Accumulate::Overwrite),
        }
    }

    /// faer's product, sequential.
    fn faer(&mut self) {
        let p = self.p;
        let lhs = if p.layout == "tn" {
            faer::MatRef::from_row_major_slice(&self.a, p.k, p.m).transpose()
        } else {
            faer::MatRef::from_row_major_slice(&self.a, p.m, p.k)
        };
        let rhs = if p.layout == "nt" {
            faer::MatRef::from_row_major_slice(&self.b, p.n, p.k).transpose()
        } else {
            faer::MatRef::from_row_major_slice(&self.b, p.k, p.n)
        };
        let dst = faer::MatMut::from_row_major_slice_mut(black_box(&mut self.dst[..]), p.m, p.n);
        faer::linalg::matmul::matmul(dst, faer::Accum::Replace, lhs, rhs, 1.0f32, faer::Par::Seq);
    }

    /// gemm's product, on one thread.
    fn gemm(&mut self) {
        let p = self.p;
        let (ars, acs) = if p.layout == "tn" { (1, p.m) } else { (p.k, 1) };
        let (brs, bcs) = if p.layout == "nt" { (1, p.k) } else { (p.n, 1) };
        let dst = black_box(&mut self.dst[..]);
        #[allow(
            unsafe_code,
            reason = "gemm's raw-pointer API; lengths checked by the asserts"
        )]
        // SAFETY:
        // - `dst` holds `m * n` floats (row stride `n`), `a` holds `m * k` and `b`
        //   `k * n`, read with the strides of their layouts (all elements in bounds);
        // - `dst` does not alias `a` or `b`; one thread.
        unsafe {
            assert!(dst.len() == p.m * p.n && self.a.len() == p.m * p.k);
            assert!(self.b.len() == p.k * p.n);
            gemm::gemm(
                p.m,
                p.n,
                p.k,
                dst.as_mut_ptr(),
                1,
                p.n as isize,
                false,
                self.a.as_ptr(),
                acs as isize,
                ars as isize,
                self.b.as_ptr(),
                bcs as isize,
                brs as isize,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    }
}

/// Median GFLOP/s of each runner over `reps` rounds; in each round every runner is timed
/// once, in turn, so that a loaded machine slows them alike.
fn interleaved<const N: usize>(
    ops: &mut Operands,
    reps: usize,
    runners: [&dyn Fn(&mut Operands); N],
) -> [f64; N] {
    let inner = ops.inner();
    for run in runners {
        for _ in 0..10 * inner {
            run(ops);
        }
    }
    let mut rates: [Vec<f64>; N] = std::array::from_fn(|_| Vec::with_capacity(reps));
    for _ in 0..reps {
        for (run, rates) in runners.iter().zip(&mut rates) {
            let start = Instant::now();
            for _ in 0..inner {
                run(ops);
            }
            rates.push(ops.flops() * inner as f64 / start.elapsed().as_secs_f64() / 1e9);
        }
    }
    rates.map(|mut r| common::median(&mut r))
}

/// Rounded to one decimal.
fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Rounded to three decimals.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The products of `bench nn`: the raw 256^3 product and the three of each layer.
fn products() -> Vec<Product> {
    let mut products = vec![Product {
        m: 256,
        k: 256,
        n: 256,
        layout: "nn",
    }];
    for (rows, inputs, outputs) in [
        (256, 3, 256),
        (256, 4, 256),
        (256, 256, 256),
        (256, 256, 1),
        (256, 256, 2),
        (64, 4, 64),
        (64, 64, 64),
        (64, 64, 2),
        (64, 64, 1),
    ] {
        products.extend(layer(rows, inputs, outputs));
    }
    products
}

fn matmuls(peak: f64, rng: &mut SplitMix) {
    for p in products() {
        let mut ops = Operands::new(p, rng);
        let [rate] = interleaved(&mut ops, 101, [&|o: &mut Operands| o.ours(None)]);
        println!(
            "{}",
            serde_json::json!({
                "bench": "nn", "op": "matmul", "m": p.m, "k": p.k, "n": p.n,
                "layout": p.layout, "gflops": round1(rate),
                "peak_gflops": round1(peak), "peak_fraction": round3(rate / peak),
            })
        );
    }
}

fn peers(peak: f64, rng: &mut SplitMix) {
    for p in products() {
        let mut ops = Operands::new(p, rng);
        let [ours, faer, gemm] = interleaved(
            &mut ops,
            61,
            [
                &|o: &mut Operands| o.ours(None),
                &|o: &mut Operands| o.faer(),
                &|o: &mut Operands| o.gemm(),
            ],
        );
        println!(
            "{}",
            serde_json::json!({
                "bench": "nn", "op": "matmul-peers", "m": p.m, "k": p.k, "n": p.n,
                "layout": p.layout, "rl_nn_gflops": round1(ours), "faer_gflops": round1(faer),
                "gemm_gflops": round1(gemm), "vs_faer": round3(ours / faer),
                "vs_gemm": round3(ours / gemm),
                "peak_gflops": round1(peak), "peak_fraction": round3(ours / peak),
            })
        );
    }
}

/// One and two threads on SAC's critic shapes: the 256^3 products (each layout) and a
/// 4-256-256-1 forward and backward at batch 256.
fn threads(peak: f64, rng: &mut SplitMix) -> anyhow::Result<()> {
    let two = Pool::new(2)?;
    for layout in ["nn", "nt", "tn"] {
        let p = Product {
            m: 256,
            k: 256,
            n: 256,
            layout,
        };
        let mut ops = Operands::new(p, rng);
        let rates = interleaved(
            &mut ops,
            61,
            [&|o: &mut Operands| o.ours(None), &|o: &mut Operands| {
                o.ours(Some(&two))
            }],
        );
        for (threads, rate) in [1, 2].into_iter().zip(rates) {
            println!(
                "{}",
                serde_json::json!({
                    "bench": "nn", "op": "matmul", "m": p.m, "k": p.k, "n": p.n,
                    "layout": p.layout, "threads": threads, "gflops": round1(rate),
                    "peak_gflops": round1(peak), "peak_fraction": round3(rate / peak),
                })
            );
        }
    }
    let (sizes, batch) = ([4, 256, 256, 1], 256);
    let mut seed = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(rng.next_u64());
    let spec = MlpSpec {
        sizes: sizes.to_vec(),
        activation: Activation::Relu,
    };
    let net = Mlp::new(spec, Init::Uniform, &mut seed)?;
    let input = rng.floats(batch * net.input_dim(), 1.0);
    let out_grads = rng.floats(batch * net.output_dim(), 1.0);
    let mut grads = vec![0.0f32; net.num_params()];
    let mut workspaces = [net.workspace(batch), net.workspace(batch)];
    workspaces[1].set_pool(Some(Arc::new(two)));
    let mut times: [[Vec<f64>; 2]; 2] = Default::default();
    for round in 0..1200 {
        for (ws, times) in workspaces.iter_mut().zip(&mut times) {
            let start = Instant::now();
            black_box(net.forward(&input, batch, ws)?);
            let forward = start.elapsed();
            net.backward(ws, &out_grads, Some(&mut grads), None)?;
            let both = start.elapsed();
            if round >= 200 {
                times[0].push(forward.as_secs_f64() * 1e3);
                times[1].push(both.as_secs_f64() * 1e3);
            }
        }
    }
    for (threads, [forward, both]) in [1, 2].into_iter().zip(&mut times) {
        println!(
            "{}",
            serde_json::json!({
                "bench": "nn", "op": "mlp", "sizes": "4-256-256-1", "batch": batch,
                "activation": "relu", "threads": threads,
                "forward_ms": (common::median(forward) * 1e4).round() / 1e4,
                "forward_backward_ms": (common::median(both) * 1e4).round() / 1e4,
            })
        );
    }
    Ok(())
}

fn mlp(
    sizes: &[usize],
    batch: usize,
    activation: Activation,
    rng: &mut SplitMix,
) -> anyhow::Result<()> {
    let mut seed = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(rng.next_u64());
    let spec = MlpSpec {
        sizes: sizes.to_vec(),
        activation,
    };
    let net = Mlp::new(spec, Init::Uniform, &mut seed)?;
    let mut ws = net.workspace(batch);
    let input = rng.floats(batch * net.input_dim(), 1.0);
    let out_grads = rng.floats(batch * net.output_dim(), 1.0);
    let mut grads = vec![0.0f32; net.num_params()];
    let forward_ms = common::median_ms(200, 1001, || {
        black_box(net.forward(&input, batch, &mut ws)?);
        Ok(())
    })?;
    let forward_backward_ms = common::median_ms(200, 1001, || {
        net.forward(&input, batch, &mut ws)?;
        net.backward(&mut ws, &out_grads, Some(&mut grads), None)?;
        Ok(())
    })?;
    let sizes = sizes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("-");
    println!(
        "{}",
        serde_json::json!({
            "bench": "nn", "op": "mlp", "sizes": sizes, "batch": batch,
            "activation": activation.name(),
            "forward_ms": (forward_ms * 1e4).round() / 1e4,
            "forward_backward_ms": (forward_backward_ms * 1e4).round() / 1e4,
        })
    );
    Ok(())
}

/// The Nature DQN convolutions, forward and backward, at batch 32 and 256.
fn conv(peak: f64, rng: &mut SplitMix) -> anyhow::Result<()> {
    println!(
        "{}",
        serde_json::json!({"bench": "nn", "op": "fma_peak", "gflops": round1(peak)})
    );
    let layers = [
        ("nature1", Conv2dSpec::square(4, 32, 8, 4, 0), [84, 84]),
        ("nature2", Conv2dSpec::square(32, 64, 4, 2, 0), [20, 20]),
        ("nature3", Conv2dSpec::square(64, 64, 3, 1, 0), [9, 9]),
    ];
    // Per batch: (flops, ms) of forward and full backward over all three layers, and of
    // the network's way (no input gradient for the first layer).
    let mut totals = [[(0.0f64, 0.0f64); 2]; 2];
    for (layer, (name, spec, input)) in layers.into_iter().enumerate() {
        let conv = Conv2d::new(spec, input, 0)?.with_activation(Some(Activation::Relu));
        let params = rng.floats(conv.num_params(), 0.1);
        let mut grads = vec![0.0f32; conv.num_params()];
        for (at, batch) in [32, 256].into_iter().enumerate() {
            let x = rng.floats(batch * conv.input_len(), 1.0);
            let dy = rng.floats(batch * conv.output_len(), 1.0);
            let mut dx = vec![0.0f32; x.len()];
            let mut ws = conv.workspace(batch);
            let forward_flops = 2.0 * (batch * conv.macs_per_image()) as f64;
            // About 2 s per line at 30 GFLOP/s, at least 7 repetitions.
            let reps = ((6e10 / forward_flops) as usize).clamp(7, 201) | 1;
            let forward_ms = common::median_ms(2, reps, || {
                black_box(conv.forward(&params, &x, batch, &mut ws)?);
                Ok(())
            })?;
            conv.forward(&params, &x, batch, &mut ws)?;
            let backward_ms = common::median_ms(2, (reps / 2) | 1, || {
                conv.backward(&params, &mut ws, &dy, Some(&mut grads), Some(&mut dx))?;
                Ok(())
            })?;
            // What a network runs for its first layer, whose input needs no gradient.
            let weights_ms = common::median_ms(2, (reps / 2) | 1, || {
                conv.backward(&params, &mut ws, &dy, Some(&mut grads), None)?;
                Ok(())
            })?;
            let [all, network] = &mut totals[at];
            all.0 += 3.0 * forward_flops;
            all.1 += forward_ms + backward_ms;
            let (flops, ms) = if layer == 0 {
                (2.0 * forward_flops, forward_ms + weights_ms)
            } else {
                (3.0 * forward_flops, forward_ms + backward_ms)
            };
            network.0 += flops;
            network.1 += ms;
            for (direction, flops, ms) in [
                ("forward", forward_flops, forward_ms),
                ("backward", 2.0 * forward_flops, backward_ms),
                ("backward_weights", forward_flops, weights_ms),
            ] {
                let rate = flops / (ms * 1e-3) / 1e9;
                println!(
                    "{}",
                    serde_json::json!({
                        "bench": "nn", "op": "conv2d", "layer": name, "direction": direction,
                        "batch": batch, "gflops": round1(rate),
                        "peak_gflops": round1(peak), "peak_fraction": round3(rate / peak),
                    })
                );
            }
        }
    }
    for (batch, totals) in [32, 256].into_iter().zip(totals) {
        for (direction, (flops, ms)) in ["forward_backward", "network"].into_iter().zip(totals) {
            let rate = flops / (ms * 1e-3) / 1e9;
            println!(
                "{}",
                serde_json::json!({
                    "bench": "nn", "op": "conv2d", "layer": "nature", "direction": direction,
                    "batch": batch, "gflops": round1(rate),
                    "peak_gflops": round1(peak), "peak_fraction": round3(rate / peak),
                })
            );
        }
    }
    Ok(())
}

/// Part `adam`: one Adam step over the parameters of a SAC HalfCheetah critic
/// (23-256-256-1: 72 449), on one thread and split over two (`Adam::update_on`), with no
/// dead parameters and with 30% whose gradients went to 0 a thousand steps before (the
/// weights of dead ReLU units: their first moments would sit in the subnormal range).
fn adam(rng: &mut SplitMix) -> anyhow::Result<()> {
    const PARAMS: usize = 72_449;
    let pool = Pool::new(2)?;
    for dead_fraction in [0.0, 0.3] {
        let dead = (PARAMS as f64 * dead_fraction) as usize;
        let live = rng.floats(PARAMS, 1e-3);
        let mut vanished = live.clone();
        vanished[..dead].fill(0.0);
        for threads in [1, 2] {
            let mut params = rng.floats(PARAMS, 0.1);
            let mut adam = Adam::new(PARAMS, AdamConfig::default())?;
            for _ in 0..100 {
                adam.update(&mut params, &live)?;
            }
            for _ in 0..1_000 {
                adam.update(&mut params, &vanished)?;
            }
            let ms = common::median_ms(5, 201, || {
                match threads {
                    1 => adam.update(&mut params, &vanished)?,
                    _ => adam.update_on(&pool, &mut params, &vanished)?,
                }
                Ok(())
            })?;
            println!(
                "{}",
                serde_json::json!({
                    "bench": "nn", "op": "adam", "params": PARAMS,
                    "dead_fraction": dead_fraction, "threads": threads,
                    "us": round1(ms * 1e3), "ns_per_param": round3(ms * 1e6 / PARAMS as f64),
                })
            );
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let only = common::args();
    let wants = |part: &str| only.is_empty() || only.iter().any(|a| a == part);
    let mut rng = SplitMix(7);
    let kernels = ["matmul", "peers", "threads", "conv"];
    let peak = if kernels.iter().any(|part| wants(part)) {
        fma_peak(Isa::detect(), 201, Duration::from_millis(1)).gflops
    } else {
        0.0
    };
    if wants("matmul") {
        matmuls(peak, &mut rng);
    }
    if wants("peers") {
        peers(peak, &mut rng);
    }
    if wants("threads") {
        threads(peak, &mut rng)?;
    }
    if wants("conv") {
        conv(peak, &mut rng)?;
    }
    if wants("mlp") {
        mlp(&[4, 256, 256, 1], 256, Activation::Relu, &mut rng)?;
        mlp(&[4, 64, 64, 2], 64, Activation::Relu, &mut rng)?;
        mlp(&[4, 64, 64, 2], 64, Activation::Tanh, &mut rng)?;
    }
    if wants("adam") {
        adam(&mut rng)?;
    }
    Ok(())
}
