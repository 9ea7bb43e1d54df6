"""Fully connected layer, Identity, Flatten/Unflatten, Dropout/Dropout2d."""

from __future__ import annotations

from .. import ops
from ..args import normalize_axis
from ..errors import ArgumentError
from ._util import default_reset, new_param
from .module import Module

__all__ = ["Identity", "Linear", "Flatten", "Unflatten", "Dropout", "Dropout2d"]


class Identity(Module):
    """Returns its input unchanged (a placeholder when editing networks).

    >>> nn.Identity()(x) is x
    """

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Linear(Module):
    """``y = x @ weight.T + bias`` (Caffe's InnerProduct).

    ``weight`` is (out_features, in_features); both are initialised as
    PyTorch does: U(-1/sqrt(in_features), 1/sqrt(in_features)).

    >>> nn.Linear(784, 10)(tapegrad.zeros(32, 784)).shape   # (32, 10)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = new_param((out_features, in_features), device, dtype)
        if bias:
            self.bias = new_param((out_features,), device, dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        default_reset(self.weight, self.bias)

    def forward(self, x):
        return ops.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Flatten(Module):
    """Merge axes ``start_dim..end_dim`` (default: all but the batch axis).

    >>> nn.Flatten()(tapegrad.zeros(2, 3, 4, 4)).shape   # (2, 48)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, x):
        return ops.flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split axis ``dim`` into ``unflattened_size`` (PyTorch's ``nn.Unflatten``; one
    size may be -1).

    >>> nn.Unflatten(1, (3, 4, 4))(tapegrad.zeros(2, 48)).shape   # (2, 3, 4, 4)
    """

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, x):
        d = normalize_axis("Unflatten", x.shape, self.dim)
        return x.reshape(x.shape[:d] + self.unflattened_size + x.shape[d + 1:])

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Dropout(Module):
    """Zero each element with probability ``p`` in training mode (scaling the
    rest by 1/(1-p)); the identity in eval mode. Masks come from the global
    generator.

    >>> nn.Dropout(0.5)
    """

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ArgumentError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x):
        return ops.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class Dropout2d(Dropout):
    """Zero whole channels of an (N, C, H, W) input with probability ``p`` in
    training mode (:func:`tapegrad.ops.dropout2d`).

    >>> nn.Dropout2d(0.2)
    """

    def forward(self, x):
        return ops.dropout2d(x, self.p, self.training)
