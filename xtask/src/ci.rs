//! `cargo xtask ci`: the CI pipeline, cheapest step first.

use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};

use crate::cmd::{Cmd, Workspace, announce, human};
use crate::{boundaries, metadata, python, reliability, usage_error, venv};

/// One step of the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// `cargo fmt --all -- --check`.
    Fmt,
    /// The dependency boundary check.
    Boundaries,
    /// The CI virtualenv under `target/ci-venv` with the pinned Python packages.
    PythonEnv,
    /// `cargo clippy` on everything, warnings denied.
    Clippy,
    /// Unit, integration and doc tests.
    Test,
    /// The `flatrl` wheel built, installed in the CI virtualenv, and its pytest suite.
    Python,
    /// `cargo doc`, rustdoc warnings denied.
    Doc,
    /// Build every example.
    Examples,
    /// Assemble the gather PTX with ptxas; the crash tests (`cargo xtask crash-test
    /// --kills 200 --runs 10`: the memmap writer, then `rl train`/`rl resume`).
    Reliability,
    /// `cargo check` each library crate alone with its default features.
    EachCrate,
}

impl Step {
    /// Every step, in the order they run (cheapest first).
    pub(crate) const ALL: [Step; 10] = [
        Step::Fmt,
        Step::Boundaries,
        Step::PythonEnv,
        Step::Clippy,
        Step::Test,
        Step::Python,
        Step::Doc,
        Step::Examples,
        Step::Reliability,
        Step::EachCrate,
    ];

    /// The name used on the command line and in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Step::Fmt => "fmt",
            Step::Boundaries => "boundaries",
            Step::PythonEnv => "python-env",
            Step::Clippy => "clippy",
            Step::Test => "test",
            Step::Python => "python",
            Step::Doc => "doc",
            Step::Examples => "examples",
            Step::Reliability => "reliability",
            Step::EachCrate => "each-crate",
        }
    }

    /// The step called `name`, if any.
    pub(crate) fn parse(name: &str) -> Option<Step> {
        Step::ALL.into_iter().find(|step| step.name() == name)
    }

    /// The single command a step runs, for the steps that are one command.
    fn command(self) -> Option<Cmd> {
        let cmd = match self {
            Step::Fmt => Cmd::cargo(["fmt", "--all", "--", "--check"]),
            Step::Clippy => Cmd::cargo([
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ]),
            Step::Test => {
                Cmd::cargo(["test", "--workspace", "--all-features"]).env("RUST_BACKTRACE", "1")
            }
            Step::Doc => Cmd::cargo(["doc", "--workspace", "--all-features", "--no-deps"])
                .env("RUSTDOCFLAGS", "-D warnings"),
            Step::Examples => Cmd::cargo(["build", "--workspace", "--all-features", "--examples"]),
            Step::Boundaries
            | Step::PythonEnv
            | Step::Python
            | Step::Reliability
            | Step::EachCrate => return None,
        };
        Some(cmd)
    }
}

/// Parses `--skip STEP`, `--only STEP` (both repeatable, also `--flag=STEP`) into the
/// steps to run, in pipeline order.
pub(crate) fn parse_args(args: &[String]) -> Result<Vec<Step>> {
    let mut only = Vec::new();
    let mut skip = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag, Some(value.to_owned())),
            None => (arg.as_str(), None),
        };
        let list = match flag {
            "--skip" => &mut skip,
            "--only" => &mut only,
            _ => usage_error!("unknown argument `{arg}` for `ci`"),
        };
        let Some(value) = inline.or_else(|| args.next().cloned()) else {
            usage_error!("`{flag}` needs a step name");
        };
        let Some(step) = Step::parse(&value) else {
            let names: Vec<&str> = Step::ALL.iter().map(|s| s.name()).collect();
            usage_error!("unknown step `{value}`; steps: {}", names.join(", "));
        };
        list.push(step);
    }
    let selected: Vec<Step> = Step::ALL
        .into_iter()
        .filter(|step| (only.is_empty() || only.contains(step)) && !skip.contains(step))
        .collect();
    if selected.is_empty() {
        usage_error!("no step left to run");
    }
    Ok(selected)
}

