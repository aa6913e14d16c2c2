//! Learning curves as PNG, drawn in pure Rust (plotters' bitmap backend) with an
//! embedded font (DejaVu Sans), so a machine without system fonts draws the same
//! picture.
//!
//! Any metric of `metrics.jsonl` against env steps or training seconds
//! ([`PlotOptions`]). Runs whose configs are the same but for `run.seed` form a group:
//! one mean line with a min–max band over its seeds (at each x, over the runs that
//! reached it; each run's points are linearly interpolated onto a common grid), named
//! `algo env (N seeds)`; a run alone is one line named `algo env seed S`. Groups whose
//! configs differ in more than the seed also name, after a colon, the keys where theirs
//! differs (`env_kwargs.repeat_action_probability = 0.0`, `ppo.clip_range unset`,
//! `no [atari]`; at most three, then `...`). With a goal
//! on the metric drawn (a training-return goal on `return_mean`, an evaluation goal on
//! `eval_return_mean`), the goal is a dashed horizontal line. By default the metric is
//! the one the first run's goal is judged on (`return_mean` without a goal).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use serde_json::Value;

use super::rundir::{self, METRICS_FILE};
use super::{Error, Result};
use crate::config::Config;
use crate::trainer::Goal;

/// The family name the embedded font is registered under.
const FONT: &str = "sans-serif";

/// Colours readable on white (Tableau 10 without its yellow-green).
const PALETTE: [RGBColor; 9] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];

/// Points of a group's mean line (its runs are interpolated onto this many x values).
const GRID: usize = 200;

/// The x axis of a plot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum XAxis {
    /// Env steps over the run's life (`env_steps`).
    #[default]
    EnvSteps,
    /// Seconds of training over the run's life (`wall_s`).
    WallSeconds,
}

impl XAxis {
    fn key(self) -> &'static str {
        match self {
            XAxis::EnvSteps => "env_steps",
            XAxis::WallSeconds => "wall_s",
        }
    }

    fn label(self) -> &'static str {
        match self {
            XAxis::EnvSteps => "env steps",
            XAxis::WallSeconds => "seconds of training",
        }
    }
}

/// What [`plot_with`] draws.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlotOptions {
    /// The metric on the y axis, a key of `metrics.jsonl` (`return_mean`,
    /// `eval_return_mean`, `value_loss` ...). `None`: the metric the first run's goal is
    /// judged on (`eval_return_mean` for an evaluation goal, else `return_mean`).
    pub y: Option<String>,
    /// The x axis.
    pub x: XAxis,
    /// A trailing moving average over this many points of each run (0 and 1: none).
    pub smooth: usize,
}

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

/// One run's `(x, y)` points: its metrics lines that have both keys, and whether any
/// line has the key `y` at all (with a value or `null`).
fn curve(dir: &Path, x: &str, y: &str) -> Result<(Vec<(f64, f64)>, bool)> {
    let path = dir.join(METRICS_FILE);
    let file = File::open(&path).map_err(|e| {
        Error::Usage(format!(
            "{}: not a run directory with metrics ({} cannot be read: {e})",
            dir.display(),
            path.display()
        ))
    })?;
    let (mut points, mut has_key) = (Vec::new(), false);
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| Error::io("reading", &path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(&line).map_err(|e| {
            Error::Usage(format!(
                "{} line {}: not a metrics line ({e}): remove the line, or resume the run to repair the file",
                path.display(),
                i + 1
            ))
        })?;
        has_key |= value.get(y).is_some();
        let px = value.get(x).and_then(Value::as_f64);
        let py = value.get(y).and_then(Value::as_f64);
        if let (Some(px), Some(py)) = (px, py)
            && px.is_finite()
            && py.is_finite()
        {
            points.push((px, py));
        }
    }
    Ok((points, has_key))
}

/// A trailing moving average over `n` points.
fn smooth(points: &[(f64, f64)], n: usize) -> Vec<(f64, f64)> {
    if n <= 1 {
        return points.to_vec();
    }
    let mut sum = 0.0;
    points
        .iter()
        .enumerate()
        .map(|(i, &(x, y))| {
            sum += y;
            if i >= n {
                sum -= points[i - n].1;
            }
            (x, sum / (i + 1).min(n) as f64)
        })
        .collect()
}

/// `points` (sorted by x) at `x`, linearly interpolated; `None` outside their range.
fn interpolate(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if x < first.0 || x > last.0 {
        return None;
    }
    let i = points.partition_point(|p| p.0 < x);
    let hi = points[i.min(points.len() - 1)];
    if hi.0 == x || i == 0 {
        return Some(hi.1);
    }
    let lo = points[i - 1];
    Some(lo.1 + (hi.1 - lo.1) * (x - lo.0) / (hi.0 - lo.0))
}

