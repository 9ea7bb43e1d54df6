"""Tensor methods that forward to :mod:`tapegrad.ops`, with PyTorch's names and
semantics (``x.sum(dim=1, keepdim=True)``, ``x.max(1)``, ``x.var()`` unbiased,
``x.split(2)`` in chunks of two, ``x.repeat(2, 1)``, ``x.long()``...).

:class:`TensorMethods` is a base class of :class:`tapegrad.Tensor`; it holds no
state. Every method that takes ``axis=``/``keepdims=`` also takes PyTorch's
``dim=``/``keepdim=`` (:func:`tapegrad.args.torch_names`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import tape as _tape
from .dtypes import fit_number
from .errors import ArgumentError, DTypeError, ShapeError, describe

_ops = None  # tapegrad.ops, bound by tensor.py (import cycle)
_wrap = None
torch_names = normalize_axis = None


def _bind(ops, wrap, args):
    global _ops, _wrap, torch_names, normalize_axis
    _ops, _wrap = ops, wrap
    torch_names, normalize_axis = args.torch_names, args.normalize_axis


def _named(fn):
    """Mark a method for :func:`torch_names` (applied once ops are bound)."""
    fn._torch_names = True
    return fn


class ValuesIndices(NamedTuple):
    """What ``x.max(dim)`` / ``x.min(dim)`` return, as PyTorch's ``return_types``."""

    values: object
    indices: object


def _sizes(op, sizes):
    """``f(2, 3)`` or ``f((2, 3))`` -> ``(2, 3)``."""
    if len(sizes) == 1 and not isinstance(sizes[0], int):
        sizes = tuple(sizes[0])
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in sizes):
        raise ArgumentError(f"{op}: sizes must be ints, got {sizes!r}")
    return tuple(int(s) for s in sizes)


_TYPE_NAMES = {"float16": "HalfTensor", "float32": "FloatTensor", "float64": "DoubleTensor",
               "int8": "CharTensor", "uint8": "ByteTensor", "int16": "ShortTensor",
               "int32": "IntTensor", "int64": "LongTensor", "bool": "BoolTensor"}


