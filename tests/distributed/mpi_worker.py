"""What each rank of the tests' ``mpirun`` jobs runs: ``mpi_worker.py MODE ARGS``."""

from __future__ import annotations

import gc
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


def deadlock():
    dist.init_process_group("mpi", timeout=60)
    other = dist.default_group().split()
    if dist.get_rank() == 0:
        dist.all_reduce(tg.ones(2))  # rank 1 waits in a barrier of another group instead
    else:
        dist.barrier(other)


def timeout():
    """3 ranks, no deadlock: rank 2 computes (it might still come), so rank 0's
    all_reduce waits to its timeout and names where the others are."""
    dist.init_process_group("mpi", timeout=2)
    other = dist.default_group().split()
    other.timeout = 30  # rank 0's all_reduce times out first: its census is the report
    r = dist.get_rank()
    if r == 0:
        work = dist.all_reduce(tg.ones(2), group=other, async_op=True)  # started, not waited
        dist.all_reduce(tg.ones(2))
        work.wait()
    elif r == 1:
        dist.all_reduce(tg.ones(2), group=other)  # waits for rank 2 only
    else:
        time.sleep(8)  # computing: answers no census


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
    # DDP's own communicator goes with the wrapper; the next wrapper gets a new one
    comm = ddp._comm
    del ddp
    gc.collect()
    from mpi4py import MPI
    freed = comm.comm == MPI.COMM_NULL
    again = nn.parallel.DistributedDataParallel(Net(), find_unused_parameters=True)
    again(x).backward()
    if r == 0:
        np.savez(out, same_weights=same,
                 rank0_weights=all(np.array_equal(a, b) for a, b in zip(weights, rank0)),
                 comm_freed=freed, **grads)


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
    for op in ("max", "min"):  # any / all
        flags = tg.tensor(np.array([r == 0, True, False]))
        dist.all_reduce(flags, op=op)
        res[f"bool_{op}"] = flags.numpy()
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


def _grads(module):
    return {k: None if p.grad is None else p.grad.numpy().copy()
            for k, p in module.named_parameters()}


def _mean_over_ranks(grads):
    """The average over the ranks of each rank's local gradients (None: no rank had one)."""
    every = dist.default_group().allgather_object(grads)
    return {k: None if all(e[k] is None for e in every)
            else sum(0 if e[k] is None else e[k] for e in every) / len(every) for k in grads}


