"""Collection on Ray (flatrl.ray): a local cluster, two collector actors and the learner
train SAC on Pendulum to its goal; an actor killed mid-run is restarted and the run still
reaches the goal, with every row the learner acknowledged stored exactly once."""

import collections
import os
import pathlib
import signal

import numpy as np
import pytest
import ray

import flatrl
import flatrl.ray

CONFIGS = pathlib.Path(__file__).resolve().parents[3] / "configs"
SAC = CONFIGS / "sac_pendulum.toml"


@pytest.fixture(scope="module", autouse=True)
def local_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def memmap_overrides(tmp_path):
    return [
        "run.total_steps=30000",
        f'off_policy.replay_location={{memmap={{dir="{tmp_path / "replay"}"}}}}',
    ]


def stored_digests(tmp_path, schema_names):
    replay = flatrl.ReplayBuffer.open(tmp_path / "replay" / "replay.rlmm")
    columns = {name: replay.column(name) for name in schema_names}
    return len(replay), flatrl.ray.row_digests(columns)


def test_two_actors_train_sac_on_pendulum_to_its_goal(tmp_path):
    result = flatrl.ray.train(
        SAC, tmp_path / "run", env="Pendulum-v1", num_actors=2, overrides=["run.total_steps=30000"]
    )
    assert result["solved"] and result["stopped_by"] == "goal", result
    assert result["mean_return"] >= -200.0
    remote = result["remote"]
    assert remote["actors"] == 2 and remote["actor_failures"] == 0
    assert remote["rows"] == result["total_env_steps"] == remote["chunks"] * 16
    # The run directory of the CLI: config, metrics, checkpoint, result.
    run = tmp_path / "run"
    for name in ("config.toml", "metrics.jsonl", "result.json"):
        assert (run / name).is_file()
    assert (run / "checkpoint" / "learner.safetensors").is_file()
    plan = {line[0] for line in flatrl.plan(SAC).lines}
    assert "replay/obs" in plan or any(p.startswith("replay/") for p in plan)


def test_a_killed_actor_is_restarted_and_no_acknowledged_row_is_lost_or_doubled(tmp_path):
    killed = []
    feeds = []

    def kill_one(feed, chunk):
        if not feeds:
            feeds.append(feed)
        # After 40 chunks, SIGKILL actor 0's process (its chunks in flight are lost).
        if feed.chunks == 40 and not killed:
            pid = ray.get(feed.actors[0].pid.remote())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    result = flatrl.ray.train(
        SAC,
        tmp_path / "run",
        env="Pendulum-v1",
        num_actors=2,
        overrides=memmap_overrides(tmp_path),
        on_chunk=kill_one,
        record_rows=True,
    )
    assert killed, "the actor was never killed"
    assert result["solved"], result
    feed = feeds[0]
    assert result["remote"]["actor_failures"] >= 1  # its chunks in flight failed
    # The restarted actor delivered: a new incarnation of actor 0.
    incarnations = {key for key in feed.accepted if key[0] == 0}
    assert len(incarnations) == 2
    # Every acknowledged row is in the replay file exactly once, and nothing else is.
    names = feed_schema(feed)
    stored, digests = stored_digests(tmp_path, names)
    assert stored == result["total_env_steps"] == len(feed.ledger)
    counts = collections.Counter(digests)
    assert max(counts.values()) == 1
    assert counts == collections.Counter(feed.ledger)


def feed_schema(feed):
    return ["obs", "action", "reward", "terminated", "truncated", "next_obs"]


def test_on_policy_algorithms_and_bad_arguments_are_refused(tmp_path):
    with pytest.raises(flatrl.ConfigError, match="on-policy"):
        flatrl.ray.train(CONFIGS / "ppo_cartpole.toml", tmp_path / "a")
    with pytest.raises(ValueError, match="num_actors"):
        flatrl.ray.train(SAC, tmp_path / "b", num_actors=0)
    with pytest.raises(ValueError, match="steps_per_chunk"):
        flatrl.ray.train(SAC, tmp_path / "c", steps_per_chunk=0)
    with pytest.raises(ValueError, match="max_in_flight_per_actor"):
        flatrl.ray.train(SAC, tmp_path / "d", max_in_flight_per_actor=0)
    assert not any(tmp_path.iterdir())


def test_a_remote_collector_takes_weights_and_fills_chunks():
    collector = flatrl.RemoteCollector(SAC, steps_per_chunk=8, seed=3)
    assert collector.rows == 8 and collector.version == 0
    columns, episodes = collector.collect()
    assert set(columns) == set(collector.schema)
    assert columns["obs"].shape == (8, 3) and columns["action"].shape == (8, 1)
    assert columns["obs"].dtype == np.float32 and columns["terminated"].dtype == bool
    assert episodes == []  # Pendulum episodes are 200 steps
    with pytest.raises(ValueError):
        collector.set_weights(1, 0, b"not a checkpoint")
    assert collector.version == 0