/// A group's mean, lowest and highest value at each grid x reached by at least one run.
type Band = Vec<(f64, f64, f64, f64)>;

fn band(runs: &[Vec<(f64, f64)>]) -> Band {
    let (lo, hi) = runs
        .iter()
        .flat_map(|r| r.iter().map(|p| p.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    if !lo.is_finite() {
        return Vec::new();
    }
    (0..GRID)
        .filter_map(|i| {
            let x = lo + (hi - lo) * i as f64 / (GRID - 1) as f64;
            let ys: Vec<f64> = runs.iter().filter_map(|r| interpolate(r, x)).collect();
            (!ys.is_empty()).then(|| {
                let mean = ys.iter().sum::<f64>() / ys.len() as f64;
                let min = ys.iter().copied().fold(f64::INFINITY, f64::min);
                let max = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (x, mean, min, max)
            })
        })
        .collect()
}

/// The config of a run with its seed taken out: runs with equal tables form a group.
fn group_key(config: &Config) -> Result<toml::Table> {
    let mut table = toml::Table::try_from(config)
        .map_err(|e| Error::Usage(format!("a run's config cannot be compared: {e}")))?;
    if let Some(toml::Value::Table(run)) = table.get_mut("run") {
        run.remove("seed");
    }
    Ok(table)
}

/// Most keys a label names where its group's config differs from another's.
const MAX_DIFFERENCES: usize = 3;

/// Per config (groups' [`group_key`]s), the keys where it differs from at least one of
/// the others, dotted, in key order: `key = value`, `key unset`, and for a table that
/// some configs lack, `no [key]` for those and, for the others, its leaves when it has at
/// most two (`env_kwargs.repeat_action_probability = 0.0`), else `[key]`. What tells
/// the lines of one plot apart; empty for a single config.
fn differences(configs: &[toml::Table]) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new(); configs.len()];
    let tables: Vec<Option<&toml::Table>> = configs.iter().map(Some).collect();
    differ("", &tables, &mut out);
    out
}

/// [`differences`] below `prefix`, for tables some of which may be missing.
fn differ(prefix: &str, tables: &[Option<&toml::Table>], out: &mut [Vec<String>]) {
    let keys: BTreeSet<&String> = tables.iter().flatten().flat_map(|t| t.keys()).collect();
    for key in keys {
        let values: Vec<Option<&toml::Value>> =
            tables.iter().map(|t| t.and_then(|t| t.get(key))).collect();
        if values.iter().all(|v| *v == values[0]) {
            continue;
        }
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        let inner: Vec<Option<&toml::Table>> = values
            .iter()
            .map(|v| v.and_then(toml::Value::as_table))
            .collect();
        let all_tables = values
            .iter()
            .zip(&inner)
            .all(|(v, t)| v.is_none() || t.is_some());
        if all_tables && values.iter().all(Option::is_some) {
            differ(&path, &inner, out);
            continue;
        }
        for (labels, value) in out.iter_mut().zip(&values) {
            match value {
                None if all_tables => labels.push(format!("no [{path}]")),
                None => labels.push(format!("{path} unset")),
                Some(toml::Value::Table(table)) => {
                    let mut leaves = BTreeMap::new();
                    flatten(&path, table, &mut leaves);
                    if leaves.len() <= 2 {
                        labels.extend(leaves.into_iter().map(|(k, v)| format!("{k} = {v}")));
                    } else {
                        labels.push(format!("[{path}]"));
                    }
                }
                Some(leaf) => labels.push(format!("{path} = {leaf}")),
            }
        }
    }
}

/// `table`'s leaves as dotted keys (below `prefix`) and their TOML values.
fn flatten(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, String>) {
    for (key, value) in table {
        let key = format!("{prefix}.{key}");
        match value {
            toml::Value::Table(inner) => flatten(&key, inner, out),
            leaf => {
                out.insert(key, leaf.to_string());
            }
        }
    }
}

/// The metric a goal is judged on, and its value.
fn goal_metric(goal: Goal) -> (&'static str, f64) {
    match goal {
        Goal::TrainingReturn { mean_return, .. } => ("return_mean", f64::from(mean_return)),
        Goal::EvalReturn { mean_return } => ("eval_return_mean", f64::from(mean_return)),
    }
}

/// Runs of one config.
struct Group {
    config: Config,
    key: toml::Table,
    seeds: Vec<u64>,
    runs: Vec<Vec<(f64, f64)>>,
    /// Where this group's config differs from the other groups' ([`differences`]).
    differs: Vec<String>,
}

