"""The Tensor: an array of one device, plus its place on the tape."""

from __future__ import annotations

import weakref

import numpy as np

from . import tape
from . import tensor_methods_more as _more
from .device import Device, cpu, device_of_array, get_device, to_host
from .dtypes import as_dtype, check_differentiable, fit_number
from .errors import ArgumentError, ArgumentTypeError, DeviceError, DTypeError, GraphError, describe
from .printing import tensor_repr
from .tape import is_grad_enabled, no_grad
from .tensor_methods import TensorMethods, ValuesIndices  # noqa: F401  (re-exported)
from .tensor_methods_more import TensorMethodsMore

__all__ = ["Tensor", "tensor", "set_default_dtype", "get_default_dtype"]

_default_dtype = np.dtype(np.float32)


def set_default_dtype(dtype) -> None:
    """The dtype Python floats (and lists of them) become: float32 unless changed."""
    global _default_dtype
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise DTypeError(f"set_default_dtype: expected a floating dtype, got {dt}")
    _default_dtype = dt


def get_default_dtype():
    return _default_dtype


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
            dtype = _default_dtype
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


class Tensor(TensorMethods, TensorMethodsMore):
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

    def size(self, dim=None):
        """PyTorch's: the shape tuple, or ``size(dim)`` the length of one axis
        (NumPy's element count is :meth:`numel`)."""
        shape = self.array.shape
        if dim is None:
            return tuple(shape)
        return shape[normalize_axis("size", shape, dim)]

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

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(self)`` after each backward has accumulated all its
        contributions into this leaf's ``.grad``; returns a handle with ``.remove()``."""
        return tape.engine.register_post_accumulate_grad_hook(self, hook)

    def backward(self, grad=None, retain_graph=False, create_graph=False, inputs=None) -> None:
        """Accumulate d(self)/d(leaf) into each leaf's ``.grad`` -- or, with ``inputs``,
        into those tensors' only (see tapegrad.backward)."""
        tape.backward(self, grad, retain_graph=retain_graph, create_graph=create_graph,
                      inputs=inputs)

    def detach(self) -> Tensor:
        """Same data (shared, no copy), cut from the tape."""
        t = _wrap(self.array, self.device, None, 0, False)
        t._version = self._version
        return t

    def zero_grad(self) -> None:
        self.grad = None

    # -------------------------------------------------------------- devices
    def to(self, *args, device=None, dtype=None, non_blocking=False, copy=False) -> Tensor:
        """PyTorch's forms: ``x.to(device)``, ``x.to(dtype)``, ``x.to(device, dtype)``,
        ``x.to(other)`` (other's device and dtype). Differentiable; self if nothing
        changes (unless ``copy=True``). ``non_blocking`` is accepted: copies here
        complete before returning, which is what a later use waits for anyway."""
        if len(args) > 2:
            raise ArgumentError(f"to: at most a device and a dtype, got {args!r}")
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif _is_device(a):
                device = a
            else:
                dtype = a
        dev = get_device(device) if device is not None else self.device
        out = self
        if dtype is not None and as_dtype(dtype, "to") != self.dtype:
            out = out.astype(dtype)
        if dev is not out.device:
            from .ops.elementwise import ToDevice

            out = ToDevice.apply(out, device=dev)
        return out.clone() if copy and out is self else out

    def cpu(self) -> Tensor:
        """This tensor on the CPU (self when it is there already; differentiable).

        >>> x.cuda().cpu().numpy()
        """
        return self.to("cpu")

    def cuda(self, device=None, non_blocking: bool = False) -> Tensor:
        """This tensor on a GPU: ``x.cuda()`` (GPU 0), ``x.cuda(1)``, ``x.cuda("cuda:1")``."""
        if device is None:
            device = 0
        if isinstance(device, int) and not isinstance(device, bool):
            device = f"cuda:{device}"
        dev = get_device(device)
        if dev.type != "cuda":
            raise DeviceError(f"cuda: expected a GPU index or a 'cuda:N' device, got {device!r}")
        return self.to(dev)

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

    def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
        """A COO sparse copy of this 2-D tensor: its nonzero entries, coalesced
        (:mod:`tapegrad.sparse`). >>> adj.to_sparse() @ x"""
        from .sparse import to_sparse

        return to_sparse(self, sparse_dim, layout=layout, blocksize=blocksize,
                         dense_dim=dense_dim)

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
        return tensor_repr(self._host(), _default_dtype, extra)

    __hash__ = object.__hash__

    # ----------------------------------------------------- in-place updates
    def _inplace(self, fn, *args):
        """Run ``fn(self, *args)`` and write the result into self's array, with
        PyTorch's semantics for the graph.

        With grad recording on, self is rebased onto the result's tape entry, as
        PyTorch does; when self is a view, its root base is rebased instead, onto a
        :class:`~tapegrad.ops.shape.ViewWrite` entry (PyTorch's CopySlices: the root
        with the view's elements replaced), and every live view of the root (self
        included) takes the entry of its view ops replayed on the new root
        (tape.rebase_views). The version bump makes any earlier entry that saved
        the old values refuse to run backward; the in-place op's own entry keeps a
        copy of what it read (tape.own_saved).
        """
        _check_writable(self)
        root = self._base
        involved = is_grad_enabled() and (
            self.requires_grad or (root is not None and root.requires_grad)
            or any(isinstance(a, Tensor) and a.requires_grad for a in args))
        if involved:
            _check_rebasable(self, root)
            out = fn(self, *args)
        else:
            with no_grad():
                out = fn(self, *args)
        if out.shape != self.shape:
            raise GraphError(f"in-place op: result shape {tuple(out.shape)} does not fit the "
                             f"tensor's shape {tuple(self.shape)}")
        if out.dtype != self.dtype and not np.can_cast(out.dtype, self.dtype, "same_kind"):
            raise DTypeError(f"in-place op: the result's dtype {out.dtype} cannot be stored in "
                             f"a tensor of dtype {self.dtype} (as in PyTorch); use an "
                             "out-of-place op, or convert the tensor first")
        if involved:
            tape.own_saved(out._node, self._version)
        self.array[...] = out.array
        self._bump_version()
        if not involved:
            return self
        if root is None:
            self._node, self._out_nr, self.requires_grad = out._node, out._out_nr, True
            tape.rebase_views(self)
        else:  # root's array already holds the result: ViewWrite only records it
            w = _ops.shape.ViewWrite.apply(root, out, flat=tape.flat_positions(root, self._chain))
            root._node, root._out_nr, root.requires_grad = w._node, w._out_nr, True
            tape.rebase_views(root)
        return self

    def __iadd__(self, other):
        return self._inplace(_ops.add, other)

    def __isub__(self, other):
        return self._inplace(_ops.sub, other)

    def __imul__(self, other):
        return self._inplace(_ops.mul, other)

    def __itruediv__(self, other):
        return self._inplace(_ops.div, other)

    def add_(self, other, alpha=1.0):
        return self._inplace(_ops.add, other if alpha == 1.0 else other * alpha)

    def sub_(self, other, alpha=1.0):
        return self._inplace(_ops.sub, other if alpha == 1.0 else other * alpha)

    def mul_(self, other):
        return self._inplace(_ops.mul, other)

    def div_(self, other, *, rounding_mode=None):
        if rounding_mode is None:
            return self._inplace(_ops.div, other)
        return self._inplace(lambda t, o: t.div(o, rounding_mode=rounding_mode), other)

    def clamp_(self, min=None, max=None):
        return self._inplace(_ops.clip, min, max)

    def copy_(self, src):
        """Overwrite with ``src`` (broadcast, from any device, as in PyTorch); the
        gradient flows to ``src``."""
        return self._inplace(_ops.setitem, Ellipsis, _here(self, src))

    def fill_(self, value):
        """Set every element to ``value`` (a number or a one-element tensor); in grad
        mode, recorded like any in-place op (the old values get no gradient)."""
        root = self._base
        if isinstance(value, Tensor) or is_grad_enabled() and (
                self.requires_grad or (root is not None and root.requires_grad)):
            return self._inplace(_ops.setitem, Ellipsis, _here(self, value))
        _check_writable(self)
        self.array[...] = fit_number("fill_", value, self.dtype)
        self._bump_version()
        return self

    def zero_(self):
        return self.fill_(0)

    def __setitem__(self, index, value):
        self._inplace(_ops.setitem, _index(index), _here(self, value))

    # -------------------------------------------------------------- operators
    # x + y, x - y, x * y, x / y and x ** y are bound below the class (see _binary)
    def __radd__(self, other):
        return _ops.Add.apply(other, self)

    def __rsub__(self, other):
        return _ops.Sub.apply(other, self)

    def __rmul__(self, other):
        return _ops.Mul.apply(other, self)

    def __rtruediv__(self, other):
        return _ops.Div.apply(other, self)

    # floor division and remainder: PyTorch's rules (tensor_methods_more.py): // is not
    # differentiable (refused in grad mode), % is torch.remainder (gradients 1, -a // b)
    def __floordiv__(self, other):
        return _more.floor_divide(self, other)

    def __rfloordiv__(self, other):
        return _more.floor_divide(other, self)

    def __mod__(self, other):
        return _more.remainder(self, other)

    def __rmod__(self, other):
        return _more.remainder(other, self)

    def __rpow__(self, other):
        return _ops.Pow.apply(other, self)

    def __matmul__(self, other):
        return _ops.matmul(self, other)

    def __rmatmul__(self, other):
        return _ops.matmul(other, self)

    def __neg__(self):
        return _ops.neg(self)

    def __pos__(self):
        if self.dtype == np.bool_:
            raise DTypeError(f"+x: the + operator on a bool tensor ({describe(self)}) is not "
                             "supported, as in PyTorch")
        return self

    def __abs__(self):
        return _ops.abs(self)

    def _compare(self, other, op):
        return _wrap(op(self.array, _other(self, other, "comparison")), self.device, None, 0,
                     False)

    def __lt__(self, other):
        return self._compare(other, lambda a, b: a < b)

    def __le__(self, other):
        return self._compare(other, lambda a, b: a <= b)

    def __gt__(self, other):
        return self._compare(other, lambda a, b: a > b)

    def __ge__(self, other):
        return self._compare(other, lambda a, b: a >= b)

    def __eq__(self, other):
        return self._compare(other, lambda a, b: a == b)

    def __ne__(self, other):
        return self._compare(other, lambda a, b: a != b)

    # bitwise / logical operators: bool and integer tensors, never recorded
    def _bitwise(self, other, op, name):
        a, b = self.array, _other(self, other, name)
        for v in (a, b):
            if getattr(v, "dtype", np.dtype(type(v))).kind not in "biu":
                raise DTypeError(f"{name}: needs bool or integer operands (as in PyTorch), "
                                 f"got {describe(self)} and {describe(other)}; compare first "
                                 "(x > 0) or cast with .bool()/.long()")
        return _wrap(op(a, b), self.device, None, 0, False)

    def __and__(self, other):
        return self._bitwise(other, lambda a, b: a & b, "&")

    def __or__(self, other):
        return self._bitwise(other, lambda a, b: a | b, "|")

    def __xor__(self, other):
        return self._bitwise(other, lambda a, b: a ^ b, "^")

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __invert__(self):
        """``~x``: logical not of a bool tensor, bitwise not of an integer one."""
        return self._bitwise(0, lambda a, _: ~a, "~")

    def __getitem__(self, index):
        return _ops.getitem(self, _index(index))


