"""Collection on Ray: actors collect, the learner trains.

Each actor (one per core, or one per machine) holds a ``flatrl.RemoteCollector``: the
config's ``run.n_envs`` environments stepped by the Rust collector, acting with a copy of
the learner's actor. It fills fixed-size chunks of transitions (``steps_per_chunk`` steps
of every environment) and ships them to the learner as numpy arrays. The learner (this
process) runs the Rust off-policy trainer of the config, which writes every chunk into
its replay buffer (RAM or memmap, ``off_policy.replay_location``), trains, and after
every training phase publishes its weights with a new version (``ray.put`` once,
fetched by each actor before its next chunk when the version changed).

- **Bounded in flight**: each actor has at most ``max_in_flight_per_actor`` chunks
  requested and not yet written; the learner's memory plan counts them
  (``collector/remote/chunks_in_flight``), and the budget check includes them.
- **Failures**: actors are created with ``max_restarts=-1`` and ``max_task_retries=0``.
  An actor that dies (a crash, ``SIGKILL``, a lost node) is restarted by Ray; the chunks
  it had in flight are dropped (never written) and new ones are requested from the
  restarted actor. A chunk is written with one validated ``extend``, whole or not at
  all, and each (actor, incarnation, sequence number) is accepted once: rows the learner
  acknowledged are never lost nor duplicated.
- **One machine or a cluster**: the same script runs on ``ray.init()`` (a local
  cluster) and on a multi-node one (``ray start --head`` on one machine, ``ray start
  --address=HEAD:6379`` on the others, ``ray.init(address="auto")`` in the script).

Example::

    import ray, flatrl.ray
    ray.init()
    result = flatrl.ray.train("configs/sac_pendulum.toml", "runs/sac_ray",
                              env="Pendulum-v1", num_actors=2)
"""

from __future__ import annotations

import collections
import math
import os
import time
import warnings
from typing import Any, Callable

import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from . import _flatrl

#: What a dead or restarting actor's pending chunk raises.
ACTOR_ERRORS = (RayActorError, ActorUnavailableError)


class Collector:
    """A Ray actor class body: one ``flatrl.RemoteCollector`` and the chunk ledger.

    Use it through ``flatrl.ray.train``; ``ray.remote(Collector)`` builds the actor
    class (with the restart options ``train`` sets).
    """

    def __init__(
        self,
        config: Any,
        env: Any,
        overrides: list[str],
        index: int,
        steps_per_chunk: int,
        random_frames: int,
        seed: int,
    ) -> None:
        with warnings.catch_warnings():
            # Ray's own property reads a deprecated one of its own.
            warnings.simplefilter("ignore", DeprecationWarning)
            restarted = ray.get_runtime_context().was_current_actor_reconstructed
        # A new incarnation per process: a restarted actor's chunks are told apart from
        # its predecessor's, and it explores from a new seed (not the dead one's steps
        # again); its share of the random warm-up was taken already.
        self.incarnation = int.from_bytes(os.urandom(8), "little")
        if restarted:
            seed ^= self.incarnation
            random_frames = 0
        self.index, self.seq = index, 0
        self.collector = _flatrl.RemoteCollector(
            config,
            env=env,
            overrides=overrides,
            steps_per_chunk=steps_per_chunk,
            random_frames=random_frames,
            seed=seed,
        )

    def pid(self) -> int:
        return os.getpid()

    def collect(self, version: int, weights: list) -> dict:
        """The next chunk, after taking the weights of ``version`` if it acts with older
        ones (``weights``: ``[ObjectRef]`` of ``(version, env_steps, bytes)``)."""
        if version != self.collector.version:
            got_version, env_steps, blob = ray.get(weights[0])
            self.collector.set_weights(got_version, env_steps, blob)
        columns, episodes = self.collector.collect()
        self.seq += 1
        return {
            "actor": self.index,
            "incarnation": self.incarnation,
            "seq": self.seq,
            "version": self.collector.version,
            "columns": columns,
            "episodes": episodes,
        }


