"""Losses and similarities between two inputs (PyTorch's): Huber, binary
cross-entropy of probabilities and KL divergence as ops with their vjps side by
side; cosine similarity, normalize and the margin losses as compositions of
differentiable ops, following PyTorch's own formulas (so they are twice
differentiable wherever those ops are).

Reductions follow :mod:`.losses`: ``"mean"``, ``"sum"``, ``"none"`` (checked
by :func:`tapegrad.args.check_reduction`); float16 is summed in float32; the
mean of a zero-size batch is nan, as in PyTorch.
"""

from __future__ import annotations

import numpy as np

from ..args import (
    REDUCTIONS,
    as_tensor,
    check_broadcasts,
    check_float,
    check_reduction,
    const,
    normalize_axis,
    torch_names,
)
from ..dtypes import upcast
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor
from . import elementwise as _ew
from .linalg import norm
from .losses import SmoothL1Loss, elementwise_pair, plain_denominator, reduce_loss
from .reduction import mean, sum

__all__ = ["huber_loss", "binary_cross_entropy", "kl_div", "cosine_similarity", "normalize",
           "margin_ranking_loss", "cosine_embedding_loss", "triplet_margin_loss"]

_BCE_EPS = 1e-12  # PyTorch's floor on x (1 - x) in the BCE gradient


# ------------------------------------------------------------------ helpers

def _reduce(loss, reduction):
    """PyTorch's ``apply_loss_reduction`` on a recorded per-element loss."""
    if reduction == "mean":
        return mean(loss)
    return sum(loss) if reduction == "sum" else loss


def _check_number(op, name, value, positive=False):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ArgumentError(f"{op}: {name} must be a number, got {value!r}")
    if positive and not value > 0:
        raise ArgumentError(f"{op}: {name} must be > 0, got {value!r}")
    return float(value)


# ------------------------------------------------------------------ huber

def huber_loss(input, target, reduction="mean", delta=1.0):
    """PyTorch's Huber loss: ``0.5 d^2`` below ``delta``, ``delta (|d| - 0.5
    delta)`` above it (``d = input - target``; ``smooth_l1_loss`` times
    ``delta`` with ``beta = delta``); ``delta`` must be > 0.

    >>> ops.huber_loss(tapegrad.tensor([0.5, 3.0]), tapegrad.tensor([0.0, 0.0]))  # 1.3125
    """
    delta = _check_number("huber_loss", "delta", delta, positive=True)
    x, y, n = elementwise_pair("huber_loss", input, target)
    check_reduction("huber_loss", reduction)
    # PyTorch's identity: huber_loss(delta) = delta * smooth_l1_loss(beta=delta)
    return SmoothL1Loss.apply(x, y, denom=plain_denominator(reduction, n), beta=delta,
                              scale=delta)


# ---------------------------------------------------- binary cross-entropy