class _Heads(nn.Module):
    """A tied weight (used twice), and a head that ``use_extra`` can leave out."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(4, 4, bias=False)
        self.mid = nn.Linear(4, 4)
        self.extra = nn.Linear(4, 4)

    def forward(self, x, use_extra=True):
        h = self.mid(self.emb(x).tanh()).tanh() @ self.emb.weight.T
        if use_extra:
            h = h + self.extra(h)
        return (h * h).sum()


class _Boxed(nn.Module):
    """_Heads whose output comes in a dataclass (find_unused_parameters looks inside)."""

    def __init__(self):
        super().__init__()
        self.heads = _Heads()

    def forward(self, x):
        import dataclasses

        box = dataclasses.make_dataclass("Box", ["loss"])
        return box(self.heads(x))


def semantics(out):
    """DDP against PyTorch's rules; each case's DDP grads next to what they must be (the
    ranks' local gradients of a plain twin, averaged or, where PyTorch does not reduce,
    this rank's own)."""
    import copy

    dist.init_process_group("mpi")
    r = dist.get_rank()
    x1 = tg.tensor(np.random.default_rng(r).standard_normal((3, 4)))
    x2 = tg.tensor(np.random.default_rng(10 + r).standard_normal((3, 4)))
    res = {}

    def fresh(cls=_Heads, **kw):
        tg.manual_seed(0)
        m = cls().to(dtype=tg.float64)
        twin = copy.deepcopy(m)
        return nn.parallel.DistributedDataParallel(m, bucket_cap_mb=1e-4, **kw), twin

    def record(case, ddp, want):
        got = _grads(ddp.module)
        for k in got:
            res[f"{case}|{k}|got"] = np.full(1, np.nan) if got[k] is None else got[k]
            res[f"{case}|{k}|want"] = np.full(1, np.nan) if want[k] is None else want[k]

    # two synced backwards of one step; rank 0 leaves 'extra' out of the second
    ddp, twin = fresh()
    ddp(x1).backward()
    twin(x1).backward()
    first = _mean_over_ranks(_grads(twin))
    ddp(x2, use_extra=r == 1).backward()
    twin.zero_grad()
    twin(x2, use_extra=r == 1).backward()
    second = _mean_over_ranks(_grads(twin))
    record("two_synced_backwards", ddp, {k: first[k] + (0 if second[k] is None else second[k])
                                         for k in first})
    # PyTorch decides at forward time: a forward outside no_sync() reduces...
    ddp, twin = fresh()
    loss = ddp(x1)
    with ddp.no_sync():
        loss.backward()
    twin(x1).backward()
    record("forward_outside_no_sync", ddp, _mean_over_ranks(_grads(twin)))
    # ... and one inside does not, wherever its backward runs
    ddp, twin = fresh()
    with ddp.no_sync():
        loss = ddp(x1)
    loss.backward()
    twin(x1).backward()
    record("forward_inside_no_sync", ddp, _grads(twin))
    # two forwards, one backward: 'extra' is reached by the first forward only
    ddp, twin = fresh(find_unused_parameters=True)
    (ddp(x1) + ddp(x2, use_extra=False)).backward()
    (twin(x1) + twin(x2, use_extra=False)).backward()
    record("two_forwards_find_unused", ddp, _mean_over_ranks(_grads(twin)))
    # an output in a dataclass: its tensors count as reached
    ddp, twin = fresh(_Boxed, find_unused_parameters=True)
    ddp(x1).loss.backward()
    twin(x1).loss.backward()
    record("dataclass_output_find_unused", ddp, _mean_over_ranks(_grads(twin)))
    # a gradient that reaches a parameter around ddp(...) after its bucket was reduced
    ddp, _ = fresh(find_unused_parameters=True)
    try:
        (ddp(x1, use_extra=False) + ddp.module.extra(x1).sum()).backward()
        res["late_gradient_error"] = np.array("")
    except dist.DistributedError as exc:
        res["late_gradient_error"] = np.array(str(exc))
    # frozen parameters are broadcast at wrap time too (PyTorch's _sync_module_states)
    tg.manual_seed(r)
    frozen = nn.Linear(3, 2)
    frozen.weight.requires_grad_(False)
    nn.parallel.DistributedDataParallel(frozen)
    res["frozen_weight"] = frozen.weight.numpy()
    # plain BatchNorm: the first forward after a synced training one broadcasts rank 0's
    # buffers, in eval mode too, so every rank evaluates with rank 0's running statistics
    tg.manual_seed(0)
    bn = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).to(dtype=tg.float64))
    bn(x1 * (r + 1)).sum().backward()
    bn.eval()
    with tg.no_grad():
        res["eval_output"] = bn(tg.ones(2, 4, dtype=tg.float64)).numpy()
    every = dist.default_group().allgather_object(res)
    if r == 0:
        np.savez(out, **{f"rank{q}|{k}": v for q, e in enumerate(every) for k, v in e.items()})


def checkpointed_sync_bn(out):
    """SyncBatchNorm inside utils.checkpoint: the recomputation in backward must not
    update the running statistics a second time."""
    from tapegrad.utils import checkpoint

    dist.init_process_group("mpi")
    r = dist.get_rank()
    tg.manual_seed(0)
    plain = nn.SyncBatchNorm(4).to(dtype=tg.float64)
    ckpt = nn.SyncBatchNorm(4).to(dtype=tg.float64)
    x = tg.tensor(np.random.default_rng(r).standard_normal((5, 4)) + 3)
    (plain(x) ** 3).sum().backward()
    (checkpoint(ckpt, x) ** 3).sum().backward()
    if r == 0:
        np.savez(out, **{f"plain_{k}": v.numpy() for k, v in plain.state_dict().items()},
                 **{f"ckpt_{k}": v.numpy() for k, v in ckpt.state_dict().items()},
                 plain_grad=plain.weight.grad.numpy(), ckpt_grad=ckpt.weight.grad.numpy())


