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
is refused at load time, so nothing is silently ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from ..device import to_host
from ..tensor import Tensor, tensor
from ._deps import UnsupportedOnnxError


@dataclass(frozen=True)
class Rule:
    fn: Callable
    attrs: frozenset
    static: frozenset = frozenset()
    buffers: frozenset = frozenset()


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
         buffers: Iterable[int] = ()):
    """Register ``fn`` as the import rule of ``op_types`` (every rule is deterministic,
    so a node whose inputs are all constants is folded at load time)."""
    def register(fn):
        for op in op_types:
            RULES[op] = Rule(fn, frozenset(attrs), frozenset(static), frozenset(buffers))
        return fn
    return register


@dataclass
class NodeInfo:
    """What a rule knows about its node besides the inputs."""

    name: str
    op_type: str
    opset: int
    attrs: dict = field(default_factory=dict)
    n_outputs: int = 1

    def label(self) -> str:
        return f"node {self.name!r} ({self.op_type}, opset {self.opset})"

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
    return to_host(v.data if isinstance(v, Tensor) else v)


def host_ints(v) -> list[int] | None:
    """A static integer input (shape, axes, pads) as a list of Python ints."""
    a = host(v)
    return None if a is None else [int(i) for i in a.reshape(-1)]


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
