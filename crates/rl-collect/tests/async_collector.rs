//! The asynchronous collector: real transitions, order, totals, weight versions, zero
//! allocation on the consumer's side, failures that surface instead of hanging, and a
//! prompt shutdown.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rl_collect::{
    AsyncCollector, AsyncConfig, CollectorConfig, ConstantPolicy, Error, Policy, PolicyError,
    RandomPolicy, SyncCollector,
};
use rl_core::{Column, DType, Device, Env, Flag, Schema, Space, Step};
use rl_envs::CartPole;
use rl_storage::{ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};

#[global_allocator]
static A: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;

const THETA_LIMIT: f32 = 0.2094;
const X_LIMIT: f32 = 2.4;
const RESET_BOUND: f32 = 0.05;

fn schema() -> Schema {
    Schema::new([
        Column::new("obs", DType::F32, &[4]),
        Column::scalar("action", DType::U32),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
        Column::new("next_obs", DType::F32, &[4]),
        Column::scalar("log_prob", DType::F32),
        Column::scalar("value", DType::F32),
    ])
    .unwrap()
}

fn replay(capacity: usize) -> ReplayBuffer {
    ReplayBuffer::new(
        RamStorage::new(schema(), capacity, None).unwrap(),
        Uniform::new(0),
    )
}

fn cartpoles(n: u64) -> Vec<CartPole> {
    (0..n).map(CartPole::new).collect()
}

/// `workers` workers over `envs` environments, chunks of `steps` steps.
fn config(workers: usize, steps: usize, envs: usize) -> AsyncConfig {
    AsyncConfig::new(workers, steps, CollectorConfig::new(steps * envs / workers))
}

fn constant(action: u32) -> ConstantPolicy<f32, u32> {
    ConstantPolicy::new(&[action])
}

/// Runs `f` in a thread and fails the test if it has not finished within `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let handle = thread::spawn(f);
    let start = Instant::now();
    while !handle.is_finished() {
        assert!(
            start.elapsed() < limit,
            "no answer within {limit:?}: the collector hangs"
        );
        thread::sleep(Duration::from_millis(2));
    }
    match handle.join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

fn reset_like(obs: &[f32]) -> bool {
    obs.iter().all(|v| v.abs() < RESET_BOUND)
}

/// What the transition checks saw.
#[derive(Debug, Default)]
struct Seen {
    terminated: usize,
    truncated: usize,
    chunks_per_worker: HashMap<usize, u64>,
}

