"""Losses: each op's forward and vjp side by side.

Classes are along axis 1 everywhere: logits ``(N, C)`` with targets ``(N,)``,
or ``(N, C, H, W, ...)`` with targets ``(N, H, W, ...)``. Class targets are
0-based integer indices. Per-position losses are reduced inside the op, so a
whole loss is one tape entry whose vjp is a single closed-form expression.

Besides the PyTorch-style losses there are two metrics, :func:`accuracy` and
:func:`topk_error`, which record nothing. MatConvNet's ``vl_nnloss`` variants
are in :mod:`.vl_loss`, the losses between two inputs in :mod:`.pairwise`; the
helpers they share from here have plain names and stay out of ``__all__``
(:func:`plain_denominator`, :func:`reduce_loss`, :func:`elementwise_pair`,
:func:`class_targets`, :func:`target_mask`, :func:`target_entries`,
:func:`topk_wrong`).
"""

from __future__ import annotations

import numpy as np

from ..args import (
    as_tensor,
    check_broadcasts,
    check_float,
    check_reduction,
    const,
    raw,
)
from ..device import device_of_array, get_array_module
from ..dtypes import acc_dtype, downcast, upcast
from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor
from . import _cuda_losses
from .activation import sigmoid, softplus
from .softmaxes import softmax

__all__ = ["cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss",
           "binary_cross_entropy_with_logits",
           "accuracy", "topk_error"]

_NORMALIZATIONS = ("valid", "batch_size", "full", "none")


# ------------------------------------------------------------------ helpers

def plain_denominator(reduction, n):
    """What a loss over ``n`` elements is divided by: n for "mean" (0 for no
    elements: the mean is nan), 1 for "sum", None for "none" (no reduction)."""
    return None if reduction == "none" else (n if reduction == "mean" else 1)


def reduce_loss(ctx, loss, denom, dtype):
    """A forward's result in ``dtype``: per-element ``loss`` when ``denom`` is
    None, else ``loss.sum() / denom`` as a 0-d array, summed in float32 for
    float16. ``denom`` 0 is a mean over nothing: nan, as in PyTorch. Backward
    reads ``ctx.denom`` (never 0: an empty batch has an empty gradient)."""
    if denom is None:
        ctx.denom = None
        return downcast(loss, dtype)
    ctx.denom = denom or 1
    total = loss.sum(dtype=acc_dtype(loss.dtype))
    total = total / denom if denom else total * ctx.xp.nan  # 0 * nan, without a warning
    return downcast(ctx.xp.asarray(total), dtype)


def _mean_count(n_valid, n):
    """The "mean" divisor of ``n`` targets of which ``n_valid`` count: 1 when
    all are ignored (the loss is 0, Caffe's clamp), 0 when there are none
    (an empty batch: the mean is nan, as in PyTorch)."""
    return n_valid or (1 if n else 0)


def class_targets(op, x, t, ignore_index, xp):
    """Validate integer class targets of scores ``x`` (N, C, *S).

    Returns ``(t_safe, valid, n_valid)``: ``t_safe`` has ignored entries
    replaced by class 0 (so it can index), ``valid`` is a bool mask or
    ``None`` when nothing is ignored. ``ignore_index=None`` ignores every
    negative target (the convention of :func:`loss`).
    """
    if x.ndim < 2 or x.shape[1] == 0:
        raise ShapeError(f"{op}: expected scores of shape (N, C) or (N, C, H, W, ...) with "
                         f"C >= 1 classes, got {describe(x)}")
    if t.dtype.kind not in "iu":
        raise DTypeError(f"{op}: targets must be integer class indices, got {describe(t)} "
                         f"(scores {describe(x)}); convert with .astype('int64')")
    if t.shape != x.shape[:1] + x.shape[2:]:
        raise ShapeError(f"{op}: scores {describe(x)} need targets of shape "
                         f"{x.shape[:1] + x.shape[2:]} (N{', *spatial' if x.ndim > 2 else ''}), "
                         f"got {describe(t)}")
    n_classes = x.shape[1]
    if t.size == 0:
        return t, None, 0
    # one reduction checks the common case: every target in [0, C), none ignored
    # (negatives become huge once viewed as unsigned)
    ut = t.view(f"u{t.dtype.itemsize}") if t.dtype.kind == "i" else t
    if int(ut.max()) < n_classes and (ignore_index is None or
                                      not 0 <= ignore_index < n_classes):
        return t, None, t.size
    valid = t >= 0 if ignore_index is None else t != ignore_index
    bad = valid & ((t < 0) | (t >= n_classes))
    if bool(bad.any()):
        flat = int(xp.argmax(bad.reshape(-1)))
        where = tuple(int(i) for i in np.unravel_index(flat, t.shape))
        allowed = ("or be negative (ignored)" if ignore_index is None
                   else f"or equal ignore_index={ignore_index}")
        raise ArgumentError(
            f"{op}: target {int(t.reshape(-1)[flat])} at index {where} is out of range for "
            f"{n_classes} classes (scores {describe(x)}, targets {describe(t)}); targets must be "
            f"in [0, {n_classes}) {allowed}")
    n_valid = int(valid.sum())
    return xp.where(valid, t, 0), valid, n_valid


