//! `cargo xtask crash-test --runs N`: SIGKILLs `rl train` and `rl resume` of shipped
//! configs and checks that every run directory still finishes whole.
//!
//! The release `rl` binary (`cargo build --release -p rl --bin rl`) trains the configs of
//! [`SHIPPED`] in turn (PPO, SAC, DQN, recurrent PPO), each kept short and saving often
//! by `--set` overrides, into its own directory `target/crash-test/runs/NNN-CONFIG`. In
//! each directory the harness kills the process at a random [`Moment`] (during start-up,
//! mid-run, or during a checkpoint save), starts it again (`rl resume DIR`, or `rl train`
//! again when the kill came before `config.toml` existed: there was no run yet), kills
//! that one too some of the time, and finally lets the last one finish. Then it checks
//! the directory ([`final_problem`], [`metrics_problem`]).
//!
//! Everything the `rl` processes print goes to `target/crash-test/runs/NNN-CONFIG.log`;
//! a failing directory's message quotes the end of it.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};

use super::{Random, killed_by_signal};
use crate::cmd::{Cmd, Workspace, announce, human};

/// Kills of a CI run: at least 10 by the issue that asked for the test.
pub(crate) const CI_RUNS: u64 = 10;

/// Kills in one run directory at most (1 to this many, drawn per directory) before the
/// last process is left to finish.
const MAX_KILLS_PER_DIR: u64 = 3;
/// How long a process that is not killed may take to finish before it counts as hung.
const FINISH_LIMIT: Duration = Duration::from_secs(300);
/// How long a [`Moment::Save`] kill waits for a save to begin before it kills anyway.
const SAVE_WAIT: Duration = Duration::from_secs(10);
/// How often the harness looks at the child and the checkpoint folder.
const POLL: Duration = Duration::from_millis(1);
/// Bytes of a failing process's log quoted in the failure message.
const LOG_TAIL: usize = 1500;

/// A shipped config and the overrides that make it a run of a few seconds (release
/// build) that saves often.
#[derive(Clone, Copy, Debug)]
struct Shipped {
    /// The file in `configs/`.
    file: &'static str,
    /// `run.total_steps`: a whole number of rollouts (PPO) or training rounds (DQN), so
    /// a run that finishes has taken exactly this many.
    total_steps: u64,
    /// `run.checkpoint.every_steps`.
    every_steps: u64,
    /// More `--set` overrides.
    extra: &'static [&'static str],
}

/// The configs the directories rotate through. Each full run takes about 4 s on one
/// core of a 2020s x86 CPU and saves about 6 to 10 times.
const SHIPPED: [Shipped; 4] = [
    Shipped {
        file: "ppo_cartpole.toml",
        // 640 rollouts of 8 environments x 32 steps (about 45 000 steps/s).
        total_steps: 163_840,
        every_steps: 16_384,
        extra: &[],
    },
    Shipped {
        file: "sac_pendulum.toml",
        // About 800 steps/s once learning starts at 1 000.
        total_steps: 3_000,
        every_steps: 500,
        // A small replay buffer: each save writes it whole.
        extra: &[
            "off_policy.buffer_capacity=10000",
            "log.metrics_every_steps=250",
        ],
    },
    Shipped {
        file: "dqn_cartpole.toml",
        // 24 rounds of train_freq = 256 steps, an evaluation every 1 024.
        total_steps: 6_144,
        every_steps: 1_024,
        extra: &[
            "off_policy.buffer_capacity=10000",
            "log.metrics_every_steps=512",
        ],
    },
    Shipped {
        file: "ppo_masked_cartpole.toml",
        // 64 rollouts of 8 environments x 64 steps (about 8 000 steps/s).
        total_steps: 32_768,
        every_steps: 4_096,
        extra: &["log.metrics_every_steps=2048"],
    },
];

