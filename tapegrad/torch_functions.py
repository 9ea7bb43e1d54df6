"""PyTorch's top-level functions whose meaning differs from :mod:`tapegrad.ops`
(``torch.max(x, 1)`` gives values and indices, ``torch.var`` is unbiased...).

Where a Tensor method holds PyTorch's semantics, the function calls it, so the
rule has one home (:mod:`tapegrad.tensor_methods`); the rest (``mm``/``bmm``/
``dot``/``outer`` shape checks, ``isnan``, ``allclose``, ``equal``,
``inference_mode``) lives here. ``tapegrad`` re-exports every name in ``__all__``.
"""

from __future__ import annotations

import builtins
import functools

import numpy as np

from . import ops
from . import tensor_methods_more as _more
from .args import normalize_axis
from .errors import ArgumentTypeError, DTypeError, ShapeError, describe
from .grad_mode import is_grad_enabled, set_grad_enabled
from .ops.elementwise import zero_gradient
from .tensor import Tensor, _wrap

__all__ = ["max", "min", "argmax", "argmin", "var", "std", "squeeze", "unsqueeze", "transpose",
           "permute", "chunk", "split", "gather", "norm", "logsumexp", "numel", "mm", "bmm",
           "dot", "outer", "isnan", "isfinite", "isinf", "allclose", "equal", "sign", "pow",
           "inference_mode", "addmm", "baddbmm", "diag", "diag_embed", "flip", "roll",
           "index_select", "narrow", "nonzero", "argsort", "lerp", "median"]


def _tensor(op, x):
    if not isinstance(x, Tensor):
        raise ArgumentTypeError(f"{op}: expects a tapegrad Tensor, got {type(x).__name__}; "
                                "wrap it with tapegrad.tensor(...)")
    return x


def max(input, *args, **kwargs):  # noqa: A001
    """``torch.max``: the largest value, ``(values, indices)`` along ``dim``, or the
    elementwise maximum of two tensors. >>> values, indices = tapegrad.max(x, dim=1)"""
    return _tensor("max", input).max(*args, **kwargs)


def min(input, *args, **kwargs):  # noqa: A001
    """``torch.min``, as :func:`max`. >>> tapegrad.min(x, 0).indices"""
    return _tensor("min", input).min(*args, **kwargs)


def argmax(input, *args, **kwargs):
    """Index of the largest value (flattened without ``dim``). >>> tapegrad.argmax(x, dim=1)"""
    return _tensor("argmax", input).argmax(*args, **kwargs)


def argmin(input, *args, **kwargs):
    """Index of the smallest value. >>> tapegrad.argmin(x, 1, keepdim=True)"""
    return _tensor("argmin", input).argmin(*args, **kwargs)


def var(input, *args, **kwargs):
    """``torch.var``: unbiased unless ``unbiased=False``/``correction=0``.
    >>> tapegrad.var(x, dim=0)"""
    return _tensor("var", input).var(*args, **kwargs)


def std(input, *args, **kwargs):
    """``torch.std``: the square root of :func:`var` (unbiased). >>> tapegrad.std(x)"""
    return _tensor("std", input).std(*args, **kwargs)


def squeeze(input, *args, **kwargs):
    """``torch.squeeze``: drops the given length-1 axes (all without ``dim``), never
    raising for an axis of another length. >>> tapegrad.squeeze(x, 1)"""
    return _tensor("squeeze", input).squeeze(*args, **kwargs)


def unsqueeze(input, dim):
    """``torch.unsqueeze``: a new axis of length 1 at ``dim``. >>> tapegrad.unsqueeze(x, 0)"""
    return _tensor("unsqueeze", input).unsqueeze(dim)


def transpose(input, dim0, dim1):
    """``torch.transpose``: swaps two axes. >>> tapegrad.transpose(x, 0, 1)"""
    return _tensor("transpose", input).transpose(dim0, dim1)


def permute(input, dims):
    """``torch.permute``: axes reordered as ``dims``. >>> tapegrad.permute(x, (2, 0, 1))"""
    return _tensor("permute", input).permute(*dims)


def chunk(input, *args, **kwargs):
    """``torch.chunk``: at most ``chunks`` pieces along ``dim``. >>> tapegrad.chunk(x, 3)"""
    return _tensor("chunk", input).chunk(*args, **kwargs)


