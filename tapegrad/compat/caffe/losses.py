"""Caffe's loss layers (SoftmaxWithLoss, SigmoidCrossEntropyLoss, EuclideanLoss,
HingeLoss, ContrastiveLoss) and its two metrics (Accuracy, ArgMax), as Caffe's
``*_layer.cpp`` compute them. Where Caffe's backward is not the exact derivative of
its forward (ContrastiveLoss divides by ``dist + 1e-4``; SoftmaxWithLoss clamps the
probability at FLT_MIN in the loss but not the gradient) the layer is a small
``Function`` whose vjp is Caffe's. Loss layers default to ``loss_weight: 1``."""

from __future__ import annotations

import numpy as np

from ... import ops
from ...tape import Function, no_grad
from ...tensor import tensor as make_tensor
from .base import Layer, canonical_axis, count, register

__all__ = []

FLT_MIN = float(np.finfo(np.float32).tiny)
NORMALIZATION = {0: "FULL", 1: "VALID", 2: "BATCH_SIZE", 3: "NONE"}


def _normalization(lp, default):
    """Caffe's choice: ``normalization`` if given, else the deprecated ``normalize``
    (true: VALID, false: BATCH_SIZE), else the layer's default."""
    p = lp.loss_param
    if p.HasField("normalization"):
        return NORMALIZATION[p.normalization]
    if p.HasField("normalize"):
        return "VALID" if p.normalize else "BATCH_SIZE"
    return default


def _normalizer(mode, outer, inner, valid):
    n = {"FULL": outer * inner, "VALID": valid, "BATCH_SIZE": outer, "NONE": 1}[mode]
    return max(1.0, float(n))


def _labels(layer, xp, label, n, what="label"):
    """Caffe's ``static_cast<int>`` of float labels (truncation toward zero)."""
    if label.size != n:
        raise layer.error(f"needs {n} {what}s (one per prediction), got {label.size} "
                          f"(shape {tuple(label.shape)})")
    return xp.trunc(label.reshape(-1)).astype(np.int64)


