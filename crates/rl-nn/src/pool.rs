//! A fixed set of threads that large matrix products are split across.
//!
//! [`Pool::new`] starts `threads - 1` workers once; the calling thread is the first of
//! the `threads`. A product on the pool ([`matmul_on`](crate::matmul_on), or a network
//! whose workspace holds the pool, [`MlpWorkspace::set_pool`](crate::MlpWorkspace::set_pool))
//! hands each worker a contiguous block of `dst` rows and runs the first block itself:
//! no allocation, no thread started, per call. Each element of `dst` is computed by one
//! thread in the same order of summation as on one thread, so results are bit-identical
//! whatever the number of threads.
//!
//! Why a value handed to the workspace rather than a global: the process keeps no hidden
//! state (a library embedded in a learner with its own threads decides per network), the
//! pool's threads end when its last handle is dropped, and tests run several pools side
//! by side.

#![allow(
    unsafe_code,
    reason = "the task closure's lifetime is erased while the caller waits for every worker"
)]

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// At most this many threads per pool (far above any core count this crate is tuned for;
/// a typo such as 1000 is an error rather than a thousand threads).
pub const MAX_THREADS: usize = 256;

/// Worker threads for large products, started once ([`Pool::new`]) and shared by the
/// networks that hold it (an `Arc<Pool>`). Dropping the last handle stops the workers.
///
/// Runs one product at a time: concurrent callers take turns.
pub struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Held by the caller of [`Pool::run`] for the whole call.
    caller: Mutex<()>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("threads", &self.threads())
            .finish()
    }
}

/// What the caller and the workers share. The job's progress is in atomics so that a
/// thread that has just finished a product sees the next one without sleeping: waking a
/// thread from the kernel costs 50-150 us on these VMs, as much as half a 256^3 product,
/// so workers and the waiting caller spin for [`SPIN`] before they sleep (the way OpenMP
/// runtimes do).
struct Shared {
    state: Mutex<State>,
    /// Counts posted jobs; a worker runs each generation once. Written under `state`'s
    /// lock (so a worker that checks it under the lock before sleeping misses no job),
    /// read without it while spinning.
    generation: AtomicU64,
    /// Workers of the current job still running.
    pending: AtomicUsize,
    /// Whether the caller sleeps on `done` (set under `state`'s lock): the last worker
    /// of a job takes the lock and signals only then. An unconditional signal under the
    /// lock cost a system call per product, and the caller, finding the lock held by
    /// it, slept in the kernel too: about 20 futex calls per SAC update.
    caller_asleep: AtomicBool,
    /// Whether a worker of the current job panicked.
    panicked: AtomicBool,
    /// Signalled when a job is posted to sleeping workers or the pool shuts down.
    wake: Condvar,
    /// Signalled when the last worker of a job finishes.
    done: Condvar,
}

/// What is read and written under the lock.
struct State {
    job: Option<Job>,
    /// Workers asleep on `wake` (the caller notifies only when there are some).
    sleepers: usize,
    shutdown: bool,
}

/// How long a worker waits for the next job, and the caller for its workers, before
/// sleeping: long enough to bridge the gaps between the products of one update
/// (activations, losses, Adam) and an environment step between two updates (a MuJoCo
/// step through Gymnasium takes 0.1-0.3 ms), short enough that an idle pool costs
/// little (past [`SPIN_HOT`] the spinning thread yields its core). At 200 us the worker
/// slept through every SAC HalfCheetah env step and the next update waited 50-100 us
/// for it to wake (Zen 4 VM: 0.08 ms an update in all); at 1 ms, 0.03.
const SPIN: Duration = Duration::from_millis(1);

/// How long [`spin_until`] spins before it also yields the core between checks.
const SPIN_HOT: Duration = Duration::from_micros(20);

/// Spins until `ready()` or [`SPIN`] has passed; whether `ready()` held. After
/// [`SPIN_HOT`] it yields the core between checks, so that on a machine with more
/// runnable threads than cores the thread it waits for (or another process) gets to run.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        let waited = start.elapsed();
        if waited >= SPIN {
            return ready();
        }
        if waited >= SPIN_HOT {
            std::thread::yield_now();
        }
    }
}

