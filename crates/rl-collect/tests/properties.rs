//! Property tests of both collectors against a model of their environments.
//!
//! Scripted environments emit the observation `(env, episode, step)` as exact `f32`
//! values and end each episode after a length drawn by proptest, by termination,
//! truncation or both; a recurrent policy writes out what its per-environment state
//! remembers. What the synchronous collector stores (replay batches and rollouts, mixed)
//! and what the asynchronous one delivers (into a replay buffer or read from chunks, 1 to
//! 3 workers) must be, environment by environment, exactly the model's transitions: none
//! lost, duplicated or reordered across auto-resets; at an episode's last step the next
//! observation is the final one, never the reset one; every policy state is reset to its
//! default exactly when its environment starts an episode, and at no other time (a
//! weight update included); and the episode statistics count what the model ended.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers may unwrap: a failure is a failed test"
)]

use proptest::collection::vec;
use proptest::prelude::*;
use rl_collect::{
    ActOutput, AsyncCollector, AsyncConfig, ChunkRef, CollectorConfig, EpisodeStats, Error, Policy,
    PolicyError, SyncCollector, ValuePolicy,
};
use rl_core::{BoxSpace, Column, DType, Env, Field, Flag, Schema, Space, Step, TransitionSchema};
use rl_storage::{ram::RamStorage, replay::ReplayBuffer, rollout::RolloutBuffer, sampler::Uniform};

/// Observation elements: environment, episode, step within the episode.
const OBS_LEN: usize = 3;
/// Discrete actions. The policy answers its step counter, far below this unless a state
/// is never reset (then the stored action shows it, instead of the environment refusing).
const ACTIONS: u32 = 1 << 16;
/// Statistics window holding every episode of a test, so that means are over all of them.
const WINDOW: usize = 1 << 16;
/// Chunks an asynchronous test may read before it calls the collector stuck.
const MAX_CHUNKS: usize = 10_000;

/// How an episode of the model ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Terminated,
    Truncated,
    Both,
}

impl End {
    /// `(terminated, truncated)` at the episode's last step.
    fn flags(self) -> (bool, bool) {
        match self {
            End::Terminated => (true, false),
            End::Truncated => (false, true),
            End::Both => (true, true),
        }
    }
}

/// One episode of a schedule: its length (at least 1) and how it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Episode {
    len: u32,
    end: End,
}

fn observation(env: u32, episode: u32, step: u32) -> [f32; OBS_LEN] {
    [env as f32, episode as f32, step as f32]
}

/// A distinct, exact number for each observation (every part stays below 1024, the
/// result below 2^24).
fn code(obs: &[f32]) -> f32 {
    (obs[0] * 1024.0 + obs[1]) * 1024.0 + obs[2]
}

/// The environment the collectors step: episode `k` of environment `id` follows
/// `schedule[k % schedule.len()]`; observation `(id, k, steps taken in the episode)`,
/// reward `steps taken`. Refuses to step before a reset or after an episode ended.
#[derive(Clone, Debug)]
struct Scripted {
    id: u32,
    schedule: Vec<Episode>,
    /// The episode under way (`None` before the first reset).
    episode: Option<u32>,
    step: u32,
    ended: bool,
    observation_space: Space,
    action_space: Space,
}

impl Scripted {
    fn new(id: u32, schedule: Vec<Episode>) -> Self {
        Self {
            id,
            schedule,
            episode: None,
            step: 0,
            ended: false,
            observation_space: Space::Box(
                BoxSpace::uniform(0.0, 1e7, &[OBS_LEN], DType::F32).unwrap(),
            ),
            action_space: Space::discrete(ACTIONS).unwrap(),
        }
    }
}

