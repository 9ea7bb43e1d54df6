"""PyTorch's top-level functions whose meaning differs from :mod:`tapegrad.ops`
(``torch.max(x, 1)`` gives values and indices, ``torch.var`` is unbiased...).

Where a Tensor method holds PyTorch's semantics, the function calls it, so the
rule has one home (:mod:`tapegrad.tensor_methods`); the rest (``mm``/``bmm``/
``dot``/``outer`` shape checks, ``isnan``, ``allclose``, ``equal``,
``inference_mode``) lives here. ``tapegrad`` re-exports every name in ``__all__``.
"""

from __future__ import annotations

import functools

from . import ops
from .errors import ArgumentTypeError, DTypeError, ShapeError, describe
from .grad_mode import is_grad_enabled, set_grad_enabled
from .tensor import Tensor, _wrap

__all__ = ["max", "min", "argmax", "argmin", "var", "std", "squeeze", "unsqueeze", "transpose",
           "permute", "chunk", "split", "gather", "norm", "logsumexp", "numel", "mm", "bmm",
           "dot", "outer", "isnan", "isfinite", "isinf", "allclose", "equal", "sign", "pow",
           "inference_mode"]


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
    return _wrap(getattr(t.device.xp, op)(t.data), t.device, None, 0, False)


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
    return bool(input.device.xp.allclose(input.data, other.data, rtol=rtol, atol=atol,
                                         equal_nan=equal_nan))


def equal(input, other):
    """``torch.equal``: the same shape and the same values (NaN is never equal).
    A Python bool. >>> tapegrad.equal(a, a.clone())   # True"""
    _tensor("equal", input), _tensor("equal", other)
    if input.shape != other.shape:
        return False
    return bool((input.data == other.data).all())


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
