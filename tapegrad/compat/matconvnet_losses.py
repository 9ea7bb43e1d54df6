"""The loss layers of a simplenn network (softmaxloss, loss, pdist): MatConvNet's
1-based labels (0 = ignore) and ``H x W x C x N`` targets at the boundary."""

from __future__ import annotations

import numpy as np

from .. import ops
from ..errors import ArgumentError, ShapeError, describe
from .matconvnet_layers import Layer, _empty, _flag, _numbers, _scalar, to_nchw

__all__ = ["SoftmaxLoss", "Loss", "PDist"]


def _labels(layer, c, x, kind):
    """MatConvNet's class labels for scores ``x`` (N, D, H, W) -> 0-based labels
    (negative = ignored) and optional instance weights for ``ops.loss``.

    ``c`` has N elements (one label per image) or is ``H x W x 1 x N`` (one per
    position); softmaxloss also takes ``H x W x 2 x N`` (labels, then weights).
    Labels are 1..D; 0 means ignore (softmaxloss ignores every label <= 0)."""
    if c is None:
        raise ArgumentError(f"simplenn: {kind} layer {layer!r} has no labels: set "
                            f"net.layers[i].class_ = labels (MatConvNet's 1-based classes)")
    xp = x.device.xp
    c = xp.asarray(c)
    n, d, h, w = x.shape
    weights = None
    if c.size == n:
        lab = c.reshape(n)
    else:
        c4 = to_nchw(c)  # (N, 1 or 2, H, W)
        ok = c4.shape[0] == n and c4.shape[2:] in ((h, w), (1, 1)) and \
            (c4.shape[1] == 1 or (kind == "softmaxloss" and c4.shape[1] == 2))
        if not ok:
            raise ShapeError(f"simplenn: {kind} layer {layer!r}: labels {describe(c)} must have "
                             f"N = {n} elements or be H x W x 1 x N = {h} x {w} x 1 x {n}"
                             + (" (or x 2 x N with weights)" if kind == "softmaxloss" else ""))
        c4 = xp.broadcast_to(c4, (n, c4.shape[1], h, w))
        lab = c4[:, 0]
        if c4.shape[1] == 2:
            weights = c4[:, 1].astype(x.dtype)
    if lab.size and bool(xp.any(lab != xp.round(lab))):
        raise ArgumentError(f"simplenn: {kind} layer {layer!r}: labels must be integers "
                            f"(1..{d}, 0 = ignore)")
    if lab.size and (int(lab.max()) > d or (kind == "loss" and int(lab.min()) < 0)):
        raise ArgumentError(f"simplenn: {kind} layer {layer!r}: labels must be in 1..{d} "
                            f"(MatConvNet's 1-based classes, 0 = ignore), got "
                            f"{int(lab.min())}..{int(lab.max())} for scores {describe(x)}")
    return xp.maximum(lab, 0).astype(xp.int64) - 1, weights  # 0 (ignore) -> -1


def _target(layer, field, value):
    """A loss layer's labels or target (``class``, ``instanceWeights``): None where
    MATLAB holds ``[]``, else a real, finite numeric array (checked at load; the
    labels' range is checked against the scores at forward)."""
    if _empty(value):
        return None
    _numbers(layer, field, value)
    return np.asarray(value)


class SoftmaxLoss(Layer):
    """``vl_nnsoftmaxloss``: ``sum -log softmax(x)_c`` over images and positions."""

    type = "softmaxloss"

    def __init__(self, class_=None, **kw):
        super().__init__(**kw)
        self.class_ = _target(self.name, "class", class_)

    def run(self, x, test=False, aux=None):
        lab, w = _labels(self.name, self.class_, x, self.type)
        return ops.loss(x, lab, kind="softmaxlog", instance_weights=w), None


class Loss(SoftmaxLoss):
    """``vl_nnloss`` with its default loss, ``softmaxlog`` (vl_simplenn passes no
    ``loss`` option)."""

    type = "loss"


class PDist(Layer):
    """``vl_nnpdist(x, class, p, 'noRoot', 'epsilon', 'aggregate', 'instanceWeights')``:
    ``class`` is the target ``x0`` (``H x W x C x N``, or ``1 x 1 x C x N``)."""

    type = "pdist"
    fields = ("p", "noRoot", "epsilon", "aggregate")

    def __init__(self, class_=None, p=2, noRoot=False, epsilon=1e-3, aggregate=False,  # noqa: N803
                 instanceWeights=None, **kw):  # noqa: N803
        super().__init__(**kw)
        self.class_ = _target(self.name, "class", class_)
        self.p = _scalar(self.name, "p", p)
        self.noRoot = _flag(self.name, "noRoot", noRoot)
        self.epsilon = _scalar(self.name, "epsilon", epsilon)
        self.aggregate = _flag(self.name, "aggregate", aggregate)
        self.instanceWeights = _target(self.name, "instanceWeights", instanceWeights)
        if not self.p > 0 or self.epsilon < 0:
            raise ArgumentError(f"simplenn: pdist layer {self.name!r}: need p > 0 and "
                                f"epsilon >= 0, got p={self.p}, epsilon={self.epsilon}")

    def run(self, x, test=False, aux=None):
        if _empty(self.class_):
            raise ArgumentError(f"simplenn: pdist layer {self.name!r} has no target: set "
                                "net.layers[i].class_ = x0 (H x W x C x N)")
        xp = x.device.xp
        x0 = to_nchw(xp.asarray(self.class_, dtype=x.dtype))
        w = self.instanceWeights
        w = None if w is None else to_nchw(xp.asarray(w, dtype=x.dtype))
        return ops.pdist(x, x0, p=self.p, no_root=self.noRoot, epsilon=self.epsilon,
                         aggregate=self.aggregate, instance_weights=w), None
