//! `cargo xtask bench envs`: environment steps per second on one thread.
//!
//! Prints one JSON line per figure:
//! `{"bench":"envs","env":"cartpole","envs":N,"steps_per_s":X}`, the median of several
//! timed rounds. Every environment takes a fixed action and is reset (from its own seeded
//! stream) when its episode ends, as a collector would.

use std::time::{Duration, Instant};

use rl_core::Env;
use rl_envs::{CartPole, LargeDiscrete, MaskedCartPole, Pendulum};

const ROUNDS: usize = 7;
const ROUND_TIME: Duration = Duration::from_millis(300);

fn main() -> anyhow::Result<()> {
    for n in [1, 16, 64] {
        report(
            "cartpole",
            n,
            steps_per_s((0..n).map(|i| CartPole::new(i as u64)), &[1])?,
        );
    }
    report(
        "masked_cartpole",
        64,
        steps_per_s((0..64).map(MaskedCartPole::new), &[1])?,
    );
    report(
        "pendulum",
        64,
        steps_per_s((0..64).map(Pendulum::new), &[0.5])?,
    );
    let task = LargeDiscrete::new(0);
    report(
        "large_discrete",
        64,
        steps_per_s((0..64).map(|_| task.clone()), &[12_345])?,
    );
    Ok(())
}

fn report(env: &str, envs: usize, steps_per_s: f64) {
    let line = serde_json::json!({
        "bench": "envs",
        "env": env,
        "envs": envs,
        "steps_per_s": steps_per_s.round(),
    });
    println!("{line}");
}

/// Median steps per second over `ROUNDS` rounds of stepping every environment in turn.
fn steps_per_s<E: Env>(envs: impl Iterator<Item = E>, action: &[E::Act]) -> anyhow::Result<f64> {
    let mut envs: Vec<E> = envs.collect();
    let obs_len = envs[0].observation_space().flat_len();
    let mut obs = vec![E::Obs::default(); envs.len() * obs_len];
    for (env, obs) in envs.iter_mut().zip(obs.chunks_exact_mut(obs_len)) {
        env.reset(None, obs)?;
    }
    let count = envs.len() as u64;
    let mut sweep = || -> anyhow::Result<()> {
        for (env, obs) in envs.iter_mut().zip(obs.chunks_exact_mut(obs_len)) {
            if env.step(action, obs)?.ends_episode() {
                env.reset(None, obs)?;
            }
        }
        Ok(())
    };
    // Warm up, then size a batch of sweeps to about a millisecond.
    let start = Instant::now();
    let mut warmup_sweeps = 0u64;
    while start.elapsed() < Duration::from_millis(100) {
        sweep()?;
        warmup_sweeps += 1;
    }
    let per_ms = (warmup_sweeps as f64 / start.elapsed().as_secs_f64() / 1000.0).max(1.0) as u64;
    let mut rates = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let mut sweeps = 0u64;
        while start.elapsed() < ROUND_TIME {
            for _ in 0..per_ms {
                sweep()?;
            }
            sweeps += per_ms;
        }
        rates.push((sweeps * count) as f64 / start.elapsed().as_secs_f64());
    }
    std::hint::black_box(&obs);
    rates.sort_by(f64::total_cmp);
    Ok(rates[ROUNDS / 2])
}
