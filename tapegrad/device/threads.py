"""CPU thread count: ``set_num_threads`` / ``get_num_threads`` (PyTorch's names).

The count is the number of threads tapegrad's CPU ops use. Convolutions
(conv2d, conv_transpose2d), linear layers, max pooling, ReLU and the SGD update
split their work across a pool of that many threads
(:mod:`tapegrad.device.pool`), each calling BLAS single-threaded: OpenBLAS
keeps one thread count per process and threads the per-image GEMMs of a
convolution poorly, so while the pool is in use the process's BLAS is pinned
to one thread (:func:`pin_blas`, through threadpoolctl). NumPy code of your
own in the same process then runs its BLAS calls on one thread too; call
``tapegrad.set_num_threads(1)`` and threadpoolctl's ``threadpool_limits``
yourself if you need BLAS's threads back for it.

Without threadpoolctl (``pip install threadpoolctl``; the ``train`` and
``test`` extras bring it) BLAS cannot be pinned, so the pool stays off: ops
run in one piece and BLAS keeps the thread count it read from the
environment (``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS``) when it loaded.

Where oneDNN is installed (``tapegrad[onednn]``), float32 convolutions, pooling and (on
channels-last inputs) batch norm run on it instead, on that many OpenMP threads
(:mod:`tapegrad.device.onednn`); they give the same bits from run to run at a given
count, but not across counts. The NumPy paths
(``tapegrad.backends.onednn.flags(enabled=False)``) keep the stronger promise below.

The default, until ``set_num_threads`` is called, is ``OMP_NUM_THREADS`` when
it is set to a positive integer (as PyTorch), else the cores this process may
run on (``os.sched_getaffinity``, which honours ``taskset`` and container CPU
sets; ``os.cpu_count()`` where that does not exist). Reading the default does
not touch BLAS; the first op that splits pins it.
"""

from __future__ import annotations

import os

from ..errors import ArgumentError, ArgumentTypeError
from . import onednn

__all__ = ["get_num_threads", "set_num_threads", "default_num_threads", "pin_blas"]

_num_threads: int | None = None  # None: the default, computed on first read


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def default_num_threads() -> int:
    """The count used before any ``set_num_threads``: ``OMP_NUM_THREADS`` if it is
    a positive integer (its first entry, for OpenMP's nested list ``"4,2"``), else
    the cores available.

    >>> default_num_threads()    # 2 on a 2-core machine without OMP_NUM_THREADS
    """
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return _cores()


def get_num_threads() -> int:
    """The number of threads tapegrad's CPU ops use (PyTorch's ``torch.get_num_threads``).

    >>> tapegrad.get_num_threads()   # e.g. 2
    """
    global _num_threads
    if _num_threads is None:
        _num_threads = default_num_threads()
    return _num_threads


def set_num_threads(n: int) -> None:
    """Use ``n`` threads in CPU ops (PyTorch's ``torch.set_num_threads``).

    ``n > 1`` splits the large ops across ``n`` threads, each running BLAS on one
    thread; ``n == 1`` runs every op in the calling thread. Either way the
    process's BLAS is pinned to one thread (when threadpoolctl is installed;
    see the module notes). On the NumPy paths results are bitwise the same for every
    ``n``; oneDNN's convolutions (where installed) use ``n`` OpenMP threads and are
    the same from run to run at each ``n``.

    >>> tapegrad.set_num_threads(1); tapegrad.get_num_threads()   # 1
    """
    global _num_threads
    if isinstance(n, bool) or not isinstance(n, int):
        raise ArgumentTypeError(f"set_num_threads: expected a positive int, got "
                                f"{type(n).__name__} {n!r}")
    if n < 1:
        raise ArgumentError(f"set_num_threads: the number of threads must be at least 1, "
                            f"got {n}")
    _num_threads = n
    pin_blas()
    onednn.set_num_threads(n)  # its OpenMP threads (when the library is loaded or loads)


_pinned: bool | None = None  # None: not tried yet; then whether BLAS runs at one thread


def pin_blas() -> bool:
    """Set every loaded BLAS library to one thread per call, once per process;
    True when that is in force, False when threadpoolctl is not installed (BLAS
    keeps its own count and the pool stays off)."""
    global _pinned
    if _pinned is None:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            _pinned = False
        else:
            # called, not entered: the limit stays in force (it is restored only on __exit__)
            threadpool_limits(limits=1, user_api="blas")
            _pinned = True
    return _pinned
