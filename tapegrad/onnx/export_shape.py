"""ONNX mappings of the shape family: reshape (flatten, squeeze and unsqueeze
are reshapes in tapegrad), transpose, broadcast, basic indexing, concatenation,
stacking, splitting, padding and triangles.

These are the ops that move the batch axis or would write its size into the
graph. A reshape keeps the batch dynamic when the batch axis survives whole
(everything before it and after it is reshaped on its own): its size becomes
the reshape's single ``-1``. A reshape that merges the batch with another axis
refuses under ``dynamic_batch=True``.
"""

from __future__ import annotations

import math

import numpy as np

from ..ops import shape
from .export_graph import mapping

_INT64_MIN = -(2 ** 63)
_INT64_MAX = 2 ** 63 - 1


def _batch_after_reshape(in_shape, out_shape, b):
    """The output axis that is input axis ``b`` whole (None if none is)."""
    before = math.prod(in_shape[:b])
    for j, s in enumerate(out_shape):
        if s == in_shape[b] and math.prod(out_shape[:j]) == before:
            return j
    return None


@mapping(shape.Reshape)
def _reshape(g, c):
    in_shape, out_shape = c.info("x").shape, tuple(c.outs[0].shape)
    target = list(out_shape)
    b = c.batch("x")
    if b is not None:
        j = _batch_after_reshape(in_shape, out_shape, b)
        if j is None:
            raise c.refuse(f"reshaping {tuple(in_shape)} to {out_shape} merges or splits the "
                           f"batch axis {b}, so the graph would only run at batch size "
                           f"{in_shape[b]}", "keep the batch axis whole (e.g. flatten from "
                           "axis 1), or export with dynamic_batch=False")
        target[j] = -1
        c.batch_out = [j]
    zero = 0 in target and g.opset >= 14  # an empty axis, not "copy the input's"
    g.node("Reshape", [c.x("x"), g.ints(target)], [c.out], allowzero=1 if zero else None)


@mapping(shape.Transpose)
def _transpose(g, c):
    perm = [int(a) for a in c.a["axes"]]
    b = c.batch("x")
    c.batch_out = [None if b is None else perm.index(b)]
    g.node("Transpose", [c.x("x")], [c.out], perm=perm)


@mapping(shape.BroadcastTo)
def _broadcast_to(g, c):
    target = list(c.a["shape"])
    b = c.batch("x")
    if b is not None:  # the batch axis stays the input's own: broadcast 1 against it
        target[b + len(target) - c.info("x").ndim] = 1
        c.batch_out = [b + len(target) - c.info("x").ndim]
    elif g.dynamic:
        # a target shape that is a batched value's (cosine_similarity broadcasts its
        # operands to each other) is read from that value at run time
        like = next((n for n, (shp, _, bb) in reversed(g.meta.items())
                     if bb is not None and shp == tuple(target)), None)
        if like is not None:
            c.batch_out = [g.meta[like][2]]
            g.node("Expand", [c.x("x"), g.node("Shape", [like])], [c.out])
            return
    g.node("Expand", [c.x("x"), g.ints(target)], [c.out])


def _basic_items(index, ndim):
    """A basic index as a list of ints, slices and None covering every axis."""
    items = list(index) if isinstance(index, tuple) else [index]
    if any(i is Ellipsis for i in items):
        k = items.index(Ellipsis)
        used = sum(1 for i in items if i is not None and i is not Ellipsis)
        items[k:k + 1] = [slice(None)] * (ndim - used)
    used = sum(1 for i in items if i is not None)
    return items + [slice(None)] * (ndim - used)


@mapping(shape.GetItem)
def _getitem(g, c):
    xa = c.info("x")
    index = c.a["index"]
    items = list(index) if isinstance(index, tuple) else [index]
    arrays = [i for i, v in enumerate(items) if hasattr(v, "shape") or isinstance(v, list)]
    if arrays:
        _gather_index(g, c, xa, items, arrays)
        return
    if not all(v is None or v is Ellipsis or isinstance(v, (int, np.integer, slice))
               for v in items):
        raise c.refuse(f"index {index!r} is not basic", "index with ints, slices, None and "
                       "Ellipsis, or one integer array")
    items = _basic_items(index, xa.ndim)
    starts, ends, axes, steps, squeeze, unsqueeze = [], [], [], [], [], []
    b = c.batch("x")
    batch_out, d, pos = None, 0, 0
    for v in items:
        if v is None:
            unsqueeze.append(pos)
            pos += 1
            continue
        size = xa.shape[d]
        if d == b:  # the dynamic batch axis: bounds relative to its size at run time
            bounds = _batch_bounds(c, v)
            if bounds is None or bounds[1:] == (_INT64_MIN, -1) and bounds[0] in (-1, _INT64_MAX):
                batch_out = pos  # the whole axis, or all of it reversed
            if bounds is not None:
                for out, val in zip((starts, ends, axes, steps),
                                    (bounds[0], bounds[1], d, bounds[2])):
                    out.append(val)
                if not isinstance(v, slice):
                    squeeze.append(d)
            pos += isinstance(v, slice)
        elif isinstance(v, slice):
            if v != slice(None) and v.indices(size) != (0, size, 1):
                start, stop, step = v.indices(size)
                starts.append(start)
                ends.append(_INT64_MIN if stop < 0 else stop)
                axes.append(d)
                steps.append(step)
            pos += 1
        else:
            i = int(v) % size
            starts.append(i)
            ends.append(i + 1)
            axes.append(d)
            steps.append(1)
            squeeze.append(d)
        d += 1
    c.batch_out = [batch_out]
    y = c.x("x")
    if axes:
        y = g.node("Slice", [y, g.ints(starts), g.ints(ends), g.ints(axes), g.ints(steps)])
    if squeeze:
        y = g.axes_node("Squeeze", y, squeeze, since=13)
    if unsqueeze:
        y = g.axes_node("Unsqueeze", y, unsqueeze, since=13)
    g.rename(y, c.out)


