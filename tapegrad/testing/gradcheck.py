"""Analytic vjps against central differences, in float64."""

from __future__ import annotations

import numpy as np

from ..device import to_host
from ..engine import grad as tape_grad
from ..errors import TapegradError
from ..tape import enable_grad, no_grad
from ..tensor import Tensor

__all__ = ["gradcheck", "gradgradcheck", "directional_gradcheck", "GradcheckError"]


class GradcheckError(TapegradError, AssertionError):
    """The analytic gradient disagrees with the numerical one."""


def _as_inputs(inputs, device):
    """Float64 leaf copies of the inputs (arrays, lists or Tensors)."""
    out = []
    for x in inputs if isinstance(inputs, (list, tuple)) else [inputs]:
        if isinstance(x, Tensor):
            requires = x.requires_grad or x.dtype.kind == "f"
            dev = x.device if device is None else device
            data = x.array
        else:
            data = np.asarray(x)
            requires = data.dtype.kind == "f"
            dev = device or "cpu"
        if data.dtype.kind == "f":
            data = data.astype(np.float64)
        t = Tensor(data, device=dev, requires_grad=requires)
        # C order, so that perturbing data.reshape(-1) perturbs the tensor itself
        t.array = t.device.xp.asarray(t.array, order="C")
        out.append(t)
    return out


def _scalar(fn, inputs, cotangents):
    """sum_k <fn(inputs)_k, cotangent_k> as a Python float (no tape)."""
    with no_grad():
        outs = fn(*inputs)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    total = 0.0
    for o, c in zip(outs, cotangents):
        if c is not None:
            total += float((o.array * c).sum())
    return total


def _cotangents(fn, inputs, rng):
    with no_grad():
        outs = fn(*inputs)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    cots = []
    for o in outs:
        if not isinstance(o, Tensor) or o.dtype.kind != "f":
            cots.append(None)
            continue
        c = rng.standard_normal(o.shape)
        cots.append(c if o.device.type == "cpu" else o.device.put(c.astype(o.dtype)))
    return outs, cots


def _analytic(fn, inputs, cots, create_graph=False):
    diff = [x for x in inputs if x.requires_grad]
    outs = fn(*inputs)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    pairs = [(o, Tensor(c, device=o.device)) for o, c in zip(outs, cots)
             if c is not None and isinstance(o, Tensor) and o.requires_grad]
    if not pairs:
        return diff, [None] * len(diff)
    grads = tape_grad([o for o, _ in pairs], diff, [c for _, c in pairs],
                      create_graph=create_graph, allow_unused=True)
    return diff, list(grads)


def _compare(name, numeric, analytic, atol, rtol, label):
    numeric = np.asarray(numeric, dtype=np.float64)
    analytic = np.zeros_like(numeric) if analytic is None else to_host(analytic).astype(np.float64)
    err = np.abs(numeric - analytic)
    tol = atol + rtol * np.abs(numeric)
    bad = err > tol
    if bad.any():
        worst = np.unravel_index(np.argmax(err - tol), err.shape) if err.ndim else ()
        raise GradcheckError(
            f"gradcheck failed for {label} of {name}: {int(bad.sum())} of {err.size} elements "
            f"differ. Worst at index {tuple(int(i) for i in worst)}: analytic "
            f"{analytic[worst]!r}, numerical {numeric[worst]!r} (abs err {err[worst]:.3g}, "
            f"atol {atol}, rtol {rtol})"
        )


def gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0, device=None, name=None):
    """Check ``fn``'s vjp against central differences, element by element.

    ``inputs``: arrays or Tensors; floating ones are converted to float64 leaves
    that require grad. ``fn`` may return one tensor or a tuple; each output is
    contracted with a random cotangent. Raises :class:`GradcheckError` naming
    the worst element; returns True otherwise.

    >>> gradcheck(lambda x: (x * x).sum(), [np.random.rand(3)])
    True
    """
    rng = np.random.default_rng(seed)
    xs = _as_inputs(inputs, device)
    name = name or getattr(fn, "__name__", "fn")
    _, cots = _cotangents(fn, xs, rng)
    diff, grads = _analytic(fn, xs, cots)
    positions = [i for i, x in enumerate(xs) if x.requires_grad]
    for pos, x, g in zip(positions, diff, grads):
        data = x.array
        numeric = np.zeros(data.shape)
        flat = data.reshape(-1)
        for j in range(flat.size):
            orig = flat[j].item()
            flat[j] = orig + eps
            fp = _scalar(fn, xs, cots)
            flat[j] = orig - eps
            fm = _scalar(fn, xs, cots)
            flat[j] = orig
            numeric.reshape(-1)[j] = (fp - fm) / (2 * eps)
        _compare(name, numeric, None if g is None else g.array, atol, rtol,
                 f"input {pos} {tuple(data.shape)}")
    return True


def directional_gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0, n_directions=2,
                          device=None, name=None):
    """Check ``<grad, v>`` against ``(f(x + eps v) - f(x - eps v)) / 2 eps`` for
    random directions ``v`` over all inputs at once: two function evaluations
    per direction, however large the inputs."""
    rng = np.random.default_rng(seed)
    xs = _as_inputs(inputs, device)
    name = name or getattr(fn, "__name__", "fn")
    _, cots = _cotangents(fn, xs, rng)
    diff, grads = _analytic(fn, xs, cots)
    for _ in range(n_directions):
        dirs = [rng.standard_normal(x.shape) for x in diff]
        analytic = sum(float((to_host(g.array) * d).sum()) for g, d in zip(grads, dirs)
                       if g is not None)
        saved = [x.array.copy() for x in diff]
        for x, d in zip(diff, dirs):
            x.array += x.device.xp.asarray(d) * eps
        fp = _scalar(fn, xs, cots)
        for x, d in zip(diff, dirs):
            x.array -= x.device.xp.asarray(d) * (2 * eps)
        fm = _scalar(fn, xs, cots)
        for x, s in zip(diff, saved):
            x.array[...] = s
        _compare(name, np.float64((fp - fm) / (2 * eps)), np.float64(analytic), atol, rtol,
                 "a random direction")
    return True


def gradgradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-3, seed=0, device=None, name=None):
    """Check second derivatives: the vjp of ``x -> <grad fn(x), u>`` (built
    with ``create_graph=True``) against central differences of the first
    gradient, element by element."""
    rng = np.random.default_rng(seed)
    xs = _as_inputs(inputs, device)
    name = name or getattr(fn, "__name__", "fn")
    _, cots = _cotangents(fn, xs, rng)
    diff = [x for x in xs if x.requires_grad]
    us = [rng.standard_normal(x.shape) for x in diff]

    @enable_grad()  # gradcheck evaluates under no_grad; the first gradient needs a tape
    def first_grad_dot_u(*args):
        d, gs = _analytic(fn, list(args), cots, create_graph=True)
        total = None
        for g, u in zip(gs, us):
            if g is not None:
                term = (g * u).sum()
                total = term if total is None else total + term
        if total is None:
            raise GradcheckError(f"gradgradcheck: {name} has no gradient w.r.t. any input")
        return total

    return gradcheck(first_grad_dot_u, xs, eps=eps, atol=atol, rtol=rtol, seed=seed,
                     device=device, name=f"grad of {name}")
