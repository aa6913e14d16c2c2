//! Rollouts with the policy acting on a second thread while the environments step
//! (`SyncCollector::set_beside`): the same rollouts, statistics and generator draws as on
//! one thread, with every environment step on the calling thread.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use proptest::prelude::*;
use rl_collect::{
    ActOutput, Beside, CollectorConfig, Policy, PolicyError, SyncCollector, ValuePolicy,
};
use rl_core::{BoxSpace, DType, Env, Field, Flag, Space, Step, TransitionSchema};
use rl_storage::rollout::RolloutBuffer;

/// A second thread from `std::thread::scope` at every call, counting the calls.
#[derive(Debug, Default)]
struct Scoped {
    calls: AtomicUsize,
}

impl Beside for Scoped {
    fn beside(&self, on_caller: &mut dyn FnMut(), on_worker: &mut (dyn FnMut() + Send)) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        std::thread::scope(|scope| {
            scope.spawn(on_worker);
            on_caller();
        });
    }
}

/// A walk that ends by termination at pseudo-random steps and by truncation at `limit`:
/// observation `[id, t, x]`, reward from the action and `x`. Records the thread of every
/// step and reset.
#[derive(Debug)]
struct Walk {
    id: u32,
    t: u32,
    x: u64,
    limit: u32,
    threads: Arc<Mutex<Vec<ThreadId>>>,
    space: Space,
    actions: Space,
}

impl Walk {
    fn new(id: u32, limit: u32, threads: Arc<Mutex<Vec<ThreadId>>>) -> Self {
        Self {
            id,
            t: 0,
            x: u64::from(id) * 7919 + 1,
            limit,
            threads,
            space: Space::Box(BoxSpace::uniform(-1e9, 1e9, &[3], DType::F32).unwrap()),
            actions: Space::discrete(3).unwrap(),
        }
    }

    fn write(&self, obs: &mut [f32]) {
        obs.copy_from_slice(&[
            self.id as f32,
            self.t as f32,
            (self.x % 1000) as f32 / 100.0,
        ]);
    }
}

impl Env for Walk {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.space
    }

    fn action_space(&self) -> &Space {
        &self.actions
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        self.threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        self.t = 0;
        if let Some(seed) = seed {
            self.x ^= seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
        self.write(obs);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<Step> {
        rl_core::env::discrete_action(action, 3)?;
        self.threads
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        self.t += 1;
        self.x = self
            .x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407 + u64::from(action[0]));
        self.write(obs);
        Ok(Step {
            reward: action[0] as f32 - (self.x % 7) as f32 * 0.25,
            terminated: (self.x >> 33).is_multiple_of(9),
            truncated: self.t >= self.limit,
        })
    }
}

/// A feed-forward policy that draws each row's action from its own generator, row
/// after row (so acting for the rows in another order would draw other actions).
#[derive(Clone, Debug)]
struct Dice {
    state: u64,
}

impl Policy for Dice {
    type Obs = f32;
    type Act = u32;
    type State = ();

    fn act(
        &mut self,
        obs: &[f32],
        _states: &mut [()],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        for (i, row) in obs.chunks_exact(3).enumerate() {
            self.state ^= self.state << 13;
            self.state ^= self.state >> 7;
            self.state ^= self.state << 17;
            out.actions[i] = (self.state % 3) as u32;
            out.log_probs[i] = -((self.state % 1000) as f32) / 1000.0;
            out.values[i] = row[2] * 2.0 + row[1];
        }
        Ok(())
    }
}

impl ValuePolicy for Dice {
    fn values(
        &mut self,
        obs: &[f32],
        _states: &[()],
        values: &mut [f32],
    ) -> Result<(), PolicyError> {
        for (value, row) in values.iter_mut().zip(obs.chunks_exact(3)) {
            *value = row[2] * 3.0 - row[1];
        }
        Ok(())
    }
}

