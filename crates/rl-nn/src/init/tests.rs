use proptest::prelude::*;
use rand::SeedableRng;

use super::*;

/// The one-vector-at-a-time modified Gram-Schmidt the blocked one must equal.
fn one_at_a_time(vectors: &mut [Vec<f64>]) {
    for j in 0..vectors.len() {
        let (done, rest) = vectors.split_at_mut(j);
        let v = &mut rest[0];
        for q in done.iter() {
            let dot: f64 = q.iter().zip(v.iter()).map(|(a, b)| a * b).sum();
            v.iter_mut().zip(q).for_each(|(x, &qq)| *x -= dot * qq);
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let scale = if norm > 0.0 { 1.0 / norm } else { 0.0 };
        v.iter_mut().for_each(|x| *x *= scale);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The blocked Gram-Schmidt gives the bits of the one-at-a-time loop (so initial
    /// weights, and every seeded run, are what they were) on every instruction set the
    /// CPU has, for any count and length of vectors, one block or several, blocks ragged
    /// or whole, and the result is orthonormal.
    #[test]
    fn blocked_gram_schmidt_is_the_one_at_a_time_loop(
        count in 1usize..100,
        extra in 0usize..40,
        seed in any::<u64>(),
    ) {
        let len = count + extra;
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
        let vectors: Vec<Vec<f64>> = (0..count)
            .map(|_| (0..len).map(|_| StandardNormal.sample(&mut rng)).collect())
            .collect();
        let mut reference = vectors.clone();
        one_at_a_time(&mut reference);
        let mut blocked = vectors.clone();
        for isa in Isa::ALL.into_iter().filter(|isa| isa.is_supported()) {
            blocked.clone_from(&vectors);
            gram_schmidt_on(isa, &mut blocked);
            for (b, r) in blocked.iter().zip(&reference) {
                let (b, r): (Vec<u64>, Vec<u64>) =
                    (b.iter().map(|x| x.to_bits()).collect(), r.iter().map(|x| x.to_bits()).collect());
                prop_assert_eq!(b, r, "{:?}", isa);
            }
        }
        for (i, a) in blocked.iter().enumerate() {
            for (j, b) in blocked.iter().enumerate() {
                let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
                let want = if i == j { 1.0 } else { 0.0 };
                prop_assert!((dot - want).abs() < 1e-9, "<{}, {}> = {}", i, j, dot);
            }
        }
    }
}