/// What the kills of `rl train` and `rl resume` found. The JSON line prints exactly
/// these keys.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct RunsTally {
    /// SIGKILLs that hit a live `rl train` or `rl resume` (a process that ended on its
    /// own before its kill is not a kill). `N` of `--runs N`, unless every config broke
    /// before any kill (then the test stops early).
    pub(crate) kills: u64,
    /// Kills after which the directory was resumed: every later process in that
    /// directory (`rl resume`, or `rl train` again when the kill came before the run's
    /// `config.toml` existed) either was killed in turn or exited 0, and the last one
    /// exited 0. A directory whose chain ends with a process that exited with an error
    /// (or hung) adds none of its kills.
    pub(crate) resumed: u64,
    /// Directories where a process exited with an error or hung, or whose final state
    /// fails the checks of [`final_problem`], `rl plot DIR` or `rl eval DIR --episodes 1`.
    pub(crate) broken_run_dirs: u64,
    /// Directories whose chain finished and whose `metrics.jsonl` fails
    /// [`metrics_problem`] (`env_steps` going back, or a line that is not JSON).
    pub(crate) metrics_non_monotone: u64,
    /// The most minutes of training any kill lost: from the later of the killed
    /// process's start and the mtime of `DIR/checkpoint/run.json` (its latest save) to
    /// the kill.
    pub(crate) lost_minutes_max: f64,
}

impl RunsTally {
    /// The one line the test ends with.
    pub(crate) fn json(&self) -> String {
        format!(
            "{{\"bench\":\"crash-runs\",\"kills\":{},\"resumed\":{},\"broken_run_dirs\":{},\"metrics_non_monotone\":{},\"lost_minutes_max\":{:.3}}}",
            self.kills,
            self.resumed,
            self.broken_run_dirs,
            self.metrics_non_monotone,
            self.lost_minutes_max
        )
    }

    /// Whether every kill was resumed and every directory is whole.
    pub(crate) fn clean(&self) -> bool {
        self.resumed == self.kills && self.broken_run_dirs == 0 && self.metrics_non_monotone == 0
    }
}

/// When a kill lands, counted from the process's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Moment {
    /// 50 to 500 ms in: while it reads the config, plans, builds or restores.
    Startup { after_ms: u64 },
    /// 0.5 to 3 s in: mostly while it trains.
    Anytime { after_ms: u64 },
    /// Up to 20 ms after a save began (`DIR/checkpoint.partial` appeared).
    Save { after_us: u64 },
}

impl Moment {
    /// One of the three kinds, with its delay, drawn from `random`.
    fn draw(random: &mut Random) -> Self {
        match random.below(3) {
            0 => Moment::Startup {
                after_ms: 50 + random.below(450),
            },
            1 => Moment::Anytime {
                after_ms: 500 + random.below(2_500),
            },
            _ => Moment::Save {
                after_us: random.below(20_000),
            },
        }
    }
}

/// How one `rl` process ended.
#[derive(Debug)]
enum Ended {
    /// Killed by the harness.
    Killed {
        /// Training lost: from the later of the process's start and the latest save.
        lost: Duration,
        /// A save was under way (`checkpoint.partial` or `checkpoint.old` existed).
        in_save: bool,
    },
    /// Exited on its own.
    Exited(ExitStatus),
    /// Not killed, and still running after [`FINISH_LIMIT`] (then killed).
    Hung,
}

/// What the harness saw in one directory, for the summary on stderr.
#[derive(Debug, Default)]
struct Seen {
    in_save: u64,
    startup: u64,
    retrained: u64,
}

/// The binary and where everything goes.
struct Harness {
    rl: PathBuf,
    configs: PathBuf,
    root: PathBuf,
}

