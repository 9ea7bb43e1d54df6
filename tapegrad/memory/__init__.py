"""``memory_report(loss)``: what the tape holds, and the peak its backward will reach.

Called after forward and before backward. It counts the arrays each tape
entry saved for its vjp (each buffer once: several entries may save one array,
and a view counts as its base), and simulates ``loss.backward()`` in the
engine's own order -- each entry's saved arrays freed after its vjp, one
gradient per pending output (summed at fan-in, freed when consumed), new leaf
``.grad`` buffers, and each vjp's temporaries (:mod:`tapegrad.memory.rules`).

**Peak during backward** (``predicted_peak``) is the most memory backward has
in use at once, counted above what was allocated before the forward: the
tape's own arrays still alive, gradients in flight and leaf gradients made so
far, and the running vjp's temporaries. Arrays held outside the tape
(parameters, the input batch, a tensor you keep) are not counted: backward
neither allocates nor frees them. At the start of backward the memory in use
is ``tape_bytes`` (the saved arrays only the tape holds), so the peak *above
the memory allocated at the start of backward* is ``predicted_increase``.
On CPU it is measured by tracemalloc (NumPy reports its allocations there):
``max traced during backward - traced before the forward``; on CUDA by the
CuPy memory pool's used bytes the same way (:class:`PeakMeter` does both).

The simulated backward is a first-order one (``create_graph=False``); with
``inputs=`` it walks what ``backward(inputs=...)`` walks. A checkpoint's entry
counts the recomputed segment's saved arrays and the peak of its replay.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from .. import engine
from ..device import get_device
from ..walks import _reachable, _toward
from . import sim as memory_sim

__all__ = ["memory_report", "MemoryReport", "OpMemory", "PeakMeter"]


@dataclass
class OpMemory:
    """One tape entry, in backward order: ``saved`` (bytes of the distinct
    buffers it holds), ``freed`` (bytes released after its vjp: buffers no later
    vjp needs and nothing outside the tape holds), ``temp`` (its vjp's estimated
    high-water mark above the memory at its start), ``live`` (memory in use when
    it starts) and ``peak`` (``live + temp``)."""

    seq: int
    name: str
    saved: int
    freed: int
    temp: int
    live: int
    peak: int


@dataclass
class MemoryReport:
    """What :func:`memory_report` returns; ``print()`` it for a table."""

    records: list = field(default_factory=list)
    total_saved: int = 0  # distinct buffers the tape holds, however shared or owned
    tape_bytes: int = 0  # of which only the tape holds (what backward frees)
    predicted_peak: int = 0
    peak_entry: str = ""
    leaf_grads: int = 0  # new .grad buffers backward allocates

    @property
    def predicted_increase(self) -> int:
        """The peak above the memory allocated at the start of backward."""
        return self.predicted_peak - self.tape_bytes

    def __str__(self) -> str:
        mib = 2 ** 20
        head = (f"{'entry':<22} {'saved MiB':>9} {'freed':>8} {'vjp temp':>8} "
                f"{'live':>8} {'peak':>8}")
        lines = [head, "-" * len(head)]
        for r in self.records:
            mark = " <- peak" if f"{r.name} #{r.seq}" == self.peak_entry else ""
            lines.append(f"{(r.name + ' #' + str(r.seq))[:22]:<22} {r.saved / mib:9.2f} "
                         f"{r.freed / mib:8.2f} {r.temp / mib:8.2f} {r.live / mib:8.2f} "
                         f"{r.peak / mib:8.2f}{mark}")
        lines.append("-" * len(head))
        lines.append(f"saved on the tape: {self.total_saved / mib:.2f} MiB (each buffer once), "
                     f"{self.tape_bytes / mib:.2f} MiB of it held by the tape alone")
        lines.append(f"predicted peak during backward: {self.predicted_peak / mib:.2f} MiB "
                     f"(at {self.peak_entry or '-'}; {self.predicted_increase / mib:+.2f} MiB "
                     f"above the start of backward; leaf .grad allocations "
                     f"{self.leaf_grads / mib:.2f} MiB)")
        return "\n".join(lines)


def memory_report(*tensors, inputs=None, retain_graph=False) -> MemoryReport:
    """Saved bytes per entry and the predicted peak of ``backward()`` from ``tensors``
    (of ``backward(retain_graph=True)`` with ``retain_graph``: then no saved array is
    freed as the walk goes).

    With the CPU worker pool on (``set_num_threads(n > 1)``), a vjp split into chunks
    is counted with every chunk's temporaries alive at once, the most it can take;
    chunks that happen to run one after the other peak lower.

    >>> rep = tapegrad.memory_report(loss); print(rep); rep.predicted_peak
    """
    roots = [t for t in tensors if t._node is not None]
    stack = list({t._node for t in roots})
    if inputs is None:
        order = _reachable(stack)
        leaf_ok, sinks = None, set()
    else:
        inputs = [inputs] if isinstance(inputs, engine.Tensor) else list(inputs)
        leaf_ok = {id(t) for t in inputs if t._node is None}
        order, sinks = _toward(leaf_ok, {(t._node, t._out_nr) for t in inputs
                                     if t._node is not None})(stack)
    buffers, _, owned = _buffers(order)
    rep = MemoryReport()
    rep.total_saved = sum(buffers.values())
    rep.tape_bytes = sum(b for k, b in buffers.items() if k in owned)
    seeds = [((t._node, t._out_nr), t.array.shape, t.array.dtype.itemsize, t.array.nbytes)
             for t in roots]
    leaf = memory_sim.LeafGrads(leaf_ok)
    sim = memory_sim.simulate(order, _node_keys(order, buffers), buffers, owned,
                              rep.tape_bytes, seeds, leaf, sinks, retain_graph)
    rep.predicted_peak, rep.peak_entry = sim.peak, sim.peak_at
    rep.leaf_grads = leaf.bytes
    rep.records = [OpMemory(*r) for r in sim.records]
    return rep


# ------------------------------------------------------------ saved buffers
def _saved_arrays(node):
    """The array objects ``node`` keeps: its saved arrays, and a saved Tensor's data."""
    for v in node.saved or ():
        if isinstance(v, engine.Tensor) or hasattr(v, "nbytes") and hasattr(v, "base"):
            yield v


