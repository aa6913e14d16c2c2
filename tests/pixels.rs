//! Pixels end to end: frames of bytes from an environment (bsuite's Catch, 10x5 `u8`
//! frames) through the collectors, the rollout and replay buffers (stored as bytes) and
//! a convolutional encoder, trained by PPO and DQN from the shipped configs until the
//! goal; and the clear errors when a pixel environment meets an MLP or an algorithm
//! that cannot read frames.

use std::path::Path;

use rl::config::Config;
use rl::core::Env;
use rl::envs::Catch;
use rl::train::agent::{Agent, Which};
use rl::train::run::{self, Registry, TrainOptions};

fn shipped(name: &str) -> Config {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    Config::from_toml(&text, &[]).unwrap()
}

fn with(name: &str, overrides: &[&str]) -> Result<Config, rl::config::ConfigError> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("configs")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let overrides: Vec<String> = overrides.iter().map(|s| (*s).to_owned()).collect();
    Config::from_toml(&text, &overrides)
}

/// PPO with the small CNN reaches a mean training return of 0.9 over 100 episodes on
/// Catch (a random policy scores about -0.6), and DQN with it an evaluation return of
/// 0.9 over 20 greedy episodes, each within its config's budget.
#[test]
fn ppo_and_dqn_solve_catch_from_pixels() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["ppo_catch.toml", "dqn_catch.toml"] {
        let config = shipped(name);
        let dir = tmp.path().join(name);
        let trained = run::train(&Registry::builtin(), &config, &dir, &TrainOptions::quiet())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let result = &trained.result;
        assert!(
            result.solved,
            "{name} did not reach its goal in {} env steps: {result:?}",
            result.total_env_steps
        );
        assert!(result.total_env_steps <= config.run.total_steps);
        // The saved agent acts on frames of bytes and catches the ball.
        let mut agent = Agent::load(&dir, Which::Latest).unwrap();
        let mut env = Catch::new(7);
        let mut frame = vec![0u8; env.observation_space().flat_len()];
        let (mut total, episodes) = (0.0, 10);
        for episode in 0..episodes {
            env.reset(Some(episode), &mut frame).unwrap();
            loop {
                let mut action = [0u32];
                agent.act_frames(&frame, &mut action).unwrap();
                let step = env.step(&action, &mut frame).unwrap();
                total += step.reward;
                if step.terminated || step.truncated {
                    break;
                }
            }
        }
        assert!(
            total / episodes as f32 >= 0.8,
            "{name}: {total} over {episodes}"
        );
        let error = agent.act(&vec![0.0; frame.len()], &mut [0u32]).unwrap_err();
        assert!(error.to_string().contains("act_frames"), "{error}");
    }
}

/// The plan counts the frames as bytes: a Catch frame is 50 `u8`s, so the DQN replay's
/// observation columns hold 50 bytes a row, not 200.
#[test]
fn pixel_buffers_are_planned_as_bytes() {
    let config = shipped("dqn_catch.toml");
    let planned = run::plan(&Registry::builtin(), &config).unwrap();
    let rows = config.off_policy.unwrap().buffer_capacity as u64;
    let obs: Vec<u64> = planned
        .plan
        .lines()
        .iter()
        .filter(|e| e.component == "replay/obs" || e.component == "replay/next_obs")
        .map(|e| e.bytes)
        .collect();
    assert_eq!(obs.len(), 2, "{:?}", planned.plan);
    for bytes in obs {
        assert!(
            (50 * rows..50 * rows + 64 * 1024).contains(&bytes),
            "{bytes} bytes for {rows} frames of 50 bytes"
        );
    }
}

/// An MLP on frames of bytes is a config error naming the key and the encoders to pick,
/// for PPO and for DQN; an algorithm that cannot read frames is refused by name.
#[test]
fn pixels_with_an_mlp_or_another_algo_are_config_errors() {
    let tmp = tempfile::tempdir().unwrap();
    for (name, key) in [
        ("ppo_catch.toml", "policy.encoder"),
        ("dqn_catch.toml", "dqn.encoder"),
    ] {
        let config = with(name, &[&format!("{key}=\"mlp\"")]).unwrap();
        let dir = tmp.path().join(name);
        let error = run::train(&Registry::builtin(), &config, &dir, &TrainOptions::quiet())
            .unwrap_err()
            .to_string();
        assert!(error.contains(key), "{error}");
        assert!(
            error.contains("small_cnn") && error.contains("nature_cnn"),
            "{error}"
        );
        assert!(!dir.join("checkpoint").exists(), "nothing trained: {error}");
        let error = run::plan(&Registry::builtin(), &config)
            .unwrap_err()
            .to_string();
        assert!(error.contains(key), "{error}");
    }
    let config = with("ppo_catch.toml", &["policy.encoder=\"nature_cnn\""]).unwrap();
    let error = run::plan(&Registry::builtin(), &config)
        .unwrap_err()
        .to_string();
    assert!(error.contains("84x84"), "{error}");
    for algo in ["discrete_sac", "recurrent_ppo", "sac"] {
        let text = format!("algo = \"{algo}\"\nenv = \"catch\"\n[run]\ntotal_steps = 100\n");
        let config = Config::from_toml(&text, &[]).unwrap();
        let error = run::plan(&Registry::builtin(), &config)
            .unwrap_err()
            .to_string();
        assert!(error.contains("use one of ppo, dqn"), "{algo}: {error}");
    }
}
