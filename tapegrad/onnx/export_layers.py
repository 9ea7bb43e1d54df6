"""ONNX mappings of the layer families: conv, pool, normalization, localnorm,
dropout, embedding and resample -- one small function per op class.

Conventions, and how each is kept exact:

* **Padding**: tapegrad's ``(top, bottom, left, right)`` is ONNX's
  ``pads = [top, left, bottom, right]``.
* **Pooling, ceil mode** (Caffe): tapegrad's last window must start inside the
  input or the leading padding. Rather than rely on a runtime's ``ceil_mode``
  rounding, the trailing pad is grown until floor rounding gives tapegrad's
  output size (always less than the kernel, so no window lies in the padding).
  Max pooling ignores padding either way; averages with
  ``count_include_pad=False`` (MatConvNet) divide by the cells inside the input,
  which ONNX's ``count_include_pad=0`` does. ``count_include_pad=True`` counts
  the cells inside the *padded* input (Caffe/PyTorch): without ceil growth that
  is ONNX's ``count_include_pad=1``; with it, the padding is made explicit by a
  Pad node and the average counts the padded input's cells only.
* **LRN**: ONNX's ``LRN(size, alpha, beta, bias)`` divides ``alpha`` by ``size``
  and sums the window ``[c - (size-1)//2, c + size//2]``: tapegrad's
  ``local_response_norm(alpha_over_size=True)`` (Caffe, PyTorch) and
  MatConvNet's ``alpha_over_size=False`` both export as ONNX ``alpha = a * size``
  with tapegrad's per-element ``a``. For an even size PyTorch's window starts
  one channel earlier than ONNX's, and onnxruntime takes odd sizes only: even
  sizes (and inputs that are not 4-D) are written out as a channel-window sum
  (a ones-kernel Conv), each convention's window kept.
* **Resampling**: nearest upsampling by an integer factor is ``Resize``
  (asymmetric, floor: exact); every other map (other nearest sizes, bilinear,
  adaptive average bins that do not tile) gathers the cells each output reads
  and weights them as tapegrad does, so the values are tapegrad's; adaptive
  pooling that tiles is ``AveragePool``/``MaxPool``, to 1x1 the global pools.
"""

from __future__ import annotations

import numpy as np

from ..args import padding4, pair
from ..ops import conv, localnorm, normalization, pool, resample
from ..ops.dropout import Dropout
from ..ops.embedding import Embedding
from .export_graph import mapping

# ---------------------------------------------------------------------- conv


@mapping(conv.Conv2d)
def _conv2d(g, c):
    geo = conv._conv_geom("conv2d", c.info("x"), c.info("w"), c.a["stride"], c.a["padding"],
                          c.a["dilation"], c.a["groups"])
    t, b, left, r = geo.pad
    ins = [c.x("x"), c.x("w")] + ([c.x("b")] if c.a["b"] is not None else [])
    g.node("Conv", ins, [c.out], kernel_shape=[geo.kh, geo.kw], strides=list(geo.stride),
           pads=[t, left, b, r], dilations=list(geo.dilation), group=int(c.a["groups"]))


@mapping(conv.ConvTranspose2d)
def _conv_transpose2d(g, c):
    op = "conv_transpose2d"
    w = c.info("w")
    t, b, left, r = padding4(c.a["padding"], op)
    ins = [c.x("x"), c.x("w")] + ([c.x("b")] if c.a["b"] is not None else [])
    # output (H-1)*stride + dilation*(kh-1) + 1 + output_padding - pads: ONNX's formula
    g.node("ConvTranspose", ins, [c.out], kernel_shape=list(w.shape[2:]),
           strides=list(pair(c.a["stride"], "stride", op)), pads=[t, left, b, r],
           dilations=list(pair(c.a["dilation"], "dilation", op)), group=int(c.a["groups"]),
           output_padding=list(pair(c.a["output_padding"], "output_padding", op, minimum=0)))


# ---------------------------------------------------------------------- pool

def _floor_pads(geo):
    """tapegrad's pads, the trailing ones grown so that floor rounding gives its
    output size (see the module notes), and whether any grew."""
    (h, w), (kh, kw), (sh, sw) = geo.shape[2:], geo.kernel, geo.stride
    pt, pb, pl, pr = geo.pad
    ho, wo = geo.out
    pb2 = max(pb, (ho - 1) * sh + kh - h - pt)
    pr2 = max(pr, (wo - 1) * sw + kw - w - pl)
    return (pt, pb2, pl, pr2), (pb2, pr2) != (pb, pr)


