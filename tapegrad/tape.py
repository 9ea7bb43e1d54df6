"""The tape: recording ops during forward, replaying them in reverse.

There is no global list. Each op that has an input requiring grad creates one
:class:`Node` (the tape entry, also the ``ctx`` its rules see) holding the op,
a monotonically increasing index, edges to its inputs' entries, and what its
vjp saved. Output tensors point at their entry; entries point at their inputs'
entries; nothing points forward, so a forward whose result is dropped frees
everything by reference counting.

Backward collects the entries reachable from the roots (an explicit stack, no
recursion) and replays them in decreasing index order. Recording order is a
topological order, so every entry runs after all its consumers. The engine --
and only the engine -- sums gradients at fan-out, reduces broadcast gradients
to each input's shape, casts to each input's dtype, checks versions of saved
tensors, and frees each entry's saved arrays right after its vjp has run.
"""

from __future__ import annotations

import functools
import itertools
import threading
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from .device import cpu
from .device.backend import sum_to_shape
from .dtypes import check_differentiable, result_type
from .errors import DeviceError, GraphError, describe

__all__ = [
    "Function",
    "Node",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "is_grad_enabled",
    "backward",
    "grad",
    "entries",
]

# ----------------------------------------------------------------- grad mode

class _GradMode(threading.local):
    enabled = True


_local = _GradMode()


def is_grad_enabled() -> bool:
    return _local.enabled


class set_grad_enabled:
    """Context manager / decorator setting grad mode (thread-local)."""

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)

    def __enter__(self):
        self.prev = is_grad_enabled()
        _local.enabled = self.mode
        return self

    def __exit__(self, *exc):
        _local.enabled = self.prev
        return False

    def __call__(self, func):
        mode = self.mode

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return func(*args, **kwargs)

        return wrapper


class no_grad(set_grad_enabled):
    """Nothing is recorded inside ``with tapegrad.no_grad():`` (or a decorated function)."""

    def __init__(self):
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """Re-enables recording inside a ``no_grad`` region."""

    def __init__(self):
        super().__init__(True)


# ------------------------------------------------------------ tape entries

_counter = itertools.count()
_by_seq = attrgetter("seq")

Tensor = None  # bound by tensor.py (import cycle)
_wrap = None
_default_dtype = None


def _bind(tensor_cls, wrap, default_dtype):
    global Tensor, _wrap, _default_dtype
    Tensor, _wrap, _default_dtype = tensor_cls, wrap, default_dtype


class Node:
    """One tape entry, and the ``ctx`` an op's forward and backward see.

    ``seq`` is the entry's place in recording order (monotonically
    increasing). ``edges`` has one :class:`Edge` per input that needs a
    gradient; ``saved_src`` one :class:`SavedFrom` (or None, for a constant)
    per saved array.
    """

    __slots__ = ("__dict__", "__weakref__", "fn", "seq", "device", "xp", "needs_input_grad",
                 "edges", "n_out", "saved")

    # rarely set, so class-level defaults rather than per-entry stores
    saved_src = None  # where each saved array came from (see _track_saved)
    out_meta = None  # (shape, dtype) per output, for ops with several outputs
    retained = None  # {output k: weakref to a tensor that called retain_grad()}
    _graph = False  # True while backward runs with create_graph

    def __init__(self, fn, device, needs):
        self.fn = fn
        self.device = device
        self.xp = device.backend
        self.needs_input_grad = needs
        self.saved = ()  # None once released by backward

    @property
    def name(self) -> str:
        return self.fn.__name__

    def __repr__(self):
        return f"<{self.name} entry #{getattr(self, 'seq', '?')}>"

    def save_for_backward(self, *items):
        """Keep arrays for the vjp. Inputs and outputs of this op are tracked
        (version-checked, and differentiable under ``create_graph``); anything
        else (masks, indices) is saved as a constant. Save the least."""
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
        if src.kind == "in":
            edge = next((e for e in self.edges if e.index == src.index), None)
            if edge is None:
                return _wrap(value, self.device, None, 0, False)
            if edge.out_nr < 0:
                return edge.target
            return _wrap(value, self.device, edge.target, edge.out_nr, True)
        return _wrap(value, self.device, self, src.index, True)


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
    float_result = False  # integer operands give the default float dtype (true division)

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
                data = arrays[i] = a.data
                if device is None:
                    device = a.device
                elif a.device is not device:
                    _mixed_devices(cls, args)
                if record and a.requires_grad:
                    edges.append(_edge(i, a, data))
        if device is None:
            device = cpu
        if not edges:
            ctx = Node(cls, device, (False,) * len(args))
            return _unrecorded(cls, cls.forward(ctx, *arrays, **params), ctx.device, x)
        needs = [False] * len(args)
        for e in edges:
            needs[e.index] = True
        ctx = Node(cls, device, tuple(needs))
        out = cls.forward(ctx, *arrays, **params)
        return _record(cls, ctx, edges, out, args)

    @classmethod
    def _apply_unary(cls, x, consts, params):
        """The common case -- one tensor plus constants -- kept short: it is
        most of a small model's per-op overhead."""
        if consts and cls.promotes and not (type(consts[0]) in _WEAK and x.data.dtype.kind == "f"):
            x, *consts = _promote(cls, (x, *consts))  # else NumPy's weak scalar keeps x's dtype
        data = x.data
        if not (x.requires_grad and _local.enabled):
            ctx = Node(cls, x.device, _NO_GRAD[len(consts)])
            return _unrecorded(cls, cls.forward(ctx, data, *consts, **params), ctx.device, x)
        ctx = Node(cls, x.device, _FIRST_GRAD[len(consts)])
        out = cls.forward(ctx, data, *consts, **params)
        edges = [_edge(0, x, data)]
        if type(out) is tuple or cls.view or out.dtype.kind != "f" or ctx.device is not \
                x.device:
            return _record(cls, ctx, edges, out, (x, *consts))
        ctx.seq = next(_counter)
        ctx.edges = edges
        ctx.n_out = 1
        t = _wrap(out, x.device, ctx, 0, True)
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
    vals = [args[i] for i in idx]
    dt = result_type(*vals)
    if dt.kind == "c" and _local.enabled and any(
            isinstance(a, Tensor) and a.requires_grad for a in args):
        check_differentiable(cls.__name__, dt, f"a {dt} result")
    if cls.float_result and dt.kind in "biu":
        dt = _default_dtype()
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
        # Python numbers stay: NumPy treats them as weak, so the result keeps dt
    return out


