"""Stochastic gradient descent with momentum (PyTorch's formulas)."""

from __future__ import annotations

import numpy as np

from ..device import get_array_module, kernels, pool
from ..errors import ArgumentError
from .optimizer import Optimizer, _on_cuda, required

__all__ = ["SGD"]

# CUDA: the whole update of one parameter in one pass, in the order of the array
# code in SGD._update (the CPU path, restated by the references), each operation
# rounded to T as NumPy rounds it (CuPy's float16 operators return float, so the
# steps are T variables). flags: 1 weight decay, 2 first step (buf = d),
# 4 dampening, 8 nesterov.
_WD, _FIRST, _DAMP, _NESTEROV = 1, 2, 4, 8


def _sgd_reference(g, lr, wd, flags, p):
    d = p * wd + g if flags & _WD else g
    return p - lr * d


def _momentum_reference(g, lr, wd, mom, damp1, flags, p, buf):
    d = p * wd + g if flags & _WD else g
    if flags & _FIRST:
        buf = d.copy()
    else:
        buf = buf * mom + (d * damp1 if flags & _DAMP else d)
    d = d + mom * buf if flags & _NESTEROV else buf
    return p - lr * d, buf


def _sample(rng, dt, momentum):
    a = lambda: rng.standard_normal(32).astype(dt)  # noqa: E731
    s = dt.type
    if momentum:
        return a(), s(0.1), s(0.01), s(0.9), s(0.75), _WD | _DAMP, a(), a()
    return a(), s(0.1), s(0.01), _WD, a()


_sgd = kernels.elementwise(
    "tg_sgd_update", "T g, T lr, T wd, int32 flags", "T p",
    """T d = g;
    if (flags & 1) { d = p * wd; d = d + g; }
    const T s = lr * d;
    p = p - s""",
    scalars=("lr", "wd", "flags"), reference=_sgd_reference,
    sample=lambda rng, dt: _sample(rng, dt, False))
_sgd_momentum = kernels.elementwise(
    "tg_sgd_momentum_update", "T g, T lr, T wd, T mom, T damp1, int32 flags", "T p, T buf",
    """T d = g;
    if (flags & 1) { d = p * wd; d = d + g; }
    if (flags & 2) {
        buf = d;
    } else {
        const T b = buf * mom;
        if (flags & 4) { const T e = d * damp1; buf = b + e; } else { buf = b + d; }
    }
    if (flags & 8) { const T e = mom * buf; d = d + e; } else { d = buf; }
    const T s = lr * d;
    p = p - s""",
    scalars=("lr", "wd", "mom", "damp1", "flags"), reference=_momentum_reference,
    sample=lambda rng, dt: _sample(rng, dt, True))


class SGD(Optimizer):
    """SGD with optional (Nesterov) momentum and L2 weight decay.

    Per parameter, with ``g`` its gradient (PyTorch's exact update)::

        d = g + weight_decay * p
        buf = d                                   (first step)
        buf = momentum * buf + (1 - dampening) * d
        d = d + momentum * buf   if nesterov else buf
        p -= lr * d

    This is Caffe's SGD solver with ``momentum`` and ``weight_decay`` (Caffe
    scales the update by lr inside the buffer; with a constant lr the two are
    identical).

    >>> opt = optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    """

    _state_buffers = ("momentum_buffer",)
    _lazy_state = ("momentum_buffer",)

    def __init__(self, params, lr=required, momentum: float = 0.0, dampening: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      nesterov=nesterov, weight_decay=weight_decay))

    def _check_group(self, g):
        if g["lr"] < 0:
            raise ArgumentError(f"SGD: invalid learning rate {g['lr']}")
        if g["momentum"] < 0 or g["weight_decay"] < 0:
            raise ArgumentError(f"SGD: momentum ({g['momentum']}) and weight_decay "
                                f"({g['weight_decay']}) must be >= 0")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise ArgumentError("SGD: Nesterov momentum needs momentum > 0 and dampening 0")

    def _update(self, p, g, state, group):
        if _on_cuda(p, g):
            return _update_cuda(p, g, state, group)
        momentum = group["momentum"] != 0
        buf = state.get("momentum_buffer") if momentum else None
        first = momentum and buf is None
        if first:  # filled with d by the step
            buf = state["momentum_buffer"] = \
                np.empty_like(p) if type(p) is np.ndarray else p.copy()
        arrays = (p, g) if buf is None else (p, g, buf)
        step = lambda p, g, buf=None: _step(p, g, buf, first, group)  # noqa: E731
        # elementwise: on the host split across the pool in pieces of the flat arrays
        if not pool.streamed(step, *arrays, passes=6):
            step(*arrays)


def _step(p, g, buf, first, group):
    """The update of one parameter (or a piece of it), in place: ``p``, ``g`` and the
    momentum buffer ``buf`` (None without momentum; set to d on the ``first`` step)."""
    lr, mom, wd = group["lr"], group["momentum"], group["weight_decay"]
    owned = False  # whether d is a temporary we may overwrite
    d = g
    if wd != 0:
        d = p * wd
        d += g
        owned = True
    if mom != 0:
        if first:
            buf[...] = d
        else:
            buf *= mom
            damp = group["dampening"]
            if damp == 0:
                buf += d
            else:
                buf += d * (1 - damp)
        if group["nesterov"]:
            if owned:
                d += mom * buf
            else:
                d = g + mom * buf
                owned = True
        else:
            d, owned = buf, False
    if owned:
        d *= lr
        p -= d
    else:
        p -= lr * d


def _update_cuda(p, g, state, group):
    lr, mom, wd = group["lr"], group["momentum"], group["weight_decay"]
    flags = _WD * (wd != 0)
    if mom == 0:
        _sgd(g, lr, wd, flags, p)
        return
    buf = state.get("momentum_buffer")
    if buf is None:
        buf = state["momentum_buffer"] = get_array_module(p).empty_like(p)
        flags |= _FIRST
    damp = group["dampening"]
    flags |= _DAMP * (damp != 0) | _NESTEROV * bool(group["nesterov"])
    _sgd_momentum(g, lr, wd, mom, 1 - damp, flags, p, buf)
