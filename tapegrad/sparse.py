"""COO sparse matrices (``torch.sparse_coo_tensor`` in its 2-D case) and their products
with dense tensors: the graph-network case, a normalized adjacency times node features
(``adj @ (x @ W)``). ``tapegrad.sparse`` is this module, as ``torch.sparse``: ``mm``,
``sum``, ``softmax``.

A :class:`SparseTensor` is where its entries sit (an int64 ``(2, nnz)`` array of its
device, never differentiated) and their values (a 1-D Tensor that may require grad and
carry a graph). Every op here is an op on the values, so gradients reach them through the
ordinary tape, one per entry, at the entries only: PyTorch's rule for the values of a
sparse tensor (``torch.sparse.mm``'s gradient of a sparse leaf, ``sparse_coo_tensor(i, v)``'s
gradient of ``v``).

Products run on scipy.sparse's CSR kernels on the host and cupyx.scipy.sparse's on a GPU
(float32/float64); without them, as a gather and a scatter-add written against ``xp``.
Measured (2 cores, float32, median ms; 2708 x 2708 with 13k entries times 16 columns /
20000 x 20000 with 200k entries times 64): scipy CSR 0.08 / 2.9, NumPy ``add.reduceat``
1.6 / 125, ``np.add.at`` 4.4 / 137, torch.sparse.mm 0.40 / 7.6. The values' gradient (a dot
product per entry) runs in blocks of 256 KiB per operand, so both gathers stay in cache:
1.07 -> 0.37 and 23 -> 10 ms against one pass.

What PyTorch has and tapegrad refuses, each with an error that says so: sparse tensors of
other than 2 axes, hybrid values (more than one axis), CSR/CSC/BSR layouts, sparse @ sparse
and dense @ sparse products, elementwise math other than scaling by a number,
``sparse.sum`` over one axis (a 1-D sparse result), and the *dense* gradient that
``mm``/``matmul``/``@``/``spmm`` give a sparse leaf or ``x.to_sparse()`` in PyTorch
(``tapegrad.sparse.mm`` gives those the gradient at the entries, as ``torch.sparse.mm``).
A sparse leaf's ``.grad`` has the coalesced pattern, as PyTorch's, and says it is coalesced.
"""

from __future__ import annotations

import builtins
import functools
import numbers

import numpy as np

from . import ops
from .device import cpu, get_device
from .dtypes import as_dtype, check_differentiable, downcast, upcast
from .errors import ArgumentError, ArgumentTypeError, DTypeError, GraphError, ShapeError, describe
from .grad_mode import is_grad_enabled
from .printing import tensor_repr
from .tape import Function
from .tensor import Tensor, _is_device, _wrap, get_default_dtype, tensor
from .torch_functions import mm as dense_mm

__all__ = ["SparseTensor", "sparse_coo_tensor", "spmm", "mm", "sum", "softmax"]

USE_SCIPY = True  # False: the xp formula on the host too (the tests run both)
_BLOCK_BYTES = 1 << 18  # the values' gradient by blocks of this many bytes per operand
_LEAF = "a sparse leaf that requires grad"
_TO_SPARSE = "x.to_sparse() of a tensor x that requires grad"


@functools.cache
def _scipy_sparse():
    try:
        import scipy.sparse
    except ImportError:
        return None
    return scipy.sparse


# ------------------------------------------------------------------ the kernels

class _Pattern:
    """Where a sparse matrix's entries sit: ``rows``, ``cols`` (int64 arrays of its
    device, one per entry) and ``shape``; on first use, the CSR structure the library
    kernels take: the entries' order by row (None when sorted), the row pointers and the
    sorted column indices (int32 where they fit, which scipy and cupyx keep uncopied)."""

    __slots__ = ("rows", "cols", "shape", "_csr")

    def __init__(self, rows, cols, shape):
        self.rows, self.cols, self.shape = rows, cols, shape
        self._csr = None

    def csr(self, xp):
        if self._csr is None:
            rows, cols, order = self.rows, self.cols, None
            if rows.shape[0] > 1 and not bool((rows[1:] >= rows[:-1]).all()):
                order = xp.argsort(rows)
                rows, cols = rows[order], cols[order]
            counts = xp.bincount(rows, minlength=self.shape[0])
            indptr = xp.concatenate([xp.zeros(1, dtype=counts.dtype), xp.cumsum(counts)])
            small = builtins.max(self.shape[1], rows.shape[0]) < 2**31
            it = np.int32 if small else np.int64
            self._csr = (order, indptr.astype(it), cols.astype(it))
        return self._csr


