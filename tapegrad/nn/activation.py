"""Activation layers: thin Modules over the functional ops."""

from __future__ import annotations

import numbers

from .. import ops
from ..errors import ArgumentError
from ..ops.activation import GELU_APPROXIMATIONS
from . import init as _init
from ._util import new_param
from .module import Module

__all__ = ["ReLU", "LeakyReLU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "GELU", "SiLU", "ELU",
           "Softplus", "PReLU", "ReLU6", "Hardtanh", "Hardsigmoid", "Hardswish", "SELU", "Mish",
           "LogSigmoid", "Softsign", "Tanhshrink", "GLU"]


class ReLU(Module):
    """``max(x, 0)``. ``inplace`` is accepted for PyTorch compatibility and
    ignored: the result is always a new tensor.

    >>> nn.ReLU()(tapegrad.tensor([-1.0, 2.0]))   # [0., 2.]
    """

    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, x):
        return ops.relu(x)


class LeakyReLU(Module):
    """``x`` for x > 0, ``negative_slope * x`` otherwise.

    >>> nn.LeakyReLU(0.1)
    """

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return ops.leaky_relu(x, self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}"


class Sigmoid(Module):
    """``1 / (1 + exp(-x))``, computed without overflow.

    >>> nn.Sigmoid()(tapegrad.tensor([0.0]))   # [0.5]
    """

    def forward(self, x):
        return ops.sigmoid(x)


class Tanh(Module):
    """Hyperbolic tangent.

    >>> nn.Tanh()(x)
    """

    def forward(self, x):
        return ops.tanh(x)


class Softmax(Module):
    """Softmax along ``dim`` (default: axis 1, the channels, or 0 for a 1-D input).

    >>> nn.Softmax(dim=1)(logits)
    """

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return ops.softmax(x, axis=self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """``log(softmax(x))`` along ``dim``, computed stably.

    >>> nn.LogSoftmax(dim=1)(logits)
    """

    def forward(self, x):
        return ops.log_softmax(x, axis=self.dim)


class GELU(Module):
    """GELU, ``x * Phi(x)``; ``approximate="tanh"`` for PyTorch's tanh form.

    >>> nn.GELU()(x)
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if not isinstance(approximate, str) or approximate not in GELU_APPROXIMATIONS:
            raise ArgumentError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return ops.gelu(x, approximate=self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """SiLU (swish), ``x * sigmoid(x)``. ``inplace`` is accepted for PyTorch
    compatibility and ignored: the result is always a new tensor.

    >>> nn.SiLU()(x)
    """

    def __init__(self, inplace: bool = False):
        super().__init__()

    def forward(self, x):
        return ops.silu(x)


class ELU(Module):
    """ELU: ``x`` for x > 0, ``alpha * (exp(x) - 1)`` otherwise (``inplace`` ignored,
    as for :class:`ReLU`).

    >>> nn.ELU(alpha=1.0)
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return ops.elu(x, self.alpha)

    def extra_repr(self):
        return f"alpha={self.alpha}"


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, and ``x`` where ``beta * x > threshold``.

    >>> nn.Softplus(beta=2.0, threshold=20.0)
    """

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, x):
        return ops.softplus(x, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class PReLU(Module):
    """PReLU: ``x`` for x > 0, ``weight * x`` otherwise, with a learnt ``weight`` of
    ``num_parameters`` slopes (1, or the channel count of axis 1), each ``init``.

    >>> nn.PReLU(64)(tapegrad.randn(8, 64, 16, 16))
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        if isinstance(num_parameters, bool) or not isinstance(num_parameters, numbers.Integral) \
                or num_parameters < 1:
            raise ArgumentError(f"PReLU: num_parameters must be a positive int, got "
                                f"{num_parameters!r}")
        self.num_parameters = int(num_parameters)
        self.init = init
        self.weight = new_param((self.num_parameters,), device, dtype)
        self.reset_parameters()

    def reset_parameters(self):
        _init.constant_(self.weight, self.init)

    def forward(self, x):
        return ops.prelu(x, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


# ``inplace`` below is accepted for PyTorch compatibility (and shown in the repr where
# PyTorch shows it) but ignored: the result is always a new tensor, as for ReLU.


def _inplace(m):
    return "inplace=True" if m.inplace else ""


class Hardtanh(Module):
    """``clip(x, min_val, max_val)``; ``max_val`` must exceed ``min_val`` (PyTorch's check).

    >>> nn.Hardtanh(-2.0, 2.0)(x)
    """

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if max_val <= min_val:
            raise ArgumentError(f"Hardtanh: max_val ({max_val}) must be greater than min_val "
                                f"({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, x):
        return ops.hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}" + (
            ", inplace=True" if self.inplace else "")


class ReLU6(Hardtanh):
    """``min(max(x, 0), 6)``.

    >>> nn.ReLU6()(tapegrad.tensor([-1.0, 7.0]))   # [0., 6.]
    """

    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)

    def forward(self, x):
        return ops.relu6(x)

    def extra_repr(self):
        return _inplace(self)


class Hardsigmoid(Module):
    """``relu6(x + 3) / 6``.

    >>> nn.Hardsigmoid()(x)
    """

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return ops.hardsigmoid(x)


class Hardswish(Hardsigmoid):
    """``x * relu6(x + 3) / 6``.

    >>> nn.Hardswish()(x)
    """

    def forward(self, x):
        return ops.hardswish(x)


class SELU(Hardsigmoid):
    """SELU, ``scale * elu(x, alpha)`` with PyTorch's constants.

    >>> nn.SELU()(x)
    """

    def forward(self, x):
        return ops.selu(x)

    def extra_repr(self):
        return _inplace(self)


class Mish(SELU):
    """Mish, ``x * tanh(softplus(x))``.

    >>> nn.Mish()(x)
    """

    def forward(self, x):
        return ops.mish(x)


class LogSigmoid(Module):
    """``log(sigmoid(x))``, exact for large ``|x|``.

    >>> nn.LogSigmoid()(x)
    """

    def forward(self, x):
        return ops.logsigmoid(x)


class Softsign(Module):
    """``x / (1 + |x|)``.

    >>> nn.Softsign()(x)
    """

    def forward(self, x):
        return ops.softsign(x)


class Tanhshrink(Module):
    """``x - tanh(x)``.

    >>> nn.Tanhshrink()(x)
    """

    def forward(self, x):
        return ops.tanhshrink(x)


class GLU(Module):
    """Gated linear unit along ``dim``: ``a * sigmoid(b)`` of its two halves.

    >>> nn.GLU(dim=1)(tapegrad.randn(4, 6)).shape   # (4, 3)
    """

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return ops.glu(x, axis=self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"
