"""Tensor factories: zeros, ones, full, arange, randn, rand, and ``*_like``."""

from __future__ import annotations

import numpy as np

from .device import cpu, get_device
from .random import get_generator
from .tensor import Tensor, _wrap, get_default_dtype

__all__ = ["zeros", "ones", "full", "empty", "arange", "randn", "rand", "randint",
           "zeros_like", "ones_like", "from_numpy"]


def _shape(shape):
    if len(shape) == 1 and not isinstance(shape[0], int):
        return tuple(shape[0])
    return tuple(shape)


def _make(fill, shape, dtype, device, requires_grad):
    dev = get_device(device)
    dt = np.dtype(dtype) if dtype is not None else get_default_dtype()
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
    return _make(lambda xp, s, d: xp.full(s, value, d), (shape,) if isinstance(shape, int)
                 else tuple(shape), dtype, device, requires_grad)


def arange(*args, dtype=None, device="cpu"):
    """Like ``numpy.arange``; integer arguments give int64, floats the default dtype."""
    dev = get_device(device)
    probe = np.arange(*args)
    dt = np.dtype(dtype) if dtype is not None else (
        get_default_dtype() if probe.dtype.kind == "f" else probe.dtype)
    with dev.use():
        return _wrap(dev.xp.arange(*args, dtype=dt), dev, None, 0, False)


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


def randint(low, high, shape, device="cpu"):
    gen = get_generator(device)
    return _make(lambda xp, s, d: gen.integers(low, high, s), (tuple(shape),), np.int64, device,
                 False)


def zeros_like(t, dtype=None, requires_grad=False):
    return zeros(t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=requires_grad)


def ones_like(t, dtype=None, requires_grad=False):
    return ones(t.shape, dtype=dtype or t.dtype, device=t.device, requires_grad=requires_grad)


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor sharing memory with a NumPy array (dtype kept)."""
    return _wrap(a, cpu, None, 0, False)
