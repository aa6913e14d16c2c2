//! The chunked scorer against naive full computations in `f64`, and tiled against
//! untiled.

#![allow(
    clippy::needless_range_loop,
    reason = "the naive models index rows and actions like the maths does"
)]

use super::*;
use crate::kernels::Isa;
use crate::mask::ActionMask;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;

/// Naive full scores (batch x n), masked to -inf.
fn naive_scores(t: &FeatureTable, q: &[f32], masks: Masks<'_>) -> Vec<Vec<f64>> {
    q.chunks(t.dim())
        .enumerate()
        .map(|(b, qb)| {
            (0..t.rows())
                .map(|i| {
                    if masks.allowed(b, i as u32) {
                        f64::from(dot(qb, t.row(i).unwrap()))
                    } else {
                        f64::NEG_INFINITY
                    }
                })
                .collect()
        })
        .collect()
}

fn naive_log_probs(s: &[f64]) -> Vec<f64> {
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = m + s.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
    s.iter().map(|x| x - lse).collect()
}

fn close(a: f32, b: f64) -> bool {
    (f64::from(a) - b).abs() <= 1e-5 * (1.0 + b.abs())
        || (a == f32::NEG_INFINITY && b == f64::NEG_INFINITY)
}

type Case = (
    usize,
    usize,
    usize,
    Vec<f32>,
    Vec<f32>,
    Vec<f32>,
    Vec<Vec<bool>>,
    Vec<u32>,
);

fn case() -> impl Strategy<Value = Case> {
    (1usize..25, 1usize..4, 1usize..4).prop_flat_map(|(n, d, batch)| {
        (
            Just(n),
            Just(d),
            Just(batch),
            proptest::collection::vec(-3.0f32..3.0, n * d),
            proptest::collection::vec(-3.0f32..3.0, n * d),
            proptest::collection::vec(-2.0f32..2.0, batch * d),
            proptest::collection::vec(proptest::collection::vec(any::<bool>(), n), batch),
            proptest::collection::vec(0..n as u32, batch),
        )
    })
}

fn masks_from(bits: &[Vec<bool>], actions: &[u32]) -> Vec<ActionMask> {
    bits.iter()
        .zip(actions)
        .map(|(row, &a)| {
            let mut m = ActionMask::none(row.len() as u32);
            for (i, &on) in row.iter().enumerate() {
                if on {
                    m.allow(i as u32).unwrap();
                }
            }
            m.allow(a).unwrap(); // at least one available action per row
            m
        })
        .collect()
}

