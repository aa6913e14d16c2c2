//! SAC across crates: replay plans for 100 000 actions against a 1 GiB budget (one-hot
//! stored actions refused before anything is allocated, index actions accepted), spaces
//! checked when a trainer is built and when it acts for a collector, and a short discrete
//! SAC run through the off-policy trainer whose memory stays flat.

use std::sync::Mutex;

use rl::algos::{
    AdamConfig,
    learner::Learner,
    sac::{DiscreteSac, Sac, SacConfig},
};
use rl::collect::{CollectorConfig, SyncCollector};
use rl::core::{
    BoxSpace, Column, DType, Env, Location, MemoryBudget, MemoryPlan, ProcessMemory, Schema, Space,
};
use rl::envs::{CartPole, LargeDiscrete, Pendulum};
use rl::storage::{ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};
use rl::train::trainer::{
    Callback, Control, OffPolicyConfig, OffPolicyTrainer, Progress, RunConfig, StopReason,
};
// `measure` counts through the `CountingAllocator` that `envs_through_facade` installs
// as this test binary's global allocator.
use rl_testkit::measure;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// Replay rows of the large-action configuration (`OffPolicyConfig::new`'s capacity).
const ROWS: usize = 1_000_000;

/// Tests that compare resident memory before and after run one at a time, so that one's
/// allocations do not show up in another's figures.
static MEMORY: Mutex<()> = Mutex::new(());

fn memory_lock() -> std::sync::MutexGuard<'static, ()> {
    MEMORY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn rss() -> u64 {
    ProcessMemory::read().unwrap().rss_bytes
}

/// A transition schema for `LargeDiscrete` (16-float contexts) with `action` as given.
fn large_discrete_schema(action: Column) -> Schema {
    Schema::new([
        Column::new("obs", DType::F32, &[16]),
        action,
        Column::scalar("reward", DType::F32),
        Column::scalar("terminated", DType::Bool),
        Column::scalar("truncated", DType::Bool),
        Column::new("next_obs", DType::F32, &[16]),
    ])
    .unwrap()
}

/// Small networks for the space tests.
fn small_config() -> SacConfig {
    SacConfig {
        hidden: vec![8, 8],
        batch_size: 4,
        ..SacConfig::sb3()
    }
}

#[test]
fn one_hot_actions_for_100k_actions_are_refused_before_allocating() {
    let _lock = memory_lock();
    let n = LargeDiscrete::DEFAULT_ACTIONS as usize;
    let schema = large_discrete_schema(Column::new("action", DType::F32, &[n]));

    let plan = RamStorage::plan(&schema, ROWS).unwrap();
    let total = plan.total(Location::Ram);
    assert!(
        total > 350 * GIB,
        "one-hot plan is only {total} bytes:\n{plan}"
    );
    let action = plan
        .lines()
        .iter()
        .find(|line| line.component == "action")
        .unwrap();
    // 100 000 f32 a row, 1 000 000 rows: 4e11 bytes, about 400 GB.
    assert!(action.bytes >= (n * 4 * ROWS) as u64);

    let rss_before = rss();
    let (result, allocated) =
        measure(|| RamStorage::new(schema.clone(), ROWS, Some(&MemoryBudget::ram(GIB))));
    let rss_after = rss();
    let error = result.unwrap_err();
    assert!(
        allocated.peak_live_bytes < MIB as i64,
        "refusing the plan allocated {allocated:?}"
    );
    assert!(
        rss_after < rss_before + 50 * MIB,
        "RSS grew from {rss_before} to {rss_after} bytes"
    );

    match &error {
        rl::storage::Error::Core(rl::core::Error::OverBudget {
            location,
            planned,
            budget,
            largest,
        }) => {
            assert_eq!(*location, Location::Ram);
            assert_eq!(*planned, total);
            assert_eq!(*budget, GIB);
            assert_eq!(largest[0].component, "action");
        }
        other => panic!("expected an over-budget error, got {other:?}"),
    }
    // The message names the action column with its size, in GiB, in the hundreds.
    let message = error.to_string();
    let start = message
        .find("action (")
        .unwrap_or_else(|| panic!("no action line in `{message}`"));
    let line = &message[start + "action (".len()..];
    let line = &line[..line.find(')').unwrap()];
    let size = line.rsplit(", ").next().unwrap();
    let (value, unit) = size.split_once(' ').unwrap();
    let value: f64 = value.parse().unwrap();
    assert_eq!(unit, "GiB", "`{message}`");
    assert!(
        (100.0..1000.0).contains(&value),
        "action column of {value} GiB in `{message}`"
    );
}

