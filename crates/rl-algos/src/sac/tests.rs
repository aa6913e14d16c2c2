#![allow(clippy::unwrap_used, reason = "tests")]

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_core::{BoxSpace, DType, Env, FeatureTable, Flag, Space, Step};
use rl_envs::LargeDiscrete;
use rl_nn::AdamConfig;
use rl_storage::{Batch, ColumnSlice, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};

use super::continuous::squash;
use super::*;
#[allow(unused_imports, reason = "the learner traits, for their methods")]
use crate::learner::{Learner as _, OffPolicyLearner as _, OnPolicyLearner as _};
use crate::predict::Predict;

pub(super) fn box_space(low: f32, high: f32, len: usize) -> Space {
    Space::Box(BoxSpace::uniform(low, high, &[len], DType::F32).unwrap())
}

fn small_config(batch: usize) -> SacConfig {
    SacConfig {
        hidden: vec![16, 16],
        batch_size: batch,
        ..SacConfig::sb3()
    }
}

/// A replay buffer of `rows` random transitions for `schema`-compatible SAC trainers.
pub(super) fn random_batch(
    schema: &rl_core::Schema,
    obs_dim: usize,
    act: Result<usize, u32>,
    rows: usize,
    seed: u64,
) -> Batch {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), rows, None).unwrap(),
        Uniform::new(seed),
    );
    for i in 0..rows {
        let obs: Vec<f32> = (0..obs_dim).map(|_| rng.random_range(-1.0..1.0)).collect();
        let next: Vec<f32> = (0..obs_dim).map(|_| rng.random_range(-1.0..1.0)).collect();
        let reward = [rng.random_range(-1.0f32..1.0)];
        let terminated = [Flag::new(i % 3 == 0)];
        let truncated = [Flag::new(false)];
        let (continuous, discrete): (Vec<f32>, Vec<u32>) = match act {
            Ok(dim) => (
                (0..dim).map(|_| rng.random_range(-2.0..2.0)).collect(),
                vec![],
            ),
            Err(n) => (vec![], vec![rng.random_range(0..n)]),
        };
        let action = match act {
            Ok(_) => ColumnSlice::F32(&continuous),
            Err(_) => ColumnSlice::U32(&discrete),
        };
        replay
            .push(&[
                ColumnSlice::F32(&obs),
                action,
                ColumnSlice::F32(&reward),
                ColumnSlice::Bool(&terminated),
                ColumnSlice::Bool(&truncated),
                ColumnSlice::F32(&next),
            ])
            .unwrap();
    }
    let mut batch = Batch::new(schema, rows).unwrap();
    let positions: Vec<usize> = (0..rows).collect();
    replay.gather(&positions, &mut batch).unwrap();
    batch
}

/// A batch of `actions.len()` discrete transitions with the given actions and rewards
/// (observations 0.1, none terminated), in `schema` (which may give `reward` any width).
fn fixed_batch(
    schema: &rl_core::Schema,
    obs_dim: usize,
    actions: &[u32],
    rewards: &[f32],
) -> Batch {
    let rows = actions.len();
    let reward_width = rewards.len() / rows;
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), rows, None).unwrap(),
        Uniform::new(0),
    );
    let obs = vec![0.1f32; obs_dim];
    for (i, &a) in actions.iter().enumerate() {
        replay
            .push(&[
                ColumnSlice::F32(&obs),
                ColumnSlice::U32(&[a]),
                ColumnSlice::F32(&rewards[i * reward_width..(i + 1) * reward_width]),
                ColumnSlice::Bool(&[Flag::new(false)]),
                ColumnSlice::Bool(&[Flag::new(false)]),
                ColumnSlice::F32(&obs),
            ])
            .unwrap();
    }
    let mut batch = Batch::new(schema, rows).unwrap();
    replay
        .gather(&(0..rows).collect::<Vec<_>>(), &mut batch)
        .unwrap();
    batch
}

#[test]
fn squashed_gaussian_log_prob_matches_a_numerical_density() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
    for _ in 0..200 {
        let mean: f32 = rng.random_range(-1.5..1.5);
        let log_std: f32 = rng.random_range(-2.0..1.0);
        let eps: f32 = rng.random_range(-2.0..2.0);
        let (mut action, mut logp) = ([0.0f32], [0.0f32]);
        squash(&[mean, log_std], &[eps], 1, false, &mut action, &mut logp);
        // Reference: the density of a = tanh(u), u ~ N(mean, std), by change of
        // variables with a finite-difference Jacobian, in f64.
        let (mean, std) = (f64::from(mean), f64::from(log_std).exp());
        let u = mean + std * f64::from(eps);
        let h = 1e-6;
        let jacobian = ((u + h).tanh() - (u - h).tanh()) / (2.0 * h);
        let log_normal =
            -0.5 * ((u - mean) / std).powi(2) - std.ln() - 0.5 * (2.0 * std::f64::consts::PI).ln();
        let reference = log_normal - jacobian.ln();
        assert!((action[0] as f64 - u.tanh()).abs() < 1e-6);
        // The 1e-6 inside the log shifts the density by at most 1e-6 / (1 - a^2).
        let slack = 1e-4 + 2e-6 / jacobian;
        assert!(
            (f64::from(logp[0]) - reference).abs() < slack,
            "mean {mean} std {std} eps {eps}: {} vs {reference}",
            logp[0]
        );
    }
}