def _held_by_tape_alone(objs, uses, children) -> set:
    """The ids whose only references are their uses in saved tuples and their
    saved children (views, Tensors) -- beyond ``objs``' own and getrefcount's."""
    return {k for k in list(objs)
            if sys.getrefcount(objs[k]) - 2 == uses.get(k, 0) + children.get(k, 0)}


def _collect(order):
    """({id: saved object}, {id: its uses in saved tuples}) -- in a function of its
    own, so that no loop variable holds a reference while they are counted."""
    objs, uses = {}, {}
    for node in order:
        for v in _saved_arrays(node):
            objs[id(v)] = v
            uses[id(v)] = uses.get(id(v), 0) + 1
    return objs, uses


def _links(objs):
    """Who refers to what among ``objs`` (grown with what they refer to): a saved
    Tensor to its data, a view to its base. ({id: parent id}, {id: children})."""
    parent, children = {}, {}
    todo = list(objs)
    while todo:
        k = todo.pop()
        v = objs[k]
        p = v.array if isinstance(v, engine.Tensor) else getattr(v, "base", None)
        if p is None:
            continue
        if id(p) not in objs:
            objs[id(p)] = p
            todo.append(id(p))
        parent[k] = id(p)
        children[id(p)] = children.get(id(p), 0) + 1
    return parent, children


def _buffers(order):
    """({base id: bytes}, {base id: [entries holding it]}, {ids only the tape holds})."""
    objs, uses = _collect(order)
    parent, children = _links(objs)
    alone = _held_by_tape_alone(objs, uses, children)

    def root(k):
        while k in parent:
            k = parent[k]
        return k

    buffers, holders, external = {}, {}, set()
    for node in order:
        for v in _saved_arrays(node):
            k = root(id(v))
            arr = objs[k]
            if isinstance(arr, engine.Tensor):
                arr = arr.array
            buffers[k] = int(arr.nbytes)
            holders.setdefault(k, []).append(node)
            j = id(v)
            while True:  # owned only if every link up to the base is held by the tape alone
                if j not in alone:
                    external.add(k)
                    break
                if j not in parent:
                    break
                j = parent[j]
    owned = set(buffers) - external
    return buffers, holders, owned


def _node_keys(order, buffers):
    """{entry: [its distinct buffer keys]}."""
    out = {}
    for node in order:
        keys = []
        for v in _saved_arrays(node):
            k = _root_of(v, buffers)
            if k is not None and k not in keys:
                keys.append(k)
        out[node] = keys
    return out


def _root_of(v, buffers):
    p = v
    while True:
        if id(p) in buffers:
            return id(p)
        q = p.array if isinstance(p, engine.Tensor) else getattr(p, "base", None)
        if q is None:
            return None
        p = q


# ------------------------------------------------------------- measuring
class PeakMeter:
    """The memory actually allocated, to check a report against: tracemalloc on
    CPU (NumPy reports its allocations there), the CuPy memory pool's used bytes
    on CUDA (through a pool hook). Bytes from ``with`` on; ``reset_peak()`` starts
    a new high-water mark.

    >>> with PeakMeter() as m: before = m.now(); loss = f(x); m.reset_peak(); loss.backward()
    >>> m.peak() - before          # compare with memory_report(loss).predicted_peak
    """

    def __init__(self, device="cpu"):
        self.device = get_device(device)
        self._hook = None

    def __enter__(self):
        if self.device.type == "cuda":
            self._hook = _pool_hook(self.device)
            self._hook.__enter__()
        else:
            import tracemalloc

            self._started = not tracemalloc.is_tracing()
            if self._started:
                tracemalloc.start()
        return self

    def __exit__(self, *exc):
        if self._hook is not None:
            self._hook.__exit__(*exc)
        elif self._started:
            import tracemalloc

            tracemalloc.stop()
        return False

    def now(self) -> int:
        if self._hook is not None:
            return self._hook.used
        import tracemalloc

        return tracemalloc.get_traced_memory()[0]

    def peak(self) -> int:
        if self._hook is not None:
            return self._hook.high
        import tracemalloc

        return tracemalloc.get_traced_memory()[1]

    def reset_peak(self) -> None:
        if self._hook is not None:
            self._hook.high = self._hook.used
        else:
            import tracemalloc

            tracemalloc.reset_peak()


def _pool_hook(device):
    """A CuPy memory hook counting the pool bytes in use and their high-water mark."""
    import cupy

    class _Hook(cupy.cuda.MemoryHook):
        name = "tapegrad_peak"

        def __init__(self):
            self.used = self.high = 0

        def malloc_postprocess(self, **kw):
            self.used += kw["mem_size"]
            self.high = max(self.high, self.used)

        def free_postprocess(self, **kw):
            self.used -= kw["mem_size"]

    return _Hook()
