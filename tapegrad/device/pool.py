"""The CPU worker pool: how tapegrad's ops use more than one core.

An op that splits its work calls :func:`parallel` with the number of
independent items (images of a batch, rows of a matrix product) and an
estimate of the work; the items are cut into one contiguous chunk per thread,
the caller runs the first chunk itself and persistent worker threads the
others (NumPy releases the GIL inside BLAS calls, ufunc loops and large
copies, so the chunks run at the same time). Nothing is split when the pool
is off (one thread, or BLAS could not be pinned), when the work is below
:data:`MIN_WORK` (a split costs one hand-off and one wake-up, 15-30 us), or
while the pool is busy (a second Python thread calling into tapegrad, or a
chunk that itself calls :func:`parallel`): then ``fn(0, n)`` runs in the caller.

Why not BLAS's own threads: OpenBLAS parallelises one large GEMM well but not
the per-image GEMMs of a convolution (32-64 output channels, 1-4k pixels: one
call with 2 threads is barely faster than with 1), and its thread count is one
per process -- a worker cannot run BLAS single-threaded while another GEMM
runs multi-threaded. So while the pool is on, the process's BLAS runs one
thread per call (:mod:`.threads`), and the GEMMs of convolutions and linear
layers go through a split here (batched ``matmul`` with a batched right operand
is not split). So are max pooling (by images), ReLU and the SGD update (by
pieces of the flat arrays, :func:`streamed`) and batch norm (by blocks of
samples, ``normalization._by_samples``). On the Xeon measured, a pass over a
4 MB array split by rows takes 0.6-0.7x the time of one call (a subtract into a
buffer 0.45 -> 0.29 ms, a per-row BLAS sum 0.21 -> 0.13 ms); an earlier session
measured the per-row sums slower with two callers (104 -> 243 us per 1M floats)
and batch norm split by images no faster (docs/performance.md), so passes that only move
memory may gain little on some machines.

Determinism: a chunk computes exactly what the single path computes for its
items (same BLAS calls on the same shapes per item, BLAS at one thread), and
reductions across items happen after the join, in item order, so results are
bitwise equal to ``set_num_threads(1)``. The tests check this per op.
"""

from __future__ import annotations

import os
import queue
import threading

import numpy as np

from . import threads

__all__ = ["parallel", "split_count", "chunks", "active_threads", "matmul", "streamed", "copy",
           "MIN_WORK",
           "ELEMENT_WORK", "ROW_BLOCK", "COL_BLOCK", "STREAM_ROW"]

# Work (multiply-adds) below which an op runs in one piece: ~2-4 ms of GEMM per
# 1e8 MACs on this machine kind, so a chunk of MIN_WORK / 2 takes ~50 us against a
# 15-30 us hand-off (a queue round trip between two threads on this VM is 16-26 us;
# benchmarks/bench_threads.py).
MIN_WORK = 4_000_000

# The work of one pass over one element of a streaming op (a multiply by a row of
# coefficients, a compare, a masked copy): such a pass runs at 0.1-0.2 ns per float32
# element, against ~0.04 ns per multiply-add of GEMM; with this weight a 1M-element
# pass (150 us) is MIN_WORK. Measured: splitting np.multiply(a, row, out=a) over 2
# threads costs 64 us against 30 us at 256k elements and gains 209 -> 120 us at 1M.
ELEMENT_WORK = 4


class _Pool:
    """``n - 1`` daemon threads, each with its own inbox; :meth:`run` hands
    tasks 1.. to them, runs task 0 in the caller, waits for all, and re-raises
    the first exception (after every task has finished)."""

    def __init__(self, n: int):
        self.n = n
        self.lock = threading.Lock()  # held by the one caller using the pool
        self._inboxes = [queue.SimpleQueue() for _ in range(n - 1)]
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        for i, inbox in enumerate(self._inboxes):
            threading.Thread(target=self._serve, args=(inbox,), daemon=True,
                             name=f"tapegrad-worker-{i + 1}").start()

    def _serve(self, inbox):
        while True:
            task = inbox.get()
            if task is None:
                return
            fn, lo, hi = task
            del task  # the task's closure holds the op's arrays: none kept while idle
            try:
                fn(lo, hi)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                result = exc
            else:
                result = None
            del fn
            self._done.put(result)
            del result

    def run(self, fn, spans):
        for inbox, (lo, hi) in zip(self._inboxes, spans[1:]):
            inbox.put((fn, lo, hi))
        error = None
        try:
            fn(*spans[0])
        except BaseException as exc:  # noqa: BLE001 - after the workers are done
            error = exc
        for _ in spans[1:]:
            result = self._done.get()
            error = error or result
        if error is not None:
            raise error

    def close(self):
        for inbox in self._inboxes:
            inbox.put(None)


