"""Import rules: Split, GatherElements, Trilu, CumSum, TopK (indexing and ordering)."""

from __future__ import annotations

import numpy as np

from .. import ops
from ..tensor import tensor
from ._rules import host, host_ints, norm_axis, norm_indices, rule


def _check_split(node):
    n = node.get("num_outputs")
    if n is not None and n != node.n_outputs:
        raise node.bad(f"num_outputs={n} but the node has {node.n_outputs} outputs")
    if node.n_outputs < 1:
        raise node.bad("a Split without outputs")


@rule("Split", attrs=("axis", "split", "num_outputs"), static=(1,), check=_check_split)
def _split(node, x, split=None):
    """Sizes from ``split`` (attribute before opset 13, input after), else
    ``num_outputs`` (opset 18) or the number of outputs: equal parts, the last smaller."""
    axis = norm_axis(node, int(node.get("axis", 0)), x.ndim)
    sizes = node.ints("split") if node.opset < 13 else host_ints(split)
    n = x.shape[axis]
    if not sizes:
        parts = int(node.get("num_outputs", node.n_outputs))
        step = -(-n // parts)
        sizes = [min(step, n - i * step) for i in range(parts)]
    if sum(sizes) != n or any(s < 0 for s in sizes):
        raise node.refuse_attr("split", sizes, f"sizes must add up to axis {axis}'s {n}")
    bounds = np.cumsum([0] + list(sizes))
    return tuple(ops.getitem(x, (slice(None),) * axis + (slice(int(a), int(b)),))
                 for a, b in zip(bounds[:-1], bounds[1:]))


@rule("GatherElements", attrs=("axis",))
def _gather_elements(node, x, indices):
    """``out[i][j][k] = x[index[i][j][k]][j][k]`` (axis 0): torch.gather."""
    axis = norm_axis(node, int(node.get("axis", 0)), x.ndim)
    idx = norm_indices(node, indices, x.shape[axis], axis)
    return ops.gather(x, axis, tensor(idx, device=x.device))


@rule("Trilu", attrs=("upper",), static=(1,))
def _trilu(node, x, k=None):
    diag = 0 if k is None else int(host(k).item())
    if x.dtype.kind != "f":
        xp = x.device.xp
        fn = xp.triu if node.get("upper", 1) else xp.tril
        return tensor(fn(x.array, diag), device=x.device)
    return (ops.triu if node.get("upper", 1) else ops.tril)(x, diag)


@rule("CumSum", attrs=("exclusive", "reverse"), static=(1,))
def _cumsum(node, x, axis):
    axis = norm_axis(node, int(host(axis).item()), x.ndim)
    rev = bool(node.get("reverse", 0))
    flip = (slice(None),) * axis + (slice(None, None, -1),)
    y = ops.getitem(x, flip) if rev else x
    if x.dtype.kind != "f":
        y = tensor(y.array.cumsum(axis=axis).astype(x.dtype), device=x.device)
    else:
        y = ops.cumsum(y, axis)
    if node.get("exclusive", 0):
        # shift by one along axis: (..., n, ...) -> zero, then the first n - 1 sums
        pad = [(0, 0)] * x.ndim
        pad[axis] = (1, 0)
        y = ops.pad(ops.getitem(y, (slice(None),) * axis + (slice(0, -1),)), pad, 0)
    return ops.getitem(y, flip) if rev else y


@rule("TopK", attrs=("axis", "largest", "sorted"), static=(1,))
def _topk(node, x, k):
    axis = norm_axis(node, int(node.get("axis", -1)), x.ndim)
    if not node.get("sorted", 1):
        raise node.refuse_attr("sorted", 0, "unsorted TopK's order is unspecified")
    if host(k).size != 1 or host(k).dtype.kind not in "iu":
        raise node.bad(f"k must be one integer, got {host(k).dtype} of shape {host(k).shape}")
    kk = int(host(k).reshape(-1)[0])
    if not 0 <= kk <= x.shape[axis]:
        raise node.bad(f"k={kk} is outside [0, {x.shape[axis]}] (axis {axis} of the input "
                       f"{tuple(x.shape)})")
    values, indices = ops.topk(x, kk, axis=axis, largest=bool(node.get("largest", 1)))
    return values, ops.cast(indices, np.int64)
