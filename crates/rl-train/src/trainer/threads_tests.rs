//! `run.threads`: the learner's products split across a pool change nothing a run
//! learns. The same run with one thread and with two ends with the same learner, bit for
//! bit, and the two-thread run did split its products.

use rl_algos::dqn::{Dqn, DqnConfig};
use rl_algos::sac::{DiscreteSac, Sac, SacConfig};
use rl_envs::{CartPole, LargeDiscrete, Pendulum};

use super::*;
use crate::config::Config;

/// The shipped `configs/sac_pendulum_sb3.toml` (256-256 networks, batch 256: every
/// critic and actor product is large enough to split) for 2,000 env steps, learning from
/// step 1,000 on.
fn sac_sb3(threads: usize) -> OffPolicyTrainer<Pendulum, Sac> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/sac_pendulum_sb3.toml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let overrides = [
        "run.total_steps=2000".to_owned(),
        "off_policy.buffer_capacity=2000".to_owned(),
        "off_policy.learning_starts=1000".to_owned(),
        format!("run.threads={threads}"),
    ];
    let config = Config::from_toml(&text, &overrides).unwrap();
    let sac = Sac::for_env(&Pendulum::new(0), config.sac.clone().unwrap(), 0).unwrap();
    let off = config.off_policy.clone().unwrap();
    // The run layer names the checkpoint folder; this run saves nothing.
    let run = RunConfig {
        checkpoint: None,
        ..config.run
    };
    OffPolicyTrainer::new(Pendulum::new, sac, off, run).unwrap()
}

#[test]
fn sac_sb3_learns_the_same_bytes_on_one_and_two_threads_after_2000_steps() {
    let mut one = sac_sb3(1);
    assert!(one.pool().is_none(), "one thread starts no pool");
    let mut two = sac_sb3(2);
    assert_eq!(two.pool().map(|p| p.threads()), Some(2));
    let ones = one.train(&mut ()).unwrap();
    let twos = two.train(&mut ()).unwrap();
    assert_eq!(ones.total_env_steps, 2000);
    assert_eq!(twos.total_env_steps, 2000);
    assert_eq!(one.learner().updates(), 1000);
    let splits = two.pool().unwrap().splits();
    // Each of the 1,000 updates runs the actor's two forward passes side by side, its
    // twin critics side by side five times (target, loss, Adam, actor-loss forward and
    // backward) and their polyak steps, and splits the actor's backward products and
    // its Adam step.
    assert!(splits >= 9_000, "only {splits} calls used both threads");
    let bytes = |t: &OffPolicyTrainer<Pendulum, Sac>| t.learner().checkpoint().to_bytes().unwrap();
    assert!(
        bytes(&one) == bytes(&two),
        "two threads learned other weights"
    );
    assert_eq!(ones.mean_return, twos.mean_return);
}

fn dqn(threads: usize) -> OffPolicyTrainer<CartPole, Dqn> {
    // 256-256 networks at batch 64: the hidden products split.
    let config = DqnConfig::default();
    let learner = Dqn::for_env(&CartPole::new(0), config, 5).unwrap();
    let off = OffPolicyConfig {
        buffer_capacity: 1_000,
        learning_starts: 200,
        ..OffPolicyConfig::new()
    };
    let run = RunConfig {
        threads,
        seed: 5,
        ..RunConfig::new(600)
    };
    OffPolicyTrainer::new(CartPole::new, learner, off, run).unwrap()
}

#[test]
fn dqn_learns_the_same_bytes_on_one_and_three_threads() {
    let mut one = dqn(1);
    let mut three = dqn(3);
    one.train(&mut ()).unwrap();
    three.train(&mut ()).unwrap();
    assert!(one.learner().updates() > 100);
    assert!(three.pool().unwrap().splits() > 100);
    let bytes = |t: &OffPolicyTrainer<CartPole, Dqn>| t.learner().checkpoint().to_bytes().unwrap();
    assert!(
        bytes(&one) == bytes(&three),
        "three threads learned other weights"
    );
}

#[test]
fn zero_threads_is_refused_before_anything_is_built() {
    let run = RunConfig {
        threads: 0,
        ..RunConfig::new(10)
    };
    let err = run.validate().unwrap_err().to_string();
    assert!(
        err.contains("run.threads") && err.contains("use 1 to"),
        "{err}"
    );
}

