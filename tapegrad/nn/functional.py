"""PyTorch-style ``F``: ``import tapegrad.nn.functional as F`` gives the
functional ops of :mod:`tapegrad.ops` (``F.relu``, ``F.conv2d``, ...), with
PyTorch's own conventions where they differ from the ops' NumPy ones:
``F.pad`` takes PyTorch's flat ``pad`` (last axis first), where ``ops.pad``
takes NumPy's ``pad_width``; the losses take PyTorch's deprecated
``size_average``/``reduce`` where PyTorch has them (in its positions).
"""

from __future__ import annotations

import builtins
import numbers

import numpy as np

from ..args import as_tensor, check_reduction, legacy_reduction
from ..errors import ArgumentError, ShapeError, describe
from ..ops import *  # noqa: F403
from ..ops import __all__, getitem  # noqa: F401 - re-exported
from ..ops import activation as _activation
from ..ops import losses as _losses
from ..ops import pad as _numpy_pad
from ..ops import pairwise as _pairwise

# index arrays of the non-constant modes are NumPy's pad of arange(n)
_NUMPY_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _grow(v):
    """The padding part of a PyTorch pad amount (the star import shadows ``max``)."""
    return builtins.max(v, 0)


def _crop(v):
    """The cropping part of a PyTorch pad amount."""
    return builtins.max(-v, 0)


def pad(input, pad, mode="constant", value=None):  # noqa: A002 - PyTorch's names
    """PyTorch's ``F.pad``: ``pad`` is ``(left, right)`` for the last axis, then
    ``(top, bottom)`` for the one before, and so on; a negative amount crops.

    ``mode``: ``"constant"`` (``value``, default 0; any number of axes),
    ``"reflect"`` (mirror, without repeating the edge: each pad smaller than the
    axis), ``"replicate"`` (repeat the edge) and ``"circular"`` (wrap around what is
    left after any crop, at most once). As in PyTorch, the last three pad
    the last 1, 2 or 3 axes of an input with one or two more axes (batch and
    channels), e.g. ``(left, right, top, bottom)`` of an ``(N, C, H, W)`` input.

    >>> F.pad(x, (0, 0, 1, 1)).shape        # x (4, 3, 5, 5) -> (4, 3, 7, 5)
    >>> F.pad(x, (1, 1, 1, 1), mode="reflect")
    """
    shape = tuple(input.shape)
    nd = len(shape)
    pads = _parse(pad, shape)
    k = len(pads)  # the last k axes are padded; pads[i] is for axis nd - k + i
    where = f"pad={tuple(pad)!r}, input {describe(input)}"
    if mode == "constant":
        crop = [(_crop(a), _crop(b)) for a, b in pads]
        for ax, (size, (a, b)) in enumerate(zip(shape[nd - k:], crop), nd - k):
            if a + b > size:
                raise ShapeError(f"pad: cropping {a} + {b} from axis {ax} (size {size}) leaves "
                                 f"less than nothing; {where}")
        x = input
        if any(a or b for a, b in crop):
            x = getitem(x, (slice(None),) * (nd - k)
                        + tuple(slice(a, s - b) for s, (a, b) in zip(shape[nd - k:], crop)))
        width = ((0, 0),) * (nd - k) + tuple((_grow(a), _grow(b)) for a, b in pads)
        return _numpy_pad(x, width, 0.0 if value is None else value)
    if not isinstance(mode, str) or mode not in _NUMPY_MODE:
        raise ArgumentError(f"pad: mode must be 'constant', 'reflect', 'replicate' or "
                            f"'circular', got {mode!r}")
    if value is not None:
        raise ArgumentError(f"pad: mode {mode!r} takes no value (only 'constant' does), got "
                            f"value={value!r}")
    if k > 3 or nd not in (k + 1, k + 2):
        raise ArgumentError(f"pad: mode {mode!r} pads the last 1, 2 or 3 axes of an input with "
                            f"one or two more (batch, channels), as PyTorch: {k} padded axes "
                            f"need a {k + 1}-D or {k + 2}-D input; {where}")
    index = [_mode_index(mode, ax, size, a, b, where)
             for ax, (size, (a, b)) in enumerate(zip(shape[nd - k:], pads), nd - k)]
    # one gather over the last k axes (adjacent index arrays keep their place):
    # (..., H, W) -> (..., H + top + bottom, W + left + right)
    xp = input.device.xp if hasattr(input, "device") else np
    mesh = tuple(xp.asarray(i) for i in np.ix_(*index))
    return getitem(input, (slice(None),) * (nd - k) + mesh)


