"""Specs of tapegrad/ops/shape.py."""

import numpy as np

from ... import ops
from . import OpSpec


def _x(*shapes):
    return lambda r: [r.normal(size=s) for s in shapes]


_MASK = np.arange(12).reshape(3, 4) % 3 == 0

SPECS = [
    OpSpec("reshape", lambda x: ops.reshape(x, (4, -1)), _x((2, 3, 4)), twice=True),
    OpSpec("flatten", lambda x: ops.flatten(x, 1), _x((2, 3, 4)), twice=True),
    OpSpec("transpose", lambda x: ops.transpose(x, (2, 0, 1)), _x((2, 3, 4)), twice=True),
    OpSpec("permute", lambda x: ops.permute(x, 1, 2, 0), _x((2, 3, 4)), twice=True),
    OpSpec("swapaxes", lambda x: ops.swapaxes(x, 0, -1), _x((2, 3, 4)), twice=True),
    OpSpec("broadcast_to", lambda x: ops.broadcast_to(x, (2, 3, 4)), _x((3, 1)), twice=True),
    OpSpec("expand_dims", lambda x: ops.expand_dims(x, 1), _x((2, 3)), twice=True),
    OpSpec("squeeze", lambda x: ops.squeeze(x, 1), _x((2, 1, 3)), twice=True),
    OpSpec("getitem", lambda x: ops.getitem(x, (slice(None), 1)), _x((2, 3, 4)), "basic",
           twice=True),
    OpSpec("getitem", lambda x: ops.getitem(x, np.array([0, 2, 0, 0])), _x((3, 2)),
           "repeated", twice=True),
    OpSpec("getitem", lambda x: ops.getitem(x, _MASK), _x((3, 4)), "bool mask", twice=True),
    OpSpec("setitem", lambda x, v: ops.setitem(x, (slice(None), 0), v), _x((3, 2), (3,)),
           twice=True),
    OpSpec("scatter_add", lambda g: ops.scatter_add(g, (3, 2), np.array([1, 1, 0])),
           _x((3, 2)), twice=True),
    OpSpec("concatenate", lambda a, b: ops.concatenate([a, b], axis=1), _x((2, 3), (2, 1)),
           twice=True),
    OpSpec("stack", lambda a, b: ops.stack([a, b], axis=-1), _x((2, 3), (2, 3)), twice=True),
    OpSpec("split", lambda x: ops.split(x, [1, 3], axis=1)[2] * ops.split(x, 2, axis=0)[0],
           _x((2, 4)), twice=True),
    OpSpec("pad", lambda x: ops.pad(x, ((1, 0), (2, 3)), value=0.5), _x((2, 3)), twice=True),
]
