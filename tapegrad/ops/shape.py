"""Shape and indexing ops: views, joins, splits, padding."""

from __future__ import annotations

import numpy as np

from ..args import normalize_axes, normalize_axis, raw, torch_names
from ..device.backend import is_basic_index
from ..dtypes import fit_number, result_type
from ..errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError, describe
from ..return_types import ValuesIndices
from ..tape import Function
from ..tensor import Tensor, _wrap
from .elementwise import cast

__all__ = ["reshape", "flatten", "transpose", "permute", "swapaxes", "broadcast_to",
           "expand_dims", "squeeze", "getitem", "setitem", "concatenate", "stack", "split",
           "pad", "scatter_add", "gather", "scatter_add_along", "tril", "triu", "sort", "topk"]



class Reshape(Function):
    differentiable_twice = True
    view = True

    @staticmethod
    def forward(ctx, x, shape):
        ctx.in_shape = x.shape
        try:
            return x.reshape(shape)
        except ValueError:
            hint = ""
            if shape.count(-1) > 1:
                hint = ": only one size may be -1"
            elif -1 in shape and 0 in shape:
                hint = (": with a 0 among the sizes the -1 could be anything (PyTorch refuses "
                        "too); give every size")
            raise ShapeError(f"reshape: cannot reshape {describe(x)} ({x.size} elements) "
                             f"into {shape}{hint}") from None

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.in_shape), None



def reshape(x, shape):
    """New shape, same elements (a view when possible); one dimension may be -1.

    >>> ops.reshape(x, (2, -1))
    """
    if isinstance(shape, int):
        shape = (shape,)
    return Reshape.apply(x, tuple(shape))



@torch_names
def flatten(x, start_axis=0, end_axis=-1):
    """Merge axes ``start_axis..end_axis`` into one.

    >>> ops.flatten(x, 1)      # (N, C, H, W) -> (N, C*H*W)
    """
    shape = x.shape
    nd = len(shape)
    # a 0-d tensor flattens to (1,); it accepts axes 0 and -1, as in PyTorch
    s, e = (normalize_axis("flatten", shape, a, extra=int(nd == 0))
            for a in (start_axis, end_axis))
    if nd == 0:
        return reshape(x, (1,))
    if s > e:
        raise ShapeError(f"flatten: start_axis {start_axis} comes after end_axis {end_axis} "
                         f"for shape {tuple(shape)}")
    merged = 1
    for d in shape[s:e + 1]:
        merged *= d
    return reshape(x, tuple(shape[:s]) + (merged,) + tuple(shape[e + 1:]))



@torch_names
def expand_dims(x, axis):
    """Insert a length-1 axis at ``axis`` (PyTorch: ``unsqueeze``).

    >>> ops.expand_dims(x, 0)
    """
    shape = list(x.shape)
    shape.insert(normalize_axis("expand_dims", x.shape, axis, extra=1), 1)
    return Reshape.apply(x, tuple(shape))



@torch_names
def squeeze(x, axis=None):
    """Drop length-1 axes (all, or the given one(s)).

    >>> ops.squeeze(x, 1)
    """
    shape = x.shape
    if axis is None:
        axes = {i for i, s in enumerate(shape) if s == 1}
    else:
        axes = normalize_axes("squeeze", shape, axis)
        bad = [a for a in axes if shape[a] != 1]
        if bad:
            raise ShapeError(f"squeeze: axis {bad[0]} of shape {tuple(shape)} is not 1")
    return Reshape.apply(x, tuple(s for i, s in enumerate(shape) if i not in axes))



class Transpose(Function):
    differentiable_twice = True
    view = True

    @staticmethod
    def forward(ctx, x, axes):
        # axes: a permutation of range(x.ndim), checked by _permute
        ctx.inverse = tuple(int(a) for a in np.argsort(axes))
        return x.transpose(axes)

    @staticmethod
    def backward(ctx, g):
        return g.transpose(ctx.inverse), None



def transpose(x, axes=None):
    """Permute axes (reverse them when ``axes`` is None).

    >>> ops.transpose(x, (0, 2, 3, 1))   # NCHW -> NHWC
    """
    return _permute("transpose", x, axes)



