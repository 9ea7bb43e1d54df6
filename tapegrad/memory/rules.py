"""What each op's vjp allocates, for :func:`tapegrad.memory_report`.

A rule ``rule(node, g) -> (peak, outputs)`` gets the entry and its output
gradient's ``(shape, itemsize)`` and returns the vjp's high-water mark above
the memory held when it starts (its temporaries plus the input gradients it
has made by then), and, for inputs whose gradient is not a new array of the
input's shape, ``{input index: bytes}`` (a new array of that size) or
``{input index: ALIAS}`` (a view of the output gradient: no new memory).

The rules mirror the kernels' own branches (``ops/conv.py``, ``ops/pool.py``,
``ops/normalization.py``); ``tests/memory/test_memory_report.py`` measures each against
tracemalloc, so a kernel that changes its temporaries fails there. An op
without a rule is assumed to allocate just its input gradients. A user op can
define ``backward_memory(ctx, g)`` on its Function, with the same contract.
"""

from __future__ import annotations

import math

from ..device import onednn_conv, pool
from ..ops import _conv_blocks, conv
from ..ops.activation import LeakyReLU, ReLU
from ..ops.conv import Conv2d, ConvTranspose2d
from ..ops.dropout import Dropout
from ..ops.elementwise import Add, Cast, Sub
from ..ops.linalg import Linear
from ..ops.losses import CrossEntropy
from ..ops.normalization import BatchNorm
from ..ops.pool import MaxPool2d
from ..ops.shape import BroadcastTo, Reshape, Transpose
from ..utils.checkpoint import Checkpoint

ALIAS = "alias"
# NumPy's ufunc buffer when an operand is cast on the fly (bool mask * float):
# 8192 elements per cast operand
_UFUNC_BUF = 8192 * 8


def _prod(shape) -> int:
    return math.prod(shape)


def _edge_bytes(node, i) -> int:
    for index, _, _, shape, dtype in node.edges:
        if index == i:
            return _prod(shape) * dtype.itemsize
    return 0


def _needed_bytes(node) -> int:
    return sum(_prod(shape) * dtype.itemsize for _, _, _, shape, dtype in node.edges)


def _mask_times(node, g):
    """``g * mask``-style rules: one bool mask of g's size, the product, a buffer."""
    shape, size = g
    n = _prod(shape)
    return n + n * size + _UFUNC_BUF, {}


def _relu(node, g):
    return _mask_times(node, g)


def _alias_all(node, g):
    return 0, {index: ALIAS for index, *_ in node.edges}


def _sub(node, g):
    return _edge_bytes(node, 1), {0: ALIAS}


def _linear(node, g):
    return _needed_bytes(node), {}


def _cross_entropy(node, g):
    # the one-hot targets (bool), p - onehot, and the product: p has the logits' shape
    (_, _, _, shape, dtype), = node.edges
    n = _prod(shape)
    return n + 2 * n * max(dtype.itemsize, 4), {}  # float16 logits: p is float32


def _batch_norm(node, g):
    if getattr(node, "onednn", False):  # oneDNN's backward writes gx (g comes channels-last)
        return _needed_bytes(node), {}
    shape, size = g
    n, c = shape[0], shape[1]
    ln = _prod(shape[2:])
    row = c * ln * size if ln > 1 else 0  # _row() repeats a (C,) vector over L
    # xc, recentred into the buffer that becomes dx; three rows alive at the widest
    # (dx's k, shift and scale), and the (N, C) partial sums
    return _needed_bytes(node) + 3 * row + n * c * size * 2, {}


