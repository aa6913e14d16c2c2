//! The command line: `rl train | plan | eval | resume | plot | list | export`, on any
//! [`Registry`] (the `rl` binary passes [`Registry::builtin`]).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::config::{Config, ConfigError};
use crate::run::{Error, Limit, Registry, TrainOptions, Trained, Which};

/// Train, plan, evaluate, resume, plot and export reinforcement-learning runs whose
/// memory is planned before they start.
#[derive(Debug, Parser)]
#[command(name = "rl", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Train a config into a run directory (effective config, metrics.jsonl,
    /// checkpoints, result.json, curve.png); prints the result as one JSON line.
    /// Ctrl-C ends the run cleanly (exit code 130) and `rl resume` continues it.
    Train {
        /// The experiment's TOML file (see configs/).
        config: PathBuf,
        /// The run directory (created; must not hold a run). Default: runs/<config
        /// name>, numbered if taken.
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(flatten)]
        set: SetFlags,
        /// Print no plan and no progress.
        #[arg(long)]
        quiet: bool,
    },
    /// Print the whole run's memory plan and whether it fits run.budget (without one,
    /// this machine's available memory), from the config alone: nothing is built or
    /// allocated. Exits 1 when it does not fit.
    Plan {
        /// The experiment's TOML file.
        config: PathBuf,
        #[command(flatten)]
        set: SetFlags,
    },
    /// Evaluate a run's saved policy (deterministic actions); prints mean and std of the
    /// returns as JSON.
    Eval {
        /// The run directory.
        run_dir: PathBuf,
        /// Episodes to run.
        #[arg(long, default_value_t = 20)]
        episodes: usize,
        /// Which checkpoint: the latest save or the best evaluation's.
        #[arg(long, value_enum, default_value_t = CheckpointFlag::Latest)]
        checkpoint: CheckpointFlag,
        /// Reset seed of the first episode (episode i uses seed + i). Default: the seeds
        /// of the run's scheduled evaluations.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Continue a run from its latest checkpoint (after an interrupt, or with a larger
    /// run.total_steps), appending to its metrics.
    Resume {
        /// The run directory.
        run_dir: PathBuf,
        #[command(flatten)]
        set: SetFlags,
        /// Print no plan and no progress.
        #[arg(long)]
        quiet: bool,
    },
    /// Draw the learning curves of one or more runs into a PNG: runs of one config
    /// (but for run.seed) as a mean line with a min-max band over their seeds, the
    /// goal as a dashed line.
    Plot {
        /// Run directories.
        #[arg(required = true)]
        run_dirs: Vec<PathBuf>,
        /// The PNG. Default: RUN_DIR/curve.png for one run, curves.png for several.
        #[arg(long)]
        out: Option<PathBuf>,
        /// The metric on the y axis: a key of metrics.jsonl (return_mean,
        /// eval_return_mean, value_loss ...). Default: the one the first run's goal is
        /// judged on (return_mean without a goal).
        #[arg(long)]
        y: Option<String>,
        /// The x axis.
        #[arg(long, value_enum, default_value_t = XFlag::EnvSteps)]
        x: XFlag,
        /// A trailing moving average over this many points of each run (1: none).
        #[arg(long, default_value_t = 1)]
        smooth: usize,
    },
    /// List the environments a config's `env` can name, their observation and action
    /// spaces, and the algorithms (`algo`) that can train on each.
    List,
    /// Write a run's policy weights for other tools (names and shapes as PyTorch's).
    Export {
        /// The run directory.
        run_dir: PathBuf,
        /// The file format.
        #[arg(long, value_enum, default_value_t = Format::Safetensors)]
        format: Format,
        /// Which checkpoint: the latest save or the best evaluation's.
        #[arg(long, value_enum, default_value_t = CheckpointFlag::Latest)]
        checkpoint: CheckpointFlag,
        /// The file. Default: RUN_DIR/policy.safetensors.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
struct SetFlags {
    /// Override a config value: KEY=VALUE with a dotted key and a TOML value (or a bare
    /// string), e.g. --set ppo.n_steps=64 --set run.seed=3. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Threads the learner's large matrix products are split across: the same as --set
    /// run.threads=N. Results are bit-identical for any N.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
}

impl SetFlags {
    /// The overrides in order, `--threads` last.
    fn overrides(self) -> Vec<String> {
        let mut all = self.set;
        all.extend(self.threads.map(|n| format!("run.threads={n}")));
        all
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum CheckpointFlag {
    /// RUN_DIR/checkpoint: the latest save.
    Latest,
    /// RUN_DIR/best: the learner of the best scheduled evaluation.
    Best,
}

impl From<CheckpointFlag> for Which {
    fn from(flag: CheckpointFlag) -> Self {
        match flag {
            CheckpointFlag::Latest => Which::Latest,
            CheckpointFlag::Best => Which::Best,
        }
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum XFlag {
    /// Env steps over the run's life.
    #[value(name = "env_steps")]
    EnvSteps,
    /// Seconds of training over the run's life.
    #[value(name = "wall_s")]
    WallS,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    /// safetensors (tensors `<network>.<tensor>`, PyTorch names).
    Safetensors,
}

/// Runs the `rl` command line (`std::env::args`) on `registry`'s environments and
/// returns the exit code: 0 on success, 1 for a failed run or a plan over budget (`rl
/// plan`; `rl train` refuses one as a config error), 2 for a usage or config error
/// (nothing ran), 130 for a run ended by Ctrl-C or SIGTERM
/// (saved, resumable). Results go to stdout as JSON, progress and errors to stderr.
pub fn run_command(registry: &Registry) -> ExitCode {
    ExitCode::from(run_args(registry, "rl", std::env::args_os()))
}

/// [`run_command`] over `args` (the first is the program's name, as `std::env::args`
/// gives it), with `name` in usage and help: what the Python package's `flatrl` console
/// script runs with its registry (Gymnasium environments included). Returns the exit
/// code; `--help` and `--version` print and return 0, a usage error prints and returns 2.
pub fn run_args<I, T>(registry: &Registry, name: &'static str, args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let parsed = Cli::command()
        .name(name)
        .bin_name(name)
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() { 2 } else { 0 };
        }
    };
    match dispatch(registry, cli.command) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error}");
            error.exit_code() as u8
        }
    }
}

fn dispatch(registry: &Registry, command: Command) -> Result<u8, Error> {
    match command {
        Command::Train {
            config,
            out,
            set,
            quiet,
        } => {
            let parsed = read(&config, &set.overrides())?;
            let out = match out {
                Some(out) => out,
                None => default_out(&config),
            };
            let options = TrainOptions {
                quiet,
                stop: Some(stop_flag()?),
                overrides: Vec::new(),
            };
            report(crate::run::train(registry, &parsed, &out, &options)?)
        }
        Command::Resume {
            run_dir,
            set,
            quiet,
        } => {
            let options = TrainOptions {
                quiet,
                stop: Some(stop_flag()?),
                overrides: set.overrides(),
            };
            report(crate::run::resume(registry, &run_dir, &options)?)
        }
        Command::List => {
            let envs = registry.list();
            let width = envs.iter().map(|e| e.name.len()).max().unwrap_or(3).max(3);
            println!(
                "{:width$}  {:28}  {:14}  algorithms",
                "env", "observations", "actions"
            );
            for env in envs {
                let algos: Vec<&str> = env.algos.iter().map(|a| a.name()).collect();
                println!(
                    "{:width$}  {:28}  {:14}  {}",
                    env.name,
                    env.observation_space.to_string(),
                    env.action_space.to_string(),
                    algos.join(", ")
                );
            }
            println!(
                "Gymnasium ids (CartPole-v1, ALE/Pong-v5, ...) run from Python: flatrl.train(config, run_dir, env=...)"
            );
            Ok(0)
        }
        Command::Plan { config, set } => {
            let parsed = read(&config, &set.overrides())?;
            let planned = crate::run::plan(registry, &parsed)?;
            println!("{}", planned.plan);
            for warning in &planned.warnings {
                println!("warning: {warning}");
            }
            match (&planned.refused, planned.limit) {
                (Some(why), Limit::Budget(_)) => {
                    println!("does not fit run.budget: {why}");
                    Ok(1)
                }
                (Some(why), _) => {
                    println!("does not fit the available memory: {why}");
                    Ok(1)
                }
                (None, Limit::Budget(_)) => {
                    println!("fits run.budget");
                    Ok(0)
                }
                (None, Limit::Available(bytes)) => {
                    println!(
                        "fits the available memory ({} available; no run.budget)",
                        rl_core::Bytes(bytes)
                    );
                    Ok(0)
                }
                (None, _) => {
                    println!(
                        "no run.budget to check against (and no reading of the available memory)"
                    );
                    Ok(0)
                }
            }
        }
        Command::Eval {
            run_dir,
            episodes,
            checkpoint,
            seed,
        } => {
            let evaluated =
                crate::run::eval(registry, &run_dir, checkpoint.into(), episodes, seed)?;
            println!("{}", json(&evaluated)?);
            Ok(0)
        }
        Command::Plot {
            run_dirs,
            out,
            y,
            x,
            smooth,
        } => {
            let out = match (out, run_dirs.as_slice()) {
                (Some(out), _) => out,
                (None, [one]) => one.join(crate::run::CURVE_FILE),
                (None, _) => PathBuf::from("curves.png"),
            };
            let options = crate::run::PlotOptions {
                y,
                x: match x {
                    XFlag::EnvSteps => crate::run::XAxis::EnvSteps,
                    XFlag::WallS => crate::run::XAxis::WallSeconds,
                },
                smooth,
            };
            crate::run::plot_with(&run_dirs, &out, &options)?;
            eprintln!("wrote {}", out.display());
            Ok(0)
        }
        Command::Export {
            run_dir,
            format: Format::Safetensors,
            checkpoint,
            out,
        } => {
            let exported = crate::run::export(&run_dir, checkpoint.into(), out.as_deref())?;
            println!("{}", json(&exported)?);
            Ok(0)
        }
    }
}

fn json(value: &impl serde::Serialize) -> Result<String, Error> {
    serde_json::to_string(value).map_err(|e| Error::Usage(format!("output: {e}")))
}

/// Prints the result line; exit code 130 for an interrupted run.
fn report(trained: Trained) -> Result<u8, Error> {
    println!("{}", json(&trained.result)?);
    if trained.interrupted {
        eprintln!(
            "interrupted: saved at {} env steps; continue with `rl resume {}`",
            trained.result.total_env_steps,
            trained.dir.display()
        );
        return Ok(130);
    }
    Ok(0)
}

/// Reads a config file with overrides; errors name the file.
fn read(path: &Path, overrides: &[String]) -> Result<Config, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Usage(format!(
            "{}: cannot read the config ({e}): give a TOML file, e.g. configs/ppo_cartpole.toml",
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

/// `runs/<config file stem>`, or the first of `-2`, `-3` ... not taken.
fn default_out(config: &Path) -> PathBuf {
    let stem = config
        .file_stem()
        .map_or_else(|| "run".to_owned(), |s| s.to_string_lossy().into_owned());
    let base = Path::new("runs");
    let mut out = base.join(&stem);
    let mut n = 2;
    while out.exists() {
        out = base.join(format!("{stem}-{n}"));
        n += 1;
    }
    out
}

/// A flag set by the first Ctrl-C or SIGTERM (the run then ends cleanly); a second
/// one exits at once with code 130.
fn stop_flag() -> Result<Arc<AtomicBool>, Error> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = Arc::clone(&flag);
    ctrlc::set_handler(move || {
        if set.swap(true, Ordering::SeqCst) {
            eprintln!("stopped without saving");
            std::process::exit(130);
        }
    })
    .map_err(|e| Error::Usage(format!("cannot handle Ctrl-C: {e}")))?;
    Ok(flag)
}
