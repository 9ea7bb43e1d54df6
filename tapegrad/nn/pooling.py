"""Max and average pooling layers: fixed windows, and adaptive (fixed output size)."""

from __future__ import annotations

from .. import ops
from .module import Module

__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d"]


class MaxPool2d(Module):
    """Max over ``kernel_size`` windows (stride defaults to the kernel size).
    ``ceil_mode=True`` gives Caffe's output size.

    >>> nn.MaxPool2d(2)(tapegrad.zeros(1, 3, 8, 8)).shape   # (1, 3, 4, 4)
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode

    def forward(self, x):
        return ops.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """Mean over ``kernel_size`` windows; ``count_include_pad`` decides whether
    padded zeros count in the divisor.

    >>> nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False)
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, x):
        return ops.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                              self.count_include_pad)

    def extra_repr(self):
        s = f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
        if self.ceil_mode:
            s += ", ceil_mode=True"
        if not self.count_include_pad:
            s += ", count_include_pad=False"
        return s


class AdaptiveAvgPool2d(Module):
    """Average pooling to a fixed ``output_size`` (an int, or ``(h, w)`` where
    None keeps that size), whatever the input size: PyTorch's bins.

    >>> nn.AdaptiveAvgPool2d((1, 1))(tapegrad.zeros(2, 512, 7, 7)).shape   # (2, 512, 1, 1)
    """

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return ops.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveMaxPool2d(Module):
    """Max pooling to a fixed ``output_size`` (as :class:`AdaptiveAvgPool2d`);
    ``return_indices=True`` also returns each maximum's flat index in its plane.

    >>> y, idx = nn.AdaptiveMaxPool2d(3, return_indices=True)(tapegrad.zeros(1, 2, 7, 7))
    """

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, x):
        return ops.adaptive_max_pool2d(x, self.output_size, self.return_indices)

    def extra_repr(self):
        return f"output_size={self.output_size}"
