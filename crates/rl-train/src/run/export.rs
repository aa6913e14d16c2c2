//! `rl export`: a run's policy weights as a safetensors file other tools read.
//!
//! The file holds every network of the learner's checkpoint except target networks,
//! weights only (no optimiser state), as `f32` tensors named `<network>.<index>.weight`
//! (shape `[out, in]`) and `<network>.<index>.bias` (shape `[out]`), the names and
//! shapes PyTorch gives the equivalent `nn.Sequential(Linear, activation, Linear, ...)`,
//! so `{k[len("actor."):]: v for k, v in load_file(path).items() if k.startswith("actor.")}`
//! is that module's `state_dict`. The networks per algorithm:
//!
//! | algo | networks |
//! |---|---|
//! | `ppo`, discrete actions | `actor` (observation to one logit per action), `critic` (observation to the value) |
//! | `ppo`, box actions | `actor` (observation to the action means), `critic`, and `log_std.value` (`[dim]`, state-independent) |
//! | `recurrent_ppo` | `actor` and `critic` on the summarizer's features, and with `history = lstm` the cell as PyTorch's `nn.LSTMCell`: `lstm.weight_ih` (`[4h, obs]`), `lstm.weight_hh` (`[4h, h]`), `lstm.bias_ih`, `lstm.bias_hh` |
//! | `sac` | `actor` (observation to `dim` means then `dim` log-stds), `critic1`, `critic2` (observation and action to a value), `log_alpha.value` (`[1]`) |
//! | `discrete_sac` | `actor`, `critic1`, `critic2` (one output per action; with an action feature table, a `d`-vector scored against the environment's table, which is not exported), `log_alpha.value` |
//! | `dqn` | `q` (observation to one value per action) |
//!
//! The header's metadata holds `format` (`rl/checkpoint`), `kind` (`weights`),
//! `networks` (each network's architecture and tensor layout as JSON), one
//! `torch.<network>` line describing the PyTorch module, and `state`: a JSON object with
//! `algo`, `env`, `env_steps` and `learner` (the learner's own state, e.g. PPO's
//! observation-normalisation statistics). `rl_nn::load_weights` reads it back.

use std::path::{Path, PathBuf};

use rl_nn::Checkpoint;
use serde::Serialize;
use serde_json::{Value, json};

use super::rundir::{self, LEARNER_FILE};
use super::{Result, Which};

/// What `rl export` wrote.
#[derive(Clone, Debug, Serialize)]
pub struct Exported {
    /// The file.
    pub path: PathBuf,
    /// Its tensors: name and shape, sorted by name.
    pub tensors: Vec<(String, Vec<usize>)>,
}

/// Writes the weights of the policy saved in `dir` (the `which` checkpoint) to `out`
/// (default `dir/policy.safetensors`) in the layout of the module documentation.
///
/// # Errors
/// A directory without a run or that checkpoint, a checkpoint of another algorithm, a
/// file that cannot be written.
pub fn export(dir: &Path, which: Which, out: Option<&Path>) -> Result<Exported> {
    let config = rundir::read_config(dir, &[])?;
    let counters = rundir::check_checkpoint(dir, which.dir_name(), &config)?;
    let source = dir.join(which.dir_name()).join(LEARNER_FILE);
    let saved = Checkpoint::<Value>::load(&source, &counters.learner)?;
    let networks: Vec<_> = saved
        .networks
        .into_iter()
        .filter(|n| !n.name.contains("target"))
        .map(|mut n| {
            n.optimizer = None;
            n
        })
        .collect();
    let mut tensors: Vec<(String, Vec<usize>)> = networks
        .iter()
        .flat_map(|n| {
            n.tensors
                .iter()
                .map(|t| (format!("{}.{}", n.name, t.name), t.shape.clone()))
        })
        .collect();
    tensors.sort();
    let weights = Checkpoint {
        kind: "weights".to_owned(),
        networks,
        state: json!({
            "algo": config.algo,
            "env": config.env,
            "env_steps": counters.env_steps,
            "learner": saved.state,
        }),
    };
    let path = out.map_or_else(|| dir.join("policy.safetensors"), Path::to_owned);
    weights.save(&path)?;
    Ok(Exported { path, tensors })
}
