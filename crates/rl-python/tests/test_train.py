"""Trainers from Python: flatrl.train / resume / evaluate / plan on Gymnasium envs and the
built-in ones, into the run directories of the `rl` command."""

import json
import pathlib
import tomllib

import gymnasium
import numpy as np
import pytest

import flatrl

CONFIGS = pathlib.Path(__file__).resolve().parents[3] / "configs"


def small_ppo(**run):
    return {
        "algo": "ppo",
        "env": "CartPole-v1",
        "run": {"total_steps": 1_024, "seed": 0, "n_envs": 4, **run},
        "policy": {"hidden": [16]},
        "ppo": {"n_steps": 32, "batch_size": 64, "epochs": 2},
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ppo_solves_gymnasiums_own_cartpole_within_50k_steps(tmp_path, seed):
    # Gymnasium's CartPole-v1 (the Python env), the CLI's preset config file.
    result = flatrl.train(
        CONFIGS / "ppo_cartpole.toml",
        tmp_path / "run",
        env="CartPole-v1",
        overrides=[f"run.seed={seed}", "run.total_steps=50000"],
    )
    assert result["solved"], result
    assert result["env_steps"] <= 50_000
    assert result["mean_return"] >= 475.0 and result["window"] == 20
    assert result["env"] == "CartPole-v1" and result["seed"] == seed
    run = tmp_path / "run"
    saved = tomllib.loads((run / "config.toml").read_text())
    assert saved["env"] == "CartPole-v1" and saved["run"]["seed"] == seed
    assert json.loads((run / "result.json").read_text())["env_steps"] == result["env_steps"]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines and lines[-1]["env_steps"] == result["env_steps"]
    # The saved policy keeps the pole up on fresh episodes: evaluate finds the env
    # again from the id in config.toml.
    evaluated = flatrl.evaluate(run, episodes=5)
    assert evaluated["episodes"] == 5 and evaluated["mean_return"] >= 400.0


def test_a_dict_config_and_a_factory_env_and_resume(tmp_path):
    made = []

    def factory():
        made.append(1)
        return gymnasium.make("CartPole-v1")

    config = small_ppo()
    config["env"] = "my_cartpole"
    first = flatrl.train(config, tmp_path / "run", env=factory)
    assert first["total_env_steps"] == 1_024 and first["stopped_by"] == "budget"
    # The run is named after the environment the callable makes, not the config's name.
    assert first["env"] == "CartPole-v1" and len(made) >= 5  # 4 training envs + eval
    saved = tomllib.loads((tmp_path / "run" / "config.toml").read_text())
    assert saved["env"] == "CartPole-v1"
    assert (tmp_path / "run" / "checkpoint" / "learner.safetensors").is_file()
    # resume continues the same run (the factory given again), appending metrics.
    lines_before = len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
    second = flatrl.resume(tmp_path / "run", env=factory, overrides=["run.total_steps=2048"])
    assert second["total_env_steps"] == 2_048
    lines_after = len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
    assert lines_after > lines_before
    # Without the factory the saved name is a Gymnasium id, which evaluate makes.
    assert flatrl.evaluate(tmp_path / "run", episodes=2)["episodes"] == 2


def test_env_kwargs_reach_the_constructor_and_the_run_directory(tmp_path):
    def lengths(run):
        rows = (run / "episodes.csv").read_text().splitlines()[1:]
        return [int(row.split(",")[1]) for row in rows if row.endswith(",train")]

    # gymnasium.make("CartPole-v1", max_episode_steps=12): no episode is longer.
    config = {**small_ppo(), "env_kwargs": {"max_episode_steps": 12}}
    flatrl.train(config, tmp_path / "id", env="CartPole-v1")
    assert max(lengths(tmp_path / "id")) == 12
    saved = tomllib.loads((tmp_path / "id" / "config.toml").read_text())
    assert saved["env_kwargs"] == {"max_episode_steps": 12}
    # resume and evaluate make it with them again.
    assert flatrl.resume(tmp_path / "id", overrides=["run.total_steps=2048"])["total_env_steps"] == 2_048
    assert max(lengths(tmp_path / "id")) == 12
    assert flatrl.evaluate(tmp_path / "id", episodes=2)["mean_length"] <= 12
    # A callable takes them as keyword arguments (arrays as tuples).
    seen = []

    def factory(limit, shape):
        seen.append((limit, shape))
        return gymnasium.make("CartPole-v1", max_episode_steps=limit)

    config = {**small_ppo(), "env": "c", "env_kwargs": {"limit": 7, "shape": [1, 2.5]}}
    flatrl.train(config, tmp_path / "callable", env=factory)
    assert seen[0] == (7, (1, 2.5)) and max(lengths(tmp_path / "callable")) == 7
    # A keyword the constructor does not take, a built-in env, Atari's frame skip.
    with pytest.raises(TypeError, match="no_such_kwarg"):
        flatrl.train({**small_ppo(), "env_kwargs": {"no_such_kwarg": 1}}, tmp_path / "bad", env="CartPole-v1")
    with pytest.raises(flatrl.ConfigError, match="env_kwargs.length"):
        flatrl.train({**small_ppo(), "env": "cartpole", "env_kwargs": {"length": 3}}, tmp_path / "builtin")
    assert not (tmp_path / "builtin").exists()


def test_a_callable_env_without_a_spec_is_named_by_its_class(tmp_path):
    result = flatrl.train({**small_ppo(), "env": "cartpole"}, tmp_path / "run", env=lambda: Boom(fail_at=-1))
    assert result["env"] == "Boom"
    assert json.loads((tmp_path / "run" / "result.json").read_text())["env"] == "Boom"


def test_errors_speak_python(tmp_path):
    flatrl.train(small_ppo(), tmp_path / "run")
    with pytest.raises(ValueError) as taken:
        flatrl.train(small_ppo(), tmp_path / "run")
    message = str(taken.value)
    assert f'flatrl.resume("{tmp_path / "run"}")' in message and "run_dir" in message, message
    assert "--out" not in message and "rl resume" not in message
    with pytest.raises(flatrl.ConfigError) as bad:
        flatrl.train(small_ppo(), tmp_path / "other", overrides=["run.total_steps"])
    assert str(bad.value).startswith("overrides: ") and "--set" not in str(bad.value)
    with pytest.raises(ValueError) as no_run:
        flatrl.load(tmp_path / "nothing")
    assert "--out" not in str(no_run.value) and "run_dir" in str(no_run.value)
    rb = flatrl.ReplayBuffer({"x": ("float32", ())}, 4)
    other = flatrl.ReplayBuffer({"y": ("float32", ())}, 4)
    rb.extend({"x": np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match="new_batch") as foreign:
        rb.sample(other.new_batch(2))
    assert "Batch::new" not in str(foreign.value)


def test_builtin_envs_and_off_policy_from_text(tmp_path):
    text = (CONFIGS / "sac_pendulum.toml").read_text()
    result = flatrl.train(
        text, tmp_path / "run", overrides=["run.total_steps=300", "off_policy.learning_starts=100"]
    )
    assert result["env"] == "pendulum" and result["total_env_steps"] == 300
    # Gymnasium's Pendulum (continuous actions through the bridge).
    result = flatrl.train(
        text,
        tmp_path / "gym",
        env="Pendulum-v1",
        overrides=["run.total_steps=300", "off_policy.learning_starts=100"],
    )
    assert result["env"] == "Pendulum-v1" and result["total_env_steps"] == 300
    assert (tmp_path / "gym" / "checkpoint" / "replay").is_dir()


def test_plan_prints_a_table_and_a_budget_refusal_carries_it(tmp_path):
    plan = flatrl.plan(CONFIGS / "sac_pendulum.toml")
    assert plan.total("ram") > 1_000_000 * 4 * 4  # a million rows of obs, next_obs ...
    assert "replay" in str(plan)
    with pytest.raises(flatrl.MemoryBudgetError) as refused:
        flatrl.train(
            CONFIGS / "sac_pendulum.toml", tmp_path / "run", overrides=["run.budget={ram=1000000}"]
        )
    assert refused.value.plan.total("ram") == plan.total("ram")
    assert not (tmp_path / "run").exists()  # refused before anything was created


def test_bad_configs_name_the_key(tmp_path):
    with pytest.raises(flatrl.ConfigError, match="ppo.n_stepz"):
        flatrl.train({**small_ppo(), "ppo": {"n_stepz": 3}}, tmp_path / "a")
    with pytest.raises(flatrl.ConfigError, match="run.n_envs"):
        flatrl.train(small_ppo(n_envs=0), tmp_path / "b")
    with pytest.raises(flatrl.ConfigError, match="run.seed"):
        flatrl.train(small_ppo(seed=None), tmp_path / "c")
    with pytest.raises(flatrl.ConfigError, match="NoSuchEnv-v0"):
        flatrl.train(small_ppo(), tmp_path / "d", env="NoSuchEnv-v0")
    with pytest.raises(flatrl.ConfigError, match="algo"):
        flatrl.train({**small_ppo(), "algo": "a2c"}, tmp_path / "e")
    with pytest.raises(flatrl.ConfigError, match="algo"):
        # SAC cannot train discrete CartPole.
        flatrl.train({"algo": "sac", "env": "CartPole-v1", "run": {"total_steps": 10}}, tmp_path / "f")
    with pytest.raises(FileNotFoundError):
        flatrl.train(tmp_path / "missing.toml", tmp_path / "g")
    with pytest.raises(TypeError):
        flatrl.train(42, tmp_path / "h")
    with pytest.raises(TypeError, match="callable"):
        flatrl.train(small_ppo(), tmp_path / "i", env=3.5)
    assert not any(tmp_path.iterdir())  # nothing was created
    flatrl.train(small_ppo(), tmp_path / "run")
    with pytest.raises(ValueError):
        flatrl.train(small_ppo(), tmp_path / "run")  # holds a run already


class Boom(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, fail_at):
        self.fail_at, self.steps = fail_at, 0

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.steps == self.fail_at:
            raise KeyError("boom from the env")
        return np.zeros(3, np.float32), 1.0, False, False, {}


def test_an_env_exception_reaches_the_caller_unchanged(tmp_path):
    config = {**small_ppo(), "env": "boom"}
    with pytest.raises(KeyError, match="boom from the env"):
        flatrl.train(config, tmp_path / "a", env=lambda: Boom(fail_at=50))
    calls = []

    def failing_factory():
        calls.append(1)
        if len(calls) > 2:
            raise RuntimeError("factory gave up")
        return Boom(fail_at=-1)

    with pytest.raises(RuntimeError, match="factory gave up"):
        flatrl.train(config, tmp_path / "b", env=failing_factory)


def test_spaces_the_bridge_cannot_take_raise_value_error(tmp_path):
    class DiscreteObs(Boom):
        observation_space = gymnasium.spaces.Discrete(3)

    with pytest.raises(ValueError, match="observation space"):
        flatrl.train({**small_ppo(), "env": "d"}, tmp_path / "a", env=lambda: DiscreteObs(0))


def test_the_flatrl_command_runs_gymnasium_ids_like_rl(tmp_path):
    # The `rl` command line as the console script, on a Gymnasium id named in the config.
    import subprocess
    import sys

    config = tmp_path / "ppo.toml"
    text = (CONFIGS / "ppo_cartpole.toml").read_text().replace('env = "cartpole"', 'env = "gymnasium:CartPole-v1"')
    config.write_text(text)
    run = tmp_path / "run"

    def flatrl_cmd(*args):
        return subprocess.run([sys.executable, "-m", "flatrl", *args], capture_output=True, text=True)

    out = flatrl_cmd("train", str(config), "--out", str(run), "--quiet", "--set", "run.total_steps=2048")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["env"] == "gymnasium:CartPole-v1" and result["total_env_steps"] == 2048
    out = flatrl_cmd("eval", str(run), "--episodes", "3")
    assert out.returncode == 0 and json.loads(out.stdout)["episodes"] == 3, out.stderr
    out = flatrl_cmd("resume", str(run), "--quiet", "--set", "run.total_steps=4096")
    assert out.returncode == 0 and json.loads(out.stdout)["total_env_steps"] == 4096, out.stderr
    out = flatrl_cmd("plan", str(config))
    assert out.returncode == 0 and "total: ram" in out.stdout, out.stderr
    out = flatrl_cmd("list")
    assert out.returncode == 0 and "cartpole" in out.stdout
    # A bad key is a usage error before anything runs; an unknown id says so.
    out = flatrl_cmd("train", str(config), "--out", str(tmp_path / "x"), "--set", "ppo.n_stepz=3")
    assert out.returncode == 2 and "n_stepz" in out.stderr
    config.write_text(text.replace("gymnasium:CartPole-v1", "gymnasium:NoSuchEnv-v0"))
    out = flatrl_cmd("train", str(config), "--out", str(tmp_path / "y"))
    assert out.returncode == 2 and "NoSuchEnv-v0" in out.stderr and not (tmp_path / "y").exists()


@pytest.mark.parametrize("config", sorted((CONFIGS / "mujoco").glob("*.toml")), ids=lambda p: p.stem)
def test_every_mujoco_config_trains_for_a_few_hundred_steps(tmp_path, config):
    pytest.importorskip("mujoco", reason="gymnasium[mujoco] is not installed")
    overrides = ["run.total_steps=300", "run.eval={every_steps=300,episodes=1}"]
    text = config.read_text()
    if 'algo = "ppo"' in text:
        overrides.append("ppo.n_steps=128")
    else:
        overrides.append("off_policy.learning_starts=100")
    result = flatrl.train(config, tmp_path / "run", overrides=overrides)
    assert result["total_env_steps"] >= 300 and result["env"].startswith("gymnasium:"), result
    assert result["eval_mean_return"] is not None, result
