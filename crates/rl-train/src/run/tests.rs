use std::collections::BTreeSet;
use std::path::Path;

use super::*;

/// A config of `algo` on `env` for `steps` env steps, with `overrides`.
fn config(algo: &str, env: &str, steps: u64, overrides: &[&str]) -> Config {
    let text = format!("algo = \"{algo}\"\nenv = \"{env}\"\n[run]\ntotal_steps = {steps}\n");
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Config::from_toml(&text, &overrides).unwrap()
}

fn lines(dir: &Path) -> Vec<serde_json::Map<String, serde_json::Value>> {
    std::fs::read_to_string(dir.join(METRICS_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Small runs of every algorithm: one per action kind it fits.
fn small_runs() -> Vec<(&'static str, Config)> {
    vec![
        (
            "ppo",
            config("ppo", "cartpole", 256, &["ppo.n_steps=32", "run.n_envs=2"]),
        ),
        (
            "ppo_box",
            config(
                "ppo",
                "pendulum",
                128,
                &["ppo.n_steps=64", "ppo.batch_size=32"],
            ),
        ),
        (
            "recurrent_ppo",
            config(
                "recurrent_ppo",
                "masked_cartpole",
                128,
                &[
                    "ppo.n_steps=32",
                    "ppo.batch_size=32",
                    "recurrent.chunk_len=8",
                    "run.n_envs=2",
                ],
            ),
        ),
        (
            "sac",
            config(
                "sac",
                "pendulum",
                260,
                &[
                    "sac.hidden=[16, 16]",
                    "sac.batch_size=16",
                    "off_policy.buffer_capacity=1000",
                ],
            ),
        ),
        (
            "discrete_sac",
            config(
                "discrete_sac",
                "cartpole",
                160,
                &[
                    "sac.hidden=[16, 16]",
                    "sac.batch_size=16",
                    "off_policy.buffer_capacity=1000",
                ],
            ),
        ),
        (
            "dqn",
            config(
                "dqn",
                "cartpole",
                200,
                &[
                    "dqn.hidden=[16, 16]",
                    "off_policy.buffer_capacity=1000",
                    "off_policy.learning_starts=50",
                    "run.eval={every_steps=100, episodes=2}",
                    "log.metrics_every_steps=50",
                ],
            ),
        ),
    ]
}

#[test]
fn every_algorithm_fills_a_run_directory_with_the_same_metrics_keys() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    for (name, config) in small_runs() {
        let dir = tmp.path().join(name);
        let trained = train(&registry, &config, &dir, &TrainOptions::quiet()).unwrap();
        assert_eq!(
            trained.result.total_env_steps, config.run.total_steps,
            "{name}"
        );
        assert_eq!(trained.result.stopped_by, "budget", "{name}");
        for file in [CONFIG_FILE, RESULT_FILE, CURVE_FILE] {
            assert!(dir.join(file).is_file(), "{name}: {file}");
        }
        assert!(
            dir.join(CHECKPOINT_DIR)
                .join("learner.safetensors")
                .is_file()
        );
        let lines = lines(&dir);
        assert!(lines.len() >= 2, "{name}: {} lines", lines.len());
        for line in &lines {
            let keys: BTreeSet<&str> = line.keys().map(String::as_str).collect();
            for key in METRICS_KEYS {
                assert!(keys.contains(key), "{name} lacks {key}: {keys:?}");
            }
        }
        let steps: Vec<u64> = lines
            .iter()
            .map(|l| l["env_steps"].as_u64().unwrap())
            .collect();
        assert!(steps.windows(2).all(|w| w[0] < w[1]), "{name}: {steps:?}");
        assert_eq!(steps.last(), Some(&config.run.total_steps), "{name}");
        // The effective config reads back as the config that ran.
        let written = std::fs::read_to_string(dir.join(CONFIG_FILE)).unwrap();
        assert_eq!(Config::from_toml(&written, &[]).unwrap(), config, "{name}");
        // The saved policy evaluates.
        let evaluated = eval(&registry, &dir, Which::Latest, 2, Some(7)).unwrap();
        assert_eq!(evaluated.report.episodes, 2);
        assert_eq!(evaluated.env_steps, config.run.total_steps);
    }
    // DQN evaluated on a schedule: its lines carry the evaluations, and it kept a best.
    let dqn = lines(&tmp.path().join("dqn"));
    let evals: Vec<_> = dqn
        .iter()
        .filter(|l| !l["eval_return_mean"].is_null())
        .collect();
    assert_eq!(evals.len(), 2, "evaluations at 100 and 200 env steps");
    assert!(
        tmp.path()
            .join("dqn")
            .join(BEST_DIR)
            .join("learner.safetensors")
            .is_file()
    );
    assert!(eval(&registry, &tmp.path().join("dqn"), Which::Best, 1, None).is_ok());
    let no_best = eval(&registry, &tmp.path().join("ppo"), Which::Best, 1, None).unwrap_err();
    assert!(no_best.to_string().contains("run.eval"), "{no_best}");
}

#[test]
fn a_stopped_run_saves_and_resume_takes_it_to_its_budget() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let config = config(
        "dqn",
        "cartpole",
        300,
        &[
            "dqn.hidden=[16]",
            "off_policy.buffer_capacity=1000",
            "off_policy.learning_starts=20",
        ],
    );
    let stop = Arc::new(AtomicBool::new(true));
    let options = TrainOptions {
        stop: Some(Arc::clone(&stop)),
        ..TrainOptions::quiet()
    };
    let first = train(&registry, &config, &dir, &options).unwrap();
    assert!(first.interrupted);
    assert_eq!(first.result.stopped_by, "interrupted");
    let saved = first.result.total_env_steps;
    assert!(saved < 300, "stopped after one iteration, at {saved}");
    assert_eq!(
        eval(&registry, &dir, Which::Latest, 1, None)
            .unwrap()
            .env_steps,
        saved
    );

    // Training into the same folder again is refused; resuming continues it.
    let again = train(&registry, &config, &dir, &TrainOptions::quiet()).unwrap_err();
    assert_eq!(again.exit_code(), 2);
    assert!(again.to_string().contains("rl resume"), "{again}");
    stop.store(false, std::sync::atomic::Ordering::SeqCst);
    let resumed = resume(&registry, &dir, &options).unwrap();
    assert!(!resumed.interrupted);
    assert_eq!(resumed.result.total_env_steps, 300);
    let lines = lines(&dir);
    let steps: Vec<u64> = lines
        .iter()
        .map(|l| l["env_steps"].as_u64().unwrap())
        .collect();
    assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
    let walls: Vec<f64> = lines
        .iter()
        .map(|l| l["wall_s"].as_f64().unwrap())
        .collect();
    assert!(
        walls.windows(2).all(|w| w[0] <= w[1]),
        "wall time continues: {walls:?}"
    );

    // A longer budget through --set continues the same run.
    let longer = TrainOptions {
        overrides: vec!["run.total_steps=400".into()],
        ..TrainOptions::quiet()
    };
    assert_eq!(
        resume(&registry, &dir, &longer)
            .unwrap()
            .result
            .total_env_steps,
        400
    );
    let seed = TrainOptions {
        overrides: vec!["run.seed=5".into()],
        ..TrainOptions::quiet()
    };
    assert!(
        resume(&registry, &dir, &seed).is_err(),
        "another seed is another run"
    );
}

#[test]
fn usage_errors_come_before_anything_is_written() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let ok = config("ppo", "cartpole", 64, &["ppo.n_steps=32", "run.n_envs=2"]);
    let cases = [
        (config("ppo", "no_such_env", 64, &[]), "env"),
        (config("sac", "cartpole", 64, &[]), "algo"),
        (config("dqn", "pendulum", 64, &[]), "algo"),
        (
            config("dqn", "cartpole", 64, &["stored_actions=one_hot"]),
            "stored_actions",
        ),
        (
            config("dqn", "cartpole", 64, &["run.budget={ram=1000}"]),
            "run.budget",
        ),
        // A built-in environment would ignore keyword arguments.
        (
            config("ppo", "cartpole", 64, &["env_kwargs.length=3"]),
            "env_kwargs.length",
        ),
        (
            config("ppo", "cartpole", 64, &["atari.life_loss=\"terminate\""]),
            "atari",
        ),
    ];
    for (i, (bad, key)) in cases.into_iter().enumerate() {
        let dir = tmp.path().join(format!("bad{i}"));
        let e = train(&registry, &bad, &dir, &TrainOptions::quiet()).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().starts_with(key), "{e}");
        assert!(!dir.exists(), "nothing is created for {e}");
    }
    // Marked as built from them (the Python package's Gymnasium entries), it trains.
    let mut marked = Registry::builtin();
    marked.mark_env_kwargs_applied("cartpole");
    let with_kwargs = config(
        "ppo",
        "cartpole",
        64,
        &["ppo.n_steps=32", "run.n_envs=2", "env_kwargs.length=3"],
    );
    let dir = tmp.path().join("marked");
    train(&marked, &with_kwargs, &dir, &TrainOptions::quiet()).unwrap();
    let written = std::fs::read_to_string(dir.join("config.toml")).unwrap();
    assert!(written.contains("length = 3"), "{written}");
    // An --out below a file cannot be created.
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let e = train(&registry, &ok, &file.join("run"), &TrainOptions::quiet()).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().starts_with("--out"), "{e}");
    // A folder that is not a run directory.
    let e = eval(&registry, tmp.path(), Which::Latest, 1, None).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(e.to_string().contains("not a run directory"), "{e}");
}

