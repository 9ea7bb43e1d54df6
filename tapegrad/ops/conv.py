"""Convolution: ``conv2d`` and its adjoint ``conv_transpose2d`` (NCHW).

Conventions
-----------
* Tensors are NCHW; conv weights are PyTorch's ``(out, in/groups, kh, kw)``,
  transposed-conv weights ``(in, out/groups, kh, kw)``.
* ``stride`` and ``dilation``: an int or ``(h, w)``. ``padding``: an int,
  ``(h, w)`` (PyTorch) or MatConvNet's asymmetric ``(top, bottom, left, right)``.
* Output size (floor, as PyTorch and MatConvNet):
  ``Ho = (H + top + bottom - dilation*(kh-1) - 1) // stride + 1``.

How it is computed
------------------
im2col (:mod:`._conv_columns`, with col2im and the GEMMs below): a strided view of
every window of the padded input
(:func:`._windows.sliding_windows`, no copy) is copied once, in order, into a
column array laid out per image ``(N, C, kh, kw, Ho, Wo)``, i.e.
``(N, G, Cg*kh*kw, Ho*Wo)``. Each direction is then one batched BLAS GEMM
(numpy's matmul loops over images and groups in C; one GEMM per image measured
~30% faster with OpenBLAS than one skinny GEMM over ``N*Ho*Wo`` columns, and
writes NCHW directly, so no transposing copy of the output):

* forward        ``y  = W  @ cols``        ``(G, Og, Kg) @ (N, G, Kg, P) -> (N, O, Ho, Wo)``
* weight grad    ``gW = sum_n gy @ cols^T`` ``(N, G, Og, P) @ (N, G, P, Kg)``, summed over N
  in image order after the per-image products
* input grad     stride 1 with few output channels: the correlation of gy with
  the flipped kernel (a forward-style im2col + GEMM); otherwise
  ``gcols = W^T @ gy`` then col2im, one strided add per kernel offset clipped
  to the input (kh*kw iterations, never a loop over pixels, channels or
  batch), channels-last when the output rows are short.

From ``_conv_blocks.MIN_CG`` input channels per group up (on the host) a conv
goes channels-last instead (:mod:`._conv_blocks`): its columns, each output
pixel's patch a row, are made block by block of output rows from a padded NHWC
copy of the input and used while in cache, never written whole; the forward is
``cols @ W^T`` and the NHWC copy is what the tape saves. The large 3x3 layers
run 1.2-1.3x faster that way (docs/performance.md).

A pointwise conv (1x1 kernel, stride 1, no padding; ``_conv_columns.Geom.pointwise``) makes
no columns at all: x viewed as ``(N, G, Cg, H*W)`` is its own columns, the tape
saves x itself (so an in-place change of x before backward is refused, as in
PyTorch), and the input gradient is one GEMM per image straight into NCHW, no
col2im: 1.1-2x faster than through the columns (docs/performance.md).

The column array (channels-last: the NHWC copy) is saved for the weight
gradient (no second im2col in backward), the weight only when the input
gradient is needed, and nothing of ``x`` when only the input gradient is
needed. ``conv_transpose2d`` runs the same three kernels with the roles of
forward and input gradient swapped (and saves its input ``x`` for the weight
gradient).

Memory format
-------------
As PyTorch on the CPU (``mkldnn_conv_use_channels_last``), a conv whose input or
weight suggests channels_last (NHWC strides, :func:`memory_formats.suggested`) gives
its output, input gradient and weight gradient channels-last, every other conv
contiguous ones (:func:`_memory_format`, ``geo.fmt``). oneDNN runs such a conv on
NHWC activations, no reorder; the NumPy kernels above compute in their own layouts
and the results are copied into the format once.

Double backward (``create_graph=True``)
---------------------------------------
Both ops are twice differentiable. Under ``create_graph`` the gradients are
not computed by the raw kernels above but by recorded ``conv2d`` /
``conv_transpose2d`` calls, which are differentiable again (any order):

* a conv's input gradient is ``conv_transpose2d(gy, w)`` (the rows the floor in
  ``Ho`` dropped come back as ``output_padding``), a transposed conv's is
  ``conv2d(gy, w)``;
* a conv's weight gradient is a conv of the input with the output gradient as
  its kernel: images become channels, and stride and dilation trade places
  (:func:`_graph_weight_grad`).

For that conv2d also saves ``x`` when both ``x`` and the weight need a gradient
(the weight gradient depends on ``x`` through the columns, which are a
constant; ``x`` is a reference, usually kept alive by its producer anyway).
When ``x`` needs no gradient the saved columns are a constant indeed, and the
recorded weight gradient is ``gy @ cols^T`` itself.
"""

from __future__ import annotations

import copy

from ..device import kernels, onednn, onednn_conv, pool
from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..memory_formats import as_format, channels_last, contiguous_format, laid_out, suggested
from ..tape import Function
from . import _conv_blocks, _conv_columns
from ._windows import out_size, padding4, pair
from .graph_backend import TensorBackend

__all__ = ["conv2d", "conv_transpose2d"]