def _ends(pattern, transpose):
    """Per entry, its row in the product and the dense operand's row it reads."""
    return (pattern.cols, pattern.rows) if transpose else (pattern.rows, pattern.cols)


def _times(xp, pattern, values, dense, transpose):
    """S @ dense (S^T @ dense with ``transpose``) for the matrix S with ``values`` at
    ``pattern``: raw arrays, dense (k, n) -> (m, n); float16 computes in float32."""
    if values.dtype == np.float16:
        out = _times(xp, pattern, upcast(values), upcast(dense), transpose)
        return downcast(out, np.float16)
    library = None
    if xp.name == "numpy" and USE_SCIPY:
        library = _scipy_sparse()
    elif xp.name == "cupy" and values.dtype.kind in "fc" and builtins.max(
            pattern.shape[1], pattern.rows.shape[0]) < 2**31:  # cuSPARSE takes int32 indices
        import cupyx.scipy.sparse as library
    if library is not None:
        order, indptr, cols = pattern.csr(xp)
        data = values if order is None else values[order]
        s = library.csr_matrix((data, cols, indptr), shape=pattern.shape)
        return (s.T if transpose else s) @ dense
    # each entry adds value * dense[col] to its row: a gather and a scatter-add
    r, c = _ends(pattern, transpose)
    m = pattern.shape[1] if transpose else pattern.shape[0]
    return xp.scatter_add((m, dense.shape[1]), r, values[:, None] * dense[c])


