"""Import rules: elementwise arithmetic, activations, softmax, Gemm/MatMul, reductions.

Each rule maps the ONNX operator onto tapegrad ops with the operator's own
conventions (ONNX's numbered references are in the operator docs,
https://onnx.ai/onnx/operators/); integer arithmetic, which carries no
gradient, is computed on the raw arrays with ONNX's rules (Div truncates).
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..tensor import tensor
from ._rules import NodeInfo, broadcast_size, host, host_ints, host_scalar, norm_axis, rule

# ---------------------------------------------------------------- helpers


def _legacy_broadcast(node: NodeInfo, a, b):
    """Opset < 7 binary ops: ``broadcast=1`` with ``axis`` aligns ``b`` at ``axis``."""
    if node.opset >= 7 or not node.get("broadcast", 0):
        return b
    axis = node.get("axis")
    if axis is None:
        return b  # suffix alignment: NumPy's rule
    axis = norm_axis(node, int(axis), a.ndim)
    trailing = a.ndim - axis - b.ndim
    return ops.reshape(b, tuple(b.shape) + (1,) * trailing) if trailing > 0 else b


def _int_binary(node, fn, a, b):
    """Integer/bool arithmetic on the raw arrays (no gradient), ONNX's rules."""
    xp = a.device.xp
    out = fn(xp, a.array, b.array)
    return tensor(out.astype(np.result_type(a.dtype, b.dtype), copy=False), device=a.device)


def _int_div(xp, x, y):
    if x.dtype.kind == "u":
        return x // y
    q = xp.abs(x) // xp.abs(y)  # ONNX truncates toward zero (C's rule), NumPy floors
    return xp.where((x < 0) != (y < 0), -q, q)


def _binary(op, int_fn):
    def fn(node, a, b):
        b = _legacy_broadcast(node, a, b)
        if a.dtype.kind in "iub" and b.dtype.kind in "iub":
            return _int_binary(node, int_fn, a, b)
        return op(a, b)
    return fn


_BCAST = ("broadcast", "axis", "consumed_inputs")
rule("Add", attrs=_BCAST, size=broadcast_size)(_binary(ops.add, lambda xp, x, y: x + y))
rule("Sub", attrs=_BCAST, size=broadcast_size)(_binary(ops.sub, lambda xp, x, y: x - y))
rule("Mul", attrs=_BCAST, size=broadcast_size)(_binary(ops.mul, lambda xp, x, y: x * y))
rule("Div", attrs=_BCAST, size=broadcast_size)(_binary(ops.div, _int_div))


@rule("Sum", "Mean", "Max", "Min", attrs=("consumed_inputs",), size=broadcast_size)
def _variadic(node, *xs):
    """Sum/Mean/Max/Min of any number of inputs, with NumPy broadcasting."""
    step = {"Sum": ops.add, "Mean": ops.add, "Max": ops.maximum, "Min": ops.minimum}
    out = xs[0]
    for x in xs[1:]:
        out = step[node.op_type](out, x)
    if node.op_type == "Mean" and len(xs) > 1:
        out = out / len(xs)
    return out


@rule("Pow", size=broadcast_size)
def _pow(node, x, y):
    if x.dtype.kind in "iu":  # the result has the base's dtype (no gradient)
        xp = x.device.xp
        return tensor(xp.power(x.array, y.array).astype(x.dtype), device=x.device)
    if y.ndim == 0 and not y.requires_grad and y.dtype.kind in "iuf":
        return ops.pow(x, float(host(y)))  # the common x ** constant (no gradient to it)
    return ops.pow(x, y)


_UNARY = {"Neg": ops.neg, "Abs": ops.abs, "Exp": ops.exp, "Log": ops.log, "Sqrt": ops.sqrt,
          "Relu": ops.relu, "Sigmoid": ops.sigmoid, "Tanh": ops.tanh, "Erf": ops.erf,
          "Sin": ops.sin, "Cos": ops.cos, "Asin": ops.asin, "Acos": ops.acos, "Atan": ops.atan,
          "Softsign": ops.softsign, "Identity": lambda x: x, "HardSwish": ops.hardswish}


@rule(*_UNARY, attrs=("consumed_inputs",))
def _unary(node, x):
    return _UNARY[node.op_type](x)


@rule("Reciprocal", attrs=("consumed_inputs",))
def _reciprocal(node, x):
    return 1.0 / x


# ------------------------------------------------------------ activations


