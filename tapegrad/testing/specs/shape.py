"""Specs of tapegrad/ops/shape.py."""

import numpy as np

from ... import ops
from . import OpSpec, empty_batch


def _x(*shapes):
    return lambda r: [r.normal(size=s) for s in shapes]


_MASK = np.arange(12).reshape(3, 4) % 3 == 0
_IDX = np.array([0, 2, 0, 0])
_ROWS = np.array([1, 1, 0])  # scatter_add: row of the output each input row adds to
_FIXED = "the target shape is fixed by the spec: the input has no batch axis"


def _setitem(x, v):
    y = x.copy()
    y[:, 0] = v
    return y


def _scatter_add(g):
    out = np.zeros((3, 2))
    np.add.at(out, _ROWS[:len(g)], g)
    return out


_GIDX = np.array([[0, 3, 3], [1, 1, 0], [2, 0, 2]])  # gather/scatter: repeats and skips
_GIDX0 = np.array([[2, 0, 1], [2, 2, 0]])  # along axis 0, smaller than x on axis 1


def _gather(x, axis, idx):
    out = np.empty(idx.shape)
    for i, j in np.ndindex(*idx.shape):
        out[i, j] = x[idx[i, j], j] if axis == 0 else x[i, idx[i, j]]
    return out


def _scatter_add_along(x, s, idx):
    out = x.copy()
    for i, j in np.ndindex(*idx.shape):
        out[i, idx[i, j]] += s[i, j]
    return out


def _split(x):
    return np.split(x, [1, 3], axis=1)[2] * np.split(x, 2, axis=0)[0]


SPECS = [
    OpSpec("reshape", lambda x: ops.reshape(x, (4, -1)), _x((2, 3, 4)),
           reference=lambda x: x.reshape(4, -1), zero_size=None, zero_size_reason=_FIXED),
    OpSpec("flatten", lambda x: ops.flatten(x, 1), _x((2, 3, 4)),
           reference=lambda x: x.reshape(len(x), np.prod(x.shape[1:], dtype=int))),
    OpSpec("transpose", lambda x: ops.transpose(x, (2, 0, 1)), _x((2, 3, 4)),
           reference=lambda x: x.transpose(2, 0, 1)),
    OpSpec("permute", lambda x: ops.permute(x, 1, 2, 0), _x((2, 3, 4)),
           reference=lambda x: x.transpose(1, 2, 0)),
    OpSpec("swapaxes", lambda x: ops.swapaxes(x, 0, -1), _x((2, 3, 4)),
           reference=lambda x: x.swapaxes(0, -1)),
    OpSpec("broadcast_to", lambda x: ops.broadcast_to(x, (2, 3, 4)), _x((3, 1)),
           reference=lambda x: np.broadcast_to(x, (2, 3, 4)), zero_size=None,
           zero_size_reason=_FIXED),
    OpSpec("expand_dims", lambda x: ops.expand_dims(x, 1), _x((2, 3)),
           reference=lambda x: x[:, None]),
    OpSpec("squeeze", lambda x: ops.squeeze(x, 1), _x((2, 1, 3)),
           reference=lambda x: x.squeeze(1)),
    OpSpec("getitem", lambda x: ops.getitem(x, (slice(None), 1)), _x((2, 3, 4)), "basic",
           reference=lambda x: x[:, 1]),
    # the index picks rows: an empty row axis has nothing to pick, so empty the columns
    OpSpec("getitem", lambda x: ops.getitem(x, _IDX), _x((3, 2)), "repeated",
           reference=lambda x: x[_IDX], zero_size=lambda xs: [xs[0][:, :0]]),
    OpSpec("getitem", lambda x: ops.getitem(x, _MASK[:len(x)]), _x((3, 4)), "bool mask",
           reference=lambda x: x[_MASK[:len(x)]]),
    OpSpec("setitem", lambda x, v: ops.setitem(x, (slice(None), 0), v), _x((3, 2), (3,)),
           reference=_setitem, zero_size=empty_batch(0, 1)),
    OpSpec("scatter_add", lambda g: ops.scatter_add(g, (3, 2), _ROWS[:len(g)]),
           _x((3, 2)), reference=_scatter_add),
    OpSpec("gather", lambda x: ops.gather(x, 1, _GIDX[:len(x)]), _x((3, 4)), "axis 1",
           reference=lambda x: _gather(x, 1, _GIDX[:len(x)])),
    OpSpec("gather", lambda x: ops.gather(x, 0, _GIDX0), _x((3, 4)), "axis 0",
           reference=lambda x: _gather(x, 0, _GIDX0), zero_size=None,
           zero_size_reason="the index reads rows 0-2 of axis 0, the batch"),
    OpSpec("scatter_add_along", lambda x, s: ops.scatter_add_along(x, 1, _GIDX[:len(x)], s),
           _x((3, 4), (3, 4)), reference=lambda x, s: _scatter_add_along(x, s, _GIDX[:len(x)]),
           zero_size=empty_batch(0, 1)),
    OpSpec("concatenate", lambda a, b: ops.concatenate([a, b], axis=1), _x((2, 3), (2, 1)),
           reference=lambda a, b: np.concatenate([a, b], axis=1),
           zero_size=empty_batch(0, 1)),
    OpSpec("stack", lambda a, b: ops.stack([a, b], axis=-1), _x((2, 3), (2, 3)),
           reference=lambda a, b: np.stack([a, b], axis=-1), zero_size=empty_batch(0, 1)),
    OpSpec("split", lambda x: ops.split(x, [1, 3], axis=1)[2] * ops.split(x, 2, axis=0)[0],
           _x((2, 4)), reference=_split),
    OpSpec("pad", lambda x: ops.pad(x, ((1, 0), (2, 3)), value=0.5), _x((2, 3)),
           reference=lambda x: np.pad(x, ((1, 0), (2, 3)), constant_values=0.5)),
]


def _distinct(r):
    return [r.permutation(12).reshape(3, 4) * 0.1 + r.uniform(0, 0.01, (3, 4))]


SPECS += [
    OpSpec("tril", lambda x: ops.tril(x, -1), _x((2, 3, 4)),
           reference=lambda x: np.tril(x, -1)),
    OpSpec("triu", lambda x: ops.triu(x, 1), _x((3, 4)), reference=lambda x: np.triu(x, 1)),
    OpSpec("sort", lambda x: ops.sort(x, 1, descending=True)[0], _distinct,
           reference=lambda x: -np.sort(-x, 1)),
    OpSpec("topk", lambda x: ops.topk(x, 2, axis=1)[0], _distinct,
           reference=lambda x: -np.sort(-x, 1)[:, :2]),
    OpSpec("topk", lambda x: ops.topk(x, 2, axis=0, largest=False)[0], _distinct, "smallest",
           reference=lambda x: np.sort(x, 0)[:2], zero_size=None,
           zero_size_reason="k=2 along axis 0, the batch"),
]
