"""Lookups by integer index: embedding tables and one-hot codes.

``embedding`` is ``weight[input]`` with PyTorch's ``F.embedding`` options; its
vjp scatters the incoming rows back into a zero table (repeated indices
accumulate), saving only the index array. ``one_hot`` records nothing.
"""

from __future__ import annotations

import numpy as np

from ..args import const
from ..errors import ArgumentError, DTypeError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor, _wrap

__all__ = ["embedding", "one_hot"]


def _indices(op, input, xp, n=None):
    """The integer index array of ``input`` (a Tensor, array or list), checked to
    lie in ``[0, n)`` when ``n`` is given (PyTorch refuses negative indices)."""
    idx = const(input, xp)
    if idx.dtype.kind not in "iu":
        raise DTypeError(f"{op}: indices must be integers, got {describe(idx)}; cast them "
                         "with .long()")
    if n is not None and idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise ArgumentError(f"{op}: indices must be in [0, {n}), got {int(idx.min())}.."
                            f"{int(idx.max())}")
    return idx


class Embedding(Function):
    """Rows of ``weight`` (V, D) at ``idx`` (...,) -> (..., D). The vjp is a
    scatter-add by a constant index (and a constant row scale), so it is
    differentiable twice."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, weight, idx, scale=None):
        ctx.idx = idx
        ctx.scale = scale
        ctx.weight_shape = weight.shape
        return weight[idx]  # (V, D)[(...)] -> (..., D)

    @staticmethod
    def backward(ctx, g):
        if ctx.scale is not None:
            g = g * ctx.scale  # (...,1): 0 at padding_idx, 1/count with scale_grad_by_freq
        return ctx.xp.scatter_add(ctx.weight_shape, ctx.idx, g), None


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """PyTorch's ``F.embedding``: ``weight[input]`` for integer ``input`` (any
    shape) and a table ``weight`` (V, D). The row ``padding_idx`` (negative
    counts from the end) gets no gradient; ``scale_grad_by_freq`` divides each
    row's gradient by how often its index occurs in ``input``. ``max_norm``
    (which renormalises ``weight`` in place) and ``sparse`` gradients are not
    implemented and raise.

    >>> ops.embedding(tapegrad.tensor([[0, 2], [1, 1]]), table)   # (2, 2) -> (2, 2, D)
    """
    op = "embedding"
    if not isinstance(weight, Tensor) or weight.ndim != 2:
        raise ShapeError(f"{op}: weight must be a 2-D Tensor (num_embeddings, embedding_dim), "
                         f"got {describe(weight)}")
    if max_norm is not None or sparse:
        raise ArgumentError(f"{op}: max_norm and sparse=True are not supported; renormalise "
                            "the table yourself (under no_grad) if you need max_norm")
    v = weight.shape[0]
    xp = weight.device.xp
    idx = _indices(op, input, xp, v)
    keep = None
    if padding_idx is not None:
        if not isinstance(padding_idx, (int, np.integer)) or not -v <= padding_idx < v:
            raise ArgumentError(f"{op}: padding_idx must be an int in [-{v}, {v}), got "
                                f"{padding_idx!r}")
        keep = (idx != padding_idx % v)[..., None]  # (..., 1)
    if scale_grad_by_freq:
        counts = xp.bincount(idx.ravel(), minlength=v)
        per = (1.0 / counts[idx])[..., None]  # (..., 1): every index occurs at least once
        keep = per if keep is None else per * keep
    scale = None if keep is None else keep.astype(weight.dtype)
    return Embedding.apply(weight, idx, scale=scale)


def one_hot(tensor, num_classes=-1):
    """PyTorch's ``F.one_hot``: int64 codes of shape ``tensor.shape + (C,)``, with
    ``C = max + 1`` when ``num_classes`` is -1. Records nothing.

    >>> ops.one_hot(tapegrad.tensor([0, 2]), 3)    # [[1, 0, 0], [0, 0, 1]]
    """
    op = "one_hot"
    xp = tensor.device.xp if isinstance(tensor, Tensor) else np
    idx = _indices(op, tensor, xp)
    if num_classes == -1:
        if idx.size == 0:
            raise ArgumentError(f"{op}: cannot infer num_classes from an empty tensor; pass it")
        num_classes = int(idx.max()) + 1
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 0:
        raise ArgumentError(f"{op}: num_classes must be -1 or an int >= 0, got {num_classes!r}")
    _indices(op, idx, xp, int(num_classes))
    out = (idx[..., None] == xp.arange(int(num_classes))).astype(np.int64)  # (...) -> (..., C)
    device = tensor.device if isinstance(tensor, Tensor) else None
    return _wrap(out, device, None, 0, False) if device else Tensor(out)
