//! The SAC training loop shared by the `sac_*` examples: replay buffer planned against a
//! memory budget, one environment stepped by a collector (random actions for the warm-up
//! steps), gradient steps on sampled batches, progress lines, and the final JSON line.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use rl::algos::{Checkpoint, SacTrainer};
use rl::collect::{CollectorConfig, RandomAction, SyncCollector};
use rl::core::{Env, Location, MemoryBudget, MemoryPlan, ProcessMemory};
use rl::storage::{Batch, RamStorage, ReplayBuffer, Uniform};

/// What a run aims for and may spend.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    /// Mean return over the last `window` episodes that counts as solved.
    pub(crate) goal: f32,
    /// Episodes averaged.
    pub(crate) window: usize,
    /// Environment steps at most.
    pub(crate) max_steps: u64,
    /// Stop at the goal (true) or spend the whole budget (false).
    pub(crate) stop_at_goal: bool,
    /// Resident memory the replay buffer and trainer must fit in, checked before anything
    /// is allocated.
    pub(crate) budget_bytes: u64,
    pub(crate) seed: u64,
    pub(crate) paths: CheckpointPaths,
}

/// Where a run saves its trainer and replay buffer, and where it resumes from.
#[derive(Clone, Debug, Default, clap::Args)]
pub(crate) struct CheckpointPaths {
    /// Save the trainer and the replay buffer into this folder at the end.
    #[arg(long)]
    pub(crate) checkpoint: Option<PathBuf>,
    /// Start from a folder saved by --checkpoint (trainer and replay; the warm-up is not
    /// repeated).
    #[arg(long)]
    pub(crate) resume: Option<PathBuf>,
}

/// Trains `trainer` on `env`; prints the plan, progress every 0.1 s on stderr and one
/// JSON line on stdout.
pub(crate) fn train<E, T>(name: &str, env: E, mut trainer: T, run: Run) -> anyhow::Result<()>
where
    E: Env<Obs = f32>,
    E::Act: RandomAction,
    T: SacTrainer<Act = E::Act>,
{
    let start = Instant::now();
    let config = trainer.config().clone();
    let schema = trainer.replay_schema()?;
    let budget = MemoryBudget::ram(run.budget_bytes);
    let mut plan = MemoryPlan::new();
    plan.nest("replay", &RamStorage::plan(&schema, config.buffer_size)?);
    plan.nest("batch", &Batch::plan(&schema, config.batch_size)?);
    plan.nest("trainer", &trainer.memory_plan());
    eprintln!("{name}: seed {}, one thread", run.seed);
    eprintln!("memory plan\n{plan}");
    plan.check(&budget)?;

    let (mut replay, warm_up) = match &run.paths.resume {
        Some(dir) => {
            let saved =
                Checkpoint::load(dir.join("trainer.safetensors"), trainer.checkpoint_kind())
                    .with_context(|| {
                        format!("reading the trainer checkpoint in {}", dir.display())
                    })?;
            trainer.restore(&saved)?;
            let replay = ReplayBuffer::load(&dir.join("replay"), Uniform::new(run.seed))
                .with_context(|| format!("reading the replay checkpoint in {}", dir.display()))?;
            anyhow::ensure!(
                replay.capacity() == config.buffer_size && replay.schema() == &schema,
                "the replay checkpoint in {} holds another buffer ({} rows)",
                dir.display(),
                replay.capacity()
            );
            eprintln!(
                "resumed from {}: {} updates, {} stored transitions",
                dir.display(),
                trainer.updates(),
                replay.len()
            );
            (replay, 0)
        }
        None => {
            let storage = RamStorage::with_budget(schema.clone(), config.buffer_size, &budget)?;
            (
                ReplayBuffer::new(storage, Uniform::new(run.seed)),
                config.learning_starts,
            )
        }
    };
    let mut batch = Batch::new(&schema, config.batch_size)?;
    let mut collector = SyncCollector::new(
        vec![env],
        trainer,
        CollectorConfig {
            seed: run.seed,
            random_frames: warm_up,
            stats_window: run.window,
            ..CollectorConfig::new(config.train_freq as usize)
        },
    )?;

    let mut solved_at: Option<(u64, f64)> = None;
    let mut last_print = Instant::now();
    let mut last = None;
    while collector.frames() < run.max_steps {
        let report = collector.collect(&mut replay)?;
        let (window, mean_return, episodes) = {
            let stats = collector.stats();
            (stats.window_len(), stats.mean_return(), stats.episodes())
        };
        if solved_at.is_none() && window >= run.window && mean_return.is_some_and(|m| m >= run.goal)
        {
            solved_at = Some((collector.frames(), start.elapsed().as_secs_f64()));
            if run.stop_at_goal {
                break;
            }
        }
        if collector.frames() > warm_up {
            for _ in 0..config.gradient_steps {
                replay.sample(&mut batch)?;
                last = Some(collector.policy_mut().update(&batch)?);
            }
        }
        if last_print.elapsed().as_secs_f64() >= 0.1 {
            last_print = Instant::now();
            let elapsed = start.elapsed().as_secs_f64();
            let update = last.unwrap_or_default();
            eprintln!(
                "steps {:>7}  {:>6.0} steps/s  mean return {:>8.2} ({} episodes)  critic {:.3}  alpha {:.4}  entropy {:.2}  rss {:.1} MiB",
                report.total_frames,
                report.total_frames as f64 / elapsed,
                mean_return.unwrap_or(f32::NAN),
                episodes,
                update.critic_loss,
                update.alpha,
                update.entropy,
                report
                    .memory
                    .map_or(0.0, |m| m.rss_bytes as f64 / 1048576.0),
            );
        }
    }

    if let Some(dir) = &run.paths.checkpoint {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        collector
            .policy()
            .checkpoint()
            .save(dir.join("trainer.safetensors"))?;
        replay.save(&dir.join("replay"))?;
        eprintln!("checkpoint (trainer and replay) saved to {}", dir.display());
    }
    let wall_s = start.elapsed().as_secs_f64();
    let frames = collector.frames();
    let stats = collector.stats();
    // Off Linux there is no RSS reading: the key is null and the run still reports.
    let peak_rss_bytes = ProcessMemory::read().ok().map(|m| m.peak_rss_bytes);
    let (env_steps, at_s) = solved_at.unwrap_or((frames, wall_s));
    eprintln!(
        "{} after {env_steps} env steps, {at_s:.2} s; {frames} env steps in {wall_s:.2} s; planned {:.1} MiB, peak RSS {:.1} MiB",
        if solved_at.is_some() {
            "solved"
        } else {
            "not solved"
        },
        plan.total(Location::Ram) as f64 / 1048576.0,
        peak_rss_bytes.map_or(f64::NAN, |b| b as f64 / 1048576.0),
    );
    println!(
        "{}",
        serde_json::json!({
            "solved": solved_at.is_some(),
            "env_steps": env_steps,
            "wall_s": at_s,
            "mean_return": stats.mean_return(),
            "window": stats.window_len(),
            "peak_rss_bytes": peak_rss_bytes,
            "planned_bytes": plan.total(Location::Ram),
            "env_steps_per_s": frames as f64 / wall_s,
            "total_env_steps": frames,
            "total_wall_s": wall_s,
            "seed": run.seed,
        })
    );
    Ok(())
}
