//! Trainers from Python: `flatrl.train`, `flatrl.resume`, `flatrl.evaluate` and
//! `flatrl.plan` run what the `rl` command runs (`rl_train::run`), from the same configs (a
//! TOML file, TOML text or a dict), on the built-in environments or on any Gymnasium
//! environment, into the same run directories (`config.toml`, `metrics.jsonl`,
//! `checkpoint/`, `best/`, `result.json`, `curve.png`).
//!
//! The environment of a run:
//!
//! - `env=None`: the config's `env`, a built-in name (`cartpole`, `pendulum` ...) or
//!   else a Gymnasium id (`"CartPole-v1"`), built with `gymnasium.make`;
//! - `env="CartPole-v1"` (a str): the same, and the config's `env` becomes that name, so
//!   `config.toml` records it and `resume`/`evaluate` find it again without `env`;
//! - `env=callable`: a factory taking no argument that returns a `gymnasium.Env`; the
//!   config's `env` becomes the environment's name (its `spec.id`, or its class name),
//!   so `config.toml` and `result.json` say what ran (give the callable again to
//!   `resume`/`evaluate`/`load`).
//!
//! Training runs with the GIL released; each Gymnasium `reset`/`step` takes it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use rl_train::config::{Config, EnvKwarg};
use rl_train::run::{self as cli, Registry, TrainOptions, Which};
use toml::{Table, Value};

use crate::error::{budget_exception, value_error};
use crate::gym::{ErrorSlot, GymFactory, Layout};
use crate::plan::MemoryPlan;
use rl_envs::{AtariPreprocess, LifeLoss};

pyo3::create_exception!(
    flatrl,
    ConfigError,
    pyo3::exceptions::PyValueError,
    "A config (file, text, dict or override) that cannot be used: the message names the key, what is wrong and what is allowed. Nothing ran."
);

