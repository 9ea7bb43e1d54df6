"""Activation checkpointing: trade compute for memory (PyTorch's ``torch.utils.checkpoint``).

``checkpoint(fn, *args)`` runs ``fn`` without keeping what its ops save for
their vjps, and records **one** tape entry for the whole segment. Its edges are
the segment's boundary, found while it runs: the inputs that require grad, the
parameters ``fn`` uses (a module's, or captured in a closure) and any earlier
tensor it reads. In backward the entry re-runs ``fn`` with grad enabled -- the
random state (dropout masks) restored, so the recomputation is identical --
and replays the recomputed entries only, capturing the gradients that reach
the boundary; the outer backward takes them from there, so leaves accumulate,
hooks run and ``backward(inputs=...)`` prunes exactly as without a checkpoint.
Under ``create_graph`` the replay is itself recorded (double backward works).

This is the non-reentrant variant (PyTorch's recommended one). While
recomputing, :func:`is_recomputing` is True: batch norm then neither updates
its running statistics nor counts the batch again (PyTorch updates them twice).
"""

from __future__ import annotations

import copy
import sys
import threading
import types
import weakref
from collections.abc import Callable
from contextlib import contextmanager, suppress
from typing import Any

from .. import engine, random, tape, walks
from ..errors import ArgumentError, GraphError, describe
from ..grad_mode import enable_grad, is_grad_enabled
from ..tape import Function, _entry

__all__ = ["checkpoint", "checkpoint_sequential", "is_recomputing"]


class _State(threading.local):
    segment = None  # the running checkpointed forward's _Segment, in this thread
    recomputing = 0  # depth of checkpoint recomputations running in this thread
    replaying = None  # the running recomputation's _Replay (what profile() maps ops by)


class _Replay:
    """One recomputation of a segment: its ops are that segment's forward ops again,
    in order (:class:`tapegrad.autograd.profile` reports them on the same records)."""

    __slots__ = ("segment", "__weakref__")

    def __init__(self, segment):
        self.segment = segment


_state = _State()
_active = 0  # checkpointed forwards running, all threads (tape._unsaved is set meanwhile)
_lock = threading.Lock()


def is_recomputing() -> bool:
    """True while a checkpoint re-runs its function in backward (in this thread).

    >>> if not tapegrad.utils.checkpoint.is_recomputing(): count_batch()
    """
    return _state.recomputing > 0


class _Segment:
    """What a checkpointed forward dropped, by size only (for memory_report): per
    entry the keys of the buffers it would have saved, and each buffer's bytes.
    Buffers are told apart by a weak reference: a dropped array's id may be reused."""

    parent = None  # the checkpointed forward this one runs inside (nested checkpoints)

    def __init__(self):
        self.keys = {}  # entry -> [buffer key]
        self.sizes = {}  # buffer key -> bytes
        self._refs = {}  # id(base) -> (weakref to it, key)

    def key(self, a):
        """The key of ``a``'s buffer (its base), or None if it is not an array."""
        if isinstance(a, engine.Tensor):
            a = a.array
        if not (hasattr(a, "nbytes") and hasattr(a, "base")):
            return None
        base = a if a.base is None else a.base
        hit = self._refs.get(id(base)) if self._refs is not None else None
        if hit is not None and hit[0]() is base:
            return hit[1]
        key = len(self.sizes)
        if self._refs is not None:
            with suppress(TypeError):  # no weak references to this type: counted each time
                self._refs[id(base)] = (weakref.ref(base), key)
        self.sizes[key] = int(base.nbytes)
        return key

    def note(self, node, items):
        keys = {self.key(a) for a in items} - {None}
        if keys:
            self.keys[node] = list(keys)

    def plan(self, roots, start, outside):
        """Keep what :meth:`estimate` needs (sizes and the dropped entries -- no
        arrays); the simulation runs only if a memory_report asks for it."""
        self.kept = {self.key(a) for a in outside} - {None}  # arrays that exist anyway
        self._refs = None  # the forward is over: no more arrays to tell apart
        self.start = start
        self.seeds = [((r._node, r._out_nr), r.array.shape, r.array.dtype.itemsize, 0)
                      for r in roots]
        self._estimate = None
        return self

    def estimate(self) -> tuple[int, int]:
        """(bytes the recomputation saves, predicted peak of its replay in backward)."""
        if self._estimate is None:
            from ..memory import sim as memory_sim

            owned = set(self.sizes) - self.kept
            order, sinks = walks._segment(self.start)({key[0] for key, *_ in self.seeds})
            saved = sum(self.sizes[k] for k in owned)
            res = memory_sim.simulate(order, self.keys, self.sizes, owned, saved, self.seeds,
                                      memory_sim.captured, sinks)
            self._estimate = saved, res.peak
        return self._estimate


