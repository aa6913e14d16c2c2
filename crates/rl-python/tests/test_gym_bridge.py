"""Gymnasium environments stepped by the Rust collector (GymEnv + RandomCollector)."""

import gymnasium
import numpy as np
import pytest

import flatrl


def collector_schema(obs_dim, action):
    return {
        "obs": ("float32", (obs_dim,)),
        "action": action,
        "reward": ("float32", ()),
        "terminated": ("bool", ()),
        "truncated": ("bool", ()),
        "next_obs": ("float32", (obs_dim,)),
    }


def test_cartpole_transitions_are_consistent():
    envs = [gymnasium.make("CartPole-v1") for _ in range(4)]
    collector = flatrl.RandomCollector(envs, frames_per_batch=400, seed=0)
    rb = flatrl.ReplayBuffer(collector_schema(4, ("uint32", ())), 10_000)
    total = 0
    for _ in range(5):
        report = collector.collect(rb)
        total += report["frames"]
        assert report["frames"] == 400
    assert len(rb) == 2000 and report["total_frames"] == 2000
    obs, next_obs = rb.column("obs"), rb.column("next_obs")
    ends = rb.column("terminated") | rb.column("truncated")
    assert report["episodes"] == ends.sum() > 0
    assert set(rb.column("action")) == {0, 1}
    np.testing.assert_array_equal(rb.column("reward"), 1.0)
    # One row per environment per step: env i's next row is 4 rows later.
    for i in range(4):
        o, n, e = obs[i::4], next_obs[i::4], ends[i::4]
        np.testing.assert_array_equal(n[:-1][~e[:-1]], o[1:][~e[:-1]])
        # Where an episode ended, next_obs is the final observation (a terminated
        # CartPole is out of bounds), not the reset one.
        terminated = rb.column("terminated")[i::4]
        finals = n[terminated]
        assert np.all((np.abs(finals[:, 0]) > 2.4) | (np.abs(finals[:, 2]) > 12 * 2 * np.pi / 360))
        assert np.all(np.abs(o[1:][e[:-1]]) <= 0.05)  # reset observations


def test_the_first_reset_uses_seed_plus_index():
    envs = [gymnasium.make("CartPole-v1") for _ in range(3)]
    collector = flatrl.RandomCollector(envs, frames_per_batch=3, seed=21)
    rb = flatrl.ReplayBuffer(collector_schema(4, ("uint32", ())), 10)
    collector.collect(rb)
    for i in range(3):
        expected, _ = gymnasium.make("CartPole-v1").reset(seed=21 + i)
        np.testing.assert_array_equal(rb.column("obs")[i], expected)


def test_continuous_actions_reach_pendulum():
    envs = [gymnasium.make("Pendulum-v1") for _ in range(2)]
    collector = flatrl.RandomCollector(envs, frames_per_batch=200, seed=1)
    rb = flatrl.ReplayBuffer(collector_schema(3, ("float32", (1,))), 1000)
    collector.collect(rb)
    actions = rb.column("action")
    assert actions.shape == (200, 1) and np.all(np.abs(actions) <= 2.0)
    assert actions.std() > 0.5
    assert np.all(rb.column("reward") <= 0.0)


class Exploding(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, explode_at):
        self.t, self.explode_at = 0, explode_at

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == self.explode_at:
            raise KeyError("boom at step %d" % self.t)
        return np.zeros(2, np.float32), 0.0, False, False, {}


class BadShape(Exploding):
    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


def test_python_exceptions_come_back_unchanged():
    collector = flatrl.RandomCollector([Exploding(5)], frames_per_batch=10)
    rb = flatrl.ReplayBuffer(collector_schema(2, ("uint32", ())), 100)
    with pytest.raises(KeyError, match="boom at step 5"):
        collector.collect(rb)
    assert len(rb) == 4  # the steps before the failure
    with pytest.raises(RuntimeError, match="stopped"):
        collector.collect(rb)
    bad = flatrl.RandomCollector([BadShape(0)], frames_per_batch=2)
    with pytest.raises(ValueError, match="observation of 3 elements"):
        bad.collect(rb)


def test_unsupported_envs_and_schemas():
    class DiscreteObs(Exploding):
        observation_space = gymnasium.spaces.Discrete(3)

    with pytest.raises(ValueError, match="Box observation space"):
        flatrl.RandomCollector([DiscreteObs(0)], frames_per_batch=1)

    class Pixels(Exploding):
        observation_space = gymnasium.spaces.Box(0, 255, (84, 84, 3), np.uint8)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros((84, 84, 3), np.uint8), {}

        def step(self, action):
            return np.full((84, 84, 3), 7, np.uint8), 0.0, False, False, {}

    with pytest.raises(ValueError, match="uint8 image of shape \\[84, 84, 3\\].*convolutional encoder.*DtypeObservation"):
        flatrl.RandomCollector([Pixels(0)], frames_per_batch=1)
    # Converted explicitly, the same frames are accepted as floats.
    floats = gymnasium.wrappers.DtypeObservation(Pixels(0), np.float32)
    collector = flatrl.RandomCollector([floats], frames_per_batch=2)
    rb = flatrl.ReplayBuffer(collector_schema(84 * 84 * 3, ("uint32", ())), 4)
    collector.collect(rb)
    assert len(rb) == 2
    with pytest.raises(ValueError, match="empty"):
        flatrl.RandomCollector([], frames_per_batch=1)
    with pytest.raises(ValueError, match="multiple"):
        flatrl.RandomCollector([Exploding(0), Exploding(0)], frames_per_batch=3)
    collector = flatrl.RandomCollector([Exploding(0)], frames_per_batch=1)
    with pytest.raises(ValueError, match="next_obs"):
        collector.collect(flatrl.ReplayBuffer({"obs": ("float32", (2,))}, 10))
