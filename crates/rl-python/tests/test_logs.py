"""A run directory read by standard tools: the TensorBoard events of `tb/` through
tbparse (TensorBoard's own reader underneath) hold the values of metrics.jsonl at the
same steps, under Stable-Baselines3's tags; episodes.csv has a row per episode."""

import csv
import json
import math

import pytest
import tbparse

import flatrl

# metrics.jsonl key -> (TensorBoard tag, factor), as rl_train::run's tensorboard module.
SB3 = {
    "return_mean": ("rollout/ep_rew_mean", 1.0),
    "length_mean": ("rollout/ep_len_mean", 1.0),
    "return_window": ("rollout/return_window", 1.0),
    "env_steps_per_s": ("time/fps", 1.0),
    "wall_s": ("time/time_elapsed", 1.0),
    "episodes": ("time/episodes", 1.0),
    "updates": ("train/n_updates", 1.0),
    "policy_loss": ("train/policy_gradient_loss", 1.0),
    "value_loss": ("train/value_loss", 1.0),
    "entropy": ("train/entropy_loss", -1.0),
    "approx_kl": ("train/approx_kl", 1.0),
    "clip_fraction": ("train/clip_fraction", 1.0),
    "explained_variance": ("train/explained_variance", 1.0),
    "learning_rate": ("train/learning_rate", 1.0),
    "clip_range": ("train/clip_range", 1.0),
    "actor_loss": ("train/actor_loss", 1.0),
    "critic_loss": ("train/critic_loss", 1.0),
    "alpha": ("train/ent_coef", 1.0),
    "loss": ("train/loss", 1.0),
    "epsilon": ("rollout/exploration_rate", 1.0),
    "eval_return_mean": ("eval/mean_reward", 1.0),
    "eval_return_std": ("eval/std_reward", 1.0),
    "eval_episodes": ("eval/episodes", 1.0),
    "rss_bytes": ("memory/rss_bytes", 1.0),
    "planned_bytes": ("memory/planned_bytes", 1.0),
}

RUNS = {
    "ppo": {
        "algo": "ppo",
        "env": "cartpole",
        "run": {"total_steps": 2_048, "seed": 0, "n_envs": 4, "eval": {"every_steps": 1_024, "episodes": 2}},
        "policy": {"hidden": [16]},
        "ppo": {"n_steps": 32, "batch_size": 64, "epochs": 2},
        "log": {"metrics_every_steps": 128},
    },
    "sac": {
        "algo": "sac",
        "env": "pendulum",
        "run": {"total_steps": 600, "seed": 1},
        "sac": {"hidden": [16, 16], "batch_size": 16},
        "off_policy": {"buffer_capacity": 1_000, "learning_starts": 100},
        "log": {"metrics_every_steps": 100},
    },
    "dqn": {
        "algo": "dqn",
        "env": "cartpole",
        "run": {"total_steps": 1_000, "seed": 2},
        "dqn": {"hidden": [16], "batch_size": 16},
        "off_policy": {"buffer_capacity": 1_000, "learning_starts": 200},
        "log": {"metrics_every_steps": 100},
    },
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_tensorboard_events_hold_the_metrics_at_the_same_steps(tmp_path, name):
    run = tmp_path / name
    flatrl.train(RUNS[name], run)
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    scalars = tbparse.SummaryReader(str(run / "tb")).scalars
    assert len(scalars) > 0
    events = {(row.tag, int(row.step)): float(row.value) for row in scalars.itertuples()}
    # No step of a tag twice.
    assert len(events) == len(scalars)
    checked = set()
    for line in lines:
        for key, value in line.items():
            if key == "env_steps" or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            tag, factor = SB3.get(key, (f"train/{key}", 1.0))
            got = events[(tag, line["env_steps"])]
            want = factor * value
            assert math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6 * max(1.0, abs(want))), (key, got, want)
            checked.add(tag)
    assert {"rollout/ep_rew_mean", "time/fps", "train/n_updates"} <= checked
    expected = {
        "ppo": {"train/policy_gradient_loss", "train/value_loss", "train/entropy_loss", "train/approx_kl", "eval/mean_reward"},
        "sac": {"train/actor_loss", "train/critic_loss", "train/ent_coef"},
        "dqn": {"train/loss", "rollout/exploration_rate"},
    }[name]
    assert expected <= checked, expected - checked


def test_episodes_csv_has_a_row_per_finished_episode(tmp_path):
    run = tmp_path / "run"
    flatrl.train(RUNS["ppo"], run)
    with open(run / "episodes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["r", "l", "t", "env_steps", "kind"]
    train = [r for r in rows if r["kind"] == "train"]
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert len(train) == last["episodes"]
    # CartPole pays 1 per step: the return is the length.
    assert all(float(r["r"]) == int(r["l"]) for r in train)
    evals = [int(r["env_steps"]) for r in rows if r["kind"] == "eval"]
    assert evals == [1_024, 1_024, 2_048, 2_048]
