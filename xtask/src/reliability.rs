//! Failure cases checked for real: `cargo xtask crash-test` kills writers of a memmap
//! buffer with SIGKILL and checks what survives; `cargo xtask ptx` assembles the
//! hand-written gather PTX with ptxas. Both run in `cargo xtask ci` (step `reliability`).
//!
//! The crash test drives `crates/rl-storage/examples/crash_writer.rs`: a child writes
//! rows that encode their sequence number and commits now and then, announcing each
//! write (`intent N`) before it starts and each commit (`committed W L`) after it
//! returned; the parent kills it at a random moment, then runs the same program's
//! `verify` on the file: every row of the last commit that no write since could have
//! reached must be there and whole, and so must every row the reopened ring holds.
//!
//! `crash-test --runs N` ([`runs`]) kills `rl train` and `rl resume` of shipped configs
//! and checks that every run directory still resumes and finishes whole.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::cmd::{Cmd, Workspace, announce, human};
use crate::{usage_error, venv};

mod runs;

/// Kills of a CI run (and the default): at least 50 by the issue that asked for the test; 200 take a few seconds.
pub(crate) const CI_KILLS: u64 = 200;

/// The example that writes and verifies.
const HELPER: &str = "crash_writer";
/// Every this many rounds starts from no file: a kill while the file is created.
const CREATE_EVERY: u64 = 5;

/// What `crash-test` runs, from its flags: `--kills N` selects the memmap writer part,
/// `--runs N` the run-level part ([`runs`]), both flags both parts (in that order, with
/// the same seed); with neither, the memmap part alone with [`CI_KILLS`] kills.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Options {
    /// Kills of the memmap writer (`None`: that part does not run).
    pub(crate) kills: Option<u64>,
    /// Kills of `rl train` and `rl resume` (`None`: that part does not run).
    pub(crate) runs: Option<u64>,
    /// The seed of every random choice (`None`: from the clock).
    pub(crate) seed: Option<u64>,
}

/// Parses `[--kills N] [--runs N] [--seed S]` (also `--flag=N`).
pub(crate) fn parse_args(args: &[String]) -> Result<Options> {
    let mut options = Options {
        kills: None,
        runs: None,
        seed: None,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag, Some(value.to_owned())),
            None => (arg.as_str(), None),
        };
        let target = match flag {
            "--kills" => &mut options.kills,
            "--runs" => &mut options.runs,
            "--seed" => &mut options.seed,
            _ => usage_error!("unknown argument `{arg}` for `crash-test`"),
        };
        let Some(value) = inline.or_else(|| args.next().cloned()) else {
            usage_error!("`{flag}` needs a number");
        };
        match value.parse::<u64>() {
            Ok(n) => *target = Some(n),
            Err(_) => usage_error!("`{flag}` needs a whole number, got `{value}`"),
        }
    }
    for (flag, count) in [("--kills", options.kills), ("--runs", options.runs)] {
        if count == Some(0) {
            usage_error!("`{flag}` must be at least 1");
        }
    }
    if options.kills.is_none() && options.runs.is_none() {
        options.kills = Some(CI_KILLS);
    }
    Ok(options)
}

/// `cargo xtask crash-test [--kills N] [--runs N] [--seed S]`: runs the parts
/// [`parse_args`] selects, prints each part's JSON line, and fails (naming the seed and
/// the command that reproduces it) when a part found a failure.
pub(crate) fn run(ws: &Workspace, args: &[String]) -> Result<()> {
    let options = parse_args(args)?;
    let seed = options.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let mut failures = Vec::new();
    if let Some(kills) = options.kills {
        let tally = crash_test(ws, kills, seed)?;
        println!("{}", tally.json());
        if !tally.clean() {
            failures.push(format!(
                "the memmap crash test found failures (seed {seed}; reproduce with \
                 `cargo xtask crash-test --kills {kills} --seed {seed}`)"
            ));
        }
    }
    if let Some(kills) = options.runs {
        let tally = runs::crash_runs(ws, kills, seed)?;
        println!("{}", tally.json());
        if !tally.clean() {
            failures.push(format!(
                "the run-level crash test found failures: {} of {} kills ({kills} asked) \
                 resumed, {} broken run directories, {} with bad metrics (seed {seed}; the \
                 logs are in target/crash-test/runs; reproduce with \
                 `cargo xtask crash-test --runs {kills} --seed {seed}`)",
                tally.resumed, tally.kills, tally.broken_run_dirs, tally.metrics_non_monotone
            ));
        }
    }
    if !failures.is_empty() {
        bail!("{}", failures.join("\n"));
    }
    Ok(())
}

