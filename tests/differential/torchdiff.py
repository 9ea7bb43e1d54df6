"""The differential runner: one case, run in PyTorch and in tapegrad, compared.

A case is ``(leaves, consts, call)``: NumPy arrays that become leaf tensors (float
ones require grad), arrays that become constant tensors (indices, masks), and
``call(L, xs, cs)``, which computes the result with the library ``L`` (a
:class:`Lib` for torch or for tapegrad) from the leaves (after the layout view)
and the constants. :func:`run` applies the rules of tests/differential:

- torch raises -> tapegrad raises too (a tapegrad error, TypeError or ValueError);
- torch answers -> tapegrad gives the same values, shapes and dtypes, or raises a
  named tapegrad error (a *refusal*, counted by name, never a failure);
- gradients (float64, float32) and second derivatives (float64, create_graph)
  follow the same rules.

Every run records its outcome under ``(op, dtype, layout)`` in :data:`OUTCOMES`;
tests/differential/conftest.py prints the totals at the end of the session.
"""

from __future__ import annotations

import collections
import warnings

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg
import tapegrad.nn.functional as TF
from tapegrad.errors import TapegradError

F = torch.nn.functional
DTYPES = ("float64", "float32", "float16", "int64", "int32", "uint8", "bool")
GRAD_DTYPES = ("float64", "float32")
LAYOUTS = ("contiguous", "transposed", "strided")
# (rtol, atol) by the result's dtype; atol scales with the largest expected magnitude
TOL = {"float64": (1e-7, 1e-9), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-2)}

# (op, dtype, layout) -> outcomes seen: "matched", "both_raised", "refused:<Error>",
# "mismatch"
OUTCOMES: dict = collections.defaultdict(set)
REFUSALS: collections.Counter = collections.Counter()


class Mismatch(AssertionError):
    """tapegrad gave another answer than PyTorch (or raised an unnamed error)."""


class Lib:
    """One library behind the names the table uses: ``L.mod`` (torch / tapegrad),
    ``L.F`` (the functional namespace), ``L.const``/``L.leaf`` (tensors from arrays)."""

    def __init__(self, is_torch):
        self.is_torch = is_torch
        self.mod = torch if is_torch else tg
        self.F = F if is_torch else TF

    def const(self, a):
        a = np.array(a)
        return torch.from_numpy(a) if self.is_torch else tg.tensor(a)

    def leaf(self, a, grad):
        a = np.array(a)
        if self.is_torch:
            return torch.from_numpy(a).requires_grad_(grad)
        return tg.tensor(a, requires_grad=grad)

    def call(self, where, name, x, *args, **kw):
        if where == "method":
            return getattr(x, name)(*args, **kw)
        return getattr(self.mod if where == "fn" else self.F, name)(x, *args, **kw)

    def grad(self, out, inputs, create_graph):
        if self.is_torch:
            return torch.autograd.grad(out, inputs, create_graph=create_graph,
                                       allow_unused=True)
        return tg.grad(out, inputs, create_graph=create_graph, allow_unused=True)

    def is_tensor(self, r):
        return isinstance(r, torch.Tensor if self.is_torch else tg.Tensor)


TORCH, TAPEGRAD = Lib(True), Lib(False)


# ------------------------------------------------------------------ drawing inputs
def shapes(min_dims=0, max_dims=3, min_side=1, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def array(data, dtype, shape, lo=-3.0, hi=3.0, kinks=(), unique=False):
    """An array of ``dtype`` and ``shape`` in ``[lo, hi]``, at least 0.05 from every
    kink (ints: never equal to one); ``unique``: no two elements equal (sort, max...)."""
    dt = np.dtype(dtype)
    shape = tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    if dt.kind == "b":
        ok = [v for v in (False, True) if v not in kinks] or [False, True]
        return data.draw(hnp.arrays(dt, shape, elements=st.sampled_from(ok)))
    if dt.kind in "iu":
        info = np.iinfo(dt)
        a, b = max(int(np.ceil(lo)), int(info.min)), min(int(np.floor(hi)), int(info.max))
        if a > b:
            a, b = max(0, int(info.min)), 1
        if unique and b - a + 1 < n:
            b = a + n  # widen rather than repeat (uint8: at most 64 elements here)
        if unique:
            vals = data.draw(st.permutations(range(a, b + 1)))[:n]
            return np.array(vals, dtype=dt).reshape(shape)
        el = st.integers(a, b).filter(lambda v: v not in kinks)
        return data.draw(hnp.arrays(dt, shape, elements=el))
    if unique:  # evenly spread, in a drawn order: no ties, even in float16
        perm = np.array(data.draw(st.permutations(range(n))), dtype=np.float64)
        return (lo + (perm + 0.5) * (hi - lo) / max(n, 1)).astype(dt).reshape(shape)
    el = st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=64)
    if kinks:
        el = el.filter(lambda v: all(abs(v - k) > 0.05 for k in kinks))
    return data.draw(hnp.arrays(np.float64, shape, elements=el)).astype(dt)


