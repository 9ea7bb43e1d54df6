"""oneDNN's convolutions for ``ops/conv.py`` (the binding is :mod:`.onednn`): forward,
backward-data and backward-weights primitives, each asked for its layouts with
``format_tag_any`` and cached by what it computes; ``conv_temporaries`` tells
``memory_report`` what their reorders allocate.

A conv whose memory format (``geo.fmt``, ``ops.conv._memory_format``) is channels_last
runs on NHWC activation descriptors and gets its y, gx and gW allocated NHWC-strided,
so the activations (its own arrays, and inputs already in NHWC) need no reorder."""

from __future__ import annotations

import ctypes

import numpy as np

from .. import memory_formats
from .onednn import (
    _ARG_BIAS,
    _ARG_DIFF_BIAS,
    _ARG_DIFF_DST,
    _ARG_DIFF_SRC,
    _ARG_DIFF_WEIGHTS,
    _ARG_DST,
    _ARG_SRC,
    _ARG_WEIGHTS,
    _CONV_DIRECT,
    _FORWARD_TRAINING,
    _Q_EXEC_ARG_MD,
    _check,
    _Desc,
    _dims,
    _engine_stream,
    _p,
    _pd_done,
    _Prim,
    _primitive,
    _run,
)

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_weights", "conv_temporaries"]


def _conv_params(geo):
    """oneDNN's strides, dilations (0 = none), and the padding before and after."""
    t, b, left, r = geo.pad
    return (_dims(geo.stride), _dims((geo.dilation[0] - 1, geo.dilation[1] - 1)),
            _dims((t, left)), _dims((b, r)))


