"""Losses: each op's forward and vjp side by side.

Classes are along axis 1 everywhere: logits ``(N, C)`` with targets ``(N,)``,
or ``(N, C, H, W, ...)`` with targets ``(N, H, W, ...)``. Class targets are
0-based integer indices. Per-position losses are reduced inside the op, so a
whole loss is one tape entry whose vjp is a single closed-form expression.

Besides the PyTorch-style losses there is :func:`loss`, MatConvNet's
``vl_nnloss`` (its ten ``kind``\\ s, summed over batch and positions), and two
metrics, :func:`accuracy` and :func:`topk_error`, which record nothing.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor

__all__ = ["cross_entropy", "nll_loss", "mse_loss", "binary_cross_entropy_with_logits", "loss",
           "accuracy", "topk_error"]

_REDUCTIONS = ("mean", "sum", "none")
_NORMALIZATIONS = ("valid", "batch_size", "full", "none")


# ------------------------------------------------------------------ helpers

def _tensor(x):
    return x if isinstance(x, Tensor) else Tensor(x)


def _const(a, xp, dtype=None):
    """A raw array on ``xp`` from a Tensor, array or list (never differentiated)."""
    if a is None:
        return None
    if isinstance(a, Tensor):
        a = a.data
    if dtype is not None:
        return xp.asarray(a, dtype=dtype)
    return a if type(a) is xp.ndarray else xp.asarray(a)


def _check_reduction(op, reduction):
    if reduction not in _REDUCTIONS:
        raise ArgumentError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def _check_float(op, x):
    if x.dtype.kind != "f":
        raise DTypeError(f"{op}: expected floating-point scores, got {describe(x)}; "
                         "convert with .float() or .double()")


def _class_targets(op, x, t, ignore_index, xp):
    """Validate integer class targets of scores ``x`` (N, C, *S).

    Returns ``(t_safe, valid, n_valid)``: ``t_safe`` has ignored entries
    replaced by class 0 (so it can index), ``valid`` is a bool mask or
    ``None`` when nothing is ignored. ``ignore_index=None`` ignores every
    negative target (the convention of :func:`loss`).
    """
    if x.ndim < 2:
        raise ShapeError(f"{op}: expected scores of shape (N, C) or (N, C, H, W, ...), got "
                         f"{describe(x)}")
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


def _onehot(t, n_classes, ndim, xp):
    """Bool (N, C, *S) mask with True at each position's target class."""
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


def _gather(a, t, xp):
    """``a[n, t[n, ...], ...]`` (N, *S): the entry of each position's target class."""
    if a.ndim == 2:
        return a[xp.arange(a.shape[0]), t]
    # (N, C, *S) -> (N, 1, *S) -> (N, *S)
    return xp.take_along_axis(a, t[:, None], axis=1)[:, 0]


def _class_weight(op, weight, x, xp):
    if weight is None:
        return None
    w = _const(weight, xp)
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
        if mode == "valid":
            return max(n_valid, 1)
        if mode == "batch_size":
            return max(t.shape[0], 1)
        if mode == "full":
            return max(t.size, 1)
        return 1
    _check_reduction(op, reduction)
    if reduction == "none":
        return None
    if reduction == "sum":
        return 1
    if wt is None:
        return max(n_valid, 1)
    total = float((wt if valid is None else wt * valid).sum())
    return total if total != 0 else 1


# ------------------------------------------------------------ cross entropy