/// A task closure with its lifetime erased, and how many tasks it has.
#[derive(Clone, Copy)]
struct Job {
    task: *const (dyn Fn(usize) + Sync + 'static),
    tasks: usize,
}

// SAFETY:
// - the closure behind `task` is `Sync`, so calling it from other threads is sound;
// - `Pool::run` keeps it alive until every worker has finished with it.
unsafe impl Send for Job {}

impl Pool {
    /// A pool of `threads` threads in all: the caller plus `threads - 1` workers.
    ///
    /// # Errors
    /// [`Error::Config`] if `threads` is 0 or above [`MAX_THREADS`], or if the operating
    /// system refuses to start a thread.
    pub fn new(threads: usize) -> Result<Pool> {
        if threads == 0 || threads > MAX_THREADS {
            return Err(Error::Config {
                what: "threads".into(),
                problem: format!(
                    "is {threads}; use 1 to {MAX_THREADS} (1 runs on the calling thread only)"
                ),
            });
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                job: None,
                sleepers: 0,
                shutdown: false,
            }),
            generation: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            caller_asleep: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            wake: Condvar::new(),
            done: Condvar::new(),
        });
        let mut pool = Pool {
            shared,
            workers: Vec::with_capacity(threads - 1),
            caller: Mutex::new(()),
        };
        for index in 1..threads {
            let shared = Arc::clone(&pool.shared);
            let worker = std::thread::Builder::new()
                .name(format!("rl-nn-{index}"))
                .spawn(move || work(&shared, index))
                .map_err(|err| Error::Config {
                    what: "threads".into(),
                    problem: format!("is {threads} but thread {index} could not start: {err}"),
                })?;
            // On an early return, `Drop` stops the workers already started.
            pool.workers.push(worker);
        }
        Ok(pool)
    }

    /// Threads in all, the caller's included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `a` on the calling thread and `b` on the first worker at the same time and
    /// returns both results (on a pool of one thread, `a` then `b`). Products inside
    /// either half that would be split run on that half's thread alone, so each half
    /// computes exactly what it computes on its own: results are bit-identical whatever
    /// the pool's size. `a` never leaves the calling thread, so it need not be `Send`
    /// (an environment holding Python objects steps there while `b` acts). Allocates
    /// nothing.
    ///
    /// # Panics
    /// If either half panicked (after both have finished).
    pub fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA,
        B: FnOnce() -> RB + Send,
        RB: Send,
    {
        let first = CallerOnly(RefCell::new((Some(a), None)));
        let second = (Mutex::new(Some(b)), Mutex::new(None));
        let run_a = || {
            first.with(|(a, result)| {
                if let Some(a) = a.take() {
                    *result = Some(a());
                }
            });
        };
        let run_b = || {
            if let Some(b) = lock(&second.0).take() {
                *lock(&second.1) = Some(b());
            }
        };
        self.run(self.threads().min(2), &|index| {
            if index == 0 {
                run_a();
                // One thread in all: the second half follows on the caller.
                if self.threads() == 1 {
                    run_b();
                }
            } else {
                run_b();
            }
        });
        let ra = first.0.into_inner().1;
        let rb = second
            .1
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        match (ra, rb) {
            (Some(ra), Some(rb)) => (ra, rb),
            _ => unreachable!("Pool::run returns after both halves ran"),
        }
    }

    /// Calls that ran on more than one thread so far: split products and
    /// [`Pool::join`]s (products too small to share, and those inside a join, run on
    /// one thread and do not count).
    pub fn splits(&self) -> u64 {
        self.shared.generation.load(Ordering::Relaxed)
    }

    /// Runs `task(i)` for every `i < tasks`: task 0 on the calling thread, task `i` on
    /// worker `i`, and returns when all are done.
    ///
    /// # Panics
    /// If `tasks` is 0 or above [`Pool::threads`], or if a task panicked (after every
    /// task has finished).
    pub fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        assert!(
            (1..=self.threads()).contains(&tasks),
            "{tasks} tasks on a pool of {} threads",
            self.threads()
        );
        if tasks == 1 || IN_TASK.get() {
            // A call from inside a task (a product in one of `join`'s halves) runs its
            // tasks here in order: the pool's threads are already busy with the outer
            // call, and each task still writes only its own part.
            for index in 0..tasks {
                task(index);
            }
            return;
        }
        let _turn = self.caller.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY:
        // - only the lifetime changes (same fat-pointer layout);
        // - this function does not return (nor unwind) before `pending` is back to 0, that
        //   is before every worker the job names has returned from the closure; a worker
        //   it does not name reads the job but never calls it, so no worker calls the
        //   closure after `task` is gone.
        let erased: *const (dyn Fn(usize) + Sync + 'static) =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), _>(task) };
        let shared = &*self.shared;
        let sleepers = {
            let mut state = shared.lock();
            state.job = Some(Job {
                task: erased,
                tasks,
            });
            shared.panicked.store(false, Ordering::Relaxed);
            shared.pending.store(tasks - 1, Ordering::Relaxed);
            // Release: a worker that sees the new generation sees the job and counts.
            shared.generation.fetch_add(1, Ordering::Release);
            state.sleepers
        };
        if sleepers > 0 {
            shared.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| in_task(|| task(0))));
        // Acquire: the workers' writes to `dst` happen before their `pending` decrement.
        if !spin_until(|| shared.pending.load(Ordering::Acquire) == 0) {
            let mut state = shared.lock();
            // SeqCst with the workers' decrement and load of `caller_asleep`: either the
            // last worker sees the flag (and signals under the lock, which this thread
            // holds until `wait` releases it), or this thread sees `pending` at 0.
            shared.caller_asleep.store(true, Ordering::SeqCst);
            while shared.pending.load(Ordering::SeqCst) > 0 {
                state = shared
                    .done
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            shared.caller_asleep.store(false, Ordering::Relaxed);
        }
        // The job stays posted (no lock taken to clear it): every worker it names has
        // run it, and a worker that reads it late is not named by it (`index >= tasks`)
        // and never calls it.
        let panicked = shared.panicked.load(Ordering::Relaxed);
        if let Err(payload) = mine {
            resume_unwind(payload);
        }
        assert!(!panicked, "a task on an rl-nn pool thread panicked");
    }
}