/// Builds the release `rl` binary and kills `kills` processes, directory after
/// directory, rotating through [`SHIPPED`].
pub(crate) fn crash_runs(ws: &Workspace, kills: u64, seed: u64) -> Result<RunsTally> {
    let rl = build_rl(ws)?;
    let root = ws.root.join("target").join("crash-test").join("runs");
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("clearing {}", root.display()))?;
    }
    fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    announce(
        "crash-test",
        &format!(
            "{kills} kills of `rl train`/`rl resume` in {} (seed {seed})",
            root.display()
        ),
    );
    let harness = Harness {
        rl,
        configs: ws.root.join("configs"),
        root,
    };
    let started = Instant::now();
    let mut random = Random(seed);
    let mut tally = RunsTally::default();
    let mut seen = Seen::default();
    let mut dirs = 0u64;
    // Directories in a row that broke before any kill: when every config does, the
    // runs cannot start at all and more directories would only repeat it.
    let mut dead = 0usize;
    while tally.kills < kills {
        let shipped = SHIPPED[(dirs % SHIPPED.len() as u64) as usize];
        let planned = (1 + random.below(MAX_KILLS_PER_DIR)).min(kills - tally.kills);
        let (killed, broken) = (tally.kills, tally.broken_run_dirs);
        harness.one_dir(dirs, shipped, planned, &mut random, &mut tally, &mut seen)?;
        dirs += 1;
        if tally.kills == killed && tally.broken_run_dirs > broken {
            dead += 1;
        } else {
            dead = 0;
        }
        if dead == SHIPPED.len() {
            eprintln!(
                "    crash-test: stopping after {} kills: the last {dead} run directories \
                 broke before any kill",
                tally.kills
            );
            break;
        }
    }
    eprintln!(
        "    crash-test: {} kills in {dirs} run directories ({} in start-up, {} during a \
         save, {} before the run existed), {} resumed, {} broken, {} with bad metrics; {}",
        tally.kills,
        seen.startup,
        seen.in_save,
        seen.retrained,
        tally.resumed,
        tally.broken_run_dirs,
        tally.metrics_non_monotone,
        human(started.elapsed())
    );
    Ok(tally)
}

/// Builds `rl` in release and returns its path.
fn build_rl(ws: &Workspace) -> Result<PathBuf> {
    let cmd = Cmd::cargo([
        "build",
        "--release",
        "-p",
        "rl",
        "--bin",
        "rl",
        "--message-format=json-render-diagnostics",
    ]);
    announce("crash-test", &cmd.display());
    let out = cmd.read_stdout(ws)?;
    out.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["target"]["name"] == "rl")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .context("cargo did not report the `rl` binary it built")
}

impl Harness {
    /// Trains `shipped` into directory number `index`, kills `planned` processes there
    /// (fewer when one finishes first), lets the last finish and checks the result.
    fn one_dir(
        &self,
        index: u64,
        shipped: Shipped,
        planned: u64,
        random: &mut Random,
        tally: &mut RunsTally,
        seen: &mut Seen,
    ) -> Result<()> {
        let stem = shipped.file.trim_end_matches(".toml");
        let name = format!("{index:03}-{stem}");
        let dir = self.root.join(&name);
        let log = self.root.join(format!("{name}.log"));
        let mut killed_here = 0u64;
        let mut ran = 0u64;
        let failure = loop {
            let moment = (killed_here < planned).then(|| Moment::draw(random));
            let args = if dir.join("config.toml").exists() {
                vec![
                    "resume".to_owned(),
                    dir.display().to_string(),
                    "--quiet".to_owned(),
                ]
            } else {
                if ran > 0 {
                    seen.retrained += 1;
                }
                self.train_args(shipped, &dir)
            };
            ran += 1;
            let (ended, offset) = self.drive(&args, &dir, &log, moment)?;
            match ended {
                Ended::Killed { lost, in_save } => {
                    tally.kills += 1;
                    killed_here += 1;
                    tally.lost_minutes_max = tally.lost_minutes_max.max(lost.as_secs_f64() / 60.0);
                    seen.in_save += u64::from(in_save);
                    seen.startup += u64::from(matches!(moment, Some(Moment::Startup { .. })));
                }
                Ended::Exited(status) if status.success() => break None,
                Ended::Exited(status) => {
                    break Some(format!(
                        "`rl {}` exited with {status}:\n{}",
                        args[0],
                        log_since(&log, offset)
                    ));
                }
                Ended::Hung => {
                    break Some(format!(
                        "`rl {}` was still running after {}",
                        args[0],
                        human(FINISH_LIMIT)
                    ));
                }
            }
        };
        let failure = match failure {
            Some(failure) => Some(failure),
            None => {
                tally.resumed += killed_here;
                let metrics = fs::read_to_string(dir.join("metrics.jsonl")).unwrap_or_default();
                if let Some(problem) = metrics_problem(&metrics) {
                    eprintln!("    {name}: metrics.jsonl: {problem}");
                    tally.metrics_non_monotone += 1;
                }
                self.final_checks(shipped, &dir)?
            }
        };
        if let Some(failure) = failure {
            eprintln!(
                "    {name}: BROKEN after {killed_here} kill(s) of {ran} process(es): {failure}"
            );
            tally.broken_run_dirs += 1;
        }
        Ok(())
    }

