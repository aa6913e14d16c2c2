//! The PPO training loop shared by the `ppo_*` examples: flags shared by both, memory
//! plan, collect-update loop with progress lines, and the final JSON line.

use std::time::Instant;

use std::num::NonZeroUsize;
use std::path::PathBuf;

use anyhow::Context;
use rl::algos::{Activation, ActorCritic, PolicyConfig, Ppo};
use rl::collect::{RandomAction, SyncCollector};
use rl::core::{Env, Location, MemoryPlan, ProcessMemory};
use rl::storage::RolloutBuffer;

/// Episodes averaged for the solve criterion.
pub(crate) const WINDOW: usize = 20;

/// The flags both PPO examples share (clap parses them; `--help` lists them with their
/// defaults).
#[derive(Debug, clap::Args)]
pub(crate) struct SharedFlags {
    /// Seed of the environments, the weights and the sampling.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Threads (kept for compatibility: the networks run on one thread).
    #[arg(long, default_value_t = NonZeroUsize::MIN)]
    pub(crate) threads: NonZeroUsize,
    /// Hidden layer widths of the actor and of the critic.
    #[arg(long, value_delimiter = ',', default_value = "64,64")]
    pub(crate) hidden: Vec<NonZeroUsize>,
    /// The nonlinearity between layers.
    #[arg(long, value_parser = ["relu", "tanh"], default_value = "relu")]
    pub(crate) activation: String,
    /// Save the trainer to this file at the end.
    #[arg(long)]
    pub(crate) checkpoint: Option<PathBuf>,
    /// Restore the trainer from this file before training.
    #[arg(long)]
    pub(crate) resume: Option<PathBuf>,
}

impl SharedFlags {
    /// The policy settings these flags give; notes on stderr that the networks run on one
    /// thread when `--threads` asks for more.
    pub(crate) fn policy_config(&self) -> PolicyConfig {
        if self.threads.get() > 1 {
            eprintln!(
                "note: --threads {}: PPO's networks run on one thread; the run uses one",
                self.threads
            );
        }
        PolicyConfig {
            hidden: self.hidden.iter().map(|w| w.get()).collect(),
            activation: if self.activation == "tanh" {
                Activation::Tanh
            } else {
                Activation::Relu
            },
            ..PolicyConfig::new()
        }
    }
}

/// With `--resume`, restores the trainer and gives the collector its weights and
/// sampling generator.
pub(crate) fn resume<E, P>(
    flags: &SharedFlags,
    ppo: &mut Ppo<P>,
    collector: &mut SyncCollector<E, P>,
) -> anyhow::Result<()>
where
    E: Env<Obs = f32>,
    E::Act: RandomAction,
    P: ActorCritic<Act = E::Act>,
{
    let Some(path) = &flags.resume else {
        return Ok(());
    };
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
    Ok(())
}

/// With `--checkpoint`, saves the trainer, carrying the collector's sampling generator.
pub(crate) fn save<E, P>(
    flags: &SharedFlags,
    ppo: &mut Ppo<P>,
    collector: &SyncCollector<E, P>,
) -> anyhow::Result<()>
where
    E: Env<Obs = f32>,
    E::Act: RandomAction,
    P: ActorCritic<Act = E::Act>,
{
    let Some(path) = &flags.checkpoint else {
        return Ok(());
    };
    let sampling = collector.policy().sampling_state();
    ppo.policy_mut().set_sampling_state(sampling);
    ppo.save(path)
        .with_context(|| format!("saving the checkpoint to {}", path.display()))?;
    eprintln!("checkpoint saved to {}", path.display());
    Ok(())
}

/// When a run counts as solved: the mean return over [`WINDOW`] episodes passes a bar.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Goal {
    /// The mean return to reach.
    pub(crate) mean_return: f32,
    /// Whether reaching the bar exactly counts (`>=`) or it must be passed (`>`).
    pub(crate) inclusive: bool,
}

impl Goal {
    fn reached(self, mean_return: f32) -> bool {
        if self.inclusive {
            mean_return >= self.mean_return
        } else {
            mean_return > self.mean_return
        }
    }
}

/// How a run ended.
pub(crate) struct Outcome {
    pub(crate) solved: bool,
    pub(crate) wall_s: f64,
}

