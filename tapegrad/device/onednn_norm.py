"""oneDNN's batch normalization for ``ops/normalization.py`` (the binding is
:mod:`.onednn`), on channels-last float32 arrays only.

oneDNN's batch norm is fast where each position's channels lie side by side (NHWC, or
its blocked layouts) and slow on plain NCHW, and a reorder in and out costs more than
the op (fwd+bwd of (32, 32, 32, 32), ms at 1 / 2 threads, AMD EPYC: NHWC arrays 0.9 /
0.5; NCHW arrays through reorders to NHWC 7.0 / 3.2; oneDNN on NCHW itself 7.8 / 3.5;
the NumPy path 2.3 / 2.0; PyTorch on NCHW 3.9 / 1.8). So the op takes it for inputs
that are channels-last already (``memory_format=tapegrad.channels_last``, the layout
oneDNN's convolutions and pooling then keep too), and the NumPy path otherwise.

The statistics are oneDNN's: the batch mean, then the mean of squared deviations from
it (two passes, as PyTorch's CPU kernel), so a channel whose mean is large against its
spread keeps fewer digits than on the NumPy path, which shifts by one sample first.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .onednn import (
    _ARG_DIFF_DST,
    _ARG_DIFF_SCALE,
    _ARG_DIFF_SHIFT,
    _ARG_DIFF_SRC,
    _ARG_DST,
    _ARG_MEAN,
    _ARG_SCALE,
    _ARG_SHIFT,
    _ARG_SRC,
    _ARG_VARIANCE,
    _BACKWARD,
    _FORWARD_INFERENCE,
    _FORWARD_TRAINING,
    _USE_GLOBAL_STATS,
    _USE_SCALE,
    _USE_SHIFT,
    _check,
    _Desc,
    _p,
    _pd_done,
    _Prim,
    _run,
)

__all__ = ["bn_forward", "bn_backward"]


def _flags(training, affine):
    return (0 if training else _USE_GLOBAL_STATS) | (_USE_SCALE | _USE_SHIFT if affine else 0)


def _forward_pd(lib, engine, x, eps, flags, training):
    md = _Desc.plain(lib, x)
    pd = _p()
    _check(lib.dnnl_batch_normalization_forward_primitive_desc_create(
        ctypes.byref(pd), engine, _FORWARD_TRAINING if training else _FORWARD_INFERENCE,
        md.md, md.md, eps, flags, None), "batch_normalization_forward_primitive_desc_create")
    return pd


def _key(x, eps, flags):
    return (x.shape, x.strides, float(eps), flags)


def bn_forward(x, weight, bias, eps, training, mean=None, var=None):
    """(y, mean, var) of batch norm over ``x`` (N, C, H, W), float32 and laid out as
    its output ``y`` is: in training the batch's mean and biased variance (C,), else
    the given ``mean`` and ``var`` normalise and come back. ``weight`` and ``bias``
    both given (C,) or both None."""
    affine = weight is not None
    flags = _flags(training, affine)
    c = x.shape[1]
    y = np.empty_like(x)  # x's layout (NumPy's order K)
    ins, outs = {_ARG_SRC: x}, {_ARG_DST: y}
    if affine:
        ins.update({_ARG_SCALE: weight, _ARG_SHIFT: bias})
    if training:
        mean, var = np.empty(c, np.float32), np.empty(c, np.float32)
        outs.update({_ARG_MEAN: mean, _ARG_VARIANCE: var})
    else:
        ins.update({_ARG_MEAN: mean, _ARG_VARIANCE: var})
    args = tuple(ins) + tuple(outs)

    def build(lib, engine):
        pd = _forward_pd(lib, engine, x, eps, flags, training)
        try:
            return _Prim(lib, pd, args)
        finally:
            _pd_done(lib, pd)

    _run(("bn_fwd", _key(x, eps, flags), training), build, ins, outs)
    return y, mean, var


def bn_backward(g, x, weight, mean, var, eps, training, grads_affine):
    """(gx, gweight, gbias) of :func:`bn_forward` from the output gradient ``g`` (laid out
    as ``x``), its saved ``mean`` and ``var``; ``training``: the statistics were the
    batch's (their dependence on x is differentiated); ``grads_affine``: also the
    weight's and bias's gradients (else None, None)."""
    affine = weight is not None
    flags = _flags(training, affine)
    c = x.shape[1]
    gx = np.empty_like(x)
    ins = {_ARG_SRC: x, _ARG_DIFF_DST: g, _ARG_MEAN: mean, _ARG_VARIANCE: var}
    outs = {_ARG_DIFF_SRC: gx}
    if affine:
        ins[_ARG_SCALE] = weight
        gw, gb = np.empty(c, np.float32), np.empty(c, np.float32)
        outs.update({_ARG_DIFF_SCALE: gw, _ARG_DIFF_SHIFT: gb})
    args = tuple(ins) + tuple(outs)

    def build(lib, engine):
        hint = _forward_pd(lib, engine, x, eps, flags, True)
        md = _Desc.plain(lib, x)
        pd = _p()
        try:
            _check(lib.dnnl_batch_normalization_backward_primitive_desc_create(
                ctypes.byref(pd), engine, _BACKWARD, md.md, md.md, md.md, eps, flags, hint,
                None), "batch_normalization_backward_primitive_desc_create")
            return _Prim(lib, pd, args)
        finally:
            _pd_done(lib, hint)
            if pd:
                _pd_done(lib, pd)

    _run(("bn_bwd", _key(x, eps, flags), training), build, ins, outs)
    if affine and grads_affine:
        return gx, gw, gb
    return gx, None, None