/// What the kills found. The JSON line prints exactly these keys.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) kills: u64,
    pub(crate) committed_rows_lost: u64,
    pub(crate) torn_rows: u64,
    pub(crate) panics: u64,
    pub(crate) open_errors: u64,
}

impl Tally {
    pub(crate) fn json(&self) -> String {
        format!(
            "{{\"kills\":{},\"committed_rows_lost\":{},\"torn_rows\":{},\"panics\":{},\"open_errors\":{}}}",
            self.kills, self.committed_rows_lost, self.torn_rows, self.panics, self.open_errors
        )
    }

    fn clean(&self) -> bool {
        self.committed_rows_lost == 0
            && self.torn_rows == 0
            && self.panics == 0
            && self.open_errors == 0
    }
}

/// splitmix64: the delays and round kinds need nothing better.
struct Random(u64);

impl Random {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// When a round's kill lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moment {
    /// Shortly after the child announced that it creates the file.
    Create { delay_us: u64 },
    /// Shortly after it announced a write that crosses the end of the ring.
    Wrap { delay_us: u64 },
    /// At a random time after it opened the file.
    Anytime { delay_us: u64 },
}

/// What the child said before it died.
#[derive(Debug, Default)]
struct Heard {
    /// It announced that it creates the file.
    creating: bool,
    opened: bool,
    /// The last commit that returned: rows written, rows stored.
    committed: Option<(u64, u64)>,
    /// The most rows any announced write reaches.
    reached: u64,
}

/// Builds the helper and runs `kills` rounds.
fn crash_test(ws: &Workspace, kills: u64, seed: u64) -> Result<Tally> {
    let helper = build_helper(ws)?;
    let dir = ws.root.join("target").join("crash-test");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("ring.rlmm");
    announce(
        "crash-test",
        &format!(
            "{kills} kills of {HELPER} writing {} (seed {seed})",
            path.display()
        ),
    );
    let started = Instant::now();
    let mut random = Random(seed);
    let mut tally = Tally::default();
    // The contract's promise: the last commit that returned, and how far writes since
    // may have reached (rows written in all, over every child since that commit).
    let mut commit = (0u64, 0u64);
    let mut reached = 0u64;
    let (mut during_create, mut mid_create, mut fallbacks) = (0u64, 0u64, 0u64);
    for round in 0..kills {
        let moment = if round % CREATE_EVERY == 0 {
            if path.exists() {
                std::fs::remove_file(&path)
                    .with_context(|| format!("removing {}", path.display()))?;
            }
            commit = (0, 0);
            reached = 0;
            Moment::Create {
                delay_us: random.below(300),
            }
        } else if round % CREATE_EVERY <= 2 {
            Moment::Wrap {
                delay_us: random.below(300),
            }
        } else {
            Moment::Anytime {
                delay_us: 1000 + random.below(60_000),
            }
        };
        let heard = kill_one(&helper, &path, random.below(u64::MAX), moment, &mut tally)?;
        tally.kills += 1;
        if let Some(last) = heard.committed {
            commit = last;
        }
        reached = reached.max(heard.reached);
        if matches!(moment, Moment::Create { .. }) && !heard.opened {
            during_create += 1;
        }
        let verdict = verify(&helper, &path, commit, reached)?;
        match verdict {
            Verdict::Missing { .. } if heard.opened || commit.0 > 0 => {
                eprintln!("round {round}: the file is gone after it was created");
                tally.open_errors += 1;
            }
            Verdict::Missing { temp_files } => {
                // Killed inside `create`: no file at the path, at most its temporary.
                mid_create += u64::from(temp_files > 0);
            }
            Verdict::OpenError(error) => {
                eprintln!("round {round} ({moment:?}): reopening failed: {error}");
                tally.open_errors += 1;
            }
            Verdict::Panicked(output) => {
                eprintln!("round {round}: the check panicked: {output}");
                tally.panics += 1;
            }
            Verdict::Checked {
                lost,
                torn,
                fallback,
                temp_files,
            } => {
                if lost > 0 || torn > 0 {
                    eprintln!(
                        "round {round} ({moment:?}): {lost} committed rows lost, {torn} torn \
                         (last commit {commit:?}, writes reached {reached})"
                    );
                }
                tally.committed_rows_lost += lost;
                tally.torn_rows += torn;
                fallbacks += u64::from(fallback);
                // A `create` that returned removed its own temporary file and those
                // killed `create`s left. (A kill between linking the new file and
                // removing its temporary name leaves a second name of the same file
                // until the next `create`: harmless, and not counted.)
                if heard.creating && heard.opened && temp_files > 0 {
                    eprintln!("round {round}: {temp_files} temporary files left after a create");
                    tally.open_errors += 1;
                }
            }
        }
    }
    eprintln!(
        "    crash-test: {} kills ({during_create} before a new file was opened, {mid_create} of \
         them with its temporary file written; the rest while writing, wrapping and \
         committing), {fallbacks} reopens fell back to the older commit slot; {}",
        tally.kills,
        human(started.elapsed())
    );
    Ok(tally)
}

