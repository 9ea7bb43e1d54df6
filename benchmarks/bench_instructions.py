"""Instructions per op of bench_overhead's chain (``y = y * 1.01 + 0.1``, then
``y.sum().backward()``), counted by valgrind's callgrind: a deterministic
measure for changes to the per-op path, where wall-clock times on a shared
machine swing more than the change being measured.

    python benchmarks/bench_instructions.py [--steps 5000] [--torch]

Each library runs in a child process under callgrind twice, with no steps and
with ``--steps`` steps (in chains of 1000), and the difference is divided by the
number of ops (2 per step). BLAS threads are pinned to one, hashing is seeded
and address randomisation is off (``setarch -R``), so a tree gives the same count
every run. It counts instructions, not time: NumPy's share of an op and
PyTorch's C++ execute at other rates than the interpreter, so compare counts of
one library before and after a change, and times (bench_overhead.py) across
libraries. Needs ``valgrind`` (Debian: ``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys

CHAIN = 1000


def child(lib, steps):
    if lib == "torch":
        import torch

        x = torch.linspace(0, 1, 16, dtype=torch.float32, requires_grad=True)
    else:
        import numpy as np

        import tapegrad as tg

        x = tg.tensor(np.linspace(0, 1, 16, dtype=np.float32), requires_grad=True)

    def run(n):
        y = x
        for _ in range(n):
            y = y * 1.01 + 0.1
        y.sum().backward()
        x.grad = None

    run(10)  # first-call costs (imports inside ops, caches) are not per-op costs
    for _ in range(steps // CHAIN):
        run(CHAIN)


def count(lib, steps):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           sys.executable, __file__, "--child", lib, str(steps)]
    if shutil.which("setarch"):
        cmd = ["setarch", "-R", *cmd]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5000, help="a multiple of 1000")
    ap.add_argument("--torch", action="store_true", help="also count PyTorch (minutes)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    if not shutil.which("valgrind"):
        sys.exit("bench_instructions: valgrind is not installed (apt-get install valgrind)")
    steps = max(args.steps // CHAIN, 1) * CHAIN
    print(f"callgrind instructions per op (fwd + bwd), chains of {CHAIN}, {steps} steps")
    for lib in ("tapegrad", "torch") if args.torch else ("tapegrad",):
        per_op = (count(lib, steps) - count(lib, 0)) / (2 * steps)
        print(f"{lib:>9} {per_op:10.0f}")


if __name__ == "__main__":
    main()
