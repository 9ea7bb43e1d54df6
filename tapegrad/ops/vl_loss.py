"""MatConvNet's ``vl_nnloss``: ten loss and error kinds behind one op,
summed (not averaged) over the batch and spatial positions.

Shares its label handling with :mod:`.losses` (0-based class targets along
axis 1); see :func:`loss` for the MatConvNet conventions and their mapping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from ..args import as_tensor as _tensor
from ..args import check_float as _check_float
from ..args import const as _const
from ..dtypes import upcast
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor
from .activation import sigmoid
from .losses import class_targets, target_entries, target_mask, topk_wrong
from .softmaxes import softmax

__all__ = ["loss"]


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


# ------------------------------------------------------- the kinds, one rule each
#
# terms(xp, x, c, topk=, threshold=) -> (t, saved): the per-position terms t
# ((N, *S) for categorical kinds, x's shape for binary ones) and the arrays the
# vjp needs after x, in the order of its parameters, which name them.
# vjp(xp, r, shape, x, *saved) -> dL/dx for r = dL/dt (per position, or one
# scalar when there are no weights); x is the op's input as given (float16 is
# not upcast yet) for kinds that keep_x, else None. vjp None: an error count,
# zero gradient.
# graph(xp, bk, r, shape, x, *saved) -> the same dL/dx as recorded ops
# (create_graph): xp is the TensorBackend, bk the array module (for constant
# masks), r and x Tensors. The saved arrays are constants there, so a graph
# rule uses them only for masks and indices and recomputes the rest from x.


class _Kind(NamedTuple):
    categorical: bool  # c: a class per position; else c: +1/-1 labels of x's shape
    terms: Callable
    vjp: Callable | None
    graph: Callable | None = None
    keep_x: bool = False  # forward saves the input x (the vjp, or the graph rule, reads it)


# (C, C) identity rows are the fastest one-hot for few classes, but eye(70000) is
# 4.9 GB (seconds to build): above this many classes, compare with arange instead
def _per_class(r):
    """r per position (N, *S) -> (N, 1, *S), to broadcast over the classes."""
    return r[:, None] if getattr(r, "ndim", 0) else r


def _at_class(xp, c, d, shape):
    """d per position placed at each position's class c: (N, *S) -> (N, C, *S)."""
    return target_mask(c, shape[1], len(shape), xp) * _per_class(d)


def _masked(vjp):
    """The graph rule of a piecewise-linear kind: its vjp is linear in r, with
    masks and indices only (from saved constants, or compared on x), so it is
    recorded as it stands, bk building the masks; its second derivative in x is 0."""

    def graph(xp, bk, r, shape, x, *saved):
        return vjp(bk, r, shape, x, *saved)

    return graph


def _classerror(xp, x, c, **_):
    return (x.argmax(axis=1) != c).astype(x.dtype), ()


def _topkerror(xp, x, c, topk, **_):
    return topk_wrong(x, target_entries(x, c, xp), topk).astype(x.dtype), ()


def _log(xp, x, c, **_):
    xc = target_entries(x, c, xp)  # (N, *S): the target class' score
    return -xp.log(xc), (c, xc)


def _log_vjp(xp, r, shape, x, c, xc):
    return _at_class(xp, c, -r / xp.maximum(xc, 1e-8), shape)  # MatConvNet's bound on 1/x_c


def _log_graph(xp, bk, r, shape, x, c, xc):
    """The vjp over all of x: -r / max(x, 1e-8) at the class, 0 elsewhere (finite:
    the bound keeps x away from 0); xc is a constant here."""
    return target_mask(c, shape[1], len(shape), bk) * (-_per_class(r) / xp.maximum(upcast(x), 1e-8))


def _softmaxlog(xp, x, c, **_):
    m = x.max(axis=1, keepdims=True)
    e = xp.exp(x - m)
    s = e.sum(axis=1, keepdims=True)
    return xp.log(s[:, 0]) + m[:, 0] - target_entries(x, c, xp), (e / s, c)


def _softmaxlog_vjp(xp, r, shape, x, p, c):
    return (p - target_mask(c, shape[1], len(shape), xp)) * _per_class(r)


def _softmaxlog_graph(xp, bk, r, shape, x, p, c):
    """p recomputed from x by a recorded softmax (the saved one is a constant)."""
    return _softmaxlog_vjp(bk, r, shape, x, softmax(upcast(x), axis=1), c)


def _mhinge(xp, x, c, **_):
    xc = target_entries(x, c, xp)
    return xp.maximum(1 - xc, 0), (c, xc)


def _mhinge_vjp(xp, r, shape, x, c, xc):
    return _at_class(xp, c, -r * (xc < 1), shape)


def _mshinge(xp, x, c, **_):
    """Margin against the best other class q."""
    xc = target_entries(x, c, xp)
    other = xp.where(target_mask(c, x.shape[1], x.ndim, xp), -xp.inf, x)
    q = other.argmax(axis=1)  # (N, *S)
    t = xp.maximum(1 - xc + target_entries(other, q, xp), 0)
    return t, (c, q, xc - target_entries(x, q, xp))


def _mshinge_vjp(xp, r, shape, x, c, q, margin):
    d = -r * (margin < 1)
    return _at_class(xp, c, d, shape) - _at_class(xp, q, d, shape)  # q gets the opposite


