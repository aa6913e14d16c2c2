//! The synchronous collector: what it writes, what it refuses, and what it allocates.

#![allow(
    clippy::unwrap_used,
    reason = "test code: a failed unwrap is a failed test"
)]

use rl_collect::{
    ActOutput, CollectorConfig, ConstantPolicy, Error, Policy, PolicyError, RandomPolicy,
    SyncCollector, ValuePolicy,
};
use rl_core::{
    BoxSpace, Column, DType, Device, Env, Field, Flag, Schema, Space, Step, TransitionSchema,
};
use rl_envs::CartPole;
use rl_storage::{ram::RamStorage, replay::ReplayBuffer, rollout::RolloutBuffer, sampler::Uniform};
use rl_testkit::{CountingAllocator, measure};

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn replay_schema(obs: usize) -> Schema {
    Schema::new([
        Column::new("obs", DType::F32, &[obs]),
        Column::scalar("action", DType::U32),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
        Column::new("next_obs", DType::F32, &[obs]),
    ])
    .unwrap()
}

fn cartpoles(n: u64) -> Vec<CartPole> {
    (0..n).map(CartPole::new).collect()
}

/// Counts its steps: observation `[t]`, reward 1, truncated at `limit`; optionally a
/// non-finite reward at step `bad_at`.
#[derive(Clone, Debug)]
struct Counter {
    t: u32,
    limit: u32,
    bad_at: Option<u32>,
    space: Space,
    actions: Space,
}

impl Counter {
    fn new(limit: u32, bad_at: Option<u32>) -> Self {
        Self {
            t: 0,
            limit,
            bad_at,
            space: Space::Box(BoxSpace::uniform(0.0, 1e9, &[1], DType::F32).unwrap()),
            actions: Space::discrete(2).unwrap(),
        }
    }
}

impl Env for Counter {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.space
    }

    fn action_space(&self) -> &Space {
        &self.actions
    }

    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        self.t = 0;
        obs[0] = 0.0;
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<Step> {
        rl_core::env::discrete_action(action, 2)?;
        self.t += 1;
        obs[0] = self.t as f32;
        let reward = if Some(self.t) == self.bad_at {
            f32::NAN
        } else {
            1.0
        };
        Ok(Step {
            reward,
            terminated: false,
            truncated: self.t >= self.limit,
        })
    }
}

/// `V(obs) = 10 * obs[0]`, action 0.
#[derive(Clone, Debug)]
struct LinearValue;

impl Policy for LinearValue {
    type Obs = f32;
    type Act = u32;
    type State = ();

    fn act(
        &mut self,
        obs: &[f32],
        _states: &mut [()],
        out: ActOutput<'_, u32>,
    ) -> Result<(), PolicyError> {
        out.actions.fill(0);
        out.log_probs.fill(-0.5);
        for (v, o) in out.values.iter_mut().zip(obs) {
            *v = 10.0 * o;
        }
        Ok(())
    }
}

impl ValuePolicy for LinearValue {
    fn values(
        &mut self,
        obs: &[f32],
        _states: &[()],
        values: &mut [f32],
    ) -> Result<(), PolicyError> {
        for (v, o) in values.iter_mut().zip(obs) {
            *v = 10.0 * o;
        }
        Ok(())
    }
}

#[test]
fn replay_rows_are_real_transitions_with_final_observations() {
    let envs = 16;
    let mut collector = SyncCollector::new(
        cartpoles(envs),
        ConstantPolicy::new(&[1u32]),
        CollectorConfig::new(16 * 40),
    )
    .unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(replay_schema(4), 10_000, None).unwrap(),
        Uniform::new(0),
    );
    let report = collector.collect(&mut replay).unwrap();
    assert_eq!(report.frames, 640);
    assert_eq!(replay.len(), 640);
    assert!(
        report.episodes > 0,
        "pushing right ends episodes within 40 steps"
    );
    assert!(report.memory.is_some_and(|m| m.rss_bytes > 0));
    let obs = replay.column::<f32>("obs").unwrap();
    let next = replay.column::<f32>("next_obs").unwrap();
    let terminated = replay.column::<Flag>("terminated").unwrap();
    let mut finals = 0;
    for row in 0..640 {
        let env = row % 16;
        let next_obs = &next[row * 4..row * 4 + 4];
        if terminated[row].get() {
            // The stored next observation is the final one, beyond a threshold.
            finals += 1;
            assert!(
                next_obs[0].abs() > 2.4 || next_obs[2].abs() > 0.2094,
                "{next_obs:?}"
            );
        } else if row + 16 < 640 {
            // Otherwise it is the observation the same environment starts its next step from.
            assert_eq!(
                next_obs,
                &obs[(row + 16) * 4..(row + 16) * 4 + 4],
                "env {env}, row {row}"
            );
        }
    }
    assert_eq!(finals as u64, collector.stats().terminated());
}

