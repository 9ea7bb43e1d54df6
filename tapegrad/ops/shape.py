"""Shape and indexing ops: views, joins, splits, padding."""

from __future__ import annotations

import numpy as np

from ..device.backend import is_basic_index
from ..errors import ArgumentError, ShapeError, describe
from ..tape import Function

__all__ = ["reshape", "flatten", "transpose", "permute", "swapaxes", "broadcast_to",
           "expand_dims", "squeeze", "getitem", "setitem", "concatenate", "stack", "split",
           "pad", "scatter_add"]


class Reshape(Function):
    differentiable_twice = True
    view = True

    @staticmethod
    def forward(ctx, x, shape):
        ctx.in_shape = x.shape
        try:
            return x.reshape(shape)
        except ValueError:
            raise ShapeError(f"reshape: cannot reshape {describe(x)} ({x.size} elements) "
                             f"into {shape}") from None

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.in_shape), None


class Transpose(Function):
    differentiable_twice = True
    view = True

    @staticmethod
    def forward(ctx, x, axes):
        if axes is None:
            axes = tuple(range(x.ndim))[::-1]
        if sorted(a % max(x.ndim, 1) for a in axes) != list(range(x.ndim)):
            raise ShapeError(f"transpose: axes {axes} are not a permutation of the "
                             f"{x.ndim} axes of {describe(x)}")
        ctx.inverse = tuple(np.argsort([a % x.ndim for a in axes]))
        return x.transpose(axes)

    @staticmethod
    def backward(ctx, g):
        return g.transpose(ctx.inverse), None


class BroadcastTo(Function):
    differentiable_twice = True
    view = True

    @staticmethod
    def forward(ctx, x, shape):
        try:
            return ctx.xp.broadcast_to(x, shape)
        except ValueError:
            raise ShapeError(f"broadcast_to: cannot broadcast {describe(x)} to {shape}") from None

    @staticmethod
    def backward(ctx, g):
        return g, None  # the engine sums g back to the input's shape


class GetItem(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, index):
        ctx.in_shape = x.shape
        ctx.index = index
        try:
            return x[index]
        except IndexError as exc:
            raise ShapeError(f"getitem: index {index!r} does not fit {describe(x)}: "
                             f"{exc}") from None

    @staticmethod
    def backward(ctx, g):
        # repeated advanced indices must accumulate: a scatter-add, not an assignment
        return ctx.xp.scatter_add(ctx.in_shape, ctx.index, g), None


class ScatterAdd(Function):
    """``zeros(shape)`` with ``g`` added at ``index``: the vjp of getitem,
    and an op of its own so that getitem is differentiable twice."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, g, shape, index):
        ctx.index = index
        return ctx.xp.scatter_add(shape, index, g)

    @staticmethod
    def backward(ctx, gg):
        return gg[ctx.index], None, None


class SetItem(Function):
    """``out = x.copy(); out[index] = v`` (how ``x[index] = v`` is recorded)."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, index, v):
        xp = ctx.xp
        out = x.copy()
        try:
            out[index] = v
        except (IndexError, ValueError) as exc:
            raise ShapeError(f"setitem: cannot assign {describe(v)} to index {index!r} of "
                             f"{describe(x)}: {exc}") from None
        keep = xp.ones(x.shape, dtype=bool)
        keep[index] = False
        ctx.index = index
        ctx.save_for_backward(keep)
        return out

    @staticmethod
    def backward(ctx, g):
        (keep,) = ctx.saved_tensors
        gx = ctx.xp.where(keep, g, 0) if ctx.needs_input_grad[0] else None
        gv = g[ctx.index] if ctx.needs_input_grad[2] else None
        return gx, None, gv


class Concatenate(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, *xs, axis):
        try:
            out = ctx.xp.concatenate(xs, axis=axis)
        except ValueError as exc:
            raise ShapeError(f"concatenate: inputs {describe(*xs)} do not join along axis "
                             f"{axis}: {exc}") from None
        ax = axis % out.ndim
        bounds = np.cumsum([0] + [x.shape[ax] for x in xs])
        ctx.slices = [(slice(None),) * ax + (slice(int(a), int(b)),)
                      for a, b in zip(bounds[:-1], bounds[1:])]
        return out

    @staticmethod
    def backward(ctx, g):
        return tuple(g[s] if need else None for s, need in zip(ctx.slices, ctx.needs_input_grad))


class Stack(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, *xs, axis):
        try:
            out = ctx.xp.stack(xs, axis=axis)
        except ValueError as exc:
            raise ShapeError(f"stack: inputs {describe(*xs)} must have one shape: {exc}") from None
        ax = axis % out.ndim
        ctx.slices = [(slice(None),) * ax + (i,) for i in range(len(xs))]
        return out

    @staticmethod
    def backward(ctx, g):
        return tuple(g[s] if need else None for s, need in zip(ctx.slices, ctx.needs_input_grad))


class Split(Function):
    differentiable_twice = True
    view = True

    @staticmethod
    def forward(ctx, x, sections, axis):
        try:
            outs = ctx.xp.split(x, sections, axis=axis)
        except ValueError as exc:
            raise ShapeError(f"split: cannot split {describe(x)} into {sections} along axis "
                             f"{axis}: {exc}") from None
        ctx.axis = axis
        return tuple(outs)

    @staticmethod
    def backward(ctx, *gs):
        return ctx.xp.concatenate(gs, axis=ctx.axis), None, None


class Pad(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, pad_width, value):
        ctx.crop = tuple(slice(a, a + s) for (a, _), s in zip(pad_width, x.shape))
        return ctx.xp.pad(x, pad_width, mode="constant", constant_values=value)

    @staticmethod
    def backward(ctx, g):
        return g[ctx.crop], None, None


