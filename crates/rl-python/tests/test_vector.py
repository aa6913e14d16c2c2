"""flatrl.VectorEnv: the Rust environments as a gymnasium.vector.VectorEnv."""

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import flatrl


CARTPOLE_BOUNDS = (2.4, 12 * 2 * np.pi / 360)


def gym_state(env_id, obs):
    """The Gymnasium state whose observation is `obs` (rounded to float32)."""
    obs = obs.astype(np.float64)
    if env_id == "CartPole-v1":
        return obs
    return np.array([np.arctan2(obs[1], obs[0]), obs[2]])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_dynamics_are_gymnasiums(env_id):
    # Bit equality with Gymnasium from equal states is tested in Rust (rl-envs golden
    # tests); here each environment of the vector steps as Gymnasium's does from the
    # state of its observation (equal up to the float32 rounding of that state).
    ours = flatrl.make_vec(env_id, 3)
    obs, _ = ours.reset(seed=4)
    reference = [gymnasium.make(env_id).unwrapped for _ in range(3)]
    for env in reference:
        env.reset(seed=0)
    ours.action_space.seed(2)
    for _ in range(8):
        for env, o in zip(reference, obs):
            env.state = gym_state(env_id, o)
        actions = ours.action_space.sample()
        obs, rewards, terminated, truncated, _ = ours.step(actions)
        for i, env in enumerate(reference):
            want, reward, term, trunc, _ = env.step(actions[i])
            np.testing.assert_allclose(obs[i], want, rtol=1e-4, atol=1e-5)
            assert rewards[i] == pytest.approx(reward, rel=1e-4, abs=1e-5)
            assert terminated[i] == term


def test_next_step_autoreset_semantics():
    env = flatrl.make_vec("CartPole-v1", 6)
    assert env.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert env.single_observation_space == gymnasium.make("CartPole-v1").observation_space
    assert env.single_action_space == gymnasium.spaces.Discrete(2)
    assert env.observation_space.shape == (6, 4) and env.action_space.shape == (6,)
    obs, info = env.reset(seed=0)
    assert info == {} and obs.dtype == np.float32 and np.all(np.abs(obs) <= 0.05)
    ended_before = np.zeros(6, dtype=bool)
    resets = 0
    for t in range(400):
        obs, rewards, terminated, truncated, info = env.step(np.full(6, t % 2))
        assert info == {} and rewards.dtype == np.float64 and terminated.dtype == np.bool_
        # Environments that ended on the last step were reset: reward 0, flags false,
        # a fresh observation; the others stepped (reward 1).
        np.testing.assert_array_equal(rewards, np.where(ended_before, 0.0, 1.0))
        assert not np.any(terminated[ended_before] | truncated[ended_before])
        assert np.all(np.abs(obs[ended_before]) <= 0.05)
        resets += ended_before.sum()
        done = terminated | truncated
        assert np.all((np.abs(obs[terminated, 0]) > CARTPOLE_BOUNDS[0]) | (np.abs(obs[terminated, 2]) > CARTPOLE_BOUNDS[1]))
        ended_before = done
    assert resets > 6


def test_same_step_autoreset_semantics():
    env = flatrl.make_vec("CartPole-v1", 6, autoreset_mode=AutoresetMode.SAME_STEP)
    env.reset(seed=0)
    ended = 0
    for t in range(300):
        obs, rewards, terminated, truncated, info = env.step(np.full(6, t % 2))
        np.testing.assert_array_equal(rewards, 1.0)
        done = terminated | truncated
        if not done.any():
            assert info == {}
            continue
        ended += done.sum()
        np.testing.assert_array_equal(info["_final_obs"], done)
        np.testing.assert_array_equal(info["_final_info"], done)
        for i in range(6):
            if done[i]:
                final = info["final_obs"][i]
                assert (abs(final[0]) > CARTPOLE_BOUNDS[0]) or (abs(final[2]) > CARTPOLE_BOUNDS[1])
                assert np.all(np.abs(obs[i]) <= 0.05)  # already reset
            else:
                assert info["final_obs"][i] is None
    assert ended > 6


