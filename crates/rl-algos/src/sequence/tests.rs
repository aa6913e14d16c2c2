#![allow(clippy::unwrap_used, reason = "tests")]

use rand::{Rng, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use rl_collect::{ActOutput, Policy};
use rl_core::{BoxSpace, DType, Flag, Space};
use rl_storage::{Batch, ColumnSlice, ram::RamStorage, replay::ReplayBuffer, sampler::Uniform};

use super::*;
use crate::dqn::{Dqn, DqnConfig};
#[allow(unused_imports, reason = "the learner traits, for their methods")]
use crate::learner::{Learner as _, OffPolicyLearner as _, OnPolicyLearner as _};
use crate::sac::{DiscreteSac, SacConfig};
use rl_nn::Checkpoint;

const OBS: usize = 3;
const ACTIONS: u32 = 4;
/// Episode lengths of the test trajectory (rows 0..5, 5..12, 12..20).
const EPISODES: [usize; 3] = [5, 7, 8];

fn obs_space() -> Space {
    Space::Box(BoxSpace::uniform(-1.0, 1.0, &[OBS], DType::F32).unwrap())
}

fn recurrent_dqn(
    history: History,
    seq_len: usize,
    burn_in: usize,
    windows: usize,
) -> Recurrent<Dqn> {
    let config = RecurrentConfig {
        seq_len,
        burn_in,
        ..RecurrentConfig::new(history)
    };
    let dqn = DqnConfig {
        hidden: vec![8],
        batch_size: windows * seq_len,
        ..DqnConfig::default()
    };
    Recurrent::new(&obs_space(), config, 0, |summaries| {
        Dqn::new(summaries, &Space::discrete(ACTIONS).unwrap(), dqn, 0)
    })
    .unwrap()
}

/// One environment's trajectory: `(obs, action, reward, terminated, next_obs)` rows,
/// episodes of [`EPISODES`] lengths, each ending in termination.
struct Trajectory {
    obs: Vec<f32>,
    actions: Vec<u32>,
    rewards: Vec<f32>,
    ends: Vec<bool>,
    next_obs: Vec<f32>,
}

impl Trajectory {
    fn new(seed: u64) -> Self {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let rows: usize = EPISODES.iter().sum();
        let obs: Vec<f32> = (0..rows * OBS)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let mut ends = vec![false; rows];
        let mut at = 0;
        for len in EPISODES {
            at += len;
            ends[at - 1] = true;
        }
        let next_obs = (0..rows)
            .flat_map(|r| {
                if ends[r] {
                    vec![0.5; OBS]
                } else {
                    obs[(r + 1) * OBS..(r + 2) * OBS].to_vec()
                }
            })
            .collect();
        Self {
            actions: (0..rows).map(|_| rng.random_range(0..ACTIONS)).collect(),
            rewards: (0..rows).map(|_| rng.random_range(-1.0..1.0)).collect(),
            obs,
            ends,
            next_obs,
        }
    }

    fn rows(&self) -> usize {
        self.ends.len()
    }

    /// A batch of the windows starting at `starts`, each `span` rows.
    fn batch(&self, schema: &rl_core::Schema, starts: &[usize], span: usize) -> Batch {
        let mut replay = ReplayBuffer::new(
            RamStorage::new(schema.clone(), self.rows(), None).unwrap(),
            Uniform::new(0),
        );
        for r in 0..self.rows() {
            replay
                .push(&[
                    ColumnSlice::F32(&self.obs[r * OBS..(r + 1) * OBS]),
                    ColumnSlice::U32(&[self.actions[r]]),
                    ColumnSlice::F32(&[self.rewards[r]]),
                    ColumnSlice::Bool(&[Flag::new(self.ends[r])]),
                    ColumnSlice::Bool(&[Flag::new(false)]),
                    ColumnSlice::F32(&self.next_obs[r * OBS..(r + 1) * OBS]),
                ])
                .unwrap();
        }
        let positions: Vec<usize> = starts.iter().flat_map(|&s| s..s + span).collect();
        let mut batch = Batch::new(schema, positions.len()).unwrap();
        replay.gather(&positions, &mut batch).unwrap();
        batch
    }

    /// The summaries acting computes at every row, one environment stepped through the
    /// trajectory with its slot reset at every episode start.
    fn acted_summaries(&self, learner: &mut Recurrent<Dqn>) -> Vec<f32> {
        let h = learner.summary.output_len();
        let mut slot = [HistorySlot::default()];
        let mut out = Vec::new();
        for r in 0..self.rows() {
            let (mut action, mut lp, mut v) = ([0u32], [0.0], [0.0]);
            let act_out = ActOutput {
                actions: &mut action,
                log_probs: &mut lp,
                values: &mut v,
            };
            learner
                .act(&self.obs[r * OBS..(r + 1) * OBS], &mut slot, act_out)
                .unwrap();
            out.extend_from_slice(&learner.acting[0].summaries[..h]);
            if self.ends[r] {
                slot[0] = HistorySlot::default();
            }
        }
        out
    }
}

#[test]
fn replayed_windows_equal_what_acting_carried() {
    // Windows whose burn-in reaches back to the start of their proper rows' episode
    // (window 0 crosses an episode end inside its proper rows: the reset handles it).
    let starts = [0, 3, 5, 12];
    for history in [
        History::Lstm { hidden: 6 },
        History::Stack { k: 3 },
        History::None,
    ] {
        let (seq_len, burn_in) = (3, 4);
        let mut learner = recurrent_dqn(history, seq_len, burn_in, starts.len());
        let trajectory = Trajectory::new(1);
        let acted = trajectory.acted_summaries(&mut learner);
        let schema = learner.replay_schema().unwrap();
        let batch = trajectory.batch(&schema, &starts, seq_len + burn_in);
        learner.update(&batch).unwrap();
        let h = learner.summary.output_len();
        for (w, &s) in starts.iter().enumerate() {
            for step in 0..seq_len {
                let row = s + burn_in + step;
                let replayed = &learner.train.features[(w * seq_len + step) * h..][..h];
                let carried = &acted[row * h..(row + 1) * h];
                for (a, b) in replayed.iter().zip(carried) {
                    assert!(
                        (a - b).abs() <= 1e-6,
                        "{history}: window {w} row {row}: replayed {replayed:?} vs acted {carried:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn updates_train_the_summarizer_move_its_target_and_allocate_nothing_after_the_first() {
    let starts = [0, 3, 5, 12];
    let (seq_len, burn_in) = (3, 4);
    let mut learner = recurrent_dqn(History::Lstm { hidden: 6 }, seq_len, burn_in, starts.len());
    let schema = learner.replay_schema().unwrap();
    let batch = Trajectory::new(2).batch(&schema, &starts, seq_len + burn_in);
    let before = learner.summary.cell().unwrap().params().to_vec();
    let target_before = learner.target.cell().unwrap().params().to_vec();
    learner.update(&batch).unwrap();
    let after = learner.summary.cell().unwrap().params().to_vec();
    let target_after = learner.target.cell().unwrap().params().to_vec();
    assert_ne!(before, after, "the summarizer did not learn");
    assert_eq!(before, target_before);
    // The target moved tau of the way towards the online weights.
    let tau = learner.config.tau;
    for ((t0, t1), online) in target_before.iter().zip(&target_after).zip(&after) {
        let expected = t0 + tau * (online - t0);
        assert!((t1 - expected).abs() <= 1e-6, "{t1} vs {expected}");
    }
    let (result, stats) = rl_testkit::measure(|| {
        for _ in 0..5 {
            learner.update(&batch).unwrap();
        }
    });
    let () = result;
    assert_eq!(stats.allocations, 0);
    assert_eq!(learner.updates(), 6);
}

#[test]
fn checkpoints_round_trip_and_refuse_another_configuration() {
    let starts = [0, 5];
    let mut learner = recurrent_dqn(History::Lstm { hidden: 5 }, 3, 2, starts.len());
    let schema = learner.replay_schema().unwrap();
    let batch = Trajectory::new(3).batch(&schema, &starts, 5);
    learner.update(&batch).unwrap();
    let saved = learner.checkpoint().into_owned();
    let bytes = saved.to_bytes().unwrap();
    assert_eq!(saved.kind, "recurrent_dqn");

    let mut fresh = recurrent_dqn(History::Lstm { hidden: 5 }, 3, 2, starts.len());
    let loaded =
        Checkpoint::from_bytes(&bytes, "recurrent_dqn", std::path::Path::new("mem")).unwrap();
    fresh.restore(&loaded).unwrap();
    assert_eq!(fresh.checkpoint().to_bytes().unwrap(), bytes);
    let a = learner.update(&batch).unwrap();
    let b = fresh.update(&batch).unwrap();
    assert_eq!(a.loss.to_bits(), b.loss.to_bits());

    let mut other = recurrent_dqn(History::Lstm { hidden: 5 }, 3, 1, starts.len());
    let untouched = other.checkpoint().to_bytes().unwrap();
    let error = other.restore(&loaded).unwrap_err();
    assert!(error.to_string().contains("recurrent.burn_in"), "{error}");
    assert_eq!(other.checkpoint().to_bytes().unwrap(), untouched);
}

#[test]
fn bad_configurations_and_batches_are_typed_errors() {
    let config = RecurrentConfig {
        seq_len: 3,
        ..RecurrentConfig::default()
    };
    let dqn = DqnConfig {
        batch_size: 10,
        ..DqnConfig::default()
    };
    let error = Recurrent::new(&obs_space(), config.clone(), 0, |s| {
        Dqn::new(s, &Space::discrete(2).unwrap(), dqn, 0)
    })
    .unwrap_err();
    assert!(error.to_string().contains("batch_size"), "{error}");
    for bad in [
        RecurrentConfig {
            seq_len: 0,
            ..config.clone()
        },
        RecurrentConfig {
            tau: 0.0,
            ..config.clone()
        },
        RecurrentConfig {
            history: History::Lstm { hidden: 0 },
            ..config.clone()
        },
    ] {
        assert!(
            matches!(bad.validate(), Err(Error::Config { .. })),
            "{bad:?}"
        );
    }
    // An inner learner built for the raw observations instead of the summaries.
    let error = Recurrent::new(&obs_space(), config.clone(), 0, |_| {
        Dqn::new(
            &obs_space(),
            &Space::discrete(2).unwrap(),
            DqnConfig {
                batch_size: 6,
                ..DqnConfig::default()
            },
            0,
        )
    })
    .unwrap_err();
    assert!(error.to_string().contains("summaries"), "{error}");
    // Action masks read raw observations.
    let error = Recurrent::new(&obs_space(), config.clone(), 0, |s| {
        let sac = SacConfig {
            batch_size: 6,
            hidden: vec![8],
            ..SacConfig::sb3()
        };
        let sac = DiscreteSac::with_index(s, &Space::discrete(4).unwrap(), sac, 0)?;
        Ok(sac.with_action_masks(|_: &[f32], _: &mut rl_actions::ActionMask| {}))
    })
    .unwrap_err();
    assert!(error.to_string().contains("mask"), "{error}");
    // A batch of another number of rows.
    let mut learner = recurrent_dqn(History::Lstm { hidden: 4 }, 3, 1, 2);
    let schema = learner.replay_schema().unwrap();
    let batch = Trajectory::new(4).batch(&schema, &[0], 4);
    let before = learner.checkpoint().to_bytes().unwrap();
    assert!(matches!(
        learner.update(&batch),
        Err(Error::ShapeMismatch { .. })
    ));
    assert_eq!(learner.checkpoint().to_bytes().unwrap(), before);
}

#[test]
fn recurrent_discrete_sac_updates_and_checkpoints_its_summarizer() {
    let config = RecurrentConfig {
        seq_len: 3,
        burn_in: 2,
        ..RecurrentConfig::new(History::Lstm { hidden: 6 })
    };
    let sac = SacConfig {
        hidden: vec![8],
        batch_size: 6,
        ..SacConfig::sb3()
    };
    let mut learner = Recurrent::new(&obs_space(), config, 0, |s| {
        DiscreteSac::with_index(s, &Space::discrete(ACTIONS).unwrap(), sac, 0)
    })
    .unwrap();
    let schema = learner.replay_schema().unwrap();
    let batch = Trajectory::new(5).batch(&schema, &[0, 12], 5);
    let before = learner.summary.cell().unwrap().params().to_vec();
    learner.update(&batch).unwrap();
    assert_ne!(learner.summary.cell().unwrap().params(), &before[..]);
    let saved = learner.checkpoint().into_owned();
    assert_eq!(saved.kind, "recurrent_discrete_sac");
    assert!(saved.networks.iter().any(|n| n.name == "history"));
    assert!(saved.networks.iter().any(|n| n.name == "critic1"));
}

#[test]
fn actors_take_the_summarizer_and_heads_in_place_and_act_with_memory() {
    let starts = [0, 5];
    let mut learner = recurrent_dqn(History::Lstm { hidden: 5 }, 3, 2, starts.len());
    let mut actor = learner.actor().unwrap();
    let schema = learner.replay_schema().unwrap();
    let batch = Trajectory::new(6).batch(&schema, &starts, 5);
    learner.update(&batch).unwrap();
    let weights = |summary: &Summary| summary.cell().unwrap().params().to_vec();
    assert_ne!(weights(&actor.summary), weights(&learner.summary));
    let (_, stats) = rl_testkit::measure(|| learner.refresh_actor(&mut actor).unwrap());
    assert_eq!(stats.allocations, 0);
    assert_eq!(weights(&actor.summary), weights(&learner.summary));
    // The actor keeps a state per environment: the same observation after different
    // histories gives different summaries.
    let mut slots = [HistorySlot::default(); 2];
    let (mut actions, mut lp, mut v) = ([0u32; 2], [0.0; 2], [0.0; 2]);
    for obs in [[1.0, 0.0, 0.0, -1.0, 0.0, 0.0], [0.5; 6]] {
        let out = ActOutput {
            actions: &mut actions,
            log_probs: &mut lp,
            values: &mut v,
        };
        actor.act(&obs, &mut slots, out).unwrap();
    }
    let summaries = &actor.acting[0].summaries;
    assert_ne!(summaries[..5], summaries[5..]);
    assert!(slots.iter().all(|s| !s.is_fresh()));
}

#[test]
fn plans_state_what_construction_and_acting_allocate() {
    for history in [History::Lstm { hidden: 32 }, History::Stack { k: 4 }] {
        let (mut learner, stats) = rl_testkit::measure(|| recurrent_dqn(history, 8, 4, 16));
        let retained = (stats.allocated_bytes - stats.freed_bytes) as f64;
        let planned = learner.memory_plan().total(rl_core::Location::Ram) as f64;
        // Beyond the plan: bookkeeping of a few KiB (the blueprints' line names and
        // schemas, the inner learner's and this one's).
        assert!(
            (planned - retained).abs() <= 0.03 * retained + 6144.0,
            "{history}: planned {planned} vs allocated {retained}"
        );
        let rows = 64;
        let obs = vec![0.1; rows * OBS];
        let mut slots = vec![HistorySlot::default(); rows];
        let (mut actions, mut lp, mut v) = (vec![0u32; rows], vec![0.0; rows], vec![0.0; rows]);
        let ((), stats) = rl_testkit::measure(|| {
            let out = ActOutput {
                actions: &mut actions,
                log_probs: &mut lp,
                values: &mut v,
            };
            learner.act(&obs, &mut slots, out).unwrap();
        });
        let retained = (stats.allocated_bytes - stats.freed_bytes) as f64;
        let planned = learner.acting_plan(rows).total(rl_core::Location::Ram) as f64;
        // Beyond the plan: the matrix library's per-thread packing buffer, grown on the
        // first product of a new size (tens of KiB, not per row).
        assert!(
            planned <= retained && retained <= planned + 32768.0,
            "{history}: acting planned {planned} vs allocated {retained}"
        );
    }
}

#[test]
fn recurrent_continuous_sac_updates_and_checkpoints_its_summarizer() {
    let config = RecurrentConfig {
        seq_len: 2,
        burn_in: 1,
        ..RecurrentConfig::new(History::Lstm { hidden: 4 })
    };
    let sac = SacConfig {
        hidden: vec![8],
        batch_size: 4,
        ..SacConfig::sb3()
    };
    let act = Space::Box(BoxSpace::uniform(-2.0, 2.0, &[1], DType::F32).unwrap());
    let mut learner = Recurrent::new(&obs_space(), config, 0, |s| {
        crate::sac::Sac::new(s, &act, sac, 0)
    })
    .unwrap();
    let schema = learner.replay_schema().unwrap();
    let mut replay = ReplayBuffer::new(
        RamStorage::new(schema.clone(), 8, None).unwrap(),
        Uniform::new(0),
    );
    for r in 0..6 {
        let x = r as f32 / 6.0;
        replay
            .push(&[
                ColumnSlice::F32(&[x, -x, 0.5]),
                ColumnSlice::F32(&[x - 0.5]),
                ColumnSlice::F32(&[x]),
                ColumnSlice::Bool(&[Flag::new(r == 5)]),
                ColumnSlice::Bool(&[Flag::new(false)]),
                ColumnSlice::F32(&[x, x, x]),
            ])
            .unwrap();
    }
    let mut batch = Batch::new(&schema, 6).unwrap();
    replay.gather(&[0, 1, 2, 3, 4, 5], &mut batch).unwrap();
    let before = learner.summary.cell().unwrap().params().to_vec();
    learner.update(&batch).unwrap();
    assert_ne!(learner.summary.cell().unwrap().params(), &before[..]);
    assert_eq!(learner.checkpoint().kind, "recurrent_sac");
}

#[test]
fn bootstrap_masks_follow_the_windows_rows_by_storage_position() {
    // Recurrent bootstrapped DQN, two heads, half masks: windows whose rows' masks all
    // leave head 1 out must leave head 1's output rows where they were after the first
    // update (Adam's first step is zero where the gradient is), and head 0's moved: the
    // masks are the rows' own (by storage position), not drawn afresh per update.
    use crate::dqn::EnsembleConfig;
    let ensemble = EnsembleConfig {
        heads: 2,
        mask_probability: 0.5,
        prior_scale: 0.0,
    };
    let (seq_len, windows) = (2, 2);
    let config = RecurrentConfig {
        seq_len,
        burn_in: 0,
        ..RecurrentConfig::new(History::Lstm { hidden: 5 })
    };
    let dqn = DqnConfig {
        hidden: vec![8],
        batch_size: windows * seq_len,
        ensemble: Some(ensemble),
        ..DqnConfig::default()
    };
    let mut learner = Recurrent::new(&obs_space(), config, 0, |summaries| {
        Dqn::new(summaries, &Space::discrete(ACTIONS).unwrap(), dqn, 0)
    })
    .unwrap();
    let trajectory = Trajectory::new(3);
    let all: Vec<usize> = (0..trajectory.rows()).collect();
    let mut masks = vec![0i64; all.len()];
    crate::dqn::draw_masks(ensemble, 0, 0, Some(&all), &mut masks).unwrap();
    let starts: Vec<usize> = (0..trajectory.rows() - seq_len)
        .filter(|&s| masks[s..s + seq_len].iter().all(|m| m & 0b10 == 0))
        .take(windows)
        .collect();
    assert_eq!(starts.len(), windows, "masks {masks:?}: pick another seed");
    assert!(
        starts
            .iter()
            .any(|&s| masks[s..s + seq_len].iter().any(|m| m & 0b01 == 1)),
        "masks {masks:?}: head 0 should train on some row"
    );
    let schema = learner.replay_schema().unwrap();
    let batch = trajectory.batch(&schema, &starts, seq_len);
    let head_rows = |learner: &Recurrent<Dqn>| -> [Vec<f32>; 2] {
        let rl_nn::Network::Mlp(q) = learner.inner().q_network() else {
            unreachable!("an mlp")
        };
        let last = q.layers()[q.layers().len() - 1];
        let (weight, n) = (last.weight(), ACTIONS as usize);
        let per_head = weight.len() / 2;
        let params = q.params();
        [0, 1].map(|h| {
            let w = &params[weight.start + h * per_head..weight.start + (h + 1) * per_head];
            let b = &params[last.bias().start + h * n..last.bias().start + (h + 1) * n];
            [w, b].concat()
        })
    };
    let before = head_rows(&learner);
    learner.update(&batch).unwrap();
    let after = head_rows(&learner);
    assert_eq!(
        before[1], after[1],
        "head 1 trained on rows whose masks leave it out"
    );
    assert_ne!(before[0], after[0]);
}

#[test]
fn recurrent_discrete_sac_with_critic_heads_plans_what_it_holds_and_allocates_nothing() {
    let config = RecurrentConfig {
        seq_len: 3,
        burn_in: 2,
        ..RecurrentConfig::new(History::Lstm { hidden: 6 })
    };
    let sac = SacConfig {
        hidden: vec![8],
        batch_size: 6,
        ensemble: Some(crate::dqn::EnsembleConfig {
            heads: 4,
            mask_probability: 0.5,
            prior_scale: 0.0,
        }),
        ..SacConfig::sb3()
    };
    let actions = Space::discrete(ACTIONS).unwrap();
    let blueprint = Recurrent::<DiscreteSac>::blueprint(&obs_space(), &config, |s| {
        DiscreteSac::blueprint(s, &actions, crate::sac::ActionScoring::Index, &sac)
    })
    .unwrap();
    let mut learner = Recurrent::new(&obs_space(), config, 0, |s| {
        DiscreteSac::with_index(s, &actions, sac, 0)
    })
    .unwrap();
    assert_eq!(learner.memory_plan(), blueprint.learner);
    let schema = learner.replay_schema().unwrap();
    let batch = Trajectory::new(5).batch(&schema, &[0, 12], 5);
    learner.update(&batch).unwrap();
    let (result, alloc) = rl_testkit::measure(|| learner.update(&batch));
    assert!(result.unwrap().critic_loss.is_finite());
    assert_eq!(alloc.allocations, 0, "{alloc:?}");
}