/// Reads chunks until every worker delivered at least `per_worker` (whichever worker is
/// ready first delivers: no fixed share over a short run), and checks each row is a real transition: within a chunk and
/// across a worker's consecutive chunks, a row that did not end an episode continues
/// into the same environment's next row; a row that ended holds the final observation
/// (beyond CartPole's limits when terminated), and the next row starts from a reset.
fn check_transitions<P: Policy<Obs = f32, Act = u32>>(
    collector: &mut AsyncCollector<CartPole, P>,
    per_worker: u64,
    actions: Option<u32>,
) -> Seen {
    let workers = collector.workers();
    let full_rows = collector.chunk_rows();
    let mut seen = Seen::default();
    // Per worker: last step's next observations and whether each environment ended.
    let mut last: HashMap<usize, (Vec<f32>, Vec<bool>)> = HashMap::new();
    while (0..workers).any(|w| {
        seen.chunks_per_worker
            .get(&w)
            .is_none_or(|&c| c < per_worker)
    }) {
        let chunk = collector.next_chunk().unwrap();
        let (n, rows) = (chunk.envs(), chunk.rows());
        assert_eq!(rows, full_rows);
        assert_eq!(chunk.first_env(), chunk.worker() * n);
        let (obs, next_obs) = (chunk.obs(), chunk.next_obs());
        assert_eq!(obs.len(), rows * 4);
        assert_eq!(next_obs.len(), rows * 4);
        assert_eq!(chunk.actions().len(), rows);
        assert_eq!(chunk.rewards(), vec![1.0; rows].as_slice());
        assert_eq!(chunk.log_probs().len(), rows);
        assert_eq!(chunk.values().len(), rows);
        if let Some(action) = actions {
            assert!(chunk.actions().iter().all(|&a| a == action));
        }
        assert!(chunk.actions().iter().all(|&a| a < 2));

        let expected = seen.chunks_per_worker.entry(chunk.worker()).or_insert(0);
        assert_eq!(
            chunk.sequence(),
            *expected,
            "chunks of worker {} out of order",
            chunk.worker()
        );
        *expected += 1;

        let row = |data: &'_ [f32], r: usize| data[r * 4..(r + 1) * 4].to_vec();
        let ended = |r: usize| chunk.terminated()[r].get() || chunk.truncated()[r].get();
        if let Some((previous_next, previous_ended)) = last.get(&chunk.worker()) {
            for e in 0..n {
                if previous_ended[e] {
                    assert!(reset_like(&row(obs, e)));
                } else {
                    assert_eq!(
                        row(obs, e),
                        previous_next[e * 4..(e + 1) * 4],
                        "chunk boundary, env {e}"
                    );
                }
            }
        }
        let (mut terminated, mut truncated) = (0, 0);
        for r in 0..rows {
            let final_obs = row(next_obs, r);
            if chunk.terminated()[r].get() {
                terminated += 1;
                assert!(
                    final_obs[0].abs() >= X_LIMIT || final_obs[2].abs() >= THETA_LIMIT,
                    "terminated row {r} holds {final_obs:?}, not a final observation"
                );
            } else if chunk.truncated()[r].get() {
                truncated += 1;
            }
            if r + n < rows {
                if ended(r) {
                    assert!(
                        reset_like(&row(obs, r + n)),
                        "row {} should start a new episode",
                        r + n
                    );
                    assert_ne!(final_obs, row(obs, r + n));
                } else {
                    assert_eq!(
                        final_obs,
                        row(obs, r + n),
                        "row {r} does not continue into row {}",
                        r + n
                    );
                }
            }
        }
        assert_eq!(chunk.stats().episodes(), (terminated + truncated) as u64);
        assert_eq!(chunk.stats().terminated(), terminated as u64);
        seen.terminated += terminated;
        seen.truncated += truncated;
        let tail = (rows - n) * 4..rows * 4;
        let tail_ended = (rows - n..rows).map(ended).collect();
        last.insert(chunk.worker(), (next_obs[tail].to_vec(), tail_ended));
    }
    seen
}

#[test]
fn constant_policy_chunks_hold_real_transitions() {
    within(Duration::from_secs(10), || {
        // Pushing right always: the pole falls after about 10 steps (terminated), unless
        // the time limit of 5 or 6 steps cuts the episode first (truncated).
        let limits = [500, 5, 500, 6];
        let envs: Vec<CartPole> = limits
            .iter()
            .enumerate()
            .map(|(i, &limit)| {
                CartPole::new(i as u64)
                    .with_max_episode_steps(limit)
                    .unwrap()
            })
            .collect();
        let mut collector = AsyncCollector::new(envs, constant(1), config(2, 16, 4)).unwrap();
        assert_eq!(collector.chunk_rows(), 32);
        let seen = check_transitions(&mut collector, 8, Some(1));
        assert!(seen.terminated > 0 && seen.truncated > 0, "{seen:?}");
        let chunks = seen.chunks_per_worker.values().sum::<u64>();
        assert_eq!(collector.frames(), chunks * 32);
        assert_eq!(
            collector.stats().episodes(),
            (seen.terminated + seen.truncated) as u64
        );
        // Truncated by the time limit after 5 or 6 pushes: moving fast, far from a reset.
        let chunk = collector.next_chunk().unwrap();
        for r in (0..chunk.rows()).filter(|&r| chunk.truncated()[r].get()) {
            assert!(chunk.next_obs()[r * 4 + 1].abs() > 0.5, "row {r}");
        }
    });
}