#[test]
fn squashed_gaussian_density_integrates_to_one() {
    // Integrate exp(log pi(a)) over a in (-1, 1) through u (da = (1 - tanh^2 u) du).
    for (mean, log_std) in [(0.3f32, -0.5f32), (-1.0, 0.5), (0.0, 0.0)] {
        let std = log_std.exp();
        let (mut total, du) = (0.0f64, 1e-3f64);
        let mut u = f64::from(mean) - 8.0 * f64::from(std);
        while u < f64::from(mean) + 8.0 * f64::from(std) {
            let eps = ((u - f64::from(mean)) / f64::from(std)) as f32;
            let (mut a, mut logp) = ([0.0f32], [0.0f32]);
            squash(&[mean, log_std], &[eps], 1, false, &mut a, &mut logp);
            let jacobian = 1.0 - u.tanh().powi(2);
            total += f64::from(logp[0]).exp() * jacobian * du;
            u += du;
        }
        assert!((total - 1.0).abs() < 2e-3, "mean {mean}: {total}");
    }
}

#[test]
#[allow(clippy::needless_range_loop, reason = "perturbs parameters by index")]
fn actor_gradients_match_finite_differences() {
    let config = SacConfig {
        hidden: vec![8, 8],
        batch_size: 6,
        ..SacConfig::sb3()
    };
    let mut sac = Sac::new(
        &box_space(-5.0, 5.0, 3),
        &box_space(-1.0, 1.0, 2),
        config,
        0,
    )
    .unwrap();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    let rows = 6;
    let obs: Vec<f32> = (0..rows * 3).map(|_| rng.random_range(-1.0..1.0)).collect();
    for e in &mut sac.scratch.noise[..rows * 2] {
        *e = rng.random_range(-1.5..1.5);
    }
    let alpha = 0.7;
    let loss_at = |sac: &mut Sac| -> f64 {
        sac.policy_actions(&obs, rows).unwrap();
        let loss = sac.actor_gradients(&obs, rows, alpha).unwrap();
        sac.core.actor_grads.fill(0.0);
        f64::from(loss)
    };
    sac.policy_actions(&obs, rows).unwrap();
    sac.actor_gradients(&obs, rows, alpha).unwrap();
    let analytic = sac.core.actor_grads.clone();
    sac.core.actor_grads.fill(0.0);
    let h = 1e-2f32;
    let (mut agree, mut total) = (0, 0);
    for i in 0..analytic.len() {
        let original = sac.core.actor.params()[i];
        sac.core.actor.params_mut()[i] = original + h;
        let up = loss_at(&mut sac);
        sac.core.actor.params_mut()[i] = original - h;
        let down = loss_at(&mut sac);
        sac.core.actor.params_mut()[i] = original;
        let numeric = (up - down) / (2.0 * f64::from(h));
        total += 1;
        // ReLU kinks and the min of the critics make a few differences jump.
        if (numeric - f64::from(analytic[i])).abs() < 2e-3 + 2e-2 * numeric.abs() {
            agree += 1;
        }
    }
    assert!(
        agree * 10 >= total * 9,
        "{agree} of {total} gradients agree"
    );
    assert!(
        analytic.iter().any(|g| g.abs() > 1e-3),
        "gradients are all ~0"
    );
}

#[test]
fn polyak_targets_move_a_tau_fraction_after_each_update() {
    let config = SacConfig {
        tau: 0.25,
        ..small_config(8)
    };
    let mut sac = Sac::new(
        &box_space(-1.0, 1.0, 3),
        &box_space(-2.0, 2.0, 1),
        config,
        0,
    )
    .unwrap();
    let batch = random_batch(&sac.replay_schema().unwrap(), 3, Ok(1), 8, 1);
    let before: Vec<Vec<f32>> = sac
        .core
        .critics
        .target
        .iter()
        .map(|t| t.params().to_vec())
        .collect();
    sac.update(&batch).unwrap();
    for (i, old) in before.iter().enumerate() {
        let online = sac.core.critics.online[i].params();
        let target = sac.core.critics.target[i].params();
        assert_ne!(target, &old[..], "target {i} did not move");
        for ((t, o), n) in target.iter().zip(old).zip(online) {
            assert!((t - (0.75 * o + 0.25 * n)).abs() < 1e-6);
        }
    }
}

