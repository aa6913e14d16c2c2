//! Tests of the trainers: configuration errors, the budget check before allocation, the
//! heap a run holds against its plan, goals and callbacks, and save / resume.

#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use rl_core::{BoxSpace, DType, Env, Location, MemoryBudget, Space, Step};
use rl_envs::{CartPole, Pendulum};

use super::*;
use crate::error::Error;
use crate::eval::Predict;
use crate::policy::{CategoricalPolicy, PolicyConfig};
use crate::ppo::PpoConfig;
use crate::sac::{Sac, SacConfig};

/// Episodes of exactly `LEN` steps whose dynamics ignore the reset seed: at an episode
/// boundary a run's state is entirely the trainer's. Observation `[t / LEN, last action]`; reward 1 when the action equals
/// `t % 2`.
#[derive(Clone, Debug)]
struct Fixed {
    t: usize,
    last: f32,
    obs_space: Space,
    act_space: Space,
}

const LEN: usize = 16;

impl Env for Fixed {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.obs_space
    }

    fn action_space(&self) -> &Space {
        &self.act_space
    }

    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        (self.t, self.last) = (0, 0.0);
        obs.copy_from_slice(&[0.0, 0.0]);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<Step> {
        let reward = if action[0] as usize == self.t % 2 {
            1.0
        } else {
            0.0
        };
        self.t += 1;
        self.last = action[0] as f32;
        obs.copy_from_slice(&[self.t as f32 / LEN as f32, self.last]);
        Ok(Step {
            reward,
            terminated: false,
            truncated: self.t == LEN,
        })
    }
}

fn fixed(_seed: u64) -> Fixed {
    Fixed {
        t: 0,
        last: 0.0,
        obs_space: Space::Box(BoxSpace::uniform(0.0, 1.0, &[2], DType::F32).unwrap()),
        act_space: Space::Discrete { n: 2 },
    }
}

fn ppo_config(seed: u64) -> PpoConfig {
    PpoConfig {
        n_steps: LEN,
        n_envs: 2,
        minibatch_size: 8,
        epochs: 2,
        seed,
        ..PpoConfig::new()
    }
}

fn small_policy(seed: u64) -> CategoricalPolicy {
    let config = PolicyConfig {
        hidden: vec![8],
        ..PolicyConfig::new()
    };
    CategoricalPolicy::for_env(&fixed(0), config, seed).unwrap()
}

fn on_policy(
    total: u64,
    seed: u64,
    dir: Option<&std::path::Path>,
) -> OnPolicyTrainer<Fixed, CategoricalPolicy> {
    let run = RunConfig {
        n_envs: 2,
        seed,
        checkpoint: dir.map(|d| CheckpointSchedule {
            dir: d.to_owned(),
            every_steps: None,
        }),
        ..RunConfig::new(total)
    };
    OnPolicyTrainer::new(fixed, small_policy(seed), ppo_config(seed), run).unwrap()
}

/// Whether two trainers hold the same learner: their checkpoints (every network's weights
/// and Adam state, the typed state: counters, generators, configuration) are the same
/// bytes.
fn same_learner(
    a: &mut OnPolicyTrainer<Fixed, CategoricalPolicy>,
    b: &mut OnPolicyTrainer<Fixed, CategoricalPolicy>,
) -> bool {
    a.checkpoint().to_bytes().unwrap() == b.checkpoint().to_bytes().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    /// Saving after `first` rollouts and resuming in a new trainer (built from another
    /// seed's weights) gives the same learner after `more` rollouts as a run that never
    /// stopped: weights, optimiser, generators, counters. The episodes end with the
    /// rollouts, so the environments hold no state the run directory lacks.
    #[test]
    fn on_policy_resume_continues_exactly(seed in 0u64..1000, first in 1u64..4, more in 1u64..4) {
        let rollout = (LEN * 2) as u64;
        let total = rollout * (first + more);
        let mut whole = on_policy(total, seed, None);
        whole.train(&mut ()).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let saved = dir.path().join("run");
        let mut part = on_policy(rollout * first, seed, Some(&saved));
        prop_assert_eq!(part.train(&mut ()).unwrap().total_env_steps, rollout * first);
        drop(part);
        let run = RunConfig { n_envs: 2, seed, ..RunConfig::new(total) };
        let mut resumed =
            OnPolicyTrainer::resume(&saved, fixed, small_policy(seed + 1), ppo_config(seed), run).unwrap();
        prop_assert_eq!(resumed.env_steps(), rollout * first);
        let summary = resumed.train(&mut ()).unwrap();
        prop_assert_eq!(summary.total_env_steps, total);
        prop_assert_eq!(summary.updates, first + more);
        prop_assert!(same_learner(&mut resumed, &mut whole), "the resumed learner differs");
    }
}

