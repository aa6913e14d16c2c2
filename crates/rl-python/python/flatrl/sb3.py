"""The Rust vector environments as a Stable-Baselines3 ``VecEnv`` (needs
``stable-baselines3``, which brings ``torch``)::

    from stable_baselines3 import PPO
    import flatrl.sb3

    env = flatrl.sb3.VecEnv("CartPole-v1", num_envs=8, seed=0)
    PPO("MlpPolicy", env).learn(100_000)

One call steps every environment in Rust. SB3's conventions: ``step_wait`` returns
``(obs, rewards, dones, infos)`` with the next episode's first observation where an
episode ended, the final one in ``infos[i]["terminal_observation"]`` and
``infos[i]["TimeLimit.truncated"]`` for a time-limit cut; each ended episode's return,
length and wall time in ``infos[i]["episode"]`` (``{"r", "l", "t"}``, what SB3's
``Monitor`` adds, so ``rollout/ep_rew_mean`` is logged). Rewards are float32, as SB3's
``VecEnv``\\s hand them to the rollout buffer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env.base_vec_env import VecEnv as _VecEnv

from ._flatrl import VecEnvCore
from ._spaces import _space

__all__ = ["VecEnv"]


class VecEnv(_VecEnv):
    """``num_envs`` copies of the Rust environment ``env_id`` (``flatrl.vector.ENV_IDS``)
    as an SB3 ``VecEnv``; environment ``i`` is reset with ``seed + i`` at the first
    ``reset`` (then each continues its own stream)."""

    def __init__(self, env_id: str, num_envs: int = 1, *, seed: int | None = None) -> None:
        self._core = VecEnvCore(env_id, num_envs, autoreset_mode="same_step")
        self.env_id = env_id
        super().__init__(num_envs, _space(self._core.single_observation_space), _space(self._core.single_action_space))
        self._seed = seed
        self._actions: np.ndarray | None = None
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._lengths = np.zeros(num_envs, dtype=np.int64)
        self._started = time.perf_counter()

    def seed(self, seed: int | None = None) -> Sequence[None | int]:
        """Seeds the next ``reset`` (environment ``i`` with ``seed + i``)."""
        self._seed = seed
        return [None if seed is None else seed + i for i in range(self.num_envs)]

    def reset(self) -> np.ndarray:
        obs = self._core.reset(self._seed).copy()
        self._seed = None
        self._returns[:] = 0.0
        self._lengths[:] = 0
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        if self._actions is None:
            raise RuntimeError("step_wait without step_async: call step(actions)")
        obs, rewards, terminated, truncated = self._core.step(self._actions)
        self._actions = None
        dones = terminated | truncated
        self._returns += rewards
        self._lengths += 1
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            finals = self._core.final_obs
            elapsed = round(time.perf_counter() - self._started, 6)
            for i in np.flatnonzero(dones):
                infos[i] = {
                    "terminal_observation": finals[i].copy(),
                    "TimeLimit.truncated": bool(truncated[i] and not terminated[i]),
                    "episode": {"r": float(self._returns[i]), "l": int(self._lengths[i]), "t": elapsed},
                }
                self._returns[i] = 0.0
                self._lengths[i] = 0
        return obs.copy(), rewards.astype(np.float32), dones.copy(), infos

    def close(self) -> None:
        """Nothing to release: the environments are freed with the object."""

    def _indices(self, indices: None | int | Iterable[int]) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        if isinstance(indices, int):
            return [indices]
        return list(indices)

    def get_attr(self, attr_name: str, indices: None | int | Iterable[int] = None) -> list[Any]:
        """Attributes of the environments: ``render_mode`` (None), the spaces."""
        known = {
            "render_mode": None,
            "observation_space": getattr(self, "observation_space", None),
            "action_space": getattr(self, "action_space", None),
            "spec": None,
        }
        if attr_name not in known:
            raise AttributeError(f"flatrl.sb3.VecEnv environments have no attribute {attr_name!r} (Rust environments)")
        return [known[attr_name] for _ in self._indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: None | int | Iterable[int] = None) -> None:
        raise AttributeError(f"cannot set {attr_name!r} on flatrl's Rust environments")

    def env_method(self, method_name: str, *args: Any, indices: None | int | Iterable[int] = None, **kwargs: Any) -> list[Any]:
        raise AttributeError(f"flatrl's Rust environments have no method {method_name!r} to call from Python")

    def env_is_wrapped(self, wrapper_class: type, indices: None | int | Iterable[int] = None) -> list[bool]:
        return [False for _ in self._indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]

    def __repr__(self) -> str:
        return f"flatrl.sb3.VecEnv({self.env_id!r}, num_envs={self.num_envs})"