/// The shipped PPO config on CartPole with `overrides`.
pub(super) fn ppo_cartpole(overrides: &[&str]) -> Config {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/ppo_cartpole.toml"),
    )
    .unwrap();
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Config::from_toml(&text, &overrides).unwrap()
}

/// Plans come from the configuration alone: `Entry::plan` takes no learner, so a plan
/// of networks far beyond any machine (a 4 TB actor would abort this process if it were
/// built) is made and refused, and `train` refuses it before creating anything.
#[test]
fn plans_are_made_without_building_and_refusals_create_nothing() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let budget = "run.budget={ram=1073741824}";
    for hidden in [
        "policy.hidden=[100000, 100000]",
        "policy.hidden=[1000000, 1000000]",
    ] {
        let huge = ppo_cartpole(&[hidden, budget]);
        let planned = plan(&registry, &huge).unwrap();
        assert!(matches!(planned.limit, Limit::Budget(_)));
        let why = planned.refused.expect("over a 1 GiB budget");
        assert!(
            why.contains("policy.hidden") && why.contains("run.budget"),
            "{why}"
        );
        // The actor's parameters, from its widths: 4 -> h -> h -> 2.
        let h: u64 = if hidden.contains("1000000") {
            1_000_000
        } else {
            100_000
        };
        let actor = planned
            .plan
            .lines()
            .iter()
            .find(|l| l.component == "learner/ppo/actor/parameters")
            .unwrap();
        assert_eq!(actor.bytes, 4 * (5 * h + (h + 1) * h + (h + 1) * 2));
        let dir = tmp.path().join("huge");
        let e = train(&registry, &huge, &dir, &TrainOptions::quiet()).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        let message = e.to_string();
        assert!(
            message.starts_with("run.budget: the plan needs"),
            "{message}"
        );
        assert!(
            message.contains("learner/ppo/actor/parameters"),
            "the table: {message}"
        );
        assert!(!dir.exists(), "a refused plan creates nothing");
    }
    // A rollout no buffer can hold: a config error naming the key, before anything.
    let steps = ppo_cartpole(&["ppo.n_steps=1000000000"]);
    for e in [
        plan(&registry, &steps).unwrap_err(),
        train(
            &registry,
            &steps,
            &tmp.path().join("steps"),
            &TrainOptions::quiet(),
        )
        .unwrap_err(),
    ] {
        assert_eq!(e.exit_code(), 2, "{e}");
        assert!(e.to_string().starts_with("ppo.n_steps"), "{e}");
    }
    assert!(!tmp.path().join("steps").exists());
    // Sizes whose bytes overflow 64 bits: a config error, not a panic or a wrap.
    let overflow = ppo_cartpole(&["policy.hidden=[4294967296, 4294967296]"]);
    let e = plan(&registry, &overflow).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(e.to_string().starts_with("policy.hidden"), "{e}");
}

