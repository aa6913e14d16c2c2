#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;

use super::*;
use crate::conv::tests::{bits, random, rng};
use crate::conv::{Conv2d, Conv2dSpec};

/// The input gradients of `spec` on `input` for output gradients `dy` at outputs `y`.
fn run(
    g: &Geometry,
    isa: Isa,
    activation: Option<Activation>,
    (dy, y): (&[f32], &[f32]),
    weight: &[f32],
    batch: usize,
) -> Vec<f32> {
    let mut panels = vec![f32::NAN; panels_len(g).unwrap()];
    let mut scratch = vec![f32::NAN; scratch_len(g, batch).unwrap()];
    let mut dx = vec![f32::NAN; batch * g.cin * g.h * g.w];
    input_grad(
        g,
        isa,
        None,
        activation,
        (dy, y),
        weight,
        &mut panels,
        &mut scratch,
        &mut dx,
        false,
    );
    dx
}

/// Each input position lies in exactly one block and phase between `first` and `end`,
/// every tap a block sums reads an output gradient of the frame, and the taps left out
/// reach no output.
#[test]
fn blocks_cover_the_input_once_and_live_taps_read_gradients() {
    let cases = [
        (8, 4, 0, 84),
        (4, 2, 0, 20),
        (3, 1, 0, 9),
        (3, 2, 1, 7),
        (1, 3, 0, 5),
        (2, 3, 2, 4),
        (5, 2, 2, 6),
    ];
    for (k, s, p, n) in cases {
        let outputs = (n + 2 * p - k) / s + 1;
        let blocks = Blocks::new(k, s, p, n, outputs);
        let mut seen = vec![0; n];
        for b in blocks.first..blocks.end {
            for r in 0..s {
                if let Some(x) = blocks.input(b, r) {
                    seen[x] += 1;
                }
            }
        }
        assert!(
            seen.iter().all(|&c| c == 1),
            "k {k} s {s} p {p} n {n}: {seen:?}"
        );
        for b in blocks.first..blocks.end {
            // Tap m' reads output row b + m' - (taps - 1), at frame index + lead.
            let live = blocks.live(b);
            for m in 0..blocks.taps {
                let frame = b + m + blocks.lead + 1 - blocks.taps;
                assert!(frame < blocks.len, "k {k} s {s} p {p} n {n}");
                let reads = (blocks.lead..blocks.lead + outputs).contains(&frame);
                assert_eq!(
                    live.contains(&m),
                    reads,
                    "k {k} s {s} p {p} n {n} block {b} tap {m}"
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// The activation's derivative applied while staging gives the bits of the
    /// derivative applied first (as the output-gradient tiles hold it), on every
    /// instruction set.
    #[test]
    fn staging_applies_the_activation(
        cin in 1usize..20, cout in 1usize..20, kernel in 1usize..5, stride in 1usize..3,
        padding in 0usize..2, extra in 0usize..11, batch in 1usize..9, seed in any::<u64>(),
    ) {
        let spec = Conv2dSpec::square(cin, cout, kernel, stride, padding);
        let side = kernel.saturating_sub(2 * padding).max(1) + extra;
        let g = Conv2d::new(spec, [side, side], 0).unwrap().geometry();
        let mut r = rng(seed);
        let dy = random(&mut r, batch * g.out * g.positions());
        let y = random(&mut r, dy.len());
        let weight = random(&mut r, g.out * g.fan_in());
        for activation in [Activation::Relu, Activation::Tanh] {
            let mut derived = dy.clone();
            activation.backward(&y, &mut derived);
            for isa in Isa::ALL.into_iter().filter(|isa| isa.is_supported()) {
                let staged = run(&g, isa, Some(activation), (&dy, &y), &weight, batch);
                let first = run(&g, isa, None, (&derived, &derived), &weight, batch);
                prop_assert_eq!(bits(&staged), bits(&first), "{:?} {:?}", activation, isa);
            }
        }
    }
}
