//! Tests of a loaded agent: its actions against the learner restored independently (as
//! `rl eval` acts with it, one observation at a time) on 1,000 observations per
//! algorithm, its episodes against `rl eval`'s returns, no allocation after the first
//! call, and typed errors.

use std::path::Path;

use rl_algos::dqn::Dqn;
use rl_algos::learner::{Learner, OnPolicyLearner};
use rl_algos::policy::{
    CategoricalPolicy, GaussianPolicy, HistorySlot, Mode, RecurrentCategoricalPolicy,
};
use rl_algos::ppo::{Ppo, RecurrentPpo, RecurrentPpoConfig};
use rl_algos::predict::Predict;
use rl_algos::sac::{DiscreteSac, Sac};
use rl_collect::{ActOutput, Policy};
use rl_core::Env;
use rl_envs::{CartPole, MaskedCartPole, Pendulum};
use rl_nn::Checkpoint;

use super::*;
use crate::config::Config;
use crate::run::{self, CHECKPOINT_DIR, TrainOptions};

/// Trains `algo` on `env` for `steps` env steps (with `overrides`) into a new folder
/// under `tmp`; returns the run directory and its config.
fn trained(
    tmp: &Path,
    algo: &str,
    env: &str,
    steps: u64,
    overrides: &[&str],
) -> (std::path::PathBuf, Config) {
    let text = format!("algo = \"{algo}\"\nenv = \"{env}\"\n[run]\ntotal_steps = {steps}\n");
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let config = Config::from_toml(&text, &overrides).unwrap();
    let dir = tmp.join(algo).join(env);
    run::train(&Registry::builtin(), &config, &dir, &TrainOptions::quiet()).unwrap();
    (dir, config)
}

/// The learner's checkpoint restored into `learner`, the way the run layer does it
/// (a separate path: the file, its kind, `Learner::restore`).
fn restore<L: Learner>(learner: &mut L, dir: &Path) {
    let path = dir.join(CHECKPOINT_DIR).join("learner.safetensors");
    let checkpoint = Checkpoint::<L::Saved>::load(path, learner.kind()).unwrap();
    learner.restore(&checkpoint).unwrap();
}

/// The PPO learner of `config` around `policy`, restored from the run in `dir`.
fn restored_ppo<P>(policy: P, config: &Config, dir: &Path) -> Ppo<P>
where
    P: rl_algos::policy::ActorCritic + Predict + Clone,
{
    let (ppo, run) = (config.ppo.unwrap(), &config.run);
    let mut learner = Ppo::new(policy, ppo, run.n_envs, run.seed).unwrap();
    restore(&mut learner, dir);
    learner
}

/// 1,000 observations of `env` stepped with `action(t)`, reset at episode ends.
fn observations<E: Env<Obs = f32>>(mut env: E, action: impl Fn(usize) -> Vec<E::Act>) -> Vec<f32> {
    let n = env.observation_space().flat_len();
    let mut obs = vec![0.0; n];
    env.reset(Some(3), &mut obs).unwrap();
    let mut all = Vec::with_capacity(1000 * n);
    for t in 0..1000 {
        all.extend_from_slice(&obs);
        if env.step(&action(t), &mut obs).unwrap().ends_episode() {
            env.reset(Some(t as u64), &mut obs).unwrap();
        }
    }
    all
}

/// The reference's deterministic action for each row, one row at a time (as `rl eval`
/// acts), against the agent's for all 1,000 rows in one call.
fn compare<P: Predict<Obs = f32>>(agent: &mut Agent, reference: &mut P, obs: &[f32]) -> usize
where
    P::Act: AgentAction + Into<f64>,
{
    let (rows, act_len) = (1000, agent.action_len());
    let mut batch = vec![P::Act::default(); rows * act_len];
    agent.act(obs, &mut batch).unwrap();
    let obs_len = agent.obs_len();
    let mut one = vec![P::Act::default(); act_len];
    let mut distinct = std::collections::BTreeSet::new();
    for row in 0..rows {
        let x = &obs[row * obs_len..(row + 1) * obs_len];
        reference.predict(x, 1, &mut one).unwrap();
        let got = &batch[row * act_len..(row + 1) * act_len];
        for (g, e) in got.iter().zip(&one) {
            let (g, e): (f64, f64) = ((*g).into(), (*e).into());
            assert!(
                (g - e).abs() <= 1e-5 * e.abs().max(1.0),
                "row {row}: agent {g}, eval {e}"
            );
            distinct.insert(g.to_bits());
        }
    }
    distinct.len()
}

