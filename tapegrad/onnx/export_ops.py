"""ONNX mappings of the pointwise families: elementwise, special, activation, softmaxes,
reduction and linalg -- one small function per op class.

Where ONNX has the op with tapegrad's semantics it is used (Relu, Elu, Selu,
HardSigmoid, Softmax on one axis, ...); otherwise the op's own formula is
written out in ONNX nodes (GELU through Erf, SiLU as x * sigmoid(x), Mish,
LogSigmoid, softplus with beta and threshold): opset 17 has no Gelu or Mish.
Operands of another dtype than the result are cast (tapegrad promotes them
inside ``apply``), and constants are stored in the result's dtype.
"""

from __future__ import annotations

import math

import numpy as np

from ..args import normalize_axes, normalize_axis
from ..ops import activation as act
from ..ops import elementwise as ew
from ..ops import linalg, pairwise, reduction, softmaxes, special
from ..tensor import Tensor
from .export_graph import mapping
from .trace import COMPARISONS, LOGICAL


def _elem(g, dtype) -> int:
    return g.onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _operand(g, c, key, dtype=None):
    """Argument ``key`` as a value of ``dtype`` (default: the result's): a tensor
    is cast if it has another dtype, a constant is stored in ``dtype``."""
    dtype = np.dtype(c.outs[0].dtype if dtype is None else dtype)
    v = c.a[key]
    if isinstance(v, Tensor) or id(v) in g.names:
        name = g.value(v)
        if g.meta[name][1] != dtype:
            name = g.node("Cast", [name], to=_elem(g, dtype))
        return name
    return g.const(np.asarray(c.arr(key) if hasattr(v, "shape") else v, dtype=dtype))


# ------------------------------------------------------- elementwise, unary

def _unary(op_type):
    def emit(g, c):
        g.node(op_type, [_operand(g, c, "x")], [c.out])
    return emit


for _cls, _op in ((act.ReLU, "Relu"), (act.Sigmoid, "Sigmoid"), (act.Tanh, "Tanh"),
                  (act.Hardswish, "HardSwish"), (act.Softsign, "Softsign"), (ew.Neg, "Neg"),
                  (ew.Exp, "Exp"), (ew.Log, "Log"), (ew.Sqrt, "Sqrt"), (ew.Abs, "Abs"),
                  (ew.Sin, "Sin"), (ew.Cos, "Cos"), (ew.Asin, "Asin"), (ew.Acos, "Acos"),
                  (ew.Atan, "Atan"), (special.Erf, "Erf"),
                  (ew.ToDevice, "Identity")):
    mapping(_cls)(_unary(_op))


def _check_batch_free(g, c, keys):
    """Under a dynamic batch, a constant operand must not hold the example's
    batch size where it meets the batch axis of another operand."""
    out = c.outs[0]
    b = next((g.batch_of(c.a[k]) for k in keys if g.batch_of(c.a[k]) is not None), None)
    if b is None or out.shape[b] == 1:
        return
    for k in keys:
        v = c.a[k]
        shape = getattr(v, "shape", ())
        d = b - (out.ndim - len(shape))  # the operand's axis that meets the batch axis
        if g.batch_of(v) is None and 0 <= d < len(shape) and shape[d] == out.shape[b]:
            raise c.refuse(f"the constant {k} of shape {tuple(shape)} has the batch size "
                           f"{out.shape[b]} on the batch axis, so the graph would only run at "
                           "that size", "broadcast it from size 1 on that axis, or export "
                           "with dynamic_batch=False")


def _binary(op_type):
    def emit(g, c):
        _check_batch_free(g, c, ("x", "y"))
        g.node(op_type, [_operand(g, c, "x"), _operand(g, c, "y")], [c.out])
    return emit


for _cls, _op in ((ew.Add, "Add"), (ew.Sub, "Sub"), (ew.Mul, "Mul"), (ew.Div, "Div"),
                  (ew.Maximum, "Max"), (ew.Minimum, "Min")):
    mapping(_cls)(_binary(_op))