impl Group {
    fn label(&self) -> String {
        let name = match self.seeds.as_slice() {
            [seed] => format!("{} {} seed {seed}", self.config.algo, self.config.env),
            seeds => format!(
                "{} {} ({} seeds)",
                self.config.algo,
                self.config.env,
                seeds.len()
            ),
        };
        if self.differs.is_empty() {
            return name;
        }
        let mut shown = self.differs[..self.differs.len().min(MAX_DIFFERENCES)].join(", ");
        if self.differs.len() > MAX_DIFFERENCES {
            shown.push_str(", ...");
        }
        format!("{name}: {shown}")
    }
}

/// Draws the mean training return of the runs in `dirs` against env steps into the
/// PNG `out` ([`plot_with`] with the default [`PlotOptions`]).
///
/// # Errors
/// As [`plot_with`].
pub fn plot(dirs: &[PathBuf], out: &Path) -> Result<()> {
    plot_with(dirs, out, &PlotOptions::default())
}

/// Draws the learning curves of the runs in `dirs` (their `config.toml` and
/// `metrics.jsonl`) into the PNG `out`, as `options` say: runs of one config (but for
/// the seed) as a mean line with a min–max band, the goal as a dashed line. Runs with no
/// value of the metric yet draw nothing (the axes remain).
///
/// # Errors
/// No run, a folder without a config or metrics, a metrics line that does not parse, a
/// metric that no run's metrics name ([`Error::Usage`], listing the names there), a file
/// that cannot be written.
pub fn plot_with(dirs: &[PathBuf], out: &Path, options: &PlotOptions) -> Result<()> {
    if dirs.is_empty() {
        return Err(Error::Usage("plot: give at least one run directory".into()));
    }
    font()?;
    let configs = dirs
        .iter()
        .map(|dir| rundir::read_config(dir, &[]))
        .collect::<Result<Vec<_>>>()?;
    let y = options.y.clone().unwrap_or_else(|| {
        configs[0]
            .run
            .goal
            .map_or("return_mean", |g| goal_metric(g).0)
            .to_owned()
    });
    let x = options.x;
    let mut groups: Vec<Group> = Vec::new();
    let mut any_key = false;
    for (dir, config) in dirs.iter().zip(configs) {
        let (points, has_key) = curve(dir, x.key(), &y)?;
        any_key |= has_key;
        let points = smooth(&points, options.smooth);
        let key = group_key(&config)?;
        let seed = config.run.seed;
        match groups.iter_mut().find(|g| g.key == key) {
            Some(group) => {
                group.seeds.push(seed);
                group.runs.push(points);
            }
            None => groups.push(Group {
                config,
                key,
                seeds: vec![seed],
                runs: vec![points],
                differs: Vec::new(),
            }),
        }
    }
    let keys: Vec<toml::Table> = groups.iter().map(|g| g.key.clone()).collect();
    for (group, differs) in groups.iter_mut().zip(differences(&keys)) {
        group.differs = differs;
    }
    if !any_key {
        return Err(Error::Usage(format!(
            "--y {y}: no line of the runs' {METRICS_FILE} has this metric; they have: {}",
            metric_names(&dirs[0])?.join(", ")
        )));
    }
    let goals: Vec<f64> = groups
        .iter()
        .filter_map(|g| g.config.run.goal.map(goal_metric))
        .filter(|(metric, _)| *metric == y)
        .map(|(_, value)| value)
        .fold(Vec::new(), |mut goals, v| {
            if !goals.contains(&v) {
                goals.push(v);
            }
            goals
        });
    draw(&groups, &goals, &y, x, out)
}

/// The keys of the first line of a run's metrics.
fn metric_names(dir: &Path) -> Result<Vec<String>> {
    let path = dir.join(METRICS_FILE);
    let file = File::open(&path).map_err(|e| Error::io("reading", &path, e))?;
    let first = BufReader::new(file).lines().next().transpose();
    let first = first.map_err(|e| Error::io("reading", &path, e))?;
    let names = first
        .and_then(|l| serde_json::from_str::<serde_json::Map<String, Value>>(&l).ok())
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    Ok(names)
}

