//! The asynchronous collector: worker threads fill chunks from a fixed pool.
//!
//! ```text
//!            free chunks (bounded, capacity = pool)
//!   consumer ─────────────────────────────────────▶ worker 0..W (each: Lanes, policy clone)
//!            ◀─────────────────────────────────────
//!            filled chunks or a failure (bounded, capacity = pool)
//! ```
//!
//! Every chunk is allocated once, at construction, and then circulates as a `Box`
//! (moving a box allocates nothing): a worker takes a free chunk, steps its environments
//! `steps_per_chunk` times writing each transition straight into the chunk, and sends it
//! to the consumer, who reads it (or writes it into a replay buffer) and hands it back.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rl_core::{Element, Env, Flag, Location, MemoryPlan, ProcessMemory};
use rl_storage::{ColumnSlice, replay::ReplayBuffer, sampler::Sampler, storage::HostStorage};

use crate::error::{Error, Result};
use crate::lanes::Lanes;
use crate::policy::{ActOutput, ActionSampler, Policy, RandomAction};
use crate::stats::EpisodeStats;
use crate::sync::{BatchReport, CollectorConfig, Layout, element_slice};

/// Settings of an [`AsyncCollector`]. Defaults in [`AsyncConfig::new`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AsyncConfig {
    /// Worker threads (at least 1). The environments are split evenly over them, so
    /// their number must be a multiple of this.
    pub workers: usize,
    /// Batched steps of a worker's environments per chunk (at least 1): a chunk holds
    /// `steps_per_chunk x envs / workers` rows.
    pub steps_per_chunk: usize,
    /// Chunks allocated at construction, at least `workers + 1` (every worker fills one
    /// while the consumer reads another). Both channels have this capacity, so a worker
    /// never blocks on sending: when the consumer falls behind, workers wait for a free
    /// chunk instead, and memory stays at the pool.
    pub pool_chunks: usize,
    /// Settings shared with the synchronous collector: `total_frames`, `random_frames`,
    /// `seed`, devices (CPU only), `non_finite`, `stats_window` and `report_memory`
    /// apply as there. `frames_per_batch` must be one chunk,
    /// `steps_per_chunk x envs / workers` frames: one [`AsyncCollector::collect`]
    /// delivers one chunk.
    pub collector: CollectorConfig,
}

impl AsyncConfig {
    /// `workers` threads filling chunks of `steps_per_chunk` steps, with the shared
    /// settings of `collector` and a pool of `2 * workers + 1` chunks: every worker can
    /// fill one while another of its chunks waits in the channel, and the consumer reads
    /// one more.
    pub fn new(workers: usize, steps_per_chunk: usize, collector: CollectorConfig) -> Self {
        Self {
            workers,
            steps_per_chunk,
            pool_chunks: workers.saturating_mul(2).saturating_add(1),
            collector,
        }
    }

    /// Checks the configuration for `envs` environments; returns the environments per
    /// worker and the rows of a chunk. Never touches CUDA: a CUDA device is refused as
    /// data.
    fn validate(&self, envs: usize) -> Result<(usize, usize)> {
        if self.workers == 0 {
            return Err(Error::config(
                "workers",
                "is 0: use at least one worker thread",
            ));
        }
        // `frames_per_batch` is checked below, against a chunk.
        CollectorConfig {
            frames_per_batch: envs,
            ..self.collector
        }
        .validate(envs)?;
        if !envs.is_multiple_of(self.workers) {
            return Err(Error::config(
                "environments",
                format!(
                    "are {envs}, which {} workers cannot share evenly: give a multiple of the workers",
                    self.workers
                ),
            ));
        }
        if self.steps_per_chunk == 0 {
            return Err(Error::config(
                "steps_per_chunk",
                "is 0: a chunk holds at least one step",
            ));
        }
        let per_worker = envs / self.workers;
        let rows = self
            .steps_per_chunk
            .checked_mul(per_worker)
            .ok_or_else(|| {
                Error::config(
                    "steps_per_chunk",
                    "is too large: the rows of a chunk overflow usize",
                )
            })?;
        if self.collector.frames_per_batch != rows {
            return Err(Error::config(
                "frames_per_batch",
                format!(
                    "is {}, but an asynchronous collector delivers one chunk per batch: {} steps x {per_worker} environments per worker = {rows} frames; set it to {rows}",
                    self.collector.frames_per_batch, self.steps_per_chunk,
                ),
            ));
        }
        if self.pool_chunks <= self.workers {
            return Err(Error::config(
                "pool_chunks",
                format!(
                    "is {} for {} workers: use at least {} (workers + 1), so that every worker can fill a chunk while the consumer reads another; with fewer, workers idle waiting for the pool",
                    self.pool_chunks,
                    self.workers,
                    self.workers.saturating_add(1),
                ),
            ));
        }
        Ok((per_worker, rows))
    }
}

