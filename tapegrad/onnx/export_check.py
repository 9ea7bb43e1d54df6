"""The export's guard against a trace that only holds for its example input.

A trace stores as constants whatever an op got that is not a traced value or a
parameter: numbers, shapes, tensors the forward built. If one of them was
computed from the input outside tapegrad's ops (``x / float(x.max())``,
``tapegrad.tensor(x.numpy() > 0)``), or the forward branches on the input's
values, the graph is silently wrong for every other input. So the forward is
traced a second time on a changed input of the same shape, and every constant
(and the sequence of ops) must come out the same.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..device import to_host
from ..errors import describe
from ..grad_mode import no_grad
from ..tensor import Tensor
from .export_graph import OnnxExportError
from .trace import Alias, needed, trace

# arguments that only a backward reads (embedding's per-row gradient scale)
_BACKWARD_ONLY = {"Embedding": {"scale"}}


def changed_input(t: Tensor) -> Tensor:
    """``t`` with other values of the same shape and dtype: floats mapped by an
    affine map that flips signs and scales (so masks and branches on the sign or
    the size change), anything else rolled (integer indices stay valid indices)."""
    a = to_host(t.array)
    if a.dtype.kind == "f":
        b = 0.3 - 1.7 * a
    else:
        b = np.roll(a, 1, axis=0 if a.ndim and a.shape[0] > 1 else None)
    return Tensor(b.astype(a.dtype), device=t.device)


def check_constants(model, inputs, records, traced: set) -> None:
    """Trace ``model`` on changed inputs and compare with ``records`` (the first
    trace's, pruned by :func:`.trace.needed`): raise :class:`OnnxExportError`
    where a constant or the op sequence depends on the input. ``traced`` holds the
    ids of traced values and parameters."""
    with no_grad(), trace() as tr, np.errstate(all="ignore"):  # log/sqrt of negatives: NaN
        out = model(*(changed_input(t) for t in inputs))
    ops1 = [r for r in records if not isinstance(r, Alias)]
    outs = out if isinstance(out, (tuple, list)) else (out,)
    ops2 = [r for r in needed(tr.records, outs) if not isinstance(r, Alias)]
    names1, names2 = [r.fn.__name__ for r in ops1], [r.fn.__name__ for r in ops2]
    if names1 != names2:
        k = next((i for i, (a, b) in enumerate(zip(names1, names2)) if a != b),
                 min(len(names1), len(names2)))
        raise OnnxExportError(
            f"ONNX export: the forward runs different ops for different input values (op "
            f"{k}: {names1[k] if k < len(names1) else 'none'} for the example input, "
            f"{names2[k] if k < len(names2) else 'none'} for another): a graph holds one "
            "sequence of ops. Make the control flow independent of the input's values.")
    for r1, r2 in zip(ops1, ops2):
        skip = _BACKWARD_ONLY.get(r1.fn.__name__, ())
        for i, (a, b) in enumerate(zip(r1.args, r2.args)):
            _compare(r1, f"argument {i}", a, b, traced)
        for key, a in r1.params.items():
            if key not in skip:
                _compare(r1, f"argument {key!r}", a, r2.params.get(key), traced)


def _compare(rec, where, a, b, traced) -> None:
    if _same(a, b, traced):
        return
    raise OnnxExportError(
        f"ONNX export: {where} of {rec.fn.__name__} ({_show(a)}) changes with the input's "
        f"values ({_show(b)} for another input) but is not computed by tapegrad ops, so the "
        "graph would store the example's value as a constant. Compute it from the input "
        "with tapegrad ops (no .item(), float(), .numpy() or tapegrad.tensor(...) of it).")


def _show(v) -> str:
    if hasattr(v, "shape"):
        return describe(v)
    text = repr(v)
    return text if len(text) < 60 else text[:57] + "..."


def _same(a, b, traced) -> bool:
    """Whether two constants agree (traced values, parameters and objects that
    are neither numbers nor arrays are not constants to compare)."""
    if isinstance(a, Tensor) or hasattr(a, "shape") and hasattr(a, "dtype"):
        if id(a) in traced or isinstance(a, Tensor) and id(a.array) in traced:
            return True
        if not (isinstance(b, Tensor) or hasattr(b, "shape")):
            return False
        x = to_host(a.array if isinstance(a, Tensor) else a)
        y = to_host(b.array if isinstance(b, Tensor) else b)
        return x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"))
    if isinstance(a, (tuple, list)):
        return (isinstance(b, (tuple, list)) and len(a) == len(b)
                and all(_same(u, v, traced) for u, v in zip(a, b)))
    if isinstance(a, numbers.Number) and not isinstance(a, bool):
        return isinstance(b, numbers.Number) and (a == b or a != a and b != b)
    return True