impl Env for Scripted {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        &self.action_space
    }

    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        rl_core::env::check_len("observation buffer", OBS_LEN, obs.len())?;
        let episode = self.episode.map_or(0, |e| e + 1);
        self.episode = Some(episode);
        self.step = 0;
        self.ended = false;
        obs.copy_from_slice(&observation(self.id, episode, 0));
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<Step> {
        rl_core::env::discrete_action(action, ACTIONS)?;
        rl_core::env::check_len("observation buffer", OBS_LEN, obs.len())?;
        let Some(episode) = self.episode else {
            return Err(rl_core::Error::NeedsReset {
                state: "before the first reset",
            });
        };
        if self.ended {
            return Err(rl_core::Error::NeedsReset {
                state: "after the episode ended",
            });
        }
        let Episode { len, end } = self.schedule[episode as usize % self.schedule.len()];
        self.step += 1;
        obs.copy_from_slice(&observation(self.id, episode, self.step));
        self.ended = self.step == len;
        let (terminated, truncated) = if self.ended {
            end.flags()
        } else {
            (false, false)
        };
        Ok(Step {
            reward: self.step as f32,
            terminated,
            truncated,
        })
    }
}

/// What a [`Recorder`] state remembers since it was last reset to its default.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Memory {
    /// Observations acted on.
    acted: u32,
    /// Code of the first of them.
    first: Option<f32>,
}

/// A recurrent policy that writes its memory out. Action: observations its state acted on
/// before this one (the step within the episode, if the state was reset exactly at the
/// episode's start); log-prob: code of the first observation its state saw (the episode's
/// reset observation, if so); value: code of the observation (for rollouts too).
#[derive(Clone, Copy, Debug, Default)]
struct Recorder;

impl Policy for Recorder {
    type Obs = f32;
    type Act = u32;
    type State = Memory;

    fn act(
        &mut self,
        obs: &[f32],
        states: &mut [Memory],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        for (i, (state, obs)) in states.iter_mut().zip(obs.chunks_exact(OBS_LEN)).enumerate() {
            let first = *state.first.get_or_insert(code(obs));
            out.actions[i] = state.acted;
            out.log_probs[i] = first;
            out.values[i] = code(obs);
            state.acted += 1;
        }
        Ok(())
    }
}

impl ValuePolicy for Recorder {
    fn values(
        &mut self,
        obs: &[f32],
        _states: &[Memory],
        values: &mut [f32],
    ) -> Result<(), PolicyError> {
        for (value, obs) in values.iter_mut().zip(obs.chunks_exact(OBS_LEN)) {
            *value = code(obs);
        }
        Ok(())
    }
}

/// What a transition says about the observation after it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Next {
    /// The next observation (replay buffers, chunks).
    Obs([f32; OBS_LEN]),
    /// What a rollout keeps instead: the value of the next observation where the
    /// trajectory is cut without terminating (a truncation: the final observation; the
    /// rollout's last step: the next one), 0 elsewhere; and whether the row is of the
    /// rollout's last step.
    FinalValue(f32, bool),
}

/// One transition, as stored or as the model expects it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Transition {
    obs: [f32; OBS_LEN],
    action: u32,
    reward: f32,
    terminated: bool,
    truncated: bool,
    log_prob: f32,
    value: f32,
    next: Next,
}

impl Transition {
    fn ends_episode(&self) -> bool {
        self.terminated || self.truncated
    }

    /// The transition as a rollout stores it, at its last step or not.
    fn in_rollout(&self, last: bool) -> Self {
        let final_value = match self.next {
            Next::Obs(next) if (self.truncated || last) && !self.terminated => code(&next),
            _ => 0.0,
        };
        Self {
            next: Next::FinalValue(final_value, last),
            ..*self
        }
    }
}

/// The model: the first `count` transitions of environment `env` following `schedule`
/// with the [`Recorder`] policy, its state reset at every episode start.
fn model(env: u32, schedule: &[Episode], count: usize) -> Vec<Transition> {
    let mut out = Vec::with_capacity(count);
    for (episode, &Episode { len, end }) in (0..).zip(schedule.iter().cycle()) {
        for step in 0..len {
            if out.len() == count {
                return out;
            }
            let (terminated, truncated) = if step + 1 == len {
                end.flags()
            } else {
                (false, false)
            };
            out.push(Transition {
                obs: observation(env, episode, step),
                action: step,
                reward: (step + 1) as f32,
                terminated,
                truncated,
                log_prob: code(&observation(env, episode, 0)),
                value: code(&observation(env, episode, step)),
                // At the last step: the final observation, never `(env, episode + 1, 0)`.
                next: Next::Obs(observation(env, episode, step + 1)),
            });
        }
    }
    out
}

