//! The frame-stacked replay (`off_policy.frame_stack`) inside the trainer: every
//! sampled transition is one the environment emitted, stacks and all; a frame is stored
//! once; a save and a resume with new episodes keep every stored transition true; bad
//! settings and environments whose observations are not stacks are refused.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use rl_algos::dqn::{Dqn, DqnConfig, EpsilonSchedule};
use rl_algos::learner::OffPolicyLearner;
use rl_algos::policy::Encoder;
use rl_core::{Env, Field, Flag, Result as EnvResult, Space, Step};
use rl_envs::{Catch, FrameStacked};
use rl_storage::Batch;

use super::{OffPolicyConfig, OffPolicyTrainer, ReplayLocation};
use crate::trainer::RunConfig;

const STACK: usize = 4;
/// Catch frames: 10 x 5 bytes.
const FRAME: usize = 50;

/// The transitions an environment emitted: observation, action, reward and next
/// observation (the final one at an episode's end), as bytes.
type Emitted = Arc<Mutex<HashSet<Vec<u8>>>>;

fn key(obs: &[u8], action: u32, reward: f32, next: &[u8]) -> Vec<u8> {
    let mut key = obs.to_vec();
    key.extend_from_slice(&action.to_le_bytes());
    key.extend_from_slice(&reward.to_le_bytes());
    key.extend_from_slice(next);
    key
}

/// Four-frame Catch that records every transition it emits.
#[derive(Debug)]
struct Recorded {
    env: FrameStacked<Catch>,
    last: Vec<u8>,
    emitted: Emitted,
}

impl Recorded {
    fn new(seed: u64, emitted: &Emitted) -> Self {
        Self {
            env: FrameStacked::new(Catch::new(seed), STACK).unwrap(),
            last: vec![0; STACK * FRAME],
            emitted: Arc::clone(emitted),
        }
    }
}

impl Env for Recorded {
    type Obs = u8;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        self.env.observation_space()
    }

    fn action_space(&self) -> &Space {
        self.env.action_space()
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [u8]) -> EnvResult<()> {
        self.env.reset(seed, obs)?;
        self.last.copy_from_slice(obs);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [u8]) -> EnvResult<Step> {
        let step = self.env.step(action, obs)?;
        let key = key(&self.last, action[0], step.reward, obs);
        self.emitted.lock().unwrap().insert(key);
        self.last.copy_from_slice(obs);
        Ok(step)
    }
}

fn dqn(seed: u64) -> Dqn<u8> {
    let env = FrameStacked::new(Catch::new(0), STACK).unwrap();
    let config = DqnConfig {
        encoder: Encoder::SmallCnn,
        hidden: vec![16],
        batch_size: 32,
        exploration: EpsilonSchedule {
            initial: 1.0,
            end: 0.1,
            decay_steps: 500,
        },
        ..DqnConfig::default()
    };
    Dqn::<u8>::for_env(&env, config, seed).unwrap()
}

fn config(location: ReplayLocation) -> OffPolicyConfig {
    OffPolicyConfig {
        buffer_capacity: 300,
        replay_location: location,
        learning_starts: 100,
        frame_stack: Some(STACK),
        ..OffPolicyConfig::new()
    }
}

/// Samples `draws` batches and checks that each row is a transition the environment
/// emitted, with `next_obs` the observation that followed `obs`.
fn check_sampled(
    trainer: &mut OffPolicyTrainer<Recorded, Dqn<u8>>,
    emitted: &Emitted,
    draws: usize,
) {
    let emitted = emitted.lock().unwrap();
    let mut batch = Batch::new(trainer.replay.batch_schema(), 32).unwrap();
    for _ in 0..draws {
        trainer.replay.sample(&mut batch).unwrap();
        let obs = batch.column::<u8>(Field::Obs.name()).unwrap();
        let next = batch.column::<u8>(Field::NextObs.name()).unwrap();
        let actions = batch.column::<u32>(Field::Action.name()).unwrap();
        let rewards = batch.column::<f32>(Field::Reward.name()).unwrap();
        let terminated = batch.column::<Flag>(Field::Terminated.name()).unwrap();
        for row in 0..batch.len() {
            let span = row * STACK * FRAME..(row + 1) * STACK * FRAME;
            let key = key(&obs[span.clone()], actions[row], rewards[row], &next[span]);
            assert!(
                emitted.contains(&key),
                "sampled row {row} at position {} (terminated {}) is not a transition the environment emitted; ring {:?}",
                batch.positions()[row],
                terminated[row].get(),
                trainer.replay().ring()
            );
        }
    }
}

#[test]
fn sampled_stacks_are_the_emitted_ones_and_each_frame_is_stored_once() {
    let tmp = tempfile::tempdir().unwrap();
    for location in [
        ReplayLocation::Ram,
        ReplayLocation::Memmap {
            dir: tmp.path().to_owned(),
        },
    ] {
        let emitted = Emitted::default();
        let run = RunConfig {
            seed: 3,
            ..RunConfig::new(900)
        };
        let mut trainer = OffPolicyTrainer::new(
            |seed| Recorded::new(seed, &emitted),
            dqn(3),
            config(location.clone()),
            run,
        )
        .unwrap();
        trainer.train(&mut ()).unwrap();
        // The ring went round: 900 steps and their final rows in 300 rows.
        assert!(trainer.replay().ring().written > 900);
        assert_eq!(trainer.replay().len(), 300);
        // One frame per row, no next observations stored.
        let schema = trainer.replay().schema();
        let obs = &schema.columns()[schema.index_of(Field::Obs.name()).unwrap()];
        assert_eq!((obs.numel(), obs.dtype()), (FRAME, rl_core::DType::U8));
        assert!(schema.index_of(Field::NextObs.name()).is_none());
        check_sampled(&mut trainer, &emitted, 20);
    }
}

