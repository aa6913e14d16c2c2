"""Type stubs of the Rust extension module flatrl._flatrl (re-exported by flatrl)."""

from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from types import TracebackType
from typing import Any, Literal, Union

import numpy as np
import numpy.typing as npt

__version__: str

#: A column dtype: anything numpy.dtype() accepts that is float32, uint32, int64, uint8
#: or bool.
DTypeLike = Union[str, type, np.dtype[Any]]
#: A column shape: () for one value per row, (4,), (84, 84), ...; an int n means (n,).
ShapeLike = Union[int, Sequence[int]]
#: A schema: column name -> (dtype, shape), in column order.
Schema = Mapping[str, tuple[DTypeLike, ShapeLike]]
Location = Literal["ram", "file", "gpu"]
Sampler = Union["Uniform", "Prioritized", "SliceSampler"]

class MemoryBudgetError(MemoryError):
    """A memory plan does not fit its budget; nothing was allocated."""

    plan: MemoryPlan

class MemoryPlan:
    """What a buffer holds, line by line; str() is a table."""

    @property
    def lines(self) -> list[tuple[str, Location, int]]: ...
    def total(self, location_name: Location) -> int: ...
    @property
    def grand_total(self) -> int: ...
    def __len__(self) -> int: ...

class MemoryBudget:
    """Limits in bytes per location (None: unlimited)."""

    def __init__(self, *, ram: int | None = None, file: int | None = None) -> None: ...
    @property
    def ram(self) -> int | None: ...
    @property
    def file(self) -> int | None: ...

class Uniform:
    """Uniform sampling with replacement."""

    def __init__(self, seed: int = 0) -> None: ...

class Prioritized:
    """Prioritized replay: P(i) ~ (priority + epsilon) ** alpha, weights with beta."""

    def __init__(
        self, *, alpha: float = 0.6, beta: float = 0.4, epsilon: float = 1e-6, seed: int = 0
    ) -> None: ...

class SliceSampler:
    """Windows of slice_len consecutive rows within one episode."""

    def __init__(self, slice_len: int, *, seed: int = 0) -> None: ...
    @property
    def slice_len(self) -> int: ...

class Batch:
    """Arrays a buffer samples into, allocated once, filled in place by every sample.

    batch[name] is the same numpy array after every sample (shape (room, *shape)), so
    torch.from_numpy(batch[name]) made once shares its memory (no copy).
    """

    def __getitem__(self, name: str) -> npt.NDArray[Any]: ...
    def __len__(self) -> int: ...
    def __contains__(self, name: str) -> bool: ...
    def keys(self) -> list[str]: ...
    @property
    def room(self) -> int: ...
    @property
    def positions(self) -> npt.NDArray[np.uint64]: ...
    @property
    def weights(self) -> npt.NDArray[np.float32]: ...
    def as_dict(self) -> dict[str, npt.NDArray[Any]]: ...

