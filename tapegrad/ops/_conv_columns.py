"""The (N, G, Cg*kh*kw, Ho*Wo) columns of ``conv.py``'s NCHW layout: the
geometry of a convolution, im2col and col2im, and the per-image GEMMs of the
forward and the weight products (how and why: ``conv.py``'s docstring).

All of them work on the geometry of a *convolution* x -> y; conv_transpose2d
uses them with its own input as "y" and its output as "x". Large temporaries
are plain allocations: tapegrad.device.host_memory keeps them in the malloc
heap, so they do not page-fault on every call.
"""

from __future__ import annotations

from ..device import kernels
from . import _cuda_conv
from ._windows import sliding_windows


class Geom:
    """The geometry of one convolution ``x (N, C, H, W) * w (O, C/G, kh, kw)
    -> y (N, O, Ho, Wo)`` (for a transposed conv: the conv it is the adjoint of)."""

    __slots__ = ("n", "c", "h", "w", "o", "kh", "kw", "groups", "stride", "dilation", "pad",
                 "ho", "wo", "batch", "cl", "fmt")
    # batch: the whole batch's N. A kernel that picks its branch by the batch size reads
    # this, never ``n`` (which is a chunk's, under ``conv._by_images``), so that every
    # thread count computes the same way and gives the same bits.
    # cl: the conv goes channels-last by blocks (_conv_blocks) rather than by
    # (N, G, Kg, P) columns; set by ``conv._set_layout`` where the geometry is made.
    # fmt: the memory format of the conv op's output and gradients
    # (``conv._memory_format``), set by the op; the kernels here compute in C order.

    def padded_shape(self):
        t, b, left, r = self.pad
        return (self.n, self.c, self.h + t + b, self.w + left + r)

    @property
    def pointwise(self):
        """A 1x1 kernel at stride 1 with no padding: x (N, C, H, W) is its own columns,
        viewed as (N, G, Cg, H*W), so no im2col copy and no col2im scatter are made
        (:func:`im2col`, ``conv._input_grad``)."""
        return (self.kh == self.kw == 1 and self.stride == (1, 1) and not any(self.pad)
                and (self.ho, self.wo) == (self.h, self.w))

    @property
    def kg(self):
        """Rows of one group's columns, ``Cg*kh*kw``. Every reshape here spells its
        sizes out: NumPy cannot infer a ``-1`` once any axis is 0 (an empty batch,
        no output channels)."""
        return self.c // self.groups * self.kh * self.kw