/// Steps each environment must take to run through its whole schedule once and one step
/// into the repeat, so that every end in the schedule and the reset after it are seen.
fn steps_for_a_cycle(schedules: &[Vec<Episode>]) -> usize {
    schedules
        .iter()
        .map(|s| s.iter().map(|e| e.len as usize).sum::<usize>() + 1)
        .max()
        .unwrap_or(1)
}

/// Episode statistics, as [`EpisodeStats`] reports them with a window that holds every
/// episode.
#[derive(Debug, PartialEq)]
struct Totals {
    episodes: u64,
    terminated: u64,
    truncated: u64,
    mean_length: Option<f32>,
    mean_return: Option<f32>,
}

impl Totals {
    fn of(stats: &EpisodeStats) -> Self {
        Self {
            episodes: stats.episodes(),
            terminated: stats.terminated(),
            truncated: stats.truncated(),
            mean_length: stats.mean_length(),
            mean_return: stats.mean_return(),
        }
    }
}

/// Checks stored transitions against the model, environment by environment, in order.
struct Expect {
    schedules: Vec<Vec<Episode>>,
    /// The model's transitions of each environment, extended as the checks go.
    model: Vec<Vec<Transition>>,
    /// Transitions of each environment checked so far.
    seen: Vec<usize>,
}

impl Expect {
    fn new(schedules: &[Vec<Episode>]) -> Self {
        Self {
            schedules: schedules.to_vec(),
            model: vec![Vec::new(); schedules.len()],
            seen: vec![0; schedules.len()],
        }
    }

    /// Transition `k` of environment `env` in the model.
    fn want(&mut self, env: usize, k: usize) -> Transition {
        let rows = &mut self.model[env];
        if k >= rows.len() {
            *rows = model(
                env as u32,
                &self.schedules[env],
                (k + 1).max(2 * rows.len()),
            );
        }
        rows[k]
    }

    /// Checks that `row` is the next transition of the environment its observation
    /// names. `what` says where the row was read.
    fn check(&mut self, row: &Transition, what: &str) -> Result<(), TestCaseError> {
        let env = row.obs[0] as usize;
        prop_assert!(
            env < self.model.len() && row.obs[0] == env as f32,
            "{}: observation {:?} names no environment",
            what,
            row.obs
        );
        let k = self.seen[env];
        let model = self.want(env, k);
        let want = match row.next {
            Next::Obs(_) => model,
            Next::FinalValue(_, last) => model.in_rollout(last),
        };
        prop_assert_eq!(
            row.obs,
            want.obs,
            "{}: transition {} of environment {} starts from the wrong observation (lost, duplicated or reordered)",
            what,
            k,
            env
        );
        if want.ends_episode() {
            prop_assert_eq!(
                row.next,
                want.next,
                "{}: at the end of episode {} of environment {}, the next observation must be the final one, not the reset one",
                what,
                want.obs[1],
                env
            );
        }
        prop_assert_eq!(
            (row.action, row.log_prob),
            (want.action, want.log_prob),
            "{}: the policy state of environment {} at {:?} was not reset exactly at the episode start",
            what,
            env,
            row.obs
        );
        prop_assert_eq!(
            row,
            &want,
            "{}: transition {} of environment {}",
            what,
            k,
            env
        );
        self.seen[env] += 1;
        Ok(())
    }

    /// The transitions checked so far.
    fn checked(&self) -> impl Iterator<Item = &Transition> {
        self.model
            .iter()
            .zip(&self.seen)
            .flat_map(|(rows, &seen)| &rows[..seen])
    }