#[test]
fn the_plan_stores_each_frame_once() {
    let blueprint = dqn(0).blueprint().clone();
    let run = RunConfig::new(1000);
    let big = OffPolicyConfig {
        buffer_capacity: 100_000,
        ..config(ReplayLocation::Ram)
    };
    let whole = OffPolicyConfig {
        frame_stack: None,
        ..big.clone()
    };
    let plan = |c: &OffPolicyConfig| {
        OffPolicyTrainer::<Recorded, Dqn<u8>>::plan(&blueprint, c, &run)
            .unwrap()
            .total(rl_core::Location::Ram)
    };
    let replay = |c: &OffPolicyConfig| {
        super::OffPolicyReplay::plan(&blueprint.replay_schema, c)
            .unwrap()
            .total(rl_core::Location::Ram)
    };
    // obs + next_obs of 4 frames each, against one frame (and a flag) per row.
    let (stacked, once) = (replay(&whole), replay(&big));
    assert!(stacked > 6 * once, "{stacked} vs {once}");
    assert_eq!(plan(&whole) - plan(&big), stacked - once);
}

#[test]
fn a_resume_with_new_episodes_ends_the_saved_stream_with_the_true_next_frame() {
    let dir = tempfile::tempdir().unwrap();
    let emitted = Emitted::default();
    let run = RunConfig {
        seed: 5,
        ..RunConfig::new(437)
    };
    let mut first = OffPolicyTrainer::new(
        |seed| Recorded::new(seed, &emitted),
        dqn(5),
        config(ReplayLocation::Ram),
        run.clone(),
    )
    .unwrap();
    first.train(&mut ()).unwrap();
    first.save(dir.path()).unwrap();
    let written = first.replay().ring().written;
    drop(first);
    let run = RunConfig {
        total_steps: 600,
        ..run
    };
    let mut resumed = OffPolicyTrainer::resume(
        dir.path(),
        |seed| Recorded::new(seed, &emitted),
        dqn(5),
        config(ReplayLocation::Ram),
        run,
    )
    .unwrap();
    // Catch cannot be restored mid-episode through the stack: new episodes, and the
    // interrupted one ended by a final row.
    assert_eq!(
        resumed.continuation(),
        Some(super::Continuation::EpisodesRestart)
    );
    assert_eq!(resumed.replay().ring().written, written + 1);
    check_sampled(&mut resumed, &emitted, 40);
    resumed.train(&mut ()).unwrap();
    check_sampled(&mut resumed, &emitted, 40);
}

#[test]
fn settings_a_frame_stack_cannot_take_are_refused_before_anything_runs() {
    let emitted = Emitted::default();
    let make = |seed| Recorded::new(seed, &emitted);
    let cases: [(OffPolicyConfig, RunConfig, &str); 4] = [
        (
            config(ReplayLocation::Ram),
            RunConfig {
                n_envs: 2,
                ..RunConfig::new(100)
            },
            "run.n_envs",
        ),
        (
            OffPolicyConfig {
                frame_stack: Some(0),
                ..config(ReplayLocation::Ram)
            },
            RunConfig::new(100),
            "frame_stack",
        ),
        (
            OffPolicyConfig {
                frame_stack: Some(3),
                ..config(ReplayLocation::Ram)
            },
            RunConfig::new(100),
            "200 elements",
        ),
        (
            OffPolicyConfig {
                collector: super::CollectorChoice::Async {
                    workers: 1,
                    steps_per_chunk: 4,
                },
                ..config(ReplayLocation::Ram)
            },
            RunConfig::new(100),
            "sync collector",
        ),
    ];
    for (off, run, needle) in cases {
        let error = OffPolicyTrainer::new(make, dqn(0), off, run)
            .unwrap_err()
            .to_string();
        assert!(error.contains(needle), "{needle}: {error}");
    }
}

/// Catch with its frame copied into all four slots: the first observation is a valid
/// stack, the next is not the first shifted by a frame.
#[derive(Debug)]
struct Copies(Catch, Space);

impl Copies {
    fn new(seed: u64) -> Self {
        let space = FrameStacked::new(Catch::new(0), STACK)
            .unwrap()
            .observation_space()
            .clone();
        Self(Catch::new(seed), space)
    }
}

impl Env for Copies {
    type Obs = u8;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.1
    }

    fn action_space(&self) -> &Space {
        self.0.action_space()
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [u8]) -> EnvResult<()> {
        self.0.reset(seed, &mut obs[..FRAME])?;
        for slot in 1..STACK {
            obs.copy_within(..FRAME, slot * FRAME);
        }
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [u8]) -> EnvResult<Step> {
        let step = self.0.step(action, &mut obs[..FRAME])?;
        for slot in 1..STACK {
            obs.copy_within(..FRAME, slot * FRAME);
        }
        Ok(step)
    }
}

#[test]
fn observations_that_are_not_shifted_stacks_are_refused_before_they_are_stored() {
    let mut trainer = OffPolicyTrainer::new(
        Copies::new,
        dqn(0),
        config(ReplayLocation::Ram),
        RunConfig::new(200),
    )
    .unwrap();
    let error = trainer.train(&mut ()).unwrap_err().to_string();
    assert!(
        error.contains("not the observation shifted by one frame"),
        "{error}"
    );
    assert_eq!(trainer.replay().len(), 0);
}