def _drop(node, items) -> bool:
    """tape's save hook: inside a checkpointed forward (this thread), keep nothing."""
    seg = _state.segment
    if seg is None:
        return False
    seg.note(node, items)
    node.saved = _Dropped(node)
    return True


class _Dropped(tuple):
    """What an entry recorded inside a checkpointed forward keeps instead of its saved
    arrays: empty (falsy, as the engine and memory_report read it), but a vjp that reads
    it -- reached through a tensor the function made and leaked instead of returning --
    gets an error saying so, not an unpacking error (PyTorch recomputes those too)."""

    def __new__(cls, node):
        self = super().__new__(cls)
        self.node = weakref.ref(node)  # its seq is set once its forward has returned
        return self

    def _error(self):
        node = self.node()
        what = "an entry" if node is None else f"`{node.name}` (tape entry #{node.seq})"
        return GraphError(
            f"checkpoint: {what} ran inside a checkpointed function, which keeps nothing for "
            "backward, and a tensor it led to reached backward without being returned by that "
            "function (stored in a list or an attribute?). Return the tensor from the function "
            "(a tuple of outputs is fine), or compute it outside checkpoint().")

    def __iter__(self):
        raise self._error()

    def __getitem__(self, index):
        raise self._error()


@contextmanager
def _unsaved(seg):
    global _active
    prev, _state.segment = _state.segment, seg
    seg.parent = prev
    with _lock:
        _active += 1
        tape._unsaved = _drop
    try:
        yield
    finally:
        _state.segment = prev
        with _lock:
            _active -= 1
            if not _active:
                tape._unsaved = None


# ------------------------------------------------------------- random state
def _rng_snapshot(preserve):
    """The seed and a copy of every device generator, to replay the same draws."""
    if not preserve:
        return None
    return random._seed, {key: _copy_generator(key, g) for key, g in random._generators.items()}


def _copy_generator(key, gen):
    """An independent copy of a NumPy or CuPy ``Generator`` (same future draws).

    NumPy's deep-copies. CuPy's cannot (its bit generator holds a lock): its
    cuRAND state lives in one device array, ``bit_generator._state`` (CuPy's
    attribute; ``_bit_generator`` in older releases), copied here, with the
    binomial sampler's state where one was made."""
    try:
        return copy.deepcopy(gen)
    except Exception as exc:  # noqa: BLE001 - then copy the device state by hand
        name = next((n for n in _BITS_ATTRS if hasattr(getattr(gen, n, None), "_state")), None)
        bits = None if name is None else getattr(gen, name)
        state = getattr(bits, "_state", None)
        if state is None or not hasattr(state, "copy"):
            raise GraphError(f"checkpoint: cannot copy the random state of device {key} "
                             f"({type(exc).__name__}: {exc}), so a recomputation could draw "
                             "different numbers; pass preserve_rng_state=False if the "
                             "checkpointed function draws none there") from exc
    bits = copy.copy(bits)
    bits._state = state.copy()
    if hasattr(bits, "lock"):
        bits.lock = threading.Lock()
    out = copy.copy(gen)
    setattr(out, name, bits)
    binomial = getattr(out, "_binomial_state", None)
    if hasattr(binomial, "copy"):
        out._binomial_state = binomial.copy()
    return out


_BITS_ATTRS = ("bit_generator", "_bit_generator")  # where CuPy's Generator keeps its bits


@contextmanager
def _rng_replayed(snap):
    """Run with the snapshot's random state (generators created later in the
    forward are re-created from the same seed), then put the current one back."""
    if snap is None:
        yield
        return
    now = random._seed, dict(random._generators)
    random._seed = snap[0]
    random._generators.clear()
    random._generators.update({k: _copy_generator(k, g) for k, g in snap[1].items()})
    try:
        yield
    finally:
        random._seed = now[0]
        random._generators.clear()
        random._generators.update(now[1])


# ------------------------------------------------------------------ outputs
def _flatten(out):
    """(flat outputs, rebuild): a Tensor, or a tuple/list of values."""
    if isinstance(out, engine.Tensor):
        return [out], lambda flat: flat[0]
    if isinstance(out, (tuple, list)):
        for v in out:
            if isinstance(v, (tuple, list, dict)) and _has_tensor(v):
                raise ArgumentError("checkpoint: the function returned a nested container of "
                                    "tensors; return a Tensor or a flat tuple/list of them")
        kind = type(out)
        return list(out), (kind if kind in (tuple, list) else lambda flat: kind(*flat))
    if isinstance(out, dict) and _has_tensor(out):
        raise ArgumentError("checkpoint: the function returned a dict of tensors; return a "
                            "Tensor or a flat tuple/list of them")
    return [out], lambda flat: flat[0]


