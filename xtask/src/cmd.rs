//! Running commands from the workspace root, and printing them as they run.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// Where and how commands run: the workspace root, the cargo binary, the colour choice.
#[derive(Debug, Clone)]
pub(crate) struct Workspace {
    /// The directory holding the root `Cargo.toml`; every command runs there.
    pub(crate) root: PathBuf,
    /// The cargo binary to run: `$CARGO` (set by `cargo run`) or `cargo` from `PATH`.
    cargo: OsString,
    /// Whether to set `CARGO_TERM_COLOR=always` on the commands run.
    color: bool,
}

impl Workspace {
    /// Finds the workspace root (the parent of xtask's manifest directory) and decides
    /// on colour: forced on only when stdout is a terminal and `CI` is not `true`.
    pub(crate) fn detect() -> Result<Self> {
        let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .filter(|dir| dir.join("Cargo.toml").is_file())
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        let root = manifest_dir
            .parent()
            .with_context(|| format!("{} has no parent directory", manifest_dir.display()))?
            .to_path_buf();
        if !root.join("Cargo.toml").is_file() {
            bail!("no Cargo.toml in the workspace root {}", root.display());
        }
        let in_ci = std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
        Ok(Self {
            root,
            cargo: std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
            color: std::io::stdout().is_terminal() && !in_ci,
        })
    }
}

/// A cargo command line with extra environment variables, kept printable so that a
/// failure can say exactly how to reproduce it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cmd {
    /// The arguments after `cargo`.
    args: Vec<String>,
    /// Environment variables set for this command only.
    envs: Vec<(String, String)>,
}

impl Cmd {
    /// `cargo` with these arguments.
    pub(crate) fn cargo<I, S>(args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            args: args.into_iter().map(Into::into).collect(),
            envs: Vec::new(),
        }
    }

    /// Appends more arguments.
    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for this command.
    pub(crate) fn env(mut self, key: &str, value: &str) -> Self {
        self.envs.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The command as a shell line to copy and paste, e.g.
    /// `RUSTDOCFLAGS='-D warnings' cargo doc --workspace`.
    pub(crate) fn display(&self) -> String {
        let mut words: Vec<String> = self
            .envs
            .iter()
            .map(|(key, value)| format!("{key}={}", shell_quote(value)))
            .collect();
        words.push("cargo".to_owned());
        words.extend(self.args.iter().map(|arg| shell_quote(arg)));
        words.join(" ")
    }

    /// The process to spawn, run from the workspace root.
    fn command(&self, ws: &Workspace) -> Command {
        let mut command = Command::new(&ws.cargo);
        command.args(&self.args).current_dir(&ws.root);
        if ws.color {
            command.env("CARGO_TERM_COLOR", "always");
        }
        for (key, value) in &self.envs {
            command.env(key, value);
        }
        command
    }

    /// Runs the command with inherited stdin/stdout/stderr and fails unless it exits 0.
    pub(crate) fn run(&self, ws: &Workspace) -> Result<()> {
        let status = self
            .command(ws)
            .status()
            .with_context(|| format!("could not start `{}`", self.display()))?;
        if !status.success() {
            bail!("`{}` failed ({status})", self.display());
        }
        Ok(())
    }

    /// Runs the command, capturing stdout (stderr stays on the terminal), and returns
    /// stdout; fails unless it exits 0.
    pub(crate) fn read_stdout(&self, ws: &Workspace) -> Result<String> {
        let output = self
            .command(ws)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("could not start `{}`", self.display()))?;
        if !output.status.success() {
            bail!("`{}` failed ({})", self.display(), output.status);
        }
        String::from_utf8(output.stdout)
            .with_context(|| format!("`{}` printed invalid UTF-8", self.display()))
    }
}

/// Quotes a word for a POSIX shell when it needs it.
fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Prints the start of a step: `==> label: command`.
pub(crate) fn announce(label: &str, what: &str) {
    eprintln!("==> {label}: {what}");
}

/// Formats a duration for humans: `12.3s`, or `4m 05s` past a minute.
pub(crate) fn human(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else {
        let whole = duration.as_secs();
        format!("{}m {:02}s", whole / 60, whole % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_what_the_shell_would_split() {
        let cmd = Cmd::cargo(["doc", "--workspace"]).env("RUSTDOCFLAGS", "-D warnings");
        assert_eq!(
            cmd.display(),
            "RUSTDOCFLAGS='-D warnings' cargo doc --workspace"
        );
        let cmd = Cmd::cargo(["clippy", "--", "-D", "warnings"]);
        assert_eq!(cmd.display(), "cargo clippy -- -D warnings");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human(Duration::from_millis(1234)), "1.2s");
        assert_eq!(human(Duration::from_secs(245)), "4m 05s");
    }
}