def _batch_bounds(c, v):
    """ONNX Slice (start, end, step) of an int or slice on the dynamic batch axis,
    kept as Python wrote it (``x[-1]``, ``x[1:]``): resolving it with the example's
    batch size would pick other rows at another size. None: the whole axis."""
    if not isinstance(v, slice):
        i = int(v)
        return (i, i + 1 if i != -1 else _INT64_MAX, 1)
    step = 1 if v.step is None else int(v.step)
    if v.start in (None, 0) and v.stop is None and step == 1:
        return None
    if step < 0 and v.start is not None and v.start < -1:
        # Python empties x[-k::-1] when the batch is below k; ONNX's Slice would clamp
        raise c.refuse(f"the slice {v} of the dynamic batch axis counts a negative start "
                       "with a negative step", "export with dynamic_batch=False, or slice "
                       "with a start of None")
    # ONNX clamps start/end into the axis as Python does for these (step > 0: both into
    # [0, n]; step < 0: end into [-1, n-1], a start of None is the last row)
    start = v.start if v.start is not None else (0 if step > 0 else _INT64_MAX)
    stop = v.stop if v.stop is not None else (_INT64_MAX if step > 0 else _INT64_MIN)
    return (int(start), int(stop), step)


def _is_array(v) -> bool:
    return hasattr(v, "shape") or isinstance(v, list)


def _gather_index(g, c, xa, items, arrays):
    """Integer arrays among full slices -> Gather along each one's axis: one array
    (``x[:, idx]``), or an open mesh of adjacent arrays (``np.ix_``, as
    ``F.pad``'s reflect/replicate/circular modes index), which is separable."""
    if any(v is None for v in items):
        items = None
    elif any(v is Ellipsis for v in items):
        e = next(i for i, v in enumerate(items) if v is Ellipsis)
        items[e:e + 1] = [slice(None)] * (xa.ndim - len(items) + 1)
    pos = [] if items is None else [i for i, v in enumerate(items) if _is_array(v)]
    idx = [np.asarray(items[i]) for i in pos]
    k = len(idx)
    single = k == 1
    mesh = k > 1 and pos == list(range(pos[0], pos[0] + k)) and all(
        a.ndim == k and all(s == 1 for d, s in enumerate(a.shape) if d != j)
        for j, a in enumerate(idx))
    if not (single or mesh) or not all(
            _is_array(v) or v == slice(None) for v in items):
        raise c.refuse("advanced indexing other than one integer array, or an open mesh "
                       "(np.ix_) of them, among full slices", "index with one integer array "
                       "(x[:, idx]) or basic indices")
    if any(a.dtype.kind not in "iu" for a in idx):
        raise c.refuse("a non-integer index array", "index with integers (boolean masks "
                       "have no static ONNX shape)")
    b = c.batch("x")
    if single:
        c.batch_out = [None if b is None or b == pos[0] else
                       (b if b < pos[0] else b + idx[0].ndim - 1)]
        g.node("Gather", [c.x("x"), g.const(idx[0].astype(np.int64))], [c.out], axis=pos[0])
        return
    c.batch_out = [None if b in pos else b]
    y = c.x("x")
    for axis, a in zip(pos, idx):  # (..., n_axis, ...) -> (..., len(a), ...) per axis
        y = g.node("Gather", [y, g.ints(a.reshape(-1))], axis=axis)
    g.rename(y, c.out)


@mapping(shape.Concatenate)
def _concatenate(g, c):
    axis = int(c.a["axis"])
    xs = c.a["xs"]
    batches = [g.batch_of(t) for t in xs]
    c.batch_out = [None if axis in batches else next((b for b in batches if b is not None),
                                                      None)]
    g.node("Concat", [g.value(t) for t in xs], [c.out], axis=axis)


@mapping(shape.Stack)
def _stack(g, c):
    axis = int(c.a["axis"])
    xs = c.a["xs"]
    b = next((v for v in (g.batch_of(t) for t in xs) if v is not None), None)
    c.batch_out = [None if b is None else (b if b < axis else b + 1)]
    parts = [g.axes_node("Unsqueeze", g.value(t), [axis], since=13) for t in xs]
    g.node("Concat", parts, [c.out], axis=axis)


@mapping(shape.Split)
def _split(g, c):
    axis = int(c.a["axis"])
    sizes = [int(t.shape[axis]) for t in c.outs]
    b = c.batch("x")
    c.batch_out = [None if b == axis else b] * len(sizes)
    g.node("Split", [c.x("x"), g.ints(sizes)], c.out_names, axis=axis)


@mapping(shape.Pad)
def _pad(g, c):
    pairs = c.a["pad_width"]
    x = c.x("x")
    pads = [a for a, _ in pairs] + [b for _, b in pairs]
    g.node("Pad", [x, g.ints(pads), g.scalar(c.a["value"], x)], [c.out], mode="constant")


def _triangle(upper):
    def emit(g, c):
        if g.opset < 14:
            raise c.refuse("Trilu needs opset 14", "export with opset >= 14")
        g.node("Trilu", [c.x("x"), g.const(np.int64(c.a["diagonal"]))], [c.out], upper=upper)
    return emit


mapping(shape.Tril)(_triangle(0))
mapping(shape.Triu)(_triangle(1))
