"""Devices: ``"cpu"`` runs on NumPy, ``"cuda"`` / ``"cuda:N"`` on CuPy.

CuPy is imported lazily, on the first use of a CUDA device, so ``import
tapegrad`` never needs it. Ops are written once against the array module that
:func:`get_array_module` returns; fused CUDA kernels for hot paths will be
declared in :mod:`tapegrad.device.kernels` (no op uses one yet).
"""

from __future__ import annotations

import numpy as np

from ..errors import DeviceError
from .backend import ArrayBackend

__all__ = ["Device", "get_device", "get_array_module", "device_of_array", "to_host",
           "cupy_available", "cpu"]

_cupy = None
_cupy_error: str | None = None


def _import_cupy():
    global _cupy, _cupy_error
    if _cupy is None and _cupy_error is None:
        try:
            import cupy

            cupy.cuda.runtime.getDeviceCount()
            _cupy = cupy
        except Exception as exc:  # ImportError, CUDARuntimeError, ...
            _cupy_error = f"{type(exc).__name__}: {exc}"
    return _cupy


def cupy_available() -> bool:
    """True when CuPy imports and sees at least one GPU."""
    return _import_cupy() is not None


class Device:
    """A place arrays live: ``Device("cpu")``, ``Device("cuda:1")``.

    Devices are interned: ``get_device("cuda") is get_device("cuda:0")``, so
    identity comparison is a valid (and fast) same-device test.
    """

    __slots__ = ("type", "index", "xp", "backend")

    def __init__(self, type_: str, index: int | None, xp):
        self.type = type_
        self.index = index
        self.xp = xp
        self.backend = ArrayBackend(xp)

    def __repr__(self) -> str:
        return f"device({str(self)!r})"

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = get_device(other)
        return self is other

    __hash__ = object.__hash__

    # devices are interned singletons: copies and unpickling give the same one
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        return (get_device, (str(self),))

    def use(self):
        """Context manager that makes this device current (a no-op on CPU)."""
        if self.type == "cuda":
            return self.xp.cuda.Device(self.index)
        return _NullContext()


class _NullContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


cpu = Device("cpu", None, np)
_devices: dict[str, Device] = {"cpu": cpu}


def get_device(spec=None) -> Device:
    """Turn ``None``/``"cpu"``/``"cuda"``/``"cuda:N"``/a Device into a Device."""
    if spec is None:
        return cpu
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise DeviceError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {spec!r}")
    dev = _devices.get(spec)
    if dev is not None:
        return dev
    name, _, idx = spec.partition(":")
    if name != "cuda" or (idx and not idx.isdigit()):
        raise DeviceError(f"unknown device {spec!r}: use 'cpu', 'cuda' or 'cuda:N'")
    index = int(idx) if idx else 0
    cupy = _import_cupy()
    if cupy is None:
        raise DeviceError(
            f"device {spec!r} needs CuPy and a working NVIDIA GPU ({_cupy_error}). "
            "Install the CUDA extra: pip install 'tapegrad[cuda]' "
            "(or the cupy-cudaXXx wheel matching your CUDA toolkit)."
        )
    count = cupy.cuda.runtime.getDeviceCount()
    if index >= count:
        raise DeviceError(f"device {spec!r} does not exist: CuPy sees {count} GPU(s)")
    dev = _devices.setdefault(f"cuda:{index}", Device("cuda", index, cupy))
    _devices[spec] = dev
    return dev


def get_array_module(*arrays):
    """NumPy or CuPy, whichever holds ``arrays`` (Tensors or raw arrays)."""
    for a in arrays:
        dev = getattr(a, "device", None)
        if isinstance(dev, Device):
            return dev.xp
        if _cupy is not None and isinstance(a, _cupy.ndarray):
            return _cupy
    return np


def device_of_array(a) -> Device:
    """The Device of a raw NumPy/CuPy array."""
    if isinstance(a, np.ndarray) or _cupy is None or not isinstance(a, _cupy.ndarray):
        return cpu
    return get_device(f"cuda:{a.device.id}")


def to_host(a) -> np.ndarray:
    """A NumPy array of a raw NumPy/CuPy array (or anything ``np.asarray``
    takes): a copy from the GPU, a host array as it is."""
    if _cupy is not None and isinstance(a, _cupy.ndarray):
        return a.get()
    return np.asarray(a)
