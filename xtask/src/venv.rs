//! The CI virtualenv: `target/ci-venv`, made from `xtask/requirements-ci.txt`.
//!
//! A fresh machine has only `python3` with pip; this creates the virtualenv and installs
//! the pinned packages, and does nothing when the virtualenv already holds exactly the
//! pinned list (a stamp file records the list it was made from).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cmd::{Workspace, announce};

/// The requirements file, relative to the workspace root.
const REQUIREMENTS: &str = "xtask/requirements-ci.txt";
/// The virtualenv, relative to the workspace root.
const VENV: &str = "target/ci-venv";
/// The stamp inside the virtualenv: a copy of the requirements it was made from.
const STAMP: &str = "rl-requirements.txt";

/// The interpreter that creates the virtualenv: `$RL_PYTHON`, else `python3`.
fn base_python() -> String {
    std::env::var("RL_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// The virtualenv's interpreter.
pub(crate) fn python(ws: &Workspace) -> PathBuf {
    ws.root.join(VENV).join("bin").join("python")
}

/// Creates or updates the virtualenv so that it holds the pinned packages, and returns
/// its interpreter.
pub(crate) fn ensure(ws: &Workspace) -> Result<PathBuf> {
    let requirements = ws.root.join(REQUIREMENTS);
    let wanted = std::fs::read_to_string(&requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    let venv = ws.root.join(VENV);
    let stamp = venv.join(STAMP);
    let python = python(ws);
    if python.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|have| have == wanted) {
        announce("python-env", &format!("{VENV} is up to date"));
        return Ok(python);
    }
    if !python.is_file() {
        let base = base_python();
        announce("python-env", &format!("{base} -m venv {VENV}"));
        run(Command::new(&base).args(["-m", "venv"]).arg(&venv)).with_context(|| {
            format!("creating the virtualenv with `{base}` (set RL_PYTHON to another interpreter)")
        })?;
    }
    announce("python-env", &format!("pip install -r {REQUIREMENTS}"));
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "-r",
        ])
        .arg(&requirements))?;
    std::fs::write(&stamp, &wanted).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(python)
}

/// Runs a command with inherited output and fails unless it exits 0.
fn run(command: &mut Command) -> Result<()> {
    let shown = format!("{command:?}");
    let status = command
        .status()
        .with_context(|| format!("could not start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}
