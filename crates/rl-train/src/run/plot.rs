//! Learning curves as PNG: mean training return against env steps, one line per run,
//! drawn in pure Rust (plotters' bitmap backend) with an embedded font (DejaVu Sans),
//! so a machine without system fonts draws the same picture.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use serde_json::Value;

use super::rundir::METRICS_FILE;
use super::{Error, Result};

/// The family name the embedded font is registered under.
const FONT: &str = "sans-serif";

/// Registers DejaVu Sans (its license allows embedding) once per process.
fn font() -> Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok());
    if ok {
        Ok(())
    } else {
        Err(Error::Plot("the embedded font does not load".into()))
    }
}

/// One run's curve: `(env steps, mean return)` of its metrics lines that have a return.
fn curve(dir: &Path) -> Result<Vec<(f64, f64)>> {
    let path = dir.join(METRICS_FILE);
    let file = File::open(&path).map_err(|e| {
        Error::Usage(format!(
            "{}: not a run directory with metrics ({} cannot be read: {e})",
            dir.display(),
            path.display()
        ))
    })?;
    let mut points = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| Error::io("reading", &path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&line).map_err(|e| {
            Error::Usage(format!(
                "{} line {}: not a metrics line ({e})",
                path.display(),
                i + 1
            ))
        })?;
        let steps = value.get("env_steps").and_then(Value::as_f64);
        let mean = value.get("return_mean").and_then(Value::as_f64);
        if let (Some(steps), Some(mean)) = (steps, mean) {
            points.push((steps, mean));
        }
    }
    Ok(points)
}

/// Draws the learning curves of the runs in `dirs` (their `metrics.jsonl`) into the PNG
/// `out`: mean training return against env steps, one line per run named by its
/// folder. Runs with no finished episode yet draw nothing (the axes remain).
///
/// # Errors
/// A folder without metrics, a metrics line that does not parse, a file that cannot
/// be written.
pub fn plot(dirs: &[PathBuf], out: &Path) -> Result<()> {
    font()?;
    let mut curves = Vec::with_capacity(dirs.len());
    for dir in dirs {
        let name = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        curves.push((name, curve(dir)?));
    }
    let points = curves.iter().flat_map(|(_, c)| c.iter());
    let (mut x_max, mut y_min, mut y_max) = (1.0f64, f64::INFINITY, f64::NEG_INFINITY);
    for &(x, y) in points {
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    if !y_min.is_finite() {
        (y_min, y_max) = (0.0, 1.0);
    }
    let pad = ((y_max - y_min) * 0.05).max(1e-3);
    let draw = |e: &dyn std::fmt::Display| Error::Plot(format!("{}: {e}", out.display()));
    let root = BitMapBackend::new(out, (1024, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("mean training return", (FONT, 28))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max, (y_min - pad)..(y_max + pad))
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc("env steps")
        .y_desc("return")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            if y_max - y_min >= 20.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        })
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()
        .map_err(|e| draw(&e))?;
    for (i, (name, points)) in curves.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| draw(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| draw(&e))?;
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}