/// The plan of every algorithm, made from its configuration, equals what the trainer
/// reports once built; the run records it with two more lines, the process's memory
/// measured before the run and what building the environments added.
#[test]
fn plans_from_the_config_equal_the_built_trainers_plans() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    for (name, run) in small_runs() {
        let planned = plan(&registry, &run).unwrap();
        let trained = train(
            &registry,
            &run,
            &tmp.path().join(name),
            &TrainOptions::quiet(),
        )
        .unwrap();
        let (process, trainer): (Vec<_>, Vec<_>) =
            trained.plan.lines().iter().cloned().partition(|l| {
                l.component.starts_with("process before the run")
                    || l.component.starts_with("environments (measured")
            });
        assert_eq!(planned.plan.lines(), &trainer[..], "{name}");
        assert_eq!(process.len(), 2, "{name}: {process:?}");
        assert_eq!(
            trained.result.planned_bytes,
            trained.plan.total(rl_core::Location::Ram),
            "{name}: result.json's planned_bytes is the recorded plan's"
        );
        assert!(process[0].bytes > 1 << 20, "{name}: {:?}", process[0]);
    }
}

#[test]
fn without_a_budget_the_available_memory_is_the_limit() {
    let plan = MemoryPlan::new()
        .with("learner/big", rl_core::Location::Ram, 3 << 30)
        .with("replay/file", rl_core::Location::File, 1 << 40);
    let why = Limit::Available(1 << 30).refusal(&plan).unwrap();
    assert!(why.contains("MemAvailable"), "{why}");
    assert!(why.contains("learner/big (3.00 GiB)"), "{why}");
    assert!(why.contains("set run.budget"), "{why}");
    // File-backed lines are not RAM; a plan that fits is not refused.
    assert_eq!(Limit::Available(4 << 30).refusal(&plan), None);
    assert_eq!(Limit::Unchecked.refusal(&plan), None);
    let why = Limit::Budget(MemoryBudget::ram(1 << 30))
        .refusal(&plan)
        .unwrap();
    assert!(why.contains("run.budget allows 1.00 GiB"), "{why}");
    // A config with a budget is checked against it, whatever the machine has.
    let budgeted = config("dqn", "cartpole", 64, &["run.budget={ram=1000}"]);
    assert_eq!(Limit::of(&budgeted), Limit::Budget(MemoryBudget::ram(1000)));
    let unbudgeted = config("dqn", "cartpole", 64, &[]);
    if cfg!(target_os = "linux") {
        assert!(matches!(Limit::of(&unbudgeted), Limit::Available(b) if b > 0));
    }
}

