//! `cargo xtask bench`: run the `harness = false` bench targets of the `rl` package.
//!
//! Bench binaries print JSON lines on stdout; cargo's messages and ours go to stderr,
//! so `cargo xtask bench > results.jsonl` captures only the benches' output.

use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};

use crate::cmd::{Cmd, Workspace, announce, human};
use crate::{metadata, usage_error};

/// The package that owns the benches.
const PACKAGE: &str = "rl";

/// The bench that prints the machine's single-core FMA peak; every run starts with it so
/// that kernel figures can be read as a fraction of the limit of the machine they ran on.
const PEAK: &str = "peak";

/// The benches to run for the requested `names` (every bench when empty): the peak bench
/// first, once, whenever the package has it.
pub(crate) fn with_peak_first(names: &[String], benches: &[String]) -> Vec<String> {
    let chosen = if names.is_empty() { benches } else { names };
    let has_peak = benches.iter().any(|b| b == PEAK);
    has_peak
        .then(|| PEAK.to_owned())
        .into_iter()
        .chain(chosen.iter().filter(|b| *b != PEAK).cloned())
        .collect()
}

/// Splits `bench` arguments into bench names and arguments to forward, given the bench
/// targets that exist. The first argument is a bench name unless it starts with `-`;
/// the following arguments are more names while they name bench targets; the rest is
/// forwarded, a leading `--` dropped. No name means every bench.
pub(crate) fn split_args(
    args: &[String],
    benches: &[String],
) -> Result<(Vec<String>, Vec<String>)> {
    let mut names = Vec::new();
    let mut rest = args;
    if let Some((first, tail)) = rest.split_first()
        && !first.starts_with('-')
    {
        if !benches.contains(first) {
            usage_error!(
                "no bench target `{first}` in package `{PACKAGE}`; bench targets: {}",
                if benches.is_empty() {
                    "none".to_owned()
                } else {
                    benches.join(", ")
                }
            );
        }
        names.push(first.clone());
        rest = tail;
        while let Some((next, tail)) = rest.split_first()
            && benches.contains(next)
        {
            names.push(next.clone());
            rest = tail;
        }
    }
    if rest.first().is_some_and(|arg| arg == "--") {
        rest = &rest[1..];
    }
    Ok((names, rest.to_vec()))
}

/// The command that runs one bench with forwarded arguments.
pub(crate) fn command(name: &str, forward: &[String]) -> Cmd {
    let cmd = Cmd::cargo([
        "bench",
        "--quiet",
        "-p",
        PACKAGE,
        "--all-features",
        "--bench",
        name,
    ]);
    if forward.is_empty() {
        cmd
    } else {
        cmd.args(["--"]).args(forward.iter().cloned())
    }
}

/// The bench targets of the `rl` package, from `cargo metadata --no-deps`.
fn bench_targets(ws: &Workspace) -> Result<Vec<String>> {
    let meta = metadata::load(ws, &["--no-deps"])?;
    let members = metadata::members(&meta)?;
    let rl = members
        .iter()
        .find(|member| member.name == PACKAGE)
        .with_context(|| format!("package `{PACKAGE}` is not a workspace member"))?;
    Ok(rl.targets_of_kind("bench"))
}

/// Runs the benches named in `args` (all of them when none is) one after the other,
/// stopping at the first failure.
pub(crate) fn run(ws: &Workspace, args: &[String]) -> Result<()> {
    if let Some(("python", rest)) = args.split_first().map(|(a, r)| (a.as_str(), r)) {
        return crate::python::bench(ws, rest);
    }
    let benches = bench_targets(ws)?;
    let (names, forward) = split_args(args, &benches)?;
    if benches.is_empty() {
        bail!("package `{PACKAGE}` has no bench targets");
    }
    for name in &with_peak_first(&names, &benches) {
        // The peak bench takes no arguments: those are for the benches asked for.
        let cmd = command(name, if name == PEAK { &[] } else { &forward });
        announce(&format!("bench {name}"), &cmd.display());
        let start = Instant::now();
        cmd.run(ws).map_err(|err| {
            anyhow!(
                "bench `{name}` failed: {err:#}\n  reproduce with: {}",
                cmd.display()
            )
        })?;
        eprintln!("<== bench {name}: ok in {}", human(start.elapsed()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::UsageError;

    /// Owned strings from words.
    fn owned(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    /// Splits `words` against the benches `envs`, `storage` and `collect`.
    fn split(words: &[&str]) -> Result<(Vec<String>, Vec<String>)> {
        split_args(&owned(words), &owned(&["envs", "storage", "collect"]))
    }

    #[test]
    fn the_peak_runs_first_and_once() {
        let benches = owned(&["envs", "nn", "peak"]);
        assert_eq!(
            with_peak_first(&[], &benches),
            owned(&["peak", "envs", "nn"])
        );
        assert_eq!(
            with_peak_first(&owned(&["nn"]), &benches),
            owned(&["peak", "nn"])
        );
        assert_eq!(
            with_peak_first(&owned(&["peak"]), &benches),
            owned(&["peak"])
        );
        // A package without the peak bench runs what was asked.
        assert_eq!(
            with_peak_first(&owned(&["nn"]), &owned(&["nn"])),
            owned(&["nn"])
        );
    }

    #[test]
    fn names_then_forwarded_arguments() -> Result<()> {
        assert_eq!(split(&[])?, (vec![], vec![]));
        assert_eq!(
            split(&["storage", "--atari"])?,
            (owned(&["storage"]), owned(&["--atari"]))
        );
        assert_eq!(
            split(&["envs", "collect", "--", "--quick", "x"])?,
            (owned(&["envs", "collect"]), owned(&["--quick", "x"]))
        );
        // After the first name, a word that is no bench is forwarded, with the rest.
        assert_eq!(
            split(&["storage", "atari", "envs"])?,
            (owned(&["storage"]), owned(&["atari", "envs"]))
        );
        // No name: the arguments go to every bench.
        assert_eq!(split(&["--", "--quick"])?, (vec![], owned(&["--quick"])));
        assert_eq!(split(&["--quick"])?, (vec![], owned(&["--quick"])));
        Ok(())
    }

    #[test]
    fn an_unknown_first_name_is_a_usage_error() {
        let err = split(&["strage"]).expect_err("must fail");
        assert!(err.downcast_ref::<UsageError>().is_some(), "{err}");
        assert!(err.to_string().contains("envs, storage, collect"), "{err}");
    }

    #[test]
    fn the_bench_command() {
        assert_eq!(
            command("storage", &owned(&["--atari"])).display(),
            "cargo bench --quiet -p rl --all-features --bench storage -- --atari"
        );
        assert_eq!(
            command("envs", &[]).display(),
            "cargo bench --quiet -p rl --all-features --bench envs"
        );
    }
}
