"""Weight initialisations (PyTorch's ``torch.nn.init`` formulas).

Every function fills a Tensor in place, records nothing on the tape (PyTorch
runs them under ``no_grad``), bumps the tensor's version, and returns the
tensor. The random ones draw from ``generator=`` (a :class:`tapegrad.Generator`
or any ``numpy.random.Generator``) or else from the global generator of the
tensor's device (see :func:`tapegrad.manual_seed`): repeatable, not PyTorch's
numbers.

>>> nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
>>> nn.init.orthogonal_(rnn.weight_hh_l0, gain=nn.init.calculate_gain("tanh"))
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..args import int_at_least
from ..device import get_array_module
from ..errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError, describe
from ..random import get_generator

__all__ = ["calculate_gain", "calculate_fan_in_and_fan_out", "uniform_", "normal_",
           "constant_", "zeros_", "ones_", "eye_", "dirac_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_"]


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
    """Store ``values`` (host or device, any dtype) in ``tensor``'s array."""
    dev = tensor.device
    with dev.use():
        tensor.array[...] = dev.xp.asarray(values).astype(tensor.dtype, copy=False)
    tensor._bump_version()
    return tensor


def _generator(op, tensor, generator):
    """``generator``, or the global generator of ``tensor``'s device."""
    if generator is None:
        return get_generator(tensor.device)
    if not isinstance(generator, np.random.Generator):
        raise ArgumentTypeError(
            f"{op}: generator must be a tapegrad.Generator (or a numpy.random.Generator) or "
            f"None for the global one, got {type(generator).__name__}")
    return generator


def _check_float(op, tensor):
    if tensor.dtype.kind != "f":
        raise DTypeError(f"{op}: draws normal samples, which {describe(tensor)} cannot hold; "
                         "initialise a floating-point tensor")


def uniform_(tensor, a: float = 0.0, b: float = 1.0, generator=None):
    """Fill with samples from U(a, b)."""
    u = _generator("uniform_", tensor, generator).random(tuple(tensor.shape))
    return _write(tensor, u * (b - a) + a)


def normal_(tensor, mean: float = 0.0, std: float = 1.0, generator=None):
    """Fill with samples from N(mean, std**2)."""
    z = _generator("normal_", tensor, generator).standard_normal(tuple(tensor.shape))
    return _write(tensor, z * std + mean)


def constant_(tensor, val: float):
    tensor.array[...] = val
    tensor._bump_version()
    return tensor


def zeros_(tensor):
    return constant_(tensor, 0)


def ones_(tensor):
    return constant_(tensor, 1)