#[test]
fn a_replay_of_the_wrong_width_is_refused_before_a_chunk_is_consumed() {
    within(Duration::from_secs(10), || {
        let mut collector =
            AsyncCollector::new(cartpoles(4), constant(1), config(2, 8, 4)).unwrap();
        let wide = Schema::new([
            Column::new("obs", DType::F32, &[5]),
            Column::scalar("action", DType::U32),
            Column::scalar("reward", DType::F32),
            Column::scalar("terminated", DType::Bool),
            Column::scalar("truncated", DType::Bool),
            Column::new("next_obs", DType::F32, &[5]),
        ])
        .unwrap();
        let mut wrong =
            ReplayBuffer::new(RamStorage::new(wide, 100, None).unwrap(), Uniform::new(0));
        let err = collector.collect(&mut wrong).unwrap_err();
        assert!(
            err.to_string().contains("column `obs`") && err.to_string().contains("f32 x 4"),
            "{err}"
        );
        assert_eq!(collector.frames(), 0);
        assert_eq!(wrong.len(), 0);
        // Nothing consumed, nothing stopped: the next call with the right buffer works.
        let mut right = replay(100);
        assert_eq!(collector.collect(&mut right).unwrap().frames, 16);
        assert_eq!(right.len(), 16);
    });
}

#[test]
fn random_policy_chunks_hold_real_transitions() {
    within(Duration::from_secs(10), || {
        let space = Space::discrete(2).unwrap();
        let policy = RandomPolicy::<f32, u32>::new(&space, 7).unwrap();
        let mut config = config(2, 32, 6);
        config.pool_chunks = 3;
        let mut collector = AsyncCollector::new(cartpoles(6), policy, config).unwrap();
        assert_eq!(collector.chunk_rows(), 96);
        let seen = check_transitions(&mut collector, 6, None);
        assert!(seen.terminated > 10, "{seen:?}");
    });
}

#[test]
fn workers_reproduce_the_sync_collector() {
    // Same seeds, deterministic policy: worker w's environment e is the synchronous
    // collector's environment w * 2 + e, step for step (resets included).
    let mut sync =
        SyncCollector::new(cartpoles(4), constant(0), CollectorConfig::new(4 * 40)).unwrap();
    let mut expected = replay(1000);
    sync.collect(&mut expected).unwrap();
    let sync_obs = expected.column::<f32>("obs").unwrap();
    let sync_next = expected.column::<f32>("next_obs").unwrap();
    let sync_terminated = expected.column::<Flag>("terminated").unwrap();

    // No total here: the total is shared, so one worker could take more of it than the
    // other. Compare each worker's first 5 chunks (40 steps).
    let mut collector = AsyncCollector::new(cartpoles(4), constant(0), config(2, 8, 4)).unwrap();
    let mut compared = 0;
    while compared < 160 {
        let chunk = collector.next_chunk().unwrap();
        if chunk.sequence() >= 5 {
            continue;
        }
        for r in 0..chunk.rows() {
            let (step, env) = (
                chunk.sequence() as usize * 8 + r / 2,
                chunk.first_env() + r % 2,
            );
            let s = step * 4 + env;
            assert_eq!(
                chunk.obs()[r * 4..(r + 1) * 4],
                sync_obs[s * 4..(s + 1) * 4],
                "step {step} env {env}"
            );
            assert_eq!(
                chunk.next_obs()[r * 4..(r + 1) * 4],
                sync_next[s * 4..(s + 1) * 4]
            );
            assert_eq!(chunk.terminated()[r], sync_terminated[s]);
            compared += 1;
        }
    }
    assert_eq!(compared, 160);
    assert!(
        sync_terminated.iter().any(|t| t.get()),
        "the comparison should cross resets"
    );
}

