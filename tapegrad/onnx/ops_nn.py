"""Import rules: convolution, pooling and normalisation layers.

ONNX conventions, and how they map onto tapegrad's 2-D ops:

* ``pads`` is ``[x1_begin, x2_begin, ..., x1_end, x2_end]``: for 2-D that is
  ``[top, left, bottom, right]``, tapegrad's ``(top, bottom, left, right)``.
* ``auto_pad``: ``SAME_UPPER`` / ``SAME_LOWER`` pad to ``ceil(in / stride)``
  outputs, the odd cell at the end / the beginning; ``VALID`` pads nothing.
* 1-D convolutions and pools run as 2-D ones over an ``(N, C, 1, L)`` view.
* ``LRN``: ``x / (bias + alpha / size * sum x^2) ** beta`` over channels
  ``[c - (size-1)//2, c + size//2]``: tapegrad's ``local_response_norm`` with
  ``alpha_over_size=False`` and ``alpha / size``, whose window is that one
  (PyTorch's starts one channel earlier for even sizes).
"""

from __future__ import annotations

import math

from .. import ops
from ..nn import functional as F
from ._rules import NodeInfo, broadcast_size, rule

_CONV = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_AUTO_PADS = ("NOTSET", "", "SAME_UPPER", "SAME_LOWER", "VALID")


def check_window(node: NodeInfo) -> None:
    """Load-time checks of a conv/pool node's geometry attributes (whatever the input)."""
    kernel = node.ints("kernel_shape")
    nd = len(kernel) if kernel is not None else None
    if kernel is not None and any(k < 1 for k in kernel):
        raise node.bad(f"kernel_shape {kernel} must be positive")
    for name in ("strides", "dilations"):
        v = node.ints(name)
        if v is not None and any(i < 1 for i in v):
            raise node.bad(f"{name} {v} must be positive")
        if v is not None and nd is not None and len(v) != nd:
            raise node.bad(f"{name} {v} must have one value per kernel axis ({kernel})")
    pads = node.ints("pads")
    if pads is not None and node.op_type != "ConvTranspose" and any(p < 0 for p in pads):
        raise node.bad(f"pads {pads} must be non-negative")
    if pads is not None and nd is not None and len(pads) != 2 * nd:
        raise node.bad(f"pads {pads} must have two values per kernel axis ({kernel})")
    if node.get("auto_pad", "NOTSET") not in _AUTO_PADS:
        raise node.refuse_attr("auto_pad", node.get("auto_pad"))
    if int(node.get("group", 1)) < 1:
        raise node.bad(f"group={node.get('group')} must be positive")
    for name in ("output_padding", "output_shape"):
        v = node.ints(name)
        if v is not None and any(i < 0 for i in v):
            raise node.bad(f"{name} {v} must be non-negative")


def check_padded(node: NodeInfo, x, pads, what="the padded input"):
    """Refuse a padded input (N, C, H + pads, W + pads) over the limits before padding."""
    size = [n + pb + pe for n, (pb, pe) in zip(x.shape[2:], pads)]
    node.check_size(tuple(x.shape[:2]) + tuple(size), x.dtype, what)


def need_float(node: NodeInfo, x):
    """Refuse non-float inputs of layer ops (tapegrad's take floats only)."""
    if x.dtype.kind != "f":
        raise node.unsupported(f"input dtype {x.dtype}", "tapegrad's layer ops take floats")


def spatial(node: NodeInfo, x, kernel):
    """The number of spatial axes (1 or 2), checked against the kernel."""
    nd = x.ndim - 2
    if nd not in (1, 2):
        raise node.unsupported(f"a {nd}-D {node.op_type} (input shape {tuple(x.shape)})",
                               "tapegrad has 1-D and 2-D convolution and pooling")
    if len(kernel) != nd:
        raise node.refuse_attr("kernel_shape", kernel, f"for a {nd}-D input")
    return nd


def pads_of(node: NodeInfo, size, kernel, strides, dilations):
    """``[(begin, end)]`` per spatial axis from ``pads`` / ``auto_pad``."""
    nd = len(size)
    auto = node.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for n, k, s, d in zip(size, kernel, strides, dilations):
            total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto == "SAME_UPPER" else (big, small))
        return out
    if auto == "VALID":
        return [(0, 0)] * nd
    if auto not in ("NOTSET", ""):
        raise node.refuse_attr("auto_pad", auto)
    p = node.ints("pads") or [0] * (2 * nd)
    if len(p) != 2 * nd:
        raise node.refuse_attr("pads", p, f"need {2 * nd} values for {nd} spatial axes")
    return [(p[i], p[i + nd]) for i in range(nd)]


