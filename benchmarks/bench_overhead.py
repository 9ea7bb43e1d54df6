"""Per-op overhead of the tape: a chain of ``y = y * 1.01 + 0.1`` steps on a
16-element float32 tensor, then ``y.sum().backward()``.

Reports microseconds per op (forward + backward, median of repeats) for
tapegrad and, in the same run when it is installed, PyTorch.

    python benchmarks/bench_overhead.py [--repeats 200]
"""

from __future__ import annotations

import argparse
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


def us_per_op(run, n_ops, repeats):
    for _ in range(5):
        run()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / n_ops * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    try:
        import torch

        torch.set_num_threads(1)
        torch_version = torch.__version__
    except ImportError:
        torch = None
    print(f"machine: {platform.machine()} {platform.processor() or ''}, "
          f"python {platform.python_version()}, numpy {np.__version__}, "
          f"torch {torch_version if torch else 'not installed'}")
    print(f"{'chain':>10} {'ops':>6} {'tapegrad us/op':>15} {'torch us/op':>12} {'ratio':>7}")
    for steps in (100, 1000):
        n_ops = 2 * steps + 2  # mul and add per step, then sum and backward's seed
        reps = args.repeats if steps == 100 else max(args.repeats // 10, 5)
        ours = us_per_op(chain_tapegrad(steps), 2 * steps, reps)
        theirs = us_per_op(chain_torch(steps), 2 * steps, reps) if torch else float("nan")
        print(f"{steps:>10} {n_ops:>6} {ours:>15.2f} {theirs:>12.2f} {ours / theirs:>7.2f}")


if __name__ == "__main__":
    main()
