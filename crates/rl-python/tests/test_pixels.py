"""Frames of bytes from Gymnasium envs: carried as uint8 through the bridge (images laid
out channels first for the convolutions), trained by PPO and DQN with a convolutional
encoder, refused with a clear error for an MLP; Atari games through ale-py with the
preprocessing in Rust (skipped where ale-py is not installed)."""

import json
import pathlib
import tomllib

import gymnasium
import numpy as np
import pytest

import flatrl

CONFIGS = pathlib.Path(__file__).resolve().parents[3] / "configs"


class PyCatch(gymnasium.Env):
    """bsuite's Catch as (10, 5, 1) uint8 frames, channels last like most image envs."""

    observation_space = gymnasium.spaces.Box(0, 255, (10, 5, 1), np.uint8)
    action_space = gymnasium.spaces.Discrete(3)

    def __init__(self):
        self.rng = np.random.default_rng(0)
        self.frames = []

    def _frame(self):
        frame = np.zeros((10, 5, 1), np.uint8)
        frame[self.ball_row, self.ball_col, 0] = 255
        frame[9, self.paddle, 0] = 255
        self.frames.append(frame)
        return frame

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.ball_row, self.ball_col, self.paddle = 0, int(self.rng.integers(5)), 2
        return self._frame(), {}

    def step(self, action):
        self.paddle = min(4, max(0, self.paddle + int(action) - 1))
        self.ball_row += 1
        done = self.ball_row == 9
        reward = (1.0 if self.paddle == self.ball_col else -1.0) if done else 0.0
        return self._frame(), reward, done, False, {}


@pytest.mark.parametrize("config", ["ppo_catch.toml", "dqn_catch.toml"])
def test_pixel_envs_train_with_a_cnn_and_reach_the_goal(tmp_path, config):
    result = flatrl.train(CONFIGS / config, tmp_path / "run", env=PyCatch)
    assert result["solved"], result
    # The policy acts on the frames as the env draws them (channels last, transposed).
    evaluated = flatrl.evaluate(tmp_path / "run", env=PyCatch, episodes=10)
    assert evaluated["mean_return"] >= 0.8, evaluated


def test_pixel_envs_with_an_mlp_are_config_errors(tmp_path):
    with pytest.raises(flatrl.ConfigError, match="policy.encoder.*small_cnn"):
        flatrl.train(
            CONFIGS / "ppo_catch.toml",
            tmp_path / "run",
            env=PyCatch,
            overrides=['policy.encoder="mlp"'],
        )
    assert not (tmp_path / "run" / "checkpoint").exists()


def test_atari_through_ale_py_with_the_preprocessing_in_rust(tmp_path):
    pytest.importorskip("ale_py", reason="ale-py is not installed")
    plan = flatrl.plan(CONFIGS / "ppo_atari.toml", env="ALE/Pong-v5")
    assert "rollout/obs" in str(plan)
    result = flatrl.train(
        CONFIGS / "ppo_atari.toml",
        tmp_path / "run",
        env="ALE/Pong-v5",
        overrides=["run.total_steps=512", "run.n_envs=2", "ppo.n_steps=128"],
    )
    assert result["env"] == "ALE/Pong-v5" and result["total_env_steps"] == 512, result


def test_an_ale_game_steps_through_ale_calls_and_learns_what_env_step_gives(tmp_path, monkeypatch):
    """A game `gymnasium.make` built is stepped with ALE's own calls (no `AtariEnv.step`
    after the first reset, and no screen for the frames a skip does not look at): the
    run learns the same numbers as one whose game goes through `env.step` (the fast path
    turned off by hiding the class's module)."""
    pytest.importorskip("ale_py", reason="ale-py is not installed")
    import ale_py.env

    calls = []
    step = ale_py.env.AtariEnv.step
    monkeypatch.setattr(ale_py.env.AtariEnv, "step", lambda env, a: calls.append(a) or step(env, a))
    # Frames are read as palette indices, coloured with the palette learned from the few
    # read in RGB too.
    screens = {"getScreen": 0, "getScreenRGB": 0}

    def counted(name):
        method = getattr(ale_py.ALEInterface, name)

        def call(ale, *args):
            screens[name] += 1
            return method(ale, *args)

        monkeypatch.setattr(ale_py.ALEInterface, name, call)

    counted("getScreen")
    counted("getScreenRGB")
    overrides = ["run.total_steps=256", "run.n_envs=2", "ppo.n_steps=64", "ppo.batch_size=64"]

    def metrics(name):
        flatrl.train(CONFIGS / "ppo_atari.toml", tmp_path / name, env="ALE/Pong-v5", overrides=overrides)
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        varying = {"wall_s", "env_steps_per_s", "rss_bytes", "planned_bytes"}  # measured
        return [{k: v for k, v in json.loads(line).items() if k not in varying} for line in lines]

    direct = metrics("direct")
    assert calls == [], f"{len(calls)} frames went through AtariEnv.step"
    assert screens["getScreen"] > 400, screens
    assert screens["getScreenRGB"] < screens["getScreen"] / 10, screens
    monkeypatch.setattr(ale_py.env.AtariEnv, "__module__", "not_ale_py")
    through_step = metrics("env_step")
    # 256 agent steps of 4 frames (fewer where a life or a game ends), and the no-ops.
    assert len(calls) > 900, len(calls)
    assert direct == through_step