#[test]
fn a_checkpoint_of_another_algorithm_is_named_as_such() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let ppo = tmp.path().join("ppo");
    let dqn = tmp.path().join("dqn");
    let ppo_config = config("ppo", "cartpole", 64, &["ppo.n_steps=32", "run.n_envs=2"]);
    let dqn_config = config(
        "dqn",
        "cartpole",
        64,
        &["dqn.hidden=[8]", "off_policy.buffer_capacity=100"],
    );
    train(&registry, &ppo_config, &ppo, &TrainOptions::quiet()).unwrap();
    train(&registry, &dqn_config, &dqn, &TrainOptions::quiet()).unwrap();
    std::fs::remove_dir_all(ppo.join(CHECKPOINT_DIR)).unwrap();
    std::fs::rename(dqn.join(CHECKPOINT_DIR), ppo.join(CHECKPOINT_DIR)).unwrap();
    for e in [
        eval(&registry, &ppo, Which::Latest, 1, None).unwrap_err(),
        resume(&registry, &ppo, &TrainOptions::quiet()).unwrap_err(),
        export(&ppo, Which::Latest, None).unwrap_err(),
    ] {
        assert_eq!(e.exit_code(), 2);
        let text = e.to_string();
        assert!(
            text.contains("checkpoint of algo dqn") && text.contains("algo = \"ppo\""),
            "{text}"
        );
        assert!(!text.contains("corrupt"), "{text}");
    }
}