def _permute(op, x, axes):
    shape = tuple(x.shape)
    if axes is None:
        return Transpose.apply(x, tuple(range(len(shape)))[::-1])
    axes = tuple(axes)
    if len(axes) != len(shape):
        raise ShapeError(f"{op}: axes {axes} must name each of the {len(shape)} axes of shape "
                         f"{shape} once (to exchange two axes use swapaxes)")
    return Transpose.apply(x, normalize_axes(op, shape, axes, ordered=True))



def permute(x, *axes):
    """PyTorch's name for :func:`transpose` with explicit axes.

    >>> ops.permute(x, 0, 2, 3, 1)
    """
    if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
        axes = axes[0]  # permute(x, (1, 0)) as permute(x, 1, 0); permute(v, 0) of a 1-D v
    return _permute("permute", x, axes)



def swapaxes(x, a, b):
    """Exchange two axes.

    >>> ops.swapaxes(x, -1, -2)
    """
    a, b = (normalize_axis("swapaxes", x.shape, v) for v in (a, b))
    axes = list(range(len(x.shape)))
    axes[a], axes[b] = axes[b], axes[a]
    return Transpose.apply(x, tuple(axes))



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



def broadcast_to(x, shape):
    """Broadcast to ``shape``; the gradient is summed back.

    >>> ops.broadcast_to(b, (4, 3))
    """
    return BroadcastTo.apply(x, tuple(shape))



