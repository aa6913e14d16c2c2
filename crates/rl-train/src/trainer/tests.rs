//! Tests of the trainers: configuration errors, the budget check before allocation, the
//! heap a run holds against its plan, goals and callbacks, and save / resume.

#![allow(clippy::unwrap_used, reason = "tests")]

use proptest::prelude::*;
use rl_core::{BoxSpace, DType, Env, Location, MemoryBudget, Space, Step};
use rl_envs::{CartPole, Pendulum};

use super::*;
use rl_algos::Error;
use rl_algos::policy::{CategoricalPolicy, PolicyConfig};
use rl_algos::ppo::{Ppo, PpoConfig};
use rl_algos::predict::Predict;
use rl_algos::sac::{Sac, SacConfig};

/// An off-policy loop and the run it belongs to, as these tests build them together.
#[derive(Clone, Debug)]
pub(super) struct OffRun {
    pub(super) off: OffPolicyConfig,
    pub(super) run: RunConfig,
}

/// [`OffPolicyTrainer::new`] of `setup`.
pub(super) fn new_trainer<E, L>(
    make_env: impl FnMut(u64) -> E,
    learner: L,
    setup: OffRun,
) -> rl_algos::Result<OffPolicyTrainer<E, L>>
where
    E: Env<Obs = f32> + Send + 'static,
    E::Act: rl_collect::RandomAction,
    L: rl_algos::learner::OffPolicyLearner<Obs = f32, Act = E::Act>,
{
    OffPolicyTrainer::new(make_env, learner, setup.off, setup.run)
}

/// [`OffPolicyTrainer::resume`] of `setup`.
pub(super) fn resume_trainer<E, L>(
    dir: &std::path::Path,
    make_env: impl FnMut(u64) -> E,
    learner: L,
    setup: OffRun,
) -> rl_algos::Result<OffPolicyTrainer<E, L>>
where
    E: Env<Obs = f32> + Send + 'static,
    E::Act: rl_collect::RandomAction,
    L: rl_algos::learner::OffPolicyLearner<Obs = f32, Act = E::Act>,
{
    OffPolicyTrainer::resume(dir, make_env, learner, setup.off, setup.run)
}

/// [`OffPolicyTrainer::plan`] of `setup`.
pub(super) fn plan_trainer<E, L>(
    learner: &L,
    setup: &OffRun,
) -> rl_algos::Result<rl_core::MemoryPlan>
where
    E: Env<Obs = f32> + Send + 'static,
    E::Act: rl_collect::RandomAction,
    L: rl_algos::learner::OffPolicyLearner<Obs = f32, Act = E::Act>,
{
    OffPolicyTrainer::<E, L>::plan(learner.blueprint(), &setup.off, &setup.run)
}

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