    /// What [`EpisodeStats`] must report after the transitions checked so far.
    fn totals(&self) -> Totals {
        let ends: Vec<&Transition> = self.checked().filter(|t| t.ends_episode()).collect();
        let terminated = ends.iter().filter(|t| t.terminated).count() as u64;
        let mean = |values: Vec<f32>| {
            (!values.is_empty()).then(|| values.iter().sum::<f32>() / values.len() as f32)
        };
        // The reward of an episode's last step is its length (rewards are 1, 2, ... len):
        // every sum is a small integer, exact in f32 whatever the order.
        let lengths: Vec<f32> = ends.iter().map(|t| t.reward).collect();
        let returns = lengths.iter().map(|&l| l * (l + 1.0) / 2.0).collect();
        Totals {
            episodes: ends.len() as u64,
            terminated,
            truncated: ends.len() as u64 - terminated,
            mean_length: mean(lengths),
            mean_return: mean(returns),
        }
    }

    /// Checks that the transitions seen include an episode that only terminated and one
    /// that was only truncated (schedules are drawn so that runs long enough have both).
    fn saw_both_ends(&self) -> Result<(), TestCaseError> {
        let kind =
            |flags: (bool, bool)| self.checked().any(|t| (t.terminated, t.truncated) == flags);
        prop_assert!(kind((true, false)), "no terminated episode seen");
        prop_assert!(kind((false, true)), "no truncated episode seen");
        Ok(())
    }
}

/// The replay columns a collector fills, listed in `order` (a permutation of `0..8`).
fn schema(order: &[usize]) -> Schema {
    let columns = [
        Column::new("obs", DType::F32, &[OBS_LEN]),
        Column::scalar("action", DType::U32),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
        Column::new("next_obs", DType::F32, &[OBS_LEN]),
        Column::scalar("log_prob", DType::F32),
        Column::scalar("value", DType::F32),
    ];
    Schema::new(order.iter().map(|&i| columns[i].clone())).unwrap()
}

fn replay(order: &[usize], capacity: usize) -> ReplayBuffer {
    ReplayBuffer::new(
        RamStorage::new(schema(order), capacity, None).unwrap(),
        Uniform::new(0),
    )
}

fn row_of(data: &[f32], row: usize) -> [f32; OBS_LEN] {
    data[row * OBS_LEN..(row + 1) * OBS_LEN].try_into().unwrap()
}

/// The rows of `replay` after its first `from`, oldest first.
fn replay_rows(replay: &ReplayBuffer, from: usize) -> Vec<Transition> {
    let obs = replay.column::<f32>("obs").unwrap();
    let action = replay.column::<u32>("action").unwrap();
    let reward = replay.column::<f32>("reward").unwrap();
    let terminated = replay.column::<Flag>("terminated").unwrap();
    let truncated = replay.column::<Flag>("truncated").unwrap();
    let next_obs = replay.column::<f32>("next_obs").unwrap();
    let log_prob = replay.column::<f32>("log_prob").unwrap();
    let value = replay.column::<f32>("value").unwrap();
    replay
        .positions()
        .skip(from)
        .map(|p| Transition {
            obs: row_of(obs, p),
            action: action[p],
            reward: reward[p],
            terminated: terminated[p].get(),
            truncated: truncated[p].get(),
            log_prob: log_prob[p],
            value: value[p],
            next: Next::Obs(row_of(next_obs, p)),
        })
        .collect()
}

/// The rows of a filled rollout, time-major.
fn rollout_rows(rollout: &RolloutBuffer) -> Vec<Transition> {
    let f32s = |field| rollout.field::<f32>(field).unwrap();
    let flags = |field| rollout.field::<Flag>(field).unwrap();
    let actions = rollout.field::<u32>(Field::Action).unwrap();
    let last_step = (rollout.steps() - 1) * rollout.envs();
    (0..rollout.rows())
        .map(|r| Transition {
            obs: row_of(f32s(Field::Obs), r),
            action: actions[r],
            reward: f32s(Field::Reward)[r],
            terminated: flags(Field::Terminated)[r].get(),
            truncated: flags(Field::Truncated)[r].get(),
            log_prob: f32s(Field::LogProb)[r],
            value: f32s(Field::Value)[r],
            next: Next::FinalValue(f32s(Field::FinalValue)[r], r >= last_step),
        })
        .collect()
}