def split(tensor, *args, **kwargs):
    """``torch.split``: pieces of ``split_size`` (or of the listed sizes) along ``dim``.
    >>> tapegrad.split(x, [1, 2], dim=1)"""
    return _tensor("split", tensor).split(*args, **kwargs)


def gather(input, *args, **kwargs):
    """``torch.gather(input, dim, index)``. >>> tapegrad.gather(x, 1, labels[:, None])"""
    return _tensor("gather", input).gather(*args, **kwargs)


def norm(input, *args, **kwargs):
    """``torch.norm(input, p='fro', dim=None, keepdim=False)``: a vector p-norm.
    >>> tapegrad.norm(x, dim=1)"""
    return _tensor("norm", input).norm(*args, **kwargs)


def logsumexp(input, dim, keepdim=False):
    """``torch.logsumexp``: ``dim`` is required, as in PyTorch.
    >>> tapegrad.logsumexp(x, 1)"""
    return _tensor("logsumexp", input).logsumexp(dim, keepdim)


def numel(input):
    """The number of elements. >>> tapegrad.numel(tapegrad.ones(2, 3))   # 6"""
    return _tensor("numel", input).numel()


def _matrices(op, a, b, ndim):
    _tensor(op, a), _tensor(op, b)
    if a.ndim != ndim or b.ndim != ndim:
        raise ShapeError(f"{op}: expects two {ndim}-D tensors, got {describe(a, b)}; "
                         "use tapegrad.matmul for broadcasting products")
    if a.dtype != b.dtype:
        raise DTypeError(f"{op}: expects tensors of one dtype, got {describe(a, b)}; cast one "
                         "with .to(...)")


def mm(input, mat2):
    """``torch.mm``: the product of two matrices, (n, k) @ (k, m).
    >>> tapegrad.mm(a, b)"""
    if getattr(input, "is_sparse", False) or getattr(mat2, "is_sparse", False):
        return (input if getattr(input, "is_sparse", False) else mat2)._product("mm", input,
                                                                                 mat2)
    _matrices("mm", input, mat2, 2)
    if input.shape[1] != mat2.shape[0]:
        raise ShapeError(f"mm: {describe(input, mat2)} cannot be multiplied (inner sizes "
                         f"{input.shape[1]} and {mat2.shape[0]} differ)")
    return ops.matmul(input, mat2)


def bmm(input, mat2):
    """``torch.bmm``: batched products (b, n, k) @ (b, k, m), no broadcasting.
    >>> tapegrad.bmm(a, b)"""
    _matrices("bmm", input, mat2, 3)
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise ShapeError(f"bmm: {describe(input, mat2)} need equal batch sizes and inner sizes "
                         "(b, n, k) and (b, k, m)")
    return ops.matmul(input, mat2)


def _plus(op, product, input, beta, alpha):
    """``beta * input + alpha * product`` as PyTorch's addmm/baddbmm: ``input``
    broadcasts to the product's shape; with ``beta=0`` its values (NaN included)
    are ignored and its gradient is 0."""
    _tensor(op, input)
    if input.dtype != product.dtype:
        raise DTypeError(f"{op}: expects tensors of one dtype, got {describe(input, product)}")
    try:
        fits = np.broadcast_shapes(input.shape, product.shape) == product.shape
    except ValueError:
        fits = False
    if not fits:
        raise ShapeError(f"{op}: input {describe(input)} does not broadcast to the product's "
                         f"shape {tuple(product.shape)}")
    out = product if alpha == 1 else product * alpha
    if beta == 0:
        return zero_gradient(out, input)
    return out + (input if beta == 1 else input * beta)


def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``torch.addmm``: ``beta * input + alpha * (mat1 @ mat2)`` (``input`` broadcast).
    >>> tapegrad.addmm(bias, x, w.t())"""
    return _plus("addmm", mm(mat1, mat2), input, beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``torch.baddbmm``: ``beta * input + alpha * bmm(batch1, batch2)``.
    >>> tapegrad.baddbmm(c, a, b)"""
    return _plus("baddbmm", bmm(batch1, batch2), input, beta, alpha)


def _diagonal_positions(xp, n, k):
    """Rows and columns of the ``n`` elements of the ``k``-th diagonal."""
    i = xp.arange(n)
    return i + builtins.max(-k, 0), i + builtins.max(k, 0)