fn ppo_config() -> PpoConfig {
    PpoConfig {
        n_steps: LEN,
        batch_size: 8,
        epochs: 2,
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

/// A PPO learner for `policy` on the two environments of these tests' runs.
fn ppo(policy: CategoricalPolicy, seed: u64) -> Ppo<CategoricalPolicy> {
    Ppo::new(policy, ppo_config(), 2, seed).unwrap()
}

fn on_policy(
    total: u64,
    seed: u64,
    dir: Option<&std::path::Path>,
) -> OnPolicyTrainer<Fixed, Ppo<CategoricalPolicy>> {
    let run = RunConfig {
        n_envs: 2,
        seed,
        checkpoint: dir.map(|d| CheckpointSchedule {
            dir: d.to_owned(),
            every_steps: None,
            best: None,
            ..CheckpointSchedule::default()
        }),
        ..RunConfig::new(total)
    };
    OnPolicyTrainer::new(fixed, ppo(small_policy(seed), seed), run).unwrap()
}

/// Whether two trainers hold the same learner: their checkpoints (every network's weights
/// and Adam state, the typed state: counters, generators, configuration) are the same
/// bytes.
fn same_learner(
    a: &mut OnPolicyTrainer<Fixed, Ppo<CategoricalPolicy>>,
    b: &mut OnPolicyTrainer<Fixed, Ppo<CategoricalPolicy>>,
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
            OnPolicyTrainer::resume(&saved, fixed, ppo(small_policy(seed + 1), seed), run).unwrap();
        prop_assert_eq!(resumed.env_steps(), rollout * first);
        let summary = resumed.train(&mut ()).unwrap();
        prop_assert_eq!(summary.total_env_steps, total);
        prop_assert_eq!(summary.updates, first + more);
        prop_assert!(same_learner(&mut resumed, &mut whole), "the resumed learner differs");
    }
}

/// A DQN learner for [`Fixed`], seeded by `seed`.
fn fixed_dqn(seed: u64) -> Dqn {
    let config = DqnConfig {
        hidden: vec![8],
        batch_size: 8,
        target_update: TargetUpdate::Hard { every: 5 },
        exploration: EpsilonSchedule {
            initial: 1.0,
            end: 0.1,
            decay_steps: 200,
        },
        ..DqnConfig::default()
    };
    Dqn::for_env(&fixed(0), config, seed).unwrap()
}

/// An off-policy run over two [`Fixed`] environments: warm-up of one episode round,
/// a training phase every 4 collector steps (8 env steps, so phases end with episodes),
/// `prioritized` or uniform replay.
fn off_policy_config(
    total: u64,
    seed: u64,
    prioritized: bool,
    dir: Option<&std::path::Path>,
) -> OffRun {
    OffRun {
        off: OffPolicyConfig {
            buffer_capacity: 100,
            learning_starts: (LEN * 2) as u64,
            train_freq: 4,
            gradient_steps: 3,
            prioritized: prioritized.then(rl_storage::sampler::PrioritizedConfig::default),
            ..OffPolicyConfig::new()
        },
        run: RunConfig {
            n_envs: 2,
            seed,
            checkpoint: dir.map(|d| CheckpointSchedule {
                dir: d.to_owned(),
                every_steps: None,
                best: None,
                ..CheckpointSchedule::default()
            }),
            ..RunConfig::new(total)
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(6))]

    /// The off-policy half of the resume property: a DQN run saved after `first` episode
    /// rounds (past the warm-up) and resumed in a trainer built from another seed's
    /// weights ends with the same learner (weights, Adam state, target network,
    /// generator, counters: the checkpoint's bytes) as a run that never stopped. The
    /// replay buffer's rows and its sampler's state (the uniform generator, or the
    /// prioritized trees) come back from the run directory; without the sampler's state
    /// the resumed run would draw other batches. Episodes end with the saved segment,
    /// so the environments hold no state the directory lacks.
    #[test]
    fn off_policy_resume_continues_exactly(
        seed in 0u64..1000,
        first in 1u64..4,
        more in 1u64..4,
        prioritized in any::<bool>(),
    ) {
        let round = (LEN * 2) as u64;
        let total = round * (first + more);
        let mut whole = new_trainer(
            fixed,
            fixed_dqn(seed),
            off_policy_config(total, seed, prioritized, None),
        )
        .unwrap();
        whole.train(&mut ()).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let saved = dir.path().join("run");
        let mut part = new_trainer(
            fixed,
            fixed_dqn(seed),
            off_policy_config(round * first, seed, prioritized, Some(&saved)),
        )
        .unwrap();
        prop_assert_eq!(part.train(&mut ()).unwrap().total_env_steps, round * first);
        drop(part);
        let mut resumed = resume_trainer(
            &saved,
            fixed,
            fixed_dqn(seed + 1),
            off_policy_config(total, seed, prioritized, None),
        )
        .unwrap();
        prop_assert_eq!(resumed.env_steps(), round * first);
        let summary = resumed.train(&mut ()).unwrap();
        prop_assert_eq!(summary.total_env_steps, total);
        let bytes = |t: &OffPolicyTrainer<Fixed, Dqn>| t.learner().checkpoint().to_bytes().unwrap();
        prop_assert!(bytes(&resumed) == bytes(&whole), "the resumed learner differs");
    }
}

#[test]
fn the_off_policy_comparison_sees_one_phase_of_difference() {
    let round = (LEN * 2) as u64;
    let run = |total| {
        let mut t = new_trainer(
            fixed,
            fixed_dqn(5),
            off_policy_config(total, 5, false, None),
        )
        .unwrap();
        t.train(&mut ()).unwrap();
        t.learner().checkpoint().to_bytes().unwrap()
    };
    assert_ne!(run(round * 3), run(round * 3 - 8));
    assert_eq!(run(round * 3), run(round * 3));
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
    let err = OnPolicyTrainer::resume(&saved, fixed, ppo(small_policy(4), 4), run).unwrap_err();
    assert!(
        matches!(err, Error::CheckpointMismatch { ref what, .. } if what == "run.seed"),
        "{err}"
    );
    // An off-policy trainer cannot continue an on-policy run.
    let sac = Sac::for_env(&Pendulum::new(0), small_sac(), 0).unwrap();
    let config = OffRun {
        off: OffPolicyConfig::new(),
        run: RunConfig {
            seed: 3,
            n_envs: 2,
            ..RunConfig::new(10)
        },
    };
    let err = resume_trainer(&saved, Pendulum::new, sac, config).unwrap_err();
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
    assert!(OnPolicyTrainer::resume(&saved, fixed, ppo(wide, 3), run).is_err());
    assert_eq!(std::fs::read(saved.join(RUN_FILE)).unwrap(), before);
    // A directory without a run.
    let run = RunConfig {
        n_envs: 2,
        seed: 3,
        ..RunConfig::new(rollout * 2)
    };
    let err = OnPolicyTrainer::resume(dir.path(), fixed, ppo(small_policy(3), 3), run).unwrap_err();
    assert!(err.to_string().contains(RUN_FILE), "{err}");
}

fn small_sac() -> SacConfig {
    SacConfig {
        hidden: vec![16, 16],
        batch_size: 16,
        ..SacConfig::sb3()
    }
}

fn sac_run(total: u64, dir: Option<&std::path::Path>) -> OffRun {
    OffRun {
        off: OffPolicyConfig {
            buffer_capacity: 500,
            learning_starts: 50,
            ..OffPolicyConfig::new()
        },
        run: RunConfig {
            seed: 7,
            checkpoint: dir.map(|d| CheckpointSchedule {
                dir: d.to_owned(),
                every_steps: None,
                best: None,
                ..CheckpointSchedule::default()
            }),
            ..RunConfig::new(total)
        },
    }
}

#[test]
fn off_policy_save_and_resume_keep_the_learner_replay_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("run");
    let sac = Sac::for_env(&Pendulum::new(0), small_sac(), 0).unwrap();
    let mut first = new_trainer(Pendulum::new, sac, sac_run(120, Some(&saved))).unwrap();
    let summary = first.train(&mut ()).unwrap();
    assert_eq!((summary.total_env_steps, summary.updates), (120, 70));
    let probe: Vec<f32> = (0..30).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut actions = [0.0f32; 10];
    first
        .learner_mut()
        .predict(&probe, 10, &mut actions)
        .unwrap();
    let rewards = first.replay().column::<f32>("reward").unwrap().to_vec();

    let other_seed = Sac::for_env(&Pendulum::new(0), small_sac(), 99).unwrap();
    let mut resumed =
        resume_trainer(&saved, Pendulum::new, other_seed, sac_run(200, None)).unwrap();
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
    let sac = Sac::for_env(&Pendulum::new(0), small_sac(), 0).unwrap();
    let mut config = sac_run(100, None);
    config.off.buffer_capacity = 100_000_000;
    config.run.budget = Some(MemoryBudget::ram(1 << 30));
    let plan = plan_trainer::<Pendulum, Sac>(&sac, &config).unwrap();
    assert!(plan.total(Location::Ram) > 1 << 30);
    let (result, stats) = rl_testkit::measure(|| new_trainer(Pendulum::new, sac, config));
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
    let sac = Sac::for_env(&Pendulum::new(0), small_sac(), 0).unwrap();
    let config = sac_run(400, None);
    let (result, stats) = rl_testkit::measure(|| {
        let mut trainer = new_trainer(Pendulum::new, sac, config).unwrap();
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
        n_steps: 64,
        ..PpoConfig::new()
    };
    let mut trainer = OnPolicyTrainer::new(
        CartPole::new,
        Ppo::new(policy.clone(), ppo, 2, run.seed).unwrap(),
        run,
    )
    .unwrap();
    let summary = trainer.train(&mut ()).unwrap();
    assert_eq!(
        (summary.solved, summary.stopped_by),
        (true, StopReason::Goal)
    );
    assert_eq!((summary.env_steps, summary.updates), (128, 0));

    // A callback that stops after two evaluations; evaluations every 128 steps.
    struct StopAfter(usize, Vec<u64>);
    impl<S> Callback<S> for StopAfter {
        fn on_eval(&mut self, steps: u64, report: &crate::eval::EvalReport) -> Control {
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
    let mut trainer = OnPolicyTrainer::new(
        CartPole::new,
        Ppo::new(policy, ppo, 2, run.seed).unwrap(),
        run,
    )
    .unwrap();
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
            matches!(err, Error::Config { ref key, .. } if key == field),
            "{err}"
        );
    }
    let off = OffPolicyConfig {
        gradient_steps: 0,
        ..OffPolicyConfig::new()
    };
    assert!(
        off.validate(1)
            .unwrap_err()
            .to_string()
            .contains("gradient_steps")
    );
    // The minibatch must fit the rollout of the run's environments.
    let policy = CategoricalPolicy::for_env(&CartPole::new(0), PolicyConfig::new(), 0).unwrap();
    let config = PpoConfig {
        n_steps: 4,
        batch_size: 9,
        ..PpoConfig::new()
    };
    let err = Ppo::new(policy, config, 2, 0).unwrap_err();
    assert!(err.to_string().contains("ppo.batch_size"), "{err}");
    assert!(err.to_string().contains("4 x 2 = 8"), "{err}");
}

// ---- The asynchronous collector and the memmap location (off-policy) ----

use rl_algos::dqn::{Dqn, DqnConfig, EpsilonSchedule, TargetUpdate};
use rl_nn::Weights;

/// Episodes of `LEN` steps whose observation shows which action pays: `[cue, 1 - cue]`
/// with `cue = t % 2`, reward 1 for action `cue`. A greedy policy of a learned Q
/// network scores `LEN`, a constant one `LEN / 2`.
#[derive(Clone, Debug)]
struct Cue {
    t: usize,
    obs_space: Space,
    act_space: Space,
}

impl Env for Cue {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.obs_space
    }

    fn action_space(&self) -> &Space {
        &self.act_space
    }

    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        self.t = 0;
        obs.copy_from_slice(&[0.0, 1.0]);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<Step> {
        let reward = if action[0] as usize == self.t % 2 {
            1.0
        } else {
            0.0
        };
        self.t += 1;
        let cue = (self.t % 2) as f32;
        obs.copy_from_slice(&[cue, 1.0 - cue]);
        Ok(Step {
            reward,
            terminated: false,
            truncated: self.t == LEN,
        })
    }
}

