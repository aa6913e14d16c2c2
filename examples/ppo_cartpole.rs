//! PPO solves CartPole-v1: a mean return of at least 475 over the last 20 episodes.
//!
//! ```text
//! cargo run --release --example ppo_cartpole -- --seed 0 --threads 1
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
//! 100_000), `--help`, and for tuning `--n-steps`, `--n-envs`, `--batch`, `--epochs`, `--lr`,
//! `--schedule` (env steps of the linear decay), `--normalize-obs true` (running
//! observation normalisation, off by default; see `PpoConfig::normalize_obs`),
//! `--normalize-reward true` (running reward scaling, off by default; see
//! `PpoConfig::normalize_reward`).
//!
//! Checkpoints: `--checkpoint PATH` saves the trainer at the end (weights, Adam's moments
//! and step counter, env-step and update counters that drive the schedules, the
//! shuffling generator and the collector policy's sampling generator; see
//! `rl_algos::PpoState`). `--resume PATH` restores such a checkpoint before training
//! (refused, with a typed error, if it was saved with other hyperparameters) and gives
//! the collector the restored weights and sampling generator. The environments start
//! new episodes and the collector's counters and episode statistics start from zero:
//! `env_steps`, the budget and the solve window count this run only.
//!
//! Architecture and hyperparameters (from rl-zoo's tuned CartPole-v1 PPO, with ReLU,
//! smaller minibatches, fewer epochs and a higher learning rate: the same number of
//! gradient steps per environment step at a quarter of the arithmetic): separate actor
//! and critic MLPs 4-64-64 with ReLU (actor head scaled by 0.01, PyTorch's uniform initialisation
//! otherwise), 8 environments x 32 steps per rollout (256 rows), minibatch 64, 5 epochs
//! (20 gradient steps per rollout), gamma 0.98, GAE lambda 0.8, learning rate 2e-3 and
//! clip range 0.2 both decaying linearly to 0 over 100_000 env steps (`--schedule`), no
//! entropy bonus, value coefficient 0.5, grad-norm 0.5, Adam eps 1e-5, per-minibatch
//! advantage normalisation, old log-probs recorded during collection. On rl-nn: solved
//! within 17k to 45k env steps on 16 seeds tried (0 to 15), 0.1 to 0.4 s on one thread,
//! peak RSS about 4.2 MB.

use std::num::NonZeroUsize;
use std::time::Instant;

mod common;

use clap::{ArgAction, Parser};
use rl::algos::{CategoricalPolicy, Ppo, PpoConfig};
use rl::collect::{CollectorConfig, SyncCollector};
use rl::envs::CartPole;
use rl::storage::RolloutBuffer;

/// Mean return over the window that counts as solved.
const SOLVED_AT: f32 = 475.0;

/// PPO on CartPole-v1: progress on stderr, one JSON line on stdout.
#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    shared: common::SharedFlags,
    /// Environment-step budget.
    #[arg(long, default_value_t = 100_000)]
    max_steps: u64,
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

type Policy = CategoricalPolicy;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let start = Instant::now();

    let config = PpoConfig {
        n_steps: args.n_steps.get(),
        n_envs: args.n_envs.get(),
        minibatch_size: args.batch.get(),
        epochs: args.epochs.get(),
        gamma: 0.98,
        gae_lambda: 0.8,
        clip_range: 0.2,
        clip_range_end: Some(0.0),
        ent_coef: 0.0,
        vf_coef: 0.5,
        max_grad_norm: 0.5,
        learning_rate: args.lr,
        learning_rate_end: Some(0.0),
        schedule_steps: Some(args.schedule),
        seed: args.shared.seed,
        normalize_obs: args.normalize_obs,
        normalize_reward: args.normalize_reward,
        ..PpoConfig::new()
    };
    let seed = args.shared.seed;
    let envs: Vec<CartPole> = (0..args.n_envs.get() as u64)
        .map(|i| CartPole::new(seed.wrapping_mul(1000).wrapping_add(i)))
        .collect();
    let policy = Policy::for_env(&envs[0], args.shared.policy_config(), seed)?;
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
    // With --normalize-obs, Ppo::new gave the learner's policy a normaliser: the
    // collector's copy needs it too.
    ppo.copy_policy_into(collector.policy_mut())?;
    common::resume(&args.shared, &mut ppo, &mut collector)?;
    let mut rollout = RolloutBuffer::new(ppo.rollout_config())?;

    common::print_plan(
        "ppo_cartpole",
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
            inclusive: true,
        },
        args.max_steps,
    )?;
    common::save(&args.shared, &mut ppo, &collector)?;
    common::print_result(&collector, &outcome, seed)
}
