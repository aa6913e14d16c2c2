use proptest::prelude::*;

use super::*;

/// A deterministic stream of values in `[-1, 1]`.
pub(crate) fn values(seed: u64, len: usize) -> Vec<f32> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// A `rows x cols` view of `data` (long enough), row-major with `pad` extra elements per
/// row, or the transpose of such a `cols x rows` matrix.
fn view(data: &[f32], rows: usize, cols: usize, transposed: bool, pad: usize) -> MatRef<'_> {
    let (row_stride, col_stride) = if transposed {
        (1, rows + pad)
    } else {
        (cols + pad, 1)
    };
    MatRef {
        data,
        rows,
        cols,
        row_stride,
        col_stride,
    }
}

/// `lhs * rhs` in f64, element by element through the views.
fn naive(lhs: MatRef<'_>, rhs: MatRef<'_>) -> Vec<f64> {
    let at =
        |v: MatRef<'_>, i: usize, j: usize| f64::from(v.data[i * v.row_stride + j * v.col_stride]);
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|p| at(lhs, i, p) * at(rhs, p, j)).sum();
        }
    }
    out
}

/// The paths this machine runs, with a note for each it cannot.
fn paths() -> Vec<Isa> {
    Isa::ALL
        .into_iter()
        .filter(|path| {
            let ok = path.is_supported();
            if !ok {
                println!("note: this CPU lacks the {path:?} path; not tested here");
            }
            ok
        })
        .collect()
}

/// Shapes and layouts of one product.
#[derive(Clone, Copy, Debug)]
struct Layout {
    m: usize,
    k: usize,
    n: usize,
    lhs_t: bool,
    rhs_t: bool,
    pad_a: usize,
    pad_b: usize,
    add: bool,
}

/// Runs `layout` on every available path against the f64 product.
fn check(layout: Layout, seed: u64) -> Result<(), TestCaseError> {
    let Layout {
        m,
        k,
        n,
        lhs_t,
        rhs_t,
        pad_a,
        pad_b,
        add,
    } = layout;
    let a = values(seed, (m + pad_a) * (k + pad_a));
    let b = values(seed ^ 0x9e37_79b9, (k + pad_b) * (n + pad_b));
    let lhs = view(&a, m, k, lhs_t, pad_a);
    let rhs = view(&b, k, n, rhs_t, pad_b);
    let want = naive(lhs, rhs);
    let init = values(seed ^ 0x5555, m * n);
    let accumulate = if add {
        Accumulate::Add
    } else {
        Accumulate::Overwrite
    };
    let tol = 1e-5 * (k as f64 + 1.0);
    for path in paths() {
        let mut got = if add {
            init.clone()
        } else {
            vec![f32::NAN; m * n]
        };
        matmul_with(path, &mut got, lhs, rhs, accumulate);
        for (idx, (w, g)) in want.iter().zip(&got).enumerate() {
            let w = if add { w + f64::from(init[idx]) } else { *w };
            prop_assert!(
                (w - f64::from(*g)).abs() <= tol,
                "{path:?} {layout:?}: element {idx}: want {w}, got {g}"
            );
        }
    }
    Ok(())
}

