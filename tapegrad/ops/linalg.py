"""Matrix products: matmul (NumPy semantics, batched, broadcasting, 1-D
cases) and linear (Caffe's InnerProduct, PyTorch's ``F.linear``); vector
norms (``torch.linalg.vector_norm``)."""

from __future__ import annotations

import math

from ..args import torch_names
from ..device import pool
from ..dtypes import KEEP_NOT_BOOL, REFUSE, check_same_float, downcast, int_input, upcast
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function
from ..tensor import Tensor
from .reduction import normalize_axes

__all__ = ["matmul", "linear", "norm"]



class MatMul(Function):
    differentiable_twice = True
    int_inputs = KEEP_NOT_BOOL  # torch refuses bool @ bool (NumPy: a logical product)

    @staticmethod
    def forward(ctx, a, b):
        check_same_float("matmul", a, b)
        if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
            raise ShapeError(f"matmul: shapes {describe(a, b)} do not fit: the last axis of "
                             "the first must equal the second-to-last (or only) axis of the second")
        na, nb = ctx.needs_input_grad
        ctx.a_vec, ctx.b_vec = a.ndim == 1, b.ndim == 1
        ctx.save_for_backward(a if nb else None, b if na else None)
        return a @ b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        xp = ctx.xp
        # promote 1-D operands to matrices: a (k,) -> (1, k); b (k,) -> (k, 1)
        if ctx.b_vec:
            g = xp.expand_dims(g, -1)
        if ctx.a_vec:
            g = xp.expand_dims(g, -2)
        ga = gb = None
        if b is not None:
            bm = xp.expand_dims(b, -1) if ctx.b_vec else b
            ga = g @ xp.swapaxes(bm, -1, -2)  # (..., m, n) @ (..., n, k) -> (..., m, k)
            if ctx.a_vec:
                ga = ga[..., 0, :]
        if a is not None:
            am = xp.expand_dims(a, 0) if ctx.a_vec else a
            gb = xp.swapaxes(am, -1, -2) @ g  # (..., k, m) @ (..., m, n) -> (..., k, n)
            if ctx.b_vec:
                gb = gb[..., 0]
        return ga, gb  # batch axes that were broadcast are summed by the engine



def matmul(a, b):
    """Matrix product with NumPy's rules (``a @ b``): batched and broadcasting;
    1-D operands act as row/column vectors.

    >>> ops.matmul(a, b)   # a @ b
    """
    if (type(a) is not Tensor or type(b) is not Tensor) and (
            getattr(a, "is_sparse", False) or getattr(b, "is_sparse", False)):
        return (a if getattr(a, "is_sparse", False) else b)._product("matmul", a, b)
    return MatMul.apply(int_input(MatMul, a), int_input(MatMul, b))



class Linear(Function):
    differentiable_twice = True
    int_inputs = KEEP_NOT_BOOL  # as torch's F.linear

    @staticmethod
    def forward(ctx, x, w, b):
        check_same_float("linear", x, w, b)
        if w.ndim != 2 or x.ndim < 1 or x.shape[-1] != w.shape[1]:
            raise ShapeError(f"linear: input {describe(x)} and weight {describe(w)} do not fit: "
                             "weight must be (out_features, in_features) with in_features == "
                             "the input's last axis")
        if b is not None and b.shape != (w.shape[0],):
            raise ShapeError(f"linear: bias {describe(b)} must have shape ({w.shape[0]},)")
        nx, nw, _ = ctx.needs_input_grad
        ctx.save_for_backward(x if nw else None, w if nx else None)
        out = pool.matmul(x, w.T)  # (..., in) @ (in, out) -> (..., out)
        if b is not None:
            out += b
        return out

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        nx, nw, nb = ctx.needs_input_grad
        gx = pool.matmul(g, w) if nx else None  # (..., out) @ (out, in) -> (..., in)
        gw = gb = None
        if nw or nb:
            g2 = g.reshape((-1, g.shape[-1]))  # (..., out) -> (M, out)
            if nw:
                # (out, M) @ (M, in) -> (out, in)
                gw = pool.matmul(g2.T, x.reshape((-1, x.shape[-1])))
            if nb:
                gb = g2.sum(axis=0)
        return gx, gw, gb



def linear(x, weight, bias=None):
    """``x @ weight.T + bias``: Caffe's InnerProduct / PyTorch's ``F.linear``.

    ``weight`` is (out_features, in_features). >>> ops.linear(x, W, b)
    """
    x, weight, bias = (int_input(Linear, a) for a in (x, weight, bias))
    return Linear.apply(x, weight, bias)



class Norm(Function):
    """``(sum |x|**p) ** (1/p)`` over ``axes``; p = inf is the largest ``|x|``.
    The vjp is PyTorch's: 0 where the norm is 0 (not NaN); for p = inf the
    gradient is shared by the tied largest elements."""

    differentiable_twice = True
    int_inputs = REFUSE  # as torch.linalg.vector_norm

    @staticmethod
    def forward(ctx, x, p, axes, keepdims):
        xp = ctx.xp
        xa = upcast(x)  # float16 accumulates in float32
        a = xp.abs(xa)
        if p == math.inf:
            n = a.max(axis=axes, keepdims=True) if x.size else a.sum(axis=axes, keepdims=True)
        elif p == 2:
            n = xp.sqrt((xa * xa).sum(axis=axes, keepdims=True))
        elif p == 1:
            n = a.sum(axis=axes, keepdims=True)
        else:
            n = (a**p).sum(axis=axes, keepdims=True) ** (1.0 / p)
        n = downcast(n, x.dtype)
        ctx.p, ctx.axes, ctx.kshape = p, axes, n.shape
        out = n if keepdims else n.reshape(tuple(s for i, s in enumerate(n.shape)
                                                 if i not in axes))
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, g):
        x, out = ctx.saved_tensors
        xp, p = ctx.xp, ctx.p
        n = out.reshape(ctx.kshape)  # the reduced axes back as 1s, to broadcast
        g = g.reshape(ctx.kshape)
        if p == 1:
            return g * xp.sign(x), None, None, None
        if p == math.inf:
            top = xp.abs(x) == n  # ties share the gradient, as torch.linalg.vector_norm
            w = top / top.sum(axis=ctx.axes, keepdims=True)
            return g * xp.sign(x) * w, None, None, None
        safe = xp.where(n == 0, 1, n)  # a zero norm has gradient 0, not 0/0
        if p == 2:
            scale = x / safe
        else:
            # p < 1: |0|**(p - 1) is inf; PyTorch gives a zero x_j gradient 0, and the
            # 1 in its place keeps inf out of the recorded rule (sign(0) is 0)
            ax = xp.where(x == 0, 1, xp.abs(x)) if p < 1 else xp.abs(x)
            scale = xp.sign(x) * ax ** (p - 1) / safe ** (p - 1)
        return xp.where(n == 0, 0, g * scale), None, None, None



@torch_names
def norm(x, p=2, axis=None, keepdims=False):
    """Vector p-norm over ``axis`` (all axes by default), as
    ``torch.linalg.vector_norm(x, ord=p, dim=axis)``: ``p`` > 0 or ``inf``
    (``"fro"`` is 2). Computed in float32 for float16 inputs.

    >>> ops.norm(tapegrad.tensor([3.0, 4.0]))   # 5.0
    """
    if p == "fro":
        p = 2
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not (p > 0):
        raise ArgumentError(f"norm: p must be a positive number or inf (or 'fro'), got {p!r}")
    axes = normalize_axes("norm", x.shape, axis)
    return Norm.apply(int_input(Norm, x), float(p), axes, keepdims)