def sync_bn_vs_torch(out):
    """SyncBatchNorm on 2 ranks (5 + 3 samples) against torch's BatchNorm on the
    concatenated 8: outputs, input/weight/bias gradients, running statistics over 3
    training steps, then eval mode, for several options, shapes and dtypes."""
    import torch

    dist.init_process_group("mpi")
    r = dist.get_rank()
    group = dist.default_group()
    sizes = [5, 3]
    lo = sum(sizes[:r])
    mine = slice(lo, lo + sizes[r])
    worst = {}

    def diff(key, a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        err = np.inf if a.shape != b.shape else float(np.abs(a - b).max(initial=0.0))
        worst[key] = max(worst.get(key, 0.0), err)

    configs = {"default": {}, "momentum_none": {"momentum": None}, "no_affine": {"affine": False},
               "no_stats": {"track_running_stats": False},
               "momentum_eps": {"momentum": 0.3, "eps": 1e-3}}
    for cname, cfg in configs.items():
        for tail, torch_bn in (((3, 4, 2), torch.nn.BatchNorm2d), ((3,), torch.nn.BatchNorm1d),
                               ((3, 5), torch.nn.BatchNorm1d)):
            for dtype in (np.float64, np.float32):
                tag = f"{cname}|{np.dtype(dtype).name}"
                rng = np.random.default_rng(0)  # the same on both ranks
                c = tail[0]
                tb = torch_bn(c, **cfg).to(getattr(torch, np.dtype(dtype).name))
                sb = nn.SyncBatchNorm(c, **cfg, dtype=dtype)
                if sb.affine:
                    w, b = rng.standard_normal((2, c)).astype(dtype)
                    with torch.no_grad():
                        tb.weight.copy_(torch.tensor(w))
                        tb.bias.copy_(torch.tensor(b))
                    sb.weight.array[...], sb.bias.array[...] = w, b
                for _ in range(3):
                    x = (rng.standard_normal((sum(sizes), *tail)) * 3 + 7).astype(dtype)
                    g = rng.standard_normal(x.shape).astype(dtype)
                    tx = torch.tensor(x, requires_grad=True)
                    ty = tb(tx)
                    (ty * torch.tensor(g)).sum().backward()
                    sx = tg.tensor(x[mine], requires_grad=True)
                    sy = sb(sx)
                    (sy * tg.tensor(g[mine])).sum().backward()
                    diff(tag + "|y", sy.numpy(), ty.detach().numpy()[mine])
                    diff(tag + "|dx", sx.grad.numpy(), tx.grad.numpy()[mine])
                    if sb.affine:  # the loss is the sum over ranks: so are these
                        for p, tp in ((sb.weight, tb.weight), (sb.bias, tb.bias)):
                            diff(tag + "|dparams", group.allgather(p.grad.numpy()).sum(0),
                                 tp.grad.numpy())
                            p.grad, tp.grad = None, None
                    if sb.track_running_stats:
                        for k in ("running_mean", "running_var", "num_batches_tracked"):
                            diff(tag + "|" + k, getattr(sb, k).numpy(),
                                 getattr(tb, k).numpy())
                sb.eval()
                tb.eval()
                x = (rng.standard_normal((4, *tail)) * 3 + 7).astype(dtype)
                tx = torch.tensor(x, requires_grad=True)
                tb(tx).pow(2).sum().backward()
                sx = tg.tensor(x, requires_grad=True)
                sb(sx).pow(2).sum().backward()
                diff(tag + "|eval_dx", sx.grad.numpy(), tx.grad.numpy())
    every = group.allgather_object(worst)
    if r == 0:
        np.savez(out, **{k: max(e[k] for e in every) for k in worst})


def join_model():
    """The uneven-inputs model: plain BatchNorm, so buffers are broadcast too."""
    tg.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Tanh(),
                         nn.Linear(8, 2)).to(dtype=tg.float64)


JOIN_COUNTS = (5, 4)  # batches on rank 0, rank 1


