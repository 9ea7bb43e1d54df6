"""The graph an export builds: value names by tensor identity, initializers,
nodes, the batch axis of every value, and the table of op mappings.

Each tapegrad op class has one mapping, a small function registered with
:func:`mapping` (in ``export_ops.py``, ``export_layers.py``, ``export_shape.py``) that gets the
:class:`Graph` and a :class:`Call` -- the recorded op's arguments by its
``forward``'s parameter names -- and emits ONNX nodes writing ``call.out``.

The batch axis: the graph input's axis 0 is the batch. Each value knows
where its batch axis is (or None). Most ops keep it where their first batched
input has it (elementwise ops, activations, conv, pooling, norms); ops that
move or fold axes (reshape, transpose, reductions, indexing, concatenation)
say where it goes. A mapping that would have to write the example's batch size
into the graph (a reshape that merges the batch with another axis) raises
under ``dynamic_batch=True`` instead of exporting a graph that only runs at
that size.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from ..device import to_host
from ..errors import TapegradError, describe
from ..tensor import Tensor

__all__ = ["OnnxExportError", "Graph", "Call", "mapping", "EXPORTERS", "lookup"]


class OnnxExportError(TapegradError, NotImplementedError):
    """An op, or an option of one, has no exact ONNX counterpart (or cannot be
    exported with the options asked for, e.g. a dynamic batch)."""


EXPORTERS: dict[type, Callable] = {}


def mapping(*classes: type) -> Callable:
    """Register the decorated function as the ONNX mapping of ``classes``.

    >>> @mapping(ReLU)
    ... def _relu(g, c): g.node("Relu", [c.x("x")], [c.out])
    """
    def deco(fn):
        for cls in classes:
            EXPORTERS[cls] = fn
        return fn
    return deco


def lookup(cls: type):
    """The mapping of ``cls`` (or of the nearest base class that has one)."""
    for k in cls.__mro__:
        fn = EXPORTERS.get(k)
        if fn is not None:
            return fn
    return None


_SIGS: dict[type, inspect.Signature] = {}


def _bind(cls, args, params) -> dict:
    """The op's arguments by its forward's parameter names (defaults filled in)."""
    sig = _SIGS.get(cls)
    if sig is None:
        sig = _SIGS[cls] = inspect.signature(cls.forward)
    bound = sig.bind(None, *args, **params)
    bound.apply_defaults()
    out = dict(bound.arguments)
    out.pop(next(iter(sig.parameters)))  # ctx
    return out


class Call:
    """One recorded op as a mapping sees it: ``a`` (arguments by name), the
    output tensors ``outs`` and their value names ``out_names``; ``batch_out``
    may be set by a mapping that moves the batch axis (one entry per output)."""

    def __init__(self, g: Graph, fn: type, args: tuple, params: dict, outs: tuple):
        self.g = g
        self.fn = fn
        self.a = _bind(fn, args, params)
        self.outs = outs
        self.out_names = [g.fresh(fn.__name__) for _ in outs]
        self.batch_out: list | None = None

    @property
    def op(self) -> str:
        return self.fn.__name__

    @property
    def out(self) -> str:
        return self.out_names[0]

    def x(self, key: str) -> str:
        """The value name of argument ``key`` (a tensor, array or number)."""
        return self.g.value(self.a[key])

    def info(self, key: str):
        """Argument ``key``'s array where it lives, for its shape and dtype (no copy)."""
        v = self.a[key]
        return v.array if isinstance(v, Tensor) else v

    def arr(self, key: str):
        """Argument ``key`` as a host array, for its values (None stays None)."""
        v = self.a[key]
        if v is None:
            return None
        return to_host(v.array if isinstance(v, Tensor) else v)

    def batch(self, key: str):
        """The batch axis of argument ``key`` (None: it has none)."""
        return self.g.batch_of(self.a[key])

    def describe(self) -> str:
        """``conv2d(x (2, 3, 8, 8) float32, ...)`` for error messages."""
        parts = []
        for k, v in self.a.items():
            if isinstance(v, Tensor) or hasattr(v, "shape"):
                parts.append(f"{k} {describe(v)}")
            elif isinstance(v, tuple) and v and all(isinstance(t, Tensor) for t in v):
                parts.append(f"{k} [{describe(*v)}]")
            elif isinstance(v, (int, float, str, bool, tuple, type(None))):
                parts.append(f"{k}={v!r}")
        return f"{self.op}({', '.join(parts)})"

    def refuse(self, why: str, what_to_do: str) -> OnnxExportError:
        """The error for an option this op's mapping cannot export exactly."""
        return OnnxExportError(f"ONNX export: {self.describe()}: {why}; {what_to_do}")


