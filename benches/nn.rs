//! `cargo xtask bench nn`: the network layer's floor, on one thread.
//!
//! JSON lines on stdout:
//! - `{"bench":"nn","op":"matmul","m":M,"k":K,"n":N,"layout":"nn|nt|tn","gflops":X}` for
//!   the raw 256^3 product and every product the layers run: forward `x (rows x in) *
//!   W^T` (`nt`), weight gradient `dy^T * x` (`tn`) and input gradient `dy * W` (`nn`) of
//!   the 4-256-256-1 (3 and 4 inputs, 1 and 2 outputs) and 4-64-64-2 networks;
//! - `{"bench":"nn","op":"mlp","sizes":"4-256-256-1","batch":256,"activation":"relu",
//!   "forward_ms":X,"forward_backward_ms":Y}` and the same for 4-64-64-2 at batch 64 with
//!   ReLU and with tanh.
//!
//! Medians of many timed repetitions after warm-up. `cargo xtask bench nn -- matmul` or
//! `-- mlp` runs one part.

mod common;

use std::hint::black_box;
use std::time::Instant;

use common::SplitMix;
use rand::SeedableRng;
use rl_nn::{Accumulate, Activation, Init, MatRef, Mlp, MlpSpec, Module, Weights, matmul};

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

fn gflops(p: Product, reps: usize, rng: &mut SplitMix) -> f64 {
    let a = rng.floats(p.m * p.k, 1.0);
    let b = rng.floats(p.k * p.n, 1.0);
    let mut dst = vec![0.0f32; p.m * p.n];
    let lhs = if p.layout == "tn" {
        MatRef::transposed(&a, p.m, p.k)
    } else {
        MatRef::row_major(&a, p.m, p.k)
    };
    let rhs = if p.layout == "nt" {
        MatRef::transposed(&b, p.k, p.n)
    } else {
        MatRef::row_major(&b, p.k, p.n)
    };
    // Enough products per timing that one timing takes about 0.2 ms or more.
    let flops = 2.0 * (p.m * p.k * p.n) as f64;
    let inner = ((2e7 / flops).ceil() as usize).max(1);
    for _ in 0..10 * inner {
        matmul(&mut dst, lhs, rhs, Accumulate::Overwrite);
    }
    let mut rates = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        for _ in 0..inner {
            matmul(black_box(&mut dst), lhs, rhs, Accumulate::Overwrite);
        }
        rates.push(flops * inner as f64 / start.elapsed().as_secs_f64() / 1e9);
    }
    black_box(&dst);
    common::median(&mut rates)
}

fn matmuls(rng: &mut SplitMix) {
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
    for p in products {
        let rate = gflops(p, 101, rng);
        println!(
            "{}",
            serde_json::json!({
                "bench": "nn", "op": "matmul", "m": p.m, "k": p.k, "n": p.n,
                "layout": p.layout, "gflops": (rate * 10.0).round() / 10.0,
            })
        );
    }
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

fn main() -> anyhow::Result<()> {
    let only = common::args();
    let wants = |part: &str| only.is_empty() || only.iter().any(|a| a == part);
    let mut rng = SplitMix(7);
    if wants("matmul") {
        matmuls(&mut rng);
    }
    if wants("mlp") {
        mlp(&[4, 256, 256, 1], 256, Activation::Relu, &mut rng)?;
        mlp(&[4, 64, 64, 2], 64, Activation::Relu, &mut rng)?;
        mlp(&[4, 64, 64, 2], 64, Activation::Tanh, &mut rng)?;
    }
    Ok(())
}
