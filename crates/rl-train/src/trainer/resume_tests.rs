//! Exact resume: a run stopped at any step (as a Ctrl-C stops it: the callback asks, the
//! trainer saves) and resumed in a new trainer ends with the learner of the run that
//! never stopped, bit for bit; the episode statistics and the wall clock continue.

use std::path::Path;

use proptest::prelude::*;
use rl_algos::sac::Sac;
use rl_envs::{CartPole, Pendulum};

use super::*;
use crate::config::Config;
use rl_algos::policy::{CategoricalPolicy, PolicyConfig};
use rl_algos::ppo::{Ppo, PpoConfig};

/// Stops the run once it has taken `at` env steps, as the `rl` command's Ctrl-C
/// handler does (the trainer then saves its checkpoint).
struct StopAt(u64);

impl<S> Callback<S> for StopAt {
    fn on_progress(&mut self, p: &Progress<'_, S>) -> Control {
        if p.env_steps >= self.0 {
            Control::Stop
        } else {
            Control::Continue
        }
    }
}

/// The shipped `configs/sac_pendulum.toml`, shortened to `total` env steps with a
/// buffer to match, and evaluations and step-cadence saves that the interrupted run
/// also makes (they must not change what it learns).
fn sac_pendulum(total: u64) -> Config {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/sac_pendulum.toml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let overrides = [
        format!("run.total_steps={total}"),
        "off_policy.buffer_capacity=4000".to_owned(),
        "off_policy.learning_starts=300".to_owned(),
        "run.eval={every_steps=250, episodes=1}".to_owned(),
    ];
    Config::from_toml(&text, &overrides).unwrap()
}

fn sac_trainer(
    config: &Config,
    learner_seed: u64,
    dir: Option<&Path>,
    resume: bool,
) -> OffPolicyTrainer<Pendulum, Sac> {
    let sac = Sac::for_env(&Pendulum::new(0), config.sac.clone().unwrap(), learner_seed).unwrap();
    let off = config.off_policy.clone().unwrap();
    let mut run = config.run.clone();
    run.checkpoint = dir.map(|d| CheckpointSchedule {
        dir: d.to_owned(),
        every_steps: Some(170),
        ..CheckpointSchedule::default()
    });
    match (dir, resume) {
        (Some(dir), true) => OffPolicyTrainer::resume(dir, Pendulum::new, sac, off, run).unwrap(),
        _ => OffPolicyTrainer::new(Pendulum::new, sac, off, run).unwrap(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5))]

    /// `sac_pendulum` stopped at a random step (mid-episode: Pendulum's episodes are 200
    /// steps; in the warm-up or after it) and resumed ends with the uninterrupted run's
    /// learner bytes, replay rows and episode statistics.
    #[test]
    fn a_sac_pendulum_run_stopped_anywhere_resumes_bit_for_bit(stop in 1u64..700) {
        let total = 700;
        let config = sac_pendulum(total);
        let mut whole = sac_trainer(&config, config.run.seed, None, false);
        let whole_summary = whole.train(&mut ()).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let saved = dir.path().join("checkpoint");
        let mut part = sac_trainer(&config, config.run.seed, Some(&saved), false);
        let stopped = part.train(&mut StopAt(stop)).unwrap();
        prop_assert_eq!(stopped.stopped_by, StopReason::Callback);
        prop_assert_eq!(stopped.total_env_steps, stop);
        drop(part);
        // Built from another seed: everything must come from the directory.
        let mut resumed = sac_trainer(&config, config.run.seed + 1, Some(&saved), true);
        prop_assert_eq!(resumed.continuation(), Some(Continuation::Exact));
        let summary = resumed.train(&mut ()).unwrap();
        prop_assert_eq!(summary.total_env_steps, total);
        let bytes = |t: &OffPolicyTrainer<Pendulum, Sac>| t.learner().checkpoint().to_bytes().unwrap();
        prop_assert!(bytes(&resumed) == bytes(&whole), "the resumed learner differs");
        prop_assert_eq!(
            resumed.replay().column::<f32>("reward").unwrap(),
            whole.replay().column::<f32>("reward").unwrap()
        );
        prop_assert_eq!(summary.total_episodes, whole_summary.total_episodes);
        prop_assert_eq!(summary.mean_return, whole_summary.mean_return);
        prop_assert_eq!(summary.window, whole_summary.window);
    }
}

fn ppo_cartpole(seed: u64, total: u64, dir: Option<&Path>) -> RunConfig {
    RunConfig {
        n_envs: 2,
        seed,
        checkpoint: dir.map(|d| CheckpointSchedule {
            dir: d.to_owned(),
            ..CheckpointSchedule::default()
        }),
        ..RunConfig::new(total)
    }
}

fn cartpole_ppo(seed: u64) -> Ppo<CategoricalPolicy> {
    let policy = PolicyConfig {
        hidden: vec![16],
        ..PolicyConfig::new()
    };
    let policy = CategoricalPolicy::for_env(&CartPole::new(0), policy, seed).unwrap();
    let config = PpoConfig {
        n_steps: 64,
        batch_size: 32,
        ..PpoConfig::new()
    };
    Ppo::new(policy, config, 2, seed).unwrap()
}

