"""Shared fixtures of the flatrl test suite (run by `cargo xtask ci`, step `python`)."""

import numpy as np
import pytest


def transition_schema(obs_dim: int = 4) -> dict:
    return {
        "obs": ("float32", (obs_dim,)),
        "action": ("uint32", ()),
        "reward": ("float32", ()),
        "terminated": ("bool", ()),
        "truncated": ("bool", ()),
        "next_obs": ("float32", (obs_dim,)),
    }


def rows(start: int, n: int, obs_dim: int = 4, episode: int = 0) -> dict:
    """`n` rows whose values encode their index `start + i` (so rows can be recognised
    after sampling); every `episode`-th row terminates when `episode` > 0."""
    index = np.arange(start, start + n)
    obs = (index[:, None] * 10 + np.arange(obs_dim)[None, :]).astype(np.float32)
    terminated = (index % episode == episode - 1) if episode else np.zeros(n, dtype=bool)
    return {
        "obs": obs,
        "action": (index % 7).astype(np.uint32),
        "reward": index.astype(np.float32),
        "terminated": terminated,
        "truncated": np.zeros(n, dtype=bool),
        "next_obs": obs + 1,
    }


@pytest.fixture
def schema() -> dict:
    return transition_schema()