    /// `rl train CONFIG --out DIR --quiet --set ...` for `shipped`.
    fn train_args(&self, shipped: Shipped, dir: &Path) -> Vec<String> {
        let mut args = vec![
            "train".to_owned(),
            self.configs.join(shipped.file).display().to_string(),
            "--out".to_owned(),
            dir.display().to_string(),
            "--quiet".to_owned(),
        ];
        // A run reaching its goal would stop early; every run goes to its budget.
        let sets = [
            format!("run.total_steps={}", shipped.total_steps),
            format!("run.checkpoint.every_steps={}", shipped.every_steps),
            "run.stop_at_goal=false".to_owned(),
        ];
        let extra = shipped.extra.iter().map(|s| (*s).to_owned());
        for set in sets.into_iter().chain(extra) {
            args.push("--set".to_owned());
            args.push(set);
        }
        args
    }

    /// Runs `rl ARGS` with its output appended to `log`, kills it at `moment` (or waits
    /// up to [`FINISH_LIMIT`] for it to end), and returns how it ended and where its
    /// part of the log starts.
    fn drive(
        &self,
        args: &[String],
        dir: &Path,
        log: &Path,
        moment: Option<Moment>,
    ) -> Result<(Ended, u64)> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let offset = file.seek(SeekFrom::End(0))?;
        let kill = moment.map_or_else(|| "none, let it finish".to_owned(), |m| format!("{m:?}"));
        writeln!(file, "==> rl {} (kill: {kill})", args.join(" "))?;
        let stderr = file.try_clone()?;
        let checkpoint = dir.join("checkpoint");
        let partial = dir.join("checkpoint.partial");
        let old = dir.join("checkpoint.old");
        let started_at = SystemTime::now();
        let started = Instant::now();
        let mut child = Command::new(&self.rl)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(stderr))
            .spawn()
            .with_context(|| format!("starting {}", self.rl.display()))?;
        let mut save_seen: Option<Instant> = None;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok((Ended::Exited(status), offset));
            }
            let elapsed = started.elapsed();
            let due = match moment {
                None => {
                    if elapsed > FINISH_LIMIT {
                        let _ = child.kill();
                        child.wait()?;
                        return Ok((Ended::Hung, offset));
                    }
                    false
                }
                Some(Moment::Startup { after_ms } | Moment::Anytime { after_ms }) => {
                    elapsed >= Duration::from_millis(after_ms)
                }
                Some(Moment::Save { after_us }) => {
                    if save_seen.is_none() && partial.exists() {
                        save_seen = Some(Instant::now());
                    }
                    match save_seen {
                        Some(at) => at.elapsed() >= Duration::from_micros(after_us),
                        None => elapsed >= SAVE_WAIT,
                    }
                }
            };
            if due {
                break;
            }
            std::thread::sleep(POLL);
        }
        let killed_at = SystemTime::now();
        let in_save = partial.exists() || old.exists();
        // SIGKILL on Unix.
        let _ = child.kill();
        let status = child.wait().context("waiting for the killed `rl`")?;
        if !killed_by_signal(&status) {
            return Ok((Ended::Exited(status), offset));
        }
        let saved = fs::metadata(checkpoint.join("run.json"))
            .and_then(|m| m.modified())
            .ok();
        let since = saved.map_or(started_at, |saved| saved.max(started_at));
        let lost = killed_at.duration_since(since).unwrap_or_default();
        Ok((Ended::Killed { lost, in_save }, offset))
    }

    /// The checks of a directory whose last process exited 0: `result.json`
    /// ([`final_problem`]), `rl plot DIR`, `rl eval DIR --episodes 1`. `None` when all
    /// pass.
    fn final_checks(&self, shipped: Shipped, dir: &Path) -> Result<Option<String>> {
        let result = match fs::read_to_string(dir.join("result.json")) {
            Ok(text) => final_problem(&text, shipped.total_steps),
            Err(e) => Some(format!("result.json cannot be read: {e}")),
        };
        if let Some(problem) = result {
            return Ok(Some(problem));
        }
        let dir = dir.display().to_string();
        for args in [vec!["plot", &dir], vec!["eval", &dir, "--episodes", "1"]] {
            let output = Command::new(&self.rl)
                .args(&args)
                .stdin(Stdio::null())
                .output()
                .with_context(|| format!("starting {}", self.rl.display()))?;
            if !output.status.success() {
                return Ok(Some(format!(
                    "`rl {}` failed ({}): {}",
                    args.join(" "),
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                )));
            }
        }
        Ok(None)
    }
}