def _check_common(op, x, w, b, groups, in_axis, out_axis):
    """Ranks, dtypes, groups and bias; returns ``(in_channels, out_channels)``."""
    if x.ndim != 4:
        raise ShapeError(f"{op}: input must be 4-D (N, C, H, W), got {describe(x)}")
    if w.ndim != 4:
        layout = "(out, in/groups, kh, kw)" if in_axis == 1 else "(in, out/groups, kh, kw)"
        raise ShapeError(f"{op}: weight must be 4-D {layout}, got {describe(w)} "
                         f"(input {describe(x)})")
    if x.dtype.kind != "f" or w.dtype != x.dtype or (b is not None and b.dtype != x.dtype):
        arrays = (x, w) if b is None else (x, w, b)
        raise DTypeError(f"{op}: input, weight and bias must share one floating dtype, got "
                         f"{describe(*arrays)}; cast them first (e.g. .astype('float32'))")
    if not isinstance(groups, int) or groups < 1:
        raise ArgumentError(f"{op}: groups must be a positive int, got {groups!r}")
    c = x.shape[1]
    if in_axis == 1:  # conv2d: w is (out, in/groups, kh, kw)
        cin, cout = w.shape[1] * groups, w.shape[0]
        if c % groups or cout % groups:
            raise ShapeError(f"{op}: groups={groups} must divide both the input channels "
                             f"({c}) and the output channels ({cout}); input {describe(x)}, "
                             f"weight {describe(w)}")
    else:  # conv_transpose2d: w is (in, out/groups, kh, kw)
        cin, cout = w.shape[0], w.shape[1] * groups
        if c % groups or cin % groups:
            raise ShapeError(f"{op}: groups={groups} must divide the input channels ({c}) "
                             f"and the weight's first axis ({cin}); input {describe(x)}, "
                             f"weight {describe(w)}")
    if c != cin:
        expect = (f"weight.shape[1] * groups = {w.shape[1]} * {groups}" if in_axis == 1
                  else f"weight.shape[0] = {cin}")
        raise ShapeError(f"{op}: input has {c} channels but {expect}; input {describe(x)}, "
                         f"weight {describe(w)}, groups={groups}")
    if b is not None and tuple(b.shape) != (cout,):
        raise ShapeError(f"{op}: bias must have shape ({cout},) (one per output channel), "
                         f"got {describe(b)}; weight {describe(w)}")
    return cin, cout


def _memory_format(x, w):
    """The conv's memory format (of its output and its x and w gradients), PyTorch's
    rule on the CPU: channels_last where x or w suggests it, else contiguous_format."""
    return channels_last if channels_last in (suggested(x), suggested(w)) else \
        contiguous_format


# ------------------------------------------------ splitting over images
#
# On the CPU each kernel above can run on a slice of the batch: the forward,
# input gradient and per-image weight products of images lo..hi depend only on
# those images. _by_images runs such a part on the device pool (one chunk of
# images per thread, tapegrad.device.pool); the sums over images (_conv_columns.weight_sum)
# happen after the join, in image order, so every thread count gives the same
# bits. Off the host (CuPy, the fake device) the part runs once over the batch.


def _part(geo, lo, hi):
    """The geometry of images lo..hi of ``geo``."""
    p = copy.copy(geo)
    p.n = hi - lo
    return p


def _by_images(xp, geo, part):
    """Run ``part(lo, hi, geometry)`` over the batch, split across the pool when
    the conv is on the host and large enough (forward multiply-adds >=
    pool.MIN_WORK)."""
    pool.parallel(geo.n, lambda lo, hi: part(lo, hi, geo if hi - lo == geo.n else
                                             _part(geo, lo, hi)),
                  _work(geo), xp)


def _work(geo):
    """The forward's multiply-adds: what :func:`_by_images` sizes its split by."""
    return geo.n * geo.o * geo.ho * geo.wo * geo.kg


def _onednn_worth(geo):
    """Whether the conv ``geo`` is worth a oneDNN call: not empty, and at least
    ``onednn_conv.MIN_MACS`` multiply-adds (smaller ones are faster on NumPy)."""
    return _work(geo) >= max(1, onednn_conv.MIN_MACS)


# The channels-last col2im wins on short output rows (LeNet's Wo=8, k5: 2x) and
# loses from Wo=12 up (stride-2 k3 convs, Wo 12-24: NCHW 15-50% faster).
_CHANNELS_LAST_BELOW_WO = 12


def _correlates(geo):
    """Whether :func:`_input_grad` takes the correlation of gy with the flipped kernel
    (stride 1, few output channels) rather than gcols + col2im."""
    return geo.stride == (1, 1) and geo.o <= 2 * geo.c


