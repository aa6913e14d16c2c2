use proptest::prelude::*;

use super::*;

fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
        }
    }
    out
}

fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|x| a[(x % rows) * cols + x / rows])
        .collect()
}

proptest! {
    /// Every layout (plain and transposed operands, overwrite and accumulate) against a
    /// naive f64 product, on shapes around the kernels' block sizes.
    #[test]
    fn matches_naive_for_every_layout(
        m in 1usize..70, k in 1usize..70, n in 1usize..70, seed in any::<u64>()
    ) {
        let mut state = seed | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2001) as f32 / 1000.0 - 1.0
        };
        let a: Vec<f32> = (0..m * k).map(|_| next()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
        let want = naive(&a, &b, m, k, n);
        let mut got = vec![f32::NAN; m * n];
        matmul(&mut got, MatRef::row_major(&a, m, k), MatRef::row_major(&b, k, n), Accumulate::Overwrite);
        let (at, bt) = (transpose(&a, m, k), transpose(&b, k, n));
        let mut got_t = vec![1.0; m * n];
        matmul(&mut got_t, MatRef::transposed(&at, m, k), MatRef::transposed(&bt, k, n), Accumulate::Add);
        for ((w, g), gt) in want.iter().zip(&got).zip(&got_t) {
            prop_assert!((w - f64::from(*g)).abs() < 1e-4 * (k as f64).sqrt(), "{} vs {}", w, g);
            prop_assert!((w + 1.0 - f64::from(*gt)).abs() < 1e-4 * (k as f64).sqrt(), "accumulate: {} + 1 vs {}", w, gt);
        }
    }
}

#[test]
fn empty_inner_dimension_clears_or_keeps() {
    let mut dst = vec![3.0; 6];
    matmul(
        &mut dst,
        MatRef::row_major(&[], 2, 0),
        MatRef::row_major(&[], 0, 3),
        Accumulate::Add,
    );
    assert_eq!(dst, vec![3.0; 6]);
    matmul(
        &mut dst,
        MatRef::row_major(&[], 2, 0),
        MatRef::row_major(&[], 0, 3),
        Accumulate::Overwrite,
    );
    assert_eq!(dst, vec![0.0; 6]);
}

#[test]
#[should_panic(expected = "matmul shapes")]
fn a_view_outside_its_slice_is_caught() {
    let mut dst = vec![0.0; 4];
    matmul(
        &mut dst,
        MatRef::row_major(&[1.0; 3], 2, 2),
        MatRef::row_major(&[1.0; 4], 2, 2),
        Accumulate::Overwrite,
    );
}