/// Transitions of one worker's environments over `steps` consecutive steps, row
/// `step * envs + env`. Allocated once; reused for the whole run.
struct Chunk<O, A> {
    obs: Vec<O>,
    action: Vec<A>,
    reward: Vec<f32>,
    terminated: Vec<Flag>,
    truncated: Vec<Flag>,
    next_obs: Vec<O>,
    log_prob: Vec<f32>,
    value: Vec<f32>,
    /// Episodes that ended while this chunk was filled.
    stats: EpisodeStats,
    obs_len: usize,
    act_len: usize,
    /// Environments per step.
    envs: usize,
    /// Rows filled (a multiple of `envs`; fewer than the capacity only for the last
    /// chunk before `total_frames`).
    rows: usize,
    worker: usize,
    first_env: usize,
    version: u64,
    sequence: u64,
}

impl<O: Element, A: Element> Chunk<O, A> {
    fn new(rows: usize, envs: usize, obs_len: usize, act_len: usize, window: usize) -> Self {
        Self {
            obs: vec![O::default(); rows * obs_len],
            action: vec![A::default(); rows * act_len],
            reward: vec![0.0; rows],
            terminated: vec![Flag::default(); rows],
            truncated: vec![Flag::default(); rows],
            next_obs: vec![O::default(); rows * obs_len],
            log_prob: vec![0.0; rows],
            value: vec![0.0; rows],
            stats: EpisodeStats::new(window),
            obs_len,
            act_len,
            envs,
            rows: 0,
            worker: 0,
            first_env: 0,
            version: 0,
            sequence: 0,
        }
    }

    /// Bytes a chunk of `rows` rows holds, its statistics window and the box included.
    fn bytes(rows: usize, obs_len: usize, act_len: usize, window: usize) -> Option<u64> {
        let per_row = (2 * obs_len)
            .checked_mul(size_of::<O>())?
            .checked_add(act_len.checked_mul(size_of::<A>())?)?
            .checked_add(4 + 1 + 1 + 4 + 4)?;
        let data = (per_row as u64).checked_mul(rows as u64)?;
        data.checked_add((window * (4 + 4) + size_of::<Self>()) as u64)
    }
}

/// What a worker sends to the consumer.
enum Message<O, A> {
    Chunk(Box<Chunk<O, A>>),
    /// The worker failed and has exited.
    Failed(Error),
}

/// The consumer's ends of the two channels.
struct Link<O, A> {
    free: SyncSender<Box<Chunk<O, A>>>,
    filled: Receiver<Message<O, A>>,
}

enum State<O, A> {
    Running(Link<O, A>),
    /// Channels closed, workers joined; the reason starts with a separator.
    Stopped(&'static str),
}

/// What the consumer and the workers share.
struct Shared<P> {
    /// Set to make workers exit at their next step.
    stop: AtomicBool,
    /// Version of the policy in `policy`, readable without the lock.
    version: AtomicU64,
    policy: Mutex<Versioned<P>>,
    /// Frames workers have claimed to fill (for `total_frames`).
    claimed: AtomicU64,
    total_frames: Option<u64>,
}

struct Versioned<P> {
    version: u64,
    policy: P,
}

impl<P> Shared<P> {
    /// Claims up to `steps` steps of `envs` frames for a chunk: `None` once the total is
    /// reached, fewer steps for the last chunk (rounded up to whole steps).
    fn claim(&self, steps: usize, envs: usize) -> Option<usize> {
        let Some(total) = self.total_frames else {
            return Some(steps);
        };
        let mut granted = 0u64;
        self.claimed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |claimed| {
                let left = total.checked_sub(claimed).filter(|&left| left > 0)?;
                granted = left.div_ceil(envs as u64).min(steps as u64);
                Some(claimed + granted * envs as u64)
            })
            .ok()?;
        Some(granted as usize)
    }
}

/// The workers' shared end of the free-chunk channel (`Receiver` is not `Sync`: a
/// worker holds the lock only while it waits for a chunk).
type FreeChunks<O, A> = Arc<Mutex<Receiver<Box<Chunk<O, A>>>>>;

/// One worker thread's state: its environments, its policy copy, its share of the
/// warm-up.
struct Worker<E: Env, P: Policy<Obs = E::Obs, Act = E::Act>> {
    index: usize,
    first_env: usize,
    lanes: Lanes<E>,
    policy: P,
    version: u64,
    states: Vec<P::State>,
    /// `None` without warm-up.
    random: Option<ActionSampler>,
    random_frames: u64,
    steps_per_chunk: usize,
    frames: u64,
    steps: u64,
    sequence: u64,
    shared: Arc<Shared<P>>,
    free: FreeChunks<E::Obs, E::Act>,
    filled: SyncSender<Message<E::Obs, E::Act>>,
}

