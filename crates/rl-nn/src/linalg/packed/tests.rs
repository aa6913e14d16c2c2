use proptest::prelude::*;

use super::*;
use crate::linalg::kernel::tests::values;
use crate::linalg::matmul;

/// The instruction sets this CPU runs.
fn paths() -> Vec<Isa> {
    [Isa::Scalar, Isa::Avx2, Isa::Avx512]
        .into_iter()
        .filter(|isa| isa.is_supported())
        .collect()
}

/// `k x n` `rhs` as a view of `data`: `W^T` of a row-major `n x k` weight (a forward
/// pass) or row-major.
fn rhs_view(data: &[f32], k: usize, n: usize, transposed: bool) -> MatRef<'_> {
    if transposed {
        MatRef::transposed(data, k, n)
    } else {
        MatRef::row_major(data, k, n)
    }
}

/// The product as `matmul` computes it on `isa` (the reference for bits).
fn reference(isa: Isa, lhs: MatRef<'_>, rhs: MatRef<'_>, start: &[f32], add: bool) -> Vec<f32> {
    let mut want = start.to_vec();
    let accumulate = if add {
        Accumulate::Add
    } else {
        Accumulate::Overwrite
    };
    kernel::matmul_with(isa, &mut want, lhs, rhs, accumulate);
    want
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Through a pack, on every path and pool size, a product has the bits of `matmul`'s;
    /// a second product at the same version reuses the panels (it still sees the old
    /// weight after the weight's memory changed behind the version's back), and a new
    /// version packs again.
    #[test]
    fn packed_products_match_matmul_and_are_reused_until_the_version_changes(
        m in 1usize..40,
        k in 1usize..300,
        n in 1usize..200,
        transposed in any::<bool>(),
        add in any::<bool>(),
        threads in 1usize..4,
        seed in any::<u64>(),
    ) {
        let pool = Pool::new(threads).unwrap();
        let pool = (threads > 1).then_some(&pool);
        let a = values(seed, m * k);
        let mut b = values(seed ^ 2, k * n);
        let start = values(seed ^ 4, m * n);
        let accumulate = if add { Accumulate::Add } else { Accumulate::Overwrite };
        let lhs = MatRef::row_major(&a, m, k);
        for isa in paths() {
            let mut pack = WeightPack::empty();
            let before = reference(isa, lhs, rhs_view(&b, k, n, transposed), &start, add);
            let mut got = start.clone();
            pack.matmul_with(isa, pool, 7, &mut got, (lhs, rhs_view(&b, k, n, transposed)), accumulate);
            prop_assert_eq!(&got, &before, "{:?} first product", isa);
            // The weight changes without a new version: a product that takes panels reuses
            // them, so it still computes with the old weight.
            let old_b = b.clone();
            b.iter_mut().for_each(|x| *x = -*x * 0.5);
            let takes_panels = kernel::panel_width(isa, lhs, rhs_view(&b, k, n, transposed)).is_some();
            let mut stale = start.clone();
            pack.matmul_with(isa, pool, 7, &mut stale, (lhs, rhs_view(&b, k, n, transposed)), accumulate);
            let after = reference(isa, lhs, rhs_view(&b, k, n, transposed), &start, add);
            if takes_panels {
                prop_assert_eq!(&stale, &before, "{:?} reused panels", isa);
            } else {
                prop_assert_eq!(&stale, &after, "{:?} thin product", isa);
            }
            // A new version packs the new weight.
            let mut fresh = start.clone();
            pack.matmul_with(isa, pool, 8, &mut fresh, (lhs, rhs_view(&b, k, n, transposed)), accumulate);
            prop_assert_eq!(&fresh, &after, "{:?} new version", isa);
            b = old_b;
        }
    }
}

