"""The MPI backend (mpi4py): collectives as non-blocking MPI calls polled to a deadline.

Every collective is started non-blocking (``Iallreduce``, ``Ibcast``,
``Iallgather``, ``Ibarrier``) and waited on by :meth:`MPIGroup._wait`, which
spins on ``Test`` for the first ~100 microseconds (what ``MPI_Wait`` does), then
polls with 50 us sleeps and a clock. A *census* on a separate communicator
finds the collectives that can never finish, long before the timeout:

* a rank that leaves the job (its process ends, or destroy_process_group())
  tells every other rank how many collectives it started on each group; one
  waiting in a collective that rank never started raises
  :class:`~tapegrad.distributed.group.RankExitedError` at once;
* a wait longer than a second asks the other ranks which collective they wait
  in (they answer from inside their own waits) and how many each started; if
  this rank and others all wait in collectives another of them never started
  (rank 0 in a gradient all-reduce, rank 1 already in the final barrier), it
  raises :class:`~tapegrad.distributed.group.CollectiveDeadlock`.

Past the timeout the census names what each rank waits in ("rank 1 is waiting
in barrier #11") or that it gave no answer (still computing, stuck outside a
collective, or dead). A process that dies without finalising MPI is Open MPI's
launcher's to report: it ends the job within seconds, naming the rank. A
collective that finishes within a second pays for one ``Test`` and one
``Iprobe`` per poll and nothing else: no extra messages, no thread.
"""

from __future__ import annotations

import atexit
import time
import weakref

import numpy as np

from ..errors import DTypeError
from .group import (
    CollectiveDeadlock,
    CollectiveTimeout,
    DistributedError,
    ProcessGroup,
    RankExitedError,
)

__all__ = ["MPIGroup"]

_QUERY, _REPLY, _EXIT = 7101, 7102, 7103
_SPINS = 200  # Test() calls before the clock is read (~100 us): a normal wait ends here
# then each poll sleeps: on a machine with more ranks than free cores, a spinning waiter
# starves the very rank it waits for (a 2-rank epoch ran 2x slower with a 2 ms spin)
_POLL_SLEEP = 5e-5
# a wait this long asks the other ranks what they wait in (and again every _PROBE_EVERY
# s): ranks that wait in collectives the others never started are a deadlock, reported
# then rather than at the timeout. A wait that ends sooner sends nothing.
_FIRST_PROBE = 1.0
_PROBE_EVERY = 2.0
# a rank that left the job with this collective started but unfinished: how long to
# let it complete before saying so
_EXIT_GRACE = 5.0
_HINT = ("Every rank must call the same collectives in the same order: with uneven inputs "
         "(one rank has more batches than another: a DataLoader without drop_last over a "
         "DistributedSampler, or a rank that leaves its training loop early) wrap the loop "
         "in `with ddp.join():` (DistributedDataParallel's uneven-input mode), or give every "
         "rank the same number of batches (DistributedSampler(drop_last=True)).")


class _Census:
    """What this rank is waiting in right now and how many collectives it has
    started on each group, shared by all groups of the job, and the
    communicator the diagnostics talk on: queries and their replies, and the
    notice a rank sends every other one when it leaves the job."""

    def __init__(self, comm, MPI):
        self.comm = comm
        self.MPI = MPI
        self.current = None  # (group name, seq, what) while a wait runs
        self.started: dict = {}  # group name -> (seq, what) of its last started collective
        self.exited: dict = {}  # rank -> (started, how) from its exit notice
        self.replies: dict = {}  # rank -> (current, started) answering this wait's queries
        self._token = 0  # the latest query's number; replies to older ones are stale
        self._first = 1  # the first query of the wait running now
        self._sends = []
        self._left = False
        _live.add(self)

    def begin_wait(self) -> None:
        self.replies = {}
        self._first = self._token + 1

    def poll(self) -> bool:
        """Answer queries, take replies and exit notices; True when a reply came."""
        MPI = self.MPI
        st = MPI.Status()
        fresh = False
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st):
            src, tag = st.Get_source(), st.Get_tag()
            msg = self.comm.recv(source=src, tag=tag)
            if tag == _QUERY:
                self._sends.append(self.comm.isend((msg, self.current, dict(self.started)),
                                                   dest=src, tag=_REPLY))
            elif tag == _REPLY and msg[0] >= self._first:  # asked during this wait
                self.replies[src] = (msg[1], msg[2])
                fresh = True
            elif tag == _EXIT:
                self.exited[src] = msg
        self._sends = [r for r in self._sends if not r.Test()]
        return fresh

    def query(self, ranks) -> None:
        """Ask ``ranks`` what they wait in; the replies arrive through :meth:`poll`."""
        self._token += 1
        self._sends.extend(self.comm.isend(self._token, dest=r, tag=_QUERY) for r in ranks)

    def ask(self, ranks, grace: float) -> dict:
        """{rank: (group, seq, what) it waits in} for the ranks that answer in ``grace`` s."""
        self.replies, self._first = {}, self._token + 1  # fresh answers only
        self.query(ranks)
        end = time.monotonic() + grace
        while time.monotonic() < end and not all(
                r in self.replies and self.replies[r][0] is not None for r in ranks):
            self.poll()
            time.sleep(0.001)
        return {r: self.replies[r][0] for r in ranks
                if r in self.replies and self.replies[r][0] is not None}

    def leave(self, how: str) -> None:
        """Tell every other rank that this one takes part in no more collectives (at
        exit, or in destroy_process_group), with how many it started on each group:
        one still waiting in a collective this rank never started fails at once."""
        if self._left or self.comm is None or self.MPI.Is_finalized():
            return
        self._left = True
        me = self.comm.Get_rank()
        sends = [self.comm.isend((dict(self.started), how), dest=r, tag=_EXIT)
                 for r in range(self.comm.Get_size()) if r != me]
        end = time.monotonic() + 1.0  # small messages: sent at once (eager), no receive needed
        while sends and time.monotonic() < end:
            sends = [r for r in sends if not r.Test()]


