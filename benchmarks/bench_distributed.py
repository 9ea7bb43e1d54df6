"""Data-parallel scaling on this machine: 1 rank x 1 thread vs N ranks x 1 thread.

For LeNet (batch 64 per rank, 1x28x28) and VGG-small (batch 32 per rank,
3x32x32), the nets of bench_train.py, trained with SGD-momentum steps
(zero_grad, forward, loss, backward, step) under DistributedDataParallel:

* images/s of one process (no DDP) and of N ranks (weak scaling: each rank
  keeps its batch), and the scaling efficiency ``img/s(N) / (N x img/s(1))``;
* the gradient bytes, buckets, and the time a blocking allreduce of those
  buckets takes on its own (the communication a step must pay);
* the time backward still waited for the reductions at its end (exposed; on
  the rank that got there last, so that waiting for a slower rank does not
  count), and ``hidden = 1 - exposed / allreduce``, the share of the
  communication overlapped with backward; "done early" is the share of the
  gradient bytes whose reduction had already finished when backward reached its
  end (on rank 0; less sensitive to the machine's load than the times);
* the CPU time of a step (rank 0, ``time.process_time``): what DDP adds to the
  work of a step, whatever the load (the polls sleep, so waiting costs little).

    python benchmarks/bench_distributed.py [--steps 20] [--warmup 3] [--ranks 2]
                                           [--nets lenet,vgg-small]

Every process runs with OMP_NUM_THREADS=1 (and threadpoolctl's BLAS limit of 1).
Medians over the steps; on a shared machine the numbers swing with the load
(the load average is printed before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _worker(net: str, steps: int, warmup: int, ddp: bool) -> dict:
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    import numpy as np
    from bench_train import NETS, build

    import tapegrad as tg
    import tapegrad.distributed as dist
    from tapegrad import nn, optim

    if ddp:
        dist.init_process_group("mpi")
    rank = dist.get_rank() if ddp else 0
    spec, batch, shape = NETS[net]
    tg.manual_seed(0)
    model = build(spec, nn)
    wrapped = nn.parallel.DistributedDataParallel(model) if ddp else model
    opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(rank)
    x = tg.tensor(rng.standard_normal((batch, *shape)).astype(np.float32))
    y = tg.tensor(rng.integers(0, 10, batch))
    times, cpus, waits = [], [], []
    for i in range(warmup + steps):
        if ddp:
            dist.barrier()  # each step starts together: the time is the step's, not skew
            before = wrapped.stats["wait_s"]
            if i == warmup:
                wrapped.stats.update(bytes=0, overlapped_bytes=0)
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        loss_fn(wrapped(x), y).backward()
        opt.step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if i >= warmup:
            times.append(dt)
            cpus.append(dc)
            if ddp:
                waits.append(wrapped.stats["wait_s"] - before)
    out = {"net": net, "batch": batch, "step_s": statistics.median(times),
           "min_step_s": min(times), "cpu_s": statistics.median(cpus)}
    if ddp:
        group = dist.default_group().split()
        bufs = [b.flat.copy() for b in wrapped._buckets]
        alone = []
        for _ in range(max(5, steps // 2)):
            group.barrier()
            t0 = time.perf_counter()
            for buf in bufs:
                group.allreduce(buf)
            alone.append(time.perf_counter() - t0)
        # the rank that reaches the end of backward last waits for the reductions
        # alone; the others also wait for it (load imbalance, not communication)
        exposed = min(group.allgather_object(statistics.median(waits)))
        st = wrapped.stats
        out.update(exposed_s=exposed, allreduce_s=statistics.median(alone),
                   overlapped=st["overlapped_bytes"] / max(st["bytes"], 1),
                   grad_bytes=int(sum(b.flat.nbytes for b in wrapped._buckets)),
                   buckets=len(wrapped._buckets), world=dist.get_world_size())
    return out if rank == 0 else {}


def _run(cmd, env):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--nets", default="lenet,vgg-small")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--ddp", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        got = _worker(args.worker, args.steps, args.warmup, args.ddp)
        if got:  # rank 0 reports
            print(json.dumps(got), flush=True)
        return
    from tapegrad.cli.launch import mpirun_command

    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    me = [sys.executable, os.path.abspath(__file__), "--steps", str(args.steps),
          "--warmup", str(args.warmup)]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"load average before: {os.getloadavg()[0]:.2f}")
    rows = []
    for net in args.nets.split(","):
        one = _run([*me, "--worker", net], env)
        many = _run(mpirun_command(args.ranks, [*me, "--worker", net, "--ddp"]), env)
        rows.append((net, one, many))
    n = args.ranks
    print(f"\n1 rank x 1 thread vs {n} ranks x 1 thread (per-rank batch kept; medians of "
          f"{args.steps} steps)")
    head = (f"{'net':10} {'batch':>5} {'1-rank img/s':>12} {f'{n}-rank img/s':>12} "
            f"{'efficiency':>10} {'grad MB':>8} {'buckets':>7} {'allreduce ms':>12} "
            f"{'exposed ms':>10} {'hidden':>6} {'done early':>10} {'step ms 1/N':>12} "
            f"{'cpu ms 1/N':>12}")
    print(head)
    print("-" * len(head))
    for net, one, many in rows:
        ips1 = one["batch"] / one["step_s"]
        ipsn = n * many["batch"] / many["step_s"]
        hidden = max(0.0, 1 - many["exposed_s"] / many["allreduce_s"])
        print(f"{net:10} {one['batch']:5d} {ips1:12.0f} {ipsn:12.0f} {ipsn / (n * ips1):10.2f} "
              f"{many['grad_bytes'] / 1e6:8.2f} {many['buckets']:7d} "
              f"{1e3 * many['allreduce_s']:12.2f} {1e3 * many['exposed_s']:10.2f} "
              f"{hidden:6.0%} {many['overlapped']:10.0%} "
              f"{1e3 * one['step_s']:5.1f}/{1e3 * many['step_s']:5.1f} "
              f"{1e3 * one['cpu_s']:5.1f}/{1e3 * many['cpu_s']:5.1f}")
    print(f"\nload average after: {os.getloadavg()[0]:.2f} (a shared machine: compare runs "
          "made in one sitting)")


if __name__ == "__main__":
    main()
