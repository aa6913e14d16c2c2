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

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

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

/// What the caller and the workers share.
struct Shared {
    state: Mutex<State>,
    /// Signalled when a job is posted or the pool shuts down.
    wake: Condvar,
    /// Signalled when the last worker of a job finishes.
    done: Condvar,
}

/// The current job and its progress.
struct State {
    /// Counts posted jobs; a worker runs each generation once.
    generation: u64,
    job: Option<Job>,
    /// Workers of the current job still running.
    pending: usize,
    /// Whether a worker of the current job panicked.
    panicked: bool,
    shutdown: bool,
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
                generation: 0,
                job: None,
                pending: 0,
                panicked: false,
                shutdown: false,
            }),
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

    /// Runs `task(i)` for every `i < tasks`: task 0 on the calling thread, task `i` on
    /// worker `i`, and returns when all are done.
    ///
    /// # Panics
    /// If `tasks` is 0 or above [`Pool::threads`], or if a task panicked (after every
    /// task has finished).
    pub(crate) fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        assert!(
            (1..=self.threads()).contains(&tasks),
            "{tasks} tasks on a pool of {} threads",
            self.threads()
        );
        if tasks == 1 {
            task(0);
            return;
        }
        let _turn = self.caller.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY:
        // - only the lifetime changes (same fat-pointer layout);
        // - this function does not return (nor unwind) before `pending` is back to 0 and
        //   the job is cleared, so no worker calls the closure after `task` is gone.
        let erased: *const (dyn Fn(usize) + Sync + 'static) =
            unsafe { std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), _>(task) };
        {
            let mut state = self.shared.lock();
            state.job = Some(Job {
                task: erased,
                tasks,
            });
            state.generation += 1;
            state.pending = tasks - 1;
            state.panicked = false;
        }
        self.shared.wake.notify_all();
        let mine = catch_unwind(AssertUnwindSafe(|| task(0)));
        let panicked = {
            let mut state = self.shared.lock();
            while state.pending > 0 {
                state = self
                    .shared
                    .done
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            state.job = None;
            state.panicked
        };
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

/// A worker's loop: wait for a new generation, run its task if the job has one for this
/// worker, report, repeat until shutdown.
fn work(shared: &Shared, index: usize) {
    let mut seen = 0;
    loop {
        let job = {
            let mut state = shared.lock();
            while state.generation == seen && !state.shutdown {
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.shutdown {
                return;
            }
            seen = state.generation;
            state.job
        };
        let Some(job) = job.filter(|job| index < job.tasks) else {
            continue;
        };
        // SAFETY:
        // - `Pool::run` keeps the closure alive until `pending` is 0, which needs this
        //   worker's report below; the closure is `Sync`.
        let result = catch_unwind(AssertUnwindSafe(|| unsafe { (*job.task)(index) }));
        let mut state = shared.lock();
        state.panicked |= result.is_err();
        state.pending -= 1;
        if state.pending == 0 {
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
