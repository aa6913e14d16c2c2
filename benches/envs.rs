//! `cargo xtask bench envs`: environment steps per second on one thread.
//!
//! Prints one JSON line per figure:
//! `{"bench":"envs","env":"cartpole","envs":N,"steps_per_s":X}`, the median of several
//! timed rounds. Every environment takes a fixed action and is reset (from its own seeded
//! stream) when its episode ends, as a collector would. And the Atari preprocessing of one
//! agent step's frames (`AtariPreprocess`: the max of two raw 210 x 160 RGB frames,
//! grayscale, the area resize to 84 x 84):
//! `{"bench":"envs","op":"atari_frame","src":[210,160],"dst":[84,84],"us":X}`.

use std::time::{Duration, Instant};

use rl_core::Env;
use rl_envs::{
    AreaResize, CartPole, LargeDiscrete, MaskedCartPole, Pendulum, max_frames, rgb_to_gray,
};

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
    let line = serde_json::json!({
        "bench": "envs",
        "op": "atari_frame",
        "src": [210, 160],
        "dst": [84, 84],
        "us": (atari_frame_us()? * 100.0).round() / 100.0,
    });
    println!("{line}");
    Ok(())
}

/// Median microseconds over `ROUNDS` rounds to turn two raw RGB frames into one stacked
/// frame, as `AtariPreprocess` does at every agent step.
fn atari_frame_us() -> anyhow::Result<f64> {
    let frame = |seed: usize| -> Vec<u8> {
        (0..210 * 160 * 3)
            .map(|i| ((i * 7 + seed * 13) % 251) as u8)
            .collect()
    };
    let (a, b) = (frame(1), frame(2));
    let (mut maxed, mut gray, mut small) =
        (vec![0u8; a.len()], vec![0u8; 210 * 160], vec![0u8; 84 * 84]);
    let mut resize = AreaResize::new([210, 160], [84, 84])?;
    let mut one = || -> anyhow::Result<()> {
        max_frames(&a, &b, &mut maxed)?;
        rgb_to_gray(&maxed, &mut gray)?;
        resize.resize(&gray, &mut small)?;
        Ok(())
    };
    for _ in 0..200 {
        one()?;
    }
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let (start, mut count) = (Instant::now(), 0u32);
        while start.elapsed() < ROUND_TIME {
            one()?;
            count += 1;
        }
        times.push(start.elapsed().as_secs_f64() * 1e6 / f64::from(count));
    }
    std::hint::black_box(&small);
    times.sort_by(f64::total_cmp);
    Ok(times[ROUNDS / 2])
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