# every census of this process: each tells the other ranks when the process ends
_live: weakref.WeakSet = weakref.WeakSet()


def _at_exit():
    for census in list(_live):
        census.leave("ended its process")


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
        label = f"{what} #{self.seq} on group {self.name!r}"
        self.census.started[self.name] = (self.seq, label)
        return self.seq, label

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
            self.census.leave("called destroy_process_group()")
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
        census.begin_wait()
        others = [r for r in range(census.comm.Get_size()) if r != self.rank]
        t0 = time.monotonic()
        deadline = t0 + self.timeout
        probe = t0 + min(_FIRST_PROBE, 0.25 * self.timeout)
        seen_exit: dict = {}
        try:
            while not req.Test():
                fresh = census.poll()
                now = time.monotonic()
                if census.exited:
                    self._check_exited(seq, label, seen_exit, now)
                if fresh:
                    self._check_deadlock(seq, label)
                if now > deadline:
                    self._timed_out(seq, label, now - t0)
                if now > probe:
                    census.query(others)
                    probe = now + _PROBE_EVERY
                time.sleep(_POLL_SLEEP)
        finally:
            census.current = outer

    def _check_exited(self, seq, label, seen, now):
        """RankExitedError if a rank that left the job never started this collective
        (or started it and it has not finished ``_EXIT_GRACE`` s after the notice)."""
        for r, (started, how) in sorted(self.census.exited.items()):
            theirs, last = started.get(self.name, (0, None))
            unfinished = theirs >= seq and now - seen.setdefault(r, now) > _EXIT_GRACE
            if theirs >= seq and not unfinished:
                continue  # it started this one before leaving: it can still finish
            ran = (f"after starting {theirs} collective(s) on group {self.name!r} (the last: "
                   f"{last})" if theirs else f"without starting any on group {self.name!r}")
            why = (f"it left {now - seen[r]:.1f} s ago with this collective unfinished"
                   if unfinished else f"it will never start #{seq}")
            raise RankExitedError(
                f"{label} cannot finish on rank {self.rank}: rank {r} {how} {ran}: {why}. "
                + _HINT)

    def _check_deadlock(self, seq, label):
        """CollectiveDeadlock if this rank is in a set of waiting ranks each of which
        waits in a collective that another of them never started: none can go on.
        (Every reply came while this rank waited here, unable to start anything.)"""
        waits = {self.rank: ((self.name, seq, label), dict(self.census.started))}
        waits.update({r: got for r, got in self.census.replies.items() if got[0] is not None})
        stuck = set(waits)

        def blocker(x):
            (group, s, _), _ = waits[x]
            return next((y for y in sorted(stuck)
                         if y != x and waits[y][1].get(group, (0,))[0] < s), None)

        changed = True
        while changed:  # the largest such set: drop ranks another could still release
            changed = False
            for x in sorted(stuck):
                if blocker(x) is None:
                    stuck.discard(x)
                    changed = True
        if self.rank not in stuck:
            return
        parts = []
        for x in sorted(stuck):
            (group, s, what), _ = waits[x]
            y = blocker(x)
            theirs, last = waits[y][1].get(group, (0, None))
            ran = f"started {theirs} there, the last: {last}" if theirs else "started none there"
            parts.append(f"rank {x} waits in {what}, which rank {y} never started ({ran})")
        raise CollectiveDeadlock(
            f"{label} can never finish on rank {self.rank}: the ranks wait in different "
            f"collectives: {'; '.join(parts)}. " + _HINT)

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
            "order (same number of batches, the same model; uneven inputs need "
            "`with ddp.join():`); if a rank is just slow, raise the timeout: "
            "init_process_group(timeout=SECONDS) or $TAPEGRAD_DIST_TIMEOUT.")


def init_mpi(timeout: float) -> MPIGroup:
    """The default group over ``MPI.COMM_WORLD`` (imports mpi4py, initialising MPI)."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DistributedError(
            "the mpi backend needs mpi4py and an MPI library: pip install 'tapegrad[mpi]' "
            f"(mpi4py plus the Open MPI wheel) ({exc})") from exc
    if not _registered:  # after mpi4py's import: runs before its MPI_Finalize
        atexit.register(_at_exit)
        _registered.append(True)
    return MPIGroup(MPI.COMM_WORLD, MPI, timeout)


_registered: list = []
