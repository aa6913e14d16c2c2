//! The PPO training loop shared by the `ppo_*` examples: flags shared by both, memory
//! plan, collect-update loop with progress lines, and the final JSON line.

use std::time::Instant;

use rl::algos::{ActorCritic, PolicyConfig, Ppo};
use rl::collect::{RandomAction, SyncCollector};
use rl::core::{Env, Location, MemoryPlan, ProcessMemory};
use rl::storage::RolloutBuffer;

/// Episodes averaged for the solve criterion.
pub(crate) const WINDOW: usize = 20;

/// Checks `--threads`: the networks (rl-nn) run on the calling thread, so the run uses
/// one thread whatever the flag says; above 1 it is accepted with a note.
pub(crate) fn check_threads(threads: usize) -> anyhow::Result<()> {
    anyhow::ensure!(threads > 0, "--threads 0: use at least one thread");
    if threads > 1 {
        eprintln!("note: --threads {threads}: PPO's networks run on one thread; the run uses one");
    }
    Ok(())
}

/// The policy settings from `--hidden W,W,...` and `--activation relu|tanh`.
pub(crate) fn policy_config(hidden: &str, activation: &str) -> anyhow::Result<PolicyConfig> {
    let hidden = hidden
        .split(',')
        .map(|w| w.trim().parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("--hidden {hidden:?}: give widths like 64,64 ({e})"))?;
    let activation = activation
        .parse()
        .map_err(|e| anyhow::anyhow!("--activation {activation:?}: {e}"))?;
    anyhow::ensure!(
        !hidden.contains(&0),
        "--hidden {hidden:?}: every width must be at least 1 (64,64 is the default)"
    );
    Ok(PolicyConfig {
        hidden,
        activation,
        ..PolicyConfig::new()
    })
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