def diag(input, diagonal=0):
    """``torch.diag``: a 1-D tensor becomes a square matrix with it on the ``diagonal``-th
    diagonal; a matrix gives its ``diagonal``-th diagonal (a copy).
    >>> tapegrad.diag(tapegrad.tensor([1.0, 2.0]))   # [[1, 0], [0, 2]]"""
    x = _tensor("diag", input)
    xp, k = x.device.xp, int(diagonal)
    if x.ndim == 1:
        n = x.shape[0]
        m = n + abs(k)
        base = _wrap(xp.zeros((m, m), dtype=x.dtype), x.device, None, 0, False)
        return ops.setitem(base, _diagonal_positions(xp, n, k), x)
    if x.ndim == 2:
        rows, cols = x.shape
        n = builtins.max(0, builtins.min(rows, cols - k) if k >= 0
                         else builtins.min(rows + k, cols))
        return ops.getitem(x, _diagonal_positions(xp, n, k))
    raise ShapeError(f"diag: expects a 1-D or 2-D tensor, got {describe(x)}; for a batch use "
                     "tapegrad.diag_embed")


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """``torch.diag_embed``: the last axis of ``input`` on the ``offset``-th diagonal of
    new matrices spanning output axes ``dim1`` and ``dim2``.
    >>> tapegrad.diag_embed(x)   # (b, n) -> (b, n, n)"""
    x = _tensor("diag_embed", input)
    if x.ndim == 0:
        raise ShapeError(f"diag_embed: expects at least 1 axis, got {describe(x)}")
    xp, k, nd = x.device.xp, int(offset), x.ndim + 1
    d1, d2 = (normalize_axis("diag_embed", x.shape, d, extra=1) for d in (dim1, dim2))
    if d1 == d2:
        raise ShapeError(f"diag_embed: dim1 and dim2 name one axis ({dim1}, {dim2})")
    n = x.shape[-1]
    m = n + abs(k)
    base = _wrap(xp.zeros(x.shape[:-1] + (m, m), dtype=x.dtype), x.device, None, 0, False)
    out = ops.setitem(base, (Ellipsis,) + _diagonal_positions(xp, n, k), x)
    # (*batch, m, m) -> the two matrix axes at d1 and d2, the batch axes in order
    rest = iter(range(nd - 2))
    perm = tuple(nd - 2 if i == d1 else nd - 1 if i == d2 else next(rest) for i in range(nd))
    return out if perm == tuple(range(nd)) else ops.permute(out, *perm)


def flip(input, dims):
    """``torch.flip``: a copy reversed along ``dims``. >>> tapegrad.flip(x, [0])"""
    return _tensor("flip", input).flip(dims)


def roll(input, shifts, dims=None):
    """``torch.roll``: shifted with wrap-around. >>> tapegrad.roll(x, 1, 0)"""
    return _tensor("roll", input).roll(shifts, dims)


def index_select(input, dim, index):
    """``torch.index_select``. >>> tapegrad.index_select(x, 0, idx)"""
    return _tensor("index_select", input).index_select(dim, index)


def narrow(input, dim, start, length):
    """``torch.narrow``: a view. >>> tapegrad.narrow(x, 1, 0, 2)"""
    return _tensor("narrow", input).narrow(dim, start, length)


def nonzero(input, *, as_tuple=False):
    """``torch.nonzero``. >>> tapegrad.nonzero(mask)"""
    return _tensor("nonzero", input).nonzero(as_tuple=as_tuple)


def argsort(input, dim=-1, descending=False, *, stable=False):
    """``torch.argsort``. >>> tapegrad.argsort(x, dim=1)"""
    return _tensor("argsort", input).argsort(dim, descending, stable)


def lerp(input, end, weight):
    """``torch.lerp``: ``input + weight * (end - input)``. >>> tapegrad.lerp(a, b, 0.3)"""
    return _tensor("lerp", input).lerp(end, weight)


def median(input, *args, **kwargs):
    """``torch.median``: the lower median, or ``(values, indices)`` along ``dim``.
    >>> tapegrad.median(x, 1).values"""
    return _tensor("median", input).median(*args, **kwargs)


def dot(input, tensor):
    """``torch.dot``: the inner product of two 1-D tensors of one length and dtype.
    >>> tapegrad.dot(u, v)"""
    _matrices("dot", input, tensor, 1)
    if input.shape != tensor.shape:
        raise ShapeError(f"dot: {describe(input, tensor)} must have the same length")
    return ops.matmul(input, tensor)