class TensorMethods:
    __slots__ = ()

    # ----------------------------------------------------------- dtypes
    def astype(self, dtype):
        return _ops.cast(self, dtype)

    def float(self):
        return self.astype(np.float32)

    def double(self):
        return self.astype(np.float64)

    def half(self):
        return self.astype(np.float16)

    def long(self):
        return self.astype(np.int64)

    def int(self):
        return self.astype(np.int32)

    def bool(self):
        return self.astype(np.bool_)

    def type(self, dtype=None):
        """PyTorch's: ``x.type()`` names the type (``'tapegrad.FloatTensor'``),
        ``x.type(dtype)`` casts."""
        if dtype is not None:
            return self.astype(dtype)
        name = _TYPE_NAMES.get(self.dtype.name, f"{self.dtype.name}Tensor")
        return f"tapegrad.{'cuda.' if self.device.type == 'cuda' else ''}{name}"

    def type_as(self, other):
        return self.astype(other.dtype)

    def clone(self):
        return _ops.cast(self, self.dtype, copy=True)

    def contiguous(self):
        """Self when its array is C-contiguous, else a (differentiable) contiguous copy."""
        if self.data.flags.c_contiguous:
            return self
        return _ops.cast(self, self.dtype, copy=True, order="C")

    # -------------------------------------------------------- new tensors
    def new_tensor(self, data, dtype=None, requires_grad=False):
        """A new leaf of ``data`` with this tensor's dtype (unless given) and device."""
        from .tensor import tensor

        data = data.data if isinstance(data, TensorMethods) else data  # tensor() copies it
        return tensor(data, dtype=self.dtype if dtype is None else dtype, device=self.device,
                      requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, requires_grad=False):
        from .creation import full

        return full(_sizes("new_full", (size,)), fill_value,
                    dtype=self.dtype if dtype is None else dtype, device=self.device,
                    requires_grad=requires_grad)

    def new_zeros(self, *size, dtype=None, requires_grad=False):
        return self.new_full(_sizes("new_zeros", size), 0, dtype, requires_grad)

    def new_ones(self, *size, dtype=None, requires_grad=False):
        return self.new_full(_sizes("new_ones", size), 1, dtype, requires_grad)

    def new_empty(self, *size, dtype=None, requires_grad=False):
        return self.new_full(_sizes("new_empty", size), 0, dtype, requires_grad)

    # --------------------------------------------------------- reductions
    @_named
    def sum(self, axis=None, keepdims=False, *, dtype=None):
        """``dtype=`` casts first, as PyTorch's ``x.sum(dtype=torch.float64)``."""
        return _ops.sum(self if dtype is None else self.astype(dtype), axis, keepdims)

    @_named
    def mean(self, axis=None, keepdims=False, *, dtype=None):
        return _ops.mean(self if dtype is None else self.astype(dtype), axis, keepdims)

    @_named
    def var(self, axis=None, unbiased=None, keepdims=False, *, correction=None, ddof=None):
        """PyTorch's, positional order included: ``x.var(dim, unbiased, keepdim)``, and
        ``x.var(False)`` (unbiased alone). Unbiased (``correction=1``) unless told
        otherwise; NumPy's ``ddof=`` is ``correction=``; ``unbiased=False`` is
        ``correction=0``. (:func:`tapegrad.ops.var` keeps NumPy's ``ddof=0``.)"""
        if isinstance(axis, bool):  # torch's var(unbiased) overload
            if unbiased is not None:
                raise ArgumentError(f"var: unbiased given twice ({axis!r} and {unbiased!r})")
            axis, unbiased = None, axis
        return _ops.var(self, axis, keepdims, _correction("var", ddof, correction, unbiased))

    @_named
    def std(self, axis=None, unbiased=None, keepdims=False, *, correction=None, ddof=None):
        """PyTorch's ``x.std(dim, unbiased, keepdim)``: the square root of :meth:`var`
        (:func:`tapegrad.ops.std`: its gradient is 0 where the std is 0, as PyTorch's)."""
        if isinstance(axis, bool):  # torch's std(unbiased) overload
            if unbiased is not None:
                raise ArgumentError(f"std: unbiased given twice ({axis!r} and {unbiased!r})")
            axis, unbiased = None, axis
        return _ops.std(self, axis, keepdims, _correction("std", ddof, correction, unbiased))

    @_named
    def max(self, axis=None, keepdims=False):
        """PyTorch's: ``x.max()`` the largest value; ``x.max(dim)`` the pair
        ``(values, indices)`` along ``dim`` (the gradient goes to the chosen
        index); ``x.max(other)`` the elementwise maximum. Values over several
        axes at once: :meth:`amax`."""
        return self._extreme("max", axis, keepdims)

    @_named
    def min(self, axis=None, keepdims=False):
        """PyTorch's: ``x.min()``, ``values, indices = x.min(dim)``, ``x.min(other)``."""
        return self._extreme("min", axis, keepdims)

    @_named
    def amax(self, axis=None, keepdims=False):
        """Largest values over ``axis`` (an int or a tuple); ties share the gradient."""
        return _ops.max(self, axis, keepdims)

    @_named
    def amin(self, axis=None, keepdims=False):
        return _ops.min(self, axis, keepdims)

    def _extreme(self, op, dim, keepdim):
        if isinstance(dim, TensorMethods):
            return (_ops.maximum if op == "max" else _ops.minimum)(self, dim)
        if dim is None:
            if keepdim:
                raise ArgumentError(f"{op}: keepdim needs a dim; for all axes use "
                                    f"x.a{op}(keepdims=True)")
            return _ops.max(self) if op == "max" else _ops.min(self)
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise ArgumentError(f"{op}: dim must be one int (PyTorch's max/min return values "
                                f"and indices along one axis), got {dim!r}; use "
                                f"x.a{op}(axis={dim!r}) for values over several axes")
        d = normalize_axis(op, self.shape, dim)
        if self.shape[d] == 0:
            raise ShapeError(f"{op}: cannot reduce the empty axis {d} of {describe(self)}")
        pick = self.data.argmax if op == "max" else self.data.argmin
        idx = pick(axis=d)
        values = self.gather(d, _wrap(idx, self.device, None, 0, False).expand_dims(d))
        indices = _wrap(idx.astype(np.int64, copy=False), self.device, None, 0, False)
        if keepdim:
            indices = indices.expand_dims(d)
        else:
            values = values.squeeze(d)
        return ValuesIndices(values, indices)

    @_named
    def all(self, axis=None, keepdims=False):
        """Whether every element (along ``axis``) is true, recorded never: bool, uint8
        for a uint8 tensor (as PyTorch)."""
        return self._truth(self.data.all(axis=axis, keepdims=keepdims))

    @_named
    def any(self, axis=None, keepdims=False):
        return self._truth(self.data.any(axis=axis, keepdims=keepdims))

    def _truth(self, out):
        out = self.device.xp.asarray(out)
        return _wrap(out.astype(np.uint8) if self.dtype == np.uint8 else out,
                     self.device, None, 0, False)

    @_named
    def logsumexp(self, axis=None, keepdims=False):
        return _ops.logsumexp(self, axis, keepdims)

    @_named
    def argmax(self, axis=None, keepdims=False):
        """The index of the largest value (of the flattened tensor when ``axis`` is None)."""
        return self._arg("argmax", axis, keepdims)

    @_named
    def argmin(self, axis=None, keepdims=False):
        return self._arg("argmin", axis, keepdims)

    def _arg(self, op, axis, keepdims):
        if axis is not None:
            axis = normalize_axis(op, self.shape, axis)
        elif keepdims:  # PyTorch: all axes kept, of length 1
            return self.reshape(-1)._arg(op, 0, False).reshape((1,) * self.ndim)
        if self.data.size == 0:
            raise ShapeError(f"{op}: cannot reduce the empty tensor {describe(self)}")
        if self.dtype == np.bool_:
            raise DTypeError(f"{op}: bool input ({describe(self)}) is not supported, as in "
                             "PyTorch; cast it first, e.g. x.long()")
        out = getattr(self.data, op)(axis=axis, keepdims=keepdims)
        return _wrap(self.device.xp.asarray(out, dtype=np.int64), self.device, None, 0, False)

    @_named
    def norm(self, p="fro", axis=None, keepdims=False):
        """PyTorch's ``x.norm(p, dim, keepdim)``: a vector p-norm ('fro' is 2)
        over ``axis`` (all elements when None)."""
        if p == "fro":
            p = 2
        elif isinstance(p, str):
            raise ArgumentError(f"norm: p={p!r} is not supported (matrix norms such as 'nuc' "
                                "are not implemented); use a number or 'fro'")
        return _ops.norm(self, p, axis, keepdims)

    @_named
    def softmax(self, axis):
        return _ops.softmax(self, axis)

    @_named
    def log_softmax(self, axis):
        return _ops.log_softmax(self, axis)

    # -------------------------------------------------------------- shape
    def reshape(self, *shape):
        return _ops.reshape(self, shape[0] if len(shape) == 1 else shape)

    def view(self, *shape):
        """PyTorch's: :meth:`reshape` where the result is a view of x's memory, else
        a ShapeError, as PyTorch refuses (a transposed x flattened); reshape copies."""
        out = self.reshape(*shape)
        if out.data.size and not _tape._aliases(out.data, self.data):
            raise ShapeError(f"view: {describe(self)} with strides "
                             f"{tuple(self.data.strides)} (bytes) has no view of shape "
                             f"{tuple(out.shape)} (an axis would span two strides); use "
                             ".reshape(...) or .contiguous().view(...), as in PyTorch")
        return out

    def view_as(self, other):
        return self.view(tuple(other.shape))

    def reshape_as(self, other):
        return self.reshape(tuple(other.shape))

    @_named
    def flatten(self, start_axis=0, end_axis=-1):
        return _ops.flatten(self, start_axis, end_axis)

    def transpose(self, *axes, dim0=None, dim1=None):
        """PyTorch's ``x.transpose(a, b)`` swaps two axes (also on a 2-D tensor, where
        NumPy would read ``(0, 1)`` as the identity); ``x.transpose()`` reverses them and
        ``x.transpose((2, 0, 1))`` (one sequence) permutes, as in NumPy."""
        if dim0 is not None or dim1 is not None:
            if axes or dim0 is None or dim1 is None:
                raise ArgumentError("transpose: pass both dim0= and dim1=, or the axes")
            axes = (dim0, dim1)
        if len(axes) == 2 and all(isinstance(a, int) for a in axes):
            return _ops.swapaxes(self, *axes)
        return _ops.transpose(self, axes[0] if len(axes) == 1 else (axes or None))

    def t(self):
        """PyTorch's: the transpose of a tensor of at most 2 axes."""
        if self.ndim > 2:
            raise ShapeError(f"t: expects a tensor of at most 2 axes, got {describe(self)}; "
                             "use x.transpose(a, b) or x.permute(...)")
        return self if self.ndim < 2 else _ops.swapaxes(self, 0, 1)

    def permute(self, *axes, dims=None):
        if dims is not None:
            if axes:
                raise ArgumentError("permute: pass the axes or dims=, not both")
            axes = tuple(dims)
        return _ops.permute(self, *axes)

    def swapaxes(self, a, b):
        return _ops.swapaxes(self, a, b)

    def broadcast_to(self, shape):
        return _ops.broadcast_to(self, shape)

    def expand(self, *sizes):
        """PyTorch's: broadcast to ``sizes`` (new leading axes allowed; -1 keeps an axis)."""
        sizes = _sizes("expand", sizes)
        lead = len(sizes) - self.ndim
        if lead < 0:
            raise ShapeError(f"expand: {len(sizes)} sizes {sizes} for {describe(self)}: give "
                             "at least one per axis")
        shape = tuple(self.shape[i - lead] if s == -1 and i >= lead else s
                      for i, s in enumerate(sizes))
        if any(s < 0 for s in shape):
            raise ShapeError(f"expand: -1 is only allowed for existing axes, got {sizes} "
                             f"for {describe(self)}")
        return _ops.broadcast_to(self, shape)

    def expand_as(self, other):
        return _ops.broadcast_to(self, other.shape)

    @_named
    def expand_dims(self, axis):
        return _ops.expand_dims(self, axis)

    unsqueeze = expand_dims

    @_named
    def squeeze(self, axis=None):
        """PyTorch's: ``x.squeeze(dim)`` drops the axes of ``dim`` (an int or a tuple)
        that have length 1 and leaves the others, without error (a no-op when none
        has length 1). :func:`tapegrad.ops.squeeze` is NumPy's and raises instead."""
        if axis is None:
            return _ops.squeeze(self)
        dims = axis if isinstance(axis, (tuple, list)) else (axis,)
        ones = tuple(d for d in (normalize_axis("squeeze", self.shape, a) for a in dims)
                     if self.shape[d] == 1)
        return _ops.squeeze(self, ones) if ones else self

    def repeat(self, *sizes):
        """PyTorch's ``x.repeat(*sizes)`` (NumPy's ``tile``): ``sizes`` copies along
        each axis, with new leading axes where ``sizes`` is longer."""
        sizes = _sizes("repeat", sizes)
        if len(sizes) < self.ndim:
            raise ShapeError(f"repeat: {len(sizes)} sizes {sizes} for {describe(self)}: give "
                             "at least one per axis")
        if any(s < 0 for s in sizes):
            raise ArgumentError(f"repeat: sizes must be >= 0, got {sizes}")
        shape = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
        # (..., n_i, ...) -> (..., 1, n_i, ...) -> (..., r_i, n_i, ...) -> (..., r_i * n_i, ...)
        spread = tuple(d for n in shape for d in (1, n))
        tiled = tuple(d for r, n in zip(sizes, shape) for d in (r, n))
        out = _ops.broadcast_to(self.reshape(spread), tiled)
        return out.reshape(tuple(r * n for r, n in zip(sizes, shape)))

    @_named
    def split(self, split_size_or_sections, axis=0):
        """PyTorch's: pieces of ``split_size`` along ``axis`` (the last one shorter),
        or of the listed sizes. NumPy's cut points are :func:`tapegrad.ops.split`."""
        d = normalize_axis("split", self.shape, axis)
        n = self.shape[d]
        if isinstance(split_size_or_sections, (int, np.integer)):
            size = int(split_size_or_sections)
            if size <= 0:
                raise ArgumentError(f"split: split_size must be > 0, got {size}")
            sizes = [size] * (n // size) + ([n % size] if n % size else [])
        else:
            sizes = [int(s) for s in split_size_or_sections]
            if sum(sizes) != n or any(s < 0 for s in sizes):
                raise ShapeError(f"split: sizes {sizes} must be >= 0 and sum to {n}, the "
                                 f"length of axis {d} of {describe(self)}")
        return _ops.split(self, list(np.cumsum(sizes[:-1])), d) if sizes else (self,)

    @_named
    def chunk(self, chunks, axis=0):
        """PyTorch's: at most ``chunks`` pieces of ``ceil(n / chunks)`` along ``axis``."""
        if not isinstance(chunks, (int, np.integer)) or chunks <= 0:
            raise ArgumentError(f"chunk: chunks must be an int > 0, got {chunks!r}")
        n = self.shape[normalize_axis("chunk", self.shape, axis)]
        return self.split(max(-(-n // int(chunks)), 1), axis)

    @_named
    def gather(self, axis, index):
        """PyTorch's ``x.gather(dim, index)``: ``out[i][j] = x[index[i][j]][j]`` for
        ``dim=0`` (``index`` has x's number of axes and is no larger elsewhere)."""
        return _ops.gather(self, axis, index)

    @_named
    def scatter_add(self, axis, index, src):
        """PyTorch's out-of-place ``x.scatter_add(dim, index, src)``: a copy of x with
        ``src[i][j]`` added at ``[index[i][j]][j]`` for ``dim=0`` (repeats accumulate)."""
        return _ops.scatter_add_along(self, axis, index, src)

    def masked_fill(self, mask, value):
        """PyTorch's: ``value`` where the bool ``mask`` (broadcast to x) is True."""
        mask = mask.data if isinstance(mask, TensorMethods) else mask
        if getattr(mask, "dtype", None) != np.bool_:
            raise DTypeError(f"masked_fill: mask must be a bool tensor, got {describe(mask)}")
        if getattr(value, "ndim", 0) != 0:
            raise ShapeError(f"masked_fill: value must be a number or a 0-d tensor, got "
                             f"{describe(value)}")
        if isinstance(value, TensorMethods):
            value = _ops.cast(value, self.dtype)
        else:  # PyTorch casts the value to the tensor's dtype (2.7 into an int tensor: 2)
            value = self.device.xp.asarray(fit_number("masked_fill", value, self.dtype))
            value = value.astype(self.dtype)
        return _ops.where(mask, value, self)

    # -------------------------------------------------------- comparisons
    def eq(self, other):
        return self == other

    def ne(self, other):
        return self != other

    def lt(self, other):
        return self < other

    def le(self, other):
        return self <= other

    def gt(self, other):
        return self > other

    def ge(self, other):
        return self >= other

    @_named
    def cumsum(self, axis):
        return _ops.cumsum(self, axis)

    @_named
    def prod(self, axis=None, keepdims=False):
        return _ops.prod(self, axis, keepdims)

    @_named
    def sort(self, axis=-1, descending=False, stable=False):
        """PyTorch's: ``(values, indices)``, values differentiable."""
        return _ops.sort(self, axis, descending, stable)

    @_named
    def topk(self, k, axis=-1, largest=True, sorted=True):
        return _ops.topk(self, k, axis, largest, sorted)

    def tril(self, diagonal=0):
        return _ops.tril(self, diagonal)

    def triu(self, diagonal=0):
        return _ops.triu(self, diagonal)

    # -------------------------------------------------------- elementwise
    def sin(self):
        return _ops.sin(self)

    def cos(self):
        return _ops.cos(self)

    def erf(self):
        return _ops.erf(self)

    def exp(self):
        return _ops.exp(self)

    def log(self):
        return _ops.log(self)

    def log1p(self):
        return _ops.log1p(self)

    def sqrt(self):
        return _ops.sqrt(self)

    def abs(self):
        return _ops.abs(self)

    def sign(self):
        return _ops.sign(self)

    def tanh(self):
        return _ops.tanh(self)

    def sigmoid(self):
        return _ops.sigmoid(self)

    def relu(self):
        return _ops.relu(self)

    def clip(self, min=None, max=None):
        return _ops.clip(self, min, max)

    clamp = clip

    def pow(self, exponent):
        return _ops.pow(self, exponent)

    def matmul(self, other):
        return _ops.matmul(self, other)

    def maximum(self, other):
        return _ops.maximum(self, other)

    def minimum(self, other):
        return _ops.minimum(self, other)


def _correction(op, ddof, correction, unbiased):
    given = [n for n, v in (("ddof", ddof), ("correction", correction),
                            ("unbiased", unbiased)) if v is not None]
    if len(given) > 1:
        raise ArgumentError(f"{op}: pass one of ddof=, correction= and unbiased=, got "
                            f"{' and '.join(given)}")
    if unbiased is not None:
        return 1 if unbiased else 0
    value = ddof if ddof is not None else correction
    return 1 if value is None else value


def finish(cls):
    """Apply :func:`torch_names` to the marked methods of ``cls`` (once ops exist)."""
    for name, fn in list(vars(cls).items()):
        if getattr(fn, "_torch_names", False):
            setattr(cls, name, torch_names(fn))
