//! The run directory's logs for other tools: `episodes.csv`, `tb/`, `rl plot`.

use std::path::{Path, PathBuf};

use super::tensorboard::{decode_event, records};
use super::tests::ppo_cartpole;
use super::*;

/// The rows of `episodes.csv`: return, length, seconds, env steps, kind.
fn episodes(dir: &Path) -> Vec<(f64, u64, f64, u64, String)> {
    let text = std::fs::read_to_string(dir.join(EPISODES_FILE)).unwrap();
    let mut rows = text.lines();
    assert_eq!(rows.next(), Some("r,l,t,env_steps,kind"));
    rows.map(|row| {
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f.len(), 5, "{row}");
        (
            f[0].parse().unwrap(),
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
            f[4].to_owned(),
        )
    })
    .collect()
}

fn last_metrics(dir: &Path) -> serde_json::Map<String, serde_json::Value> {
    let text = std::fs::read_to_string(dir.join(METRICS_FILE)).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

/// Every summary event of a run's `tb/`, files in name order: (step, tag, value).
fn events(dir: &Path) -> Vec<(i64, String, f32)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir.join(TENSORBOARD_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let bytes = std::fs::read(&path).unwrap();
        let (data, whole) = records(&bytes);
        assert!(whole, "{}", path.display());
        for event in data.into_iter().map(|d| decode_event(d).unwrap()) {
            for (tag, value) in event.values {
                out.push((event.step, tag, value));
            }
        }
    }
    out
}

#[test]
fn episodes_csv_has_a_row_per_finished_episode_of_ppo_cartpole() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let config = ppo_cartpole(&[
        "run.total_steps=4096",
        "run.eval={every_steps=2048, episodes=3}",
    ]);
    let trained = train(&registry, &config, &dir, &TrainOptions::quiet()).unwrap();
    let rows = episodes(&dir);
    let train_rows: Vec<_> = rows.iter().filter(|r| r.4 == "train").collect();
    let last = last_metrics(&dir);
    assert_eq!(train_rows.len() as u64, last["episodes"].as_u64().unwrap());
    // 8 environments: what the finished episodes took is the run's steps less those of
    // the 8 episodes still running (each under CartPole's 500 steps).
    let finished: u64 = train_rows.iter().map(|r| r.1).sum();
    let total = trained.result.total_env_steps;
    assert!(
        finished <= total && total - finished < 8 * 500,
        "{finished} of {total}"
    );
    // Rows in order of env steps, each after at least its own length; times grow.
    assert!(
        train_rows
            .windows(2)
            .all(|w| w[0].3 <= w[1].3 && w[0].2 <= w[1].2)
    );
    assert!(train_rows.iter().all(|r| r.3 >= r.1 && r.3 <= total));
    // Evaluations at 2048 and 4096 env steps, 3 episodes each.
    let evals: Vec<u64> = rows.iter().filter(|r| r.4 == "eval").map(|r| r.3).collect();
    assert_eq!(evals, vec![2048, 2048, 2048, 4096, 4096, 4096]);
    // The evaluation's mean return is the mean of its rows.
    let eval_rows: Vec<f64> = rows.iter().filter(|r| r.4 == "eval").map(|r| r.0).collect();
    let mean = eval_rows[3..].iter().sum::<f64>() / 3.0;
    let reported = last["eval_return_mean"].as_f64().unwrap();
    assert!((mean - reported).abs() < 1e-6, "{mean} {reported}");
}

#[test]
fn one_environment_ends_its_episodes_at_the_sum_of_their_lengths_across_a_resume() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let config = ppo_cartpole(&["run.total_steps=1024", "run.n_envs=1", "ppo.batch_size=32"]);
    let first = train(&registry, &config, &dir, &TrainOptions::quiet()).unwrap();
    let saved = first.result.total_env_steps;
    // A killed process: a row past the checkpoint, then a torn one.
    let path = dir.join(EPISODES_FILE);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&format!("9,9,99.000000,{},train\n12,3", saved + 9));
    std::fs::write(&path, text).unwrap();
    let longer = TrainOptions {
        overrides: vec!["run.total_steps=2048".into()],
        ..TrainOptions::quiet()
    };
    let resumed = resume(&registry, &dir, &longer).unwrap();
    assert_eq!(resumed.result.total_env_steps, 2048);
    let rows = episodes(&dir);
    assert!(rows.len() > 10, "{} episodes", rows.len());
    let mut sum = 0;
    for row in &rows {
        sum += row.1;
        assert_eq!(
            row.3, sum,
            "the environment's steps at each episode's end: {row:?}"
        );
    }
    assert_eq!(
        rows.len() as u64,
        last_metrics(&dir)["episodes"].as_u64().unwrap()
    );
    let moved = std::fs::read_to_string(dir.join(DISCARDED_EPISODES_FILE)).unwrap();
    assert_eq!(moved, format!("9,9,99.000000,{},train\n", saved + 9));
    // TensorBoard: two files, no step written twice, the metrics' values at each step.
    let events = events(&dir);
    let returns: Vec<(i64, f32)> = events
        .iter()
        .filter(|e| e.1 == "rollout/ep_rew_mean")
        .map(|e| (e.0, e.2))
        .collect();
    assert!(returns.windows(2).all(|w| w[0].0 < w[1].0), "{returns:?}");
    let metrics: Vec<(i64, f32)> = std::fs::read_to_string(dir.join(METRICS_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| !l["return_mean"].is_null())
        .map(|l| {
            (
                l["env_steps"].as_i64().unwrap(),
                l["return_mean"].as_f64().unwrap() as f32,
            )
        })
        .collect();
    assert_eq!(returns, metrics);
    let files = std::fs::read_dir(dir.join(TENSORBOARD_DIR))
        .unwrap()
        .count();
    assert_eq!(files, 2);
}