/// Every operation of a scorer over `t` (or, with `identity`, of an identity scorer,
/// `t` then being the n x n unit matrix) against the naive f64 model, for every
/// compiled copy of the kernels.
#[allow(clippy::too_many_arguments, reason = "a test driver")]
fn check_ops(
    t: &FeatureTable,
    qt: &FeatureTable,
    q: &[f32],
    n: usize,
    d: usize,
    batch: usize,
    bits: &[Vec<bool>],
    actions: &[u32],
    identity: bool,
) -> std::result::Result<(), TestCaseError> {
    let (q, actions) = (q.to_vec(), actions.to_vec());
    let row_masks = masks_from(bits, &actions);
    for masks in [Masks::None, Masks::PerRow(&row_masks)] {
        let s = naive_scores(t, &q, masks);
        let qv = naive_scores(qt, &q, Masks::None);
        for chunk in [1, 7, n, n + 3] {
            for isa in Isa::available() {
                let mut sc = if identity {
                    ChunkedScorer::identity(n as u32, chunk, batch).unwrap()
                } else {
                    ChunkedScorer::new(t.clone(), chunk, batch).unwrap()
                }
                .with_isa(isa);
                let mut out = vec![0.0; batch];
                sc.log_softmax(&q, &actions, masks, &mut out).unwrap();
                for b in 0..batch {
                    let lp = naive_log_probs(&s[b]);
                    prop_assert!(
                        close(out[b], lp[actions[b] as usize]),
                        "log_softmax {} {}",
                        out[b],
                        lp[actions[b] as usize]
                    );
                }
                sc.entropy(&q, masks, &mut out).unwrap();
                for b in 0..batch {
                    let lp = naive_log_probs(&s[b]);
                    let h: f64 = lp
                        .iter()
                        .filter(|x| x.is_finite())
                        .map(|x| -x.exp() * x)
                        .sum();
                    prop_assert!(close(out[b], h), "entropy {} {}", out[b], h);
                }
                let mut values = |r: Range<usize>, buf: &mut [f32]| dot_scores(qt, &q, r, buf);
                sc.expectation(&q, masks, &mut values, &mut out).unwrap();
                for b in 0..batch {
                    let lp = naive_log_probs(&s[b]);
                    let e: f64 = lp
                        .iter()
                        .zip(&qv[b])
                        .filter(|(x, _)| x.is_finite())
                        .map(|(x, v)| x.exp() * v)
                        .sum();
                    prop_assert!(close(out[b], e), "expectation {} {}", out[b], e);
                }
                let mut full = vec![0.0; batch * n];
                sc.full_distribution(&q, masks, &mut full).unwrap();
                for b in 0..batch {
                    let lp = naive_log_probs(&s[b]);
                    for i in 0..n {
                        prop_assert!((f64::from(full[b * n + i]) - lp[i].exp()).abs() < 1e-5);
                    }
                }
                // top-k equals sorting (score desc, index asc) among available actions.
                let k = (1..=n).map(|k| k.min(3)).max().unwrap();
                let avail = (0..batch)
                    .map(|b| s[b].iter().filter(|x| x.is_finite()).count())
                    .min()
                    .unwrap();
                let k = k.min(avail);
                let (mut ti, mut ts) = (vec![0u32; batch * k], vec![0.0f32; batch * k]);
                sc.top_k(&q, masks, k, &mut ti, &mut ts).unwrap();
                for b in 0..batch {
                    let mut order: Vec<(f32, u32)> = (0..n as u32)
                        .filter(|&i| s[b][i as usize].is_finite())
                        .map(|i| (dot(&q[b * d..(b + 1) * d], t.row(i as usize).unwrap()), i))
                        .collect();
                    order.sort_by(|a, c| c.0.total_cmp(&a.0).then(a.1.cmp(&c.1)));
                    let want: Vec<u32> = order[..k].iter().map(|p| p.1).collect();
                    prop_assert_eq!(&ti[b * k..(b + 1) * k], &want[..]);
                }
                // Samples are always available actions.
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(chunk as u64);
                let mut picks = vec![0u32; batch];
                for method in [Sampling::GumbelMax, Sampling::InverseCdf] {
                    sc.sample(&q, masks, method, &mut rng, &mut picks).unwrap();
                    for b in 0..batch {
                        prop_assert!(masks.allowed(b, picks[b]) && (picks[b] as usize) < n);
                    }
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn chunked_equals_naive((n, d, batch, f, g, q, bits, actions) in case()) {
        let t = FeatureTable::new(n, d, f).unwrap();
        let qt = FeatureTable::new(n, d, g.clone()).unwrap();
        check_ops(&t, &qt, &q, n, d, batch, &bits, &actions, false)?;
        // Identity scoring: q is batch x n, the model's table the unit matrix.
        let eye = FeatureTable::new(n, n, (0..n * n).map(|i| f32::from(u8::from(i % (n + 1) == 0))).collect()).unwrap();
        let qt = FeatureTable::new(n, n, (0..n * n).map(|i| g[i % g.len()]).collect()).unwrap();
        let qi: Vec<f32> = (0..batch * n).map(|i| q[i % q.len()] * 1.5 + g[i % g.len()]).collect();
        check_ops(&eye, &qt, &qi, n, n, batch, &bits, &actions, true)?;
    }
}

fn small() -> (FeatureTable, Vec<f32>) {
    let f = vec![1.0, 0.0, 0.5, 0.5, 0.0, 1.0, -1.0, 0.0, 0.2, -0.3];
    (FeatureTable::new(5, 2, f).unwrap(), vec![1.0, 0.7])
}

#[test]
fn sampling_frequencies_match_softmax() {
    let (t, q) = small();
    let mut mask = ActionMask::all(5);
    mask.forbid(2).unwrap();
    for masks in [Masks::None, Masks::Shared(&mask)] {
        let s = naive_scores(&t, &q, masks);
        let p: Vec<f64> = naive_log_probs(&s[0]).iter().map(|x| x.exp()).collect();
        for method in [Sampling::GumbelMax, Sampling::InverseCdf] {
            let mut sc = ChunkedScorer::new(t.clone(), 2, 1).unwrap();
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(42);
            let draws = 40_000;
            let mut counts = [0usize; 5];
            let mut out = [0u32];
            for _ in 0..draws {
                sc.sample(&q, masks, method, &mut rng, &mut out).unwrap();
                counts[out[0] as usize] += 1;
            }
            for i in 0..5 {
                let expected = p[i] * draws as f64;
                let sigma = (draws as f64 * p[i] * (1.0 - p[i])).sqrt();
                assert!(
                    (counts[i] as f64 - expected).abs() <= 5.0 * sigma.max(1e-9),
                    "{method:?} action {i}: {} vs {expected}",
                    counts[i]
                );
            }
        }
    }
}

#[test]
fn soft_value_is_expectation_plus_alpha_entropy() {
    let (t, q) = small();
    let mut sc = ChunkedScorer::new(t.clone(), 3, 1).unwrap();
    let qv = [1.0f32, -2.0, 0.5, 3.0, 0.0];
    let alpha = 0.3;
    let (mut e, mut h) = ([0.0], [0.0]);
    let mut values = |r: Range<usize>, buf: &mut [f32]| {
        buf.copy_from_slice(&qv[r]);
        Ok(())
    };
    sc.expectation(&q, Masks::None, &mut values, &mut e)
        .unwrap();
    sc.entropy(&q, Masks::None, &mut h).unwrap();
    let lp = naive_log_probs(&naive_scores(&t, &q, Masks::None)[0]);
    let want: f64 = lp
        .iter()
        .zip(qv)
        .map(|(l, v)| l.exp() * (f64::from(v) - f64::from(alpha) * l))
        .sum();
    assert!(close(e[0] + alpha * h[0], want));
}

#[test]
fn errors_are_typed() {
    let (t, q) = small();
    let mut sc = ChunkedScorer::new(t, 2, 1).unwrap();
    let mut out = [0.0];
    assert!(matches!(
        sc.log_softmax(&q, &[5], Masks::None, &mut out),
        Err(Error::ActionOutOfRange { index: 5, n: 5 })
    ));
    let none = ActionMask::none(5);
    assert!(matches!(
        sc.entropy(&q, Masks::Shared(&none), &mut out),
        Err(Error::InvalidConfig { .. })
    ));
    let (mut ti, mut ts) = ([0u32; 6], [0.0f32; 6]);
    assert!(sc.top_k(&q, Masks::None, 6, &mut ti, &mut ts).is_err());
    assert!(matches!(
        sc.entropy(&[1.0, 0.0, 0.0, 1.0], Masks::None, &mut [0.0; 2]),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(ChunkedScorer::new(small().0, 0, 1).is_err());
}

#[test]
fn chunked_operations_allocate_nothing_after_construction() {
    let (n, d, batch, chunk) = (1000, 8, 4, 64);
    let data = (0..n * d)
        .map(|x| ((x * 7919) % 101) as f32 / 50.0 - 1.0)
        .collect();
    let t = FeatureTable::new(n, d, data).unwrap();
    let qt = t.clone();
    let mut sc = ChunkedScorer::new(t, chunk, batch).unwrap();
    assert!(sc.table().is_some_and(|t| t.shares_storage_with(&qt)));
    let q: Vec<f32> = (0..batch * d).map(|x| x as f32 / 10.0 - 1.0).collect();
    let mut mask = ActionMask::all(n as u32);
    mask.forbid(3).unwrap();
    let (mut out, mut picks) = (vec![0.0; batch], vec![0u32; batch]);
    let (mut ti, mut ts) = (vec![0u32; batch * 5], vec![0.0; batch * 5]);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    let actions = [0u32, 3, 999, 500];
    let (result, stats) = rl_testkit::measure(|| -> Result<()> {
        for masks in [Masks::None, Masks::Shared(&mask)] {
            sc.log_softmax(&q, &actions, masks, &mut out)?;
            sc.log_sum_exp(&q, masks, &mut out)?;
            sc.entropy(&q, masks, &mut out)?;
            let mut values = |r: Range<usize>, buf: &mut [f32]| dot_scores(&qt, &q, r, buf);
            sc.expectation(&q, masks, &mut values, &mut out)?;
            sc.sample(&q, masks, Sampling::GumbelMax, &mut rng, &mut picks)?;
            sc.sample(&q, masks, Sampling::InverseCdf, &mut rng, &mut picks)?;
            sc.top_k(&q, masks, 5, &mut ti, &mut ts)?;
        }
        Ok(())
    });
    result.unwrap();
    assert_eq!(stats.allocations, 0, "{stats:?}");
    let plan = sc.memory_plan();
    assert_eq!(plan.lines()[1].bytes, (2 * batch * chunk * 4) as u64);
}

#[test]
fn updated_tables_score_like_new_scorers_and_leave_shared_handles_alone() {
    let table = FeatureTable::new(5, 2, (0..10).map(|x| x as f32 / 10.0).collect()).unwrap();
    let mut scorer = ChunkedScorer::new(table.clone(), 2, 1).unwrap();
    let doubled = scorer
        .update_table(|values| {
            values.iter_mut().for_each(|v| *v *= 2.0);
            values.len()
        })
        .unwrap();
    assert_eq!(doubled, 10);
    assert_eq!(
        table.row(1).unwrap(),
        &[0.2, 0.3],
        "the shared handle changed"
    );
    let fresh = FeatureTable::new(5, 2, (0..10).map(|x| x as f32 / 5.0).collect()).unwrap();
    let mut reference = ChunkedScorer::new(fresh, 2, 1).unwrap();
    let q = [0.7, -1.3];
    let (mut a, mut b) = ([0.0f32; 1], [0.0f32; 1]);
    scorer.log_sum_exp(&q, Masks::None, &mut a).unwrap();
    reference.log_sum_exp(&q, Masks::None, &mut b).unwrap();
    assert!((a[0] - b[0]).abs() < 1e-6, "{a:?} vs {b:?}");
    let mut identity = ChunkedScorer::identity(5, 2, 1).unwrap();
    assert!(identity.update_table(|_| ()).is_err());
}

#[test]
fn sampling_non_finite_scores_is_an_error_not_an_out_of_range_action() {
    let mut scorer = ChunkedScorer::identity(4, 2, 1).unwrap();
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(0);
    let mut out = [7u32];
    let result = scorer.sample(
        &[f32::NAN; 4],
        Masks::None,
        Sampling::InverseCdf,
        &mut rng,
        &mut out,
    );
    assert!(result.is_err(), "{result:?} {out:?}");
    assert_eq!(out, [7], "nothing written on error");
    scorer
        .sample(
            &[0.0, 1.0, 2.0, 3.0],
            Masks::None,
            Sampling::InverseCdf,
            &mut rng,
            &mut out,
        )
        .unwrap();
    assert!(out[0] < 4);
}

#[test]
fn large_scores_stay_stable() {
    // Scores around 1e4: a naive exp overflows, the streaming form does not.
    let t = FeatureTable::new(3, 1, vec![10_000.0, 10_001.0, 9_000.0]).unwrap();
    let mut sc = ChunkedScorer::new(t, 1, 1).unwrap();
    let mut out = [0.0];
    sc.log_softmax(&[1.0], &[1], Masks::None, &mut out).unwrap();
    let want = -(1.0 + (-1.0f64).exp()).ln();
    assert!(close(out[0], want), "{} vs {want}", out[0]);
    sc.entropy(&[1.0], Masks::None, &mut out).unwrap();
    let p = [(-1.0f64).exp(), 1.0].map(|w| w / (1.0 + (-1.0f64).exp()));
    let h: f64 = p.iter().map(|p| -p * p.ln()).sum();
    assert!(close(out[0], h), "{} vs {h}", out[0]);
}

#[test]
fn hundred_thousand_actions_in_bounded_scratch() {
    let (n, d, batch, chunk) = (100_000, 8, 4, 4096);
    let data = (0..n * d)
        .map(|x| ((x * 31) % 97) as f32 / 97.0 - 0.5)
        .collect();
    let mut sc = ChunkedScorer::new(FeatureTable::new(n, d, data).unwrap(), chunk, batch).unwrap();
    let q: Vec<f32> = (0..batch * d).map(|x| (x % 5) as f32 - 2.0).collect();
    let mut h = vec![0.0; batch];
    sc.entropy(&q, Masks::None, &mut h).unwrap();
    assert!(
        h.iter()
            .all(|h| h.is_finite() && *h > 0.0 && *h <= (n as f32).ln() + 1e-3)
    );
    let plan = sc.memory_plan();
    assert_eq!(plan.lines()[0].bytes, 3_200_000, "table, once");
    assert_eq!(plan.lines()[1].bytes, (2 * batch * chunk * 4) as u64);
    assert!(plan.lines()[1].bytes < (batch * n * 4) as u64);
}

#[test]
fn top_k_breaks_ties_by_lower_index_like_a_stable_sort() {
    let t = FeatureTable::new(6, 1, vec![1.0, 3.0, 3.0, 2.0, 3.0, 0.0]).unwrap();
    for chunk in [1, 2, 4, 6] {
        let mut sc = ChunkedScorer::new(t.clone(), chunk, 1).unwrap();
        let (mut ti, mut ts) = ([0u32; 4], [0.0f32; 4]);
        sc.top_k(&[1.0], Masks::None, 4, &mut ti, &mut ts).unwrap();
        assert_eq!(ti, [1, 2, 4, 3]);
        assert_eq!(ts, [3.0, 3.0, 3.0, 2.0]);
    }
}

#[test]
fn tiles_span_sixteen_kib_of_table_in_blocks_of_64_actions() {
    let table = |d: usize| FeatureTable::new(1000, d, vec![0.5; 1000 * d]).unwrap();
    assert_eq!(ChunkedScorer::new(table(8), 2048, 1).unwrap().tile(), 512);
    assert_eq!(ChunkedScorer::new(table(8), 300, 1).unwrap().tile(), 300);
    assert_eq!(ChunkedScorer::new(table(3), 2048, 1).unwrap().tile(), 1000);
    assert_eq!(ChunkedScorer::new(table(100), 2048, 1).unwrap().tile(), 64);
    assert_eq!(ChunkedScorer::identity(1000, 700, 1).unwrap().tile(), 700);
}

/// `a` and `b` agree to a few f32 roundings of the terms' scale.
fn tight(a: f32, b: f32, scale: f32) -> bool {
    (a - b).abs() <= 2e-5 * (scale + a.abs().max(b.abs())) || a == b
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Tiling changes only how per-tile f32 sums are grouped before their f64 merge:
    /// every softmax quantity, the discrete-SAC loss, value and gradient agree with the
    /// untiled scorer (one tile per chunk) to f32 rounding; top-k and Gumbel-max samples
    /// are the same.
    #[test]
    fn tiled_equals_untiled((n, d, batch, f, g, q, bits, actions) in case(), tile in 1usize..9) {
        let t = FeatureTable::new(n, d, f).unwrap();
        let qt = FeatureTable::new(n, d, g.clone()).unwrap();
        let row_masks = masks_from(&bits, &actions);
        let g1: Vec<f32> = (0..batch * d).map(|i| g[i % g.len()]).collect();
        let g2: Vec<f32> = (0..batch * d).map(|i| -0.5 * g[(i + 1) % g.len()]).collect();
        for masks in [Masks::None, Masks::PerRow(&row_masks)] {
            for isa in Isa::available() {
                let chunk = n.div_ceil(2);
                let make = |tile: usize| {
                    ChunkedScorer::new(t.clone(), chunk, batch).unwrap().with_isa(isa).with_tile(tile)
                };
                let (mut whole, mut tiled) = (make(chunk), make(tile));
                prop_assert_eq!(whole.tile(), chunk);
                let run = |sc: &mut ChunkedScorer| {
                    let mut out = vec![vec![0.0f32; batch]; 7];
                    let mut grad = vec![0.0f32; batch * d];
                    let [lsm, h, e, loss, ent, v, lse] = &mut out[..] else { unreachable!() };
                    sc.log_softmax(&q, &actions, masks, lsm).unwrap();
                    sc.entropy(&q, masks, h).unwrap();
                    sc.log_sum_exp(&q, masks, lse).unwrap();
                    let mut values = |r: Range<usize>, buf: &mut [f32]| dot_scores(&qt, &q, r, buf);
                    sc.expectation(&q, masks, &mut values, e).unwrap();
                    sc.soft_policy_loss(&q, [&g1, &g2], 0.3, masks, loss, ent, &mut grad).unwrap();
                    sc.soft_value(&q, [&g1, &g2], 0.3, masks, v).unwrap();
                    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
                    let mut picks = vec![0u32; batch];
                    sc.sample(&q, masks, Sampling::GumbelMax, &mut rng, &mut picks).unwrap();
                    let k = 1;
                    let (mut ti, mut ts) = (vec![0u32; batch * k], vec![0.0f32; batch * k]);
                    sc.top_k(&q, masks, k, &mut ti, &mut ts).unwrap();
                    (out, grad, picks, ti)
                };
                let (a, ga, pa, ta) = run(&mut whole);
                let (b, gb, pb, tb) = run(&mut tiled);
                // Terms reach |s| + |Q| of at most about 3 d x 2 x 3 each.
                let scale = 20.0 * d as f32;
                for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                    for (&x, &y) in x.iter().zip(y) {
                        prop_assert!(tight(x, y, scale), "{isa:?} output {i}: {x} vs {y}");
                    }
                }
                for (&x, &y) in ga.iter().zip(&gb) {
                    prop_assert!(tight(x, y, scale), "{isa:?} gradient: {x} vs {y}");
                }
                prop_assert_eq!(pa, pb);
                prop_assert_eq!(ta, tb);
            }
        }
    }
}

/// The inverse CDF in f64 of one row's scores at `u`, and how close `u` came to a
/// boundary between two available actions.
fn naive_inverse_cdf(s: &[f64], u: f64) -> (u32, f64) {
    let lp = naive_log_probs(s);
    let (mut cdf, mut pick, mut gap) = (0.0, u32::MAX, f64::INFINITY);
    for (i, l) in lp.iter().enumerate() {
        if l.is_finite() {
            cdf += l.exp();
            gap = gap.min((cdf - u).abs());
            if pick == u32::MAX && u < cdf {
                pick = i as u32;
            }
        }
    }
    (pick, gap)
}

#[test]
fn inverse_cdf_draws_one_uniform_per_row_and_walks_to_the_f64_answer_at_any_tiling() {
    // 3 000 actions over several chunks and tiles: the random stream is one f32 per row
    // (as before tiling), and the pick is the f64 inverse CDF of that draw except where
    // the draw lies within rounding of a boundary.
    let (n, d, batch) = (3000, 4, 3);
    let data = (0..n * d)
        .map(|x| ((x * 7919) % 101) as f32 / 40.0 - 1.2)
        .collect();
    let t = FeatureTable::new(n, d, data).unwrap();
    let q: Vec<f32> = (0..batch * d).map(|x| (x % 5) as f32 * 0.4 - 0.8).collect();
    let s = naive_scores(&t, &q, Masks::None);
    let mut skipped = 0;
    for (chunk, tile) in [(3000, 3000), (1024, 512), (1024, 64), (700, 1)] {
        for isa in Isa::available() {
            let mut sc = ChunkedScorer::new(t.clone(), chunk, batch)
                .unwrap()
                .with_isa(isa)
                .with_tile(tile);
            for seed in 0..200 {
                let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
                let mut twin = rng.clone();
                let mut picks = [0u32; 3];
                sc.sample(&q, Masks::None, Sampling::InverseCdf, &mut rng, &mut picks)
                    .unwrap();
                for (b, &pick) in picks.iter().enumerate() {
                    let u = f64::from(twin.random::<f32>());
                    let (want, gap) = naive_inverse_cdf(&s[b], u);
                    // The f32 walk (fast exp, f32 mass left) is good to about 1e-5.
                    if gap < 1e-5 {
                        skipped += 1;
                        continue;
                    }
                    assert_eq!(pick, want, "{isa:?} chunk {chunk} tile {tile} seed {seed}");
                }
                assert_eq!(rng, twin, "one draw per row, nothing more");
            }
        }
    }
    // A boundary every ~1/3000 of the unit interval: about 6% of draws fall near one.
    let draws = 4 * Isa::available().len() * 200 * batch;
    assert!(
        skipped * 8 < draws,
        "{skipped} of {draws} draws near a boundary"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// The plan from sizes alone is the built scorer's, table or identity.
    #[test]
    fn plans_from_sizes_are_the_built_scorers(
        n in 1usize..300,
        dim in 1usize..9,
        chunk in 1usize..400,
        max_batch in 1usize..80,
    ) {
        let table = FeatureTable::new(n, dim, vec![0.25; n * dim]).unwrap();
        let built = ChunkedScorer::new(table, chunk, max_batch).unwrap();
        let shape = ScorerShape::Table { rows: n, dim };
        prop_assert_eq!(ChunkedScorer::plan(shape, chunk, max_batch).unwrap(), built.memory_plan());
        let built = ChunkedScorer::identity(n as u32, chunk, max_batch).unwrap();
        let shape = ScorerShape::Identity { n };
        prop_assert_eq!(ChunkedScorer::plan(shape, chunk, max_batch).unwrap(), built.memory_plan());
    }
}

#[test]
fn plans_of_zero_or_overflowing_sizes_are_errors() {
    let table = ScorerShape::Table { rows: 10, dim: 4 };
    assert!(ChunkedScorer::plan(table, 0, 8).is_err());
    assert!(ChunkedScorer::plan(ScorerShape::Identity { n: 0 }, 4, 8).is_err());
    let huge = ScorerShape::Table {
        rows: usize::MAX / 2,
        dim: 8,
    };
    let e = ChunkedScorer::plan(huge, 4, 8).unwrap_err().to_string();
    assert!(e.contains("smaller"), "{e}");
}