_EYE_MAX_CLASSES = 256


def target_mask(t, n_classes, ndim, xp):
    """Bool (N, C, *S) mask with True at each position's target class."""
    if ndim == 2 and n_classes <= _EYE_MAX_CLASSES:
        # rows of the identity: ~2x faster than the broadcast compare for (256, 10); a
        # (C, C) identity of many classes would cost C^2 bytes (70000 classes: 4.9 GB)
        return xp.eye(n_classes, dtype=bool).take(t, axis=0)  # (C, C) -> (N, C)
    classes = xp.arange(n_classes)
    if ndim > 2:
        classes = classes.reshape((n_classes,) + (1,) * (ndim - 2))
    return t[:, None] == classes


def _class_max(x, xp):
    """``x.max(axis=1, keepdims=True)``. NumPy reduces a short contiguous axis
    slowly (~15 us for (256, 10)); with few classes, a max over the rows of a
    transposed copy is several times faster."""
    if x.ndim == 2 and x.shape[1] <= 64 and isinstance(x, np.ndarray):
        return np.ascontiguousarray(x.T).max(axis=0)[:, None]  # (C, N) -> (N,) -> (N, 1)
    return x.max(axis=1, keepdims=True)


def _class_sum(x, xp):
    """``x.sum(axis=1, keepdims=True)``; a matrix-vector product for (N, C)."""
    if x.ndim == 2:
        return (x @ xp.ones(x.shape[1], x.dtype))[:, None]  # (N, C) @ (C,) -> (N, 1)
    return x.sum(axis=1, keepdims=True)


def target_entries(a, t, xp):
    """``a[n, t[n, ...], ...]`` (N, *S): the entry of each position's target class."""
    if a.ndim == 2:
        return a[xp.arange(a.shape[0]), t]
    # (N, C, *S) -> (N, 1, *S) -> (N, *S)
    return xp.take_along_axis(a, t[:, None], axis=1)[:, 0]


def _class_weight(op, weight, x, xp):
    if weight is None:
        return None
    w = const(weight, xp)
    if w.shape != (x.shape[1],):
        raise ShapeError(f"{op}: weight must have one entry per class, shape ({x.shape[1]},), "
                         f"got {describe(w)} for scores {describe(x)}")
    return w.astype(x.dtype, copy=False)


def _denominator(op, reduction, normalization, t, n_valid, wt, valid):
    """The number the summed loss is divided by (never 0), or None for 'none'."""
    if normalization is not None:
        mode = str(normalization).lower()
        if mode not in _NORMALIZATIONS:
            raise ArgumentError(f"{op}: normalization must be one of "
                                f"{tuple(m.upper() for m in _NORMALIZATIONS)} (or None), got "
                                f"{normalization!r}")
        if reduction != "mean":
            raise ArgumentError(f"{op}: pass either normalization={normalization!r} or "
                                f"reduction={reduction!r}, not both")
        if mode == "valid":  # Caffe's normalizers are at least 1
            return max(n_valid, 1)
        if mode == "batch_size":
            return max(t.shape[0], 1)
        if mode == "full":
            return max(t.size, 1)
        return 1
    check_reduction(op, reduction)
    if reduction == "none":
        return None
    if reduction == "sum":
        return 1
    if wt is None:
        return _mean_count(n_valid, t.size)
    total = float((wt if valid is None else wt * valid).sum(dtype=acc_dtype(wt.dtype)))
    return total if total != 0 else _mean_count(0, t.size)