fn cue(_seed: u64) -> Cue {
    Cue {
        t: 0,
        obs_space: Space::Box(BoxSpace::uniform(0.0, 1.0, &[2], DType::F32).unwrap()),
        act_space: Space::Discrete { n: 2 },
    }
}

fn small_dqn(seed: u64) -> Dqn {
    let config = DqnConfig {
        hidden: vec![32],
        batch_size: 32,
        adam: rl_nn::AdamConfig {
            lr: 2e-3,
            ..DqnConfig::default().adam
        },
        target_update: TargetUpdate::Hard { every: 50 },
        exploration: EpsilonSchedule {
            initial: 1.0,
            end: 0.05,
            decay_steps: 1_000,
        },
        ..DqnConfig::default()
    };
    Dqn::for_env(&cue(0), config, seed).unwrap()
}

/// An asynchronous run of `total` env steps on 4 environments, 2 workers, chunks of
/// `steps_per_chunk` steps (`2 x steps_per_chunk` transitions).
fn async_run(total: u64, steps_per_chunk: usize) -> OffRun {
    OffRun {
        off: OffPolicyConfig {
            buffer_capacity: 5_000,
            learning_starts: 64,
            collector: CollectorChoice::Async {
                workers: 2,
                steps_per_chunk,
            },
            ..OffPolicyConfig::new()
        },
        run: RunConfig {
            n_envs: 4,
            seed: 3,
            ..RunConfig::new(total)
        },
    }
}

