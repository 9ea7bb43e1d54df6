"""Adadelta (Zeiler 2012; PyTorch's formulas, Caffe's AdaDelta solver)."""

from __future__ import annotations

from ..device import get_array_module
from ..errors import ArgumentError
from .optimizer import Optimizer

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """Scale each step by the ratio of running RMS of past updates and gradients::

        g = g + weight_decay * p
        s = rho * s + (1 - rho) * g**2
        d = sqrt(u + eps) / sqrt(s + eps) * g
        u = rho * u + (1 - rho) * d**2
        p -= lr * d

    PyTorch's defaults (``lr=1.0``, ``rho=0.9``, ``eps=1e-6``). Caffe's AdaDelta
    solver is ``lr=base_lr``, ``rho=momentum``, ``eps=delta``.

    >>> opt = optim.Adadelta(model.parameters(), lr=1.0)
    """

    _state_buffers = ("square_avg", "acc_delta")
    _state_counters = ("step",)

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay))

    def _check_group(self, g):
        for k in ("lr", "eps", "weight_decay"):
            if g[k] < 0:
                raise ArgumentError(f"Adadelta: {k} must be >= 0, got {g[k]}")
        if not 0.0 <= g["rho"] <= 1.0:
            raise ArgumentError(f"Adadelta: rho must be in [0, 1], got {g['rho']}")

    def _update(self, p, g, state, group):
        xp = get_array_module(p)
        lr, rho, eps, wd = group["lr"], group["rho"], group["eps"], group["weight_decay"]
        if not state:
            state["step"] = 0
            state["square_avg"] = xp.zeros_like(p)
            state["acc_delta"] = xp.zeros_like(p)
        state["step"] += 1
        if wd != 0:
            g = g + wd * p
        sq, acc = state["square_avg"], state["acc_delta"]
        sq *= rho
        sq += (1 - rho) * g * g
        delta = xp.sqrt(acc + eps)
        delta /= xp.sqrt(sq + eps)
        delta *= g
        acc *= rho
        acc += (1 - rho) * delta * delta
        delta *= lr
        p -= delta
