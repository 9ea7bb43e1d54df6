"""Parameter: a leaf Tensor that a Module registers as trainable."""

from __future__ import annotations

from ..device import device_of_array, get_device
from ..dtypes import check_differentiable
from ..tensor import Tensor, _to_array, _wrap, get_default_dtype

__all__ = ["Parameter", "move_array"]


class Parameter(Tensor):
    """A Tensor that requires grad and that ``Module.__setattr__`` registers.

    ``Parameter(t)`` shares ``t``'s array (no copy), like PyTorch; any other
    array-like is copied. Results of ops on a Parameter are plain Tensors.

    >>> w = nn.Parameter(tapegrad.zeros(3, 4))
    """

    __slots__ = ()  # Tensor uses __slots__; keep instances dict-free too

    def __init__(self, data=None, requires_grad=True):
        if data is None:
            data = Tensor([], dtype=get_default_dtype())
        version = [0]
        if isinstance(data, Tensor):
            arr, dev = data.array, data.device
            version = data._version  # same array, same version counter
        else:
            dev = device_of_array(data) if hasattr(data, "shape") else get_device("cpu")
            arr = _to_array(data, None, dev)
        if requires_grad:
            check_differentiable("Parameter", arr.dtype)
        self.array = arr
        self.device = dev
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self._node = None
        self._out_nr = 0
        self._version = version
        self._base = None

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        p = _rebuild_parameter(self.array.copy(), self.requires_grad, None)
        if self.grad is not None:
            p.grad = _wrap(self.grad.array.copy(), self.grad.device, None, 0, False)
        memo[id(self)] = p
        return p


def _rebuild_parameter(data, requires_grad, grad):
    p = Parameter.__new__(Parameter)
    p._node, p._out_nr, p._version, p._base = None, 0, [0], None
    p.array = data
    p.device = device_of_array(data)
    p.requires_grad = requires_grad
    p.grad = grad
    return p


def move_array(arr, device, dtype=None):
    """``arr`` on ``device`` (a Device) with ``dtype``: the same array when nothing
    changes, else a new one. Crosses devices through the host when needed."""
    if device_of_array(arr) is not device:
        arr = device.put(arr)
    if dtype is not None and arr.dtype != dtype:
        with device.use():
            arr = arr.astype(dtype)
    return arr
