"""Stable-Baselines3's SAC on Pendulum-v1 with its defaults, for the side-by-side figure
of `sac_pendulum --preset sb3` (README, rl-algos: SAC).

Run with a bench virtualenv that has torch and stable-baselines3 (never the CI venv):

    python crates/rl-python/bench/sb3_sac_pendulum.py --steps 3000 --threads 1

Prints one JSON line: {"bench": "sac_pendulum", "impl": "sb3", "threads": T,
"env_steps": N, "wall_s": X, "env_steps_per_s": Y}. SB3's defaults are those of
`--preset sb3`: 256-256 ReLU actor and critics, batch 256, learning rate 3e-4, buffer
1 000 000, 100 random steps, one gradient step per env step, automatic entropy.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3000, help="env steps to take")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env", default="Pendulum-v1", help="Gymnasium id (HalfCheetah-v5 for the MuJoCo figure)")
    parser.add_argument("--learning-starts", type=int, default=100, help="random steps first (rl-zoo MuJoCo: 10000)")
    args = parser.parse_args()

    import torch
    from stable_baselines3 import SAC

    torch.set_num_threads(args.threads)
    model = SAC(
        "MlpPolicy",
        args.env,
        learning_starts=args.learning_starts,
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=args.steps)
    wall = time.perf_counter() - start
    print(
        json.dumps(
            {
                "bench": "sac_pendulum" if args.env == "Pendulum-v1" else "sac_gym",
                "impl": "sb3",
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
