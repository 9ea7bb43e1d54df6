"""RMSprop (PyTorch's formulas, optionally centered and with momentum)."""

from __future__ import annotations

from ..device import get_array_module
from ..errors import ArgumentError
from .optimizer import Optimizer

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """Divide the gradient by a running RMS of recent gradients::

        g = g + weight_decay * p
        s = alpha * s + (1 - alpha) * g**2
        avg = sqrt(s - gbar**2) + eps  (centered: gbar = running mean of g)  else sqrt(s) + eps
        buf = momentum * buf + g / avg;  p -= lr * buf   (momentum > 0)
        p -= lr * g / avg                                (otherwise)

    Note ``eps`` is added outside the square root (PyTorch), not inside (Caffe,
    TensorFlow).

    >>> opt = optim.RMSprop(model.parameters(), lr=1e-2, alpha=0.99)
    """

    _state_buffers = ("square_avg", "momentum_buffer", "grad_avg")
    _state_counters = ("step",)
    _lazy_state = ("momentum_buffer", "grad_avg")

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered))

    def _check_group(self, g):
        for k in ("lr", "eps", "weight_decay", "momentum", "alpha"):
            if g[k] < 0:
                raise ArgumentError(f"RMSprop: {k} must be >= 0, got {g[k]}")

    def _update(self, p, g, state, group):
        xp = get_array_module(p)
        lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
        wd, mom = group["weight_decay"], group["momentum"]
        if not state:
            state["step"] = 0
            state["square_avg"] = xp.zeros_like(p)
            if mom > 0:
                state["momentum_buffer"] = xp.zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = xp.zeros_like(p)
        state["step"] += 1
        if wd != 0:
            g = g + wd * p
        sq = state["square_avg"]
        sq *= alpha
        tmp = g * g
        tmp *= 1 - alpha
        sq += tmp
        if group["centered"]:
            ga = state.setdefault("grad_avg", xp.zeros_like(p))
            ga *= alpha
            ga += (1 - alpha) * g
            xp.multiply(ga, ga, out=tmp)
            xp.subtract(sq, tmp, out=tmp)
            avg = xp.sqrt(tmp, out=tmp)
        else:
            avg = xp.sqrt(sq, out=tmp)
        avg += eps
        xp.divide(g, avg, out=avg)  # avg now holds g / avg
        if mom > 0:
            buf = state.setdefault("momentum_buffer", xp.zeros_like(p))
            buf *= mom
            buf += avg
            p -= lr * buf
        else:
            avg *= lr
            p -= avg
