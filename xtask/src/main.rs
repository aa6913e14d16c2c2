//! `cargo xtask`: developer commands for the rl workspace (the cargo-xtask pattern).
//!
//! Everything CI does is written here in Rust so that it runs the same way on a laptop
//! and on a fresh CI machine with nothing but the Rust toolchain installed. Run
//! `cargo xtask help` for the list of commands.
//!
//! Progress messages (`==> step: command`) go to stderr, like cargo's own, so that the
//! stdout of the commands run (the JSON lines of the benches above all) stays untouched.

mod bench;
mod boundaries;
mod ci;
mod cmd;
mod graph;
mod loc;
mod metadata;
mod python;
mod reliability;
mod venv;

use std::fmt;
use std::process::ExitCode;

use cmd::Workspace;

/// The help text, printed by `cargo xtask help` and after every usage error.
const USAGE: &str = "\
cargo xtask: developer commands for the rl workspace

Usage: cargo xtask <COMMAND> [ARGS...]

Commands:
  ci [--skip STEP]... [--only STEP]...
      Run the CI pipeline, cheapest step first, and stop at the first failing step.
      Steps, in order: fmt, boundaries, python-env, clippy, test, python, doc,
      examples, reliability, each-crate (python-env: the CI virtualenv target/ci-venv;
      python: the flatrl wheel built, installed there, and its pytest suite;
      reliability: ptx, crash-test --kills 200 --runs 10).
      --skip STEP leaves a step out; --only STEP runs only the steps named (both
      repeatable, also as --skip=STEP / --only=STEP).

  boundaries
      Check the dependency boundaries on the resolved graph (default features and
      --all-features): no workspace crate reaches dfdx (rl-nn's test oracle, a
      dev-dependency only);
      cudarc only behind a `cuda` feature and never under rl-core or rl-envs;
      internal edges only as the design allows.

  bench [NAME...] [[--] ARGS...]
      Run bench targets of the `rl` package (all of them when no NAME is given) with
      `cargo bench --quiet -p rl --all-features --bench NAME -- ARGS`. The first
      argument is a bench name; the following ones are more bench names while they
      name bench targets, and everything after them (an optional `--` dropped) is
      forwarded to every bench binary: `cargo xtask bench storage --atari`.
      The benches' JSON lines reach stdout untouched.

  bench python [--python PATH]
      Build the flatrl wheel, install it into the interpreter at PATH (default: the
      CI virtualenv target/ci-venv) and run crates/rl-python/bench/python_bench.py
      there: JSON lines for replay extend/sample and vector-env steps from Python, with
      cpprb, torchrl and envpool measured beside flatrl when that interpreter has them.

  crash-test [--kills N] [--runs N] [--seed S]
      --kills N: kill writers of a replay buffer file with SIGKILL N times (while
      creating the file, while the ring wraps, at random moments), reopen after each
      kill and check that no committed row a later write did not overwrite is lost
      and no row is torn. Ends with one JSON line:
      {\"kills\":N,\"committed_rows_lost\":0,\"torn_rows\":0,\"panics\":0,\"open_errors\":0}
      --runs N: build the release `rl` binary and SIGKILL `rl train` and `rl resume`
      N times in all (during start-up, mid-run, during a checkpoint save) on short runs
      of configs/ (PPO, SAC, DQN, recurrent PPO in turn), each run directory under
      target/crash-test/runs killed 1 to 3 times, then resumed to the end and checked
      (result.json at the budget or the goal, `rl plot`, `rl eval`, metrics.jsonl never
      going back). Ends with one JSON line:
      {\"bench\":\"crash-runs\",\"kills\":N,\"resumed\":N,\"broken_run_dirs\":0,
       \"metrics_non_monotone\":0,\"lost_minutes_max\":X}
      Each flag selects its part; both run both (one line each); neither runs the
      buffer-file part with 200 kills. --seed S fixes every random choice (default: the
      clock); a failure names the seed and the command that reproduces it.

  loc [--check]
      Lines of Rust per crate, tests apart (tests.rs, *_tests.rs and tests/ folders), as
      JSON lines {\"loc\":CRATE,\"lines\":N,\"test_lines\":M}, and every file longer
      than 1,500 lines; --check fails when there is one (a step of `ci boundaries`).

  ptx
      Assemble rl-storage's hand-written gather PTX with ptxas (from the CI
      virtualenv, or $RL_PTXAS) for sm_52, sm_80 and sm_90; fail on a PTX error.

  help
      Print this text.";

/// A mistake in the command line: reported with the usage text and exit code 2.
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Returns a [`UsageError`] from the enclosing function, `format!`-style.
macro_rules! usage_error {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::UsageError(format!($($arg)*))))
    };
}
pub(crate) use usage_error;

/// Parses the command line, runs the command and maps the outcome to an exit code:
/// 0 on success, 1 when a step fails, 2 on a usage error.
fn main() -> ExitCode {
    let args = match std::env::args_os()
        .skip(1)
        .map(|arg| arg.into_string())
        .collect::<Result<Vec<String>, _>>()
    {
        Ok(args) => args,
        Err(arg) => {
            eprintln!("error: argument {arg:?} is not valid UTF-8\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match dispatch(&args) {
        Ok(code) => code,
        Err(err) => {
            if let Some(usage) = err.downcast_ref::<UsageError>() {
                eprintln!("error: {usage}\n\n{USAGE}");
                ExitCode::from(2)
            } else {
                eprintln!("error: {err:#}");
                ExitCode::FAILURE
            }
        }
    }
}

/// Runs the command named by the first argument with the remaining arguments.
fn dispatch(args: &[String]) -> anyhow::Result<ExitCode> {
    let Some((command, rest)) = args.split_first() else {
        usage_error!("no command given");
    };
    match command.as_str() {
        "ci" => ci::run(&Workspace::detect()?, rest)?,
        "boundaries" => {
            no_arguments(command, rest)?;
            boundaries::run(&Workspace::detect()?)?;
        }
        "bench" => bench::run(&Workspace::detect()?, rest)?,
        "crash-test" => reliability::run(&Workspace::detect()?, rest)?,
        "loc" => loc::run(&Workspace::detect()?, rest)?,
        "ptx" => {
            no_arguments(command, rest)?;
            reliability::ptx(&Workspace::detect()?)?;
        }
        // Reserved, deliberately not in USAGE until the storage work lands.
        "mem" => {
            eprintln!("not yet implemented: memory reports arrive with the storage issue");
            return Ok(ExitCode::from(2));
        }
        "help" | "-h" | "--help" => println!("{USAGE}"),
        other => usage_error!("unknown command `{other}`"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Fails with a usage error when a command that takes no arguments was given some.
fn no_arguments(command: &str, rest: &[String]) -> anyhow::Result<()> {
    if let Some(first) = rest.first() {
        usage_error!("`{command}` takes no arguments, got `{first}`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds an owned argument list.
    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn unknown_and_missing_commands_are_usage_errors() {
        for line in [args(&[]), args(&["frobnicate"]), args(&["boundaries", "x"])] {
            let err = dispatch(&line).expect_err("must fail");
            assert!(
                err.downcast_ref::<UsageError>().is_some(),
                "{line:?}: {err}"
            );
        }
    }

    #[test]
    fn mem_is_hidden_from_usage() {
        assert!(!USAGE.contains("mem"));
    }
}