/// Builds the helper example and returns its path.
fn build_helper(ws: &Workspace) -> Result<PathBuf> {
    let cmd = Cmd::cargo([
        "build",
        "-p",
        "rl-storage",
        "--example",
        HELPER,
        "--message-format=json-render-diagnostics",
    ]);
    announce("crash-test", &cmd.display());
    let out = cmd.read_stdout(ws)?;
    out.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["target"]["name"] == HELPER)
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .with_context(|| format!("cargo did not report the `{HELPER}` example it built"))
}

/// Starts a writer, kills it at `moment`, and returns what it said. A child that ended
/// on its own (an error or a panic) counts in `tally.panics`.
fn kill_one(
    helper: &Path,
    path: &Path,
    seed: u64,
    moment: Moment,
    tally: &mut Tally,
) -> Result<Heard> {
    let mut child = Command::new(helper)
        .arg("write")
        .arg(path)
        .arg(seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", helper.display()))?;
    let lines = read_lines(&mut child)?;
    let mut heard = Heard::default();
    let deadline = Instant::now() + Duration::from_secs(20);
    let delay = loop {
        let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now()))
        else {
            break None; // ended, or silent for too long
        };
        let fired = note(&mut heard, &line);
        match (moment, fired) {
            (Moment::Create { delay_us }, Event::Creating) => break Some(delay_us),
            (Moment::Create { .. }, Event::Opened) => break Some(0), // it existed after all
            (Moment::Wrap { delay_us }, Event::Wrap) if heard.opened => break Some(delay_us),
            (Moment::Anytime { delay_us }, Event::Opened) => break Some(delay_us),
            _ => {}
        }
    };
    if let Some(delay_us) = delay {
        std::thread::sleep(Duration::from_micros(delay_us));
    }
    // SIGKILL on Unix.
    let _ = child.kill();
    let status = child.wait().context("waiting for the killed writer")?;
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    // Everything it printed before it died is still in the pipe.
    for line in lines.iter() {
        note(&mut heard, &line);
    }
    if !killed_by_signal(&status) {
        eprintln!("    the writer ended on its own ({status}) before the kill: {stderr}");
        tally.panics += 1;
    } else if delay.is_none() {
        eprintln!("    the writer never reached the moment to kill it ({moment:?})");
        tally.panics += 1;
    }
    Ok(heard)
}

/// What a line of the writer announces.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    Creating,
    Opened,
    Wrap,
    Other,
}

/// Records one line of the writer.
fn note(heard: &mut Heard, line: &str) -> Event {
    let mut words = line.split_whitespace();
    let number = |word: Option<&str>| word.and_then(|w| w.parse::<u64>().ok());
    match words.next() {
        Some("creating") => {
            heard.creating = true;
            Event::Creating
        }
        Some("opened") => {
            heard.opened = true;
            let written = number(words.next()).unwrap_or(0);
            heard.reached = heard.reached.max(written);
            Event::Opened
        }
        Some("intent") => {
            heard.reached = heard.reached.max(number(words.next()).unwrap_or(0));
            if words.next() == Some("wrap") {
                Event::Wrap
            } else {
                Event::Other
            }
        }
        Some("committed") => {
            if let (Some(w), Some(l)) = (number(words.next()), number(words.next())) {
                heard.committed = Some((w, l));
            }
            Event::Other
        }
        _ => Event::Other,
    }
}

/// The child's stdout, line by line, from a thread (so the parent can time its kill).
fn read_lines(child: &mut Child) -> Result<Receiver<String>> {
    let stdout = child.stdout.take().context("the writer's stdout")?;
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    Ok(receiver)
}

#[cfg(unix)]
fn killed_by_signal(status: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(9)
}