#[test]
fn an_async_dqn_run_learns_and_counts_every_env_step() {
    let config = async_run(3_000, 8);
    let mut trainer = new_trainer(cue, small_dqn(1), config).unwrap();
    let before = trainer.evaluate(4).unwrap().mean_return;
    let summary = trainer.train(&mut ()).unwrap();
    // Every delivered chunk is written; workers stop claiming at the budget.
    assert_eq!(summary.total_env_steps, 3_000);
    assert_eq!(trainer.replay().len(), 3_000);
    assert_eq!(trainer.replay().ring().written, 3_000);
    // One phase per 4 env steps (train_freq 1 x 4 environments) after the 64 random ones.
    assert_eq!(summary.updates, 3_000 / 4 - 64 / 4);
    assert_eq!(trainer.learner().updates(), summary.updates);
    // A publish after every chunk that trained: all but the 4 chunks of the warm-up
    // (187 chunks of 16 transitions and one of 8).
    assert_eq!(trainer.policy_version(), 3_000u64.div_ceil(16) - 64 / 16);
    assert!(summary.episodes >= 3_000 / LEN as u64 - 4);
    // The learner learned (deterministic evaluation), and its weights and epsilon
    // reached the workers (the training episodes are theirs).
    let after = trainer.evaluate(4).unwrap().mean_return;
    assert!(
        after >= 15.0,
        "evaluation return {before} before, {after} after"
    );
    let training = summary.mean_return.unwrap();
    assert!(training >= 14.0, "training return {training}");
}