/// Every column of a rollout, as bits.
fn contents(rollout: &RolloutBuffer) -> Vec<Vec<u32>> {
    let bits = |values: &[f32]| values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let flags = |field| {
        rollout
            .field::<Flag>(field)
            .unwrap()
            .iter()
            .map(|f| u32::from(f.get()))
            .collect()
    };
    vec![
        bits(rollout.field::<f32>(Field::Obs).unwrap()),
        rollout.field::<u32>(Field::Action).unwrap().to_vec(),
        bits(rollout.field::<f32>(Field::Reward).unwrap()),
        flags(Field::Terminated),
        flags(Field::Truncated),
        bits(rollout.field::<f32>(Field::LogProb).unwrap()),
        bits(rollout.field::<f32>(Field::Value).unwrap()),
        bits(rollout.field::<f32>(Field::FinalValue).unwrap()),
    ]
}

/// What a run collected: each rollout's contents, the episode statistics (episodes,
/// terminated, mean return), the current observations, the policy's generator and the
/// thread of every environment step and reset.
type Outcome = (
    Vec<Vec<Vec<u32>>>,
    (u64, u64, Option<f32>),
    Vec<f32>,
    u64,
    Vec<ThreadId>,
);

/// Collects `rollouts` rollouts of `steps` steps from `n` walks, with a `Beside` or not;
/// returns the rollouts' contents, the episode statistics, the current observations, the
/// policy and the walks' step threads.
fn run(n: usize, steps: usize, rollouts: usize, seed: u64, beside: Option<Arc<Scoped>>) -> Outcome {
    let threads = Arc::new(Mutex::new(Vec::new()));
    let walks = (0..n)
        .map(|i| {
            Walk::new(
                i as u32,
                3 + (i as u32 * 5 + seed as u32) % 6,
                Arc::clone(&threads),
            )
        })
        .collect();
    let config = CollectorConfig {
        seed,
        report_memory: false,
        ..CollectorConfig::new(n)
    };
    let mut collector = SyncCollector::new(walks, Dice { state: seed | 1 }, config).unwrap();
    collector.set_beside(beside.map(|b| b as Arc<dyn Beside>));
    let schema = TransitionSchema::new(DType::F32, &[3], DType::U32, &[])
        .for_rollout()
        .build()
        .unwrap();
    let mut rollout = RolloutBuffer::new(schema, steps, n, None).unwrap();
    let mut seen = Vec::new();
    for _ in 0..rollouts {
        rollout.clear();
        let report = collector.collect_rollout(&mut rollout).unwrap();
        assert_eq!(report.frames, (n * steps) as u64);
        seen.push(contents(&rollout));
    }
    let stats = collector.stats();
    let summary = (stats.episodes(), stats.terminated(), stats.mean_return());
    let obs = collector.observations().to_vec();
    let policy = collector.policy().state;
    let threads = threads.lock().unwrap().clone();
    (seen, summary, obs, policy, threads)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn acting_beside_the_steps_collects_the_same_rollouts(
        n in 2usize..7,
        steps in 1usize..9,
        seed in any::<u64>(),
    ) {
        let one = run(n, steps, 3, seed, None);
        let beside = Arc::new(Scoped::default());
        let two = run(n, steps, 3, seed, Some(Arc::clone(&beside)));
        prop_assert_eq!(&one.0, &two.0, "rollouts");
        prop_assert_eq!(one.1, two.1, "episode statistics");
        prop_assert_eq!(&one.2, &two.2, "current observations");
        prop_assert_eq!(one.3, two.3, "the policy's generator");
        // Two phases a step but the last, which has one.
        prop_assert_eq!(beside.calls.load(Ordering::Relaxed), 3 * (2 * steps - 1));
        let caller = std::thread::current().id();
        prop_assert!(two.4.iter().all(|&t| t == caller), "every step and reset on the caller");
    }
}

/// One environment, or none of the policy left to run beside, collects on one thread.
#[test]
fn one_environment_never_uses_the_second_thread() {
    let beside = Arc::new(Scoped::default());
    let one = run(1, 5, 2, 3, None);
    let two = run(1, 5, 2, 3, Some(Arc::clone(&beside)));
    assert_eq!(one.0, two.0);
    assert_eq!(beside.calls.load(Ordering::Relaxed), 0);
}