impl<E, P> Worker<E, P>
where
    E: Env,
    E::Act: RandomAction,
    P: Policy<Obs = E::Obs, Act = E::Act> + Clone,
{
    /// The thread's body: runs the loop, and reports its error or panic to the consumer.
    fn main(self) {
        let (index, first_env) = (self.index, self.first_env);
        let report = self.filled.clone();
        let failure = match catch_unwind(AssertUnwindSafe(move || self.run())) {
            Ok(Ok(())) => return,
            Ok(Err(error)) => Error::Worker {
                worker: index,
                source: Box::new(globalize(error, first_env)),
            },
            Err(payload) => Error::WorkerPanicked {
                worker: index,
                message: panic_message(payload.as_ref()),
            },
        };
        // Never blocks for long: the channel holds at most `pool` messages and this
        // worker's chunk is gone. An error only means the consumer is gone too.
        let _ = report.send(Message::Failed(failure));
    }

    /// Fills chunks until stopped, out of frames, or failed. `Ok` means a clean exit.
    fn run(mut self) -> Result<()> {
        loop {
            if self.shared.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let received = self
                .free
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .recv();
            // The consumer is gone: nothing left to do.
            let Ok(mut chunk) = received else {
                return Ok(());
            };
            let Some(steps) = self.shared.claim(self.steps_per_chunk, self.lanes.len()) else {
                return Ok(());
            };
            self.refresh_policy();
            chunk.rows = steps * self.lanes.len();
            chunk.worker = self.index;
            chunk.first_env = self.first_env;
            chunk.version = self.version;
            chunk.sequence = self.sequence;
            chunk.stats.clear();
            for step in 0..steps {
                if self.shared.stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                self.step_into(&mut chunk, step)?;
            }
            self.sequence += 1;
            if self.filled.send(Message::Chunk(chunk)).is_err() {
                return Ok(());
            }
        }
    }

    /// Takes the latest policy if its version changed (a clone: allocates only when the
    /// weights changed).
    fn refresh_policy(&mut self) {
        if self.shared.version.load(Ordering::Acquire) == self.version {
            return;
        }
        let latest = self
            .shared
            .policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.policy.clone_from(&latest.policy);
        self.version = latest.version;
    }

    /// One batched step of the worker's environments, written into rows
    /// `step * envs..(step + 1) * envs` of `chunk`.
    fn step_into(&mut self, chunk: &mut Chunk<E::Obs, E::Act>, step: usize) -> Result<()> {
        let n = self.lanes.len();
        let (obs_len, act_len) = (self.lanes.obs_len, self.lanes.act_len);
        let rows = step * n..(step + 1) * n;
        let actions = &mut chunk.action[rows.start * act_len..rows.end * act_len];
        let log_probs = &mut chunk.log_prob[rows.clone()];
        let values = &mut chunk.value[rows.clone()];
        let warm_up = self.frames < self.random_frames;
        match self.random.as_mut().filter(|_| warm_up) {
            Some(random) => {
                E::Act::fill(random, actions)?;
                log_probs.fill(0.0);
                values.fill(0.0);
            }
            None => {
                let out = ActOutput {
                    actions: &mut *actions,
                    log_probs,
                    values,
                };
                self.policy
                    .act(&self.lanes.obs, &mut self.states, out)
                    .map_err(|source| Error::Policy {
                        step: self.steps,
                        source,
                    })?;
            }
        }
        self.lanes.step(actions, self.steps)?;
        let lanes = &self.lanes;
        chunk.obs[rows.start * obs_len..rows.end * obs_len].copy_from_slice(&lanes.obs);
        chunk.next_obs[rows.start * obs_len..rows.end * obs_len].copy_from_slice(&lanes.next_obs);
        chunk.reward[rows.clone()].copy_from_slice(&lanes.rewards);
        chunk.terminated[rows.clone()].copy_from_slice(&lanes.terminated);
        chunk.truncated[rows].copy_from_slice(&lanes.truncated);
        let states = &mut self.states;
        self.lanes.advance(&mut chunk.stats, self.steps, |i| {
            states[i] = P::State::default()
        })?;
        self.steps += 1;
        self.frames += n as u64;
        Ok(())
    }
}

/// Environment indices of a worker's error, made global (index in the collector).
fn globalize(error: Error, first_env: usize) -> Error {
    match error {
        Error::Env { env, step, source } => Error::Env {
            env: env + first_env,
            step,
            source,
        },
        Error::NonFiniteReward { env, step, value } => Error::NonFiniteReward {
            env: env + first_env,
            step,
            value,
        },
        Error::NonFiniteObservation {
            env,
            step,
            element,
            value,
        } => Error::NonFiniteObservation {
            env: env + first_env,
            step,
            element,
            value,
        },
        other => other,
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(message) = payload.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = payload.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic whose payload is not a string".to_owned()
    }
}

