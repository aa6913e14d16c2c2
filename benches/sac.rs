//! `cargo xtask bench sac`: one SAC gradient step (`update(&batch)`).
//!
//! Prints one JSON line per configuration and thread count:
//!
//! `{"bench":"sac","config":C,"batch":B,"threads":T,"median_ms":X,"updates_per_s":Y}`
//!
//! - `"sb3"`: continuous [`Sac`] with `SacConfig::sb3()` (actor and critics 256-256,
//!   batch 256) on Pendulum's spaces (3 observations, 1 action), on one thread and on
//!   a pool of two (`Learner::set_pool`), timed alternately on the same batches (the
//!   `large_actions` configurations too). Its
//!   lines add `"products_gflop"` (the multiply-adds of the update's matrix products,
//!   counted from the layer shapes: see [`sac_products`]), `"peak_gflops"` (this
//!   core's FMA peak, `rl_nn::fma_peak`), `"products_ms_at_peak"` (the time those
//!   products need at that peak, per thread) and `"ratio_to_peak"` (`median_ms` over
//!   it: 1.0 would be an update that is nothing but products at the peak);
//! - `"tuned"`: the same with 64-64 networks (`sac_pendulum`'s default preset), batch 256;
//! - `"large_actions_b64"`, `"large_actions_b256"`: [`DiscreteSac`] over `LargeDiscrete`'s
//!   100 000 x 8 action-feature table (two-tower networks 16-64-64-8, chunks of 2048
//!   actions), batches of 64 and 256 transitions that all terminate, as every
//!   `LargeDiscrete` step does (the target needs no pass over the next observations);
//! - `"large_actions_b64_bootstrap"`: batch 64 with no terminated row, so the target's
//!   soft value (an expectation over all 100 000 actions at the next observations) runs;
//! - `"act_large_actions_b1"`: one collector-facing `Policy::act` call of the 100k-action
//!   trainer for a single observation (sampling by inverse CDF over the chunks);
//!   `updates_per_s` is then calls per second.
//!
//! Batches are sampled from a 4096-row RAM replay buffer with the trainer's
//! `replay_schema()`, filled with random valid transitions; sampling is outside the timed
//! region. Each figure is the median over 21 timed repetitions after 5 warm-up ones.

use std::hint::black_box;
use std::ops::Div;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rl::algos::learner::Learner;
use rl::algos::sac::{DiscreteSac, Sac, SacConfig, SacTrainer};
use rl::collect::{ActOutput, Policy};
use rl::core::simd::Isa;
use rl::core::{Env, Field, Flag};
use rl::envs::{LargeDiscrete, Pendulum};
use rl::nn::{Pool, fma_peak};
use rl::storage::{Batch, ColumnSlice, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};

mod common;

use common::SplitMix;

const WARMUP: usize = 5;
const REPS: usize = 21;
/// Rows of the replay buffer batches are sampled from.
const REPLAY_ROWS: usize = 4096;

