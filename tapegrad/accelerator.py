"""PyTorch's ``torch.accelerator``: tapegrad's one accelerator kind is CUDA (CuPy).

>>> device = tg.accelerator.current_accelerator() or tg.device("cpu")
"""

from __future__ import annotations

from . import cuda as _cuda
from .device import Device

__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index",
           "synchronize"]


def is_available() -> bool:
    return _cuda.is_available()


def current_accelerator(check_available: bool = False) -> Device | None:
    """``device("cuda")`` when a GPU is there, else None (as PyTorch without one)."""
    return Device("cuda") if _cuda.is_available() else None


def device_count() -> int:
    return _cuda.device_count()


def current_device_index() -> int:
    return _cuda.current_device()


def synchronize(device=None) -> None:
    _cuda.synchronize(device)
