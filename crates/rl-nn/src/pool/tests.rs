use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use rand::SeedableRng;

use super::*;
use crate::{
    Accumulate, Activation, Init, MatRef, Mlp, MlpSpec, Module, Weights, matmul, matmul_on,
};

#[test]
fn zero_or_too_many_threads_are_config_errors() {
    for threads in [0, MAX_THREADS + 1] {
        let err = Pool::new(threads).unwrap_err();
        assert!(
            matches!(&err, Error::Config { what, .. } if what == "threads"),
            "{err}"
        );
    }
    assert_eq!(Pool::new(1).unwrap().threads(), 1);
    assert_eq!(Pool::new(3).unwrap().threads(), 3);
}

#[test]
fn every_task_runs_once_on_its_own_thread() {
    let pool = Pool::new(3).unwrap();
    for round in 0..200 {
        let tasks = 1 + round % 3;
        let counts: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        let caller = std::thread::current().id();
        let on_caller = AtomicUsize::new(usize::MAX);
        pool.run(tasks, &|task| {
            counts[task].fetch_add(1, Ordering::Relaxed);
            if std::thread::current().id() == caller {
                on_caller.store(task, Ordering::Relaxed);
            }
        });
        let seen: Vec<usize> = counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        let want: Vec<usize> = (0..3).map(|t| usize::from(t < tasks)).collect();
        assert_eq!(seen, want, "round {round}");
        assert_eq!(
            on_caller.load(Ordering::Relaxed),
            0,
            "task 0 runs on the caller"
        );
    }
}

#[test]
fn a_panicking_task_reaches_the_caller_after_all_tasks_end() {
    let pool = Pool::new(2).unwrap();
    let finished = AtomicUsize::new(0);
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        pool.run(2, &|task| {
            if task == 1 {
                panic!("task 1 fails");
            }
            finished.fetch_add(1, Ordering::Relaxed);
        });
    }));
    assert!(result.is_err());
    assert_eq!(finished.load(Ordering::Relaxed), 1);
    // The pool still works afterwards.
    let ran = AtomicUsize::new(0);
    pool.run(2, &|_| {
        ran.fetch_add(1, Ordering::Relaxed);
    });
    assert_eq!(ran.load(Ordering::Relaxed), 2);
}

/// Workers that outlast the caller's spin (so the caller sleeps on `done` and must be
/// woken by the last of them) and workers that finish first (no signal at all), mixed
/// with idle gaps longer than the workers' spin (so they sleep between jobs): every call
/// returns, after all of its tasks. A lost wake-up would hang, so a watchdog fails the
/// test instead.
#[test]
fn a_caller_asleep_on_slow_workers_is_always_woken() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let pool = Pool::new(3).unwrap();
        for round in 0..60u64 {
            let ran = AtomicUsize::new(0);
            let tasks = 2 + (round % 2) as usize;
            pool.run(tasks, &|task| {
                if task > 0 && round % 3 != 0 {
                    std::thread::sleep(Duration::from_micros(500 * (round % 5 + 1)));
                }
                ran.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(ran.load(Ordering::Relaxed), tasks, "round {round}");
            if round % 4 == 0 {
                std::thread::sleep(SPIN * 2);
            }
        }
        done.send(()).unwrap();
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("a call on the pool never returned (a lost wake-up) or panicked");
}

#[test]
fn concurrent_callers_take_turns() {
    let pool = Arc::new(Pool::new(2).unwrap());
    let total = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..3)
        .map(|_| {
            let (pool, total) = (Arc::clone(&pool), Arc::clone(&total));
            std::thread::spawn(move || {
                for _ in 0..100 {
                    pool.run(2, &|_| {
                        total.fetch_add(1, Ordering::Relaxed);
                    });
                }
            })
        })
        .collect();
    for caller in callers {
        caller.join().unwrap();
    }
    assert_eq!(total.load(Ordering::Relaxed), 3 * 100 * 2);
}

