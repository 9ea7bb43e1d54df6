"""One op spec on two devices: the same outputs and gradients, each on its device.

:func:`compare_devices` evaluates an :class:`~tapegrad.testing.specs.OpSpec`
on the CPU and on another device (a GPU, or the test suite's strict fake
device) and checks that every output, first gradient and (for specs that
are twice differentiable) second gradient agrees, and that every one of them
lives on the device it was computed on -- a result that slipped back to the
host is a bug even when its values are right.

    compare_devices(spec, "cuda")       # raises DeviceMismatchError if not
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from ..backends import onednn as onednn_backend
from ..device import device_of_array, get_device, to_host
from ..engine import grad as tape_grad
from ..errors import ArgumentError, TapegradError
from ..tensor import Tensor

__all__ = ["compare_devices", "evaluate_on", "DeviceMismatchError", "RANDOM_OPS"]

# ops whose specs draw from the device's own generator (each device has its own
# stream, so their values differ by device): gradchecked on the device instead
RANDOM_OPS = frozenset({"dropout2d"})


class DeviceMismatchError(TapegradError, AssertionError):
    """An op gives another result on a device than on the CPU, or leaves it."""


def _outputs(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def cpu_reference(fn):
    """Run ``fn(..., device, ...)`` on the NumPy paths when its device is the CPU: the
    reference a device is compared with (oneDNN, where it is on, is a CPU path of its
    own, with its own tests: tests/device/test_onednn.py)."""

    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        device = signature.bind(*args, **kwargs).arguments["device"]
        if get_device(device).type != "cpu":
            return fn(*args, **kwargs)
        with onednn_backend.flags(enabled=False):
            return fn(*args, **kwargs)

    return run


@cpu_reference
def evaluate_on(spec, device, order: int = 1) -> list[tuple[str, np.ndarray]]:
    """``(label, host array)`` of each output of ``spec.fn`` at ``spec.inputs``
    on ``device``, each gradient of a random cotangent (same on every device),
    and with ``order=2`` the gradient of ``<grad, u>``. Raises
    DeviceMismatchError for a result that is not on ``device``."""
    dev = get_device(device)
    arrays = spec.inputs(np.random.default_rng(0))
    leaves = [Tensor(a, device=dev, requires_grad=np.asarray(a).dtype.kind == "f")
              for a in arrays]
    diff = [t for t in leaves if t.requires_grad]
    outs = _outputs(spec.fn(*leaves))
    rng = np.random.default_rng(1)
    results = [(f"output {k}", o) for k, o in enumerate(outs) if isinstance(o, Tensor)]
    pairs = [(o, Tensor(rng.standard_normal(o.shape), dtype=o.dtype, device=dev))
             for o in outs if isinstance(o, Tensor) and o.requires_grad]
    if pairs and diff:
        grads = tape_grad([o for o, _ in pairs], diff, [c for _, c in pairs],
                          create_graph=order == 2, allow_unused=True)
        results += [(f"gradient of input {i}", g) for i, g in enumerate(grads) if g is not None]
        if order == 2:
            total = None
            for g in grads:
                if g is not None and g.requires_grad:
                    u = Tensor(rng.standard_normal(g.shape), dtype=g.dtype, device=dev)
                    term = (g * u).sum()
                    total = term if total is None else total + term
            if total is not None:
                second = tape_grad(total, diff, allow_unused=True)
                results += [(f"second gradient of input {i}", g)
                            for i, g in enumerate(second) if g is not None]
    host = []
    for label, t in results:
        where = device_of_array(t.array)
        if t.device is not dev or where is not dev:
            raise DeviceMismatchError(
                f"{spec.id}: {label} is on {where} (Tensor.device {t.device}), not on {dev}: "
                "the op moved its result off the device")
        host.append((label, to_host(t.array)))
    return host


def compare_devices(spec, device, orders=(1,), rtol: float = 1e-7, atol: float = 1e-9) -> None:
    """Check ``spec`` on ``device`` against the CPU (float64 inputs: the two
    must agree to rounding; the tolerances leave room for another summation
    order, as cuBLAS and CuPy's reductions have). Raises DeviceMismatchError naming the result;
    ArgumentError for a spec of :data:`RANDOM_OPS`."""
    if spec.name in RANDOM_OPS:
        raise ArgumentError(f"compare_devices: {spec.id} draws random numbers, which differ "
                            "by device; gradcheck it on the device (check_spec) instead")
    for order in orders:
        ref = evaluate_on(spec, "cpu", order)
        got = evaluate_on(spec, device, order)
        if [r[0] for r in ref] != [g[0] for g in got]:
            raise DeviceMismatchError(f"{spec.id}: results {[g[0] for g in got]} on {device}, "
                                      f"but {[r[0] for r in ref]} on cpu")
        for (label, r), (_, g) in zip(ref, got):
            if r.shape != g.shape or r.dtype != g.dtype:
                raise DeviceMismatchError(f"{spec.id}: {label} is {g.shape} {g.dtype} on "
                                          f"{device} but {r.shape} {r.dtype} on cpu")
            if not np.allclose(g, r, rtol=rtol, atol=atol, equal_nan=True):
                err = np.nanmax(np.abs(g.astype(np.float64) - r)) if r.size else 0.0
                raise DeviceMismatchError(f"{spec.id}: {label} differs on {device} from cpu "
                                          f"(max abs difference {err:.3g}, order {order})")