#[test]
fn the_resume_comparison_sees_one_rollout_of_difference() {
    let rollout = (LEN * 2) as u64;
    let mut whole = on_policy(rollout * 3, 5, None);
    whole.train(&mut ()).unwrap();
    let mut short = on_policy(rollout * 2, 5, None);
    short.train(&mut ()).unwrap();
    assert!(!same_learner(&mut short, &mut whole));
    let mut again = on_policy(rollout * 3, 5, None);
    again.train(&mut ()).unwrap();
    assert!(same_learner(&mut again, &mut whole));
}

#[test]
fn resume_refuses_another_run_and_leaves_the_directory_alone() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("run");
    let rollout = (LEN * 2) as u64;
    on_policy(rollout, 3, Some(&saved)).train(&mut ()).unwrap();
    let before = std::fs::read(saved.join(RUN_FILE)).unwrap();
    // Another seed.
    let run = RunConfig {
        n_envs: 2,
        seed: 4,
        ..RunConfig::new(rollout * 2)
    };
    let err =
        OnPolicyTrainer::resume(&saved, fixed, small_policy(4), ppo_config(4), run).unwrap_err();
    assert!(
        matches!(err, Error::CheckpointMismatch { ref what, .. } if what == "run.seed"),
        "{err}"
    );
    // An off-policy trainer cannot continue an on-policy run.
    let sac = Sac::for_env(&Pendulum::new(0), small_sac()).unwrap();
    let config = OffPolicyConfig::new(RunConfig {
        seed: 3,
        n_envs: 2,
        ..RunConfig::new(10)
    });
    let err = OffPolicyTrainer::resume(&saved, Pendulum::new, sac, config).unwrap_err();
    assert!(
        matches!(err, Error::CheckpointMismatch { ref what, .. } if what == "trainer"),
        "{err}"
    );
    // Another architecture: the learner refuses, nothing is written.
    let wide = CategoricalPolicy::for_env(
        &fixed(0),
        PolicyConfig {
            hidden: vec![9],
            ..PolicyConfig::new()
        },
        3,
    )
    .unwrap();
    let run = RunConfig {
        n_envs: 2,
        seed: 3,
        ..RunConfig::new(rollout * 2)
    };
    assert!(OnPolicyTrainer::resume(&saved, fixed, wide, ppo_config(3), run).is_err());
    assert_eq!(std::fs::read(saved.join(RUN_FILE)).unwrap(), before);
    // A directory without a run.
    let run = RunConfig {
        n_envs: 2,
        seed: 3,
        ..RunConfig::new(rollout * 2)
    };
    let err = OnPolicyTrainer::resume(dir.path(), fixed, small_policy(3), ppo_config(3), run)
        .unwrap_err();
    assert!(err.to_string().contains(RUN_FILE), "{err}");
}

fn small_sac() -> SacConfig {
    SacConfig {
        hidden: vec![16, 16],
        batch_size: 16,
        ..SacConfig::sb3()
    }
}

fn sac_run(total: u64, dir: Option<&std::path::Path>) -> OffPolicyConfig {
    OffPolicyConfig {
        buffer_capacity: 500,
        learning_starts: 50,
        ..OffPolicyConfig::new(RunConfig {
            seed: 7,
            checkpoint: dir.map(|d| CheckpointSchedule {
                dir: d.to_owned(),
                every_steps: None,
            }),
            ..RunConfig::new(total)
        })
    }
}

