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
//! Flags: `--seed N` (default 0), `--threads N` (default 1; kept for compatibility: the
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

use std::path::PathBuf;
use std::time::Instant;

mod common;

use anyhow::{Context, bail};
use rl::algos::{CategoricalPolicy, PolicyNetworks, Ppo, PpoConfig};
use rl::collect::{CollectorConfig, SyncCollector};
use rl::envs::CartPole;
use rl::storage::RolloutBuffer;

/// Mean return over the window that counts as solved.
const SOLVED_AT: f32 = 475.0;

struct Args {
    seed: u64,
    threads: usize,
    hidden: String,
    activation: String,
    max_steps: u64,
    n_steps: usize,
    n_envs: usize,
    batch: usize,
    epochs: usize,
    lr: f64,
    schedule: u64,
    checkpoint: Option<PathBuf>,
    resume: Option<PathBuf>,
    normalize_obs: bool,
    normalize_reward: bool,
}

/// What `--help` prints.
const USAGE: &str = "ppo_cartpole: PPO on CartPole-v1, one JSON line on stdout
flags: --seed N (0)  --threads N (1, accepted for compatibility; networks run on one thread)
       --hidden W,W,... (64,64)  --activation relu|tanh (relu)  --max-steps N (100000)
       --n-steps N  --n-envs N  --batch N  --epochs N  --lr X  --schedule STEPS
       --normalize-obs true|false  --normalize-reward true|false
       --checkpoint PATH (save at the end)  --resume PATH (restore before training)";

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        seed: 0,
        threads: 1,
        hidden: "64,64".to_owned(),
        activation: "relu".to_owned(),
        max_steps: 100_000,
        n_steps: 32,
        n_envs: 8,
        batch: 64,
        epochs: 5,
        lr: 2e-3,
        schedule: 100_000,
        checkpoint: None,
        resume: None,
        normalize_obs: false,
        normalize_reward: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let bad = || format!("{flag} {value}: not a valid number");
        match flag.as_str() {
            "--seed" => args.seed = value.parse().with_context(bad)?,
            "--hidden" => args.hidden = value,
            "--activation" => args.activation = value,
            "--threads" => args.threads = value.parse().with_context(bad)?,
            "--max-steps" => args.max_steps = value.parse().with_context(bad)?,
            "--n-steps" => args.n_steps = value.parse().with_context(bad)?,
            "--n-envs" => args.n_envs = value.parse().with_context(bad)?,
            "--batch" => args.batch = value.parse().with_context(bad)?,
            "--epochs" => args.epochs = value.parse().with_context(bad)?,
            "--lr" => args.lr = value.parse().with_context(bad)?,
            "--schedule" => args.schedule = value.parse().with_context(bad)?,
            "--checkpoint" => args.checkpoint = Some(PathBuf::from(value)),
            "--resume" => args.resume = Some(PathBuf::from(value)),
            "--normalize-obs" => args.normalize_obs = value.parse().with_context(bad)?,
            "--normalize-reward" => args.normalize_reward = value.parse().with_context(bad)?,
            _ => bail!(
                "unknown flag {flag}: use --help, --seed, --threads, --hidden, --activation, --max-steps, --n-steps, --n-envs, --batch, --epochs, --lr, --schedule, --normalize-obs, --normalize-reward, --checkpoint or --resume"
            ),
        }
    }
    Ok(args)
}

type Policy = CategoricalPolicy;

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    common::check_threads(args.threads)?;
    let start = Instant::now();

    let config = PpoConfig {
        n_steps: args.n_steps,
        n_envs: args.n_envs,
        minibatch_size: args.batch,
        epochs: args.epochs,
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
        seed: args.seed,
        normalize_obs: args.normalize_obs,
        normalize_reward: args.normalize_reward,
        ..PpoConfig::new()
    };
    let envs: Vec<CartPole> = (0..args.n_envs as u64)
        .map(|i| CartPole::new(args.seed.wrapping_mul(1000).wrapping_add(i)))
        .collect();
    let policy = Policy::for_env(
        &envs[0],
        common::policy_config(&args.hidden, &args.activation)?,
        args.seed,
    )?;
    let mut collector = SyncCollector::new(
        envs,
        policy.clone(),
        CollectorConfig {
            seed: args.seed,
            stats_window: common::WINDOW,
            ..CollectorConfig::new(args.n_envs)
        },
    )?;
    let mut ppo = Ppo::new(policy, config)?;
    // With --normalize-obs, Ppo::new gave the learner's policy a normaliser: the
    // collector's copy needs it too.
    ppo.copy_policy_into(collector.policy_mut())?;
    if let Some(path) = &args.resume {
        ppo.load(path)
            .with_context(|| format!("resuming from {}", path.display()))?;
        ppo.copy_policy_into(collector.policy_mut())?;
        let sampling = ppo.policy().sampling_state();
        collector.policy_mut().set_sampling_state(sampling);
        eprintln!(
            "resumed from {}: {} env steps, {} updates",
            path.display(),
            ppo.env_steps(),
            ppo.updates()
        );
    }
    let mut rollout = RolloutBuffer::new(ppo.rollout_config())?;

    common::print_plan(
        "ppo_cartpole",
        args.seed,
        args.threads,
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
    if let Some(path) = &args.checkpoint {
        // The collector's policy samples the actions: carry its generator.
        let sampling = collector.policy().sampling_state();
        ppo.policy_mut().set_sampling_state(sampling);
        ppo.save(path)
            .with_context(|| format!("saving the checkpoint to {}", path.display()))?;
        eprintln!("checkpoint saved to {}", path.display());
    }
    common::print_result(&collector, &outcome, args.seed)
}
