"""2-D convolution and transposed convolution layers."""

from __future__ import annotations

from .. import ops
from ..args import padding4, pair
from ..errors import ArgumentError
from ._util import default_reset, new_param
from .module import Module

__all__ = ["Conv2d", "ConvTranspose2d"]


def _check_groups(name, in_channels, out_channels, groups):
    if groups < 1 or in_channels % groups or out_channels % groups:
        raise ArgumentError(f"{name}: in_channels ({in_channels}) and out_channels "
                            f"({out_channels}) must both be divisible by groups ({groups})")


class _ConvBase(Module):
    _same = False  # takes padding="same"/"valid" (not ConvTranspose2d: its padding crops)

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 groups, bias, wshape, device, dtype):
        super().__init__()
        _check_groups(type(self).__name__, in_channels, out_channels, groups)
        self.in_channels = in_channels
        self.out_channels = out_channels
        name = type(self).__name__
        # the op's own parsers, so that a layer takes exactly what its op takes
        self.kernel_size = pair(kernel_size, "kernel_size", name)
        self.stride = pair(stride, "stride", name)
        self.dilation = pair(dilation, "dilation", name)
        geometry = (self.kernel_size, self.stride, self.dilation) if self._same else ()
        pad = padding4(padding, name, *geometry)
        # kept as given: "same"/"valid", (ph, pw) when symmetric, else (top, bottom, left, right)
        self.padding = padding if isinstance(padding, str) else (
            pad[0::2] if pad[0::2] == pad[1::2] else pad)
        self.groups = groups
        self.weight = new_param(wshape + self.kernel_size, device, dtype)
        if bias:
            self.bias = new_param((out_channels,), device, dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        default_reset(self.weight, self.bias)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding not in ((0, 0), (0, 0, 0, 0), "valid"):
            s += f", padding={self.padding}"
        if getattr(self, "output_padding", (0, 0)) != (0, 0):
            s += f", output_padding={self.output_padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv2d(_ConvBase):
    """2-D cross-correlation over (N, C, H, W) input (Caffe's Convolution).

    ``weight`` is (out_channels, in_channels // groups, kh, kw).

    >>> nn.Conv2d(1, 20, 5)(tapegrad.zeros(64, 1, 28, 28)).shape   # (64, 20, 24, 24)
    """

    _same = True

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, (out_channels, in_channels // max(groups, 1)), device,
                         dtype)

    def forward(self, x):
        return ops.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                          self.groups)


class ConvTranspose2d(_ConvBase):
    """Transposed convolution (Caffe's Deconvolution): the gradient of Conv2d
    with respect to its input. ``weight`` is (in_channels, out_channels //
    groups, kh, kw); as in PyTorch its fan-in for init is computed from that
    shape (axis 1 times the kernel area).

    >>> nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1)   # 2x upsampling
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1, device=None,
                 dtype=None):
        out_pad = pair(output_padding, "output_padding", "ConvTranspose2d", minimum=0)
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, (in_channels, out_channels // max(groups, 1)), device,
                         dtype)
        self.output_padding = out_pad

    def forward(self, x):
        return ops.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                    self.output_padding, self.groups, self.dilation)