/// A pack made for one row count serves another whose kernel has other panels (a few
/// rows take the wide tiles): it packs again, with the bits of `matmul`.
#[test]
fn a_row_count_with_other_tiles_packs_again() {
    let (k, n) = (70, 150);
    let w = values(3, k * n);
    let mut pack = WeightPack::empty();
    for (round, m) in [3, 20, 1, 20, 7].into_iter().enumerate() {
        let x = values(10 + round as u64, m * k);
        let (lhs, rhs) = (MatRef::row_major(&x, m, k), MatRef::transposed(&w, k, n));
        let mut want = vec![0.0; m * n];
        matmul(&mut want, lhs, rhs, Accumulate::Overwrite);
        let mut got = vec![f32::NAN; m * n];
        pack.matmul(None, 1, &mut got, lhs, rhs, Accumulate::Overwrite);
        assert_eq!(got, want, "{m} rows");
    }
}

/// Another operand (another slice, or the same one viewed with other strides) at the same
/// version is packed, not read from the panels of the first.
#[test]
fn another_operand_is_packed_again() {
    let (m, k, n) = (9, 40, 40);
    let x = values(1, m * k);
    let (w1, w2) = (values(2, k * n), values(3, k * n));
    let mut pack = WeightPack::empty();
    let lhs = MatRef::row_major(&x, m, k);
    for rhs in [
        MatRef::transposed(&w1, k, n),
        MatRef::transposed(&w2, k, n),
        MatRef::row_major(&w2, k, n),
    ] {
        let mut want = vec![0.0; m * n];
        matmul(&mut want, lhs, rhs, Accumulate::Overwrite);
        let mut got = vec![0.0; m * n];
        pack.matmul(None, 5, &mut got, lhs, rhs, Accumulate::Overwrite);
        assert_eq!(got, want);
    }
}

/// A clone has room for the panels but none of them: its first product packs (its buffer
/// may sit at another offset from a 64-byte boundary).
#[test]
fn a_clone_packs_again() {
    let (m, k, n) = (8, 64, 96);
    let x = values(1, m * k);
    let mut w = values(2, k * n);
    let mut pack = WeightPack::for_operand(k, n);
    let lhs = MatRef::row_major(&x, m, k);
    let mut out = vec![0.0; m * n];
    pack.matmul(
        None,
        3,
        &mut out,
        lhs,
        MatRef::transposed(&w, k, n),
        Accumulate::Overwrite,
    );
    w.iter_mut().for_each(|v| *v += 1.0);
    let mut clone = pack.clone();
    assert_eq!(clone.memory_bytes(), pack.memory_bytes());
    let mut want = vec![0.0; m * n];
    matmul(
        &mut want,
        lhs,
        MatRef::transposed(&w, k, n),
        Accumulate::Overwrite,
    );
    clone.matmul(
        None,
        3,
        &mut out,
        lhs,
        MatRef::transposed(&w, k, n),
        Accumulate::Overwrite,
    );
    assert_eq!(out, want);
}

/// A pack sized for its operand packs and multiplies without the allocator, on a pool too
/// (after each thread's first product of the shape).
#[test]
fn products_through_a_sized_pack_allocate_nothing() {
    let pool = Pool::new(2).unwrap();
    for (m, k, n) in [
        (8, 3136, 512),
        (1, 3136, 512),
        (256, 256, 256),
        (3, 64, 256),
    ] {
        let x = values(1, m * k);
        let w = values(2, k * n);
        let mut pack = WeightPack::for_operand(k, n);
        let (lhs, rhs) = (MatRef::row_major(&x, m, k), MatRef::transposed(&w, k, n));
        let mut out = vec![0.0; m * n];
        for version in [1, 1, 2] {
            pack.matmul(
                Some(&pool),
                version,
                &mut out,
                lhs,
                rhs,
                Accumulate::Overwrite,
            );
        }
        let ((), stats) = rl_testkit::measure(|| {
            pack.matmul(Some(&pool), 3, &mut out, lhs, rhs, Accumulate::Overwrite);
            pack.matmul(Some(&pool), 3, &mut out, lhs, rhs, Accumulate::Overwrite);
        });
        assert_eq!(stats.allocations, 0, "{m}x{k}x{n}: {stats:?}");
    }
}
