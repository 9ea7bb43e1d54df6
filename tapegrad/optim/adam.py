"""Adam and AdamW (PyTorch's formulas, including amsgrad)."""

from __future__ import annotations

import math

from ..device import get_array_module, kernels
from ..errors import ArgumentError
from .optimizer import Optimizer, _on_cuda

__all__ = ["Adam", "AdamW"]

# CUDA: Adam's/AdamW's whole update of one parameter in one pass, in the order of
# the array code in Adam._update (the CPU path, restated by the reference).
# Each operation is rounded to T as NumPy rounds it (CuPy's float16 operators
# return float). flags: 1 L2 weight decay (Adam), 2 decoupled decay (AdamW). With amsgrad the
# running maximum is a fourth buffer, hence a kernel of its own.
_L2, _DECOUPLED = 1, 2
_ADAM_IN = ("T g, T b1, T omb1, T b2, T omb2, T step_size, T bc2, T eps, T wd, T decay, "
            "int32 flags")
_ADAM_SCALARS = ("b1", "omb1", "b2", "omb2", "step_size", "bc2", "eps", "wd", "decay",
                 "flags")
_ADAM_OP = """T gg = g;
    if (flags & 2) p = p * decay;
    if (flags & 1) {{ const T e = wd * p; gg = gg + e; }}
    T a = m * b1;
    T b = omb1 * gg;
    m = a + b;
    a = v * b2;
    b = gg * gg;
    b = b * omb2;
    v = a + b;
    {VMAX}
    T d = sqrt({V});
    d = d / bc2;
    d = d + eps;
    T q = m / d;
    q = q * step_size;
    p = p - q"""


def _adam_reference(g, b1, omb1, b2, omb2, step_size, bc2, eps, wd, decay, flags, p, m, v,
                    vmax=None):
    xp = get_array_module(p)
    if flags & _DECOUPLED:
        p = p * decay
    if flags & _L2:
        g = g + wd * p
    m = m * b1 + omb1 * g
    v = v * b2 + g * g * omb2
    if vmax is not None:
        vmax = xp.maximum(vmax, v)
    q = m / (xp.sqrt(v if vmax is None else vmax) / bc2 + eps)
    out = (p - q * step_size, m, v)
    return out if vmax is None else out + (vmax,)


def _adam_sample(rng, dt, amsgrad):
    a = lambda: rng.standard_normal(32).astype(dt)  # noqa: E731
    s = dt.type
    args = (a(), s(0.9), s(0.1), s(0.999), s(0.001), s(0.002), s(0.05), s(1e-3), s(0.01),
            s(0.999), _L2, a(), a(), abs(a()))
    return args + (abs(a()),) if amsgrad else args


_adam = kernels.elementwise(
    "tg_adam_update", _ADAM_IN, "T p, T m, T v", _ADAM_OP.format(VMAX="", V="v"),
    scalars=_ADAM_SCALARS, reference=_adam_reference,
    sample=lambda rng, dt: _adam_sample(rng, dt, False))
_adam_amsgrad = kernels.elementwise(
    "tg_adam_amsgrad_update", _ADAM_IN, "T p, T m, T v, T vmax",
    # NaN-propagating like the CPU path's maximum
    _ADAM_OP.format(VMAX="vmax = (vmax != vmax || vmax > v) ? vmax : v;", V="vmax"),
    scalars=_ADAM_SCALARS, reference=_adam_reference,
    sample=lambda rng, dt: _adam_sample(rng, dt, True))


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
        if _on_cuda(p, g):
            return self._update_cuda(p, g, state, group)
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

    def _update_cuda(self, p, g, state, group):
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        b1, b2 = group["betas"]
        flags = 0 if wd == 0 else _DECOUPLED if self._decoupled else _L2
        state["step"] += 1
        t = state["step"]
        args = (g, b1, 1 - b1, b2, 1 - b2, lr / (1 - b1 ** t), math.sqrt(1 - b2 ** t), eps, wd,
                1 - lr * wd, flags, p, state["exp_avg"], state["exp_avg_sq"])
        if group["amsgrad"]:
            vmax = state.get("max_exp_avg_sq")
            if vmax is None:
                vmax = state["max_exp_avg_sq"] = get_array_module(p).zeros_like(p)
            _adam_amsgrad(*args, vmax)
        else:
            _adam(*args)


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter):
    ``p *= 1 - lr * weight_decay`` before the Adam step (default 0.01).

    >>> opt = optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    """

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