/// Steps environments in `W` worker threads that fill chunks from a fixed pool, and
/// hands the chunks to the caller one at a time.
///
/// - **Workers**: the environments are split evenly; worker `w` owns environments
///   `w * N/W .. (w + 1) * N/W` (environment `i` is first reset with seed
///   `config.collector.seed + i`, as in [`SyncCollector`](crate::SyncCollector)), a clone of
///   the policy, one policy state per environment, and runs in a thread named
///   `rl-collect-worker-{w}`.
/// - **Memory**: `pool_chunks` chunks of `steps_per_chunk x N/W` rows (obs, action,
///   reward, terminated, truncated, true next obs, log-prob, value) are allocated at
///   construction, and two bounded channels of `pool_chunks` slots carry them; nothing
///   grows afterwards ([`AsyncCollector::memory_plan`]). Receiving, reading, writing and
///   returning a chunk allocates nothing on the consumer's side; workers allocate only
///   what the policy allocates, and a policy clone when the weights change.
/// - **Order**: the chunks of one worker arrive in the order it filled them
///   ([`ChunkRef::sequence`] counts them); none is dropped while the collector runs.
/// - **Weights**: [`AsyncCollector::set_policy`] publishes a new policy with a new
///   version; workers pick it up at their next chunk, and every chunk says which version
///   filled it.
/// - **Warm-up**: `random_frames` is split over the workers: each worker takes uniformly
///   random actions for its first `random_frames / W` frames (rounded up to whole steps),
///   counted on its own frames, so about `random_frames` frames are random in all.
/// - **Total**: with `total_frames`, workers stop claiming chunks once it is reached; the
///   last chunks may be shorter, and the frames delivered are `total_frames` rounded up
///   to a whole step of one worker.
/// - **Failures**: an environment or policy error in a worker arrives as
///   [`Error::Worker`] (environment indices global, steps counted per worker), a panic
///   as [`Error::WorkerPanicked`], after the chunks that worker filled before. The
///   collector then shuts every worker down and answers [`Error::Stopped`]. It never
///   waits forever: if every worker exits, the next call returns an error.
/// - **Drop** signals the workers, closes the channels (waking workers blocked on them)
///   and joins every thread; a worker in the middle of a step finishes that step first.
///
/// ```
/// use rl_collect::{AsyncCollector, AsyncConfig, CollectorConfig, ConstantPolicy};
/// use rl_core::{Env, TransitionSchema};
/// use rl_envs::CartPole;
/// use rl_storage::{ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};
///
/// let envs: Vec<CartPole> = (0..4).map(CartPole::new).collect();
/// let schema = TransitionSchema::for_spaces(envs[0].observation_space(), envs[0].action_space())
///     .with_next_obs()
///     .build()?;
/// // 2 workers with 2 environments each, chunks of 16 steps: 32 frames per batch.
/// let mut config = AsyncConfig::new(2, 16, CollectorConfig::new(32));
/// config.collector.total_frames = Some(128);
/// let mut collector = AsyncCollector::new(envs, ConstantPolicy::new(&[1u32]), config)?;
/// let mut replay = ReplayBuffer::new(RamStorage::new(schema, 1_000, None)?, Uniform::new(0));
/// loop {
///     let report = collector.collect(&mut replay)?;
///     assert_eq!(report.frames, 32);
///     if report.done {
///         break;
///     }
/// }
/// assert_eq!(replay.len(), 128);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AsyncCollector<E: Env, P: Policy<Obs = E::Obs, Act = E::Act>> {
    state: State<E::Obs, E::Act>,
    /// The chunk the consumer reads; returned to the pool when its [`ChunkRef`] drops
    /// (or, if the reference was leaked, at the next call).
    lent: Option<Box<Chunk<E::Obs, E::Act>>>,
    handles: Vec<JoinHandle<()>>,
    shared: Arc<Shared<P>>,
    config: AsyncConfig,
    envs: usize,
    /// Elements of one observation and of one action.
    obs_len: usize,
    act_len: usize,
    chunk_rows: usize,
    stats: EpisodeStats,
    frames: u64,
    plan: MemoryPlan,
    _envs: PhantomData<fn() -> E>,
}