/// Row `r` of a chunk.
fn chunk_row(chunk: &ChunkRef<'_, f32, u32>, r: usize) -> Transition {
    Transition {
        obs: row_of(chunk.obs(), r),
        action: chunk.actions()[r],
        reward: chunk.rewards()[r],
        terminated: chunk.terminated()[r].get(),
        truncated: chunk.truncated()[r].get(),
        log_prob: chunk.log_probs()[r],
        value: chunk.values()[r],
        next: Next::Obs(row_of(chunk.next_obs(), r)),
    }
}

fn scripted(schedules: &[Vec<Episode>]) -> Vec<Scripted> {
    (0..)
        .zip(schedules)
        .map(|(id, schedule)| Scripted::new(id, schedule.clone()))
        .collect()
}

/// Where a synchronous batch goes.
#[derive(Clone, Copy, Debug)]
enum Sink {
    Replay,
    Rollout,
}

/// Collects batches of `steps` steps into `sinks` in turn (as many batches as `sinks`
/// has, more if needed to run through every schedule), checking every transition.
fn check_sync(
    schedules: &[Vec<Episode>],
    steps: usize,
    sinks: &[Sink],
    order: &[usize],
    seed: u64,
) -> Result<(), TestCaseError> {
    let n = schedules.len();
    let batches = sinks
        .len()
        .max(steps_for_a_cycle(schedules).div_ceil(steps));
    let mut expect = Expect::new(schedules);
    let config = CollectorConfig {
        seed,
        stats_window: WINDOW,
        report_memory: false,
        ..CollectorConfig::new(n * steps)
    };
    let mut collector = SyncCollector::new(scripted(schedules), Recorder, config).unwrap();
    let mut replay = replay(order, n * steps * batches);
    let rollout_schema = TransitionSchema::new(DType::F32, &[OBS_LEN], DType::U32, &[])
        .for_rollout()
        .build()
        .unwrap();
    let mut rollout = RolloutBuffer::new(rollout_schema, steps, n, None).unwrap();
    for batch in 0..batches {
        let report = match sinks[batch % sinks.len()] {
            Sink::Replay => {
                let before = replay.len();
                let report = collector.collect(&mut replay).unwrap();
                prop_assert_eq!(replay.len(), before + n * steps);
                for row in replay_rows(&replay, before) {
                    expect.check(&row, &format!("replay batch {batch}"))?;
                }
                report
            }
            Sink::Rollout => {
                rollout.clear();
                let report = collector.collect_rollout(&mut rollout).unwrap();
                prop_assert_eq!(rollout.rows(), n * steps);
                for row in rollout_rows(&rollout) {
                    expect.check(&row, &format!("rollout batch {batch}"))?;
                }
                // The last step's final values (checked row by row above) are where GAE
                // bootstraps from: an environment that goes on continues from exactly
                // that observation.
                let last = &rollout.field::<f32>(Field::FinalValue).unwrap()[(steps - 1) * n..];
                let terminated =
                    &rollout.field::<Flag>(Field::Terminated).unwrap()[(steps - 1) * n..];
                let truncated =
                    &rollout.field::<Flag>(Field::Truncated).unwrap()[(steps - 1) * n..];
                for (env, &value) in last.iter().enumerate() {
                    if !terminated[env].get() && !truncated[env].get() {
                        let next = expect.want(env, expect.seen[env]);
                        prop_assert_eq!(value, code(&next.obs), "last value of env {}", env);
                    }
                }
                report
            }
        };
        let done = (batch + 1) * steps;
        prop_assert!(
            expect.seen.iter().all(|&seen| seen == done),
            "after batch {}, every environment has {} transitions: {:?}",
            batch,
            done,
            &expect.seen
        );
        prop_assert_eq!(report.frames, (n * steps) as u64);
        prop_assert_eq!(report.total_frames, (n * done) as u64);
        let totals = expect.totals();
        prop_assert_eq!(report.episodes, totals.episodes);
        prop_assert_eq!(Totals::of(collector.stats()), totals);
    }
    expect.saw_both_ends()
}