class _SoftmaxLoss(Function):
    @staticmethod
    def forward(ctx, x, label, axis=1, ignore=None, mode="VALID"):
        xp = ctx.xp
        outer, c, inner = count(x.shape, 0, axis), x.shape[axis], count(x.shape, axis + 1)
        x3 = x.reshape(outer, c, inner)  # (outer, C, inner)
        z = x3 - x3.max(axis=1, keepdims=True)
        e = xp.exp(z)
        prob = e / e.sum(axis=1, keepdims=True)
        t = label.reshape(outer, inner)
        valid = xp.ones(t.shape, bool) if ignore is None else t != ignore
        t = xp.where(valid, t, 0)
        p_t = xp.take_along_axis(prob, t[:, None, :], axis=1)[:, 0, :]
        loss = -(xp.log(xp.maximum(p_t, FLT_MIN)) * valid).sum()
        norm = _normalizer(mode, outer, inner, int(valid.sum()))
        ctx.norm, ctx.shape = norm, x.shape
        ctx.save_for_backward(prob, t, valid)
        return xp.asarray(loss / norm, dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        prob, t, valid = ctx.saved_tensors
        xp = ctx.xp
        d = prob.copy()
        xp.put_along_axis(d, t[:, None, :], xp.take_along_axis(d, t[:, None, :], 1) - 1, 1)
        d *= valid[:, None, :]
        return (d * (g / ctx.norm)).reshape(ctx.shape).astype(prob.dtype), None


class _LossLayer(Layer):
    is_loss = True
    bottoms = (2, 2)

    def allow_force_backward(self, bottom):
        return bottom != 1  # Caffe's LossLayer: never into the labels


@register
class SoftmaxWithLoss(_LossLayer):
    """Caffe's SoftmaxWithLoss: ``-sum log(max(p_label, FLT_MIN)) / normalizer`` over
    the predictions not labelled ``ignore_label``; ``normalization`` FULL (all
    predictions), VALID (default: the non-ignored ones), BATCH_SIZE (the count of
    the axes before ``axis``), NONE, each at least 1; the deprecated ``normalize``
    (true: VALID, false: BATCH_SIZE). Its gradient is ``(p - onehot) / normalizer``
    (0 at ignored positions). A second top is the softmax, which gets no gradient."""

    type = "SoftmaxWithLoss"
    tops = (1, 2)

    def parse(self, lp):
        self.axis = lp.softmax_param.axis
        p = lp.loss_param
        self.ignore = p.ignore_label if p.HasField("ignore_label") else None
        self.mode = _normalization(lp, "VALID")

    def forward(self, x, label):
        axis = canonical_axis(self, self.axis, x.ndim)
        n = count(x.shape, 0, axis) * count(x.shape, axis + 1)
        t = _labels(self, x.device.xp, label.array, n)
        bad = (t < 0) | (t >= x.shape[axis])
        if self.ignore is not None:
            bad &= t != self.ignore
        if bool(bad.any()):
            raise self.error(f"labels must be integers in [0, {x.shape[axis]}) "
                             f"(or ignore_label), got {sorted(set(t[bad].tolist()))[:5]}")
        loss = _SoftmaxLoss.apply(x, t, axis=axis,
                                  ignore=self.ignore, mode=self.mode)
        if self.n_top == 1:
            return (loss,)
        with no_grad():
            prob = ops.softmax(x.detach(), axis=axis)
        return loss, prob


class _SigmoidCE(Function):
    @staticmethod
    def forward(ctx, x, t, ignore=None, mode="BATCH_SIZE", outer=1):
        xp = ctx.xp
        valid = xp.ones(x.shape, bool) if ignore is None else xp.trunc(t) != ignore
        pos = (x >= 0).astype(x.dtype)
        # Caffe's stable form: x*(t - [x>=0]) - log(1 + exp(x - 2x[x>=0]))
        loss = -((x * (t - pos) - xp.log1p(xp.exp(x - 2 * x * pos))) * valid).sum()
        norm = _normalizer(mode, outer, x.size // max(outer, 1), int(valid.sum()))
        ctx.norm = norm
        ctx.save_for_backward(x, t, valid)
        return xp.asarray(loss / norm, dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        x, t, valid = ctx.saved_tensors
        xp = ctx.xp
        s = 1 / (1 + xp.exp(-x))
        return ((s - t) * valid * (g / ctx.norm)).astype(x.dtype), None


@register
class SigmoidCrossEntropyLoss(_LossLayer):
    """Caffe's SigmoidCrossEntropyLoss: the cross-entropy of ``sigmoid(x)`` against
    targets in [0, 1] (same count as ``x``), summed over the elements not equal to
    ``ignore_label``, divided by the normalizer: BATCH_SIZE (``x.shape[0]``) by
    default, or ``normalization`` / ``normalize`` as SoftmaxWithLoss."""

    type = "SigmoidCrossEntropyLoss"

    def parse(self, lp):
        p = lp.loss_param
        self.ignore = p.ignore_label if p.HasField("ignore_label") else None
        self.mode = _normalization(lp, "BATCH_SIZE")

    def forward(self, x, t):
        if t.numel() != x.numel():
            raise self.error(f"inputs must have the same count, got {tuple(x.shape)} and "
                             f"{tuple(t.shape)}")
        return (_SigmoidCE.apply(x, t.array.reshape(x.shape).astype(x.dtype),
                                 ignore=self.ignore, mode=self.mode, outer=x.shape[0]),)


@register
class EuclideanLoss(_LossLayer):
    """Caffe's EuclideanLoss: ``sum((a - b)^2) / (2 * a.shape[0])``; both bottoms get
    gradients (``a`` and ``b`` must have the same count)."""

    type = "EuclideanLoss"

    def allow_force_backward(self, bottom):
        return True

    def forward(self, a, b):
        if a.numel() != b.numel():
            raise self.error(f"inputs must have the same count, got {tuple(a.shape)} and "
                             f"{tuple(b.shape)}")
        d = a - b.reshape(tuple(a.shape))
        return ((d * d).sum() * (0.5 / a.shape[0]),)


@register
class HingeLoss(_LossLayer):
    """Caffe's HingeLoss: with ``t = +1`` at the label and ``-1`` elsewhere (over the
    ``count / N`` values of each sample), L1: ``sum(max(0, 1 - t*x)) / N``; L2: the
    sum of squares of the same margins over N."""

    type = "HingeLoss"

    def parse(self, lp):
        self.norm = lp.hinge_loss_param.norm

    def forward(self, x, label):
        n = x.shape[0]
        x2 = x.reshape((n, -1))  # (N, dim)
        t = _labels(self, x.device.xp, label.array, n)
        if bool(((t < 0) | (t >= x2.shape[1])).any()):
            raise self.error(f"labels must be in [0, {x2.shape[1]})")
        sign = -x.device.xp.ones(x2.shape, x2.dtype)
        sign[x.device.xp.arange(n), t] = 1
        margin = ops.relu(1.0 - x2 * sign)
        loss = margin.sum() if self.norm == 1 else (margin * margin).sum()
        return (loss * (1.0 / n),)


class _Contrastive(Function):
    @staticmethod
    def forward(ctx, a, b, y, margin=1.0, legacy=False):
        xp = ctx.xp
        n = a.shape[0]
        diff = (a - b).reshape(n, -1)
        dist_sq = (diff * diff).sum(axis=1)
        similar = xp.trunc(y.reshape(-1)).astype(np.int64) != 0
        if legacy:
            dissim = xp.maximum(margin - dist_sq, 0)
        else:
            dissim = xp.maximum(margin - xp.sqrt(dist_sq), 0) ** 2
        loss = xp.where(similar, dist_sq, dissim).sum() / n / 2
        ctx.margin, ctx.legacy, ctx.shape = margin, legacy, a.shape
        ctx.save_for_backward(diff, dist_sq, similar)
        return xp.asarray(loss, dtype=a.dtype)

    @staticmethod
    def backward(ctx, g):
        diff, dist_sq, similar = ctx.saved_tensors
        xp = ctx.xp
        alpha = g / diff.shape[0]
        if ctx.legacy:
            mdist = ctx.margin - dist_sq
            beta = -alpha * xp.ones_like(dist_sq)
        else:
            dist = xp.sqrt(dist_sq)
            mdist = ctx.margin - dist
            beta = -alpha * mdist / (dist + 1e-4)  # Caffe's backward, not d/da of forward
        coef = xp.where(similar, alpha, xp.where(mdist > 0, beta, 0))
        ga = (coef[:, None] * diff).reshape(ctx.shape).astype(diff.dtype)
        return ga, -ga, None


@register
class ContrastiveLoss(_LossLayer):
    """Caffe's ContrastiveLoss of pairs ``(a, b)`` with similarity labels ``y``:
    ``sum(y d^2 + (1 - y) max(margin - d, 0)^2) / 2N`` (``legacy_version``:
    ``max(margin - d^2, 0)``), and Caffe's gradient (which divides by ``d + 1e-4``)."""

    type = "ContrastiveLoss"
    bottoms = (3, 3)

    def allow_force_backward(self, bottom):
        return bottom != 2

    def parse(self, lp):
        p = lp.contrastive_loss_param
        self.margin, self.legacy = p.margin, p.legacy_version

    def forward(self, a, b, y):
        if tuple(a.shape) != tuple(b.shape) or y.numel() != a.shape[0]:
            raise self.error(f"needs a and b of one shape and one label per pair, got "
                             f"{tuple(a.shape)}, {tuple(b.shape)}, {tuple(y.shape)}")
        return (_Contrastive.apply(a, b, y.array, margin=self.margin, legacy=self.legacy),)


@register
class Accuracy(Layer):
    """Caffe's Accuracy: a prediction is right when at most ``top_k`` classes score
    ``>=`` the true class's score (ties count against it); the mean over the
    predictions not labelled ``ignore_label`` (0 when none). A second top holds the
    per-class accuracies. No gradient (Caffe has no backward for it)."""

    type = "Accuracy"
    bottoms = (2, 2)
    tops = (1, 2)
    differentiable = False

    def parse(self, lp):
        p = lp.accuracy_param
        self.top_k, self.axis = p.top_k, p.axis
        self.ignore = p.ignore_label if p.HasField("ignore_label") else None

    def allow_force_backward(self, bottom):
        return False

    def forward(self, x, label):
        xp = x.device.xp
        axis = canonical_axis(self, self.axis, x.ndim)
        outer, c, inner = count(x.shape, 0, axis), x.shape[axis], count(x.shape, axis + 1)
        if self.top_k > c:
            raise self.error(f"top_k {self.top_k} is more than the {c} classes")
        t = _labels(self, xp, label.array, outer * inner)
        valid = xp.ones(t.shape, bool) if self.ignore is None else t != self.ignore
        if bool(((t < 0) | (t >= c))[valid].any()):
            raise self.error(f"labels must be integers in [0, {c}) (or ignore_label)")
        x3 = x.array.reshape(outer, c, inner)
        tt = xp.where(valid, t, 0).reshape(outer, inner)
        true = xp.take_along_axis(x3, tt[:, None, :], axis=1)  # (outer, 1, inner)
        right = ((x3 >= true).sum(axis=1) <= self.top_k).reshape(-1) & valid
        n = int(valid.sum())
        acc = xp.asarray(right.sum() / n if n else 0.0, dtype=x.dtype)
        out = [_tensor(acc, x)]
        if self.n_top == 2:
            per = xp.bincount(t[valid], minlength=c).astype(x.dtype)
            hit = xp.bincount(t[right], minlength=c).astype(x.dtype)
            out.append(_tensor(xp.where(per > 0, hit / xp.maximum(per, 1), 0).astype(x.dtype),
                               x))
        return tuple(out)


def _tensor(a, like):
    return make_tensor(a, device=like.device)


@register
class ArgMax(Layer):
    """Caffe's ArgMax: the ``top_k`` indices (or values with ``out_max_val`` and an
    ``axis``) of the largest entries along ``axis``, or of each sample's flattened
    values without one (then shaped ``(N, 1 or 2, top_k)`` padded to the bottom's
    rank, indices then values with ``out_max_val``). Ties rank the higher index
    first (Caffe's ``std::greater`` on (value, index) pairs). No gradient."""

    type = "ArgMax"
    differentiable = False

    def parse(self, lp):
        p = lp.argmax_param
        self.out_max_val, self.top_k = p.out_max_val, p.top_k
        self.axis = p.axis if p.HasField("axis") else None
        if self.top_k < 1:
            raise self.error("top_k must be at least 1")

    def allow_force_backward(self, bottom):
        return False

    def forward(self, x):
        xp = x.device.xp
        a = x.array
        if self.axis is not None:
            axis = canonical_axis(self, self.axis, a.ndim)
            v = xp.moveaxis(a, axis, -1)
        else:
            axis = None
            v = a.reshape(a.shape[0], -1)
        k = self.top_k
        if k > v.shape[-1]:
            raise self.error(f"top_k {k} is more than the {v.shape[-1]} values to rank")
        n = v.shape[-1]
        order = xp.argsort(-v[..., ::-1], axis=-1, kind="stable")[..., :k]
        idx = (n - 1 - order)  # ties: the higher index first
        val = xp.take_along_axis(v, idx, axis=-1)
        if axis is not None:
            out = xp.moveaxis(val if self.out_max_val else idx.astype(a.dtype), -1, axis)
        else:
            rows = [idx.astype(a.dtype)] + ([val] if self.out_max_val else [])
            out = xp.stack(rows, axis=1)  # (N, 1 or 2, k)
            out = out.reshape(out.shape + (1,) * max(0, a.ndim - 3))
        return (_tensor(xp.ascontiguousarray(out).astype(a.dtype), x),)