/// A Python value as a TOML value; `key` names it in errors.
fn toml_value(value: &Bound<'_, PyAny>, key: &str) -> PyResult<Value> {
    if value.is_instance_of::<PyBool>() {
        return Ok(Value::Boolean(value.extract()?));
    }
    if value.is_instance_of::<PyInt>() {
        return Ok(Value::Integer(value.extract().map_err(|_| {
            ConfigError::new_err(format!("{key}: the integer does not fit in 64 bits"))
        })?));
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(Value::Float(value.extract()?));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(Value::String(value.extract()?));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        return toml_table(dict, key).map(Value::Table);
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        return value
            .try_iter()?
            .enumerate()
            .map(|(i, item)| toml_value(&item?, &format!("{key}[{i}]")))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    if let Ok(path) = value.extract::<PathBuf>() {
        return Ok(Value::String(path.to_string_lossy().into_owned()));
    }
    let kind = value.get_type().name()?;
    let hint = if value.is_none() {
        "leave the key out for its default"
    } else {
        "use a bool, int, float, str, list or dict"
    };
    Err(ConfigError::new_err(format!(
        "{key}: a {kind} is not a config value: {hint}"
    )))
}

/// A dict of str keys as a TOML table.
fn toml_table(dict: &Bound<'_, PyDict>, prefix: &str) -> PyResult<Table> {
    let mut table = Table::new();
    for (name, value) in dict.iter() {
        let name: String = name.extract().map_err(|_| {
            ConfigError::new_err(format!(
                "{}: keys of a config dict are str, not {}",
                if prefix.is_empty() {
                    "the config"
                } else {
                    prefix
                },
                name.get_type().name().map_or("?".into(), |n| n.to_string())
            ))
        })?;
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        table.insert(name, toml_value(&value, &key)?);
    }
    Ok(table)
}

fn config_error(err: rl_train::config::ConfigError) -> PyErr {
    ConfigError::new_err(python_wording(&err.to_string()))
}

/// A message of the run layer, which speaks the `rl` command's language (`--set`,
/// `--out`, `rl resume DIR`), in the words of the Python functions that take the same
/// things (`overrides=`, `run_dir`, `flatrl.resume(run_dir)`).
pub(crate) fn python_wording(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    // `rl CMD ARGS` spans between backticks.
    while let Some(at) = rest.find("`rl ") {
        out.push_str(&rest[..at]);
        let span = &rest[at + 1..];
        let Some(end) = span.find('`') else {
            out.push_str(&rest[at..]);
            rest = "";
            break;
        };
        let mut words = span[..end].split_whitespace().skip(1);
        let command = words.next().unwrap_or("");
        let args: Vec<String> = words.map(|w| format!("{w:?}")).collect();
        out.push_str(&format!("flatrl.{command}({})", args.join(", ")));
        rest = &span[end + 1..];
    }
    out.push_str(rest);
    [
        (
            "give the --out folder of flatrl.train()",
            "give the run_dir of flatrl.train",
        ),
        (
            "(--out DIR saves into DIR/checkpoint)",
            "(a run saves into run_dir/checkpoint)",
        ),
        ("choose another --out", "choose another run_dir"),
        ("--out ", "run_dir "),
        ("--set: ", "overrides: "),
        ("--set ", "the override "),
        ("--episodes is 0", "episodes is 0"),
    ]
    .into_iter()
    .fold(out, |text, (cli, python)| text.replace(cli, python))
}

/// A config from a dict, a path to a TOML file, or TOML text, with `overrides`
/// (`"key=value"`) applied.
fn read_config(config: &Bound<'_, PyAny>, overrides: &[String]) -> PyResult<Config> {
    if let Ok(dict) = config.cast::<PyDict>() {
        let text = toml::to_string(&toml_table(dict, "")?)
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        return Config::from_toml(&text, overrides).map_err(config_error);
    }
    let text: String = if let Ok(text) = config.extract::<String>()
        && (text.contains('\n') || text.contains('='))
    {
        text
    } else if let Ok(path) = config.extract::<PathBuf>() {
        std::fs::read_to_string(&path).map_err(|e| {
            let message = format!(
                "config {}: {e}: give a TOML file, TOML text or a dict",
                path.display()
            );
            if e.kind() == std::io::ErrorKind::NotFound {
                PyFileNotFoundError::new_err(message)
            } else {
                PyOSError::new_err(message)
            }
        })?
    } else {
        return Err(PyTypeError::new_err(format!(
            "config is a {}: give a dict, a path to a TOML file or TOML text",
            config.get_type().name()?
        )));
    };
    Config::from_toml(&text, overrides).map_err(config_error)
}

/// The registry a run of `config` needs (built-in environments, plus the Gymnasium one
/// `env` or `config.env` names), with `config.env` set to the environment's name.
fn registry(
    py: Python<'_>,
    config: &mut Config,
    env: Option<&Bound<'_, PyAny>>,
    errors: &ErrorSlot,
) -> PyResult<Registry> {
    let mut registry = Registry::builtin();
    let factory = match env {
        Some(env) if env.is_instance_of::<PyString>() => {
            config.env = env.extract()?;
            None
        }
        Some(env) => Some(env.clone()),
        None => None,
    };
    // `gymnasium:HalfCheetah-v5` names a Gymnasium id explicitly (the `rl` command's
    // spelling); a bare id works too.
    let id = config
        .env
        .strip_prefix("gymnasium:")
        .unwrap_or(&config.env)
        .to_owned();
    let atari = factory.is_none() && id.starts_with("ALE/");
    let callable = factory.is_some();
    let env_kwargs = PyDict::new(py);
    for (name, value) in &config.env_kwargs {
        env_kwargs.set_item(name, kwarg_object(py, value)?)?;
    }
    if atari && config.env_kwargs.contains_key("frameskip") {
        return Err(ConfigError::new_err(
            "env_kwargs.frameskip: an Atari game's frames are skipped in Rust (4, with the max over the last two frames): remove it",
        ));
    }
    let factory = match factory {
        // A callable takes the config's env_kwargs as keyword arguments.
        Some(factory) if !config.env_kwargs.is_empty() => py
            .import("functools")?
            .getattr("partial")?
            .call((factory,), Some(&env_kwargs))?,
        Some(factory) => factory,
        None if registry.actions(&config.env).is_some() => return Ok(registry),
        None => {
            if atari {
                // Gymnasium knows the ALE ids once ale_py registered them.
                let ale = py.import("ale_py").map_err(|e| {
                    ConfigError::new_err(format!(
                        "env: {:?} is an Atari game, and ale_py cannot be imported ({e}): pip install ale-py (its wheels include the ROMs)",
                        config.env
                    ))
                })?;
                py.import("gymnasium")?
                    .call_method1("register_envs", (ale,))?;
            }
            let gymnasium = py.import("gymnasium").map_err(|e| {
                ConfigError::new_err(format!(
                    "env: {:?} is not a built-in environment ({}), and gymnasium cannot be imported to make it ({e})",
                    config.env,
                    registry.names().collect::<Vec<_>>().join(", ")
                ))
            })?;
            // An Atari game steps one raw frame at a time: the frame skip, the max over
            // the last two frames, the grayscale, the resize and the stack happen in Rust
            // (rl_envs::AtariPreprocess).
            let kwargs = env_kwargs.copy()?;
            if atari {
                kwargs.set_item("frameskip", 1)?;
            }
            let partial = py
                .import("functools")?
                .getattr("partial")?
                .call((gymnasium.getattr("make")?, id.as_str()), Some(&kwargs))?;
            // An id Gymnasium does not know: say which names work.
            if let Err(err) = gymnasium.getattr("spec")?.call1((id.as_str(),)) {
                return Err(ConfigError::new_err(format!(
                    "env: {:?} is neither a built-in environment ({}) nor a Gymnasium id ({err})",
                    config.env,
                    registry.names().collect::<Vec<_>>().join(", ")
                )));
            }
            partial
        }
    };
    let layout = if atari {
        Layout::AsIs
    } else {
        Layout::ChannelsFirst
    };
    let made = Arc::new(GymFactory::new(&factory, layout, errors.clone())?);
    let preprocess = config.atari.clone().unwrap_or_default();
    if atari {
        // The raw frames, actions and settings are checked once here, so every later wrap
        // succeeds.
        let raw = made.make::<u32, u8>();
        if preprocess.life_loss == LifeLoss::Terminate && !raw.has_lives() {
            return Err(ConfigError::new_err(format!(
                "atari.life_loss: is \"terminate\", but {:?} does not say how many lives are left (env.unwrapped.ale.lives()): use \"continue\"",
                config.env
            )));
        }
        if preprocess.fire_reset && !raw.fires() {
            return Err(ConfigError::new_err(format!(
                "atari.fire_reset: is true, but action 1 of {:?} is not FIRE (env.unwrapped.get_action_meanings()): set it to false",
                config.env
            )));
        }
        // Dropped untouched, the game goes back to the factory for the next `make`.
        AtariPreprocess::with_lives(raw, preprocess.clone(), 0)
            .map_err(|e| ConfigError::new_err(format!("atari: {e}")))?;
    }
    // A callable's environment goes by its own name (its Gymnasium id), so that
    // `config.toml` and `result.json` say what ran; it also answers to the config's
    // name (a run saved under it, resumed or loaded with the callable).
    let mut names = vec![config.env.clone()];
    if callable {
        config.env = made.name().to_owned();
        names.push(config.env.clone());
    }
    for name in names {
        let made = Arc::clone(&made);
        if atari {
            let preprocess = preprocess.clone();
            registry.register_pixels(&name, move |seed| {
                AtariPreprocess::with_lives(made.make::<u32, u8>(), preprocess.clone(), seed)
                    .expect("the raw frames, actions and settings were checked when the env was registered")
            });
            registry.mark_atari_applied(&name);
        } else if made.image() {
            registry.register_pixels(&name, move |_seed| made.make::<u32, u8>());
        } else if made.discrete() {
            registry.register_discrete(&name, move |_seed| made.make::<u32, f32>());
        } else {
            registry.register_continuous(&name, move |_seed| made.make::<f32, f32>());
        }
        registry.mark_env_kwargs_applied(&name);
    }
    Ok(registry)
}

/// A config's keyword argument as the Python value a constructor takes (an array as a
/// tuple).
fn kwarg_object<'py>(py: Python<'py>, value: &EnvKwarg) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        EnvKwarg::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        EnvKwarg::Int(i) => i.into_pyobject(py)?.into_any(),
        EnvKwarg::Float(f) => PyFloat::new(py, *f).into_any(),
        EnvKwarg::String(text) => PyString::new(py, text).into_any(),
        EnvKwarg::Array(items) => PyTuple::new(
            py,
            items
                .iter()
                .map(|item| kwarg_object(py, item))
                .collect::<PyResult<Vec<_>>>()?,
        )?
        .into_any(),
    })
}