def outer(input, vec2):
    """``torch.outer``: ``out[i, j] = input[i] * vec2[j]`` of two 1-D tensors.
    >>> tapegrad.outer(u, v)   # (n,), (m,) -> (n, m)"""
    _tensor("outer", input), _tensor("outer", vec2)
    if input.ndim != 1 or vec2.ndim != 1:
        raise ShapeError(f"outer: expects two 1-D tensors, got {describe(input, vec2)}")
    return input.reshape(-1, 1) * vec2.reshape(1, -1)


def _test(op, input):
    t = _tensor(op, input)
    return _wrap(getattr(t.device.xp, op)(t.array), t.device, None, 0, False)


def isnan(input):
    """Bool tensor: where ``input`` is NaN. >>> tapegrad.isnan(x).any()"""
    return _test("isnan", input)


def isfinite(input):
    """Bool tensor: where ``input`` is neither inf nor NaN. >>> tapegrad.isfinite(x)"""
    return _test("isfinite", input)


def isinf(input):
    """Bool tensor: where ``input`` is +inf or -inf. >>> tapegrad.isinf(x)"""
    return _test("isinf", input)


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """``torch.allclose``: ``|input - other| <= atol + rtol * |other|`` everywhere
    (broadcasting; one dtype, as PyTorch requires). A Python bool.
    >>> tapegrad.allclose(a, b, atol=1e-6)"""
    _tensor("allclose", input), _tensor("allclose", other)
    if input.dtype != other.dtype:
        raise DTypeError(f"allclose: expects tensors of one dtype, got {describe(input, other)}")
    return bool(input.device.xp.allclose(input.array, other.array, rtol=rtol, atol=atol,
                                         equal_nan=equal_nan))


def equal(input, other):
    """``torch.equal``: the same shape and the same values (NaN is never equal).
    A Python bool. >>> tapegrad.equal(a, a.clone())   # True"""
    _tensor("equal", input), _tensor("equal", other)
    if input.shape != other.shape:
        return False
    return bool((input.array == other.array).all())


def sign(input):
    """-1, 0 or 1 elementwise (no gradient). >>> tapegrad.sign(x)"""
    return ops.sign(input)


def pow(input, exponent):  # noqa: A001
    """``torch.pow``: ``input ** exponent``; either may be a number.
    >>> tapegrad.pow(x, 2)"""
    return ops.pow(input, exponent)


class inference_mode(set_grad_enabled):
    """``torch.inference_mode``: nothing is recorded inside it (tapegrad's
    :class:`no_grad`), as a context manager or a decorator; ``mode=False`` leaves
    grad mode as it is, as in PyTorch.

    >>> with tapegrad.inference_mode():
    ...     y = model(x)
    """

    def __init__(self, mode=True):
        self.on = bool(mode)

    def __enter__(self):
        self.prev = is_grad_enabled()
        self.mode = False if self.on else self.prev
        return super().__enter__()

    def __call__(self, func):
        on = self.on

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with inference_mode(on):
                return func(*args, **kwargs)

        return wrapper


# ------------------------------------------------ names added from a census of ported scripts
# (tests/test_tensor_methods_census.py); the rules live in tapegrad/tensor_methods_more.py.
# The binary functions take a number as either operand where torch's do.
__all__ += ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide",
            "floor_divide", "remainder", "fmod", "atan2", "logical_and", "logical_or",
            "logical_xor", "neg", "negative", "reciprocal", "square", "rsqrt", "floor", "ceil",
            "trunc", "frac", "round", "expm1", "log2", "log10", "sinh", "cosh", "asin", "acos",
            "atan", "logical_not", "nan_to_num", "masked_select", "scatter", "scatter_add",
            "index_add", "index_copy", "cumprod", "unbind", "select", "movedim", "moveaxis",
            "tile", "ger", "mv", "addcmul", "addcdiv", "diagonal", "trace", "repeat_interleave",
            "count_nonzero"]


def add(input, other, *, alpha=1):
    """``torch.add``: ``input + alpha * other``. >>> tapegrad.add(x, y, alpha=2)"""
    return _more.add(input, other, alpha=alpha)


def sub(input, other, *, alpha=1):
    """``torch.sub``: ``input - alpha * other``. >>> tapegrad.sub(x, y)"""
    return _more.sub(input, other, alpha=alpha)


subtract = sub


def mul(input, other):
    """``torch.mul``: ``input * other``. >>> tapegrad.mul(x, 2)"""
    if not isinstance(input, Tensor):
        _tensor("mul", other)
    return ops.mul(input, other)