def _here(t, value):
    """A Tensor ``value`` written into ``t`` (copy_, setitem) on ``t``'s device: PyTorch
    copies across devices there (differentiably: the gradient goes back)."""
    if isinstance(value, Tensor) and value.device is not t.device:
        return value.to(t.device)
    return value


def _other(t, other, name):
    """The raw operand ``other`` of an unrecorded operator of ``t`` (comparisons,
    bitwise, ``//``, ``%``), by the rule the recorded ops follow: a NumPy array
    moves to ``t``'s device, a tensor on another device is refused."""
    if isinstance(other, Tensor):
        if other.device is not t.device:
            raise DeviceError(f"{name}: operands are on different devices ({describe(t)} on "
                              f"{t.device}, {describe(other)} on {other.device}); move one "
                              "with .to(device) first")
        return other.array
    if t.device is not cpu and isinstance(other, np.ndarray):
        return t.device.put(other)
    return other


def _is_device(a) -> bool:
    """A device (or its name: ``"cpu"``, ``"cuda"``, ``"cuda:1"``), not a dtype."""
    if isinstance(a, Device):
        return True
    return isinstance(a, str) and (a in ("cpu", "cuda") or a.startswith("cuda:"))


_NO_PARAMS: dict = {}


def _binary(op, name):
    """The operator ``x <op> other``: with a constant ``other`` (a number, an array)
    straight to the single-tensor fast path, skipping ``apply``'s argument sorting.
    Bound as the method itself (not a method calling a helper): one Python call per
    operator is ~1% of a small op's instructions (callgrind, bench_instructions.py)."""

    def method(self, other):
        if isinstance(other, Tensor):
            return op.apply(self, other)
        return op._apply_unary(self, (other,), _NO_PARAMS)  # looked up per call: see onnx.trace

    method.__name__, method.__qualname__ = name, f"Tensor.{name}"
    return method