class Edge(NamedTuple):
    """Input ``index`` of an entry comes from output ``out_nr`` of the entry
    ``target``, or is the leaf tensor ``target`` (``out_nr == -1``); ``shape``
    and ``dtype`` are the input's, for the engine's reduction and cast."""

    index: int
    target: object
    out_nr: int
    shape: tuple
    dtype: object


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


# built with tuple.__new__: a NamedTuple's own constructor is ~5x slower per op
_new_edge = functools.partial(tuple.__new__, Edge)
_new_saved_from = functools.partial(tuple.__new__, SavedFrom)


def _edge(i, t, data):
    node = t._node
    if node is None:
        return _new_edge((i, t, -1, data.shape, data.dtype))
    return _new_edge((i, node, t._out_nr, data.shape, data.dtype))


def _unrecorded(cls, out, device, base):
    """Wrap the outputs of an op that recorded nothing (views still share versions)."""
    if type(out) is not tuple:
        t = _wrap(out, device, None, 0, False)
        if cls.view and isinstance(base, Tensor):
            _share_version(t, base)
        return t
    return tuple(_unrecorded(cls, o, device, base) for o in out)


def _record(cls, ctx, edges, out, args):
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
            _share_version(t, args[0])
        results.append(t)
    if ctx.saved:
        _track_saved(ctx, args, results)
    return results[0] if single else tuple(results)


def _share_version(view, base):
    """A view shares its base's version counter: writing one bumps both."""
    view._version = base._version
    view._base = base._base if base._base is not None else base


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
            if isinstance(a, Tensor) and v is a.data:
                found = _new_saved_from(("in", i, a._version, a._version[0]))
                break
        else:
            for k, o in enumerate(outs):
                if v is o.data:
                    found = _new_saved_from(("out", k, o._version, o._version[0]))
                    break
        if found is not None:
            if src is None:
                src = [None] * len(saved)
            src[j] = found
    if src is not None:  # else all constants: nothing to check or to differentiate through
        ctx.saved_src = src


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


# ---------------------------------------------------------------- backward


