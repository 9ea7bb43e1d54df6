"""Loss layers."""

from __future__ import annotations

from .. import ops
from ..args import as_tensor, check_reduction
from .module import Module

__all__ = ["CrossEntropyLoss", "MSELoss"]


class CrossEntropyLoss(Module):
    """Softmax + negative log-likelihood over class logits (N, C[, ...]) and
    integer targets (N[, ...]) (Caffe's SoftmaxWithLoss). ``weight`` (C,)
    rescales classes and is kept as a buffer.

    >>> nn.CrossEntropyLoss(ignore_index=255)(logits, target)
    """

    def __init__(self, weight=None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__()
        check_reduction("CrossEntropyLoss", reduction)
        self.register_buffer("weight", None if weight is None else as_tensor(weight))
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return ops.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                                 self.label_smoothing)

    def extra_repr(self):
        return f"reduction={self.reduction!r}"


class MSELoss(Module):
    """Mean (or summed) squared error (Caffe's EuclideanLoss is ``sum / (2N)``).

    >>> nn.MSELoss()(prediction, target)
    """

    def __init__(self, reduction: str = "mean"):
        super().__init__()
        check_reduction("MSELoss", reduction)
        self.reduction = reduction

    def forward(self, input, target):
        return ops.mse_loss(input, target, self.reduction)

    def extra_repr(self):
        return f"reduction={self.reduction!r}"