class Unfold(Function):
    """PyTorch's ``Tensor.unfold``: every window of ``size`` elements along ``axis``,
    ``step`` apart, as a new last axis; a view (read-only where windows overlap, as
    PyTorch refuses writes into memory that several elements share)."""

    differentiable_twice = True
    view = True

    @staticmethod
    def forward(ctx, x, axis, size, step):
        # axis, size and step: checked by unfold()
        n = x.shape[axis]
        windows = (n - size) // step + 1
        ctx.in_shape = x.shape
        ctx.unfold = (axis, size, step, windows)
        shape = x.shape[:axis] + (windows,) + x.shape[axis + 1:] + (size,)
        s = x.strides
        out = _strided_view(ctx.xp, x, shape,
                            s[:axis] + (s[axis] * step,) + s[axis + 1:] + (s[axis],))
        if out is None:  # no view to be had: the same windows, gathered
            index = ctx.xp.arange(windows)[:, None] * step + ctx.xp.arange(size)
            # (..., n, ...) -> (..., windows, size, ...) -> (..., windows, ..., size)
            out = ctx.xp.moveaxis(x[(slice(None),) * axis + (index,)], axis + 1, -1)
        if step < size and windows > 1 and hasattr(out.flags, "writeable"):
            out.flags.writeable = False
        return out

    @staticmethod
    def backward(ctx, g):
        axis, size, step, windows = ctx.unfold
        lead = (slice(None),) * axis
        if ctx._graph:  # recorded: a scatter-add of the windows, whose vjp is their gather
            nd = len(ctx.in_shape)
            index = g.device.xp.arange(windows)[:, None] * step + g.device.xp.arange(size)
            # (..., windows, ..., size) -> (..., windows, size, ...)
            g = ctx.xp.transpose(g, tuple(range(axis + 1)) + (nd,) + tuple(range(axis + 1, nd)))
            return ctx.xp.scatter_add(ctx.in_shape, lead + (index,), g), None, None, None
        gx = ctx.xp.zeros(ctx.in_shape, g.dtype)
        # windows r, r + every, r + 2 * every, ... do not overlap: add each such set
        # through one strided view of gx (one pass when step >= size)
        every = -(-size // step)
        for r in range(min(every, windows)):
            part = gx[lead + (slice(r * step, None),)]
            s = part.strides
            shape = (ctx.in_shape[:axis] + (len(range(r, windows, every)),)
                     + ctx.in_shape[axis + 1:] + (size,))
            strides = s[:axis] + (s[axis] * step * every,) + s[axis + 1:] + (s[axis],)
            view = ctx.xp.lib.stride_tricks.as_strided(part, shape, strides)
            view += g[lead + (slice(r, None, every),)]
        return gx, None, None, None


def _strided_view(xp, x, shape, strides):
    """A NumPy view of ``x``'s memory with ``shape`` and byte ``strides`` whose
    ``.base`` is the array owning that memory, so the tape treats it as a view of
    ``x`` (``as_strided`` hides the owner behind a wrapper); None where there is no
    such owner (CuPy, empty arrays, memory NumPy did not allocate)."""
    if xp.name != "numpy" or x.size == 0 or 0 in shape:
        return None
    owner = x if x.base is None else x.base
    if type(owner) is not np.ndarray or not owner.flags.c_contiguous:
        return None
    offset = x.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
    out = np.ndarray(shape, x.dtype, buffer=owner, offset=offset, strides=strides)
    return out if out.base is owner else None


def _window_int(name, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ArgumentTypeError(f"unfold: {name} must be an int, got {value!r}")
    return int(value)


def unfold(x, dimension, size, step):
    """PyTorch's ``Tensor.unfold`` (``x.unfold(dimension, size, step)``): a view with
    every window of ``size`` elements along ``dimension``, ``step`` apart, as a new
    last axis; ``(n - size) // step + 1`` windows. Not in ``__all__``: ``F.unfold``
    is PyTorch's im2col, another op.

    >>> ops.shape.unfold(x, 0, 3, 2).shape      # x (7,) -> (3, 3)
    """
    dimension = _window_int("dimension", dimension)
    size, step = _window_int("size", size), _window_int("step", step)
    shape = tuple(x.shape)
    axis = normalize_axis("unfold", shape, dimension, extra=0 if shape else 1)
    if size < 0:
        raise ArgumentError(f"unfold: size is {size} but must be >= 0")
    if step <= 0:
        raise ArgumentError(f"unfold: step is {step} but must be > 0")
    n = shape[axis] if shape else 1
    if size > n:
        raise ShapeError(f"unfold: windows of size {size} do not fit dimension {axis} of "
                         f"{describe(x)} (size {n}); give a size of at most {n}")
    if not shape:  # PyTorch: a 0-d tensor unfolds as one element, to shape (size,)
        return reshape(Unfold.apply(reshape(x, (1,)), 0, size, step), (size,))
    return Unfold.apply(x, axis, size, step)



_INTP_MAX = int(np.iinfo(np.intp).max)


def check_index_range(op, xp, x, index):
    """Refuse integer index arrays outside ``[-n, n)`` of their axis before indexing:
    NumPy casts a uint64 index to intp (2**64-1 becomes -1, the last row) and CuPy
    wraps every out-of-range index, where PyTorch raises. On the host only unsigned
    64-bit arrays are checked here (NumPy checks the rest itself)."""
    items = index if isinstance(index, tuple) else (index,)
    if all(not hasattr(i, "dtype") and type(i) is not list for i in items):
        return
    items = [np.asarray(i) if type(i) is list else i for i in items]  # [2**64-1] is uint64
    host = getattr(xp, "name", None) == "numpy"

    def axes(i):  # how many of x's axes index item i consumes
        if i is None or i is Ellipsis:
            return 0
        return i.ndim if getattr(getattr(i, "dtype", None), "kind", None) == "b" else 1

    axis = 0
    for i in items:
        if i is Ellipsis:
            axis += x.ndim - sum(axes(j) for j in items)
            continue
        kind = getattr(getattr(i, "dtype", None), "kind", None)
        if kind in ("i", "u") and i.size and axis < x.ndim and (
                not host or (kind == "u" and i.dtype.itemsize == 8)):
            n = x.shape[axis]
            lo, hi = int(i.min()), int(i.max())
            if lo < -n or hi >= n or hi > _INTP_MAX:
                raise ShapeError(f"{op}: index {describe(i)} with values {lo}..{hi} does not "
                                 f"fit axis {axis} of {describe(x)} (size {n}): indices must "
                                 f"be in [-{n}, {n})")
        axis += axes(i)


class GetItem(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, index):
        ctx.in_shape = x.shape
        ctx.index = index
        check_index_range("getitem", ctx.xp, x, index)
        try:
            return x[index]
        except IndexError as exc:
            raise ShapeError(f"getitem: index {index!r} does not fit {describe(x)}: "
                             f"{exc}") from None

    @staticmethod
    def backward(ctx, g):
        # repeated advanced indices must accumulate: a scatter-add, not an assignment
        return ctx.xp.scatter_add(ctx.in_shape, ctx.index, g), None



def getitem(x, index):
    """``x[index]``: basic or advanced indexing; repeated indices accumulate in backward.

    >>> ops.getitem(x, (slice(None), [0, 0, 2]))   # x[:, [0, 0, 2]]
    """
    if is_basic_index(index):
        return _BasicGetItem.apply(x, index)
    return GetItem.apply(x, index)



class _BasicGetItem(GetItem):
    view = True  # basic indexing returns a view of x



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



def scatter_add(g, shape, index):
    """``zeros(shape)`` with ``g`` added at ``index`` (repeats accumulate).

    >>> ops.scatter_add(g, (3, 2), np.array([0, 0, 2]))
    """
    return ScatterAdd.apply(g, tuple(shape), index)



def _along(op, x, axis, index, src=None):
    """PyTorch's gather/scatter index: the open grid ``(i0, ..., index, ..., ik)``
    over ``index``'s shape, with ``index`` at ``axis`` (checked: integers, x's
    number of axes, no larger than x elsewhere, within axis ``axis``)."""
    d = normalize_axis(op, x.shape, axis)
    xp = x.device.xp
    idx = xp.asarray(raw(index))
    if idx.dtype.kind not in "iu":
        raise ArgumentError(f"{op}: index must be an integer tensor, got {describe(idx)}")
    if idx.ndim != x.ndim or any(i > n for k, (i, n) in enumerate(zip(idx.shape, x.shape))
                                 if k != d):
        raise ShapeError(f"{op}: index {describe(idx)} must have the {x.ndim} axes of "
                         f"{describe(x)} and be no larger on every axis but {d}")
    if src is not None and (src.ndim != x.ndim or
                            any(i > n for i, n in zip(idx.shape, src.shape))):
        raise ShapeError(f"{op}: src {describe(src)} must have the axes of index "
                         f"{describe(idx)} and be no smaller on any")
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= x.shape[d]):
        raise ArgumentError(f"{op}: index values must be in [0, {x.shape[d]}) for axis {d} of "
                            f"{describe(x)}, got {int(idx.min())}..{int(idx.max())}")
    nd = idx.ndim
    grid = [xp.arange(n).reshape((1,) * k + (n,) + (1,) * (nd - k - 1))
            for k, n in enumerate(idx.shape)]
    grid[d] = idx
    return tuple(grid)



@torch_names
def gather(x, axis, index):
    """PyTorch's ``torch.gather(x, dim, index)``: ``out[i][j] = x[index[i][j]][j]``
    for ``dim=0``; ``out`` has ``index``'s shape. The gradient scatters back
    (repeats accumulate), so it is differentiable twice.

    >>> ops.gather(logits, 1, labels.reshape(-1, 1))     # (N, C) -> (N, 1)
    """
    return GetItem.apply(x, _along("gather", x, axis, index))



@torch_names
def scatter_add_along(x, axis, index, src):
    """PyTorch's out-of-place ``torch.scatter_add(x, dim, index, src)``: a copy of
    ``x`` with ``src[i][j]`` added at ``[index[i][j]][j]`` for ``dim=0`` (the
    part of ``src`` of ``index``'s shape; repeats accumulate). ``Tensor.scatter_add``.

    >>> ops.scatter_add_along(zeros(3, 2), 0, [[0, 1], [0, 0]], ones(2, 2))
    """
    grid = _along("scatter_add_along", x, axis, index, src)
    part = tuple(slice(0, n) for n in np.broadcast_shapes(*(g.shape for g in grid)))
    return x + ScatterAdd.apply(src[part], tuple(x.shape), grid)



class SetItem(Function):
    """``out = x.copy(); out[index] = v`` (how ``x[index] = v`` is recorded)."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, index, v):
        xp = ctx.xp
        check_index_range("setitem", xp, x, index)
        out = x.copy()
        try:
            out[index] = fit_number("setitem", v, x.dtype)
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



class ViewWrite(Function):
    """PyTorch's CopySlices: ``base`` with its elements at ``flat`` (a view's flat
    C-order positions in base, of the view's shape) replaced by ``value``. How
    ``Tensor._inplace`` records a write through a view; by then base's array holds
    the result already, so forward returns it as it is."""

    differentiable_twice = True

    @staticmethod
    def forward(ctx, base, value, flat):
        xp = ctx.xp
        ctx.flat = xp.asarray(flat)
        keep = xp.ones(base.shape, dtype=bool)
        keep.reshape(-1)[ctx.flat] = False
        ctx.save_for_backward(keep)
        return base

    @staticmethod
    def backward(ctx, g):
        (keep,) = ctx.saved_tensors
        gb = ctx.xp.where(keep, g, 0) if ctx.needs_input_grad[0] else None
        gv = g.reshape(-1)[ctx.flat] if ctx.needs_input_grad[1] else None
        return gb, gv


def setitem(x, index, value):
    """Out-of-place ``x[index] = value`` (``Tensor.__setitem__`` writes it back in place).

    >>> y = ops.setitem(x, 0, 1.0)   # a copy of x with row 0 set to 1
    """
    return SetItem.apply(x, index, value)



class Concatenate(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, *xs, axis):
        try:
            out = ctx.xp.concatenate(xs, axis=axis)
        except ValueError as exc:
            raise ShapeError(f"concatenate: inputs {describe(*xs)} do not join along axis "
                             f"{axis}: {exc}") from None
        bounds = np.cumsum([0] + [x.shape[axis] for x in xs])
        ctx.slices = [(slice(None),) * axis + (slice(int(a), int(b)),)
                      for a, b in zip(bounds[:-1], bounds[1:])]
        return out

    @staticmethod
    def backward(ctx, g):
        return tuple(g[s] if need else None for s, need in zip(ctx.slices, ctx.needs_input_grad))



@torch_names
def concatenate(xs, axis=0):
    """Join along an existing axis (PyTorch: ``cat``).

    >>> ops.concatenate([a, b], axis=1)
    """
    if not xs:
        raise ArgumentError("concatenate: needs at least one tensor")
    xs = _one_dtype(xs)
    return Concatenate.apply(*xs, axis=normalize_axis("concatenate", xs[0].shape, axis))


def _one_dtype(xs):
    """``xs`` in PyTorch's result dtype of them all (``cat([int64, float32])`` is
    float32, where NumPy gives float64), the differing ones by a recorded cast."""
    dts = {getattr(x, "dtype", None) for x in xs}
    if len(dts) == 1:
        return xs
    dt = result_type(*[x if hasattr(x, "ndim") and x.ndim else _dimensioned(x) for x in xs])
    return [x if getattr(x, "dtype", None) == dt else cast(x, dt) for x in xs]


def _dimensioned(x):
    """A stand-in for a 0-d or number operand of cat/stack: they join as tensors, so
    PyTorch's number and 0-d tiers of the promotion do not apply."""
    return np.empty((1,), getattr(x, "dtype", None) or np.asarray(x).dtype)