def test_time_limits_truncate():
    env = flatrl.make_vec("Pendulum-v1", 2)
    env.reset(seed=1)
    for t in range(1, 201):
        _, _, terminated, truncated, _ = env.step(np.zeros((2, 1), dtype=np.float32))
        assert not terminated.any()
        assert truncated.all() == (t == 200)


def test_seeds():
    env = flatrl.make_vec("CartPole-v1", 3)
    a, _ = env.reset(seed=5)
    b, _ = env.reset(seed=5)
    c, _ = env.reset(seed=6)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # Environment i is reset with seed + i.
    np.testing.assert_array_equal(a[1], c[0])
    single = flatrl.make_vec("CartPole-v1", 1)
    np.testing.assert_array_equal(single.reset(seed=7)[0][0], a[2])


def test_copy_or_reuse_the_arrays():
    env = flatrl.make_vec("CartPole-v1", 3, copy=False)
    obs, _ = env.reset(seed=0)
    step = env.step(np.zeros(3, dtype=np.int64))
    assert step[0] is env.step(np.ones(3, dtype=np.int64))[0]
    copied = flatrl.make_vec("CartPole-v1", 3)
    copied.reset(seed=0)
    first = copied.step(np.zeros(3, dtype=np.int64))[0]
    assert copied.step(np.zeros(3, dtype=np.int64))[0] is not first


def test_bad_actions_are_refused_before_any_env_steps():
    env = flatrl.make_vec("CartPole-v1", 4)
    twin = flatrl.make_vec("CartPole-v1", 4)
    env.reset(seed=3)
    twin.reset(seed=3)
    for bad, message in [
        (np.array([0, 1, 2, 0]), "action 2 of environment 2 is out of range"),
        (np.array([0, 1, -1, 0]), "action -1 of environment 2 is out of range"),
        (np.array([0, 1, 0]), "actions has 3 elements"),
        (np.array([0.0, 1.0, 0.0, 1.0]), "must be integers"),
        (np.array(["a", "b", "c", "d"]), "actions have dtype"),
        ([0, 1, 0, 1.5], "must be integers"),
    ]:
        with pytest.raises(ValueError, match=message):
            env.step(bad)
    actions = np.array([0, 1, 1, 0])
    for _ in range(30):
        np.testing.assert_array_equal(env.step(actions)[0], twin.step(actions)[0])
    pendulum = flatrl.make_vec("Pendulum-v1", 2)
    pendulum.reset(seed=0)
    with pytest.raises(ValueError, match="finite"):
        pendulum.step(np.array([[0.0], [np.nan]], dtype=np.float32))


def test_usage_errors():
    with pytest.raises(RuntimeError, match="reset"):
        flatrl.make_vec("CartPole-v1", 2).step(np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="unknown environment `Nope-v0`"):
        flatrl.make_vec("Nope-v0", 2)
    with pytest.raises(ValueError, match="num_envs is 0"):
        flatrl.make_vec("CartPole-v1", 0)
    with pytest.raises(ValueError, match="not supported"):
        flatrl.make_vec("CartPole-v1", 2, autoreset_mode=AutoresetMode.DISABLED)
    with pytest.raises(ValueError, match="seed"):
        flatrl.make_vec("CartPole-v1", 2).reset(seed=[1, 2])


def test_other_environments_step():
    for env_id in ["MaskedCartPole-v1", "LargeDiscrete-v0"]:
        env = flatrl.make_vec(env_id, 8)
        obs, _ = env.reset(seed=0)
        assert obs.shape == (8, *env.single_observation_space.shape)
        obs, rewards, terminated, truncated, _ = env.step(env.action_space.sample())
        assert obs.dtype == np.float32 and rewards.shape == (8,)
