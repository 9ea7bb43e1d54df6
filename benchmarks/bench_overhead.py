"""Per-op overhead of the tape: a chain of ``y = y * 1.01 + 0.1`` steps on a
16-element float32 tensor, then ``y.sum().backward()``.

Reports microseconds per op (forward + backward, median of repeats) for
tapegrad and, in the same run when it is installed, PyTorch.

    python benchmarks/bench_overhead.py [--repeats 200]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

import tapegrad as tg


def chain_tapegrad(n_steps):
    x = tg.tensor(np.linspace(0, 1, 16, dtype=np.float32), requires_grad=True)

    def run():
        y = x
        for _ in range(n_steps):
            y = y * 1.01 + 0.1
        y.sum().backward()
        x.grad = None

    return run


def chain_torch(n_steps):
    import torch

    x = torch.linspace(0, 1, 16, dtype=torch.float32, requires_grad=True)

    def run():
        y = x
        for _ in range(n_steps):
            y = y * 1.01 + 0.1
        y.sum().backward()
        x.grad = None

    return run


def time_runs(run, repeats):
    for _ in range(3):
        run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return times


def alternate(runs, repeats, blocks=5):
    """Time each run in turn, ``blocks`` times, so that load on the shared
    machine hits both columns alike; returns (median, min) seconds per run."""
    times = {k: [] for k in runs}
    for _ in range(blocks):
        for k, run in runs.items():
            times[k] += time_runs(run, max(repeats // blocks, 3))
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch = None
    peer = f"{torch_version} ({torch.get_num_threads()} threads)" if torch else "not installed"
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}, numpy {np.__version__}, torch {peer}")
    print("us per op = (forward + backward time) / (2 ops per step); median [min] of "
          "alternating blocks")
    print(f"{'chain':>6} {'ops':>6} {'tapegrad us/op':>16} {'torch us/op':>16} {'ratio':>12}")
    for steps in (100, 1000):
        n_ops = 2 * steps
        runs = {"tapegrad": chain_tapegrad(steps)}
        if torch:
            runs["torch"] = chain_torch(steps)
        reps = args.repeats if steps == 100 else max(args.repeats // 10, 10)
        res = {k: (med / n_ops * 1e6, best / n_ops * 1e6)
               for k, (med, best) in alternate(runs, reps).items()}
        ours = res["tapegrad"]
        theirs = res.get("torch", (float("nan"), float("nan")))
        print(f"{steps:>6} {n_ops:>6} {ours[0]:>8.2f} [{ours[1]:>5.2f}] "
              f"{theirs[0]:>8.2f} [{theirs[1]:>5.2f}] {ours[0] / theirs[0]:>5.2f} "
              f"[{ours[1] / theirs[1]:.2f}]")


if __name__ == "__main__":
    main()