def _geometry(node, x, kernel):
    """(1-D lifted to 2-D) kernel, strides, dilations and (begin, end) pads, as 2-tuples."""
    nd = spatial(node, x, kernel)
    strides = node.ints("strides") or [1] * nd
    dilations = node.ints("dilations") or [1] * nd
    pads = pads_of(node, x.shape[2:], kernel, strides, dilations)
    if nd == 1:
        return (1, kernel[0]), (1, strides[0]), (1, dilations[0]), [(0, 0), pads[0]]
    return tuple(kernel), tuple(strides), tuple(dilations), pads


def to2d(x):
    """(N, C, L) -> (N, C, 1, L); 2-D inputs as they are."""
    return ops.reshape(x, tuple(x.shape[:2]) + (1,) + tuple(x.shape[2:])) if x.ndim == 3 else x


def from2d(y, nd):
    return ops.reshape(y, tuple(y.shape[:2]) + (y.shape[3],)) if nd == 1 else y


def tblr(pads):
    """[(top, bottom), (left, right)] -> tapegrad's (top, bottom, left, right)."""
    return (pads[0][0], pads[0][1], pads[1][0], pads[1][1])


# ------------------------------------------------------------ convolution


@rule("Conv", attrs=_CONV, check=check_window)
def _conv(node, x, w, b=None):
    need_float(node, x)
    kernel = node.ints("kernel_shape") or list(w.shape[2:])
    if list(w.shape[2:]) != list(kernel):
        raise node.refuse_attr("kernel_shape", kernel, f"the weight is {tuple(w.shape)}")
    kernel, strides, dilations, pads = _geometry(node, x, kernel)
    check_padded(node, to2d(x), pads)
    nd = x.ndim - 2
    y = ops.conv2d(to2d(x), to2d(w), b, stride=strides, padding=tblr(pads),
                   dilation=dilations, groups=int(node.get("group", 1)))
    return from2d(y, nd)


@rule("ConvTranspose", attrs=_CONV + ("output_padding", "output_shape"), check=check_window)
def _conv_transpose(node, x, w, b=None):
    need_float(node, x)
    kernel = node.ints("kernel_shape") or list(w.shape[2:])
    if list(w.shape[2:]) != list(kernel):
        raise node.refuse_attr("kernel_shape", kernel, f"the weight is {tuple(w.shape)}")
    nd = spatial(node, x, kernel)
    strides = node.ints("strides") or [1] * nd
    dilations = node.ints("dilations") or [1] * nd
    opad = node.ints("output_padding") or [0] * nd
    groups = int(node.get("group", 1))
    size = x.shape[2:]
    full = [s * (n - 1) + (k - 1) * d + 1 for n, k, s, d in zip(size, kernel, strides,
                                                                dilations)]
    shape, auto = node.ints("output_shape"), node.get("auto_pad", "NOTSET")
    if shape is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        shape = [n * s for n, s in zip(size, strides)]
    if shape is not None:
        shape = shape[-nd:]
        pads = []
        for f, o, want in zip(full, opad, shape):
            total = f + o - want
            half = total // 2
            pads.append((half, total - half) if auto == "SAME_UPPER" else (total - half, half))
    elif auto in ("NOTSET", "", "VALID"):
        pads = [(0, 0)] * nd if auto == "VALID" else pads_of(node, size, kernel, strides,
                                                           dilations)
    else:
        raise node.refuse_attr("auto_pad", auto)
    if len(opad) != nd or len(strides) != nd or len(dilations) != nd:
        raise node.bad(f"strides {strides}, dilations {dilations} and output_padding {opad} "
                       f"need one value per spatial axis ({nd})")
    # the full output and the cropped/extended one, before either is made
    node.check_size(tuple(x.shape[:1]) + (w.shape[1] * groups,) + tuple(full), x.dtype,
                    "its full output")
    node.check_size(tuple(x.shape[:1]) + (w.shape[1] * groups,) +
                    tuple(max(f + o - pb - pe, 0) for f, o, (pb, pe) in zip(full, opad, pads)),
                    x.dtype)
    if nd == 1:
        kernel, strides, dilations = (1, kernel[0]), (1, strides[0]), (1, dilations[0])
        pads, opad = [(0, 0)] + pads, [0] + opad
    fast = all(p >= 0 for pp in pads for p in pp) and \
        all(o < max(s, d) for o, s, d in zip(opad, strides, dilations))
    if fast:
        y = ops.conv_transpose2d(to2d(x), to2d(w), b, stride=strides, padding=tblr(pads),
                                 output_padding=tuple(opad), groups=groups, dilation=dilations)
        return from2d(y, nd)
    # negative pads (a larger output) or a large output_padding: the full output,
    # then crop/extend with zeros (F.pad: last axis first), then the bias
    y = ops.conv_transpose2d(to2d(x), to2d(w), None, stride=strides, groups=groups,
                             dilation=dilations)
    flat = []
    for (pb, pe), o in reversed(list(zip(pads, opad))):
        flat += [-pb, o - pe]
    y = F.pad(y, tuple(flat))
    if b is not None:
        y = y + ops.reshape(b, (1, -1, 1, 1))
    return from2d(y, nd)


