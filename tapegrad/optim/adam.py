"""Adam and AdamW (PyTorch's formulas, including amsgrad)."""

from __future__ import annotations

import math

from ..device import get_array_module
from ..errors import ArgumentError
from .optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction; ``weight_decay`` adds an L2
    term to the gradient (use :class:`AdamW` for decoupled decay)::

        g = g + weight_decay * p
        m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g**2
        v_hat = max(v_hat, v) if amsgrad else v
        p -= lr / (1 - beta1**t) * m / (sqrt(v_hat) / sqrt(1 - beta2**t) + eps)

    >>> opt = optim.Adam(model.parameters(), lr=1e-3)
    """

    _decoupled = False
    _state_buffers = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    _state_counters = ("step",)
    _lazy_state = ("max_exp_avg_sq",)

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad))

    def _check_group(self, g):
        b1, b2 = g["betas"]
        if g["lr"] < 0 or g["eps"] < 0 or g["weight_decay"] < 0:
            raise ArgumentError(f"{type(self).__name__}: lr, eps and weight_decay must be "
                                f">= 0, got {g['lr']}, {g['eps']}, {g['weight_decay']}")
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ArgumentError(f"{type(self).__name__}: betas must be in [0, 1), got "
                                f"{g['betas']}")

    def _update(self, p, g, state, group):
        xp = get_array_module(p)
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        b1, b2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(p)
            state["exp_avg_sq"] = xp.zeros_like(p)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = xp.zeros_like(p)
        if wd != 0:
            if self._decoupled:
                p *= 1 - lr * wd
            else:
                g = g + wd * p
        state["step"] += 1
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= b1
        m += (1 - b1) * g
        v *= b2
        tmp = g * g
        tmp *= 1 - b2
        v += tmp
        if group["amsgrad"]:
            vmax = state.get("max_exp_avg_sq")
            if vmax is None:
                vmax = state["max_exp_avg_sq"] = xp.zeros_like(p)
            xp.maximum(vmax, v, out=vmax)
            v = vmax
        step_size = lr / (1 - b1 ** t)
        denom = xp.sqrt(v, out=tmp)
        denom /= math.sqrt(1 - b2 ** t)
        denom += eps
        xp.divide(m, denom, out=denom)  # denom now holds m / denom
        denom *= step_size
        p -= denom


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter):
    ``p *= 1 - lr * weight_decay`` before the Adam step (default 0.01).

    >>> opt = optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    """

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
