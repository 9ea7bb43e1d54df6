"""Layers of the two-input losses and similarities of :mod:`tapegrad.ops.pairwise`.

Their reprs are PyTorch's: the class name alone (``HuberLoss()``), whatever the
options. PyTorch's deprecated ``size_average``/``reduce`` sit in PyTorch's
positions and set ``reduction`` as PyTorch maps them
(:func:`tapegrad.args.legacy_reduction`).
"""

from __future__ import annotations

from .. import ops
from ..args import as_tensor, check_reduction, legacy_reduction
from ..ops.pairwise import check_kl_reduction
from .module import Module

__all__ = ["HuberLoss", "BCELoss", "KLDivLoss", "MarginRankingLoss", "CosineEmbeddingLoss",
           "TripletMarginLoss", "CosineSimilarity"]


class HuberLoss(Module):
    """Quadratic below ``delta``, ``delta``-sloped linear above (:func:`ops.huber_loss`).

    >>> nn.HuberLoss(delta=0.5)(prediction, target)
    """

    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__()
        check_reduction("HuberLoss", reduction)
        self.reduction = reduction
        self.delta = delta

    def forward(self, input, target):
        return ops.huber_loss(input, target, self.reduction, self.delta)


class BCELoss(Module):
    """Binary cross-entropy of probabilities (:func:`ops.binary_cross_entropy`);
    ``weight`` (broadcast to the input) is a buffer.

    >>> nn.BCELoss()(ops.sigmoid(logits), targets)
    """

    def __init__(self, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        reduction = legacy_reduction("BCELoss", size_average, reduce, reduction)
        check_reduction("BCELoss", reduction)
        self.register_buffer("weight", None if weight is None else as_tensor(weight))
        self.reduction = reduction

    def forward(self, input, target):
        return ops.binary_cross_entropy(input, target, self.weight, self.reduction)


class KLDivLoss(Module):
    """KL divergence of log-probabilities from (log-)probabilities
    (:func:`ops.kl_div`); ``reduction="batchmean"`` is the true KL per sample.

    >>> nn.KLDivLoss(reduction="batchmean")(ops.log_softmax(logits, axis=1), probs)
    """

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean",
                 log_target: bool = False):
        super().__init__()
        reduction = legacy_reduction("KLDivLoss", size_average, reduce, reduction)
        check_kl_reduction("KLDivLoss", reduction)
        self.reduction = reduction
        self.log_target = log_target

    def forward(self, input, target):
        return ops.kl_div(input, target, self.reduction, self.log_target)


class MarginRankingLoss(Module):
    """``max(0, -y (x1 - x2) + margin)`` (:func:`ops.margin_ranking_loss`).

    >>> nn.MarginRankingLoss(margin=0.1)(s1, s2, y)
    """

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__()
        reduction = legacy_reduction("MarginRankingLoss", size_average, reduce, reduction)
        check_reduction("MarginRankingLoss", reduction)
        self.margin = margin
        self.reduction = reduction

    def forward(self, input1, input2, target):
        return ops.margin_ranking_loss(input1, input2, target, self.margin, self.reduction)


class CosineEmbeddingLoss(Module):
    """``1 - cos`` for ``y = 1``, ``max(0, cos - margin)`` for ``y = -1``
    (:func:`ops.cosine_embedding_loss`).

    >>> nn.CosineEmbeddingLoss(margin=0.2)(a, b, y)
    """

    def __init__(self, margin: float = 0.0, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__()
        reduction = legacy_reduction("CosineEmbeddingLoss", size_average, reduce, reduction)
        check_reduction("CosineEmbeddingLoss", reduction)
        self.margin = margin
        self.reduction = reduction

    def forward(self, input1, input2, target):
        return ops.cosine_embedding_loss(input1, input2, target, self.margin, self.reduction)


class TripletMarginLoss(Module):
    """``max(0, margin + d(a, p) - d(a, n))`` with PyTorch's pairwise p-distance
    (:func:`ops.triplet_margin_loss`).

    >>> nn.TripletMarginLoss(margin=1.0, p=2)(anchor, positive, negative)
    """

    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6,
                 swap: bool = False, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        reduction = legacy_reduction("TripletMarginLoss", size_average, reduce, reduction)
        check_reduction("TripletMarginLoss", reduction)
        self.margin = margin
        self.p = p
        self.eps = eps
        self.swap = swap
        self.reduction = reduction

    def forward(self, anchor, positive, negative):
        return ops.triplet_margin_loss(anchor, positive, negative, self.margin, self.p,
                                       self.eps, self.swap, self.reduction)


class CosineSimilarity(Module):
    """Cosine similarity along ``dim`` (:func:`ops.cosine_similarity`).

    >>> nn.CosineSimilarity(dim=1)(a, b)
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, x1, x2):
        return ops.cosine_similarity(x1, x2, axis=self.dim, eps=self.eps)