#[test]
fn total_frames_stop_the_collector() {
    for (total, delivered) in [(1000u64, 1000u64), (1001, 1002)] {
        let mut config = config(2, 16, 4);
        config.collector.total_frames = Some(total);
        let mut collector = AsyncCollector::new(cartpoles(4), constant(1), config).unwrap();
        let mut buffer = replay(4096);
        let (mut frames, mut short) = (0, 0);
        let mut reports = Vec::new();
        loop {
            let report = collector.collect(&mut buffer).unwrap();
            frames += report.frames;
            if report.frames != 32 {
                short += 1;
            }
            assert_eq!(report.total_frames, frames);
            reports.push(report.done);
            if report.done {
                break;
            }
        }
        assert_eq!(frames, delivered);
        assert_eq!(short, 1, "one chunk is cut to what is left");
        assert_eq!(buffer.len() as u64, delivered);
        assert!(reports[..reports.len() - 1].iter().all(|done| !done));
        assert!(matches!(collector.next_chunk(), Err(Error::Stopped { .. })));
        assert!(matches!(
            collector.collect(&mut buffer),
            Err(Error::Stopped { .. })
        ));
        assert_eq!(buffer.len() as u64, delivered);
    }
}

#[test]
fn random_frames_are_shared_by_the_workers() {
    within(Duration::from_secs(10), || {
        // 64 random frames over 2 workers: each worker's first 32 frames (2 chunks of 8 steps
        // x 2 environments) are random, then the policy (always 0) acts.
        let mut config = config(2, 8, 4);
        config.collector.random_frames = 64;
        let mut collector = AsyncCollector::new(cartpoles(4), constant(0), config).unwrap();
        let mut random_chunks = 0;
        let mut delivered = [0u64; 2];
        while delivered.iter().any(|&d| d < 4) {
            let chunk = collector.next_chunk().unwrap();
            delivered[chunk.worker()] += 1;
            let ones = chunk.actions().iter().filter(|&&a| a == 1).count();
            if chunk.sequence() < 2 {
                random_chunks += 1;
                assert!(
                    ones > 0,
                    "worker {} chunk {} should be random",
                    chunk.worker(),
                    chunk.sequence()
                );
            } else {
                assert_eq!(
                    ones,
                    0,
                    "worker {} chunk {} should follow the policy",
                    chunk.worker(),
                    chunk.sequence()
                );
            }
        }
        assert_eq!(random_chunks, 4);
    });
}

#[test]
fn set_policy_reaches_later_chunks_only() {
    within(Duration::from_secs(10), || {
        let mut config = config(2, 4, 4);
        config.pool_chunks = 4;
        let mut collector = AsyncCollector::new(cartpoles(4), constant(0), config).unwrap();
        assert_eq!(collector.version(), 0);
        for _ in 0..3 {
            let chunk = collector.next_chunk().unwrap();
            assert_eq!(chunk.version(), 0);
            assert!(chunk.actions().iter().all(|&a| a == 0));
        }
        assert_eq!(collector.set_policy(constant(1)), 1);
        assert_eq!(collector.version(), 1);
        let mut old = 0;
        let mut updated = [false; 2];
        while updated != [true, true] {
            let chunk = collector.next_chunk().unwrap();
            // Every chunk was filled by the version it names, and only by it.
            let action = chunk.version() as u32;
            assert!(
                chunk.actions().iter().all(|&a| a == action),
                "version {}",
                chunk.version()
            );
            match chunk.version() {
                0 => {
                    assert!(
                        !updated[chunk.worker()],
                        "worker {} went back to the old policy",
                        chunk.worker()
                    );
                    old += 1;
                }
                1 => updated[chunk.worker()] = true,
                v => panic!("unknown version {v}"),
            }
        }
        // Chunks already started when the weights changed: at most the whole pool.
        assert!(old <= 4, "{old} chunks of the old policy after the update");
        assert_eq!(collector.set_policy(constant(0)), 2);
    });
}

#[test]
fn the_consumer_allocates_nothing_after_the_first_chunk() {
    let space = Space::discrete(2).unwrap();
    let policy = RandomPolicy::<f32, u32>::new(&space, 3).unwrap();
    let mut collector = AsyncCollector::new(cartpoles(4), policy, config(2, 8, 4)).unwrap();
    let mut buffer = replay(4096);
    let first = collector.collect(&mut buffer).unwrap();
    assert!(first.memory.is_some());
    let (result, stats) = rl_testkit::measure(|| {
        let mut frames = 0;
        for _ in 0..1000 {
            frames += collector.collect(&mut buffer)?.frames;
        }
        // Reading a chunk directly allocates nothing either.
        let chunk = collector.next_chunk()?;
        chunk.write_to(&mut buffer)?;
        Ok::<u64, Error>(frames + chunk.rows() as u64)
    });
    assert_eq!(result.unwrap(), 1001 * 16);
    assert_eq!(stats.allocations, 0, "{stats:?}");
    assert_eq!(collector.frames(), 1002 * 16);
    assert!(collector.stats().episodes() > 100);
    assert_eq!(buffer.len(), 4096);
}