#[test]
fn checkpoints_resume_bit_for_bit_and_refuse_other_runs() {
    let config = small_config(8);
    let (obs, act) = (box_space(-1.0, 1.0, 3), box_space(-2.0, 2.0, 1));
    let mut sac = Sac::new(&obs, &act, config.clone(), 0).unwrap();
    let batch = random_batch(&sac.replay_schema().unwrap(), 3, Ok(1), 8, 2);
    for _ in 0..3 {
        sac.update(&batch).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sac.safetensors");
    sac.checkpoint().save(&path).unwrap();

    let mut resumed = Sac::new(&obs, &act, config.clone(), 99).unwrap();
    // A checkpoint of another trainer kind is refused before parsing its state.
    assert!(matches!(
        Checkpoint::<SacState>::load(&path, "discrete_sac"),
        Err(rl_nn::Error::CheckpointKind { .. })
    ));
    resumed
        .restore(&Checkpoint::load(&path, super::continuous::CHECKPOINT_KIND).unwrap())
        .unwrap();
    let (a, b) = (sac.update(&batch).unwrap(), resumed.update(&batch).unwrap());
    assert_eq!(a, b);
    assert_eq!(sac.core.actor.params(), resumed.core.actor.params());
    assert_eq!(
        sac.core.critics.target[1].params(),
        resumed.core.critics.target[1].params()
    );
    assert_eq!(sac.core.updates(), 4);

    // Another architecture or learning rate is refused and changes nothing.
    let wider = SacConfig {
        hidden: vec![32, 16],
        ..config.clone()
    };
    let mut other = Sac::new(&obs, &act, wider, 0).unwrap();
    let untouched = other.core.actor.params().to_vec();
    assert!(other.restore(&sac.checkpoint()).is_err());
    assert_eq!(other.core.actor.params(), &untouched[..]);
    // Another optimiser setting is refused, naming it; another learning rate is taken
    // (it may change on resume) by every optimiser of the restored learner.
    let with_adam = |adam: AdamConfig| {
        Sac::new(
            &obs,
            &act,
            SacConfig {
                adam,
                ..config.clone()
            },
            0,
        )
        .unwrap()
    };
    let mut other = with_adam(AdamConfig {
        eps: 1e-3,
        ..config.adam
    });
    let result = other.restore(&sac.checkpoint());
    assert!(
        matches!(&result, Err(Error::CheckpointMismatch { what, .. }) if what == "sac.adam.eps"),
        "{result:?}"
    );
    let mut slower = with_adam(AdamConfig {
        lr: 1e-5,
        ..config.adam
    });
    slower.restore(&sac.checkpoint()).unwrap();
    assert_eq!(slower.core.actor_adam.lr(), 1e-5);
    assert!(slower.core.critics.adam.iter().all(|a| a.lr() == 1e-5));
    assert_eq!(slower.core.actor.params(), sac.core.actor.params());
}

#[test]
fn invalid_configurations_and_spaces_are_typed_errors() {
    let (obs, act) = (box_space(-1.0, 1.0, 3), box_space(-2.0, 2.0, 1));
    for bad in [
        SacConfig {
            batch_size: 0,
            ..SacConfig::sb3()
        },
        SacConfig {
            tau: 1.5,
            ..SacConfig::sb3()
        },
        SacConfig {
            gamma: f32::NAN,
            ..SacConfig::sb3()
        },
        SacConfig {
            hidden: vec![0],
            ..SacConfig::sb3()
        },
        SacConfig {
            adam: AdamConfig {
                lr: -1.0,
                ..SacConfig::sb3().adam
            },
            ..SacConfig::sb3()
        },
        SacConfig {
            ent_coef: EntropyCoef::Fixed(0.0),
            ..SacConfig::sb3()
        },
        SacConfig {
            target_entropy: Some(f32::INFINITY),
            ..SacConfig::sb3()
        },
    ] {
        assert!(matches!(
            Sac::new(&obs, &act, bad, 0),
            Err(Error::Config { .. })
        ));
    }
    let discrete = Space::discrete(4).unwrap();
    assert!(matches!(
        Sac::new(&obs, &discrete, small_config(4), 0),
        Err(Error::SpaceMismatch { .. })
    ));
    let unbounded =
        Space::Box(BoxSpace::uniform(f32::NEG_INFINITY, f32::INFINITY, &[1], DType::F32).unwrap());
    assert!(matches!(
        Sac::new(&obs, &unbounded, small_config(4), 0),
        Err(Error::SpaceMismatch { .. })
    ));
    assert!(matches!(
        DiscreteSac::with_index(&obs, &act, small_config(4), 0),
        Err(Error::SpaceMismatch { .. })
    ));
    // A table with another number of rows than the environment has actions.
    let table = FeatureTable::new(5, 2, vec![0.5; 10]).unwrap();
    let err = DiscreteSac::with_table(&obs, &discrete, table, small_config(4), 0).unwrap_err();
    assert!(matches!(err, Error::SpaceMismatch { .. }), "{err}");
    assert!(err.to_string().contains("5 actions"), "{err}");
}

#[test]
fn bad_batches_are_refused_before_anything_changes() {
    let obs = box_space(-1.0, 1.0, 3);
    let mut sac =
        DiscreteSac::with_index(&obs, &Space::discrete(4).unwrap(), small_config(8), 0).unwrap();
    // Actions stored for 6 actions: index 5 does not exist for a 4-action trainer.
    let schema = sac.replay_schema().unwrap();
    let mut actions = [0u32, 1, 2, 3, 0, 1, 2, 3];
    actions[5] = 5;
    let batch = fixed_batch(&schema, 3, &actions, &[0.5; 8]);
    let before = sac.core.actor.params().to_vec();
    let critic_before = sac.core.critics.online[0].params().to_vec();
    let result = sac.update(&batch);
    assert!(
        matches!(
            result,
            Err(Error::ActionOutOfRange {
                row: 5,
                action: 5,
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(sac.core.actor.params(), &before[..]);
    assert_eq!(sac.core.critics.online[0].params(), &critic_before[..]);
    assert_eq!(sac.core.updates(), 0);
    // A continuous batch given to a discrete trainer: wrong column type.
    let continuous = Sac::new(&obs, &box_space(-1.0, 1.0, 1), small_config(8), 0).unwrap();
    let batch = random_batch(&continuous.replay_schema().unwrap(), 3, Ok(1), 8, 6);
    assert!(sac.update(&batch).is_err());
    assert_eq!(sac.core.updates(), 0);
}

/// A full continuous SAC update with Stable-Baselines3's sizes (256-256 networks, batch
/// 256: critics, actor, entropy coefficient, polyak targets) allocates nothing after the
/// first.
#[test]
fn a_full_continuous_update_allocates_nothing_after_the_first() {
    let (obs, act) = (box_space(-1.0, 1.0, 3), box_space(-2.0, 2.0, 1));
    let mut sac = Sac::new(&obs, &act, SacConfig::sb3(), 0).unwrap();
    let batch = random_batch(&sac.replay_schema().unwrap(), 3, Ok(1), 256, 7);
    sac.update(&batch).unwrap();
    let (stats, alloc) = rl_testkit::measure(|| sac.update(&batch));
    assert!(stats.unwrap().critic_loss.is_finite());
    assert_eq!(alloc.allocations, 0, "{alloc:?}");
    // Acting for a collector allocates nothing either.
    let obs_rows = vec![0.1f32; 8 * 3];
    let (mut actions, mut log_probs) = (vec![0.0f32; 8], vec![0.0f32; 8]);
    sac.act_rows(&obs_rows, &mut actions, &mut log_probs)
        .unwrap();
    let (result, alloc) =
        rl_testkit::measure(|| sac.act_rows(&obs_rows, &mut actions, &mut log_probs));
    result.unwrap();
    assert_eq!(alloc.allocations, 0, "{alloc:?}");
}

#[test]
fn discrete_update_transient_memory_is_bounded_by_batch_times_chunk() {
    let (n, d, batch, chunk) = (100_000usize, 8usize, 256usize, 2048usize);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    let data: Vec<f32> = (0..n * d).map(|_| rng.random_range(-0.5..0.5)).collect();
    let table = FeatureTable::new(n, d, data).unwrap();
    let obs = box_space(-3.0, 3.0, 16);
    let config = SacConfig {
        hidden: vec![64, 64],
        batch_size: batch,
        chunk,
        ..SacConfig::sb3()
    };
    let (sac, built) = rl_testkit::measure(|| {
        DiscreteSac::with_table(
            &obs,
            &Space::discrete(n as u32).unwrap(),
            table.clone(),
            config,
            0,
        )
    });
    let mut sac = sac.unwrap();
    let schema = sac.replay_schema().unwrap();
    let samples = random_batch(&schema, 16, Err(n as u32), batch, 3);
    let ((), update) = rl_testkit::measure(|| {
        sac.update(&samples).unwrap();
    });
    let ((), again) = rl_testkit::measure(|| {
        sac.update(&samples).unwrap();
    });

    // Parameters, their gradients and Adam moments: 4 floats per parameter for the actor
    // and the critics, plus one float per parameter for each target critic.
    let params = sac.core.actor.num_params() + 2 * sac.core.critics.online[0].num_params();
    let targets = 2 * sac.core.critics.target[0].num_params();
    let learnable = ((4 * params + targets) * size_of::<f32>()) as i64;
    let batch_chunk_bytes = (batch * chunk * size_of::<f32>()) as i64;
    let retained = built.allocated_bytes as i64 - built.freed_bytes as i64;
    let scratch = retained - learnable;
    // The transposed table copy the scorer keeps (n x d floats) is a per-process cost of
    // the table, not of the update: it is reported by the plan and excluded here.
    let transposed = (n * d * size_of::<f32>()) as i64;
    let transient = scratch - transposed + update.peak_live_bytes.max(0);
    assert!(
        transient <= 4 * batch_chunk_bytes,
        "transient {transient} bytes > 4 x batch x chunk floats ({} bytes); retained {retained}",
        4 * batch_chunk_bytes
    );
    // Nothing is allocated by an update after the first.
    assert_eq!(again.allocations, 0, "{again:?}");
    eprintln!(
        "retained by construction {retained} B (learnable {learnable} B), update peak {} B, transient {transient} B = {:.2} x batch x chunk floats",
        update.peak_live_bytes,
        transient as f64 / batch_chunk_bytes as f64
    );
    // The plan states at least what was allocated.
    let planned = sac.memory_plan().total(rl_core::Location::Ram) as i64;
    let table_bytes = (n * d * size_of::<f32>()) as i64;
    assert!(
        planned + 64 * 1024 >= retained + table_bytes,
        "plan {planned} < {retained} + table"
    );
}

/// A one-step task with a continuous action: reward `-(a - 0.5)^2`, constant observation.
struct Target {
    obs_space: Space,
    act_space: Space,
}

impl Env for Target {
    type Obs = f32;
    type Act = f32;

    fn observation_space(&self) -> &Space {
        &self.obs_space
    }

    fn action_space(&self) -> &Space {
        &self.act_space
    }

    fn reset(&mut self, _seed: Option<u64>, obs: &mut [f32]) -> rl_core::Result<()> {
        obs.fill(1.0);
        Ok(())
    }

    fn step(&mut self, action: &[f32], obs: &mut [f32]) -> rl_core::Result<Step> {
        obs.fill(1.0);
        Ok(Step {
            reward: -(action[0] - 0.5).powi(2),
            terminated: true,
            truncated: false,
        })
    }
}

/// Runs `steps` env steps with one update per step after 100 random ones.
fn train<E, T>(env: E, trainer: T, steps: u64) -> (rl_collect::SyncCollector<E, T>, f32)
where
    E: Env<Obs = f32>,
    E::Act: rl_collect::RandomAction,
    T: SacTrainer<Obs = f32, Act = E::Act>,
{
    let config = trainer.config().clone();
    let schema = trainer.replay_schema().unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), 10_000, None).unwrap(),
        Uniform::new(0),
    );
    let mut batch = Batch::new(&schema, config.batch_size).unwrap();
    let mut collector = rl_collect::SyncCollector::new(
        vec![env],
        trainer,
        rl_collect::CollectorConfig {
            random_frames: 100,
            stats_window: 200,
            ..rl_collect::CollectorConfig::new(1)
        },
    )
    .unwrap();
    while collector.frames() < steps {
        collector.collect(&mut replay).unwrap();
        if collector.frames() > 100 {
            replay.sample(&mut batch).unwrap();
            collector.policy_mut().update(&batch).unwrap();
        }
    }
    let mean = collector.stats().mean_return().unwrap();
    (collector, mean)
}

#[test]
fn continuous_sac_finds_the_best_action_of_a_one_step_task() {
    let env = Target {
        obs_space: box_space(-1.0, 1.0, 1),
        act_space: box_space(-1.0, 1.0, 1),
    };
    let config = SacConfig {
        adam: AdamConfig {
            lr: 3e-3,
            ..SacConfig::sb3().adam
        },
        ent_coef: EntropyCoef::Auto { initial: 0.1 },
        ..small_config(32)
    };
    let sac = Sac::for_env(&env, config, 0).unwrap();
    let (mut collector, mean) = train(env, sac, 1_500);
    let sac = collector.policy_mut();
    sac.set_mode(Mode::Deterministic);
    let (mut action, mut logp) = ([0.0f32], [0.0f32]);
    sac.act_rows(&[1.0], &mut action, &mut logp).unwrap();
    assert!(
        (action[0] - 0.5).abs() < 0.15,
        "deterministic action {}",
        action[0]
    );
    // Random actions in [-1, 1] earn -0.58 on average.
    assert!(mean > -0.15, "mean reward {mean}");
}

#[test]
fn discrete_sac_learns_a_thousand_action_task() {
    let env = LargeDiscrete::with_actions(1_000, 3).unwrap();
    let optimal = env.optimal_reward(500, 1).mean as f32;
    let config = SacConfig {
        hidden: vec![32, 32],
        batch_size: 32,
        adam: AdamConfig {
            lr: 3e-3,
            ..SacConfig::sb3().adam
        },
        target_entropy: Some(0.5 * 1000f32.ln()),
        chunk: 256,
        ..SacConfig::sb3()
    };
    let sac =
        DiscreteSac::for_env_with_table(&env, env.action_features().clone(), config, 0).unwrap();
    let (_, mean) = train(env, sac, 2_000);
    // Uniform actions earn 0; the window holds the last 200 episodes.
    assert!(
        mean > 0.4 * optimal,
        "mean reward {mean} of optimal {optimal}"
    );
}

#[test]
fn learnable_tables_change_only_trained_rows_and_resume_from_checkpoints() {
    let n = 50u32;
    let env_table = FeatureTable::new(
        n as usize,
        4,
        (0..n as usize * 4)
            .map(|x| (x % 7) as f32 / 7.0 - 0.4)
            .collect(),
    )
    .unwrap();
    let (obs, act) = (box_space(-1.0, 1.0, 3), Space::discrete(n).unwrap());
    let config = small_config(8);
    let mut sac =
        DiscreteSac::with_learnable_table(&obs, &act, env_table.clone(), config.clone(), 0)
            .unwrap();
    let batch = random_batch(&sac.replay_schema().unwrap(), 3, Err(n), 8, 9);
    sac.update(&batch).unwrap();
    let learned = sac.action_table().unwrap().clone();
    assert!(!learned.shares_storage_with(&env_table));
    let taken: Vec<usize> = batch
        .column::<u32>("action")
        .unwrap()
        .iter()
        .map(|&a| a as usize)
        .collect();
    for a in 0..n as usize {
        let moved = learned.row(a) != env_table.row(a);
        assert_eq!(moved, taken.contains(&a), "row {a}: moved {moved}");
    }
    assert!(
        sac.memory_plan()
            .lines()
            .iter()
            .any(|l| l.component.contains("learned table")),
        "the plan names the learned table"
    );

    let checkpoint = sac.checkpoint().into_owned();
    assert!(checkpoint.networks.iter().any(|n| n.name == "action_table"));
    let mut resumed =
        DiscreteSac::with_learnable_table(&obs, &act, env_table.clone(), config.clone(), 0)
            .unwrap();
    resumed.restore(&checkpoint).unwrap();
    assert_eq!(sac.update(&batch).unwrap(), resumed.update(&batch).unwrap());
    assert_eq!(
        sac.action_table().unwrap().as_slice(),
        resumed.action_table().unwrap().as_slice()
    );
    // A fixed-table trainer refuses a learned-table checkpoint, and changes nothing.
    let mut fixed = DiscreteSac::with_table(&obs, &act, env_table, config, 0).unwrap();
    assert!(matches!(
        fixed.restore(&checkpoint),
        Err(Error::CheckpointMismatch { .. })
    ));
    assert_eq!(fixed.core.updates(), 0);
}

#[test]
fn discrete_sac_learns_with_a_table_learned_from_scratch() {
    let env = LargeDiscrete::with_actions(100, 4).unwrap();
    let optimal = env.optimal_reward(500, 1).mean as f32;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(8);
    let random: Vec<f32> = (0..100 * 8).map(|_| rng.random_range(-0.5..0.5)).collect();
    let config = SacConfig {
        hidden: vec![32, 32],
        batch_size: 32,
        adam: AdamConfig {
            lr: 3e-3,
            ..SacConfig::sb3().adam
        },
        target_entropy: Some(0.5 * 100f32.ln()),
        chunk: 64,
        ..SacConfig::sb3()
    };
    let sac = DiscreteSac::with_learnable_table(
        env.observation_space(),
        env.action_space(),
        FeatureTable::new(100, 8, random).unwrap(),
        config,
        0,
    )
    .unwrap();
    let (_, mean) = train(env, sac, 3_000);
    assert!(
        mean > 0.4 * optimal,
        "mean reward {mean} of optimal {optimal}"
    );
}

#[test]
fn the_sb3_preset_holds_stable_baselines3_defaults() {
    // stable_baselines3.SAC.__init__ defaults (version 2.x) and its policy's net_arch.
    let c = SacConfig::sb3();
    assert_eq!(c.hidden, vec![256, 256]);
    assert_eq!(c.batch_size, 256);
    assert_eq!((c.adam.lr, c.adam.eps), (3e-4, 1e-8));
    assert_eq!((c.gamma, c.tau), (0.99, 0.005));
    assert_eq!(c.target_update_interval, 1);
    assert_eq!(c.ent_coef, EntropyCoef::Auto { initial: 1.0 });
    assert_eq!(c.target_entropy, None);
    assert_eq!(SacConfig::default(), c);
    // "auto" targets -dim(A).
    let sac = Sac::new(
        &box_space(-1.0, 1.0, 3),
        &box_space(-2.0, 2.0, 2),
        small_config(4),
        0,
    )
    .unwrap();
    assert_eq!(sac.core.target_entropy(), -2.0);
    let discrete = DiscreteSac::with_index(
        &box_space(-1.0, 1.0, 3),
        &Space::discrete(100).unwrap(),
        small_config(4),
        0,
    )
    .unwrap();
    assert!((discrete.core.target_entropy() - 0.98 * 100f32.ln()).abs() < 1e-5);
}

#[test]
fn batches_with_columns_of_other_widths_are_typed_errors() {
    let obs = box_space(-1.0, 1.0, 3);
    let mut sac =
        DiscreteSac::with_index(&obs, &Space::discrete(4).unwrap(), small_config(8), 0).unwrap();
    // Two rewards per row: a schema the trainer did not ask for.
    let schema = rl_core::Schema::new([
        rl_core::Column::new("obs", DType::F32, &[3]),
        rl_core::Column::scalar("action", DType::U32),
        rl_core::Column::new("reward", DType::F32, &[2]),
        rl_core::Column::scalar("terminated", DType::Bool),
        rl_core::Column::scalar("truncated", DType::Bool),
        rl_core::Column::new("next_obs", DType::F32, &[3]),
    ])
    .unwrap();
    let batch = fixed_batch(&schema, 3, &[0, 1, 2, 3], &[0.5; 8]);
    let result = sac.update(&batch);
    assert!(
        matches!(result, Err(Error::ShapeMismatch { .. })),
        "{result:?}"
    );
    assert_eq!(sac.core.updates(), 0);
}

#[test]
fn a_diverged_update_leaves_a_learned_table_and_later_updates_alone() {
    let n = 6u32;
    let table = FeatureTable::new(6, 2, (0..12).map(|x| x as f32 / 12.0 - 0.5).collect()).unwrap();
    let obs = box_space(-1.0, 1.0, 3);
    let mut sac = DiscreteSac::with_learnable_table(
        &obs,
        &Space::discrete(n).unwrap(),
        table,
        small_config(4),
        0,
    )
    .unwrap();
    let schema = sac.replay_schema().unwrap();
    let start = sac.action_table().unwrap().as_slice().to_vec();
    // A huge reward overflows the critic loss: the step is refused.
    let huge = fixed_batch(&schema, 3, &[0, 1, 2, 3], &[1e30; 4]);
    assert!(matches!(sac.update(&huge), Err(Error::Diverged { .. })));
    assert_eq!(sac.action_table().unwrap().as_slice(), &start[..]);
    // The next good update moves only the rows of its own actions (4 and 5).
    let good = fixed_batch(&schema, 3, &[4, 5, 4, 5], &[0.5; 4]);
    sac.update(&good).unwrap();
    let after = sac.action_table().unwrap();
    for a in 0..n as usize {
        let moved = after.row(a).unwrap() != &start[a * 2..a * 2 + 2];
        assert_eq!(moved, a >= 4, "row {a} moved: {moved}");
    }
}

#[test]
fn memory_plans_state_what_construction_allocates() {
    let (obs, act) = (box_space(-1.0, 1.0, 3), box_space(-2.0, 2.0, 1));
    let (sac, stats) = rl_testkit::measure(|| Sac::new(&obs, &act, SacConfig::sb3(), 0).unwrap());
    let retained = (stats.allocated_bytes - stats.freed_bytes) as f64;
    let planned = sac.memory_plan().total(rl_core::Location::Ram) as f64;
    assert!(
        (planned - retained).abs() <= 0.02 * retained,
        "planned {planned} vs allocated {retained}"
    );
}

#[test]
fn masked_discrete_sac_only_acts_and_learns_among_available_actions() {
    let env = LargeDiscrete::with_actions(100, 2).unwrap();
    let config = SacConfig {
        hidden: vec![32, 32],
        batch_size: 32,
        adam: AdamConfig {
            lr: 3e-3,
            ..SacConfig::sb3().adam
        },
        target_entropy: Some(0.5 * 50f32.ln()),
        chunk: 32,
        ..SacConfig::sb3()
    };
    // The sign of the first context element decides which half of the actions exists.
    let available = |obs: &[f32], mask: &mut rl_actions::ActionMask| {
        let forbidden = if obs[0] > 0.0 { 50..100 } else { 0..50 };
        for a in forbidden {
            mask.forbid(a).unwrap();
        }
    };
    let sac = DiscreteSac::for_env_with_table(&env, env.action_features().clone(), config, 0)
        .unwrap()
        .with_action_masks(available);
    assert!(
        sac.memory_plan()
            .lines()
            .iter()
            .any(|l| l.component.contains("action masks")),
        "masks are planned"
    );
    let (mut collector, mean) = train(env, sac, 1_500);
    assert!(mean.is_finite());
    let sac = collector.policy_mut();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(4);
    for mode in [Mode::Sample, Mode::Deterministic] {
        sac.set_mode(mode);
        for _ in 0..200 {
            let obs: Vec<f32> = (0..16).map(|_| rng.random_range(-2.0..2.0)).collect();
            let mut action = [0u32];
            sac.act_rows(&obs, &mut action).unwrap();
            assert_eq!(
                action[0] < 50,
                obs[0] > 0.0,
                "{mode:?}: action {} for obs[0] {}",
                action[0],
                obs[0]
            );
        }
    }
}

#[test]
fn a_state_without_available_actions_is_an_error() {
    let obs = box_space(-1.0, 1.0, 3);
    let mut sac = DiscreteSac::with_index(&obs, &Space::discrete(4).unwrap(), small_config(4), 0)
        .unwrap()
        .with_action_masks(|_, mask| mask.forbid_all());
    let mut action = [9u32];
    assert!(sac.act_rows(&[0.0; 3], &mut action).is_err());
    let batch = fixed_batch(&sac.replay_schema().unwrap(), 3, &[0, 1, 2, 3], &[0.5; 4]);
    let critic_before = sac.core.critics.online[0].params().to_vec();
    assert!(matches!(sac.update(&batch), Err(Error::Config { .. })));
    assert_eq!(sac.core.critics.online[0].params(), &critic_before[..]);
    assert_eq!(sac.core.updates(), 0);
}

#[test]
fn discrete_critic_observation_gradients_match_finite_differences() {
    // What a summarizer in front of the critics trains on: d (critic loss) / d obs,
    // both critics summed. Rows terminate, so targets are the rewards.
    use crate::dqn::tests::{mlp64, to64};
    let (rows, obs_dim, n) = (8, 3, 4u32);
    let config = SacConfig {
        hidden: vec![6, 5],
        batch_size: rows,
        ..SacConfig::sb3()
    };
    let mut sac = DiscreteSac::with_index(
        &box_space(-1.0, 1.0, obs_dim),
        &Space::discrete(n).unwrap(),
        config,
        3,
    )
    .unwrap();
    sac.enable_obs_grads().unwrap();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
    let obs: Vec<f32> = (0..rows * obs_dim)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let next_obs: Vec<f32> = (0..rows * obs_dim)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let actions: Vec<u32> = (0..rows).map(|_| rng.random_range(0..n)).collect();
    let rewards: Vec<f32> = (0..rows).map(|_| rng.random_range(-2.0..2.0)).collect();
    let terminated = vec![Flag::new(true); rows];
    let spec = sac.core.critics.online[0].spec().clone();
    let critics: Vec<Vec<f64>> = (0..2)
        .map(|i| to64(sac.core.critics.online[i].params()))
        .collect();
    let loss = |x: &[f64]| -> (f64, Vec<f64>) {
        let (mut loss, mut pre) = (0.0, Vec::new());
        for params in &critics {
            for b in 0..rows {
                let (q, p) = mlp64(&spec, params, &x[b * obs_dim..(b + 1) * obs_dim]);
                pre.extend(p);
                let err = q[actions[b] as usize] - f64::from(rewards[b]);
                loss += 0.5 * err * err / rows as f64;
            }
        }
        (loss, pre)
    };
    let x = to64(&obs);
    let (_, pre) = loss(&x);
    assert!(
        pre.iter().all(|z| z.abs() > 1e-4),
        "a pre-activation sits at a ReLU kink: pick another seed"
    );
    let mut analytic = vec![0.0f32; rows * obs_dim];
    let transitions = Transitions {
        rows,
        obs: &obs,
        actions: &actions,
        rewards: &rewards,
        terminated: &terminated,
        next_obs: &next_obs,
        positions: None,
    };
    sac.update_transitions(transitions, Some(&mut analytic))
        .unwrap();
    assert_matches_finite_differences(&x, &analytic, |p| loss(p).0);
}

#[test]
fn continuous_critic_observation_gradients_match_finite_differences() {
    // d (critic loss) / d obs through critics that take [obs, action]; rows terminate,
    // so targets are the rewards. Actions in [-1, 1] are fed to the critics as stored.
    use crate::dqn::tests::{mlp64, to64};
    let (rows, obs_dim, act_dim) = (8, 3, 2);
    let config = SacConfig {
        hidden: vec![6, 5],
        batch_size: rows,
        ..SacConfig::sb3()
    };
    let mut sac = Sac::new(
        &box_space(-1.0, 1.0, obs_dim),
        &box_space(-1.0, 1.0, act_dim),
        config,
        4,
    )
    .unwrap();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(12);
    let mut uniform =
        |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-1.0..1.0)).collect() };
    let (obs, next_obs) = (uniform(rows * obs_dim), uniform(rows * obs_dim));
    let actions = uniform(rows * act_dim);
    let rewards: Vec<f32> = uniform(rows).iter().map(|r| 2.0 * r).collect();
    let terminated = vec![Flag::new(true); rows];
    let spec = sac.core.critics.online[0].spec().clone();
    let critics: Vec<Vec<f64>> = (0..2)
        .map(|i| to64(sac.core.critics.online[i].params()))
        .collect();
    let loss = |x: &[f64]| -> (f64, Vec<f64>) {
        let (mut loss, mut pre) = (0.0, Vec::new());
        for params in &critics {
            for b in 0..rows {
                let mut input = x[b * obs_dim..(b + 1) * obs_dim].to_vec();
                input.extend(to64(&actions[b * act_dim..(b + 1) * act_dim]));
                let (q, p) = mlp64(&spec, params, &input);
                pre.extend(p);
                let err = q[0] - f64::from(rewards[b]);
                loss += 0.5 * err * err / rows as f64;
            }
        }
        (loss, pre)
    };
    let x = to64(&obs);
    assert!(
        loss(&x).1.iter().all(|z| z.abs() > 1e-4),
        "a pre-activation sits at a ReLU kink: pick another seed"
    );
    let mut analytic = vec![0.0f32; rows * obs_dim];
    let transitions = Transitions {
        rows,
        obs: &obs,
        actions: &actions,
        rewards: &rewards,
        terminated: &terminated,
        next_obs: &next_obs,
        positions: None,
    };
    sac.update_transitions(transitions, Some(&mut analytic))
        .unwrap();
    assert_matches_finite_differences(&x, &analytic, |p| loss(p).0);
}

/// Central differences of `loss` at `x` (f64) against the analytic gradient.
pub(crate) fn assert_matches_finite_differences(
    x: &[f64],
    analytic: &[f32],
    loss: impl Fn(&[f64]) -> f64,
) {
    let h = 1e-6;
    for i in 0..x.len() {
        let mut p = x.to_vec();
        p[i] += h;
        let up = loss(&p);
        p[i] -= 2.0 * h;
        let down = loss(&p);
        let numeric = (up - down) / (2.0 * h);
        let a = f64::from(analytic[i]);
        assert!(
            (a - numeric).abs() <= 1e-4 + 1e-3 * numeric.abs(),
            "element {i}: analytic {a} vs numeric {numeric}"
        );
    }
    assert!(analytic.iter().any(|g| g.abs() > 1e-3), "gradients all ~0");
}