def _correlation_geom(xp, geo):
    """The conv :func:`_input_grad` runs for a correlating ``geo`` (gy -> gx, stride 1):
    its geometry and the index that crops gy for it."""
    dh, dw = geo.dilation
    t, _, left, _ = geo.pad
    # pad gy by span-1-pad before and so that the result is (H, W) after (span-1-pad,
    # plus a transposed conv's output_padding); a negative amount crops instead
    pt, pb = dh * (geo.kh - 1) - t, geo.h - geo.ho + t
    pl, pr = dw * (geo.kw - 1) - left, geo.w - geo.wo + left
    crop = (slice(None), slice(None), slice(max(0, -pt), geo.ho - max(0, -pb)),
            slice(max(0, -pl), geo.wo - max(0, -pr)))
    f = _conv_columns.Geom()
    f.n, f.c = geo.n, geo.o
    f.h = geo.ho - max(0, -pt) - max(0, -pb)
    f.w = geo.wo - max(0, -pl) - max(0, -pr)
    f.batch = geo.batch
    f.o, f.kh, f.kw, f.groups = geo.c, geo.kh, geo.kw, geo.groups
    f.stride, f.dilation = (1, 1), geo.dilation
    f.pad = (max(0, pt), max(0, pb), max(0, pl), max(0, pr))
    f.ho, f.wo = geo.h, geo.w
    _set_layout(xp, f)
    return f, crop