/// An on-policy run stopped after a rollout that ends mid-episode (CartPole's episodes
/// straddle every rollout) continues exactly: the environments come back mid-episode,
/// and the episode count, return window and wall clock go on from the save.
#[test]
fn a_ppo_cartpole_run_resumed_mid_episode_continues_exactly() {
    let (seed, rollout) = (3, 128);
    let total = rollout * 6;
    let mut whole = OnPolicyTrainer::new(
        CartPole::new,
        cartpole_ppo(seed),
        ppo_cartpole(seed, total, None),
    )
    .unwrap();
    let whole_summary = whole.train(&mut ()).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("checkpoint");
    let mut part = OnPolicyTrainer::new(
        CartPole::new,
        cartpole_ppo(seed),
        ppo_cartpole(seed, total, Some(&saved)),
    )
    .unwrap();
    let stopped = part.train(&mut StopAt(rollout * 2 + 1)).unwrap();
    assert_eq!(stopped.total_env_steps, rollout * 3);
    assert!(stopped.total_episodes > 0, "the segment ends episodes");
    let saved_wall = RunCounters::load(&saved).unwrap().wall_s;
    assert!(saved_wall > 0.0 && saved_wall <= stopped.total_wall_s);
    drop(part);
    let mut resumed = OnPolicyTrainer::resume(
        &saved,
        CartPole::new,
        cartpole_ppo(seed + 1),
        ppo_cartpole(seed, total, None),
    )
    .unwrap();
    assert_eq!(resumed.continuation(), Some(Continuation::Exact));
    let mut first = None;
    let summary = resumed
        .train(&mut |p: &Progress<'_, _>| {
            first.get_or_insert((p.episodes, p.wall_s));
        })
        .unwrap();
    let (episodes, wall) = first.unwrap();
    assert!(
        episodes >= stopped.total_episodes,
        "episodes restarted at {episodes}"
    );
    assert!(wall >= saved_wall, "the wall clock restarted at {wall}");
    assert_eq!(summary.total_episodes, whole_summary.total_episodes);
    assert_eq!(summary.mean_return, whole_summary.mean_return);
    assert!(summary.total_wall_s >= saved_wall);
    let bytes = |t: &mut OnPolicyTrainer<CartPole, Ppo<CategoricalPolicy>>| {
        t.checkpoint().to_bytes().unwrap()
    };
    assert!(
        bytes(&mut resumed) == bytes(&mut whole),
        "the resumed learner differs"
    );
}

/// A callback from a closure over each iteration's progress.
impl<S, F: FnMut(&Progress<'_, S>)> Callback<S> for F {
    fn on_progress(&mut self, p: &Progress<'_, S>) -> Control {
        self(p);
        Control::Continue
    }
}

/// Plain DQN (one head: its per-environment `ActiveHead` never changes) resumes
/// mid-episode exactly: `dqn_cartpole` stopped during learning ends with the
/// uninterrupted run's learner bytes and replay rows; a bootstrapped DQN (its episodes
/// act with a drawn head) restarts its episodes instead.
#[test]
fn a_plain_dqn_run_resumes_bit_for_bit_and_a_bootstrapped_one_restarts_episodes() {
    use rl_algos::dqn::{Dqn, EnsembleConfig};
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/dqn_cartpole.toml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let overrides = [
        "run.total_steps=1500",
        "off_policy.learning_starts=300",
        "off_policy.train_freq=16",
        "off_policy.gradient_steps=4",
        "dqn.hidden=[32]",
    ]
    .map(str::to_owned);
    let config = Config::from_toml(&text, &overrides).unwrap();
    let trainer =
        |ensemble: Option<EnsembleConfig>, seed: u64, dir: Option<&Path>, resume: bool| {
            let dqn = rl_algos::dqn::DqnConfig {
                ensemble,
                ..config.dqn.clone().unwrap()
            };
            let dqn = Dqn::for_env(&CartPole::new(0), dqn, seed).unwrap();
            let off = config.off_policy.clone().unwrap();
            let mut run = config.run.clone();
            run.checkpoint = dir.map(|d| CheckpointSchedule {
                dir: d.to_owned(),
                ..CheckpointSchedule::default()
            });
            match (dir, resume) {
                (Some(dir), true) => {
                    OffPolicyTrainer::resume(dir, CartPole::new, dqn, off, run).unwrap()
                }
                _ => OffPolicyTrainer::new(CartPole::new, dqn, off, run).unwrap(),
            }
        };
    let seed = config.run.seed;
    let mut whole = trainer(None, seed, None, false);
    whole.train(&mut ()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("checkpoint");
    let mut part = trainer(None, seed, Some(&saved), false);
    part.train(&mut StopAt(777)).unwrap();
    drop(part);
    let mut resumed = trainer(None, seed + 1, Some(&saved), true);
    assert_eq!(resumed.continuation(), Some(Continuation::Exact));
    resumed.train(&mut ()).unwrap();
    let bytes = |t: &OffPolicyTrainer<CartPole, Dqn>| t.learner().checkpoint().to_bytes().unwrap();
    assert!(
        bytes(&resumed) == bytes(&whole),
        "the resumed learner differs"
    );
    assert_eq!(
        resumed.replay().column::<f32>("reward").unwrap(),
        whole.replay().column::<f32>("reward").unwrap()
    );

    let heads = Some(EnsembleConfig {
        heads: 3,
        mask_probability: 0.5,
        prior_scale: 0.0,
    });
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("checkpoint");
    let mut part = trainer(heads, seed, Some(&saved), false);
    part.train(&mut StopAt(777)).unwrap();
    drop(part);
    let resumed = trainer(heads, seed, Some(&saved), true);
    assert_eq!(resumed.continuation(), Some(Continuation::EpisodesRestart));
}