def join_batches(rank, counts=JOIN_COUNTS):
    rng = np.random.default_rng(100 + rank)
    return [(rng.standard_normal((4, 3)) * 2, rng.integers(0, 2, 4))
            for _ in range(counts[rank])]


def join_reference(divide_by_initial_world_size=True, counts=JOIN_COUNTS):
    """One process, one replica per rank, the arithmetic join() must do: each step the
    ranks still training take the buffers of the highest-numbered of them, and step
    with the sum of their gradients over the initial world size (or over their own
    count); at the end every replica is the last finisher's."""
    import copy

    base = join_model()
    reps = [copy.deepcopy(base) for _ in counts]
    opts = [optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in reps]
    batches = [join_batches(r, counts) for r in range(len(counts))]
    ce = nn.CrossEntropyLoss()
    for k in range(max(counts)):
        active = [r for r in range(len(counts)) if k < counts[r]]
        src = dict(reps[active[-1]].named_buffers())
        grads = []
        for r in active:
            for name, b in reps[r].named_buffers():
                b.array[...] = src[name].array
            opts[r].zero_grad()
            x, y = batches[r][k]
            ce(reps[r](tg.tensor(x)), tg.tensor(y)).backward()
            grads.append([p.grad.numpy().copy() for p in reps[r].parameters()])
        div = len(counts) if divide_by_initial_world_size else len(active)
        mean = [sum(g[i] for g in grads) / div for i in range(len(grads[0]))]
        for r in active:
            for p, g in zip(reps[r].parameters(), mean):
                p.grad.array[...] = g
            opts[r].step()
    last = [r for r in range(len(counts)) if counts[r] == max(counts)][-1]
    return state(reps[last])


def uneven(how, out="-", divide="1"):
    """5 batches on rank 0, 4 on rank 1: under join(), without it (the script then
    ends, or gathers the results), or with throw_on_early_termination."""
    dist.init_process_group("mpi", timeout=120)  # every failure must come far sooner
    r = dist.get_rank()
    ddp = nn.parallel.DistributedDataParallel(join_model(), bucket_cap_mb=1e-4)
    opt = optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    ce = nn.CrossEntropyLoss()

    def loop():
        for x, y in join_batches(r):
            opt.zero_grad()
            ce(ddp(tg.tensor(x)), tg.tensor(y)).backward()
            opt.step()

    res = {"error": ""}
    if how == "join":
        with ddp.join(divide_by_initial_world_size=divide == "1"):
            loop()
    elif how == "throw":
        try:
            with ddp.join(throw_on_early_termination=True):
                loop()
        except dist.DistributedError as exc:
            res["error"] = str(exc)
    else:
        loop()
        if how == "noj_end":
            print(f"rank {r} done", flush=True)
            return  # rank 1's process ends while rank 0 waits in its 5th step
    res.update(state(ddp.module))
    every = dist.default_group().allgather_object(res)
    if r == 0:
        np.savez(out, same_on_all_ranks=all(
            np.array_equal(e[k], every[0][k]) for e in every for k in res if k != "error"),
            **{f"rank{q}|error": np.array(e["error"]) for q, e in enumerate(every)}, **res)


def leave_early(how):
    """Rank 1 leaves its loop after 2 of 5 steps and ends (sys.exit, or os._exit
    without finalising MPI); rank 0 goes on."""
    import os

    dist.init_process_group("mpi", timeout=120)
    r = dist.get_rank()
    ddp = nn.parallel.DistributedDataParallel(nn.Linear(3, 2))
    for step in range(5):
        if r == 1 and step == 2:
            if how == "os_exit":
                os._exit(0)
            sys.exit(0)
        ddp(tg.ones(2, 3)).sum().backward()
    print("rank 0 should not get here", flush=True)


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    {"equiv": equiv, "raise": raise_on_rank1, "mismatch": mismatch, "timeout": timeout,
     "deadlock": deadlock,
     "silent": silent, "unused": unused, "collectives": collectives, "semantics": semantics,
     "checkpointed_sync_bn": checkpointed_sync_bn, "sync_bn_vs_torch": sync_bn_vs_torch,
     "uneven": uneven, "leave_early": leave_early}[mode](*rest)