/// Bytes of the plan's lines whose component starts with `prefix`.
fn planned(plan: &rl_core::MemoryPlan, prefix: &str) -> u64 {
    plan.lines()
        .iter()
        .filter(|l| l.component.starts_with(prefix))
        .map(|l| l.bytes)
        .sum()
}

#[test]
fn an_async_run_plans_its_pool_and_actors_and_its_heap_stays_within_the_plan() {
    let sac = Sac::for_env(&Pendulum::new(0), small_sac(), 0).unwrap();
    let mut config = sac_run(400, None);
    config.off.collector = CollectorChoice::Async {
        workers: 2,
        steps_per_chunk: 4,
    };
    config.run.n_envs = 2;
    let before = plan_trainer::<Pendulum, Sac>(&sac, &config).unwrap();
    let (result, stats) = rl_testkit::measure(|| {
        let mut trainer = new_trainer(Pendulum::new, sac, config).unwrap();
        let summary = trainer.train(&mut ()).unwrap();
        (trainer.memory_plan().clone(), summary)
    });
    let (plan, summary) = result;
    assert_eq!(summary.total_env_steps, 400);
    assert_eq!(summary.updates, 400 / 2 - 50 / 2);
    // The plan checked before anything existed covers the collector's own figures.
    assert!(planned(&before, "collector") >= planned(&plan, "collector"));
    assert!(planned(&plan, "collector/async_collector/chunk_pool") > 0);
    let actors = planned(&plan, "collector/async_collector/sac actor x5");
    assert!(actors > 0, "{plan}");
    assert_eq!(
        planned(&before, "collector/async_collector/sac actor x5"),
        actors
    );
    // Everything this thread allocated is in the plan: chunks, actors, lanes, the
    // learner (worker threads allocate nothing of their own).
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
}

#[test]
fn an_async_discrete_sac_with_a_learned_table_publishes_its_table() {
    let env = cue(0);
    let table =
        rl_core::FeatureTable::new(2, 4, vec![0.5, -0.2, 0.1, 0.3, -0.4, 0.2, 0.6, -0.1]).unwrap();
    let sac = rl_algos::sac::DiscreteSac::with_learnable_table(
        env.observation_space(),
        env.action_space(),
        table,
        SacConfig {
            hidden: vec![16],
            batch_size: 16,
            ..SacConfig::sb3()
        },
        0,
    )
    .unwrap();
    let config = async_run(600, 4);
    let before = plan_trainer::<Cue, rl_algos::sac::DiscreteSac>(&sac, &config).unwrap();
    let mut trainer = new_trainer(cue, sac, config).unwrap();
    let summary = trainer.train(&mut ()).unwrap();
    assert_eq!(summary.total_env_steps, 600);
    assert_eq!(summary.updates, 600 / 4 - 64 / 4);
    assert_eq!(trainer.policy_version(), 600 / 8 - 64 / 8);
    let plan = trainer.memory_plan();
    // The plan checked before anything existed is the collector's own, to the byte.
    assert_eq!(planned(&before, "collector"), planned(plan, "collector"));
    assert!(
        planned(
            plan,
            "collector/async_collector/discrete sac actor x5 (learned table"
        ) > 0
    );
}

#[test]
fn async_and_memmap_settings_are_usage_errors_naming_the_field_before_allocation() {
    let sac = Sac::for_env(&Pendulum::new(0), small_sac(), 0).unwrap();
    let asynchronous = |workers, steps_per_chunk| CollectorChoice::Async {
        workers,
        steps_per_chunk,
    };
    let memmap = ReplayLocation::Memmap {
        dir: std::path::PathBuf::new(),
    };
    let cases = [
        (asynchronous(0, 8), ReplayLocation::Ram, "collector.workers"),
        (asynchronous(3, 8), ReplayLocation::Ram, "collector.workers"),
        (
            asynchronous(2, 0),
            ReplayLocation::Ram,
            "collector.steps_per_chunk",
        ),
        (CollectorChoice::Sync, memmap, "replay_location.dir"),
    ];
    for (collector, replay_location, field) in cases {
        let config = OffRun {
            off: OffPolicyConfig {
                buffer_capacity: 10_000_000,
                collector,
                replay_location,
                ..OffPolicyConfig::new()
            },
            run: RunConfig {
                n_envs: 4,
                ..RunConfig::new(100)
            },
        };
        let err = config.off.validate(config.run.n_envs).unwrap_err();
        assert!(
            matches!(err, Error::Config { ref key, .. } if key == field),
            "{err}"
        );
        let learner = sac.clone();
        let (result, stats) = rl_testkit::measure(|| new_trainer(Pendulum::new, learner, config));
        let err = result.unwrap_err();
        assert!(
            matches!(err, Error::Config { ref key, .. } if key == field),
            "{err}"
        );
        assert!(
            stats.peak_live_bytes < 1 << 20,
            "{field}: allocated {} bytes before refusing",
            stats.peak_live_bytes
        );
    }
}