/// What became of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// It ran and passed.
    Passed(Duration),
    /// It ran and failed.
    Failed(Duration),
    /// Left out by `--skip`/`--only`.
    Skipped,
    /// Not reached: an earlier step failed.
    NotRun,
}

/// Why a step failed and how to reproduce just that.
#[derive(Debug)]
struct Failure {
    /// What went wrong.
    reason: anyhow::Error,
    /// A command line that reproduces the failure alone.
    reproduce: String,
}

/// Runs the selected steps in order, stops at the first failure, prints a summary.
pub(crate) fn run(ws: &Workspace, args: &[String]) -> Result<()> {
    let selected = parse_args(args)?;
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut failure = None;
    for step in Step::ALL {
        let outcome = if !selected.contains(&step) {
            Outcome::Skipped
        } else if failure.is_some() {
            Outcome::NotRun
        } else {
            let start = Instant::now();
            let result = run_step(ws, step);
            let elapsed = start.elapsed();
            match result {
                Ok(()) => {
                    eprintln!("<== {}: ok in {}", step.name(), human(elapsed));
                    Outcome::Passed(elapsed)
                }
                Err(err) => {
                    eprintln!("<== {}: FAILED after {}", step.name(), human(elapsed));
                    failure = Some((step, elapsed, err));
                    Outcome::Failed(elapsed)
                }
            }
        };
        rows.push((step, outcome));
    }
    eprintln!("\n{}", summary(&rows, started.elapsed()));
    match failure {
        None => {
            eprintln!("ci: all {} selected step(s) passed", selected.len());
            Ok(())
        }
        Some((step, elapsed, Failure { reason, reproduce })) => Err(anyhow!(
            "step `{}` failed after {}: {reason:#}\n  reproduce with: {reproduce}",
            step.name(),
            human(elapsed)
        )),
    }
}

/// Runs one step, printing `==> step: command` before each command.
fn run_step(ws: &Workspace, step: Step) -> Result<(), Failure> {
    if let Some(mut cmd) = step.command() {
        if step == Step::Test {
            // Tests that drive Python (reading exported files, the wheel) find the CI
            // virtualenv here; without it (`--skip python-env`) they say they skipped.
            let python = venv::python(ws);
            if python.is_file() {
                cmd = cmd.env("RL_TEST_PYTHON", &python.to_string_lossy());
            }
        }
        announce(step.name(), &cmd.display());
        return cmd.run(ws).map_err(|reason| Failure {
            reason,
            reproduce: cmd.display(),
        });
    }
    match step {
        Step::Boundaries => boundaries::run(ws).map_err(|reason| Failure {
            reason,
            reproduce: "cargo xtask boundaries".to_owned(),
        }),
        Step::PythonEnv => venv::ensure(ws).map(drop).map_err(|reason| Failure {
            reason,
            reproduce: "cargo xtask ci --only python-env".to_owned(),
        }),
        Step::Python => python::ci(ws).map_err(|reason| Failure {
            reason,
            reproduce: "cargo xtask ci --only python-env --only python".to_owned(),
        }),
        Step::EachCrate => each_crate(ws),
        Step::Reliability => reliability::ci_step(ws).map_err(|reason| Failure {
            reason,
            reproduce: "cargo xtask ci --only reliability".to_owned(),
        }),
        _ => unreachable!("every other step is a single command"),
    }
}

/// `cargo check -p NAME --all-targets` for every library member except the facade.
fn each_crate(ws: &Workspace) -> Result<(), Failure> {
    let list = metadata::command(&["--no-deps"]);
    announce("each-crate", &list.display());
    let members = metadata::load(ws, &["--no-deps"])
        .and_then(|meta| metadata::members(&meta))
        .map_err(|reason| Failure {
            reason,
            reproduce: list.display(),
        })?;
    for member in members {
        if member.name == "rl" || !member.is_library() {
            continue;
        }
        let cmd = Cmd::cargo(["check", "-p", &member.name, "--all-targets"]);
        announce(&format!("each-crate ({})", member.name), &cmd.display());
        let start = Instant::now();
        cmd.run(ws).map_err(|reason| Failure {
            reason,
            reproduce: cmd.display(),
        })?;
        eprintln!("    {}: ok in {}", member.name, human(start.elapsed()));
    }
    Ok(())
}