def _binaryerror(xp, x, c, threshold, **_):
    return (xp.sign(x - threshold) != c).astype(x.dtype), ()


def _binarylog(xp, x, c, **_):
    return -xp.log(c * (x - 0.5) + 0.5), (c,)


def _binarylog_vjp(xp, r, shape, x, c):
    """Only TensorBackend functions: it is its own graph rule."""
    den = upcast(x) + (c - 1) * 0.5  # x for c = 1, x - 1 for c = -1
    return -r / xp.where(c == 0, 1, den)


def _binarylog_graph(xp, bk, r, shape, x, c):
    return _binarylog_vjp(xp, r, shape, x, c)


def _logistic(xp, x, c, **_):
    a = -c * x  # log(1 + e^a), stably
    return xp.maximum(a, 0) + xp.log1p(xp.exp(-xp.abs(a))), (c,)


def _logistic_vjp(xp, r, shape, x, c):
    z = c * upcast(x)
    e = xp.exp(-xp.abs(z))
    sig_neg = xp.where(z >= 0, e / (1 + e), 1 / (1 + e))  # sigmoid(-c x)
    return -r * c * sig_neg


def _logistic_graph(xp, bk, r, shape, x, c):
    """sigmoid(-c x) as a recorded op: smooth at c x = 0, where the vjp's |c x| is not."""
    return -r * c * sigmoid(-c * upcast(x))


def _hinge(xp, x, c, **_):
    return xp.maximum(1 - c * x, 0), (c,)


def _hinge_vjp(xp, r, shape, x, c):
    return -r * c * (c * upcast(x) < 1)


_KINDS = {
    "classerror": _Kind(True, _classerror, None),
    "topkerror": _Kind(True, _topkerror, None),
    "log": _Kind(True, _log, _log_vjp, _log_graph, keep_x=True),
    "softmaxlog": _Kind(True, _softmaxlog, _softmaxlog_vjp, _softmaxlog_graph, keep_x=True),
    "mhinge": _Kind(True, _mhinge, _mhinge_vjp, _masked(_mhinge_vjp)),
    "mshinge": _Kind(True, _mshinge, _mshinge_vjp, _masked(_mshinge_vjp)),
    "binaryerror": _Kind(False, _binaryerror, None),
    "binarylog": _Kind(False, _binarylog, _binarylog_vjp, _binarylog_graph, keep_x=True),
    "logistic": _Kind(False, _logistic, _logistic_vjp, _logistic_graph, keep_x=True),
    "hinge": _Kind(False, _hinge, _hinge_vjp, _masked(_hinge_vjp), keep_x=True),
}
_CATEGORICAL = tuple(k for k, rule in _KINDS.items() if rule.categorical)
_BINARY = tuple(k for k, rule in _KINDS.items() if not rule.categorical)


class VLLoss(Function):
    """MatConvNet's ``vl_nnloss``: ``sum_i W_i L(x_i, c_i)``, one scalar; the
    kind's rule in :data:`_KINDS` makes the terms and their vjp. Under
    create_graph the kind's graph rule records the vjp; the error counts'
    gradient is a constant zero, so their second derivative is zero too."""

    differentiable_twice = True  # under create_graph: the kind's graph rule

    @staticmethod
    def forward(ctx, x, c, kind="softmaxlog", weights=None, topk=5, threshold=0.0):
        rule = _KINDS[kind]
        x_in, dtype, x = x, x.dtype, upcast(x)  # float16: the terms and their sum in float32
        if weights is not None:
            weights = weights.astype(x.dtype, copy=False)
        if not rule.categorical:
            c = c.astype(x.dtype, copy=False)
        t, saved = rule.terms(ctx.xp, x, c, topk=topk, threshold=threshold)
        ctx.rule, ctx.shape, ctx.dtype = rule, x.shape, x.dtype
        if rule.vjp is not None:
            ctx.save_for_backward(weights, x_in if rule.keep_x else None, *saved)
        total = (t * weights).sum() if weights is not None else t.sum()
        return ctx.xp.asarray(total, dtype=dtype)

    @staticmethod
    def backward(ctx, g):
        if ctx.rule.vjp is None:  # an error count: piecewise constant
            z = ctx.device.backend.zeros(ctx.shape, ctx.dtype)
            return (Tensor(z, device=ctx.device) if ctx._graph else z), None
        w, *arrays = ctx.saved_tensors  # arrays: x (or None), then the kind's saved
        r = g if w is None else g * w  # dL/dt per position
        if ctx._graph:
            return ctx.rule.graph(ctx.xp, ctx.device.backend, r, ctx.shape, *arrays), None
        return ctx.rule.vjp(ctx.xp, r, ctx.shape, *arrays), None


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
    weights get no gradient. Every kind is twice differentiable
    (``create_graph=True``); the second derivative of the error and hinge kinds
    is 0 (piecewise constant / linear).

    >>> ops.loss(x, np.array([2, 0]), kind="mshinge")
    """
    op = f"loss(kind={kind!r})"
    xt = _tensor(x)
    xd = xt.array
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
        cd, valid, _ = class_targets(op, xd, cd, None, xp)
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