multiply = mul


def div(input, other, *, rounding_mode=None):
    """``torch.div``: true division, or rounded with ``rounding_mode="trunc"``/``"floor"``.
    >>> tapegrad.div(x, y, rounding_mode="floor")"""
    return _more.div(input, other, rounding_mode=rounding_mode)


divide = div


def true_divide(dividend, divisor):
    """``torch.true_divide``: ``dividend / divisor`` (integers give floats)."""
    return _more.div(dividend, divisor)


def floor_divide(input, other):
    """``torch.floor_divide``: ``input // other`` (no gradient). >>> tapegrad.floor_divide(x, 3)"""
    return _more.floor_divide(input, other)


def remainder(input, other):
    """``torch.remainder``: ``input % other``, the sign of ``other``.
    >>> tapegrad.remainder(x, 2)"""
    return _more.remainder(input, other)


def fmod(input, other):
    """``torch.fmod``: C's remainder, the sign of ``input``. >>> tapegrad.fmod(x, 2)"""
    return _more.fmod(_tensor("fmod", input), other)


def atan2(input, other):
    """``torch.atan2``: the angle of ``(other, input)`` (values only).
    >>> tapegrad.atan2(y, x)"""
    return _more.atan2(input, other)


def logical_and(input, other):
    """``torch.logical_and``. >>> tapegrad.logical_and(a > 0, b > 0)"""
    return _more.logical_and(_tensor("logical_and", input), other)


def logical_or(input, other):
    """``torch.logical_or``. >>> tapegrad.logical_or(m1, m2)"""
    return _more.logical_or(_tensor("logical_or", input), other)


def logical_xor(input, other):
    """``torch.logical_xor``. >>> tapegrad.logical_xor(m1, m2)"""
    return _more.logical_xor(_tensor("logical_xor", input), other)


def _method(name, doc):
    """``torch.<name>(input)``: the Tensor method of that name (one home for the rule)."""

    def fn(input):
        return getattr(_tensor(name, input), name)()

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


neg = _method("neg", "``-input``. >>> tapegrad.neg(x)")
negative = _method("negative", "``-input``. >>> tapegrad.negative(x)")
reciprocal = _method("reciprocal", "``1 / input``. >>> tapegrad.reciprocal(x)")
square = _method("square", "``input * input``. >>> tapegrad.square(x)")
rsqrt = _method("rsqrt", "``1 / sqrt(input)``. >>> tapegrad.rsqrt(x)")
floor = _method("floor", "Rounded down; gradient 0. >>> tapegrad.floor(x)")
ceil = _method("ceil", "Rounded up; gradient 0. >>> tapegrad.ceil(x)")
trunc = _method("trunc", "Rounded toward zero; gradient 0. >>> tapegrad.trunc(x)")
frac = _method("frac", "``input - trunc(input)``. >>> tapegrad.frac(x)")
expm1 = _method("expm1", "``exp(input) - 1``, accurate near 0. >>> tapegrad.expm1(x)")
log2 = _method("log2", "Base-2 logarithm. >>> tapegrad.log2(x)")
log10 = _method("log10", "Base-10 logarithm. >>> tapegrad.log10(x)")
sinh = _method("sinh", "Hyperbolic sine. >>> tapegrad.sinh(x)")
cosh = _method("cosh", "Hyperbolic cosine. >>> tapegrad.cosh(x)")
asin = _method("asin", "Arcsine (values only). >>> tapegrad.asin(x)")
acos = _method("acos", "Arccosine (values only). >>> tapegrad.acos(x)")
atan = _method("atan", "Arctangent (values only). >>> tapegrad.atan(x)")
logical_not = _method("logical_not", "Bool: where ``input`` is 0. >>> tapegrad.logical_not(m)")
trace = _method("trace", "The sum of a matrix's diagonal. >>> tapegrad.trace(a)")


def round(input, *, decimals=0):  # noqa: A001
    """``torch.round``: half to even, to ``decimals`` places. >>> tapegrad.round(x, decimals=1)"""
    return _tensor("round", input).round(decimals)


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """``torch.nan_to_num``. >>> tapegrad.nan_to_num(x, posinf=1e4)"""
    return _tensor("nan_to_num", input).nan_to_num(nan, posinf, neginf)