@mapping(pool.MaxPool2d)
def _max_pool(g, c):
    geo = c.a["geo"]
    (pt, pb, pl, pr), _ = _floor_pads(geo)
    g.node("MaxPool", [c.x("x")], [c.out], kernel_shape=list(geo.kernel),
           strides=list(geo.stride), pads=[pt, pl, pb, pr], ceil_mode=0)


@mapping(pool.AvgPool2d)
def _avg_pool(g, c):
    geo = c.a["geo"]
    (pt, pb, pl, pr), grown = _floor_pads(geo)
    x = c.x("x")
    attrs = dict(kernel_shape=list(geo.kernel), strides=list(geo.stride), ceil_mode=0)
    if not c.a["count_include_pad"] or not grown:
        g.node("AveragePool", [x], [c.out], pads=[pt, pl, pb, pr],
               count_include_pad=int(bool(c.a["count_include_pad"])), **attrs)
        return
    # Caffe's divisor: the cells inside the padded input (not the ceil growth)
    t, b, left, r = geo.pad
    padded = g.node("Pad", [x, g.ints([0, 0, t, left, 0, 0, b, r]), g.scalar(0, x)])
    g.node("AveragePool", [padded], [c.out], pads=[0, 0, pb - b, pr - r],
           count_include_pad=0, **attrs)


# ------------------------------------------------------------- normalization

def _ones_or(g, c, key, n, like, fill):
    """Argument ``key``, or (when it is None) a constant of ``fill`` (ONNX's norms
    take a scale and a bias)."""
    return c.x(key) if c.a[key] is not None else g.const(np.full(n, fill, g.meta[like][1]))


@mapping(normalization.BatchNorm)
def _batch_norm(g, c):
    if c.a["training"]:
        raise c.refuse("batch statistics (training=True, or a BatchNorm without running "
                       "statistics) cannot be exported", "export in eval mode with "
                       "track_running_stats=True (the running mean and variance normalise)")
    x = c.x("x")
    n = c.info("x").shape[1]
    g.node("BatchNormalization", [x, _ones_or(g, c, "weight", n, x, 1),
                                  _ones_or(g, c, "bias", n, x, 0), c.x("running_mean"),
                                  c.x("running_var")], [c.out], epsilon=float(c.a["eps"]))


@mapping(normalization.LayerNorm)
def _layer_norm(g, c):
    if g.opset < 17:
        raise c.refuse("LayerNormalization needs opset 17", "export with opset >= 17")
    shape = tuple(c.a["affine_shape"])
    x = c.x("x")
    g.node("LayerNormalization", [x, _ones_or(g, c, "weight", shape, x, 1),
                                  _ones_or(g, c, "bias", shape, x, 0)], [c.out],
           axis=-len(shape), epsilon=float(c.a["eps"]))


@mapping(normalization.GroupNorm)
def _group_norm(g, c):
    # (N, C, *) -> (N, G, C/G * L): mean and biased variance per row, then back
    xa = c.info("x")
    n, ch = xa.shape[:2]
    if n == 0:
        raise c.refuse("an empty batch leaves the group count unknown", "export a batch >= 1")
    groups = c.a["rows"][0] // n
    x = c.x("x")
    rows = g.node("Reshape", [x, g.ints([0, groups, -1])])
    d = g.node("Sub", [rows, g.axes_node("ReduceMean", rows, [2], keepdims=1)])
    var = g.axes_node("ReduceMean", g.node("Mul", [d, d]), [2], keepdims=1)
    y = g.node("Div", [d, g.node("Sqrt", [g.node("Add", [var, g.scalar(c.a["eps"], x)])])])
    y = g.node("Reshape", [y, g.node("Shape", [x])])
    per_channel = g.ints([ch] + [1] * (xa.ndim - 2))  # (C,) -> (C, 1, ...)
    for key, op_type in (("weight", "Mul"), ("bias", "Add")):
        if c.a[key] is not None:
            y = g.node(op_type, [y, g.node("Reshape", [c.x(key), per_channel])])
    g.rename(y, c.out)