def _compare(g, c):
    # NumPy compares in the operands' common dtype
    dt = np.result_type(*(c.info(k).dtype if hasattr(c.a[k], "shape") else c.a[k]
                         for k in ("x", "y")))
    x, y = _operand(g, c, "x", dt), _operand(g, c, "y", dt)
    if c.fn.onnx == "NotEqual":
        g.node("Not", [g.node("Equal", [x, y])], [c.out])
    else:
        g.node(c.fn.onnx, [x, y], [c.out])


def _logical(g, c):
    keys = [k for k in ("x", "y") if k in c.a and (c.fn.onnx != "Not" or k == "x")]
    if any(getattr(c.a[k], "dtype", np.dtype(type(c.a[k]))) != np.bool_ for k in keys):
        raise c.refuse("bitwise operators on integers are not exported", "use them on bool "
                       "tensors (comparisons) only")
    g.node(c.fn.onnx, [_operand(g, c, k, np.bool_) for k in keys], [c.out])


for _cls in COMPARISONS.values():
    mapping(_cls)(_compare)
for _cls in LOGICAL.values():
    mapping(_cls)(_logical)


@mapping(pairwise._ClampMinStraight)
def _clamp_min_straight(g, c):  # cosine_similarity's norm clamp: max(n, eps) forward
    g.node("Max", [c.x("n"), _operand(g, c, "eps")], [c.out])


@mapping(ew.Pow)
def _pow(g, c):
    g.node("Pow", [_operand(g, c, "x"), _operand(g, c, "p")], [c.out])


@mapping(ew.Log1p)
def _log1p(g, c):
    x = _operand(g, c, "x")
    g.node("Log", [g.node("Add", [x, g.scalar(1, x)])], [c.out])


@mapping(ew.Where)
def _where(g, c):
    _check_batch_free(g, c, ("cond", "x", "y"))
    cond = _operand(g, c, "cond", np.bool_)
    g.node("Where", [cond, _operand(g, c, "x"), _operand(g, c, "y")], [c.out])


@mapping(ew.Clip)
def _clip(g, c):
    x = _operand(g, c, "x")
    lo, hi = (_operand(g, c, k) if c.a[k] is not None else "" for k in ("lo", "hi"))
    if all(getattr(c.a[k], "ndim", 0) == 0 for k in ("lo", "hi")):  # scalars: ONNX's Clip
        g.node("Clip", [x, lo, hi], [c.out])
        return
    # bounds of a shape: Clip takes scalars only, so max then min (NumPy's clip)
    y = g.node("Max", [x, lo]) if lo else x
    g.node("Min", [y, hi] if hi else [y], [c.out])


@mapping(ew.Cast)
def _cast(g, c):
    g.node("Cast", [c.x("x")], [c.out], to=_elem(g, c.outs[0].dtype))


# -------------------------------------------------------------- activations

@mapping(act.LeakyReLU)
def _leaky_relu(g, c):
    g.node("LeakyRelu", [c.x("x")], [c.out], alpha=float(c.a["slope"]))


@mapping(act.Hardtanh)
def _hardtanh(g, c):
    x = c.x("x")
    g.node("Clip", [x, g.scalar(c.a["lo"], x), g.scalar(c.a["hi"], x)], [c.out])


@mapping(act.Hardsigmoid)
def _hardsigmoid(g, c):
    g.node("HardSigmoid", [c.x("x")], [c.out], alpha=1 / 6, beta=0.5)


@mapping(act.SELU)
def _selu(g, c):
    g.node("Selu", [c.x("x")], [c.out], alpha=act.SELU_ALPHA, gamma=act.SELU_SCALE)


def _softplus_of(g, x, out=None):
    """log(1 + exp(x)) (ONNX's Softplus, stable in onnxruntime)."""
    return g.node("Softplus", [x], out and [out])


@mapping(act.Mish)
def _mish(g, c):
    x = c.x("x")
    g.node("Mul", [x, g.node("Tanh", [_softplus_of(g, x)])], [c.out])


@mapping(act.LogSigmoid)
def _logsigmoid(g, c):  # -softplus(-x)
    g.node("Neg", [_softplus_of(g, g.node("Neg", [c.x("x")]))], [c.out])


@mapping(act.Tanhshrink)
def _tanhshrink(g, c):
    x = c.x("x")
    g.node("Sub", [x, g.node("Tanh", [x])], [c.out])