/// How a test acts: one row, with or without a state.
type Act<A> = fn(&mut Agent, &[f32], &mut RecurrentState, &mut [A]);

fn feed_forward<A: AgentAction>(
    agent: &mut Agent,
    obs: &[f32],
    _: &mut RecurrentState,
    action: &mut [A],
) {
    agent.act(obs, action).unwrap();
}

fn with_state(agent: &mut Agent, obs: &[f32], state: &mut RecurrentState, action: &mut [u32]) {
    agent.act_recurrent(obs, state, action).unwrap();
}

/// `rl eval`'s report of the run in `dir` against `episodes` episodes played by `agent`
/// on `env` (the run's `make(seed)`) reset with `seed + i`, as `rl eval` plays them.
fn matches_eval<E: Env<Obs = f32>>(agent: &mut Agent, dir: &Path, mut env: E, act: Act<E::Act>) {
    let (seed, episodes) = (40, 3);
    let evaluated = run::eval(
        &Registry::builtin(),
        dir,
        Which::Latest,
        episodes,
        Some(seed),
    )
    .unwrap();
    let mut obs = vec![0.0; agent.obs_len()];
    let mut action = vec![E::Act::default(); agent.action_len()];
    let mut returns = Vec::new();
    for episode in 0..episodes as u64 {
        env.reset(Some(seed + episode), &mut obs).unwrap();
        let mut state = agent.initial_state(1);
        let mut total = 0.0;
        loop {
            act(agent, &obs, &mut state, &mut action);
            let step = env.step(&action, &mut obs).unwrap();
            total += f64::from(step.reward);
            if step.ends_episode() {
                break;
            }
        }
        returns.push(total);
    }
    let mean = returns.iter().sum::<f64>() / episodes as f64;
    let min = returns.iter().copied().fold(f64::INFINITY, f64::min);
    let max = returns.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let report = evaluated.report;
    assert_eq!(
        (mean, min, max),
        (report.mean_return, report.min_return, report.max_return)
    );
}

#[test]
fn ppo_agents_act_as_their_restored_policies() {
    let tmp = tempfile::tempdir().unwrap();
    // Discrete actions.
    let (dir, config) = trained(
        tmp.path(),
        "ppo",
        "cartpole",
        2048,
        &["ppo.n_steps=64", "run.n_envs=2"],
    );
    let mut agent = Agent::load(&dir, Which::Latest).unwrap();
    assert_eq!(
        (agent.algo(), agent.obs_len(), agent.action_len()),
        (Algo::Ppo, 4, 1)
    );
    assert!(!agent.is_recurrent() && agent.env_steps() == 2048);
    let policy = CategoricalPolicy::for_env(
        &CartPole::new(0),
        config.policy.clone().unwrap(),
        config.run.seed,
    )
    .unwrap();
    let mut ppo = restored_ppo(policy, &config, &dir);
    let obs = observations(CartPole::new(1), |t| vec![(t % 3 == 0) as u32]);
    let distinct = compare(&mut agent, ppo.policy_mut(), &obs);
    assert_eq!(distinct, 2, "both actions are taken on 1,000 observations");
    matches_eval(
        &mut agent,
        &dir,
        CartPole::new(config.run.seed),
        feed_forward,
    );

    // A box of actions.
    let (dir, config) = trained(
        tmp.path(),
        "ppo",
        "pendulum",
        128,
        &["ppo.n_steps=64", "ppo.batch_size=32"],
    );
    let mut agent = Agent::load(&dir, Which::Latest).unwrap();
    let policy = GaussianPolicy::for_env(
        &Pendulum::new(0),
        config.policy.clone().unwrap(),
        config.run.seed,
    )
    .unwrap();
    let mut ppo = restored_ppo(policy, &config, &dir);
    let obs = observations(Pendulum::new(1), |t| vec![((t as f32) * 0.1).sin() * 2.0]);
    assert!(compare(&mut agent, ppo.policy_mut(), &obs) > 100);
    matches_eval(
        &mut agent,
        &dir,
        Pendulum::new(config.run.seed),
        feed_forward,
    );
}

