//! The run directory: its files, the checks before a run, the result at the end.

use std::fs;
use std::path::{Path, PathBuf};

use crate::eval::EvalReport;
use crate::trainer::{
    CheckpointSchedule, RUN_FILE, RunConfig, RunCounters, StopReason, TrainSummary,
};
use rl_core::MemoryPlan;
use serde::{Deserialize, Serialize};

use super::{Error, Result, Trained};
use crate::config::{Algo, Config, ConfigError};

/// The effective config of a run.
pub const CONFIG_FILE: &str = "config.toml";
/// The metrics, one JSON object per line.
pub const METRICS_FILE: &str = "metrics.jsonl";
/// The latest save of the run, what `rl resume` continues from.
pub const CHECKPOINT_DIR: &str = "checkpoint";
/// The learner at its best scheduled evaluation.
pub const BEST_DIR: &str = "best";
/// The outcome of the last `rl train` or `rl resume` of the run.
pub const RESULT_FILE: &str = "result.json";
/// The learning curve.
pub const CURVE_FILE: &str = "curve.png";
/// The learner's checkpoint inside a checkpoint folder (the trainers' layout).
pub(crate) const LEARNER_FILE: &str = "learner.safetensors";

/// The outcome of a run: the JSON line `rl train` prints and `result.json` holds. The
/// keys of the examples' line, and the run's algorithm, environment, directory and why
/// it stopped.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Whether the goal was reached.
    pub solved: bool,
    /// Env steps at the goal, or at the end when it was not reached.
    pub env_steps: u64,
    /// Seconds of training over the run's life at the goal, or at the end (a resumed
    /// run counts the time up to its checkpoint, not the time a kill lost).
    pub wall_s: f64,
    /// Mean return of the last training episodes.
    pub mean_return: Option<f32>,
    /// Training episodes in that mean.
    pub window: usize,
    /// Peak resident memory of the process.
    pub peak_rss_bytes: Option<u64>,
    /// `run.seed`.
    pub seed: u64,
    /// RAM bytes the run's recorded plan holds (the trainer's and the process's memory
    /// before the run), as `planned_bytes` in `metrics.jsonl`.
    pub planned_bytes: u64,
    /// Env steps per second of this process's training.
    pub env_steps_per_s: f64,
    /// Env steps over the run's life at the end.
    pub total_env_steps: u64,
    /// Seconds of training over the run's life at the end.
    pub total_wall_s: f64,
    /// The mean return of the final (or goal-reaching) evaluation, with `run.eval`.
    pub eval_mean_return: Option<f64>,
    /// The algorithm.
    pub algo: Algo,
    /// The environment.
    pub env: String,
    /// `"goal"`, `"budget"` or `"interrupted"` (resume it with `rl resume`).
    pub stopped_by: String,
    /// The run directory.
    pub run_dir: PathBuf,
}

/// The checkpoint kind each algorithm's learner writes.
fn kind_of(algo: Algo) -> &'static str {
    match algo {
        Algo::Ppo => rl_algos::ppo::CHECKPOINT_KIND,
        Algo::RecurrentPpo => rl_algos::ppo::RECURRENT_CHECKPOINT_KIND,
        Algo::Sac => rl_algos::sac::SAC_CHECKPOINT_KIND,
        Algo::DiscreteSac => rl_algos::sac::DISCRETE_SAC_CHECKPOINT_KIND,
        Algo::Dqn => rl_algos::dqn::CHECKPOINT_KIND,
        Algo::Td3 => rl_algos::td3::CHECKPOINT_KIND,
    }
}

/// Makes `out` a new run directory: created if missing, refused if it holds a run,
/// checked writable.
pub(crate) fn create(out: &Path) -> Result<PathBuf> {
    if out.join(CONFIG_FILE).exists() {
        return Err(Error::Usage(format!(
            "--out {}: the folder holds a run already: continue it with `rl resume {}`, or choose another --out",
            out.display(),
            out.display()
        )));
    }
    fs::create_dir_all(out).map_err(|e| {
        Error::Usage(format!(
            "--out {}: cannot create the folder ({e}): choose a writable place",
            out.display()
        ))
    })?;
    check_writable(out)?;
    Ok(out.to_owned())
}

