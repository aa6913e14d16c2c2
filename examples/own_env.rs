//! Train on your own environment: implement `Env`, register it under a name, name it in a
//! config, and get the whole `rl` command line over your registry.
//!
//! ```text
//! cargo run --release --example own_env                       # trains into runs/corridor
//! cargo run --release --example own_env -- eval runs/corridor # any rl subcommand
//! cargo run --release -- plot runs/corridor                   # curves need no registry
//! ```
//!
//! Without arguments it trains PPO on `Corridor` (below) until a mean return of 0.95
//! over 20 episodes, into `runs/corridor` (`runs/corridor-2` ... if taken), and prints
//! the result as one JSON line and how to evaluate and plot the run. With arguments it is
//! the `rl` command (`train`, `plan`, `eval`, `resume`, `plot`, `list`, `export`) over
//! the built-in environments plus `corridor`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rl::cli::{Registry, TrainOptions, Trained};
use rl::config::Config;
use rl::core::{BoxSpace, DType, Env, Space, Step, env::discrete_action};

/// A corridor of 8 cells: step left (0) or right (1); reward 1 for reaching the right
/// end, episodes cut after 32 steps.
#[derive(Debug)]
pub(crate) struct Corridor {
    observation_space: Space,
    action_space: Space,
    cell: u32,
    steps: u32,
}

impl Corridor {
    /// A corridor; it has no randomness, so the seed is unused.
    pub(crate) fn new(_seed: u64) -> Self {
        Self {
            observation_space: Space::Box(
                BoxSpace::uniform(0.0, 1.0, &[1], DType::F32).expect("valid bounds"),
            ),
            action_space: Space::discrete(2).expect("2 actions"),
            cell: 0,
            steps: 0,
        }
    }
}

impl Env for Corridor {
    type Obs = f32;
    type Act = u32;

    fn observation_space(&self) -> &Space {
        &self.observation_space
    }

    fn action_space(&self) -> &Space {
        &self.action_space
    }

    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> rl::core::Result<()> {
        (self.cell, self.steps) = (0, 0);
        obs[0] = 0.0;
        Ok(())
    }

    fn step(&mut self, action: &[u32], obs: &mut [f32]) -> rl::core::Result<Step> {
        self.cell = match discrete_action(action, 2)? {
            1 => self.cell + 1,
            _ => self.cell.saturating_sub(1),
        };
        self.steps += 1;
        obs[0] = self.cell as f32 / 7.0;
        let terminated = self.cell == 7;
        Ok(Step {
            reward: if terminated { 1.0 } else { 0.0 },
            terminated,
            truncated: self.steps == 32,
        })
    }
}

/// The built-in environments plus `corridor`.
pub(crate) fn registry() -> Registry {
    let mut registry = Registry::builtin();
    registry.register_discrete("corridor", Corridor::new);
    registry
}

/// PPO on the corridor until a mean return of 0.95 over 20 episodes.
pub(crate) const CONFIG: &str = r#"
algo = "ppo"
env = "corridor"

[run]
total_steps = 20_000
n_envs = 4
goal = { training_return = { mean_return = 0.95, window = 20 } }

[ppo]
n_steps = 64
adam = { lr = 1e-3 }
"#;

/// Trains [`CONFIG`] into `dir` (which must not hold a run).
///
/// # Errors
/// What `rl train` reports: a config, plan or I/O error.
pub(crate) fn train(
    dir: &Path,
    options: &TrainOptions,
) -> Result<Trained, Box<dyn std::error::Error>> {
    let config = Config::from_toml(CONFIG, &[])?;
    Ok(rl::cli::train(&registry(), &config, dir, options)?)
}

/// `runs/corridor`, or the first of `runs/corridor-2`, `-3` ... that does not exist.
fn free_dir() -> PathBuf {
    std::iter::once(PathBuf::from("runs/corridor"))
        .chain((2..).map(|n| PathBuf::from(format!("runs/corridor-{n}"))))
        .find(|dir| !dir.exists())
        .unwrap_or_default()
}

fn main() -> ExitCode {
    if std::env::args().len() > 1 {
        return rl::cli::run_command(&registry());
    }
    let dir = free_dir();
    match train(&dir, &TrainOptions::quiet()) {
        Ok(trained) => {
            println!(
                "{}",
                serde_json::to_string(&trained.result).unwrap_or_default()
            );
            eprintln!(
                "evaluate: cargo run --release --example own_env -- eval {0}\nplot:     cargo run --release -- plot {0}",
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
