"""Python-side benchmarks of flatrl against its peers, run by `cargo xtask bench python`.

Prints one JSON line per figure on stdout:
{"bench": "python", "op": "extend"|"sample"|"vec_env_step", "obs_dim": D, "impl": I, "per_s": X}

- extend: rows/s written in batches of 256 rows (`--chunk`) until the buffer's capacity
  is filled (obs 4: 1,000,000 rows; obs 1024: 200,000 rows; obs 16384: 10,000 rows,
  1.3 GB like obs 1024's 1.6 GB); rows `obs f32[D], action, reward, terminated,
  truncated, next_obs f32[D]`; flatrl checks every float for NaN and infinities, the
  peers check nothing.
- sample: rows/s sampled uniformly in batches of 256 from the full buffer, the way a
  training loop would: flatrl into one `Batch` made by `new_batch` and reused (its numpy
  arrays view Rust memory; one call gathers every column without the GIL), cpprb and
  TorchRL into the new arrays their `sample` returns.
- vec_env_step: CartPole-v1 environment steps/s with 64 environments (one call steps all
  64), fixed actions.
- conv2d (when torch imports): torch's CPU convolution on the three Nature DQN layers,
  forward and backward, batch 32 and 256, on `--threads` threads (default 1, as
  `cargo xtask bench nn -- conv` runs rl-nn's), in GFLOP/s.

impl "ours" is flatrl ("ours_2_threads": `ReplayBuffer(threads=2)`, samples of 256 KiB or
more gathered on two threads; obs 4 samples stay on the caller); "cpprb", "torchrl" and
"envpool" are measured in the same process
when the interpreter can import them. The implementations take turns within each repeat
(so all see the same machine load) and each figure is the median of the repeats.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

CHUNK = 256
BATCH = 256
CASES = ((4, 1_000_000), (1024, 200_000), (16384, 10_000))


def emit(op: str, obs_dim: int, impl: str, per_s: float) -> None:
    print(
        json.dumps({"bench": "python", "op": op, "obs_dim": obs_dim, "impl": impl, "per_s": round(per_s, 1)}),
        flush=True,
    )


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def chunk_data(obs_dim: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "obs": rng.standard_normal((CHUNK, obs_dim), dtype=np.float32),
        "action": rng.integers(0, 2, CHUNK, dtype=np.uint32),
        "reward": rng.standard_normal(CHUNK, dtype=np.float32),
        "terminated": rng.random(CHUNK) < 0.01,
        "truncated": np.zeros(CHUNK, dtype=bool),
        "next_obs": rng.standard_normal((CHUNK, obs_dim), dtype=np.float32),
    }


class Ours:
    name = "ours"
    threads = 1

    def __init__(self, obs_dim: int, capacity: int) -> None:
        import flatrl

        schema = {
            "obs": ("float32", (obs_dim,)),
            "action": ("uint32", ()),
            "reward": ("float32", ()),
            "terminated": ("bool", ()),
            "truncated": ("bool", ()),
            "next_obs": ("float32", (obs_dim,)),
        }
        self.buffer = flatrl.ReplayBuffer(schema, capacity, threads=self.threads)
        self.batch = self.buffer.new_batch(BATCH)

    def extend(self, data) -> None:
        self.buffer.extend(data)

    def sample(self) -> None:
        self.buffer.sample(self.batch)


class OursTwoThreads(Ours):
    """flatrl with `threads=2`: samples of 256 KiB or more gathered on two threads."""

    name = "ours_2_threads"
    threads = 2


class Cpprb:
    name = "cpprb"

    def __init__(self, obs_dim: int, capacity: int) -> None:
        import cpprb

        self.buffer = cpprb.ReplayBuffer(
            capacity,
            env_dict={
                "obs": {"shape": obs_dim, "dtype": np.float32},
                "action": {"dtype": np.uint32},
                "reward": {"dtype": np.float32},
                "terminated": {"dtype": np.bool_},
                "truncated": {"dtype": np.bool_},
                "next_obs": {"shape": obs_dim, "dtype": np.float32},
            },
        )

    def extend(self, data) -> None:
        self.buffer.add(**data)

    def sample(self) -> None:
        self.buffer.sample(BATCH)


class TorchRL:
    name = "torchrl"

    def __init__(self, obs_dim: int, capacity: int) -> None:
        import torch
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage, ReplayBuffer
        from torchrl.data.replay_buffers.samplers import RandomSampler

        torch.set_num_threads(1)
        self.torch, self.TensorDict = torch, TensorDict
        self.buffer = ReplayBuffer(
            storage=LazyTensorStorage(capacity), sampler=RandomSampler(), batch_size=BATCH
        )

    def extend(self, data) -> None:
        # torch has no uint32 indexing: actions go in as int64.
        tensors = {
            k: self.torch.from_numpy(v.astype(np.int64) if v.dtype == np.uint32 else v)
            for k, v in data.items()
        }
        self.buffer.extend(self.TensorDict(tensors, batch_size=[CHUNK]))

    def sample(self) -> None:
        self.buffer.sample()


def bench_storage(makers, repeats: int) -> None:
    """Every implementation of a case is built first, then measured in turns (extend,
    then sample), so that all of them see the same machine load; medians per impl."""
    for obs_dim, capacity in CASES:
        data = chunk_data(obs_dim)
        chunks = capacity // CHUNK
        draws = {4: 4000, 1024: 400}.get(obs_dim, 40)
        impls = []
        for make in makers:
            try:
                impls.append(make(obs_dim, capacity))
            except ImportError:
                continue
        log(f"python bench: obs {obs_dim}, {capacity} rows: {[i.name for i in impls]}")

        def fill(impl):
            start = time.perf_counter()
            for _ in range(chunks):
                impl.extend(data)
            return chunks * CHUNK / (time.perf_counter() - start)

        def sample(impl):
            start = time.perf_counter()
            for _ in range(draws):
                impl.sample()
            return draws * BATCH / (time.perf_counter() - start)

        for op, run in (("extend", fill), ("sample", sample)):
            rates = {impl.name: [] for impl in impls}
            for _ in range(repeats):
                for impl in impls:
                    rates[impl.name].append(run(impl))
            for name, values in rates.items():
                emit(op, obs_dim, name, statistics.median(values))
        del impls


def bench_vec_env(repeats: int, envs: int = 64, steps: int = 2000) -> None:
    actions = np.random.default_rng(0).integers(0, 2, envs)
    runners = []
    try:
        import flatrl

        env = flatrl.make_vec("CartPole-v1", envs)
        env.reset(seed=0)
        runners.append(("ours", env.step, actions))
    except ImportError:
        pass
    try:
        import envpool

        pool = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=envs, seed=0)
        pool.reset()
        runners.append(("envpool", pool.step, actions.astype(np.int32)))
    except ImportError:
        pass
    def run(step, acts):
        start = time.perf_counter()
        for _ in range(steps):
            step(acts)
        return steps * envs / (time.perf_counter() - start)

    log(f"python bench: CartPole-v1 x {envs}: {[r[0] for r in runners]}")
    rates = {name: [] for name, _, _ in runners}
    for name, step, acts in runners:
        run(step, acts)  # warm-up
    for _ in range(repeats):
        for name, step, acts in runners:
            rates[name].append(run(step, acts))
    for name, values in rates.items():
        emit("vec_env_step", 4, name, statistics.median(values))


# The Nature DQN convolutions (`cargo xtask bench nn -- conv` times rl-nn's on the same
# shapes): name, in, out, kernel, stride, input side.
NATURE = (("nature1", 4, 32, 8, 4, 84), ("nature2", 32, 64, 4, 2, 20), ("nature3", 64, 64, 3, 1, 9))


def bench_conv(repeats: int, threads: int) -> None:
    """torch's CPU Conv2d with a fused ReLU on the Nature layers, when torch imports:
    forward, and backward (weight, bias and input gradients) counted as twice the
    forward's work, as the nn bench counts rl-nn's. One line each:
    {"bench": "python", "op": "conv2d", "impl": "torch", "layer": L, "direction": D,
    "batch": B, "threads": T, "gflops": X}; then per batch the three layers' summed work
    over their summed median times, as the nn bench's `"layer": "nature"` lines:
    direction "forward_backward" (forward and full backward of each)."""
    try:
        import torch
    except ImportError:
        log("conv2d: torch not importable, skipped")
        return
    torch.set_num_threads(threads)
    totals = {32: [0.0, 0.0], 256: [0.0, 0.0]}
    for name, cin, cout, k, s, side in NATURE:
        out = (side - k) // s + 1
        for batch in (32, 256):
            conv = torch.nn.Conv2d(cin, cout, k, stride=s)
            x = torch.randn(batch, cin, side, side, requires_grad=True)
            dy = torch.randn(batch, cout, out, out)
            flop = 2.0 * batch * out * out * cout * cin * k * k
            times = {"forward": [], "backward": []}
            for _ in range(repeats + 2):
                start = time.perf_counter()
                y = torch.relu(conv(x))
                mid = time.perf_counter()
                y.backward(dy)
                end = time.perf_counter()
                conv.zero_grad()
                x.grad = None
                times["forward"].append(mid - start)
                times["backward"].append(end - mid)
            for direction, ts in times.items():
                work = flop if direction == "forward" else 2 * flop
                totals[batch][0] += work
                totals[batch][1] += statistics.median(ts[2:])
                print(
                    json.dumps(
                        {
                            "bench": "python",
                            "op": "conv2d",
                            "impl": "torch",
                            "layer": name,
                            "direction": direction,
                            "batch": batch,
                            "threads": threads,
                            "gflops": round(work / statistics.median(ts[2:]) / 1e9, 1),
                        }
                    ),
                    flush=True,
                )
    for batch, (work, seconds) in totals.items():
        line = {
            "bench": "python",
            "op": "conv2d",
            "impl": "torch",
            "layer": "nature",
            "direction": "forward_backward",
            "batch": batch,
            "threads": threads,
            "gflops": round(work / seconds / 1e9, 1),
        }
        print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", choices=["storage", "vec_env", "conv"], default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for conv2d")
    parser.add_argument("--chunk", type=int, default=CHUNK, help="rows per extend")
    args = parser.parse_args()
    globals()["CHUNK"] = args.chunk
    if args.only in (None, "storage"):
        bench_storage([Ours, OursTwoThreads, Cpprb, TorchRL], args.repeats)
    if args.only in (None, "vec_env"):
        bench_vec_env(args.repeats)
    if args.only in (None, "conv"):
        bench_conv(max(args.repeats, 10), args.threads)


if __name__ == "__main__":
    main()