#[test]
fn off_policy_save_and_resume_keep_the_learner_replay_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("run");
    let sac = Sac::for_env(&Pendulum::new(0), small_sac()).unwrap();
    let mut first = OffPolicyTrainer::new(Pendulum::new, sac, sac_run(120, Some(&saved))).unwrap();
    let summary = first.train(&mut ()).unwrap();
    assert_eq!((summary.total_env_steps, summary.updates), (120, 70));
    let probe: Vec<f32> = (0..30).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut actions = [0.0f32; 10];
    first
        .learner_mut()
        .predict(&probe, 10, &mut actions)
        .unwrap();
    let rewards = first.replay().column::<f32>("reward").unwrap().to_vec();

    let other_seed = Sac::for_env(
        &Pendulum::new(0),
        SacConfig {
            seed: 99,
            ..small_sac()
        },
    )
    .unwrap();
    let mut resumed =
        OffPolicyTrainer::resume(&saved, Pendulum::new, other_seed, sac_run(200, None)).unwrap();
    assert_eq!(resumed.env_steps(), 120);
    let mut resumed_actions = [0.0f32; 10];
    resumed
        .learner_mut()
        .predict(&probe, 10, &mut resumed_actions)
        .unwrap();
    assert_eq!(resumed_actions, actions);
    assert_eq!(resumed.learner().updates(), 70);
    assert_eq!(resumed.replay().len(), 120);
    assert_eq!(
        resumed.replay().column::<f32>("reward").unwrap(),
        &rewards[..]
    );
    let summary = resumed.train(&mut ()).unwrap();
    // No second warm-up: every one of the 80 new steps is followed by an update.
    assert_eq!((summary.total_env_steps, summary.updates), (200, 150));
    assert_eq!(resumed.replay().len(), 200);
}

#[test]
fn a_plan_over_the_budget_is_refused_before_the_buffer_is_allocated() {
    let sac = Sac::for_env(&Pendulum::new(0), small_sac()).unwrap();
    let mut config = sac_run(100, None);
    config.buffer_capacity = 100_000_000;
    config.run.budget = Some(MemoryBudget::ram(1 << 30));
    let plan = OffPolicyTrainer::<Pendulum, Sac>::plan(&sac, &config).unwrap();
    assert!(plan.total(Location::Ram) > 1 << 30);
    let (result, stats) = rl_testkit::measure(|| OffPolicyTrainer::new(Pendulum::new, sac, config));
    let err = result.unwrap_err();
    assert!(err.to_string().contains("replay"), "{err}");
    assert!(
        stats.peak_live_bytes < 1 << 20,
        "allocated {} bytes",
        stats.peak_live_bytes
    );
}

#[test]
fn the_heap_a_run_holds_stays_within_its_plan() {
    // The replay buffer is an anonymous mapping (its residency is tested in rl-storage);
    // everything else the run allocates comes from the heap and is in the plan.
    let sac = Sac::for_env(&Pendulum::new(0), small_sac()).unwrap();
    let config = sac_run(400, None);
    let (result, stats) = rl_testkit::measure(|| {
        let mut trainer = OffPolicyTrainer::new(Pendulum::new, sac, config).unwrap();
        let summary = trainer.train(&mut ()).unwrap();
        (trainer.memory_plan().clone(), summary)
    });
    let (plan, summary) = result;
    assert_eq!(summary.updates, 350);
    let heap_plan: u64 = plan
        .lines()
        .iter()
        .filter(|l| l.location == Location::Ram && !l.component.starts_with("replay"))
        .map(|l| l.bytes)
        .sum();
    let slack = 64 * 1024;
    assert!(
        stats.peak_live_bytes as u64 <= heap_plan + heap_plan / 10 + slack,
        "peak heap {} bytes against a heap plan of {heap_plan}",
        stats.peak_live_bytes
    );
    assert!(heap_plan > 0);
}