def _has_tensor(v) -> bool:
    items = v.values() if isinstance(v, dict) else v
    return any(isinstance(i, engine.Tensor) or (isinstance(i, (tuple, list, dict))
                                               and _has_tensor(i)) for i in items)


def _produced(flat, start):
    """Positions of the outputs recorded in the segment (seq >= start)."""
    return [k for k, t in enumerate(flat) if isinstance(t, engine.Tensor)
            and t._node is not None and t._node.seq >= start]


def _boundary(roots, start) -> dict:
    """{key: (target, out_nr, shape, dtype)} for every edge from the entries
    recorded since ``start`` (reachable from ``roots``) to a leaf (key: id) or
    to an earlier entry's output (key: (entry, out_nr)), in discovery order."""
    found = {}
    seen = set(roots)
    todo = list(roots)
    while todo:
        for _, target, out_nr, shape, dtype in todo.pop().edges:
            if out_nr < 0:
                found.setdefault(id(target), (target, out_nr, shape, dtype))
            elif target.seq < start:
                found.setdefault((target, out_nr), (target, out_nr, shape, dtype))
            elif target not in seen:
                seen.add(target)
                todo.append(target)
    return found


# ------------------------------------------------------------------- the op
class Checkpoint(Function):
    """The tape entry of a checkpointed segment; its vjp recomputes the segment."""

    differentiable_twice = True  # the recomputed replay is recorded under create_graph

    @staticmethod
    def backward(ctx, *grads):
        function, n_args, names, snap, produced, keys = ctx.call
        flat = ctx.saved_tensors
        for i, (v, version) in enumerate(zip(flat, ctx.versions)):
            if version is not None and v._version[0] != version:
                raise GraphError(f"checkpoint: input {i} {describe(v)} was modified in place "
                                 f"after the checkpointed forward (version {version}, now "
                                 f"{v._version[0]}), so the recomputation would differ. Use an "
                                 "out-of-place op, or .clone() it before modifying it.")
        for _, target, out_nr, _, _ in ctx.edges:  # parameters and captured leaves, likewise
            version = ctx.leaf_versions.get(id(target)) if out_nr < 0 else None
            if version is not None and target._version[0] != version:
                raise GraphError(f"checkpoint: the tensor {describe(target)} that the checkpointed "
                                 f"function reads was modified in place after its forward "
                                 f"(version {version}, now {target._version[0]}; an optimizer "
                                 "step?), so recomputing it in backward would use the new "
                                 "values and give a gradient the forward did not have. Run "
                                 "backward before modifying it, or .clone() it first.")
        graph = ctx._graph
        args, kwargs = flat[:n_args], dict(zip(names, flat[n_args:]))
        _state.recomputing += 1
        replaying, _state.replaying = _state.replaying, _Replay(ctx.segment)
        try:
            with enable_grad(), _rng_replayed(snap):
                start = next(tape._counter)
                out = function(*args, **kwargs)
        finally:
            _state.recomputing -= 1
            _state.replaying = replaying
        outs, _ = _flatten(out)
        again = _produced(outs, start)
        roots = [outs[k] for k in again]
        if again != produced or [r.shape for r in roots] != [m[0] for m in ctx.shapes]:
            raise GraphError(_changed("returned different tensors", function))
        boundary = _boundary({r._node for r in roots}, start)
        if set(boundary) != set(keys):
            raise GraphError(_changed("read different tensors that require grad", function))
        capture = {key: ((None if type(key) is tuple else boundary[key][0]), i)
                   for i, key in enumerate(keys)}
        # an output nothing used gets None, not zeros: what only it reaches gets no .grad
        used = [j for j, g in enumerate(grads) if g is not None]
        found = _replay([roots[j] for j in used], [grads[j] for j in used], graph, capture,
                        start)
        return tuple(found.get(i, [None])[0] for i in range(len(keys)))


def _replay(roots, grads, graph, capture, start):
    """Backward over the recomputed segment only, capturing what reaches its boundary.

    The boundary's entries are the walk's sinks, and the outer backward replays
    them later with their full gradient: their retain_grad() tensors must get it
    then, not also this partial one now, so the sinks' ``retained`` is hidden
    while the segment replays."""
    segment = walks._segment(start)
    hidden = {}

    def walk(stack):
        order, sinks = segment(stack)
        for node in sinks:
            if node.retained is not None:
                hidden[node] = node.retained
                node.retained = None
        return order, sinks

    try:
        return engine.run_backward(roots, grads, graph, graph, capture, walk)
    finally:
        for node, retained in hidden.items():
            node.retained = retained