_pool: _Pool | None = None


def _reset_after_fork():
    """A forked child has the parent's pool object but none of its threads."""
    global _pool
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def active_threads() -> int:
    """How many threads :func:`parallel` splits into now: ``get_num_threads()``
    when BLAS could be pinned to one thread (threadpoolctl installed), else 1."""
    n = threads.get_num_threads()
    if n > 1 and not threads.pin_blas():
        return 1
    return n


def _get_pool(n: int) -> _Pool:
    global _pool
    if _pool is None or _pool.n != n:
        if _pool is not None:
            _pool.close()
        _pool = _Pool(n)
    return _pool


def chunks(n: int, k: int) -> list[tuple[int, int]]:
    """``[0, n)`` cut into at most ``k`` contiguous spans, sizes differing by at
    most one, the larger first: ``chunks(5, 2) == [(0, 3), (3, 5)]``."""
    k = max(1, min(k, n))
    q, r = divmod(n, k)
    spans, lo = [], 0
    for i in range(k):
        hi = lo + q + (i < r)
        spans.append((lo, hi))
        lo = hi
    return spans


def split_count(n: int, work: float = float("inf"), xp=None) -> int:
    """Into how many chunks :func:`parallel` with these arguments cuts ``[0, n)`` (1:
    run in one piece), should the pool be free."""
    if xp is not None and getattr(xp, "name", None) != "numpy":
        return 1
    return min(n, active_threads()) if n >= 2 and work >= MIN_WORK else 1


def parallel(n: int, fn, work: float = float("inf"), xp=None) -> None:
    """Run ``fn(lo, hi)`` over ``[0, n)``: in chunks on the pool when it is on,
    ``n >= 2`` and ``work >= MIN_WORK``; else as ``fn(0, n)``. ``fn`` must write
    disjoint parts of its outputs for disjoint spans and may run in any thread;
    exceptions propagate to the caller. ``xp``: the op's array module, when it may
    be other than NumPy (an op's ``ctx.xp``): off the host (CuPy, the fake device)
    the work runs in one piece."""
    k = split_count(n, work, xp)
    if k < 2:
        fn(0, n)
        return
    pool = _get_pool(k)
    if not pool.lock.acquire(blocking=False):  # busy: another caller, or nested
        fn(0, n)
        return
    try:
        pool.run(fn, chunks(n, k))
    finally:
        pool.lock.release()


# matmul's units of work: OpenBLAS's result for a block of rows depends on how many
# rows the call has (its kernels for the row tail differ), so a product is always cut
# into the same blocks, whatever the thread count; the pool hands the threads
# contiguous runs of blocks. Blocks of columns where there are enough of them: each
# call then packs only its share of b, where a row block packs all of b (LeNet's
# 64x800 @ 800x500 at 2 threads: 0.79 ms by rows, 0.60 by columns, 0.75 in one
# call; at batch 256 3.13 / 1.69 / 3.08; VGG-small's 32x4096 @ 4096x256: 2.13 by
# rows (one block), 1.11 by columns of 128). Rows of 32 otherwise (they cost 10-20%
# over one call at one thread on LeNet's and VGG-small's shapes).
ROW_BLOCK = 32
COL_BLOCK = 128  # twice this from 4 * COL_BLOCK columns up


