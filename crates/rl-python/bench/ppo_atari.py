"""PPO on an Atari game from pixels, flatrl beside Stable-Baselines3's PPO("CnnPolicy")
with the same settings (CleanRL's ppo_atari: 8 envs x 128 steps, 4 epochs of 256-row
minibatches, clip 0.1, lr 2.5e-4, entropy 0.01, the Nature CNN on 4 stacked 84x84
grayscale frames, frame skip 4 with max-pooling, up to 30 no-ops, clipped rewards), for
the issue-25 side-by-side figure. Env steps/s include the environment.

    # flatrl, from an interpreter with the flatrl wheel and ale-py (the CI venv):
    python crates/rl-python/bench/ppo_atari.py --impl flatrl --steps 20000
    # SB3, from a bench virtualenv with torch, stable-baselines3 and ale-py (never CI):
    python crates/rl-python/bench/ppo_atari.py --impl sb3 --steps 20000 --threads 1

Prints one JSON line: {"bench": "ppo_atari", "impl": ..., "env": ..., "threads": T,
"env_steps": N, "wall_s": X, "env_steps_per_s": Y}. Both clocks run from before the
environments are made to the end of training (environments, networks and learning; the
modules are imported before), as `flatrl.train` cannot be timed otherwise. Both end a
training episode at a
lost life and press FIRE after resets (SB3's AtariWrapper; the config's `[atari]`), and
both share one CNN torso between the actor and critic heads.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time

CONFIG = pathlib.Path(__file__).resolve().parents[3] / "configs" / "ppo_atari.toml"


def run_flatrl(env: str, steps: int, threads: int) -> float:
    import ale_py  # noqa: F401  (imported before the clock, as for SB3)
    import gymnasium  # noqa: F401

    import flatrl

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        flatrl.train(
            CONFIG,
            pathlib.Path(tmp) / "run",
            env=env,
            overrides=[f"run.total_steps={steps}", f"run.threads={threads}"],
        )
        return time.perf_counter() - start


def run_sb3(env: str, steps: int, threads: int) -> float:
    import ale_py
    import gymnasium
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gymnasium.register_envs(ale_py)
    torch.set_num_threads(threads)
    start = time.perf_counter()
    envs = VecFrameStack(
        make_atari_env(
            env,
            n_envs=8,
            seed=0,
            # ppo_atari.toml's: no sticky actions (CleanRL's NoFrameskip-v4 games).
            env_kwargs={"frameskip": 1, "repeat_action_probability": 0.0},
        ),
        n_stack=4,
    )
    model = PPO(
        "CnnPolicy",
        envs,
        n_steps=128,
        n_epochs=4,
        batch_size=256,
        learning_rate=2.5e-4,
        clip_range=0.1,
        ent_coef=0.01,
        vf_coef=0.5,
        max_grad_norm=0.5,
        device="cpu",
        seed=0,
        verbose=0,
    )
    model.learn(total_timesteps=steps)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--impl", choices=["flatrl", "sb3"], required=True)
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--steps", type=int, default=20_000, help="agent steps (8 envs together)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    run = run_flatrl if args.impl == "flatrl" else run_sb3
    wall = run(args.env, args.steps, args.threads)
    print(
        json.dumps(
            {
                "bench": "ppo_atari",
                "impl": args.impl,
                "env": args.env,
                "threads": args.threads,
                "env_steps": args.steps,
                "wall_s": round(wall, 3),
                "env_steps_per_s": round(args.steps / wall, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
