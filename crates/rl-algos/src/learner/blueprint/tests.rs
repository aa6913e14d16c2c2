//! Every learner's blueprint from its configuration and spaces against the built
//! learner's: the same plan, acting and actor lines, replay schema and batch size; what
//! construction allocates against the plan; overflowing sizes as configuration errors.

use proptest::prelude::*;
use rl_core::{BoxSpace, DType, FeatureTable, Location, Space};

use super::*;
use crate::dqn::{Dqn, DqnConfig};
use crate::learner::{OffPolicyLearner, OnPolicyLearner};
use crate::policy::{
    ActorCritic, CategoricalPolicy, GaussianPolicy, History, PolicyConfig,
    RecurrentCategoricalPolicy,
};
use crate::ppo::{Ppo, PpoConfig, RecurrentPpo, RecurrentPpoConfig};
use crate::sac::{ActionScoring, DiscreteSac, Sac, SacConfig};
use crate::sequence::{Recurrent, RecurrentConfig};

fn boxed(len: usize) -> Space {
    Space::Box(BoxSpace::uniform(-2.0, 2.0, &[len], DType::F32).unwrap())
}

fn discrete(n: u32) -> Space {
    Space::discrete(n).unwrap()
}

fn table(rows: usize, dim: usize) -> FeatureTable {
    FeatureTable::new(rows, dim, vec![0.5; rows * dim]).unwrap()
}

/// The built off-policy learner answers as its blueprint from configuration does.
fn assert_off_policy(planned: &OffPolicyBlueprint, built: &impl OffPolicyLearner) {
    assert_eq!(planned, built.blueprint());
    assert_eq!(planned.learner, built.memory_plan());
    assert_eq!(planned.replay_schema, built.replay_schema().unwrap());
    assert_eq!(planned.batch_size, built.batch_size());
    assert_eq!(planned.sequence, built.sequence());
    for count in [1, 3] {
        assert_eq!(planned.acting_plan(count), built.acting_plan(count));
        assert_eq!(
            planned.actor_memory_plan(count),
            built.actor_memory_plan(count)
        );
    }
    assert!(planned.learner.total(Location::Ram) > 0);
}

/// The built on-policy learner answers as its blueprint from configuration does.
fn assert_on_policy(planned: &OnPolicyBlueprint, built: &impl OnPolicyLearner) {
    assert_eq!(planned, built.blueprint());
    assert_eq!(planned.learner, built.memory_plan());
    assert_eq!(planned.rollout, built.rollout_plan().unwrap());
    assert_eq!(planned.acting, built.acting_plan());
    assert_eq!(planned.envs, built.envs());
    assert!(planned.learner.total(Location::Ram) > 0);
}

fn hidden() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..24, 1..3)
}

fn history() -> impl Strategy<Value = History> {
    prop_oneof![
        Just(History::None),
        (1usize..4).prop_map(|k| History::Stack { k }),
        (1usize..12).prop_map(|hidden| History::Lstm { hidden }),
    ]
}

