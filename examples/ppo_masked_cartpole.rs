//! Recurrent PPO solves CartPole with the velocities hidden (`MaskedCartPole`: only the
//! cart's position and the pole's angle are observed): a mean return of at least 475
//! over the last 20 episodes. Without history the task cannot be solved.
//!
//! `cargo run --release --example ppo_masked_cartpole -- --seed 0 --history lstm`:
//! `--history lstm` (an LSTM shared by actor and critic), `stack` (the last `--k`
//! observations) or `none`. The library's `OnPolicyTrainer` owns the loop. Prints the
//! memory plan and progress on stderr, then one JSON line on stdout with the keys of
//! `ppo_cartpole`. Settings (`--help` lists the flags): 8 environments x 64 steps,
//! chunks of 16 steps, minibatches of 8 chunks, 8 epochs, gamma 0.98, GAE lambda 0.8,
//! learning rate 1e-3 and clip range 0.2 decaying to 0 over 300 000 env steps, no
//! entropy bonus, LSTM of 64 units, ReLU 64-64 heads.

mod common;

use std::num::NonZeroUsize;

use clap::Parser;
use rl::algos::{
    AdamConfig,
    policy::RecurrentCategoricalPolicy,
    ppo::{PpoConfig, RecurrentPpo, RecurrentPpoConfig},
};
use rl::envs::MaskedCartPole;
use rl::train::trainer::Goal;

/// Recurrent PPO on MaskedCartPole on the on-policy trainer; one JSON line on stdout.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    run: common::RunFlags<300_000, 10_000>,
    #[command(flatten)]
    policy: common::PolicyFlags,
    /// What the policy remembers.
    #[arg(long, value_enum, default_value_t = common::HistoryFlag::Lstm)]
    history: common::HistoryFlag,
    /// LSTM units with --history lstm.
    #[arg(long, default_value_t = NonZeroUsize::new(64).expect("64 > 0"))]
    lstm_hidden: NonZeroUsize,
    /// Observations per stack with --history stack.
    #[arg(long, default_value_t = NonZeroUsize::new(4).expect("4 > 0"))]
    k: NonZeroUsize,
    /// Steps per environment in one rollout (a multiple of --chunk-len).
    #[arg(long, default_value_t = NonZeroUsize::new(64).expect("64 > 0"))]
    n_steps: NonZeroUsize,
    /// Environments stepped together.
    #[arg(long, default_value_t = NonZeroUsize::new(8).expect("8 > 0"))]
    n_envs: NonZeroUsize,
    /// Steps per training chunk (truncated back-propagation through time).
    #[arg(long, default_value_t = NonZeroUsize::new(16).expect("16 > 0"))]
    chunk_len: NonZeroUsize,
    /// Whole chunks per gradient step.
    #[arg(long, default_value_t = NonZeroUsize::new(8).expect("8 > 0"))]
    chunks: NonZeroUsize,
    /// Passes over each rollout.
    #[arg(long, default_value_t = NonZeroUsize::new(8).expect("8 > 0"))]
    epochs: NonZeroUsize,
    /// Initial learning rate (decays linearly to 0 over --schedule env steps).
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Env steps of the linear learning-rate and clip-range decay.
    #[arg(long, default_value_t = 300_000)]
    schedule: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let chunk_len = args.chunk_len.get();
    let ppo = PpoConfig {
        n_steps: args.n_steps.get(),
        batch_size: args.chunks.get() * chunk_len,
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
        ..PpoConfig::new()
    };
    let hidden = args.lstm_hidden.get();
    let history = args.history.history(hidden, args.k.get());
    let (mean_return, window) = (475.0, 20);
    let goal = Goal::TrainingReturn {
        mean_return,
        window,
    };
    let run = args.run.run_config(args.n_envs.get(), goal, None);
    let (env, heads) = (MaskedCartPole::new(0), args.policy.policy_config());
    let policy = RecurrentCategoricalPolicy::for_env(&env, history, heads, args.run.seed)?;
    let config = RecurrentPpoConfig::new(ppo, chunk_len);
    let (name, resume) = ("ppo_masked_cartpole", args.run.resume.as_ref());
    let learner = RecurrentPpo::new(policy, config, run.n_envs, run.seed)?;
    common::on_policy(name, resume, MaskedCartPole::new, learner, run)
}