/// With `total_frames`, collects chunks into a replay buffer until done, checking every
/// transition; the rows of different workers interleave.
fn check_async_replay(
    schedules: &[Vec<Episode>],
    workers: usize,
    steps: usize,
    total: u64,
    seed: u64,
) -> Result<(), TestCaseError> {
    let n = schedules.len();
    let per_worker = n / workers;
    let mut config = AsyncConfig::new(
        workers,
        steps,
        CollectorConfig {
            seed,
            stats_window: WINDOW,
            report_memory: false,
            total_frames: Some(total),
            ..CollectorConfig::new(steps * per_worker)
        },
    );
    // The smallest pool: workers wait for chunks the consumer returns.
    config.pool_chunks = workers + 1;
    // Frames come in whole steps of one worker.
    let delivered = total.div_ceil(per_worker as u64) * per_worker as u64;
    let mut expect = Expect::new(schedules);
    let mut collector = AsyncCollector::new(scripted(schedules), Recorder, config).unwrap();
    let mut replay = replay(&[0, 1, 2, 3, 4, 5, 6, 7], delivered as usize);
    let mut chunks = 0;
    loop {
        let before = replay.len();
        let report = collector.collect(&mut replay).unwrap();
        prop_assert_eq!(report.frames as usize, replay.len() - before);
        for row in replay_rows(&replay, before) {
            expect.check(&row, &format!("chunk {chunks}"))?;
        }
        prop_assert_eq!(report.episodes, expect.totals().episodes);
        chunks += 1;
        prop_assert!(chunks < MAX_CHUNKS, "never done");
        if report.done {
            break;
        }
    }
    prop_assert_eq!(replay.len() as u64, delivered);
    prop_assert_eq!(collector.frames(), delivered);
    let after = collector.collect(&mut replay);
    prop_assert!(
        matches!(after, Err(Error::Stopped { .. })),
        "after total_frames: {:?}",
        after
    );
    for (w, envs) in expect.seen.chunks_exact(per_worker).enumerate() {
        prop_assert!(
            envs.iter().all(|&seen| seen == envs[0]),
            "the environments of worker {} step together: {:?}",
            w,
            envs
        );
    }
    prop_assert_eq!(Totals::of(collector.stats()), expect.totals());
    Ok(())
}