/// A PPO configuration whose batch fits the rollout.
fn ppo_config(n_steps: usize, envs: usize, batch: usize, recompute: bool) -> PpoConfig {
    PpoConfig {
        n_steps,
        batch_size: batch.clamp(1, n_steps * envs),
        recompute_old_log_probs: recompute,
        eval_minibatch: 1 + batch % 7,
        ..PpoConfig::new()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn ppo_plans_what_it_builds(
        obs in 1usize..6,
        actions in 2u32..6,
        hidden in hidden(),
        (n_steps, envs, batch) in (1usize..16, 1usize..4, 1usize..64),
        recompute in any::<bool>(),
        gaussian in any::<bool>(),
    ) {
        let policy = PolicyConfig { hidden, ..PolicyConfig::new() };
        let config = ppo_config(n_steps, envs, batch, recompute);
        if gaussian {
            let (o, a) = (boxed(obs), boxed(actions as usize));
            let shape = GaussianPolicy::shape_for(&o, &a, &policy).unwrap();
            let planned = Ppo::<GaussianPolicy>::blueprint(&shape, &config, envs).unwrap();
            let built = GaussianPolicy::new(obs, actions as usize, policy, 0).unwrap();
            prop_assert_eq!(&shape, &built.shape());
            prop_assert_eq!(planned.policy_params, shape.num_params());
            assert_on_policy(&planned, &Ppo::new(built, config, envs, 0).unwrap());
        } else {
            let (o, a) = (boxed(obs), discrete(actions));
            let shape = <CategoricalPolicy>::shape_for(&o, &a, &policy).unwrap();
            let planned = Ppo::<CategoricalPolicy>::blueprint(&shape, &config, envs).unwrap();
            let built = CategoricalPolicy::new(obs, actions as usize, policy, 0).unwrap();
            prop_assert_eq!(&shape, &built.shape());
            assert_on_policy(&planned, &Ppo::new(built, config, envs, 0).unwrap());
        }
    }

    #[test]
    fn recurrent_ppo_plans_what_it_builds(
        obs in 1usize..6,
        actions in 2u32..5,
        hidden in hidden(),
        history in history(),
        (chunk_len, chunks, envs, per_batch) in (1usize..5, 1usize..4, 1usize..4, 1usize..4),
    ) {
        let policy = PolicyConfig { hidden, ..PolicyConfig::new() };
        let n_steps = chunk_len * chunks;
        let batch = chunk_len * per_batch.min(chunks * envs);
        let config = RecurrentPpoConfig::new(ppo_config(n_steps, envs, batch, false), chunk_len);
        let shape = RecurrentCategoricalPolicy::shape_for(
            &boxed(obs),
            &discrete(actions),
            history,
            &policy,
        )
        .unwrap();
        let planned = RecurrentPpo::blueprint(&shape, &config, envs).unwrap();
        let built =
            RecurrentCategoricalPolicy::new(obs, actions as usize, history, policy, 0).unwrap();
        prop_assert_eq!(&shape, &built.shape());
        prop_assert_eq!(planned.policy_params, shape.num_params());
        assert_on_policy(&planned, &RecurrentPpo::new(built, config, envs, 0).unwrap());
    }

    #[test]
    fn sac_plans_what_it_builds(
        obs in 1usize..6,
        act in 1usize..4,
        hidden in hidden(),
        batch in 1usize..80,
    ) {
        let config = SacConfig { hidden, batch_size: batch, ..SacConfig::sb3() };
        let (o, a) = (boxed(obs), boxed(act));
        let planned = Sac::blueprint(&o, &a, &config).unwrap();
        assert_off_policy(&planned, &Sac::new(&o, &a, config, 0).unwrap());
    }

    #[test]
    fn discrete_sac_plans_what_it_builds(
        obs in 1usize..6,
        actions in 2u32..40,
        dim in 1usize..5,
        hidden in hidden(),
        (batch, chunk) in (1usize..80, 1usize..50),
        scoring in 0u8..3,
    ) {
        let config = SacConfig { hidden, batch_size: batch, chunk, ..SacConfig::sb3() };
        let (o, a) = (boxed(obs), discrete(actions));
        let features = table(actions as usize, dim);
        let (rows, dim) = (actions as usize, dim);
        let (scoring, built) = match scoring {
            0 => (ActionScoring::Index, DiscreteSac::with_index(&o, &a, config.clone(), 0)),
            1 => (
                ActionScoring::Table { rows, dim },
                DiscreteSac::with_table(&o, &a, features, config.clone(), 0),
            ),
            _ => (
                ActionScoring::LearnedTable { rows, dim },
                DiscreteSac::with_learnable_table(&o, &a, features, config.clone(), 0),
            ),
        };
        let planned = DiscreteSac::blueprint(&o, &a, scoring, &config).unwrap();
        assert_off_policy(&planned, &built.unwrap());
    }

    #[test]
    fn dqn_plans_what_it_builds(
        obs in 1usize..6,
        actions in 2u32..9,
        hidden in hidden(),
        batch in 1usize..80,
    ) {
        let config = DqnConfig { hidden, batch_size: batch, ..DqnConfig::default() };
        let (o, a) = (boxed(obs), discrete(actions));
        let planned = Dqn::blueprint(&o, &a, &config).unwrap();
        assert_off_policy(&planned, &Dqn::new(&o, &a, config, 0).unwrap());
    }

    #[test]
    fn recurrent_learners_plan_what_they_build(
        obs in 1usize..5,
        history in history(),
        (seq_len, windows, burn_in) in (1usize..4, 1usize..4, 0usize..3),
        inner in 0u8..3,
    ) {
        let config = RecurrentConfig { seq_len, burn_in, ..RecurrentConfig::new(history) };
        let o = boxed(obs);
        let batch = seq_len * windows;
        match inner {
            0 => {
                let dqn = DqnConfig { hidden: vec![8], batch_size: batch, ..DqnConfig::default() };
                let a = discrete(3);
                let planned = Recurrent::<Dqn>::blueprint(&o, &config, |s| {
                    Dqn::blueprint(s, &a, &dqn)
                })
                .unwrap();
                let built = Recurrent::new(&o, config, 0, |s| Dqn::new(s, &a, dqn, 0)).unwrap();
                assert_off_policy(&planned, &built);
            }
            1 => {
                let sac = SacConfig { hidden: vec![8], batch_size: batch, chunk: 2, ..SacConfig::sb3() };
                let a = discrete(5);
                let planned = Recurrent::<DiscreteSac>::blueprint(&o, &config, |s| {
                    DiscreteSac::blueprint(s, &a, ActionScoring::Index, &sac)
                })
                .unwrap();
                let built =
                    Recurrent::new(&o, config, 0, |s| DiscreteSac::with_index(s, &a, sac, 0))
                        .unwrap();
                assert_off_policy(&planned, &built);
            }
            _ => {
                let sac = SacConfig { hidden: vec![8], batch_size: batch, ..SacConfig::sb3() };
                let a = boxed(2);
                let planned =
                    Recurrent::<Sac>::blueprint(&o, &config, |s| Sac::blueprint(s, &a, &sac))
                        .unwrap();
                let built = Recurrent::new(&o, config, 0, |s| Sac::new(s, &a, sac, 0)).unwrap();
                assert_off_policy(&planned, &built);
            }
        }
    }
}

/// Within 2% of what construction retained (beyond `before`, bytes that existed before),
/// for sizes where the plan's lines dwarf the allocator's bookkeeping (names, schemas,
/// small vectors).
fn assert_close_beyond(planned: &MemoryPlan, before: u64, retained: i64) {
    let planned_bytes = (planned.total(Location::Ram) - before) as f64;
    let retained = retained as f64;
    assert!(
        (planned_bytes - retained).abs() <= 0.02 * retained,
        "planned {planned_bytes} vs allocated {retained}:\n{planned}"
    );
}

fn assert_close(planned: &MemoryPlan, retained: i64) {
    assert_close_beyond(planned, 0, retained);
}

#[test]
fn ppo_construction_allocates_what_the_blueprint_plans() {
    let policy = PolicyConfig {
        hidden: vec![128, 128],
        ..PolicyConfig::new()
    };
    let config = PpoConfig {
        n_steps: 256,
        batch_size: 256,
        recompute_old_log_probs: true,
        eval_minibatch: 64,
        ..PpoConfig::new()
    };
    let shape = <CategoricalPolicy>::shape_for(&boxed(8), &discrete(4), &policy).unwrap();
    let planned = Ppo::<CategoricalPolicy>::blueprint(&shape, &config, 4).unwrap();
    let (_ppo, stats) = rl_testkit::measure(|| {
        let built = CategoricalPolicy::new(8, 4, policy, 0).unwrap();
        Ppo::new(built, config, 4, 0).unwrap()
    });
    assert_close(&planned.learner, stats.live_bytes_delta());
}

#[test]
fn recurrent_ppo_construction_allocates_what_the_blueprint_plans() {
    let policy = PolicyConfig {
        hidden: vec![64],
        ..PolicyConfig::new()
    };
    let history = History::Lstm { hidden: 64 };
    let config = RecurrentPpoConfig::new(
        PpoConfig {
            n_steps: 128,
            batch_size: 256,
            ..PpoConfig::new()
        },
        16,
    );
    let shape =
        RecurrentCategoricalPolicy::shape_for(&boxed(4), &discrete(2), history, &policy).unwrap();
    let planned = RecurrentPpo::blueprint(&shape, &config, 4).unwrap();
    let (_learner, stats) = rl_testkit::measure(|| {
        let built = RecurrentCategoricalPolicy::new(4, 2, history, policy, 0).unwrap();
        RecurrentPpo::new(built, config, 4, 0).unwrap()
    });
    assert_close(&planned.learner, stats.live_bytes_delta());
}

#[test]
fn discrete_sac_construction_allocates_what_the_blueprint_plans() {
    let config = SacConfig {
        hidden: vec![64, 64],
        batch_size: 128,
        chunk: 256,
        ..SacConfig::sb3()
    };
    let (o, a) = (boxed(6), discrete(2000));
    let features = table(2000, 8);
    let scoring = ActionScoring::LearnedTable { rows: 2000, dim: 8 };
    let planned = DiscreteSac::blueprint(&o, &a, scoring, &config).unwrap();
    // The table's values exist before (the environment's), and become the learner's.
    let table_bytes = planned
        .learner
        .lines()
        .iter()
        .find(|l| l.component == "sac/scorer/table (shared)")
        .map(|l| l.bytes)
        .unwrap();
    assert_eq!(table_bytes, 2000 * 8 * 4);
    let (_sac, stats) = rl_testkit::measure(|| {
        DiscreteSac::with_learnable_table(&o, &a, features, config, 0).unwrap()
    });
    assert_close_beyond(&planned.learner, table_bytes, stats.live_bytes_delta());
}

#[test]
fn sizes_that_overflow_are_config_errors_not_panics() {
    let huge = vec![1usize << 40, 1 << 40];
    let policy = PolicyConfig {
        hidden: huge.clone(),
        ..PolicyConfig::new()
    };
    let refused = |e: crate::Error, key: &str| {
        let message = e.to_string();
        assert!(matches!(e, crate::Error::Config { .. }), "{message}");
        assert!(message.contains(key), "{message}");
        assert!(message.contains("lower"), "{message}");
    };
    let cat = <CategoricalPolicy>::shape_for(&boxed(4), &discrete(2), &policy).unwrap_err();
    refused(cat, "policy.hidden");
    let built = CategoricalPolicy::new(4, 2, policy.clone(), 0).unwrap_err();
    refused(built, "policy.hidden");
    let lstm = RecurrentCategoricalPolicy::shape_for(
        &boxed(4),
        &discrete(2),
        History::Lstm { hidden: 1 << 40 },
        &PolicyConfig::new(),
    )
    .unwrap_err();
    assert!(matches!(lstm, crate::Error::Config { .. }), "{lstm}");
    let dqn = DqnConfig {
        hidden: huge.clone(),
        ..DqnConfig::default()
    };
    refused(
        Dqn::blueprint(&boxed(4), &discrete(2), &dqn).unwrap_err(),
        "dqn.hidden",
    );
    refused(
        Dqn::new(&boxed(4), &discrete(2), dqn, 0).unwrap_err(),
        "dqn.hidden",
    );
    let sac = SacConfig {
        hidden: huge,
        ..SacConfig::sb3()
    };
    refused(
        Sac::blueprint(&boxed(4), &boxed(1), &sac).unwrap_err(),
        "sac.hidden",
    );
    let batch = SacConfig {
        batch_size: usize::MAX / 2,
        ..SacConfig::sb3()
    };
    refused(
        DiscreteSac::blueprint(&boxed(4), &discrete(9), ActionScoring::Index, &batch).unwrap_err(),
        "batch_size",
    );
    // A rollout too large to plan is refused before anything is allocated.
    let ppo = PpoConfig {
        n_steps: 1 << 40,
        ..PpoConfig::new()
    };
    let shape =
        <CategoricalPolicy>::shape_for(&boxed(4), &discrete(2), &PolicyConfig::new()).unwrap();
    assert!(Ppo::<CategoricalPolicy>::blueprint(&shape, &ppo, 8).is_err());
}

#[test]
fn scaled_lines_grow_with_the_count_and_shared_ones_do_not() {
    let blueprint = OffPolicyBlueprint {
        acting: vec![Scaled::per("state (", " envs)", 10)],
        actor: vec![
            Scaled::per("actor x", " (weights)", 7),
            Scaled::shared("table (shared)", 100),
        ],
        ..OffPolicyBlueprint::new(
            MemoryPlan::new(),
            rl_core::TransitionSchema::new(DType::F32, &[1], DType::U32, &[])
                .build()
                .unwrap(),
            1,
        )
    };
    let acting = blueprint.acting_plan(4);
    assert_eq!(acting.lines()[0].component, "state (4 envs)");
    assert_eq!(acting.total(Location::Ram), 40);
    let actors = blueprint.actor_memory_plan(3);
    assert_eq!(actors.lines()[0].component, "actor x3 (weights)");
    assert_eq!(actors.lines()[1].component, "table (shared)");
    assert_eq!(actors.total(Location::Ram), 21 + 100);
    // Saturating, never wrapping: such a plan is refused by any budget.
    let saturated = blueprint.actor_memory_plan(usize::MAX);
    assert_eq!(saturated.lines()[0].bytes, u64::MAX);
}

#[test]
fn sizes_are_checked_products_and_sums() {
    let sizes = Sizes::of("ppo.n_steps");
    assert_eq!(sizes.f32s(&[3, 5]).unwrap(), 60);
    assert_eq!(sizes.sum(&[1, 2, 3]).unwrap(), 6);
    let overflow = sizes.count(&[usize::MAX, 2]).unwrap_err().to_string();
    assert!(overflow.contains("ppo.n_steps"), "{overflow}");
    assert!(sizes.sum(&[u64::MAX, 1]).is_err());
    assert!(sizes.checked::<u8>(None).is_err());
}
