"""Activation layers: thin Modules over the functional ops."""

from __future__ import annotations

from .. import ops
from .module import Module

__all__ = ["ReLU", "LeakyReLU", "Sigmoid", "Tanh", "Softmax", "LogSoftmax"]


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