/// The table of step outcomes and durations printed at the end.
fn summary(rows: &[(Step, Outcome)], total: Duration) -> String {
    let mut out = format!("{:<12} {:<8} {:>9}\n", "step", "result", "time");
    for &(step, outcome) in rows {
        let (result, time) = match outcome {
            Outcome::Passed(d) => ("ok", human(d)),
            Outcome::Failed(d) => ("FAILED", human(d)),
            Outcome::Skipped => ("skipped", String::new()),
            Outcome::NotRun => ("not run", String::new()),
        };
        let line = format!("{:<12} {result:<8} {time:>9}", step.name());
        out += line.trim_end();
        out.push('\n');
    }
    out += &format!("{:<12} {:<8} {:>9}", "total", "", human(total));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UsageError;

    /// Parses a `ci` command line given as words.
    fn parse(words: &[&str]) -> Result<Vec<&'static str>> {
        let args: Vec<String> = words.iter().map(|s| s.to_string()).collect();
        Ok(parse_args(&args)?.into_iter().map(Step::name).collect())
    }

    #[test]
    fn all_steps_by_default_cheapest_first() -> Result<()> {
        assert_eq!(
            parse(&[])?,
            [
                "fmt",
                "boundaries",
                "python-env",
                "clippy",
                "test",
                "python",
                "doc",
                "examples",
                "reliability",
                "each-crate"
            ]
        );
        Ok(())
    }

    #[test]
    fn skip_and_only() -> Result<()> {
        assert_eq!(
            parse(&["--skip", "test", "--skip=doc", "--skip", "each-crate"])?,
            [
                "fmt",
                "boundaries",
                "python-env",
                "clippy",
                "python",
                "examples",
                "reliability"
            ]
        );
        assert_eq!(parse(&["--only", "fmt"])?, ["fmt"]);
        assert_eq!(parse(&["--only", "doc", "--only=fmt"])?, ["fmt", "doc"]);
        assert_eq!(
            parse(&["--only", "fmt", "--only", "test", "--skip", "fmt"])?,
            ["test"]
        );
        Ok(())
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        for words in [
            &["--skip"][..],
            &["--only", "lint"],
            &["--fast"],
            &["--only", "fmt", "--skip", "fmt"],
        ] {
            let err = parse(words).expect_err("must fail");
            assert!(
                err.downcast_ref::<UsageError>().is_some(),
                "{words:?}: {err}"
            );
        }
    }

    #[test]
    fn step_commands_match_the_pipeline() {
        let shown = |step: Step| step.command().map(|cmd| cmd.display());
        assert_eq!(
            shown(Step::Fmt).as_deref(),
            Some("cargo fmt --all -- --check")
        );
        assert_eq!(
            shown(Step::Clippy).as_deref(),
            Some("cargo clippy --workspace --all-targets --all-features -- -D warnings")
        );
        assert_eq!(
            shown(Step::Test).as_deref(),
            Some("RUST_BACKTRACE=1 cargo test --workspace --all-features")
        );
        assert_eq!(
            shown(Step::Doc).as_deref(),
            Some("RUSTDOCFLAGS='-D warnings' cargo doc --workspace --all-features --no-deps")
        );
        assert_eq!(
            shown(Step::Examples).as_deref(),
            Some("cargo build --workspace --all-features --examples")
        );
        assert_eq!(shown(Step::Boundaries), None);
    }

    #[test]
    fn summary_lists_every_step() {
        let rows = [
            (Step::Fmt, Outcome::Passed(Duration::from_millis(300))),
            (Step::Boundaries, Outcome::Failed(Duration::from_secs(2))),
            (Step::Clippy, Outcome::NotRun),
            (Step::Test, Outcome::Skipped),
        ];
        let table = summary(&rows, Duration::from_secs(3));
        let lines: Vec<&str> = table.lines().map(str::trim_end).collect();
        assert_eq!(
            lines,
            [
                "step         result        time",
                "fmt          ok            0.3s",
                "boundaries   FAILED        2.0s",
                "clippy       not run",
                "test         skipped",
                "total                      3.0s",
            ]
        );
    }
}
