"""Geometry shared by convolution and pooling: output sizes and strided
window views (im2col without a copy). Their arguments (kernel, stride,
padding) are parsed by :func:`tapegrad.args.pair` and :func:`tapegrad.args.padding4`.
"""

from __future__ import annotations

import math

from ..args import padding4, pair  # noqa: F401  (re-exported until ops/conv.py imports args)
from ..errors import ShapeError


def out_size(op: str, axis: str, size: int, kernel: int, stride: int, pad_before: int,
             pad_after: int, dilation: int = 1, ceil_mode: bool = False) -> int:
    """Output length along one axis: floor (PyTorch, MatConvNet) or ceil (Caffe
    pooling) of ``(size + pads - dilation*(kernel-1) - 1) / stride + 1``.

    With ``ceil_mode`` the last window must still start inside the input or
    the leading padding (PyTorch's and Caffe's rule), so it is never all padding.
    """
    span = dilation * (kernel - 1) + 1
    padded = size + pad_before + pad_after
    if span > padded:
        raise ShapeError(f"{op}: the kernel covers {span} along {axis} (kernel {kernel}, "
                         f"dilation {dilation}) but the padded input is only {padded} "
                         f"({size} + padding {pad_before}+{pad_after}); use a smaller kernel "
                         "or more padding")
    if ceil_mode:
        n = math.ceil((padded - span) / stride) + 1
        if (n - 1) * stride >= size + pad_before:
            n -= 1
    else:
        n = (padded - span) // stride + 1
    if n <= 0:
        raise ShapeError(f"{op}: output size along {axis} would be {n}")
    return n


def sliding_windows(xp, x, kernel, stride, dilation=(1, 1)):
    """A read-only view of every window of ``x`` (already padded):

        (N, C, H, W) -> (N, C, Ho, Wo, kh, kw)

    No copy is made; reshaping the view (for a GEMM) makes the im2col copy.
    """
    n, c, h, w = x.shape
    kh, kw = kernel
    sh, sw = stride
    dh, dw = dilation
    ho = (h - dh * (kh - 1) - 1) // sh + 1
    wo = (w - dw * (kw - 1) - 1) // sw + 1
    s0, s1, s2, s3 = x.strides
    return strided_view(xp, x, (n, c, ho, wo, kh, kw), (s0, s1, s2 * sh, s3 * sw, s2 * dh, s3 * dw))


def strided_view(xp, x, shape, strides):
    """``as_strided``, read-only where the array module allows it (NumPy)."""
    if xp.__name__ == "numpy":  # CuPy's as_strided has no `writeable`
        return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides, writeable=False)
    return xp.lib.stride_tricks.as_strided(x, shape=shape, strides=strides)
