//! Load a trained agent from a run directory and play one episode with it.
//!
//! ```text
//! rl train configs/ppo_cartpole.toml --out runs/ppo_cartpole
//! cargo run --release --example load_and_play -- runs/ppo_cartpole
//! ```
//!
//! Without a run directory it first trains a tiny PPO run on CartPole (2 048 env
//! steps, a few seconds) into a temporary folder, so the example runs on its own. The
//! agent is restored exactly as `rl eval` restores it (`Agent::load`, latest checkpoint,
//! or `--best`), acts deterministically, and the episode's return is printed as one
//! JSON line. Built-in environments only: the run's `config.toml` names it.

use std::path::PathBuf;

use clap::Parser;
use rl::core::Env;
use rl::envs::{CartPole, MaskedCartPole, Pendulum};
use rl::train::agent::{Agent, AgentAction, Which};
use rl::train::config::Config;
use rl::train::run::{self, Registry, TrainOptions};

/// Plays one deterministic episode of a trained agent; one JSON line on stdout.
#[derive(Debug, Parser)]
struct Args {
    /// A run directory of `rl train` (none: train a tiny PPO CartPole run first).
    run_dir: Option<PathBuf>,
    /// Load the best evaluation's checkpoint instead of the latest.
    #[arg(long)]
    best: bool,
    /// Reset seed of the episode.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let dir = match args.run_dir {
        Some(dir) => dir,
        None => {
            let text = "algo = \"ppo\"\nenv = \"cartpole\"\n[run]\ntotal_steps = 2048\n";
            let config = Config::from_toml(text, &[])?;
            let dir = tmp.path().join("ppo_cartpole");
            run::train(&Registry::builtin(), &config, &dir, &TrainOptions::quiet())?;
            dir
        }
    };
    let which = if args.best {
        Which::Best
    } else {
        Which::Latest
    };
    let mut agent = Agent::load(&dir, which)?;
    let seed = args.seed;
    let (ret, steps) = match (agent.env(), agent.is_recurrent()) {
        ("cartpole", false) => play(&mut agent, CartPole::new(seed), seed)?,
        ("cartpole", true) => play_recurrent(&mut agent, CartPole::new(seed), seed)?,
        ("masked_cartpole", false) => play(&mut agent, MaskedCartPole::new(seed), seed)?,
        ("masked_cartpole", true) => play_recurrent(&mut agent, MaskedCartPole::new(seed), seed)?,
        ("pendulum", _) => play(&mut agent, Pendulum::new(seed), seed)?,
        (other, _) => anyhow::bail!(
            "this example plays cartpole, masked_cartpole and pendulum runs, not {other}"
        ),
    };
    println!(
        "{}",
        serde_json::json!({
            "run_dir": dir,
            "algo": agent.algo().name(),
            "env": agent.env(),
            "env_steps": agent.env_steps(),
            "episode_return": ret,
            "episode_length": steps,
        })
    );
    Ok(())
}

/// One episode of `env` from `reset(seed)` with a feed-forward `agent`: its return and
/// length.
fn play<E>(agent: &mut Agent, mut env: E, seed: u64) -> anyhow::Result<(f64, u64)>
where
    E: Env<Obs = f32>,
    E::Act: AgentAction,
{
    let mut obs = vec![0.0; agent.obs_len()];
    let mut action = vec![E::Act::default(); agent.action_len()];
    env.reset(Some(seed), &mut obs)?;
    let (mut total, mut steps) = (0.0, 0);
    loop {
        agent.act(&obs, &mut action)?;
        let step = env.step(&action, &mut obs)?;
        (total, steps) = (total + f64::from(step.reward), steps + 1);
        if step.ends_episode() {
            return Ok((total, steps));
        }
    }
}

/// As [`play`], for a recurrent `agent` (discrete actions), which carries a state.
fn play_recurrent<E>(agent: &mut Agent, mut env: E, seed: u64) -> anyhow::Result<(f64, u64)>
where
    E: Env<Obs = f32, Act = u32>,
{
    let mut obs = vec![0.0; agent.obs_len()];
    let mut action = [0u32];
    let mut state = agent.initial_state(1);
    env.reset(Some(seed), &mut obs)?;
    let (mut total, mut steps) = (0.0, 0);
    loop {
        agent.act_recurrent(&obs, &mut state, &mut action)?;
        let step = env.step(&action, &mut obs)?;
        (total, steps) = (total + f64::from(step.reward), steps + 1);
        if step.ends_episode() {
            return Ok((total, steps));
        }
    }
}