def wmat(w, geo):
    """(O, Cg, kh, kw) -> (G, Og, Kg): the weight as one matrix per group."""
    return w.reshape(geo.groups, geo.o // geo.groups, geo.kg)


def im2col(xp, x, geo, out=None):
    """x (N, C, H, W) -> cols (N, G, Cg*kh*kw, Ho*Wo), contiguous (written into
    ``out`` when given: a contiguous array of that shape). A pointwise ``geo`` with no
    ``out``: x itself, reshaped (a view when x is contiguous)."""
    if geo.pointwise and out is None:  # (N, C, H, W) -> (N, G, Cg, H*W)
        return x.reshape(geo.n, geo.groups, geo.kg, geo.ho * geo.wo)
    if kernels.on_cuda(xp):  # one RawKernel pass, no padded copy (ops/_cuda_conv.py)
        return _cuda_conv.im2col(xp, x, geo, out)
    t, b, left, r = geo.pad
    if t or b or left or r:
        xpad = xp.zeros(geo.padded_shape(), dtype=x.dtype)
        xpad[:, :, t:t + geo.h, left:left + geo.w] = x
    else:
        xpad = x
    win = sliding_windows(xp, xpad, (geo.kh, geo.kw), geo.stride, geo.dilation)
    # (N, C, Ho', Wo', kh, kw) -> (N, C, Ho, Wo, kh, kw): a transposed conv's output_padding
    # (when smaller than the dilation) can leave rows no input pixel reaches
    win = win[:, :, :geo.ho, :geo.wo]
    if out is None:
        out = xp.empty((geo.n, geo.groups, geo.kg, geo.ho * geo.wo), dtype=x.dtype)
    # one copy, written in order: (N, C, Ho, Wo, kh, kw) -> (N, C, kh, kw, Ho, Wo), which is
    # (N, G, Cg*kh*kw, Ho*Wo)
    out.reshape(geo.n, geo.c, geo.kh, geo.kw, geo.ho, geo.wo)[...] = win.transpose(0, 1, 4, 5, 2, 3)
    return out


def _span(start, step, count, pad, size):
    """The outputs ``r`` in ``[0, count)`` whose input row ``start + r*step - pad``
    lies in ``[0, size)``, and those input rows: ``(slice of r, slice of rows)``,
    or None if there are none."""
    r0 = max(0, -(-(pad - start) // step))
    r1 = min(count, -(-(size + pad - start) // step))
    if r0 >= r1:
        return None
    first = start + r0 * step - pad
    return slice(r0, r1), slice(first, first + step * (r1 - r0 - 1) + 1, step)


def offsets(geo):
    """col2im's loop: for each kernel offset ``(i, j)`` that reaches the unpadded
    input, ``(i, j, out_rows, out_cols, in_rows, in_cols)`` -- the output pixels
    whose window puts offset ``(i, j)`` inside the input, and the input pixels
    they read there, as slices (strided by the stride)."""
    t, _, left, _ = geo.pad
    sh, sw = geo.stride
    dh, dw = geo.dilation
    rows = [_span(i * dh, sh, geo.ho, t, geo.h) for i in range(geo.kh)]
    cols = [_span(j * dw, sw, geo.wo, left, geo.w) for j in range(geo.kw)]
    for i, r in enumerate(rows):
        if r is None:
            continue
        for j, c in enumerate(cols):
            if c is not None:
                yield i, j, r[0], c[0], r[1], c[1]


def col2im(xp, gcols, geo, dtype, out=None):
    """gcols (N, G, Cg*kh*kw, Ho*Wo) -> gx (N, C, H, W), contiguous (or ``out``):
    each window's column added back where it came from, one strided add per
    kernel offset, clipped to the unpadded input (no padded buffer, no crop copy)."""
    if kernels.on_cuda(xp):  # a gather per input pixel, same order (ops/_cuda_conv.py)
        return _cuda_conv.col2im(xp, gcols, geo, dtype, out)
    # (N, G, Cg*kh*kw, Ho*Wo) -> (N, C, kh, kw, Ho, Wo)
    gcols = gcols.reshape(geo.n, geo.c, geo.kh, geo.kw, geo.ho, geo.wo)
    if out is None:
        gx = xp.zeros((geo.n, geo.c, geo.h, geo.w), dtype=dtype)
    else:
        gx = out
        gx[...] = 0
    for i, j, ro, co, ri, ci in offsets(geo):
        gx[:, :, ri, ci] += gcols[:, :, i, j, ro, co]
    return gx


def gemm_forward(xp, cols, wmat, geo, out=None):
    """(G, Og, Kg) @ (N, G, Kg, P) -> (N, G, Og, P) -> (N, O, Ho, Wo), contiguous
    (or ``out``): one BLAS GEMM per image (numpy's matmul loops over N in C)."""
    if out is None:
        ym = xp.matmul(wmat, cols)
    else:  # (N, O, Ho, Wo) -> (N, G, Og, P), a view of out
        ym = xp.matmul(wmat, cols, out=out.reshape(geo.n, geo.groups, geo.o // geo.groups,
                                                   geo.ho * geo.wo))
    # (N, G, Og, P) -> (N, O, Ho, Wo)
    return ym.reshape(geo.n, geo.o, geo.ho, geo.wo)


def weight_products(xp, gy, cols, geo, out=None):
    """Each image's share of the weight gradient, ``gy @ cols^T`` per image:
    gy (N, O, Ho, Wo), cols (N, G, Kg, P) -> (N, G, Og, Kg), or (N, G, Kg, Og)
    when Kg is much larger than Og (the orientation OpenBLAS runs faster);
    :func:`weight_sum` adds them up. Written into ``out`` when given."""
    og = geo.o // geo.groups
    gm = gy.reshape(geo.n, geo.groups, og, geo.ho * geo.wo)  # (N, O, Ho, Wo) -> (N, G, Og, P)
    # (N, G, Kg, P) @ (N, G, P, Og) -> (N, G, Kg, Og), or (N, G, Og, P) @ (N, G, P, Kg)
    # -> (N, G, Og, Kg)
    a, b = (cols, gm) if kg_rows(geo) else (gm, cols)
    b = b.transpose(0, 1, 3, 2)
    return xp.matmul(a, b) if out is None else xp.matmul(a, b, out=out)


def kg_rows(geo):
    return geo.kg >= 4 * (geo.o // geo.groups)


def products_buffer(xp, geo, dtype):
    """An uninitialised array for :func:`weight_products` of the whole batch."""
    og = geo.o // geo.groups
    rows = (geo.kg, og) if kg_rows(geo) else (og, geo.kg)
    return xp.empty((geo.n, geo.groups) + rows, dtype=dtype)


def weight_sum(prod, geo):
    """:func:`weight_products` (N, G, ., .) summed over images, in order ->
    gW (O, Cg, kh, kw)."""
    gw = prod.sum(axis=0)
    if kg_rows(geo):  # (G, Kg, Og) -> (G, Og, Kg)
        gw = gw.transpose(0, 2, 1)
    if geo.cl:  # Kg in (kh, kw, Cg) order (_conv_blocks): (G, Og, Kg) -> (G, Og, kh, kw, Cg)
        # -> (G, Og, Cg, kh, kw), copied by the reshape below
        gw = gw.reshape(geo.groups, geo.o // geo.groups, geo.kh, geo.kw,
                        geo.c // geo.groups).transpose(0, 1, 4, 2, 3)
    return gw.reshape(geo.o, geo.c // geo.groups, geo.kh, geo.kw)  # (G, Og, Kg) -> (O, Cg, kh, kw)


def weight_grad(xp, gy, cols, geo):
    """gW = sum over images of gy @ cols^T: gy (N, O, Ho, Wo), cols (N, G, Kg, P)
    (pointwise: x (N, C, H, W), which is its own columns) -> (O, Cg, kh, kw)."""
    if geo.pointwise:
        cols = im2col(xp, cols, geo)
    return weight_sum(weight_products(xp, gy, cols, geo), geo)
