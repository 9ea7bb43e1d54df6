"""The tape: recording ops during forward.

There is no global list. Each op that has an input requiring grad creates one
:class:`Node` (the tape entry, also the ``ctx`` its rules see) holding the op,
a monotonically increasing index, edges to its inputs' entries, and what its
vjp saved. Output tensors point at their entry; entries point at their inputs'
entries; nothing points forward, so a forward whose result is dropped frees
everything by reference counting. Replaying the tape is :mod:`tapegrad.engine`;
whether ops are recorded at all is :mod:`tapegrad.grad_mode`.
"""

from __future__ import annotations

import itertools
import weakref
from typing import NamedTuple

import numpy as np

from .device import cpu
from .dtypes import KEEP, check_differentiable, int_dtype, result_type
from .errors import DeviceError, DTypeError, GraphError
from .grad_mode import _local, enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .tensor import Tensor, _wrap
from .walks import entries

__all__ = [
    "Function",
    "Node",
    "SavedFrom",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "entries",
]


_counter = itertools.count()
# set by tapegrad.utils.checkpoint while a checkpointed forward runs (in any thread):
# called with (entry, items) on each save, True where the items are not to be kept
_unsaved = None


class Node:
    """One tape entry, and the ``ctx`` an op's forward and backward see.

    ``seq`` is the entry's place in recording order (monotonically
    increasing). ``edges`` has one edge per input that needs a gradient: the
    plain tuple ``(index, target, out_nr, shape, dtype)`` -- input ``index``
    comes from output ``out_nr`` of the entry ``target``, or is the leaf tensor
    ``target`` (``out_nr == -1``); ``shape`` and ``dtype`` are the input's, for
    the engine's reduction and cast. Every reader unpacks it by those names
    (``for index, target, out_nr, shape, dtype in node.edges``), never by
    position: one edge is built per recorded input, and a NamedTuple costs
    ~0.17 us more there (allocation and release), ~6% of a small op. ``saved_src``
    has one :class:`SavedFrom` (or None, for a constant) per saved array.
    """

    __slots__ = ("__dict__", "__weakref__", "fn", "seq", "device", "xp", "needs_input_grad",
                 "edges", "n_out", "saved",
                 "saved_src",  # where each saved array came from (see _track_saved), or None
                 "out_meta",  # (shape, dtype) per output, for ops with several outputs, or None
                 "retained")  # {output k: weakref to a tensor that called retain_grad()}, or None
    # the last three are read by every backward step: slots set to None in _entry cost less
    # there than class-level defaults do (a miss in the instance dict first)

    # rarely set, so class-level defaults rather than per-entry stores
    _graph = False  # True while backward runs with create_graph
    # set only while tapegrad.autograd's anomaly mode is on (see tapegrad/autograd/anomaly.py):
    site = None  # (filename, lineno, function) of the user's line that recorded this entry
    nonfinite = None  # per output: int8 codes of its NaN/+inf/-inf positions, or None

    # built by _entry(fn, device, needs), not Node(...): see there

    @property
    def name(self) -> str:
        return self.fn.__name__

    def __repr__(self):
        return f"<{self.name} entry #{getattr(self, 'seq', '?')}>"

    def save_for_backward(self, *items):
        """Keep arrays for the vjp. Inputs and outputs of this op are tracked
        (version-checked, and differentiable under ``create_graph``); anything
        else (masks, indices) is saved as a constant. Save the least."""
        if _unsaved is not None and _unsaved(self, items):
            return  # a checkpointed segment's forward: recomputed in backward instead
        self.saved = items

    @property
    def saved_tensors(self):
        if self.saved is None:
            raise GraphError(_freed_message(self))
        if not self._graph or self.saved_src is None:
            return self.saved
        return tuple(self._saved_as_tensor(v, s) for v, s in zip(self.saved, self.saved_src))

    def _saved_as_tensor(self, value, src):
        """Under create_graph, a saved input/output becomes a Tensor at the
        same place in the graph, so second derivatives flow through it."""
        if src is None:
            return value
        if src.kind == "out":
            return _wrap(value, self.device, self, src.index, True)
        for index, target, out_nr, _, _ in self.edges:
            if index == src.index:
                return target if out_nr < 0 else _wrap(value, self.device, target, out_nr, True)
        return _wrap(value, self.device, None, 0, False)  # an input that needs no gradient


