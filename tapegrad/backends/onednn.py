"""Whether tapegrad's CPU layers run on oneDNN (PyTorch's ``torch.backends.mkldnn``,
which ``tapegrad.backends.mkldnn`` also names).

oneDNN is optional (``pip install 'tapegrad[onednn]'``). Where it loads, float32
convolutions on the CPU (``conv2d``: forward, input and weight gradients) run on its
JIT-compiled kernels; everything else, and every op when it is off or absent, runs on
the NumPy paths, which stay the reference. ``TAPEGRAD_ONEDNN=0`` turns it off for a
process.

>>> import tapegrad.backends.onednn as onednn
>>> onednn.is_available(), onednn.enabled
>>> with onednn.flags(enabled=False):   # the NumPy path, for this block
...     y = model(x)
"""

from __future__ import annotations

import contextlib
import sys
import types

from ..device import onednn as _lib

__all__ = ["is_available", "version", "flags", "set_flags", "describe"]  # and enabled


def is_available() -> bool:
    """True when oneDNN (``libdnnl.so.3``) loads."""
    return _lib.available()


def version() -> str | None:
    """oneDNN's version (``"3.2.0"``), or None when it is not available."""
    return _lib.version() if _lib.available() else None


def describe() -> str:
    """Which backend the CPU convolutions run on, in words (``tapegrad train`` and
    ``tapegrad check`` print it)."""
    if not _lib.available():
        return "NumPy (oneDNN not installed: pip install 'tapegrad[onednn]')"
    if not _lib.enabled:
        return f"NumPy (oneDNN {_lib.version()} switched off)"
    return (f"oneDNN {_lib.version()} (float32 convolutions, pooling, channels-last batch "
            "norm), NumPy for the rest")


def set_flags(enabled: bool) -> bool:
    """Turn the oneDNN paths on or off; returns the previous setting."""
    previous, _lib.enabled = _lib.enabled, bool(enabled)
    return previous


@contextlib.contextmanager
def flags(enabled: bool = True):
    """``with flags(enabled=False):`` -- the setting for a block, restored after it."""
    previous = set_flags(enabled)
    try:
        yield
    finally:
        set_flags(previous)


class _Module(types.ModuleType):
    """``enabled`` reads and writes the switch the ops consult (device/onednn.py)."""

    @property
    def enabled(self) -> bool:
        return _lib.enabled

    @enabled.setter
    def enabled(self, value) -> None:
        _lib.enabled = bool(value)


sys.modules[__name__].__class__ = _Module
