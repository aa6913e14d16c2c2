//! Evaluation in the library: a trained policy's deterministic returns over whole
//! episodes, and deterministic actions for single observations.

use rl_collect::ActOutput;
use rl_core::{Env, Space};
use serde::{Deserialize, Serialize};

use rl_algos::policy::Mode;
use rl_algos::predict::Predict;
use rl_algos::{Error, Result};

/// Settings of [`evaluate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalConfig {
    /// Episodes to run, at least 1. Default 20.
    pub episodes: usize,
    /// Episode `i` starts from `reset(Some(seed + i))`, so evaluations repeat exactly.
    /// Default 0.
    pub seed: u64,
    /// An episode longer than this is cut (counted with the return it reached), so that
    /// an environment without a time limit cannot hang an evaluation. At least 1.
    /// Default 100 000.
    pub max_episode_steps: u64,
}

impl Default for EvalConfig {
    fn default() -> Self {
        Self {
            episodes: 20,
            seed: 0,
            max_episode_steps: 100_000,
        }
    }
}

/// What [`evaluate`] measured: statistics of the episodes' returns and lengths.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalReport {
    /// Episodes run.
    pub episodes: usize,
    /// Mean undiscounted return.
    pub mean_return: f64,
    /// Standard deviation of the returns (population).
    pub std_return: f64,
    /// Lowest return.
    pub min_return: f64,
    /// Highest return.
    pub max_return: f64,
    /// Mean episode length (steps).
    pub mean_length: f64,
    /// Standard deviation of the lengths (population).
    pub std_length: f64,
    /// Shortest episode.
    pub min_length: u64,
    /// Longest episode.
    pub max_length: u64,
}

/// Runs `config.episodes` whole episodes of `env` with `policy` acting deterministically
/// and reports the returns and lengths; the policy's mode is restored afterwards, also on
/// error. One observation, one action and two scratch floats are allocated up front; the
/// loop allocates nothing else (bar what the policy does on its first call).
///
/// Works on any trained policy, including one just restored from a checkpoint.
///
/// # Errors
/// [`Error::Config`] for 0 episodes or a `max_episode_steps` of 0, [`Error::Core`] for an
/// environment error, [`Error::Policy`] for a policy error.
pub fn evaluate<E, P>(env: &mut E, policy: &mut P, config: &EvalConfig) -> Result<EvalReport>
where
    E: Env,
    P: Predict<Obs = E::Obs, Act = E::Act>,
{
    evaluate_each(env, policy, config, |_, _| {})
}

/// [`evaluate`], calling `on_episode(return, length)` as each episode ends (the
/// trainers hand these to `Callback::on_episode`).
///
/// # Errors
/// As [`evaluate`].
pub fn evaluate_each<E, P>(
    env: &mut E,
    policy: &mut P,
    config: &EvalConfig,
    mut on_episode: impl FnMut(f64, u64),
) -> Result<EvalReport>
where
    E: Env,
    P: Predict<Obs = E::Obs, Act = E::Act>,
{
    if config.episodes == 0 || config.max_episode_steps == 0 {
        return Err(Error::config(
            "eval",
            format!(
                "has {} episodes and max_episode_steps {}: both must be at least 1",
                config.episodes, config.max_episode_steps
            ),
        ));
    }
    let act_len = match env.action_space() {
        Space::Discrete { .. } => 1,
        space => space.flat_len(),
    };
    let mut obs = vec![E::Obs::default(); env.observation_space().flat_len()];
    let mut action = vec![E::Act::default(); act_len];
    let mut returns = Vec::with_capacity(config.episodes);
    let mut lengths = Vec::with_capacity(config.episodes);
    let mode = policy.mode();
    policy.set_mode(Mode::Deterministic);
    let result: Result<()> = (0..config.episodes).try_for_each(|episode| {
        let (total, length) = run_episode(env, policy, config, episode, &mut obs, &mut action)?;
        on_episode(total, length);
        returns.push(total);
        lengths.push(length);
        Ok(())
    });
    policy.set_mode(mode);
    result?;
    let (mean_return, std_return) = mean_std(returns.iter().copied());
    let (mean_length, std_length) = mean_std(lengths.iter().map(|&l| l as f64));
    Ok(EvalReport {
        episodes: config.episodes,
        mean_return,
        std_return,
        min_return: returns.iter().copied().fold(f64::INFINITY, f64::min),
        max_return: returns.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        mean_length,
        std_length,
        min_length: lengths.iter().copied().min().unwrap_or(0),
        max_length: lengths.iter().copied().max().unwrap_or(0),
    })
}

/// One episode from `reset(seed + episode)`: its return and length.
fn run_episode<E, P>(
    env: &mut E,
    policy: &mut P,
    config: &EvalConfig,
    episode: usize,
    obs: &mut [E::Obs],
    action: &mut [E::Act],
) -> Result<(f64, u64)>
where
    E: Env,
    P: Predict<Obs = E::Obs, Act = E::Act>,
{
    env.reset(Some(config.seed.wrapping_add(episode as u64)), obs)?;
    let (mut total, mut length) = (0.0f64, 0u64);
    let (mut log_prob, mut value) = ([0.0f32], [0.0f32]);
    // A fresh slot: the episode starts (a recurrent policy resets its memory).
    let mut state = [P::State::default()];
    while length < config.max_episode_steps {
        let out = ActOutput {
            actions: action,
            log_probs: &mut log_prob,
            values: &mut value,
        };
        policy
            .act(obs, &mut state, out)
            .map_err(|source| Error::Policy { source })?;
        let step = env.step(action, obs)?;
        total += f64::from(step.reward);
        length += 1;
        if step.ends_episode() {
            break;
        }
    }
    Ok((total, length))
}

/// Mean and population standard deviation.
fn mean_std(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = values.clone().count().max(1) as f64;
    let mean = values.clone().sum::<f64>() / n;
    let var = values.map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}
#[cfg(test)]
mod tests;