@mapping(act.GLU)
def _glu(g, c):
    x = c.info("x")
    axis = normalize_axis("glu", x.shape, c.a["axis"])
    if x.shape[axis] % 2:
        raise c.refuse(f"axis {axis} has odd length {x.shape[axis]}", "GLU needs an even one")
    a, b = g.node("Split", [c.x("x")], 2, axis=axis,
                  num_outputs=2 if g.opset >= 18 else None)
    g.node("Mul", [a, g.node("Sigmoid", [b])], [c.out])


# ------------------------------------------------------------ softmaxes, GELU, ...

def _softmax(op_type, name):
    def emit(g, c):
        axis = softmaxes._class_axis(name, c.info("x"), c.a["axis"])
        if axis == ():  # a 0-d input: softmax is 1, log_softmax 0
            x = c.x("x")
            g.node("Add", [g.node("Mul", [x, g.scalar(0, x)]),
                           g.scalar(1 if op_type == "Softmax" else 0, x)], [c.out])
            return
        g.node(op_type, [c.x("x")], [c.out], axis=int(axis))
    return emit


mapping(softmaxes.Softmax)(_softmax("Softmax", "softmax"))
mapping(softmaxes.LogSoftmax)(_softmax("LogSoftmax", "log_softmax"))


@mapping(act.GELU)
def _gelu(g, c):
    x = c.x("x")
    half = g.node("Mul", [x, g.scalar(0.5, x)])
    if c.a["approximate"] == "tanh":  # 0.5 x (1 + tanh(beta (x + kappa x^3)))
        cube = g.node("Mul", [g.node("Mul", [x, x]), x])
        inner = g.node("Add", [x, g.node("Mul", [cube, g.scalar(act._GELU_KAPPA, x)])])
        t = g.node("Tanh", [g.node("Mul", [inner, g.scalar(act._GELU_BETA, x)])])
    else:  # 0.5 x (1 + erf(x / sqrt 2))
        t = g.node("Erf", [g.node("Mul", [x, g.scalar(1 / math.sqrt(2), x)])])
    g.node("Mul", [half, g.node("Add", [t, g.scalar(1, x)])], [c.out])


@mapping(act.SiLU)
def _silu(g, c):
    x = c.x("x")
    g.node("Mul", [x, g.node("Sigmoid", [x])], [c.out])


@mapping(act.ELU)
def _elu(g, c):
    g.node("Elu", [c.x("x")], [c.out], alpha=float(c.a["alpha"]))


@mapping(act.Softplus)
def _softplus(g, c):
    # PyTorch's: x where beta x > threshold, else log(1 + exp(beta x)) / beta
    x = c.x("x")
    beta, threshold = float(c.a["beta"]), float(c.a["threshold"])
    z = x if beta == 1 else g.node("Mul", [x, g.scalar(beta, x)])
    soft = _softplus_of(g, z)
    if beta != 1:
        soft = g.node("Div", [soft, g.scalar(beta, x)])
    g.node("Where", [g.node("Greater", [z, g.scalar(threshold, x)]), x, soft], [c.out])


@mapping(act.PReLU)
def _prelu(g, c):
    x, w = c.info("x"), c.a["weight"]
    slope = _operand(g, c, "weight")
    if w.size != 1 and x.ndim > 2:  # (C,) -> (C, 1, ...): ONNX broadcasts from the right
        slope = g.node("Reshape", [slope, g.ints([-1] + [1] * (x.ndim - 2))])
    g.node("PRelu", [c.x("x"), slope], [c.out])


# ---------------------------------------------------------------- reductions

def _reduced_batch(g, c, axes, keepdims):
    """Where the batch axis goes when ``axes`` are reduced (None: reduced away)."""
    b = c.batch("x")
    if b is None or b in axes:
        return None
    return b if keepdims else b - sum(1 for a in axes if a < b)


def _reduce(op_type, since):
    def emit(g, c):
        x = c.info("x")
        axes = normalize_axes(c.op, x.shape, c.a["axis"])
        keep = int(bool(c.a["keepdims"]))
        c.batch_out = [_reduced_batch(g, c, axes, keep)]
        if not axes:  # nothing reduced: a copy
            g.node("Identity", [c.x("x")], [c.out])
            return
        g.axes_node(op_type, c.x("x"), axes, c.out, keepdims=keep, since=since)
    return emit