/// Writes and removes a probe file in `dir`.
pub(crate) fn check_writable(dir: &Path) -> Result<()> {
    let probe = dir.join(".rl-write-check");
    fs::write(&probe, b"rl")
        .and_then(|()| fs::remove_file(&probe))
        .map_err(|e| {
            Error::Usage(format!(
                "--out {}: cannot write into the folder ({e}): choose a writable folder",
                dir.display()
            ))
        })
}

/// Writes `dir/config.toml` (whole or not at all).
pub(crate) fn write_config(dir: &Path, config: &Config) -> Result<()> {
    let text = format!(
        "# The effective configuration of this run: every value in force, defaults written\n\
         # out (an optional setting that is off is left out). `rl resume` reads it.\n\n{}",
        config.to_toml()?
    );
    write_atomically(&dir.join(CONFIG_FILE), text.as_bytes())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    fs::write(&partial, bytes)
        .and_then(|()| fs::rename(&partial, path))
        .map_err(|e| Error::io("writing", path, e))
}

/// Reads `dir/config.toml` with `overrides`.
pub(crate) fn read_config(dir: &Path, overrides: &[String]) -> Result<Config> {
    let path = dir.join(CONFIG_FILE);
    let text = fs::read_to_string(&path).map_err(|e| {
        Error::Usage(format!(
            "{}: not a run directory ({} cannot be read: {e}): give the --out folder of `rl train`",
            dir.display(),
            path.display()
        ))
    })?;
    Config::from_toml(&text, overrides).map_err(|e| {
        Error::Config(ConfigError {
            key: e.key,
            message: format!("{}: {}", path.display(), e.message),
        })
    })
}

/// Whether the run in `dir` has saved a checkpoint (one a crash left between the
/// renames of a save is put back first).
///
/// # Errors
/// The I/O error of putting it back.
pub(crate) fn has_checkpoint(dir: &Path) -> Result<bool> {
    let folder = dir.join(CHECKPOINT_DIR);
    crate::trainer::recover_dir(&folder)?;
    Ok(folder.join(RUN_FILE).exists())
}

/// The counters of the checkpoint folder `dir/name`, checked to hold a learner of
/// `config`'s algorithm.
pub(crate) fn check_checkpoint(dir: &Path, name: &str, config: &Config) -> Result<RunCounters> {
    let folder = dir.join(name);
    crate::trainer::recover_dir(&folder)?;
    if !folder.join(RUN_FILE).exists() {
        let hint = if name == BEST_DIR {
            "a best checkpoint is kept only for runs with run.eval"
        } else {
            "the run has not saved yet"
        };
        return Err(Error::Usage(format!(
            "{} holds no checkpoint ({hint})",
            folder.display()
        )));
    }
    let counters = RunCounters::load(&folder)?;
    let expected = kind_of(config.algo);
    if counters.learner != expected {
        let held = Algo::ALL
            .into_iter()
            .find(|a| kind_of(*a) == counters.learner)
            .map_or_else(|| counters.learner.clone(), |a| a.name().to_owned());
        return Err(Error::Usage(format!(
            "{} holds a checkpoint of algo {held}, but {} says algo = \"{}\": use the config the run was trained with",
            folder.display(),
            dir.join(CONFIG_FILE).display(),
            config.algo
        )));
    }
    Ok(counters)
}

/// The loop settings of a run in `dir`: the config's, saving into `dir/checkpoint` at
/// the config's cadences (`run.checkpoint.every_steps`, `every_minutes`, `at_eval`) and
/// at the end, and into `dir/best` at each best evaluation.
pub(crate) fn run_config(dir: &Path, config: &Config) -> RunConfig {
    let schedule = config.run.checkpoint.clone().unwrap_or_default();
    RunConfig {
        checkpoint: Some(CheckpointSchedule {
            dir: dir.join(CHECKPOINT_DIR),
            best: config.run.eval.map(|_| dir.join(BEST_DIR)),
            ..schedule
        }),
        ..config.run.clone()
    }
}

