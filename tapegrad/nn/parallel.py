"""DistributedDataParallel: one model replica per rank, gradients averaged in buckets.

How a step runs (PyTorch's design, on tapegrad's engine hooks):

* At wrap time every rank sends rank 0 the names, shapes and dtypes of its
  parameters and buffers; a difference is an error naming the first
  mismatching rank and parameter, raised on *every* rank (no hang). Then rank
  0's parameters and buffers are broadcast, so all replicas start equal.
* Parameters fall into buckets in *reverse* registration order (backward
  produces the last layer's gradients first), one dtype per bucket, the first
  capped at 1 MiB so that a reduction starts early, the others at
  ``bucket_cap_mb``.
* A post-accumulate-grad hook on each parameter marks it ready. When a bucket is
  complete -- and all buckets before it have started, so that every rank starts
  them in the same order -- its gradients are packed into one buffer, divided by
  the world size, and a non-blocking allreduce starts, on a communicator of
  DDP's own. Later hooks poll the started reductions (MPI progresses only when
  called), so they run while backward computes the earlier layers.
* When backward has walked the whole tape (``engine.queue_callback``) buckets
  that never completed -- parameters this rank did not use -- are finished
  with their ``.grad`` as it stands (zeros for None, as PyTorch), every
  reduction is waited for, and the averages are unpacked into ``.grad`` before
  ``backward()`` returns. A parameter no rank used keeps its ``.grad`` (one
  "used" flag per parameter travels in its bucket).
* As in PyTorch, the *forward* decides: one run inside ``no_sync()`` makes an
  unreduced backward, and rank 0's buffers are broadcast before a forward
  (train or eval mode) that follows a grad-enabled synced one.
* Uneven inputs (ranks with different numbers of batches) need ``with
  ddp.join():``: a rank that ran out shadows the others' collectives with
  zeros (:mod:`tapegrad.distributed.join`). Without it, the rank still
  training fails within seconds with RankExitedError or CollectiveDeadlock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
import weakref

from ..engine import queue_callback
from ..errors import ArgumentError
from ..grad_mode import is_grad_enabled
from ..tensor import Tensor, _wrap
from ..walks import entries
from .module import Module

__all__ = ["DistributedDataParallel"]

_FIRST_BUCKET_BYTES = 1024 * 1024  # PyTorch's dist._DEFAULT_FIRST_BUCKET_BYTES


class _Bucket:
    __slots__ = ("index", "params", "offsets", "numel", "dtype", "flat", "pending", "marked",
                 "request", "launched")

    def __init__(self, index, params):
        self.index = index
        self.params = params
        self.offsets, total = [], 0
        for p in params:
            self.offsets.append(total)
            total += p.array.size
        self.numel = total
        self.dtype = params[0].dtype
        xp = params[0].device.xp
        # the gradients, then one "this rank used it" flag per parameter
        self.flat = xp.zeros(total + len(params), self.dtype)
        self.reset()

    def reset(self):
        self.pending = len(self.params)
        self.marked = [False] * len(self.params)
        self.request = None
        self.launched = False


def _assign_buckets(params, cap_bytes):
    """Reverse order, one dtype and device per bucket, first bucket <= 1 MiB (PyTorch)."""
    buckets, open_ = [], {}
    for p in reversed(params):
        key = (p.dtype, p.device)
        cur = open_.setdefault(key, [])
        cur.append(p)
        limit = _FIRST_BUCKET_BYTES if not buckets else cap_bytes
        if sum(q.array.nbytes for q in cur) >= min(limit, cap_bytes):
            buckets.append(cur)
            open_[key] = []
    buckets.extend(c for c in open_.values() if c)
    return [_Bucket(i, ps) for i, ps in enumerate(buckets)]


def _tensors_in(obj):
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors_in(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors_in(o)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # as PyTorch's
        for f in dataclasses.fields(obj):
            yield from _tensors_in(getattr(obj, f.name))


class DistributedDataParallel(Module):
    """Data parallelism across ranks, as ``torch.nn.parallel.DistributedDataParallel``:
    the forward is the wrapped module's (``ddp.module``), and ``backward()``
    leaves every rank's ``.grad`` equal to the average over ranks.

    >>> dist.init_process_group("mpi")
    >>> model = nn.parallel.DistributedDataParallel(net)
    >>> loss_fn(model(x), y).backward()          # .grad averaged over all ranks
    >>> with model.no_sync():                    # accumulate locally, reduce later
    ...     loss_fn(model(x1), y1).backward()
    >>> with model.join():                       # ranks with different batch counts
    ...     for x, y in loader: ...

    Save ``model.module.state_dict()`` (the plain module's keys, loadable by one
    process). ``device_ids``, ``output_device``, ``dim``, ``check_reduction``,
    ``gradient_as_bucket_view`` and ``static_graph`` are accepted so PyTorch
    scripts run; in PyTorch they change only placement, speed or memory.
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None,
                 bucket_cap_mb: float = 25, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False,
                 static_graph: bool = False):
        from ..distributed.world import resolve_group

        super().__init__()
        if not isinstance(module, Module):
            raise ArgumentError(f"DistributedDataParallel: expected a Module, got "
                                f"{type(module).__name__}")
        if not bucket_cap_mb > 0:
            raise ArgumentError(f"DistributedDataParallel: bucket_cap_mb must be > 0, got "
                                f"{bucket_cap_mb!r}")
        self.module = module
        group = resolve_group(process_group)
        self.process_group = group
        self.broadcast_buffers = bool(broadcast_buffers)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.bucket_cap_mb = bucket_cap_mb
        self.require_backward_grad_sync = True
        # PyTorch decides at forward time whether the coming backward reduces: a forward
        # inside no_sync() makes an unsynced backward, wherever the backward runs
        self._sync_backward = True
        # PyTorch's require_forward_param_sync: rank 0's buffers are broadcast before a
        # forward (in train or eval mode) that follows a grad-enabled, synced forward
        self._sync_buffers_next = True
        self.world_size = group.size
        seen, named = set(), []
        for name, p in module.named_parameters():
            if id(p) not in seen:
                seen.add(id(p))
                named.append((name, p))
        self._params = [p for _, p in named if p.requires_grad]
        self._all_params = [p for _, p in named]
        self._buffers_list = [b for _, b in module.named_buffers() if b is not None]
        # DDP's own communicator: its non-blocking reductions never match another
        # part's collectives (SyncBatchNorm's) that run meanwhile
        self._comm = group.split() if group.size > 1 else group
        if self._comm is not group:  # a duplicate of its own: freed with the wrapper
            weakref.finalize(self, self._comm.destroy)
        if group.size > 1:
            self._check_same_model(named, module)
            # every parameter, frozen ones too (as PyTorch): all replicas start equal
            self._broadcast([p for _, p in named] + self._buffers_list,
                            "parameters and buffers")
        self._buckets = _assign_buckets(self._params, bucket_cap_mb * 1024 * 1024)
        self._join = None  # the join() context this model is in (uneven inputs)
        self._divisor = group.size  # the gradients' divisor: the world size, or in
        # join(divide_by_initial_world_size=False) the ranks still training
        self._owed = False  # in join(): a forward promised a reducing backward not yet run
        self._where = {id(p): (b, j) for b in self._buckets for j, p in enumerate(b.params)}
        self._active = False
        self._next = 0  # the next bucket to start (buckets start in index order)
        self._used_now: set = set()  # parameters whose hook fired in this backward
        self._used_unsynced: set = set()  # used in no_sync() backwards since the last sync
        # not reached by any forward since the last reducing backward (find_unused_parameters)
        self._unused: set = set()
        self._unused_fresh = True  # no forward has narrowed _unused since that backward
        # reductions started, seconds backward waited for them at its end, seconds packing
        # and unpacking, bytes reduced, and of those the bytes whose reduction had
        # finished while backward still ran (the overlap)
        self.stats = {"reductions": 0, "wait_s": 0.0, "pack_s": 0.0, "bytes": 0,
                      "overlapped_bytes": 0}
        # the hooks hold the wrapper weakly and go with it: a dropped DDP leaves no hook
        # (and no reference keeping itself and its model alive) on the parameters
        hook = functools.partial(_weak_hook, weakref.ref(self))
        self._handles = [p.register_post_accumulate_grad_hook(hook) for p in self._params]
        weakref.finalize(self, _remove_all, self._handles)

    # ------------------------------------------------------------ setup
    def _check_same_model(self, named, module):
        from ..distributed import DistributedError

        mine = ([("parameter" if p.requires_grad else "frozen parameter", n, tuple(p.shape),
                  str(p.dtype)) for n, p in named]
                + [("buffer", n, tuple(b.shape), str(b.dtype))
                   for n, b in module.named_buffers() if b is not None])
        every = self._comm.allgather_object(mine, "DistributedDataParallel's model check")
        ref = every[0]
        for r, sig in enumerate(every[1:], 1):
            if sig == ref:
                continue
            for a, b in zip(sig, ref):
                if a != b:
                    if a[1] == b[1] and a[0] != b[0]:  # requires_grad differs
                        why = f"{a[1]!r} is a {a[0]} on rank {r}, a {b[0]} on rank 0"
                    elif a[1] == b[1]:
                        why = (f"rank {r}'s {a[0]} {a[1]!r} has shape {a[2]} {a[3]}, rank 0's "
                               f"{b[2]} {b[3]}")
                    else:
                        why = (f"rank {r} has {a[0]} {a[1]!r} {a[2]} {a[3]} where rank 0 has "
                               f"{b[0]} {b[1]!r} {b[2]} {b[3]}")
                    break
            else:
                longer, other = (sig, ref) if len(sig) > len(ref) else (ref, sig)
                extra = longer[len(other)]
                who = f"rank {r}" if longer is sig else "rank 0"
                why = (f"rank {r} has {len(sig)} parameters and buffers, rank 0 {len(ref)}; "
                       f"{who} alone has {extra[0]} {extra[1]!r} {extra[2]} {extra[3]}")
            raise DistributedError(
                f"DistributedDataParallel: the ranks wrap different models: {why}. Every rank "
                "must build the same model (same architecture, dtype and options) before "
                "wrapping it.")

    def _broadcast(self, tensors, what, src=0):
        """Rank ``src``'s values of ``tensors`` on every rank, one broadcast per dtype."""
        by_kind: dict = {}
        for t in tensors:
            by_kind.setdefault((t.dtype, t.device), []).append(t)
        for ts in by_kind.values():
            xp = ts[0].device.xp
            flat = xp.concatenate([t.array.reshape(-1) for t in ts])
            self._comm.broadcast(flat, src, f"DistributedDataParallel's broadcast of {what}")
            o = 0
            for t in ts:
                n = t.array.size
                t.array[...] = flat[o:o + n].reshape(t.shape)
                t._bump_version()
                o += n

    # ------------------------------------------------------------ forward
    def forward(self, *inputs, **kwargs):
        if self._active:  # the last backward died before its end: start afresh
            self._reset()
        if self._join is not None:  # agree with the ranks that ran out of batches first
            self._join.step()
        elif self._wants_buffer_sync():
            self._broadcast(self._buffers_list, "buffers")
        out = self.module(*inputs, **kwargs)
        self._sync_buffers_next = is_grad_enabled() and self.require_backward_grad_sync
        if is_grad_enabled():
            self._sync_backward = self.require_backward_grad_sync
            if self.find_unused_parameters:
                # a backward may reach the outputs of several forwards: a parameter is
                # unused only if none of them reached it
                unreached = self._unreached(out)
                self._unused = unreached if self._unused_fresh else self._unused & unreached
                self._unused_fresh = False
        return out

    def _wants_buffer_sync(self):
        return bool(self.broadcast_buffers and self.world_size > 1 and self._sync_buffers_next
                    and self._buffers_list)

    def join(self, divide_by_initial_world_size: bool = True, enable: bool = True,
             throw_on_early_termination: bool = False):
        """Training with uneven inputs (PyTorch's ``ddp.join()``): a rank that runs out
        of batches takes part, with zero gradients, in the gradient all-reduces of the
        ranks still training, until every rank is done; the mean stays over the
        initial world size (``divide_by_initial_world_size=True``; False: over the
        ranks still training). At the end the last ranks to finish (the highest
        numbered of them) broadcast their parameters and buffers, so all replicas
        leave equal. ``throw_on_early_termination=True``: when the first rank runs
        out, every rank raises DistributedError instead. Each forward inside costs
        one small all-reduce more; see :mod:`tapegrad.distributed.join`.

        >>> with ddp.join():
        ...     for x, y in loader:               # 5 batches on rank 0, 4 on rank 1
        ...         opt.zero_grad(); loss_fn(ddp(x), y).backward(); opt.step()
        """
        from ..distributed.join import Join

        return Join(self, divide_by_initial_world_size, enable, throw_on_early_termination)

    def _shadow_backward(self):
        """Zeros into every bucket's all-reduce, in bucket order: a joined rank's part in
        a backward it does not run (and a training rank's, in join(), for a forward
        whose backward never came: the others shadow it all the same)."""
        for b in self._buckets:
            b.flat[...] = 0
            b.request = self._comm.iallreduce(
                b.flat, "sum", f"DistributedDataParallel gradient bucket {b.index} ({b.numel} "
                f"{b.dtype}, zeros: join())")
        for b in self._buckets:
            b.request.wait()
        self._reset()

    def _pay_owed_backward(self):
        if self._owed:
            self._owed = False
            self._shadow_backward()

    def _unreached(self, out):
        reached = set()
        roots = list(_tensors_in(out))
        for t in roots:
            if t._node is None:
                reached.add(id(t))
        for node in entries(*roots):
            for _, target, out_nr, _, _ in node.edges:
                if out_nr < 0:
                    reached.add(id(target))
        return {id(p) for p in self._params if id(p) not in reached}

    @contextlib.contextmanager
    def no_sync(self):
        """The backwards of forwards run inside accumulate gradients locally,
        unreduced (PyTorch: the forward decides, so keep it inside); the first
        synced one after it reduces the sum.

        >>> with ddp.no_sync():
        ...     loss_fn(ddp(x1), y1).backward()
        >>> loss_fn(ddp(x2), y2).backward()   # averages the accumulated .grad
        """
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # ------------------------------------------------------------ backward
    def _hook(self, p):
        if not self._sync_backward:
            self._used_unsynced.add(id(p))
            return
        if self.world_size == 1:
            return
        if not self._active:
            self._begin()
        self._used_now.add(id(p))
        b, j = self._where[id(p)]
        if b.launched:  # its bucket was reduced without this gradient: never silently
            from ..distributed import DistributedError

            name = next((n for n, q in self.module.named_parameters() if q is p), "?")
            raise DistributedError(
                f"DistributedDataParallel: parameter {name!r} {tuple(p.shape)} got its "
                "gradient after its bucket was reduced: find_unused_parameters found it "
                "unreached from the forward's outputs, yet this backward reached it (through "
                "a tensor computed outside ddp(...), e.g. with ddp.module, or one inside an "
                "output that is not a Tensor, list, tuple, dict or dataclass). Compute the "
                "loss from ddp(...)'s outputs only, or use find_unused_parameters=False.")
        self._mark(b, j)
        self._launch_ready()

    def _begin(self):
        self._active = True
        queue_callback(self._finish)
        for pid in self._unused:
            b, j = self._where[pid]
            self._mark(b, j)

    def _mark(self, b, j):
        if not b.marked[j]:
            b.marked[j] = True
            b.pending -= 1

    def _launch_ready(self):
        buckets = self._buckets
        while self._next < len(buckets) and buckets[self._next].pending == 0:
            self._launch(buckets[self._next])
            self._next += 1
        for b in buckets[:self._next]:  # progress, oldest first
            if b.request is not None and not b.request.test():
                break

    def _launch(self, b):
        t0 = time.perf_counter()
        flat, n = b.flat, b.numel
        xp = b.params[0].device.xp
        for j, (p, o) in enumerate(zip(b.params, b.offsets)):
            size = p.array.size
            used = p.grad is not None and (id(p) in self._used_now
                                           or id(p) in self._used_unsynced)
            # a .grad this backward did not touch still counts (PyTorch packs any defined
            # .grad): earlier synced backwards of the same step left it equal on all ranks
            if p.grad is not None:
                xp.divide(p.grad.array.reshape(-1), self._divisor, out=flat[o:o + size])
            else:
                flat[o:o + size] = 0
            flat[n + j] = 1 if used else 0
        b.launched = True
        self.stats["pack_s"] += time.perf_counter() - t0
        b.request = self._comm.iallreduce(
            flat, "sum", f"DistributedDataParallel gradient bucket {b.index} ({n} {b.dtype})")
        self.stats["reductions"] += 1

    def _finish(self):
        stats = self.stats
        for b in self._buckets:
            stats["bytes"] += b.flat.nbytes
            if b.launched and b.request.test():
                stats["overlapped_bytes"] += b.flat.nbytes
        for b in self._buckets:  # this rank's unused parameters: zeros
            for j in range(len(b.params)):
                self._mark(b, j)
        self._launch_ready()
        t0 = time.perf_counter()
        for b in self._buckets:
            b.request.wait()
        stats["wait_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for b in self._buckets:
            flat, n = b.flat, b.numel
            for j, (p, o) in enumerate(zip(b.params, b.offsets)):
                if flat[n + j] == 0:
                    continue  # no rank used it: .grad stays as it is
                view = flat[o:o + p.array.size].reshape(p.shape)
                if p.grad is None:
                    p.grad = _wrap(view.copy(), p.device, None, 0, False)
                else:
                    p.grad.array[...] = view
        stats["pack_s"] += time.perf_counter() - t0
        self._used_unsynced.clear()
        self._unused_fresh = True
        self._owed = False
        self._reset()

    def _reset(self):
        self._active = False
        self._next = 0
        self._used_now.clear()
        for b in self._buckets:
            b.reset()

    def extra_repr(self):
        return (f"world_size={self.world_size}, buckets={len(self._buckets)}, "
                f"bucket_cap_mb={self.bucket_cap_mb}")


def _weak_hook(ref, p):
    ddp = ref()
    if ddp is not None:
        ddp._hook(p)


def _remove_all(handles):
    for h in handles:
        h.remove()
