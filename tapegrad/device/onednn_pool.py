"""oneDNN's max and average pooling for ``ops/pool.py`` (the binding is :mod:`.onednn`),
on plain float32 arrays in the input's memory format (``geo.fmt``): NCHW, or NHWC for a
channels-last input, descriptors, outputs and workspace alike, so nothing is reordered.

Which calls take it (:func:`algorithm`) follows from where oneDNN computes exactly
PyTorch's pooling:

* **max**: oneDNN's workspace is the argmax's offset in window order (row-major over
  ``(kh, kw)``, padding cells counted), the same index ``ops/pool.py`` saves, and ties
  go to the first maximum, as in PyTorch. Its running maximum starts at the lowest
  float and ignores NaN, so an input holding a NaN, ``-inf`` or the lowest float
  (where PyTorch's NaN and all-``-inf`` rules decide) takes the NumPy path: the op
  looks at ``x.min()`` first, one pass. Kernels of up to 127 cells (an ``int8``
  index, as the NumPy path saves).
* **average**: ``count_include_pad=False`` is oneDNN's ``avg_exclude_padding`` (cells
  inside the input). ``True`` divides by the cells inside the padded input: oneDNN's
  ``avg_include_padding`` (the whole kernel) where every window lies inside it, and
  ``avg_exclude_padding`` where there is no padding (the padded input is the input);
  a ceil-mode window that hangs past padding takes the NumPy path.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .. import memory_formats
from .onednn import (
    _ARG_DIFF_DST,
    _ARG_DIFF_SRC,
    _ARG_DST,
    _ARG_SRC,
    _ARG_WORKSPACE,
    _FORWARD_INFERENCE,
    _FORWARD_TRAINING,
    _POOL_AVG_EXCLUDE,
    _POOL_AVG_INCLUDE,
    _POOL_MAX,
    _check,
    _Desc,
    _dims,
    _p,
    _pd_done,
    _Prim,
    _run,
)

__all__ = ["algorithm", "max_input_ok", "pool_forward", "pool_backward"]

_LOWEST = np.finfo(np.float32).min
# Inputs of fewer elements take the NumPy path (a oneDNN call's fixed cost; fwd+bwd
# time, oneDNN / NumPy, 1 thread, AMD EPYC: max 2x2 on 20x24x24 1.2-1.7 up to batch 4
# (46k elements), 0.9 at 8 (92k); on 50x8x8 1.1-1.3 up to 12k, 1.0 at 25k, 0.5 at 51k)
MIN_ELEMENTS = 50_000
MAX_KERNEL_CELLS = 127  # the argmax fits an int8, as ops/pool.py's index_dtype


def algorithm(geo, kind, count_include_pad=True):
    """The oneDNN algorithm that computes PyTorch's ``kind`` ("max" or "avg") pooling
    over ``geo`` (ops/pool.py's geometry), or None where only the NumPy path does."""
    (kh, kw), (sh, sw), (ho, wo) = geo.kernel, geo.stride, geo.out
    if kind == "max":
        return _POOL_MAX if kh * kw <= MAX_KERNEL_CELLS else None
    if not count_include_pad or not any(geo.pad):
        return _POOL_AVG_EXCLUDE
    pt, pb, pl, pr = geo.pad
    _, _, h, w = geo.shape
    inside = (ho - 1) * sh + kh <= pt + h + pb and (wo - 1) * sw + kw <= pl + w + pr
    return _POOL_AVG_INCLUDE if inside else None


def max_input_ok(x) -> bool:
    """Whether oneDNN's max pooling gives PyTorch's answer on ``x``: no NaN, no ``-inf``
    and no lowest float (one pass: the minimum propagates NaN)."""
    return bool(x.min() > _LOWEST)


def _params(geo):
    """strides, kernel, dilation (none), padding before, and the padding after that the
    output size needs (``geo.pad``'s bottom/right, less where floor rounding drops
    rows, more where ceil rounding adds a window)."""
    (kh, kw), (sh, sw), (ho, wo) = geo.kernel, geo.stride, geo.out
    _, _, h, w = geo.shape
    pt, _, pl, _ = geo.pad
    after = (max(0, (ho - 1) * sh + kh - h - pt), max(0, (wo - 1) * sw + kw - w - pl))
    return (_dims((sh, sw)), _dims((kh, kw)), _dims((0, 0)), _dims((pt, pl)), _dims(after))


def _descs(lib, geo):
    """(src, dst) descriptors, plain NCHW or NHWC (``geo.fmt``); oneDNN's workspace takes
    dst's layout."""
    n, c = geo.shape[:2]
    dst = (n, c) + tuple(geo.out)
    return tuple(_Desc.of(lib, s, memory_formats.dense_strides(s, geo.fmt))
                 for s in (geo.shape, dst))


def _forward_pd(lib, engine, geo, alg, training):
    src, dst = _descs(lib, geo)
    pd = _p()
    _check(lib.dnnl_pooling_forward_primitive_desc_create(
        ctypes.byref(pd), engine, _FORWARD_TRAINING if training else _FORWARD_INFERENCE, alg,
        src.md, dst.md, *_params(geo), None), "pooling_forward_primitive_desc_create")
    return pd


def _workspace(alg, training):
    return (_ARG_WORKSPACE,) if alg == _POOL_MAX and training else ()


def _build_forward(geo, alg, training):
    def build(lib, engine):
        pd = _forward_pd(lib, engine, geo, alg, training)
        try:
            return _Prim(lib, pd, (_ARG_SRC, _ARG_DST) + _workspace(alg, training))
        finally:
            _pd_done(lib, pd)

    return build


def _build_backward(geo, alg):
    def build(lib, engine):
        hint = _forward_pd(lib, engine, geo, alg, True)
        src, dst = _descs(lib, geo)
        pd = _p()
        try:
            _check(lib.dnnl_pooling_backward_primitive_desc_create(
                ctypes.byref(pd), engine, alg, src.md, dst.md, *_params(geo), hint, None),
                "pooling_backward_primitive_desc_create")
            return _Prim(lib, pd, (_ARG_DIFF_SRC, _ARG_DIFF_DST) + _workspace(alg, True))
        finally:
            _pd_done(lib, hint)
            if pd:
                _pd_done(lib, pd)

    return build


def _key(geo):
    return (tuple(geo.shape), tuple(geo.kernel), tuple(geo.stride), tuple(geo.pad),
            tuple(geo.out), geo.fmt.name)


def pool_forward(x, geo, alg, training):
    """(y, argmax or None): pooling of float32 (N, C, H, W) ``x`` with ``alg``
    (:func:`algorithm`); for max pooling in training, the argmax of each window (an
    int8 offset in window order, the NumPy path's index) for :func:`pool_backward`.
    Both in ``geo.fmt``."""
    n, c = geo.shape[:2]
    y = memory_formats.empty(np, (n, c) + tuple(geo.out), np.float32, geo.fmt)
    outs = {_ARG_DST: y}
    ws = None
    if _workspace(alg, training):
        ws = outs[_ARG_WORKSPACE] = memory_formats.empty(np, y.shape, np.uint8, geo.fmt)
    _run(("pool_fwd", _key(geo), alg, training), _build_forward(geo, alg, training),
         {_ARG_SRC: x}, outs)
    return y, None if ws is None else ws.view(np.int8)


def pool_backward(g, geo, alg, argmax=None):
    """gx (N, C, H, W), in ``geo.fmt``, from the output gradient ``g``: spread over each
    window (average) or routed to each window's ``argmax`` (max)."""
    gx = memory_formats.empty(np, geo.shape, np.float32, geo.fmt)
    ins = {_ARG_DIFF_DST: g}
    if argmax is not None:
        ins[_ARG_WORKSPACE] = argmax.view(np.uint8)
    _run(("pool_bwd", _key(geo), alg), _build_backward(geo, alg), ins, {_ARG_DIFF_SRC: gx})
    return gx