def _entry(fn, device, needs) -> Node:
    """A new tape entry (and ``ctx``) for op ``fn`` on ``device``; ``needs`` is
    ``needs_input_grad``. A plain function rather than ``Node.__init__``: calling a
    class with a Python ``__init__`` costs ~0.14 us more, 3% of a small op."""
    ctx = Node()
    ctx.fn = fn
    ctx.device = device
    ctx.xp = device.backend
    ctx.needs_input_grad = needs
    ctx.saved = ()  # None once released by backward
    ctx.saved_src = ctx.out_meta = ctx.retained = None
    return ctx


def _freed_message(node) -> str:
    return (
        f"backward through {node.name} (tape entry #{node.seq}) a second time: its saved "
        "arrays were freed after the first backward. Pass retain_graph=True to the first "
        "backward() if you need to backward through the graph again."
    )




class Function:
    """Base class of every op, built-in or user-defined.

    Subclasses define ``forward(ctx, *arrays, **params)`` (raw arrays in, raw
    array or tuple of arrays out) and ``backward(ctx, *grads)`` (one gradient
    per output in, one gradient or ``None`` per input out), and are called
    through ``MyOp.apply(*tensors, **params)``. Only inputs with
    ``ctx.needs_input_grad[i]`` need a gradient; return ``None`` for the rest.
    Gradients may have the broadcast shape; the engine reduces and casts them.

    Set ``differentiable_twice = True`` when ``backward`` only uses operators,
    array methods and ``ctx.xp`` functions, so that it works on Tensors too
    (``create_graph=True``). Ops without it raise a GraphError under
    ``create_graph`` instead of giving a silently wrong second derivative.
    """

    differentiable_twice = False
    view = False  # outputs share memory (and the version counter) with input 0
    # positions of the operands an elementwise op promotes to one dtype (PyTorch's
    # rule, tapegrad.dtypes.result_type) before forward sees them
    promotes: tuple = ()
    # what an integer or bool input computes in (tapegrad.dtypes.INT_RULES): KEEP its
    # dtype, FLOAT (the default float dtype, PyTorch's rule for floating ops), INT64,
    # REFUSE; applied by _promote for the ops above, by the public function for the rest
    int_inputs = KEEP
    # positions among ``promotes`` where a Python int outside an integer result dtype
    # wraps into it as in PyTorch (uint8 tensor * -1: 255); elsewhere it is refused
    wraps: tuple | None = None  # None: all of them
    bool_operands = True  # False: a bool operand refused whatever the result (torch's sub)

    @staticmethod
    def forward(ctx, *arrays, **params):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **params):
        x = args[0] if args else None
        if len(args) == 1 and isinstance(x, Tensor):
            return cls._apply_unary(x, (), params)
        if len(args) == 2 and isinstance(x, Tensor) and not isinstance(args[1], Tensor):
            return cls._apply_unary(x, args[1:], params)  # tensor op constant
        if cls.promotes:
            args = _promote(cls, args)
        record = _local.enabled
        device = None
        edges = []
        arrays = list(args)
        for i, a in enumerate(args):
            if isinstance(a, Tensor):
                data = arrays[i] = a.array
                if device is None:
                    device = a.device
                elif a.device is not device:
                    _mixed_devices(cls, args)
                if record and a.requires_grad:
                    edges.append(_edge(i, a, data))
        if device is None:
            device = cpu
        elif device is not cpu:  # host constants (targets, masks, indices) follow the tensors
            arrays, params = _device_constants(device, arrays, params)
        if not edges:
            ctx = _entry(cls, device, (False,) * len(args))
            return _unrecorded(cls, cls.forward(ctx, *arrays, **params), ctx.device, x,
                               args[1:], params)
        needs = [False] * len(args)
        for index, _, _, _, _ in edges:
            needs[index] = True
        ctx = _entry(cls, device, tuple(needs))
        out = cls.forward(ctx, *arrays, **params)
        return _record(cls, ctx, edges, out, args, params)

    @classmethod
    def _apply_unary(cls, x, consts, params):
        """The common case -- one tensor plus constants -- kept short: it is
        most of a small model's per-op overhead (the edge is built inline)."""
        data = x.array
        if consts and (type(consts[0]) not in _WEAK or data.dtype.kind != "f") and cls.promotes:
            x, *consts = _promote(cls, (x, *consts))  # else NumPy's weak scalar keeps x's dtype
            data = x.array
        device = x.device
        if device is not cpu and (consts or params):
            consts, params = _device_constants(device, consts, params)
        record = x.requires_grad and _local.enabled
        ctx = _entry(cls, device, (_FIRST_GRAD if record else _NO_GRAD)[len(consts)])
        # consts is () or (c,): a call without * and ** is ~0.15 us (4%) cheaper
        if params:
            out = cls.forward(ctx, data, *consts, **params)
        elif consts:
            out = cls.forward(ctx, data, consts[0])
        else:
            out = cls.forward(ctx, data)
        if not record:
            return _unrecorded(cls, out, ctx.device, x, consts, params)
        node = x._node
        edges = [(0, x, -1, data.shape, data.dtype) if node is None else
                 (0, node, x._out_nr, data.shape, data.dtype)]
        if type(out) is tuple or cls.view or out.dtype.kind != "f" or ctx.device is not device:
            return _record(cls, ctx, edges, out, (x, *consts), params)
        ctx.seq = next(_counter)
        ctx.edges = edges
        ctx.n_out = 1
        t = _wrap(out, device, ctx, 0, True)
        if ctx.saved:
            _track_saved(ctx, (x, *consts), (t,))
        return t


