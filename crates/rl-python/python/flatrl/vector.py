"""The Rust environments of ``rl`` as a ``gymnasium.vector.VectorEnv``.

``flatrl.make_vec("CartPole-v1", num_envs=64)`` steps 64 Rust CartPoles in one call.
CartPole-v1 and Pendulum-v1 step as Gymnasium's own (the Rust environments equal them bit
for bit from equal states, tested against recorded Gymnasium runs). Resets are seeded by the
Rust generator (xoshiro256++), not numpy's PCG64: with the same seed the initial states
differ from Gymnasium's, though they are drawn from the same distribution (CartPole
``uniform(-0.05, 0.05)``, Pendulum angle in ``[-pi, pi]``, speed in ``[-1, 1]``).
Observations are float32, rewards float64 (as Gymnasium's), flags bool.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from ._flatrl import VecEnvCore
from ._spaces import _space

__all__ = ["ENV_IDS", "VectorEnv", "make_vec"]

#: Environment ids ``VectorEnv`` knows.
ENV_IDS = ("CartPole-v1", "MaskedCartPole-v1", "Pendulum-v1", "LargeDiscrete-v0")

_MODES = {AutoresetMode.NEXT_STEP: "next_step", AutoresetMode.SAME_STEP: "same_step"}


class VectorEnv(gymnasium.vector.VectorEnv):
    """``num_envs`` copies of a Rust environment stepped together.

    Follows the ``gymnasium.vector.VectorEnv`` API: ``reset(seed=s)`` resets environment
    ``i`` with seed ``s + i``; ``step(actions)`` takes one action per environment (a numpy
    array) and returns ``(obs, rewards, terminated, truncated, info)``.

    ``autoreset_mode``: ``AutoresetMode.NEXT_STEP`` (Gymnasium's default: the step after
    an episode ends resets that environment, with reward 0 and both flags false) or
    ``AutoresetMode.SAME_STEP`` (the ending step returns the reset observation and puts
    the final one in ``info["final_obs"]``, with the mask ``info["_final_obs"]``).

    ``copy=True`` (the default, as in Gymnasium) returns fresh arrays each step;
    ``copy=False`` returns the same arrays every step, overwritten by the next one (no
    allocation; copy what you keep).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
        copy: bool = True,
    ) -> None:
        if autoreset_mode not in _MODES:
            raise ValueError(
                f"autoreset_mode {autoreset_mode} is not supported: use AutoresetMode.NEXT_STEP or AutoresetMode.SAME_STEP"
            )
        self._core = VecEnvCore(env_id, num_envs, autoreset_mode=_MODES[autoreset_mode])
        self._copy = copy
        self._same_step = autoreset_mode == AutoresetMode.SAME_STEP
        self.num_envs = num_envs
        self.env_id = env_id
        self.metadata = {"autoreset_mode": autoreset_mode}
        self.render_mode = None
        self.single_observation_space = _space(self._core.single_observation_space)
        self.single_action_space = _space(self._core.single_action_space)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Resets every environment; environment ``i`` gets seed ``seed + i``."""
        if options:
            raise ValueError(f"options are not supported by flatrl.VectorEnv, got {options!r}")
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an int or None, got {seed!r}")
        super().reset(seed=seed)
        obs = self._core.reset(seed)
        return (obs.copy() if self._copy else obs), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Steps every environment; all actions are checked before any environment steps."""
        obs, rewards, terminated, truncated = self._core.step(np.asarray(actions))
        info: dict[str, Any] = {}
        if self._same_step:
            ended = self._core.ended
            if ended.any():
                final_obs = np.full(self.num_envs, fill_value=None, dtype=object)
                finals = self._core.final_obs
                for i in np.flatnonzero(ended):
                    final_obs[i] = finals[i].copy()
                info = {
                    "final_obs": final_obs,
                    "_final_obs": ended.copy(),
                    "final_info": {},
                    "_final_info": ended.copy(),
                }
        if self._copy:
            return obs.copy(), rewards.copy(), terminated.copy(), truncated.copy(), info
        return obs, rewards, terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the environments are freed with the object."""

    def __repr__(self) -> str:
        return f"flatrl.VectorEnv({self.env_id!r}, num_envs={self.num_envs})"


def make_vec(
    env_id: str,
    num_envs: int = 1,
    *,
    autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP,
    copy: bool = True,
) -> VectorEnv:
    """``num_envs`` copies of the Rust environment ``env_id`` as a ``VectorEnv``."""
    return VectorEnv(env_id, num_envs, autoreset_mode=autoreset_mode, copy=copy)
