"""MatConvNet's ``vl_nnloss``: ten loss and error kinds behind one op,
summed (not averaged) over the batch and spatial positions.

Shares its label handling with :mod:`.loss` (0-based class targets along
axis 1); see :func:`loss` for the MatConvNet conventions and their mapping.
"""

from __future__ import annotations

from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function
from .losses import _check_float, _class_targets, _const, _gather, _onehot, _tensor, _topk_wrong
from .reduction import upcast

__all__ = ["loss"]


_CATEGORICAL = ("classerror", "topkerror", "log", "softmaxlog", "mhinge", "mshinge")
_BINARY = ("binaryerror", "binarylog", "logistic", "hinge")
_ERRORS = ("classerror", "topkerror", "binaryerror")


class VLLoss(Function):
    """MatConvNet's ``vl_nnloss``: ``sum_i W_i L(x_i, c_i)``, one scalar."""

    @staticmethod
    def forward(ctx, x, c, kind="softmaxlog", weights=None, topk=5, threshold=0.0):
        xp = ctx.xp
        dtype, x = x.dtype, upcast(x)  # float16: the terms and their sum in float32
        if weights is not None:
            weights = weights.astype(x.dtype, copy=False)
        if kind in _BINARY:
            c = c.astype(x.dtype, copy=False)
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
        return xp.asarray(total, dtype=dtype)

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
