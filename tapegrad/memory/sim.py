"""The simulated backward behind :func:`tapegrad.memory_report`.

It follows ``engine.run_backward`` step by step: an entry's output gradients
are popped from ``pending``; its vjp runs (its temporaries and input gradients
from :mod:`tapegrad.memory.rules`) while the previous vjp's results are still
bound; then its saved buffers that no later vjp needs are freed, and each input
gradient goes to its leaf or joins ``pending`` (a sum at fan-in is a new array).
Gradient arrays are reference-counted, so a view (reshape's vjp) keeps its base.
"""

from __future__ import annotations

import math

from . import rules as memory_rules


class _Obj:
    """A simulated gradient array: its bytes, its holders, and its base if a view."""

    __slots__ = ("nbytes", "refs", "base")

    def __init__(self, nbytes, base=None):
        self.nbytes, self.refs, self.base = nbytes, 0, base


class _Live:
    """Bytes in use, and the gradient arrays' reference counts."""

    def __init__(self, live):
        self.live = live

    def new(self, nbytes):
        self.live += nbytes
        return _Obj(nbytes)

    def hold(self, o):
        if o is not None:
            o.refs += 1
        return o

    def drop(self, o):
        while o is not None:
            o.refs -= 1
            if o.refs > 0:
                return
            self.live -= o.nbytes
            o = o.base  # a view released: its base loses a holder


class LeafGrads:
    """Leaves as ``backward()`` treats them: a new ``.grad`` the first time one
    without a ``.grad`` is reached (``only``: the ids of ``inputs=``)."""

    def __init__(self, only=None):
        self.only, self.done, self.bytes = only, set(), 0

    def __call__(self, live, target, g, nbytes):
        if self.only is not None and id(target) not in self.only:
            return
        if target.grad is None and id(target) not in self.done:
            self.done.add(id(target))
            self.bytes += nbytes
            live.new(nbytes)  # kept: the leaf's new .grad


def captured(live, target, g, nbytes):
    """Leaves as a checkpoint's inner backward treats them: the gradient itself
    is kept (captured for the outer backward)."""
    live.hold(g)


class Result:
    peak = 0
    peak_at = ""

    def __init__(self):
        self.records = []  # (seq, name, saved, freed, temp, live, peak)


def simulate(order, node_keys, buffers, owned, live, seeds, leaf, sinks=(), retain=False):
    """Replay ``order`` (the engine's) on sizes only; see the module doc.

    ``node_keys``: {entry: its distinct saved-buffer keys}; ``buffers``: {key:
    bytes}; ``owned``: keys backward frees (none with ``retain``, as
    ``backward(retain_graph=True)``); ``live``: bytes in use at the start;
    ``seeds``: ((entry, output), shape, itemsize, bytes) per root gradient."""
    if retain:
        owned = ()
    mem = _Live(live)
    res = Result()
    pending, meta = {}, {}  # (entry, output) -> _Obj; -> (shape, itemsize) of its gradient
    for key, shape, itemsize, nbytes in seeds:
        old = pending.get(key)
        pending[key] = mem.hold(mem.new(nbytes))
        if old is not None:
            mem.drop(old)
        meta[key] = (shape, itemsize)
    left = {}
    for node in order:
        for k in node_keys.get(node, ()):
            left[k] = left.get(k, 0) + 1
    res.peak = mem.live
    prev = []  # the previous vjp's input gradients (the engine's in_grads, still bound)
    for node in order:
        outs = [pending.pop((node, k), None) for k in range(node.n_out)]
        if all(o is None for o in outs) or node in sinks:
            for o in outs:
                mem.drop(o)
            continue
        temp, special = memory_rules.estimate(node, meta.get((node, 0), ((), 4)))
        start = mem.live
        if start + temp > res.peak:
            res.peak, res.peak_at = start + temp, f"{node.name} #{node.seq}"
        made = {}
        for index, _, _, shape, dtype in node.edges:
            how = special.get(index)
            if how == memory_rules.ALIAS:
                base = next((o for o in outs if o is not None), None)
                made[index] = mem.hold(_Obj(0, mem.hold(base)))
            else:
                nb = how if isinstance(how, int) else math.prod(shape) * dtype.itemsize
                made[index] = mem.hold(mem.new(nb))
        for o in prev:
            mem.drop(o)
        prev = list(made.values())
        freed = 0
        for k in node_keys.get(node, ()):
            left[k] -= 1
            if left[k] == 0 and k in owned:
                freed += buffers[k]
        mem.live -= freed
        for index, target, out_nr, shape, dtype in node.edges:
            g = made[index]
            nb = math.prod(shape) * dtype.itemsize
            if out_nr < 0:
                leaf(mem, target, g, nb)  # a new .grad while the vjp's results are alive
            else:
                key = (target, out_nr)
                meta[key] = (shape, dtype.itemsize)
                old = pending.get(key)
                if old is None:
                    pending[key] = mem.hold(g)
                else:  # the sum at fan-in is new, next to both of its terms
                    pending[key] = mem.hold(mem.new(nb))
                    _at_most(res, mem, node)
                    mem.drop(old)
            _at_most(res, mem, node)
        for o in outs:  # the engine's buf: bound until the next entry's is popped
            mem.drop(o)
        saved = sum(buffers[k] for k in node_keys.get(node, ()))
        res.records.append((node.seq, node.name, saved, freed, temp, start, start + temp))
    return res


def _at_most(res, mem, node):
    """Raise the peak to the memory in use now, if that is higher."""
    if mem.live > res.peak:
        res.peak, res.peak_at = mem.live, f"{node.name} #{node.seq}"
