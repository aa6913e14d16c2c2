//! The Python package: `cargo xtask ci`'s `python` step (build the `flatrl` wheel with the
//! CI virtualenv's pinned maturin, install it there, run the pytest suite) and
//! `cargo xtask bench python [--python PATH]`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cmd::{Workspace, announce, human};
use crate::{usage_error, venv};

/// The crate maturin builds, relative to the workspace root.
const MANIFEST: &str = "crates/rl-python/Cargo.toml";
/// Where the wheel goes (emptied before each build, so it holds exactly one wheel).
const WHEELS: &str = "target/wheels/flatrl";
/// The pytest suite.
const TESTS: &str = "crates/rl-python/tests";
/// The benchmark script.
const BENCH: &str = "crates/rl-python/bench/python_bench.py";

/// Runs `command` with inherited output from the workspace root; fails unless it exits 0.
fn run(ws: &Workspace, label: &str, command: &mut Command) -> Result<()> {
    command.current_dir(&ws.root);
    let shown = format!("{command:?}");
    announce(label, &shown);
    let status = command
        .status()
        .with_context(|| format!("could not start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

/// Builds the release wheel with the CI virtualenv's maturin and returns its path.
pub(crate) fn build_wheel(ws: &Workspace) -> Result<PathBuf> {
    let python = venv::ensure(ws)?;
    let maturin = python.with_file_name("maturin");
    let out = ws.root.join(WHEELS);
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("emptying {}", out.display()))?;
    }
    let start = Instant::now();
    run(
        ws,
        "python (wheel)",
        Command::new(&maturin)
            .args(["build", "--release", "--quiet", "--manifest-path", MANIFEST])
            .arg("--interpreter")
            .arg(&python)
            .arg("--out")
            .arg(&out),
    )?;
    let wheel = std::fs::read_dir(&out)
        .with_context(|| format!("reading {}", out.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
        .with_context(|| format!("maturin wrote no wheel into {}", out.display()))?;
    eprintln!(
        "    built {} in {}",
        wheel.display(),
        human(start.elapsed())
    );
    Ok(wheel)
}

/// Installs `wheel` into `python` (replacing any installed flatrl; dependencies are the
/// interpreter's own).
fn install(ws: &Workspace, python: &Path, wheel: &Path) -> Result<()> {
    run(
        ws,
        "python (install)",
        Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(wheel),
    )
    .with_context(|| format!("installing the wheel into {}", python.display()))
}

/// The CI step: wheel, install into the CI virtualenv, pytest.
pub(crate) fn ci(ws: &Workspace) -> Result<()> {
    let wheel = build_wheel(ws)?;
    let python = venv::python(ws);
    install(ws, &python, &wheel)?;
    // -p no:cacheprovider: no .pytest_cache in the source tree.
    run(
        ws,
        "python (pytest)",
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", TESTS])
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )
}

/// Parses `[--python PATH]` (also `--python=PATH`).
pub(crate) fn parse_bench_args(args: &[String]) -> Result<Option<PathBuf>> {
    let mut python = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let value = match arg.split_once('=') {
            Some(("--python", value)) => value.to_owned(),
            None if arg == "--python" => match args.next() {
                Some(value) => value.clone(),
                None => usage_error!("`--python` needs the path of a Python interpreter"),
            },
            _ => usage_error!("unknown argument `{arg}` for `bench python`; use --python PATH"),
        };
        python = Some(PathBuf::from(value));
    }
    Ok(python)
}

/// `cargo xtask bench python [--python PATH]`: installs the wheel into the interpreter at
/// PATH (default: the CI virtualenv's) and runs the benchmark script with it.
pub(crate) fn bench(ws: &Workspace, args: &[String]) -> Result<()> {
    let python = parse_bench_args(args)?;
    let wheel = build_wheel(ws)?;
    let python = match python {
        Some(path) => {
            if !path.is_file() {
                bail!(
                    "no Python interpreter at {}: pass --python with the path of one (it needs numpy)",
                    path.display()
                );
            }
            path
        }
        None => venv::python(ws),
    };
    install(ws, &python, &wheel)?;
    run(
        ws,
        "bench python",
        Command::new(&python)
            .arg(BENCH)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UsageError;

    fn owned(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn bench_arguments() -> Result<()> {
        assert_eq!(parse_bench_args(&[])?, None);
        assert_eq!(
            parse_bench_args(&owned(&["--python", "/x/python"]))?,
            Some(PathBuf::from("/x/python"))
        );
        assert_eq!(
            parse_bench_args(&owned(&["--python=/y"]))?,
            Some(PathBuf::from("/y"))
        );
        for bad in [&["--python"][..], &["--pyton", "x"], &["x"]] {
            let err = parse_bench_args(&owned(bad)).expect_err("must fail");
            assert!(err.downcast_ref::<UsageError>().is_some(), "{bad:?}: {err}");
        }
        Ok(())
    }
}
