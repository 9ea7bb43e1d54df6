"""CPU thread count: ``set_num_threads`` / ``get_num_threads`` (PyTorch's names).

The count is the number of threads tapegrad's CPU ops may use. Today all the
parallel work on the CPU is inside NumPy's BLAS (every matmul, im2col GEMM and
linear layer), so setting the count sets BLAS's thread count, through
threadpoolctl (a scikit-learn dependency) when it is installed.

Without threadpoolctl the count is recorded (``get_num_threads`` returns it)
but BLAS keeps the thread count it read from the environment when it loaded:
set ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS`` (or ``MKL_NUM_THREADS``)
before starting Python instead.

The default, until ``set_num_threads`` is called, is ``OMP_NUM_THREADS`` when
it is set to a positive integer (as PyTorch), else the cores this process may
run on (``os.sched_getaffinity``, which honours ``taskset`` and container CPU
sets; ``os.cpu_count()`` where that does not exist). Reading the default does
not touch BLAS.
"""

from __future__ import annotations

import os

from ..errors import ArgumentError, ArgumentTypeError

__all__ = ["get_num_threads", "set_num_threads", "default_num_threads"]

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
    """Use ``n`` threads in CPU ops, BLAS included (PyTorch's ``torch.set_num_threads``).

    Sets the BLAS thread count through threadpoolctl when it is installed (for
    the whole process, as BLAS libraries keep one count); without it only the
    recorded count changes (see the module notes).

    >>> tapegrad.set_num_threads(1); tapegrad.get_num_threads()   # 1
    """
    global _num_threads
    if isinstance(n, bool) or not isinstance(n, int):
        raise ArgumentTypeError(f"set_num_threads: expected a positive int, got "
                                f"{type(n).__name__} {n!r}")
    if n < 1:
        raise ArgumentError(f"set_num_threads: the number of threads must be at least 1, "
                            f"got {n}")
    _set_blas_threads(n)
    _num_threads = n


def _set_blas_threads(n: int) -> bool:
    """Set every loaded BLAS library's thread count to ``n``; False when
    threadpoolctl is not installed (nothing changed)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return False
    # called, not entered: the limit stays in force (threadpoolctl restores only on __exit__)
    threadpool_limits(limits=n, user_api="blas")
    return True