/// Deterministic values in [-1, 1).
fn values(seed: u64, len: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// The bits of `dst` after `product` from the same starting values.
fn bits(dst: &[f32]) -> Vec<u32> {
    dst.iter().map(|x| x.to_bits()).collect()
}

/// `matmul_on` on 1, 2 and 3 threads against `matmul` on one, bit for bit, for an
/// `m x k x n` product with the given layouts (transposed operands, adding); a pool of
/// more than one thread must have split it.
fn split_matches_one_thread(
    (m, k, n): (usize, usize, usize),
    (lhs_t, rhs_t, add): (bool, bool, bool),
    seed: u64,
) -> Result<(), TestCaseError> {
    let a = values(seed, m * k);
    let b = values(seed ^ 1, k * n);
    let lhs = if lhs_t {
        MatRef::transposed(&a, m, k)
    } else {
        MatRef::row_major(&a, m, k)
    };
    let rhs = if rhs_t {
        MatRef::transposed(&b, k, n)
    } else {
        MatRef::row_major(&b, k, n)
    };
    let accumulate = if add {
        Accumulate::Add
    } else {
        Accumulate::Overwrite
    };
    let start = values(seed ^ 2, m * n);
    let mut want = start.clone();
    matmul(&mut want, lhs, rhs, accumulate);
    for threads in 1..=3 {
        let pool = Pool::new(threads).unwrap();
        let mut got = start.clone();
        matmul_on(&pool, &mut got, lhs, rhs, accumulate);
        prop_assert_eq!(bits(&got), bits(&want), "{} threads", threads);
        prop_assert_eq!(pool.splits(), u64::from(threads > 1), "{} threads", threads);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Products large enough to be split give the same bits on 1, 2 and 3 threads as
    /// `matmul` on one, for every layout, overwriting and adding.
    #[test]
    fn split_products_are_bit_identical(
        m in 30usize..200, k in 180usize..300, n in 190usize..300,
        lhs_t in any::<bool>(), rhs_t in any::<bool>(), add in any::<bool>(), seed in any::<u64>(),
    ) {
        prop_assert!(crate::linalg::parallel_rows_for_tests(m, k, n, 2) < m, "not split");
        split_matches_one_thread((m, k, n), (lhs_t, rhs_t, add), seed)?;
    }

    /// Products with too few rows to split by rows (acting on a few observations through
    /// a wide layer) are split by blocks of columns and give the same bits on 1, 2 and 3
    /// threads as `matmul` on one, for every layout, overwriting and adding.
    #[test]
    fn short_products_split_by_columns_are_bit_identical(
        m in 1usize..=12, k in 300usize..1200, n in 300usize..700,
        lhs_t in any::<bool>(), rhs_t in any::<bool>(), add in any::<bool>(), seed in any::<u64>(),
    ) {
        prop_assume!(m * k * n >= 1 << 20);
        prop_assert!(crate::linalg::parallel_rows_for_tests(m, k, n, 2) >= m, "split by rows");
        prop_assert!(crate::linalg::parallel_cols_for_tests(m, k, n, 2) < n, "not split by columns");
        split_matches_one_thread((m, k, n), (lhs_t, rhs_t, add), seed)?;
    }

    /// An MLP's forward and backward pass (outputs, parameter and input gradients) give
    /// the same bits on 1, 2 and 3 threads as without a pool.
    #[test]
    fn mlp_passes_are_bit_identical(
        input in 3usize..12, hidden in 100usize..300, rows in 40usize..200,
        tanh in any::<bool>(), seed in any::<u64>(),
    ) {
        let activation = if tanh { Activation::Tanh } else { Activation::Relu };
        let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
        let net = Mlp::new(MlpSpec::new(input, &[hidden, hidden], 1, activation), Init::Uniform, &mut rng).unwrap();
        let x = values(seed ^ 3, rows * input);
        let dy = values(seed ^ 4, rows);
        let pass = |pool: Option<Arc<Pool>>| {
            let mut ws = net.workspace(rows);
            ws.set_pool(pool);
            let out = net.forward(&x, rows, &mut ws).unwrap().to_vec();
            let mut grads = vec![0.0; net.num_params()];
            let mut dx = vec![0.0; rows * input];
            net.backward(&mut ws, &dy, Some(&mut grads), Some(&mut dx)).unwrap();
            (bits(&out), bits(&grads), bits(&dx))
        };
        let want = pass(None);
        for threads in 1..=3 {
            let got = pass(Some(Arc::new(Pool::new(threads).unwrap())));
            prop_assert!(got == want, "{} threads differ", threads);
        }
    }
}

#[test]
fn column_split_products_allocate_nothing_after_warm_up() {
    let pool = Pool::new(2).unwrap();
    let (m, k, n) = (8, 3136, 512);
    let (a, b) = (values(1, m * k), values(2, k * n));
    let mut dst = vec![0.0; m * n];
    let (lhs, rhs) = (MatRef::row_major(&a, m, k), MatRef::transposed(&b, k, n));
    matmul_on(&pool, &mut dst, lhs, rhs, Accumulate::Overwrite);
    // The worker's first product of this shape may still be growing its buffers.
    matmul_on(&pool, &mut dst, lhs, rhs, Accumulate::Add);
    let ((), stats) = rl_testkit::measure(|| matmul_on(&pool, &mut dst, lhs, rhs, Accumulate::Add));
    assert_eq!(stats.allocations, 0, "{stats:?}");
    assert_eq!(pool.splits(), 3);
}

#[test]
fn split_products_allocate_nothing_on_the_caller_after_warm_up() {
    let pool = Pool::new(2).unwrap();
    let (m, k, n) = (256, 256, 256);
    let (a, b) = (values(1, m * k), values(2, k * n));
    let mut dst = vec![0.0; m * n];
    let (lhs, rhs) = (MatRef::row_major(&a, m, k), MatRef::transposed(&b, k, n));
    matmul_on(&pool, &mut dst, lhs, rhs, Accumulate::Overwrite);
    let ((), stats) =
        rl_testkit::measure(|| matmul_on(&pool, &mut dst, lhs, rhs, Accumulate::Overwrite));
    assert_eq!(stats.allocations, 0, "{stats:?}");
}

#[test]
fn join_runs_the_halves_on_two_threads_and_returns_both_results() {
    let pool = Pool::new(2).unwrap();
    let caller = std::thread::current().id();
    for _ in 0..100 {
        let (a, b) = pool.join(
            || (std::thread::current().id(), 1u8),
            || (std::thread::current().id(), "b"),
        );
        assert_eq!(a, (caller, 1));
        assert_ne!(b.0, caller, "the second half runs on the worker");
        assert_eq!(b.1, "b");
    }
    // One thread: both halves on the caller, in order.
    let order = Mutex::new(Vec::new());
    let one = Pool::new(1).unwrap();
    one.join(
        || order.lock().unwrap().push('a'),
        || order.lock().unwrap().push('b'),
    );
    assert_eq!(*order.lock().unwrap(), ['a', 'b']);
}

/// Products that would be split, run inside both halves of a `join` on the same pool
/// (as SAC's twin critics do), neither deadlock nor change a bit: each half computes
/// them alone.
#[test]
fn products_inside_join_run_alone_and_bit_identical() {
    let pool = Pool::new(2).unwrap();
    let (m, k, n) = (256, 256, 256);
    let (a, b) = (values(5, m * k), values(6, k * n));
    let (lhs, rhs) = (MatRef::row_major(&a, m, k), MatRef::row_major(&b, k, n));
    let mut want = vec![0.0; m * n];
    matmul(&mut want, lhs, rhs, Accumulate::Overwrite);
    let splits = pool.splits();
    let (mut left, mut right) = (vec![0.0; m * n], vec![0.0; m * n]);
    pool.join(
        || matmul_on(&pool, &mut left, lhs, rhs, Accumulate::Overwrite),
        || matmul_on(&pool, &mut right, lhs, rhs, Accumulate::Overwrite),
    );
    assert_eq!(
        pool.splits(),
        splits + 1,
        "only the join itself used the workers"
    );
    assert_eq!(bits(&left), bits(&want));
    assert_eq!(bits(&right), bits(&want));
    // The pool splits products again once the join is over.
    matmul_on(&pool, &mut left, lhs, rhs, Accumulate::Overwrite);
    assert_eq!(pool.splits(), splits + 2);
}

#[test]
fn a_panicking_half_reaches_the_caller_and_the_pool_survives() {
    let pool = Pool::new(2).unwrap();
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        pool.join(|| 1, || -> u8 { panic!("the second half fails") })
    }));
    assert!(result.is_err());
    assert_eq!(pool.join(|| 2, || 3), (2, 3));
}

/// The first half of a join stays on the calling thread, so it may hold what cannot
/// leave it (an `Rc`, as an environment holding Python objects might): it runs there
/// while the second half runs on the worker, at the same time.
#[test]
fn join_keeps_a_first_half_that_is_not_send_on_the_caller() {
    use std::rc::Rc;
    use std::sync::Barrier;

    let pool = Pool::new(2).unwrap();
    let caller = std::thread::current().id();
    let local = Rc::new(std::cell::Cell::new(0));
    // Both halves wait for each other: they finish only if they run side by side.
    let met = Barrier::new(2);
    for round in 1..=20 {
        let (a, b) = pool.join(
            || {
                met.wait();
                local.set(local.get() + 1);
                (std::thread::current().id(), Rc::clone(&local))
            },
            || {
                met.wait();
                std::thread::current().id()
            },
        );
        assert_eq!(a.0, caller);
        assert_ne!(b, caller);
        assert_eq!(a.1.get(), round);
    }
}