_NO_GRAD = ((False,), (False, False))
_FIRST_GRAD = ((True,), (True, False))
_WEAK = (float, int)


def _promote(cls, args):
    """Cast the operands at ``cls.promotes`` to PyTorch's result dtype: tensors
    by a recorded cast (its gradient is cast back), constants directly."""
    idx = cls.promotes
    if len(idx) == 2:  # the common case first: two tensors of one float dtype, no cast
        a, b = args[idx[0]], args[idx[1]]
        if isinstance(a, Tensor) and isinstance(b, Tensor):
            dt = a.array.dtype
            if dt is b.array.dtype and dt.kind == "f":
                return args
    vals = [args[i] for i in idx]
    if not cls.bool_operands and any(  # Python and Tensor bools; internal masks may subtract
            type(v) is bool or (isinstance(v, Tensor) and v.dtype == np.bool_) for v in vals):
        raise DTypeError(f"{cls.__name__}: bool input (a bool operand) is not supported, as "
                         "in PyTorch; "
                         "for a mask use ~x or logical_not/logical_xor, else cast it first, "
                         "e.g. x.float()")
    dt = result_type(*vals)
    if dt.kind == "c" and _local.enabled and any(
            isinstance(a, Tensor) and a.requires_grad for a in args):
        check_differentiable(cls.__name__, dt, f"a {dt} result")
    if dt.kind in "biu" and cls.int_inputs != KEEP:
        dt = int_dtype(cls, dt, f"operands promoted to {dt}")
    out = list(args)
    for i, v in zip(idx, vals):
        if v is None or getattr(v, "dtype", None) == dt:
            continue
        if isinstance(v, Tensor):
            out[i] = v.astype(dt)
        elif isinstance(v, np.generic):
            out[i] = dt.type(v)
        elif hasattr(v, "astype"):  # a NumPy/CuPy array
            out[i] = v.astype(dt)
        elif type(v) is int and dt.kind in "iu":
            out[i] = _int_scalar(cls, i, v, dt)
        # Python numbers stay: NumPy treats them as weak, so the result keeps dt
    return out


def _int_scalar(cls, i, v, dt):
    """Python int ``v``, operand ``i`` of ``cls``, in integer dtype ``dt``: itself
    when it fits; else wrapped as PyTorch's C cast wraps it (NumPy raises an
    OverflowError), or refused where ``cls.wraps`` excludes ``i``."""
    info = np.iinfo(dt)
    if info.min <= v <= info.max:
        return v
    if (cls.wraps is not None and i not in cls.wraps) or not -2**63 <= v < 2**63:
        raise DTypeError(f"{cls.__name__}: the number {v} does not fit {dt.name} (from "
                         f"{info.min} to {info.max}); cast the tensor first, e.g. x.long()")
    return np.asarray(v, np.int64).astype(dt)[()]


class SavedFrom(NamedTuple):
    """Where a saved array came from -- input or output ``index`` of its entry --
    and that tensor's version counter with its value when it was saved."""

    kind: str  # "in" or "out"
    index: int
    counter: list
    version: int

    @property
    def modified(self) -> bool:
        return self.counter[0] != self.version