fn main() -> anyhow::Result<()> {
    let only = common::args();
    let wanted = |config: &str| only.is_empty() || only.iter().any(|a| a == config);
    let known = [
        "sb3",
        "tuned",
        "large_actions_b64",
        "large_actions_b256",
        "large_actions_b64_bootstrap",
        "act_large_actions_b1",
    ];
    if let Some(unknown) = only.iter().find(|a| !known.contains(&a.as_str())) {
        bail!("unknown configuration `{unknown}`: use none (all) or some of {known:?}");
    }
    let mut rng = SplitMix(0x5AC);

    let pendulum = Pendulum::new(0);
    let peak = if wanted("sb3") {
        fma_peak(Isa::detect(), 201, Duration::from_millis(1)).gflops
    } else {
        0.0
    };
    for (name, hidden) in [("sb3", vec![256, 256]), ("tuned", vec![64, 64])] {
        if !wanted(name) {
            continue;
        }
        let config = SacConfig {
            hidden: hidden.clone(),
            batch_size: 256,
            ..SacConfig::sb3()
        };
        let mut one = Sac::for_env(&pendulum, config.clone(), 0)?;
        let mut trainers = vec![&mut one];
        let mut two = Sac::for_env(&pendulum, config, 0)?;
        if name == "sb3" {
            two.set_pool(Some(Arc::new(Pool::new(2)?)));
            trainers.push(&mut two);
        }
        // Pendulum's torque bounds are [-2, 2]; its episodes never terminate (only
        // truncate), and the continuous update evaluates the target for every row anyway.
        let ms = time_updates(
            &mut trainers,
            &mut rng,
            |rng, len| ActionValues::F32((0..len).map(|_| rng.uniform(-2.0, 2.0)).collect()),
            false,
        )?;
        let (obs, act) = (3, 1);
        let gflop = 2.0 * sac_products(obs, act, &hidden, 256) as f64 / 1e9;
        for (threads, &ms) in (1..).zip(&ms) {
            let mut line = line(name, 256, threads, ms);
            if name == "sb3" {
                let at_peak = gflop / peak * 1e3 / threads as f64;
                line["products_gflop"] = (gflop * 1e3).round().div(1e3).into();
                line["peak_gflops"] = (peak * 10.0).round().div(10.0).into();
                line["products_ms_at_peak"] = (at_peak * 1e3).round().div(1e3).into();
                line["ratio_to_peak"] = (ms / at_peak * 100.0).round().div(100.0).into();
            }
            println!("{line}");
        }
    }

    let env = LargeDiscrete::new(0);
    let n = env.actions();
    for (name, batch, terminated) in [
        ("large_actions_b64", 64, true),
        ("large_actions_b256", 256, true),
        ("large_actions_b64_bootstrap", 64, false),
    ] {
        if !wanted(name) {
            continue;
        }
        let mut one = large_actions(&env, batch)?;
        let mut two = large_actions(&env, batch)?;
        two.set_pool(Some(Arc::new(Pool::new(2)?)));
        let ms = time_updates(
            &mut [&mut one, &mut two],
            &mut rng,
            |rng, _| ActionValues::U32(vec![rng.below(n)]),
            terminated,
        )?;
        for (threads, &ms) in (1..).zip(&ms) {
            println!("{}", line(name, batch, threads, ms));
        }
    }

    if wanted("act_large_actions_b1") {
        let mut sac = large_actions(&env, 64)?;
        let obs = rng.floats(env.observation_space().flat_len(), 1.0);
        let mut states = [()];
        let mut actions = [0u32];
        let (mut log_probs, mut values) = ([0.0f32], [0.0f32]);
        let ms = median_ms(|| {
            Policy::act(
                &mut sac,
                black_box(&obs),
                &mut states,
                ActOutput {
                    actions: &mut actions,
                    log_probs: &mut log_probs,
                    values: &mut values,
                },
            )
            .map_err(|e| anyhow::anyhow!(e))?;
            if actions[0] >= n {
                bail!("act returned action {} of {n}", actions[0]);
            }
            black_box(&actions);
            Ok(())
        })?;
        report("act_large_actions_b1", 1, ms);
    }
    Ok(())
}

/// `DiscreteSac` over `env`'s feature table: 64-64 towers, chunks of 2048.
fn large_actions(env: &LargeDiscrete, batch_size: usize) -> anyhow::Result<DiscreteSac> {
    let config = SacConfig {
        hidden: vec![64, 64],
        batch_size,
        chunk: 2048,
        ..SacConfig::sb3()
    };
    Ok(DiscreteSac::for_env_with_table(
        env,
        env.action_features().clone(),
        config,
        0,
    )?)
}

/// An action column's values for one row.
enum ActionValues {
    F32(Vec<f32>),
    U32(Vec<u32>),
}