def _entry_dots(xp, pattern, g, dense, transpose):
    """Per entry, g's row in the product dotted with the dense row it read: the values'
    gradient, (m, n), (k, n) -> (nnz,). On the host in blocks of entries so that both
    gathered blocks stay in cache."""
    r, c = _ends(pattern, transpose)
    dtype = xp.result_type(g, dense)
    if dtype == np.float16:
        return downcast(_entry_dots(xp, pattern, upcast(g), upcast(dense), transpose),
                        np.float16)
    if xp.name != "numpy":
        return (g[r] * dense[c]).sum(axis=1)
    out = xp.empty(r.shape[0], dtype=dtype)
    step = builtins.max(64, _BLOCK_BYTES // builtins.max(1, g.shape[1] * dtype.itemsize))
    for s in range(0, r.shape[0], step):  # blocks of entries: (step, n) each
        e = slice(s, s + step)
        xp.einsum("ij,ij->i", g[r[e]], dense[c[e]], out=out[e])
    return out


class SpMM(Function):
    """``S @ dense`` (``S^T @ dense`` with ``transpose``) for the sparse matrix S with
    ``values`` at ``pattern``; ``dense`` is (k, n) or (k,). d(dense) = S^T @ g, the same
    kernel; d(values) = one dot product per entry, at the entries only (PyTorch's rule)."""

    differentiable_twice = True  # under create_graph: an SpMM of g and a recorded gather

    @staticmethod
    def forward(ctx, values, dense, pattern, transpose=False):
        nv, nd = ctx.needs_input_grad
        ctx.pattern, ctx.transpose = pattern, transpose
        ctx.save_for_backward(values if nd else None, dense if nv else None)
        if dense.ndim == 1:  # (k,) -> (k, 1) -> (m, 1) -> (m,)
            return _times(ctx.xp, pattern, values, dense[:, None], transpose)[:, 0]
        return _times(ctx.xp, pattern, values, dense, transpose)

    @staticmethod
    def backward(ctx, g):
        values, dense = ctx.saved_tensors
        nv, nd = ctx.needs_input_grad
        pattern, transpose = ctx.pattern, ctx.transpose
        if ctx._graph:  # Tensors: the same two products, recorded
            r, c = _ends(pattern, transpose)
            gv = None
            if nv:
                gv = g[r] * dense[c]
                gv = gv.sum(axis=1) if g.ndim == 2 else gv
            gd = SpMM.apply(values, g, pattern=pattern, transpose=not transpose) if nd else None
            return gv, gd
        xp = ctx.xp
        vector = g.ndim == 1
        if vector:  # (m,) -> (m, 1); the dense operand (k,) -> (k, 1)
            g = g[:, None]
        gv = gd = None
        if nv:
            gv = _entry_dots(xp, pattern, g, dense[:, None] if vector else dense, transpose)
        if nd:
            gd = _times(xp, pattern, values, g, not transpose)
            gd = gd[:, 0] if vector else gd
        return gv, gd


class SparseValues(Function):
    """The values of a sparse tensor made from (or read out of) values that require
    grad: the same memory, as PyTorch shares it (a view), the gradient passed through."""

    view = True
    differentiable_twice = True

    @staticmethod
    def forward(ctx, values):
        return values.view()

    @staticmethod
    def backward(ctx, g):
        return g


# ------------------------------------------------------------------ the type

class SparseTensor:
    """A 2-D sparse tensor in COO form: what ``torch.sparse_coo_tensor`` makes.

    Made by :func:`sparse_coo_tensor` or ``Tensor.to_sparse()``; multiplied with dense
    tensors by ``@``, :func:`tapegrad.mm`, :func:`spmm` and :func:`mm`.

    >>> adj = tapegrad.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 1.0], (2, 2))
    >>> adj @ x   # (2, 2) @ (2, n) -> (2, n)
    """

    __slots__ = ("_idx", "_vals", "_shape", "_coalesced", "_leaf", "_dense_grad", "_pat",
                 "__weakref__")
    is_sparse = True
    __array_ufunc__ = None  # ndarray @ sparse defers to __rmatmul__ (which refuses)

    @staticmethod
    def _product(op, a, b):
        """``tapegrad.matmul``'s or ``tapegrad.mm``'s (``op``'s) product when an operand
        is sparse: they sit below this module and reach it through the operand."""
        return _multiply(op, a, b, vectors=op == "matmul", at_entries=False)

    @classmethod
    def _make(cls, idx, vals, shape, coalesced, dense_grad=None):
        s = object.__new__(cls)
        s._idx, s._vals, s._shape, s._coalesced = idx, vals, tuple(shape), bool(coalesced)
        s._leaf = False
        # why PyTorch's mm/matmul would give the values' source a dense gradient (or None)
        s._dense_grad = dense_grad
        s._pat = None
        return s

    def __init__(self, *args, **kwargs):
        raise ArgumentTypeError("SparseTensor: make one with tapegrad.sparse_coo_tensor(indices, "
                                "values, size) or x.to_sparse()")

    def _pattern(self):
        if self._pat is None:
            self._pat = _Pattern(self._idx[0], self._idx[1], self._shape)
        return self._pat

    # ---------------------------------------------------------- properties
    @property
    def shape(self):
        return self._shape

    def size(self, dim=None):
        """The shape, or ``size(dim)`` the length of one axis, as PyTorch."""
        if dim is None:
            return self._shape
        return self._shape[_axis("size", dim)]

    def dim(self) -> int:
        return 2

    ndim = property(dim)

    def numel(self) -> int:
        return self._shape[0] * self._shape[1]

    def sparse_dim(self) -> int:
        return 2

    def dense_dim(self) -> int:
        return 0

    @property
    def dtype(self):
        return self._vals.dtype

    @property
    def device(self):
        return self._vals.device

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def _nnz(self) -> int:
        """The number of stored entries (duplicates included until coalesced)."""
        return int(self._idx.shape[1])

    def is_coalesced(self) -> bool:
        """Whether the entries are known sorted (row-major) and unique."""
        return self._coalesced

    # ------------------------------------------------------------- autograd
    @property
    def requires_grad(self) -> bool:
        return self._vals.requires_grad

    @property
    def is_leaf(self) -> bool:
        return self._leaf or not self._vals.requires_grad

    @property
    def grad_fn(self):
        return None if self.is_leaf else self._vals.grad_fn

    def requires_grad_(self, requires_grad: bool = True) -> SparseTensor:
        """Make this sparse tensor a leaf whose ``.grad`` (a sparse tensor at its
        entries, coalesced) the backward passes fill."""
        flag = bool(requires_grad)
        if not self.is_leaf:
            raise GraphError("requires_grad_: only leaf sparse tensors can change requires_grad; "
                             "this one was computed from values that require grad (use "
                             ".detach().requires_grad_() for a new leaf)")
        if flag == self._leaf:
            return self
        if flag:
            check_differentiable("requires_grad_", self.dtype, f"sparse values {describe(self)}")
        self._vals = self._vals.detach()  # the same memory, a leaf of its own
        if flag:
            self._vals.requires_grad_(True)
        self._leaf = flag
        self._dense_grad = _LEAF if flag else None
        return self

    @property
    def grad(self):
        """A sparse leaf's gradient: a sparse tensor at its (coalesced) entries."""
        g = self._vals.grad if self._leaf else None
        if g is None:
            return None
        if self._coalesced:
            return SparseTensor._make(self._idx, g, self._shape, True)
        idx, first = _unique_entries(self.device.backend, self._idx, self._shape[1],
                                     return_index=True)
        # every op here gives each copy of a position that position's gradient: read one
        return SparseTensor._make(idx, _wrap(g.array[first], g.device, None, 0, False),
                                  self._shape, True)

    @grad.setter
    def grad(self, value):
        if value is not None:
            raise ArgumentTypeError(f"grad: a sparse tensor's .grad can only be reset to None, "
                                    f"got {type(value).__name__}")
        self._vals.grad = None

    def detach(self) -> SparseTensor:
        """The same entries and memory, cut from the tape."""
        return SparseTensor._make(self._idx, self._vals.detach(), self._shape, self._coalesced)

    # ------------------------------------------------------------- entries
    def coalesce(self) -> SparseTensor:
        """Entries sorted row-major, duplicates summed (differentiably). Self when
        already coalesced. >>> s.coalesce().values()"""
        if self._coalesced:
            return self
        xp = self.device.backend
        idx, inverse = _unique_entries(xp, self._idx, self._shape[1], return_inverse=True)
        vals = ops.scatter_add(self._vals, (idx.shape[1],), inverse)
        return SparseTensor._make(idx, vals, self._shape, True, self._dense_grad)

    def _indices(self) -> Tensor:
        """The (2, nnz) int64 positions, as stored (coalesced or not)."""
        return _wrap(self._idx, self.device, None, 0, False)

    def _values(self) -> Tensor:
        """The values as stored, detached (PyTorch's ``_values()`` carries no gradient)."""
        return self._vals.detach()

    def indices(self) -> Tensor:
        """The (2, nnz) int64 positions of a coalesced tensor."""
        self._need_coalesced("indices")
        return self._indices()

    def values(self) -> Tensor:
        """The values of a coalesced tensor (differentiable, the same memory)."""
        self._need_coalesced("values")
        return SparseValues.apply(self._vals) if self._vals.requires_grad else self._vals

    def _need_coalesced(self, op):
        if not self._coalesced:
            raise GraphError(f"{op}: cannot read the {op} of an uncoalesced sparse tensor "
                             f"{describe(self)} (as in PyTorch); call .coalesce() first, or "
                             f"._{op}() for them as stored")

    def to_dense(self, dtype=None) -> Tensor:
        """The dense tensor (duplicates summed); the gradient reaches the values at their
        entries. >>> s.to_dense()"""
        s = self if dtype is None else self.to(dtype)
        return ops.scatter_add(s._vals, s._shape, (s._idx[0], s._idx[1]))

    def t(self) -> SparseTensor:
        """The transpose (its entries no longer row-major: not coalesced, as in PyTorch)."""
        return SparseTensor._make(self._idx[::-1], _alias(self._vals), self._shape[::-1],
                                  False, self._dense_grad)

    # -------------------------------------------------------------- devices
    def to(self, *args, device=None, dtype=None, non_blocking=False, copy=False):
        """``s.to(device)``, ``s.to(dtype)``, ``s.to(device, dtype)``, ``s.to(other)``;
        differentiable; self if nothing changes."""
        if len(args) > 2:
            raise ArgumentError(f"to: at most a device and a dtype, got {args!r}")
        for a in args:
            if isinstance(a, (Tensor, SparseTensor)):
                device, dtype = a.device, a.dtype
            elif _is_device(a):
                device = a
            else:
                dtype = a
        dev = self.device if device is None else get_device(device)
        vals, idx = self._vals, self._idx
        if dtype is not None and as_dtype(dtype, "to") != vals.dtype:
            vals = vals.to(dtype)
        if dev is not vals.device:
            vals, idx = vals.to(dev), dev.put(idx)
        if vals is self._vals and not copy:
            return self
        if vals is self._vals:
            vals = vals.clone()
        return SparseTensor._make(idx, vals, self._shape, self._coalesced, self._dense_grad)

    def cpu(self) -> SparseTensor:
        return self.to(cpu)

    def cuda(self, device=None, non_blocking=False) -> SparseTensor:
        """On a GPU: ``s.cuda()`` (GPU 0), ``s.cuda(1)``, ``s.cuda("cuda:1")``."""
        return self.to(f"cuda:{device or 0}" if device is None or isinstance(device, int)
                       else device)

    def float(self) -> SparseTensor:
        return self.to(np.float32)

    def double(self) -> SparseTensor:
        return self.to(np.float64)

    # ------------------------------------------------------------- products
    def mm(self, mat2) -> Tensor:
        """``torch.mm(self, mat2)``: (m, k) sparse @ (k, n) dense -> (m, n) dense."""
        return _multiply("mm", self, mat2, vectors=False, at_entries=False)

    def matmul(self, other) -> Tensor:
        return matmul(self, other)

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    # scaling by a number keeps the entries (PyTorch's result is sparse too)
    def __mul__(self, other):
        return self._scaled("*", other, lambda v: v * other)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return self._scaled("/", other, lambda v: v / other)

    def __neg__(self):
        return self._scaled("-", -1, lambda v: -v)

    def _scaled(self, op, number, fn):
        if not isinstance(number, numbers.Number):
            raise ArgumentTypeError(
                f"{op}: a sparse tensor {describe(self)} can be scaled by a number only, got "
                f"{describe(number)} (PyTorch has more elementwise sparse math); apply it to "
                "the values, tapegrad.sparse_coo_tensor(s.indices(), f(s.values()), s.shape) "
                "for a coalesced s, or to s.to_dense()")
        return SparseTensor._make(self._idx, fn(self._vals), self._shape, self._coalesced,
                                  self._dense_grad)

    def __repr__(self):
        """PyTorch's layout: ``tensor(indices=..., values=..., size=..., nnz=...)``."""
        host = self.device.host
        ind = tensor_repr(host(self._idx), np.dtype(np.int64), [])
        val = tensor_repr(host(self._vals.array), self.dtype, [])
        tail = [f"size={self._shape}", f"nnz={self._nnz()}"]
        if self.dtype not in (get_default_dtype(), np.dtype(np.int64), np.dtype(bool)):
            tail.append(f"dtype={self.dtype}")
        tail.append("layout=sparse_coo")
        if self.device is not cpu:
            tail.append(f"device='{self.device}'")
        if self.grad_fn is not None:
            tail.append(f"grad_fn=<{self.grad_fn.name}>")
        elif self.requires_grad:
            tail.append("requires_grad=True")
        return ("tensor(indices=" + ind.replace("\n", "\n" + " " * 15) + ",\n       values="
                + val.replace("\n", "\n" + " " * 14) + ",\n       " + ", ".join(tail) + ")")


def _refuse(name, inplace):
    def method(self, *args, **kwargs):
        if inplace:
            raise ArgumentTypeError(f"{name}: in-place math on a sparse tensor {describe(self)} "
                                    "is not supported in tapegrad; write s = s * 2 (a new one)")
        raise ArgumentTypeError(
            f"{name}: elementwise math on a sparse tensor {describe(self)} is not supported in "
            "tapegrad (PyTorch has it) beyond scaling by a number; apply it to the values, "
            "tapegrad.sparse_coo_tensor(s.indices(), f(s.values()), s.shape) for a coalesced "
            "s, or to s.to_dense()")

    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__rtruediv__", "__pow__",
              "__rpow__"):
    setattr(SparseTensor, _name, _refuse(_name, False))
