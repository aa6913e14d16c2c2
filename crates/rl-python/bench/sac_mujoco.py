"""SAC on a MuJoCo task, flatrl beside Stable-Baselines3 with the same settings, for the
issue-26 side-by-side figure (README, Benchmarks: MuJoCo).

Both run `configs/mujoco/sac_halfcheetah.toml`'s settings (SB3's SAC defaults: 256-256
ReLU actor and twin critics, batch 256, lr 3e-4, one gradient step per env step,
automatic entropy) for the same env steps, with the same random warm-up
(`--learning-starts`, 1 000 by default so that most steps learn; the zoo's 10 000
would make a 10 000-step run all warm-up) and no evaluation. Env steps/s include the
environment; both clocks run from before the environment is made to the end of training
(the modules are imported before), as `flatrl.train` cannot be timed otherwise. `--impl both` runs flatrl, then SB3, in one process: the interpreter needs
the flatrl wheel, torch, stable-baselines3 and gymnasium[mujoco] (a bench virtualenv,
never the CI one):

    python crates/rl-python/bench/sac_mujoco.py --impl both --steps 10000 --threads 1

Prints one JSON line per implementation: {"bench": "sac_mujoco", "impl": ...,
"env": ..., "threads": T, "env_steps": N, "learning_starts": L, "wall_s": X,
"env_steps_per_s": Y}, and for `both` a last line with the ratio.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time

CONFIGS = pathlib.Path(__file__).resolve().parents[3] / "configs" / "mujoco"


def run_flatrl(env: str, steps: int, threads: int, learning_starts: int) -> float:
    import gymnasium  # noqa: F401  (imported before the clock, as for SB3)

    import flatrl

    name = env.split("-")[0].lower()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        flatrl.train(
            CONFIGS / f"sac_{name}.toml",
            pathlib.Path(tmp) / "run",
            overrides=[
                f"run.total_steps={steps}",
                f"run.threads={threads}",
                f"off_policy.learning_starts={learning_starts}",
                "run.eval={every_steps=1000000000, episodes=1}",
            ],
        )
        return time.perf_counter() - start


def run_sb3(env: str, steps: int, threads: int, learning_starts: int) -> float:
    import gymnasium
    import torch
    from stable_baselines3 import SAC

    torch.set_num_threads(threads)
    start = time.perf_counter()
    model = SAC(
        "MlpPolicy",
        gymnasium.make(env),
        learning_starts=learning_starts,
        seed=0,
        device="cpu",
        verbose=0,
    )
    model.learn(total_timesteps=steps)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--impl", choices=["flatrl", "sb3", "both"], required=True)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--learning-starts", type=int, default=1_000)
    args = parser.parse_args()
    impls = ["flatrl", "sb3"] if args.impl == "both" else [args.impl]
    rates = {}
    for impl in impls:
        run = run_flatrl if impl == "flatrl" else run_sb3
        wall = run(args.env, args.steps, args.threads, args.learning_starts)
        rates[impl] = args.steps / wall
        print(
            json.dumps(
                {
                    "bench": "sac_mujoco",
                    "impl": impl,
                    "env": args.env,
                    "threads": args.threads,
                    "env_steps": args.steps,
                    "learning_starts": args.learning_starts,
                    "wall_s": round(wall, 3),
                    "env_steps_per_s": round(rates[impl], 1),
                }
            ),
            flush=True,
        )
    if len(rates) == 2:
        print(json.dumps({"bench": "sac_mujoco", "ratio_flatrl_over_sb3": round(rates["flatrl"] / rates["sb3"], 2)}))


if __name__ == "__main__":
    main()
