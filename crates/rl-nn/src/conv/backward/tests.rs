#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::conv::tests::{bits, random, rng};
use crate::conv::transposed;
use crate::conv::{Conv2d, Conv2dSpec};

/// One layer's backward inputs: the staged images, the output gradients (NCHW) and their
/// tiles, and the weight.
struct Case {
    g: Geometry,
    batch: usize,
    x: Vec<f32>,
    staged: Vec<f32>,
    dy: Vec<f32>,
    gyp: Vec<f32>,
    weight: Vec<f32>,
}

impl Case {
    fn new(spec: Conv2dSpec, input: [usize; 2], batch: usize, seed: u64) -> Self {
        let conv = Conv2d::new(spec, input, 0).unwrap();
        let g = conv.geometry();
        let mut r = rng(seed);
        let x = random(&mut r, batch * conv.input_len());
        let dy = random(&mut r, batch * conv.output_len());
        let weight = random(&mut r, g.out * g.fan_in());
        let mut staged = vec![0.0; batch * g.staged_len()];
        for b in 0..batch {
            g.stage(&x, b, &mut staged, &|v: f32| v);
        }
        let rows = batch * g.positions();
        let mut gyp = vec![f32::NAN; grads_len(g.out, rows)];
        gather(
            Isa::Scalar,
            None,
            (g.out, g.positions()),
            (&dy, &dy),
            &mut gyp,
            None,
            None,
        );
        Self {
            g,
            batch,
            x,
            staged,
            dy,
            gyp,
            weight,
        }
    }

    fn rows(&self) -> usize {
        self.batch * self.g.positions()
    }

    /// `dy[b, o, oy, ox]`.
    fn dy(&self, b: usize, o: usize, pos: usize) -> f64 {
        let p = self.g.positions();
        f64::from(self.dy[(b * self.g.out + o) * p + pos])
    }

    /// The input at padded coordinates `(iy, ix)` of channel `c` of image `b`, with the
    /// flat index of the unpadded input if inside it.
    fn input_at(&self, b: usize, c: usize, iy: usize, ix: usize) -> Option<usize> {
        let g = &self.g;
        let (iy, ix) = (iy.checked_sub(g.ph)?, ix.checked_sub(g.pw)?);
        (iy < g.h && ix < g.w).then(|| ((b * g.cin + c) * g.h + iy) * g.w + ix)
    }

    /// Calls `f(b, o, pos, j, input index)` for every product term of the convolution
    /// whose input is inside the image.
    fn each_term(&self, mut f: impl FnMut(usize, usize, usize, usize, usize)) {
        let g = &self.g;
        for b in 0..self.batch {
            for pos in 0..g.positions() {
                let (oy, ox) = (pos / g.ow, pos % g.ow);
                for j in 0..g.fan_in() {
                    let (c, rest) = (j / (g.kh * g.kw), j % (g.kh * g.kw));
                    let (iy, ix) = (oy * g.sh + rest / g.kw, ox * g.sw + rest % g.kw);
                    if let Some(i) = self.input_at(b, c, iy, ix) {
                        for o in 0..g.out {
                            f(b, o, pos, j, i);
                        }
                    }
                }
            }
        }
    }

    /// `dW` and `dX` by direct loops in f64.
    fn reference(&self) -> (Vec<f64>, Vec<f64>) {
        let fan_in = self.g.fan_in();
        let mut dw = vec![0.0; self.g.out * fan_in];
        let mut dx = vec![0.0; self.x.len()];
        self.each_term(|b, o, pos, j, i| {
            dw[o * fan_in + j] += self.dy(b, o, pos) * f64::from(self.x[i]);
            dx[i] += self.dy(b, o, pos) * f64::from(self.weight[o * fan_in + j]);
        });
        (dw, dx)
    }

