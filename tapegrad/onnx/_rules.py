"""The table of ONNX operators tapegrad imports, and what each rule receives.

A rule is ``fn(node, *inputs) -> output or tuple of outputs``, registered with
:func:`rule` under its ``op_type``. ``node`` is a :class:`NodeInfo`: the node's
name, its attributes (already Python values), the opset of its domain and
which outputs the graph uses. Inputs are Tensors (``None`` for an omitted
optional input); an input listed in ``static`` is a host NumPy array instead
(a shape, axes, pads, a clip bound: values the op's geometry depends on, which
carry no gradient), and one in ``buffers`` marks an initializer as a buffer
rather than a Parameter (batch norm's running statistics).

Every rule names the attributes it understands; any other attribute on the node
is refused at load time, so nothing is silently ignored. A rule may also name a
``check(node)`` that validates its attributes (types, ranges, finiteness) at load
time, and a ``size(node, *inputs)`` giving the element count of its output when
that can exceed its inputs' (broadcasting, MatMul): the count is checked against
the load limits (:class:`Limits`) before the rule runs, and rules that make
values from static inputs (ConstantOfShape, Range, Tile, Pad) check theirs with
:meth:`NodeInfo.check_size` before allocating.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from ..device import to_host
from ..errors import SerializationError
from ..tensor import Tensor, tensor
from ._deps import UnsupportedOnnxError


@dataclass(frozen=True)
class Rule:
    fn: Callable
    attrs: frozenset
    static: frozenset = frozenset()
    buffers: frozenset = frozenset()
    check: Callable | None = None
    size: Callable | None = None


RULES: dict[str, Rule] = {}

# the dtypes tapegrad holds (ONNX's float8/int4/bfloat16 and strings are refused)
PLAIN_DTYPES = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64))


def checked_tensor(arr, what: str) -> Tensor:
    """A Tensor of a host array from the graph, or a clear error for dtypes tapegrad lacks."""
    arr = np.asarray(arr)
    if arr.dtype not in PLAIN_DTYPES:
        raise UnsupportedOnnxError(f"tapegrad.onnx: {what} has dtype {arr.dtype}, which "
                                   "tapegrad does not hold (bool, ints, float16/32/64 only)")
    return tensor(arr)


def rule(*op_types: str, attrs: Iterable[str] = (), static: Iterable[int] = (),
         buffers: Iterable[int] = (), check: Callable | None = None,
         size: Callable | None = None):
    """Register ``fn`` as the import rule of ``op_types`` (every rule is deterministic,
    so a node whose inputs are all constants is folded at load time)."""
    def register(fn):
        for op in op_types:
            RULES[op] = Rule(fn, frozenset(attrs), frozenset(static), frozenset(buffers),
                             check, size)
        return fn
    return register


class Limits:
    """What one ``tapegrad.onnx.load`` may read and make, and the model's name for
    its errors (a path, ``"<bytes>"`` or ``"<ModelProto>"``).

    ``max_value_bytes`` bounds any one value (an initializer, a constant, a value
    folded at load, and at run time the output of a node that grows past its
    inputs); ``max_bytes`` bounds the file, its external data and every value
    folded at load, in total (``used`` counts them)."""

    def __init__(self, source: str, max_bytes: int, max_value_bytes: int):
        for name, v in (("max_bytes", max_bytes), ("max_value_bytes", max_value_bytes)):
            if type(v) is not int or v < 0:
                from ..errors import ArgumentError

                raise ArgumentError(f"tapegrad.onnx.load: {name} must be a non-negative int, "
                                    f"got {v!r}")
        self.source, self.max_bytes, self.max_value_bytes = source, max_bytes, max_value_bytes
        self.used = 0
        self.folding = False  # while constants are folded, values count towards max_bytes

    def bad(self, why: str) -> SerializationError:
        """The error for a malformed or oversized model (to ``raise``)."""
        return SerializationError(f"tapegrad.onnx.load: {self.source}: {why}")

    def spend(self, nbytes: int, what: str) -> None:
        """Count ``nbytes`` read or folded towards ``max_bytes``."""
        if self.used + nbytes > self.max_bytes:
            raise self.bad(f"{what} needs {nbytes} bytes, which with the {self.used} already "
                           f"read or computed is more than max_bytes={self.max_bytes}; if you "
                           "trust the model, pass a larger tapegrad.onnx.load(..., "
                           "max_bytes=...)")
        self.used += nbytes

    def check_value(self, count: int, itemsize: int, what: str) -> None:
        """Refuse a value of ``count`` elements before it is allocated."""
        nbytes = count * itemsize
        if nbytes > self.max_value_bytes:
            raise self.bad(f"{what} would hold {count} elements ({nbytes} bytes), more than "
                           f"max_value_bytes={self.max_value_bytes}; if you trust the model, "
                           "pass a larger tapegrad.onnx.load(..., max_value_bytes=...)")
        if self.folding and self.used + nbytes > self.max_bytes:
            raise self.bad(f"{what} would hold {count} elements ({nbytes} bytes), which with "
                           f"the {self.used} bytes already read or computed at load is more "
                           f"than max_bytes={self.max_bytes}; if you trust the model, pass a "
                           "larger tapegrad.onnx.load(..., max_bytes=...)")


@dataclass
class NodeInfo:
    """What a rule knows about its node besides the inputs."""

    name: str
    op_type: str
    opset: int
    attrs: dict = field(default_factory=dict)
    n_outputs: int = 1
    limits: Limits | None = None

    def label(self) -> str:
        where = f"{self.limits.source}: " if self.limits is not None else ""
        return f"{where}node {self.name!r} ({self.op_type}, opset {self.opset})"

    def check_size(self, shape_or_count, dtype, what: str = "its output") -> None:
        """Refuse an output of this size (a shape or an element count, of ``dtype``)
        above the load limits, before it is allocated."""
        count = shape_or_count if isinstance(shape_or_count, int) else \
            math.prod(int(d) for d in shape_or_count)
        if self.limits is not None:
            self.limits.check_value(count, np.dtype(dtype).itemsize, f"{self.label()}: {what}")

    def bad(self, why: str) -> SerializationError:
        """The error for a malformed node (an attribute or a static input out of range)."""
        return SerializationError(f"tapegrad.onnx.load: {self.label()}: {why}")

    def get(self, name: str, default=None):
        return self.attrs.get(name, default)

    def unsupported(self, what: str, hint: str = "") -> UnsupportedOnnxError:
        """The error for a case this rule cannot import (to ``raise``)."""
        tail = f"; {hint}" if hint else ""
        return UnsupportedOnnxError(f"tapegrad.onnx: {self.label()}: {what} is not supported"
                                    f"{tail}")

    def refuse_attr(self, name: str, value, hint: str = "") -> UnsupportedOnnxError:
        return self.unsupported(f"attribute {name}={value!r}", hint)

    def ints(self, name: str, default=None) -> list[int] | None:
        v = self.attrs.get(name, default)
        return None if v is None else [int(i) for i in v]


def host(v) -> np.ndarray | None:
    """A static input's value as a host NumPy array."""
    if v is None:
        return None
    return to_host(v.array if isinstance(v, Tensor) else v)