#[test]
fn goals_callbacks_and_evaluations_stop_and_report() {
    // A training-return goal CartPole reaches at once stops after the first rollout.
    let policy = CategoricalPolicy::for_env(&CartPole::new(0), PolicyConfig::new(), 0).unwrap();
    let run = RunConfig {
        n_envs: 2,
        goal: Some(Goal::TrainingReturn {
            mean_return: 1.0,
            window: 1,
        }),
        ..RunConfig::new(10_000)
    };
    let ppo = PpoConfig {
        n_envs: 2,
        n_steps: 64,
        ..PpoConfig::new()
    };
    let mut trainer = OnPolicyTrainer::new(CartPole::new, policy.clone(), ppo, run).unwrap();
    let summary = trainer.train(&mut ()).unwrap();
    assert_eq!(
        (summary.solved, summary.stopped_by),
        (true, StopReason::Goal)
    );
    assert_eq!((summary.env_steps, summary.updates), (128, 0));

    // A callback that stops after two evaluations; evaluations every 128 steps.
    struct StopAfter(usize, Vec<u64>);
    impl<S> Callback<S> for StopAfter {
        fn on_eval(&mut self, steps: u64, report: &crate::EvalReport) -> Control {
            assert_eq!(report.episodes, 2);
            self.1.push(steps);
            if self.1.len() == self.0 {
                Control::Stop
            } else {
                Control::Continue
            }
        }
    }
    let run = RunConfig {
        n_envs: 2,
        eval: Some(EvalSchedule::new(128, 2)),
        ..RunConfig::new(10_000)
    };
    let mut trainer = OnPolicyTrainer::new(CartPole::new, policy, ppo, run).unwrap();
    let mut callback = StopAfter(2, Vec::new());
    let summary = trainer.train(&mut callback).unwrap();
    assert_eq!(summary.stopped_by, StopReason::Callback);
    assert_eq!(callback.1, vec![128, 256]);
    assert_eq!(summary.last_eval.unwrap().episodes, 2);
    // The same episodes as a scheduled evaluation: a policy that did not change scores the same.
    let again = trainer.evaluate(2).unwrap();
    assert_eq!(again, summary.last_eval.unwrap());
}

#[test]
fn invalid_loop_settings_name_the_field() {
    let cases: [(RunConfig, &str); 5] = [
        (RunConfig::new(0), "run.total_steps"),
        (
            RunConfig {
                n_envs: 0,
                ..RunConfig::new(1)
            },
            "run.n_envs",
        ),
        (
            RunConfig {
                goal: Some(Goal::EvalReturn { mean_return: 1.0 }),
                ..RunConfig::new(1)
            },
            "run.goal",
        ),
        (
            RunConfig {
                eval: Some(EvalSchedule::new(0, 1)),
                ..RunConfig::new(1)
            },
            "run.eval",
        ),
        (
            RunConfig {
                goal: Some(Goal::TrainingReturn {
                    mean_return: f32::NAN,
                    window: 5,
                }),
                ..RunConfig::new(1)
            },
            "run.goal",
        ),
    ];
    for (run, field) in cases {
        let err = run.validate().unwrap_err();
        assert!(
            matches!(err, Error::Config { ref what, .. } if what == field),
            "{err}"
        );
    }
    let off = OffPolicyConfig {
        gradient_steps: 0,
        ..OffPolicyConfig::new(RunConfig::new(1))
    };
    assert!(
        off.validate()
            .unwrap_err()
            .to_string()
            .contains("gradient_steps")
    );
    // PPO and the run must agree on the number of environments.
    let policy = CategoricalPolicy::for_env(&CartPole::new(0), PolicyConfig::new(), 0).unwrap();
    let err = OnPolicyTrainer::new(
        CartPole::new,
        policy,
        PpoConfig {
            n_envs: 3,
            ..PpoConfig::new()
        },
        RunConfig::new(10),
    )
    .unwrap_err();
    assert!(err.to_string().contains("ppo.n_envs"), "{err}");
}