@rule("LeakyRelu", attrs=("alpha", "consumed_inputs"))
def _leaky_relu(node, x):
    alpha = float(node.get("alpha", 0.01))
    if alpha >= 0:
        return ops.leaky_relu(x, alpha)
    return ops.where(x > 0, x, x * alpha)  # tapegrad's op keeps slopes >= 0 only


@rule("PRelu", attrs=("consumed_inputs",), size=broadcast_size)
def _prelu(node, x, slope):
    """``slope`` broadcasts to ``x`` NumPy-style (aligned at the last axis); before
    opset 7 a 1-D slope of C values is one per channel (axis 1)."""
    n = slope.array.size
    if node.opset < 7 and slope.ndim == 1 and x.ndim >= 2 and n == x.shape[1]:
        return ops.prelu(x, slope)
    full = (1,) * (x.ndim - slope.ndim) + tuple(slope.shape)
    # one slope, or one per channel (C, 1, 1): tapegrad's prelu; (C,) only for 2-D x
    if x.ndim >= 2 and slope.ndim <= x.ndim and full[0] == 1 and \
            all(s == 1 for s in full[2:]) and full[1] in (1, x.shape[1]):
        return ops.prelu(x, ops.reshape(slope, (n,)))
    return ops.where(x > 0, x, x * slope)  # any other shape broadcasting to x


@rule("Elu", attrs=("alpha", "consumed_inputs"))
def _elu(node, x):
    return ops.elu(x, float(node.get("alpha", 1.0)))


@rule("Selu", attrs=("alpha", "gamma", "consumed_inputs"))
def _selu(node, x):
    alpha = float(node.get("alpha", 1.67326319217681884765625))
    gamma = float(node.get("gamma", 1.05070102214813232421875))
    return ops.elu(x, alpha) * gamma


@rule("Softplus")
def _softplus(node, x):
    return ops.softplus(x, 1.0, float("inf"))


@rule("Celu", attrs=("alpha",))
def _celu(node, x):
    alpha = float(node.get("alpha", 1.0))
    return ops.elu(x / alpha, 1.0) * alpha


@rule("ThresholdedRelu", attrs=("alpha",))
def _thresholded_relu(node, x):
    return ops.where(x > float(node.get("alpha", 1.0)), x, x * 0.0)


@rule("Shrink", attrs=("bias", "lambd"))
def _shrink(node, x):
    bias, lambd = float(node.get("bias", 0.0)), float(node.get("lambd", 0.5))
    return ops.where(x < -lambd, x + bias, ops.where(x > lambd, x - bias, x * 0.0))


def _check_gelu(node):
    if node.get("approximate", "none") not in ("none", "tanh"):
        raise node.refuse_attr("approximate", node.get("approximate"), "'none' or 'tanh'")


@rule("Gelu", attrs=("approximate",), check=_check_gelu)
def _gelu(node, x):
    return ops.gelu(x, approximate=node.get("approximate", "none"))


@rule("Mish")
def _mish(node, x):
    return ops.mish(x)


@rule("HardSigmoid", attrs=("alpha", "beta", "consumed_inputs"))
def _hard_sigmoid(node, x):
    alpha, beta = float(node.get("alpha", 0.2)), float(node.get("beta", 0.5))
    return ops.clip(x * alpha + beta, 0.0, 1.0)


@rule("Clip", attrs=("min", "max", "consumed_inputs"), static=(1, 2))
def _clip(node, x, lo=None, hi=None):
    if node.opset < 11:
        lo, hi = node.get("min"), node.get("max")
    else:
        lo = None if lo is None else host_scalar(node, lo, "min")
        hi = None if hi is None else host_scalar(node, hi, "max")
    if x.dtype.kind in "iu":
        xp = x.device.xp
        return tensor(xp.clip(x.array, lo, hi), device=x.device)
    return ops.clip(x, lo, hi)


@rule("Softmax", "LogSoftmax", attrs=("axis",))
def _softmax(node, x):
    fn = ops.softmax if node.op_type == "Softmax" else ops.log_softmax
    if node.opset >= 13:
        return fn(x, norm_axis(node, int(node.get("axis", -1)), x.ndim))
    # before opset 13 the input is flattened to 2-D at ``axis`` and normalised per row
    axis = norm_axis(node, int(node.get("axis", 1)), max(x.ndim, 1))
    shape = tuple(x.shape)
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    flat = ops.reshape(x, (rows, -1))  # (d0*..*d(axis-1), d(axis)*..*d(n-1))
    return ops.reshape(fn(flat, 1), shape)