def _changed(what, function) -> str:
    name = getattr(function, "__qualname__", type(function).__name__)
    return (f"checkpoint: recomputing {name} in backward {what} than its forward did, so "
            "its gradients would be wrong. The function must be deterministic given its "
            "inputs (random draws are replayed; other global state is not): do not branch "
            "on state that changes between forward and backward.")


def checkpoint(function: Callable, *args, use_reentrant: bool = False,
               preserve_rng_state: bool = True, **kwargs) -> Any:
    """Run ``function(*args, **kwargs)`` without saving for backward; recompute it there.

    Gradients flow to ``args`` and to every parameter or earlier tensor the
    function uses. Returns what ``function`` returns (a Tensor, or a flat
    tuple/list). Only the non-reentrant variant exists (``use_reentrant=False``).

    >>> h = tapegrad.utils.checkpoint(block, x)   # block's activations are not kept
    """
    if use_reentrant:
        raise ArgumentError("checkpoint: tapegrad implements the non-reentrant variant only "
                            "(PyTorch's recommended one); pass use_reentrant=False")
    if not callable(function):
        raise ArgumentError(f"checkpoint: expected a callable, got {describe(function)}")
    if not is_grad_enabled():  # nothing is recorded anyway
        return function(*args, **kwargs)
    snap = _rng_snapshot(preserve_rng_state)
    seg = _Segment()
    start = next(tape._counter)
    with _unsaved(seg):
        out = function(*args, **kwargs)
    outs, rebuild = _flatten(out)
    produced = _produced(outs, start)
    if not produced:  # no tensor that requires grad was involved: nothing to recompute
        return out
    roots = [outs[k] for k in produced]
    boundary = _boundary({r._node for r in roots}, start)
    flat = (*args, *kwargs.values())
    ctx = _entry(Checkpoint, roots[0].device, (True,) * len(boundary))
    ctx.save_for_backward(*flat)
    ctx.versions = [v._version[0] if isinstance(v, engine.Tensor) else None for v in flat]
    ctx.leaf_versions = {key: t._version[0] for key, (t, k, _, _) in boundary.items() if k < 0}
    ctx.call = (function, len(args), tuple(kwargs), snap, produced, list(boundary))
    ctx.shapes = [(r.shape, r.dtype) for r in roots]
    # for memory_report: what the recomputation saves, and the peak of its replay
    outside = [t for t, k, _, _ in boundary.values() if k < 0] + \
        [v for v in flat if isinstance(v, engine.Tensor)]
    ctx.segment = seg.plan(roots, start, outside)
    ctx.seq = next(tape._counter)
    ctx.edges = [(i, target, k, shape, dtype)
                 for i, (target, k, shape, dtype) in enumerate(boundary.values())]
    ctx.n_out = len(roots)  # no out_meta: an unused output's gradient stays None (see backward)
    for j, k in enumerate(produced):
        outs[k] = tape._wrap(roots[j].array, roots[j].device, ctx, j, True)
    return rebuild(outs)


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool = False,
                          preserve_rng_state: bool = True) -> Any:
    """Split ``functions`` (a Sequential or a list of callables) into ``segments``
    chunks and checkpoint all but the last (PyTorch's ``checkpoint_sequential``).

    >>> y = tapegrad.utils.checkpoint_sequential(model, 2, x)
    """
    fns = list(functions)
    if not isinstance(segments, int) or isinstance(segments, bool) or \
            not 1 <= segments <= max(1, len(fns)):
        raise ArgumentError(f"checkpoint_sequential: segments must be an int in [1, "
                            f"{len(fns)}] (the number of functions), got {segments!r}")
    size = len(fns) // segments
    end = 0
    for first in range(0, size * (segments - 1), size):
        end = first + size
        input = checkpoint(_run_chunk(fns[first:end]), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve_rng_state)
    return _run_chunk(fns[end:])(input)


def _run_chunk(fns):
    def run(x):
        for f in fns:
            x = f(x)
        return x

    return run


class _CallableModule(types.ModuleType):
    """``tapegrad.utils.checkpoint`` is PyTorch's module (``.checkpoint``,
    ``.checkpoint_sequential``) and, called, the function itself."""

    def __call__(self, function, *args, **kwargs):
        return checkpoint(function, *args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
