"""Import rules: constants, shapes and data movement (Reshape, Flatten, Transpose,
Squeeze/Unsqueeze, Concat, Pad, Shape, Gather, Slice, Cast, Expand, Dropout).

Shape-like inputs (a Reshape's shape, Slice's starts, Pad's pads) are static:
host arrays, folded at load time when the graph makes them constant and
computed on the host at run time otherwise (``Shape`` of a dynamic batch).
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..nn import functional as F
from ..tensor import tensor
from ._rules import PLAIN_DTYPES, checked_tensor, host, host_ints, norm_axis, norm_indices, rule
from .reader import onnx_dtype

# --------------------------------------------------------------- constants


_CONSTANT_VALUES = ("value", "value_float", "value_floats", "value_int", "value_ints")


def _check_constant(node):
    given = [k for k in _CONSTANT_VALUES if k in node.attrs]
    if len(given) != 1:
        raise node.bad(f"a Constant needs exactly one value attribute, got {given or 'none'}")


@rule("Constant", attrs=_CONSTANT_VALUES, check=_check_constant)
def _constant(node):
    a = node.attrs
    if "value" in a:
        return checked_tensor(a["value"], f"{node.label()}: value")
    if "value_float" in a:
        return tensor(np.array(a["value_float"], dtype=np.float32))
    if "value_floats" in a:
        return tensor(np.array(a["value_floats"], dtype=np.float32))
    if "value_int" in a:
        return tensor(np.array(a["value_int"], dtype=np.int64))
    if "value_ints" in a:
        return tensor(np.array(a["value_ints"], dtype=np.int64))
    raise node.unsupported("a Constant without a tensor, float(s) or int(s) value")


def _check_constant_of_shape(node):
    value = node.get("value")
    if value is not None and np.asarray(value).size != 1:
        raise node.bad(f"value must hold one element, got shape {np.shape(value)}")


@rule("ConstantOfShape", attrs=("value",), static=(0,), check=_check_constant_of_shape)
def _constant_of_shape(node, shape):
    value = node.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    if host(shape).ndim != 1:
        raise node.bad(f"the shape input must be 1-D, got shape {host(shape).shape}")
    dims = host_ints(shape, node, "the shape input")
    if any(d < 0 for d in dims):
        raise node.bad(f"shape {dims} has a negative dim")
    node.check_size(dims, value.dtype)
    return tensor(np.full(dims, value.reshape(-1)[0], dtype=value.dtype))


@rule("Shape", attrs=("start", "end"))
def _shape(node, x):
    dims = np.array(x.shape, dtype=np.int64)
    start, end = node.get("start", 0), node.get("end")
    return tensor(dims[slice(start, end)])


@rule("Size")
def _size(node, x):
    return tensor(np.array(x.array.size, dtype=np.int64))


def _cast_to(node, x, dtype):
    if dtype not in PLAIN_DTYPES or x.dtype not in PLAIN_DTYPES:
        raise node.refuse_attr("to", f"{x.dtype} -> {dtype}", "casts between bool, int and "
                               "float types only")
    if dtype.kind == "f" and x.dtype.kind == "f":
        return ops.cast(x, dtype)  # the gradient is cast back
    return tensor(x.array.astype(dtype), device=x.device)


def _check_cast(node):
    to = node.get("to")
    if onnx_dtype(to) is None:
        raise node.refuse_attr("to", to, "casts to bool, int and float types only")


@rule("Cast", attrs=("to", "saturate"), check=_check_cast)
def _cast(node, x):
    return _cast_to(node, x, onnx_dtype(node.get("to")))


@rule("CastLike", attrs=("saturate",))
def _cast_like(node, x, like):
    return _cast_to(node, x, like.dtype)


# ------------------------------------------------------------------ shapes


def _reshape_target(node, x, shape, allowzero):
    """ONNX's 0 (copy the input's dim, unless allowzero) and -1 (inferred)."""
    out = []
    for i, s in enumerate(shape):
        if s == 0 and not allowzero:
            if i >= x.ndim:
                raise node.unsupported(f"shape {shape}: a 0 at axis {i} of a {x.ndim}-D input")
            s = x.shape[i]
        out.append(s)
    return tuple(out)


@rule("Reshape", attrs=("shape", "allowzero", "consumed_inputs"), static=(1,))
def _reshape(node, x, shape=None):
    shape = node.ints("shape") if node.opset < 5 else host_ints(shape)
    return ops.reshape(x, _reshape_target(node, x, shape, node.get("allowzero", 0)))


@rule("Flatten", attrs=("axis",))
def _flatten(node, x):
    axis = int(node.get("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        raise node.refuse_attr("axis", axis, f"out of range for a {x.ndim}-D input")
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return ops.reshape(x, (rows, int(np.prod(x.shape[axis:], dtype=np.int64))))


@rule("Transpose", attrs=("perm",))
def _transpose(node, x):
    perm = node.ints("perm")
    return ops.transpose(x, None if perm is None else tuple(perm))


def _axes(node, v, attr_before):
    """Axes from the attribute (opset < ``attr_before``) or the static input."""
    return node.ints("axes") if node.opset < attr_before else host_ints(v)


@rule("Squeeze", attrs=("axes",), static=(1,))
def _squeeze(node, x, axes=None):
    axes = _axes(node, axes, 13)
    if not axes:
        return ops.squeeze(x)
    axes = tuple(norm_axis(node, a, x.ndim, "axes") for a in axes)
    for a in axes:
        if x.shape[a] != 1:
            raise node.unsupported(f"squeezing axis {a} of size {x.shape[a]}")
    return ops.reshape(x, tuple(s for i, s in enumerate(x.shape) if i not in axes))


@rule("Unsqueeze", attrs=("axes",), static=(1,))
def _unsqueeze(node, x, axes=None):
    axes = _axes(node, axes, 13)
    nd = x.ndim + len(axes)
    axes = sorted(norm_axis(node, a, nd, "axes") for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return ops.reshape(x, tuple(shape))


@rule("Concat", attrs=("axis",))
def _concat(node, *xs):
    axis = node.get("axis", 1 if node.opset < 4 else None)
    axis = norm_axis(node, int(axis), xs[0].ndim)
    return ops.concatenate([x for x in xs if x is not None], axis=axis)


@rule("Expand", static=(1,))
def _expand(node, x, shape):
    dims = host_ints(shape, node, "the shape input")
    if any(d < 0 for d in dims):
        raise node.bad(f"shape {dims} has a negative dim")
    try:
        target = np.broadcast_shapes(tuple(x.shape), tuple(dims))
    except ValueError:
        raise node.bad(f"shape {dims} does not broadcast with the input's "
                       f"{tuple(x.shape)}") from None
    node.check_size(target, x.dtype)
    return ops.broadcast_to(x, target)


@rule("Tile", static=(1,))
def _tile(node, x, repeats):
    reps = host_ints(repeats, node, "repeats")
    if len(reps) != x.ndim or any(r < 0 for r in reps):
        raise node.bad(f"repeats {reps} must be {x.ndim} non-negative counts (one per axis "
                       f"of the input {tuple(x.shape)})")
    out_shape = tuple(r * d for r, d in zip(reps, x.shape))
    node.check_size(out_shape, x.dtype)
    # (d0, d1, ..) -> (1, d0, 1, d1, ..) -> (r0, d0, r1, d1, ..) -> (r0*d0, r1*d1, ..)
    lifted = ops.reshape(x, tuple(v for d in x.shape for v in (1, d)))
    spread = ops.broadcast_to(lifted, tuple(v for r, d in zip(reps, x.shape) for v in (r, d)))
    return ops.reshape(spread, out_shape)


# ---------------------------------------------------------- slicing, gather


def _gather_size(node, x, indices):
    return x.array.size // max(x.shape[int(node.get("axis", 0)) % max(x.ndim, 1)], 1) * \
        indices.array.size if x.ndim else None


@rule("Gather", attrs=("axis",), size=_gather_size)
def _gather(node, x, indices):
    """``np.take(x, indices, axis)``: negative indices count from the end."""
    axis = norm_axis(node, int(node.get("axis", 0)), x.ndim)
    idx = norm_indices(node, indices, x.shape[axis], axis)
    xp = x.device.xp
    return ops.getitem(x, (slice(None),) * axis + (xp.asarray(idx),))


def _onnx_slice(start, end, step, n):
    """ONNX's clamping: negatives count from the end, then ``start`` goes into
    ``[0, n]`` (``[0, n-1]`` for a negative step) and ``end`` into ``[0, n]``
    (``[-1, n-1]``, -1 meaning "past the first"). Python's own clamping differs
    for a negative step from a start before the first element."""
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), n), min(max(end, 0), n), step)
    start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    return slice(start, None if end < 0 else end, step)


@rule("Slice", attrs=("starts", "ends", "axes"), static=(1, 2, 3, 4))
def _slice(node, x, starts=None, ends=None, axes=None, steps=None):
    if node.opset < 10:
        starts, ends, axes = node.ints("starts"), node.ints("ends"), node.ints("axes")
        steps = None
    else:
        starts, ends = host_ints(starts), host_ints(ends)
        axes, steps = host_ints(axes), host_ints(steps)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise node.unsupported("a step of 0")
        a = norm_axis(node, a, x.ndim, "axes")
        index[a] = _onnx_slice(s, e, st, x.shape[a])
    return ops.getitem(x, tuple(index))


# -------------------------------------------------------------- padding


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate",
              "wrap": "circular"}


def _check_pad(node):
    if node.get("mode", "constant") not in _PAD_MODES:
        raise node.refuse_attr("mode", node.get("mode"))
    if node.opset < 11 and node.ints("pads", node.get("paddings")) is None:
        raise node.bad("a Pad without pads")


@rule("Pad", attrs=("mode", "pads", "value", "paddings"), static=(1, 2, 3), check=_check_pad)
def _pad(node, x, pads=None, value=None, axes=None):
    """``pads`` is [x1_begin, x2_begin, ..., x1_end, x2_end] over ``axes`` (all by default)."""
    mode = node.get("mode", "constant")
    if node.opset < 11:
        pads = node.ints("pads", node.get("paddings"))
        value = float(node.get("value", 0.0))
    else:
        pads = host_ints(pads, node, "pads")
        if value is not None and host(value).size > 1:
            raise node.bad(f"the constant value must be one value, got shape "
                           f"{host(value).shape}")
        value = 0.0 if value is None or host(value).size == 0 else host(value).item()
    axes = list(range(x.ndim)) if axes is None else \
        [norm_axis(node, a, x.ndim, "axes") for a in host_ints(axes)]
    k = len(axes)
    if len(pads) != 2 * k:
        raise node.unsupported(f"pads {pads} for {k} axes (need {2 * k} values)")
    per_axis = {a: (pads[i], pads[i + k]) for i, a in enumerate(axes)}
    out_shape = [n + sum(per_axis.get(a, (0, 0))) for a, n in enumerate(x.shape)]
    if any(n < 0 for n in out_shape):
        raise node.bad(f"pads {pads} crop the input {tuple(x.shape)} below zero size")
    node.check_size(out_shape, x.dtype)
    padded = sorted(a for a, p in per_axis.items() if p != (0, 0))
    if not padded:
        return x
    first = padded[0]
    if mode != "constant":
        # F.pad's other modes pad the last 1-3 axes of an input with one or two more
        first = max(1, x.ndim - 3)
        if padded[0] < first or first > 2:
            raise node.refuse_attr("mode", mode, f"padding axes {padded} of a {x.ndim}-D "
                                   "input (tapegrad pads the last 1-3 axes of a 2-5-D input "
                                   "in this mode)")
    flat = []
    for a in range(x.ndim - 1, first - 1, -1):  # F.pad: last axis first
        flat += list(per_axis.get(a, (0, 0)))
    if mode == "constant":
        return F.pad(x, tuple(flat), "constant", value)
    return F.pad(x, tuple(flat), _PAD_MODES[mode])


# ----------------------------------------------------------- inference ops


@rule("Dropout", attrs=("ratio", "is_test", "seed", "consumed_inputs"), static=(1, 2))
def _dropout(node, x, ratio=None, training_mode=None):
    """Inference: the identity (and an all-true mask); training mode is refused."""
    if training_mode is not None and bool(host(training_mode).item()):
        raise node.unsupported("Dropout with training_mode=True",
                               "export the graph in inference mode")
    if node.n_outputs < 2:
        return x
    xp = x.device.xp
    return x, tensor(xp.ones(x.shape, dtype=bool), device=x.device)