# -------------------------------------------------------------- products


def _matmul_size(node, a, b, c=None):
    """Elements of ``a @ b`` (batch axes broadcast; ``c`` is Gemm's bias)."""
    if a.ndim == 0 or b.ndim == 0:
        return None
    if node.op_type == "Gemm":
        if a.ndim != 2 or b.ndim != 2:
            return None
        return a.shape[1 if node.get("transA", 0) else 0] * \
            b.shape[0 if node.get("transB", 0) else 1]
    rows = a.shape[-2] if a.ndim > 1 else 1
    cols = b.shape[-1] if b.ndim > 1 else 1
    try:
        batch = math.prod(np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2])))
    except ValueError:
        return None
    return batch * rows * cols


@rule("MatMul", size=_matmul_size)
def _matmul(node, a, b):
    return ops.matmul(a, b)


@rule("Gemm", attrs=("alpha", "beta", "transA", "transB", "broadcast"), size=_matmul_size)
def _gemm(node, a, b, c=None):
    """``alpha * A' @ B' + beta * C``, ``A'`` = ``A.T`` when ``transA`` (and ``B'`` alike)."""
    alpha, beta = float(node.get("alpha", 1.0)), float(node.get("beta", 1.0))
    if node.get("transA", 0):
        a = ops.transpose(a)
    if node.get("transB", 0):
        b = ops.transpose(b)
    y = ops.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None and beta != 0.0:
        y = y + (c if beta == 1.0 else c * beta)
    return y


# ------------------------------------------------------------- reductions

_REDUCE = {"ReduceMean": ops.mean, "ReduceSum": ops.sum, "ReduceMax": ops.max,
           "ReduceMin": ops.min, "ReduceProd": ops.prod, "ReduceLogSumExp": ops.logsumexp,
           "ReduceSumSquare": lambda x, axis, keepdims: ops.sum(x * x, axis, keepdims),
           "ReduceL1": lambda x, axis, keepdims: ops.sum(ops.abs(x), axis, keepdims),
           "ReduceL2": lambda x, axis, keepdims: ops.sqrt(ops.sum(x * x, axis, keepdims)),
           "ReduceLogSum": lambda x, axis, keepdims: ops.log(ops.sum(x, axis, keepdims))}


@rule(*_REDUCE, attrs=("axes", "keepdims", "noop_with_empty_axes"), static=(1,))
def _reduce(node, x, axes=None):
    # axes moved from an attribute to an input: ReduceSum at opset 13, the others at 18
    as_input = node.opset >= (13 if node.op_type == "ReduceSum" else 18)
    axes = host_ints(axes) if as_input else node.ints("axes")
    keep = bool(node.get("keepdims", 1))
    if not axes:
        if node.get("noop_with_empty_axes", 0):
            return x
        axes = list(range(x.ndim))
    axes = tuple(sorted(norm_axis(node, a, x.ndim, "axes") for a in axes))
    if x.array.size == 0 and node.op_type in ("ReduceMax", "ReduceMin"):
        # ONNX's identity: -inf for max, +inf for min (False/True for bool); no gradient
        kind = x.dtype.kind
        lo, hi = (False, True) if kind == "b" else (-np.inf, np.inf) if kind == "f" else \
            (np.iinfo(x.dtype).min, np.iinfo(x.dtype).max)
        xp = x.device.xp
        fn, init = (xp.max, lo) if node.op_type == "ReduceMax" else (xp.min, hi)
        return tensor(fn(x.array, axis=axes, keepdims=keep, initial=init), device=x.device)
    if x.dtype.kind in "iub" and node.op_type not in ("ReduceMax", "ReduceMin"):
        raise node.unsupported(f"{node.op_type} of {x.dtype}", "tapegrad reduces floats")
    return _REDUCE[node.op_type](x, axis=axes, keepdims=keep)


@rule("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def _argmax(node, x):
    """Indices (int64, no gradient) on the raw array."""
    axis = norm_axis(node, int(node.get("axis", 0)), x.ndim)
    xp = x.device.xp
    data = x.array
    if node.get("select_last_index", 0):
        data = xp.flip(data, axis)
    idx = (xp.argmax if node.op_type == "ArgMax" else xp.argmin)(data, axis=axis)
    if node.get("select_last_index", 0):
        idx = x.shape[axis] - 1 - idx
    if node.get("keepdims", 1):
        idx = xp.expand_dims(idx, axis)
    return tensor(idx.astype(np.int64), device=x.device)

