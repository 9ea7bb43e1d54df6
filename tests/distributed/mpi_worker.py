"""What each rank of the tests' ``mpirun`` jobs runs: ``mpi_worker.py MODE ARGS``."""

from __future__ import annotations

import sys
import time

import numpy as np

import tapegrad as tg
import tapegrad.distributed as dist
from tapegrad import nn, optim


def model_and_data(dtype, seed=0, n=32):
    """The equivalence model (conv, BN, linear, BN1d) and ``n`` fixed samples."""
    tg.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(4 * 3 * 3, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3))
    model.to(dtype=dtype)
    rng = np.random.default_rng(seed + 1)
    x = rng.standard_normal((n, 2, 6, 6)).astype(dtype) * 2 + 0.5
    y = rng.integers(0, 3, n)
    return model, x, y


def train(model, shards, steps, micro, world, total):
    """``steps`` SGD-momentum steps; ``shards[k]`` = this rank's (x, y) of micro-batch k.
    The loss is this rank's sum over ``world / total`` so that DDP's average over the
    ranks is the mean over the global batch, whatever the per-rank sizes."""
    ddp = model if isinstance(model, nn.parallel.DistributedDataParallel) else None
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ce = nn.CrossEntropyLoss(reduction="sum")
    for _ in range(steps):
        opt.zero_grad()
        for k, (x, y) in enumerate(shards):
            def step(x=x, y=y):
                loss = ce(model(tg.tensor(x)), tg.tensor(y)) * (world / total)
                loss.backward()
            if ddp is not None and k < micro - 1:
                with ddp.no_sync():
                    step()
            else:
                step()
        opt.step()


def state(module):
    return {k: v.numpy() for k, v in module.state_dict().items()}


def split(n, world, sizes):
    """Per-rank sample counts: equal, or the unequal ones given."""
    return [n // world] * world if sizes is None else sizes


def equiv(dtype_name, micro, out, sizes=None):
    dtype = np.dtype(dtype_name)
    micro = int(micro)
    dist.init_process_group("mpi")
    r, w = dist.get_rank(), dist.get_world_size()
    model, x, y = model_and_data(dtype)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.0005)  # several buckets
    counts = [int(s) for s in sizes.split(",")] if sizes else None
    shards = []
    per_micro = len(x) // micro
    for k in range(micro):
        xs, ys = x[k * per_micro:(k + 1) * per_micro], y[k * per_micro:(k + 1) * per_micro]
        c = split(per_micro, w, counts)
        lo = sum(c[:r])
        shards.append((xs[lo:lo + c[r]], ys[lo:lo + c[r]]))
    train(ddp, shards, 5, micro, w, per_micro)
    mine = state(ddp.module)
    every = ddp.process_group.allgather_object(mine)
    if r == 0:
        same = all(np.array_equal(every[0][k], e[k]) for e in every for k in mine)
        np.savez(out, same_on_all_ranks=same, **mine)


def reference(dtype_name, micro):
    """The single-process run the distributed one must equal."""
    dtype = np.dtype(dtype_name)
    micro = int(micro)
    model, x, y = model_and_data(dtype)
    per_micro = len(x) // micro
    shards = [(x[k * per_micro:(k + 1) * per_micro], y[k * per_micro:(k + 1) * per_micro])
              for k in range(micro)]
    train(model, shards, 5, micro, 1, per_micro)
    return state(model)


def raise_on_rank1():
    dist.init_process_group("mpi")
    dist.barrier()
    if dist.get_rank() == 1:
        time.sleep(0.2)
        raise RuntimeError("boom on purpose")
    t = tg.ones(3)
    dist.all_reduce(t)  # rank 1 never comes: without the abort this would hang
    print("rank 0 should not get here", flush=True)


def mismatch():
    dist.init_process_group("mpi")
    width = 4 if dist.get_rank() == 0 else 3
    model = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, width))
    nn.parallel.DistributedDataParallel(model)