class CrossEntropy(Function):
    """Softmax + negative log-likelihood fused: the vjp is ``(p - q) * scale``
    with ``p`` the saved softmax and ``q`` the (smoothed, weighted) target
    distribution; the loss value is not needed (Caffe's SoftmaxWithLoss)."""

    @staticmethod
    def forward(ctx, x, t, valid=None, weight=None, smoothing=0.0, denom=1):
        xp = ctx.xp
        sh = x - _class_max(x, xp)  # (N, C, *S), <= 0: exp cannot overflow
        e = xp.exp(sh)
        s = _class_sum(e, xp)  # (N, 1, *S), >= 1
        lse = xp.log(s)[:, 0]  # (N, *S): log-sum-exp minus the max
        nll = lse - _gather(sh, t, xp)  # -log p[target]
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
            ctx.save_for_backward(e / s, t, valid, wt, weight)
            ctx.smoothing = smoothing
            ctx.denom = denom
        if denom is None:
            return loss
        return xp.asarray(loss.sum() / denom)

    @staticmethod
    def backward(ctx, g):
        p, t, valid, wt, weight = ctx.saved_tensors
        xp = ctx.xp
        eps = ctx.smoothing
        n_classes = p.shape[1]
        onehot = _onehot(t, n_classes, p.ndim, xp)
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
    1 (= "sum"). Unlike PyTorch, nothing divides by 0: a batch whose targets
    are all ignored gives loss 0 and gradient 0 (Caffe clamps likewise).
    Unlike Caffe, the loss is exact (no clamp of ``p`` at FLT_MIN). ``weight``
    (one per class) is a constant: it gets no gradient.

    >>> ops.cross_entropy(tapegrad.tensor([[2.0, 0.0]]), np.array([0]))  # log(1 + e^-2)
    """
    x = _tensor(logits)
    xd = x.data
    xp = x.device.xp
    t = _const(target, xp)
    _check_float("cross_entropy", xd)
    t, valid, n_valid = _class_targets("cross_entropy", xd, t, ignore_index, xp)
    w = _class_weight("cross_entropy", weight, xd, xp)
    smoothing = float(label_smoothing)
    if not 0.0 <= smoothing <= 1.0:
        raise ArgumentError(f"cross_entropy: label_smoothing must be in [0, 1], got "
                            f"{label_smoothing!r}")
    if normalization is None and reduction == "mean" and w is None:
        denom = n_valid if n_valid else 1  # the common case, without the general checks
    else:
        denom = _denominator("cross_entropy", reduction, normalization, t, n_valid,
                             None if w is None else w[t], valid)
    return CrossEntropy.apply(x, t, valid=valid, weight=w, smoothing=smoothing, denom=denom)


# ------------------------------------------------------------------ nll loss

class NLLLoss(Function):
    @staticmethod
    def forward(ctx, lp, t, valid=None, weight=None, denom=1):
        xp = ctx.xp
        loss = -_gather(lp, t, xp)
        wt = None
        if weight is not None:
            wt = weight[t]
            loss = loss * wt
        if valid is not None:
            loss = xp.where(valid, loss, 0)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(t, valid, wt)
            ctx.denom = denom
            ctx.meta = (lp.shape, lp.dtype)
        if denom is None:
            return loss
        return xp.asarray(loss.sum() / denom)

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
        # the gradient sits on each position's target class
        return _onehot(t, shape[1], len(shape), ctx.xp) * r, None


def nll_loss(log_probs, target, weight=None, ignore_index=-100, reduction="mean"):
    """Negative log-likelihood of 0-based integer targets under log-probabilities
    ``(N, C[, H, W, ...])``: ``-w[t_i] * log_probs[i, t_i]``, reduced as in
    :func:`cross_entropy` (``"mean"`` divides by the summed weights of the
    non-ignored targets; all ignored gives 0, not NaN).

    >>> ops.nll_loss(ops.log_softmax(x), np.array([2, 0]))
    """
    x = _tensor(log_probs)
    xd = x.data
    xp = x.device.xp
    _check_float("nll_loss", xd)
    t, valid, n_valid = _class_targets("nll_loss", xd, _const(target, xp), ignore_index, xp)
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
        ctx.denom = denom
        if denom is None:
            return loss
        return ctx.xp.asarray(loss.sum() / denom)

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
    x = _tensor(input)
    xp = x.device.xp
    y = target if isinstance(target, Tensor) else _const(target, xp, x.dtype)
    _check_float("mse_loss", x.data)
    _check_reduction("mse_loss", reduction)
    try:
        shape = np.broadcast_shapes(x.shape, y.shape)
    except ValueError:
        shape = None
    if shape not in (x.shape, y.shape):
        raise ShapeError(f"mse_loss: input {describe(x)} and target {describe(y)} must have "
                         "the same shape (or one must broadcast to the other's shape)")
    n = 1
    for s in shape:
        n *= s
    denom = None if reduction == "none" else (max(n, 1) if reduction == "mean" else 1)
    return MSELoss.apply(x, y, denom=denom)


# ---------------------------------------------------- binary cross-entropy

class BCEWithLogits(Function):
    @staticmethod
    def forward(ctx, x, t, weight=None, pos_weight=None, denom=1):
        xp = ctx.xp
        sp = xp.log1p(xp.exp(-xp.abs(x)))  # log(1 + e^-|x|)
        if pos_weight is None:
            loss = xp.maximum(x, 0) - x * t + sp
        else:
            # (1 - t) x + (1 + (pw - 1) t) softplus(-x)
            loss = (1 - t) * x + (1 + (pos_weight - 1) * t) * (xp.maximum(-x, 0) + sp)
        if weight is not None:
            loss = loss * weight
        ctx.save_for_backward(x, t, weight, pos_weight)
        ctx.denom = denom
        if denom is None:
            return loss
        return xp.asarray(loss.sum() / denom)

    @staticmethod
    def backward(ctx, g):
        x, t, weight, pw = ctx.saved_tensors
        xp = ctx.xp
        r = g / ctx.denom if ctx.denom is not None else g
        if weight is not None:
            r = r * weight
        e = xp.exp(-xp.abs(x))
        sig = xp.where(x >= 0, 1 / (1 + e), e / (1 + e))  # sigmoid(x), stable
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
                gt = ((pw - 1) * (xp.maximum(-x, 0) + xp.log1p(e)) - x) * r
        return gx, gt


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
    x = _tensor(logits)
    xp = x.device.xp
    xd = x.data
    _check_float(op, xd)
    t = target if isinstance(target, Tensor) else _const(target, xp, xd.dtype)
    if t.shape != x.shape:
        raise ShapeError(f"{op}: target {describe(t)} must have the logits' shape, got logits "
                         f"{describe(xd)}")
    if t.dtype.kind != "f":
        raise DTypeError(f"{op}: targets must be floating-point probabilities, got "
                         f"{describe(t)}; convert with .float()")
    _check_reduction(op, reduction)
    consts = []
    for name, a in (("weight", weight), ("pos_weight", pos_weight)):
        a = _const(a, xp)
        if a is not None:
            try:
                ok = np.broadcast_shapes(a.shape, x.shape) == x.shape
            except ValueError:
                ok = False
            if not ok:
                raise ShapeError(f"{op}: {name} {describe(a)} does not broadcast to the logits' "
                                 f"shape {describe(xd)}")
            a = a.astype(xd.dtype, copy=False)
        consts.append(a)
    denom = None if reduction == "none" else (max(xd.size, 1) if reduction == "mean" else 1)
    return BCEWithLogits.apply(x, t, weight=consts[0], pos_weight=consts[1], denom=denom)


# ------------------------------------------------------- MatConvNet vl_nnloss

_CATEGORICAL = ("classerror", "topkerror", "log", "softmaxlog", "mhinge", "mshinge")
_BINARY = ("binaryerror", "binarylog", "logistic", "hinge")
_ERRORS = ("classerror", "topkerror", "binaryerror")


def _topk_wrong(x, xc, k):
    """True where more than ``k - 1`` classes score strictly above the target's
    score ``xc`` (so ties count in the target's favour)."""
    return (x > xc[:, None]).sum(axis=1) >= k


class VLLoss(Function):
    """MatConvNet's ``vl_nnloss``: ``sum_i W_i L(x_i, c_i)``, one scalar."""

    @staticmethod
    def forward(ctx, x, c, kind="softmaxlog", weights=None, topk=5, threshold=0.0):
        xp = ctx.xp
        ctx.kind = kind
        if kind in _CATEGORICAL:
            xc = _gather(x, c, xp)  # (N, *S): the target class' score
            if kind == "classerror":
                t = (x.argmax(axis=1) != c).astype(x.dtype)
            elif kind == "topkerror":
                t = _topk_wrong(x, xc, topk).astype(x.dtype)
            elif kind == "log":
                t = -xp.log(xc)
            elif kind == "softmaxlog":
                m = x.max(axis=1, keepdims=True)
                e = xp.exp(x - m)
                s = e.sum(axis=1, keepdims=True)
                t = xp.log(s[:, 0]) + m[:, 0] - xc
                ctx.save_for_backward(e / s, c, xc, weights)
            elif kind == "mhinge":
                t = xp.maximum(1 - xc, 0)
            else:  # mshinge: margin against the best other class
                other = xp.where(_onehot(c, x.shape[1], x.ndim, xp), -xp.inf, x)
                q = other.argmax(axis=1)  # (N, *S)
                t = xp.maximum(1 - xc + _gather(other, q, xp), 0)
                ctx.save_for_backward(c, q, xc - _gather(x, q, xp), weights)
            if kind in ("log", "mhinge"):
                ctx.save_for_backward(c, xc, weights)
        else:
            if kind == "binaryerror":
                t = (xp.sign(x - threshold) != c).astype(x.dtype)
            elif kind == "binarylog":
                t = -xp.log(c * (x - 0.5) + 0.5)
            elif kind == "logistic":
                a = -c * x  # log(1 + e^a), stably
                t = xp.maximum(a, 0) + xp.log1p(xp.exp(-xp.abs(a)))
            else:  # hinge
                t = xp.maximum(1 - c * x, 0)
            ctx.save_for_backward(x, c, weights)
        ctx.meta = (x.shape, x.dtype)
        total = (t * weights).sum() if weights is not None else t.sum()
        return xp.asarray(total, dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        xp = ctx.xp
        kind = ctx.kind
        shape, dtype = ctx.meta
        if kind in _ERRORS:
            return xp.zeros(shape, dtype), None
        saved = ctx.saved_tensors
        w = saved[-1]
        r = g if w is None else g * w  # dL/dt per position
        if kind == "softmaxlog":
            p, c = saved[0], saved[1]
            if getattr(r, "ndim", 0):
                r = r[:, None]
            return (p - _onehot(c, shape[1], len(shape), xp)) * r, None
        if kind in ("log", "mhinge", "mshinge"):
            c = saved[0]
            if kind == "log":
                r = -r / xp.maximum(saved[1], 1e-8)  # MatConvNet's bound on 1 / x_c
            elif kind == "mhinge":
                r = -r * (saved[1] < 1)
            else:
                r = -r * (saved[2] < 1)  # x_c - x_q < 1
            if getattr(r, "ndim", 0):
                r = r[:, None]  # (N, *S) -> (N, 1, *S)
            grad = _onehot(c, shape[1], len(shape), xp) * r
            if kind == "mshinge":  # the runner-up class q gets the opposite
                grad = grad - _onehot(saved[1], shape[1], len(shape), xp) * r
            return grad, None
        x, c = saved[0], saved[1]
        if kind == "binarylog":
            den = x + (c - 1) * 0.5  # x for c = 1, x - 1 for c = -1
            return -r / xp.where(c == 0, 1, den), None
        if kind == "logistic":
            z = c * x
            e = xp.exp(-xp.abs(z))
            sig_neg = xp.where(z >= 0, e / (1 + e), 1 / (1 + e))  # sigmoid(-c x)
            return -r * c * sig_neg, None
        return -r * c * (c * x < 1), None  # hinge


def _instance_weights(op, w, shape, n, xp, dtype):
    """Broadcast ``instance_weights`` to ``shape``; a 1-D array of length N
    holds one weight per image."""
    w = _const(w, xp)
    if w.ndim == 1 and w.shape[0] == n and len(shape) > 1:
        w = w.reshape((n,) + (1,) * (len(shape) - 1))  # (N,) -> (N, 1, ..., 1)
    try:
        return xp.broadcast_to(w, shape).astype(dtype, copy=False)
    except ValueError:
        raise ShapeError(f"{op}: instance_weights {describe(w)} do not broadcast to the "
                         f"per-position shape {tuple(shape)}") from None


def loss(x, c, kind="softmaxlog", instance_weights=None, topk=5, threshold=0.0):
    """MatConvNet's ``vl_nnloss``: a loss SUMMED (not averaged) over the batch
    and all spatial positions, each term weighted by ``instance_weights``.

    Layout: ``x`` is ``(N, C[, H, W])``, classes on axis 1; MatConvNet's
    ``H x W x C x N`` array ``X`` is ``X.transpose(3, 2, 0, 1)`` here.

    Categorical kinds (``c``: integer class per image ``(N,)``, applied to every
    position, or per position ``(N, H, W)`` / ``(N, 1, H, W)``). Labels are
    **0-based** in ``[0, C)``; any **negative** label is ignored (weight 0), so a
    MatConvNet label array (1-based, 0 = ignore) converts as ``c - 1``:

    - ``classerror``: ``argmax_q x_q != c`` (zero gradient)
    - ``topkerror``: ``c`` not among the ``topk`` highest scores, i.e. at least
      ``topk`` classes score strictly higher (ties favour ``c``; zero gradient)
    - ``log``: ``-log x_c`` (``x`` are probabilities; the vjp bounds ``x_c`` below
      by 1e-8, as MatConvNet does)
    - ``softmaxlog``: ``-log softmax(x)_c`` (log-sum-exp stable)
    - ``mhinge``: ``max(0, 1 - x_c)``
    - ``mshinge``: ``max(0, 1 - x_c + max_{q != c} x_q)`` (Crammer-Singer)

    Binary kinds (``c`` of ``x``'s shape, labels ``+1`` / ``-1``, ``0`` = ignore):

    - ``binaryerror``: ``sign(x - threshold) != c`` (zero gradient; ``threshold``
      defaults to 0, use 0.5 for probabilities)
    - ``binarylog``: ``-log(c (x - 0.5) + 0.5)`` (``x`` a probability)
    - ``logistic``: ``log(1 + exp(-c x))`` (stable)
    - ``hinge``: ``max(0, 1 - c x)``

    ``instance_weights`` broadcast to the per-position terms: ``(N, 1, H, W)``
    (or ``(1, 1, H, W)``, ``(N, 1)``) for categorical kinds, ``x``'s shape for
    binary ones; a 1-D array of length N is one weight per image. Labels and
    weights get no gradient.

    >>> ops.loss(x, np.array([2, 0]), kind="mshinge")
    """
    op = f"loss(kind={kind!r})"
    xt = _tensor(x)
    xd = xt.data
    xp = xt.device.xp
    _check_float(op, xd)
    if kind not in _CATEGORICAL and kind not in _BINARY:
        raise ArgumentError(f"loss: unknown kind {kind!r}; expected one of "
                            f"{_CATEGORICAL + _BINARY}")
    if xd.ndim < 2:
        raise ShapeError(f"{op}: expected scores of shape (N, C) or (N, C, H, W), got "
                         f"{describe(xd)}")
    if int(topk) < 1:
        raise ArgumentError(f"{op}: topk must be >= 1, got {topk!r}")
    n = xd.shape[0]
    cd = _const(c, xp)
    valid = None
    if kind in _CATEGORICAL:
        pos_shape = xd.shape[:1] + xd.shape[2:]  # (N, *S)
        if cd.ndim == xd.ndim and cd.shape[1] == 1:  # (N, 1, H, W) -> (N, H, W)
            cd = cd.reshape(cd.shape[:1] + cd.shape[2:])
        if cd.shape == (n,) and xd.ndim > 2:  # one label per image, at every position
            cd = xp.broadcast_to(cd.reshape((n,) + (1,) * (xd.ndim - 2)), pos_shape)
        cd, valid, _ = _class_targets(op, xd, cd, None, xp)
        w = None
        if instance_weights is not None:
            w = _const(instance_weights, xp)
            if w.shape == pos_shape and xd.ndim > 2:
                w = w[:, None]  # (N, H, W) -> (N, 1, H, W)
            # (N, 1, *S) -> (N, *S)
            w = _instance_weights(op, w, xd.shape[:1] + (1,) + xd.shape[2:], n, xp,
                                  xd.dtype)[:, 0]
    else:
        if cd.shape != xd.shape:
            raise ShapeError(f"{op}: binary labels must have the scores' shape, got labels "
                             f"{describe(cd)} for scores {describe(xd)}")
        cd = cd.astype(xd.dtype, copy=False)
        valid = cd != 0
        if bool(valid.all()):
            valid = None
        w = (None if instance_weights is None
             else _instance_weights(op, instance_weights, xd.shape, n, xp, xd.dtype))
    if valid is not None:
        w = valid.astype(xd.dtype) if w is None else w * valid
    return VLLoss.apply(xt, cd, kind=kind, weights=w, topk=int(topk), threshold=threshold)


# ------------------------------------------------------------------ metrics

def _metric_inputs(op, logits, target):
    x = logits.data if isinstance(logits, Tensor) else logits
    if not hasattr(x, "ndim"):
        x = np.asarray(x)
    t = target.data if isinstance(target, Tensor) else target
    if not hasattr(t, "ndim"):
        t = np.asarray(t)
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
    xc = _gather(x, ts, np if isinstance(x, np.ndarray) else _array_module(x))
    wrong = _topk_wrong(x, xc, int(k)) | (t < 0) | (t >= c)
    return float(wrong.mean())


def _array_module(a):
    import cupy

    return cupy.get_array_module(a)
