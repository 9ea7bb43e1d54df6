"""Process groups: who the ranks are, and the array-level collectives.

A group's collectives take raw arrays (NumPy, or CuPy through a host copy on
the MPI backend) and reduce in place; :mod:`tapegrad.distributed.collectives`
wraps them for Tensors. Three kinds: :class:`LocalGroup` (one process, no MPI
needed), :class:`~tapegrad.distributed.mpi.MPIGroup` and the (unverified)
:class:`~tapegrad.distributed.nccl.NCCLGroup`.
"""

from __future__ import annotations

import os
import pickle

import numpy as np

from ..errors import TapegradError

__all__ = ["DistributedError", "CollectiveTimeout", "RankExitedError", "CollectiveDeadlock",
           "ProcessGroup", "LocalGroup",
           "launched_world_size", "DEFAULT_TIMEOUT", "timeout_from_env"]

# seconds a collective may wait for the other ranks before the diagnostic; PyTorch's
# default is 30 min, which hides a hang for too long on the small jobs tapegrad runs
DEFAULT_TIMEOUT = 300.0
TIMEOUT_ENV = "TAPEGRAD_DIST_TIMEOUT"

# what the common MPI launchers put in each rank's environment
_LAUNCHER_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS",
                       "MV2_COMM_WORLD_SIZE")


class DistributedError(TapegradError, RuntimeError):
    """A distributed setup or collective failed (no MPI, ranks that disagree, ...)."""


class CollectiveTimeout(DistributedError, TimeoutError):
    """A collective waited longer than the timeout; the message names the ranks
    that did not arrive."""


class RankExitedError(CollectiveTimeout):
    """A collective can never finish: a rank it needs has left the job (its
    process ended, or it called ``destroy_process_group()``) without starting
    it. Raised within a second or so, not at the timeout; the message names the
    rank and the last collective it ran."""


class CollectiveDeadlock(CollectiveTimeout):
    """A collective can never finish: this rank and others wait in collectives
    that the others never started (uneven inputs, a rank that left its loop and
    went on to other collectives). Raised within a few seconds, not at the
    timeout; the message says where each rank waits."""


def launched_world_size() -> int | None:
    """The world size an MPI launcher (mpirun, mpiexec, srun) announced in the
    environment, or None when this process was started without one."""
    for var in _LAUNCHER_SIZE_VARS:
        v = os.environ.get(var)
        if v and v.strip().isdigit():
            return int(v)
    return None


def timeout_from_env(timeout) -> float:
    """The collective timeout in seconds: ``timeout`` (seconds or a timedelta),
    else ``$TAPEGRAD_DIST_TIMEOUT``, else :data:`DEFAULT_TIMEOUT`."""
    if timeout is None:
        text = os.environ.get(TIMEOUT_ENV)
        if not text:
            return DEFAULT_TIMEOUT
        try:
            timeout = float(text)
        except ValueError:
            raise DistributedError(f"${TIMEOUT_ENV}={text!r}: expected a number of seconds") \
                from None
    if hasattr(timeout, "total_seconds"):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise DistributedError(f"timeout must be a positive number of seconds (or a "
                               f"timedelta), got {timeout!r}")
    return float(timeout)


class ProcessGroup:
    """The ranks of one job and their collectives on raw arrays (in place).

    ``op`` is one of ``"sum"``, ``"max"``, ``"min"``, ``"product"``; the mean is
    a sum divided by the caller. Every rank must call the same collectives in
    the same order.
    """

    backend = "?"
    rank = 0
    size = 1
    timeout = DEFAULT_TIMEOUT

    def allreduce(self, a, op: str = "sum", what: str = "all_reduce") -> None:
        raise NotImplementedError

    def iallreduce(self, a, op: str = "sum", what: str = "all_reduce"):
        """Start a non-blocking allreduce of ``a`` in place; returns a request with
        ``test() -> bool`` and ``wait()`` (which honours the timeout)."""
        raise NotImplementedError

    def broadcast(self, a, src: int = 0, what: str = "broadcast") -> None:
        raise NotImplementedError

    def allgather(self, a, what: str = "all_gather"):
        """``(size, *a.shape)``: every rank's ``a``, in rank order."""
        raise NotImplementedError

    def barrier(self, what: str = "barrier") -> None:
        raise NotImplementedError

    def allgather_object(self, obj, what: str = "all_gather_object") -> list:
        """Every rank's picklable ``obj``, in rank order."""
        raw = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
        sizes = self.allgather(np.array([raw.size], np.int64), what)[:, 0]
        out = np.zeros((self.size, int(sizes.max())), np.uint8)
        out[self.rank, :raw.size] = raw
        # one padded gather: (size, longest) bytes; objects here are small (setup checks)
        gathered = self.allgather(out[self.rank], what)
        return [pickle.loads(gathered[r, :int(n)].tobytes()) for r, n in enumerate(sizes)]

    def broadcast_object(self, obj, src: int = 0, what: str = "broadcast_object"):
        """Rank ``src``'s picklable ``obj`` on every rank."""
        raw = (np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
               if self.rank == src else None)
        n = np.array([0 if raw is None else raw.size], np.int64)
        self.broadcast(n, src, what)
        buf = raw.copy() if raw is not None else np.empty(int(n[0]), np.uint8)
        self.broadcast(buf, src, what)
        return obj if self.rank == src else pickle.loads(buf.tobytes())

    def split(self) -> ProcessGroup:
        """A new group of the same ranks whose collectives never match this one's
        (DistributedDataParallel reduces on its own, so its non-blocking
        reductions cannot interleave with SyncBatchNorm's). Collective."""
        raise NotImplementedError

    def abort(self, status: int = 1) -> None:
        """End every rank of the job now (MPI_Abort)."""
        os._exit(status)

    def destroy(self) -> None:
        pass

    def __repr__(self):
        return f"<{type(self).__name__} backend={self.backend} rank {self.rank} of {self.size}>"


class _Done:
    """A finished request (world size 1)."""

    def test(self) -> bool:
        return True

    def wait(self) -> None:
        pass


class LocalGroup(ProcessGroup):
    """World size 1 without MPI: every collective is the identity."""

    backend = "local"

    def __init__(self, backend: str = "local", timeout: float = DEFAULT_TIMEOUT):
        self.backend = backend
        self.timeout = timeout

    def allreduce(self, a, op="sum", what="all_reduce"):
        pass

    def iallreduce(self, a, op="sum", what="all_reduce"):
        return _Done()

    def broadcast(self, a, src=0, what="broadcast"):
        pass

    def allgather(self, a, what="all_gather"):
        return a[None].copy()

    def barrier(self, what="barrier"):
        pass

    def allgather_object(self, obj, what="all_gather_object"):
        return [obj]

    def broadcast_object(self, obj, src=0, what="broadcast_object"):
        return obj

    def split(self):
        return LocalGroup(self.backend, self.timeout)