def _scatters_channels_last(xp, geo):
    """Whether the input gradient is :func:`_input_grad_channels_last` (short output rows
    and enough images and channels; a CPU layout trick: on CUDA the col2im kernel
    gathers)."""
    return (not geo.pointwise and not _correlates(geo) and geo.wo < _CHANNELS_LAST_BELOW_WO
            and geo.batch * (geo.c // geo.groups) >= 8 * geo.wo and not kernels.on_cuda(xp))


def _input_grad_by_images(xp, gy, w, geo, out, bias=None):
    """:func:`_input_grad` of the whole batch into ``out`` (plus ``bias``, for a
    transposed conv's forward), split across the pool by images -- except the
    channels-last scatter, whose GEMMs span images: it splits by blocks of its own."""
    if _scatters_channels_last(xp, geo):
        _input_grad_channels_last(xp, gy, w, geo, out)
        if bias is not None:
            _by_images(xp, geo, lambda lo, hi, p: _add_bias(out[lo:hi], bias))
        return
    _by_images(xp, geo, lambda lo, hi, p: _add_bias(_input_grad(xp, gy[lo:hi], w, p, out[lo:hi]),
                                                  bias))


def _input_grad(xp, gy, w, geo, out=None):
    """The conv's input gradient (and a transposed conv's forward) of a chunk of images:
    gy (N, O, Ho, Wo), w (O, Cg, kh, kw) -> (N, C, H, W), a new contiguous array
    (or ``out``, a contiguous array of that shape). :func:`_input_grad_by_images` runs
    it over the batch.

    Stride 1 with few output channels: a full correlation of gy with the
    flipped, transposed kernel -- one im2col of gy and one GEMM, no scatter.
    Otherwise: gcols = W^T @ gy, then col2im. The im2col of gy copies O*kh*kw
    values per input pixel, col2im reads and writes C*kh*kw; the scatter's
    read-modify-write passes cost about twice a copy, hence ``O <= 2*C``.
    Pointwise: gx = W^T @ gy per image, straight into NCHW.
    """
    if geo.pointwise:  # (G, Kg, Og) @ (N, G, Og, P) -> (N, G, Kg, P), i.e. (N, C, H, W)
        gx = xp.empty((geo.n, geo.c, geo.h, geo.w), dtype=gy.dtype) if out is None else out
        # (N, O, Ho, Wo) -> (N, G, Og, P)
        gm = gy.reshape(geo.n, geo.groups, geo.o // geo.groups, geo.ho * geo.wo)
        wt = _conv_columns.wmat(w, geo).transpose(0, 2, 1)  # (G, Og, Kg) -> (G, Kg, Og)
        xp.matmul(wt, gm, out=gx.reshape(geo.n, geo.groups, geo.kg, geo.h * geo.w))
        return gx
    if _correlates(geo):
        f, crop = _correlation_geom(xp, geo)
        gy = gy[crop]
        og, cg = geo.o // geo.groups, geo.c // geo.groups
        # flipped kernel, in and out swapped within each group: (O, Cg, kh, kw) ->
        # (G, Og, Cg, kh, kw) -> (G, Cg, Og, kh, kw) -> (C, Og, kh, kw), f's weight
        wf = w.reshape(geo.groups, og, cg, geo.kh, geo.kw)[:, :, :, ::-1, ::-1]
        wf = wf.transpose(0, 2, 1, 3, 4)
        wf = wf.reshape(geo.c, og, geo.kh, geo.kw)
        if f.cl:  # the columns of gy never written whole
            y = xp.empty((geo.n, geo.c, geo.h, geo.w), dtype=gy.dtype) if out is None else out
            _conv_blocks.by_blocks(xp, _conv_blocks.nhwc(xp, gy, f), f,
                                   wmat=_conv_blocks.gemm_weight(xp, wf, f), y=y)
            return y
        wf = _conv_columns.wmat(xp.ascontiguousarray(wf), f)
        return _conv_columns.gemm_forward(xp, _conv_columns.im2col(xp, gy, f), wf, f, out)
    wmat = _conv_columns.wmat(w, geo)  # (O, Cg, kh, kw) -> (G, Og, Kg)
    # (N, O, Ho, Wo) -> (N, G, Og, P)
    gm = gy.reshape(geo.n, geo.groups, geo.o // geo.groups, geo.ho * geo.wo)
    # (G, Kg, Og) @ (N, G, Og, P) -> (N, G, Kg, P)
    gcols = xp.matmul(wmat.transpose(0, 2, 1), gm)
    return _conv_columns.col2im(xp, gcols, geo, gy.dtype, out)


# The channels-last scatter's blocks of images: an even count of them (two threads share
# them evenly), each within about this many bytes of GEMM rows, columns and scatter
# target. Larger blocks run faster per image (LeNet's conv2, per 64 images at 1 thread:
# 4.2 ms in blocks of 4, 3.5 of 16, 3.2 of 32): at batch 64 it is two blocks of 32.
SCATTER_BLOCK_BYTES = 8 << 20


def _scatter_images(geo, itemsize):
    """Images per block of :func:`_input_grad_channels_last`: from the shape alone, so
    every thread count runs the same GEMMs."""
    per_image = ((geo.kh * geo.kw * geo.ho * geo.wo + geo.h * geo.w) * geo.c * itemsize
                 + geo.ho * geo.wo * geo.o)
    blocks = -(-geo.n * per_image // SCATTER_BLOCK_BYTES)
    blocks = min(geo.n, max(2, blocks + blocks % 2))
    return -(-geo.n // blocks)


def _input_grad_channels_last(xp, gy, w, geo, out):
    """:func:`_input_grad` by col2im with (n, Cg) innermost, for narrow outputs
    (small Wo), where the NCHW scatter would run numpy's inner loop over only
    Wo elements. Of the whole batch, by blocks of n images (:func:`_scatter_images`)
    split across the pool: per block, gcols = gy^T @ W per kernel offset, one batched
    GEMM with n*Ho*Wo rows, then one strided add per offset over whole (Wo, n, Cg)
    rows, and one transposing copy back to NCHW into ``out``.

    The blocks, not the pool's chunks of images, fix each GEMM's rows: OpenBLAS's bits
    for a row depend on how many rows the call has (its row-tail kernels differ, and
    on AVX2's Haswell kernels other rows are tail rows than on AVX-512's), so chunks
    of images would give other bits at other thread counts.
    """
    og, cg = geo.o // geo.groups, geo.c // geo.groups
    # (O, Cg, kh, kw) -> (G, Og, Cg, kh, kw) -> (kh, kw, G, Og, Cg) -> (kh*kw, G, Og, Cg)
    wk = xp.ascontiguousarray(w.reshape(geo.groups, og, cg, geo.kh, geo.kw)
                              .transpose(3, 4, 0, 1, 2))
    wk = wk.reshape(geo.kh * geo.kw, geo.groups, og, cg)
    offsets = list(_conv_columns.offsets(geo))
    per = _scatter_images(geo, gy.dtype.itemsize)

    def block(n0, n1):  # images n0..n1
        n = n1 - n0
        # (n, O, Ho, Wo) -> (n, G, Og, Ho, Wo) -> (G, Ho, Wo, n, Og) -> (G, Ho*Wo*n, Og)
        gyt = xp.empty((geo.groups, geo.ho, geo.wo, n, og), dtype=gy.dtype)
        gyt[...] = gy[n0:n1].reshape(n, geo.groups, og, geo.ho, geo.wo).transpose(1, 3, 4, 0, 2)
        # (G, Ho*Wo*n, Og) @ (kh*kw, G, Og, Cg) -> (kh*kw, G, Ho*Wo*n, Cg)
        gcols = xp.matmul(gyt.reshape(geo.groups, geo.ho * geo.wo * n, og), wk)
        del gyt
        # (kh*kw, G, Ho*Wo*n, Cg) -> (kh, kw, G, Ho, Wo, n, Cg)
        gcols = gcols.reshape(geo.kh, geo.kw, geo.groups, geo.ho, geo.wo, n, cg)
        gxt = xp.zeros((geo.groups, geo.h, geo.w, n, cg), dtype=gy.dtype)  # (G, H, W, n, Cg)
        for i, j, ro, co, ri, ci in offsets:
            gxt[:, ri, ci] += gcols[i, j, :, ro, co]
        del gcols
        # (G, H, W, n, Cg) -> (n, G, Cg, H, W) -> (n, C, H, W)
        out[n0:n1].reshape(n, geo.groups, cg, geo.h, geo.w)[...] = gxt.transpose(3, 0, 4, 1, 2)

    def part(lo, hi):  # blocks lo..hi
        for n0 in range(lo * per, min(geo.n, hi * per), per):
            block(n0, min(geo.n, n0 + per))

    pool.parallel(-(-geo.n // per), part, _work(geo), xp)
    return out


def _add_bias(y, bias):
    """y (N, O, Ho, Wo), a new array of this op (or images of it), plus bias (O,), in
    place."""
    if bias is not None:
        y += bias.reshape(1, bias.size, 1, 1)  # (O,) -> (1, O, 1, 1)
    return y


def _bias_grad(xp, gy):
    """gy (N, O, Ho, Wo) -> (O,): the sum over images and pixels as a BLAS
    matrix-vector product (about 5x faster than ``gy.sum(axis=(0, 2, 3))``)."""
    n, o = gy.shape[:2]
    ones = xp.ones(gy.shape[2] * gy.shape[3], dtype=gy.dtype)
    # (N, O, Ho, Wo) -> (N*O, Ho*Wo) @ (Ho*Wo,) -> (N*O,) -> (N, O) -> (O,)
    return (gy.reshape(n * o, ones.size) @ ones).reshape(n, o).sum(axis=0)


# ------------------------------------------------- create_graph (recorded)
#
# The same gradients as recorded ops on Tensors (see the module notes), each a
# conv2d or conv_transpose2d whose own backward is again one of these.


def _graph_input_grad(gy, w, geo):
    """A conv's input gradient, recorded: gy (N, O, Ho, Wo) -> (N, C, H, W) by
    conv_transpose2d; the rows and columns the floor in Ho, Wo dropped are its
    output_padding (less than the stride)."""
    t, b, left, r = geo.pad
    (sh, sw), (dh, dw) = geo.stride, geo.dilation
    oph = geo.h + t + b - (geo.ho - 1) * sh - dh * (geo.kh - 1) - 1
    opw = geo.w + left + r - (geo.wo - 1) * sw - dw * (geo.kw - 1) - 1
    return conv_transpose2d(gy, w, None, geo.stride, geo.pad, (oph, opw), geo.groups, geo.dilation)


def _graph_forward(x, w, geo):
    """A conv's forward, recorded: x (N, C, H, W) -> (N, O, Ho, Wo), cropped to
    the geometry (a transposed conv's output_padding, when not below its stride,
    adds rows that no output of the conv reads)."""
    y = conv2d(x, w, None, geo.stride, geo.pad, geo.dilation, geo.groups)
    if y.shape[2:] != (geo.ho, geo.wo):
        y = y[:, :, :geo.ho, :geo.wo]
    return y


def _graph_weight_grad(x, gy, geo):
    """A conv's weight gradient, recorded: x (N, C, H, W), gy (N, O, Ho, Wo) ->
    (O, Cg, kh, kw) as one conv2d that sums over images by making them the
    channels, with gy as the kernel (stride and dilation trade places):
    ``gW[o, c, i, j] = sum_{n,p,q} gy[n, o, p, q] * xpad[n, c, p*s + i*d, q*s + j*d]``."""
    cg = geo.c // geo.groups
    # (N, C, H, W) -> (N, G, Cg, H, W) -> (Cg, G, N, H, W) -> (Cg, G*N, H, W)
    xt = x.reshape(geo.n, geo.groups, cg, geo.h, geo.w).transpose(2, 1, 0, 3, 4)
    xt = xt.reshape(cg, geo.groups * geo.n, geo.h, geo.w)
    gt = gy.transpose(1, 0, 2, 3)  # (N, O, Ho, Wo) -> (O, N, Ho, Wo): group gi reads images
    # (Cg, G*N, H, W) * (O, N, Ho, Wo) -> (Cg, O, kh', kw'), kh' >= kh (the floor in Ho
    # leaves room for more offsets); kernel offsets beyond kh are cropped
    gw = conv2d(xt, gt, None, stride=geo.dilation, padding=geo.pad, dilation=geo.stride,
                groups=geo.groups)
    # (Cg, O, kh', kw') -> (Cg, O, kh, kw) -> (O, Cg, kh, kw)
    return gw[:, :, :geo.kh, :geo.kw].transpose(1, 0, 2, 3)


# --------------------------------------------------------------------- ops


def _conv_geom(op, x, w, stride, padding, dilation, groups, xp=None):
    """The geometry of ``conv2d(x, w, ...)``; channels-last where
    ``_conv_blocks.cols_last`` says so for ``xp`` (with no ``xp``: (N, G, Kg, P))."""
    geo = _conv_columns.Geom()
    geo.n, geo.c, geo.h, geo.w = x.shape
    geo.batch = geo.n
    geo.o, _, geo.kh, geo.kw = w.shape
    geo.groups = groups
    geo.stride = pair(stride, "stride", op)
    geo.dilation = pair(dilation, "dilation", op)
    geo.pad = padding4(padding, op, (geo.kh, geo.kw), geo.stride, geo.dilation)
    t, b, left, r = geo.pad
    geo.ho = out_size(op, "height", geo.h, geo.kh, geo.stride[0], t, b, geo.dilation[0])
    geo.wo = out_size(op, "width", geo.w, geo.kw, geo.stride[1], left, r, geo.dilation[1])
    if xp is None:
        geo.cl = False
    else:
        _set_layout(xp, geo)
    return geo


def _set_layout(xp, geo):
    """``geo.cl``: channels-last by blocks (:mod:`._conv_blocks`) from enough channels per
    group up, unless ``geo`` is pointwise (x is its own columns in NCHW)."""
    geo.cl = _conv_blocks.cols_last(xp, geo.c // geo.groups) and not geo.pointwise


def _conv_sizes_agree(geo):
    """Whether the conv of ``geo`` maps its input size to exactly its output size, as
    oneDNN requires. A transposed conv's output_padding can make the adjoint conv's
    input a row or column longer than that (output_padding >= stride, with a dilation
    above it): those take the NumPy path."""
    t, b, left, r = geo.pad
    (sh, sw), (dh, dw) = geo.stride, geo.dilation
    return ((geo.h + t + b - dh * (geo.kh - 1) - 1) // sh + 1 == geo.ho
            and (geo.w + left + r - dw * (geo.kw - 1) - 1) // sw + 1 == geo.wo)


class _Conv(Function):
    """conv2d and conv_transpose2d are each other's adjoints (with respect to the
    input): each one's forward is the other's input gradient. One backward serves
    both; each class's ``grads`` makes its input and weight gradients from what
    its forward saved (``ctx.saved_tensors``: an array for the weight gradient, and
    the weight), and ``graph_grads`` the same as recorded ops (create_graph)."""

    differentiable_twice = True

    @classmethod
    def backward(cls, ctx, gy):
        nx, nw, nb = ctx.needs_input_grad
        if getattr(ctx, "onednn", False):  # set on an entry whose forward ran on oneDNN
            return cls.onednn_grads(ctx, gy, nx, nw, nb)
        if ctx._graph:
            gx, gw = cls.graph_grads(gy, ctx.saved_tensors, ctx.geo, nx, nw)
            return gx, gw, (gy.sum(axis=(0, 2, 3)) if nb else None)
        saved, w = ctx.saved_tensors[:2]
        gx, gw = (laid_out(ctx.xp, g, ctx.geo.fmt)  # the NumPy kernels' in the conv's format
                  for g in cls.grads(ctx.xp, gy, saved, w, ctx.geo, nx, nw))
        return gx, gw, (_bias_grad(ctx.xp, gy) if nb else None)


class Conv2d(_Conv):
    @staticmethod
    def forward(ctx, x, w, b, stride=1, padding=0, dilation=1, groups=1):
        op = "conv2d"
        _check_common(op, x, w, b, groups, 1, 0)
        if w.shape[2] < 1 or w.shape[3] < 1:
            raise ShapeError(f"conv2d: empty kernel in weight {describe(w)}")
        xp = ctx.xp
        geo = _conv_geom(op, x, w, stride, padding, dilation, groups, xp)
        geo.fmt = _memory_format(x, w)
        nx, nw, _ = ctx.needs_input_grad
        if onednn.usable(xp, x, w, b) and _onednn_worth(geo):
            # oneDNN's direct convolution; backward takes x and w themselves (saved as
            # the inputs they are), no columns
            ctx.geo, ctx.onednn = geo, True
            ctx.save_for_backward(x if nw else None, w if nx else None)
            return onednn_conv.conv_forward(x, w, b, geo)
        y = xp.empty((geo.n, geo.o, geo.ho, geo.wo), dtype=x.dtype)
        if geo.cl:  # by blocks; the padded NHWC copy of x is saved for gW
            wmat = _conv_blocks.gemm_weight(xp, w, geo)
            cols = _conv_blocks.padded_buffer(xp, geo, x.dtype)

            def part(lo, hi, p):
                _conv_blocks.nhwc(xp, x[lo:hi], p, cols[lo:hi])
                _conv_blocks.by_blocks(xp, cols[lo:hi], p, wmat=wmat, y=y[lo:hi])
                _add_bias(y[lo:hi], b)
        else:
            wmat = _conv_columns.wmat(w, geo)  # (O, Cg, kh, kw) -> (G, Og, Kg)
            # saved for gW: x's columns, or x itself (pointwise: x is its own columns,
            # saved as the input it is, so an in-place change of x is caught)
            cols = x if geo.pointwise else xp.empty(
                (geo.n, geo.groups, geo.kg, geo.ho * geo.wo), dtype=x.dtype)

            def part(lo, hi, p):
                c = _conv_columns.im2col(xp, x[lo:hi], p, None if geo.pointwise else cols[lo:hi])
                _add_bias(_conv_columns.gemm_forward(xp, c, wmat, p, y[lo:hi]), b)

        _by_images(xp, geo, part)
        ctx.geo = geo
        # x only for a recorded weight gradient that x itself needs a gradient of
        ctx.save_for_backward(cols if nw else None, w if nx else None, x if nx and nw else None)
        return laid_out(xp, y, geo.fmt)

    @staticmethod
    def onednn_grads(ctx, gy, nx, nw, nb):
        """Conv2d's backward where its forward ran on oneDNN: gx by its backward-data and
        gW (with gb) by its backward-weights primitive, or, under create_graph, the same
        recorded ops the NumPy path records (x saved itself, not its columns)."""
        x, w = ctx.saved_tensors
        geo = ctx.geo
        if ctx._graph:
            gx = _graph_input_grad(gy, w, geo) if nx else None
            gw = _graph_weight_grad(x, gy, geo) if nw else None
            return gx, gw, (gy.sum(axis=(0, 2, 3)) if nb else None)
        # in the conv's layout (a broadcast gradient has zero strides)
        gy = as_format(ctx.xp, gy, geo.fmt)
        gx = onednn_conv.conv_backward_data(gy, w, geo) if nx else None
        gw, gb = onednn_conv.conv_backward_weights(x, gy, geo, nb) if nw else (None, None)
        if nb and gb is None:
            gb = _bias_grad(ctx.xp, gy)
        return gx, gw, gb

    @staticmethod
    def grads(xp, gy, cols, w, geo, nx, nw):
        """gx by the adjoint (:func:`_input_grad`), gW from x's saved columns (first:
        its temporaries are gone before gx's are made)."""
        gw = gx = None
        if nw:
            prod = _conv_columns.products_buffer(xp, geo, gy.dtype)
            if geo.pointwise:  # cols: x, (N, C, H, W) -> (N, G, Cg, P)
                cols = _conv_columns.im2col(xp, cols, geo)
            if geo.cl:  # cols: the padded NHWC copy of x
                def part(lo, hi, p):
                    _conv_blocks.by_blocks(xp, cols[lo:hi], p, gy=gy[lo:hi], prod=prod[lo:hi],
                                           kg_rows=_conv_columns.kg_rows(geo))
            else:
                def part(lo, hi, p):
                    _conv_columns.weight_products(xp, gy[lo:hi], cols[lo:hi], p, prod[lo:hi])
            _by_images(xp, geo, part)
            gw = _conv_columns.weight_sum(prod, geo)
            del prod
        if nx:
            gx = xp.empty((geo.n, geo.c, geo.h, geo.w), dtype=gy.dtype)
            _input_grad_by_images(xp, gy, w, geo, gx)
        return gx, gw

    @staticmethod
    def graph_grads(gy, saved, geo, nx, nw):
        """gx by a recorded conv_transpose2d, gW by a recorded conv2d of x and gy
        (or, when x needs no gradient, from its constant columns)."""
        cols, w, x = saved
        gw = None
        if nw and x is None and geo.cl:  # x from its saved NHWC copy (a constant here)
            x = _conv_blocks.unpad(cols, geo)
        if nw:
            gw = (_conv_columns.weight_grad(TensorBackend, gy, cols, geo) if x is None else
                  _graph_weight_grad(x, gy, geo))
        return (_graph_input_grad(gy, w, geo) if nx else None), gw


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation (PyTorch's ``F.conv2d``, MatConvNet's ``vl_nnconv``).

    ``x`` (N, C, H, W), ``weight`` (O, C/groups, kh, kw), ``bias`` (O,) or None.
    ``padding``: int, ``(h, w)``, ``(top, bottom, left, right)``, or PyTorch's
    ``"valid"`` / ``"same"`` (stride 1); ``stride``,
    ``dilation``: int or ``(h, w)``. A filter as large as the padded input is a
    fully-connected layer (output 1x1).

    >>> y = ops.conv2d(x, w, b, stride=2, padding=(1, 0, 1, 0))  # x (8,3,32,32), w (16,3,3,3)
    >>> y.shape                                                    # (8, 16, 16, 16)
    """
    return Conv2d.apply(x, weight, bias, stride=stride, padding=padding, dilation=dilation,
                        groups=groups)


class ConvTranspose2d(_Conv):
    @staticmethod
    def forward(ctx, x, w, b, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
        op = "conv_transpose2d"
        cin, cout = _check_common(op, x, w, b, groups, 0, 1)
        n, _, h, wd = x.shape
        _, _, kh, kw = w.shape
        sh, sw = pair(stride, "stride", op)
        dh, dw = pair(dilation, "dilation", op)
        if isinstance(padding, str):
            raise ArgumentError(f"{op}: padding must be an int, (h, w) or (top, bottom, left, "
                                f"right) (it crops the output), got {padding!r}")
        t, bt, left, r = padding4(padding, op)
        oph, opw = pair(output_padding, "output_padding", op, minimum=0)
        if not (oph < max(sh, dh) and opw < max(sw, dw)):
            raise ArgumentError(f"{op}: output_padding {(oph, opw)} must be smaller than "
                                f"stride {(sh, sw)} or dilation {(dh, dw)} along each axis")
        hout = (h - 1) * sh + dh * (kh - 1) + 1 + oph - t - bt
        wout = (wd - 1) * sw + dw * (kw - 1) + 1 + opw - left - r
        if hout <= 0 or wout <= 0:
            raise ShapeError(f"{op}: output size would be {(hout, wout)} for input "
                             f"{describe(x)}, weight {describe(w)}, stride {(sh, sw)}, "
                             f"padding/crop {(t, bt, left, r)}: crop less")
        # the conv2d whose input gradient this is: cout -> cin channels, hout -> h
        geo = _conv_columns.Geom()
        geo.n, geo.c, geo.h, geo.w, geo.o = n, cout, hout, wout, cin
        geo.kh, geo.kw, geo.groups = kh, kw, groups
        geo.batch = n
        geo.stride, geo.dilation, geo.pad = (sh, sw), (dh, dw), (t, bt, left, r)
        geo.ho, geo.wo = h, wd
        geo.fmt = _memory_format(x, w)
        xp = ctx.xp
        _set_layout(xp, geo)
        nx, nw, _ = ctx.needs_input_grad
        ctx.geo = geo
        ctx.save_for_backward(x if nw else None, w if nx else None)  # x: for the weight grad
        if onednn.usable(xp, x, w, b) and _onednn_worth(geo) and _conv_sizes_agree(geo):
            ctx.onednn = True  # the conv's backward-data primitive, x as its output gradient
            y = onednn_conv.conv_backward_data(x, w, geo)
            if b is not None:
                y += b.reshape(1, -1, 1, 1)
            return y
        y = xp.empty((n, cout, hout, wout), dtype=x.dtype)
        _input_grad_by_images(xp, x, w, geo, y, b)
        return laid_out(xp, y, geo.fmt)

    @staticmethod
    def onednn_grads(ctx, gy, nx, nw, nb):
        """Where the forward ran on oneDNN: gx by the conv's forward primitive on gy, gW
        by its backward-weights primitive with gy as its input and x as its output
        gradient (under create_graph, the recorded ops of :meth:`graph_grads`)."""
        x, w = ctx.saved_tensors
        geo = ctx.geo
        if ctx._graph:
            gx, gw = ConvTranspose2d.graph_grads(gy, (x, w), geo, nx, nw)
            return gx, gw, (gy.sum(axis=(0, 2, 3)) if nb else None)
        gy = as_format(ctx.xp, gy, geo.fmt)  # (a broadcast gradient has zero strides)
        gx = onednn_conv.conv_forward(gy, w, None, geo) if nx else None
        gw = onednn_conv.conv_backward_weights(gy, x, geo, False)[0] if nw else None
        return gx, gw, (_bias_grad(ctx.xp, gy) if nb else None)

    @staticmethod
    def graph_grads(gy, saved, geo, nx, nw):
        """The same by a recorded conv2d of gy, and :func:`_graph_weight_grad` with
        gy as the conv's input and x as its output gradient."""
        x, w = saved
        return (_graph_forward(gy, w, geo) if nx else None,
                _graph_weight_grad(gy, x, geo) if nw else None)

    @staticmethod
    def grads(xp, gy, x, w, geo, nx, nw):
        """gx is the conv's forward of gy, gW the conv's weight gradient with x as its
        output gradient: both from gy's columns."""
        if not (nx or nw):
            return None, None
        # per chunk of images: gy's columns (N, Cout, Hout, Wout) -> (N, G, Kg, H*W), then
        # gx = (G, Cin/G, Kg) @ cols -> (N, Cin, H, W) and x's weight products
        gx = xp.empty((geo.n, geo.o, geo.ho, geo.wo), dtype=gy.dtype) if nx else None
        prod = _conv_columns.products_buffer(xp, geo, gy.dtype) if nw else None
        if geo.cl:  # by blocks of gy's columns, both products from each block
            wmat = _conv_blocks.gemm_weight(xp, w, geo) if nx else None

            def part(lo, hi, p):
                _conv_blocks.by_blocks(xp, _conv_blocks.nhwc(xp, gy[lo:hi], p), p, wmat=wmat,
                                       y=gx[lo:hi] if nx else None,
                                       gy=x[lo:hi] if nw else None,
                                       prod=prod[lo:hi] if nw else None,
                                       kg_rows=_conv_columns.kg_rows(geo))
        else:  # (pointwise: gy is its own columns)
            cols = None if geo.pointwise else xp.empty(
                (geo.n, geo.groups, geo.kg, geo.ho * geo.wo), gy.dtype)
            wmat = _conv_columns.wmat(w, geo) if nx else None

            def part(lo, hi, p):
                c = _conv_columns.im2col(xp, gy[lo:hi], p, None if cols is None else cols[lo:hi])
                if nx:
                    _conv_columns.gemm_forward(xp, c, wmat, p, gx[lo:hi])
                if nw:
                    _conv_columns.weight_products(xp, x[lo:hi], c, p, prod[lo:hi])

        _by_images(xp, geo, part)
        return gx, (_conv_columns.weight_sum(prod, geo) if nw else None)  # -> (Cin, Cout/G, kh, kw)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """Transposed convolution (PyTorch's ``F.conv_transpose2d``): the adjoint of
    ``conv2d`` with respect to its input, plus bias.

    ``x`` (N, Cin, H, W), ``weight`` (Cin, Cout/groups, kh, kw). Output height
    ``(H-1)*stride - top - bottom + dilation*(kh-1) + 1 + output_padding``.
    ``padding`` (int, ``(h, w)`` or ``(top, bottom, left, right)``) crops the output.

    MatConvNet's ``vl_nnconvt(X, F, B, 'Upsample', UP, 'Crop', [T B L R],
    'NumGroups', G)`` is ``conv_transpose2d(x, w, b, stride=UP, padding=(T, B, L, R),
    groups=G)``: output height ``UP*(H-1) + FH - T - B``. Its filters
    ``F (FH, FW, K, D)`` become ``w = F.transpose(3, 2, 0, 1)``, and its
    ``X (H, W, D, N)`` is ``x = X.transpose(3, 2, 0, 1)``.

    >>> y = ops.conv_transpose2d(x, w, stride=2, padding=(1, 0, 1, 0))  # x (1,4,5,5), w (4,2,3,3)
    >>> y.shape                                                          # (1, 2, 10, 10)
    """
    return ConvTranspose2d.apply(x, weight, bias, stride=stride, padding=padding,
                                 output_padding=output_padding, groups=groups,
                                 dilation=dilation)