class Graph:
    """Nodes, initializers and value names of one export (``onnx`` is the module)."""

    def __init__(self, onnx, opset: int, dynamic: bool, params: dict):
        self.onnx = onnx
        self.opset = opset
        self.dynamic = dynamic
        self.nodes: list = []
        self.inits: dict[str, Any] = {}
        self.names: dict[int, str] = {}  # id(Tensor) or id(array) -> value name
        self.meta: dict[str, tuple] = {}  # value name -> (shape, dtype, batch axis)
        self.params = params  # id(Tensor) / id(its array) -> state_dict name
        self._count: dict[str, int] = {}

    # ------------------------------------------------------------ names
    def fresh(self, hint: str) -> str:
        n = self._count.get(hint, 0)
        self._count[hint] = n + 1
        return f"{hint}_{n}"

    def bind(self, t, name: str, batch) -> None:
        """``t`` (a Tensor) is the value ``name`` from now on."""
        self.names[id(t)] = name
        self.names[id(t.array)] = name
        self.meta[name] = (tuple(t.shape), np.dtype(t.dtype), batch)

    def batch_of(self, v):
        name = self.names.get(id(v))
        if name is None and isinstance(v, Tensor):
            name = self.names.get(id(v.array))
        return self.meta[name][2] if name in self.meta else None

    def value(self, v) -> str:
        """The name of ``v``: a traced value, a parameter/buffer (its state_dict
        name, added as an initializer on first use), or a constant captured by
        the op (an initializer). ``None`` is the empty name (an omitted input)."""
        if v is None:
            return ""
        name = self.names.get(id(v))
        if name is not None:
            return name
        data = v.array if isinstance(v, Tensor) else v
        if data is not v:
            name = self.names.get(id(data))
            if name is not None:
                return name
        pname = self.params.get(id(v)) or self.params.get(id(data))
        arr = to_host(data) if hasattr(data, "shape") else np.asarray(data)
        if pname is not None:
            self.add_init(pname, arr)
            name = pname
        else:
            name = self.const(arr, hint="const")
        self.names[id(v)] = name
        self.meta[name] = (arr.shape, arr.dtype, None)
        return name

    # ------------------------------------------------------- emitting
    def add_init(self, name: str, arr) -> str:
        if name not in self.inits:
            # ascontiguousarray makes a 0-d array 1-d: a scalar constant would become
            # (1,) and turn a 0-d result (a full reduction times 2) into a 1-d one
            arr = np.asarray(arr)
            arr = np.ascontiguousarray(arr) if arr.ndim else arr
            self.inits[name] = self.onnx.numpy_helper.from_array(arr, name)
            self.meta.setdefault(name, (arr.shape, arr.dtype, None))
        return name

    def const(self, value, dtype=None, hint: str = "const") -> str:
        """A new initializer holding ``value`` (``dtype``: NumPy's, default its own)."""
        arr = np.asarray(value, dtype=dtype)
        return self.add_init(self.fresh(hint), arr)

    def ints(self, values) -> str:
        """An int64 initializer (shapes, axes, pads)."""
        return self.const(np.asarray(values, dtype=np.int64).reshape(-1), hint="ints")

    def scalar(self, value, like: str) -> str:
        """A 0-d initializer of ``value`` in the dtype of the value ``like``."""
        return self.const(np.asarray(value, dtype=self.meta[like][1]), hint="c")

    def node(self, op_type: str, inputs: list, outputs=None, **attrs):
        """Append a node; returns its output name (or names, when ``outputs`` is an
        int count or a list of several)."""
        if outputs is None or isinstance(outputs, int):
            outputs = [self.fresh(op_type) for _ in range(outputs or 1)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), list(outputs),
                                                     name=self.fresh("n_" + op_type), **attrs))
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def rename(self, name: str, out: str) -> None:
        """Make the value ``name`` be called ``out``: the last node's output is renamed
        if it is that (and no op's value yet); anything else is copied by Identity."""
        last = self.nodes[-1] if self.nodes else None
        if last is not None and list(last.output) == [name] and name not in self.meta:
            last.output[0] = out
        else:
            self.node("Identity", [name], [out])

    def axes_node(self, op_type: str, x: str, axes, out=None, keepdims=None, since=18):
        """A reduction (or Squeeze/Unsqueeze) whose ``axes`` became an input at
        opset ``since`` -- an attribute before."""
        if self.opset >= since:
            return self.node(op_type, [x, self.ints(axes)], out and [out], keepdims=keepdims)
        return self.node(op_type, [x], out and [out], axes=list(axes), keepdims=keepdims)
