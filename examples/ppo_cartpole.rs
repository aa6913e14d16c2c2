//! PPO solves CartPole-v1: a mean return of at least 475 over the last 20 episodes.
//!
//! ```text
//! cargo run --release --example ppo_cartpole -- --seed 0 --threads 1
//! ```
//!
//! The library's `OnPolicyTrainer` owns the loop; this file only configures it. Prints
//! the memory plan and a progress line every 0.1 s on stderr, then one JSON line on
//! stdout: `{"solved", "env_steps", "wall_s", "mean_return", "window", "peak_rss_bytes",
//! "seed", "planned_bytes", "env_steps_per_s", "total_env_steps", "total_wall_s",
//! "eval_mean_return"}` (`env_steps` and `wall_s` at the solve point, or at the end).
//! `--help` lists every flag with its default.
//!
//! Settings: 8 environments x 32 steps per rollout, minibatch 64, 5 epochs, gamma 0.98,
//! GAE lambda 0.8, learning rate 2e-3 and clip range 0.2 both decaying linearly to 0
//! over 100 000 env steps, no entropy bonus, value coefficient 0.5, grad-norm 0.5, ReLU
//! 64-64 actor and critic.

mod common;

use std::num::NonZeroUsize;

use clap::{ArgAction, Parser};
use rl::algos::{
    AdamConfig,
    policy::CategoricalPolicy,
    ppo::{ObsNormalization, Ppo, PpoConfig, RewardNormalization},
};
use rl::envs::CartPole;
use rl::train::trainer::Goal;

/// PPO on CartPole-v1 on the on-policy trainer; one JSON line on stdout.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    run: common::RunFlags<100_000, 10_000>,
    #[command(flatten)]
    policy: common::PolicyFlags,
    /// Steps per environment in one rollout.
    #[arg(long, default_value_t = NonZeroUsize::new(32).expect("32 > 0"))]
    n_steps: NonZeroUsize,
    /// Environments stepped together.
    #[arg(long, default_value_t = NonZeroUsize::new(8).expect("8 > 0"))]
    n_envs: NonZeroUsize,
    /// Rows per gradient step.
    #[arg(long, default_value_t = NonZeroUsize::new(64).expect("64 > 0"))]
    batch: NonZeroUsize,
    /// Passes over each rollout.
    #[arg(long, default_value_t = NonZeroUsize::new(5).expect("5 > 0"))]
    epochs: NonZeroUsize,
    /// Initial learning rate (decays linearly to 0 over --schedule env steps).
    #[arg(long, default_value_t = 2e-3)]
    lr: f64,
    /// Env steps of the linear learning-rate and clip-range decay.
    #[arg(long, default_value_t = 100_000)]
    schedule: u64,
    /// Running observation normalisation.
    #[arg(long, action = ArgAction::Set, default_value_t = false)]
    normalize_obs: bool,
    /// Running reward scaling.
    #[arg(long, action = ArgAction::Set, default_value_t = false)]
    normalize_reward: bool,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let ppo = PpoConfig {
        n_steps: args.n_steps.get(),
        batch_size: args.batch.get(),
        epochs: args.epochs.get(),
        gamma: 0.98,
        gae_lambda: 0.8,
        clip_range: 0.2,
        clip_range_end: Some(0.0),
        ent_coef: 0.0,
        max_grad_norm: 0.5,
        adam: AdamConfig {
            lr: args.lr,
            ..PpoConfig::new().adam
        },
        learning_rate_end: Some(0.0),
        schedule_steps: Some(args.schedule),
        normalize_obs: args.normalize_obs.then(ObsNormalization::default),
        normalize_reward: args.normalize_reward.then(RewardNormalization::default),
        ..PpoConfig::new()
    };
    let goal = Goal::TrainingReturn {
        mean_return: 475.0,
        window: 20,
    };
    let run = args.run.run_config(args.n_envs.get(), goal, None);
    let policy = CategoricalPolicy::for_env(
        &CartPole::new(0),
        args.policy.policy_config(),
        args.run.seed,
    )?;
    let resume = args.run.resume.as_ref();
    let ppo = Ppo::new(policy, ppo, run.n_envs, run.seed)?;
    common::on_policy("ppo_cartpole", resume, CartPole::new, ppo, run)
}