#[test]
fn an_async_run_saves_and_resumes_with_its_learner_replay_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("run");
    let config = |total, checkpoint: Option<&std::path::Path>| {
        let mut config = async_run(total, 8);
        config.run.checkpoint = checkpoint.map(|d| CheckpointSchedule {
            dir: d.to_owned(),
            every_steps: None,
            best: None,
            ..CheckpointSchedule::default()
        });
        config
    };
    let mut first = new_trainer(cue, small_dqn(1), config(1_000, Some(&saved))).unwrap();
    let summary = first.train(&mut ()).unwrap();
    assert_eq!(
        (summary.total_env_steps, summary.updates),
        (1_000, 250 - 16)
    );
    let learner = first.learner().checkpoint().to_bytes().unwrap();
    let rewards = first.replay().column::<f32>("reward").unwrap().to_vec();
    let ring = first.replay().ring();
    drop(first);

    // Resumed into an untrained learner, with the same collector or the sync one.
    for collector in [config(2_000, None).off.collector, CollectorChoice::Sync] {
        let mut resumed_config = config(2_000, None);
        resumed_config.off.collector = collector;
        let mut resumed = resume_trainer(&saved, cue, small_dqn(1), resumed_config).unwrap();
        assert_eq!(resumed.env_steps(), 1_000);
        assert!(resumed.learner().checkpoint().to_bytes().unwrap() == learner);
        assert_eq!(resumed.replay().ring(), ring);
        assert_eq!(
            resumed.replay().column::<f32>("reward").unwrap(),
            &rewards[..]
        );
        let summary = resumed.train(&mut ()).unwrap();
        // No second warm-up; one phase per 4 env steps.
        assert_eq!(
            (summary.total_env_steps, summary.updates),
            (2_000, 500 - 16)
        );
        assert_eq!(resumed.replay().len(), 2_000);
    }
}

#[test]
fn a_memmap_run_saves_in_place_and_resumes_with_the_same_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (saved, replay_dir) = (dir.path().join("run"), dir.path().join("replay"));
    let config = |total, checkpoint: Option<&std::path::Path>| {
        let mut config = sac_run(total, checkpoint);
        config.off.replay_location = ReplayLocation::Memmap {
            dir: replay_dir.clone(),
        };
        config
    };
    let sac = || Sac::for_env(&Pendulum::new(0), small_sac(), 0).unwrap();
    // The plan puts the rows in the file, none in RAM; RAM holds the file pages mapped
    // between two releases: at most 32 MiB plus what one step maps.
    let plan = plan_trainer::<Pendulum, Sac>(&sac(), &config(120, None)).unwrap();
    let mapped = "replay/file pages mapped (released past 32 MiB)";
    let (rows, pages): (Vec<_>, Vec<_>) = plan
        .lines()
        .iter()
        .filter(|l| l.component.starts_with("replay"))
        .partition(|l| l.component != mapped);
    assert!(rows.iter().all(|l| l.location == Location::File));
    let file_bytes: u64 = rows.iter().map(|l| l.bytes).sum();
    assert!(file_bytes > 0);
    assert_eq!(plan.total(Location::File), file_bytes);
    assert_eq!(pages.len(), 1);
    assert_eq!(pages[0].location, Location::Ram);
    assert!((32 << 20..48 << 20).contains(&pages[0].bytes), "{pages:?}");

    let mut first = new_trainer(Pendulum::new, sac(), config(120, Some(&saved))).unwrap();
    assert_eq!(first.replay().location(), Location::File);
    let file = first.replay().path().unwrap().to_owned();
    assert_eq!(
        file,
        std::path::absolute(replay_dir.join(REPLAY_FILE)).unwrap()
    );
    assert_eq!(std::fs::metadata(&file).unwrap().len(), file_bytes);
    let summary = first.train(&mut ()).unwrap();
    assert_eq!((summary.total_env_steps, summary.updates), (120, 70));
    let columns = |t: &OffPolicyTrainer<Pendulum, Sac>| {
        ["obs", "action", "reward", "next_obs"]
            .map(|name| t.replay().column::<f32>(name).unwrap().to_vec())
    };
    let rows = columns(&first);
    let ring = first.replay().ring();
    let err = new_trainer(Pendulum::new, sac(), config(120, None)).unwrap_err();
    assert!(
        matches!(err, Error::Config { ref key, .. } if key == "replay_location.dir"),
        "a new run must not take the file: {err}"
    );
    drop(first);

    // A RAM configuration cannot continue a memmap run.
    let err = resume_trainer(&saved, Pendulum::new, sac(), sac_run(200, None)).unwrap_err();
    assert!(
        matches!(err, Error::CheckpointMismatch { ref what, .. } if what == "replay_location"),
        "{err}"
    );
    let mut resumed = resume_trainer(&saved, Pendulum::new, sac(), config(200, None)).unwrap();
    assert_eq!(resumed.env_steps(), 120);
    assert_eq!(resumed.replay().path(), Some(file.as_path()));
    assert_eq!(resumed.replay().ring(), ring);
    assert_eq!(columns(&resumed), rows);
    let summary = resumed.train(&mut ()).unwrap();
    assert_eq!((summary.total_env_steps, summary.updates), (200, 150));
    assert_eq!(resumed.replay().len(), 200);
}