def masked_select(input, mask):
    """``torch.masked_select``: a 1-D tensor. >>> tapegrad.masked_select(x, x > 0)"""
    return _tensor("masked_select", input).masked_select(mask)


def scatter(input, dim, index, src=None, *, value=None, reduce=None):
    """``torch.scatter``. >>> tapegrad.scatter(x, 1, idx, 0.0)"""
    return _tensor("scatter", input).scatter(dim, index, src, value=value, reduce=reduce)


def scatter_add(input, dim, index, src):
    """``torch.scatter_add``. >>> tapegrad.scatter_add(zeros, 0, idx, ones)"""
    return _tensor("scatter_add", input).scatter_add(dim, index, src)


def index_add(input, dim, index, source, *, alpha=1):
    """``torch.index_add``. >>> tapegrad.index_add(x, 0, idx, rows)"""
    return _tensor("index_add", input).index_add(dim, index, source, alpha=alpha)


def index_copy(input, dim, index, source):
    """``torch.index_copy``. >>> tapegrad.index_copy(x, 0, idx, rows)"""
    return _tensor("index_copy", input).index_copy(dim, index, source)


def cumprod(input, dim, *, dtype=None):
    """``torch.cumprod``: running products along ``dim``. >>> tapegrad.cumprod(x, 0)"""
    return _tensor("cumprod", input).cumprod(dim, dtype)


def unbind(input, dim=0):
    """``torch.unbind``: the slices along ``dim``. >>> a, b = tapegrad.unbind(pairs, 1)"""
    return _tensor("unbind", input).unbind(dim)


def select(input, dim, index):
    """``torch.select``: ``input[..., index, ...]``. >>> tapegrad.select(x, 0, -1)"""
    return _tensor("select", input).select(dim, index)


def movedim(input, source, destination):
    """``torch.movedim``. >>> tapegrad.movedim(x, 1, -1)"""
    return _tensor("movedim", input).movedim(source, destination)


moveaxis = movedim


def tile(input, dims):
    """``torch.tile``. >>> tapegrad.tile(x, (2, 1))"""
    return _tensor("tile", input).tile(dims)


def ger(input, vec2):
    """``torch.ger``: :func:`outer`. >>> tapegrad.ger(u, v)"""
    return outer(input, vec2)


def mv(input, vec):
    """``torch.mv``: a matrix times a vector, (n, m) @ (m,). >>> tapegrad.mv(a, v)"""
    _tensor("mv", input), _tensor("mv", vec)
    if input.ndim != 2 or vec.ndim != 1 or input.shape[1] != vec.shape[0]:
        raise ShapeError(f"mv: expects a matrix (n, m) and a vector (m,), got "
                         f"{describe(input, vec)}")
    if input.dtype != vec.dtype:
        raise DTypeError(f"mv: expects tensors of one dtype, got {describe(input, vec)}")
    return ops.matmul(input, vec)


def addcmul(input, tensor1, tensor2, *, value=1):
    """``torch.addcmul``: ``input + value * tensor1 * tensor2``."""
    return _tensor("addcmul", input).addcmul(tensor1, tensor2, value=value)


def addcdiv(input, tensor1, tensor2, *, value=1):
    """``torch.addcdiv``: ``input + value * tensor1 / tensor2``."""
    return _tensor("addcdiv", input).addcdiv(tensor1, tensor2, value=value)


def diagonal(input, offset=0, dim1=0, dim2=1):
    """``torch.diagonal``: a view. >>> tapegrad.diagonal(a, 1)"""
    return _tensor("diagonal", input).diagonal(offset, dim1, dim2)


def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """``torch.repeat_interleave``; with ``repeats`` alone (a 1-D integer tensor), the
    indices ``0, 1, ...`` each repeated that often. >>> tapegrad.repeat_interleave(x, 2)"""
    x = _tensor("repeat_interleave", input)
    if repeats is None:
        if dim is not None or x.ndim != 1:
            raise ShapeError(f"repeat_interleave: repeats alone must be a 1-D integer tensor, "
                             f"got {describe(x)}")
        index = _wrap(x.device.xp.arange(x.shape[0]), x.device, None, 0, False)
        return index.repeat_interleave(x, output_size=output_size)
    return x.repeat_interleave(repeats, dim, output_size=output_size)


def count_nonzero(input, dim=None):
    """``torch.count_nonzero``: int64. >>> tapegrad.count_nonzero(x, dim=1)"""
    return _tensor("count_nonzero", input).count_nonzero(dim)