class Stack(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, *xs, axis):
        try:
            out = ctx.xp.stack(xs, axis=axis)
        except ValueError as exc:
            raise ShapeError(f"stack: inputs {describe(*xs)} must have one shape: {exc}") from None
        ctx.slices = [(slice(None),) * axis + (i,) for i in range(len(xs))]
        return out

    @staticmethod
    def backward(ctx, g):
        return tuple(g[s] if need else None for s, need in zip(ctx.slices, ctx.needs_input_grad))



@torch_names
def stack(xs, axis=0):
    """Join along a new axis.

    >>> ops.stack([a, b], axis=0)
    """
    if not xs:
        raise ArgumentError("stack: needs at least one tensor")
    xs = _one_dtype(xs)
    return Stack.apply(*xs, axis=normalize_axis("stack", xs[0].shape, axis, extra=1))



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



@torch_names
def split(x, indices_or_sections, axis=0):
    """NumPy's split: ``n`` equal parts or cut points; returns a tuple of tensors.

    >>> left, right = ops.split(x, 2, axis=1)
    """
    ios = indices_or_sections
    if not isinstance(ios, int):
        ios = tuple(ios)
    return Split.apply(x, ios, normalize_axis("split", x.shape, axis))



class Pad(Function):
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x, pad_width, value):
        ctx.crop = tuple(slice(a, a + s) for (a, _), s in zip(pad_width, x.shape))
        return ctx.xp.pad(x, pad_width, mode="constant", constant_values=value)

    @staticmethod
    def backward(ctx, g):
        return g[ctx.crop], None, None