#[test]
fn actor_clones_explore_apart_and_take_new_weights_without_allocating() {
    let mut dqn = small_dqn(1);
    let mut staging = dqn.actor().unwrap();
    assert_eq!(staging.epsilon(), 1.0);
    let (mut a, mut b) = (staging.clone(), staging.clone());
    let obs: Vec<f32> = (0..128).map(|i| (i % 2) as f32).collect();
    let act = |actor: &mut rl_algos::dqn::DqnActor| {
        let mut actions = vec![0u32; 64];
        let (mut lp, mut v) = (vec![0.0; 64], vec![0.0; 64]);
        let out = rl_collect::ActOutput {
            actions: &mut actions,
            log_probs: &mut lp,
            values: &mut v,
        };
        rl_collect::Policy::act(actor, &obs, &mut [Default::default(); 64], out).unwrap();
        actions
    };
    assert_ne!(act(&mut a), act(&mut b), "clones must draw apart");

    // New weights and a later epsilon reach a clone in place.
    dqn.restore(&small_dqn(2).checkpoint()).unwrap();
    dqn.set_env_steps(5_000);
    dqn.refresh_actor(&mut staging).unwrap();
    let ((), stats) = rl_testkit::measure(|| a.clone_from(&staging));
    assert_eq!(stats.allocations, 0);
    assert_eq!(a.network().params(), dqn.q_network().params());
    assert_eq!(a.epsilon(), dqn.epsilon());
    // Greedy (epsilon 0.05) actions of the cue environment's observations agree with the
    // learner's greedy ones on most rows.
    let mut greedy = vec![0u32; 64];
    dqn.predict(&obs, 64, &mut greedy).unwrap();
    let same = act(&mut a)
        .iter()
        .zip(&greedy)
        .filter(|(x, y)| x == y)
        .count();
    assert!(same >= 50, "{same} of 64");

    let mut sac = Sac::for_env(&Pendulum::new(0), small_sac(), 0).unwrap();
    let mut staging = sac.actor().unwrap();
    let mut worker = staging.clone();
    sac.restore(
        &Sac::for_env(&Pendulum::new(0), small_sac(), 5)
            .unwrap()
            .checkpoint(),
    )
    .unwrap();
    sac.refresh_actor(&mut staging).unwrap();
    assert_ne!(worker.network().params(), staging.network().params());
    let ((), stats) = rl_testkit::measure(|| worker.clone_from(&staging));
    assert_eq!(stats.allocations, 0);
    assert_eq!(worker.network().params(), staging.network().params());
}

proptest! {
    /// The training phases due between two step counts are the multiples of the phase
    /// length past the warm-up, however the steps arrive (one phase per call for the sync
    /// collector, chunks of any size for the async one).
    #[test]
    fn phases_due_counts_every_phase_boundary_once(
        learning_starts in 0u64..200,
        phase in 1u64..20,
        chunks in proptest::collection::vec(1u64..50, 1..40),
    ) {
        let mut steps = 0;
        let mut total = 0;
        for chunk in chunks {
            total += super::off_policy::phases_due(steps, steps + chunk, learning_starts, phase);
            steps += chunk;
        }
        let naive = (1..=steps).filter(|s| s % phase == 0 && *s > learning_starts).count() as u64;
        prop_assert_eq!(total, naive);
    }
}

