"""The Tensor methods that record: operators, in-place updates, indexing,
``backward`` and moves between devices.

:class:`~tapegrad.tensor.Tensor` is defined below the tape, the engine and the ops,
which all make Tensors; these methods call them, so they are defined here, above
them, and join the class in :mod:`tapegrad.tensor_methods` (see its end).
"""

from __future__ import annotations

import numpy as np

from . import engine, tape
from . import ops as _ops
from .args import normalize_axis
from .device import cpu, get_device
from .dtypes import as_dtype, fit_number
from .errors import ArgumentError, DeviceError, DTypeError, GraphError, describe
from .grad_mode import is_grad_enabled, no_grad
from .memory_formats import check_memory_format, contiguous_format, preserve_format, suggested
from .ops.elementwise import ToDevice
from .sparse import to_sparse
from .tensor import Tensor, _is_device, _wrap
from .tensor_methods_more import floor_divide, remainder

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


class TensorOperators:
    __slots__ = ()

    __add__, __sub__ = _binary(_ops.Add, "__add__"), _binary(_ops.Sub, "__sub__")
    __mul__, __truediv__ = _binary(_ops.Mul, "__mul__"), _binary(_ops.Div, "__truediv__")
    __pow__ = _binary(_ops.Pow, "__pow__")

    def size(self, dim=None):
        """PyTorch's: the shape tuple, or ``size(dim)`` the length of one axis
        (NumPy's element count is :meth:`numel`)."""
        shape = self.array.shape
        if dim is None:
            return tuple(shape)
        return shape[normalize_axis("size", shape, dim)]

    def register_post_accumulate_grad_hook(self, hook):
        """Call ``hook(self)`` after each backward has accumulated all its
        contributions into this leaf's ``.grad``; returns a handle with ``.remove()``."""
        return engine.register_post_accumulate_grad_hook(self, hook)

    def backward(self, grad=None, retain_graph=False, create_graph=False, inputs=None) -> None:
        """Accumulate d(self)/d(leaf) into each leaf's ``.grad`` -- or, with ``inputs``,
        into those tensors' only (see tapegrad.backward)."""
        engine.backward(self, grad, retain_graph=retain_graph, create_graph=create_graph,
                      inputs=inputs)

    def to(self, *args, device=None, dtype=None, non_blocking=False, copy=False,
           memory_format=None) -> Tensor:
        """PyTorch's forms: ``x.to(device)``, ``x.to(dtype)``, ``x.to(device, dtype)``,
        ``x.to(other)`` (other's device and dtype). Differentiable; self if nothing
        changes (unless ``copy=True``). ``non_blocking`` is accepted: copies here
        complete before returning, which is what a later use waits for anyway.
        ``memory_format``: a copy keeps x's layout (``preserve_format``, the default)
        or takes the one named, as PyTorch's (:mod:`tapegrad.memory_formats`); x
        itself where its ``suggest_memory_format()`` is the one named already."""
        check_memory_format("to", memory_format, self.ndim)
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
        fmt = preserve_format if memory_format is None else memory_format
        dt = self.dtype if dtype is None else as_dtype(dtype, "to")
        out = self
        if dt != self.dtype or (fmt is not preserve_format and suggested(self.array) is not fmt):
            out = _ops.cast(self, dt, copy=True, order=fmt)
        if dev is not out.device:
            out = ToDevice.apply(out, device=dev)
            keep = suggested(self.array) if fmt is preserve_format else fmt
            if keep is not contiguous_format:  # a device copy may not keep channels-last
                out = out.contiguous(memory_format=keep)
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

    def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
        """A COO sparse copy of this 2-D tensor: its nonzero entries, coalesced
        (:mod:`tapegrad.sparse`). >>> adj.to_sparse() @ x"""
        return to_sparse(self, sparse_dim, layout=layout, blocksize=blocksize,
                         dense_dim=dense_dim)

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
        return floor_divide(self, other)

    def __rfloordiv__(self, other):
        return floor_divide(other, self)

    def __mod__(self, other):
        return remainder(self, other)

    def __rmod__(self, other):
        return remainder(other, self)

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

    # a class that defines __eq__ gets __hash__ = None unless it says otherwise
    __hash__ = object.__hash__

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