def _pad_pairs(pad_width, shape):
    """NumPy's ``pad_width`` for an array of ``shape`` -> one ``(before, after)`` per axis.

    As ``np.pad``: an int; ``(p,)``; ``(before, after)`` or ``((before, after),)`` for
    every axis; or one ``(before, after)`` (or ``(p,)``) per axis. Two readings that
    the old ``pad`` mixed up raise instead of guessing: a flat tuple of one int per
    axis, and, on a 2-D array, a flat ``(a, b)`` with ``a != b`` (NumPy: before/after
    on both axes; the old rule: ``a`` on axis 0 and ``b`` on axis 1).
    """
    nd = len(shape)
    where = f"for shape {tuple(shape)}"
    try:
        arr = np.asarray(pad_width)
    except ValueError:
        arr = np.asarray(0.5)  # ragged: reported as not integral below
    if arr.dtype == object or arr.dtype.kind not in "iu" or arr.ndim > 2:
        raise ArgumentError(f"pad: pad_width must be NumPy's: an int, (before, after), or one "
                            f"(before, after) per axis, got {pad_width!r} {where}")
    torch_hint = ("; for PyTorch's (left, right, top, bottom, ...) starting from the last "
                  "axis use tapegrad.nn.functional.pad")
    if arr.ndim == 1 and nd > 2 and arr.size == nd:
        pairs = ", ".join(f"({p}, {p})" for p in arr)
        raise ArgumentError(f"pad: pad_width {pad_width!r} gives one int per axis {where}; "
                            f"NumPy refuses that, give one (before, after) per axis: "
                            f"({pairs}){torch_hint}")
    if nd == 2 and arr.shape == (2,) and arr[0] != arr[1]:
        a, b = (int(v) for v in arr)
        raise ArgumentError(f"pad: pad_width {pad_width!r} is ambiguous {where}: NumPy pads "
                            f"both axes with {a} before and {b} after, (({a}, {b}), ({a}, {b})); "
                            f"one pad per axis would be (({a}, {a}), ({b}, {b})). Spell out "
                            f"the one you mean{torch_hint}")
    try:
        pairs = np.broadcast_to(arr, (nd, 2))
    except ValueError:
        raise ShapeError(f"pad: pad_width {pad_width!r} needs an int, (before, after), or one "
                         f"(before, after) per axis {where}") from None
    if (pairs < 0).any():
        raise ArgumentError(f"pad: pad_width {pad_width!r} must be non-negative {where}")
    return tuple((int(a), int(b)) for a, b in pairs)