def host_ints(v, node: NodeInfo | None = None, what: str = "a static input") -> list[int] | None:
    """A static integer input (shape, axes, pads) as a list of Python ints (given
    ``node``: a clear error for a float, NaN or bool one)."""
    a = host(v)
    if a is None:
        return None
    if node is not None and a.dtype.kind not in "iu":
        raise node.bad(f"{what} must hold integers, got dtype {a.dtype}")
    return [int(i) for i in a.reshape(-1)]


def host_scalar(node: NodeInfo, v, what: str):
    """A static input that must hold one value, as a Python number."""
    a = host(v)
    if a.size != 1:
        raise node.bad(f"{what} must be a single value, got shape {a.shape}")
    return a.reshape(-1)[0].item()


def broadcast_size(node: NodeInfo, *xs) -> int | None:
    """Elements of the broadcast of the Tensor inputs (None: they do not broadcast,
    and the op's own error says so)."""
    shapes = [tuple(x.shape) for x in xs if x is not None]
    try:
        return math.prod(np.broadcast_shapes(*shapes)) if shapes else None
    except ValueError:
        return None


def norm_axis(node: NodeInfo, axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` in ``[-ndim, ndim)`` as a non-negative axis, or a clear error."""
    if not -ndim <= axis < ndim:
        raise UnsupportedOnnxError(f"tapegrad.onnx: {node.label()}: {what}={axis} is out of "
                                   f"range for a {ndim}-D input")
    return axis % ndim


def norm_indices(node: NodeInfo, indices, n: int, axis: int) -> np.ndarray:
    """Gather-style ``indices`` into an axis of length ``n`` as non-negative host
    int64s (negatives count from the end), or a clear error for any outside ``[-n, n)``."""
    idx = host(indices).astype(np.int64)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise node.unsupported(f"indices outside [-{n}, {n}) on axis {axis}")
    return np.where(idx < 0, idx + n, idx)
