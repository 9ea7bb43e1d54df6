"""Grad mode: whether ops are recorded on the tape (thread-local, as PyTorch's)."""

from __future__ import annotations

import functools
import threading

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"]


class _GradMode(threading.local):
    enabled = True
    replaying = False  # tape.replay is remaking views: temporaries, not registered


_local = _GradMode()


def is_grad_enabled() -> bool:
    return _local.enabled


class set_grad_enabled:
    """Context manager / decorator setting grad mode (thread-local)."""

    def __init__(self, mode: bool = True):
        self.mode = bool(mode)

    def __enter__(self):
        self.prev = is_grad_enabled()
        _local.enabled = self.mode
        return self

    def __exit__(self, *exc):
        _local.enabled = self.prev
        return False

    def __call__(self, func):
        mode = self.mode

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return func(*args, **kwargs)

        return wrapper


class no_grad(set_grad_enabled):
    """Nothing is recorded inside ``with tapegrad.no_grad():`` (or a decorated function)."""

    def __init__(self):
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """Re-enables recording inside a ``no_grad`` region."""

    def __init__(self):
        super().__init__(True)
