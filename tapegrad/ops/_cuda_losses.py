"""CUDA: softmax cross-entropy's vjp in one pass (:class:`.losses.CrossEntropy`).

Softmax minus the (smoothed, weighted) one-hot target, times the upstream
scale, with ignore_index's mask, per element of ``p (N, C, *S)``, the target
class read per position -- the same operations in the same order as the array
formula in ``CrossEntropy.backward`` (the CPU path, restated by
:func:`reference`), so float32/float64 results are the same bits:

* no weight: ``(p - onehot) * r``; with label smoothing the target is
  ``onehot * (1 - eps) + eps / C`` in float64, as NumPy forms it from a bool mask;
* weight ``w``: ``(p * (w[t] (1 - eps) + sum(w) eps / C) - q) * r`` with
  ``q = [c == t] w[t] (1 - eps) + w[c] eps / C``.
"""

from __future__ import annotations

import numpy as np

from ..device import kernels

_HAS_VALID, _HAS_WEIGHT, _PER_POSITION, _SMOOTHING = 1, 2, 4, 8

_ce_backward = kernels.elementwise(
    "tg_softmax_ce_backward",
    "F p, raw int64 t, raw bool valid, raw F w, raw F r, F om, F ec, F ws, float64 omd, "
    "float64 ecd, int32 ncls, int32 sp, int32 flags",
    "F gx",
    """const ptrdiff_t pos = (i / ((ptrdiff_t)ncls * sp)) * sp + i % sp;
    const long long c = (i / sp) % ncls;
    const long long tc = t[pos];
    const bool hit = tc == c;
    F rr = r[(flags & 4) ? pos : 0];
    if (flags & 1) rr = rr * (valid[pos] ? (F)1 : (F)0);
    if (flags & 2) {
        const F a = w[tc] * om;
        const F q = (hit ? a : (F)0) + w[c] * ec;
        gx = (p * (a + ws) - q) * rr;
    } else if (flags & 8) {
        const double q = (hit ? 1.0 : 0.0) * omd + ecd;
        gx = (F)(((double)p - q) * (double)rr);
    } else {
        gx = (p - (hit ? (F)1 : (F)0)) * rr;
    }""",
    types=({"F": "float32"}, {"F": "float64"}),
    scalars=("om", "ec", "ws", "omd", "ecd", "ncls", "sp", "flags"),
    reference=lambda *args: reference(*args),
    sample=lambda rng, dt: _sample(rng, dt))


def backward(xp, p, t, valid, weight, wt, r, eps):
    """The vjp ``(N, C, *S)`` from the saved softmax ``p`` and targets ``t (N, *S)``;
    ``r`` is the upstream scale (0-d, or per position for reduction='none')."""
    n_classes = p.shape[1]
    sp = p.size // (p.shape[0] * n_classes) if p.size else 1
    flags = (_HAS_VALID * (valid is not None) + _HAS_WEIGHT * (weight is not None)
             + _PER_POSITION * (r.ndim > 0) + _SMOOTHING * bool(eps))
    f = p.dtype.type
    ws = 0.0 if weight is None else float(weight.sum()) * (eps / n_classes)
    return _ce_backward(
        p, t.astype(xp.int64, copy=False).ravel(),
        xp.ones(1, bool) if valid is None else valid.ravel(),
        xp.zeros(1, p.dtype) if weight is None else weight,  # raw arrays: all 1-D
        r.astype(p.dtype, copy=False).reshape(-1),
        f(1 - eps), f(eps / n_classes), f(ws), 1.0 - eps, eps / n_classes,
        n_classes, sp, flags)


def reference(p, t, valid, w, r, om, ec, ws, omd, ecd, ncls, sp, flags):
    """The kernel on NumPy arrays (its arguments as passed), the backward's formula."""
    shape = p.shape
    p = p.reshape(-1, ncls, sp)  # (N, C, *S) -> (N, C, S)
    tt = t.reshape(-1, sp)  # (N, *S) -> (N, S)
    onehot = tt[:, None, :] == np.arange(ncls)[None, :, None]
    rr = r.reshape(-1, 1, sp) if flags & _PER_POSITION else r.reshape(())
    if flags & _HAS_VALID:
        rr = rr * valid.reshape(-1, 1, sp)
    if flags & _HAS_WEIGHT:
        a = w[tt] * om  # (N, S)
        q = onehot * a[:, None, :] + w[None, :, None] * ec
        g = (p * (a + ws)[:, None, :] - q) * rr
    elif flags & _SMOOTHING:
        g = (p - (onehot * omd + ecd)) * rr
    else:
        g = (p - onehot) * rr
    return g.astype(p.dtype).reshape(shape)


def _sample(rng, dtype, n=4, c=5, s=3):
    dtype = np.dtype(np.float64 if dtype == np.float64 else np.float32)
    e = np.exp(rng.standard_normal((n, c, s)))
    p = (e / e.sum(axis=1, keepdims=True)).astype(dtype)
    t = rng.integers(0, c, (n, s)).astype(np.int64).ravel()
    valid = rng.random(n * s) > 0.2
    w = rng.random(c).astype(dtype)
    r = rng.standard_normal(n * s).astype(dtype)
    eps = 0.1
    f = dtype.type
    return (p, t, valid, w, r, f(1 - eps), f(eps / c), f(float(w.sum()) * eps / c), 1 - eps,
            eps / c, c, s, _HAS_VALID | _HAS_WEIGHT | _PER_POSITION)