class RayFeed:
    """The learner's side: requests chunks from the actors (at most
    ``max_in_flight_per_actor`` each), hands them to the trainer in each actor's
    order, publishes the trainer's weights. ``train_remote`` calls ``next_chunk`` and
    ``publish``.

    ``on_chunk(feed, chunk)``, if given, runs after a chunk is accepted and before it is
    written (tests use it to kill an actor mid-run). With ``record_rows``, ``ledger``
    keeps a digest of every acknowledged row (tests check each is stored once).
    """

    def __init__(
        self,
        actors: list,
        *,
        max_in_flight_per_actor: int = 2,
        timeout_s: float = 600.0,
        max_failures: int = 100,
        on_chunk: Callable[[RayFeed, dict], None] | None = None,
        record_rows: bool = False,
    ) -> None:
        if max_in_flight_per_actor < 1:
            raise ValueError(
                f"max_in_flight_per_actor is {max_in_flight_per_actor}: request at least 1 chunk per actor"
            )
        self.actors = actors
        self.per_actor = max_in_flight_per_actor
        self.timeout_s = timeout_s
        self.max_failures = max_failures
        self.on_chunk = on_chunk
        self.record_rows = record_rows
        self.version = 0
        self.weights_ref = None
        # Per actor, its requested chunks in order: results are taken in that order.
        self.pending: list[collections.deque] = [collections.deque() for _ in actors]
        # Highest sequence number accepted per (actor, incarnation).
        self.accepted: dict[tuple[int, int], int] = {}
        self.chunks = 0
        self.rows = 0
        self.failures = 0
        self.stale_chunks = 0
        self.ledger: list[bytes] = []

    def publish(self, version: int, env_steps: int, weights: bytes) -> None:
        self.version = version
        self.weights_ref = ray.put((version, env_steps, bytes(weights)))

    def _request(self) -> None:
        for index, actor in enumerate(self.actors):
            queue = self.pending[index]
            while len(queue) < self.per_actor:
                queue.append(actor.collect.remote(self.version, [self.weights_ref]))

    def next_chunk(self) -> tuple[dict, list]:
        deadline = time.monotonic() + self.timeout_s
        while True:
            self._request()
            heads = {queue[0]: index for index, queue in enumerate(self.pending)}
            left = deadline - time.monotonic()
            ready, _ = ray.wait(list(heads), num_returns=1, timeout=max(left, 0.0))
            if not ready:
                raise TimeoutError(
                    f"no chunk from {len(self.actors)} actors in {self.timeout_s} s: are the actors alive and the cluster big enough for them?"
                )
            index = heads[ready[0]]
            self.pending[index].popleft()
            try:
                chunk = ray.get(ready[0])
            except ACTOR_ERRORS:
                # The actor died with this chunk in flight: nothing of it was written.
                # Ray restarts it; the next request goes to the new incarnation.
                self.failures += 1
                if self.failures > self.max_failures:
                    raise
                continue
            key = (chunk["actor"], chunk["incarnation"])
            if chunk["seq"] <= self.accepted.get(key, 0):
                self.stale_chunks += 1  # delivered twice: never written twice
                continue
            self.accepted[key] = chunk["seq"]
            if self.on_chunk is not None:
                self.on_chunk(self, chunk)
            columns = chunk["columns"]
            rows = len(next(iter(columns.values())))
            self.chunks += 1
            self.rows += rows
            if self.record_rows:
                self.ledger.extend(row_digests(columns))
            return columns, chunk["episodes"]

    def memory_rows(self, rows_per_chunk: int) -> int:
        """Rows in flight at most: what the learner's plan counts."""
        return len(self.actors) * self.per_actor * rows_per_chunk


def row_digests(columns: dict) -> list[bytes]:
    """One digest per row over every column's bytes (to find rows again in a buffer)."""
    import hashlib

    names = sorted(columns)
    rows = len(columns[names[0]])
    flat = [columns[n].reshape(rows, -1).view("uint8") for n in names]
    return [
        hashlib.blake2b(b"".join(f[i].tobytes() for f in flat), digest_size=16).digest()
        for i in range(rows)
    ]


def train(
    config: Any,
    run_dir: str | os.PathLike,
    *,
    env: Any = None,
    num_actors: int = 2,
    steps_per_chunk: int = 16,
    max_in_flight_per_actor: int = 2,
    overrides: list[str] | tuple[str, ...] = (),
    actor_options: dict | None = None,
    timeout_s: float = 600.0,
    on_chunk: Callable[[RayFeed, dict], None] | None = None,
    record_rows: bool = False,
    verbose: bool = False,
) -> dict:
    """Trains ``config`` (an off-policy algorithm: sac, discrete_sac, dqn) into the new
    run directory ``run_dir`` with ``num_actors`` Ray actors collecting, each stepping
    ``run.n_envs`` environments. Returns the run's result (as ``flatrl.train``), with
    ``"remote"``: chunks, rows, actor failures survived.

    ``config`` and ``env`` as for ``flatrl.train``; a callable ``env`` is pickled to the
    actors. Actor ``i`` resets its environments from ``run.seed + 1_000_000 * (i + 1)``
    and acts at random for its share of ``off_policy.learning_starts``.
    ``actor_options`` go to ``.options()`` of each actor (``num_cpus``, ``resources``,
    ``scheduling_strategy`` to spread them over machines ...).
    """
    if num_actors < 1:
        raise ValueError(f"num_actors is {num_actors}: use at least 1 actor")
    if steps_per_chunk < 1:
        raise ValueError(f"steps_per_chunk is {steps_per_chunk}: a chunk holds at least 1 step")
    overrides = list(overrides)
    if isinstance(config, (str, os.PathLike)) and os.path.isfile(config):
        # Actors on other machines may not see the file: ship its text.
        with open(config, encoding="utf-8") as f:
            config = f.read()
    effective = _flatrl.load_config(config, overrides=overrides, env=env)
    if effective.get("off_policy") is None:
        raise _flatrl.ConfigError(
            f"algo: {effective['algo']!r} is on-policy: Ray collection trains sac, discrete_sac or dqn"
        )
    run = effective["run"]
    random_frames = math.ceil(effective["off_policy"]["learning_starts"] / num_actors)
    if not ray.is_initialized():
        ray.init()
    remote = ray.remote(max_restarts=-1, max_task_retries=0)(Collector)
    options = {"num_cpus": 1, **(actor_options or {})}
    actors = [
        remote.options(**options).remote(
            config,
            env,
            overrides,
            index,
            steps_per_chunk,
            random_frames,
            run["seed"] + 1_000_000 * (index + 1),
        )
        for index in range(num_actors)
    ]
    feed = RayFeed(
        actors,
        max_in_flight_per_actor=max_in_flight_per_actor,
        timeout_s=timeout_s,
        on_chunk=on_chunk,
        record_rows=record_rows,
    )
    try:
        result = _flatrl.train_remote(
            config,
            run_dir,
            feed,
            rows_in_flight=feed.memory_rows(steps_per_chunk * run["n_envs"]),
            env=env,
            overrides=overrides,
            verbose=verbose,
        )
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
    result["remote"] = {
        "actors": num_actors,
        "chunks": feed.chunks,
        "rows": feed.rows,
        "actor_failures": feed.failures,
    }
    return result