for _cls, _op, _since in ((reduction.Sum, "ReduceSum", 13), (reduction.Mean, "ReduceMean", 18),
                          (reduction.Max, "ReduceMax", 18), (reduction.Min, "ReduceMin", 18),
                          (reduction.Prod, "ReduceProd", 18),
                          (reduction.LogSumExp, "ReduceLogSumExp", 18)):
    mapping(_cls)(_reduce(_op, _since))


@mapping(reduction.Var)
def _var(g, c, out=None):
    out = out or c.out
    x = c.info("x")
    axes = normalize_axes("var", x.shape, c.a["axis"])
    keep = int(bool(c.a["keepdims"]))
    c.batch_out = [_reduced_batch(g, c, axes, keep)]
    xv = c.x("x")
    count = math.prod(x.shape[a] for a in axes)
    d = g.node("Sub", [xv, g.axes_node("ReduceMean", xv, axes, keepdims=1)])
    ss = g.axes_node("ReduceSum", g.node("Mul", [d, d]), axes, keepdims=keep, since=13)
    if c.batch("x") in axes:  # the count includes the batch size: read it at run time
        sizes = g.node("Gather", [g.node("Shape", [xv]), g.ints(axes)], axis=0)
        n = g.node("Cast", [g.node("ReduceProd", [sizes], keepdims=0)],
                   to=g.onnx.helper.np_dtype_to_tensor_dtype(np.dtype(x.dtype)))
        return g.node("Div", [ss, g.node("Sub", [n, g.scalar(c.a["ddof"], xv)])], [out])
    return g.node("Div", [ss, g.scalar(count - c.a["ddof"], xv)], [out])


@mapping(reduction.Std)
def _std(g, c):
    g.node("Sqrt", [_var(g, c, g.fresh("var"))], [c.out])


@mapping(reduction.CumSum)
def _cumsum(g, c):
    x = c.info("x")
    if x.ndim == 0:
        g.node("Identity", [c.x("x")], [c.out])
        return
    axis = normalize_axis("cumsum", x.shape, c.a["axis"])
    g.node("CumSum", [c.x("x"), g.const(np.int64(axis))], [c.out])


# ------------------------------------------------------------------- linalg

@mapping(linalg.MatMul)
def _matmul(g, c):
    a, b = c.info("a"), c.info("b")
    ba = c.batch("a")
    # the batch axis of a stays unless a is 1-D (then the result has b's axes)
    c.batch_out = [ba if a.ndim > 1 and ba is not None and ba < a.ndim - 1 else
                   (c.batch("b") if b.ndim > 2 and a.ndim <= b.ndim else None)]
    g.node("MatMul", [c.x("a"), c.x("b")], [c.out])


@mapping(linalg.Linear)
def _linear(g, c):
    x, w, b = c.x("x"), c.x("w"), c.x("b")
    if c.info("x").ndim == 2:  # Caffe's InnerProduct: Gemm with the weight as stored
        g.node("Gemm", [x, w] + ([b] if b else []), [c.out], transB=1)
        return
    y = g.node("MatMul", [x, g.node("Transpose", [w], perm=[1, 0])], None if b else [c.out])
    if b:
        g.node("Add", [y, b], [c.out])


@mapping(linalg.Norm)
def _norm(g, c):
    x = c.info("x")
    p = c.a["p"]
    ops = {1.0: "ReduceL1", 2.0: "ReduceL2", math.inf: "ReduceMax"}
    if p not in ops:
        raise c.refuse(f"a p={p} norm has no ONNX reduction", "use p = 1, 2 or inf")
    axes = normalize_axes("norm", x.shape, c.a["axes"])
    keep = int(bool(c.a["keepdims"]))
    c.batch_out = [_reduced_batch(g, c, axes, keep)]
    xv = c.x("x")
    if p == math.inf:
        xv = g.node("Abs", [xv])
    g.axes_node(ops[p], xv, axes, c.out, keepdims=keep, since=18)