/// What every entry point starts with: the config (with `overrides`), the registry of
/// its environment (`env` as the module documentation says), and the slot that keeps
/// the environment's exceptions.
pub(crate) fn prepare(
    py: Python<'_>,
    config: &Bound<'_, PyAny>,
    overrides: &[String],
    env: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Config, Registry, ErrorSlot)> {
    let mut config = read_config(config, overrides)?;
    let errors = ErrorSlot::default();
    let registry = registry(py, &mut config, env, &errors)?;
    Ok((config, registry, errors))
}

/// The Python exception for an error of the `rl` command's library side: the
/// environment's own exception when one was raised.
pub(crate) fn cli_error(err: cli::Error, errors: &ErrorSlot) -> PyErr {
    if let Some(raised) = errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
    {
        return raised;
    }
    let message = python_wording(&err.to_string());
    match err {
        cli::Error::Config(e) => config_error(e),
        cli::Error::Usage(_) | cli::Error::Input { .. } => value_error(message),
        cli::Error::Io { .. } | cli::Error::Nn(_) => PyOSError::new_err(message),
        cli::Error::Algos(rl_algos::Error::Core { source }) => crate::error::core_error(source),
        cli::Error::Algos(
            rl_algos::Error::Config { .. }
            | rl_algos::Error::CheckpointMismatch { .. }
            | rl_algos::Error::SpaceMismatch { .. }
            | rl_algos::Error::ShapeMismatch { .. }
            | rl_algos::Error::Nn { .. },
        ) => value_error(message),
        _ => PyRuntimeError::new_err(message),
    }
}