# ------------------------------------------------------------ cross entropy

class CrossEntropy(Function):
    """Softmax + negative log-likelihood fused: the vjp is ``(p - q) * scale``
    with ``p`` the saved softmax and ``q`` the (smoothed, weighted) target
    distribution; the loss value is not needed (Caffe's SoftmaxWithLoss).
    Under create_graph ``p`` is recomputed from the saved logits by a recorded
    softmax (the saved one is a constant there), and the same formula is recorded."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, t, valid=None, weight=None, smoothing=0.0, denom=1):
        xp = ctx.xp
        x_in, dtype, x = x, x.dtype, upcast(x)  # float16: softmax and sums in float32, p too
        if weight is not None:
            weight = weight.astype(x.dtype, copy=False)
        sh = x - _class_max(x, xp)  # (N, C, *S), <= 0: exp cannot overflow
        e = xp.exp(sh)
        s = _class_sum(e, xp)  # (N, 1, *S), >= 1
        lse = xp.log(s)[:, 0]  # (N, *S): log-sum-exp minus the max
        nll = lse - target_entries(sh, t, xp)  # -log p[target]
        wt = None
        if weight is None:
            loss = nll
            if smoothing:
                c = x.shape[1]
                # -sum_c log p_c = C * lse - sum_c sh_c
                loss = nll * (1 - smoothing) + (lse * c - sh.sum(axis=1)) * (smoothing / c)
        else:
            wt = weight[t]  # (N, *S)
            loss = nll * wt
            if smoothing:
                wv = weight.reshape((-1,) + (1,) * (x.ndim - 2))
                smooth = lse * weight.sum() - (sh * wv).sum(axis=1)
                loss = loss * (1 - smoothing) + smooth * (smoothing / x.shape[1])
        if valid is not None:
            loss = xp.where(valid, loss, 0)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(e / s, t, valid, wt, weight, x_in)
            ctx.smoothing = smoothing
        return reduce_loss(ctx, loss, denom, dtype)

    @staticmethod
    def backward(ctx, g):
        p, t, valid, wt, weight, x = ctx.saved_tensors
        if ctx._graph:
            p = softmax(upcast(x), axis=1)
        eps = ctx.smoothing
        if ctx.xp.name == "cupy":  # one fused pass (the raw-array path only)
            r = g / ctx.denom if ctx.denom is not None else g
            return _cuda_losses.backward(ctx.xp, p, t, valid, weight, wt, r, eps), None
        n_classes = p.shape[1]
        onehot = target_mask(t, n_classes, p.ndim, ctx.device.backend)  # a constant
        # scale: dL/d(per-position loss), broadcast over classes
        r = g / ctx.denom if ctx.denom is not None else g[:, None]
        if valid is not None:
            r = r * valid[:, None]
        if weight is None:
            if eps:
                return (p - (onehot * (1 - eps) + eps / n_classes)) * r, None
            return (p - onehot) * r, None
        # q_c = (1 - eps) w_c [c == t] + (eps / C) w_c ;  grad = p * sum_c q_c - q
        wv = weight.reshape((-1,) + (1,) * (p.ndim - 2))
        big_s = wt * (1 - eps) + float(weight.sum()) * (eps / n_classes)  # (N, *S)
        q = onehot * (wt * (1 - eps))[:, None] + wv * (eps / n_classes)
        return (p * big_s[:, None] - q) * r, None


def cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0, normalization=None):
    """Softmax cross-entropy of logits ``(N, C[, H, W, ...])`` against 0-based
    integer targets ``(N[, H, W, ...])``, as one fused, log-sum-exp-stable op.

    Per position ``i``: ``l_i = w[t_i] * (lse(x_i) - x_i[t_i])`` (with
    ``label_smoothing=e``: ``(1-e) l_i + e/C * sum_c w_c (lse(x_i) - x_ic)``);
    positions with ``t_i == ignore_index`` contribute 0 loss and 0 gradient.

    ``reduction`` (PyTorch): ``"mean"`` divides the sum by the number of
    non-ignored targets, or with ``weight`` by ``sum(w[t_i])`` over them;
    ``"sum"``; ``"none"`` returns the per-position losses. ``normalization``
    (Caffe's SoftmaxWithLoss; overrides ``"mean"``) divides the sum by:
    ``"VALID"`` the count of non-ignored targets (= "mean" without weights),
    ``"BATCH_SIZE"`` N, ``"FULL"`` N*H*W (ignored ones included), ``"NONE"``
    1 (= "sum"). Unlike PyTorch, a batch whose targets are all ignored gives
    loss 0 and gradient 0, not nan (Caffe clamps likewise); an empty batch
    (no targets at all) gives nan with ``"mean"``, as PyTorch does.
    float16 logits are computed in float32 and the loss returned in float16.
    Unlike Caffe, the loss is exact (no clamp of ``p`` at FLT_MIN). ``weight``
    (one per class) is a constant: it gets no gradient.

    >>> ops.cross_entropy(tapegrad.tensor([[2.0, 0.0]]), np.array([0]))  # log(1 + e^-2)
    """
    x = as_tensor(logits)
    xd = x.array
    xp = x.device.xp
    t = const(target, xp)
    check_float("cross_entropy", xd, "scores")
    t, valid, n_valid = class_targets("cross_entropy", xd, t, ignore_index, xp)
    w = _class_weight("cross_entropy", weight, xd, xp)
    smoothing = float(label_smoothing)
    if not 0.0 <= smoothing <= 1.0:
        raise ArgumentError(f"cross_entropy: label_smoothing must be in [0, 1], got "
                            f"{label_smoothing!r}")
    if normalization is None and reduction == "mean" and w is None:
        denom = _mean_count(n_valid, t.size)  # the common case, without the general checks
    else:
        denom = _denominator("cross_entropy", reduction, normalization, t, n_valid,
                             None if w is None else w[t], valid)
    return CrossEntropy.apply(x, t, valid=valid, weight=w, smoothing=smoothing, denom=denom)


# ------------------------------------------------------------------ nll loss

class NLLLoss(Function):
    """The vjp is linear in the upstream gradient and does not depend on the
    log-probabilities: it is recorded as it stands under create_graph."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, lp, t, valid=None, weight=None, denom=1):
        xp = ctx.xp
        loss = -target_entries(lp, t, xp)
        wt = None
        if weight is not None:
            wt = weight[t]
            loss = loss * wt
        if valid is not None:
            loss = xp.where(valid, loss, 0)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(t, valid, wt)
            ctx.meta = (lp.shape, lp.dtype)
        return reduce_loss(ctx, loss, denom, lp.dtype)

    @staticmethod
    def backward(ctx, g):
        t, valid, wt = ctx.saved_tensors
        shape, dtype = ctx.meta
        r = g / ctx.denom if ctx.denom is not None else g
        r = -r
        if wt is not None:
            r = r * wt
        if valid is not None:
            r = r * valid
        if getattr(r, "ndim", 0):
            r = r[:, None]  # (N, *S) -> (N, 1, *S): broadcast over classes
        # the gradient sits on each position's target class (a constant mask)
        return target_mask(t, shape[1], len(shape), ctx.device.backend) * r, None


def nll_loss(log_probs, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of 0-based integer targets under log-probabilities
    ``(N, C[, H, W, ...])``: ``-w[t_i] * log_probs[i, t_i]``, reduced as in
    :func:`cross_entropy` (``"mean"`` divides by the summed weights of the
    non-ignored targets; all ignored gives 0, not NaN; an empty batch gives
    NaN, as in PyTorch).

    >>> ops.nll_loss(ops.log_softmax(x), np.array([2, 0]))
    """
    x = as_tensor(log_probs)
    xd = x.array
    xp = x.device.xp
    check_float("nll_loss", xd, "scores")
    t, valid, n_valid = class_targets("nll_loss", xd, const(target, xp), ignore_index, xp)
    w = _class_weight("nll_loss", weight, xd, xp)
    denom = _denominator("nll_loss", reduction, None, t, n_valid,
                         None if w is None else w[t], valid)
    return NLLLoss.apply(x, t, valid=valid, weight=w, denom=denom)


# ------------------------------------------------------------------ mse loss

class MSELoss(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, y, denom=1):
        d = x - y
        loss = d * d
        ctx.save_for_backward(x, y)
        return reduce_loss(ctx, loss, denom, loss.dtype)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        r = g * (2 / ctx.denom) if ctx.denom is not None else g * 2
        gx = (x - y) * r
        return (gx if ctx.needs_input_grad[0] else None), (-gx if ctx.needs_input_grad[1]
                                                           else None)


def mse_loss(input, target, reduction="mean"):
    """Squared error ``(input - target)**2``, averaged (``"mean"``), summed or
    per element (``"none"``); gradients flow to both ``input`` and ``target``.
    ``target`` may broadcast to ``input``'s shape (not the other way round).

    >>> ops.mse_loss(tapegrad.tensor([1.0, 3.0]), tapegrad.tensor([0.0, 1.0]))  # 2.5
    """
    x, y, denom = _elementwise_inputs("mse_loss", input, target, reduction)
    return MSELoss.apply(x, y, denom=denom)


def elementwise_pair(op, input, target):
    """``(x, y, n)`` of a loss between two same-shaped inputs: ``target`` a constant
    in ``input``'s dtype unless it is a Tensor, both floating (PyTorch refuses an
    integer target), the two shapes equal or one broadcasting to the other's, and
    ``n`` the number of elements of the broadcast shape."""
    x = as_tensor(input)
    xp = x.device.xp
    y = target if isinstance(target, Tensor) else const(target, xp, x.dtype)
    check_float(op, x.array)
    check_float(op, y, "target")
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        shape = None
    if shape not in (x.shape, y.shape):
        raise ShapeError(f"{op}: input {describe(x)} and target {describe(y)} must have "
                         "the same shape (or one must broadcast to the other's shape)")
    return x, y, int(np.prod(shape, dtype=np.int64))


def _elementwise_inputs(op, input, target, reduction):
    """:func:`elementwise_pair` and the mean's denominator for ``reduction``."""
    check_reduction(op, reduction)
    x, y, n = elementwise_pair(op, input, target)
    return x, y, plain_denominator(reduction, n)


class SmoothL1Loss(Function):
    """``scale * 0.5 d^2 / beta`` where ``|d| < beta``, else ``scale * (|d| - 0.5 beta)``
    (``d = x - y``): ``beta = 0`` is the L1 loss, ``scale = 1`` the smooth L1 loss and
    ``scale = beta`` the Huber loss. float16 is computed in float32. The vjp,
    ``scale * d / beta`` or ``scale * sign(d)``, uses only differentiable operations."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, y, denom=1, beta=1.0, scale=1.0):
        xp = ctx.xp
        d = upcast(x) - upcast(y)  # float16: squares in float32
        a = xp.abs(d)
        if beta == 0:
            loss = a
        else:
            loss = xp.where(a < beta, (0.5 * scale / beta) * d * d, scale * (a - 0.5 * beta))
        ctx.beta, ctx.scale = beta, scale
        ctx.save_for_backward(x, y)
        return reduce_loss(ctx, loss, denom, x.dtype)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        x, y = ctx.saved_tensors
        d = x - y
        slope = xp.sign(d)
        if ctx.scale != 1:
            slope = slope * ctx.scale
        if ctx.beta:
            slope = xp.where(xp.abs(d) < ctx.beta, d * (ctx.scale / ctx.beta), slope)
        gx = slope * (g / ctx.denom if ctx.denom is not None else g)
        return (gx if ctx.needs_input_grad[0] else None), (-gx if ctx.needs_input_grad[1]
                                                           else None)


def l1_loss(input, target, reduction="mean"):
    """Absolute error ``|input - target|``, averaged, summed or per element; the
    gradient at ``input == target`` is 0, as in PyTorch.

    >>> ops.l1_loss(tapegrad.tensor([1.0, 3.0]), tapegrad.tensor([0.0, 1.0]))  # 1.5
    """
    x, y, denom = _elementwise_inputs("l1_loss", input, target, reduction)
    return SmoothL1Loss.apply(x, y, denom=denom, beta=0.0)


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """PyTorch's smooth L1 (Fast R-CNN's, ``beta=1``): quadratic below ``beta``,
    linear above it (``beta=0`` gives :func:`l1_loss`).

    >>> ops.smooth_l1_loss(pred_boxes, target_boxes, beta=1.0)
    """
    if not isinstance(beta, (int, float)) or isinstance(beta, bool) or not beta >= 0:
        raise ArgumentError(f"smooth_l1_loss: beta must be a number >= 0, got {beta!r}")
    x, y, denom = _elementwise_inputs("smooth_l1_loss", input, target, reduction)
    return SmoothL1Loss.apply(x, y, denom=denom, beta=float(beta))


# ---------------------------------------------------- binary cross-entropy

class BCEWithLogits(Function):
    """The vjp uses only differentiable operations (``weight`` and ``pos_weight``
    are constants), so it is recorded as it stands under create_graph."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, t, weight=None, pos_weight=None, denom=1):
        xp = ctx.xp
        sp = xp.log1p(xp.exp(-xp.abs(x)))  # log(1 + e^-|x|)
        # max(x, 0) - x t = (1 - t) max(x, 0) + t max(-x, 0), with pos_weight (1 - t) x
        # + (1 + (pw - 1) t) softplus(-x) = (1 - t) max(x, 0) + pw t max(-x, 0) + (1 +
        # (pw - 1) t) log(1 + e^-|x|): no inf - inf at x = +-inf (PyTorch: inf, or NaN
        # where the limit is 0 or inf), and a sure prediction that is right costs 0
        pw_t = t if pos_weight is None else pos_weight * t
        loss = _times(xp, 1 - t, xp.maximum(x, 0)) + _times(xp, pw_t, xp.maximum(-x, 0))
        loss = loss + (sp if pos_weight is None else (1 + (pos_weight - 1) * t) * sp)
        if weight is not None:
            loss = loss * weight
        ctx.save_for_backward(x, t, weight, pos_weight)
        return reduce_loss(ctx, loss, denom, loss.dtype)

    @staticmethod
    def backward(ctx, g):
        x, t, weight, pw = ctx.saved_tensors
        xp = ctx.xp
        r = g / ctx.denom if ctx.denom is not None else g
        if weight is not None:
            r = r * weight
        if isinstance(x, Tensor):
            # create_graph: sigmoid and softplus as recorded ops (the stable forms below go
            # through |x|, whose recorded slope at 0 would zero the second derivative there)
            sig = sigmoid(x)
            softplus_neg = (lambda: softplus(-x))
        else:
            e = xp.exp(-xp.abs(x))
            sig = xp.where(x >= 0, 1 / (1 + e), e / (1 + e))  # sigmoid(x), stable
            softplus_neg = (lambda: xp.maximum(-x, 0) + xp.log1p(e))  # log(1 + e^-x)
        gx = gt = None
        if pw is None:
            if ctx.needs_input_grad[0]:
                gx = (sig - t) * r
            if ctx.needs_input_grad[1]:
                gt = -x * r
        else:
            if ctx.needs_input_grad[0]:
                gx = ((1 - t) + (1 + (pw - 1) * t) * (sig - 1)) * r
            if ctx.needs_input_grad[1]:
                if isinstance(x, Tensor):
                    gt = ((pw - 1) * softplus_neg() - x) * r
                else:  # the same, without inf - inf at x = -inf
                    gt = (pw * xp.maximum(-x, 0) - xp.maximum(x, 0) + (pw - 1) * xp.log1p(e)) * r
        return gx, gt


