"""Devices: ``"cpu"`` runs on NumPy, ``"cuda"`` / ``"cuda:N"`` on CuPy.

CuPy is imported lazily, on the first use of a CUDA device, so ``import
tapegrad`` never needs it. Ops are written once against the array module that
:func:`get_array_module` (or ``ctx.xp``) returns; the fused CUDA kernels of
the hot paths are declared beside their ops and compiled through the registry
in :mod:`tapegrad.device.kernels`.

Arrays cross devices only through :meth:`Device.put` and :meth:`Device.host`
(:func:`to_device`, :func:`to_host`). The rule for mixing: a host constant
next to a device tensor -- a NumPy array passed to an op (targets, masks,
class weights, index arrays), a CPU tensor given as a target or an
index -- is copied to the tensor's device; two *tensors* that an op computes
with must be on one device, else :class:`~tapegrad.errors.DeviceError` names
the op and both devices (as PyTorch refuses).
"""

from __future__ import annotations

import sys

import numpy as np

from ..errors import DeviceError
from .backend import ArrayBackend

__all__ = ["Device", "get_device", "get_array_module", "device_of_array", "to_host",
           "to_device", "cupy_available", "cpu"]

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


def cupy_unavailable_reason() -> str | None:
    """Why CuPy cannot be used here (the import's or the runtime's error), or None."""
    _import_cupy()
    return _cupy_error


def cupy_available() -> bool:
    """True when CuPy imports and sees at least one GPU."""
    return _import_cupy() is not None


class _DeviceType(type):
    """The class of :class:`Device`, which ``tapegrad.device`` names, as
    ``torch.device``: calling it parses a device as PyTorch does, and the
    attributes the class lacks are this package's (``tapegrad.device.get_device``,
    ``tapegrad.device.cpu``, ``tapegrad.device.threads``...). To patch the package,
    patch ``sys.modules["tapegrad.device"]``: setting on the class sets the class's."""

    def __call__(cls, type=None, index=None, xp=None):  # noqa: A002 (torch's name)
        if xp is not None:  # a new place for arrays (here, and the tests' stand-ins)
            return super().__call__(type, index, xp)
        if isinstance(type, Device):
            return type
        if isinstance(type, int) and not isinstance(type, bool):  # torch.device(0)
            type, index = "cuda", type
        if not isinstance(type, str):
            raise DeviceError(f"device: expected a string such as 'cpu' or 'cuda:0', a "
                              f"device or a GPU index, got {type!r}")
        if index is not None:
            if ":" in type:
                raise DeviceError(f"device({type!r}, {index!r}): the index is given twice")
            if not isinstance(index, int) or isinstance(index, bool) or index < 0:
                raise DeviceError(f"device({type!r}, {index!r}): the index must be an "
                                  "int >= 0")
            type = f"{type}:{index}"
        return get_device(type)

    def __getattr__(cls, name):
        try:
            return getattr(sys.modules[__name__], name)
        except AttributeError:
            raise AttributeError(f"tapegrad.device has no attribute {name!r}") from None

    def __dir__(cls):
        return sorted(set(super().__dir__()) | set(dir(sys.modules[__name__])))


class Device(metaclass=_DeviceType):
    """A place arrays live; ``tapegrad.device`` itself, PyTorch's ``torch.device``:
    ``tg.device("cpu")``, ``tg.device("cuda:1")``, ``tg.device("cuda", 1)``,
    ``tg.device(1)``, with ``.type`` and ``.index`` (``None`` on the CPU; ``"cuda"``
    is ``"cuda:0"``, index 0, where PyTorch leaves it ``None``), equal to its string.

    Devices are interned: ``get_device("cuda") is get_device("cuda:0")``, so
    identity comparison is a valid (and fast) same-device test. A CUDA device is
    made only where CuPy sees a GPU (a DeviceError names what is missing, where
    PyTorch fails at the first use). Moving arrays goes through :meth:`put` and
    :meth:`host` (the only two places that know how a device's arrays cross to
    and from the host).
    """

    __slots__ = ("type", "index", "xp", "backend")

    def __init__(self, type_: str, index: int | None, xp):
        self.type = type_
        self.index = index
        self.xp = xp
        self.backend = ArrayBackend(xp)

    def __repr__(self) -> str:  # PyTorch's
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{index})"

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

    def put(self, a):
        """``a`` (a raw array of any device, or a host array-like) as an array of
        this device: ``a`` itself when it is already here, else a copy."""
        if self is cpu:
            return to_host(a)
        src = device_of_array(a)
        if src is self:
            return a
        with self.use():
            if src is cpu:
                return self.xp.asarray(a)  # a host-to-device copy
            # another GPU's array: cupy.asarray would return it as it is, on its own GPU
            return self.xp.array(a if src.type == "cuda" else src.host(a), copy=True)

    def host(self, a) -> np.ndarray:
        """A NumPy array of ``a``, an array of this device (a copy off the CPU)."""
        return a if self is cpu else a.get()


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
    if name in ("mps", "xpu", "hip", "meta", "xla", "npu"):
        raise DeviceError(f"device {spec!r}: tapegrad runs on 'cpu' and 'cuda' (CuPy) only; "
                          f"tapegrad.backends.mps.is_available() and accelerator checks say so")
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


# array types of devices other than CPU and CuPy's (the test suite's strict fake
# device registers its array class here), each mapped to a function giving the
# Device of one of its arrays
_array_types: dict = {}


def _is_cupy(a) -> bool:
    """``a`` is a CuPy array (CuPy imported here on first sight of one, so a user's
    own CuPy arrays are recognised before tapegrad used a GPU itself)."""
    if _cupy is None and (not hasattr(a, "__cuda_array_interface__") or _import_cupy() is None):
        return False
    return isinstance(a, _cupy.ndarray)


def get_array_module(*arrays):
    """NumPy or CuPy, whichever holds ``arrays`` (Tensors or raw arrays)."""
    for a in arrays:
        dev = getattr(a, "device", None)
        if isinstance(dev, Device):
            return dev.xp
        if _is_cupy(a):
            return _cupy
        if _array_types and type(a) in _array_types:
            return _array_types[type(a)](a).xp
    return np


def device_of_array(a) -> Device:
    """The Device of a raw NumPy/CuPy array."""
    if isinstance(a, np.ndarray):
        return cpu
    if _is_cupy(a):
        return get_device(f"cuda:{a.device.id}")
    if _array_types and type(a) in _array_types:
        return _array_types[type(a)](a)
    return cpu


def to_host(a) -> np.ndarray:
    """A NumPy array of a raw NumPy/CuPy array (or anything ``np.asarray``
    takes): a copy from the GPU, a host array as it is."""
    if isinstance(a, np.ndarray):
        return a
    if _is_cupy(a):
        return a.get()
    if _array_types and type(a) in _array_types:
        return _array_types[type(a)](a).host(a)
    return np.asarray(a)


def to_device(a, device) -> object:
    """A raw array ``a`` on ``device`` (a Device or its name); ``a`` itself when
    it is already there.

    >>> to_device(np.ones(3), "cpu").shape
    (3,)
    """
    return get_device(device).put(a)


def _register_array_type(cls, device_of) -> None:
    """Let ``device_of_array``/``to_host`` know another device's array class."""
    _array_types[cls] = device_of