# a SavedFrom is built with tuple.__new__: a NamedTuple's own constructor is ~5x slower
_tuple_new = tuple.__new__


def _edge(i, t, data):
    """The edge of input ``i``, the tensor ``t`` (see :class:`Node`)."""
    node = t._node
    if node is None:
        return (i, t, -1, data.shape, data.dtype)
    return (i, node, t._out_nr, data.shape, data.dtype)


def _unrecorded(cls, out, device, base, consts, params, k=None):
    """Wrap the outputs of an op that recorded nothing (views are still views)."""
    if type(out) is not tuple:
        t = _wrap(out, device, None, 0, False)
        if cls.view and isinstance(base, Tensor):
            _share_version(t, base, (cls, tuple(consts), params, k))
        return t
    return tuple(_unrecorded(cls, o, device, base, consts, params, k)
                 for k, o in enumerate(out))


def _record(cls, ctx, edges, out, args, params=None):
    """Finish a tape entry after forward and wrap its outputs."""
    device = ctx.device  # a transfer op moves its output elsewhere
    ctx.seq = next(_counter)
    ctx.edges = edges
    if type(out) is not tuple and not cls.view and out.dtype.kind != "c":  # the common case
        ctx.n_out = 1
        t = (_wrap(out, device, ctx, 0, True) if out.dtype.kind == "f" else
             _wrap(out, device, None, 0, False))  # integer results carry no gradient
        if ctx.saved:
            _track_saved(ctx, args, (t,))
        return t
    single = type(out) is not tuple
    outs = (out,) if single else out
    ctx.n_out = len(outs)
    if not single:
        ctx.out_meta = [(o.shape, o.dtype) for o in outs]
    results = []
    for k, o in enumerate(outs):
        diff = o.dtype.kind == "f"
        if o.dtype.kind == "c":
            check_differentiable(cls.__name__, o.dtype, f"a {o.dtype} result")
        t = _wrap(o, device, ctx if diff else None, k, diff)
        if cls.view:
            _share_version(t, args[0], (cls, tuple(args[1:]), params, None if single else k))
        results.append(t)
    if ctx.saved:
        _track_saved(ctx, args, results)
    return results[0] if single else tuple(results)


# ------------------------------------------------------------------ views
#
# A view op's result shares its input's memory and version counter, and remembers
# how it was made from its root base (the tensor that is no view): ``_chain``, one
# step ``(op, constants, params, output)`` per view op. The root keeps weak
# references to its live views (``_views``). An in-place write through any of them
# rebases the root's graph and replays every live view's chain on the new root
# (Tensor._inplace): PyTorch's view semantics. Views made while grad mode is off
# are no part of that (``_chain`` None), as PyTorch's no-grad views are not.

def _aliases(view, base):
    """Whether array ``view`` is a view of array ``base``'s memory (NumPy and CuPy
    point a view's ``.base`` at the array owning the memory); a reshape that had
    to copy is not."""
    owner = getattr(view, "base", None)
    return owner is not None and (owner is base or owner is getattr(base, "base", None))


def _share_version(view, base, step):
    """Make tensor ``view`` (``step`` applied to tensor ``base``) a view of ``base``'s
    root: one version counter (writing one bumps both) and, in grad mode, the chain
    that remakes it from the root."""
    if not _aliases(view.array, base.array):
        return
    view._version = base._version
    root = base._base
    if root is None:
        root, chain = base, ()
    else:
        chain = getattr(base, "_chain", None)
    view._base = root
    if chain is None or not _local.enabled:
        view._chain = None
        return
    view._chain = chain + (step,)
    if _local.replaying:
        return
    views = getattr(root, "_views", None)
    if views is None:
        root._views = views = []
    views.append(weakref.ref(view))
    if len(views) % 64 == 0:  # drop the dead now and then
        views[:] = [r for r in views if r() is not None]


def replay(root, chain):
    """The view ``chain`` of tensor ``root``, made again (recorded in grad mode)."""
    was, _local.replaying = _local.replaying, True
    try:
        t = root
        for cls, consts, params, k in chain:
            t = cls.apply(t, *consts, **(params or {}))
            if k is not None:
                t = t[k] if type(t) is tuple else t
        return t
    finally:
        _local.replaying = was