def reshape(x, shape):
    """New shape, same elements (a view when possible); one dimension may be -1.

    >>> ops.reshape(x, (2, -1))
    """
    if isinstance(shape, int):
        shape = (shape,)
    return Reshape.apply(x, tuple(shape))


def flatten(x, start_axis=0, end_axis=-1):
    """Merge axes ``start_axis..end_axis`` into one.

    >>> ops.flatten(x, 1)      # (N, C, H, W) -> (N, C*H*W)
    """
    shape = x.shape
    nd = len(shape)
    if nd == 0:
        return reshape(x, (1,))
    s, e = start_axis % nd, end_axis % nd
    if s > e:
        raise ShapeError(f"flatten: start_axis {start_axis} comes after end_axis {end_axis} "
                         f"for shape {tuple(shape)}")
    merged = 1
    for d in shape[s:e + 1]:
        merged *= d
    return reshape(x, tuple(shape[:s]) + (merged,) + tuple(shape[e + 1:]))


def transpose(x, axes=None):
    """Permute axes (reverse them when ``axes`` is None).

    >>> ops.transpose(x, (0, 2, 3, 1))   # NCHW -> NHWC
    """
    return Transpose.apply(x, None if axes is None else tuple(axes))


def permute(x, *axes):
    """PyTorch's name for :func:`transpose` with explicit axes.

    >>> ops.permute(x, 0, 2, 3, 1)
    """
    return transpose(x, axes[0] if len(axes) == 1 else axes)


def swapaxes(x, a, b):
    """Exchange two axes.

    >>> ops.swapaxes(x, -1, -2)
    """
    nd = len(x.shape)
    axes = list(range(nd))
    axes[a % nd], axes[b % nd] = axes[b % nd], axes[a % nd]
    return Transpose.apply(x, tuple(axes))


def broadcast_to(x, shape):
    """Broadcast to ``shape``; the gradient is summed back.

    >>> ops.broadcast_to(b, (4, 3))
    """
    return BroadcastTo.apply(x, tuple(shape))


def expand_dims(x, axis):
    """Insert a length-1 axis at ``axis`` (PyTorch: ``unsqueeze``).

    >>> ops.expand_dims(x, 0)
    """
    shape = list(x.shape)
    nd = len(shape) + 1
    if not -nd <= axis < nd:
        raise ShapeError(f"expand_dims: axis {axis} out of range for shape {tuple(x.shape)}")
    shape.insert(axis % nd, 1)
    return Reshape.apply(x, tuple(shape))


def squeeze(x, axis=None):
    """Drop length-1 axes (all, or the given one(s)).

    >>> ops.squeeze(x, 1)
    """
    shape = x.shape
    if axis is None:
        axes = {i for i, s in enumerate(shape) if s == 1}
    else:
        axes = {a % len(shape) for a in ((axis,) if isinstance(axis, int) else axis)}
        bad = [a for a in axes if shape[a] != 1]
        if bad:
            raise ShapeError(f"squeeze: axis {bad[0]} of shape {tuple(shape)} is not 1")
    return Reshape.apply(x, tuple(s for i, s in enumerate(shape) if i not in axes))


def getitem(x, index):
    """``x[index]``: basic or advanced indexing; repeated indices accumulate in backward.

    >>> ops.getitem(x, (slice(None), [0, 0, 2]))   # x[:, [0, 0, 2]]
    """
    if is_basic_index(index):
        return _BasicGetItem.apply(x, index)
    return GetItem.apply(x, index)


class _BasicGetItem(GetItem):
    view = True  # basic indexing returns a view of x


def setitem(x, index, value):
    """Out-of-place ``x[index] = value`` (``Tensor.__setitem__`` writes it back in place).

    >>> y = ops.setitem(x, 0, 1.0)   # a copy of x with row 0 set to 1
    """
    return SetItem.apply(x, index, value)


def scatter_add(g, shape, index):
    """``zeros(shape)`` with ``g`` added at ``index`` (repeats accumulate).

    >>> ops.scatter_add(g, (3, 2), np.array([0, 0, 2]))
    """
    return ScatterAdd.apply(g, tuple(shape), index)


def concatenate(xs, axis=0):
    """Join along an existing axis (PyTorch: ``cat``).

    >>> ops.concatenate([a, b], axis=1)
    """
    if not xs:
        raise ArgumentError("concatenate: needs at least one tensor")
    return Concatenate.apply(*xs, axis=axis)


def stack(xs, axis=0):
    """Join along a new axis.

    >>> ops.stack([a, b], axis=0)
    """
    if not xs:
        raise ArgumentError("stack: needs at least one tensor")
    return Stack.apply(*xs, axis=axis)


def split(x, indices_or_sections, axis=0):
    """NumPy's split: ``n`` equal parts or cut points; returns a tuple of tensors.

    >>> left, right = ops.split(x, 2, axis=1)
    """
    ios = indices_or_sections
    if not isinstance(ios, int):
        ios = tuple(ios)
    return Split.apply(x, ios, axis)


def pad(x, pad_width, value=0.0):
    """Constant padding, NumPy's ``pad_width``: an int, or one (before, after) per axis.

    >>> ops.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    """
    nd = len(x.shape)
    if isinstance(pad_width, int):
        pw = ((pad_width, pad_width),) * nd
    else:
        pw = tuple((int(p), int(p)) if np.isscalar(p) else (int(p[0]), int(p[1]))
                   for p in pad_width)
    if len(pw) != nd or any(a < 0 or b < 0 for a, b in pw):
        raise ShapeError(f"pad: pad_width {pad_width} needs one non-negative (before, after) "
                         f"pair per axis of shape {tuple(x.shape)}")
    return Pad.apply(x, pw, value)