def _parse(pad, shape):
    """PyTorch's flat ``pad`` -> ``(before, after)`` per padded axis, first axis first."""
    if isinstance(pad, (str, bytes)) or not hasattr(pad, "__len__"):
        raise ArgumentError(f"pad: pad must be a flat tuple of ints (left, right, top, bottom, "
                            f"...), got {pad!r}")
    vals = tuple(pad)
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in vals):
        raise ArgumentError(f"pad: pad must be a flat tuple of ints (left, right, top, bottom, "
                            f"...), got {pad!r}; for NumPy's ((before, after), ...) per axis "
                            "use tapegrad.ops.pad")
    if len(vals) % 2:
        raise ArgumentError(f"pad: pad needs an even length, (before, after) per axis starting "
                            f"from the last, got {pad!r}")
    if len(vals) // 2 > len(shape):
        raise ShapeError(f"pad: pad {pad!r} pads {len(vals) // 2} axes but the input "
                         f"{tuple(shape)} has {len(shape)}")
    pairs = [(int(vals[i]), int(vals[i + 1])) for i in range(0, len(vals), 2)]
    return pairs[::-1]


def _mode_index(mode, axis, size, before, after, where):
    """The input positions (host ints) that one padded axis reads, in order."""
    if mode == "circular":
        # crop first, then wrap around what is left (PyTorch's order)
        lo, hi = _crop(before), size - _crop(after)
        if hi < lo:
            raise ShapeError(f"pad: cropping {lo} + {size - hi} from axis {axis} (size {size}) "
                             f"leaves less than nothing; {where}")
        if before > hi - lo or after > hi - lo:
            # PyTorch checks only against the uncropped size, then fails or returns
            # uninitialised memory when a pad wraps around what is left more than once
            raise ArgumentError(f"pad: circular padding {(before, after)} of axis {axis} "
                                f"(size {size}, {hi - lo} left after cropping) would wrap "
                                f"around more than once; {where}")
        return np.pad(np.arange(lo, hi), (_grow(before), _grow(after)), mode="wrap")
    # reflect, replicate: pad the whole axis, then crop (PyTorch's order)
    if size == 0 and (before > 0 or after > 0):
        raise ShapeError(f"pad: mode {mode!r} cannot pad axis {axis}: it is empty; {where}")
    if size + before + after < 0:
        raise ShapeError(f"pad: cropping {_crop(before)} + {_crop(after)} from axis {axis} "
                         f"(size {size}) leaves less than nothing; {where}")
    if mode == "reflect" and (0 < before >= size or 0 < after >= size):
        raise ArgumentError(f"pad: reflect padding {(before, after)} of axis {axis} must be "
                            f"smaller than its size {size}; {where}")
    idx = np.pad(np.arange(size), (_grow(before), _grow(after)), mode=_NUMPY_MODE[mode])
    return idx[_crop(before):idx.size - _crop(after)]


# ---------------------------------------------- activations and norms, PyTorch's options
# F.gelu, F.softplus, F.prelu, F.layer_norm and F.group_norm are the ops themselves
# (from the star import above): their signatures are PyTorch's, ``input=`` included.
# F.silu and F.elu add PyTorch's ``inplace``.


def silu(input, inplace=False):  # noqa: A002 - PyTorch's names
    """PyTorch's ``F.silu``: :func:`tapegrad.ops.silu`. ``inplace`` is accepted and
    ignored, as by ``nn.SiLU``: the result is always a new tensor.

    >>> F.silu(x)
    """
    return _activation.silu(input)


def elu(input, alpha=1.0, inplace=False):  # noqa: A002 - PyTorch's names
    """PyTorch's ``F.elu``: :func:`tapegrad.ops.elu`, ``inplace`` ignored (as by
    ``nn.ELU``).

    >>> F.elu(x, alpha=0.5)
    """
    return _activation.elu(input, alpha)


# F.logsigmoid, F.softsign, F.tanhshrink and F.glu are the ops; these add ``inplace``
# (accepted and ignored, as by their layers).