fn rollout(steps: usize, envs: usize, obs: usize) -> RolloutBuffer {
    let schema = TransitionSchema::new(DType::F32, &[obs], DType::U32, &[])
        .for_rollout()
        .build()
        .unwrap();
    RolloutBuffer::new(schema, steps, envs, None).unwrap()
}

#[test]
fn rollouts_bootstrap_truncation_from_the_final_observation() {
    let envs: Vec<Counter> = (0..3).map(|_| Counter::new(4, None)).collect();
    let mut collector = SyncCollector::new(envs, LinearValue, CollectorConfig::new(3)).unwrap();
    let mut rollout = rollout(10, 3, 1);
    collector.collect_rollout(&mut rollout).unwrap();
    assert!(rollout.is_full());
    let truncated = rollout.field::<Flag>(Field::Truncated).unwrap();
    let final_values = rollout.field::<f32>(Field::FinalValue).unwrap();
    let mut cuts = 0;
    for (row, flag) in truncated.iter().enumerate() {
        if flag.get() {
            cuts += 1;
            // Final observation [4], value 40: not the reset observation's value 0.
            assert_eq!(final_values[row], 40.0, "row {row}");
        } else if row < 27 {
            assert_eq!(final_values[row], 0.0, "row {row}: not a cut");
        }
    }
    assert_eq!(cuts, 2 * 3, "steps 4 and 8 of each environment");
    // The last step (observation [1] of the third episode) bootstraps from V([2]).
    assert_eq!(final_values[27..], [20.0; 3]);
    assert_eq!(rollout.field::<f32>(Field::LogProb).unwrap()[0], -0.5);
    assert_eq!(
        rollout.field::<f32>(Field::Value).unwrap()[3],
        10.0,
        "V([1]) for the second step of environment 0"
    );
    // A rollout that is not empty, or of other environments, is refused untouched.
    let err = collector.collect_rollout(&mut rollout).unwrap_err();
    assert!(err.to_string().contains("clear()"), "{err}");
    assert_eq!(rollout.len(), 10);
    let mut other = self::rollout(10, 2, 1);
    let err = collector.collect_rollout(&mut other).unwrap_err();
    assert!(err.to_string().contains("2 environments"), "{err}");
    assert!(other.is_empty());
    let mut wide = self::rollout(10, 3, 2);
    let err = collector.collect_rollout(&mut wide).unwrap_err();
    assert!(err.to_string().contains("rollout column `obs`"), "{err}");
    assert!(wide.is_empty());
}

#[test]
fn failures_name_the_environment_and_step_and_stop_the_collector() {
    let mut envs: Vec<Counter> = (0..4).map(|_| Counter::new(100, None)).collect();
    envs[2].bad_at = Some(3);
    let mut collector =
        SyncCollector::new(envs, ConstantPolicy::new(&[0u32]), CollectorConfig::new(40)).unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(replay_schema(1), 100, None).unwrap(),
        Uniform::new(0),
    );
    let err = collector.collect(&mut replay).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NonFiniteReward {
                env: 2,
                step: 2,
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(
        collector.collect(&mut replay),
        Err(Error::Stopped { .. })
    ));

    // A policy answering an out-of-range action is refused by the environment.
    let mut collector = SyncCollector::new(
        cartpoles(4),
        ConstantPolicy::new(&[7u32]),
        CollectorConfig::new(4),
    )
    .unwrap();
    let err = collector.collect(&mut replay_for_cartpole()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Env {
                env: 0,
                step: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("out of range"), "{err}");
}

fn replay_for_cartpole() -> ReplayBuffer {
    ReplayBuffer::new(
        RamStorage::new(replay_schema(4), 100, None).unwrap(),
        Uniform::new(0),
    )
}

#[test]
fn bad_configurations_are_refused() {
    let policy = || ConstantPolicy::<f32, u32>::new(&[0]);
    assert!(SyncCollector::new(Vec::<CartPole>::new(), policy(), CollectorConfig::new(4)).is_err());
    assert!(SyncCollector::new(cartpoles(4), policy(), CollectorConfig::new(6)).is_err());
    assert!(SyncCollector::new(cartpoles(4), policy(), CollectorConfig::new(0)).is_err());
    let gpu = CollectorConfig {
        storing_device: Device::Cuda(0),
        ..CollectorConfig::new(4)
    };
    let err = SyncCollector::new(cartpoles(4), policy(), gpu).unwrap_err();
    assert!(err.to_string().contains("storing_device"), "{err}");
    let mut collector =
        SyncCollector::new(cartpoles(4), policy(), CollectorConfig::new(4)).unwrap();
    let wrong = Schema::new([
        Column::new("obs", DType::F32, &[4]),
        Column::scalar("extra", DType::F32),
    ])
    .unwrap();
    let mut replay = ReplayBuffer::new(RamStorage::new(wrong, 10, None).unwrap(), Uniform::new(0));
    assert!(collector.collect(&mut replay).is_err());
}