impl<E, P> AsyncCollector<E, P>
where
    E: Env + Send + 'static,
    E::Act: RandomAction,
    P: Policy<Obs = E::Obs, Act = E::Act> + Clone + 'static,
{
    /// What [`AsyncCollector::new`] allocates for `envs` environments with observations
    /// of `obs_len` and actions of `act_len` elements, before anything exists: the chunk
    /// pool, each worker's lanes and policy states, the channel slots and the statistics
    /// window. [`AsyncCollector::memory_plan`] returns the same plan once built. (Worker
    /// thread stacks are the system's default and not counted, nor are the policy copies:
    /// their size is the policy's.)
    ///
    /// # Errors
    /// Invalid configuration, as [`AsyncCollector::new`]; sizes too large to address.
    pub fn plan(
        config: &AsyncConfig,
        envs: usize,
        obs_len: usize,
        act_len: usize,
    ) -> Result<MemoryPlan> {
        let (per_worker, chunk_rows) = config.validate(envs)?;
        let (workers, pool) = (config.workers, config.pool_chunks);
        let window = config.collector.stats_window.min(chunk_rows).max(1);
        let pool_bytes = Chunk::<E::Obs, E::Act>::bytes(chunk_rows, obs_len, act_len, window)
            .and_then(|bytes| bytes.checked_mul(pool as u64))
            .filter(|&bytes| bytes <= isize::MAX as u64)
            .ok_or_else(|| {
                Error::config(
                    "steps_per_chunk and pool_chunks",
                    "ask for more memory than this machine can address: use smaller chunks or a smaller pool",
                )
            })?;
        let mut plan = MemoryPlan::new();
        plan.add("async_collector/chunk_pool", Location::Ram, pool_bytes);
        for index in 0..workers {
            plan.nest(
                &format!("async_collector/worker-{index}"),
                &crate::lanes::plan::<E::Obs>(per_worker, obs_len),
            );
            plan.add(
                format!("async_collector/worker-{index}/policy_states"),
                Location::Ram,
                (per_worker * size_of::<P::State>()) as u64,
            );
        }
        let slot = |message: usize| (pool * (message + size_of::<usize>())) as u64;
        plan.add(
            "async_collector/channel_slots",
            Location::Ram,
            slot(size_of::<Box<Chunk<E::Obs, E::Act>>>())
                + slot(size_of::<Message<E::Obs, E::Act>>()),
        );
        plan.add(
            "async_collector/episode_stats",
            Location::Ram,
            (config.collector.stats_window.max(1) * (4 + 4)) as u64,
        );
        Ok(plan)
    }

    /// Splits `envs` (all with the same spaces) over `config.workers` threads, resets
    /// them (environment `i` with seed `config.collector.seed + i`), allocates the chunk
    /// pool and the channels, and starts the workers. Call it on the thread that will
    /// consume: it blocks once (about a millisecond) on the empty channel, so that the
    /// standard library's one-time per-thread channel setup happens here and not in the
    /// first [`AsyncCollector::next_chunk`].
    ///
    /// # Errors
    /// Invalid configuration (see [`AsyncConfig`]; a CUDA device is refused without
    /// touching CUDA), environments with differing spaces, an environment's reset error,
    /// or a thread that could not be started.
    pub fn new(envs: Vec<E>, policy: P, config: AsyncConfig) -> Result<Self> {
        let (per_worker, chunk_rows) = config.validate(envs.len())?;
        let (observation_space, action_space) = crate::lanes::check_envs(&envs)?;
        let (obs_len, act_len) = (observation_space.flat_len(), action_space.flat_len());
        let (total_envs, workers, pool) = (envs.len(), config.workers, config.pool_chunks);
        let collector = &config.collector;
        let window = collector.stats_window.min(chunk_rows).max(1);
        let plan = Self::plan(&config, total_envs, obs_len, act_len)?;
        let random_frames = collector.random_frames.div_ceil(workers as u64);
        let mut groups = Vec::with_capacity(workers);
        let mut rest = envs.into_iter();
        for index in 0..workers {
            let first_env = index * per_worker;
            let group: Vec<E> = rest.by_ref().take(per_worker).collect();
            let seed = collector.seed.wrapping_add(first_env as u64);
            let lanes = Lanes::new(group, seed, collector.non_finite)
                .map_err(|e| globalize(e, first_env))?;
            let random = if random_frames > 0 {
                let seed = (collector.seed ^ 0x5EED).wrapping_add(index as u64);
                Some(ActionSampler::new(&action_space, seed)?)
            } else {
                None
            };
            groups.push((lanes, random));
        }

        let (free, free_receiver) = sync_channel(pool);
        for _ in 0..pool {
            let chunk = Chunk::new(chunk_rows, per_worker, obs_len, act_len, window);
            // The channel holds `pool` chunks and its receiver is alive: this cannot fail.
            free.try_send(Box::new(chunk)).map_err(|_| Error::Stopped {
                reason: ": the chunk pool could not be filled",
            })?;
        }
        let (filled_sender, filled) = sync_channel(pool);
        // The standard library allocates a small per-thread context and a waiter slot
        // the first time a thread blocks on a channel. Block once here, on the empty
        // channel, so that receiving on this thread allocates nothing later (best
        // effort: it costs a millisecond and relies on that first block happening here).
        let _ = filled.recv_timeout(Duration::from_millis(1));
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            version: AtomicU64::new(0),
            policy: Mutex::new(Versioned {
                version: 0,
                policy: policy.clone(),
            }),
            claimed: AtomicU64::new(0),
            total_frames: collector.total_frames,
        });
        let mut this = Self {
            state: State::Running(Link { free, filled }),
            lent: None,
            handles: Vec::with_capacity(workers),
            shared: Arc::clone(&shared),
            config,
            envs: total_envs,
            obs_len,
            act_len,
            chunk_rows,
            stats: EpisodeStats::new(config.collector.stats_window),
            frames: 0,
            plan,
            _envs: PhantomData,
        };
        let free_receiver = Arc::new(Mutex::new(free_receiver));
        for (index, (lanes, random)) in groups.into_iter().enumerate() {
            let worker = Worker {
                index,
                first_env: index * per_worker,
                states: vec![P::State::default(); lanes.len()],
                lanes,
                policy: policy.clone(),
                version: 0,
                random,
                random_frames,
                steps_per_chunk: config.steps_per_chunk,
                frames: 0,
                steps: 0,
                sequence: 0,
                shared: Arc::clone(&shared),
                free: Arc::clone(&free_receiver),
                filled: filled_sender.clone(),
            };
            let name = format!("rl-collect-worker-{index}");
            // On failure `this` drops first, which stops and joins the workers started.
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || worker.main())
                .map_err(|source| {
                    Error::Config(rl_core::Error::Io {
                        context: format!("starting the thread {name}"),
                        source,
                    })
                })?;
            this.handles.push(handle);
        }
        Ok(this)
    }
}

