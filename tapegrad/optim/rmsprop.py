"""RMSprop (PyTorch's formulas, optionally centered and with momentum)."""

from __future__ import annotations

from ..device import get_array_module, kernels
from ..errors import ArgumentError
from .optimizer import Optimizer, _on_cuda

__all__ = ["RMSprop"]

# CUDA: the whole update of one parameter in one pass, in the order of the array
# code in RMSprop._update (the CPU path, restated by the reference); one kernel per
# combination of centered and momentum, which each add a buffer. flags: 1 weight decay.
_RMS_IN = "T g, T alpha, T oma, T eps, T wd, T lr, T mom, int32 flags"
_RMS_SCALARS = ("alpha", "oma", "eps", "wd", "lr", "mom", "flags")


def _rms_op(centered, momentum):
    # each operation rounded to T, as NumPy rounds it (CuPy's float16 operators return
    # float)
    ga = ("a = ga * alpha; b = oma * gg; ga = a + b; b = ga * ga; b = sq - b; T d = sqrt(b);"
          if centered else "T d = sqrt(sq);")
    step = ("a = buf * mom; buf = a + q; a = lr * buf; p = p - a;" if momentum else
            "q = q * lr; p = p - q;")
    return f"""T gg = g;
    if (flags & 1) {{ const T e = wd * p; gg = gg + e; }}
    T a = sq * alpha;
    T b = gg * gg;
    b = b * oma;
    sq = a + b;
    {ga}
    d = d + eps;
    T q = gg / d;
    {step}"""


def _rms_reference(g, alpha, oma, eps, wd, lr, mom, flags, p, sq, *bufs, centered=False):
    xp = get_array_module(p)
    ga = bufs[0] if centered else None
    buf = bufs[-1] if len(bufs) > centered else None
    if flags & 1:
        g = g + wd * p
    sq = sq * alpha + g * g * oma
    if centered:
        ga = ga * alpha + oma * g
        q = g / (xp.sqrt(sq - ga * ga) + eps)
    else:
        q = g / (xp.sqrt(sq) + eps)
    if buf is not None:
        buf = buf * mom + q
        p = p - lr * buf
    else:
        p = p - q * lr
    return (p, sq) + ((ga,) if centered else ()) + ((buf,) if buf is not None else ())


def _rms_kernel(centered, momentum):
    name = "tg_rmsprop" + "_centered" * centered + "_momentum" * momentum + "_update"
    outs = "T p, T sq" + ", T ga" * centered + ", T buf" * momentum

    def sample(rng, dt):
        a = lambda: rng.standard_normal(32).astype(dt)  # noqa: E731
        s = dt.type
        sq = (abs(a()) + 1).astype(dt)  # sq > ga^2, as the running averages keep it
        bufs = (a() * 0.1,) * centered + (a(),) * momentum
        return (a(), s(0.99), s(0.01), s(1e-3), s(0.01), s(0.01), s(0.9), 1, a(), sq, *bufs)

    return kernels.elementwise(
        name, _RMS_IN, outs, _rms_op(centered, momentum), scalars=_RMS_SCALARS,
        reference=lambda *a: _rms_reference(*a, centered=centered), sample=sample)


_rms_kernels = {(c, m): _rms_kernel(c, m) for c in (False, True) for m in (False, True)}


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
        if _on_cuda(p, g):
            return _update_cuda(p, g, state, group)
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


def _update_cuda(p, g, state, group):
    xp = get_array_module(p)
    lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
    wd, mom, centered = group["weight_decay"], group["momentum"], bool(group["centered"])
    bufs = []
    for key, used in (("grad_avg", centered), ("momentum_buffer", mom > 0)):
        if used:
            if state.get(key) is None:  # switched on after the first step
                state[key] = xp.zeros_like(p)
            bufs.append(state[key])
    _rms_kernels[centered, mom > 0](g, alpha, 1 - alpha, eps, wd, lr, mom, int(wd != 0), p,
                                    state["square_avg"], *bufs)