/// Fills a replay buffer of the trainers' schema (that of the first; all are built
/// alike) with random transitions (actions from `action(rng, action_len)`, every row
/// terminated or none), then times `update` on freshly sampled batches of the configured
/// size, each batch given to every trainer in turn; the median of each.
fn time_updates<T: SacTrainer>(
    trainers: &mut [&mut T],
    rng: &mut SplitMix,
    mut action: impl FnMut(&mut SplitMix, usize) -> ActionValues,
    terminated: bool,
) -> anyhow::Result<Vec<f64>> {
    let schema = trainers[0].replay_schema()?;
    let obs_len = schema
        .column(Field::Obs.name())
        .with_context(|| format!("the replay schema has no {} column", Field::Obs))?
        .numel();
    let action_len = schema
        .column(Field::Action.name())
        .with_context(|| format!("the replay schema has no {} column", Field::Action))?
        .numel();
    let batch_size = trainers[0].config().batch_size;
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), REPLAY_ROWS, None)?,
        Uniform::new(0),
    );
    let flag = [Flag(u8::from(terminated))];
    let not_truncated = [Flag(0)];
    for _ in 0..REPLAY_ROWS {
        let obs = rng.floats(obs_len, 1.0);
        let next_obs = rng.floats(obs_len, 1.0);
        let reward = [rng.uniform(-1.0, 1.0)];
        let act = action(rng, action_len);
        let act_slice = match &act {
            ActionValues::F32(a) => ColumnSlice::F32(a),
            ActionValues::U32(a) => ColumnSlice::U32(a),
        };
        replay.push(&[
            ColumnSlice::F32(&obs),
            act_slice,
            ColumnSlice::F32(&reward),
            ColumnSlice::Bool(&flag),
            ColumnSlice::Bool(&not_truncated),
            ColumnSlice::F32(&next_obs),
        ])?;
    }
    let mut batch = Batch::new(&schema, batch_size)?;
    let mut times = vec![Vec::with_capacity(REPS); trainers.len()];
    for rep in 0..WARMUP + REPS {
        replay.sample(&mut batch)?;
        for (trainer, times) in trainers.iter_mut().zip(&mut times) {
            let start = Instant::now();
            let stats = trainer.update(black_box(&batch))?;
            let elapsed = start.elapsed().as_secs_f64() * 1e3;
            if !stats.critic_loss.is_finite() {
                bail!("non-finite critic loss {}", stats.critic_loss);
            }
            if rep >= WARMUP {
                times.push(elapsed);
            }
        }
    }
    Ok(times.iter_mut().map(|t| common::median(t)).collect())
}

/// Median milliseconds of `REPS` runs of `f`, after `WARMUP` runs.
fn median_ms(f: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    common::median_ms(WARMUP, REPS, f)
}

/// The multiply-adds of one continuous SAC update's matrix products per batch of
/// `batch` rows, for an actor `obs -> hidden -> 2 act` and critics `obs + act -> hidden
/// -> 1`: the actor's forward passes on the observations and the next observations, six
/// critic forwards (two targets, two for the critic loss, two for the actor loss), the
/// critics' backward passes for their parameters (weights, and the inputs of every layer
/// but the first), their backward passes for the actions' gradient (inputs of every
/// layer), and the actor's backward pass for its parameters.
fn sac_products(obs: usize, act: usize, hidden: &[usize], batch: usize) -> usize {
    let sizes = |input: usize, output: usize| {
        let mut s = vec![input];
        s.extend(hidden);
        s.push(output);
        s
    };
    let (actor, critic) = (sizes(obs, 2 * act), sizes(obs + act, 1));
    let forward = |s: &[usize]| s.windows(2).map(|w| w[0] * w[1]).sum::<usize>();
    let inputs_but_first = |s: &[usize]| s.windows(2).skip(1).map(|w| w[0] * w[1]).sum::<usize>();
    let per_row = 2 * forward(&actor)
        + 6 * forward(&critic)
        + 2 * (forward(&critic) + inputs_but_first(&critic))
        + 2 * forward(&critic)
        + forward(&actor)
        + inputs_but_first(&actor);
    per_row * batch
}

fn line(config: &str, batch: usize, threads: usize, ms: f64) -> serde_json::Value {
    serde_json::json!({
        "bench": "sac",
        "config": config,
        "batch": batch,
        "threads": threads,
        "median_ms": (ms * 1e4).round() / 1e4,
        "updates_per_s": (1e3 / ms * 10.0).round() / 10.0,
    })
}

fn report(config: &str, batch: usize, ms: f64) {
    println!("{}", line(config, batch, 1, ms));
}