/// Writes `result.json` and `curve.png` at the end of a run.
pub(crate) fn finish(
    dir: &Path,
    config: &Config,
    s: &TrainSummary,
    eval: Option<EvalReport>,
    plan: MemoryPlan,
    interrupted: bool,
) -> Result<Trained> {
    let stopped_by = match (interrupted, s.stopped_by) {
        (true, _) => "interrupted",
        (false, StopReason::Goal) => "goal",
        (false, StopReason::Budget) => "budget",
        (false, StopReason::Callback) => "callback",
    };
    let result = RunResult {
        solved: s.solved,
        env_steps: s.env_steps,
        wall_s: s.wall_s,
        mean_return: s.mean_return,
        window: s.window,
        peak_rss_bytes: s.peak_rss_bytes,
        seed: config.run.seed,
        // The recorded plan's (with the process's memory before the run), as
        // metrics.jsonl's `planned_bytes`.
        planned_bytes: plan.total(rl_core::Location::Ram),
        env_steps_per_s: s.steps_per_s,
        total_env_steps: s.total_env_steps,
        total_wall_s: s.total_wall_s,
        eval_mean_return: eval.map(|e| e.mean_return),
        algo: config.algo,
        env: config.env.clone(),
        stopped_by: stopped_by.to_owned(),
        run_dir: dir.to_owned(),
    };
    let text = serde_json::to_string(&result)
        .map_err(|e| Error::io("writing", &dir.join(RESULT_FILE), e.into()))?;
    write_atomically(&dir.join(RESULT_FILE), format!("{text}\n").as_bytes())?;
    super::plot::plot(&[dir.to_owned()], &dir.join(CURVE_FILE))?;
    Ok(Trained {
        result,
        dir: dir.to_owned(),
        plan,
        interrupted,
    })
}

/// The settings a resumed run may change: a key, and every key below it.
/// Everything else is fixed by the checkpoint (the networks, the buffers, the seed).
const RESUMABLE: [&str; 13] = [
    "run.total_steps",
    "run.eval",
    "run.goal",
    "run.stop_at_goal",
    "run.checkpoint",
    "run.threads",
    "log",
    "ppo.adam.lr",
    "ppo.learning_rate_end",
    "ppo.schedule_steps",
    "ppo.clip_range_end",
    "sac.adam.lr",
    "dqn.adam.lr",
];

/// Where the accepted changes of resumed runs are appended, one JSON object a line.
pub const CHANGES_FILE: &str = "changes.jsonl";
/// Where `metrics.jsonl` lines past the checkpoint go when a run resumes.
pub const DISCARDED_METRICS_FILE: &str = "metrics.discarded.jsonl";