def _max_pool(node, g):
    if getattr(node, "onednn", None) is not None:  # oneDNN's backward writes gx, nothing else
        return _needed_bytes(node), {}
    geo = node.geo
    shape, size = g
    n, c = geo.shape[:2]
    ho, wo = geo.out
    mask = n * c * ho * wo  # idx == k, one at a time (and isfinite(g) before)
    if geo.fast:
        kh, kw = geo.kernel
        gt = n * c * ho * kh * wo * kw * size
        if (ho * kh, wo * kw) == tuple(geo.shape[2:]):
            return gt + mask + _UFUNC_BUF, {0: gt}
        full = _prod(geo.shape) * size
        return gt + full + mask, {0: full}
    gbuf = n * c * geo.buf[0] * geo.buf[1] * size
    routed = n * c * ho * wo * size
    return gbuf + routed + mask, {0: gbuf}  # the gradient is a view of the padded buffer


def _im2col_bytes(geo, size) -> tuple[int, int]:
    """(padded copy, columns) of an im2col over geometry ``geo`` (channels-last: the
    NHWC copy, always made, and no columns; pointwise: neither, x is its columns)."""
    if geo.pointwise:
        return 0, 0
    t, b, left, r = geo.pad
    padded = geo.cl or t or b or left or r
    pad = geo.n * geo.c * (geo.h + t + b) * (geo.w + left + r) * size if padded else 0
    return pad, 0 if geo.cl else geo.n * geo.c * geo.kh * geo.kw * geo.ho * geo.wo * size


def _chunks(geo, xp) -> int:
    """How many chunks of images ops/conv.py's _by_images makes for conv ``geo``."""
    return pool.split_count(geo.n, conv._work(geo), xp)


