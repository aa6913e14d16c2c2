//! PPO solves Pendulum-v1: a mean return above -500 over the last 20 episodes.
//!
//! ```text
//! cargo run --release --example ppo_pendulum -- --seed 0 --threads 1
//! ```
//!
//! Prints the memory plan at start and a progress line every 0.1 s on stderr (env
//! steps, steps/s, mean return, resident memory), then one JSON line on stdout:
//! `{"solved", "env_steps", "wall_s", "mean_return", "window", "peak_rss_bytes", "seed"}`
//! (`env_steps` and `wall_s` at the solve point, or at the end of the budget).
//!
//! Flags (`--help` lists them with their defaults): `--seed N` (default 0), `--threads N` (default 1; kept for compatibility: the
//! networks (rl-nn) run on the calling thread, so more is accepted and noted),
//! `--hidden W,W,...` (hidden layer widths of the actor and of the critic, default
//! `64,64`), `--activation relu|tanh` (default relu), `--max-steps N` (budget, default
//! 300_000), `--help`, and for tuning `--n-steps`, `--n-envs`, `--batch`, `--epochs`, `--lr`,
//! `--schedule` (env steps of a linear decay of learning rate and clip range to 0; 0, the
//! default, keeps both constant), `--log-std` (initial log standard deviation),
//! `--normalize-reward true` (running reward scaling, off by default; see
//! `PpoConfig::normalize_reward`).
//!
//! Architecture and hyperparameters (rl-zoo's tuned Pendulum-v1 PPO without gSDE, with
//! ReLU): a diagonal Gaussian policy with state-independent log-std (initially 0) and a
//! mean MLP 3-64-64-1, a separate critic MLP 3-64-64-1, both ReLU (actor head scaled by
//! 0.01); actions sampled unbounded and clipped to [-2, 2] by the environment; 4
//! environments x 1024 steps per rollout, minibatch 64, 10 epochs, gamma 0.9, GAE lambda
//! 0.95, learning rate 1e-3 and clip range 0.2 (constant), no entropy bonus, value
//! coefficient 0.5, grad-norm 0.5, per-minibatch advantage normalisation, old log-probs
//! recorded during collection. On rl-nn, seeds 0 to 7 pass -500 after 32k to 41k env
//! steps, 0.3 to 0.5 s each on one thread, peak RSS about 4 MB.

use std::num::NonZeroUsize;
use std::time::Instant;

mod common;

use clap::{ArgAction, Parser};
use rl::algos::{GaussianPolicy, PolicyConfig, Ppo, PpoConfig};
use rl::collect::{CollectorConfig, SyncCollector};
use rl::envs::Pendulum;
use rl::storage::RolloutBuffer;

/// Mean return over the window that counts as solved.
const SOLVED_AT: f32 = -500.0;

/// PPO on Pendulum-v1: progress on stderr, one JSON line on stdout.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    shared: common::SharedFlags,
    /// Environment-step budget.
    #[arg(long, default_value_t = 300_000)]
    max_steps: u64,
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

type Policy = GaussianPolicy;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let seed = args.shared.seed;
    let start = Instant::now();

    let scheduled = args.schedule > 0;
    let config = PpoConfig {
        n_steps: args.n_steps.get(),
        n_envs: args.n_envs.get(),
        minibatch_size: args.batch.get(),
        epochs: args.epochs.get(),
        gamma: 0.9,
        gae_lambda: 0.95,
        clip_range: 0.2,
        clip_range_end: scheduled.then_some(0.0),
        ent_coef: 0.0,
        vf_coef: 0.5,
        max_grad_norm: 0.5,
        learning_rate: args.lr,
        learning_rate_end: scheduled.then_some(0.0),
        schedule_steps: scheduled.then_some(args.schedule),
        seed,
        normalize_reward: args.normalize_reward,
        ..PpoConfig::new()
    };
    let envs: Vec<Pendulum> = (0..args.n_envs.get() as u64)
        .map(|i| Pendulum::new(seed.wrapping_mul(1000).wrapping_add(i)))
        .collect();
    let policy = Policy::for_env(
        &envs[0],
        PolicyConfig {
            log_std_init: args.log_std,
            ..args.shared.policy_config()
        },
        seed,
    )?;
    let mut collector = SyncCollector::new(
        envs,
        policy.clone(),
        CollectorConfig {
            seed,
            stats_window: common::WINDOW,
            ..CollectorConfig::new(args.n_envs.get())
        },
    )?;
    let mut ppo = Ppo::new(policy, config)?;
    common::resume(&args.shared, &mut ppo, &mut collector)?;
    let mut rollout = RolloutBuffer::new(ppo.rollout_config())?;

    common::print_plan(
        "ppo_pendulum",
        seed,
        args.shared.threads.get(),
        &rollout,
        &collector,
        &ppo,
    );

    let outcome = common::train(
        start,
        &mut collector,
        &mut ppo,
        &mut rollout,
        common::Goal {
            mean_return: SOLVED_AT,
            inclusive: false,
        },
        args.max_steps,
    )?;
    common::save(&args.shared, &mut ppo, &collector)?;
    common::print_result(&collector, &outcome, seed)
}
