"""The Tensor: an array of one device, plus its place on the tape.

This module holds its state and the methods that need nothing above it; the tape,
the engine and the ops sit above it and make Tensors. The methods that record ops
(operators, ``sum``, ``view``, ``backward``...) are defined above the ops, in
tensor_methods.py, tensor_methods_more.py and tensor_operators.py, and join this
class at the end of tensor_methods.py (imported by ``import tapegrad``).
"""

from __future__ import annotations

import weakref

import numpy as np

from .device import Device, cpu, device_of_array, get_device, to_host
from .dtypes import as_dtype, check_differentiable, get_default_dtype, set_default_dtype
from .errors import ArgumentTypeError, DeviceError, DTypeError, GraphError, describe
from .printing import tensor_repr

__all__ = ["Tensor", "tensor", "set_default_dtype", "get_default_dtype"]

_new = object.__new__  # Tensor.__new__ is object's, one attribute lookup more


def _wrap(data, device, node, out_nr, requires_grad):
    """Fast internal constructor: no conversion, no checks. ``data`` stays the very
    object the op returned (a NumPy scalar from a full reduction too): the tape
    tells a saved output from a constant by identity."""
    t = _new(Tensor)
    t.array = data
    t.device = device
    t.requires_grad = requires_grad
    t.grad = None
    t._node = node
    t._out_nr = out_nr
    t._version = [0]
    t._base = None
    return t


def _to_array(data, dtype, device: Device):
    xp = device.xp
    if isinstance(data, Tensor):
        data = data.array
        if dtype is None:
            dtype = data.dtype
    if dtype is not None:
        dtype = as_dtype(dtype, "tensor")
    elif not hasattr(data, "dtype"):  # Python scalars and lists
        probe = np.asarray(data)
        if probe.dtype.kind == "f":
            dtype = get_default_dtype()
        elif probe.dtype.kind not in "biuc":
            raise DTypeError(f"tensor: cannot make a tensor from {type(data).__name__} "
                             f"(numpy sees dtype {probe.dtype})")
    if (dtype if dtype is not None else getattr(data, "dtype", np.dtype(float))).kind not in \
            _KINDS:
        raise DTypeError(f"tensor: dtype {dtype or data.dtype} is not supported (only bool, "
                         "integer, floating and complex data); convert first, e.g. "
                         "np.asarray(data, dtype=np.float32)")
    if device is not cpu:
        src = device_of_array(data)
        if src is not device:  # a host array-like or another device's array: one copy
            data = device.put(data if src is not cpu else np.asarray(data, dtype=dtype))
            return data if dtype is None or data.dtype == dtype else data.astype(dtype)
    elif device_of_array(data) is not cpu:
        data = to_host(data)
    with device.use():
        return xp.array(data, dtype=dtype, copy=True)


_KINDS = "biufc"


def tensor(data, dtype=None, device="cpu", requires_grad=False) -> Tensor:
    """Make a leaf Tensor (always a copy of ``data``).

    >>> x = tapegrad.tensor([[1.0, 2.0]], requires_grad=True)   # float32
    """
    return Tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


