//! Shared by the benchmark binaries: child processes per configuration (peak RSS is per
//! process), medians, JSON lines.

#![allow(
    dead_code,
    reason = "each bench binary uses a different part of this module"
)]

use std::process::Command;
use std::time::Instant;

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

/// Median milliseconds of `reps` runs of `f`, after `warmup` runs.
pub(crate) fn median_ms(
    warmup: usize,
    reps: usize,
    mut f: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    for _ in 0..warmup {
        f()?;
    }
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(&mut times))
}

/// SplitMix64: enough randomness for a benchmark, no extra dependency.
pub(crate) struct SplitMix(pub(crate) u64);

impl SplitMix {
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[low, high)`.
    pub(crate) fn uniform(&mut self, low: f32, high: f32) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        low + (high - low) * unit
    }

    /// Uniform floats in `[-scale, scale)`.
    pub(crate) fn floats(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| self.uniform(-scale, scale)).collect()
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * u64::from(n)) >> 32) as u32
    }
}