def lay(a, layout):
    """``(stored, view)``: the leaf's array and the view that gives ``a`` from it."""
    if layout == "transposed" and a.ndim >= 2:
        axes = tuple(reversed(range(a.ndim)))
        return np.ascontiguousarray(a.transpose(axes)), lambda t: t.permute(*axes)
    if layout == "strided" and a.ndim >= 1:
        stored = np.stack([a, np.zeros_like(a)], axis=-1).reshape(*a.shape[:-1], -1)
        return stored, lambda t: t[..., ::2]
    return a, lambda t: t


# ---------------------------------------------------------------------- comparing
def _np(r):
    if isinstance(r, torch.Tensor):
        return r.detach().numpy(force=True)  # force: a ZeroTensor (abs'' at 0) too
    return r.detach().numpy() if isinstance(r, tg.Tensor) else np.asarray(r)


def flat(r):
    if isinstance(r, (torch.Tensor, tg.Tensor, np.ndarray, str)) or r is None:
        return [r]
    if isinstance(r, (tuple, list)):
        return [y for z in r for y in flat(z)]
    return [r]


def dtype_name(r):
    if isinstance(r, torch.Tensor):
        return str(r.dtype).removeprefix("torch.")
    return np.dtype(r.dtype).name


def close(got, want, what, scale=1.0):
    """Raise :class:`Mismatch` unless ``got`` (tapegrad) is ``want`` (torch); ``scale``
    floors the magnitude the absolute tolerance is relative to."""
    if want is None or got is None:
        if want is not got:
            raise Mismatch(f"{what}: tapegrad {got!r}, torch {want!r}")
        return
    if isinstance(want, (torch.Tensor, np.ndarray)):
        if not isinstance(got, (tg.Tensor, np.ndarray)):
            raise Mismatch(f"{what}: tapegrad returned {type(got).__name__}, torch a tensor")
        if dtype_name(got) != dtype_name(want):
            raise Mismatch(f"{what}: dtype tapegrad {dtype_name(got)}, torch {dtype_name(want)}")
        g, w = _np(got), _np(want)
        if g.shape != w.shape:
            raise Mismatch(f"{what}: shape tapegrad {g.shape}, torch {w.shape}")
        values(g, w, what, scale)
        return
    if type(got) is not type(want):
        raise Mismatch(f"{what}: tapegrad {type(got).__name__} {got!r}, "
                       f"torch {type(want).__name__} {want!r}")
    if isinstance(want, float):
        values(np.float64(got), np.float64(want), what)
    elif got != want:
        raise Mismatch(f"{what}: tapegrad {got!r}, torch {want!r}")


def values(g, w, what, scale=1.0):
    if w.dtype.kind != "f":
        if not np.array_equal(g, w):
            raise Mismatch(f"{what}: values differ\n tapegrad {g.tolist()}\n torch    "
                           f"{w.tolist()}")
        return
    rtol, atol = TOL.get(w.dtype.name, TOL["float64"])
    finite = np.isfinite(w)
    scale = max(scale, float(np.abs(w[finite]).max())) if finite.any() else scale
    try:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol,
                                   atol=atol * scale, equal_nan=True)
    except AssertionError as e:
        raise Mismatch(f"{what}: values differ\n tapegrad {g.tolist()}\n torch    "
                       f"{w.tolist()}\n{str(e).splitlines()[-1]}") from None


# ------------------------------------------------------------------------ running
def _weights(shape, dtype, k=0):
    n = int(np.prod(shape, dtype=np.int64))
    return (0.5 + ((np.arange(n) * 3 + k) % 7) / 7.0).reshape(shape).astype(dtype)