def xavier_uniform_(tensor, gain: float = 1.0, generator=None):
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio)."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    a = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor, gain: float = 1.0, generator=None):
    """N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def kaiming_uniform_(tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None):
    """U(-b, b) with b = gain * sqrt(3 / fan) (He et al.); ``a`` is the leaky slope."""
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor  # an empty tensor: nothing to fill
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None):
    """N(0, std**2) with std = gain / sqrt(fan)."""
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


# ------------------------------------------------------- structured matrices


def eye_(tensor):
    """The identity matrix in a 2-D tensor (ones on the main diagonal of a
    rectangle too): a ``Linear`` layer that passes as many inputs through as it can.

    >>> nn.init.eye_(tapegrad.empty(3, 5))
    """
    if tensor.ndim != 2:
        raise ShapeError(f"eye_: Only tensors with 2 dimensions are supported, got "
                         f"{describe(tensor)}")
    return _write(tensor, tensor.device.xp.eye(*tensor.shape))


def dirac_(tensor, groups: int = 1):
    """The Dirac delta in a 3-, 4- or 5-D convolution weight ``(out, in, *kernel)``:
    output channel ``d`` of each of the ``groups`` copies input channel ``d`` at the
    kernel's centre (``size // 2`` on each axis), so the convolution is the identity on
    as many channels as it can.

    >>> nn.init.dirac_(conv.weight)            # conv (16, 16, 3, 3): y == x (padding 1)
    >>> nn.init.dirac_(tapegrad.empty(6, 2, 3), groups=3)
    """
    shape = tuple(tensor.shape)
    if len(shape) not in (3, 4, 5):
        raise ShapeError(f"dirac_: Only tensors with 3, 4, or 5 dimensions are supported, got "
                         f"{describe(tensor)}")
    groups = int_at_least("dirac_", "groups", groups, 1)
    if shape[0] % groups:
        raise ArgumentError(f"dirac_: dim 0 must be divisible by groups: {shape[0]} output "
                            f"channels of {describe(tensor)} in {groups} groups")
    per_group = shape[0] // groups
    n = min(per_group, shape[1])
    xp = tensor.device.xp
    out = xp.zeros(shape)
    # (groups, n) output channels, each reading input channel d at the kernel's centre
    rows = (xp.arange(groups)[:, None] * per_group + xp.arange(n)).reshape(-1)
    cols = xp.tile(xp.arange(n), groups)
    out[(rows, cols) + tuple(k // 2 for k in shape[2:])] = 1
    return _write(tensor, out)


def orthogonal_(tensor, gain: float = 1, generator=None):
    """A (semi-)orthogonal matrix times ``gain`` (Saxe et al. 2013): axes after the
    first are flattened to ``(rows, cols)``; the rows are orthonormal when rows <= cols,
    the columns otherwise. PyTorch's construction: the QR factors of a standard normal
    matrix (transposed when rows < cols), Q's columns signed by R's diagonal so that Q
    is uniformly (Haar) distributed.

    >>> nn.init.orthogonal_(lstm.weight_hh_l0)
    """
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        raise ShapeError(f"orthogonal_: Only tensors with 2 or more dimensions are supported, "
                         f"got {describe(tensor)}")
    if tensor.numel() == 0:
        return tensor
    _check_float("orthogonal_", tensor)
    rows = shape[0]
    cols = tensor.numel() // rows
    flat = _generator("orthogonal_", tensor, generator).standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    xp = get_array_module(flat)
    q, r = xp.linalg.qr(flat)  # reduced: q (m, k), r (k, k) with k = min(rows, cols)
    q = q * xp.sign(xp.diagonal(r))  # each column by the sign of its R diagonal entry
    if rows < cols:
        q = q.T
    return _write(tensor, (q * gain).reshape(shape))


def sparse_(tensor, sparsity: float, std: float = 0.01, generator=None):
    """A 2-D tensor with ``ceil(sparsity * rows)`` zeros in each column, at random
    rows, and N(0, std**2) samples elsewhere (Martens 2010, Hessian-free
    optimisation). The zero rows come from ``generator`` too (PyTorch draws them
    from its global generator whatever ``generator`` is).

    >>> nn.init.sparse_(tapegrad.empty(10, 4), sparsity=0.3)   # 3 zeros per column
    """
    if tensor.ndim != 2:
        raise ShapeError(f"sparse_: Only tensors with 2 dimensions are supported, got "
                         f"{describe(tensor)}")
    if isinstance(sparsity, bool) or not isinstance(sparsity, numbers.Real) or \
            not math.isfinite(sparsity):
        raise ArgumentError(f"sparse_: sparsity must be a finite number (the fraction of "
                            f"each column set to zero), got {sparsity!r}")
    _check_float("sparse_", tensor)
    rows, cols = tensor.shape
    num_zeros = math.ceil(sparsity * rows)
    gen = _generator("sparse_", tensor, generator)
    values = gen.standard_normal((rows, cols)) * std
    xp = get_array_module(values)
    # one random permutation of the rows per column; its first num_zeros rows are zeroed
    # (sliced as PyTorch slices its randperm, a negative count included)
    zero_rows = xp.argsort(gen.random((rows, cols)), axis=0)[:num_zeros]
    values[zero_rows, xp.arange(cols)] = 0
    return _write(tensor, values)
