"""The engine: replaying the tape in reverse.

Backward collects the entries reachable from the roots (an explicit stack, no
recursion) and replays them in decreasing index order. Recording order is a
topological order, so every entry runs after all its consumers. The engine --
and only the engine -- sums gradients at fan-out, reduces broadcast gradients
to each input's shape, casts to each input's dtype, checks versions of saved
tensors, and frees each entry's saved arrays right after its vjp has run.

What depends on that freeing (change them together; the tests fail otherwise):

* ``memory.sim.simulate`` replays it on sizes for ``memory_report`` (rules per op in
  ``memory.rules``); tests/memory/test_memory_sim.py runs both and compares them vjp
  by vjp;
* ``Node.saved_tensors`` and ``_freed_message`` (tape.py): a second backward through a
  freed entry is an error that names ``retain_graph=True``;
* ``walks`` hands back sinks: entries whose outputs' gradients are wanted but whose
  vjp must not run (and whose arrays are not freed);
* ``utils.checkpoint`` recomputes a segment's entries, which save and free again;
* tests/memory/test_memory_report.py: an entry's arrays are gone right after its own vjp.

Graph walks are :mod:`tapegrad.walks`; hooks registered on leaves are at the end of
this module.
"""

from __future__ import annotations

import threading
import weakref

from . import walks
from .device import pool
from .errors import DeviceError, GraphError, describe
from .grad_mode import _local
from .memory_formats import dense, empty_like, preserve_format
from .ops.graph_backend import TensorBackend
from .tape import _check_versions, _freed_message
from .tensor import Tensor, _wrap
from .walks import _reachable, entries

__all__ = ["backward", "grad", "entries", "run_backward", "queue_callback",
           "register_post_accumulate_grad_hook", "RemovableHandle"]

# tapegrad.autograd sets this while anomaly mode or a profile is on: called with the
# entries a backward will replay, it swaps their vjps for observed ones
_observe = None


def run_backward(roots, grads, retain_graph=False, create_graph=False, capture=None,
                 walk=None):
    """Replay the tape from ``roots`` (tensors) seeded with ``grads``.

    With ``capture`` (``{id(tensor): (tensor, slot)}``) the gradients reaching
    those tensors are returned by slot instead of accumulated into ``.grad``; a
    key ``(entry, output)`` with tensor ``None`` captures that entry's output.
    ``walk(stack)`` (default: every reachable entry) returns ``(order, sinks)``:
    the entries to replay, and those among them whose outputs' gradients are
    wanted but whose vjp must not run (see :mod:`tapegrad.walks`).
    """
    # entry -> the gradient of its output, summed over consumers so far; for an
    # entry with several outputs, a list with one gradient (or None) per output
    pending: dict = {}
    captured: dict[int, list] = {}
    cap_nodes = {}
    if capture:
        for key, (t, slot) in capture.items():
            if t is None:
                cap_nodes[key] = slot
            elif t._node is not None:
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
        if t._node is not None:
            if t._node not in pending:
                stack.append(t._node)
            _add_pending(pending, t._node, t._out_nr, g)

    sinks = None
    if walk is None:
        order = _reachable(stack)
    else:
        order, sinks = walk(stack)
    if _observe is not None:  # anomaly mode or a profile is on (once per backward, not per op)
        _observe(order)
    # leaves with post-accumulate hooks: how many edges still lead to each (None: no hooks)
    left = _hooked_leaf_edges(roots, order) if _post_hooks and capture is None else None
    for t, g in zip(roots, grads):
        if t._node is None:
            to_leaf(t, g)
            if left is not None:
                _edge_done(left, t)

    prev_mode = _local.enabled
    _local.enabled = create_graph
    outer_callbacks = _callbacks.queue
    _callbacks.queue = []
    try:
        for node in order:
            buf = pending.pop(node, None)
            if buf is None:  # nothing flowed into it (its consumers' gradients were None)
                if left is not None:
                    for _, target, out_nr, _, _ in node.edges:
                        if out_nr < 0:
                            _edge_done(left, target)
                continue
            if node.saved is None and not (sinks and node in sinks):  # released earlier
                raise GraphError(_freed_message(node))
            one = node.n_out == 1  # then buf is the gradient, else one (or None) per output
            if node.retained is not None or cap_nodes or node.out_meta is not None:
                grads = [buf] if one else list(buf)
                _prepare_outputs(node, grads, cap_nodes, captured, create_graph)
                if sinks and node in sinks:  # only its outputs' gradients were wanted
                    continue
                buf = grads[0] if one else grads
            if node.saved_src is not None:
                _check_versions(node)
            if create_graph:
                in_grads = _backward_with_graph(node, (buf,) if one else buf)
            elif one:  # called without *: ~0.1 us (3% of a small op) less
                in_grads = node.fn.backward(node, buf)
            else:
                in_grads = node.fn.backward(node, *buf)
            if type(in_grads) is not tuple:
                in_grads = (in_grads,)
            if not retain_graph and node.saved:
                # free now (see the module docstring for what depends on it); None
                # also marks the entry as released
                node.saved = None
            if len(in_grads) != len(node.needs_input_grad):
                raise GraphError(f"{node.name}.backward returned {len(in_grads)} gradients "
                                 f"for {len(node.needs_input_grad)} inputs")
            for index, target, out_nr, shape, dtype in node.edges:
                g = in_grads[index]
                if g is None:
                    if out_nr < 0 and left is not None:
                        _edge_done(left, target)
                    continue
                if g.shape != shape:
                    g = _reduce(node, g, shape)
                if g.dtype is not dtype and g.dtype != dtype:  # (NumPy's dtypes are singletons)
                    g = g.astype(dtype)
                if out_nr < 0:
                    to_leaf(target, g)
                    if left is not None:
                        _edge_done(left, target)
                elif target.n_out == 1:  # the common case, inlined
                    old = pending.get(target)
                    pending[target] = g if old is None else old + g
                else:
                    _add_pending(pending, target, out_nr, g)
        queue = _callbacks.queue
        while queue:  # callbacks may queue more callbacks
            queue.pop(0)()
    finally:
        _local.enabled = prev_mode
        _callbacks.queue = outer_callbacks
    return captured