impl<E, P> AsyncCollector<E, P>
where
    E: Env,
    P: Policy<Obs = E::Obs, Act = E::Act>,
{
    /// Number of environments (all workers).
    pub fn envs(&self) -> usize {
        self.envs
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.config.workers
    }

    /// Rows of a full chunk: `steps_per_chunk x envs / workers`.
    pub fn chunk_rows(&self) -> usize {
        self.chunk_rows
    }

    /// The configuration.
    pub fn config(&self) -> &AsyncConfig {
        &self.config
    }

    /// Frames delivered to the consumer so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Statistics of the episodes in every chunk delivered so far.
    pub fn stats(&self) -> &EpisodeStats {
        &self.stats
    }

    /// The statistics, mutably: to keep and drain finished episodes
    /// ([`EpisodeStats::keep_ended`]; a chunk adds only the episodes of its window, and
    /// not when they ended).
    pub fn stats_mut(&mut self) -> &mut EpisodeStats {
        &mut self.stats
    }

    /// Continues saved episode statistics (a resumed run's): the counts and window go
    /// on from them. The workers' environments start new episodes.
    ///
    /// # Errors
    /// Damaged statistics; nothing changes then.
    pub fn restore_stats(&mut self, saved: &crate::SavedStats) -> Result<()> {
        self.stats.restore(saved)
    }

    /// Version of the latest policy given to [`AsyncCollector::set_policy`] (0: the
    /// policy given to [`AsyncCollector::new`]).
    pub fn version(&self) -> u64 {
        self.shared.version.load(Ordering::Acquire)
    }

    /// Memory the collector holds besides its environments and policies: the chunk pool,
    /// each worker's lanes and policy states, the channel slots and the statistics
    /// window. Fixed at construction. (Worker thread stacks are the system's default
    /// and not counted.)
    pub fn memory_plan(&self) -> MemoryPlan {
        self.plan.clone()
    }

    /// Publishes `policy` to the workers and returns its version (one more than the
    /// last). Each worker clones it when it starts its next chunk (an allocation, only
    /// when the weights change); the chunks it is filling now keep the version they
    /// started with. Policy states (recurrent memory) are kept.
    pub fn set_policy(&self, policy: P) -> u64 {
        let mut latest = self
            .shared
            .policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let old = std::mem::replace(&mut latest.policy, policy);
        latest.version += 1;
        let version = latest.version;
        self.shared.version.store(version, Ordering::Release);
        drop(latest);
        drop(old);
        version
    }

    /// Waits for the next filled chunk (from any worker) and lends it; dropping the
    /// reference returns the chunk to the pool. The chunk's frames and episode statistics
    /// are added to [`AsyncCollector::frames`] and [`AsyncCollector::stats`]. Allocates
    /// nothing.
    ///
    /// # Errors
    /// [`Error::Worker`] or [`Error::WorkerPanicked`] when a worker failed (the collector
    /// then stops); [`Error::Stopped`] after a failure, after `total_frames`, or if every
    /// worker exited without a word.
    pub fn next_chunk(&mut self) -> Result<ChunkRef<'_, E::Obs, E::Act>> {
        if let State::Running(link) = &self.state
            && let Some(chunk) = self.lent.take()
        {
            // A leaked `ChunkRef` did not return its chunk: do it now.
            let _ = link.free.try_send(chunk);
        }
        let done = self
            .config
            .collector
            .total_frames
            .is_some_and(|total| self.frames >= total);
        if done && matches!(self.state, State::Running(_)) {
            self.shutdown(": it collected its total frames");
        }
        let received = match &self.state {
            State::Stopped(reason) => return Err(Error::Stopped { reason }),
            State::Running(link) => link.filled.recv(),
        };
        let chunk = match received {
            Ok(Message::Chunk(chunk)) => chunk,
            Ok(Message::Failed(error)) => {
                self.shutdown(" after a worker failed");
                return Err(error);
            }
            Err(_) => {
                let reason = " because every worker exited without a report";
                self.shutdown(reason);
                return Err(Error::Stopped { reason });
            }
        };
        self.frames += chunk.rows as u64;
        self.stats.merge(&chunk.stats);
        let lent = &mut self.lent;
        match &self.state {
            State::Running(link) => {
                *lent = Some(chunk);
                Ok(ChunkRef {
                    lent,
                    free: &link.free,
                })
            }
            State::Stopped(reason) => Err(Error::Stopped { reason }),
        }
    }

    /// Collects one chunk into a replay buffer whose schema has the columns `obs`,
    /// `action`, `reward`, `terminated`, `truncated` and `next_obs`, optionally
    /// `log_prob` and `value`, and no others (as [`SyncCollector::collect`](crate::SyncCollector::collect)):
    /// [`AsyncCollector::next_chunk`], then [`ChunkRef::write_to`]. Allocates nothing.
    ///
    /// # Errors
    /// A schema with other columns (nothing consumed); as
    /// [`AsyncCollector::next_chunk`]; a storage error (the chunk is then lost, so the
    /// collector stops).
    pub fn collect<S: HostStorage, Q: Sampler>(
        &mut self,
        replay: &mut ReplayBuffer<S, Q>,
    ) -> Result<BatchReport> {
        Layout::replay(replay.schema())?;
        // Before a chunk is consumed: a wrong width would fail only at the write.
        Layout::check_widths::<E::Obs, E::Act>(
            replay.schema(),
            "replay",
            self.obs_len,
            self.act_len,
        )?;
        let (rows, written) = {
            let chunk = self.next_chunk()?;
            (chunk.rows(), chunk.write_to(replay))
        };
        if let Err(error) = written {
            self.shutdown(" after a failure");
            return Err(error);
        }
        let config = &self.config.collector;
        Ok(BatchReport {
            frames: rows as u64,
            total_frames: self.frames,
            episodes: self.stats.episodes(),
            mean_return: self.stats.mean_return(),
            memory: config
                .report_memory
                .then(ProcessMemory::read)
                .and_then(|m| m.ok()),
            done: config
                .total_frames
                .is_some_and(|total| self.frames >= total),
        })
    }

    /// Stops the workers, closes the channels and joins the threads.
    fn shutdown(&mut self, reason: &'static str) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Dropping the consumer's channel ends wakes workers blocked on either channel.
        self.state = State::Stopped(reason);
        for handle in self.handles.drain(..) {
            // Workers catch their own panics: a join error cannot carry anything new.
            let _ = handle.join();
        }
    }
}