def _times(xp, w, v):
    """``w * v``, 0 where ``w`` is 0 even if ``v`` is inf (a loss's 0 * log 0 is 0)."""
    return w * xp.where(w == 0, 0, v)


def binary_cross_entropy_with_logits(logits, target, weight=None, pos_weight=None,
                                     reduction="mean"):
    """Sigmoid + binary cross-entropy, stably: ``max(x,0) - x t + log(1 + e^-|x|)``
    per element, times ``weight`` (broadcast to ``logits``); ``pos_weight``
    (broadcast along the last axis, e.g. ``(C,)``) weights the positive term:
    ``-[pw t log s(x) + (1-t) log(1 - s(x))]``. Targets are probabilities in
    [0, 1] of ``logits``' shape; they get a gradient too. ``weight`` and
    ``pos_weight`` are constants.

    >>> ops.binary_cross_entropy_with_logits(tapegrad.tensor([0.0]), np.array([1.0]))  # log 2
    """
    op = "binary_cross_entropy_with_logits"
    x = as_tensor(logits)
    xp = x.device.xp
    xd = x.array
    check_float(op, xd, "logits")
    t = target if isinstance(target, Tensor) else const(target, xp, xd.dtype)
    if t.shape != x.shape:
        raise ShapeError(f"{op}: target {describe(t)} must have the logits' shape, got logits "
                         f"{describe(xd)}")
    if t.dtype.kind != "f":
        raise DTypeError(f"{op}: targets must be floating-point probabilities, got "
                         f"{describe(t)}; convert with .float()")
    check_reduction(op, reduction)
    consts = []
    for name, a in (("weight", weight), ("pos_weight", pos_weight)):
        a = const(a, xp)
        if a is not None:
            check_broadcasts(op, name, a, xd.shape, f"the logits' shape {describe(xd)}")
            a = a.astype(xd.dtype, copy=False)
        consts.append(a)
    return BCEWithLogits.apply(x, t, weight=consts[0], pos_weight=consts[1],
                               denom=plain_denominator(reduction, xd.size))


