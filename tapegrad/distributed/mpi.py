"""The MPI backend (mpi4py): collectives as non-blocking MPI calls polled to a deadline.

Every collective is started non-blocking (``Iallreduce``, ``Ibcast``,
``Iallgather``, ``Ibarrier``) and waited on by :meth:`MPIGroup._wait`, which
spins on ``Test`` for the first ~100 microseconds (what ``MPI_Wait`` does), then
polls with 50 us sleeps and a clock. Past the timeout it runs a *census*: it asks
every other rank, on a separate communicator, which collective it is waiting
in. Ranks answer from inside their own waits, so the error can say "rank 1 is
waiting in barrier #11" or "rank 2 gave no answer (still computing, stuck
outside a collective, or dead)". A collective that finishes in time pays for one
``Test`` per poll and nothing else: no extra messages, no thread.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import DTypeError
from .group import CollectiveTimeout, DistributedError, ProcessGroup

__all__ = ["MPIGroup"]

_QUERY, _REPLY = 7101, 7102
_SPINS = 200  # Test() calls before the clock is read (~100 us): a normal wait ends here
# then each poll sleeps: on a machine with more ranks than free cores, a spinning waiter
# starves the very rank it waits for (a 2-rank epoch ran 2x slower with a 2 ms spin)
_POLL_SLEEP = 5e-5


class _Census:
    """What this rank is waiting in right now, shared by all groups of the job,
    and the communicator the timeout diagnostic talks on."""

    def __init__(self, comm, MPI):
        self.comm = comm
        self.MPI = MPI
        self.current = None  # (group name, seq, what) while a wait runs
        self._sends = []

    def answer(self) -> None:
        """Reply to the ranks that asked what this rank is waiting in."""
        MPI = self.MPI
        st = MPI.Status()
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_QUERY, status=st):
            src = st.Get_source()
            self.comm.recv(source=src, tag=_QUERY)
            self._sends.append(self.comm.isend(self.current, dest=src, tag=_REPLY))
        self._sends = [r for r in self._sends if not r.Test()]

    def ask(self, ranks, grace: float) -> dict:
        """{rank: (group, seq, what) it waits in} for the ranks that answer in ``grace`` s."""
        MPI = self.MPI
        sends = [self.comm.isend(self.current, dest=r, tag=_QUERY) for r in ranks]
        replies: dict = {}
        end = time.monotonic() + grace
        st = MPI.Status()
        while len(replies) < len(ranks) and time.monotonic() < end:
            self.answer()
            while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_REPLY, status=st):
                src = st.Get_source()
                replies[src] = self.comm.recv(source=src, tag=_REPLY)
            time.sleep(0.001)
        self._sends.extend(sends)
        return replies


class _Request:
    """A started collective: ``test()`` (progress, no wait) and ``wait()``."""

    __slots__ = ("group", "req", "seq", "what", "finish")

    def __init__(self, group, req, seq, what, finish):
        self.group, self.req, self.seq, self.what, self.finish = group, req, seq, what, finish

    def test(self) -> bool:
        if self.req is None:
            return True
        if not self.req.Test():
            return False
        self._done()
        return True

    def wait(self) -> None:
        if self.req is not None:
            self.group._wait(self.req, self.seq, self.what)
            self._done()

    def _done(self):
        self.req = None
        if self.finish is not None:
            self.finish()
            self.finish = None


def _host(a):
    """``(contiguous host array to communicate, function to copy it back or None)``:
    NumPy arrays go as they are; CuPy arrays through a host copy (the mpi4py
    wheels are not CUDA-aware); float16 as float32 for reductions, as PyTorch's
    CPU collectives do not reduce half either."""
    if isinstance(a, np.ndarray) and a.flags.c_contiguous and a.dtype.kind in "fiucb" \
            and a.dtype != np.float16:
        return a, None
    if isinstance(a, np.ndarray):
        buf = np.ascontiguousarray(a)
    else:
        buf = np.ascontiguousarray(a.get())  # CuPy
    if buf.dtype == np.float16:
        buf = buf.astype(np.float32)
    elif buf.dtype.kind not in "fiucb":
        raise DTypeError(f"distributed: cannot communicate arrays of dtype {a.dtype}")
    if buf is a:
        return a, None

    def back():
        if isinstance(a, np.ndarray):
            a[...] = buf
        else:
            import cupy

            a[...] = cupy.asarray(buf, dtype=a.dtype)
    return buf, back


class MPIGroup(ProcessGroup):
    """A group of MPI ranks (``MPI.COMM_WORLD`` for the default group)."""

    backend = "mpi"

    def __init__(self, comm, MPI, timeout: float, name: str = "world", census=None):
        self.MPI = MPI
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.timeout = timeout
        self.name = name
        self.seq = 0
        self.census = census if census is not None else _Census(comm.Dup(), MPI)
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "product": MPI.PROD}
        self._bool_ops = {"max": MPI.LOR, "min": MPI.LAND}
        self._splits = 0

    # ----------------------------------------------------------- collectives
    def _start(self, what):
        self.seq += 1
        return self.seq, f"{what} #{self.seq} on group {self.name!r}"

    def iallreduce(self, a, op="sum", what="all_reduce"):
        seq, label = self._start(what)
        buf, back = _host(a)
        if buf.dtype.kind == "b" and op not in ("max", "min"):
            raise DTypeError(f"{what}: op {op!r} on a bool array; use max (any) or min (all)")
        # MPI defines MAX/MIN for numbers only; on bools they are the logical OR/AND
        mpi_op = self._bool_ops[op] if buf.dtype.kind == "b" else self._ops[op]
        req = self.comm.Iallreduce(self.MPI.IN_PLACE, buf, mpi_op)
        return _Request(self, req, seq, label, back)

    def allreduce(self, a, op="sum", what="all_reduce"):
        self.iallreduce(a, op, what).wait()

    def broadcast(self, a, src=0, what="broadcast"):
        seq, label = self._start(what)
        buf, back = _host(a)
        _Request(self, self.comm.Ibcast(buf, root=src), seq, label, back).wait()

    def allgather(self, a, what="all_gather"):
        seq, label = self._start(what)
        buf, _ = _host(a)
        out = np.empty((self.size, *buf.shape), buf.dtype)
        self._wait(self.comm.Iallgather(buf, out), seq, label)
        if not isinstance(a, np.ndarray):  # CuPy in, CuPy out
            import cupy

            return cupy.asarray(out, dtype=a.dtype)
        return out.astype(a.dtype, copy=False)

    def barrier(self, what="barrier"):
        seq, label = self._start(what)
        self._wait(self.comm.Ibarrier(), seq, label)

    def split(self):
        self._splits += 1
        return MPIGroup(self.comm.Dup(), self.MPI, self.timeout,
                        f"{self.name}.{self._splits}", self.census)

    def abort(self, status=1):
        self.comm.Abort(status)

    def destroy(self):
        if self.MPI.Is_finalized():  # at exit, after mpi4py's MPI_Finalize: nothing to free
            return
        if self.comm is not self.MPI.COMM_WORLD:
            if self.comm != self.MPI.COMM_NULL:  # once (Free leaves the handle null)
                self.comm.Free()
        elif self.census.comm is not None:  # the world group owns the census communicator
            self.census.comm.Free()
            self.census.comm = None

    # ------------------------------------------------------- waiting, timeout
    def _wait(self, req, seq, label):
        for _ in range(_SPINS):
            if req.Test():
                return
        census = self.census
        outer = census.current
        census.current = (self.name, seq, label)
        t0 = time.monotonic()
        deadline = t0 + self.timeout
        try:
            while not req.Test():
                census.answer()
                now = time.monotonic()
                if now > deadline:
                    self._timed_out(seq, label, now - t0)
                time.sleep(_POLL_SLEEP)
        finally:
            census.current = outer

    def _timed_out(self, seq, label, waited):
        others = [r for r in range(self.census.comm.Get_size()) if r != self.rank]
        grace = min(max(1.0, 0.1 * self.timeout), 10.0)
        replies = self.census.ask(others, grace)
        arrived, elsewhere, silent = [self.rank], [], []
        for r in others:
            got = replies.get(r)
            if got is None:
                silent.append(r)
            elif got[0] == self.name and got[1] == seq:
                arrived.append(r)
            else:
                elsewhere.append(f"rank {r} is waiting in {got[2]}")
        missing = sorted(silent + [r for r in others if r in replies and r not in arrived])
        parts = [f"{label} timed out on rank {self.rank} after {waited:.1f} s "
                 f"(timeout {self.timeout:g} s): rank(s) {', '.join(map(str, missing))} did "
                 "not arrive"]
        parts += elsewhere
        if silent:
            parts.append(f"rank(s) {', '.join(map(str, silent))} gave no answer (still "
                         "computing, stuck outside tapegrad's collectives, or dead)")
        parts.append(f"arrived: rank(s) {', '.join(map(str, sorted(arrived)))}")
        raise CollectiveTimeout(
            "; ".join(parts) + ". Every rank must call the same collectives in the same "
            "order (same number of batches, the same model); if a rank is just slow, raise "
            "the timeout: init_process_group(timeout=SECONDS) or $TAPEGRAD_DIST_TIMEOUT.")


def init_mpi(timeout: float) -> MPIGroup:
    """The default group over ``MPI.COMM_WORLD`` (imports mpi4py, initialising MPI)."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DistributedError(
            "the mpi backend needs mpi4py and an MPI library: pip install 'tapegrad[mpi]' "
            f"(mpi4py plus the Open MPI wheel) ({exc})") from exc
    return MPIGroup(MPI.COMM_WORLD, MPI, timeout)