def relu6(input, inplace=False):  # noqa: A002 - PyTorch's names
    """PyTorch's ``F.relu6``: :func:`tapegrad.ops.relu6`, ``inplace`` ignored.

    >>> F.relu6(x)
    """
    return _activation.relu6(input)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):  # noqa: A002 - PyTorch's names
    """PyTorch's ``F.hardtanh``: :func:`tapegrad.ops.hardtanh`, ``inplace`` ignored.

    >>> F.hardtanh(x, -2.0, 2.0)
    """
    return _activation.hardtanh(input, min_val, max_val)


def hardsigmoid(input, inplace=False):  # noqa: A002 - PyTorch's names
    """PyTorch's ``F.hardsigmoid``: :func:`tapegrad.ops.hardsigmoid`, ``inplace`` ignored.

    >>> F.hardsigmoid(x)
    """
    return _activation.hardsigmoid(input)


def hardswish(input, inplace=False):  # noqa: A002 - PyTorch's names
    """PyTorch's ``F.hardswish``: :func:`tapegrad.ops.hardswish`, ``inplace`` ignored.

    >>> F.hardswish(x)
    """
    return _activation.hardswish(input)


def selu(input, inplace=False):  # noqa: A002 - PyTorch's names
    """PyTorch's ``F.selu``: :func:`tapegrad.ops.selu`, ``inplace`` ignored.

    >>> F.selu(x)
    """
    return _activation.selu(input)


def mish(input, inplace=False):  # noqa: A002 - PyTorch's names
    """PyTorch's ``F.mish``: :func:`tapegrad.ops.mish`, ``inplace`` ignored.

    >>> F.mish(x)
    """
    return _activation.mish(input)


# ------------------------------------------------------------------ resampling
# F.adaptive_avg_pool2d, F.adaptive_max_pool2d, F.interpolate, F.pixel_shuffle and
# F.pixel_unshuffle are the ops themselves (from the star import above), with PyTorch's
# signatures, ``input=`` included.


# ---------------------------------------------------------------------- losses
# PyTorch's signatures: the deprecated ``size_average``/``reduce`` in PyTorch's
# positions, turned into a reduction by tapegrad.args.legacy_reduction (with PyTorch's
# warning); F.huber_loss, which never had them, is the op itself.


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,  # noqa: A002
                  reduce=None, reduction="mean", label_smoothing=0.0, normalization=None):
    """PyTorch's ``F.cross_entropy``: :func:`tapegrad.ops.cross_entropy`, plus Caffe's
    ``normalization`` after PyTorch's arguments.

    >>> F.cross_entropy(logits, labels, ignore_index=255, label_smoothing=0.1)
    """
    reduction = legacy_reduction("cross_entropy", size_average, reduce, reduction)
    return _losses.cross_entropy(input, target, weight, ignore_index, reduction,
                                 label_smoothing, normalization)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100,  # noqa: A002
             reduce=None, reduction="mean"):
    """PyTorch's ``F.nll_loss``: :func:`tapegrad.ops.nll_loss`.

    >>> F.nll_loss(F.log_softmax(logits, dim=1), labels)
    """
    reduction = legacy_reduction("nll_loss", size_average, reduce, reduction)
    return _losses.nll_loss(input, target, weight, ignore_index, reduction)


