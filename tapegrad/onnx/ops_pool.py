"""Import rules: MaxPool and AveragePool (1-D and 2-D).

ONNX's pooling conventions are tapegrad's own (``tapegrad.ops.pool``):
``ceil_mode`` rounds the output size up but drops a last window that would
start in the trailing padding; ``count_include_pad=1`` divides by the window
cells inside the padded input (a ceil-mode window's overhang past it does not
count), ``0`` by those inside the input; max pooling pads with ``-inf``.

tapegrad's ``max_pool2d`` / ``avg_pool2d`` have no dilation and want padding
smaller than the kernel. Other geometries run :func:`_pool_by_offsets`: the
padded input is read once per kernel offset (a strided slice) and the slices are
combined with recorded ``maximum`` / ``add`` ops, the average divided by the
window counts ONNX defines -- the same values, kh*kw ops instead of one.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..nn import functional as F
from ..ops._windows import out_size
from ..tensor import tensor
from ._rules import rule
from .ops_nn import check_padded, check_window, from2d, need_float, pads_of, spatial, tblr, to2d

_POOL = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides")


def _geometry(node, x):
    """(spatial axes, kernel, strides, dilations, [(begin, end)] pads), lifted to 2-D."""
    need_float(node, x)
    kernel = node.ints("kernel_shape")
    if kernel is None:
        raise node.unsupported("a pool without kernel_shape")
    nd = spatial(node, x, kernel)
    strides = node.ints("strides") or [1] * nd
    dilations = node.ints("dilations") or [1] * nd
    pads = pads_of(node, x.shape[2:], kernel, strides, dilations)
    check_padded(node, to2d(x), pads if nd == 2 else [(0, 0)] + pads)
    if nd == 1:
        return nd, (1, kernel[0]), (1, strides[0]), (1, dilations[0]), [(0, 0), pads[0]]
    return nd, tuple(kernel), tuple(strides), tuple(dilations), pads


def _needs_offsets(kernel, dilations, pads):
    """Whether tapegrad's pool ops cannot take this geometry."""
    return any(d != 1 for d in dilations) or \
        any(p >= k for pp, k in zip(pads, kernel) for p in pp)


def _pool_by_offsets(node, x, kernel, strides, dilations, pads, ceil, kind, include=False):
    """Any 2-D geometry: ``(N, C, H, W) -> (N, C, Ho, Wo)``, combining one strided
    slice of the padded input per kernel offset (``kind`` "max" or "avg")."""
    op = f"onnx {node.op_type}"
    h, w = x.shape[2:]
    outs = [out_size(op, ax, n, k, s, pb, pe, dilation=d, ceil_mode=ceil)
            for ax, n, k, s, d, (pb, pe) in zip(("height", "width"), (h, w), kernel, strides,
                                               dilations, pads)]
    # rows each axis must hold: every window, which ceil mode may run past the padding
    ext = [(o - 1) * s + (k - 1) * d + 1 for o, k, s, d in zip(outs, kernel, strides,
                                                               dilations)]
    (pt, _), (pl, _) = pads
    fill = float("-inf") if kind == "max" else 0.0
    # (N, C, H, W) -> (N, C, ext_h, ext_w): pads, overhang and any unread tail cropped
    xpad = F.pad(x, (pl, ext[1] - pl - w, pt, ext[0] - pt - h), "constant", fill)
    (ho, wo), (sh, sw), (dh, dw) = outs, strides, dilations
    out = None
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            # offset (i, j) of every window: (N, C, Ho, Wo)
            part = ops.getitem(xpad, (slice(None), slice(None),
                                      slice(i * dh, i * dh + (ho - 1) * sh + 1, sh),
                                      slice(j * dw, j * dw + (wo - 1) * sw + 1, sw)))
            out = part if out is None else (ops.maximum(out, part) if kind == "max"
                                            else out + part)
    if kind == "max":
        return out
    # window cells counted, per axis: inside the padded input (include) or the input
    counts = []
    for n, o, k, s, d, (pb, pe), e in zip((h, w), outs, kernel, strides, dilations, pads,
                                         ext):
        # buffer cell 0 is input cell -pb; the padded input is [0, n + pb + pe)
        inside = np.zeros(e, np.int64)
        lo, hi = (0, n + pb + pe) if include else (pb, pb + n)
        inside[lo:hi] = 1
        cells = np.arange(k) * d
        counts.append(inside[np.arange(o)[:, None] * s + cells[None, :]].sum(axis=1))
    div = (counts[0][:, None] * counts[1][None, :]).astype(x.dtype)  # (Ho, Wo)
    return out / tensor(div, device=x.device)


@rule("MaxPool", attrs=_POOL + ("storage_order",), check=check_window)
def _max_pool(node, x):
    if node.n_outputs > 1:
        raise node.unsupported("the Indices output of MaxPool")
    nd, kernel, strides, dilations, pads = _geometry(node, x)
    ceil = bool(node.get("ceil_mode", 0))
    if _needs_offsets(kernel, dilations, pads):
        y = _pool_by_offsets(node, to2d(x), kernel, strides, dilations, pads, ceil, "max")
    else:
        y = ops.max_pool2d(to2d(x), kernel, strides, tblr(pads), ceil_mode=ceil)
    return from2d(y, nd)


@rule("AveragePool", attrs=_POOL + ("count_include_pad",), check=check_window)
def _avg_pool(node, x):
    nd, kernel, strides, dilations, pads = _geometry(node, x)
    ceil = bool(node.get("ceil_mode", 0))
    include = bool(node.get("count_include_pad", 0))
    if _needs_offsets(kernel, dilations, pads):
        y = _pool_by_offsets(node, to2d(x), kernel, strides, dilations, pads, ceil, "avg",
                             include)
    else:
        y = ops.avg_pool2d(to2d(x), kernel, strides, tblr(pads), ceil_mode=ceil,
                           count_include_pad=include)
    return from2d(y, nd)
