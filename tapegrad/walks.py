"""The walks over the tape: every entry the roots reach (:func:`entries`, what a
backward replays), and the parts of it ``run_backward(walk=...)`` takes.

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

from operator import attrgetter

_by_seq = attrgetter("seq")


def _reachable(nodes):
    """The entries reachable from ``nodes``, consumers before producers (an
    explicit stack, never recursion; recording order is a topological order)."""
    stack = list(nodes)
    seen = set(stack)
    found = list(stack)  # in discovery order: mostly sorted already, which sort() is fast at
    while stack:
        for _, target, out_nr, _, _ in stack.pop().edges:
            if out_nr >= 0 and target not in seen:
                seen.add(target)
                stack.append(target)
                found.append(target)
    found.sort(key=_by_seq, reverse=True)
    return found


def entries(*tensors):
    """The tape entries behind ``tensors``, in the order backward replays them.

    For inspection: ``[e.name for e in tapegrad.tape.entries(loss)]``, or the
    arrays each keeps for its vjp (``e.saved``).
    """
    return _reachable({t._node for t in tensors if t._node is not None})


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
        order = _reachable(stack)
        leads = set()
        for node in reversed(order):  # producers before consumers
            for _, target, out_nr, _, _ in node.edges:
                if (id(target) in leaf_ids if out_nr < 0 else
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
            for _, target, out_nr, _, _ in todo.pop().edges:
                if out_nr >= 0 and target not in seen:
                    seen.add(target)
                    if target.seq >= start:
                        todo.append(target)
        order = sorted(seen, key=_by_seq, reverse=True)
        return order, {n for n in seen if n.seq < start}

    return walk