fn draw(groups: &[Group], goals: &[f64], y: &str, x: XAxis, out: &Path) -> Result<()> {
    let bands: Vec<Band> = groups.iter().map(|g| band(&g.runs)).collect();
    let (mut x_max, mut y_min, mut y_max) = (1.0f64, f64::INFINITY, f64::NEG_INFINITY);
    for &(px, _, lo, hi) in bands.iter().flatten() {
        x_max = x_max.max(px);
        y_min = y_min.min(lo);
        y_max = y_max.max(hi);
    }
    for &goal in goals {
        y_min = y_min.min(goal);
        y_max = y_max.max(goal);
    }
    if !y_min.is_finite() {
        (y_min, y_max) = (0.0, 1.0);
    }
    let pad = ((y_max - y_min) * 0.05).max(1e-3);
    let draw = |e: &dyn std::fmt::Display| Error::Plot(format!("{}: {e}", out.display()));
    let root = BitMapBackend::new(out, (1024, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(y, (FONT, 28))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..x_max, (y_min - pad)..(y_max + pad))
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc(x.label())
        .y_desc(y)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| {
            if y_max - y_min >= 20.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.3}")
            }
        })
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()
        .map_err(|e| draw(&e))?;
    for (i, (group, band)) in groups.iter().zip(&bands).enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        if group.runs.len() > 1 && !band.is_empty() {
            let upper = band.iter().map(|p| (p.0, p.3));
            let lower = band.iter().rev().map(|p| (p.0, p.2));
            chart
                .draw_series(std::iter::once(Polygon::new(
                    upper.chain(lower).collect::<Vec<_>>(),
                    color.mix(0.2).filled(),
                )))
                .map_err(|e| draw(&e))?;
        }
        let line: Vec<(f64, f64)> = if group.runs.len() > 1 {
            band.iter().map(|p| (p.0, p.1)).collect()
        } else {
            group.runs[0].clone()
        };
        chart
            .draw_series(LineSeries::new(line, color.stroke_width(2)))
            .map_err(|e| draw(&e))?
            .label(group.label())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    for &goal in goals {
        let dashes = (0..40).map(|k| {
            let (a, b) = (k as f64 / 40.0, (k as f64 + 0.5) / 40.0);
            PathElement::new(
                vec![(a * x_max, goal), (b * x_max, goal)],
                BLACK.stroke_width(1),
            )
        });
        chart
            .draw_series(dashes)
            .map_err(|e| draw(&e))?
            .label(format!("goal {goal}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_is_a_trailing_mean() {
        let points = [(0.0, 1.0), (1.0, 3.0), (2.0, 5.0), (3.0, 7.0)];
        assert_eq!(smooth(&points, 1), points.to_vec());
        assert_eq!(
            smooth(&points, 2),
            vec![(0.0, 1.0), (1.0, 2.0), (2.0, 4.0), (3.0, 6.0)]
        );
    }

    #[test]
    fn a_band_is_mean_min_and_max_over_the_runs_that_reach_x() {
        let a = vec![(0.0, 0.0), (10.0, 10.0)];
        let b = vec![(0.0, 2.0), (10.0, 2.0)];
        let c = vec![(0.0, 4.0), (5.0, 4.0)];
        let band = band(&[a, b, c]);
        assert_eq!(band.len(), GRID);
        assert_eq!(band[0], (0.0, 2.0, 0.0, 4.0));
        let last = band[GRID - 1];
        // Only a and b reach x = 10.
        assert_eq!(last, (10.0, 6.0, 2.0, 10.0));
        assert_eq!(interpolate(&[(0.0, 0.0), (4.0, 8.0)], 1.0), Some(2.0));
        assert_eq!(interpolate(&[(0.0, 0.0), (4.0, 8.0)], 5.0), None);
    }

    /// Lines are told apart by the keys where their configs differ, and only by those:
    /// equal keys, nested tables (dotted) and keys one config lacks.
    #[test]
    fn labels_name_the_keys_where_configs_differ() {
        let parse = |text: &str| text.parse::<toml::Table>().unwrap();
        let sticky = parse(
            "algo = \"ppo\"\n[run]\ntotal_steps = 10\n[ppo]\nclip_range = 0.1\n[atari]\na = 1\nb = 2\nc = 3\n",
        );
        let plain = parse(
            "algo = \"ppo\"\n[run]\ntotal_steps = 10\n[ppo]\nclip_range = 0.2\nepochs = 4\n[env_kwargs]\nrepeat_action_probability = 0.0\n",
        );
        let diffs = differences(&[sticky.clone(), plain]);
        assert_eq!(
            diffs[0],
            vec![
                "[atari]",
                "no [env_kwargs]",
                "ppo.clip_range = 0.1",
                "ppo.epochs unset"
            ]
        );
        assert_eq!(
            diffs[1],
            vec![
                "no [atari]",
                "env_kwargs.repeat_action_probability = 0.0",
                "ppo.clip_range = 0.2",
                "ppo.epochs = 4"
            ]
        );
        assert_eq!(
            differences(std::slice::from_ref(&sticky)),
            vec![Vec::<String>::new()]
        );
        assert_eq!(
            differences(&[sticky.clone(), sticky]),
            vec![Vec::<String>::new(); 2]
        );
    }
}