class BCELoss(Function):
    """``-w [t log x + (1 - t) log(1 - x)]``, each log clamped at -100 (PyTorch).
    The vjps are PyTorch's: ``w (x - t) / max(x (1 - x), 1e-12)`` for ``x`` and
    ``w (log(1 - x) - log x)`` for ``t``; ``weight`` is a constant."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, t, weight=None, denom=1):
        xp = ctx.xp
        xa, ta = upcast(x), upcast(t)
        with np.errstate(divide="ignore"):  # log 0 = -inf, clamped next
            log_x = xp.maximum(xp.log(xa), -100.0)
            log_1mx = xp.maximum(xp.log1p(-xa), -100.0)
        loss = -(ta * log_x + (1 - ta) * log_1mx)
        if weight is not None:
            loss = loss * weight
        ctx.save_for_backward(x, t, weight)
        return reduce_loss(ctx, loss, denom, x.dtype)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        x, t, w = ctx.saved_tensors
        r = g / ctx.denom if ctx.denom is not None else g
        if w is not None:
            r = r * w
        gx = gt = None
        if ctx.needs_input_grad[0]:
            gx = (x - t) / xp.maximum(x * (1 - x), _BCE_EPS) * r
        if ctx.needs_input_grad[1]:
            with np.errstate(divide="ignore"):
                gt = (xp.log1p(-x) - xp.log(x)) * r
        return gx, gt


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """Binary cross-entropy of probabilities ``input`` in [0, 1] against
    ``target`` of the same shape: ``-w [t log x + (1 - t) log(1 - x)]`` with
    each log clamped at -100, as in PyTorch (so ``x = 0`` or ``1`` gives a
    finite loss). ``weight`` broadcasts to ``input`` and is a constant;
    ``target`` gets a gradient too. Prefer
    :func:`binary_cross_entropy_with_logits` on logits (more stable).

    >>> ops.binary_cross_entropy(tapegrad.tensor([0.5]), np.array([1.0]))  # log 2
    """
    op = "binary_cross_entropy"
    x = as_tensor(input)
    xp = x.device.xp
    xd = x.array
    check_float(op, xd)
    t = target if isinstance(target, Tensor) else const(target, xp, xd.dtype)
    check_float(op, t, "target")
    if t.shape != x.shape:
        raise ShapeError(f"{op}: target {describe(t)} must have the input's shape, got input "
                         f"{describe(xd)}")
    check_reduction(op, reduction)
    if xd.size and not bool(((xd >= 0) & (xd <= 1)).all()):
        raise ArgumentError(f"{op}: all elements of input {describe(xd)} must be probabilities "
                            "in [0, 1] (nan is not); apply ops.sigmoid first, or use "
                            "binary_cross_entropy_with_logits on logits")
    w = const(weight, xp)
    if w is not None:
        check_broadcasts(op, "weight", w, xd.shape, f"the input's shape {describe(xd)}")
        w = w.astype(xd.dtype, copy=False)
    return BCELoss.apply(x, t, weight=w, denom=plain_denominator(reduction, xd.size))


# ------------------------------------------------------------ KL divergence

class KLDiv(Function):
    """Pointwise ``t (log t - x)`` (0 where ``t = 0``), or with log targets
    ``e^t (t - x)``. The vjps: ``-t`` (``-e^t``) for ``x``; ``log t + 1 - x``
    (``e^t (t - x + 1)``) for the target, nan at ``t = 0`` as in PyTorch."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, t, denom=1, log_target=False):
        xp = ctx.xp
        xa, ta = upcast(x), upcast(t)
        if log_target:
            loss = xp.exp(ta) * (ta - xa)
        else:  # xlogy(t, t) - t x: 0 log 0 = 0 (a negative t gives nan, as in PyTorch)
            with np.errstate(divide="ignore", invalid="ignore"):
                loss = xp.where(ta == 0, 0, ta * xp.log(ta)) - ta * xa
        ctx.log_target = log_target
        ctx.save_for_backward(x, t)
        return reduce_loss(ctx, loss, denom, x.dtype)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        x, t = ctx.saved_tensors
        r = g / ctx.denom if ctx.denom is not None else g
        gx = gt = None
        if ctx.log_target:
            et = xp.exp(t)
            if ctx.needs_input_grad[0]:
                gx = -et * r
            if ctx.needs_input_grad[1]:
                gt = et * (t - x + 1) * r
            return gx, gt
        if ctx.needs_input_grad[0]:
            gx = -t * r
        if ctx.needs_input_grad[1]:
            # PyTorch's xlogy vjps, log t and t / t: nan at t = 0
            with np.errstate(divide="ignore", invalid="ignore"):
                gt = (xp.where(t == 0, 0, xp.log(t)) + t / t - x) * r
        return gx, gt


def check_kl_reduction(op, reduction):
    """``kl_div``'s reductions: PyTorch's three and ``"batchmean"``."""
    if reduction != "batchmean" and reduction not in REDUCTIONS:
        raise ArgumentError(f"{op}: reduction must be one of {REDUCTIONS + ('batchmean',)}, "
                            f"got {reduction!r}")