def _weighted(op, loss, input, weight, reduction):
    """PyTorch 2.13's ``weight=`` of mse_loss and l1_loss: the per-element ``loss``
    (``reduction="none"``) times ``weight`` (input's shape), summed, or divided by
    the summed weights for ``"mean"``."""
    check_reduction(op, reduction)
    weight = as_tensor(weight)
    if tuple(weight.shape) != tuple(input.shape):
        raise ShapeError(f"{op}: weight {describe(weight)} must have the input's shape "
                         f"{tuple(input.shape)} (PyTorch's rule)")
    loss = loss * weight
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / weight.sum()


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean",  # noqa: A002
             weight=None):
    """PyTorch's ``F.mse_loss``: :func:`tapegrad.ops.mse_loss`; ``weight`` (input's
    shape) scales each squared error, and ``"mean"`` then divides by its sum.

    >>> F.mse_loss(prediction, target, reduction="sum")
    """
    reduction = legacy_reduction("mse_loss", size_average, reduce, reduction)
    if weight is None:
        return _losses.mse_loss(input, target, reduction)
    return _weighted("mse_loss", _losses.mse_loss(input, target, "none"), input, weight,
                     reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean",  # noqa: A002
            weight=None):
    """PyTorch's ``F.l1_loss``: :func:`tapegrad.ops.l1_loss`; ``weight`` as in
    :func:`mse_loss`.

    >>> F.l1_loss(prediction, target)
    """
    reduction = legacy_reduction("l1_loss", size_average, reduce, reduction)
    if weight is None:
        return _losses.l1_loss(input, target, reduction)
    return _weighted("l1_loss", _losses.l1_loss(input, target, "none"), input, weight,
                     reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None,  # noqa: A002
                   reduction="mean", beta=1.0):
    """PyTorch's ``F.smooth_l1_loss``: :func:`tapegrad.ops.smooth_l1_loss`.

    >>> F.smooth_l1_loss(boxes, target_boxes, beta=0.5)
    """
    reduction = legacy_reduction("smooth_l1_loss", size_average, reduce, reduction)
    return _losses.smooth_l1_loss(input, target, reduction, beta)


def binary_cross_entropy(input, target, weight=None, size_average=None,  # noqa: A002
                         reduce=None, reduction="mean"):
    """PyTorch's ``F.binary_cross_entropy``: :func:`tapegrad.ops.binary_cross_entropy`.

    >>> F.binary_cross_entropy(F.sigmoid(logits), targets)
    """
    reduction = legacy_reduction("binary_cross_entropy", size_average, reduce, reduction)
    return _pairwise.binary_cross_entropy(input, target, weight, reduction)


def binary_cross_entropy_with_logits(input, target, weight=None,  # noqa: A002
                                     size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """PyTorch's ``F.binary_cross_entropy_with_logits``:
    :func:`tapegrad.ops.binary_cross_entropy_with_logits`.

    >>> F.binary_cross_entropy_with_logits(logits, targets, pos_weight=tapegrad.tensor([3.0]))
    """
    reduction = legacy_reduction("binary_cross_entropy_with_logits", size_average, reduce,
                                 reduction)
    return _losses.binary_cross_entropy_with_logits(input, target, weight, pos_weight,
                                                    reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean",  # noqa: A002
           log_target=False):
    """PyTorch's ``F.kl_div``: :func:`tapegrad.ops.kl_div`. As in PyTorch, a
    ``reduction="batchmean"`` still divides by the batch size what the deprecated
    ``size_average``/``reduce`` chose.

    >>> F.kl_div(F.log_softmax(logits, dim=1), probs, reduction="batchmean")
    """
    legacy = legacy_reduction("kl_div", size_average, reduce, None)
    if legacy is None:
        return _pairwise.kl_div(input, target, reduction, log_target)
    out = _pairwise.kl_div(input, target, legacy, log_target)
    if reduction == "batchmean" and len(input.shape):
        out = out / input.shape[0]
    return out


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):
    """PyTorch's ``F.margin_ranking_loss``: :func:`tapegrad.ops.margin_ranking_loss`.

    >>> F.margin_ranking_loss(s1, s2, y, margin=0.1)
    """
    reduction = legacy_reduction("margin_ranking_loss", size_average, reduce, reduction)
    return _pairwise.margin_ranking_loss(input1, input2, target, margin, reduction)


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None,
                          reduce=None, reduction="mean"):
    """PyTorch's ``F.cosine_embedding_loss``: :func:`tapegrad.ops.cosine_embedding_loss`.

    >>> F.cosine_embedding_loss(a, b, y, margin=0.2)
    """
    reduction = legacy_reduction("cosine_embedding_loss", size_average, reduce, reduction)
    return _pairwise.cosine_embedding_loss(input1, input2, target, margin, reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):
    """PyTorch's ``F.triplet_margin_loss``: :func:`tapegrad.ops.triplet_margin_loss`.

    >>> F.triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2)
    """
    reduction = legacy_reduction("triplet_margin_loss", size_average, reduce, reduction)
    return _pairwise.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                         reduction)


# ------------------------------------------------------------------- attention
from .attention import scaled_dot_product_attention  # noqa: E402, F401 - PyTorch's F name
