//! The trainers driving the recurrent learners: recurrent PPO on masked CartPole (train,
//! save, resume), and a recurrent DQN that must remember a cue (an LSTM recalls it; a
//! memoryless learner cannot).

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_algos::dqn::{Dqn, DqnConfig};
use rl_algos::learner::Learner;
use rl_algos::policy::{History, PolicyConfig, RecurrentCategoricalPolicy};
use rl_algos::ppo::{PpoConfig, RecurrentPpo, RecurrentPpoConfig};
use rl_algos::sequence::{Recurrent, RecurrentConfig};
use rl_core::{BoxSpace, DType, Space};
use rl_envs::MaskedCartPole;

use super::{Goal, OffPolicyConfig, OffPolicyTrainer, OnPolicyTrainer, RunConfig};

const ENVS: usize = 4;

fn policy(history: History, seed: u64) -> RecurrentCategoricalPolicy {
    let config = PolicyConfig {
        hidden: vec![16],
        ..PolicyConfig::new()
    };
    RecurrentCategoricalPolicy::for_env(&MaskedCartPole::new(0), history, config, seed).unwrap()
}

fn config(chunk_len: usize) -> RecurrentPpoConfig {
    let ppo = PpoConfig {
        n_steps: 32,
        batch_size: 4 * chunk_len,
        epochs: 2,
        ..PpoConfig::new()
    };
    RecurrentPpoConfig::new(ppo, chunk_len)
}

#[test]
fn the_trainer_drives_recurrent_ppo_and_resumes() {
    let history = History::Lstm { hidden: 8 };
    let run = RunConfig {
        n_envs: ENVS,
        goal: Some(Goal::TrainingReturn {
            mean_return: 475.0,
            window: 20,
        }),
        ..RunConfig::new(3 * 32 * ENVS as u64)
    };
    let learner = RecurrentPpo::new(policy(history, 2), config(8), ENVS, run.seed).unwrap();
    let mut trainer = OnPolicyTrainer::new(MaskedCartPole::new, learner, run.clone()).unwrap();
    let plan = trainer.memory_plan().clone();
    assert!(
        plan.lines()
            .iter()
            .any(|l| l.component.contains("chunk starts")),
        "{plan}"
    );
    let summary = trainer.train(&mut ()).unwrap();
    assert_eq!(summary.total_env_steps, 3 * 32 * ENVS as u64);
    assert_eq!(trainer.ppo().updates(), 3);
    let report = trainer.evaluate(2).unwrap();
    assert_eq!(report.episodes, 2);
    let dir = tempfile::tempdir().unwrap();
    trainer.save(dir.path()).unwrap();
    let run = RunConfig {
        total_steps: 4 * 32 * ENVS as u64,
        ..run
    };
    let learner = RecurrentPpo::new(policy(history, 7), config(8), ENVS, run.seed).unwrap();
    let mut resumed =
        OnPolicyTrainer::resume(dir.path(), MaskedCartPole::new, learner, run).unwrap();
    assert_eq!(resumed.env_steps(), 3 * 32 * ENVS as u64);
    resumed.train(&mut ()).unwrap();
    assert_eq!(resumed.ppo().updates(), 4);
}

/// Recall: the first observation shows a cue (+1 or -1), the next ones show nothing,
/// and the last step pays 1 for the action that names the cue (0 for +1, 1 for -1).
/// Without memory the best expected return is 0.5.
struct Recall {
    obs_space: Space,
    act_space: Space,
    steps: usize,
    t: usize,
    cue: bool,
    rng: Xoshiro256PlusPlus,
}

impl Recall {
    fn new(seed: u64) -> Self {
        Self {
            obs_space: Space::Box(BoxSpace::uniform(-1.0, 1.0, &[2], DType::F32).unwrap()),
            act_space: Space::discrete(2).unwrap(),
            steps: 3,
            t: 0,
            cue: false,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
        }
    }

    fn observe(&self, obs: &mut [f32]) {
        obs[0] = match (self.t, self.cue) {
            (0, true) => 1.0,
            (0, false) => -1.0,
            _ => 0.0,
        };
        obs[1] = if self.t + 1 == self.steps { 1.0 } else { 0.0 };
    }
}

impl rl_core::Env for Recall {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.obs_space
    }

    fn action_space(&self) -> &Space {
        &self.act_space
    }

    fn reset(&mut self, seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        if let Some(seed) = seed {
            self.rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        }
        self.t = 0;
        self.cue = self.rng.random_bool(0.5);
        self.observe(obs);
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl_core::Result<rl_core::Step> {
        let last = self.t + 1 == self.steps;
        let reward = if last && (action[0] == 0) == self.cue {
            1.0
        } else {
            0.0
        };
        self.t += 1;
        self.observe(obs);
        Ok(rl_core::Step {
            reward,
            terminated: last,
            truncated: false,
        })
    }
}

/// A recurrent DQN with `history` on [`Recall`] through the off-policy trainer.
fn recall_trainer(history: History, run: RunConfig) -> OffPolicyTrainer<Recall, Recurrent<Dqn>> {
    let config = RecurrentConfig {
        seq_len: 3,
        burn_in: 1,
        adam: rl_nn::AdamConfig {
            lr: 3e-3,
            ..rl_nn::AdamConfig::default()
        },
        tau: 0.05,
        ..RecurrentConfig::new(history)
    };
    let dqn = DqnConfig {
        hidden: vec![16],
        batch_size: 16 * 3,
        adam: rl_nn::AdamConfig {
            lr: 3e-3,
            ..DqnConfig::default().adam
        },
        exploration: rl_algos::dqn::EpsilonSchedule {
            initial: 1.0,
            end: 0.05,
            decay_steps: 1_000,
        },
        target_update: rl_algos::dqn::TargetUpdate::Hard { every: 50 },
        ..DqnConfig::default()
    };
    let env = Recall::new(0);
    let learner = Recurrent::new(
        rl_core::Env::observation_space(&env),
        config,
        run.seed,
        |s| Dqn::new(s, &Space::discrete(2).unwrap(), dqn, run.seed),
    )
    .unwrap();
    let off = OffPolicyConfig {
        buffer_capacity: 5_000,
        learning_starts: 200,
        ..OffPolicyConfig::new()
    };
    OffPolicyTrainer::new(Recall::new, learner, off, run).unwrap()
}

