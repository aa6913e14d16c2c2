//! Shared by the benchmark binaries: child processes per configuration (peak RSS is per
//! process), medians, JSON lines.

#![allow(
    dead_code,
    reason = "each bench binary uses a different part of this module"
)]

use std::process::Command;

use anyhow::{Context, bail};

/// The arguments this bench binary was given, without the `--bench` cargo appends.
pub(crate) fn args() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect()
}

/// Runs this binary `processes` times with `args` and returns every JSON line the
/// children printed.
pub(crate) fn run_children(
    args: &[String],
    processes: usize,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let exe = std::env::current_exe()?;
    let mut lines = Vec::new();
    for _ in 0..processes {
        let output = Command::new(&exe)
            .args(args)
            .output()
            .with_context(|| format!("running {args:?}"))?;
        if !output.status.success() {
            bail!(
                "{args:?} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            lines.push(
                serde_json::from_str(line).with_context(|| format!("a JSON line from {args:?}"))?,
            );
        }
    }
    Ok(lines)
}

/// The line with the median `key` among `lines` (`None` if there are none).
pub(crate) fn median_line<'a>(
    lines: &[&'a serde_json::Value],
    key: &str,
) -> Option<&'a serde_json::Value> {
    let mut sorted = lines.to_vec();
    sorted.sort_by(|a, b| value(a, key).total_cmp(&value(b, key)));
    sorted.get(sorted.len() / 2).copied()
}

fn value(line: &serde_json::Value, key: &str) -> f64 {
    line[key].as_f64().unwrap_or(0.0)
}

/// The median of `values` (sorted in place). Zero for an empty slice.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}