#[test]
fn export_writes_every_policy_network_without_optimiser_state() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let config = config(
        "ppo",
        "cartpole",
        64,
        &["ppo.n_steps=32", "run.n_envs=2", "policy.hidden=[16, 8]"],
    );
    train(&registry, &config, &dir, &TrainOptions::quiet()).unwrap();
    let exported = export(&dir, Which::Latest, None).unwrap();
    assert_eq!(exported.path, dir.join("policy.safetensors"));
    let expected: Vec<(String, Vec<usize>)> = [
        ("actor.0.bias", vec![16]),
        ("actor.0.weight", vec![16, 4]),
        ("actor.2.bias", vec![8]),
        ("actor.2.weight", vec![8, 16]),
        ("actor.4.bias", vec![2]),
        ("actor.4.weight", vec![2, 8]),
        ("critic.0.bias", vec![16]),
        ("critic.0.weight", vec![16, 4]),
        ("critic.2.bias", vec![8]),
        ("critic.2.weight", vec![8, 16]),
        ("critic.4.bias", vec![1]),
        ("critic.4.weight", vec![1, 8]),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_owned(), s))
    .collect();
    assert_eq!(exported.tensors, expected);
    // The file is the network layer's weights format, and holds the trained weights.
    let mut actor =
        rl_nn::Mlp::zeros(rl_nn::MlpSpec::new(4, &[16, 8], 2, rl_nn::Activation::Relu)).unwrap();
    rl_nn::load_weights(&exported.path, "actor", &mut actor).unwrap();
    use rl_nn::Weights;
    assert!(actor.params().iter().any(|&p| p != 0.0));
    let bytes = std::fs::read(&exported.path).unwrap();
    let text = String::from_utf8_lossy(&bytes[..2000.min(bytes.len())]).into_owned();
    assert!(!text.contains("exp_avg"), "no optimiser state");
}

/// Remote actors of the registry, taking turns, each taking the newest weights first.
#[derive(Debug)]
struct Turns {
    actors: Vec<Box<dyn ChunkActor>>,
    next: usize,
    weights: Option<(u64, u64, Vec<u8>)>,
}

impl crate::trainer::ChunkSource for Turns {
    fn next_chunk(&mut self, sink: &mut crate::trainer::ChunkSink<'_>) -> rl_algos::Result<()> {
        let n = self.actors.len();
        let actor = &mut self.actors[self.next % n];
        self.next += 1;
        if let Some((version, steps, bytes)) = &self.weights
            && actor.version() != *version
        {
            actor.set_weights(*version, *steps, bytes)?;
        }
        let episodes = actor.collect()?.to_vec();
        let columns = (0..actor.schema().columns().len())
            .map(|i| actor.column(i))
            .collect::<rl_algos::Result<Vec<_>>>()?;
        sink.extend(&columns)?;
        for episode in episodes {
            sink.episode(episode);
        }
        Ok(())
    }

    fn publish(&mut self, version: u64, env_steps: u64, weights: &[u8]) -> rl_algos::Result<()> {
        self.weights = Some((version, env_steps, weights.to_vec()));
        Ok(())
    }

    fn memory_plan(&self, schema: &rl_core::Schema) -> MemoryPlan {
        let mut plan = MemoryPlan::new();
        plan.add(
            "remote/chunks_in_flight",
            rl_core::Location::Ram,
            schema.row_bytes() as u64,
        );
        plan
    }
}

