"""The array namespace that op rules are written against.

Forward code and vjp rules call ``ctx.xp.exp(...)``, ``ctx.xp.where(...)``
and so on. On the fast path ``ctx.xp`` is an :class:`ArrayBackend`: the NumPy
or CuPy module itself (attribute lookups fall through and are cached) plus a
few helpers neither module has. When backward runs with ``create_graph=True``
the same rules get :class:`tapegrad.ops.graph_backend.TensorBackend`, whose
functions are tapegrad ops, so the backward pass is itself recorded.
"""

from __future__ import annotations


class ArrayBackend:
    """NumPy/CuPy plus the helpers vjp rules share."""

    def __init__(self, module):
        self.module = module
        self.name = module.__name__

    def __getattr__(self, name):
        value = getattr(self.module, name)
        setattr(self, name, value)  # cache: next lookup is a plain attribute hit
        return value

    def __repr__(self):
        return f"ArrayBackend({self.name})"

    def scatter_add(self, shape, index, values, dtype=None):
        """``zeros(shape)`` with ``values`` added at ``index`` (repeats accumulate)."""
        out = self.module.zeros(shape, dtype=dtype or values.dtype)
        if is_basic_index(index):  # no repeats possible: a plain assignment
            out[index] = values
        elif self.name == "cupy":
            import cupyx

            cupyx.scatter_add(out, index, values)
        else:
            self.module.add.at(out, index, values)
        return out


def is_basic_index(index) -> bool:
    """True for ints, slices, None and Ellipsis only (NumPy's basic indexing)."""
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, slice)) or
               (hasattr(i, "__index__") and not hasattr(i, "shape")) for i in items)