def test_atari_makes_no_game_it_does_not_play(tmp_path, monkeypatch):
    """Making an ALE game takes 0.15 s: the game that read the spaces and the one that
    checked lives and FIRE become training games, so a run makes only its training
    games and its evaluation game."""
    pytest.importorskip("ale_py", reason="ale-py is not installed")
    import ale_py.env

    made = []
    init = ale_py.env.AtariEnv.__init__
    monkeypatch.setattr(
        ale_py.env.AtariEnv, "__init__", lambda env, *a, **k: made.append(1) or init(env, *a, **k)
    )
    overrides = ["run.total_steps=128", "run.n_envs=2", "ppo.n_steps=64", "ppo.batch_size=64"]
    flatrl.train(CONFIGS / "ppo_atari.toml", tmp_path / "run", env="ALE/Pong-v5", overrides=overrides)
    assert len(made) == 2 + 1, f"{len(made)} games made for 2 training games and 1 evaluation game"


def test_dqn_atari_stores_each_frame_once_in_a_memmap_file(tmp_path):
    pytest.importorskip("ale_py", reason="ale-py is not installed")
    # The shipped config: a 1M-transition replay under 8 GB of file, RAM under 1 GiB.
    plan = flatrl.plan(CONFIGS / "dqn_atari.toml", env="ALE/Pong-v5")
    assert plan.total("file") <= 8_000_000_000, str(plan)
    assert plan.total("ram") <= 1 << 30, str(plan)
    obs = [line for line in plan.lines if line[0] == "replay/obs"]
    assert obs and obs[0][1] == "file" and obs[0][2] < 1_000_000 * 7_056 * 1.01, obs
    # A short run: the file in the run directory, one 84x84 frame per row, resumable.
    overrides = [
        "run.total_steps=600",
        "off_policy.buffer_capacity=2000",
        "off_policy.learning_starts=300",
    ]
    result = flatrl.train(
        CONFIGS / "dqn_atari.toml", tmp_path / "run", env="ALE/Pong-v5", overrides=overrides
    )
    assert result["total_env_steps"] == 600, result
    replay = tmp_path / "run" / "replay_file" / "replay.rlmm"
    assert replay.exists()
    # One 84x84 frame per row: 2 000 rows of whole stacked obs + next_obs would be 113 MB.
    assert replay.stat().st_size < 2000 * 84 * 84 * 1.2, replay.stat().st_size
    resumed = flatrl.resume(tmp_path / "run", overrides=["run.total_steps=800"])
    assert resumed["total_env_steps"] == 800, resumed


def test_atari_life_loss_ends_training_episodes_not_games(tmp_path):
    pytest.importorskip("ale_py", reason="ale-py is not installed")

    def training_returns(life_loss):
        run = tmp_path / life_loss
        overrides = [
            "run.total_steps=1500",
            "run.goal={training_return={mean_return=1000.0,window=20}}",
            "off_policy.buffer_capacity=2000",
            "off_policy.learning_starts=1000",
            f'atari.life_loss="{life_loss}"',
        ]
        flatrl.train(CONFIGS / "dqn_atari.toml", run, env="ALE/Breakout-v5", overrides=overrides)
        saved = tomllib.loads((run / "config.toml").read_text())
        assert saved["atari"]["life_loss"] == life_loss and saved["atari"]["frame_skip"] == 4
        rows = (run / "episodes.csv").read_text().splitlines()[1:]
        return [float(row.split(",")[0]) for row in rows if row.endswith(",train")]

    # Breakout gives 5 lives: ending an episode at each lost life (SB3's AtariWrapper,
    # CleanRL's EpisodicLifeEnv) makes about five episodes of each game.
    games = training_returns("continue")
    lives = training_returns("terminate")
    assert len(games) >= 2, games
    assert len(lives) >= 4 * len(games), (len(lives), len(games))
    # FIRE after resets needs a game whose action 1 is FIRE (Freeway's are NOOP, UP, DOWN).
    with pytest.raises(flatrl.ConfigError, match="fire_reset"):
        flatrl.plan(CONFIGS / "dqn_atari.toml", env="ALE/Freeway-v5")
    assert "replay/obs" in str(
        flatrl.plan(CONFIGS / "dqn_atari.toml", env="ALE/Freeway-v5", overrides=["atari.fire_reset=false"])
    )
    # Other environments refuse the table (it would do nothing).
    with pytest.raises(flatrl.ConfigError, match="atari"):
        flatrl.train(
            CONFIGS / "ppo_cartpole.toml",
            tmp_path / "cartpole",
            env="CartPole-v1",
            overrides=['atari.life_loss="terminate"'],
        )
    assert not (tmp_path / "cartpole").exists()