#[test]
fn off_policy_agents_act_as_their_restored_learners() {
    let tmp = tempfile::tempdir().unwrap();
    let small = [
        "sac.hidden=[16, 16]",
        "sac.batch_size=16",
        "off_policy.buffer_capacity=1000",
    ];
    let (dir, config) = trained(tmp.path(), "sac", "pendulum", 260, &small);
    let mut agent = Agent::load(&dir, Which::Latest).unwrap();
    let mut sac = Sac::for_env(
        &Pendulum::new(0),
        config.sac.clone().unwrap(),
        config.run.seed,
    )
    .unwrap();
    restore(&mut sac, &dir);
    let obs = observations(Pendulum::new(1), |t| vec![((t as f32) * 0.1).sin() * 2.0]);
    assert!(compare(&mut agent, &mut sac, &obs) > 100);
    matches_eval(
        &mut agent,
        &dir,
        Pendulum::new(config.run.seed),
        feed_forward,
    );

    let (dir, config) = trained(tmp.path(), "discrete_sac", "cartpole", 160, &small);
    let mut agent = Agent::load(&dir, Which::Latest).unwrap();
    let mut sac = DiscreteSac::for_env(
        &CartPole::new(0),
        config.sac.clone().unwrap(),
        config.run.seed,
    )
    .unwrap();
    restore(&mut sac, &dir);
    let obs = observations(CartPole::new(1), |t| vec![(t % 3 == 0) as u32]);
    compare(&mut agent, &mut sac, &obs);
    matches_eval(
        &mut agent,
        &dir,
        CartPole::new(config.run.seed),
        feed_forward,
    );

    let (dir, config) = trained(
        tmp.path(),
        "dqn",
        "cartpole",
        200,
        &[
            "dqn.hidden=[16, 16]",
            "off_policy.buffer_capacity=1000",
            "off_policy.learning_starts=50",
        ],
    );
    let mut agent = Agent::load(&dir, Which::Latest).unwrap();
    let mut dqn = Dqn::for_env(
        &CartPole::new(0),
        config.dqn.clone().unwrap(),
        config.run.seed,
    )
    .unwrap();
    restore(&mut dqn, &dir);
    compare(&mut agent, &mut dqn, &obs);
    matches_eval(
        &mut agent,
        &dir,
        CartPole::new(config.run.seed),
        feed_forward,
    );
}

#[test]
fn a_recurrent_agent_acts_as_its_policy_keeping_its_own_state() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, config) = trained(
        tmp.path(),
        "recurrent_ppo",
        "masked_cartpole",
        2048,
        &[
            "ppo.n_steps=64",
            "ppo.batch_size=32",
            "recurrent.chunk_len=8",
            "run.n_envs=2",
            "recurrent.history={lstm={hidden=16}}",
        ],
    );
    let mut agent = Agent::load(&dir, Which::Latest).unwrap();
    assert!(agent.is_recurrent());
    assert_eq!(agent.state_len(), 32);
    let recurrent = config.recurrent.unwrap();
    let policy = RecurrentCategoricalPolicy::for_env(
        &MaskedCartPole::new(0),
        recurrent.history,
        config.policy.clone().unwrap(),
        config.run.seed,
    )
    .unwrap();
    let learner = RecurrentPpoConfig::new(config.ppo.unwrap(), recurrent.chunk_len);
    let mut ppo = RecurrentPpo::new(policy, learner, config.run.n_envs, config.run.seed).unwrap();
    restore(&mut ppo, &dir);
    let reference = ppo.policy_mut();

    // 1,000 steps of episodes, the reference keeping its state as `rl eval` does, the
    // most likely actions and then sampled ones (the checkpoint holds the sampling
    // generator, so equal probabilities draw equal actions).
    let (mut episodes, mut zeros) = (0, 0);
    for mode in [Mode::Deterministic, Mode::Sample] {
        reference.set_mode(mode);
        agent.set_mode(mode);
        let mut env = MaskedCartPole::new(1);
        let mut obs = vec![0.0; 2];
        env.reset(Some(3), &mut obs).unwrap();
        let mut slot = [HistorySlot::default()];
        let mut state = agent.initial_state(1);
        let (mut expected, mut got, mut lp, mut v) = ([0u32], [0u32], [0.0f32], [0.0f32]);
        for t in 0..1000 {
            let out = ActOutput {
                actions: &mut expected,
                log_probs: &mut lp,
                values: &mut v,
            };
            reference.act(&obs, &mut slot, out).unwrap();
            agent.act_recurrent(&obs, &mut state, &mut got).unwrap();
            assert_eq!(got, expected, "{mode:?} step {t}");
            zeros += usize::from(got[0] == 0);
            // Every fifth step the other action, so that states off the policy's path come.
            let taken = if t % 5 == 4 {
                [1 - expected[0]]
            } else {
                expected
            };
            if env.step(&taken, &mut obs).unwrap().ends_episode() {
                env.reset(Some(t), &mut obs).unwrap();
                slot = [HistorySlot::default()];
                state.set_episode_start(0);
                episodes += 1;
            }
        }
        assert!(state.as_slice().iter().any(|&x| x != 0.0));
    }
    assert!(
        episodes > 10 && zeros > 0 && zeros < 2000,
        "{episodes} episodes, {zeros} zeros"
    );
    agent.set_mode(Mode::Deterministic);
    matches_eval(
        &mut agent,
        &dir,
        MaskedCartPole::new(config.run.seed),
        with_state,
    );
}