#[test]
fn a_new_memmap_run_that_fails_leaves_no_replay_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = async_run(100, 4);
    config.off.replay_location = ReplayLocation::Memmap {
        dir: dir.path().to_owned(),
    };
    // Environment 1 has three actions: the collector refuses the environments after the
    // replay file was created.
    let mismatched = |seed: u64| {
        let mut env = cue(seed);
        if seed % 1000 == 1 {
            env.act_space = Space::Discrete { n: 3 };
        }
        env
    };
    assert!(new_trainer(mismatched, small_dqn(1), config.clone()).is_err());
    assert!(!dir.path().join(REPLAY_FILE).exists());
    let mut trainer = new_trainer(cue, small_dqn(1), config).unwrap();
    assert_eq!(trainer.train(&mut ()).unwrap().total_env_steps, 100);
}

#[test]
fn plans_from_the_configuration_equal_the_plans_of_the_built_trainers() {
    let run = RunConfig {
        n_envs: 2,
        ..RunConfig::new(64)
    };
    let learner = ppo(small_policy(0), 0);
    let planned = OnPolicyTrainer::<Fixed, Ppo<CategoricalPolicy>>::plan(
        &fixed(0),
        learner.blueprint(),
        &run,
    )
    .unwrap();
    let built = OnPolicyTrainer::new(fixed, learner, run).unwrap();
    assert_eq!(&planned, built.memory_plan());
    assert!(
        planned
            .lines()
            .iter()
            .any(|l| l.component.starts_with("collector/sync_collector"))
    );

    let config = off_policy_config(64, 0, false, None);
    let planned = plan_trainer::<Fixed, Dqn>(&fixed_dqn(0), &config).unwrap();
    let built = new_trainer(fixed, fixed_dqn(0), config).unwrap();
    assert_eq!(&planned, built.memory_plan());
}

/// Records every scheduled evaluation's mean return.
#[derive(Default)]
struct Evals(Vec<f64>);

impl<S> Callback<S> for Evals {
    fn on_eval(&mut self, _env_steps: u64, report: &crate::eval::EvalReport) -> Control {
        self.0.push(report.mean_return);
        Control::Continue
    }
}

#[test]
fn the_best_checkpoint_holds_the_learner_of_the_best_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let (run_dir, best) = (dir.path().join("run"), dir.path().join("best"));
    let mut config = off_policy_config(640, 3, false, Some(&run_dir));
    config.run.eval = Some(EvalSchedule::new(64, 2));
    config.run.checkpoint.as_mut().unwrap().best = Some(best.clone());
    let mut trainer = new_trainer(fixed, fixed_dqn(3), config.clone()).unwrap();
    let mut evals = Evals::default();
    trainer.train(&mut evals).unwrap();
    assert_eq!(evals.0.len(), 10);
    let top = evals.0.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let counters = RunCounters::load(&best).unwrap();
    assert_eq!(counters.best_eval_return, Some(top));
    let at = evals.0.iter().position(|&m| m == top).unwrap();
    assert_eq!(
        counters.env_steps,
        64 * (at as u64 + 1),
        "saved at the first best"
    );
    assert!(!best.join(REPLAY_FILE).exists() && !best.join("replay").exists());
    assert_eq!(
        RunCounters::load(&run_dir).unwrap().best_eval_return,
        Some(top)
    );

    // The saved learner scores what the best evaluation scored.
    let mut learner = fixed_dqn(99);
    let saved = rl_nn::Checkpoint::load(best.join("learner.safetensors"), "dqn").unwrap();
    learner.restore(&saved).unwrap();
    let schedule = config.run.eval.unwrap();
    let report = crate::eval::evaluate(
        &mut fixed(0),
        &mut learner,
        &config.run.eval_config(&schedule),
    )
    .unwrap();
    assert_eq!(report.mean_return, top);

    // A best folder inside the run directory would be swapped away with it.
    let mut inside = config;
    inside.run.checkpoint.as_mut().unwrap().best = Some(run_dir.join("best"));
    let e = new_trainer(fixed, fixed_dqn(3), inside).unwrap_err();
    assert!(
        matches!(e, Error::Config { ref key, .. } if key == "run.checkpoint.best"),
        "{e}"
    );
}