#[test]
fn a_remote_run_writes_the_run_directory_of_a_local_one() {
    let registry = Registry::builtin();
    let config = config(
        "dqn",
        "cartpole",
        400,
        &[
            "dqn.hidden=[16]",
            "dqn.batch_size=16",
            "off_policy.learning_starts=64",
        ],
    );
    let chunk = |seed| ChunkConfig {
        steps_per_chunk: 8,
        random_frames: 32,
        seed,
    };
    let actors = vec![
        remote_actor(&registry, &config, chunk(1_000)).unwrap(),
        remote_actor(&registry, &config, chunk(2_000)).unwrap(),
    ];
    assert_eq!(actors[0].rows(), 8);
    let source = Turns {
        actors,
        next: 0,
        weights: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let trained = train_remote(
        &registry,
        &config,
        &out,
        &TrainOptions::quiet(),
        Box::new(source),
    )
    .unwrap();
    assert_eq!(trained.result.total_env_steps, 400);
    assert!(
        trained
            .plan
            .lines()
            .iter()
            .any(|l| l.component == "collector/remote/chunks_in_flight")
    );
    for file in [CONFIG_FILE, METRICS_FILE, RESULT_FILE] {
        assert!(out.join(file).is_file(), "{file}");
    }
    assert!(
        out.join(CHECKPOINT_DIR)
            .join("learner.safetensors")
            .is_file()
    );
    assert_eq!(lines(&out).last().unwrap()["env_steps"], 400);
    // The saved learner evaluates like a local run's.
    assert!(eval(&registry, &out, Which::Latest, 2, None).is_ok());
}

#[test]
fn remote_runs_refuse_on_policy_algorithms() {
    let registry = Registry::builtin();
    let ppo = config("ppo", "cartpole", 64, &[]);
    let chunk = ChunkConfig {
        steps_per_chunk: 4,
        random_frames: 0,
        seed: 0,
    };
    let err = remote_actor(&registry, &ppo, chunk).unwrap_err();
    assert!(err.to_string().contains("on-policy"), "{err}");
    assert_eq!(err.exit_code(), 2);
}

/// Every file under `dir`, by path, with a hash of its bytes.
fn hashes(dir: &Path) -> std::collections::BTreeMap<std::path::PathBuf, u64> {
    use std::hash::{Hash, Hasher};
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                std::fs::read(&path).unwrap().hash(&mut h);
                out.insert(path, h.finish());
            }
        }
    }
    out
}

fn small_ppo(steps: u64) -> Config {
    config(
        "ppo",
        "cartpole",
        steps,
        &["ppo.n_steps=32", "run.n_envs=2", "policy.hidden=[64, 64]"],
    )
}

#[test]
fn resume_changes_a_learning_rate_and_refuses_a_network_change_untouched() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    train(&registry, &small_ppo(128), &dir, &TrainOptions::quiet()).unwrap();

    let before = hashes(&dir);
    let wider = TrainOptions {
        overrides: vec![
            "policy.hidden=[32, 32]".into(),
            "run.total_steps=256".into(),
        ],
        ..TrainOptions::quiet()
    };
    let e = resume(&registry, &dir, &wider).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with("policy.hidden cannot change on resume (the checkpoint holds [64, 64])"),
        "{text}"
    );
    assert!(!text.contains('{') && !text.contains('\n'), "{text}");
    assert_eq!(hashes(&dir), before, "a refused resume writes nothing");

    let slower = TrainOptions {
        overrides: vec!["ppo.adam.lr=1e-4".into(), "run.total_steps=256".into()],
        ..TrainOptions::quiet()
    };
    let resumed = resume(&registry, &dir, &slower).unwrap();
    assert_eq!(resumed.result.total_env_steps, 256);
    let saved = rundir::read_config(&dir, &[]).unwrap();
    assert_eq!(saved.ppo.unwrap().adam.lr, 1e-4);
    assert_eq!(saved.run.total_steps, 256);
    let last = lines(&dir).pop().unwrap();
    assert!(
        (last["learning_rate"].as_f64().unwrap() - 1e-4).abs() < 1e-9,
        "{last:?}"
    );
    let changes = std::fs::read_to_string(dir.join(CHANGES_FILE)).unwrap();
    let change: serde_json::Value = serde_json::from_str(changes.trim()).unwrap();
    assert_eq!(change["changes"]["ppo.adam.lr"]["new"], 1e-4);
    assert_eq!(change["changes"]["run.total_steps"]["old"], 128);
}

#[test]
fn resume_cuts_a_torn_line_and_moves_lines_past_the_checkpoint_aside() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let first = train(&registry, &small_ppo(128), &dir, &TrainOptions::quiet()).unwrap();
    let saved = first.result.total_env_steps;
    // A killed process: lines after the checkpoint, the last one torn.
    let mut text = std::fs::read_to_string(dir.join(METRICS_FILE)).unwrap();
    for steps in [saved + 64, saved + 128] {
        text.push_str(&format!("{{\"env_steps\":{steps},\"after\":true}}\n"));
    }
    text.push_str("{\"env_steps\":9999,\"wal");
    std::fs::write(dir.join(METRICS_FILE), text).unwrap();

    let longer = TrainOptions {
        overrides: vec!["run.total_steps=256".into()],
        ..TrainOptions::quiet()
    };
    resume(&registry, &dir, &longer).unwrap();
    let lines = lines(&dir);
    let steps: Vec<u64> = lines
        .iter()
        .map(|l| l["env_steps"].as_u64().unwrap())
        .collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
    assert_eq!(steps.last(), Some(&256));
    assert!(lines.iter().all(|l| !l.contains_key("after")));
    let moved: Vec<serde_json::Value> = std::fs::read_to_string(dir.join(DISCARDED_METRICS_FILE))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(moved.len(), 2);
    assert!(moved.iter().all(|l| l["after"] == true));
    assert!(plot(std::slice::from_ref(&dir), &tmp.path().join("curve.png")).is_ok());
}

