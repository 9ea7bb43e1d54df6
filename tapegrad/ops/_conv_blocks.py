"""Channels-last convolution on the host, by blocks of output rows (``conv.py``'s
layout for inputs of many channels).

The conv's input is copied once into a padded NHWC array ``xh`` (N, Hp, Wp, C);
its windows, viewed as (N, Ho, Wo, kh, kw, G, Cg), give each output pixel's
patch as one row of Cg-long contiguous runs (kw*Cg long at dilation 1): the
channels-last columns (G, Ho*Wo, Kg), Kg ordered (kh, kw, Cg). They are never
written for the whole batch. Per image, the columns of a few output rows at a
time are copied into one small buffer, and every product that needs them runs
while the buffer is in cache:

* forward        ``y  = cols @ W^T``      ``(G, m, Kg) @ (G, Kg, Og) -> (G, m, Og)``, one
  image's result then copied transposed into NCHW
* weight grad    ``gW_n = sum_blocks cols^T @ gy^T`` per image (or ``gy @ cols``),
  summed over images after the join, in order, as ``_conv_columns.weight_sum`` does

``xh`` is what the tape saves for the weight gradient, 1/(kh*kw) of the columns.
Why (docs/performance.md): OpenBLAS's SkylakeX SGEMM runs ``cols @ W^T`` 1.4x faster than
``W @ cols`` on these shapes; reading the columns back from cache rather than
from memory makes both GEMMs faster than with the columns saved, even with the
im2col copy made twice; and the NCHW im2col copies rows of Wo values, where
these copy rows of Cg. Below ``MIN_CG`` channels per group those rows are too
short (C=3: the op 1.2x slower), and conv.py keeps its (N, G, Kg, P) columns.

Blocks depend on the geometry only, never on the chunk of images a thread has,
so every thread count makes the same BLAS calls and gives the same bits.
"""

from __future__ import annotations

from ..device import kernels
from ._windows import strided_view

# Channels-last pays from about 12 channels per group up (the conv op fwd+bwd,
# 1 and 2 threads); 8 was even, 4 and 3 slower.
MIN_CG = 12

# The block buffer's size: with the weight it stays in L2 (2 MiB per core on the
# Xeon measured, 512 KiB on Zen 3). 128 KiB was as fast at 1 thread but 2-7% slower
# at 2: 4x the Python-level calls, two threads taking turns at the GIL between them.
BLOCK_BYTES = 512 << 10


def cols_last(xp, cg):
    """Whether a conv whose columns have ``cg`` input channels per group goes
    channels-last here. A host layout: on CUDA the im2col kernel writes (N, G, Kg, P)."""
    return cg >= MIN_CG and not kernels.on_cuda(xp)


def gemm_weight(xp, w, geo):
    """The weight as the forward GEMM's right operand: (O, Cg, kh, kw) ->
    (G, Og, Cg, kh, kw) -> (G, kh, kw, Cg, Og) -> (G, Kg, Og), a copy."""
    og, cg = geo.o // geo.groups, geo.c // geo.groups
    t = w.reshape(geo.groups, og, cg, geo.kh, geo.kw).transpose(0, 3, 4, 2, 1)
    return xp.ascontiguousarray(t).reshape(geo.groups, geo.kg, og)


def padded_buffer(xp, geo, dtype):
    """An uninitialised array for :func:`nhwc` of the whole batch, (N, Hp, Wp, C)."""
    t, b, left, r = geo.pad
    return xp.empty((geo.n, geo.h + t + b, geo.w + left + r, geo.c), dtype=dtype)


def nhwc(xp, x, geo, out=None):
    """x (N, C, H, W) -> xh (N, Hp, Wp, C), zero-padded, written into ``out`` (from
    :func:`padded_buffer`, or a slice of its images) or a new array. Only the padding
    is zeroed, by each chunk of images for its own (a whole-batch ``zeros`` in the
    caller took 0.4 ms of conv 32x32x32's 10 ms forward, before the split)."""
    t, b, left, r = geo.pad
    if out is None:
        out = padded_buffer(xp, geo, x.dtype)
    hp, wp = out.shape[1:3]
    out[:, t:t + geo.h, left:left + geo.w] = x.transpose(0, 2, 3, 1)
    for rows, cols in (((0, t), (0, wp)), ((hp - b, hp), (0, wp)),
                       ((t, hp - b), (0, left)), ((t, hp - b), (wp - r, wp))):
        if rows[1] > rows[0] and cols[1] > cols[0]:
            out[:, rows[0]:rows[1], cols[0]:cols[1]] = 0
    return out


def unpad(xh, geo):
    """xh (N, Hp, Wp, C) -> x (N, C, H, W), a view."""
    t, _, left, _ = geo.pad
    return xh[:, t:t + geo.h, left:left + geo.w].transpose(0, 3, 1, 2)


