"""Stochastic gradient descent with momentum (PyTorch's formulas)."""

from __future__ import annotations

from ..errors import ArgumentError
from .optimizer import Optimizer, required

__all__ = ["SGD"]


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
        lr, mom, wd = group["lr"], group["momentum"], group["weight_decay"]
        owned = False  # whether d is a temporary we may overwrite
        d = g
        if wd != 0:
            d = p * wd
            d += g
            owned = True
        if mom != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = d.copy()
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
