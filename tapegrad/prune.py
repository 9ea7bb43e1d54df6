"""Backward over part of the tape: the walks ``run_backward(walk=...)`` takes.

The normal backward replays every entry reachable from the roots. Two callers
want less, and get it as ``(order, sinks)`` -- the entries to replay, and those
among them whose outputs' gradients are wanted but whose vjp must not run:

* ``backward(inputs=[...])`` (PyTorch's): only the entries with a path to an
  input -- MatConvNet's ``backPropDepth`` on a dynamic tape, so fine-tuning a
  network's head runs no vjp of its frozen trunk (:func:`_toward`);
* a checkpoint's recomputation (:mod:`tapegrad.utils.checkpoint`): only the
  entries recorded since the segment began; the earlier entries it reaches are
  its boundary, where the gradients are captured (:func:`_segment`).
"""

from __future__ import annotations

from . import engine
from .errors import GraphError, describe


def _toward(leaf_ids: set, node_keys: set):
    """The walk of ``backward(inputs=...)``: the reachable entries with a path to
    a leaf in ``leaf_ids`` or an entry output ``(entry, k)`` in ``node_keys``
    (which the walk goes through: an input further up still gets its gradient,
    the total derivative, as in PyTorch). Entries that only produce a non-leaf
    input are sinks. As in PyTorch, a path to *any* output of an input's entry
    counts: a retain_grad() sibling output (``a, b = x.chunk(2)``, ``inputs=[a]``)
    gets its gradient too."""
    producers = {node for node, _ in node_keys}

    def walk(stack):
        order = engine._reachable(stack)
        leads = set()
        for node in reversed(order):  # producers before consumers
            for _, target, k, _, _ in node.edges:
                if (id(target) in leaf_ids if k < 0 else
                        target in leads or target in producers):
                    leads.add(node)
                    break
        keep = [n for n in order if n in leads or n in producers]
        return keep, {n for n in producers if n not in leads}

    return walk


def _segment(start: int):
    """The walk of a checkpoint's recomputation: the entries recorded from
    ``seq`` ``start`` on that the roots reach; the earlier entries they reach
    are sinks (their gradients are captured; the outer backward replays them)."""

    def walk(stack):
        seen = set(stack)
        todo = [n for n in stack if n.seq >= start]
        while todo:
            for _, target, k, _, _ in todo.pop().edges:
                if k >= 0 and target not in seen:
                    seen.add(target)
                    if target.seq >= start:
                        todo.append(target)
        order = sorted(seen, key=engine._by_seq, reverse=True)
        return order, {n for n in seen if n.seq < start}

    return walk


def backward_into(tensors, seeds, inputs, retain_graph, create_graph) -> None:
    """``backward(inputs=...)``: accumulate into the ``.grad`` of ``inputs`` only
    (leaves or not), replaying only the entries that lead to them."""
    inputs = [inputs] if isinstance(inputs, engine.Tensor) else list(inputs)
    if not inputs:
        raise GraphError("backward: inputs= is empty; pass the tensors to accumulate "
                         "gradients into, or leave inputs=None for every leaf")
    unique = {}
    for t in inputs:
        if not isinstance(t, engine.Tensor) or not t.requires_grad:
            raise GraphError(f"backward: every tensor in inputs= must require grad, got "
                             f"{describe(t)}")
        unique.setdefault(id(t), t)
    inputs = list(unique.values())
    capture = {id(t): (t, i) for i, t in enumerate(inputs)}
    leaf_ids = {id(t) for t in inputs if t._node is None}
    node_keys = {(t._node, t._out_nr) for t in inputs if t._node is not None}
    found = engine.run_backward(tensors, seeds, retain_graph, create_graph, capture,
                                _toward(leaf_ids, node_keys))
    # the inputs get their .grad after the walk: their hooks may still queue_callback()
    # (DistributedDataParallel's do), so a queue is open while they run, drained after
    outer, engine._callbacks.queue = engine._callbacks.queue, []
    try:
        for i, t in enumerate(inputs):
            g = found.get(i, [None])[0]
            if g is None or _retained(t):  # a retain_grad() tensor got its .grad on the way
                continue
            engine._accumulate_leaf(t, g, create_graph)
            hooks = engine._post_hooks.get(id(t)) if t._node is None else None
            if hooks is not None and hooks[0]() is t:
                for hook in list(hooks[1]):
                    hook(t)
        queue = engine._callbacks.queue
        while queue:  # callbacks may queue more callbacks
            queue.pop(0)()
    finally:
        engine._callbacks.queue = outer


def _retained(t) -> bool:
    node = t._node
    if node is None or node.retained is None:
        return False
    ref = node.retained.get(t._out_nr)
    return ref is not None and ref() is t