for _name in ("__iadd__", "__isub__", "__imul__", "__itruediv__"):
    setattr(SparseTensor, _name, _refuse(_name, True))


def _alias(values):
    """``values`` for a derived sparse tensor: a recorded view when they require grad (the
    result then has a ``grad_fn`` of its own), else themselves."""
    return SparseValues.apply(values) if values.requires_grad and is_grad_enabled() else values


def _unique_entries(xp, idx, ncols, **kw):
    """The sorted unique positions of ``idx`` as a (2, u) array, and what ``kw`` asks of
    ``xp.unique`` (the first copy of each, or each entry's place among them)."""
    key = idx[0] * ncols + idx[1]  # row-major order; the size check keeps it within int64
    uniq, extra = xp.unique(key, **kw)
    if ncols == 0:  # then there are no entries
        return idx, extra
    return xp.stack([uniq // ncols, uniq % ncols]), extra


def _axis(op, dim):
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
        raise ArgumentTypeError(f"{op}: dim must be an int, got {dim!r}")
    if not -2 <= dim < 2:
        raise ArgumentError(f"{op}: dim {dim} is out of range for a 2-D sparse tensor "
                            "(expected -2..1)")
    return int(dim) % 2


# ------------------------------------------------------------------ constructors

def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None,
                      requires_grad=False, is_coalesced=None, check_invariants=None):
    """``torch.sparse_coo_tensor``: a 2-D sparse tensor with ``values[j]`` at
    ``(indices[0, j], indices[1, j])``; repeated positions add up (``coalesce()``). The
    ``size`` defaults to the largest indices plus one; indices are always checked against
    it (``check_invariants`` is accepted for PyTorch's signature). Values that require
    grad get their gradient through every op, at their entries; ``requires_grad=True``
    makes a sparse leaf instead.

    >>> i = tapegrad.tensor([[0, 1, 1], [2, 0, 2]])
    >>> s = tapegrad.sparse_coo_tensor(i, tapegrad.tensor([3.0, 4.0, 5.0]), (2, 3))
    """
    op = "sparse_coo_tensor"
    vals = _values_tensor(op, values, dtype, device)
    idx = _index_array(op, indices, vals.device)
    if idx.shape[1] != vals.shape[0]:
        raise ShapeError(f"{op}: indices {describe(idx)} and values {describe(vals)} must have "
                         f"the same number of entries (nnz), got {idx.shape[1]} and "
                         f"{vals.shape[0]}")
    shape = _size(op, size, idx)
    if is_coalesced:
        key = idx[0] * shape[1] + idx[1]
        if not bool((key[1:] > key[:-1]).all()):
            raise ArgumentError(f"{op}: is_coalesced=True, but the indices are not sorted "
                                "row-major without repeats; leave is_coalesced out and call "
                                ".coalesce()")
    coalesced = bool(is_coalesced) if is_coalesced is not None else idx.shape[1] <= 1
    s = SparseTensor._make(idx, _alias(vals), shape, coalesced)
    if requires_grad and not s.requires_grad:
        s.requires_grad_(True)
    return s


def _values_tensor(op, values, dtype, device):
    if isinstance(values, SparseTensor):
        raise ArgumentTypeError(f"{op}: values must be a dense 1-D tensor, got a sparse one")
    if isinstance(values, Tensor):
        vals = values
        if dtype is not None and as_dtype(dtype, op) != vals.dtype:
            vals = vals.to(dtype)
        if device is not None and get_device(device) is not vals.device:
            vals = vals.to(get_device(device))
    else:
        vals = tensor(values, dtype=dtype, device=device if device is not None else "cpu")
    if vals.ndim != 1:
        raise ShapeError(f"{op}: values must be 1-D, one per entry, got {describe(vals)}; "
                         "tapegrad's sparse tensors have scalar entries (PyTorch's hybrid "
                         "tensors, with values of more axes, are not supported)")
    return vals


def _index_array(op, indices, device):
    if isinstance(indices, SparseTensor):
        raise ArgumentTypeError(f"{op}: indices must be a dense (2, nnz) integer tensor")
    raw = indices.array if isinstance(indices, Tensor) else indices
    dt = getattr(raw, "dtype", None)
    if dt is None:  # a list: on the host first
        raw = np.asarray(raw)
        dt = raw.dtype
    if dt.kind not in "iu" and not (dt.kind == "f" and raw.size == 0):  # [[], []] is float
        raise DTypeError(f"{op}: indices must be integers, got {describe(raw)}; cast them "
                         "first, e.g. indices.long()")
    if raw.ndim != 2 or raw.shape[0] != 2:
        raise ShapeError(f"{op}: indices must be (2, nnz), one row and one column index per "
                         f"entry, got {describe(raw)}; tapegrad's sparse tensors are 2-D "
                         "(PyTorch's of other sizes are not supported)")
    return device.put(raw).astype(np.int64)


def _size(op, size, idx):
    nnz = idx.shape[1]
    if nnz and int(idx.min()) < 0:
        raise ArgumentError(f"{op}: indices must be >= 0, got {int(idx.min())}")
    if size is None:  # PyTorch's inference: the largest index plus one
        shape = tuple(int(idx[d].max()) + 1 if nnz else 0 for d in range(2))
    else:
        try:
            shape = tuple(size)
        except TypeError:
            raise ArgumentTypeError(f"{op}: size must be a sequence of 2 ints, got "
                                    f"{size!r}") from None
        if len(shape) != 2:
            raise ShapeError(f"{op}: size must have 2 axes, got {shape}; tapegrad's sparse "
                             "tensors are 2-D (PyTorch's of other sizes are not supported)")
        if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) for n in shape):
            raise ArgumentTypeError(f"{op}: size must be 2 ints, got {shape!r}")
        shape = (int(shape[0]), int(shape[1]))
    if builtins.min(shape) < 0 or shape[0] * shape[1] >= 2**63:
        raise ShapeError(f"{op}: size {shape} must be >= 0, with fewer than 2**63 elements")
    for d, what in enumerate(("row", "column")):
        high = int(idx[d].max()) if nnz else -1
        if high >= shape[d]:
            raise ArgumentError(
                f"{op}: {what} indices must be in [0, {shape[d]}) for size {shape}, got "
                f"{high}; PyTorch only checks this with check_invariants=True (memory errors "
                "otherwise)")
    return shape