#[cfg(not(unix))]
fn killed_by_signal(status: &std::process::ExitStatus) -> bool {
    !status.success()
}

/// What the check found after a kill.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// No file at the path; temporary files beside it (a `create` cut short).
    Missing {
        temp_files: u64,
    },
    OpenError(String),
    Panicked(String),
    Checked {
        lost: u64,
        torn: u64,
        fallback: bool,
        temp_files: u64,
    },
}

/// Runs the helper's `verify` against the last commit and the furthest write.
fn verify(helper: &Path, path: &Path, commit: (u64, u64), reached: u64) -> Result<Verdict> {
    let output = Command::new(helper)
        .arg("verify")
        .arg(path)
        .args([commit.0, commit.1, reached].map(|n| n.to_string()))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {} verify", helper.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Ok(Verdict::Panicked(format!(
            "{}{}",
            stdout,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    let line: serde_json::Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("the check printed `{}`", stdout.trim()))?;
    if line["missing"] == true {
        return Ok(Verdict::Missing {
            temp_files: line["temp_files"].as_u64().unwrap_or(0),
        });
    }
    if let Some(error) = line["open_error"].as_str() {
        return Ok(Verdict::OpenError(error.to_owned()));
    }
    let count = |key: &str| {
        line[key]
            .as_u64()
            .with_context(|| format!("the check printed no `{key}`: {line}"))
    };
    Ok(Verdict::Checked {
        lost: count("lost")?,
        torn: count("torn")?,
        fallback: line["fallback"] == true,
        temp_files: count("temp_files")?,
    })
}

/// The hand-written gather PTX of rl-storage's CUDA device.
const GATHER_PTX: &str = "crates/rl-storage/src/cuda/gather.ptx";
/// The GPU architectures the PTX must assemble for: the oldest it targets, Ampere,
/// Hopper.
const PTX_ARCHS: [&str; 3] = ["sm_52", "sm_80", "sm_90"];

/// `cargo xtask ptx`: assembles the gather PTX with ptxas (from the CI virtualenv's
/// pinned `nvidia-cuda-nvcc-cu12`, or `$RL_PTXAS`) for every architecture of
/// [`PTX_ARCHS`]; fails on the first error, with ptxas's message.
pub(crate) fn ptx(ws: &Workspace) -> Result<()> {
    let ptxas = match std::env::var_os("RL_PTXAS") {
        Some(path) => PathBuf::from(path),
        None => venv_ptxas(ws)?,
    };
    let source = ws.root.join(GATHER_PTX);
    let out = ws.root.join("target").join("ptx");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    for arch in PTX_ARCHS {
        let cubin = out.join(format!("gather-{arch}.cubin"));
        let mut command = Command::new(&ptxas);
        command
            .arg(format!("-arch={arch}"))
            .arg("-o")
            .arg(&cubin)
            .arg(&source);
        announce("ptx", &format!("ptxas -arch={arch} {GATHER_PTX}"));
        let output = command
            .output()
            .with_context(|| format!("running {}", ptxas.display()))?;
        if !output.status.success() {
            bail!(
                "ptxas could not assemble {GATHER_PTX} for {arch} ({}):\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    Ok(())
}

/// ptxas inside the CI virtualenv (made or updated first).
fn venv_ptxas(ws: &Workspace) -> Result<PathBuf> {
    let python = venv::ensure(ws)?;
    let output = Command::new(&python)
        .args([
            "-c",
            "import nvidia.cuda_nvcc as m, os; print(os.path.join(list(m.__path__)[0], 'bin', 'ptxas'))",
        ])
        .output()
        .with_context(|| format!("running {}", python.display()))?;
    let path = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    if !output.status.success() || !path.is_file() {
        bail!(
            "no ptxas in the CI virtualenv (nvidia-cuda-nvcc-cu12 from xtask/requirements-ci.txt): \
             {}; set RL_PTXAS to a ptxas to use another",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(path)
}

/// The CI step: the PTX first (seconds), then the crash test with [`CI_KILLS`] kills
/// of the memmap writer and [`runs::CI_RUNS`] of `rl train`/`rl resume`.
pub(crate) fn ci_step(ws: &Workspace) -> Result<()> {
    ptx(ws)?;
    run(
        ws,
        &[
            "--kills".to_owned(),
            CI_KILLS.to_string(),
            "--runs".to_owned(),
            runs::CI_RUNS.to_string(),
        ],
    )
}

#[cfg(test)]
mod tests;
