"""Tensor factories: zeros, ones, full, eye, arange, linspace, randn, rand, and
``*_like``; ``as_tensor``/``from_numpy`` wrap existing data."""

from __future__ import annotations

import numpy as np

from .device import cpu, get_device
from .dtypes import as_dtype
from .errors import ArgumentError, ArgumentTypeError, DTypeError
from .random import get_generator
from .tensor import Tensor, _wrap, get_default_dtype

__all__ = ["zeros", "ones", "full", "empty", "eye", "arange", "linspace", "randn", "rand",
           "randint", "zeros_like", "ones_like", "full_like", "randn_like", "rand_like",
           "from_numpy", "as_tensor", "is_tensor"]


def _shape(shape):
    if len(shape) == 1 and not isinstance(shape[0], int):
        return tuple(shape[0])
    return tuple(shape)


def _make(fill, shape, dtype, device, requires_grad):
    dev = get_device(device)
    dt = as_dtype(dtype) if dtype is not None else get_default_dtype()
    with dev.use():
        data = fill(dev.xp, _shape(shape), dt)
    t = _wrap(data, dev, None, 0, False)
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*shape, dtype=None, device="cpu", requires_grad=False):
    """``tapegrad.zeros(2, 3)`` or ``zeros((2, 3))``."""
    return _make(lambda xp, s, d: xp.zeros(s, d), shape, dtype, device, requires_grad)


def ones(*shape, dtype=None, device="cpu", requires_grad=False):
    return _make(lambda xp, s, d: xp.ones(s, d), shape, dtype, device, requires_grad)


def empty(*shape, dtype=None, device="cpu", requires_grad=False):
    return _make(lambda xp, s, d: xp.empty(s, d), shape, dtype, device, requires_grad)


def full(shape, value, dtype=None, device="cpu", requires_grad=False):
    """``value`` everywhere; without ``dtype``, the value's kind decides, as in
    PyTorch: bool, int64, or the default float dtype."""
    if dtype is None and isinstance(value, (bool, np.bool_)):
        dtype = np.bool_
    elif dtype is None and isinstance(value, (int, np.integer)):
        dtype = np.int64
    return _make(lambda xp, s, d: xp.full(s, value, d), (shape,) if isinstance(shape, int)
                 else tuple(shape), dtype, device, requires_grad)


def eye(n, m=None, dtype=None, device="cpu", requires_grad=False):
    """The ``n x m`` identity (``m = n`` unless given), as ``torch.eye``."""
    return _make(lambda xp, s, d: xp.eye(*s, dtype=d), (n, n if m is None else m), dtype,
                 device, requires_grad)


def arange(*args, dtype=None, device="cpu", requires_grad=False):
    """Like ``numpy.arange``; integer arguments give int64, floats the default dtype."""
    probe = np.arange(*args)
    dt = dtype if dtype is not None else (
        get_default_dtype() if probe.dtype.kind == "f" else probe.dtype)
    start, step = (args[0] if len(args) > 1 else 0), (args[2] if len(args) > 2 else 1)
    if as_dtype(dt).kind in "iub" and any(float(v) != int(v) for v in (start, step)):
        raise ArgumentError(
            f"arange{tuple(args)} with dtype {as_dtype(dt).name}: a fractional start or "
            "step has no agreed integer range (PyTorch truncates start and step, NumPy steps "
            "by the rounded difference); pass integers, or make the float range and .to() it")
    return _make(lambda xp, s, d: xp.arange(*args, dtype=d), (), dt, device, requires_grad)