def _conv_shapes(geo):
    """(src, weights, dst) dims; grouped weights are (G, O/G, C/G, kh, kw)."""
    src = (geo.n, geo.c, geo.h, geo.w)
    dst = (geo.n, geo.o, geo.ho, geo.wo)
    if geo.groups == 1:
        w = (geo.o, geo.c, geo.kh, geo.kw)
    else:
        w = (geo.groups, geo.o // geo.groups, geo.c // geo.groups, geo.kh, geo.kw)
    return src, w, dst


def _geo_key(geo):
    return (geo.n, geo.c, geo.h, geo.w, geo.o, geo.kh, geo.kw, geo.groups, tuple(geo.stride),
            tuple(geo.dilation), tuple(geo.pad))


def _prim_key(kind, geo, bias):
    """A primitive's cache key: what it computes, and its activations' layout choice."""
    return (kind, _geo_key(geo), bias, geo.fmt.name)


# Channels-last activations where oneDNN's own choice would pad the input channels by a
# quarter or more: its blocked layouts (nChw16c on AVX-512, nChw8c on AVX2) round C up
# to the block, and the wasted lanes cost more than an NHWC kernel's tails. Measured
# fwd / bwd-data / bwd-weights, NHWC against oneDNN's choice, 1 thread, AVX-512 (AMD
# EPYC): C=20 -> 50 k5 (LeNet's conv2; src padded 1.6x) 0.75 / 0.88 / 0.61; 20 -> 20
# k3 0.69 / 0.67 / 0.65; 50 -> 50 k3 (1.28x) 0.83 / 0.73 / 0.72; 24 -> 40 (1.33x)
# 1.02 / 0.86 / 0.79; and where nothing is padded 32 -> 32 1.18 / 1.20 / 0.99 and
# 48 -> 48 1.14 / 1.17 / 1.22 (so NHWC is not the default). Inputs of fewer than 16
# channels are not padded (oneDNN's first-layer kernels read them plain): 3 -> 32 and
# 1 -> 20 keep oneDNN's choice (NHWC 1.48 / 1.21 / 1.89 and 0.94 / 0.68 / 1.34).
# benchmarks/bench_layers.py has the rows. The choice depends on the geometry and the
# CPU's block size only, never on timing, so the same bits come back every run.
NHWC_WHEN_PADDED = 1.25

# Below this many multiply-adds (the forward's) a conv takes the NumPy path: a oneDNN
# call has a fixed cost (reorders, memory objects, the primitive's own set-up per
# execute) that small convs do not repay. fwd+bwd time, oneDNN / NumPy, by batch, 1 / 2
# threads (AMD EPYC): LeNet's conv1 (1 -> 20 k5, 288k MACs an image) 2.1 / 2.2 at batch
# 1, 1.3 / 1.2 at 8 (2.3M), 1.1 / 0.7 at 16; its conv2 (20 -> 50 k5, 1.6M an image)
# 1.2 / 1.2 at batch 1, 1.0 / 0.9 at 2; 32 -> 32 k3 on 32x32 (9.4M) 0.8 / 0.6 at 1.
# A rule of the geometry only: the same bits come back every run.
MIN_MACS = 2_000_000
_layouts: dict = {}


def _nhwc(lib, engine, geo) -> bool:
    """Whether the conv ``geo`` runs on NHWC activations: its format is channels_last,
    or oneDNN's own layout would pad its channels (:func:`_channels_last`)."""
    return geo.fmt is memory_formats.channels_last or _channels_last(lib, engine, geo)


def _channels_last(lib, engine, geo) -> bool:
    """Whether the conv ``geo`` runs on NHWC activations by NHWC_WHEN_PADDED's rule."""
    key = _geo_key(geo)
    got = _layouts.get(key)
    if got is None:
        src, w, _, dst = _any_descs(lib, geo, False, channels_last=False)
        pd = _p()
        _check(lib.dnnl_convolution_forward_primitive_desc_create(
            ctypes.byref(pd), engine, _FORWARD_TRAINING, _CONV_DIRECT, src.md, w.md, None,
            dst.md, *_conv_params(geo), None), "convolution_forward_primitive_desc_create")
        try:
            chosen = lib.dnnl_memory_desc_get_size(
                lib.dnnl_primitive_desc_query_md(pd, _Q_EXEC_ARG_MD, _ARG_SRC))
        finally:
            _pd_done(lib, pd)
        got = _layouts[key] = chosen >= NHWC_WHEN_PADDED * geo.n * geo.c * geo.h * geo.w * 4
    return got


def _any_descs(lib, geo, bias, channels_last):
    """The conv's (src, weights, bias or None, dst) descriptors: the weights (and bias)
    in oneDNN's choice of layout (``format_tag_any``), the activations too, or NHWC
    (``channels_last``)."""
    src, w, dst = _conv_shapes(geo)
    if channels_last:  # (N, C, H, W) dims with NHWC strides
        act = [_Desc.of(lib, s, memory_formats.dense_strides(s, memory_formats.channels_last))
               for s in (src, dst)]
    else:
        act = [_Desc.any(lib, s) for s in (src, dst)]
    return (act[0], _Desc.any(lib, w), _Desc.any(lib, (geo.o,)) if bias else None, act[1])


def _md(desc):
    return None if desc is None else desc.md


def _forward_pd(lib, engine, geo, bias):
    src, w, b, dst = _any_descs(lib, geo, bias, _nhwc(lib, engine, geo))
    pd = _p()
    _check(lib.dnnl_convolution_forward_primitive_desc_create(
        ctypes.byref(pd), engine, _FORWARD_TRAINING, _CONV_DIRECT, src.md, w.md, _md(b), dst.md,
        *_conv_params(geo), None),
        "convolution_forward_primitive_desc_create")
    return pd


def _grouped(w, geo):
    return w if geo.groups == 1 else w.reshape(_conv_shapes(geo)[1])


def _build_forward(geo, bias):
    def build(lib, engine):
        pd = _forward_pd(lib, engine, geo, bias)
        try:
            return _Prim(lib, pd, (_ARG_SRC, _ARG_WEIGHTS, _ARG_DST)
                         + ((_ARG_BIAS,) if bias else ()))
        finally:
            _pd_done(lib, pd)

    return build


def _build_backward_data(geo, bias):
    def build(lib, engine):
        hint = _forward_pd(lib, engine, geo, False)
        src, w, _, dst = _any_descs(lib, geo, False, _nhwc(lib, engine, geo))
        pd = _p()
        try:
            _check(lib.dnnl_convolution_backward_data_primitive_desc_create(
                ctypes.byref(pd), engine, _CONV_DIRECT, src.md, w.md, dst.md,
                *_conv_params(geo), hint, None),
                "convolution_backward_data_primitive_desc_create")
            return _Prim(lib, pd, (_ARG_DIFF_SRC, _ARG_WEIGHTS, _ARG_DIFF_DST))
        finally:
            _pd_done(lib, hint)
            if pd:
                _pd_done(lib, pd)

    return build


def _build_backward_weights(geo, bias):
    def build(lib, engine):
        hint = _forward_pd(lib, engine, geo, bias)
        src, w, b, dst = _any_descs(lib, geo, bias, _nhwc(lib, engine, geo))
        pd = _p()
        try:
            _check(lib.dnnl_convolution_backward_weights_primitive_desc_create(
                ctypes.byref(pd), engine, _CONV_DIRECT, src.md, w.md, _md(b), dst.md,
                *_conv_params(geo), hint, None),
                "convolution_backward_weights_primitive_desc_create")
            return _Prim(lib, pd, (_ARG_SRC, _ARG_DIFF_WEIGHTS, _ARG_DIFF_DST)
                         + ((_ARG_DIFF_BIAS,) if bias else ()))
        finally:
            _pd_done(lib, hint)
            if pd:
                _pd_done(lib, pd)

    return build


# kind -> (builder, {argument: its plain array's shape from (src, weights, dst, bias)})
_CONV = {
    "conv_fwd": (_build_forward, {_ARG_SRC: 0, _ARG_WEIGHTS: 1, _ARG_DST: 2, _ARG_BIAS: 3}),
    "conv_bwd_data": (_build_backward_data, {_ARG_WEIGHTS: 1, _ARG_DIFF_DST: 2,
                                             _ARG_DIFF_SRC: 0}),
    "conv_bwd_weights": (_build_backward_weights, {_ARG_SRC: 0, _ARG_DIFF_DST: 2,
                                                   _ARG_DIFF_WEIGHTS: 1, _ARG_DIFF_BIAS: 3}),
}


def _conv_run(kind, geo, bias, inputs, outputs):
    _run(_prim_key(kind, geo, bias), _CONV[kind][0](geo, bias), inputs, outputs)


def conv_temporaries(kind, geo, bias) -> int:
    """Bytes of the reorder buffers one call of ``kind`` ("conv_fwd", "conv_bwd_data",
    "conv_bwd_weights") allocates on activations dense in the conv's format and
    C-contiguous weights: each argument in a layout of oneDNN's choosing other than the
    array's own (for ``memory_report``)."""
    lib, engine, _ = _engine_stream()
    build, args = _CONV[kind]
    _, prim = _primitive(lib, engine, _prim_key(kind, geo, bias), build(geo, bias))
    src, w, dst = _conv_shapes(geo)
    shapes = (src, w, dst, (geo.o,))
    total = 0
    for arg, which in args.items():
        if arg not in prim.mds:  # no bias
            continue
        shape = shapes[which]
        fmt = geo.fmt if which in (0, 2) else memory_formats.contiguous_format
        plain = _Desc.of(lib, shape, memory_formats.dense_strides(shape, fmt))
        want = prim.mds[arg]
        if not lib.dnnl_memory_desc_equal(plain.md, want.md):
            total += lib.dnnl_memory_desc_get_size(want.md)
    return total


def conv_forward(x, w, b, geo):
    """y = conv(x, w) + b for float32 (N, C, H, W) arrays (any strides); ``geo`` is
    ops.conv's geometry, y in its format ``geo.fmt``."""
    bias = b is not None
    y = memory_formats.empty(np, (geo.n, geo.o, geo.ho, geo.wo), np.float32, geo.fmt)
    ins = {_ARG_SRC: x, _ARG_WEIGHTS: _grouped(w, geo)}
    if bias:
        ins[_ARG_BIAS] = b
    _conv_run("conv_fwd", geo, bias, ins, {_ARG_DST: y})
    return y


def conv_backward_data(gy, w, geo):
    """gx (in ``geo.fmt``), the input gradient of conv(x, w), from gy (N, O, Ho, Wo)."""
    gx = memory_formats.empty(np, (geo.n, geo.c, geo.h, geo.w), np.float32, geo.fmt)
    _conv_run("conv_bwd_data", geo, False, {_ARG_WEIGHTS: _grouped(w, geo), _ARG_DIFF_DST: gy},
              {_ARG_DIFF_SRC: gx})
    return gx


def conv_backward_weights(x, gy, geo, bias):
    """(gw, gb or None): the weight (and bias) gradients of conv(x, w) + b, gw in
    ``geo.fmt``."""
    # (O, Cg, kh, kw) -> (G, O/G, Cg, kh, kw): splitting O is a view in either order
    gw = memory_formats.empty(np, (geo.o, geo.c // geo.groups, geo.kh, geo.kw), np.float32,
                              geo.fmt)
    outs = {_ARG_DIFF_WEIGHTS: _grouped(gw, geo)}
    gb = np.empty((geo.o,), np.float32) if bias else None
    if bias:
        outs[_ARG_DIFF_BIAS] = gb
    _conv_run("conv_bwd_weights", geo, bias, {_ARG_SRC: x, _ARG_DIFF_DST: gy}, outs)
    return gw, gb
