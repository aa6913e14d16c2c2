//! The callback of a CLI run: `metrics.jsonl` (and the same lines as TensorBoard
//! events in `tb/`), `episodes.csv`, progress on stderr (a bar on a terminal, plain lines otherwise,
//! nothing with `--quiet`) and the stop request.

use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::eval::EvalReport;
use crate::trainer::{Callback, Control, EpisodeEnd, Progress, TrainSummary};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use rl_core::{Bytes, Location, MemoryPlan, ProcessMemory};
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::episodes::EpisodeLog;
use super::rundir::METRICS_FILE;
use super::tensorboard::{EventWriter, TENSORBOARD_DIR};
use super::{Error, Result, TrainOptions};
use crate::config::Config;

/// The keys every line of `metrics.jsonl` holds, whatever the algorithm (`null` where
/// there is no value yet): env steps over the run's life, updates (gradient steps or
/// PPO updates), training episodes ended and seconds of training over the run's life
/// (across resumes), env steps per second of this process, the mean return and length
/// of the last training episodes and how many they are, resident memory, the planned
/// RAM bytes, and the scheduled evaluation finished at this line. The learner's
/// statistics of its last update follow under their own names (PPO: `policy_loss`,
/// `value_loss`, `entropy`, `approx_kl`, `clip_fraction`, `explained_variance`,
/// `grad_norm`, `learning_rate`, `clip_range` ...; SAC: `critic_loss`, `actor_loss`,
/// `alpha`, `entropy`; DQN: `loss`, `mean_q`, `mean_target`, `grad_norm`, `epsilon`).
pub const METRICS_KEYS: [&str; 13] = [
    "env_steps",
    "updates",
    "episodes",
    "wall_s",
    "env_steps_per_s",
    "return_mean",
    "length_mean",
    "return_window",
    "rss_bytes",
    "planned_bytes",
    "eval_return_mean",
    "eval_return_std",
    "eval_episodes",
];

enum Display {
    Quiet,
    Bar(ProgressBar),
    Lines { every_s: f64, last: Instant },
}

/// Writes metrics, shows progress, and stops the run when asked.
pub(crate) struct Monitor {
    /// Unbuffered: each line goes to the file whole, in one write, as it is made, so
    /// a killed run loses at most the line being written (cut off on resume).
    metrics: File,
    path: PathBuf,
    /// The same lines as TensorBoard events (`log.tensorboard`).
    events: Option<EventWriter>,
    /// `episodes.csv`.
    episodes: EpisodeLog,
    every: u64,
    next_line_at: u64,
    planned_bytes: u64,
    total_steps: u64,
    pending_eval: Option<EvalReport>,
    /// The newest line, and whether it is in the file.
    last: Option<(Map<String, Value>, bool)>,
    display: Display,
    stop: Option<Arc<AtomicBool>>,
    interrupted: bool,
    error: Option<Error>,
}

