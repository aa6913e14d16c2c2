"""A trained agent loaded from a run directory, with Stable-Baselines3's ``predict``.

``flatrl.load(run_dir)`` restores the policy of a run of ``flatrl.train`` or ``rl train``
the way ``flatrl.evaluate`` (``rl eval``) restores it, and ``predict`` acts like SB3's
``model.predict`` (or sb3-contrib's ``RecurrentPPO.predict`` for ``recurrent_ppo`` runs)::

    agent = flatrl.load("runs/ppo_cartpole")
    action, _ = agent.predict(obs)                  # one observation: one action
    actions, _ = agent.predict(batch_of_obs)        # (n, obs_len): n actions

    agent = flatrl.load("runs/recurrent")           # recurrent PPO
    state, starts = None, np.ones(n, dtype=bool)
    actions, state = agent.predict(obs, state=state, episode_start=starts)

Discrete actions are ``int64``, continuous ones ``float32`` (as the policy gives them:
unlike SB3, not clipped to the action space; the environments clip). ``deterministic``
defaults to ``True`` (SB3's default is ``False``): the actions ``rl eval`` takes.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import numpy.typing as npt

from ._flatrl import AgentCore, load_agent

State = tuple[npt.NDArray[np.float32], ...]


class Agent:
    """A policy restored from a run directory; see the module documentation."""

    def __init__(self, core: AgentCore) -> None:
        self._core = core
        self.algo: str = core.algo
        self.env: str = core.env
        self.env_steps: int = core.env_steps
        self.obs_len: int = core.obs_len
        self.n_actions: int | None = core.n_actions
        self.recurrent: bool = core.recurrent
        self._parts: list[int] = core.state_parts

    def __repr__(self) -> str:
        return f"Agent(algo={self.algo!r}, env={self.env!r}, env_steps={self.env_steps})"

    def _batch(self, observation: Any) -> tuple[npt.NDArray[np.float32], bool]:
        obs = np.asarray(observation, dtype=np.float32)
        if obs.shape == (self.obs_len,):
            return np.ascontiguousarray(obs[None, :]), True
        if obs.ndim == 2 and obs.shape[1] == self.obs_len and obs.shape[0] > 0:
            return np.ascontiguousarray(obs), False
        raise ValueError(
            f"observation has shape {obs.shape}: give one observation of shape ({self.obs_len},) "
            f"or a batch of shape (n, {self.obs_len}) (env {self.env})"
        )

    def predict(
        self,
        observation: Any,
        state: State | None = None,
        episode_start: Any = None,
        deterministic: bool = True,
    ) -> tuple[npt.NDArray[Any], State | None]:
        """Actions for ``observation`` (one, or a batch ``(n, obs_len)``), as SB3's
        ``predict``: returns ``(actions, state)``; one action for one observation, ``n``
        for a batch. Feed-forward policies return ``state`` ``None``. A recurrent policy
        takes the ``state`` it returned last (``None``: new episodes) and
        ``episode_start`` (one bool per row, ``True`` where the episode starts with this
        observation; ``None``: none does, unless ``state`` is ``None``) and returns the
        next state: a tuple of ``(1, n, width)`` float32 arrays (``(h, c)`` for an LSTM,
        the stacked rows for a stack), as sb3-contrib's ``RecurrentPPO``."""
        batch, single = self._batch(observation)
        n = batch.shape[0]
        if not self.recurrent:
            actions = self._core.act(batch, bool(deterministic))
            return (actions.squeeze(axis=0) if single else actions), None
        width = sum(self._parts)
        if state is None:
            rows = np.zeros((n, width), dtype=np.float32)
            starts = np.ones(n, dtype=bool)
        else:
            parts = tuple(np.asarray(p, dtype=np.float32) for p in state)
            if len(parts) != len(self._parts) or any(
                p.shape != (1, n, w) for p, w in zip(parts, self._parts)
            ):
                raise ValueError(
                    f"state has shapes {[p.shape for p in parts]} but {n} observations take "
                    f"{[(1, n, w) for w in self._parts]}: pass back the state predict returned (or None)"
                )
            rows = np.ascontiguousarray(np.concatenate([p[0] for p in parts], axis=1), dtype=np.float32)
            starts = np.zeros(n, dtype=bool)
        if episode_start is not None:
            starts = np.asarray(episode_start, dtype=bool).reshape(-1)
            if starts.shape != (n,):
                raise ValueError(f"episode_start has {starts.size} values for {n} observations: give one bool per row")
        actions, rows = self._core.act_recurrent(batch, rows, np.ascontiguousarray(starts), bool(deterministic))
        bounds = np.cumsum([0] + self._parts)
        next_state = tuple(rows[None, :, a:b].copy() for a, b in zip(bounds[:-1], bounds[1:]))
        return (actions.squeeze(axis=0) if single else actions), next_state


def load(
    run_dir: str | os.PathLike[str],
    *,
    env: str | Callable[[], Any] | None = None,
    best: bool = False,
) -> Agent:
    """The agent saved in ``run_dir`` (``best=True``: the best evaluation's checkpoint).
    ``env`` as ``flatrl.train`` took it, for a run on a Gymnasium environment (a callable
    again, or an id). Raises ``ValueError`` for a folder without a run or without that
    checkpoint, ``OSError`` for a damaged checkpoint."""
    return Agent(load_agent(run_dir, env=env, best=best))
