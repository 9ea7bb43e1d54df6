"""Loss layers, with PyTorch's signatures: the deprecated ``size_average`` and
``reduce`` sit in PyTorch's positions and set ``reduction`` as PyTorch maps them
(:func:`tapegrad.args.legacy_reduction`)."""

from __future__ import annotations

from .. import ops
from ..args import as_tensor, check_reduction, legacy_reduction
from ..errors import ArgumentTypeError
from .module import Module

__all__ = ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss",
           "BCEWithLogitsLoss"]


def _repr(layer, defaults):
    """The options that differ from ``defaults`` (PyTorch-style reprs)."""
    return ", ".join(f"{k}={getattr(layer, k)!r}" for k, v in defaults.items()
                     if not _same(getattr(layer, k), v))


def _same(a, b):
    return a is b or (not hasattr(a, "shape") and not hasattr(b, "shape") and a == b)


class CrossEntropyLoss(Module):
    """Softmax + negative log-likelihood over class logits (N, C[, ...]) and
    integer targets (N[, ...]) (Caffe's SoftmaxWithLoss). ``weight`` (C,)
    rescales classes and is kept as a buffer; ``normalization`` is Caffe's
    (``"VALID"``, ``"BATCH_SIZE"``, ``"FULL"``, ``"NONE"``; see
    :func:`tapegrad.ops.cross_entropy`).

    >>> nn.CrossEntropyLoss(ignore_index=255, normalization="VALID")(logits, target)
    """

    _defaults = dict(weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                     normalization=None)

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0, normalization=None):
        super().__init__()
        reduction = legacy_reduction("CrossEntropyLoss", size_average, reduce, reduction)
        check_reduction("CrossEntropyLoss", reduction)
        self.register_buffer("weight", None if weight is None else as_tensor(weight))
        self.ignore_index = ignore_index
        self.reduction = reduction
        self.label_smoothing = label_smoothing
        self.normalization = normalization

    def forward(self, input, target):
        return ops.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                                 self.label_smoothing, self.normalization)

    def extra_repr(self):
        return _repr(self, self._defaults)


class NLLLoss(Module):
    """Negative log-likelihood of log-probabilities (N, C[, ...]) at integer
    targets (N[, ...]); ``log_softmax`` + ``NLLLoss`` is ``CrossEntropyLoss``.

    >>> nn.NLLLoss()(ops.log_softmax(logits, axis=1), target)
    """

    _defaults = dict(weight=None, ignore_index=-100, reduction="mean")

    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__()
        reduction = legacy_reduction("NLLLoss", size_average, reduce, reduction)
        check_reduction("NLLLoss", reduction)
        self.register_buffer("weight", None if weight is None else as_tensor(weight))
        self.ignore_index = ignore_index
        self.reduction = reduction

    def forward(self, input, target):
        return ops.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)

    def extra_repr(self):
        return _repr(self, self._defaults)


class _PointwiseLoss(Module):
    """A loss of ``(input, target)`` with only a ``reduction`` option (and, for
    some, one more number: ``_extra``)."""

    _op = None
    _extra: dict = {}

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", **extra):
        unknown = sorted(set(extra) - set(self._extra))
        if unknown:
            raise ArgumentTypeError(f"{type(self).__name__}: unexpected keyword argument(s) "
                                    f"{unknown}; it takes size_average, reduce, reduction"
                                    + "".join(f", {k}" for k in self._extra))
        super().__init__()
        reduction = legacy_reduction(type(self).__name__, size_average, reduce, reduction)
        check_reduction(type(self).__name__, reduction)
        self.reduction = reduction
        for k, v in {**self._extra, **extra}.items():
            setattr(self, k, v)

    def forward(self, input, target):
        extra = {k: getattr(self, k) for k in self._extra}
        return type(self)._op(input, target, self.reduction, **extra)

    def extra_repr(self):
        return _repr(self, {"reduction": "mean", **self._extra})


class MSELoss(_PointwiseLoss):
    """Mean (or summed) squared error (Caffe's EuclideanLoss is ``sum / (2N)``).

    >>> nn.MSELoss()(prediction, target)
    """

    _op = staticmethod(ops.mse_loss)


class L1Loss(_PointwiseLoss):
    """Mean (or summed) absolute error.

    >>> nn.L1Loss()(prediction, target)
    """

    _op = staticmethod(ops.l1_loss)


class SmoothL1Loss(_PointwiseLoss):
    """Quadratic below ``beta``, linear above (Fast R-CNN's box loss).

    >>> nn.SmoothL1Loss(beta=0.5)(boxes, target_boxes)
    """

    _op = staticmethod(ops.smooth_l1_loss)
    _extra = {"beta": 1.0}

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 beta: float = 1.0):
        # mapped here, so that the warning points at the caller's line
        reduction = legacy_reduction("SmoothL1Loss", size_average, reduce, reduction)
        super().__init__(reduction=reduction, beta=beta)


class BCEWithLogitsLoss(Module):
    """Sigmoid + binary cross-entropy, computed stably from logits; ``weight``
    rescales elements, ``pos_weight`` the positive term (both buffers).

    >>> nn.BCEWithLogitsLoss(pos_weight=tapegrad.tensor([3.0]))(logits, targets)
    """

    _defaults = dict(weight=None, reduction="mean", pos_weight=None)

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean",
                 pos_weight=None):
        super().__init__()
        reduction = legacy_reduction("BCEWithLogitsLoss", size_average, reduce, reduction)
        check_reduction("BCEWithLogitsLoss", reduction)
        self.register_buffer("weight", None if weight is None else as_tensor(weight))
        self.register_buffer("pos_weight", None if pos_weight is None else as_tensor(pos_weight))
        self.reduction = reduction

    def forward(self, input, target):
        return ops.binary_cross_entropy_with_logits(input, target, self.weight, self.pos_weight,
                                                    self.reduction)

    def extra_repr(self):
        return _repr(self, self._defaults)