@mapping(localnorm.LocalResponseNorm)
def _lrn(g, c):
    before, after = c.a["win"]
    size = before + after + 1
    a, beta, k = float(c.a["alpha"]), float(c.a["beta"]), float(c.a["k"])
    xa = c.info("x")
    x = c.x("x")
    if xa.ndim == 4 and size % 2 and before == after:  # onnxruntime: odd sizes only
        g.node("LRN", [x], [c.out], size=size, alpha=a * size, beta=beta, bias=k)
        return
    # sum of x^2 over channels [c - before, c + after]: (N, C, *) -> (N, 1, C, L), a
    # (size x 1) ones kernel with pads (before, after), and back
    sq = g.node("Reshape", [g.node("Mul", [x, x]), g.ints([0, 1, xa.shape[1], -1])])
    ones = g.const(np.ones((1, 1, size, 1), xa.dtype))
    s = g.node("Conv", [sq, ones], kernel_shape=[size, 1], pads=[before, 0, after, 0])
    s = g.node("Reshape", [s, g.node("Shape", [x])])
    den = g.node("Add", [g.node("Mul", [s, g.scalar(a, x)]), g.scalar(k, x)])
    g.node("Mul", [x, g.node("Pow", [den, g.scalar(-beta, x)])], [c.out])


@mapping(localnorm.SpNorm)
def _spnorm(g, c):
    # MatConvNet's vl_nnspnorm: x / (1 + alpha * avg(x^2)) ** beta, the average over a
    # stride-1 window with the padding not counted
    geo = c.a["win"]
    (pt, pb, pl, pr), _ = _floor_pads(geo)
    x = c.x("x")
    n2 = g.node("AveragePool", [g.node("Mul", [x, x])], kernel_shape=list(geo.kernel),
                strides=[1, 1], pads=[pt, pl, pb, pr], count_include_pad=0)
    den = g.node("Add", [g.node("Mul", [n2, g.scalar(c.a["alpha"], x)]), g.scalar(c.a["k"], x)])
    g.node("Mul", [x, g.node("Pow", [den, g.scalar(-float(c.a["beta"]), x)])], [c.out])


@mapping(localnorm.NOffset)
def _noffset(g, c):
    # MatConvNet's vl_nnnoffset: x - p1 * max(sum_c x^2, 1e-8) ** p2
    x = c.x("x")
    s = g.axes_node("ReduceSum", g.node("Mul", [x, x]), [1], keepdims=1, since=13)
    L = g.node("Max", [s, g.scalar(localnorm._NOFFSET_FLOOR, x)])
    off = g.node("Mul", [g.node("Pow", [L, g.scalar(c.a["p2"], x)]), g.scalar(c.a["p1"], x)])
    g.node("Sub", [x, off], [c.out])


# ------------------------------------------------------- dropout, embedding

@mapping(Dropout)
def _dropout(g, c):
    raise c.refuse("dropout in training mode draws a random mask", "call dropout with "
                   "training=False (nn.Dropout does in eval mode, which export sets)")


@mapping(Embedding)
def _embedding(g, c):
    idx = c.x("idx")
    if g.meta[idx][1] not in (np.dtype(np.int64), np.dtype(np.int32)):
        idx = g.node("Cast", [idx], to=g.onnx.TensorProto.INT64)
    g.node("Gather", [c.x("weight"), idx], [c.out], axis=0)


# ------------------------------------------------------------------ resample

def _gathered(g, x, m, axis, dtype):
    """tapegrad's :class:`_AxisMap` along ``axis`` (-2 or -1) of the value ``x``:
    the sum over slots of weight * x[idx] where valid, over div."""
    k, n_out = m.idx.shape
    shape = (n_out, 1) if axis == -2 else (n_out,)  # broadcasts along the axis
    acc = None
    for j in range(k):
        t = g.node("Gather", [x, g.ints(m.idx[j])], axis=axis)
        if m.weight is not None:
            t = g.node("Mul", [t, g.const(m.weight[j].reshape(shape), dtype)])
        if m.valid is not None and not m.valid[j].all():
            t = g.node("Where", [g.const(m.valid[j].reshape(shape)), t, g.scalar(0, x)])
        acc = t if acc is None else g.node("Add", [acc, t])
    if m.div is not None:
        acc = g.node("Div", [acc, g.const(m.div.reshape(shape), dtype)])
    return acc