#[test]
fn acting_allocates_nothing_after_the_first_call() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = trained(
        tmp.path(),
        "ppo",
        "cartpole",
        64,
        &["ppo.n_steps=32", "run.n_envs=2"],
    );
    let mut agent = Agent::load(&dir, Which::Latest).unwrap();
    let obs = observations(CartPole::new(1), |t| vec![(t % 2) as u32]);
    let mut actions = vec![0u32; 1000];
    agent.act(&obs, &mut actions).unwrap();
    let (result, stats) = rl_testkit::measure(|| agent.act(&obs, &mut actions));
    result.unwrap();
    assert_eq!(stats.allocations, 0, "{stats:?}");
    agent.set_mode(Mode::Sample);
    let (result, stats) = rl_testkit::measure(|| agent.act(&obs[..400], &mut actions[..100]));
    result.unwrap();
    assert_eq!(stats.allocations, 0, "fewer rows: {stats:?}");

    let (dir, _) = trained(
        tmp.path(),
        "recurrent_ppo",
        "masked_cartpole",
        64,
        &[
            "ppo.n_steps=32",
            "ppo.batch_size=32",
            "recurrent.chunk_len=8",
            "run.n_envs=2",
        ],
    );
    let mut agent = Agent::load(&dir, Which::Latest).unwrap();
    let mut state = agent.initial_state(8);
    let obs = vec![0.1; 16];
    agent
        .act_recurrent(&obs, &mut state, &mut actions[..8])
        .unwrap();
    let (result, stats) =
        rl_testkit::measure(|| agent.act_recurrent(&obs, &mut state, &mut actions[..8]));
    result.unwrap();
    assert_eq!(stats.allocations, 0, "recurrent: {stats:?}");
}

#[test]
fn bad_run_directories_and_arguments_are_typed_errors_that_say_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = Agent::load(&tmp.path().join("nothing"), Which::Latest).unwrap_err();
    assert!(
        matches!(missing, Error::Usage(ref m) if m.contains("not a run directory")),
        "{missing}"
    );

    let (dir, _) = trained(
        tmp.path(),
        "ppo",
        "cartpole",
        64,
        &["ppo.n_steps=32", "run.n_envs=2"],
    );
    let no_best = Agent::load(&dir, Which::Best).unwrap_err();
    assert!(
        matches!(no_best, Error::Usage(ref m) if m.contains("run.eval")),
        "{no_best}"
    );

    let mut agent = Agent::load(&dir, Which::Latest).unwrap();
    let short = agent.act(&[0.0; 7], &mut [0u32; 2]).unwrap_err();
    assert!(
        matches!(
            short,
            Error::Input {
                what: "observations",
                ..
            }
        ),
        "{short}"
    );
    assert!(short.to_string().contains("rows x 4 elements"), "{short}");
    let rows = agent.act(&[0.0; 8], &mut [0u32; 3]).unwrap_err();
    assert!(
        matches!(
            rows,
            Error::Input {
                what: "actions",
                ..
            }
        ),
        "{rows}"
    );
    let kind = agent.act(&[0.0; 4], &mut [0.0f32; 1]).unwrap_err();
    assert!(kind.to_string().contains("give a buffer of u32"), "{kind}");
    let mut state = agent.initial_state(1);
    let stateful = agent
        .act_recurrent(&[0.0; 4], &mut state, &mut [0u32])
        .unwrap_err();
    assert!(stateful.to_string().contains("act with act"), "{stateful}");
    assert_eq!(stateful.exit_code(), 2);

    // One damaged byte of the checkpoint: a checksum error naming the file.
    let file = dir.join(CHECKPOINT_DIR).join("learner.safetensors");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    let corrupt = Agent::load(&dir, Which::Latest).unwrap_err();
    assert!(matches!(corrupt, Error::Nn(_)), "{corrupt}");
    assert!(
        corrupt.to_string().contains("learner.safetensors"),
        "{corrupt}"
    );
}