# ------------------------------------------------------------------ metrics

def topk_wrong(x, xc, k):
    """True where more than ``k - 1`` classes score strictly above the target's
    score ``xc`` (so ties count in the target's favour)."""
    return (x > xc[:, None]).sum(axis=1) >= k



def _metric_inputs(op, logits, target):
    x = raw(logits)
    if not hasattr(x, "ndim"):
        x = np.asarray(x)
    t = raw(target)
    if not hasattr(t, "ndim"):
        t = np.asarray(t)
    dev = device_of_array(x)
    if device_of_array(t) is not dev:  # a metric's targets follow the scores (no gradient)
        t = dev.put(t)
    if x.ndim < 2 or t.shape != x.shape[:1] + x.shape[2:]:
        raise ShapeError(f"{op}: expected scores (N, C[, H, W]) and targets (N[, H, W]), got "
                         f"{describe(x)} and {describe(t)}")
    if t.dtype.kind not in "iu":
        raise DTypeError(f"{op}: targets must be integer class indices, got {describe(t)}")
    return x, t


def accuracy(logits, target):
    """Fraction of positions whose top-scoring class (axis 1) is the target, as a
    Python float (no gradient, nothing recorded).

    >>> ops.accuracy(tapegrad.tensor([[0.1, 0.9], [0.8, 0.2]]), np.array([1, 1]))  # 0.5
    """
    x, t = _metric_inputs("accuracy", logits, target)
    if t.size == 0:
        return 0.0
    return float((x.argmax(axis=1) == t).mean())


def topk_error(logits, target, k=5):
    """Fraction of positions whose target is not among the ``k`` highest scores
    (at least ``k`` classes score strictly higher; ties favour the target), as
    a Python float (no gradient, nothing recorded).

    >>> ops.topk_error(logits, labels, k=5)
    """
    x, t = _metric_inputs("topk_error", logits, target)
    if int(k) < 1:
        raise ArgumentError(f"topk_error: k must be >= 1, got {k!r}")
    if t.size == 0:
        return 0.0
    c = x.shape[1]
    ts = t.clip(0, c - 1)
    xc = target_entries(x, ts, get_array_module(x))
    wrong = topk_wrong(x, xc, int(k)) | (t < 0) | (t >= c)
    return float(wrong.mean())