def matmul(a, b):
    """``a @ b`` for NumPy arrays, the result split across the pool: ``a`` (m, k)
    with any strides (a transposed view too) or (..., m, k) C-contiguous (the
    leading axes fold into the rows, as a linear layer's input), ``b`` (k, n). At
    ``MIN_WORK`` multiply-adds and more the result goes in blocks of
    :data:`COL_BLOCK` columns (from two blocks' worth up) or of :data:`ROW_BLOCK`
    rows, so every thread count gives the same bits; ``k == 1`` is a broadcast
    multiply (the same bits, much faster); anything else (other array types, a
    batched ``b``, small products) is plain ``a @ b``."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or b.ndim != 2 or a.ndim < 2 \
            or a.shape[-1] != b.shape[0] or (a.ndim > 2 and not a.flags.c_contiguous):
        return a @ b
    k, n = b.shape
    if k == 1:  # an outer product: OpenBLAS's K=1 GEMM takes ~7x as long (a linear
        return np.multiply(a, b)  # layer's weight gradient at batch 1); one product each
    rows = a.size // k if k else 0
    work = rows * k * n
    by_columns = n >= 2 * COL_BLOCK
    if work < MIN_WORK or not (by_columns or rows > ROW_BLOCK):
        return a @ b
    a2 = a.reshape(rows, k)
    out = np.empty((rows, n), dtype=np.result_type(a, b))
    if by_columns:
        width = COL_BLOCK * (2 if n >= 4 * COL_BLOCK else 1)

        def part(lo, hi):  # column blocks lo..hi
            for c in range(lo * width, min(n, hi * width), width):
                np.matmul(a2, b[:, c:c + width], out=out[:, c:c + width])

        parallel(-(-n // width), part, work)
    else:
        def part(lo, hi):  # row blocks lo..hi
            for r in range(lo * ROW_BLOCK, min(rows, hi * ROW_BLOCK), ROW_BLOCK):
                np.matmul(a2[r:r + ROW_BLOCK], b, out=out[r:r + ROW_BLOCK])

        parallel(-(-rows // ROW_BLOCK), part, work)
    return out.reshape(a.shape[:-1] + (n,))


# streamed's row: the flat arrays as (rows, STREAM_ROW) views, so that a ufunc against a
# (STREAM_ROW,) row of constants runs NumPy's contiguous SIMD loop (np.maximum(x, 0)
# against a 0-d zero takes 0.72 ms per 1M float32, against a zero row 0.20 ms)
STREAM_ROW = 4096


def streamed(fn, out, *arrays, passes: int = 1) -> bool:
    """``fn(out_part, *parts)`` over NumPy arrays of ``out``'s shape, C-contiguous or all
    dense in one layout (a channels-last activation, its gradient and ReLU's output), each
    cut into (r, STREAM_ROW) blocks of its flat data in memory order (and a 1-D tail), the
    blocks split across the pool (``passes`` streaming passes per element). Elementwise
    ``fn`` only: a part is any piece of the flat data. Returns False, having done nothing,
    when an array is of another type or layout (the caller then runs its plain
    expression)."""
    every = (out, *arrays)
    if any(type(a) is not np.ndarray or a.shape != out.shape for a in every):
        return False
    if all(a.flags.c_contiguous for a in every):
        flat = [a.reshape(-1) for a in every]
    else:  # one layout: the axes in memory order give C-contiguous views
        order = sorted(range(out.ndim), key=lambda d: -abs(out.strides[d]))
        flat = [a.transpose(order) for a in every]
        if any(a.strides != out.strides or not f.flags.c_contiguous
               for a, f in zip(every, flat)):
            return False
        flat = [f.reshape(-1) for f in flat]
    rows, tail = divmod(out.size, STREAM_ROW)
    if rows:
        blocks = [f[:rows * STREAM_ROW].reshape(rows, STREAM_ROW) for f in flat]
        parallel(rows, lambda lo, hi: fn(*(b[lo:hi] for b in blocks)),
                 out.size * passes * ELEMENT_WORK)
    if tail:
        fn(*(f[rows * STREAM_ROW:] for f in flat))
    return True


def copy(a):
    """A copy of ``a`` in its layout split across the pool, where ``a`` is a NumPy array
    that :func:`streamed` takes (a leaf's first gradient copied into ``.grad``: 4 MB
    float32 0.41 -> 0.27 ms at 2 threads); None for other arrays."""
    if type(a) is not np.ndarray:
        return None
    out = np.empty_like(a)  # a's layout where a is dense (order K)
    return out if streamed(np.copyto, out, a) else None