#[test]
fn metrics_lines_are_on_disk_while_the_run_goes_on() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let config = config(
        "ppo",
        "cartpole",
        10_000_000,
        &[
            "ppo.n_steps=32",
            "run.n_envs=2",
            "log.metrics_every_steps=64",
        ],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let options = TrainOptions {
        stop: Some(Arc::clone(&stop)),
        ..TrainOptions::quiet()
    };
    let path = dir.join(METRICS_FILE);
    let watcher = std::thread::spawn(move || {
        // Stops the run once two whole lines are in the file: they were written before
        // the run ended.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while std::time::Instant::now() < deadline {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.matches('\n').count() >= 2 {
                let whole = text
                    .lines()
                    .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok());
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
                return whole;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        false
    });
    let trained = train(&registry, &config, &dir, &options).unwrap();
    assert!(
        watcher.join().unwrap(),
        "whole lines were seen during the run"
    );
    assert!(trained.interrupted);
    assert!(trained.result.total_env_steps < 10_000_000);
}

#[test]
fn a_run_killed_before_its_first_checkpoint_starts_over_on_resume() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    train(&registry, &small_ppo(128), &dir, &TrainOptions::quiet()).unwrap();
    // As a kill before the first save leaves it: a config and metrics, no checkpoint.
    std::fs::remove_dir_all(dir.join(CHECKPOINT_DIR)).unwrap();
    let before = lines(&dir).len();
    assert!(before > 0);
    let resumed = resume(&registry, &dir, &TrainOptions::quiet()).unwrap();
    assert_eq!(resumed.result.total_env_steps, 128);
    assert!(
        dir.join(CHECKPOINT_DIR)
            .join(crate::trainer::RUN_FILE)
            .is_file()
    );
    let steps: Vec<u64> = lines(&dir)
        .iter()
        .map(|l| l["env_steps"].as_u64().unwrap())
        .collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
    let moved = std::fs::read_to_string(dir.join(DISCARDED_METRICS_FILE)).unwrap();
    assert_eq!(
        moved.lines().count(),
        before,
        "the first attempt's lines are set aside"
    );
}

#[test]
fn a_save_cut_between_its_renames_is_put_back_on_resume() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    train(&registry, &small_ppo(128), &dir, &TrainOptions::quiet()).unwrap();
    // A crash after `checkpoint` was moved aside and before the new one took its place.
    std::fs::rename(dir.join(CHECKPOINT_DIR), dir.join("checkpoint.old")).unwrap();
    std::fs::create_dir(dir.join("checkpoint.partial")).unwrap();
    let longer = TrainOptions {
        overrides: vec!["run.total_steps=256".into()],
        ..TrainOptions::quiet()
    };
    let resumed = resume(&registry, &dir, &longer).unwrap();
    assert_eq!(resumed.result.total_env_steps, 256);
    let steps: Vec<u64> = lines(&dir)
        .iter()
        .map(|l| l["env_steps"].as_u64().unwrap())
        .collect();
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "{steps:?}");
    assert!(
        !dir.join(DISCARDED_METRICS_FILE).exists(),
        "nothing was lost"
    );
    assert!(!dir.join("checkpoint.old").exists() && !dir.join("checkpoint.partial").exists());
}

