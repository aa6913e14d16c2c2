"""flatrl: replay buffers and vector environments with memory planned before a run starts
and flat while it runs. A thin skin over the Rust crates of ``rl`` (numpy in and out).

- ``ReplayBuffer`` / ``DedupReplayBuffer``: RAM or memmap storage from a schema dict
  ``{name: (dtype, shape)}``; ``extend`` from numpy arrays; ``sample`` into a ``Batch``
  allocated once (``torch.from_numpy(batch["obs"])`` shares its memory, no copy).
- ``Uniform``, ``Prioritized``, ``SliceSampler``: samplers.
- ``MemoryPlan``, ``MemoryBudget``, ``MemoryBudgetError``: the plan before allocation.
- ``VectorEnv`` / ``make_vec``: the Rust environments as a ``gymnasium.vector.VectorEnv``
  (needs ``gymnasium``).
- ``RandomCollector``: Gymnasium environments stepped by the Rust collector.
- ``train``, ``resume``, ``evaluate``, ``plan``: the trainers of the ``rl`` command from a
  config (TOML file, TOML text or dict) on a built-in or Gymnasium environment, into the
  same run directories (``config.toml``, ``metrics.jsonl``, ``checkpoint/``,
  ``result.json``); ``ConfigError`` names the bad key; ``load_config`` gives the
  effective config as a dict.
- ``load``: a run's trained policy with SB3's ``predict(obs, state, episode_start,
  deterministic)`` (``Agent``).
- ``flatrl.sb3`` (needs ``stable-baselines3``): ``VecEnv``, the Rust vector env as an SB3
  ``VecEnv``.
- ``flatrl.ray`` (needs ``ray``): collection on Ray actors for the off-policy trainers
  (``flatrl.ray.train``), built on ``RemoteCollector`` and ``train_remote``.
"""

from typing import TYPE_CHECKING

from ._flatrl import (
    AgentCore,
    Batch,
    ConfigError,
    DedupReplayBuffer,
    MemoryBudget,
    MemoryBudgetError,
    MemoryPlan,
    Prioritized,
    RandomCollector,
    RemoteCollector,
    ReplayBuffer,
    SliceSampler,
    Uniform,
    __version__,
    evaluate,
    load_config,
    plan,
    resume,
    train,
    train_remote,
)
from .agent import Agent, load

if TYPE_CHECKING:
    from .vector import VectorEnv, make_vec

__all__ = [
    "Agent",
    "AgentCore",
    "Batch",
    "ConfigError",
    "DedupReplayBuffer",
    "MemoryBudget",
    "MemoryBudgetError",
    "MemoryPlan",
    "Prioritized",
    "RandomCollector",
    "RemoteCollector",
    "ReplayBuffer",
    "SliceSampler",
    "Uniform",
    "VectorEnv",
    "make_vec",
    "__version__",
    "evaluate",
    "load",
    "load_config",
    "plan",
    "resume",
    "train",
    "train_remote",
]


def __getattr__(name: str):
    # The vector env needs gymnasium; import it only when asked for.
    if name in ("VectorEnv", "make_vec"):
        from . import vector

        return getattr(vector, name)
    raise AttributeError(f"module 'flatrl' has no attribute {name!r}")