#[test]
fn write_to_copies_the_chunk_and_checks_the_schema() {
    let mut collector = AsyncCollector::new(cartpoles(2), constant(1), config(1, 10, 2)).unwrap();
    let chunk = collector.next_chunk().unwrap();
    let six = Schema::new([
        Column::new("next_obs", DType::F32, &[4]),
        Column::new("obs", DType::F32, &[4]),
        Column::scalar("action", DType::U32),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
    ])
    .unwrap();
    let mut buffer = ReplayBuffer::new(RamStorage::new(six, 100, None).unwrap(), Uniform::new(0));
    chunk.write_to(&mut buffer).unwrap();
    assert_eq!(buffer.len(), 20);
    assert_eq!(&buffer.column::<f32>("obs").unwrap()[..80], chunk.obs());
    assert_eq!(
        &buffer.column::<f32>("next_obs").unwrap()[..80],
        chunk.next_obs()
    );
    assert_eq!(
        &buffer.column::<Flag>("terminated").unwrap()[..20],
        chunk.terminated()
    );
    let extra = Schema::new([
        Column::new("obs", DType::F32, &[4]),
        Column::scalar("action", DType::U32),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
        Column::new("next_obs", DType::F32, &[4]),
        Column::scalar("priority", DType::F32),
    ])
    .unwrap();
    let mut wrong = ReplayBuffer::new(RamStorage::new(extra, 100, None).unwrap(), Uniform::new(0));
    assert!(matches!(chunk.write_to(&mut wrong), Err(Error::Config(_))));
    assert_eq!(wrong.len(), 0);
    drop(chunk);
    // A refused schema consumes nothing and does not stop the collector.
    assert!(matches!(
        collector.collect(&mut wrong),
        Err(Error::Config(_))
    ));
    assert_eq!(collector.frames(), 20);
    assert_eq!(collector.next_chunk().unwrap().sequence(), 1);
}

#[test]
fn leaked_chunk_references_do_not_drain_the_pool() {
    within(Duration::from_secs(5), || {
        let mut config = config(1, 4, 2);
        config.pool_chunks = 2;
        let mut collector = AsyncCollector::new(cartpoles(2), constant(1), config).unwrap();
        for expected in 0..10 {
            let chunk = collector.next_chunk().unwrap();
            assert_eq!(chunk.sequence(), expected);
            std::mem::forget(chunk);
        }
    });
}

/// CartPole that fails on its `fail_at`-th step (counted over episodes), with an error
/// or a NaN reward.
#[derive(Debug)]
struct FailingEnv {
    inner: CartPole,
    steps: u64,
    fail_at: u64,
    nan: bool,
}

impl Env for FailingEnv {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        self.inner.observation_space()
    }

    fn action_space(&self) -> &Space {
        self.inner.action_space()
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        self.inner.reset(seed, obs)
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<Step> {
        self.steps += 1;
        let mut step = self.inner.step(action, obs)?;
        if self.steps == self.fail_at {
            if !self.nan {
                return Err(rl_core::Error::config(
                    "test environment",
                    "fails on purpose",
                ));
            }
            step.reward = f32::NAN;
        }
        Ok(step)
    }
}

fn failing_envs(fail_at: u64, nan: bool) -> Vec<FailingEnv> {
    (0..4)
        .map(|i| FailingEnv {
            inner: CartPole::new(i),
            steps: 0,
            fail_at: if i == 3 { fail_at } else { u64::MAX },
            nan,
        })
        .collect()
}

