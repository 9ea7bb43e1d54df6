"""tapegrad: tape-based reverse-mode automatic differentiation on NumPy and CuPy.

>>> import tapegrad as tg
>>> x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> loss = (x * x).sum()
>>> loss.backward()
>>> x.grad                       # tensor([2., 4., 6.])
"""

from . import errors, ops
from .creation import (
    arange,
    empty,
    from_numpy,
    full,
    ones,
    ones_like,
    rand,
    randint,
    randn,
    zeros,
    zeros_like,
)
from .device import Device, cupy_available, get_array_module, get_device
from .device.host_memory import tune_malloc
from .random import manual_seed
from .tape import Function, backward, enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled
from .tensor import Tensor, get_default_dtype, set_default_dtype, tensor

__version__ = "0.1.0"

tune_malloc()  # large temporaries reuse heap memory instead of page-faulting (see its doc)

_SUBMODULES = {"nn", "optim", "data", "testing"}
_LAZY = {"save": "serialization", "load": "serialization"}


def __getattr__(name):
    """Heavier submodules load on first use: ``tapegrad.nn``, ``tapegrad.save``..."""
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'tapegrad' has no attribute {name!r}")

__all__ = [
    "Tensor", "tensor", "Function", "backward", "grad", "no_grad", "enable_grad",
    "set_grad_enabled", "is_grad_enabled", "set_default_dtype", "get_default_dtype",
    "Device", "get_device", "get_array_module", "cupy_available", "manual_seed",
    "zeros", "ones", "full", "empty", "arange", "randn", "rand", "randint", "zeros_like",
    "ones_like", "from_numpy", "ops", "errors", "nn", "optim", "data", "testing", "save",
    "load",
]