def pad(x, pad_width, value=0.0):
    """Constant padding, NumPy's ``pad_width`` (``np.pad`` semantics): an int,
    ``(before, after)`` for every axis, or one ``(before, after)`` per axis.

    >>> ops.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)))   # (N, C, H, W) -> (N, C, H+2, W+4)
    """
    return Pad.apply(x, _pad_pairs(pad_width, x.shape), value)



class _Triangle(Function):
    """tril/triu: the kept triangle of the last two axes; the gradient is masked alike."""

    differentiable_twice = True

    @classmethod
    def forward(cls, ctx, x, diagonal):
        op = cls.__name__.lower()
        if x.ndim < 2:
            raise ShapeError(f"{op}: expects a tensor of at least 2 axes (a matrix or a batch "
                             f"of them), got {describe(x)}")
        if not isinstance(diagonal, (int, np.integer)) or isinstance(diagonal, bool):
            raise ArgumentError(f"{op}: diagonal must be an int, got {diagonal!r}")
        n, m = x.shape[-2:]
        lower = ctx.xp.tri(n, m, int(diagonal) - cls.upper, dtype=bool)
        ctx.keep = ~lower if cls.upper else lower  # (n, m): broadcasts over the batch axes
        return ctx.xp.where(ctx.keep, x, ctx.xp.zeros((), x.dtype))

    @staticmethod
    def backward(ctx, g):
        return ctx.xp.where(ctx.keep, g, 0), None


