"""Uneven inputs: ``with ddp.join():``, PyTorch's ``DistributedDataParallel.join``.

A rank that runs out of batches leaves its loop and, in the context's exit,
*shadows* the collectives of the ranks still training: each step, before its
forward, every rank of the group takes part in one small all-reduce, the
*agreement*::

    [1 if rank 0 still trains, ..., 1 if rank N-1 still trains,
     any still-training rank broadcasts buffers before this forward,
     the still-training ranks' backward reduces gradients (not inside no_sync()),
     a rank that ran out wants every rank to stop (throw_on_early_termination)]

A joined rank then matches the buffer broadcast (from the highest-numbered
rank still training, as PyTorch) and puts zeros into every gradient bucket's
all-reduce, so the mean stays over the initial world size
(``divide_by_initial_world_size=True``; False divides by the ranks still
training). When the agreement says no rank trains, the context ends on every
rank and the last ranks to finish (the highest-numbered of them) broadcast
their parameters and buffers, so all replicas leave equal.

>>> with ddp.join():
...     for x, y in loader:                  # 5 batches on rank 0, 4 on rank 1
...         opt.zero_grad()
...         loss_fn(ddp(x), y).backward()
...         opt.step()
"""

from __future__ import annotations

import numpy as np

from ..grad_mode import is_grad_enabled
from .group import DistributedError

__all__ = ["Join"]


class Join:
    """The context :meth:`DistributedDataParallel.join` returns (PyTorch's arguments).

    Every forward inside it costs one small all-reduce more. Collectives in the
    model's forward (``SyncBatchNorm``) cannot be shadowed: refused at entry,
    as they would hang in PyTorch.
    """

    def __init__(self, ddp, divide_by_initial_world_size: bool = True, enable: bool = True,
                 throw_on_early_termination: bool = False):
        self.ddp = ddp
        self.divide_by_initial_world_size = bool(divide_by_initial_world_size)
        self.enable = bool(enable)
        self.throw_on_early_termination = bool(throw_on_early_termination)
        self._on = False

    def __enter__(self):
        ddp = self.ddp
        if not self.enable or ddp.world_size == 1:
            return self
        if ddp._join is not None:
            raise DistributedError("DistributedDataParallel.join: already inside this model's "
                                   "join() context; enter it once, around the training loop")
        from ..nn import SyncBatchNorm

        sync = next((n for n, m in ddp.module.named_modules() if isinstance(m, SyncBatchNorm)),
                    None)
        if sync is not None:
            raise DistributedError(
                f"DistributedDataParallel.join: the model's forward runs collectives of its "
                f"own (SyncBatchNorm {sync!r}), which a rank that ran out of batches cannot "
                "shadow (PyTorch hangs there). Use BatchNorm inside join(), or give every "
                "rank the same number of batches (DistributedSampler(drop_last=True)).")
        ddp._join = self
        self._on = True
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._on:
            return False
        ddp = self.ddp
        self._on = False
        try:
            if exc_type is not None:  # as PyTorch: no shadowing, the exception goes on
                return False
            ddp._pay_owed_backward()
            last = True
            while True:
                ranks, buffers, backward, _ = self._agree(active=False)
                if not len(ranks):
                    break
                last = False
                if self.throw_on_early_termination:
                    raise DistributedError(
                        f"DistributedDataParallel.join: rank {ddp._comm.rank} exhausted its "
                        f"inputs while rank(s) {', '.join(map(str, ranks))} still train "
                        "(throw_on_early_termination=True: every rank raises)")
                if buffers:
                    ddp._broadcast(ddp._buffers_list, "buffers (joined rank)", int(ranks[-1]))
                if backward:
                    ddp._shadow_backward()
            # the last to finish hold the final model: the highest-numbered of them sends it
            src = np.array([ddp._comm.rank if last else -1], np.int64)
            ddp._comm.allreduce(src, "max", "DistributedDataParallel.join's final model rank")
            tensors = ddp._all_params + (ddp._buffers_list if ddp.broadcast_buffers else [])
            ddp._broadcast(tensors, "the final model (join)", int(src[0]))
        finally:
            ddp._join = None
            ddp._divisor = ddp.world_size
        return False

    def step(self) -> None:
        """Before a forward of a rank still training: the agreement, the buffer
        broadcast it decides, and the divisor of the coming backward."""
        ddp = self.ddp
        ddp._pay_owed_backward()
        backward = is_grad_enabled() and ddp.require_backward_grad_sync
        ranks, buffers, backward, stop = self._agree(
            active=True, buffers=ddp._wants_buffer_sync(), backward=backward)
        if stop:
            raise DistributedError(
                f"DistributedDataParallel.join: {stop} rank(s) exhausted their inputs "
                "(throw_on_early_termination=True): raising on every rank")
        if buffers:
            ddp._broadcast(ddp._buffers_list, "buffers", int(ranks[-1]))
        ddp._divisor = ddp.world_size if self.divide_by_initial_world_size else len(ranks)
        ddp._owed = backward

    def _agree(self, active, buffers=False, backward=False):
        """(ranks still training, buffer broadcast, gradient reduction, ranks that want
        to stop): one all-reduce of ``size + 3`` int64 on DDP's communicator."""
        comm = self.ddp._comm
        n = comm.size
        v = np.zeros(n + 3, np.int64)
        if active:
            v[comm.rank], v[n], v[n + 1] = 1, bool(buffers), bool(backward)
        else:
            v[n + 2] = self.throw_on_early_termination
        comm.allreduce(v, "sum", "DistributedDataParallel.join's step agreement")
        ranks = np.flatnonzero(v[:n])
        if 0 < v[n + 1] < len(ranks):  # every rank sees the same sums: all raise
            raise DistributedError(
                f"DistributedDataParallel.join: {v[n + 1]} of the {len(ranks)} ranks still "
                "training reduce gradients in this step, the others run it inside no_sync() "
                "or without grad: every rank must make the same choice")
        return ranks, bool(v[n]), bool(v[n + 1]), int(v[n + 2])
