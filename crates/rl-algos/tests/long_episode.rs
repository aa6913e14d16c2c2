//! One episode of 1,000,000 steps through a recurrent policy (an LSTM) in the
//! synchronous collector, recording chunk starts into rollouts as training does: after
//! warm-up a step allocates nothing and resident memory stays flat. This binary holds
//! this one test, so that no other test's allocations move the resident set it reads.
#![allow(clippy::unwrap_used, reason = "tests")]

use rl_algos::policy::{History, PolicyConfig, RecurrentCategoricalPolicy};
use rl_collect::{CollectorConfig, SyncCollector};
use rl_core::{BoxSpace, DType, Env, ProcessMemory, Space, Step, TransitionSchema};
use rl_storage::rollout::RolloutBuffer;

#[global_allocator]
static ALLOCATOR: rl_testkit::CountingAllocator = rl_testkit::CountingAllocator;

/// An episode that never ends: a two-element observation that wanders with the actions.
struct Endless {
    t: u64,
    x: f32,
    observation_space: Space,
    action_space: Space,
}

impl Endless {
    fn new() -> Self {
        Self {
            t: 0,
            x: 0.0,
            observation_space: Space::Box(BoxSpace::uniform(-1.0, 1.0, &[2], DType::F32).unwrap()),
            action_space: Space::discrete(2).unwrap(),
        }
    }

    fn observe(&self, obs: &mut [f32]) {
        obs[0] = self.x;
        obs[1] = ((self.t % 97) as f32 / 48.0) - 1.0;
    }
}

impl Env for Endless {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        &self.action_space
    }

    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        (self.t, self.x) = (0, 0.0);
        self.observe(obs);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<Step> {
        self.t += 1;
        let push = if action[0] == 1 { 0.01 } else { -0.01 };
        self.x = (self.x + push).clamp(-1.0, 1.0);
        self.observe(obs);
        Ok(Step {
            reward: 1.0,
            terminated: false,
            truncated: false,
        })
    }
}

#[test]
fn a_million_step_episode_through_the_collector_allocates_nothing_and_stays_flat() {
    const STEPS: usize = 1_000_000;
    const ROLLOUT: usize = 1_000;
    let config = PolicyConfig {
        hidden: vec![16],
        ..PolicyConfig::new()
    };
    let history = History::Lstm { hidden: 16 };
    let policy = RecurrentCategoricalPolicy::for_env(&Endless::new(), history, config, 0).unwrap();
    let env = Endless::new();
    let schema = TransitionSchema::for_spaces(env.observation_space(), env.action_space())
        .for_rollout()
        .build()
        .unwrap();
    let collector_config = CollectorConfig {
        report_memory: false,
        ..CollectorConfig::new(1)
    };
    let mut collector = SyncCollector::new(vec![env], policy, collector_config).unwrap();
    let mut rollout = RolloutBuffer::new(schema, ROLLOUT, 1, None).unwrap();
    let mut collect = |collector: &mut SyncCollector<Endless, RecurrentCategoricalPolicy>| {
        rollout.clear();
        collector
            .policy_mut()
            .begin_rollout(50, ROLLOUT, 1)
            .unwrap();
        collector.collect_rollout(&mut rollout).unwrap();
    };
    collect(&mut collector);
    let before = ProcessMemory::read().unwrap();
    let ((), stats) = rl_testkit::measure(|| {
        for _ in 1..STEPS / ROLLOUT {
            collect(&mut collector);
        }
    });
    let after = ProcessMemory::read().unwrap();
    assert_eq!(collector.stats().episodes(), 0, "one episode throughout");
    assert_eq!(collector.frames(), STEPS as u64);
    assert_eq!(stats.allocations, 0, "{stats:?}");
    let growth = after.rss_bytes.saturating_sub(before.rss_bytes);
    assert!(
        growth <= 1 << 20,
        "resident memory grew by {growth} bytes over {STEPS} steps"
    );
    // The recorded state is still h and c: the episode's length is nowhere in memory.
    let record = collector.policy().chunk_record().unwrap();
    assert!(record.is_complete());
    assert_eq!(record.state(0, 0).unwrap().len(), 2 * 16);
}