/// Prints the memory plan of the run to stderr.
pub(crate) fn print_plan<E, P>(
    name: &str,
    seed: u64,
    threads: usize,
    rollout: &RolloutBuffer,
    collector: &SyncCollector<E, P>,
    ppo: &Ppo<P>,
) where
    E: Env<Obs = f32>,
    E::Act: RandomAction,
    P: ActorCritic<Act = E::Act>,
{
    let mut plan = MemoryPlan::new();
    plan.nest("rollout", &rollout.memory_plan());
    plan.nest("collector", &collector.memory_plan());
    plan.nest("optimiser", &ppo.memory_plan());
    let params: usize = ppo.adams().iter().map(|a| a.num_params()).sum();
    plan.add(
        "policy/weights (collector copy)",
        Location::Ram,
        (params * size_of::<f32>()) as u64,
    );
    eprintln!("{name}: seed {seed}, {threads} thread(s)");
    eprintln!("memory plan\n{plan}");
}

/// Collects rollouts and updates until `goal` is reached or `max_steps` env steps are
/// spent, printing a progress line every 0.1 s on stderr.
pub(crate) fn train<E, P>(
    start: Instant,
    collector: &mut SyncCollector<E, P>,
    ppo: &mut Ppo<P>,
    rollout: &mut RolloutBuffer,
    goal: Goal,
    max_steps: u64,
) -> anyhow::Result<Outcome>
where
    E: Env<Obs = f32>,
    E::Act: RandomAction,
    P: ActorCritic<Act = E::Act>,
{
    let mut solved = false;
    let mut last_print = Instant::now();
    loop {
        rollout.clear();
        let report = collector.collect_rollout(rollout)?;
        let (window, episodes) = (collector.stats().window_len(), collector.stats().episodes());
        let mean_return = collector.stats().mean_return();
        if window >= WINDOW && mean_return.is_some_and(|m| goal.reached(m)) {
            solved = true;
            break;
        }
        if collector.frames() >= max_steps {
            break;
        }
        // Scales the rewards (with --normalize-reward; otherwise nothing). The episode
        // statistics above were taken from the raw rewards.
        ppo.normalize_rewards(rollout)?;
        let update = ppo.update(rollout)?;
        ppo.copy_policy_into(collector.policy_mut())?;
        if last_print.elapsed().as_secs_f64() >= 0.1 {
            last_print = Instant::now();
            let elapsed = start.elapsed().as_secs_f64();
            eprintln!(
                "steps {:>7}  {:>8.0} steps/s  mean return {:>6.1} ({} episodes)  kl {:.4}  clip {:.3}  ev {:.2}  rss {:.1} MiB",
                report.total_frames,
                report.total_frames as f64 / elapsed,
                mean_return.unwrap_or(f32::NAN),
                episodes,
                update.approx_kl,
                update.clip_fraction,
                update.explained_variance,
                report
                    .memory
                    .map_or(0.0, |m| m.rss_bytes as f64 / 1048576.0),
            );
        }
    }
    Ok(Outcome {
        solved,
        wall_s: start.elapsed().as_secs_f64(),
    })
}

/// Prints the outcome to stderr and the one JSON line on stdout.
pub(crate) fn print_result<E, P>(
    collector: &SyncCollector<E, P>,
    outcome: &Outcome,
    seed: u64,
) -> anyhow::Result<()>
where
    E: Env<Obs = f32>,
    E::Act: RandomAction,
    P: ActorCritic<Act = E::Act>,
{
    let stats = collector.stats();
    // Off Linux there is no RSS reading: the key is null and the run still reports.
    let peak_rss_bytes = ProcessMemory::read().ok().map(|m| m.peak_rss_bytes);
    eprintln!(
        "{} after {} env steps, {:.2} s",
        if outcome.solved {
            "solved"
        } else {
            "not solved"
        },
        collector.frames(),
        outcome.wall_s
    );
    println!(
        "{}",
        serde_json::json!({
            "solved": outcome.solved,
            "env_steps": collector.frames(),
            "wall_s": outcome.wall_s,
            "mean_return": stats.mean_return(),
            "window": stats.window_len(),
            "peak_rss_bytes": peak_rss_bytes,
            "seed": seed,
        })
    );
    Ok(())
}