#[test]
fn checkpoint_cadences_come_from_the_config_and_default_to_ten_minutes() {
    let shipped = config("ppo", "cartpole", 128, &[]);
    let schedule = shipped.run.checkpoint.clone().unwrap();
    assert_eq!(schedule.every_minutes, Some(10.0));
    assert!(schedule.at_eval && schedule.every_steps.is_none());
    let set = config("ppo", "cartpole", 128, &["run.checkpoint.every_steps=2000"]);
    let schedule = set.run.checkpoint.clone().unwrap();
    assert_eq!(schedule.every_steps, Some(2000));
    assert_eq!(
        schedule.every_minutes,
        Some(10.0),
        "the other cadences stay"
    );
    // Written out and read back as the effective config.
    let again = Config::from_toml(&set.to_toml().unwrap(), &[]).unwrap();
    assert_eq!(again.run.checkpoint, set.run.checkpoint);
    for (set, key) in [
        (
            "run.checkpoint.every_minutes=0",
            "run.checkpoint.every_minutes",
        ),
        ("run.checkpoint.every_steps=0", "run.checkpoint.every_steps"),
        ("run.checkpoint.dir='x'", "run.checkpoint.dir"),
    ] {
        let text = "algo = \"ppo\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 1\n";
        let e = Config::from_toml(text, &[set.to_owned()]).unwrap_err();
        assert_eq!(e.key, key, "{e}");
    }

    // Saves on the step cadence during the run: every 64 steps of a 256-step run.
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let mut every = small_ppo(256);
    every.run.checkpoint.as_mut().unwrap().every_steps = Some(64);
    let options = TrainOptions::quiet();
    let plan = plan(&registry, &every).unwrap();
    assert!(plan.refused.is_none());
    train(&registry, &every, &dir, &options).unwrap();
    let saved = crate::trainer::RunCounters::load(&dir.join(CHECKPOINT_DIR)).unwrap();
    assert_eq!(saved.env_steps, 256);
    assert!(saved.wall_s > 0.0);
}

#[test]
fn resume_changes_an_off_policy_learning_rate() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let sac = config(
        "sac",
        "pendulum",
        150,
        &[
            "off_policy.learning_starts=50",
            "off_policy.buffer_capacity=1000",
            "sac.hidden=[16, 16]",
            "sac.batch_size=16",
        ],
    );
    train(&registry, &sac, &dir, &TrainOptions::quiet()).unwrap();
    let slower = TrainOptions {
        overrides: vec!["sac.adam.lr=1e-4".into(), "run.total_steps=200".into()],
        ..TrainOptions::quiet()
    };
    let resumed = resume(&registry, &dir, &slower).unwrap();
    assert_eq!(resumed.result.total_env_steps, 200);
    assert_eq!(
        rundir::read_config(&dir, &[]).unwrap().sac.unwrap().adam.lr,
        1e-4
    );
    let eps = TrainOptions {
        overrides: vec!["sac.adam.eps=1e-3".into(), "run.total_steps=300".into()],
        ..TrainOptions::quiet()
    };
    let e = resume(&registry, &dir, &eps).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    assert!(
        e.to_string()
            .starts_with("sac.adam.eps cannot change on resume"),
        "{e}"
    );
}

/// `run.threads` is a run setting like any other: written into the run's config, and a
/// resume may change it (the learner is the same on any number of threads). The DQN
/// below uses 256-256 networks at batch 64, whose products split.
#[test]
fn threads_come_from_the_config_and_may_change_on_resume() {
    let registry = Registry::builtin();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let dqn = config(
        "dqn",
        "cartpole",
        300,
        &["run.threads=2", "off_policy.learning_starts=100"],
    );
    train(&registry, &dqn, &dir, &TrainOptions::quiet()).unwrap();
    assert_eq!(rundir::read_config(&dir, &[]).unwrap().run.threads, 2);
    let one = TrainOptions {
        overrides: vec!["run.threads=1".into(), "run.total_steps=400".into()],
        ..TrainOptions::quiet()
    };
    let resumed = resume(&registry, &dir, &one).unwrap();
    assert_eq!(resumed.result.total_env_steps, 400);
    assert_eq!(rundir::read_config(&dir, &[]).unwrap().run.threads, 1);
    let text = "algo = \"dqn\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 300\n";
    let e = Config::from_toml(text, &["run.threads=0".to_owned()]).unwrap_err();
    assert!(e.to_string().contains("run.threads is 0: use 1 to"), "{e}");
}