/// The result (`result.json`'s object) as a dict, with `"dir"` added.
pub(crate) fn result_dict<'py>(
    py: Python<'py>,
    trained: &cli::Trained,
) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(&trained.result)
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let dict = py.import("json")?.call_method1("loads", (text,))?;
    dict.set_item("dir", trained.dir.clone())?;
    dict.set_item("interrupted", trained.interrupted)?;
    Ok(dict)
}

pub(crate) fn options(verbose: bool, overrides: Vec<String>) -> TrainOptions {
    TrainOptions {
        quiet: !verbose,
        stop: None,
        overrides,
    }
}

/// Trains `config` into the new run directory `run_dir`; returns the run's result.
#[pyfunction]
#[pyo3(signature = (config, run_dir, *, env=None, overrides=Vec::new(), verbose=false))]
pub fn train<'py>(
    py: Python<'py>,
    config: &Bound<'py, PyAny>,
    run_dir: PathBuf,
    env: Option<&Bound<'py, PyAny>>,
    overrides: Vec<String>,
    verbose: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (config, registry, errors) = prepare(py, config, &overrides, env)?;
    checked_plan(py, &registry, &config, &errors)?;
    let options = options(verbose, Vec::new());
    let trained = py
        .detach(|| cli::train(&registry, &config, &run_dir, &options))
        .map_err(|e| cli_error(e, &errors))?;
    result_dict(py, &trained)
}

/// The effective config as a dict: every value in force, defaults written out (what a
/// run directory's `config.toml` holds). With `env`, `env` is set as `flatrl.train`
/// would set it (a str), or left (a callable).
#[pyfunction]
#[pyo3(signature = (config, *, overrides=Vec::new(), env=None))]
pub fn load_config<'py>(
    py: Python<'py>,
    config: &Bound<'py, PyAny>,
    overrides: Vec<String>,
    env: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut config = read_config(config, &overrides)?;
    if let Some(env) = env
        && env.is_instance_of::<PyString>()
    {
        config.env = env.extract()?;
    }
    let text =
        serde_json::to_string(&config).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// The config saved in a run directory.
fn run_config(dir: &Path) -> PyResult<Config> {
    let path = dir.join(cli::CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        value_error(format!(
            "{}: not a run directory ({} cannot be read: {e}): give the run_dir of flatrl.train",
            dir.display(),
            path.display()
        ))
    })?;
    Config::from_toml(&text, &[]).map_err(config_error)
}

/// The registry of the run saved in `run_dir` (with `env` as [`train`] takes it) and the
/// slot of its environment's exceptions.
pub(crate) fn run_registry(
    py: Python<'_>,
    run_dir: &Path,
    env: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Registry, ErrorSlot)> {
    let mut config = run_config(run_dir)?;
    let errors = ErrorSlot::default();
    let registry = registry(py, &mut config, env, &errors)?;
    Ok((registry, errors))
}

/// Continues the run in `run_dir` from its checkpoint; returns the run's result.
#[pyfunction]
#[pyo3(signature = (run_dir, *, env=None, overrides=Vec::new(), verbose=false))]
pub fn resume<'py>(
    py: Python<'py>,
    run_dir: PathBuf,
    env: Option<&Bound<'py, PyAny>>,
    overrides: Vec<String>,
    verbose: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (registry, errors) = run_registry(py, &run_dir, env)?;
    let options = options(verbose, overrides);
    let trained = py
        .detach(|| cli::resume(&registry, &run_dir, &options))
        .map_err(|e| cli_error(e, &errors))?;
    result_dict(py, &trained)
}