    /// `(dW, dX)` from the kernels: `dW` added onto ones, `dX` divided by 255 if `div255`.
    fn run(&self, isa: Isa, pool: Option<&Pool>, div255: bool) -> (Vec<f32>, Vec<f32>) {
        let g = &self.g;
        let mut panels = vec![f32::NAN; panels_len(g).unwrap()];
        let mut dw = vec![1.0; g.out * g.fan_in()];
        weight_grad(
            g,
            isa,
            pool,
            &self.staged,
            &self.gyp,
            self.rows(),
            &mut panels,
            &mut dw,
        );
        let mut panels = vec![f32::NAN; transposed::panels_len(g).unwrap()];
        let mut scratch = vec![f32::NAN; transposed::scratch_len(g, self.batch).unwrap()];
        let mut dx = vec![f32::NAN; self.x.len()];
        transposed::input_grad(
            g,
            isa,
            pool,
            None,
            (&self.dy, &self.dy),
            &self.weight,
            &mut panels,
            &mut scratch,
            &mut dx,
            div255,
        );
        (dw, dx)
    }

    /// The kernels of `isa` against the reference.
    fn check(&self, isa: Isa) {
        let (want_dw, want_dx) = self.reference();
        let (dw, dx) = self.run(isa, None, false);
        let close = |a: f32, b: f64| (f64::from(a) - b).abs() <= 1e-4 * (1.0 + b.abs());
        for (i, (&a, &b)) in dw.iter().zip(&want_dw).enumerate() {
            assert!(
                close(a - 1.0, b),
                "{isa:?} {:?} dW {i}: {a} - 1 vs {b}",
                self.g
            );
        }
        for (i, (&a, &b)) in dx.iter().zip(&want_dx).enumerate() {
            assert!(close(a, b), "{isa:?} {:?} dX {i}: {a} vs {b}", self.g);
        }
        let (_, scaled) = self.run(isa, None, true);
        for (&s, &a) in scaled.iter().zip(&dx) {
            assert_eq!(s.to_bits(), (a / 255.0).to_bits(), "{isa:?} {:?}", self.g);
        }
    }
}

/// Every instruction set this CPU runs.
fn isas() -> Vec<Isa> {
    Isa::ALL
        .into_iter()
        .filter(|isa| isa.is_supported())
        .collect()
}

#[test]
fn kernels_match_loops_on_nature_like_layers() {
    let cases = [
        // Several row blocks of the weight gradient, edge tiles in both directions.
        (Conv2dSpec::square(3, 20, 3, 1, 0), [9, 9], 45),
        (Conv2dSpec::square(2, 17, 4, 2, 1), [12, 11], 7),
        // A kernel row longer than 8 floats (runs split), wide padding.
        (
            Conv2dSpec {
                in_channels: 2,
                out_channels: 5,
                kernel: [2, 11],
                stride: [1, 3],
                padding: [1, 4],
            },
            [6, 20],
            8,
        ),
        (Conv2dSpec::square(4, 32, 8, 4, 0), [36, 36], 7),
    ];
    for (seed, (spec, input, batch)) in cases.into_iter().enumerate() {
        let case = Case::new(spec, input, batch, seed as u64);
        for isa in isas() {
            case.check(isa);
        }
    }
}