impl Shared {
    /// The state, whatever a panicking thread left it as (it is only counters).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What only the calling thread of [`Pool::run`] touches: [`Pool::join`]'s first half
/// and its result.
struct CallerOnly<T>(RefCell<T>);

// SAFETY:
// - `Pool::join` reads and writes the cell only from task 0 and after `Pool::run`
//   returns, and `Pool::run` runs task 0 on the calling thread in every case (posted to
//   the workers, or inline inside another task or on a pool of one thread); the workers
//   share the closure that holds a reference to it but never call it with index 0. So
//   the value never leaves, nor is touched outside, the thread that made it.
unsafe impl<T> Sync for CallerOnly<T> {}

impl<T> CallerOnly<T> {
    /// Runs `f` on the value (a method, so closures capture the whole wrapper).
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.0.borrow_mut())
    }
}

/// A slot of [`Pool::join`], whatever a panicking half left it as.
fn lock<T>(slot: &Mutex<T>) -> MutexGuard<'_, T> {
    slot.lock().unwrap_or_else(PoisonError::into_inner)
}

std::thread_local! {
    /// Whether this thread is running a pool task now (nested calls run inline).
    static IN_TASK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` marked as a pool task, restoring the mark afterwards (also on unwinding).
fn in_task<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_TASK.set(self.0);
        }
    }
    let _restore = Restore(IN_TASK.replace(true));
    f()
}

/// A worker's loop: wait (spinning, then asleep) for a new generation, run its task if
/// the job has one for this worker, report, repeat until shutdown.
fn work(shared: &Shared, index: usize) {
    let mut seen = 0;
    loop {
        spin_until(|| shared.generation.load(Ordering::Acquire) != seen);
        let job = {
            let mut state = shared.lock();
            while shared.generation.load(Ordering::Acquire) == seen && !state.shutdown {
                state.sleepers += 1;
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                state.sleepers -= 1;
            }
            if state.shutdown {
                return;
            }
            seen = shared.generation.load(Ordering::Acquire);
            state.job
        };
        let Some(job) = job.filter(|job| index < job.tasks) else {
            continue;
        };
        let result = catch_unwind(AssertUnwindSafe(|| {
            in_task(|| {
                // SAFETY:
                // - `Pool::run` keeps the closure alive until `pending` is 0, which needs
                //   this worker's report below; the closure is `Sync`.
                unsafe { (*job.task)(index) }
            })
        }));
        if result.is_err() {
            shared.panicked.store(true, Ordering::Relaxed);
        }
        // Release: the task's writes (and `panicked`) happen before the caller's Acquire.
        if shared.pending.fetch_sub(1, Ordering::SeqCst) == 1
            && shared.caller_asleep.load(Ordering::SeqCst)
        {
            // Under the lock, so a caller about to sleep on `done` is not missed.
            let _state = shared.lock();
            shared.done.notify_all();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
        for worker in self.workers.drain(..) {
            // A worker only panics outside a task on a broken invariant; nothing to add.
            let _ = worker.join();
        }
    }
}

#[cfg(test)]
mod tests;
