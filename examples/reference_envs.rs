//! Steps the reference environments and prints what they cost and what they pay.
//!
//! ```text
//! cargo run --release --example reference_envs
//! ```
//!
//! - the memory plan of the environments (the 100k-action feature table is the only
//!   sizeable allocation), checked against a 64 MiB budget before anything runs;
//! - CartPole and Pendulum steps per second on one thread, and the episode return of a
//!   hand-written CartPole controller;
//! - the random and the optimal expected reward of `LargeDiscrete` (100 000 actions);
//! - resident memory at the end.

use std::time::Instant;

use rl::core::{Env, MemoryBudget, MemoryPlan, ProcessMemory};
use rl::envs::{CartPole, LargeDiscrete, Pendulum};

fn main() -> anyhow::Result<()> {
    let large = LargeDiscrete::new(0);
    let mut plan = MemoryPlan::new();
    plan.nest("envs", &large.memory_plan());
    plan.check(&MemoryBudget::ram(64 << 20))?;
    println!("memory plan\n{plan}\n");

    // CartPole with a proportional-derivative controller on the pole angle.
    let mut env = CartPole::new(1);
    let mut obs = [0.0f32; 4];
    let episodes = 20;
    let (mut steps, mut returns) = (0u64, Vec::with_capacity(episodes));
    let start = Instant::now();
    for _ in 0..episodes {
        env.reset(None, &mut obs)?;
        let mut episode_return = 0.0;
        loop {
            let action = u32::from(obs[2] + 0.5 * obs[3] > 0.0);
            let step = env.step(&[action], &mut obs)?;
            steps += 1;
            episode_return += step.reward;
            if step.ends_episode() {
                break;
            }
        }
        returns.push(episode_return);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mean_return = returns.iter().sum::<f32>() / episodes as f32;
    println!(
        "cartpole: PD controller, {episodes} episodes, mean return {mean_return:.1} \
         (limit {}), {:.1} M steps/s",
        CartPole::MAX_EPISODE_STEPS,
        steps as f64 / elapsed / 1e6
    );

    let mut env = Pendulum::new(2);
    let mut obs = [0.0f32; 3];
    env.reset(None, &mut obs)?;
    let (mut steps, mut total) = (0u64, 0.0f64);
    let start = Instant::now();
    while steps < 2_000_000 {
        let step = env.step(&[-obs[2].clamp(-2.0, 2.0)], &mut obs)?;
        total += f64::from(step.reward);
        steps += 1;
        if step.ends_episode() {
            env.reset(None, &mut obs)?;
        }
    }
    println!(
        "pendulum: damping controller, mean reward per step {:.3}, {:.1} M steps/s",
        total / steps as f64,
        steps as f64 / start.elapsed().as_secs_f64() / 1e6
    );

    let start = Instant::now();
    let optimal = large.optimal_reward(2000, 7);
    let mut env = large.clone();
    let mut obs = [0.0f32; 16];
    let (mut sum, n) = (0.0f64, 100_000u32);
    for i in 0..n {
        env.reset(None, &mut obs)?;
        // A fixed action sequence is as good as a uniformly random policy here.
        sum += f64::from(env.step(&[(i * 7919) % large.actions()], &mut obs)?.reward);
    }
    println!(
        "large_discrete ({} actions): random policy {:.3} (expected 0), optimal {:.3} ± {:.3} \
         (Monte Carlo, {} contexts, {:.1} s)",
        large.actions(),
        sum / f64::from(n),
        optimal.mean,
        optimal.std_error,
        optimal.samples,
        start.elapsed().as_secs_f64()
    );

    match ProcessMemory::read() {
        Ok(memory) => println!(
            "resident memory: {:.1} MiB (peak {:.1} MiB)",
            memory.rss_bytes as f64 / (1 << 20) as f64,
            memory.peak_rss_bytes as f64 / (1 << 20) as f64
        ),
        Err(e) => println!("resident memory: unavailable ({e})"),
    }
    Ok(())
}