fn discrete_sac(threads: usize) -> OffPolicyTrainer<LargeDiscrete, DiscreteSac> {
    let env = LargeDiscrete::with_actions(5_000, 0).unwrap();
    let config = SacConfig {
        hidden: vec![32, 32],
        batch_size: 32,
        chunk: 512,
        ..SacConfig::sb3()
    };
    let sac =
        DiscreteSac::for_env_with_table(&env, env.action_features().clone(), config, 2).unwrap();
    let off = OffPolicyConfig {
        buffer_capacity: 1_000,
        learning_starts: 100,
        ..OffPolicyConfig::new()
    };
    let run = RunConfig {
        threads,
        seed: 2,
        ..RunConfig::new(300)
    };
    OffPolicyTrainer::new(
        move |seed| LargeDiscrete::with_actions(5_000, seed).unwrap(),
        sac,
        off,
        run,
    )
    .unwrap()
}

/// Discrete SAC over 5,000 actions: the scorer's soft passes split their rows over
/// the pool, and the learner is the same.
#[test]
fn discrete_sac_learns_the_same_bytes_on_one_and_two_threads() {
    let mut one = discrete_sac(1);
    let mut two = discrete_sac(2);
    one.train(&mut ()).unwrap();
    two.train(&mut ()).unwrap();
    assert_eq!(one.learner().updates(), 200);
    // Per update: the critics' Adam steps side by side, the actor's soft pass split and
    // the targets' polyak steps side by side (every LargeDiscrete transition terminates,
    // so the target needs no soft value; the 32-32 actor is too small to split its Adam
    // step).
    let splits = two.pool().unwrap().splits();
    assert_eq!(splits, 600, "calls on both threads");
    let bytes = |t: &OffPolicyTrainer<LargeDiscrete, DiscreteSac>| {
        t.learner().checkpoint().to_bytes().unwrap()
    };
    assert!(
        bytes(&one) == bytes(&two),
        "two threads learned other weights"
    );
}

/// PPO on CartPole with 256-256 networks (each network's Adam step is large enough to
/// split) on 1 and 2 threads: the collector acts on the pool, the learner's products and
/// Adam steps split, and the two runs end with the same learner, bit for bit.
fn ppo(
    threads: usize,
) -> OnPolicyTrainer<CartPole, rl_algos::ppo::Ppo<rl_algos::policy::CategoricalPolicy>> {
    use rl_algos::policy::{CategoricalPolicy, PolicyConfig};
    use rl_algos::ppo::{Ppo, PpoConfig};
    let policy_config = PolicyConfig {
        hidden: vec![256, 256],
        ..PolicyConfig::new()
    };
    let policy = CategoricalPolicy::for_env(&CartPole::new(0), policy_config, 4).unwrap();
    let config = PpoConfig {
        n_steps: 64,
        batch_size: 128,
        epochs: 2,
        ..PpoConfig::new()
    };
    let learner = Ppo::new(policy, config, 4, 4).unwrap();
    let run = RunConfig {
        threads,
        seed: 4,
        n_envs: 4,
        ..RunConfig::new(768)
    };
    OnPolicyTrainer::new(CartPole::new, learner, run).unwrap()
}

#[test]
fn ppo_learns_the_same_bytes_on_one_and_two_threads() {
    let mut one = ppo(1);
    let mut two = ppo(2);
    let ones = one.train(&mut ()).unwrap();
    let twos = two.train(&mut ()).unwrap();
    assert_eq!(ones.total_env_steps, 768);
    assert_eq!(one.ppo().updates(), 3);
    // Each of the 3 updates' 4 minibatches (2 epochs of 256 rows in 128-row minibatches)
    // splits the networks' Adam steps at least.
    let splits = two.pool().unwrap().splits();
    assert!(splits >= 3 * 4, "only {splits} calls used both threads");
    let bytes = |t: &OnPolicyTrainer<
        CartPole,
        rl_algos::ppo::Ppo<rl_algos::policy::CategoricalPolicy>,
    >| { t.ppo().checkpoint().to_bytes().unwrap() };
    assert!(
        bytes(&one) == bytes(&two),
        "two threads learned other weights"
    );
    assert_eq!(ones.mean_return, twos.mean_return);
}