impl<E: Env, P: Policy<Obs = E::Obs, Act = E::Act>> Drop for AsyncCollector<E, P> {
    fn drop(&mut self) {
        self.shutdown("");
    }
}

impl<E: Env, P: Policy<Obs = E::Obs, Act = E::Act>> fmt::Debug for AsyncCollector<E, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncCollector")
            .field("envs", &self.envs)
            .field("config", &self.config)
            .field("chunk_rows", &self.chunk_rows)
            .field("frames", &self.frames)
            .field("version", &self.version())
            .field(
                "stopped",
                &match self.state {
                    State::Running(_) => None,
                    State::Stopped(reason) => Some(reason),
                },
            )
            .finish_non_exhaustive()
    }
}

/// A filled chunk lent by [`AsyncCollector::next_chunk`]: the transitions of one
/// worker's environments over consecutive steps. Dropping it returns the chunk to the
/// pool.
///
/// Rows are step-major: row `step * envs() + env` is environment `first_env() + env` at
/// the chunk's `step`-th step, so a row's successor for the same environment is
/// `envs()` rows later. `next_obs` is the true next observation: where an episode ended
/// (`terminated` or `truncated`), its final observation, never the reset one.
pub struct ChunkRef<'a, O, A> {
    /// `Some` until dropped.
    lent: &'a mut Option<Box<Chunk<O, A>>>,
    free: &'a SyncSender<Box<Chunk<O, A>>>,
}

