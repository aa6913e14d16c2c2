"""flatrl.load(run_dir).predict: a run's policy with SB3's predict, acting as `rl eval`
(flatrl.evaluate) acts, for PPO, SAC, DQN and recurrent PPO."""

import numpy as np
import pytest

import flatrl

RUNS = {
    "ppo": ({"algo": "ppo", "env": "cartpole", "run": {"total_steps": 2048, "n_envs": 2},
             "ppo": {"n_steps": 64}}, "CartPole-v1"),
    "sac": ({"algo": "sac", "env": "pendulum", "run": {"total_steps": 300},
             "sac": {"hidden": [16, 16], "batch_size": 16},
             "off_policy": {"buffer_capacity": 1000, "learning_starts": 100}}, "Pendulum-v1"),
    "dqn": ({"algo": "dqn", "env": "cartpole", "run": {"total_steps": 300},
             "dqn": {"hidden": [16, 16]},
             "off_policy": {"buffer_capacity": 1000, "learning_starts": 100}}, "CartPole-v1"),
    "recurrent_ppo": ({"algo": "recurrent_ppo", "env": "masked_cartpole",
                       "run": {"total_steps": 2048, "n_envs": 2},
                       "ppo": {"n_steps": 64, "batch_size": 32},
                       "recurrent": {"chunk_len": 8, "history": {"lstm": {"hidden": 16}}}},
                      "MaskedCartPole-v1"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for name, (config, _) in RUNS.items():
        flatrl.train(config, root / name)
    return root


def play(agent, env_id, seed, episodes):
    """Returns of episodes played with predict on the Rust env (one of a vector env),
    episode i reset with seed + i, as `rl eval` plays them, and the steps taken."""
    env = flatrl.make_vec(env_id, 1)
    returns, steps = [], 0
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        state, start, total = None, np.ones(1, dtype=bool), 0.0
        while True:
            action, state = agent.predict(obs[0], state=state, episode_start=start)
            start = np.zeros(1, dtype=bool)
            obs, reward, terminated, truncated, _ = env.step(np.asarray(action)[None])
            total += float(reward[0])
            steps += 1
            if terminated[0] or truncated[0]:
                break
        returns.append(total)
    return returns, steps


@pytest.mark.parametrize("name", list(RUNS))
def test_predict_plays_the_episodes_evaluate_plays(runs, name):
    agent = flatrl.load(runs / name)
    assert agent.algo == name and agent.recurrent == (name == "recurrent_ppo")
    # Enough episodes for at least 1,000 observations acted on (the barely trained DQN
    # and recurrent policies drop the pole within about 10 steps).
    episodes = {"ppo": 20, "sac": 10}.get(name, 150)
    evaluated = flatrl.evaluate(runs / name, episodes=episodes, seed=40)
    returns, steps = play(agent, RUNS[name][1], 40, episodes)
    assert steps >= 1000
    assert steps == round(evaluated["mean_length"] * episodes)
    assert (sum(returns) / episodes, min(returns), max(returns)) == (
        evaluated["mean_return"], evaluated["min_return"], evaluated["max_return"])


def observations(env_id, n=1000):
    env = flatrl.make_vec(env_id, 1)
    obs, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(n):
        rows.append(obs[0].copy())
        obs, *_ = env.step(env.action_space.sample() if rng.random() < 0.5 else env.action_space.sample())
    return np.stack(rows)


@pytest.mark.parametrize("name", ["ppo", "sac", "dqn"])
def test_a_batch_of_1000_equals_one_observation_at_a_time(runs, name):
    agent = flatrl.load(runs / name)
    obs = observations(RUNS[name][1])
    actions, state = agent.predict(obs)
    assert state is None and actions.shape[0] == 1000
    if name == "sac":
        assert actions.dtype == np.float32 and actions.shape == (1000, 1)
        assert len(np.unique(actions)) > 100
    else:
        assert actions.dtype == np.int64 and actions.shape == (1000,)
    for i in range(0, 1000, 7):
        one, _ = agent.predict(obs[i])
        # SB3's shapes: one observation gives one action (a 0-d array for discrete ones).
        assert one.shape == actions.shape[1:]
        np.testing.assert_allclose(one, actions[i], rtol=1e-5, atol=1e-6)


def test_a_recurrent_batch_carries_each_rows_state(runs):
    agent = flatrl.load(runs / "recurrent_ppo")
    obs = observations("MaskedCartPole-v1", 64).reshape(16, 4, 2)  # 16 steps of 4 rows
    actions, state = agent.predict(obs[0], episode_start=np.ones(4, dtype=bool))
    h, c = state
    assert h.shape == (1, 4, 16) and c.shape == (1, 4, 16) and actions.dtype == np.int64
    batched = [actions]
    for t in range(1, 16):
        actions, state = agent.predict(obs[t], state=state, episode_start=np.zeros(4, dtype=bool))
        batched.append(actions)
    # Row 2 alone, with its own state, acts as it did in the batch.
    single_state = None
    for t in range(16):
        action, single_state = agent.predict(obs[t, 2], state=single_state, episode_start=[t == 0])
        assert int(action) == batched[t][2], t
    with pytest.raises(ValueError, match="pass back the state"):
        agent.predict(obs[0], state=(h[:, :2], c[:, :2]))


def test_bad_input_and_missing_runs_raise_value_error(runs, tmp_path):
    agent = flatrl.load(runs / "ppo")
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        agent.predict(np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="run directory"):
        flatrl.load(tmp_path / "nothing")
    with pytest.raises(ValueError, match="run.eval"):
        flatrl.load(runs / "ppo", best=True)
    assert flatrl.load(runs / "ppo").predict(np.zeros(4))[0].dtype == np.int64  # float64 in