#[test]
fn log_tensorboard_false_writes_no_events() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let config = ppo_cartpole(&["run.total_steps=256", "log.tensorboard=false"]);
    train(&registry, &config, &dir, &TrainOptions::quiet()).unwrap();
    assert!(!dir.join(TENSORBOARD_DIR).exists());
    assert!(dir.join(EPISODES_FILE).is_file());
    let bad = Config::from_toml(
        "algo = \"ppo\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 1\n[log]\ntensorboard = \"yes\"\n",
        &[],
    )
    .unwrap_err();
    assert_eq!(bad.key, "log.tensorboard", "{bad}");
}

/// A run directory with `config` and metrics lines of `return_mean` = `f(i)` at
/// `100 i` env steps.
fn fake_run(dir: &Path, config: &Config, f: impl Fn(u64) -> f64) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(CONFIG_FILE), config.to_toml().unwrap()).unwrap();
    let text: String = (1..=20)
        .map(|i| {
            format!(
                "{{\"env_steps\":{},\"return_mean\":{},\"value_loss\":1.5}}\n",
                i * 100,
                f(i)
            )
        })
        .collect();
    std::fs::write(dir.join(METRICS_FILE), text).unwrap();
}

/// The distinct non-grey colours of a PNG.
fn colours(path: &Path) -> std::collections::BTreeSet<[u8; 3]> {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (1024, 640));
    pixels
        .chunks(3)
        .map(|p| [p[0], p[1], p[2]])
        .filter(|p| p[0] != p[1] || p[1] != p[2])
        .collect()
}

#[test]
fn plot_groups_seeds_into_a_band_and_refuses_unknown_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs: Vec<PathBuf> = (0..3)
        .map(|seed| {
            let dir = tmp.path().join(format!("s{seed}"));
            let config = ppo_cartpole(&[&format!("run.seed={seed}")]);
            fake_run(&dir, &config, |i| (i + seed) as f64);
            dir
        })
        .collect();
    let out = tmp.path().join("three.png");
    plot_with(&dirs, &out, &PlotOptions::default()).unwrap();
    let grouped = colours(&out);
    // The first palette colour (the mean line) and its band, mixed with white.
    assert!(grouped.contains(&[31, 119, 180]));
    assert!(!grouped.contains(&[255, 127, 14]), "one group, one colour");
    // Another config is a second group, in the second colour.
    let other = tmp.path().join("other");
    fake_run(&other, &ppo_cartpole(&["run.n_envs=4"]), |i| i as f64);
    let mut four = dirs.clone();
    four.push(other);
    plot_with(
        &four,
        &out,
        &PlotOptions {
            smooth: 3,
            ..PlotOptions::default()
        },
    )
    .unwrap();
    assert!(colours(&out).contains(&[255, 127, 14]));
    // Any metric, against seconds.
    let options = PlotOptions {
        y: Some("value_loss".into()),
        x: XAxis::WallSeconds,
        smooth: 1,
    };
    plot_with(&dirs, &out, &options).unwrap();
    let unknown = PlotOptions {
        y: Some("no_such_metric".into()),
        ..PlotOptions::default()
    };
    let error = plot_with(&dirs, &out, &unknown).unwrap_err();
    assert_eq!(error.exit_code(), 2);
    assert!(error.to_string().contains("value_loss"), "{error}");
    std::fs::write(dirs[1].join(METRICS_FILE), "{\"env_steps\":1}\n{not json\n").unwrap();
    let corrupt = plot_with(&dirs, &out, &PlotOptions::default()).unwrap_err();
    assert_eq!(corrupt.exit_code(), 2);
    assert!(corrupt.to_string().contains("line 2"), "{corrupt}");
}