# ------------------------------------------------------------------ hooks
class RemovableHandle:
    """What registering a hook returns: ``handle.remove()`` unregisters it."""

    __slots__ = ("_hooks", "_hook")

    def __init__(self, hooks, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


# id(leaf) -> (weakref to the leaf, [hook, ...]); empty (and free) unless hooks exist
_post_hooks: dict = {}


def register_post_accumulate_grad_hook(t, hook) -> RemovableHandle:
    """Call ``hook(t)`` each time a backward has finished accumulating into the
    leaf ``t``'s ``.grad`` -- after *all* of that backward's contributions, however
    many consumers ``t`` has (PyTorch's ``Tensor.register_post_accumulate_grad_hook``;
    what DistributedDataParallel uses to start a bucket's reduction early)."""
    if not t.requires_grad or t._node is not None:
        raise GraphError("register_post_accumulate_grad_hook: only leaf tensors that require "
                         f"grad accumulate a .grad; got {describe(t)}")
    key = id(t)
    entry = _post_hooks.get(key)
    if entry is None or entry[0]() is not t:
        entry = _post_hooks[key] = (weakref.ref(t, lambda _, k=key: _post_hooks.pop(k, None)), [])
    entry[1].append(hook)
    return RemovableHandle(entry[1], hook)


def _hooked_leaf_edges(roots, order):
    """{id(leaf): [leaf, edges still to arrive]} for hooked leaves this backward reaches."""
    left = {}
    for t in roots:
        if t._node is None and id(t) in _post_hooks:
            left.setdefault(id(t), [t, 0])[1] += 1
    for node in order:
        for _, target, out_nr, _, _ in node.edges:
            if out_nr < 0 and id(target) in _post_hooks:
                left.setdefault(id(target), [target, 0])[1] += 1
    return left


def _edge_done(left, t):
    item = left.get(id(t))
    if item is None:
        return
    item[1] -= 1
    if item[1] == 0 and t.grad is not None:
        entry = _post_hooks.get(id(t))
        for hook in list(entry[1]) if entry else ():
            hook(t)


class _CallbackQueue(threading.local):
    queue = None  # a list while a backward runs in this thread


_callbacks = _CallbackQueue()


def queue_callback(fn) -> None:
    """Run ``fn()`` when the backward now running in this thread has walked the
    whole tape (PyTorch's ``Variable._execution_engine.queue_callback``), e.g. to
    wait for reductions that hooks started. Only valid inside a backward."""
    if _callbacks.queue is None:
        raise GraphError("queue_callback: no backward is running in this thread; call it "
                         "from a hook while backward runs")
    _callbacks.queue.append(fn)


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


def sum_to_shape(g, shape):
    """Sum a broadcast gradient ``g`` back down to ``shape``.

    Works on raw arrays and on Tensors (only ``.sum`` and ``.reshape`` are
    used), which is how the engine serves both plain and ``create_graph``
    backward with one function.
    """
    gshape = g.shape
    lead = len(gshape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and gshape[i + lead] != 1
    )
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    if lead or g.shape != tuple(shape):
        g = g.reshape(shape)
    return g


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
        g = g.array
    old = t.grad
    if old is None:
        # a private copy (rules may hand the same array to several inputs) laid out as
        # PyTorch's gradient layout contract: the leaf's strides where the leaf is dense
        # and not C-ordered (a channels-last conv weight), else C order
        a = t.array
        if a.flags.c_contiguous or not dense(a):
            data = pool.copy(g) if g.dtype == t.dtype and g.flags.c_contiguous else None
            if data is None:
                data = t.device.xp.array(g, dtype=t.dtype, order="C")
        else:
            data = empty_like(t.device.xp, a, preserve_format, t.dtype)
            data[...] = g
        t.grad = _wrap(data, t.device, None, 0, False)
    elif old.array.shape == g.shape and not old.requires_grad:
        old.array += g
    else:
        t.grad = _wrap(old.array + g, t.device, None, 0, False)


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
        if t.array.size != 1:
            raise GraphError(
                f"{who}: the root has shape {tuple(t.shape)}; gradients can be created "
                "implicitly only for a tensor with one element. Pass a gradient of the "
                "same shape, e.g. y.backward(tapegrad.ones_like(y)), or reduce y first."
            )
        return xp.ones(t.shape, t.dtype)
    if isinstance(g, Tensor) and g.device is not t.device:
        raise DeviceError(f"{who}: the gradient is on {g.device} but the root {describe(t)} is "
                          f"on {t.device}; pass a gradient on the root's device (.to(device))")
    data = g.array if isinstance(g, Tensor) else xp.asarray(g, dtype=t.dtype)
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


def backward(tensors, grad_tensors=None, retain_graph=False, create_graph=False, inputs=None):
    """Accumulate d(tensors)/d(leaves) into every reachable leaf's ``.grad``; with
    ``inputs`` (PyTorch's), into those tensors' only, replaying only the entries
    that lead to them. >>> tapegrad.backward(loss, inputs=list(head.parameters()))"""
    tensors, seeds = _roots("backward", tensors, grad_tensors, create_graph)
    if inputs is None:
        run_backward(tensors, seeds, retain_graph or create_graph, create_graph)
        return
    backward_into(tensors, seeds, inputs, retain_graph or create_graph, create_graph)


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


def backward_into(tensors, seeds, inputs, retain_graph, create_graph) -> None:
    """``backward(inputs=...)``: accumulate into the ``.grad`` of ``inputs`` only
    (leaves or not), replaying only the entries that lead to them."""
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if not inputs:
        raise GraphError("backward: inputs= is empty; pass the tensors to accumulate "
                         "gradients into, or leave inputs=None for every leaf")
    unique = {}
    for t in inputs:
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise GraphError(f"backward: every tensor in inputs= must require grad, got "
                             f"{describe(t)}")
        unique.setdefault(id(t), t)
    inputs = list(unique.values())
    capture = {id(t): (t, i) for i, t in enumerate(inputs)}
    leaf_ids = {id(t) for t in inputs if t._node is None}
    node_keys = {(t._node, t._out_nr) for t in inputs if t._node is not None}
    found = run_backward(tensors, seeds, retain_graph, create_graph, capture,
                                walks._toward(leaf_ids, node_keys))
    # the inputs get their .grad after the walk: their hooks may still queue_callback()
    # (DistributedDataParallel's do), so a queue is open while they run, drained after
    outer, _callbacks.queue = _callbacks.queue, []
    try:
        for i, t in enumerate(inputs):
            g = found.get(i, [None])[0]
            if g is None or _retained(t):  # a retain_grad() tensor got its .grad on the way
                continue
            _accumulate_leaf(t, g, create_graph)
            hooks = _post_hooks.get(id(t)) if t._node is None else None
            if hooks is not None and hooks[0]() is t:
                for hook in list(hooks[1]):
                    hook(t)
        queue = _callbacks.queue
        while queue:  # callbacks may queue more callbacks
            queue.pop(0)()
    finally:
        _callbacks.queue = outer


def _retained(t) -> bool:
    node = t._node
    if node is None or node.retained is None:
        return False
    ref = node.retained.get(t._out_nr)
    return ref is not None and ref() is t