class ReplayBuffer:
    """A FIFO replay buffer in RAM or (with path) in a crash-safe memmap file."""

    def __init__(
        self,
        schema: Schema,
        capacity: int,
        *,
        path: str | PathLike[str] | None = None,
        sampler: Sampler | None = None,
        budget: MemoryBudget | None = None,
        allow_non_finite: bool = False,
        threads: int = 1,
    ) -> None: ...
    @staticmethod
    def open(
        path: str | PathLike[str],
        *,
        sampler: Sampler | None = None,
        allow_non_finite: bool = False,
    ) -> ReplayBuffer: ...
    @staticmethod
    def plan(
        schema: Schema, capacity: int, *, memmap: bool = False, sampler: Sampler | None = None
    ) -> MemoryPlan: ...
    def extend(self, columns: Mapping[str, npt.NDArray[Any]]) -> int: ...
    def new_batch(self, rows: int, index_dtype: Literal["int64", "uint32"] = "int64") -> Batch: ...
    def sample(self, batch: Batch) -> Batch: ...
    def update_priorities(
        self, positions: npt.NDArray[np.uint64] | npt.NDArray[np.int64], priorities: npt.NDArray[np.floating[Any]]
    ) -> None: ...
    def set_beta(self, beta: float) -> None: ...
    def commit(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> ReplayBuffer: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...
    def __len__(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def written(self) -> int: ...
    @property
    def episodes(self) -> int: ...
    @property
    def path(self) -> PathLike[str] | None: ...
    @property
    def schema(self) -> dict[str, tuple[str, tuple[int, ...]]]: ...
    @property
    def memory_plan(self) -> MemoryPlan: ...
    def column(self, name: str) -> npt.NDArray[Any]: ...

class DedupReplayBuffer:
    """One stream of steps with each observation stored once; next_obs and frame stacks
    are rebuilt at sample time."""

    def __init__(
        self,
        schema: Schema,
        capacity: int,
        *,
        frame_stack: int = 1,
        path: str | PathLike[str] | None = None,
        seed: int = 0,
        budget: MemoryBudget | None = None,
        allow_non_finite: bool = False,
    ) -> None: ...
    @staticmethod
    def open(
        path: str | PathLike[str], *, frame_stack: int = 1, seed: int = 0, allow_non_finite: bool = False
    ) -> DedupReplayBuffer: ...
    @staticmethod
    def plan(schema: Schema, capacity: int, *, memmap: bool = False) -> MemoryPlan: ...
    def extend(
        self, columns: Mapping[str, npt.NDArray[Any]], final_obs: npt.NDArray[Any] | None = None
    ) -> int: ...
    def new_batch(self, rows: int, index_dtype: Literal["int64", "uint32"] = "int64") -> Batch: ...
    def sample(self, batch: Batch) -> Batch: ...
    def commit(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> DedupReplayBuffer: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...
    def __len__(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def episodes(self) -> int: ...
    @property
    def path(self) -> PathLike[str] | None: ...
    @property
    def schema(self) -> dict[str, tuple[str, tuple[int, ...]]]: ...
    @property
    def batch_schema(self) -> dict[str, tuple[str, tuple[int, ...]]]: ...
    @property
    def memory_plan(self) -> MemoryPlan: ...
    def column(self, name: str) -> npt.NDArray[Any]: ...

class VecEnvCore:
    """The Rust side of flatrl.VectorEnv (use flatrl.make_vec)."""

    def __init__(
        self, env_id: str, num_envs: int, *, autoreset_mode: Literal["next_step", "same_step"] = "next_step"
    ) -> None: ...
    @property
    def num_envs(self) -> int: ...
    @property
    def single_observation_space(self) -> tuple[Any, ...]: ...
    @property
    def single_action_space(self) -> tuple[Any, ...]: ...
    def reset(self, seed: int | None = None) -> npt.NDArray[np.float32]: ...
    def step(
        self, actions: npt.NDArray[Any]
    ) -> tuple[
        npt.NDArray[np.float32], npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.bool_]
    ]: ...
    @property
    def final_obs(self) -> npt.NDArray[np.float32]: ...
    @property
    def ended(self) -> npt.NDArray[np.bool_]: ...

class RandomCollector:
    """Gymnasium environments stepped by the Rust collector with random actions."""

    def __init__(self, envs: list[Any], *, frames_per_batch: int, seed: int = 0) -> None: ...
    def collect(self, buffer: ReplayBuffer) -> dict[str, Any]: ...

#: A config: a dict, TOML text, or a path to a TOML file (the `rl` command's configs).
ConfigLike = Union[Mapping[str, Any], str, PathLike[str]]
#: An environment: a Gymnasium id, a built-in name, or a callable returning a gymnasium.Env.
EnvLike = Union[str, Callable[[], Any], None]

class ConfigError(ValueError):
    """A config that cannot be used: the message names the key. Nothing ran."""

def train(
    config: ConfigLike,
    run_dir: str | PathLike[str],
    *,
    env: EnvLike = None,
    overrides: Sequence[str] = (),
    verbose: bool = False,
) -> dict[str, Any]:
    """Trains into a new run directory (as `rl train`); returns result.json's object."""

def resume(
    run_dir: str | PathLike[str],
    *,
    env: EnvLike = None,
    overrides: Sequence[str] = (),
    verbose: bool = False,
) -> dict[str, Any]:
    """Continues the run in run_dir from its checkpoint (as `rl resume`)."""

def evaluate(
    run_dir: str | PathLike[str],
    *,
    env: EnvLike = None,
    episodes: int = 10,
    seed: int | None = None,
    best: bool = False,
) -> dict[str, Any]:
    """Deterministic episodes of the saved policy (as `rl eval`)."""

def plan(config: ConfigLike, *, env: EnvLike = None, overrides: Sequence[str] = ()) -> MemoryPlan:
    """The run's memory plan, from the config alone; MemoryBudgetError when over run.budget
    (without one, over the available memory)."""

def cli_main(argv: list[str]) -> int:
    """The ``flatrl`` command line (``rl``'s, with Gymnasium environments); the exit code."""
    ...

def load_config(
    config: ConfigLike, *, overrides: Sequence[str] = (), env: EnvLike = None
) -> dict[str, Any]:
    """The effective config as a dict, defaults written out."""

class AgentCore:
    """A policy restored from a run directory (flatrl.load wraps it in SB3's predict)."""

    def act(self, obs: npt.NDArray[np.float32], deterministic: bool) -> npt.NDArray[Any]: ...
    def act_recurrent(
        self,
        obs: npt.NDArray[np.float32],
        state: npt.NDArray[np.float32],
        episode_start: npt.NDArray[np.bool_],
        deterministic: bool,
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]: ...
    @property
    def obs_len(self) -> int: ...
    @property
    def n_actions(self) -> int | None: ...
    @property
    def action_len(self) -> int: ...
    @property
    def recurrent(self) -> bool: ...
    @property
    def state_parts(self) -> list[int]: ...
    @property
    def algo(self) -> str: ...
    @property
    def env(self) -> str: ...
    @property
    def env_steps(self) -> int: ...

def load_agent(run_dir: str | PathLike[str], *, env: EnvLike = None, best: bool = False) -> AgentCore:
    """The policy saved in run_dir (as `rl eval` restores it)."""

class RemoteCollector:
    """A collector for a remote run: fills chunks with the learner's latest weights."""

    def __init__(
        self,
        config: ConfigLike,
        *,
        steps_per_chunk: int,
        env: EnvLike = None,
        overrides: Sequence[str] = (),
        random_frames: int = 0,
        seed: int = 0,
    ) -> None: ...
    @property
    def rows(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def schema(self) -> dict[str, tuple[str, tuple[int, ...]]]: ...
    def set_weights(self, version: int, env_steps: int, weights: bytes) -> None: ...
    def collect(
        self,
    ) -> tuple[dict[str, npt.NDArray[Any]], list[tuple[float, int, bool]]]: ...
    def __repr__(self) -> str: ...

def train_remote(
    config: ConfigLike,
    run_dir: str | PathLike[str],
    feed: Any,
    *,
    rows_in_flight: int,
    env: EnvLike = None,
    overrides: Sequence[str] = (),
    verbose: bool = False,
) -> dict[str, Any]:
    """Trains from the chunks feed.next_chunk() delivers; feed.publish() takes weights."""