impl Monitor {
    /// Opens `dir/metrics.jsonl` for appending and prints the plan unless quiet.
    pub(crate) fn start(
        dir: &Path,
        config: &Config,
        options: &TrainOptions,
        plan: &MemoryPlan,
        env_steps: u64,
    ) -> Result<Self> {
        let path = dir.join(METRICS_FILE);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| Error::io("opening", &path, e))?;
        let events = if config.log.tensorboard {
            Some(EventWriter::create(&dir.join(TENSORBOARD_DIR))?)
        } else {
            None
        };
        let total_steps = config.run.total_steps;
        let display = if options.quiet {
            Display::Quiet
        } else {
            eprintln!(
                "{} on {}: seed {}, {} env steps into {}\nmemory plan\n{plan}",
                config.algo,
                config.env,
                config.run.seed,
                total_steps,
                dir.display()
            );
            if std::io::stderr().is_terminal() {
                let bar = ProgressBar::with_draw_target(Some(total_steps), ProgressDrawTarget::stderr())
                    .with_style(
                        ProgressStyle::with_template(
                            "{elapsed_precise} [{bar:30}] {human_pos}/{human_len} env steps {rate} ETA {eta} {msg}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .with_key("rate", |state: &ProgressState, w: &mut dyn std::fmt::Write| {
                            let _ = write!(w, "{:.0}/s", state.per_sec());
                        })
                        .progress_chars("=> "),
                    )
                    .with_position(env_steps);
                bar.reset_eta();
                Display::Bar(bar)
            } else {
                Display::Lines {
                    every_s: config.log.progress_every_s,
                    last: Instant::now(),
                }
            }
        };
        Ok(Self {
            metrics: file,
            path,
            events,
            episodes: EpisodeLog::open(dir)?,
            every: config.log.metrics_every_steps,
            next_line_at: env_steps,
            planned_bytes: plan.total(Location::Ram),
            total_steps,
            pending_eval: None,
            last: None,
            display,
            stop: options.stop.clone(),
            interrupted: false,
            error: None,
        })
    }

    /// Whether a stop request ended the run.
    pub(crate) fn interrupted(&self) -> bool {
        self.interrupted
    }

    /// After `train`: writes the run's last state if it is not in the file yet (the
    /// newest progress, or the summary's figures when the run ended after an iteration
    /// it did not report, as at a goal), flushes, and hands back the summary, or the
    /// first error (the trainer's, else the monitor's).
    pub(crate) fn finish(
        &mut self,
        summary: rl_algos::Result<TrainSummary>,
    ) -> Result<TrainSummary> {
        let last = self.last.take();
        let last_steps = last
            .as_ref()
            .and_then(|(line, _)| line.get("env_steps").and_then(Value::as_u64));
        match (&summary, last) {
            (Ok(s), last) if last_steps.is_none_or(|steps| steps < s.total_env_steps) => {
                let mut line = last.map(|(line, _)| line).unwrap_or_default();
                let eval = self.pending_eval.take();
                let values = [
                    json!(s.total_env_steps),
                    json!(s.updates),
                    json!(s.total_episodes),
                    json!(s.total_wall_s),
                    json!(s.steps_per_s),
                    json!(s.mean_return),
                    Value::Null,
                    json!(s.window),
                    json!(ProcessMemory::read().ok().map(|m| m.rss_bytes)),
                    json!(self.planned_bytes),
                    json!(eval.map(|e| e.mean_return)),
                    json!(eval.map(|e| e.std_return)),
                    json!(eval.map(|e| e.episodes)),
                ];
                for (key, value) in METRICS_KEYS.iter().zip(values) {
                    line.insert((*key).to_owned(), value);
                }
                self.write(&line);
            }
            (_, Some((line, false))) => self.write(&line),
            _ => {}
        }
        if let Err(e) = self.metrics.flush() {
            self.error
                .get_or_insert(Error::io("writing", &self.path, e));
        }
        match &self.display {
            Display::Bar(bar) => bar.finish_and_clear(),
            Display::Lines { .. } | Display::Quiet => {}
        }
        let summary = summary?;
        match self.error.take() {
            Some(error) => Err(error),
            None => Ok(summary),
        }
    }

    fn write(&mut self, line: &Map<String, Value>) {
        let written = serde_json::to_vec(line)
            .map_err(std::io::Error::from)
            .and_then(|mut bytes| {
                bytes.push(b'\n');
                self.metrics.write_all(&bytes)?;
                self.metrics.flush()
            });
        if let Err(e) = written {
            self.error
                .get_or_insert(Error::io("writing", &self.path, e));
        }
        if let Some(Err(e)) = self.events.as_mut().map(|events| events.write_line(line)) {
            self.error.get_or_insert(e);
        }
    }

    fn say(&self, text: &str) {
        match &self.display {
            Display::Quiet => {}
            Display::Bar(bar) => bar.println(text),
            Display::Lines { .. } => eprintln!("{text}"),
        }
    }

    fn line<S: Serialize>(&mut self, p: &Progress<'_, S>) -> Map<String, Value> {
        let eval = self.pending_eval.take();
        let mut line = Map::new();
        let values = [
            json!(p.env_steps),
            json!(p.updates),
            json!(p.episodes),
            json!(p.wall_s),
            json!(p.steps_per_s),
            json!(p.mean_return),
            json!(p.mean_length),
            json!(p.window),
            json!(p.rss_bytes),
            json!(self.planned_bytes),
            json!(eval.map(|e| e.mean_return)),
            json!(eval.map(|e| e.std_return)),
            json!(eval.map(|e| e.episodes)),
        ];
        for (key, value) in METRICS_KEYS.iter().zip(values) {
            line.insert((*key).to_owned(), value);
        }
        if let Some(Ok(Value::Object(stats))) = p.stats.map(serde_json::to_value) {
            for (key, value) in stats {
                line.entry(key).or_insert(value);
            }
        }
        line
    }
}

impl<S: Serialize> Callback<S> for Monitor {
    fn on_progress(&mut self, p: &Progress<'_, S>) -> Control {
        let due = p.env_steps >= self.next_line_at || self.pending_eval.is_some();
        let line = self.line(p);
        if due {
            self.write(&line);
            self.next_line_at = p.env_steps.saturating_add(self.every);
        }
        self.last = Some((line, due));
        let mean = p
            .mean_return
            .map_or_else(|| "-".to_owned(), |m| format!("{m:.2}"));
        match &mut self.display {
            Display::Quiet => {}
            Display::Bar(bar) => {
                bar.set_position(p.env_steps);
                bar.set_message(format!("return {mean} ({} ep)", p.window));
            }
            Display::Lines { every_s, last } => {
                if last.elapsed().as_secs_f64() >= *every_s {
                    *last = Instant::now();
                    let left = self.total_steps.saturating_sub(p.env_steps) as f64;
                    eprintln!(
                        "{}/{} env steps ({:.0}%), {:.0} steps/s, ETA {:.0} s, mean return {mean} over {} episodes, updates {}, rss {}",
                        p.env_steps,
                        self.total_steps,
                        100.0 * p.env_steps as f64 / self.total_steps.max(1) as f64,
                        p.steps_per_s,
                        left / p.steps_per_s.max(1e-9),
                        p.window,
                        p.updates,
                        p.rss_bytes
                            .map_or_else(|| "n/a".to_owned(), |b| Bytes(b).to_string()),
                    );
                }
            }
        }
        if self.error.is_some() {
            return Control::Stop;
        }
        if self.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
            if !self.interrupted {
                self.say("stop requested: saving the run (Ctrl-C again to quit at once)");
            }
            self.interrupted = true;
            return Control::Stop;
        }
        Control::Continue
    }

    fn on_eval(&mut self, env_steps: u64, r: &EvalReport) -> Control {
        self.pending_eval = Some(*r);
        self.say(&format!(
            "eval at {env_steps} env steps: mean return {:.2} ± {:.2} over {} episodes",
            r.mean_return, r.std_return, r.episodes
        ));
        Control::Continue
    }

    fn on_episode(&mut self, episode: &EpisodeEnd) {
        if let Err(e) = self.episodes.write(episode) {
            self.error.get_or_insert(e);
        }
    }

    fn on_checkpoint(&mut self, env_steps: u64, dir: &Path) {
        self.say(&format!(
            "saved the run at {env_steps} env steps into {}",
            dir.display()
        ));
    }
}