def _windows(xp, xh, geo):
    """xh (N, Hp, Wp, C) -> a view (N, Ho, Wo, kh, kw, G, Cg) of every window. Ho fits
    the padded rows (a transposed conv's output_padding may leave more, which no
    output reads)."""
    s0, s1, s2, s3 = xh.strides
    (sh, sw), (dh, dw), cg = geo.stride, geo.dilation, geo.c // geo.groups
    return strided_view(xp, xh, (geo.n, geo.ho, geo.wo, geo.kh, geo.kw, geo.groups, cg),
                        (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3 * cg, s3))


def block_shape(geo, itemsize):
    """``(rows, images)`` per block: at most BLOCK_BYTES of columns. Large images go
    by blocks of output rows, as even as they can be (14 + 14 + 4 rows become
    11 + 11 + 10); small ones whole, several images a block (LeNet's second conv: 4),
    so that there are fewer Python-level calls. Each BLAS call still covers one image
    (a batched matmul), so the grouping does not change any bits."""
    image = geo.wo * geo.groups * geo.kg * itemsize  # one output row's columns
    most = max(1, BLOCK_BYTES // image)
    if most < geo.ho:
        count = -(-geo.ho // most)
        return -(-geo.ho // count), 1
    return geo.ho, max(1, min(geo.n, most // geo.ho))


def by_blocks(xp, xh, geo, wmat=None, y=None, gy=None, prod=None, kg_rows=True):
    """Images of ``xh`` (N, Hp, Wp, C), block by block (:func:`block_shape`):

    * with ``wmat`` (:func:`gemm_weight`): the forward into ``y`` (N, O, Ho, Wo);
    * with ``gy`` (N, O, Ho, Wo): each image's weight product into ``prod``,
      (N, G, Kg, Og) if ``kg_rows`` else (N, G, Og, Kg), its blocks' products added
      in order.
    """
    win = _windows(xp, xh, geo)  # (N, Ho, Wo, kh, kw, G, Cg)
    og, cg, p = geo.o // geo.groups, geo.c // geo.groups, geo.ho * geo.wo
    rows, imgs = block_shape(geo, xh.dtype.itemsize)
    buf = xp.empty((geo.groups, imgs, rows * geo.wo, geo.kg), dtype=xh.dtype)
    bufv = buf.reshape(geo.groups, imgs, rows, geo.wo, geo.kh, geo.kw, cg)
    if wmat is not None:
        # the block's images' (G, ., P, Og)
        ym = xp.empty((geo.groups, imgs, p, og), dtype=xh.dtype)
        yv = y.reshape(geo.n, geo.groups, og, p)
        wmat = wmat[:, None]  # (G, 1, Kg, Og): one GEMM per group and image
    if gy is not None:
        gyv = gy.reshape(geo.n, geo.groups, og, p)
        # (N, G, ., .) -> (G, N, ., .), a view: the products' out per block
        prodv = prod.transpose(1, 0, 2, 3)
        tmp = (xp.empty((geo.groups, 1) + prod.shape[2:], dtype=prod.dtype)
               if rows < geo.ho else None)
    for n0 in range(0, geo.n, imgs):
        n1 = min(geo.n, n0 + imgs)
        k = n1 - n0
        for r0 in range(0, geo.ho, rows):
            r1 = min(geo.ho, r0 + rows)
            p0, p1 = r0 * geo.wo, r1 * geo.wo
            # (k, rows, Wo, kh, kw, G, Cg) -> (G, k, rows, Wo, kh, kw, Cg), i.e. (G, k, m, Kg)
            bufv[:, :k, :r1 - r0] = win[n0:n1, r0:r1].transpose(5, 0, 1, 2, 3, 4, 6)
            cols = buf[:, :k, :p1 - p0]
            if wmat is not None:  # (G, k, m, Kg) @ (G, 1, Kg, Og) -> (G, k, m, Og)
                xp.matmul(cols, wmat, out=ym[:, :k, p0:p1])
            if gy is not None:
                gb = gyv[n0:n1, :, :, p0:p1].transpose(1, 0, 2, 3)  # (G, k, Og, m)
                # (G, k, Kg, m) @ (G, k, m, Og) -> (G, k, Kg, Og), or (G, k, Og, m) @
                # (G, k, m, Kg) -> (G, k, Og, Kg)
                a, b = ((cols.transpose(0, 1, 3, 2), gb.transpose(0, 1, 3, 2)) if kg_rows
                        else (gb, cols))
                if r0 == 0:
                    xp.matmul(a, b, out=prodv[:, n0:n1])
                else:  # one image (rows < Ho)
                    xp.matmul(a, b, out=tmp)
                    prodv[:, n0:n1] += tmp
        if wmat is not None:  # (G, k, P, Og) -> (k, G, Og, P)
            yv[n0:n1] = ym[:, :k].transpose(1, 0, 3, 2)