fn resumable(key: &str) -> bool {
    RESUMABLE.iter().any(|allowed| {
        key.strip_prefix(allowed)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

/// Every leaf of a config as a TOML table, by dotted key.
fn leaves(config: &Config) -> Result<std::collections::BTreeMap<String, toml::Value>> {
    fn walk(
        prefix: &str,
        table: &toml::Table,
        out: &mut std::collections::BTreeMap<String, toml::Value>,
    ) {
        for (name, value) in table {
            let key = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            match value {
                toml::Value::Table(inner) => walk(&key, inner, out),
                other => {
                    out.insert(key, other.clone());
                }
            }
        }
    }
    let table = toml::Table::try_from(config)
        .map_err(|e| ConfigError::new("", format!("cannot be written as TOML: {e}")))?;
    let mut out = std::collections::BTreeMap::new();
    walk("", &table, &mut out);
    Ok(out)
}

/// A change of one setting on resume: the key, its saved and its new value (`None`:
/// not set).
pub(crate) type Change = (String, Option<toml::Value>, Option<toml::Value>);

/// The settings that differ between the saved config and the resumed one, refused with
/// the first one a resume may not change.
///
/// # Errors
/// [`Error::Config`] naming the key and the saved value.
pub(crate) fn resume_changes(saved: &Config, new: &Config) -> Result<Vec<Change>> {
    let (old, new) = (leaves(saved)?, leaves(new)?);
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let mut changes = Vec::new();
    for key in keys {
        let (before, after) = (old.get(key), new.get(key));
        if before == after {
            continue;
        }
        if !resumable(key) {
            let held = before.map_or_else(|| "no value".to_owned(), ToString::to_string);
            return Err(Error::Config(ConfigError {
                key: key.clone(),
                message: format!(
                    "{key} cannot change on resume (the checkpoint holds {held}): start a new run"
                ),
            }));
        }
        changes.push((key.clone(), before.cloned(), after.cloned()));
    }
    Ok(changes)
}

/// After the trainer accepted the checkpoint of a resumed run: records the changed
/// settings in `changes.jsonl`, writes the new `config.toml`, and repairs
/// `metrics.jsonl` for appending ([`repair_metrics`]), `episodes.csv` and the
/// TensorBoard events likewise (rows and records past `env_steps` set aside or
/// dropped).
pub(crate) fn accept_resume(dir: &Path, config: &Config, env_steps: u64) -> Result<()> {
    let saved = read_config(dir, &[])?;
    let changes = resume_changes(&saved, config)?;
    if !changes.is_empty() {
        let json = |v: &Option<toml::Value>| {
            v.as_ref()
                .and_then(|v| serde_json::to_value(v).ok())
                .unwrap_or(serde_json::Value::Null)
        };
        let mut line = serde_json::Map::new();
        line.insert("env_steps".into(), env_steps.into());
        let changed: serde_json::Map<String, serde_json::Value> = changes
            .iter()
            .map(|(key, old, new)| {
                (
                    key.clone(),
                    serde_json::json!({ "old": json(old), "new": json(new) }),
                )
            })
            .collect();
        line.insert("changes".into(), changed.into());
        let mut text = serde_json::Value::Object(line).to_string();
        text.push('\n');
        append(&dir.join(CHANGES_FILE), text.as_bytes())?;
        write_config(dir, config)?;
    }
    repair_metrics(dir, env_steps)?;
    super::episodes::repair(dir, env_steps)?;
    super::tensorboard::cut(&dir.join(super::tensorboard::TENSORBOARD_DIR), env_steps)
}

fn append(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| Error::io("writing", path, e))
}

/// Makes `dir/metrics.jsonl` fit a run resumed at `env_steps`: a torn last line (no
/// newline, or not JSON: the process died while writing it) is cut off, and the lines
/// past `env_steps` (written after the checkpoint) are appended to
/// `metrics.discarded.jsonl`, so `env_steps` never goes back in the file.
pub(crate) fn repair_metrics(dir: &Path, env_steps: u64) -> Result<()> {
    cut_back(
        dir,
        METRICS_FILE,
        DISCARDED_METRICS_FILE,
        env_steps,
        |line| {
            serde_json::from_str::<serde_json::Value>(line.trim_end())
                .ok()
                .map(|v| v.get("env_steps").and_then(serde_json::Value::as_u64))
        },
    )
}

/// Makes the line file `dir/file` fit a run resumed at `env_steps`: a torn last line is
/// cut off, lines past `env_steps` are appended to `dir/discarded`. `steps` reads a
/// line: `None` for one that is not whole (torn), else its env steps, if it has any.
pub(crate) fn cut_back(
    dir: &Path,
    file: &str,
    discarded: &str,
    env_steps: u64,
    steps: impl Fn(&str) -> Option<Option<u64>>,
) -> Result<()> {
    let path = dir.join(file);
    let text = match fs::read(&path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("reading", &path, e)),
    };
    let mut lines: Vec<&str> = text.split_inclusive('\n').collect();
    let torn = lines
        .last()
        .is_some_and(|l| !l.ends_with('\n') || steps(l).is_none());
    if torn {
        lines.pop();
    }
    let (mut kept, mut moved) = (String::new(), String::new());
    for line in lines {
        if steps(line).flatten().is_some_and(|s| s > env_steps) {
            moved.push_str(line);
        } else {
            kept.push_str(line);
        }
    }
    if !torn && moved.is_empty() {
        return Ok(());
    }
    if !moved.is_empty() {
        append(&dir.join(discarded), moved.as_bytes())?;
    }
    write_atomically(&path, kept.as_bytes())
}
