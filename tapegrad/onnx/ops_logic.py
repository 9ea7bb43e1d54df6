"""Import rules: comparisons, logic, Where, rounding and other ops without a
gradient (computed on the raw arrays, results carry no graph), and Range.

Rounding ops (Floor, Ceil, Round) have a zero gradient almost everywhere; their
results are constants here, which gives the same (no gradient flows).
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..tensor import tensor
from ._rules import broadcast_size, host, rule


def _raw(fn, *xs):
    """``fn(xp, *arrays)`` as a Tensor without a graph, on the inputs' device."""
    dev = xs[0].device
    with np.errstate(all="ignore"):  # NaN/inf results are ONNX's answer, not a mistake
        out = fn(dev.xp, *(x.array for x in xs))
    return tensor(out, device=dev)


_COMPARE = {"Equal": lambda xp, a, b: a == b, "Less": lambda xp, a, b: a < b,
            "LessOrEqual": lambda xp, a, b: a <= b, "Greater": lambda xp, a, b: a > b,
            "GreaterOrEqual": lambda xp, a, b: a >= b,
            "And": lambda xp, a, b: xp.logical_and(a, b),
            "Or": lambda xp, a, b: xp.logical_or(a, b),
            "Xor": lambda xp, a, b: xp.logical_xor(a, b),
            "BitwiseAnd": lambda xp, a, b: a & b, "BitwiseOr": lambda xp, a, b: a | b,
            "BitwiseXor": lambda xp, a, b: a ^ b}


@rule(*_COMPARE, size=broadcast_size)
def _compare(node, a, b):
    return _raw(_COMPARE[node.op_type], a, b)


_UNARY = {"Not": lambda xp, a: xp.logical_not(a), "BitwiseNot": lambda xp, a: ~a,
          "Floor": lambda xp, a: xp.floor(a), "Ceil": lambda xp, a: xp.ceil(a),
          "Round": lambda xp, a: xp.round(a),  # half to even, as ONNX
          "IsNaN": lambda xp, a: xp.isnan(a)}


@rule(*_UNARY, attrs=("consumed_inputs",))
def _unary(node, x):
    return _raw(_UNARY[node.op_type], x)


@rule("IsInf", attrs=("detect_negative", "detect_positive"))
def _isinf(node, x):
    neg, pos = node.get("detect_negative", 1), node.get("detect_positive", 1)
    return _raw(lambda xp, a: (xp.isneginf(a) & bool(neg)) | (xp.isposinf(a) & bool(pos)), x)


@rule("Sign")
def _sign(node, x):
    if x.dtype.kind == "f":
        return ops.sign(x)
    return _raw(lambda xp, a: xp.sign(a).astype(a.dtype), x)


@rule("Mod", attrs=("fmod",), size=broadcast_size)
def _mod(node, a, b):
    """``fmod=0``: the sign of the divisor (Python's %); ``fmod=1``: of the dividend (C)."""
    if node.get("fmod", 0):
        return _raw(lambda xp, x, y: xp.fmod(x, y), a, b)
    return _raw(lambda xp, x, y: xp.mod(x, y), a, b)


@rule("Where", size=broadcast_size)
def _where(node, cond, x, y):
    if x.dtype.kind != "f":
        return _raw(lambda xp, c, a, b: xp.where(c, a, b), cond, x, y)
    return ops.where(cond, x, y)


@rule("Range", static=(0, 1, 2))
def _range(node, start, limit, delta):
    """``start, start + delta, ...`` while before ``limit``, in the inputs' dtype."""
    s, lim, d = host(start), host(limit), host(delta)
    for what, v in (("start", s), ("limit", lim), ("delta", d)):
        if v.size != 1:
            raise node.bad(f"{what} must be a scalar, got shape {v.shape}")
    s, lim, d = s.reshape(()), lim.reshape(()), d.reshape(())
    a, b, step = s.item(), lim.item(), d.item()
    if not all(math.isfinite(v) for v in (a, b, step)):  # ints always are
        raise node.bad(f"start={a}, limit={b}, delta={step} must be finite")
    if step == 0:
        raise node.bad(f"delta is 0 (start={a}, limit={b}): the range never ends")
    # the count before anything is allocated: exact for ints, ONNX's ceil for floats
    n = -((a - b) // step) if isinstance(step, int) and isinstance(a, int) and \
        isinstance(b, int) else (b - a) / step
    if isinstance(n, float):
        if not math.isfinite(n):
            raise node.bad(f"start={a}, limit={b}, delta={step} give {n} elements")
        n = math.ceil(n)
    n = max(int(n), 0)
    node.check_size(n, s.dtype)
    return tensor((s + d * np.arange(n, dtype=s.dtype)).astype(s.dtype))