#[test]
fn a_schema_of_the_wrong_width_is_refused_before_any_step() {
    let policy = ConstantPolicy::<f32, u32>::new(&[0]);
    let mut collector = SyncCollector::new(cartpoles(4), policy, CollectorConfig::new(8)).unwrap();
    for (obs, next_obs, column) in [(5, 5, "obs"), (4, 3, "next_obs")] {
        let schema = Schema::new([
            Column::new("obs", DType::F32, &[obs]),
            Column::scalar("action", DType::U32),
            Column::scalar("reward", DType::F32),
            Column::scalar("terminated", DType::Bool),
            Column::scalar("truncated", DType::Bool),
            Column::new("next_obs", DType::F32, &[next_obs]),
        ])
        .unwrap();
        let mut replay =
            ReplayBuffer::new(RamStorage::new(schema, 100, None).unwrap(), Uniform::new(0));
        let err = collector.collect(&mut replay).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("column `{column}`")) && text.contains("f32 x 4"),
            "{text}"
        );
        // Nothing stepped, nothing written, and the collector still works.
        assert_eq!(collector.frames(), 0);
        assert_eq!(replay.len(), 0);
    }
    let wide_actions = Schema::new([
        Column::new("obs", DType::F32, &[4]),
        Column::new("action", DType::U32, &[2]),
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
        Column::new("next_obs", DType::F32, &[4]),
    ])
    .unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(wide_actions, 100, None).unwrap(),
        Uniform::new(0),
    );
    let err = collector.collect(&mut replay).unwrap_err();
    assert!(err.to_string().contains("column `action`"), "{err}");
    let mut replay = replay_for_cartpole();
    assert_eq!(collector.collect(&mut replay).unwrap().frames, 8);
    assert_eq!(replay.len(), 8);
}

#[test]
fn a_constant_policy_of_the_wrong_width_is_refused() {
    for action in [&[1u32, 0][..], &[]] {
        let policy = ConstantPolicy::<f32, u32>::new(action);
        let mut collector =
            SyncCollector::new(cartpoles(4), policy, CollectorConfig::new(8)).unwrap();
        let mut replay = replay_for_cartpole();
        let err = collector.collect(&mut replay).unwrap_err();
        assert!(matches!(err, Error::Policy { step: 0, .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("has {} elements", action.len()))
                && text.contains("take 1 per action"),
            "{text}"
        );
        assert_eq!(replay.len(), 0);
    }
}

#[test]
fn total_and_random_frames_are_honoured() {
    let config = CollectorConfig {
        total_frames: Some(100),
        random_frames: 40,
        ..CollectorConfig::new(32)
    };
    let policy = ConstantPolicy::new(&[1u32]);
    let mut collector = SyncCollector::new(cartpoles(8), policy, config).unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(replay_schema(4), 1000, None).unwrap(),
        Uniform::new(0),
    );
    let mut frames = 0;
    loop {
        let report = collector.collect(&mut replay).unwrap();
        frames += report.frames;
        if report.done {
            break;
        }
    }
    assert_eq!(frames, 104, "whole steps of 8 environments up to the total");
    assert!(matches!(
        collector.collect(&mut replay),
        Err(Error::Stopped { .. })
    ));
    let actions = replay.column::<u32>("action").unwrap();
    let random_rows = &actions[..40];
    assert!(random_rows.contains(&0), "random warm-up actions");
    assert!(
        actions[40..104].iter().all(|&a| a == 1),
        "then the policy's"
    );
}

#[test]
fn a_thousand_batches_after_the_first_allocate_nothing() {
    let mut collector = SyncCollector::new(
        cartpoles(64),
        ConstantPolicy::new(&[1u32]),
        CollectorConfig::new(64 * 4),
    )
    .unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(replay_schema(4), 100_000, None).unwrap(),
        Uniform::new(0),
    );
    collector.collect(&mut replay).unwrap();
    let (result, stats) = measure(|| -> Result<(), Error> {
        for _ in 0..1000 {
            collector.collect(&mut replay)?;
        }
        Ok(())
    });
    result.unwrap();
    assert_eq!(stats.allocations, 0, "{stats:?}");

    let random = RandomPolicy::new(&Space::discrete(2).unwrap(), 3).unwrap();
    let mut collector =
        SyncCollector::new(cartpoles(16), random, CollectorConfig::new(16)).unwrap();
    let mut rollout = rollout(32, 16, 4);
    collector.collect_rollout(&mut rollout).unwrap();
    let (result, stats) = measure(|| -> Result<(), Error> {
        for _ in 0..100 {
            rollout.clear();
            collector.collect_rollout(&mut rollout)?;
        }
        Ok(())
    });
    result.unwrap();
    assert_eq!(stats.allocations, 0, "{stats:?}");
}