#[test]
fn an_environment_error_names_the_worker_and_stops_the_collector() {
    for nan in [false, true] {
        within(Duration::from_secs(5), move || {
            // Environment 3 belongs to worker 1 and fails at its 20th step (step 19),
            // in the worker's third chunk of 8 steps.
            let mut collector =
                AsyncCollector::new(failing_envs(20, nan), constant(1), config(2, 8, 4)).unwrap();
            let mut delivered = [0u64; 2];
            let error = loop {
                match collector.next_chunk() {
                    Ok(chunk) => {
                        assert_eq!(chunk.sequence(), delivered[chunk.worker()]);
                        delivered[chunk.worker()] += 1;
                    }
                    Err(error) => break error,
                }
            };
            // What worker 1 filled before failing was delivered first.
            assert_eq!(delivered[1], 2, "{error}");
            let Error::Worker { worker: 1, source } = &error else {
                panic!("expected a worker error, got {error:?}");
            };
            match (nan, &**source) {
                (
                    false,
                    Error::Env {
                        env: 3, step: 19, ..
                    },
                )
                | (
                    true,
                    Error::NonFiniteReward {
                        env: 3, step: 19, ..
                    },
                ) => {}
                (_, other) => panic!("unexpected source {other:?}"),
            }
            assert!(error.to_string().contains("worker 1"), "{error}");
            assert!(matches!(collector.next_chunk(), Err(Error::Stopped { .. })));
            assert!(matches!(
                collector.collect(&mut replay(10)),
                Err(Error::Stopped { .. })
            ));
        });
    }
}

/// A policy that panics on its fifth call.
#[derive(Clone, Debug, Default)]
struct PanickingPolicy {
    calls: u32,
}

impl Policy for PanickingPolicy {
    type Obs = f32;
    type Act = u32;
    type State = ();

    fn act(
        &mut self,
        _obs: &[f32],
        _states: &mut [()],
        out: rl_collect::ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        self.calls += 1;
        assert!(self.calls < 5, "policy exploded on call {}", self.calls);
        out.actions.fill(0);
        Ok(())
    }
}

#[test]
fn a_policy_panic_surfaces_as_worker_panicked() {
    within(Duration::from_secs(5), || {
        let mut collector =
            AsyncCollector::new(cartpoles(4), PanickingPolicy::default(), config(2, 2, 4)).unwrap();
        let mut chunks = 0;
        let error = loop {
            match collector.next_chunk() {
                Ok(_) => chunks += 1,
                Err(error) => break error,
            }
        };
        // Each worker filled two chunks of two steps (four calls) before its fifth call.
        assert!((2..=4).contains(&chunks), "{chunks}");
        match &error {
            Error::WorkerPanicked { worker, message } => {
                assert!(*worker < 2);
                assert!(message.contains("policy exploded on call 5"), "{message}");
            }
            other => panic!("expected a panic report, got {other:?}"),
        }
        assert!(matches!(collector.next_chunk(), Err(Error::Stopped { .. })));
    });
}

/// CartPole that counts its steps and drops (to see the workers block, then end).
#[derive(Debug)]
struct Counted {
    inner: CartPole,
    steps: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

impl Env for Counted {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        self.inner.observation_space()
    }