def _attempt(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(), None
        except Exception as e:  # noqa: BLE001 - the outcome is what we compare
            return None, e


class _Refused(Exception):
    pass


def _unimplemented(err):
    """torch's CPU kernel gaps ("addmm" not implemented for 'Bool' / 'Half', a missing
    double backward): no reference answer, not a refusal that tapegrad must copy."""
    return isinstance(err, NotImplementedError) or "not implemented" in str(err)


def _judge(stage, t_err, g_err, key):
    """Both raised / tapegrad refused / fine; raise Mismatch for the forbidden mixes."""
    if t_err is not None and _unimplemented(t_err):
        return "torch_unimplemented"
    if t_err is not None:
        if g_err is None:
            raise Mismatch(f"{stage}: torch raises {type(t_err).__name__}: "
                           f"{str(t_err)[:200]}, tapegrad answers")
        if not isinstance(g_err, (TapegradError, TypeError, ValueError)):
            raise Mismatch(f"{stage}: torch raises, tapegrad raises an unnamed "
                           f"{type(g_err).__name__}: {g_err}")
        return "both_raised"
    if g_err is not None:
        if isinstance(g_err, TapegradError):
            REFUSALS[f"{key[0]}: {type(g_err).__name__}"] += 1
            return f"refused:{type(g_err).__name__}"
        raise Mismatch(f"{stage}: torch answers, tapegrad raises an unnamed "
                       f"{type(g_err).__name__}: {g_err}") from g_err
    return None


def _side(L, case, dtype, layout, grad):
    leaves_np, consts, call = case
    leaves, xs = [], []
    for a in leaves_np:
        stored, view = lay(np.asarray(a), layout)
        leaf = L.leaf(stored, grad and stored.dtype.kind == "f")
        leaves.append(leaf)
        xs.append(view(leaf))
    cs = [L.const(c) if isinstance(c, np.ndarray) else c for c in consts]
    return leaves, call(L, xs, cs)


def run(op, dtype, case, layout="contiguous", grad=True):
    """Run ``case`` in both libraries and compare; record the outcome."""
    key = (op, dtype, layout)
    try:
        outcome = _run(key, dtype, case, layout, grad)
    except Mismatch:
        OUTCOMES[key].add("mismatch")
        raise
    OUTCOMES[key].add(outcome)


def _run(key, dtype, case, layout, grad):
    grad = grad and dtype in GRAD_DTYPES
    tres, t_err = _attempt(lambda: _side(TORCH, case, dtype, layout, grad))
    gres, g_err = _attempt(lambda: _side(TAPEGRAD, case, dtype, layout, grad))
    verdict = _judge("forward", t_err, g_err, key)
    if verdict:
        return verdict
    (t_leaves, t_out), (g_leaves, g_out) = tres, gres
    tf, gf = flat(t_out), flat(g_out)
    if len(tf) != len(gf):
        raise Mismatch(f"forward: tapegrad gives {len(gf)} results, torch {len(tf)}")
    for i, (g, t) in enumerate(zip(gf, tf)):
        close(g, t, f"result {i}")
    diff = [i for i, t in enumerate(tf) if isinstance(t, torch.Tensor) and t.requires_grad]
    t_in = [x for x in t_leaves if x.requires_grad]
    if not grad or not diff or not t_in:
        return "matched"
    g_in = [x for x in g_leaves if x.requires_grad]
    second = dtype == "float64"

    def loss(L, outs, leaves):
        total = 0
        for i in diff:
            w = L.const(_weights(tuple(outs[i].shape), dtype, i))
            total = total + (outs[i] * w).sum()
        return L.grad(total, leaves, second)

    t_g, t_err = _attempt(lambda: loss(TORCH, tf, t_in))
    g_g, g_err = _attempt(lambda: loss(TAPEGRAD, gf, g_in))
    verdict = _judge("backward", t_err, g_err, key)
    if verdict:
        return verdict
    for i, (g, t, x) in enumerate(zip(g_g, t_g, t_in)):
        zeros = torch.zeros_like(x)
        close(g if g is not None else tg.tensor(zeros.numpy()),
              t if t is not None else zeros, f"gradient of leaf {i}")
    if not second or not any(t is not None and t.requires_grad for t in t_g):
        return "matched"

    def twice(L, grads, leaves):
        total = 0
        for k, (g, x) in enumerate(zip(grads, leaves)):
            if g is not None and g.requires_grad:
                total = total + (g * L.const(_weights(tuple(x.shape), dtype, k + 3))).sum()
        if not L.is_tensor(total):
            return [None] * len(leaves)
        return L.grad(total, leaves, False)

    t_2, t_err = _attempt(lambda: twice(TORCH, t_g, t_in))
    g_2, g_err = _attempt(lambda: twice(TAPEGRAD, g_g, g_in))
    verdict = _judge("double backward", t_err, g_err, key)
    if verdict:
        return verdict
    # A second derivative is a difference of terms as large as the gradients (times
    # 1/sqrt(eps) in a norm at zero variance): its rounding is relative to them.
    firsts = [np.abs(_np(t)) for t in t_g if t is not None]
    big = max([1.0] + [float(a[np.isfinite(a)].max(initial=0.0)) for a in firsts])
    for i, (g, t, x) in enumerate(zip(g_2, t_2, t_in)):
        zeros = torch.zeros_like(x)
        close(g if g is not None else tg.tensor(zeros.numpy()),
              t if t is not None else zeros, f"second derivative of leaf {i}", big)
    return "matched"


def summary():
    """The lines the session-finish hook prints."""
    if not OUTCOMES:
        return []
    kinds = collections.Counter()
    for outs in OUTCOMES.values():
        if "mismatch" in outs:
            kinds["mismatched"] += 1
        elif any(o.startswith("refused") for o in outs):
            kinds["refused"] += 1
        else:
            kinds["matched"] += 1
        if outs & {"both_raised"}:
            kinds["both raised (in some example)"] += 1
        if outs & {"torch_unimplemented"}:
            kinds["torch unimplemented"] += 1
    lines = [f"differential vs torch {torch.__version__}: {len(OUTCOMES)} (op, dtype, layout) "
             f"cases ran; {kinds['matched']} matched, {kinds['refused']} refused by name, "
             f"{kinds['mismatched']} mismatched (xfail'd or failing); "
             f"{kinds['both raised (in some example)']} where both raised, "
             f"{kinds['torch unimplemented']} where torch's CPU kernel is missing (no reference)"]
    if REFUSALS:
        top = ", ".join(f"{k} x{v}" for k, v in sorted(REFUSALS.items()))
        lines.append(f"refusals (op: error x examples): {top}")
    return lines