/// Trains a recurrent DQN with `history` on [`Recall`] (two environments: windows are
/// strided) and returns the greedy evaluation's mean.
fn recall_after_training(history: History) -> f64 {
    let run = RunConfig {
        n_envs: 2,
        ..RunConfig::new(3_000)
    };
    let mut trainer = recall_trainer(history, run);
    trainer.train(&mut ()).unwrap();
    trainer.evaluate(100).unwrap().mean_return
}

#[test]
fn an_lstm_learns_to_recall_what_a_memoryless_learner_cannot() {
    let with_memory = recall_after_training(History::Lstm { hidden: 16 });
    let without = recall_after_training(History::None);
    assert!(with_memory >= 0.95, "with an LSTM: {with_memory}");
    assert!(without <= 0.7, "without memory: {without}");
}

/// Records the training episodes a run reports and its learner's statistics (every
/// loss and value, printed in full) at every iteration.
#[derive(Default)]
struct TrainingEpisodes {
    episodes: Vec<(u64, u64, f64)>,
    stats: Vec<String>,
}

impl<S: std::fmt::Debug> super::Callback<S> for TrainingEpisodes {
    fn on_progress(&mut self, progress: &super::Progress<'_, S>) -> super::Control {
        if let Some(stats) = progress.stats {
            self.stats.push(format!("{stats:?}"));
        }
        super::Control::Continue
    }

    fn on_episode(&mut self, episode: &super::EpisodeEnd) {
        if episode.kind == super::EpisodeKind::Train {
            self.episodes
                .push((episode.env_steps, episode.length, episode.episode_return));
        }
    }
}

/// A one-environment recurrent DQN on [`Recall`]: its training episodes, and the
/// greedy return of the learner it ends with, evaluating every `eval_every` steps.
fn one_env_recall(eval_every: Option<u64>) -> (Vec<(u64, u64, f64)>, f64) {
    let run = RunConfig {
        n_envs: 1,
        eval: eval_every.map(|every| super::EvalSchedule::new(every, 1)),
        ..RunConfig::new(3_000)
    };
    let mut trainer = recall_trainer(History::Lstm { hidden: 16 }, run);
    let mut episodes = TrainingEpisodes::default();
    trainer.train(&mut episodes).unwrap();
    (episodes.episodes, trainer.evaluate(50).unwrap().mean_return)
}

/// Evaluating acts with its own memory: a one-environment recurrent run that evaluates
/// every 4 steps (an evaluation in the middle of most training episodes: Recall's last
/// step needs the first step's cue) trains exactly as the same run without evaluations.
#[test]
fn evaluations_leave_a_recurrent_learners_training_memory_alone() {
    let (plain, plain_eval) = one_env_recall(None);
    let (evaluated, evaluated_eval) = one_env_recall(Some(4));
    assert_eq!(plain.len(), 1_000, "three-step episodes over 3 000 steps");
    // It learns to recall (training episodes after the exploration decayed).
    let late = plain[600..].iter().map(|e| e.2).sum::<f64>() / 400.0;
    assert!(late >= 0.8, "late training return {late}");
    assert_same_episodes(&plain, &evaluated);
    assert_eq!(plain_eval, evaluated_eval, "the learners they end with");
}

/// The same training episodes, or the first that differs.
fn assert_same_episodes(plain: &[(u64, u64, f64)], evaluated: &[(u64, u64, f64)]) {
    let first = plain.iter().zip(evaluated).position(|(a, b)| a != b);
    assert!(
        first.is_none() && plain.len() == evaluated.len(),
        "training episodes differ from episode {first:?} on ({} and {} episodes)",
        plain.len(),
        evaluated.len()
    );
}

/// One masked-CartPole environment under recurrent PPO, evaluating every `eval_every`
/// steps: its training episodes and update statistics.
fn one_env_masked_cartpole(eval_every: Option<u64>) -> TrainingEpisodes {
    let history = History::Lstm { hidden: 8 };
    let run = RunConfig {
        n_envs: 1,
        eval: eval_every.map(|every| super::EvalSchedule::new(every, 1)),
        ..RunConfig::new(6 * 32)
    };
    let learner = RecurrentPpo::new(policy(history, 2), config(8), 1, run.seed).unwrap();
    let mut trainer = OnPolicyTrainer::new(MaskedCartPole::new, learner, run).unwrap();
    let mut episodes = TrainingEpisodes::default();
    trainer.train(&mut episodes).unwrap();
    episodes
}

/// The same for recurrent PPO: evaluations between rollouts neither continue nor
/// record into the one training environment's memory.
#[test]
fn evaluations_leave_recurrent_ppos_training_memory_alone() {
    let plain = one_env_masked_cartpole(None);
    let evaluated = one_env_masked_cartpole(Some(32));
    assert!(
        plain.episodes.len() >= 4,
        "{} episodes",
        plain.episodes.len()
    );
    assert_same_episodes(&plain.episodes, &evaluated.episodes);
    // The updates saw the same rollouts: the same log-probabilities, values and
    // recorded chunk starts give the same losses, bit for bit.
    assert_eq!(plain.stats.len(), 6);
    assert_eq!(plain.stats, evaluated.stats);
}
