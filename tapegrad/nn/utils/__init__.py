"""Gradient utilities (clipping by global norm or by value) and :mod:`.rnn`, padded
and packed sequence batches."""

from __future__ import annotations

import math

from ...dtypes import upcast
from ...errors import NonFiniteError
from ...tensor import Tensor, _wrap
from . import rnn

__all__ = ["clip_grad_norm_", "clip_grad_value_", "rnn"]


def _grads(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False):
    """Scale all gradients together so that their joint ``norm_type`` norm is at
    most ``max_norm`` (coefficient ``max_norm / (total + 1e-6)``, capped at 1).

    Returns the total norm before clipping as a 0-d Tensor (float32 or the
    gradients' dtype). Runs on raw arrays; nothing is recorded. float16
    gradients are measured in float32, as in PyTorch (``[260.] * 4`` has norm
    520, though 260**2 overflows float16).
    """
    grads = _grads(parameters)
    norm_type = float(norm_type)
    if not grads:
        from ...creation import zeros
        return zeros(())
    xp, dev = grads[0].device.xp, grads[0].device
    dtype = grads[0].dtype
    with dev.use():
        # empty gradients add nothing to the norm (and have no max)
        absolute = [xp.abs(upcast(g.array)) for g in grads if g.array.size]
        if not absolute:
            total = xp.zeros((), dtype)
        elif math.isinf(norm_type):
            total = xp.max(xp.stack([a.max() for a in absolute]))
        else:
            norms = [(a ** norm_type).sum() for a in absolute]
            total = xp.sum(xp.stack(norms)) ** (1.0 / norm_type)
        if error_if_nonfinite and not bool(xp.isfinite(total)):
            raise NonFiniteError(f"clip_grad_norm_: the total gradient norm is {float(total)}; "
                               "pass error_if_nonfinite=False to clip anyway")
        coef = xp.minimum(max_norm / (total + 1e-6), 1.0)
        for g in grads:
            g.array *= coef.astype(g.dtype)
    return _wrap(xp.asarray(total.astype(dtype)), dev, None, 0, False)


def clip_grad_value_(parameters, clip_value: float) -> None:
    """Clamp every gradient element into ``[-clip_value, clip_value]`` in place."""
    for g in _grads(parameters):
        g.device.xp.clip(g.array, -clip_value, clip_value, out=g.array)