def to_sparse(x, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
    """``Tensor.to_sparse()``: the nonzero entries of a 2-D tensor (NaN counts as nonzero),
    coalesced. The gradient reaches ``x`` at those entries (through ``tapegrad.sparse.mm``,
    ``to_dense``, ``values()``, as in PyTorch)."""
    op = "to_sparse"
    if layout is not None and str(layout).rsplit(".", 1)[-1] != "sparse_coo" or \
            blocksize is not None:
        raise ArgumentError(f"{op}: only the COO layout is supported in tapegrad, got "
                            f"layout={layout!r}, blocksize={blocksize!r} (PyTorch also has "
                            "CSR, CSC, BSR and BSC)")
    if not isinstance(x, Tensor) or x.ndim != 2 or sparse_dim not in (None, 2) or \
            dense_dim not in (None, 0):
        raise ShapeError(f"{op}: tapegrad's sparse tensors are 2-D with scalar entries: "
                         f"needs a 2-D tensor and sparse_dim 2 (or None), dense_dim 0 (or "
                         f"None), got {describe(x)}, sparse_dim={sparse_dim!r}, "
                         f"dense_dim={dense_dim!r}")
    xp = x.device.xp
    rows, cols = xp.nonzero(x.array)
    idx = xp.stack([rows, cols]).astype(np.int64)
    if x.requires_grad and is_grad_enabled():
        return SparseTensor._make(idx, ops.getitem(x, (rows, cols)), x.shape, True, _TO_SPARSE)
    return SparseTensor._make(idx, _wrap(x.array[rows, cols], x.device, None, 0, False),
                              x.shape, True)


# ------------------------------------------------------------------ products

def _multiply(op, a, b, *, vectors, at_entries):
    """``a @ b`` for a sparse ``a`` and a dense ``b`` (2-D, or 1-D where ``vectors``);
    ``at_entries``: torch.sparse.mm's gradient rule, which reaches every source of values
    at their entries (mm/matmul give some a dense gradient, refused below)."""
    if not isinstance(a, SparseTensor):
        if isinstance(b, SparseTensor):
            raise ArgumentTypeError(
                f"{op}: dense @ sparse ({describe(a)} @ sparse {describe(b)}) is not supported "
                "in tapegrad (PyTorch has it); write it as (s.t() @ d.t()).t()")
        raise ArgumentTypeError(f"{op}: expects a sparse first operand, got {describe(a)}")
    if isinstance(b, SparseTensor):
        raise ArgumentTypeError(f"{op}: sparse @ sparse ({describe(a)} and {describe(b)}) is "
                                "not supported in tapegrad (PyTorch has it); multiply by the "
                                "second one's .to_dense()")
    if not isinstance(b, Tensor):
        raise ArgumentTypeError(f"{op}: expects a dense tapegrad Tensor as the second operand, "
                                f"got {type(b).__name__}; wrap it with tapegrad.tensor(...)")
    if b.ndim != 2 and not (vectors and b.ndim == 1):
        raise ShapeError(f"{op}: sparse {describe(a)} times {describe(b)}: the dense operand "
                         f"must be 2-D{' or 1-D' if vectors else ''} (products with a batch "
                         "of matrices are not supported)")
    if b.shape[0] != a.shape[1]:
        raise ShapeError(f"{op}: sparse {describe(a)} and {describe(b)} cannot be multiplied "
                         f"(inner sizes {a.shape[1]} and {b.shape[0]} differ)")
    if a.dtype != b.dtype:
        raise DTypeError(f"{op}: expects operands of one dtype, got sparse {describe(a)} and "
                         f"{describe(b)}; cast one with .to(...)")
    if a.dtype.kind == "b":
        raise DTypeError(f"{op}: bool sparse products are not supported (nor in PyTorch), got "
                         f"{describe(a)}; cast first, e.g. s.float()")
    if not at_entries and a._dense_grad is not None and a.requires_grad and is_grad_enabled():
        raise GraphError(
            f"{op}: the sparse operand {describe(a)} comes from {a._dense_grad}, which "
            f"PyTorch's {op} gives a dense gradient (every position, not only the entries); "
            "tapegrad gives gradients at the entries only. Use tapegrad.sparse.mm (as "
            "torch.sparse.mm: at the entries), or detach the sparse operand")
    return SpMM.apply(a._vals, b, pattern=a._pattern())


def matmul(a, b):
    """``a @ b`` with a sparse ``a`` (what ``tapegrad.matmul`` and ``@`` call for one):
    the dense operand 2-D or 1-D. >>> adj @ x"""
    return _multiply("matmul", a, b, vectors=True, at_entries=False)


def spmm(input, mat2):
    """``torch.spmm``: sparse (m, k) @ dense (k, n) -> dense (m, n); two dense
    operands are ``tapegrad.mm``'s. >>> tapegrad.spmm(adj, x @ w)"""
    if isinstance(input, SparseTensor) or isinstance(mat2, SparseTensor):
        return _multiply("spmm", input, mat2, vectors=False, at_entries=False)
    return dense_mm(input, mat2)


def mm(mat1, mat2, reduce=None):
    """``torch.sparse.mm``: sparse (m, k) @ dense (k, n) -> dense (m, n), the sparse
    operand's gradient at its entries only (also for a sparse leaf and ``x.to_sparse()``).
    Two dense operands are ``tapegrad.mm``'s. >>> tapegrad.sparse.mm(adj, h)"""
    if reduce not in (None, "sum"):
        raise ArgumentError(f"sparse.mm: reduce={reduce!r} is not supported in tapegrad "
                            "(PyTorch has 'mean', 'amax', 'amin' for CSR); the sum is "
                            "reduce=None")
    if isinstance(mat1, SparseTensor) or isinstance(mat2, SparseTensor):
        return _multiply("sparse.mm", mat1, mat2, vectors=False, at_entries=True)
    return dense_mm(mat1, mat2)


# ------------------------------------------------------------------ reductions

def _sparse_input(op, s):
    if not isinstance(s, SparseTensor):
        raise ArgumentTypeError(f"{op}: expects a sparse tensor, got {describe(s)}; make one "
                                "with x.to_sparse() or tapegrad.sparse_coo_tensor")
    return s


def _sum(input, dim=None, dtype=None):
    """``torch.sparse.sum``: the sum of all entries as a 0-d dense tensor (over both axes
    with ``dim``), integers in int64 as ``torch.sum``. The sum over one axis (a 1-D sparse
    tensor in PyTorch) is refused. >>> tapegrad.sparse.sum(s)"""
    s = _sparse_input("sparse.sum", input)
    if dim is not None:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        axes = [_axis("sparse.sum", d) for d in dims]
        if len(set(axes)) != len(axes):
            raise ArgumentError(f"sparse.sum: dim {tuple(dims)} names an axis twice")
        if set(axes) != {0, 1}:
            raise ArgumentError(
                f"sparse.sum: the sum over axis {axes[0]} alone is a 1-D sparse tensor in "
                "PyTorch, and tapegrad's sparse tensors are 2-D; sum both axes, or use "
                f"s.to_dense().sum({axes[0]}) for the dense result")
    vals = s._vals if dtype is None else s._vals.to(dtype)
    return vals.sum()


def softmax(input, dim, *, dtype=None):
    """``torch.sparse.softmax``: softmax along ``dim`` over the stored entries only (the
    positions without one count as -inf, and stay without one); the result is coalesced.
    >>> tapegrad.sparse.softmax(scores, 1)   # each row's entries sum to 1"""
    s = _sparse_input("sparse.softmax", input)
    d = _axis("sparse.softmax", dim)
    c = s.coalesce()
    vals = c._vals if dtype is None else c._vals.to(dtype)
    if vals.dtype.kind != "f":
        raise DTypeError(f"sparse.softmax: needs floating values, got {describe(vals)} (PyTorch "
                         "refuses them too); pass dtype=tapegrad.float32 or cast first")
    xp = c.device.backend
    group = c._idx[1 - d]  # along axis 1: each row's entries share a sum
    n = c.shape[1 - d]
    top = xp.full(n, -np.inf, dtype=vals.dtype)  # each group's largest value, a constant
    if xp.name == "cupy":
        import cupyx

        cupyx.scatter_max(top, group, vals.array)
    else:
        xp.maximum.at(top, group, vals.array)
    e = ops.exp(vals - top[group])
    out = e / ops.scatter_add(e, (n,), group)[group]
    return SparseTensor._make(c._idx, out, c.shape, True)


sum = _sum  # noqa: A001  (torch.sparse.sum)
