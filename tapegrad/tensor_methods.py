"""Tensor methods that forward to :mod:`tapegrad.ops`, with PyTorch's names and
semantics (``x.sum(dim=1, keepdim=True)``, ``x.max(1)``, ``x.var()`` unbiased,
``x.split(2)`` in chunks of two, ``x.repeat(2, 1)``, ``x.long()``...).

:class:`TensorMethods` holds no state; its methods join :class:`tapegrad.Tensor`
at the end of this module, with tensor_methods_more's and tensor_operators'. Every
method that takes ``axis=``/``keepdims=`` also takes PyTorch's ``dim=``/``keepdim=``
(:func:`tapegrad.args.torch_names`).
"""

from __future__ import annotations

import numpy as np

from . import ops as _ops
from . import tape as _tape
from .args import normalize_axis, size_args, torch_names
from .creation import full
from .dtypes import fit_number
from .errors import ArgumentError, DTypeError, GraphError, ShapeError, describe
from .grad_mode import is_grad_enabled
from .memory_formats import check_memory_format, contiguous_format, is_strided_as, preserve_format
from .random import get_generator
from .return_types import ValuesIndices
from .tensor import Tensor, _wrap, tensor
from .tensor_methods_more import TensorMethodsMore
from .tensor_operators import TensorOperators
from .torch_functions import addmm, allclose, bmm, dot, isfinite, isinf, isnan, mm, mv, outer

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
        ``x.type(dtype)`` casts; so do ``x.type(tapegrad.FloatTensor)`` and
        ``x.type('torch.FloatTensor')`` (or ``'tapegrad.FloatTensor'``)."""
        if isinstance(dtype, str) and dtype.rsplit(".", 1)[-1].endswith("Tensor"):
            if ".cuda." in dtype:
                raise ArgumentError(f"type: {dtype!r} names a CUDA type; use "
                                    f"x.to('cuda', ...) to move a tensor")
            named = {v: k for k, v in _TYPE_NAMES.items()}.get(dtype.rsplit(".", 1)[-1])
            if named is None:
                raise ArgumentError(f"type: unknown tensor type {dtype!r}; use one of "
                                    f"{sorted(_TYPE_NAMES.values())}")
            dtype = named
        if dtype is not None:
            return self.astype(getattr(dtype, "legacy_dtype", dtype))
        name = _TYPE_NAMES.get(self.dtype.name, f"{self.dtype.name}Tensor")
        return f"tapegrad.{'cuda.' if self.device.type == 'cuda' else ''}{name}"

    def type_as(self, other):
        return self.astype(other.dtype)

    def clone(self, memory_format=None):
        """A differentiable copy, laid out as PyTorch's: by default (``preserve_format``)
        dense in x's order of axes (x's strides where x has no gaps: a channels-last or
        transposed x's copy is too); ``clone(memory_format=tapegrad.channels_last)``
        NHWC (:mod:`tapegrad.memory_formats`)."""
        check_memory_format("clone", memory_format, self.ndim)
        return _ops.cast(self, self.dtype, copy=True,
                         order=preserve_format if memory_format is None else memory_format)

    def contiguous(self, memory_format=None):
        """Self when it lies densely in ``memory_format``'s order (C order unless given;
        ``tapegrad.channels_last``: NHWC), else a differentiable copy that does."""
        check_memory_format("contiguous", memory_format, self.ndim)
        if memory_format is preserve_format:
            raise ArgumentError("contiguous: memory_format=tapegrad.preserve_format is not a "
                                "layout to copy into (PyTorch refuses it too, but for an "
                                "x that is contiguous already); use "
                                "tapegrad.contiguous_format or channels_last")
        fmt = contiguous_format if memory_format is None else memory_format
        if (self.array.flags.c_contiguous if fmt is contiguous_format
                else is_strided_as(self.array, fmt)):
            return self
        return _ops.cast(self, self.dtype, copy=True, order=fmt)

    # -------------------------------------------------------- new tensors
    def new_tensor(self, data, dtype=None, requires_grad=False):
        """A new leaf of ``data`` with this tensor's dtype (unless given) and device."""
        data = data.array if isinstance(data, Tensor) else data  # tensor() copies it
        return tensor(data, dtype=self.dtype if dtype is None else dtype, device=self.device,
                      requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, requires_grad=False):
        return full(size_args("new_full", (size,)), fill_value,
                    dtype=self.dtype if dtype is None else dtype, device=self.device,
                    requires_grad=requires_grad)

    def new_zeros(self, *size, dtype=None, requires_grad=False):
        return self.new_full(size_args("new_zeros", size), 0, dtype, requires_grad)

    def new_ones(self, *size, dtype=None, requires_grad=False):
        return self.new_full(size_args("new_ones", size), 1, dtype, requires_grad)

    def new_empty(self, *size, dtype=None, requires_grad=False):
        return self.new_full(size_args("new_empty", size), 0, dtype, requires_grad)

    # --------------------------------------------------------- reductions
    @torch_names
    def sum(self, axis=None, keepdims=False, *, dtype=None):
        """``dtype=`` casts first, as PyTorch's ``x.sum(dtype=torch.float64)``."""
        return _ops.sum(self if dtype is None else self.astype(dtype), axis, keepdims)

    @torch_names
    def mean(self, axis=None, keepdims=False, *, dtype=None):
        return _ops.mean(self if dtype is None else self.astype(dtype), axis, keepdims)

    @torch_names
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

    @torch_names
    def std(self, axis=None, unbiased=None, keepdims=False, *, correction=None, ddof=None):
        """PyTorch's ``x.std(dim, unbiased, keepdim)``: the square root of :meth:`var`
        (:func:`tapegrad.ops.std`: its gradient is 0 where the std is 0, as PyTorch's)."""
        if isinstance(axis, bool):  # torch's std(unbiased) overload
            if unbiased is not None:
                raise ArgumentError(f"std: unbiased given twice ({axis!r} and {unbiased!r})")
            axis, unbiased = None, axis
        return _ops.std(self, axis, keepdims, _correction("std", ddof, correction, unbiased))

    @torch_names
    def max(self, axis=None, keepdims=False):
        """PyTorch's: ``x.max()`` the largest value; ``x.max(dim)`` the pair
        ``(values, indices)`` along ``dim`` (the gradient goes to the chosen
        index); ``x.max(other)`` the elementwise maximum. Values over several
        axes at once: :meth:`amax`."""
        return self._extreme("max", axis, keepdims)

    @torch_names
    def min(self, axis=None, keepdims=False):
        """PyTorch's: ``x.min()``, ``values, indices = x.min(dim)``, ``x.min(other)``."""
        return self._extreme("min", axis, keepdims)

    @torch_names
    def amax(self, axis=None, keepdims=False):
        """Largest values over ``axis`` (an int or a tuple); ties share the gradient."""
        return _ops.max(self, axis, keepdims)

    @torch_names
    def amin(self, axis=None, keepdims=False):
        return _ops.min(self, axis, keepdims)

    def _extreme(self, op, dim, keepdim):
        if isinstance(dim, Tensor):
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
        pick = self.array.argmax if op == "max" else self.array.argmin
        idx = pick(axis=d)
        values = self.gather(d, _wrap(idx, self.device, None, 0, False).expand_dims(d))
        indices = _wrap(idx.astype(np.int64, copy=False), self.device, None, 0, False)
        if keepdim:
            indices = indices.expand_dims(d)
        else:
            values = values.squeeze(d)
        return ValuesIndices(values, indices)

    @torch_names
    def all(self, axis=None, keepdims=False):
        """Whether every element (along ``axis``) is true, recorded never: bool, uint8
        for a uint8 tensor (as PyTorch)."""
        return self._truth(self.array.all(axis=axis, keepdims=keepdims))

    @torch_names
    def any(self, axis=None, keepdims=False):
        return self._truth(self.array.any(axis=axis, keepdims=keepdims))

    def _truth(self, out):
        out = self.device.xp.asarray(out)
        return _wrap(out.astype(np.uint8) if self.dtype == np.uint8 else out,
                     self.device, None, 0, False)

    @torch_names
    def logsumexp(self, axis=None, keepdims=False):
        return _ops.logsumexp(self, axis, keepdims)

    @torch_names
    def argmax(self, axis=None, keepdims=False):
        """The index of the largest value (of the flattened tensor when ``axis`` is None)."""
        return self._arg("argmax", axis, keepdims)

    @torch_names
    def argmin(self, axis=None, keepdims=False):
        return self._arg("argmin", axis, keepdims)

    def _arg(self, op, axis, keepdims):
        if axis is not None:
            axis = normalize_axis(op, self.shape, axis)
        elif keepdims:  # PyTorch: all axes kept, of length 1
            return self.reshape(-1)._arg(op, 0, False).reshape((1,) * self.ndim)
        if self.array.size == 0:
            raise ShapeError(f"{op}: cannot reduce the empty tensor {describe(self)}")
        if self.dtype == np.bool_:
            raise DTypeError(f"{op}: bool input ({describe(self)}) is not supported, as in "
                             "PyTorch; cast it first, e.g. x.long()")
        out = getattr(self.array, op)(axis=axis, keepdims=keepdims)
        return _wrap(self.device.xp.asarray(out, dtype=np.int64), self.device, None, 0, False)

    @torch_names
    def norm(self, p="fro", axis=None, keepdims=False):
        """PyTorch's ``x.norm(p, dim, keepdim)``: a vector p-norm ('fro' is 2)
        over ``axis`` (all elements when None)."""
        if p == "fro":
            p = 2
        elif isinstance(p, str):
            raise ArgumentError(f"norm: p={p!r} is not supported (matrix norms such as 'nuc' "
                                "are not implemented); use a number or 'fro'")
        return _ops.norm(self, p, axis, keepdims)

    @torch_names
    def softmax(self, axis, dtype=None):
        return _ops.softmax(self, axis, dtype=dtype)

    @torch_names
    def log_softmax(self, axis, dtype=None):
        return _ops.log_softmax(self, axis, dtype=dtype)

    # -------------------------------------------------------------- shape
    def reshape(self, *shape):
        return _ops.reshape(self, shape[0] if len(shape) == 1 else shape)

    def view(self, *shape):
        """PyTorch's: :meth:`reshape` where the result is a view of x's memory, else
        a ShapeError, as PyTorch refuses (a transposed x flattened); reshape copies."""
        out = self.reshape(*shape)
        if out.array.size and not _tape._aliases(out.array, self.array):
            raise ShapeError(f"view: {describe(self)} with strides "
                             f"{tuple(self.array.strides)} (bytes) has no view of shape "
                             f"{tuple(out.shape)} (an axis would span two strides); use "
                             ".reshape(...) or .contiguous().view(...), as in PyTorch")
        return out

    def view_as(self, other):
        return self.view(tuple(other.shape))

    def reshape_as(self, other):
        return self.reshape(tuple(other.shape))

    @torch_names
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
        sizes = size_args("expand", sizes)
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

    @torch_names
    def expand_dims(self, axis):
        return _ops.expand_dims(self, axis)

    unsqueeze = expand_dims

    @torch_names
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
        sizes = size_args("repeat", sizes)
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

    @torch_names
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

    @torch_names
    def chunk(self, chunks, axis=0):
        """PyTorch's: at most ``chunks`` pieces of ``ceil(n / chunks)`` along ``axis``."""
        if not isinstance(chunks, (int, np.integer)) or chunks <= 0:
            raise ArgumentError(f"chunk: chunks must be an int > 0, got {chunks!r}")
        n = self.shape[normalize_axis("chunk", self.shape, axis)]
        return self.split(max(-(-n // int(chunks)), 1), axis)

    @torch_names
    def gather(self, axis, index):
        """PyTorch's ``x.gather(dim, index)``: ``out[i][j] = x[index[i][j]][j]`` for
        ``dim=0`` (``index`` has x's number of axes and is no larger elsewhere)."""
        return _ops.gather(self, axis, index)

    @torch_names
    def scatter_add(self, axis, index, src):
        """PyTorch's out-of-place ``x.scatter_add(dim, index, src)``: a copy of x with
        ``src[i][j]`` added at ``[index[i][j]][j]`` for ``dim=0`` (repeats accumulate)."""
        return _ops.scatter_add_along(self, axis, index, src)

    def masked_fill(self, mask, value):
        """PyTorch's: ``value`` where the bool ``mask`` (broadcast to x) is True."""
        mask = mask.array if isinstance(mask, Tensor) else mask
        if getattr(mask, "dtype", None) != np.bool_:
            raise DTypeError(f"masked_fill: mask must be a bool tensor, got {describe(mask)}")
        if getattr(value, "ndim", 0) != 0:
            raise ShapeError(f"masked_fill: value must be a number or a 0-d tensor, got "
                             f"{describe(value)}")
        if isinstance(value, Tensor):
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

    @torch_names
    def cumsum(self, axis):
        return _ops.cumsum(self, axis)

    @torch_names
    def prod(self, axis=None, keepdims=False):
        return _ops.prod(self, axis, keepdims)

    @torch_names
    def sort(self, axis=-1, descending=False, stable=False):
        """PyTorch's: ``(values, indices)``, values differentiable."""
        return _ops.sort(self, axis, descending, stable)

    @torch_names
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

    # ---------------------------------------------- PyTorch's matrix products
    def mm(self, mat2):
        """``torch.mm``: (n, k) @ (k, m), no broadcasting. >>> a.mm(b)"""
        return mm(self, mat2)

    def bmm(self, mat2):
        """``torch.bmm``: (b, n, k) @ (b, k, m). >>> a.bmm(b)"""
        return bmm(self, mat2)

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        """``beta * self + alpha * (mat1 @ mat2)``; with ``beta=0`` self is ignored
        (its NaNs too), as PyTorch. >>> bias.addmm(x, w.t())"""
        return addmm(self, mat1, mat2, beta=beta, alpha=alpha)

    # ------------------------------------------------- PyTorch's indexing
    def narrow(self, dim, start, length):
        """A view of ``length`` elements from ``start`` along ``dim`` (``start`` may be
        negative or a 0-d integer tensor). >>> x.narrow(1, 0, 2)   # x[:, 0:2]"""
        d = normalize_axis("narrow", self.shape, dim)
        start = int(start.item() if isinstance(start, Tensor) else start)
        n = self.shape[d]
        if start < 0:
            start += n
        if not 0 <= start <= n or not 0 <= length <= n - start:
            raise ShapeError(f"narrow: start={start} and length={length} do not fit axis {d} "
                             f"of {describe(self)} (size {n}): need 0 <= start <= {n} and "
                             f"start + length <= {n}")
        return _ops.getitem(self, (slice(None),) * d + (slice(start, start + length),))

    def unfold(self, dimension, size, step):
        """PyTorch's: a view of every window of ``size`` elements along ``dimension``,
        ``step`` apart, as a new last axis. >>> x.unfold(0, 3, 2)   # (7,) -> (3, 3)"""
        return _ops.shape.unfold(self, dimension, size, step)

    def index_select(self, dim, index):
        """The entries of ``index`` (a 1-D or 0-d integer tensor) along ``dim``, a copy;
        repeats accumulate in backward. >>> x.index_select(0, tapegrad.tensor([2, 0]))"""
        d = normalize_axis("index_select", self.shape, dim, extra=int(self.ndim == 0))
        idx = index.array if isinstance(index, Tensor) else self.device.xp.asarray(index)
        if idx.ndim > 1 or idx.dtype.kind not in "iu":
            raise ShapeError(f"index_select: index must be a 1-D (or 0-d) integer tensor, got "
                             f"{describe(idx)}")
        idx = idx.reshape(-1)
        if self.ndim == 0:
            return self.reshape(1).index_select(0, idx).reshape(())
        n = self.shape[d]
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise ShapeError(f"index_select: index values {int(idx.min())}..{int(idx.max())} "
                             f"are out of range for axis {d} of {describe(self)} (size {n}): "
                             f"they must be in [0, {n}), as PyTorch requires")
        return _ops.getitem(self, (slice(None),) * d + (idx.astype(np.int64, copy=False),))

    def flip(self, *dims):
        """A copy with the order along ``dims`` reversed (``x.flip(0)``, ``x.flip((0, 1))``)."""
        dims = tuple(dims[0]) if len(dims) == 1 and not isinstance(dims[0], int) else dims
        axes = {normalize_axis("flip", self.shape, a) for a in dims}
        if len(axes) != len(dims):
            raise ArgumentError(f"flip: dims {dims} name an axis twice")
        if not axes:
            return self.clone()
        index = tuple(slice(None, None, -1) if a in axes else slice(None)
                      for a in range(self.ndim))
        return _ops.getitem(self, index).clone()  # PyTorch's flip copies

    def roll(self, shifts, dims=None):
        """Elements shifted by ``shifts`` along ``dims``, wrapping around (without
        ``dims``: the flattened tensor, shape kept). >>> x.roll(1, 0)"""
        shifts = (shifts,) if isinstance(shifts, (int, np.integer)) else tuple(shifts)
        if dims is None:
            if len(shifts) != 1:
                raise ArgumentError(f"roll: {len(shifts)} shifts need as many dims, got none")
            return self.reshape(-1).roll(shifts, 0).reshape(tuple(self.shape))
        dims = (dims,) if isinstance(dims, (int, np.integer)) else tuple(dims)
        if len(shifts) != len(dims):
            raise ArgumentError(f"roll: shifts {shifts} and dims {dims} must have one length")
        out, xp = self, self.device.xp
        for s, dim in zip(shifts, dims):
            d = normalize_axis("roll", self.shape, dim)
            n = self.shape[d]
            if n and int(s) % n:
                out = out.index_select(d, (xp.arange(n) - int(s)) % n)
        return out if out is not self else self.clone()

    def argsort(self, dim=-1, descending=False, stable=False):
        """The indices that sort ``dim`` (stable: ties in index order; NaN largest).
        >>> x.argsort(dim=1, descending=True)"""
        return _ops.shape._order("argsort", self, dim, descending)[2]

    def nonzero(self, *, as_tuple=False):
        """The indices of the nonzero elements: an int64 ``(n, ndim)`` tensor, or with
        ``as_tuple=True`` one 1-D tensor per axis (a 0-d input counts as 1-D, as in
        PyTorch). >>> (x > 0).nonzero()"""
        xp = self.device.xp
        if as_tuple:
            a = self.array.reshape(1) if self.ndim == 0 else self.array
            return tuple(_wrap(i.astype(np.int64), self.device, None, 0, False)
                         for i in xp.nonzero(a))
        out = xp.argwhere(self.array).astype(np.int64, copy=False)
        return _wrap(out, self.device, None, 0, False)

    def median(self, dim=None, keepdim=False):
        """PyTorch's lower median: ``x.median()`` of all elements, ``x.median(dim)`` the
        pair ``(values, indices)``; NaN anywhere along ``dim`` gives NaN (the index of
        the first NaN). Among equal medians the index is the first in sorted order,
        where PyTorch does not say which. The gradient goes to the chosen element."""
        if dim is None:
            if self.array.size == 0:
                raise ShapeError(f"median: cannot reduce the empty tensor {describe(self)}")
            return self.reshape(-1).median(0).values
        d = normalize_axis("median", self.shape, dim, extra=int(self.ndim == 0))
        if self.ndim == 0:
            return ValuesIndices(self, _wrap(self.device.xp.zeros((), np.int64), self.device,
                                             None, 0, False))
        n = self.shape[d]
        if n == 0:
            raise ShapeError(f"median: cannot reduce the empty axis {d} of {describe(self)}")
        xp = self.device.xp
        order = _ops.shape._order("median", self, d, False)[2].array
        k = (n - 1) // 2
        if self.dtype.kind == "f":  # sorted NaNs come last; the first of them is the answer
            k = xp.where(xp.isnan(self.array).any(axis=d, keepdims=True),
                         (~xp.isnan(self.array)).sum(axis=d, keepdims=True), k)
        else:
            k = xp.full((1,) * self.ndim, k, dtype=np.int64)
        idx = xp.take_along_axis(order, k.astype(np.int64), axis=d)
        values = self.gather(d, _wrap(idx, self.device, None, 0, False))
        indices = _wrap(idx, self.device, None, 0, False)
        if not keepdim:
            values, indices = values.squeeze(d), indices.squeeze(d)
        return ValuesIndices(values, indices)

    # ---------------------------------------------- PyTorch's elementwise
    def where(self, condition, y):
        """``torch.where(condition, self, y)``. >>> x.where(x > 0, 0.0)"""
        return _ops.where(condition, self, y)

    def lerp(self, end, weight):
        """``self + weight * (end - self)`` (``end`` of self's dtype; ``weight`` a
        number or a tensor), as ``torch.lerp``. >>> a.lerp(b, 0.5)"""
        for name, v in (("end", end), ("weight", weight)):
            if isinstance(v, Tensor) and v.dtype != self.dtype:
                raise DTypeError(f"lerp: {name} {describe(v)} must have the dtype of "
                                 f"{describe(self)}, as PyTorch requires; cast it first")
        if not isinstance(end, Tensor):
            raise ArgumentError(f"lerp: end must be a tensor, got {type(end).__name__}")
        return self + weight * (end - self)

    def clamp_min(self, min):  # noqa: A002  (PyTorch's name)
        return _ops.clip(self, min, None)

    def clamp_max(self, max):  # noqa: A002
        return _ops.clip(self, None, max)

    def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        return allclose(self, other, rtol, atol, equal_nan)

    # ------------------------------------------- in-place (Tensor._inplace)
    def abs_(self):
        return self._inplace(_ops.abs)

    def sqrt_(self):
        return self._inplace(_ops.sqrt)

    def exp_(self):
        return self._inplace(_ops.exp)

    def log_(self):
        return self._inplace(_ops.log)

    def relu_(self):
        return self._inplace(_ops.relu)

    def sigmoid_(self):
        return self._inplace(_ops.sigmoid)

    def tanh_(self):
        return self._inplace(_ops.tanh)

    def neg_(self):
        return self._inplace(_ops.neg)

    def pow_(self, exponent):
        return self._inplace(_ops.pow, exponent)

    def clamp_min_(self, min):  # noqa: A002
        return self._inplace(_ops.clip, min, None)

    def clamp_max_(self, max):  # noqa: A002
        return self._inplace(_ops.clip, None, max)

    def lerp_(self, end, weight):
        return self._inplace(type(self).lerp, end, weight)

    def masked_fill_(self, mask, value):
        """In place: ``value`` where the bool ``mask`` is True. >>> x.masked_fill_(m, 0)"""
        try:
            fits = np.broadcast_shapes(tuple(getattr(mask, "shape", ())), self.shape)
        except ValueError:
            fits = None
        if fits != tuple(self.shape):
            raise ShapeError(f"masked_fill_: mask {describe(mask)} must broadcast to "
                             f"{describe(self)} (the tensor written keeps its shape)")
        return self._inplace(type(self).masked_fill, mask, value)

    def index_fill_(self, dim, index, value):
        """In place: ``value`` at the entries ``index`` (1-D or 0-d integer) along ``dim``.
        >>> x.index_fill_(1, tapegrad.tensor([0, 2]), -1.0)"""
        d = normalize_axis("index_fill_", self.shape, dim, extra=int(self.ndim == 0))
        idx = index.array if isinstance(index, Tensor) else self.device.xp.asarray(index)
        if idx.ndim > 1 or idx.dtype.kind not in "iu":
            raise ShapeError(f"index_fill_: index must be a 1-D (or 0-d) integer tensor, got "
                             f"{describe(idx)}")
        if getattr(value, "ndim", 0) != 0:
            raise ShapeError(f"index_fill_: value must be a number or a 0-d tensor, got "
                             f"{describe(value)}")
        idx = idx.reshape(-1).astype(np.int64, copy=False)
        n = 1 if self.ndim == 0 else self.shape[d]
        if idx.size and (int(idx.min()) < -n or int(idx.max()) >= n):
            raise ShapeError(f"index_fill_: index values {int(idx.min())}..{int(idx.max())} "
                             f"are out of range for axis {d} of {describe(self)} (size {n})")
        if self.ndim == 0:
            return self._inplace(_ops.setitem, Ellipsis, value) if idx.size else self
        if not isinstance(value, Tensor):
            value = fit_number("index_fill_", value, self.dtype)
        return self._inplace(_ops.setitem, (slice(None),) * d + (idx,), value)

    def squeeze_(self, dim=None):
        """In place: :meth:`squeeze` (the tensor takes the new shape)."""
        return self._reshape_("squeeze_", lambda t: t.squeeze(dim))

    def unsqueeze_(self, dim):
        """In place: :meth:`unsqueeze` (the tensor takes the new shape)."""
        return self._reshape_("unsqueeze_", lambda t: t.unsqueeze(dim))

    def _reshape_(self, op, fn):
        if self._base is not None or any(r() is not None for r in
                                         (getattr(self, "_views", None) or ())):
            raise GraphError(f"{op}: {describe(self)} is a view or has live views, whose "
                             "shapes tapegrad cannot change in place; use the out-of-place "
                             f"{op[:-1]}() instead")
        if is_grad_enabled() and self.is_leaf and self.requires_grad:
            raise GraphError(f"{op}: a leaf tensor {describe(self)} that requires grad is "
                             "used in an in-place operation (PyTorch refuses this too); use "
                             f"{op[:-1]}(), or do it under tapegrad.no_grad()")
        out = fn(self)
        # a metadata change: the same memory under the new shape, and the op's entry
        self.array = out.array
        if out._node is not None:
            self._node, self._out_nr = out._node, out._out_nr
        return self

    def detach_(self):
        """Cut this tensor from the tape in place (PyTorch refuses it for views)."""
        if self._base is not None:
            raise GraphError(f"detach_: {describe(self)} is a view; views can't be detached "
                             "in place (as in PyTorch). Use detach() instead")
        self._node, self._out_nr, self.requires_grad = None, 0, False
        return self

    # ---------------------------------------------- random in-place fills
    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        """Fill with N(mean, std**2) samples from the global generator (PyTorch's
        stream is not reproduced). >>> w.normal_(0, 0.02)"""
        self._random_check("normal_", generator, float_only=True)
        if std < 0:
            raise ArgumentError(f"normal_: std must be >= 0, got {std}")
        z = self._generator().standard_normal(tuple(self.shape))
        return self._random_write(z * std + mean)

    def uniform_(self, from_=0.0, to=1.0, *, generator=None):  # noqa: A002
        """Fill with U(from, to) samples. >>> w.uniform_(-0.1, 0.1)"""
        self._random_check("uniform_", generator, float_only=True)
        if from_ > to:
            raise ArgumentError(f"uniform_: expects from <= to, got from={from_} > to={to}")
        u = self._generator().random(tuple(self.shape))
        return self._random_write(u * (to - from_) + from_)

    def exponential_(self, lambd=1.0, *, generator=None):
        """Fill with Exp(lambd) samples (mean ``1 / lambd``)."""
        self._random_check("exponential_", generator, float_only=True)
        if not lambd > 0:
            raise ArgumentError(f"exponential_: lambd must be > 0, got {lambd}")
        return self._random_write(self._generator().standard_exponential(tuple(self.shape))
                                  / lambd)

    def bernoulli_(self, p=0.5, *, generator=None):
        """Fill with 1 (probability ``p``, a number or a tensor broadcast to self) or 0."""
        self._random_check("bernoulli_", generator, float_only=False)
        p = p.array if isinstance(p, Tensor) else p
        xp = self.device.xp
        if bool(xp.any((xp.asarray(p) < 0) | (xp.asarray(p) > 1))):
            raise ArgumentError(f"bernoulli_: p must be in [0, 1], got {describe(p)}")
        return self._random_write(self._generator().random(tuple(self.shape)) < p)

    def random_(self, from_=None, to=None, *, generator=None):  # noqa: A002
        """Fill with integers: ``random_(to)`` in [0, to), ``random_(from, to)`` in
        [from, to), ``random_()`` in [0, 2**mantissa] for floats (2**24 for float32),
        [0, max] for integers, as PyTorch."""
        self._random_check("random_", generator, float_only=False)
        if from_ is not None and to is None:
            from_, to = 0, from_
        if to is None:
            if self.dtype.kind == "f":
                to = 2 ** (np.finfo(self.dtype).nmant + 1) + 1
            elif self.dtype.kind == "b":
                to = 2
            else:
                to = int(np.iinfo(self.dtype).max) + 1
            from_ = 0
        if from_ >= to:
            raise ArgumentError(f"random_: expects from < to, got from={from_}, to={to}")
        if self.dtype.kind in "iu" and (from_ < np.iinfo(self.dtype).min
                                        or to - 1 > np.iinfo(self.dtype).max):
            raise ArgumentError(f"random_: [{from_}, {to}) does not fit {describe(self)}")
        return self._random_write(self._generator().integers(from_, to, tuple(self.shape)))

    def _generator(self):
        return get_generator(self.device)

    def _random_check(self, op, generator, float_only):
        if generator is not None:
            raise ArgumentError(f"{op}: generator= is not supported (tapegrad has one "
                                "generator per device); seed it with tapegrad.manual_seed")
        if float_only and self.dtype.kind != "f":
            raise DTypeError(f"{op}: needs a floating tensor, got {describe(self)} (PyTorch "
                             "refuses it too); cast it first, e.g. x.float()")

    def _random_write(self, values):
        """Write samples through the in-place machinery: unrecorded outside grad mode,
        a constant (no gradient to the old values) in it, refused on a leaf that
        requires grad, as PyTorch's random fills."""
        values = self.device.xp.asarray(values).astype(self.dtype, copy=False)
        return self._inplace(_ops.setitem, Ellipsis, values)

    # ------------------------------- the torch functions that are methods too
    def isnan(self):
        return isnan(self)

    def isinf(self):
        return isinf(self)

    def isfinite(self):
        return isfinite(self)

    def outer(self, vec2):
        return outer(self, vec2)

    ger = outer

    def dot(self, tensor):
        return dot(self, tensor)

    def mv(self, vec):
        return mv(self, vec)


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


def _join(*parts):
    """Tensor (tensor.py) sits below the tape, the engine and the ops, which make
    Tensors; its methods that call them are defined above them, in this module,
    tensor_methods_more.py and tensor_operators.py, and join the class here, once.
    A name the class defines already is a clash, refused at import."""
    for part in parts:
        for name, value in vars(part).items():
            if name in ("__module__", "__qualname__", "__doc__", "__slots__"):
                continue
            if name in vars(Tensor):
                raise GraphError(f"Tensor.{name} is defined twice ({part.__name__} and tensor.py)")
            setattr(Tensor, name, value)


_join(TensorMethods, TensorMethodsMore, TensorOperators)
