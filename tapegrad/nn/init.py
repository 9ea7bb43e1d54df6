"""Weight initialisations (PyTorch's ``torch.nn.init`` formulas).

Every function fills a Tensor in place from the global generator of the
tensor's device (see :func:`tapegrad.manual_seed`), records nothing on the
tape, bumps the tensor's version, and returns the tensor.

>>> nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
"""

from __future__ import annotations

import math

from ..errors import ArgumentError, ShapeError
from ..random import get_generator

__all__ = ["calculate_gain", "calculate_fan_in_and_fan_out", "uniform_", "normal_",
           "constant_", "zeros_", "ones_", "xavier_uniform_", "xavier_normal_",
           "kaiming_uniform_", "kaiming_normal_"]


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for a nonlinearity (``relu``: sqrt(2), ``tanh``: 5/3,
    ``leaky_relu``: sqrt(2 / (1 + slope**2)), linear/conv/sigmoid: 1, ``selu``: 3/4)."""
    linear = {"linear", "identity", "sigmoid", "conv1d", "conv2d", "conv3d",
              "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"}
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, bool) or not isinstance(param, (int, float)):
            raise ArgumentError(f"calculate_gain: negative_slope {param!r} is not a number")
        else:
            slope = float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ArgumentError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def calculate_fan_in_and_fan_out(tensor):
    """``(fan_in, fan_out)``: axis 1 and axis 0 times the receptive field
    (the product of the remaining axes); needs at least 2 axes."""
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        raise ShapeError(f"fan in/out needs a tensor with at least 2 axes, got shape {shape}")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _fan(tensor, mode):
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    if mode == "fan_in":
        return fan_in
    if mode == "fan_out":
        return fan_out
    raise ArgumentError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")


def _write(tensor, values):
    dev = tensor.device
    with dev.use():
        tensor.data[...] = values.astype(tensor.dtype, copy=False)
    tensor._bump_version()
    return tensor


def uniform_(tensor, a: float = 0.0, b: float = 1.0):
    """Fill with samples from U(a, b)."""
    u = get_generator(tensor.device).random(tuple(tensor.shape))
    return _write(tensor, u * (b - a) + a)


def normal_(tensor, mean: float = 0.0, std: float = 1.0):
    """Fill with samples from N(mean, std**2)."""
    z = get_generator(tensor.device).standard_normal(tuple(tensor.shape))
    return _write(tensor, z * std + mean)


def constant_(tensor, val: float):
    tensor.data[...] = val
    tensor._bump_version()
    return tensor


def zeros_(tensor):
    return constant_(tensor, 0)


def ones_(tensor):
    return constant_(tensor, 1)


def xavier_uniform_(tensor, gain: float = 1.0):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio)."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a)


def xavier_normal_(tensor, gain: float = 1.0):
    """N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def kaiming_uniform_(tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu"):
    """U(-b, b) with b = gain * sqrt(3 / fan) (He et al.); ``a`` is the leaky slope."""
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor  # an empty tensor: nothing to fill
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu"):
    """N(0, std**2) with std = gain / sqrt(fan)."""
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan))