def run_backward(roots, grads, retain_graph=False, create_graph=False, capture=None):
    """Replay the tape from ``roots`` (tensors) seeded with ``grads``.

    With ``capture`` (``{id(tensor): (tensor, slot)}``) the gradients reaching
    those tensors are returned by slot instead of accumulated into ``.grad``.
    """
    # entry -> the gradient of its output, summed over consumers so far; for an
    # entry with several outputs, a list with one gradient (or None) per output
    pending: dict = {}
    captured: dict[int, list] = {}
    cap_nodes = {}
    if capture:
        for t, slot in capture.values():
            if t._node is not None:
                cap_nodes[(t._node, t._out_nr)] = slot

    def to_leaf(t, g):
        if capture is None:
            _accumulate_leaf(t, g, create_graph)
        else:
            hit = capture.get(id(t))
            if hit is not None:
                _accumulate(captured.setdefault(hit[1], [None]), 0, g)

    stack = []
    for t, g in zip(roots, grads):
        if t._node is None:
            to_leaf(t, g)
        else:
            if t._node not in pending:
                stack.append(t._node)
            _add_pending(pending, t._node, t._out_nr, g)

    order = _reachable(stack)

    prev_mode = _local.enabled
    _local.enabled = create_graph
    try:
        for node in order:
            buf = pending.pop(node, None)
            if buf is None:
                continue  # nothing flowed into it (its consumers' gradients were None)
            if node.saved is None:  # released by an earlier backward
                raise GraphError(_freed_message(node))
            grads = (buf,) if node.n_out == 1 else buf  # one gradient per output
            if node.retained is not None or cap_nodes or node.out_meta is not None:
                grads = list(grads)
                _prepare_outputs(node, grads, cap_nodes, captured, create_graph)
            if node.saved_src is not None:
                _check_versions(node)
            if create_graph:
                in_grads = _backward_with_graph(node, grads)
            else:
                in_grads = node.fn.backward(node, *grads)
            if type(in_grads) is not tuple:
                in_grads = (in_grads,)
            if not retain_graph and node.saved:
                node.saved = None  # free now; None also marks the entry as released
            if len(in_grads) != len(node.needs_input_grad):
                raise GraphError(f"{node.name}.backward returned {len(in_grads)} gradients "
                                 f"for {len(node.needs_input_grad)} inputs")
            for i, target, k, shape, dtype in node.edges:
                g = in_grads[i]
                if g is None:
                    continue
                if g.shape != shape:
                    g = _reduce(node, g, shape)
                if g.dtype != dtype:
                    g = g.astype(dtype)
                if k < 0:
                    to_leaf(target, g)
                elif target.n_out == 1:  # the common case, inlined
                    old = pending.get(target)
                    pending[target] = g if old is None else old + g
                else:
                    _add_pending(pending, target, k, g)
    finally:
        _local.enabled = prev_mode
    return captured


def _reachable(nodes):
    """The entries reachable from ``nodes``, consumers before producers (an
    explicit stack, never recursion; recording order is a topological order)."""
    stack = list(nodes)
    seen = set(stack)
    while stack:
        for e in stack.pop().edges:
            if e.out_nr >= 0:
                p = e.target
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
    return sorted(seen, key=_by_seq, reverse=True)


def entries(*tensors):
    """The tape entries behind ``tensors``, in the order backward replays them.

    For inspection: ``[e.name for e in tapegrad.tape.entries(loss)]``, or the
    arrays each keeps for its vjp (``e.saved``).
    """
    return _reachable({t._node for t in tensors if t._node is not None})


def _add_pending(pending, node, k, g):
    if node.n_out == 1:
        old = pending.get(node)
        pending[node] = g if old is None else old + g
        return
    buf = pending.get(node)
    if buf is None:
        buf = pending[node] = [None] * node.n_out
    _accumulate(buf, k, g)


def _accumulate(buf, k, g):
    old = buf[k]
    buf[k] = g if old is None else old + g


def _reduce(node, g, shape):
    """Sum a broadcast gradient back to its input's shape (the one place it happens)."""
    try:
        return sum_to_shape(g, shape)
    except (ValueError, IndexError) as exc:
        raise GraphError(f"{node.name}.backward returned a gradient of shape {tuple(g.shape)} "
                         f"for an input of shape {tuple(shape)}") from exc


def _prepare_outputs(node, buf, cap_nodes, captured, create_graph):
    """retain_grad(), tapegrad.grad() on non-leaves, and zeros for unused outputs."""
    if node.retained is not None:
        for k, ref in node.retained.items():
            t = ref()
            if t is not None and buf[k] is not None:
                _accumulate_leaf(t, buf[k], create_graph)
    for k in range(node.n_out):
        slot = cap_nodes.get((node, k)) if cap_nodes else None
        if slot is not None and buf[k] is not None:
            _accumulate(captured.setdefault(slot, [None]), 0, buf[k])
    if node.out_meta is not None:
        xp = node.device.xp
        for k, (shape, dtype) in enumerate(node.out_meta):
            if buf[k] is None:
                z = xp.zeros(shape, dtype)
                buf[k] = _wrap(z, node.device, None, 0, False) if create_graph else z


def _backward_with_graph(node, buf):
    """Run a vjp on Tensors so that the backward pass itself is recorded."""
    if not node.fn.differentiable_twice:
        raise GraphError(
            f"{node.name} does not support create_graph=True (double backward) yet; its "
            "second derivative would be wrong. Differentiate through other ops, or use "
            "create_graph=False."
        )
    from .ops.graph_backend import TensorBackend

    node._graph = True
    node.xp = TensorBackend
    try:
        return node.fn.backward(node, *buf)
    finally:
        node._graph = False
        node.xp = node.device.backend