def timeout():
    dist.init_process_group("mpi", timeout=2)
    other = dist.default_group().split()
    other.timeout = 30  # rank 0's all_reduce times out first: its census is the report
    if dist.get_rank() == 0:
        dist.all_reduce(tg.ones(2))  # rank 1 waits in a barrier of another group instead
    else:
        dist.barrier(other)


def silent():
    dist.init_process_group("mpi", timeout=1.5)
    if dist.get_rank() == 0:
        dist.all_reduce(tg.ones(2))
    else:
        time.sleep(8)  # computing: answers no census


def unused(out):
    """Rank 1 does not use the second head; its gradient is still averaged; the
    third head is used by no rank and keeps .grad None."""
    dist.init_process_group("mpi")
    r = dist.get_rank()
    tg.manual_seed(r)  # different weights per rank: DDP broadcasts rank 0's
    body, head1, head2, head3 = nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(4, 2), \
        nn.Linear(4, 2)
    model = nn.ModuleList([body, head1, head2, head3])

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            h = body(x)
            out = head1(h).sum()
            if r == 0:
                out = out + head2(h).sum() * 3
            return out

    ddp = nn.parallel.DistributedDataParallel(Net(), find_unused_parameters=True)
    x = tg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) + r)
    ddp(x).backward()
    grads = {k: (np.full(1, np.nan) if p.grad is None else p.grad.numpy())
             for k, p in ddp.module.named_parameters()}
    weights = [p.numpy() for p in ddp.module.parameters()]
    every = dist.default_group().allgather_object(weights)
    same = all(np.array_equal(a, b) for e in every for a, b in zip(e, every[0]))
    tg.manual_seed(0)
    rank0 = [p.numpy() for p in nn.Linear(3, 4).parameters()]
    if r == 0:
        np.savez(out, same_weights=same,
                 rank0_weights=all(np.array_equal(a, b) for a, b in zip(weights, rank0)),
                 **grads)


def collectives(out):
    """Each collective's result on rank 0 (and whether every rank agrees)."""
    dist.init_process_group("mpi")
    r, w = dist.get_rank(), dist.get_world_size()
    res = {}
    for op in ("sum", "mean", "max", "min", "product"):
        t = tg.tensor([1.0, -2.0, 3.0]) * (r + 2)
        dist.all_reduce(t, op=op)
        res[op] = t.numpy()
    i = tg.tensor(np.array([r + 1, 10], np.int64))
    dist.all_reduce(i, op=dist.ReduceOp.SUM)
    res["int_sum"] = i.numpy()
    h = tg.tensor(np.array([0.5, 1.5], np.float16) * (r + 1))
    dist.all_reduce(h)
    res["half_sum"] = h.numpy()
    b = tg.tensor(np.arange(4.0) + 10 * r)
    dist.broadcast(b, src=w - 1)
    res["broadcast"] = b.numpy()
    parts = [tg.zeros(2, 2) for _ in range(w)]
    dist.all_gather(parts, tg.full((2, 2), float(r)))
    res["all_gather"] = np.stack([p.numpy() for p in parts])
    work = dist.all_reduce(tg.ones(3), async_op=True)
    work.wait()
    objs = [None] * w
    dist.all_gather_object(objs, {"rank": r})
    res["objects"] = np.array([o["rank"] for o in objs])
    lst = [f"from {r}"]
    dist.broadcast_object_list(lst, src=1)
    res["bcast_object"] = np.array(lst)
    dist.barrier()
    every = dist.default_group().allgather_object({k: v.tolist() for k, v in res.items()})
    if r == 0:
        np.savez(out, same_on_all_ranks=all(e == every[0] for e in every), world=w, **res)


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    {"equiv": equiv, "raise": raise_on_rank1, "mismatch": mismatch, "timeout": timeout,
     "silent": silent, "unused": unused, "collectives": collectives}[mode](*rest)