/// The output-gradient tiles hold `dy` through each activation's derivative, bit for
/// bit on every instruction set (edge channels and positions included), and the bias
/// sums agree across instruction sets and pools of 1 to 3 threads (tiles split between
/// tasks), bit for bit, and with f64.
#[test]
fn output_gradient_tiles_and_bias() {
    // 35 channels: three tiles, the last one partial.
    let case = Case::new(Conv2dSpec::square(2, 35, 3, 2, 1), [9, 10], 3, 9);
    let g = &case.g;
    let rows = case.rows();
    let y: Vec<f32> = case.dy.iter().map(|v| v * 0.5).collect();
    let pools: Vec<Option<Arc<Pool>>> = [1, 2, 3]
        .into_iter()
        .map(|threads| (threads > 1).then(|| Arc::new(Pool::new(threads).unwrap())))
        .collect();
    for activation in [None, Some(Activation::Relu), Some(Activation::Tanh)] {
        let mut biases = Vec::new();
        for (isa, pool) in isas()
            .into_iter()
            .flat_map(|isa| pools.iter().map(move |p| (isa, p)))
        {
            let mut gyp = vec![f32::NAN; grads_len(g.out, rows)];
            let mut bias = vec![1.0; g.out];
            let dims = (g.out, g.positions());
            let splits = pool.as_ref().map(|p| p.splits());
            gather(
                isa,
                activation,
                dims,
                (&case.dy, &y),
                &mut gyp,
                Some(&mut bias),
                pool.as_deref(),
            );
            if let (Some(pool), Some(before)) = (pool, splits) {
                assert!(pool.splits() > before, "{isa:?}: the tiles were not split");
            }
            let mut sums = vec![0.0f64; g.out];
            for r in 0..rows {
                let (b, pos) = (r / g.positions(), r % g.positions());
                for o in 0..g.out.next_multiple_of(NR) {
                    let got = gyp[((o / NR) * rows + r) * NR + o % NR];
                    if o >= g.out {
                        assert_eq!(got.to_bits(), 0.0f32.to_bits());
                        continue;
                    }
                    let i = (b * g.out + o) * g.positions() + pos;
                    let mut want = [case.dy[i]];
                    if let Some(activation) = activation {
                        activation.backward(&y[i..=i], &mut want);
                    }
                    assert_eq!(
                        got.to_bits(),
                        want[0].to_bits(),
                        "{isa:?} row {r} channel {o}"
                    );
                    sums[o] += f64::from(want[0]);
                }
            }
            for (o, (&b, &s)) in bias.iter().zip(&sums).enumerate() {
                assert!(
                    (f64::from(b) - 1.0 - s).abs() < 1e-5,
                    "bias {o}: {b} - 1 vs {s}"
                );
            }
            biases.push(bits(&bias));
        }
        assert!(biases.windows(2).all(|w| w[0] == w[1]), "{activation:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Both kernels against direct loops for any geometry (edge tiles of channels, patch
    /// columns and images), on every instruction set, bit-identical between the SIMD
    /// instruction sets and on pools of 2 and 3 threads.
    #[test]
    fn kernels_match_loops_for_any_geometry(
        cin in 1usize..4, cout in 1usize..40,
        kernel in [1usize..5, 1usize..11], stride in [1usize..4, 1usize..4],
        padding in [0usize..3, 0usize..3], extra in [0usize..6, 0usize..6],
        batch in 1usize..15, seed in any::<u64>(),
    ) {
        let spec = Conv2dSpec { in_channels: cin, out_channels: cout, kernel, stride, padding };
        let input = [0, 1].map(|d| (kernel[d].saturating_sub(2 * padding[d])).max(1) + extra[d]);
        let case = Case::new(spec, input, batch, seed);
        for isa in isas() {
            case.check(isa);
        }
        // The AVX-512 kernels (two 16-wide tiles at once) sum every element in the same
        // order as the AVX2 ones: the same bits.
        let simd: Vec<_> = isas()
            .into_iter()
            .filter(|&isa| isa != Isa::Scalar)
            .map(|isa| case.run(isa, None, false))
            .collect();
        for pair in simd.windows(2) {
            prop_assert_eq!(bits(&pair[0].0), bits(&pair[1].0), "dW across instruction sets");
            prop_assert_eq!(bits(&pair[0].1), bits(&pair[1].1), "dX across instruction sets");
        }
        let alone = case.run(Isa::detect(), None, false);
        for threads in [2, 3] {
            let pool = Arc::new(Pool::new(threads).unwrap());
            let (dw, dx) = case.run(Isa::detect(), Some(&pool), false);
            prop_assert_eq!(bits(&dw), bits(&alone.0), "dW on {} threads", threads);
            prop_assert_eq!(bits(&dx), bits(&alone.1), "dX on {} threads", threads);
        }
    }
}