def kl_div(input, target, reduction="mean", log_target=False):
    """PyTorch's ``kl_div``: the pointwise KL divergence ``t (log t - input)`` of
    log-probabilities ``input`` from probabilities ``target`` (with
    ``log_target=True`` the target is a log-probability too: ``e^t (t -
    input)``). ``reduction="batchmean"`` divides the sum by the batch size
    ``input.shape[0]`` (the true KL divergence per sample); ``"mean"`` is
    PyTorch's mean over all elements. Both get gradients.

    >>> ops.kl_div(ops.log_softmax(logits, axis=1), probs, reduction="batchmean")
    """
    op = "kl_div"
    x, y, n = elementwise_pair(op, input, target)
    check_kl_reduction(op, reduction)
    if reduction == "batchmean":
        denom = x.shape[0] if x.ndim else 1
    else:
        denom = plain_denominator(reduction, n)
    return KLDiv.apply(x, y, denom=denom, log_target=bool(log_target))


# -------------------------------------------------- similarities (composites)

class _ClampMinStraight(Function):
    """``max(n, eps)`` whose gradient passes unchanged: PyTorch clamps the norms
    of ``cosine_similarity`` in place under ``no_grad``, so their gradient is
    the unclamped norm's."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, n, eps):
        return ctx.xp.maximum(n, eps)

    @staticmethod
    def backward(ctx, g):
        return g, None


@torch_names
def cosine_similarity(x1, x2, axis=1, eps=1e-8):
    """Cosine of the angle between ``x1`` and ``x2`` (broadcast together) along
    ``axis``, as PyTorch computes it: ``sum((x1 / max(|x1|, eps)) * (x2 /
    max(|x2|, eps)))``, each norm clamped on its own, the clamp passing the
    norm's gradient (so near-zero vectors get PyTorch's gradients too).

    >>> ops.cosine_similarity(tapegrad.tensor([[1.0, 0.0]]), tapegrad.tensor([[1.0, 1.0]]))
    """
    op = "cosine_similarity"
    a, b = as_tensor(x1), as_tensor(x2)
    check_float(op, a.array, "x1")
    check_float(op, b.array, "x2")
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ShapeError(f"{op}: x1 {describe(a)} and x2 {describe(b)} must broadcast to one "
                         "shape") from None
    ax = normalize_axis(op, shape, axis)
    if a.shape != shape:
        a = a.broadcast_to(shape)
    if b.shape != shape:
        b = b.broadcast_to(shape)
    eps = _check_number(op, "eps", eps)
    n1 = _ClampMinStraight.apply(norm(a, 2, axis=ax, keepdims=True), eps)
    n2 = _ClampMinStraight.apply(norm(b, 2, axis=ax, keepdims=True), eps)
    return sum((a / n1) * (b / n2), axis=ax)


@torch_names
def normalize(x, p=2.0, axis=1, eps=1e-12):
    """``x / max(||x||_p, eps)`` along ``axis`` (PyTorch's ``F.normalize``; the
    clamp is differentiable: where the norm is below ``eps`` it gets no gradient).

    >>> ops.normalize(tapegrad.tensor([[3.0, 4.0]]))  # [[0.6, 0.8]]
    """
    t = as_tensor(x)
    check_float("normalize", t.array)
    eps = _check_number("normalize", "eps", eps)
    return t / _ew.clip(norm(t, p, axis=axis, keepdims=True), eps)


# --------------------------------------------------------- margin losses

def margin_ranking_loss(x1, x2, y, margin=0.0, reduction="mean"):
    """``max(0, -y (x1 - x2) + margin)``: ``y = 1`` asks for ``x1 > x2`` by
    ``margin``, ``y = -1`` for ``x2 > x1``. All three have the same number of
    dimensions (PyTorch's rule) and broadcast; all get gradients.

    >>> ops.margin_ranking_loss(s1, s2, np.array([1.0, -1.0]), margin=0.1)
    """
    op = "margin_ranking_loss"
    a, b = as_tensor(x1), as_tensor(x2)
    check_float(op, a.array, "x1")
    t = y if isinstance(y, Tensor) else const(y, a.device.xp, a.dtype)
    if not a.ndim == b.ndim == t.ndim:
        raise ShapeError(f"{op}: x1, x2 and y must have the same number of dimensions, got "
                         f"{describe(a)}, {describe(b)} and {describe(t)}")
    margin = _check_number(op, "margin", margin)
    check_reduction(op, reduction)
    return _reduce(_ew.clip(-t * (a - b) + margin, 0.0), reduction)


_COS_EPS = 1e-12  # PyTorch's EPSILON added to each squared norm


def cosine_embedding_loss(x1, x2, y, margin=0.0, reduction="mean"):
    """``1 - cos(x1, x2)`` where ``y = 1``, ``max(0, cos(x1, x2) - margin)`` where
    ``y = -1`` (0 elsewhere), per row of ``(N, D)`` inputs with ``y`` ``(N,)``
    (or ``(D,)`` inputs with a 0-d ``y``). The cosine is PyTorch's: ``x1 . x2 /
    sqrt((|x1|^2 + 1e-12) (|x2|^2 + 1e-12))``. ``y`` is a constant.

    >>> ops.cosine_embedding_loss(a, b, np.array([1, -1]), margin=0.2)
    """
    op = "cosine_embedding_loss"
    a, b = as_tensor(x1), as_tensor(x2)
    check_float(op, a.array, "x1")
    check_float(op, b.array, "x2")
    t = const(y, a.device.xp)
    if t.ndim not in (0, 1) or not a.ndim == b.ndim == t.ndim + 1:
        raise ShapeError(f"{op}: expected x1 and x2 of shape (N, D) with y (N,), or (D,) with a "
                         f"0-d y; got {describe(a)}, {describe(b)} and y {describe(t)}")
    margin = _check_number(op, "margin", margin)
    check_reduction(op, reduction)
    ax = t.ndim
    prod = sum(a * b, axis=ax)
    m1 = sum(a * a, axis=ax) + _COS_EPS
    m2 = sum(b * b, axis=ax) + _COS_EPS
    cos = prod / _ew.sqrt(m1 * m2)
    loss = (_ew.where(t == 1, 1 - cos, 0.0)
            + _ew.where(t == -1, _ew.clip(cos - margin, 0.0), 0.0))
    return _reduce(loss, reduction)


def _pairwise_distance(a, b, p, eps):
    """PyTorch's ``pairwise_distance``: ``||a - b + eps||_p`` over the last axis."""
    return norm(a - b + eps, p, axis=max(a.ndim, b.ndim) - 1)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        reduction="mean"):
    """``max(0, margin + d(a, p) - d(a, n))`` with ``d`` PyTorch's pairwise
    distance ``||u - v + eps||_p`` over the last axis; ``swap=True`` uses
    ``min(d(a, n), d(p, n))`` for the negative distance (Balntas et al.).

    >>> ops.triplet_margin_loss(anchor, pos, neg, margin=1.0)
    """
    op = "triplet_margin_loss"
    a, pos, neg = as_tensor(anchor), as_tensor(positive), as_tensor(negative)
    for name, v in (("anchor", a), ("positive", pos), ("negative", neg)):
        check_float(op, v.array, name)
    if not a.ndim == pos.ndim == neg.ndim:
        raise ShapeError(f"{op}: anchor, positive and negative must have the same number of "
                         f"dimensions, got {describe(a)}, {describe(pos)} and {describe(neg)}")
    if a.ndim == 0:
        raise ShapeError(f"{op}: expected (N, D) or (D,) inputs, got 0-d {describe(a)}")
    margin = _check_number(op, "margin", margin)
    p = _check_number(op, "p", p, positive=True)
    eps = _check_number(op, "eps", eps)
    check_reduction(op, reduction)
    d_pos = _pairwise_distance(a, pos, p, eps)
    d_neg = _pairwise_distance(a, neg, p, eps)
    if swap:
        d_neg = _ew.minimum(d_neg, _pairwise_distance(pos, neg, p, eps))
    return _reduce(_ew.clip(d_pos - d_neg + margin, 0.0), reduction)