class Tril(_Triangle):
    upper = 0


def tril(x, diagonal=0):
    """PyTorch's ``torch.tril``: the lower triangle of the last two axes (on and below
    the ``diagonal``-th diagonal; 1 adds the first superdiagonal), zeros above.

    >>> ops.tril(tapegrad.ones(3, 3), -1)   # strictly lower
    """
    return Tril.apply(x, diagonal)


class Triu(_Triangle):
    upper = 1


def triu(x, diagonal=0):
    """PyTorch's ``torch.triu``: the upper triangle of the last two axes (on and above
    the ``diagonal``-th diagonal), zeros below.

    >>> ops.triu(tapegrad.ones(3, 3), 1)   # strictly upper
    """
    return Triu.apply(x, diagonal)


def _order(op, x, axis, descending):
    """Stable argsort of ``x`` along ``axis``: ties keep their order, NaN sorts as the
    largest value (first when descending), as PyTorch's CPU sort."""
    t = x if isinstance(x, Tensor) else Tensor(x)
    if t.ndim == 0:  # PyTorch: a 0-d input takes axis 0 or -1
        normalize_axis(op, t.shape, axis, extra=1)
        return t, 0, _wrap(t.device.xp.zeros((), np.int64), t.device, None, 0, False)
    d = normalize_axis(op, t.shape, axis)
    a = t.array
    if t.dtype.kind == "c":
        raise ArgumentError(f"{op}: complex tensors have no order, got {describe(a)}")
    if descending:
        # reversed, sorted stably and reversed back: descending with ties in order
        flip = (slice(None),) * d + (slice(None, None, -1),)
        idx = (t.shape[d] - 1) - t.device.xp.argsort(a[flip], axis=d, kind="stable")[flip]
    else:
        idx = t.device.xp.argsort(a, axis=d, kind="stable")
    return t, d, _wrap(idx.astype(np.int64, copy=False), t.device, None, 0, False)


@torch_names
def sort(x, axis=-1, descending=False, stable=False):
    """PyTorch's ``torch.sort``: ``(values, indices)`` along ``axis`` (``dim=``).
    Always stable (``stable=`` is accepted for PyTorch's signature); the values
    carry the gradient back to where each came from.

    >>> values, indices = ops.sort(x, dim=1, descending=True)
    """
    t, d, idx = _order("sort", x, axis, descending)
    return ValuesIndices(t if t.ndim == 0 else gather(t, d, idx), idx)


@torch_names
def topk(x, k, axis=-1, largest=True, sorted=True):
    """PyTorch's ``torch.topk``: the ``k`` largest (``largest=False``: smallest) values
    along ``axis`` (``dim=``) and their indices, largest first. Ties are taken in
    index order (PyTorch leaves their order unspecified); ``sorted=False`` returns
    the same sorted result, one of the orders PyTorch allows.

    >>> values, indices = ops.topk(scores, 5, dim=1)
    """
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
        raise ArgumentError(f"topk: k must be an int, got {k!r}")
    t, d, idx = _order("topk", x, axis, largest)
    if t.dtype.kind == "b":
        raise DTypeError(f"topk: bool input ({describe(t)}) is not supported, as in PyTorch "
                         "(whose CPU topk raises for it); cast it first, e.g. x.int()")
    n = 1 if t.ndim == 0 else t.shape[d]
    if not 0 <= k <= n:
        raise ShapeError(f"topk: k={k} is out of range for {n} elements along axis {d} of "
                         f"{describe(t)}; pass 0 <= k <= {n}")
    if t.ndim == 0:  # PyTorch returns the 0-d input for k of 0 and 1 alike
        return ValuesIndices(t, idx)
    idx = idx[(slice(None),) * d + (slice(0, int(k)),)]
    return ValuesIndices(gather(t, d, idx), idx)
