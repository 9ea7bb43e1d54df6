"""A tracing mode: record every op a forward runs, whether or not anything
requires grad (the tape records only ops with a differentiable input).

Every op goes through ``Function.apply`` -- or, for ``tensor <op> constant``,
straight to ``Function._apply_unary`` (tensor.py's fast path) -- and no op
class overrides either. :class:`trace` therefore swaps both classmethods on
the base class for recording wrappers while it is active and puts the
originals back in ``finally``: nothing is added to the hot path when no trace
runs. Only the thread that opened the trace is recorded; ops an op runs inside
its own ``apply`` (the dtype-promotion casts) are part of that op, not entries.
In-place updates (``x += y``) are recorded as the out-of-place op plus an
:class:`Alias`: from then on ``x`` holds that op's result. Tensor comparisons
and logical operators are not Functions (nothing to differentiate); they are
recorded as the pseudo-ops below. Tensors the forward makes in any other way
(``tapegrad.tensor(...)``, ``x.argmax()``) are constants of the trace.

>>> with trace() as tr:
...     y = model(x)
>>> [r.fn.__name__ for r in tr.records]   # ['Conv2d', 'ReLU', ...]
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from ..errors import GraphError
from ..tape import Function
from ..tensor import Tensor

__all__ = ["trace", "Record", "Alias", "TensorOp", "needed", "value_ids", "aliased_reads"]


class Record(NamedTuple):
    """One op as it was called: ``fn.apply(*args, **params)`` returned ``outputs``
    (always a tuple of Tensors)."""

    fn: type
    args: tuple
    params: dict
    outputs: tuple


class Alias(NamedTuple):
    """An in-place update: ``target`` now holds the value of ``source``."""

    target: Tensor
    source: Tensor


class TensorOp:
    """A Tensor operator that is not a Function, recorded as if it were one."""

    onnx = ""

    @staticmethod
    def forward(ctx, x, y=None):
        raise NotImplementedError  # never run: only its signature names the arguments


def _pseudo(name, onnx_op):
    return type(name, (TensorOp,), {"onnx": onnx_op, "__doc__": f"``{onnx_op}`` of two tensors."})


COMPARISONS = {"__lt__": _pseudo("Less", "Less"), "__le__": _pseudo("LessEqual", "LessOrEqual"),
               "__gt__": _pseudo("Greater", "Greater"),
               "__ge__": _pseudo("GreaterEqual", "GreaterOrEqual"),
               "__eq__": _pseudo("Equal", "Equal"), "__ne__": _pseudo("NotEqual", "NotEqual")}
LOGICAL = {"&": _pseudo("LogicalAnd", "And"), "|": _pseudo("LogicalOr", "Or"),
           "^": _pseudo("LogicalXor", "Xor"), "~": _pseudo("LogicalNot", "Not")}

_lock = threading.Lock()
_active: trace | None = None


class trace:
    """Context manager recording the ops run inside it (see the module notes).
    Not nestable: opening a second trace while one is active raises.

    >>> with trace() as tr: y = ops.relu(x) * 2
    >>> [r.fn.__name__ for r in tr.records]   # ['ReLU', 'Mul']
    """

    def __init__(self) -> None:
        self.records: list[Any] = []
        self._depth = 0
        self._thread = None
        self._saved = None

    def __enter__(self) -> trace:
        global _active
        with _lock:
            if _active is not None:
                raise GraphError("tapegrad.onnx.trace: a trace is already active (in this or "
                                 "another thread); traces do not nest. Finish the first "
                                 "export/trace before starting another.")
            _active = self
        self._thread = threading.get_ident()
        self._saved = {name: Function.__dict__[name] for name in ("apply", "_apply_unary")}
        apply_fn = self._saved["apply"].__func__
        unary_fn = self._saved["_apply_unary"].__func__
        inplace_fn = Tensor.__dict__["_inplace"]
        me = self

        def apply(cls, *args, **params):
            if me._depth or threading.get_ident() != me._thread:
                return apply_fn(cls, *args, **params)
            return me._call(apply_fn, cls, args, params, args, params)

        def _apply_unary(cls, x, consts, params):
            if me._depth or threading.get_ident() != me._thread:
                return unary_fn(cls, x, consts, params)
            return me._call(unary_fn, cls, (x, consts, params), {}, (x, *consts), params)

        def _inplace(tensor, fn, *args):
            if me._depth or threading.get_ident() != me._thread:
                return inplace_fn(tensor, fn, *args)
            n = len(me.records)
            out = inplace_fn(tensor, fn, *args)
            if len(me.records) > n and isinstance(me.records[-1], Record):
                me.records.append(Alias(tensor, me.records[-1].outputs[0]))
            return out

        def compare(name, cls):
            orig = Tensor.__dict__[name]

            def method(tensor, other):
                if me._depth or threading.get_ident() != me._thread:
                    return orig(tensor, other)
                return me._call(lambda _, *a: orig(*a), cls, (tensor, other), {},
                                (tensor, other), {})
            return method

        bitwise_fn = Tensor.__dict__["_bitwise"]

        def _bitwise(tensor, other, op, name):
            if me._depth or threading.get_ident() != me._thread:
                return bitwise_fn(tensor, other, op, name)
            args = (tensor,) if name == "~" else (tensor, other)
            return me._call(lambda _, *a: bitwise_fn(*a), LOGICAL[name],
                            (tensor, other, op, name), {}, args, {})

        self._tensor_saved = {name: Tensor.__dict__[name]
                              for name in ("_inplace", "_bitwise", *COMPARISONS)}
        self._mine = (classmethod(apply), classmethod(_apply_unary))
        Function.apply, Function._apply_unary = self._mine
        Tensor._inplace = _inplace
        Tensor._bitwise = _bitwise
        for name, cls in COMPARISONS.items():
            setattr(Tensor, name, compare(name, cls))
        return self

    def _call(self, fn, cls, call_args, call_params, args, params):
        self._depth += 1
        try:
            out = fn(cls, *call_args, **call_params)
        finally:
            self._depth -= 1
        outs = out if isinstance(out, tuple) else (out,)
        # the records keep every tensor alive, so ids stay unique for the whole trace
        self.records.append(Record(cls, tuple(args), dict(params), outs))
        return out

    def __exit__(self, *exc) -> bool:
        global _active
        displaced = (Function.__dict__["apply"], Function.__dict__["_apply_unary"]) != self._mine
        try:
            for name, value in self._saved.items():
                setattr(Function, name, value)
            for name, value in self._tensor_saved.items():
                setattr(Tensor, name, value)
        finally:
            with _lock:
                _active = None
        if displaced and exc[0] is None:
            raise GraphError("tapegrad.onnx.trace: Function.apply was replaced while the trace "
                             "ran (anomaly mode or a profile started or stopped inside the "
                             "traced code), so ops after that were not recorded. Start or stop "
                             "them outside the traced forward.")
        return False


def value_ids(v) -> tuple:
    """The ids a value is known by: a Tensor's and its array's; a tuple's items'."""
    if isinstance(v, Tensor):
        return (id(v), id(v.array))
    if isinstance(v, (tuple, list)):
        return tuple(i for item in v for i in value_ids(item))
    return (id(v),)


def needed(records: list, outs) -> list:
    """The records the outputs depend on, in order (a loss or a debug value the
    forward also computed is not exported, nor refused)."""
    need = {i for t in outs for i in value_ids(t)}
    keep = []
    for rec in reversed(records):
        if isinstance(rec, Alias):
            if id(rec.target) in need:  # before the update, the target was an input of it
                need.difference_update(value_ids(rec.target))
                need.update(value_ids(rec.source))
                keep.append(rec)
            continue
        if any(i in need for t in rec.outputs for i in value_ids(t)):
            keep.append(rec)
            need.update(value_ids(rec.args))
            need.update(i for v in rec.params.values() for i in value_ids(v))
    return keep[::-1]


def _tensors(v):
    if isinstance(v, Tensor):
        yield v
    elif isinstance(v, (tuple, list)):
        for item in v:
            yield from _tensors(item)


def aliased_reads(records: list, outs, kept: list | None = None):
    """The first in-place update whose effect the graph would miss, as ``(alias,
    other)``, or None. An in-place op writes the memory its target shares with
    views of it (or with its base): in eager mode a view taken before ``y += 1``
    sees the update, but the trace records only that ``y`` is rebound, so the
    view (or base) read later would keep the old values. Tensors that share
    memory share one version counter (``_share_version``). ``records`` is the
    whole trace; only reads by ``kept`` records (default: all) count."""
    keep = None if kept is None else {id(r) for r in kept}
    seen: list = []  # tensors traced so far (inputs and outputs of records)
    for i, rec in enumerate(records):
        if not isinstance(rec, Alias):
            seen.extend(t for v in rec.args for t in _tensors(v))
            seen.extend(t for v in rec.params.values() for t in _tensors(v))
            seen.extend(rec.outputs)
            continue
        target, counter = rec.target, rec.target._version
        others = {id(t): t for t in seen if t is not target and t._version is counter}
        if not others:
            continue
        later = [t for r in records[i + 1:] if not isinstance(r, Alias)
                 and (keep is None or id(r) in keep)
                 for v in (*r.args, *r.params.values()) for t in _tensors(v)]
        for t in (*later, *outs):
            if id(t) in others:
                return rec, t
    return None
