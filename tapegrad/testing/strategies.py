"""Hypothesis strategies for testing ops and user ``Function``s.

    from hypothesis import given
    from tapegrad.testing import gradcheck, strategies as st

    @given(st.arrays(st.shapes(max_dims=3), away_from=0.0))
    def test_my_op(x):
        gradcheck(my_op, [x])

Arrays are float64 by default and kept away from kinks (``away_from``: relu
and abs at 0, values of another array) and from ties (``distinct=True``:
max/min and max pooling), where central differences are meaningless.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

__all__ = ["shapes", "broadcastable_shapes", "axes", "arrays", "array_pairs"]


def shapes(min_dims=0, max_dims=3, min_side=1, max_side=4):
    """Array shapes with small sides (gradchecks difference every element)."""
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


@st.composite
def broadcastable_shapes(draw, min_dims=0, max_dims=3, max_side=4):
    """A pair ``(a, b)`` of shapes that broadcast together (either may be smaller)."""
    out = draw(shapes(min_dims, max_dims, 1, max_side))
    a = list(out)
    b = list(out)
    for shape in (a, b):
        for i in range(len(shape)):
            if draw(st.booleans()) and draw(st.booleans()):
                shape[i] = 1
    drop_a = draw(st.integers(0, len(a)))
    drop_b = draw(st.integers(0, len(b)))
    return tuple(a[drop_a:]), tuple(b[drop_b:])


@st.composite
def axes(draw, ndim, allow_none=True, allow_tuple=True):
    """``None``, one axis (possibly negative) or a tuple of distinct axes of ``ndim``."""
    choices = []
    if allow_none:
        choices.append(st.none())
    if ndim > 0:
        choices.append(st.integers(-ndim, ndim - 1))
        if allow_tuple:
            choices.append(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim,
                                    unique=True).map(tuple))
    if not choices:
        return None
    return draw(st.one_of(*choices))


@st.composite
def arrays(draw, shape=None, dtype=np.float64, low=-2.0, high=2.0, away_from=None,
           margin=0.05, distinct=False, positive=False):
    """A float array of ``shape`` (a shape or a strategy of shapes).

    ``away_from``: a number (or list) each element keeps at least ``margin``
    from; ``distinct``: all elements differ by at least ``margin`` (no ties);
    ``positive``: all elements in ``[margin, high]`` (for log, sqrt, pow).
    """
    if shape is None:
        shape = shapes()
    if not isinstance(shape, tuple):
        shape = draw(shape)
    size = int(np.prod(shape, dtype=np.int64))
    lo = margin if positive else low
    if distinct:
        # a permutation of evenly spaced values, jittered a little
        base = np.linspace(lo, high, max(size, 1))[:size]
        perm = draw(st.permutations(list(range(size)))) if size else []
        vals = base[list(perm)] if size else base
        step = (high - lo) / max(size, 1)
        jitter = draw(hnp.arrays(np.float64, size, elements=st.floats(-0.25, 0.25)))
        data = vals + jitter * step
    else:
        data = draw(hnp.arrays(np.float64, size, elements=st.floats(
            lo, high, allow_nan=False, allow_infinity=False)))
    if away_from is not None:
        for k in np.atleast_1d(away_from):
            close = np.abs(data - k) < margin
            data = np.where(close, k + np.where(data >= k, margin, -margin) * 2, data)
    return data.reshape(shape).astype(dtype)


@st.composite
def array_pairs(draw, dtype=np.float64, **kwargs):
    """Two arrays of broadcastable shapes (for binary elementwise ops)."""
    sa, sb = draw(broadcastable_shapes())
    return draw(arrays(sa, dtype=dtype, **kwargs)), draw(arrays(sb, dtype=dtype, **kwargs))
