"""Activation checkpointing on VGG-small (bench_train.py's net, batch 32): the
tape memory it saves and the step time it costs.

For each way of checkpointing the net, one SGD step (zero_grad, forward, loss,
backward, step) is measured for:

  saved      bytes the tape holds after the forward (tapegrad.memory_report,
             each buffer once), and the cut against no checkpointing
  peak       the backward's peak above the memory before the forward:
             predicted (memory_report) and measured (tracemalloc)
  ms/step    median and min over alternating blocks of steps (the variants take
             turns, so a burst of load from other processes hits all alike)
  time       extra step time: the median over rounds of (best step of the
             variant's block / best step of the plain block run just before)
  grads      whether every parameter's gradient is bitwise the plain step's

    python benchmarks/bench_checkpoint.py [--steps 24] [--rounds 4] [--threads N]

The machine is shared: compare the min column too, and rerun when the load
average is high.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_train as bt  # noqa: E402  (the net and its batch)

import tapegrad as tg  # noqa: E402
from tapegrad import nn, optim  # noqa: E402
from tapegrad.utils import checkpoint, checkpoint_sequential  # noqa: E402


def _blocks(model):
    """VGG-small's two conv blocks (conv BN ReLU conv BN ReLU pool) and its head."""
    layers = list(model)
    return nn.Sequential(*layers[:7]), nn.Sequential(*layers[7:14]), nn.Sequential(*layers[14:])


def forward_plain(model, x):
    return model(x)


def forward_blocks(model, x):
    b1, b2, head = _blocks(model)
    return head(checkpoint(b2, checkpoint(b1, x)))


def forward_block1(model, x):
    b1, b2, head = _blocks(model)
    return head(b2(checkpoint(b1, x)))


def forward_sequential2(model, x):
    return checkpoint_sequential(model, 2, x)


VARIANTS = {
    "none": forward_plain,
    "block 1": forward_block1,
    "blocks 1+2": forward_blocks,
    "sequential(2)": forward_sequential2,
}


class Step:
    def __init__(self, forward):
        spec, batch, in_shape = bt.NETS["vgg-small"]
        tg.manual_seed(0)
        self.model = bt.build(spec, nn)
        self.model.train()
        self.opt = optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss_fn = nn.CrossEntropyLoss()
        self.forward = forward
        rng = np.random.default_rng(0)
        self.x = tg.tensor(rng.standard_normal((batch, *in_shape), dtype=np.float32))
        self.y = tg.tensor(rng.integers(0, bt.N_CLASSES, batch))

    def loss(self):
        return self.loss_fn(self.forward(self.model, self.x), self.y)

    def __call__(self):
        self.opt.zero_grad()
        self.loss().backward()
        self.opt.step()

    def grads(self):
        """The gradients of one step from the initial weights (dropout seeded)."""
        self.opt.zero_grad()
        tg.manual_seed(1)
        self.loss().backward()
        return [p.grad.numpy().copy() for p in self.model.parameters()]

    def memory(self):
        """(saved, predicted peak, measured peak) of one step's backward, in bytes."""
        self()
        self.opt.zero_grad()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            loss = self.loss()
            rep = tg.memory_report(loss)
            tracemalloc.reset_peak()
            loss.backward()
            peak = tracemalloc.get_traced_memory()[1] - before
        finally:
            tracemalloc.stop()
        return rep.total_saved, rep.predicted_peak, peak


def time_steps(steps, n, rounds):
    """{variant: (median ms, min ms, median of per-round ratios to "none")}: the
    variants take turns, ``rounds`` blocks of steps each; a ratio compares blocks
    run back to back, so a slow spell of the machine divides out."""
    for s in steps.values():
        s()
        s()
    times = {k: [] for k in steps}
    blocks = {k: [] for k in steps}
    for _ in range(rounds):
        for k, s in steps.items():
            block = []
            for _ in range(max(1, n // rounds)):
                t0 = time.perf_counter()
                s()
                block.append(time.perf_counter() - t0)
            times[k] += block
            blocks[k].append(min(block))
    ratios = {k: statistics.median(a / b for a, b in zip(v, blocks["none"]))
              for k, v in blocks.items()}
    return {k: (1e3 * statistics.median(v), 1e3 * min(v), ratios[k]) for k, v in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=24, help="timed steps per variant")
    ap.add_argument("--rounds", type=int, default=4, help="alternating blocks")
    ap.add_argument("--threads", type=int, default=0, help="BLAS threads (threadpoolctl)")
    args = ap.parse_args(argv)
    if args.threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads, user_api="blas")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python "
          f"{platform.python_version()}, numpy {np.__version__}; load average "
          f"{os.getloadavg()[0]:.2f}")
    steps = {k: Step(f) for k, f in VARIANTS.items()}
    ref = Step(forward_plain).grads()
    same = {k: all(np.array_equal(a, b) for a, b in zip(ref, Step(f).grads()))
            for k, f in VARIANTS.items()}
    mem = {k: Step(f).memory() for k, f in VARIANTS.items()}
    timed = time_steps(steps, args.steps, args.rounds)
    mib = 2 ** 20
    base_saved = mem["none"][0]
    head = (f"{'checkpointed':<14} {'saved MiB':>9} {'cut':>6} {'peak pred':>9} "
            f"{'peak meas':>9} {'ms/step':>8} {'min ms':>7} {'time':>6}  grads")
    print(f"\nVGG-small, batch 32, float32, one SGD step ({args.steps} timed steps per "
          f"variant in {args.rounds} alternating blocks)")
    print(head)
    print("-" * len(head))
    for k in VARIANTS:
        saved, pred, peak = mem[k]
        med, best, ratio = timed[k]
        print(f"{k:<14} {saved / mib:9.2f} {1 - saved / base_saved:6.0%} {pred / mib:9.2f} "
              f"{peak / mib:9.2f} {med:8.1f} {best:7.1f} {ratio - 1:+6.0%}  "
              f"{'identical' if same[k] else 'DIFFER'}")
    print("saved: memory_report(loss).total_saved; peak: backward's peak above the memory "
          "before the forward,\npredicted by memory_report and measured by tracemalloc; "
          "time: extra step time against no checkpointing,\nthe median over rounds of "
          "(best step of the variant's block / best step of the plain block).")


if __name__ == "__main__":
    main()