# ---------------------------------------------------------------- pooling
# MaxPool and AveragePool: ops_pool.py


@rule("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(node, x):
    need_float(node, x)
    axes = tuple(range(2, x.ndim))
    fn = ops.mean if node.op_type == "GlobalAveragePool" else ops.max
    return fn(x, axis=axes, keepdims=True)


# ---------------------------------------------------------- normalisation


@rule("BatchNormalization", attrs=("epsilon", "momentum", "spatial", "is_test",
                                   "consumed_inputs", "training_mode"), buffers=(3, 4))
def _batch_norm(node, x, scale, bias, mean, var):
    """Inference: ``scale * (x - mean) / sqrt(var + epsilon) + bias`` per channel (axis 1)."""
    need_float(node, x)
    if node.get("training_mode", 0) or node.n_outputs > 1:
        raise node.unsupported("BatchNormalization in training mode (running statistics "
                               "outputs)", "export the graph in inference mode")
    if node.opset < 7 and not node.get("is_test", 0):
        raise node.refuse_attr("is_test", node.get("is_test", 0), "training mode")
    if node.opset < 9 and node.get("spatial", 1) != 1:
        raise node.refuse_attr("spatial", node.get("spatial"))
    return ops.batch_norm(x, mean, var, scale, bias, training=False,
                          eps=float(node.get("epsilon", 1e-5)))


@rule("InstanceNormalization", attrs=("epsilon",))
def _instance_norm(node, x, scale, bias):
    need_float(node, x)
    return ops.group_norm(x, x.shape[1], scale, bias, eps=float(node.get("epsilon", 1e-5)))


@rule("LayerNormalization", attrs=("axis", "epsilon", "stash_type"), size=broadcast_size)
def _layer_norm(node, x, scale, bias=None):
    """Normalise over axes ``axis..-1``; the Mean and InvStdDev outputs are the
    statistics (kept axes), computed in float32 for float16 (``stash_type=1``)."""
    need_float(node, x)
    if node.get("stash_type", 1) != 1:
        raise node.refuse_attr("stash_type", node.get("stash_type"))
    axis = int(node.get("axis", -1))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim:
        raise node.refuse_attr("axis", node.get("axis"), f"for a {x.ndim}-D input")
    eps = float(node.get("epsilon", 1e-5))
    dtype = x.dtype
    xs = ops.cast(x, "float32") if dtype == "float16" else x
    axes = tuple(range(axis, x.ndim))
    mean = ops.mean(xs, axis=axes, keepdims=True)
    centered = xs - mean
    inv = 1.0 / ops.sqrt(ops.mean(centered * centered, axis=axes, keepdims=True) + eps)
    y = ops.cast(centered * inv, dtype) * scale
    if bias is not None:
        y = y + bias
    return y, mean, inv


def _check_lrn(node):
    if int(node.get("size", 0)) < 1:
        raise node.bad(f"size={node.get('size')} must be positive")


@rule("LRN", attrs=("alpha", "beta", "bias", "size"), check=_check_lrn)
def _lrn(node, x):
    need_float(node, x)
    size = int(node.get("size"))
    # the window sum pads the channel axis by about ``size``
    node.check_size(x.array.size // max(x.shape[1], 1) * (x.shape[1] + size) if x.ndim > 1
                    else x.array.size, x.dtype, "its padded channels")
    alpha = float(node.get("alpha", 1e-4))
    return ops.local_response_norm(x, size, alpha / size, float(node.get("beta", 0.75)),
                                   float(node.get("bias", 1.0)), alpha_over_size=False)