class Tensor:
    """An n-dimensional array that records differentiable ops on the tape.

    Leaves are made by :func:`tapegrad.tensor` (or ops under ``no_grad``);
    results of recorded ops point at their tape entry (``grad_fn``).
    """

    __slots__ = ("array", "device", "requires_grad", "grad", "_node", "_out_nr", "_version",
                 "_base", "__weakref__",
                 "_chain", "_views")  # views only (tape.py): set there, read with getattr
    __array_ufunc__ = None  # make ndarray <op> Tensor defer to our reflected operators
    __array_priority__ = 1000

    def __init__(self, data, dtype=None, device="cpu", requires_grad=False):
        dev = get_device(device)
        self.array = _to_array(data, dtype, dev)
        self.device = dev
        self.requires_grad = False
        self.grad = None
        self._node = None
        self._out_nr = 0
        self._version = [0]
        self._base = None
        if requires_grad:
            self.requires_grad_(True)

    # ---------------------------------------------------------- properties
    @property
    def data(self) -> Tensor:
        """PyTorch's ``.data``: a Tensor sharing this one's memory, off the tape
        (``requires_grad`` False) and with a version counter of its own, so in-place
        changes through it (``p.data.add_(-lr * p.grad)``, ``m.weight.data.normal_(0,
        0.02)``) write this tensor's values and are neither recorded nor seen by the
        in-place checks of entries that saved it -- as in PyTorch, where that is the
        difference from ``detach()``. The raw NumPy/CuPy array is ``.array``."""
        if isinstance(self.array, np.generic):  # a full reduction's scalar: share a 0-d array
            self.array = np.asarray(self.array)
        return _wrap(self.array, self.device, None, 0, False)

    @data.setter
    def data(self, value) -> None:
        """``x.data = y`` (y a Tensor): x takes y's memory, shape, dtype and device,
        keeping its place on the tape and its gradient settings, as in PyTorch."""
        if not isinstance(value, Tensor):
            raise ArgumentTypeError(
                f"data: assign a Tensor (as in PyTorch), got {type(value).__name__}; the raw "
                "array of a tensor is .array, and t.copy_(tg.as_tensor(a)) writes values")
        if self._base is not None or getattr(self, "_views", None):
            raise GraphError(
                f"data: {describe(self)} is a view or has live views, which would keep its old "
                "memory; assign to a tensor without views, or write values with .copy_()")
        if self.requires_grad and value.dtype.kind not in "fc":
            raise DTypeError(f"data: a tensor that requires grad cannot take {describe(value)} "
                             "data (only floating-point tensors carry gradients)")
        self.array, self.device = value.array, value.device

    @property
    def shape(self):
        return self.array.shape

    @property
    def ndim(self):
        return self.array.ndim

    @property
    def dtype(self):
        return self.array.dtype

    def numel(self) -> int:
        return int(self.array.size)

    def dim(self) -> int:
        return self.array.ndim

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self):
        return self._node

    @property
    def version(self) -> int:
        """Bumped by every in-place change (shared with views)."""
        return self._version[0]

    def _bump_version(self) -> None:
        """Record an in-place change of the data (the one place that does): a tape
        entry that saved the old values then refuses to run backward."""
        self._version[0] += 1

    @property
    def T(self):
        return self.transpose()

    # ------------------------------------------------------------- autograd
    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if not self.is_leaf:
            raise GraphError("requires_grad_: only leaf tensors can change requires_grad; "
                             "use .detach().requires_grad_() for a new leaf")
        if requires_grad:
            check_differentiable("requires_grad", self.dtype, describe(self))
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self) -> None:
        """Keep ``.grad`` on this non-leaf tensor after backward."""
        if not self.requires_grad:
            raise GraphError("retain_grad: the tensor does not require grad")
        node = self._node
        if node is None:
            return  # leaves keep their grad anyway
        if node.retained is None:
            node.retained = {}
        node.retained[self._out_nr] = weakref.ref(self)

    def detach(self) -> Tensor:
        """Same data (shared, no copy), cut from the tape."""
        t = _wrap(self.array, self.device, None, 0, False)
        t._version = self._version
        return t

    def zero_grad(self) -> None:
        self.grad = None

    # -------------------------------------------------------------- devices

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    is_xpu = is_mps = property(lambda self: False, doc="Never: tapegrad has CPU and CUDA only.")

    @property
    def is_sparse(self) -> bool:
        """False: a dense tensor (``tapegrad.sparse.SparseTensor`` answers True)."""
        return False

    def numpy(self) -> np.ndarray:
        """A NumPy copy of a CPU tensor's data; a device tensor must be moved first
        (``x.cpu().numpy()``), as in PyTorch."""
        if self.device is not cpu:
            raise DeviceError(
                f"numpy: can't convert a {self.device} tensor {describe(self)} to NumPy; "
                "use Tensor.cpu() to copy the tensor to host memory first "
                "(x.cpu().numpy())")
        return self.array.copy()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()  # refuses device tensors, as NumPy conversion of a CuPy array does
        return a if dtype is None else a.astype(dtype)

    def _host(self) -> np.ndarray:
        """The data as a NumPy array, wherever it lives (for printing and tolist)."""
        return self.device.host(self.array)

    def item(self):
        if self.array.size != 1:
            raise GraphError(f"item: only one-element tensors convert to a Python number, "
                             f"this one has shape {tuple(self.shape)}")
        return self.array.reshape(()).item()

    def tolist(self):
        return self._host().tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        return bool(self.item())

    def __index__(self):
        """A one-element integer tensor as an index (``seq[i]``, ``data[i:i + 8]``)."""
        if self.dtype.kind not in "iub" or self.array.size != 1:
            raise ArgumentTypeError(f"__index__: only a one-element integer tensor can be "
                                    f"an index, got {describe(self)}")
        return int(self.item())

    def __format__(self, spec):
        """As PyTorch: a 0-d tensor formats as its number (``f"{loss:.4f}"``)."""
        if self.ndim == 0:
            return format(self.item(), spec)
        return object.__format__(self, spec)  # str(x) for "", else TypeError, as PyTorch

    def __len__(self):
        if self.ndim == 0:
            raise ArgumentTypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self):
        """PyTorch's layout (tapegrad/printing.py): ``tensor([1.5000, 2.0000])``."""
        extra = []
        if self.device is not cpu:
            extra.append(f"device='{self.device}'")
        if self._node is not None:
            extra.append(f"grad_fn=<{self._node.name}>")
        elif self.requires_grad:
            extra.append("requires_grad=True")
        return tensor_repr(self._host(), get_default_dtype(), extra)


def _is_device(a) -> bool:
    """A device (or its name: ``"cpu"``, ``"cuda"``, ``"cuda:1"``), not a dtype."""
    if isinstance(a, Device):
        return True
    return isinstance(a, str) and (a in ("cpu", "cuda") or a.startswith("cuda:"))
