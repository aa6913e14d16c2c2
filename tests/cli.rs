//! The `rl` command as a user runs it: every shipped config trains for a few hundred
//! steps (a smoke run), `rl plan` accepts the shipped configs and refuses a one-hot
//! replay of 100 000 actions, plans over the budget are refused before anything is built
//! or created, usage errors exit with code 2 before anything runs, and
//! the exported weights load in Python's `safetensors` (numpy only).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rl::config::Config;

fn rl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rl"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

fn configs() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut configs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    configs.sort();
    configs
}

/// Each config runs in its own `rl` process (as a user runs it), which also keeps its
/// memory out of the tests in this binary that measure the process's resident set.
#[test]
fn every_shipped_config_trains_for_a_few_hundred_steps() {
    let configs = configs();
    assert!(configs.len() >= 7, "{configs:?}");
    let tmp = tempfile::tempdir().unwrap();
    for path in configs {
        let text = std::fs::read_to_string(&path).unwrap();
        let config = Config::from_toml(&text, &[]).unwrap();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if config.env.starts_with("ALE/") {
            // Atari games run from Python (crates/rl-python/tests/test_pixels.py smoke-trains
            // them where ale-py is installed); the command says where to go.
            let out = rl(&["plan", path.to_str().unwrap()]);
            assert_eq!(out.status.code(), Some(2), "{}", path.display());
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("flatrl.train"), "{stderr}");
            eprintln!("{name}: an Atari config, smoke-trained from Python, not here");
            continue;
        }
        let dir = tmp.path().join(&name);
        // A few hundred steps, with updates: the off-policy warm-up shortened.
        let mut args = vec![
            "train".to_owned(),
            path.to_string_lossy().into_owned(),
            "--out".to_owned(),
            dir.to_string_lossy().into_owned(),
            "--quiet".to_owned(),
            "--set".to_owned(),
            "run.total_steps=300".to_owned(),
        ];
        if config.algo.off_policy() {
            args.extend([
                "--set".to_owned(),
                "off_policy.learning_starts=100".to_owned(),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = rl(&args);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(result["total_env_steps"].as_u64().unwrap() >= 300, "{name}");
        assert_eq!(result["algo"], config.algo.name(), "{name}");
        assert!(
            dir.join("checkpoint/learner.safetensors").is_file(),
            "{name}"
        );
        let updates = std::fs::read_to_string(dir.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .last()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["updates"]
                    .as_u64()
                    .unwrap()
            })
            .unwrap();
        assert!(updates > 0, "{name}: no update in the smoke run");
    }
}

/// `rl list` names every built-in environment with its spaces and the algorithms that
/// fit it; `rl plan` shows the warnings `rl train` prints.
#[test]
fn list_names_the_envs_and_plan_shows_warnings() {
    let out = rl(&["list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("{name} missing: {text}"))
            .to_owned()
    };
    assert!(
        line("catch").contains("u8") && line("catch").ends_with("ppo, dqn"),
        "{text}"
    );
    assert!(line("pendulum").ends_with("ppo, sac, td3"), "{text}");
    assert!(line("cartpole").contains("Discrete(2)"), "{text}");
    assert!(text.contains("flatrl.train"), "{text}");
    let out = rl(&[
        "plan",
        "configs/dqn_cartpole.toml",
        "--set",
        "run.total_steps=500",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("warning: off_policy.learning_starts is 1000"),
        "{text}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = rl(&[
        "train",
        "configs/ppo_cartpole.toml",
        "--quiet",
        "--out",
        run.to_str().unwrap(),
        "--set",
        "run.total_steps=100",
    ]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: run.total_steps is 100, below one rollout"),
        "{stderr}"
    );
}

#[test]
fn plan_accepts_the_shipped_configs_and_refuses_a_one_hot_replay_of_100k_actions() {
    for path in configs() {
        if std::fs::read_to_string(&path)
            .unwrap()
            .contains("env = \"ALE/")
        {
            continue; // planned from Python, see every_shipped_config_trains_for_a_few_hundred_steps
        }
        let out = rl(&["plan", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("total: ram"));
    }
    // The seed-000 scenario (an LSTM learner with bootstrap heads) too.
    for config in ["configs/sac_large_actions.toml", "configs/seed000.toml"] {
        let out = rl(&["plan", config]);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("fits run.budget"),
            "{config}"
        );
        let out = rl(&["plan", config, "--set", "stored_actions=one_hot"]);
        assert_eq!(out.status.code(), Some(1), "{config}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("replay/action"), "{config}: {text}");
        assert!(
            text.contains("372.53 GiB"),
            "{config}: 1 000 000 rows x 100 000 floats: {text}"
        );
        assert!(text.contains("does not fit run.budget"), "{config}: {text}");
    }
}

/// Networks of 40 GB are planned from the config alone, in milliseconds (nothing is
/// built), and refused: `rl plan` prints the plan and the refusal (exit 1), `rl train`
/// refuses before creating its run directory (exit 2, the plan's table on stderr).
#[test]
fn plans_beyond_the_budget_are_refused_before_anything_is_built_or_created() {
    let hidden = "policy.hidden=[100000, 100000]";
    let budget = "run.budget={ram=1073741824}";
    let config = "configs/ppo_cartpole.toml";
    let out = rl(&["plan", config, "--set", hidden, "--set", budget]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("learner/ppo/actor/parameters"), "{text}");
    assert!(text.contains("does not fit run.budget"), "{text}");
    assert!(text.contains("policy.hidden"), "what to lower: {text}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let run = dir.to_str().unwrap();
    let out = rl(&[
        "train", config, "--out", run, "--set", hidden, "--set", budget,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: run.budget: the plan needs"),
        "{stderr}"
    );
    assert!(stderr.contains("total: ram"), "the plan's table: {stderr}");
    assert!(!dir.exists(), "a refused plan creates no run directory");
    // A rollout no buffer holds is a config error naming its key, before anything.
    let out = rl(&[
        "train",
        config,
        "--out",
        run,
        "--set",
        "ppo.n_steps=1000000000",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: ppo.n_steps"), "{stderr}");
    assert!(!dir.exists());
}

#[test]
fn usage_errors_are_one_line_with_exit_code_2_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let key = write(
        "key.toml",
        "algo = \"ppo\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 100\n[ppo]\nn_stepz = 3\n",
    );
    let kind = write(
        "type.toml",
        "algo = \"ppo\"\nenv = \"cartpole\"\n[run]\ntotal_steps = \"many\"\n",
    );
    let algo = write(
        "algo.toml",
        "algo = \"a2c\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 100\n",
    );
    let file = write("file", "not a folder");
    let out_dir = tmp.path().join("out");
    let out = out_dir.to_str().unwrap();
    let unwritable = format!("{file}/run");
    let cases: [(Vec<&str>, &str); 4] = [
        (
            vec!["train", &key, "--out", out],
            "ppo.n_stepz: unknown field",
        ),
        (
            vec!["train", &kind, "--out", out],
            "run.total_steps: invalid type: string \"many\"",
        ),
        (
            vec!["train", &algo, "--out", out],
            "algo: unknown algorithm `a2c`, expected one of",
        ),
        (
            vec!["train", "configs/ppo_cartpole.toml", "--out", &unwritable],
            "cannot create the folder",
        ),
    ];
    for (args, expected) in cases {
        let output = rl(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(expected),
            "{stderr}"
        );
        assert!(output.stdout.is_empty());
        assert!(!out_dir.exists(), "nothing was created for {args:?}");
    }
    let help = rl(&["train", "--help"]);
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--set <KEY=VALUE>"));
}

/// Trains a small PPO run through the binary, exports it, and loads the file with
/// Python's `safetensors.numpy` (the interpreter in `$RL_TEST_PYTHON`, which
/// `cargo xtask ci` sets to its virtualenv's).
#[test]
fn the_exported_weights_load_in_python_safetensors_with_the_documented_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let run = dir.to_str().unwrap();
    let train = rl(&[
        "train",
        "configs/ppo_cartpole.toml",
        "--out",
        run,
        "--quiet",
        "--set",
        "run.total_steps=512",
    ]);
    assert!(
        train.status.success(),
        "{}",
        String::from_utf8_lossy(&train.stderr)
    );
    let export = rl(&["export", run, "--format", "safetensors"]);
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&export.stdout).unwrap();
    let path = listed["path"].as_str().unwrap().to_owned();
    assert_eq!(listed["tensors"].as_array().unwrap().len(), 12);

    let Ok(python) = std::env::var("RL_TEST_PYTHON") else {
        eprintln!(
            "skipped the Python half: RL_TEST_PYTHON is not set (cargo xtask ci sets it to target/ci-venv's python)"
        );
        return;
    };
    let script = r#"
import json, sys
from safetensors import safe_open
from safetensors.numpy import load_file
tensors = load_file(sys.argv[1])
with safe_open(sys.argv[1], framework="np") as f:
    meta = f.metadata()
print(json.dumps({
    "shapes": {k: list(v.shape) for k, v in tensors.items()},
    "dtypes": sorted({str(v.dtype) for v in tensors.values()}),
    "kind": meta["kind"],
    "algo": json.loads(meta["state"])["algo"],
}))
"#;
    let out = Command::new(python)
        .args(["-c", script, &path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected = serde_json::json!({
        "actor.0.weight": [64, 4], "actor.0.bias": [64],
        "actor.2.weight": [64, 64], "actor.2.bias": [64],
        "actor.4.weight": [2, 64], "actor.4.bias": [2],
        "critic.0.weight": [64, 4], "critic.0.bias": [64],
        "critic.2.weight": [64, 64], "critic.2.bias": [64],
        "critic.4.weight": [1, 64], "critic.4.bias": [1],
    });
    assert_eq!(seen["shapes"], expected);
    assert_eq!(seen["dtypes"], serde_json::json!(["float32"]));
    assert_eq!(seen["kind"], "weights");
    assert_eq!(seen["algo"], "ppo");
}

/// SIGTERM (as Ctrl-C's SIGINT) ends a run cleanly: exit code 130, checkpoint with the
/// replay buffer, metrics and result written; `rl resume` takes it on to a new budget.
#[test]
fn sigterm_saves_the_run_and_resume_continues_it() {
    use std::io::{BufRead, BufReader};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let run = dir.to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rl"))
        .args(["train", "configs/sac_pendulum.toml", "--out", run])
        .args([
            "--set",
            "run.total_steps=1000000",
            "--set",
            "off_policy.learning_starts=100",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("memory plan") {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "the run ended before its plan"
        );
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains("rl resume"), "{rest}");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["stopped_by"], "interrupted");
    let saved = result["total_env_steps"].as_u64().unwrap();
    assert!(saved > 0 && saved < 1_000_000);
    assert!(dir.join("checkpoint/replay").is_dir() && dir.join("curve.png").is_file());

    let budget = format!("run.total_steps={}", saved + 50);
    let resumed = rl(&["resume", run, "--quiet", "--set", &budget]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(result["total_env_steps"].as_u64(), Some(saved + 50));
    assert_eq!(result["stopped_by"], "budget");
}

/// Every file of a run directory with its bytes' hash.
fn hashes(dir: &Path) -> Vec<(PathBuf, u64)> {
    use std::hash::{Hash, Hasher};
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&path).unwrap().hash(&mut h);
                out.push((path, h.finish()));
            }
        }
    }
    out.sort();
    out
}

/// A `kill -9` (no handler runs) loses only the steps since the last periodic
/// checkpoint: `rl resume` continues from it; a resume that would change the networks
/// exits 2 and leaves the directory byte-identical; one that changes the learning rate
/// continues with it, and `env_steps` never goes back in `metrics.jsonl`.
#[test]
fn kill_9_loses_only_the_steps_since_the_last_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let run = dir.to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rl"))
        .args([
            "train",
            "configs/sac_pendulum.toml",
            "--out",
            run,
            "--quiet",
        ])
        .args(["--set", "run.total_steps=1000000"])
        .args(["--set", "off_policy.learning_starts=100"])
        .args(["--set", "log.metrics_every_steps=50"])
        .args(["--set", "run.checkpoint.every_steps=150"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Kill once a save past the warm-up is on disk, some way into the next interval.
    let counters = dir.join("checkpoint/run.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let steps = std::fs::read(&counters)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["env_steps"].as_u64());
        if steps.is_some_and(|s| s >= 300) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint in 300 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();

    let before = hashes(&dir);
    let wider = rl(&["resume", run, "--quiet", "--set", "sac.hidden=[32, 32]"]);
    assert_eq!(wider.status.code(), Some(2));
    let text = String::from_utf8_lossy(&wider.stderr);
    assert!(
        text.contains("sac.hidden cannot change on resume"),
        "{text}"
    );
    assert_eq!(hashes(&dir), before, "a refused resume changes nothing");

    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&counters).unwrap()).unwrap();
    let saved = saved["env_steps"].as_u64().unwrap();
    let budget = format!("run.total_steps={}", saved + 100);
    let resumed = rl(&[
        "resume",
        run,
        "--quiet",
        "--set",
        "sac.adam.lr=1e-4",
        "--set",
        &budget,
    ]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(result["total_env_steps"].as_u64(), Some(saved + 100));
    let config = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    let config = Config::from_toml(&config, &[]).unwrap();
    assert_eq!(config.sac.unwrap().adam.lr, 1e-4);
    let steps: Vec<u64> = std::fs::read_to_string(dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["env_steps"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
    assert_eq!(steps.last(), Some(&(saved + 100)));
}