def _bind_operators():
    """Called by tapegrad/__init__.py once tapegrad.ops is complete (this module
    is imported while it is not)."""
    for name, op in (("__add__", _ops.Add), ("__sub__", _ops.Sub), ("__mul__", _ops.Mul),
                     ("__truediv__", _ops.Div), ("__pow__", _ops.Pow)):
        setattr(Tensor, name, _binary(op, name))


def _check_writable(t):
    """Refuse an in-place write into memory that several elements share (an
    ``expand()``ed or broadcast view) or that is read-only, as PyTorch does. A NumPy
    scalar (a full reduction's result: ``total = x.sum(); total += 1``) becomes a 0-d
    array first; an entry that saved the scalar keeps its value, and its version check
    sees the write."""
    if isinstance(t.array, np.generic):
        t.array = np.asarray(t.array)
    data = t.array
    if any(st == 0 and n > 1 for st, n in zip(data.strides, data.shape)) or \
            not getattr(data.flags, "writeable", True):
        raise GraphError(
            f"in-place op on {describe(t)}: more than one element of it refers to a single "
            "memory location (an expand()ed or broadcast view), or its memory is read-only. "
            "Write into a .clone() of it instead.")


def _check_rebasable(t, root):
    """Where PyTorch refuses an in-place op in grad mode, refuse it too."""
    target = t if root is None else root
    if target.is_leaf and target.requires_grad:
        what = "" if root is None else "a view of "
        raise GraphError(
            f"in-place op on {what}a leaf tensor {describe(target)} that requires grad: its "
            "gradient would be lost. Do it under tapegrad.no_grad() (as optimizers do), or use "
            "an out-of-place op.")
    if root is None:
        return
    chain = getattr(t, "_chain", None)
    if chain is None:
        raise GraphError(
            f"in-place op on a view {describe(t)} that was made while grad mode was off, with "
            "grad mode on: its graph is unknown (PyTorch refuses this too). Make the view in "
            "grad mode, or do the write under tapegrad.no_grad().")
    if any(k is not None for _, _, _, k in chain):
        raise GraphError(
            f"in-place op on {describe(t)}, one of several views that one op returned "
            "(split, chunk, unbind): PyTorch refuses this too. .clone() it first.")


def _index(index):
    """Tensors inside an index become their raw arrays."""
    if isinstance(index, Tensor):
        return index.array
    if isinstance(index, tuple):
        return tuple(i.array if isinstance(i, Tensor) else i for i in index)
    return index


tape._bind(Tensor, _wrap, get_default_dtype)

from . import args as _args  # noqa: E402  (args needs Tensor defined first)
from . import ops as _ops  # noqa: E402  (ops need Tensor defined first)
from . import tensor_methods as _methods  # noqa: E402
from .args import normalize_axis  # noqa: E402

_methods._bind(_ops, _wrap, _args)
_methods.finish(TensorMethods)