proptest! {
    /// Every path, every transposition layout, padded strides, overwrite and add, against
    /// an f64 product, on shapes around the tile sizes.
    #[test]
    fn every_path_matches_naive(
        m in 1usize..80, k in 1usize..80, n in 1usize..80,
        lhs_t in any::<bool>(), rhs_t in any::<bool>(),
        pad_a in 0usize..3, pad_b in 0usize..3, add in any::<bool>(), seed in any::<u64>(),
    ) {
        check(Layout { m, k, n, lhs_t, rhs_t, pad_a, pad_b, add }, seed)?;
    }

    /// The matrix-vector path (one or two columns), with every `rhs` layout.
    #[test]
    fn narrow_products_match_naive(
        m in 1usize..40, k in 1usize..70, n in 1usize..9,
        lhs_t in any::<bool>(), rhs_t in any::<bool>(),
        pad_a in 0usize..3, pad_b in 0usize..3, add in any::<bool>(), seed in any::<u64>(),
    ) {
        check(Layout { m, k, n, lhs_t, rhs_t, pad_a, pad_b, add }, seed)?;
    }

    /// The rank-update path (inner dimension up to 4), with every layout.
    #[test]
    fn thin_products_match_naive(
        m in 1usize..80, k in 1usize..5, n in 1usize..80,
        lhs_t in any::<bool>(), rhs_t in any::<bool>(),
        pad_a in 0usize..3, pad_b in 0usize..3, add in any::<bool>(), seed in any::<u64>(),
    ) {
        check(Layout { m, k, n, lhs_t, rhs_t, pad_a, pad_b, add }, seed)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Shapes that cross the `KC` and `NC` blocks and leave remainders in every dimension
    /// (a few row blocks only: unoptimised test builds are slow).
    #[test]
    fn large_products_match_naive(
        m in 1usize..40, k in 200usize..600, n in 1usize..600,
        lhs_t in any::<bool>(), rhs_t in any::<bool>(),
        pad_a in 0usize..2, pad_b in 0usize..2, add in any::<bool>(), seed in any::<u64>(),
    ) {
        check(Layout { m, k, n, lhs_t, rhs_t, pad_a, pad_b, add }, seed)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Operands whose strides are multiples of 1024 floats (rows 4 KiB apart, aliasing in
    /// L1), which the blocked product packs even when they could be read in place.
    #[test]
    fn aliasing_strides_match_naive(
        m in 1usize..60, k in 1usize..300, n in 1usize..200,
        lhs_t in any::<bool>(), rhs_t in any::<bool>(), add in any::<bool>(), seed in any::<u64>(),
    ) {
        let pad_a = 1024 - if lhs_t { m } else { k };
        let pad_b = 1024 - if rhs_t { k } else { n };
        check(Layout { m, k, n, lhs_t, rhs_t, pad_a, pad_b, add }, seed)?;
    }
}

#[test]
fn layer_shapes_match_naive() {
    for (rows, inputs, outputs) in LAYER_SHAPES {
        for (m, k, n, lhs_t, rhs_t, add) in passes(rows, inputs, outputs) {
            let layout = Layout {
                m,
                k,
                n,
                lhs_t,
                rhs_t,
                pad_a: 0,
                pad_b: 0,
                add,
            };
            check(layout, (rows * 31 + inputs * 7 + outputs) as u64).unwrap();
        }
    }
}

#[test]
fn empty_products_clear_or_keep() {
    for path in paths() {
        let mut dst = vec![3.0; 6];
        let empty = view(&[], 2, 0, false, 0);
        let rhs = view(&[], 0, 3, false, 0);
        matmul_with(path, &mut dst, empty, rhs, Accumulate::Add);
        assert_eq!(dst, [3.0; 6]);
        matmul_with(path, &mut dst, empty, rhs, Accumulate::Overwrite);
        assert_eq!(dst, [0.0; 6]);
        matmul_with(
            path,
            &mut [],
            view(&[1.0; 4], 0, 4, false, 0),
            view(&[1.0; 4], 4, 1, false, 0),
            Accumulate::Overwrite,
        );
    }
}

#[test]
#[should_panic(expected = "matmul shapes")]
fn mismatched_shapes_panic() {
    let a = [1.0; 6];
    let mut dst = [0.0; 4];
    matmul_with(
        Isa::Scalar,
        &mut dst,
        view(&a, 2, 3, false, 0),
        view(&a, 2, 3, false, 0),
        Accumulate::Overwrite,
    );
}

/// `(rows, inputs, outputs)` of the layers the crate is tuned for.
const LAYER_SHAPES: [(usize, usize, usize); 9] = [
    (256, 3, 256),
    (256, 4, 256),
    (256, 256, 256),
    (256, 256, 1),
    (256, 256, 2),
    (64, 4, 64),
    (64, 64, 64),
    (64, 64, 2),
    (64, 64, 1),
];

/// A layer's three products as `(m, k, n, lhs transposed, rhs transposed, add)`: forward
/// `x W^T`, weight gradient `dy^T x`, input gradient `dy W`.
fn passes(
    rows: usize,
    inputs: usize,
    outputs: usize,
) -> [(usize, usize, usize, bool, bool, bool); 3] {
    [
        (rows, inputs, outputs, false, true, true),
        (outputs, rows, inputs, true, false, true),
        (rows, outputs, inputs, false, false, false),
    ]
}

/// After one warm-up call per shape, no product of a layer allocates, through the crate's
/// `matmul` and on every path.
#[test]
fn layer_products_allocate_nothing_after_warm_up() {
    for (rows, inputs, outputs) in LAYER_SHAPES {
        for (m, k, n, lhs_t, rhs_t, add) in passes(rows, inputs, outputs) {
            let a = values(1, m * k);
            let b = values(2, k * n);
            let mut dst = vec![0.0; m * n];
            let (lhs, rhs) = (view(&a, m, k, lhs_t, 0), view(&b, k, n, rhs_t, 0));
            let accumulate = if add {
                Accumulate::Add
            } else {
                Accumulate::Overwrite
            };
            super::super::matmul(&mut dst, lhs, rhs, accumulate);
            let ((), stats) =
                rl_testkit::measure(|| super::super::matmul(&mut dst, lhs, rhs, accumulate));
            assert_eq!(stats.allocations, 0, "matmul {m}x{k}x{n}: {stats:?}");
            for path in paths() {
                matmul_with(path, &mut dst, lhs, rhs, accumulate);
                let ((), stats) =
                    rl_testkit::measure(|| matmul_with(path, &mut dst, lhs, rhs, accumulate));
                assert_eq!(stats.allocations, 0, "{path:?} {m}x{k}x{n}: {stats:?}");
            }
        }
    }
}

/// The contract the kernel exists for: after one warm-up update, a full update of an MLP
/// (forward, backward with parameter and input gradients, clipping, Adam) allocates nothing,
/// on the shapes of small control networks.
#[test]
fn mlp_update_allocates_nothing_after_warm_up() {
    use rand::SeedableRng;

    use crate::{
        Activation, Adam, AdamConfig, Init, Mlp, MlpSpec, Module, Weights, clip_grad_norm,
    };

    for (input, hidden, output, rows) in [(3, 256, 1, 256), (4, 64, 2, 64), (4, 256, 2, 256)] {
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(7);
        let spec = MlpSpec::new(input, &[hidden, hidden], output, Activation::Tanh);
        let mut net = Mlp::new(spec, Init::Uniform, &mut rng).unwrap();
        let mut ws = net.workspace(rows);
        let mut adam = Adam::new(net.num_params(), AdamConfig::default()).unwrap();
        let mut grads = vec![0.0; net.num_params()];
        let mut input_grads = vec![0.0; rows * input];
        let x = values(3, rows * input);
        let out_grads = values(4, rows * output);
        let mut update = || {
            net.forward(&x, rows, &mut ws).unwrap();
            grads.fill(0.0);
            net.backward(
                &mut ws,
                &out_grads,
                Some(&mut grads),
                Some(&mut input_grads),
            )
            .unwrap();
            clip_grad_norm(&mut [&mut grads], 1.0).unwrap();
            adam.update(net.params_mut(), &grads).unwrap();
        };
        update();
        let ((), stats) = rl_testkit::measure(&mut update);
        assert_eq!(
            stats.allocations, 0,
            "{input}-{hidden}-{hidden}-{output} x {rows}: {stats:?}"
        );
    }
}

/// One way to run a product into a destination.
type Run<'a> = Box<dyn Fn(&mut [f32]) + 'a>;

/// The blocked driver with small blocks (so that products cross the `kc`, `mc` and `nc`
/// blocks and leave remainders in each) and with `rhs` packed or read in place, on every
/// tile shape this machine runs, against an f64 product.
fn check_blocked(layout: Layout, seed: u64, kc: usize, packed: bool) -> Result<(), TestCaseError> {
    let Layout {
        m,
        k,
        n,
        lhs_t,
        rhs_t,
        add,
        ..
    } = layout;
    let a = values(seed, m * k);
    let b = values(seed ^ 0x9e37_79b9, k * n);
    let (lhs, rhs) = (view(&a, m, k, lhs_t, 0), view(&b, k, n, rhs_t, 0));
    let want = naive(lhs, rhs);
    let init = values(seed ^ 0x5555, m * n);
    let tol = 1e-5 * (k as f64 + 1.0);
    let blocks = |mr: usize, nr: usize| cache::Blocking {
        kc,
        mc: 2 * mr,
        nc: 2 * nr,
        // A tiny L2 makes the driver pack `rhs`; a huge one reads it in place.
        l2: if packed { 64 } else { usize::MAX },
    };
    let mut runs: Vec<(&str, Run<'_>)> = vec![(
        "portable",
        Box::new(|d: &mut [f32]| drive_blocked::<Portable>(blocks(4, 8), d, lhs, rhs, add, None)),
    )];
    #[cfg(target_arch = "x86_64")]
    {
        if Isa::Avx2.is_supported() {
            runs.push((
                "avx2",
                Box::new(|d: &mut [f32]| {
                    drive_blocked::<Avx2>(blocks(6, 16), d, lhs, rhs, add, None)
                }),
            ));
            runs.push((
                "avx2 wide",
                Box::new(|d: &mut [f32]| {
                    drive_blocked::<Avx2Wide>(blocks(3, 32), d, lhs, rhs, add, None)
                }),
            ));
        }
        if Isa::Avx512.is_supported() {
            runs.push((
                "avx512",
                Box::new(|d: &mut [f32]| {
                    drive_blocked::<Avx512>(blocks(12, 32), d, lhs, rhs, add, None)
                }),
            ));
            runs.push((
                "avx512 wide",
                Box::new(|d: &mut [f32]| {
                    drive_blocked::<Avx512Wide>(blocks(6, 64), d, lhs, rhs, add, None)
                }),
            ));
        }
    }
    for (name, run) in runs {
        let mut got = if add {
            init.clone()
        } else {
            vec![f32::NAN; m * n]
        };
        run(&mut got);
        for (idx, (w, g)) in want.iter().zip(&got).enumerate() {
            let w = if add { w + f64::from(init[idx]) } else { *w };
            prop_assert!(
                (w - f64::from(*g)).abs() <= tol,
                "{name} {layout:?} kc {kc} packed {packed}: element {idx}: want {w}, got {g}"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn small_blocks_match_naive(
        m in 1usize..80, k in 1usize..120, n in 1usize..150,
        lhs_t in any::<bool>(), rhs_t in any::<bool>(), add in any::<bool>(),
        kc in prop::sample::select(vec![16usize, 32, 48]), packed in any::<bool>(), seed in any::<u64>(),
    ) {
        let layout = Layout { m, k, n, lhs_t, rhs_t, pad_a: 0, pad_b: 0, add };
        check_blocked(layout, seed, kc, packed)?;
    }
}