def rebase_views(root):
    """After an in-place write that rebased ``root``'s graph: each live view of it
    takes the tape entry of its chain replayed on the root."""
    views = getattr(root, "_views", None)
    if not views:
        return
    live = []
    for ref in views:
        v = ref()
        if v is None or v._chain is None:
            continue
        live.append(ref)
        t = replay(root, v._chain)
        v._node, v._out_nr, v.requires_grad = t._node, t._out_nr, t.requires_grad
    views[:] = live


def flat_positions(root, chain):
    """Where the elements of the view ``chain`` of ``root`` sit in ``root``: a host
    int64 array of the view's shape, flat (C-order) indices into ``root``."""
    index = _wrap(np.arange(root.array.size, dtype=np.int64).reshape(root.shape), cpu, None,
                  0, False)
    with no_grad():
        return replay(index, chain).array


def own_saved(node, counter):
    """An in-place op's entry ``node`` keeps a copy of its input 0 (the tensor written,
    under version counter ``counter``) where it saved it, with a counter of its own:
    ``y *= b`` saves the old y for b's gradient, as PyTorch's mul_ does, before it is
    overwritten. Other saved arrays of that memory (``y *= y``'s other operand) stay
    under the counter, so backward refuses them, as PyTorch does."""
    src = getattr(node, "saved_src", None)
    if src is None or node.saved is None:
        return
    mine = [j for j, s in enumerate(src) if s is not None and s.counter is counter]
    if len(mine) != 1 or src[mine[0]][:2] != ("in", 0):
        return
    j = mine[0]
    node.saved = node.saved[:j] + (node.saved[j].copy(),) + node.saved[j + 1:]
    src[j] = _tuple_new(SavedFrom, ("in", 0, [0], 0))


def _track_saved(ctx, args, outs):
    """Note where each saved array came from (input i / output k of this
    entry) and that tensor's version now, for the check before backward."""
    src = None
    saved = ctx.saved
    for j, v in enumerate(saved):
        if v is None or type(v) is float:  # the common constants: nothing to track
            continue
        found = None
        for i, a in enumerate(args):
            if isinstance(a, Tensor) and v is a.array:
                found = _tuple_new(SavedFrom, ("in", i, a._version, a._version[0]))
                break
        else:
            for k, o in enumerate(outs):
                if v is o.array:
                    found = _tuple_new(SavedFrom, ("out", k, o._version, o._version[0]))
                    break
        if found is not None:
            if src is None:
                src = [None] * len(saved)
            src[j] = found
    if src is not None:  # else all constants: nothing to check or to differentiate through
        ctx.saved_src = src


def _device_constants(device, items, params):
    """Copy the NumPy arrays among an op's constants and parameters (also inside
    tuples, as index tuples hold them) to ``device``, the device of its tensors:
    a host array next to a device tensor is moved, never an error. (A CPU
    *Tensor* next to a device tensor is refused by ``_mixed_devices``.)"""
    for v in items:  # most ops have none: then nothing is rebuilt
        if isinstance(v, (np.ndarray, tuple)):
            moved = [_on_device(device, v) for v in items]
            items = tuple(moved) if type(items) is tuple else moved
            break
    if params:
        for v in params.values():
            if isinstance(v, (np.ndarray, tuple)):
                params = {k: _on_device(device, v) for k, v in params.items()}
                break
    return items, params


def _on_device(device, v):
    if isinstance(v, np.ndarray):
        return device.put(v)
    if type(v) is tuple and any(isinstance(i, np.ndarray) for i in v):
        return tuple(device.put(i) if isinstance(i, np.ndarray) else i for i in v)
    return v


def _mixed_devices(cls, args):
    devs = ", ".join(
        f"{tuple(a.shape)} on {a.device}" for a in args if isinstance(a, Tensor)
    )
    raise DeviceError(
        f"{cls.__name__}: inputs are on different devices ({devs}). "
        "Move them to one device with .to(device) first."
    )


def _check_versions(node):
    for src in node.saved_src:
        if src is not None and src.modified:
            what = "input" if src.kind == "in" else "output"
            raise GraphError(
                f"{node.name} (tape entry #{node.seq}) saved {what} {src.index} at version "
                f"{src.version}, but it has since been modified in place (now version "
                f"{src.counter[0]}), so its gradient would be wrong. Use an out-of-place op "
                "(y = x + 1 instead of x += 1), or .clone() the tensor before modifying it."
            )