_leaf_lock = threading.Lock()


def _accumulate_leaf(t, g, create_graph):
    """PyTorch semantics: leaves (and retain_grad tensors) sum into ``.grad``.

    One lock serialises the read-modify-write of ``.grad``, so backward passes
    running in several threads into one shared leaf lose no update (NumPy
    releases the GIL inside ``+=``, so without it two adds can interleave)."""
    with _leaf_lock:
        _accumulate_leaf_locked(t, g, create_graph)


def _accumulate_leaf_locked(t, g, create_graph):
    if create_graph:
        gt = g if isinstance(g, Tensor) else _wrap(g, t.device, None, 0, False)
        t.grad = gt if t.grad is None else t.grad + gt
        return
    if isinstance(g, Tensor):
        g = g.data
    old = t.grad
    if old is None:
        # a private copy: rules may hand the same array to several inputs
        t.grad = _wrap(t.device.xp.array(g, dtype=t.dtype, copy=True), t.device, None, 0, False)
    elif old.data.shape == g.shape and not old.requires_grad:
        old.data += g
    else:
        t.grad = _wrap(old.data + g, t.device, None, 0, False)


def _roots(who, tensors, grads, create_graph):
    """Normalise (tensors, grads) to lists and make each root's seed gradient:
    ones for a one-element root, else the given gradient of the root's shape."""
    if isinstance(tensors, Tensor):
        tensors, grads = [tensors], [grads]
    else:
        tensors = list(tensors)
        grads = [None] * len(tensors) if grads is None else list(grads)
    seeds = []
    for t, g in zip(tensors, grads):
        _check_root(t, who)
        s = _seed(t, g, who)
        if create_graph:
            s = g if isinstance(g, Tensor) else _wrap(s, t.device, None, 0, False)
        seeds.append(s)
    return tensors, seeds


def _seed(t, g, who):
    xp = t.device.xp
    if g is None:
        if t.data.size != 1:
            raise GraphError(
                f"{who}: the root has shape {tuple(t.shape)}; gradients can be created "
                "implicitly only for a tensor with one element. Pass a gradient of the "
                "same shape, e.g. y.backward(tapegrad.ones_like(y)), or reduce y first."
            )
        return xp.ones(t.shape, t.dtype)
    data = g.data if isinstance(g, Tensor) else xp.asarray(g, dtype=t.dtype)
    if data.shape != t.shape:
        raise GraphError(
            f"{who}: gradient has shape {tuple(data.shape)} but the root has shape "
            f"{tuple(t.shape)}; they must match"
        )
    return data


def _check_root(t, who):
    if not isinstance(t, Tensor):
        raise GraphError(f"{who}: expected a Tensor, got {type(t).__name__}")
    if not t.requires_grad:
        raise GraphError(
            f"{who}: the tensor {describe(t)} does not require grad and has no tape entry. "
            "Set requires_grad=True on the inputs, and make sure the forward did not run "
            "under tapegrad.no_grad()."
        )


def backward(tensors, grad_tensors=None, retain_graph=False, create_graph=False):
    """Accumulate d(tensors)/d(leaves) into every reachable leaf's ``.grad``."""
    tensors, seeds = _roots("backward", tensors, grad_tensors, create_graph)
    run_backward(tensors, seeds, retain_graph or create_graph, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False):
    """Gradients of ``outputs`` w.r.t. ``inputs``, returned (not put in ``.grad``).

    >>> x = tapegrad.tensor([1.0, 2.0], requires_grad=True)
    >>> (g,) = tapegrad.grad((x * x).sum(), x)      # g == 2 * x
    """
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if retain_graph is None:
        retain_graph = create_graph
    for t in inputs:
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise GraphError(f"grad: every input must be a Tensor that requires grad, got "
                             f"{describe(t)}")
    capture = {id(t): (t, i) for i, t in enumerate(inputs)}
    outputs, seeds = _roots("grad", outputs, grad_outputs, create_graph)
    found = run_backward(outputs, seeds, retain_graph, create_graph, capture)
    result = []
    for i, t in enumerate(inputs):
        g = found.get(i, [None])[0]
        if g is None:
            if not allow_unused:
                raise GraphError(
                    f"grad: input {i} {describe(t)} is not reachable from the outputs; "
                    "pass allow_unused=True to get None for it"
                )
            result.append(None)
        elif isinstance(g, Tensor):
            result.append(g)
        else:
            result.append(_wrap(g, t.device, None, 0, False))
    return tuple(result)