/// Evaluates the policy saved in `run_dir` (`best=True`: the best scheduled
/// evaluation's) over `episodes` deterministic episodes.
#[pyfunction]
#[pyo3(signature = (run_dir, *, env=None, episodes=10, seed=None, best=false))]
pub fn evaluate<'py>(
    py: Python<'py>,
    run_dir: PathBuf,
    env: Option<&Bound<'py, PyAny>>,
    episodes: usize,
    seed: Option<u64>,
    best: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let (registry, errors) = run_registry(py, &run_dir, env)?;
    let which = if best { Which::Best } else { Which::Latest };
    let evaluated = py
        .detach(|| cli::eval(&registry, &run_dir, which, episodes, seed))
        .map_err(|e| cli_error(e, &errors))?;
    let text =
        serde_json::to_string(&evaluated).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

/// The whole run's memory plan of `config`, from the config alone (nothing built or
/// allocated); raises `MemoryBudgetError` (with `.plan`) when it does not fit
/// `run.budget` or, without one, the machine's available memory.
#[pyfunction]
#[pyo3(signature = (config, *, env=None, overrides=Vec::new()))]
pub fn plan<'py>(
    py: Python<'py>,
    config: &Bound<'py, PyAny>,
    env: Option<&Bound<'py, PyAny>>,
    overrides: Vec<String>,
) -> PyResult<MemoryPlan> {
    let (config, registry, errors) = prepare(py, config, &overrides, env)?;
    checked_plan(py, &registry, &config, &errors).map(MemoryPlan::from)
}

/// The plan of `config`, or `MemoryBudgetError` (carrying it) when it does not fit
/// `run.budget` or, without one, the machine's available memory.
fn checked_plan(
    py: Python<'_>,
    registry: &Registry,
    config: &Config,
    errors: &ErrorSlot,
) -> PyResult<rl_core::MemoryPlan> {
    let planned = py
        .detach(|| cli::plan(registry, config))
        .map_err(|e| cli_error(e, errors))?;
    if let Some(why) = planned.refused {
        return Err(budget_exception(why, planned.plan));
    }
    Ok(planned.plan)
}

/// The environment a command line names, for the registry: the `env` of the config a
/// `train` or `plan` reads (with its `--set` overrides), or of the run directory a
/// `resume`, `eval` or `export` reads. `None` when there is none (`list`, `plot`,
/// `--help`) or it cannot be read (the command then reports that itself).
fn command_config(args: &[String]) -> Option<Config> {
    let command = args.get(1)?.as_str();
    let positional = args[2..].iter().find(|a| !a.starts_with('-'))?;
    let mut overrides = Vec::new();
    let mut words = args[2..].iter();
    while let Some(word) = words.next() {
        if let Some(value) = word.strip_prefix("--set=") {
            overrides.push(value.to_owned());
        } else if word == "--set" {
            overrides.extend(words.next().cloned());
        }
    }
    let path = match command {
        "train" | "plan" => PathBuf::from(positional),
        "resume" | "eval" | "export" => Path::new(positional).join("config.toml"),
        _ => return None,
    };
    let text = std::fs::read_to_string(path).ok()?;
    Config::from_toml(&text, &overrides).ok()
}

/// The `rl` command line as the `flatrl` console script (`python -m flatrl`): `argv` as
/// `sys.argv` gives it; the registry holds the built-in environments and the Gymnasium
/// one the config names (`env = "gymnasium:HalfCheetah-v5"`, `"CartPole-v1"`,
/// `"ALE/Pong-v5"`). Returns the exit code. Runs with the GIL released.
#[pyfunction]
pub fn cli_main(py: Python<'_>, argv: Vec<String>) -> PyResult<u8> {
    let errors = ErrorSlot::default();
    let registry = match command_config(&argv) {
        Some(mut config) => match registry(py, &mut config, None, &errors) {
            Ok(registry) => registry,
            Err(err) => {
                eprintln!("error: {err}");
                return Ok(2);
            }
        },
        None => Registry::builtin(),
    };
    let code = py.detach(|| rl_train::command::run_args(&registry, "flatrl", &argv));
    if let Some(raised) = errors
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take()
    {
        return Err(raised);
    }
    Ok(code)
}