def _separable(g, c, out=None):
    xa = c.info("x")
    mh, mw = c.a["mh"], c.a["mw"]
    x = c.x("x")
    y = x if mw.identity else _gathered(g, x, mw, -1, xa.dtype)
    y = y if mh.identity else _gathered(g, y, mh, -2, xa.dtype)
    g.rename(y, out or c.out)


def _whole(m) -> bool:
    """One bin over the whole axis."""
    return m.idx.shape[1] == 1 and m.idx.shape[0] == m.n_in


def _tile(m) -> int:
    return m.idx.shape[0] if m.tile else 0


@mapping(resample.AdaptiveAvgPool2d)
def _adaptive_avg(g, c):
    mh, mw = c.a["mh"], c.a["mw"]
    if c.info("x").ndim == 4 and _whole(mh) and _whole(mw):
        g.node("GlobalAveragePool", [c.x("x")], [c.out])
    elif c.info("x").ndim == 4 and _tile(mh) and _tile(mw):
        k = [_tile(mh), _tile(mw)]
        g.node("AveragePool", [c.x("x")], [c.out], kernel_shape=k, strides=k)
    else:
        _separable(g, c)


@mapping(resample.AdaptiveMaxPool2d)
def _adaptive_max(g, c):
    mh, mw = c.a["mh"], c.a["mw"]
    if c.a["return_indices"]:
        raise c.refuse("return_indices=True has no ONNX counterpart", "export without indices")
    if c.info("x").ndim == 4 and _whole(mh) and _whole(mw):
        g.node("GlobalMaxPool", [c.x("x")], [c.out])
    elif c.info("x").ndim == 4 and _tile(mh) and _tile(mw):
        k = [_tile(mh), _tile(mw)]
        g.node("MaxPool", [c.x("x")], [c.out], kernel_shape=k, strides=k)
    else:
        raise c.refuse("bins that do not tile the input (overlapping adaptive bins) have no "
                       "ONNX pool", "choose an output size that divides the input size")


def _integer_factor(m) -> int:
    """f when the nearest map is ``d // f`` (doubling, tripling, ...), else 0."""
    n_out = m.idx.shape[1]
    f = n_out // m.n_in
    ok = f >= 1 and f * m.n_in == n_out and (m.idx[0] == np.arange(n_out) // f).all()
    return f if ok else 0


@mapping(resample.UpsampleNearest2d)
def _nearest(g, c):
    fh, fw = _integer_factor(c.a["mh"]), _integer_factor(c.a["mw"])
    xa = c.info("x")
    if not (fh and fw) or fh == fw == 1:  # other sizes, or a copy
        _separable(g, c)
        return
    scales = g.const(np.array([1.0] * (xa.ndim - 2) + [fh, fw], np.float32))
    g.node("Resize", [c.x("x"), "", scales], [c.out], mode="nearest",
           coordinate_transformation_mode="asymmetric", nearest_mode="floor")


mapping(resample.UpsampleBilinear2d)(_separable)


@mapping(resample.PixelShuffle)
def _pixel_shuffle(g, c):
    if c.info("x").ndim != 4:
        raise c.refuse("only (N, C, H, W) input exports", "reshape to 4-D first")
    g.node("DepthToSpace", [c.x("x")], [c.out], blocksize=int(c.a["r"]), mode="CRD")


@mapping(resample.PixelUnshuffle)
def _pixel_unshuffle(g, c):
    xa = c.info("x")
    if xa.ndim != 4:
        raise c.refuse("only (N, C, H, W) input exports", "reshape to 4-D first")
    r = int(c.a["r"])
    _, ch, h, w = xa.shape
    # (N, C, H, W) -> (N, C, H/r, r, W/r, r) -> (N, C, r, r, H/r, W/r) -> (N, C*r*r, H/r, W/r)
    y = g.node("Reshape", [c.x("x"), g.ints([0, ch, h // r, r, w // r, r])])
    y = g.node("Transpose", [y], perm=[0, 1, 3, 5, 2, 4])
    g.node("Reshape", [y, g.ints([0, ch * r * r, h // r, w // r])], [c.out])