impl<O: Element, A: Element> ChunkRef<'_, O, A> {
    fn chunk(&self) -> &Chunk<O, A> {
        self.lent
            .as_deref()
            .expect("a chunk reference holds its chunk until it is dropped")
    }

    /// Rows (transitions) in the chunk: `steps x envs()`.
    pub fn rows(&self) -> usize {
        self.chunk().rows
    }

    /// Environments per step (the worker's environments).
    pub fn envs(&self) -> usize {
        self.chunk().envs
    }

    /// Index, in the collector, of the worker's first environment.
    pub fn first_env(&self) -> usize {
        self.chunk().first_env
    }

    /// The worker that filled the chunk.
    pub fn worker(&self) -> usize {
        self.chunk().worker
    }

    /// Version of the policy that filled the chunk (see [`AsyncCollector::set_policy`]).
    pub fn version(&self) -> u64 {
        self.chunk().version
    }

    /// Position of the chunk among its worker's chunks (0, 1, 2 ...: consecutive, since
    /// none is lost).
    pub fn sequence(&self) -> u64 {
        self.chunk().sequence
    }

    /// Observations, `rows x obs_len`.
    pub fn obs(&self) -> &[O] {
        let c = self.chunk();
        &c.obs[..c.rows * c.obs_len]
    }

    /// Actions, `rows x act_len`.
    pub fn actions(&self) -> &[A] {
        let c = self.chunk();
        &c.action[..c.rows * c.act_len]
    }

    /// Rewards.
    pub fn rewards(&self) -> &[f32] {
        let c = self.chunk();
        &c.reward[..c.rows]
    }

    /// Whether the episode reached a terminal state at this transition.
    pub fn terminated(&self) -> &[Flag] {
        let c = self.chunk();
        &c.terminated[..c.rows]
    }

    /// Whether the episode was cut by a time limit at this transition.
    pub fn truncated(&self) -> &[Flag] {
        let c = self.chunk();
        &c.truncated[..c.rows]
    }

    /// True next observations, `rows x obs_len`.
    pub fn next_obs(&self) -> &[O] {
        let c = self.chunk();
        &c.next_obs[..c.rows * c.obs_len]
    }

    /// Log-probabilities of the actions (0 for random warm-up actions).
    pub fn log_probs(&self) -> &[f32] {
        let c = self.chunk();
        &c.log_prob[..c.rows]
    }

    /// Value estimates of the observations (0 for random warm-up actions).
    pub fn values(&self) -> &[f32] {
        let c = self.chunk();
        &c.value[..c.rows]
    }

    /// Episodes that ended in this chunk (the window keeps at most the last
    /// `min(stats_window, chunk rows)`; counts are exact).
    pub fn stats(&self) -> &EpisodeStats {
        &self.chunk().stats
    }

    /// Writes the chunk's rows into `replay` with one `extend` (schema as for
    /// [`AsyncCollector::collect`]). Allocates nothing.
    ///
    /// # Errors
    /// A schema with other columns, or the storage's error.
    pub fn write_to<S: HostStorage, Q: Sampler>(
        &self,
        replay: &mut ReplayBuffer<S, Q>,
    ) -> Result<()> {
        let layout = Layout::replay(replay.schema())?;
        let columns = layout.arrange([
            element_slice(self.obs()),
            element_slice(self.actions()),
            self.rewards().into(),
            self.terminated().into(),
            self.truncated().into(),
            element_slice(self.next_obs()),
            self.log_probs().into(),
            self.values().into(),
            ColumnSlice::F32(&[]),
        ]);
        replay.extend(layout.columns(&columns))?;
        Ok(())
    }
}

impl<O, A> Drop for ChunkRef<'_, O, A> {
    fn drop(&mut self) {
        if let Some(chunk) = self.lent.take() {
            // Never blocks: the channel has room for the whole pool. If every worker has
            // exited, the chunk is simply freed.
            let _ = self.free.try_send(chunk);
        }
    }
}

impl<O: Element, A: Element> fmt::Debug for ChunkRef<'_, O, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkRef")
            .field("worker", &self.worker())
            .field("sequence", &self.sequence())
            .field("version", &self.version())
            .field("rows", &self.rows())
            .field("envs", &self.envs())
            .finish_non_exhaustive()
    }
}
