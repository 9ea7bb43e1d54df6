"""Resampling layers: upsampling (interpolation) and pixel (un)shuffle."""

from __future__ import annotations

import numbers

from .. import ops
from ..ops.resample import check_interpolate_options
from .module import Module

__all__ = ["Upsample", "PixelShuffle", "PixelUnshuffle"]


def _as_float(v):
    """PyTorch keeps scale factors as floats (``Upsample(scale_factor=2.0, ...)``)."""
    return float(v) if isinstance(v, numbers.Real) and not isinstance(v, bool) else v


class Upsample(Module):
    """:func:`tapegrad.ops.interpolate` as a layer: to ``size`` or by
    ``scale_factor``, ``mode`` ``"nearest"``, ``"nearest-exact"``,
    ``"bilinear"`` or ``"area"``. The options are checked when it is built.

    >>> nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
    """

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        check_interpolate_options("Upsample", size, scale_factor, mode, align_corners,
                                  recompute_scale_factor)
        self.size = size
        self.scale_factor = (tuple(_as_float(v) for v in scale_factor)
                             if isinstance(scale_factor, (tuple, list)) else
                             _as_float(scale_factor))
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, x):
        return ops.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                               self.recompute_scale_factor)

    def extra_repr(self):
        if self.scale_factor is not None:
            return f"scale_factor={self.scale_factor!r}, mode={self.mode!r}"
        return f"size={self.size!r}, mode={self.mode!r}"


class PixelShuffle(Module):
    """Channels to space: ``(N, C*r*r, H, W) -> (N, C, H*r, W*r)`` with
    ``r = upscale_factor``.

    >>> nn.PixelShuffle(3)(tapegrad.zeros(1, 9, 4, 4)).shape   # (1, 1, 12, 12)
    """

    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x):
        return ops.pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self):
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    """Space to channels, the inverse of :class:`PixelShuffle`:
    ``(N, C, H*r, W*r) -> (N, C*r*r, H, W)`` with ``r = downscale_factor``.

    >>> nn.PixelUnshuffle(2)(tapegrad.zeros(1, 1, 4, 4)).shape   # (1, 4, 2, 2)
    """

    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x):
        return ops.pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self):
        return f"downscale_factor={self.downscale_factor}"