#[test]
fn index_actions_for_100k_actions_fit_in_1_gib_with_the_trainer() {
    let env = LargeDiscrete::new(0);
    let config = SacConfig {
        hidden: vec![64, 64],
        batch_size: 64,
        chunk: 2048,
        ..SacConfig::sb3()
    };
    let sac =
        DiscreteSac::for_env_with_table(&env, env.action_features().clone(), config, 0).unwrap();
    let schema = sac.replay_schema().unwrap();
    // The trainer stores actions as u32 indices: 4 bytes a row whatever `n`.
    assert_eq!(
        schema,
        large_discrete_schema(Column::scalar("action", DType::U32))
    );

    let mut plan = MemoryPlan::new();
    plan.nest("replay", &RamStorage::plan(&schema, ROWS).unwrap());
    plan.nest("trainer", &sac.memory_plan());
    let total = plan.total(Location::Ram);
    assert!(total < GIB, "index plan needs {total} bytes:\n{plan}");
    // 1M rows of 2 x 16 f32 + u32 + f32 + 2 flags: about 138 MB of replay.
    assert!(
        total > 100 * MIB,
        "plan of {total} bytes is too small:\n{plan}"
    );
    plan.check(&MemoryBudget::ram(GIB)).unwrap();
    // The check is not vacuous: a budget below the replay alone refuses it.
    assert!(plan.check(&MemoryBudget::ram(100 * MIB)).is_err());
}

#[test]
fn trainers_are_refused_for_spaces_they_were_not_built_for() {
    // Continuous SAC needs box actions.
    let cartpole = CartPole::new(0);
    match Sac::new(
        cartpole.observation_space(),
        cartpole.action_space(),
        small_config(),
        0,
    ) {
        Err(rl::algos::Error::SpaceMismatch { what, .. }) => assert_eq!(what, "action space"),
        other => panic!("expected a space mismatch, got {other:?}"),
    }
    // Discrete SAC needs a table with one row per action.
    let env = LargeDiscrete::with_actions(500, 1).unwrap();
    let other = LargeDiscrete::with_actions(400, 1).unwrap();
    match DiscreteSac::for_env_with_table(&env, other.action_features().clone(), small_config(), 0)
    {
        Err(rl::algos::Error::SpaceMismatch { what, .. }) => assert_eq!(what, "action space"),
        other => panic!("expected a space mismatch, got {other:?}"),
    }
    // Discrete SAC needs discrete actions.
    let pendulum = Pendulum::new(0);
    assert!(matches!(
        DiscreteSac::with_index(
            pendulum.observation_space(),
            pendulum.action_space(),
            small_config(),
            0
        ),
        Err(rl::algos::Error::SpaceMismatch {
            what: "action space",
            ..
        })
    ));
    // The matching table is accepted.
    DiscreteSac::for_env_with_table(&env, env.action_features().clone(), small_config(), 0)
        .unwrap();
}

/// Collects one step of Pendulum with `sac` acting (no random warm-up frames) and
/// returns the policy's error.
fn acting_error_on_pendulum(sac: Sac) -> rl::algos::Error {
    let mut collector =
        SyncCollector::new(vec![Pendulum::new(0)], sac, CollectorConfig::new(1)).unwrap();
    let schema = Sac::for_env(&Pendulum::new(0), small_config(), 0)
        .unwrap()
        .replay_schema()
        .unwrap();
    let mut replay = ReplayBuffer::new(RamStorage::new(schema, 16, None).unwrap(), Uniform::new(0));
    let error = collector.collect(&mut replay).unwrap_err();
    assert!(
        replay.is_empty(),
        "a refused step wrote to the replay buffer"
    );
    // The collector stops after a failure.
    assert!(collector.collect(&mut replay).is_err());
    match error {
        rl::collect::Error::Policy { source, .. } => *source
            .downcast::<rl::algos::Error>()
            .unwrap_or_else(|e| panic!("not a rl-algos error: {e}")),
        other => panic!("expected a policy error, got {other:?}"),
    }
}

