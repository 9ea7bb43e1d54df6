"""PyTorch's ``torch.cuda`` for tapegrad, whose GPU is CuPy's.

Without a GPU (or without CuPy) every query answers as PyTorch's CPU build does:
``is_available()`` is False, ``device_count()`` 0, seeding and ``empty_cache``
do nothing, the memory counters are 0; what needs a GPU (``current_device``,
``synchronize``, ``get_device_name``, ...) raises ``DeviceError`` saying what is
missing, where PyTorch's CPU build raises "Torch not compiled with CUDA enabled".

>>> device = tg.device("cuda" if tg.cuda.is_available() else "cpu")
"""

from __future__ import annotations

from . import random as _random
from .device import _import_cupy, get_device
from .errors import DeviceError

__all__ = ["is_available", "device_count", "is_initialized", "manual_seed", "manual_seed_all",
           "synchronize", "current_device", "set_device", "get_device_name",
           "get_device_capability", "empty_cache", "memory_allocated", "memory_reserved",
           "max_memory_allocated", "max_memory_reserved"]


def is_available() -> bool:
    """True when CuPy imports and sees a GPU."""
    return _import_cupy() is not None


def device_count() -> int:
    cupy = _import_cupy()
    return 0 if cupy is None else int(cupy.cuda.runtime.getDeviceCount())


def is_initialized() -> bool:
    return is_available()


def manual_seed(seed: int) -> None:
    """Seed the current GPU's generator (cuda:0; nothing without a GPU)."""
    if is_available():
        _random.seed_device("cuda:0", seed)


def manual_seed_all(seed: int) -> None:
    """Seed every GPU's generator (nothing without a GPU)."""
    for index in range(device_count()):
        _random.seed_device(f"cuda:{index}", seed)


def _cupy():
    cupy = _import_cupy()
    if cupy is None:
        get_device("cuda")  # raises the DeviceError that says what is missing
    return cupy


def _index(device, what: str) -> int:
    if device is None:
        return 0
    dev = get_device(f"cuda:{device}" if isinstance(device, int) else device)
    if dev.type != "cuda":
        raise DeviceError(f"cuda.{what}: {device!r} is not a CUDA device")
    return dev.index


def synchronize(device=None) -> None:
    """Wait for every kernel queued on the GPU."""
    cupy = _cupy()
    with cupy.cuda.Device(_index(device, "synchronize")):
        cupy.cuda.runtime.deviceSynchronize()


def current_device() -> int:
    """0: tapegrad's ``"cuda"`` is always ``"cuda:0"`` (name other GPUs: ``"cuda:1"``)."""
    _cupy()
    return 0


def set_device(device) -> None:
    """Only GPU 0: tapegrad's ``"cuda"`` means ``"cuda:0"`` whatever is set, so
    another index would silently not be what ``.to("cuda")`` uses."""
    _cupy()
    if _index(device, "set_device") != 0:
        raise DeviceError(f"cuda.set_device({device!r}): tapegrad's 'cuda' is always cuda:0; "
                          "name the GPU instead, e.g. .to('cuda:1') or tg.device('cuda', 1)")


def get_device_name(device=None) -> str:
    cupy = _cupy()
    name = cupy.cuda.runtime.getDeviceProperties(_index(device, "get_device_name"))["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def get_device_capability(device=None) -> tuple[int, int]:
    cupy = _cupy()
    cc = int(cupy.cuda.Device(_index(device, "get_device_capability")).compute_capability)
    return cc // 10, cc % 10


def empty_cache() -> None:
    """Give CuPy's cached, unused GPU blocks back to the driver."""
    cupy = _import_cupy()
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()


def memory_allocated(device=None) -> int:
    """Bytes in use in CuPy's memory pool of ``device`` (0 without a GPU)."""
    cupy = _import_cupy()
    if cupy is None:
        return 0
    with cupy.cuda.Device(_index(device, "memory_allocated")):
        return int(cupy.get_default_memory_pool().used_bytes())


def memory_reserved(device=None) -> int:
    """Bytes CuPy's pool holds from the driver, in use or cached (0 without a GPU)."""
    cupy = _import_cupy()
    if cupy is None:
        return 0
    with cupy.cuda.Device(_index(device, "memory_reserved")):
        return int(cupy.get_default_memory_pool().total_bytes())


def _no_peak(what):
    def peak(device=None) -> int:
        if _import_cupy() is None:
            return 0
        raise DeviceError(f"cuda.{what}: CuPy's memory pool keeps no peak; read "
                          f"cuda.{what.replace('max_', '')}() where the peak is, or use "
                          "tapegrad.memory_report for a model's prediction")
    peak.__name__ = what
    peak.__doc__ = f"0 without a GPU; on one a DeviceError (CuPy keeps no peak of {what[4:]})."
    return peak


max_memory_allocated = _no_peak("max_memory_allocated")
max_memory_reserved = _no_peak("max_memory_reserved")