/// Reads chunks until every worker delivered enough to run through its schedules and at
/// least one chunk filled by a new policy published after `publish_after` chunks (policy
/// states must survive the update), checking each chunk's metadata and layout and every
/// transition.
fn check_async_chunks(
    schedules: &[Vec<Episode>],
    workers: usize,
    steps: usize,
    publish_after: usize,
    seed: u64,
) -> Result<(), TestCaseError> {
    let n = schedules.len();
    let per_worker = n / workers;
    let config = AsyncConfig::new(
        workers,
        steps,
        CollectorConfig {
            seed,
            stats_window: WINDOW,
            report_memory: false,
            ..CollectorConfig::new(steps * per_worker)
        },
    );
    let needed = steps_for_a_cycle(schedules).div_ceil(steps);
    let mut expect = Expect::new(schedules);
    let mut collector = AsyncCollector::new(scripted(schedules), Recorder, config).unwrap();
    let mut delivered = vec![0u64; workers];
    let mut versions = vec![0u64; workers];
    let mut published = 0;
    let mut chunks = 0;
    while published == 0
        || (0..workers).any(|w| delivered[w] < needed as u64 || versions[w] < published)
    {
        prop_assert!(chunks < MAX_CHUNKS, "a worker never delivers");
        if chunks == publish_after {
            published = collector.set_policy(Recorder);
        }
        let chunk = collector.next_chunk().unwrap();
        let w = chunk.worker();
        prop_assert!(w < workers);
        prop_assert_eq!(chunk.sequence(), delivered[w], "chunks of worker {}", w);
        prop_assert!(
            (versions[w]..=published).contains(&chunk.version()),
            "worker {} went from policy version {} to {} (published {})",
            w,
            versions[w],
            chunk.version(),
            published
        );
        prop_assert_eq!(chunk.first_env(), w * per_worker);
        prop_assert_eq!(chunk.envs(), per_worker);
        prop_assert_eq!(chunk.rows(), steps * per_worker);
        let mut ends = (0, 0);
        for r in 0..chunk.rows() {
            let row = chunk_row(&chunk, r);
            prop_assert_eq!(
                row.obs[0],
                (chunk.first_env() + r % per_worker) as f32,
                "rows are step-major"
            );
            expect.check(&row, &format!("chunk {chunks} (worker {w})"))?;
            if row.ends_episode() {
                ends.0 += 1;
                ends.1 += u64::from(row.terminated);
            }
        }
        prop_assert_eq!((chunk.stats().episodes(), chunk.stats().terminated()), ends);
        versions[w] = chunk.version();
        delivered[w] += 1;
        chunks += 1;
        drop(chunk);
    }
    for (w, envs) in expect.seen.chunks_exact(per_worker).enumerate() {
        prop_assert!(
            envs.iter()
                .all(|&seen| seen as u64 == delivered[w] * steps as u64),
            "worker {} delivered {} chunks of {} steps, its environments have {:?} transitions",
            w,
            delivered[w],
            steps,
            envs
        );
    }
    prop_assert_eq!(Totals::of(collector.stats()), expect.totals());
    expect.saw_both_ends()
}

fn episode() -> impl Strategy<Value = Episode> {
    let end = prop_oneof![Just(End::Terminated), Just(End::Truncated), Just(End::Both)];
    (1u32..=6, end).prop_map(|(len, end)| Episode { len, end })
}

/// 2 to 5 episodes in any order, at least one that only terminates and one that is only
/// truncated.
fn schedule() -> impl Strategy<Value = Vec<Episode>> {
    (vec(episode(), 0..4), 1u32..=6, 1u32..=6)
        .prop_map(|(mut episodes, terminated, truncated)| {
            episodes.push(Episode {
                len: terminated,
                end: End::Terminated,
            });
            episodes.push(Episode {
                len: truncated,
                end: End::Truncated,
            });
            episodes
        })
        .prop_shuffle()
}

fn sink() -> impl Strategy<Value = Sink> {
    prop_oneof![Just(Sink::Replay), Just(Sink::Rollout)]
}

/// Workers (1 to 3) and one schedule per environment (1 or 2 per worker).
fn workers_and_schedules() -> impl Strategy<Value = (usize, Vec<Vec<Episode>>)> {
    (1usize..=3, 1usize..=2).prop_flat_map(|(workers, per_worker)| {
        (Just(workers), vec(schedule(), workers * per_worker))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn sync_collector_stores_the_model_transitions(
        schedules in vec(schedule(), 1..=4),
        steps in 1usize..=5,
        sinks in vec(sink(), 1..=6),
        order in Just((0..8).collect::<Vec<usize>>()).prop_shuffle(),
        seed: u64,
    ) {
        check_sync(&schedules, steps, &sinks, &order, seed)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn async_collector_delivers_the_model_transitions_into_a_replay(
        (workers, schedules) in workers_and_schedules(),
        steps in 1usize..=4,
        extra in 0u64..40,
        seed: u64,
    ) {
        let total = (schedules.len() * steps_for_a_cycle(&schedules)) as u64 + extra;
        check_async_replay(&schedules, workers, steps, total, seed)?;
    }

    #[test]
    fn async_chunks_hold_the_model_transitions(
        (workers, schedules) in workers_and_schedules(),
        steps in 1usize..=4,
        publish_after in 0usize..4,
        seed: u64,
    ) {
        check_async_chunks(&schedules, workers, steps, publish_after, seed)?;
    }
}