/// The end of `log` from `offset` on (at most [`LOG_TAIL`] bytes), for a message.
fn log_since(log: &Path, offset: u64) -> String {
    let mut text = String::new();
    let read = File::open(log).and_then(|mut file| {
        file.seek(SeekFrom::Start(offset))?;
        file.read_to_string(&mut text)
    });
    if let Err(e) = read {
        return format!("(the log {} cannot be read: {e})", log.display());
    }
    let start = text.len().saturating_sub(LOG_TAIL);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].trim_end().to_owned()
}

/// What is wrong with a `metrics.jsonl`, if anything: a line that is not a JSON object
/// with a whole `env_steps`, or `env_steps` smaller than the line before's. Empty lines
/// (the end of the file) are not lines.
pub(crate) fn metrics_problem(text: &str) -> Option<String> {
    let mut last: Option<u64> = None;
    for (number, line) in text.lines().enumerate().map(|(i, l)| (i + 1, l)) {
        if line.trim().is_empty() {
            continue;
        }
        let steps = serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|value| value.get("env_steps").and_then(serde_json::Value::as_u64));
        let Some(steps) = steps else {
            return Some(format!(
                "line {number} is not a JSON object with env_steps: {line:?}"
            ));
        };
        if let Some(before) = last
            && steps < before
        {
            return Some(format!(
                "line {number}: env_steps goes back from {before} to {steps}"
            ));
        }
        last = Some(steps);
    }
    None
}

/// What is wrong with a finished run's `result.json`, if anything: it must parse, and
/// the run must have taken its whole `budget` of env steps or have stopped at its goal.
pub(crate) fn final_problem(text: &str, budget: u64) -> Option<String> {
    let value = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => value,
        Err(e) => return Some(format!("result.json is not JSON ({e}): {text:?}")),
    };
    let steps = value["total_env_steps"].as_u64();
    let stopped_by = value["stopped_by"].as_str();
    match (steps, stopped_by) {
        (_, Some("goal")) => None,
        (Some(steps), Some("budget")) if steps == budget => None,
        (Some(steps), Some(by)) => Some(format!(
            "result.json: stopped by {by} at {steps} env steps, not at the budget of {budget}"
        )),
        _ => Some(format!(
            "result.json lacks total_env_steps or stopped_by: {}",
            text.trim()
        )),
    }
}

#[cfg(test)]
mod tests;