    fn action_space(&self) -> &Space {
        self.inner.action_space()
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        self.inner.reset(seed, obs)
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<Step> {
        self.steps.fetch_add(1, Ordering::SeqCst);
        self.inner.step(action, obs)
    }
}

#[test]
fn dropping_a_collector_with_blocked_workers_returns_promptly() {
    for consumed in [0, 2] {
        let (steps, drops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let envs: Vec<Counted> = (0..4)
            .map(|i| Counted {
                inner: CartPole::new(i),
                steps: Arc::clone(&steps),
                drops: Arc::clone(&drops),
            })
            .collect();
        let mut config = config(2, 4, 4);
        config.pool_chunks = 3;
        let mut collector = AsyncCollector::new(envs, constant(1), config).unwrap();
        for _ in 0..consumed {
            collector.next_chunk().unwrap();
        }
        // Let the workers fill the whole pool: the filled channel holds every chunk and
        // both workers wait for a free one.
        thread::sleep(Duration::from_millis(300));
        // Blocked: the pool (3 chunks of 4 steps x 2 environments) is filled, on top of
        // the chunks consumed, and nothing more.
        assert_eq!(steps.load(Ordering::SeqCst), (consumed + 3) * 4 * 2);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        let elapsed = within(Duration::from_secs(10), move || {
            let start = Instant::now();
            drop(collector);
            start.elapsed()
        });
        assert!(elapsed < Duration::from_secs(5), "drop took {elapsed:?}");
        // Every worker thread ended (and dropped its environments) before drop returned.
        assert_eq!(drops.load(Ordering::SeqCst), 4);
    }
}

#[test]
fn configurations_are_checked_before_anything_starts() {
    let make =
        |envs: u64, config: AsyncConfig| AsyncCollector::new(cartpoles(envs), constant(1), config);
    let good = config(2, 8, 4);
    assert_eq!(good.pool_chunks, 5);
    assert_eq!(good.collector.frames_per_batch, 16);
    assert!(make(4, good).is_ok());
    let collector = |change: fn(&mut CollectorConfig)| {
        let mut config = good;
        change(&mut config.collector);
        config
    };
    for (bad, complaint) in [
        (AsyncConfig { workers: 0, ..good }, "workers"),
        (
            AsyncConfig {
                steps_per_chunk: 0,
                ..good
            },
            "steps_per_chunk",
        ),
        (
            AsyncConfig {
                pool_chunks: 2,
                ..good
            },
            "workers + 1",
        ),
        (collector(|c| c.frames_per_batch = 32), "set it to 16"),
        (
            collector(|c| c.policy_device = Device::Cuda(0)),
            "policy_device",
        ),
        (
            collector(|c| c.storing_device = Device::Cuda(0)),
            "storing_device",
        ),
        (collector(|c| c.total_frames = Some(0)), "total_frames"),
    ] {
        match make(4, bad) {
            Err(error @ Error::Config(_)) => {
                assert!(error.to_string().contains(complaint), "{error}")
            }
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
    assert!(
        matches!(make(5, good), Err(Error::Config(_))),
        "5 environments over 2 workers"
    );
    assert!(matches!(make(0, good), Err(Error::Config(_))));
    // The smallest pool: one chunk more than the workers.
    let smallest = AsyncConfig {
        pool_chunks: 2,
        ..config(1, 1, 3)
    };
    let mut collector = AsyncCollector::new(cartpoles(3), constant(1), smallest).unwrap();
    for _ in 0..5 {
        assert_eq!(collector.next_chunk().unwrap().rows(), 3);
    }
}

#[test]
fn the_memory_plan_counts_the_pool_lanes_and_channels() {
    let collector = AsyncCollector::new(cartpoles(4), constant(1), config(2, 8, 4)).unwrap();
    let plan = collector.memory_plan();
    let line = |name: &str| {
        plan.lines()
            .iter()
            .find(|l| l.component == name)
            .unwrap_or_else(|| panic!("no line {name} in {plan:?}"))
            .bytes
    };
    // 5 chunks of 16 rows: 2 observations of 4 f32, a u32 action, reward, 2 flags,
    // log-prob and value per row, plus each chunk's statistics window and header.
    let data = 5 * 16 * (2 * 16 + 4 + 4 + 2 + 4 + 4);
    let pool = line("async_collector/chunk_pool");
    assert!(pool >= data && pool < data + 5 * 1024, "{pool}");
    for worker in 0..2 {
        assert_eq!(
            line(&format!(
                "async_collector/worker-{worker}/lanes/observations"
            )),
            2 * 2 * 16
        );
    }
    assert!(line("async_collector/channel_slots") >= 2 * 5 * 8);
    assert!(plan.grand_total() > pool);
    // The same plan before anything exists, from sizes alone (what a trainer checks
    // against its budget); a bad configuration is refused there too.
    type Collector = AsyncCollector<CartPole, ConstantPolicy<f32, u32>>;
    assert_eq!(Collector::plan(&config(2, 8, 4), 4, 4, 1).unwrap(), plan);
    assert!(Collector::plan(&config(3, 8, 4), 4, 4, 1).is_err());
}