def linspace(start, end, steps, dtype=None, device="cpu", requires_grad=False):
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive, as ``torch.linspace``."""
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 0:
        raise ArgumentError(f"linspace: steps must be an int >= 0, got {steps!r}")
    return _make(lambda xp, s, d: xp.linspace(start, end, int(steps), dtype=d), (), dtype,
                 device, requires_grad)


def randn(*shape, dtype=None, device="cpu", requires_grad=False):
    """Standard normal samples from the global generator (see ``manual_seed``)."""
    gen = get_generator(device)
    return _make(lambda xp, s, d: gen.standard_normal(s).astype(d, copy=False), shape, dtype,
                 device, requires_grad)


def rand(*shape, dtype=None, device="cpu", requires_grad=False):
    """Uniform samples in [0, 1) from the global generator."""
    gen = get_generator(device)
    return _make(lambda xp, s, d: gen.random(s).astype(d, copy=False), shape, dtype, device,
                 requires_grad)


def randint(*args, size=None, dtype=None, device="cpu"):
    """Integers in ``[low, high)``, PyTorch's forms: ``randint(high, size)``,
    ``randint(low, high, size)`` (or ``size=`` by keyword); int64 unless ``dtype``."""
    if size is None and args and not isinstance(args[-1], (int, np.integer)):
        *args, size = args
    if size is None or len(args) not in (1, 2):
        raise ArgumentError(f"randint: expected randint(high, size) or randint(low, high, "
                            f"size), got {len(args)} bounds and size={size!r}")
    low, high = (0, args[0]) if len(args) == 1 else args
    dt = np.dtype(np.int64 if dtype is None else as_dtype(dtype))
    if dt.kind in "biu":  # as torch: low and high - 1 must fit the dtype, else no wrapping
        top = 1 if dt.kind == "b" else np.iinfo(dt).max
        bottom = 0 if dt.kind == "b" else np.iinfo(dt).min
        if low < bottom or high - 1 > top:
            raise ArgumentError(f"randint: [{low}, {high}) does not fit {dt.name} (from "
                                f"{bottom} to {top}); PyTorch refuses it too")
    gen = get_generator(device)
    return _make(lambda xp, s, d: gen.integers(low, high, s).astype(d, copy=False),
                 (tuple(size),), dt, device, False)


def _like(make, t, dtype, requires_grad, *extra):
    return make(tuple(t.shape), *extra, dtype=t.dtype if dtype is None else dtype,
                device=t.device, requires_grad=requires_grad)


def zeros_like(t, dtype=None, requires_grad=False):
    return _like(zeros, t, dtype, requires_grad)


def ones_like(t, dtype=None, requires_grad=False):
    return _like(ones, t, dtype, requires_grad)


def full_like(t, fill_value, dtype=None, requires_grad=False):
    return _like(full, t, dtype, requires_grad, fill_value)


def _random_like(make, name, t, dtype, requires_grad):
    dt = np.dtype(t.dtype if dtype is None else dtype)
    if dt.kind != "f":
        raise DTypeError(f"{name}: samples need a floating dtype, got {dt} (PyTorch refuses "
                         f"too); pass dtype=tapegrad.float32")
    return _like(make, t, dt, requires_grad)


def randn_like(t, dtype=None, requires_grad=False):
    """Standard normal samples of ``t``'s shape, dtype (unless given) and device."""
    return _random_like(randn, "randn_like", t, dtype, requires_grad)


def rand_like(t, dtype=None, requires_grad=False):
    return _random_like(rand, "rand_like", t, dtype, requires_grad)


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor sharing memory with a NumPy array (dtype kept)."""
    if not isinstance(a, np.ndarray):
        raise ArgumentTypeError(f"from_numpy: expected a numpy.ndarray, got {type(a).__name__}")
    if a.dtype.kind not in "biufc":
        raise DTypeError(f"from_numpy: dtype {a.dtype} is not supported (only bool, integer, "
                         "floating and complex data)")
    return _wrap(a, cpu, None, 0, False)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """PyTorch's: ``data`` itself when it is already a Tensor of that dtype and
    device, else a tensor of it (sharing memory with a NumPy array of the right
    dtype on the CPU, as ``torch.as_tensor``)."""
    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dtype)
    dev = get_device(device if device is not None else "cpu")
    if (dev is cpu and isinstance(data, np.ndarray) and data.dtype.kind in "biufc"
            and (dtype is None or np.dtype(dtype) == data.dtype)):
        return from_numpy(data)
    return Tensor(data, dtype=dtype, device=dev)


def is_tensor(obj) -> bool:
    """True for a :class:`tapegrad.Tensor` (Parameters too)."""
    return isinstance(obj, Tensor)
