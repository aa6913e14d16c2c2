//! DQN solves CartPole-v1: a mean return of at least 475 over 20 deterministic
//! evaluation episodes.
//!
//! ```text
//! cargo run --release --example dqn_cartpole -- --seed 0
//! ```
//!
//! The library's `OffPolicyTrainer` owns the loop, as for SAC: the same trainer, another
//! learner. Evaluations (20 deterministic episodes on a separate environment) run every
//! `--eval-every` env steps; the run stops at the first that reaches 475. Output and run
//! flags as `ppo_cartpole`, and `eval_mean_return` is the evaluation that solved it
//! (`--help` lists every flag with its default).
//!
//! Settings (rl-baselines3-zoo's tuned CartPole-v1 DQN, `DqnConfig::rl_zoo_cartpole`):
//! Q network 4-256-256-2 ReLU, learning rate 2.3e-3, batch 64, gamma 0.99, a 100 000-row
//! replay, 1 000 random steps, then 128 gradient steps every 256 env steps, the target
//! copied before each phase, epsilon from 1 to 0.04 over 8 000 steps; `--double true`
//! turns on double Q-learning and `--prioritized true` prioritized replay.

mod common;

use clap::{ArgAction, Parser};
use rl::algos::dqn::{Dqn, DqnConfig};
use rl::envs::CartPole;
use rl::storage::sampler::PrioritizedConfig;
use rl::train::trainer::{Goal, OffPolicyConfig};

/// DQN on CartPole-v1 with rl-zoo3's tuned settings, on the off-policy trainer; one JSON
/// line on stdout.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    run: common::RunFlags<50_000, 1_024, 20>,
    #[command(flatten)]
    off: common::OffPolicyFlags,
    /// Env steps between training phases.
    #[arg(long, default_value_t = 256)]
    train_freq: u64,
    /// Gradient steps per training phase.
    #[arg(long, default_value_t = 128)]
    gradient_steps: usize,
    /// Random steps before learning.
    #[arg(long, default_value_t = 1_000)]
    learning_starts: u64,
    /// Learning rate.
    #[arg(long, default_value_t = 2.3e-3)]
    lr: f64,
    /// Double Q-learning (the online network picks the next action, the target values it).
    #[arg(long, action = ArgAction::Set, default_value_t = false)]
    double: bool,
    /// Prioritized replay (alpha 0.6, beta 0.4).
    #[arg(long, action = ArgAction::Set, default_value_t = false)]
    prioritized: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut dqn = DqnConfig::rl_zoo_cartpole();
    dqn.adam.lr = args.lr;
    dqn.double = args.double;
    let goal = Goal::EvalReturn { mean_return: 475.0 };
    let run = args.run.run_config(1, goal, Some(1 << 30));
    let learner = Dqn::for_env(&CartPole::new(0), dqn, run.seed)?;
    let config = OffPolicyConfig {
        buffer_capacity: 100_000,
        learning_starts: args.learning_starts,
        train_freq: args.train_freq,
        gradient_steps: args.gradient_steps,
        prioritized: args.prioritized.then(PrioritizedConfig::default),
        ..args.off.apply(OffPolicyConfig::new())
    };
    let resume = args.run.resume.as_ref();
    common::off_policy("dqn_cartpole", resume, CartPole::new, learner, config, run)
}