def _block_bytes(f, size, forward, products) -> int:
    """One chunk's temporaries in _conv_blocks.by_blocks over geometry ``f``: the block
    buffer, one image's forward result, a block's weight product."""
    rows, imgs = _conv_blocks.block_shape(f, size)
    total = imgs * rows * f.wo * f.groups * f.kg * size
    if forward:
        total += imgs * f.ho * f.wo * f.o * size
    if products and rows < f.ho:
        total += f.groups * f.kg * (f.o // f.groups) * size
    return total


def _conv_input_grad(geo, size, xp) -> int:
    """Peak of ops/conv.py's _input_grad above its start, its result included."""
    gx = geo.n * geo.c * geo.h * geo.w * size
    if geo.pointwise:  # one GEMM per image, straight into gx
        return gx
    if conv._correlates(geo):  # correlation with the flipped kernel
        f, _ = conv._correlation_geom(xp, geo)
        pad, cols = _im2col_bytes(f, size)
        if f.cl:
            return pad + _chunks(geo, xp) * _block_bytes(f, size, True, False) + gx
        return max(pad + cols, cols + gx)
    if conv._scatters_channels_last(xp, geo):  # blocks of n images, one per thread at a time
        n = conv._scatter_images(geo, size)
        threads = pool.split_count(-(-geo.n // n), conv._work(geo), xp)
        gyt, gxt = n * geo.o * geo.ho * geo.wo * size, n * geo.c * geo.h * geo.w * size
        gcols = geo.kh * geo.kw * n * geo.c * geo.ho * geo.wo * size
        wk = geo.o * (geo.c // geo.groups) * geo.kh * geo.kw * size
        return gx + wk + threads * (gcols + max(gyt, gxt))  # the GEMM, then the scatter
    gcols = geo.n * geo.c * geo.kh * geo.kw * geo.ho * geo.wo * size
    return gcols + gx


def _conv2d(node, g):
    nx, nw, nb = node.needs_input_grad
    geo = node.geo
    _, size = g
    if getattr(node, "onednn", False):
        return _conv2d_onednn(node, geo, size, nx, nw, nb), {}
    gw = geo.o * (geo.c // geo.groups) * geo.kh * geo.kw * size
    peak = 0
    if nw:
        og, kg = geo.o // geo.groups, geo.kg
        per_image = geo.n * geo.groups * kg * og * size  # the batched GEMM before its sum
        # the transposed (or reordered, channels-last) sum is copied by its reshape
        tail = gw if kg >= 4 * og or geo.cl else 0
        blocks = _chunks(geo, node.xp) * _block_bytes(geo, size, False, True) if geo.cl else 0
        peak = per_image + max(blocks, gw + tail)
    held = gw if nw else 0
    if nx:
        peak = max(peak, held + _conv_input_grad(geo, size, node.xp))
        held += geo.n * geo.c * geo.h * geo.w * size
    if nb:
        peak = max(peak, held + 2 * geo.n * geo.o * size + geo.ho * geo.wo * size)
    return peak, {}


def _conv2d_onednn(node, geo, size, nx, nw, nb, transposed=False):
    """oneDNN's backward (``Conv2d.onednn_grads``; for a transposed conv, the same with
    the conv's forward as the input gradient): gx first, while its call's reorder
    buffers live, then gW (and gb) with theirs, gx still held. The buffers are what
    the binding allocates (``onednn_conv.conv_temporaries``); oneDNN's own scratchpad
    is the library's and not counted."""
    x = (geo.n * geo.o * geo.ho * geo.wo if transposed else geo.n * geo.c * geo.h * geo.w) * size
    gx = x if nx else 0
    kind = "conv_fwd" if transposed else "conv_bwd_data"
    peak = gx + onednn_conv.conv_temporaries(kind, geo, False) if nx else 0
    if nw:
        w = geo.o * (geo.c // geo.groups) * geo.kh * geo.kw * size
        wb = nb and not transposed
        peak = max(peak, gx + w + (geo.o * size if wb else 0)
                   + onednn_conv.conv_temporaries("conv_bwd_weights", geo, wb))
    if nb and (transposed or not nw):  # the bias gradient as a sum over gy
        peak = max(peak, gx + (geo.c if transposed else geo.o) * size)
    return peak


def _conv_transpose2d(node, g):
    # one im2col over its output gradient (the geometry of the conv it is the
    # adjoint of, whose input that gradient has the shape of), then the GEMMs; or
    # channels-last, by blocks of it
    _, size = g
    geo = node.geo
    if getattr(node, "onednn", False):  # the same primitives with x and gy's roles swapped
        return _conv2d_onednn(node, geo, size, *node.needs_input_grad, transposed=True), {}
    pad, cols = _im2col_bytes(geo, size)
    nx, nw = node.needs_input_grad[:2]
    # the weight products
    prod = geo.n * geo.groups * geo.kg * (geo.o // geo.groups) * size if nw else 0
    if geo.cl:
        cols = _chunks(geo, node.xp) * _block_bytes(geo, size, nx, nw)
    return pad + cols + prod + _needed_bytes(node), {}


def _checkpoint(node, g):
    # the recomputed segment's saved arrays, then the peak of replaying it (simulated
    # when the checkpoint ran forward), its captured input gradients included
    saved, peak = node.segment.estimate()
    return max(peak, saved + _needed_bytes(node)), {}


def _dropout(node, g):
    return _needed_bytes(node), {}


RULES = {
    ReLU: _relu,
    LeakyReLU: _relu,
    Dropout: _dropout,
    Add: _alias_all,
    Sub: _sub,
    Cast: _alias_all,
    Reshape: _alias_all,
    Transpose: _alias_all,
    BroadcastTo: _alias_all,
    Linear: _linear,
    CrossEntropy: _cross_entropy,
    BatchNorm: _batch_norm,
    MaxPool2d: _max_pool,
    Conv2d: _conv2d,
    ConvTranspose2d: _conv_transpose2d,
    Checkpoint: _checkpoint,
}


def register(fn_cls, rule) -> None:
    """Add or replace the rule of an op (``rule(node, g) -> (peak, outputs)``)."""
    RULES[fn_cls] = rule


def estimate(node, g):
    """(peak, outputs) of ``node``'s vjp given its output gradient ``g``."""
    fn = node.fn
    if fn.__dict__.get("_tg_observed", False):  # a profile's or anomaly mode's wrapper class
        fn = fn.__base__
    rule = getattr(fn, "backward_memory", None) or RULES.get(fn)
    if rule is None:
        return _needed_bytes(node), {}
    out = rule(node, g)
    return (out, {}) if isinstance(out, int) else out
