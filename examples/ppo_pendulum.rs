//! PPO solves Pendulum-v1: a mean return of at least -500 over the last 20 episodes.
//!
//! ```text
//! cargo run --release --example ppo_pendulum -- --seed 0 --threads 1
//! ```
//!
//! Output and run flags as `ppo_cartpole` (`--help` lists every flag with its default).
//! Settings (rl-zoo's tuned Pendulum-v1 PPO without gSDE, with ReLU): a diagonal
//! Gaussian policy with state-independent log-std (initially 0), actor and critic MLPs
//! 3-64-64, actions clipped to [-2, 2] by the environment; 4 environments x 1024 steps
//! per rollout, minibatch 64, 10 epochs, gamma 0.9, GAE lambda 0.95, learning rate 1e-3
//! and clip range 0.2 (constant unless --schedule is set), no entropy bonus, value
//! coefficient 0.5, grad-norm 0.5.

mod common;

use std::num::NonZeroUsize;

use clap::{ArgAction, Parser};
use rl::algos::{
    AdamConfig,
    policy::{GaussianPolicy, PolicyConfig},
    ppo::{Ppo, PpoConfig, RewardNormalization},
};
use rl::envs::Pendulum;
use rl::train::trainer::Goal;

/// PPO on Pendulum-v1 on the on-policy trainer; one JSON line on stdout.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    run: common::RunFlags<300_000, 20_000>,
    #[command(flatten)]
    policy: common::PolicyFlags,
    /// Steps per environment in one rollout.
    #[arg(long, default_value_t = NonZeroUsize::new(1024).expect("1024 > 0"))]
    n_steps: NonZeroUsize,
    /// Environments stepped together.
    #[arg(long, default_value_t = NonZeroUsize::new(4).expect("4 > 0"))]
    n_envs: NonZeroUsize,
    /// Rows per gradient step.
    #[arg(long, default_value_t = NonZeroUsize::new(64).expect("64 > 0"))]
    batch: NonZeroUsize,
    /// Passes over each rollout.
    #[arg(long, default_value_t = NonZeroUsize::new(10).expect("10 > 0"))]
    epochs: NonZeroUsize,
    /// Learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Env steps of a linear decay of the learning rate and clip range to 0 (0: constant).
    #[arg(long, default_value_t = 0)]
    schedule: u64,
    /// Initial log standard deviation of the actions.
    #[arg(long, default_value_t = 0.0)]
    log_std: f32,
    /// Running reward scaling.
    #[arg(long, action = ArgAction::Set, default_value_t = false)]
    normalize_reward: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let scheduled = args.schedule > 0;
    let ppo = PpoConfig {
        n_steps: args.n_steps.get(),
        batch_size: args.batch.get(),
        epochs: args.epochs.get(),
        gamma: 0.9,
        gae_lambda: 0.95,
        clip_range: 0.2,
        clip_range_end: scheduled.then_some(0.0),
        ent_coef: 0.0,
        max_grad_norm: 0.5,
        adam: AdamConfig {
            lr: args.lr,
            ..PpoConfig::new().adam
        },
        learning_rate_end: scheduled.then_some(0.0),
        schedule_steps: scheduled.then_some(args.schedule),
        normalize_reward: args.normalize_reward.then(RewardNormalization::default),
        ..PpoConfig::new()
    };
    let goal = Goal::TrainingReturn {
        mean_return: -500.0,
        window: 20,
    };
    let run = args.run.run_config(args.n_envs.get(), goal, None);
    let policy_config = PolicyConfig {
        log_std_init: args.log_std,
        ..args.policy.policy_config()
    };
    let policy = GaussianPolicy::for_env(&Pendulum::new(0), policy_config, args.run.seed)?;
    let resume = args.run.resume.as_ref();
    let ppo = Ppo::new(policy, ppo, run.n_envs, run.seed)?;
    common::on_policy("ppo_pendulum", resume, Pendulum::new, ppo, run)
}