#[test]
fn sac_built_for_other_spaces_is_refused_when_collecting() {
    let box_space =
        |len: usize| Space::Box(BoxSpace::uniform(-1.0, 1.0, &[len], DType::F32).unwrap());
    // Pendulum's observations (3) but two action dimensions instead of one.
    let two_actions = Sac::new(&box_space(3), &box_space(2), small_config(), 0).unwrap();
    match acting_error_on_pendulum(two_actions) {
        rl::algos::Error::ShapeMismatch {
            what,
            expected,
            actual,
        } => assert_eq!((what, expected, actual), ("actions", 2, 1)),
        other => panic!("expected a shape mismatch, got {other:?}"),
    }
    // Four observations (CartPole's width) instead of Pendulum's three.
    let four_obs = Sac::new(&box_space(4), &box_space(1), small_config(), 0).unwrap();
    match acting_error_on_pendulum(four_obs) {
        rl::algos::Error::ShapeMismatch { what, actual, .. } => {
            assert_eq!((what, actual), ("observations", 3));
        }
        other => panic!("expected a shape mismatch, got {other:?}"),
    }
    // The trainer built for Pendulum's own spaces collects.
    let own = Sac::for_env(&Pendulum::new(0), small_config(), 0).unwrap();
    let schema = own.replay_schema().unwrap();
    let mut collector =
        SyncCollector::new(vec![Pendulum::new(0)], own, CollectorConfig::new(8)).unwrap();
    let mut replay = ReplayBuffer::new(RamStorage::new(schema, 16, None).unwrap(), Uniform::new(0));
    collector.collect(&mut replay).unwrap();
    assert_eq!(replay.len(), 8);
}

#[test]
fn discrete_sac_trains_through_the_trainer_with_flat_memory() {
    let _lock = memory_lock();
    const STEPS: u64 = 600;
    const CHECKPOINT: u64 = 200;
    const LEARNING_STARTS: u64 = 100;
    let env = LargeDiscrete::with_actions(500, 1).unwrap();
    let config = SacConfig {
        hidden: vec![32, 32],
        batch_size: 16,
        // Four chunks of the 500 actions.
        chunk: 128,
        adam: AdamConfig {
            lr: 1e-3,
            ..SacConfig::sb3().adam
        },
        ..SacConfig::sb3()
    };
    let sac =
        DiscreteSac::for_env_with_table(&env, env.action_features().clone(), config, 3).unwrap();
    let config = OffPolicyConfig {
        buffer_capacity: STEPS as usize,
        learning_starts: LEARNING_STARTS,
        ..OffPolicyConfig::new()
    };
    let run = RunConfig {
        seed: 11,
        ..RunConfig::new(STEPS)
    };
    let mut trainer = OffPolicyTrainer::new(
        |seed| LargeDiscrete::with_actions(500, seed).unwrap(),
        sac,
        config,
        run,
    )
    .unwrap();

    /// Reads resident memory once the run passes `CHECKPOINT` steps.
    struct RssAt(Option<u64>);
    impl<S> Callback<S> for RssAt {
        fn on_progress(&mut self, progress: &Progress<'_, S>) -> Control {
            if progress.env_steps == CHECKPOINT {
                self.0 = Some(rss());
            }
            Control::Continue
        }
    }
    let mut at_checkpoint = RssAt(None);
    let summary = trainer.train(&mut at_checkpoint).unwrap();
    let rss_end = rss();

    assert_eq!(summary.total_env_steps, STEPS);
    assert_eq!(summary.stopped_by, StopReason::Budget);
    assert_eq!(trainer.replay().len(), STEPS as usize);
    // One gradient step per env step after the warm-up.
    assert_eq!(summary.updates, STEPS - LEARNING_STARTS);
    assert_eq!(trainer.learner().updates(), summary.updates);
    // Every step of LargeDiscrete ends an episode.
    assert_eq!(summary.episodes, STEPS);
    let rss_at_checkpoint = at_checkpoint.0.unwrap();
    assert!(
        rss_end.abs_diff(rss_at_checkpoint) < 20 * MIB,
        "RSS went from {rss_at_checkpoint} bytes after {CHECKPOINT} steps to {rss_end} after {STEPS}"
    );
    // What the process holds beyond the plan stays small: the plan is the run's memory.
    assert!(summary.planned_bytes > 0);
}
