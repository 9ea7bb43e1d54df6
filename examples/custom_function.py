"""Write your own differentiable op: a Huber (smooth L1) loss as a ``tapegrad.Function``.

    huber(x, t, delta) = 0.5 * d**2              where |d| <= delta,   d = x - t
                       = delta * (|d| - delta/2) elsewhere

Its derivative in ``d`` is ``clip(d, -delta, delta)``, so forward saves only
that (one array) and backward scales it by the incoming gradient. The op is
checked against central differences with ``tapegrad.testing.gradcheck`` on
arrays that hypothesis generates.

    python examples/custom_function.py
"""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as hst

import tapegrad
from tapegrad.testing import gradcheck
from tapegrad.testing.strategies import arrays, shapes  # kink-free arrays, small shapes


class Huber(tapegrad.Function):
    """Elementwise Huber loss of ``x`` against target ``t`` (both differentiable)."""

    @staticmethod
    def forward(ctx, x, t, delta=1.0):
        xp = ctx.xp                        # numpy or cupy: the op runs on both devices
        d = x - t
        slope = xp.clip(d, -delta, delta)  # d(huber)/d(d)
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            ctx.save_for_backward(slope)   # the least backward needs: one array
        quadratic = xp.abs(d) <= delta
        return xp.where(quadratic, 0.5 * d * d, delta * (xp.abs(d) - 0.5 * delta))

    @staticmethod
    def backward(ctx, grad):
        (slope,) = ctx.saved_tensors
        gx = grad * slope if ctx.needs_input_grad[0] else None
        gt = -(grad * slope) if ctx.needs_input_grad[1] else None
        return gx, gt                      # one gradient (or None) per positional input


def huber(x, t, delta=1.0):
    """``Huber.apply`` with a friendly signature: ``huber(pred, target).mean()``."""
    return Huber.apply(x, t, delta=delta)


def check_huber_gradients(max_examples=25):
    """Hypothesis gradcheck: random shapes, values across both branches, random delta.

    The second array is drawn with the first one's shape (the engine also
    handles broadcasting, which ``gradcheck`` covers by reducing gradients)."""
    @settings(max_examples=max_examples, deadline=None, derandomize=True)
    @given(hst.data(), hst.floats(0.1, 2.0))
    def check(data, delta):
        shape = data.draw(shapes(min_dims=1, max_dims=3))
        x = data.draw(arrays(shape, low=-3.0, high=3.0))
        t = data.draw(arrays(shape, low=-1.0, high=1.0))
        gradcheck(lambda a, b: huber(a, b, delta), [x, t], name="huber")

    check()


def main():
    check_huber_gradients()
    print("huber: gradcheck passed on generated shapes and values")
    # use it like any op: fit a line to data with one outlier
    tapegrad.manual_seed(0)
    xs = np.linspace(-1, 1, 20, dtype=np.float32)
    ys = 2 * xs + 0.5
    ys[3] += 10.0                                         # an outlier Huber shrugs off
    w = tapegrad.zeros(1, requires_grad=True)
    b = tapegrad.zeros(1, requires_grad=True)
    x, y = tapegrad.tensor(xs), tapegrad.tensor(ys)
    for _ in range(300):
        loss = huber(w * x + b, y, delta=0.5).mean()
        w.grad = b.grad = None
        loss.backward()
        with tapegrad.no_grad():
            w -= 0.5 * w.grad
            b -= 0.5 * b.grad
    print(f"fit: y = {w.item():.3f} x + {b.item():.3f} (true: 2x + 0.5, one outlier of +10)")
    return w.item(), b.item()


if __name__ == "__main__":
    main()
