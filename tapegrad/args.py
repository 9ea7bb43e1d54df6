"""Argument rules shared by ops, nn and optim: each rule written once, so an op,
its layer and its optimizer accept exactly the same values and say so in the
same words. Errors name the function (``op``), the value and what to do.

* windows: :func:`pair` (kernel, stride, dilation) and :func:`padding4`::

      int p                       -> (p, p, p, p)
      (ph, pw)                    -> (ph, ph, pw, pw)      PyTorch
      (top, bottom, left, right)                           MatConvNet's asymmetric pad
      "valid" / "same"            -> PyTorch's, where the caller passes the kernel

* axes: :func:`normalize_axis` (one int) and :func:`normalize_axes` (None, an
  int or a sequence), both raising ShapeError/ArgumentError in one style;
* PyTorch's argument names: :func:`torch_names` (``dim=`` for ``axis=``, ...);
* inputs: :func:`raw`, :func:`as_tensor`, :func:`const`, :func:`check_float`,
  :func:`check_broadcasts`, :func:`as_instance_weights`, :func:`check_reduction`,
  :func:`legacy_reduction` (PyTorch's deprecated ``size_average``/``reduce``).

Device concerns (the array module, copying to the host) live in
:mod:`tapegrad.device`: ``get_array_module``, ``to_host``.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import operator
import warnings

import numpy as np

from .errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError, describe
from .tensor import Tensor

REDUCTIONS = ("mean", "sum", "none")


# ---------------------------------------------------------------- inputs

def raw(x):
    """The array of a Tensor; anything else as it is."""
    return x.array if isinstance(x, Tensor) else x


def as_tensor(x):
    """``x`` if it is a Tensor, else a new (constant) Tensor of it."""
    return x if isinstance(x, Tensor) else Tensor(x)


def const(a, xp, dtype=None):
    """A raw array on ``xp`` from a Tensor, array or list (never differentiated);
    ``None`` stays ``None``."""
    if a is None:
        return None
    if isinstance(a, Tensor):
        a = a.array
    if dtype is not None:
        return xp.asarray(a, dtype=dtype)
    return a if type(a) is xp.ndarray else xp.asarray(a)


def check_float(op, x, what="input"):
    """DTypeError unless ``x`` (Tensor or array) has a floating dtype."""
    dt = getattr(x, "dtype", None)
    if dt is None or dt.kind != "f":
        raise DTypeError(f"{op}: expected floating-point {what}, got {describe(x)}; cast it "
                         "first, e.g. x.float() or x.astype('float32')")


def broadcasts_to(shape, target) -> bool:
    """True when an array of ``shape`` broadcasts to ``target`` (unchanged)."""
    try:
        return np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


def check_broadcasts(op, name, a, target, to, hint=""):
    """ShapeError unless ``a`` broadcasts to the shape ``target``; ``to`` says
    what that shape is (``"x's shape (2, 3) float32"``), ``hint`` what to do."""
    if not broadcasts_to(a.shape, target):
        raise ShapeError(f"{op}: {name} {describe(a)} must broadcast to {to}{hint}")


def as_instance_weights(op, w, shape, xp, dtype, to):
    """MatConvNet's ``instance_weights`` for a result of ``shape`` ``(N, ...)``:
    an array in ``dtype`` that broadcasts to it, a length-N vector meaning one
    weight per image (made ``(N, 1, ..., 1)``); ``to`` names the shape in errors."""
    w = const(w, xp, dtype)
    if w.ndim == 1 and len(shape) > 1 and w.shape[0] == shape[0]:
        w = w.reshape((-1,) + (1,) * (len(shape) - 1))  # (N,) -> (N, 1, ..., 1)
    check_broadcasts(op, "instance_weights", w, shape, to)
    return w


def check_reduction(op, reduction):
    """PyTorch's loss ``reduction``: one of :data:`REDUCTIONS`."""
    if reduction not in REDUCTIONS:
        raise ArgumentError(f"{op}: reduction must be one of {REDUCTIONS}, got {reduction!r}")


def legacy_reduction(op, size_average, reduce, reduction, stacklevel=3):
    """The ``reduction`` a loss gets from PyTorch's deprecated ``size_average`` and
    ``reduce`` (torch/nn/_reduction.py ``legacy_get_string``), for its functional
    form and its layer alike. Both None: ``reduction`` as given. Otherwise they
    decide, whatever ``reduction`` says: a None one counts as True; ``reduce=False``
    gives ``"none"``, else ``size_average=False`` ``"sum"``, else ``"mean"``; with
    PyTorch's UserWarning (its words, so its warning filters apply), pointing
    ``stacklevel`` frames up (3: the caller of the function that calls this).
    Not a bool (``MSELoss("sum")``: a reduction where PyTorch has size_average):
    ArgumentTypeError.

    >>> legacy_reduction("mse_loss", None, False, "mean")   # "none", and a warning
    """
    if size_average is None and reduce is None:
        return reduction
    for name, value in (("size_average", size_average), ("reduce", reduce)):
        if value is not None and not isinstance(value, (bool, np.bool_, int, np.integer)):
            hint = (f"; for reduction={value!r} pass it by name (PyTorch's {name} comes "
                    "first)" if isinstance(value, str) else "")
            raise ArgumentTypeError(f"{op}: {name} (deprecated, PyTorch's older form of "
                                    f"reduction=) must be None or a bool, got {value!r}{hint}")
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    out = "none" if not reduce else "mean" if size_average else "sum"
    warnings.warn("size_average and reduce args will be deprecated, please use "
                  f"reduction='{out}' instead.", UserWarning, stacklevel=stacklevel)
    return out


# ---------------------------------------------------------------- windows

_PAIR = "an int or a pair (h, w)"
_PADS = "an int, (h, w) or (top, bottom, left, right)"
_PADS_STR = "an int, (h, w), (top, bottom, left, right), 'valid' or 'same'"


def _ints(op, name, value, forms):
    """An int, or a tuple of ints from a sequence. Never a bool or a float
    (``2.7`` would silently become 2): ArgumentError naming ``forms``."""
    try:
        items = tuple(value)
    except TypeError:
        items = None
    out = []
    for v in (value,) if items is None else items:
        if type(v) is not int:
            v = _as_int(v)
            if v is None:
                raise ArgumentError(f"{op}: {name} must be ints ({forms}), got {value!r}")
        out.append(v)
    return out[0] if items is None else tuple(out)


def _as_int(v):
    """``v`` as an int if it is an integer (a NumPy one too), else None (a bool
    is not an integer here, as in PyTorch's argument parser)."""
    if isinstance(v, (bool, np.bool_)):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def is_int(v) -> bool:
    """An integer (a NumPy one too), never a bool nor a float."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))


def int_at_least(op: str, name: str, value, minimum: int) -> int:
    """``value`` as an int of at least ``minimum``, else ArgumentError naming ``op``
    and ``name`` (a size, an iteration count, a number of groups).

    >>> int_at_least("LBFGS", "max_iter", 20, 1)   # 20
    """
    if not is_int(value) or value < minimum:
        raise ArgumentError(f"{op}: {name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def size_args(op, sizes):
    """``f(2, 3)`` or ``f((2, 3))`` -> ``(2, 3)``."""
    if len(sizes) == 1 and not isinstance(sizes[0], int):
        sizes = tuple(sizes[0])
    if not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in sizes):
        raise ArgumentError(f"{op}: sizes must be ints, got {sizes!r}")
    return tuple(int(s) for s in sizes)


def pair(value, name: str, op: str, minimum: int = 1) -> tuple[int, int]:
    """``3`` or ``(3, 2)`` -> ``(3, 3)`` / ``(3, 2)``, each at least ``minimum``.

    >>> pair(3, "kernel_size", "conv2d")   # (3, 3)
    """
    out = value if type(value) is int else _ints(op, name, value, _PAIR)
    if type(out) is int:
        out = (out, out)
    elif len(out) != 2:
        raise ArgumentError(f"{op}: {name} must be {_PAIR}, got {value!r}")
    if out[0] < minimum or out[1] < minimum:
        raise ArgumentError(f"{op}: {name} must be >= {minimum}, got {value!r}")
    return out


def padding4(value, op: str, kernel=None, stride=(1, 1),
             dilation=(1, 1)) -> tuple[int, int, int, int]:
    """Padding as ``(top, bottom, left, right)``; see the module docstring.

    ``"valid"`` (none) and ``"same"`` (output size = input size, stride 1
    only; an odd total puts the extra row/column at the end, as PyTorch) are
    taken only where the caller passes its ``kernel`` (and ``stride``,
    ``dilation``); without one, strings are refused.

    >>> padding4((1, 2), "conv2d")                     # (1, 1, 2, 2)
    >>> padding4("same", "conv2d", kernel=(3, 4))      # (1, 1, 1, 2)
    """
    forms = _PADS if kernel is None else _PADS_STR
    if isinstance(value, str):
        if kernel is None or value not in ("valid", "same"):
            raise ArgumentError(f"{op}: padding must be {forms}, got {value!r}")
        return _same_padding(op, value, kernel, stride, dilation)
    v = value if type(value) is int else _ints(op, "padding", value, forms)
    if type(v) is int:
        out = (v,) * 4
    elif len(v) == 2:
        out = (v[0], v[0], v[1], v[1])
    elif len(v) == 4:
        out = v
    else:
        raise ArgumentError(f"{op}: padding must be {forms}, got {value!r}")
    if min(out) < 0:
        raise ArgumentError(f"{op}: padding must be non-negative, got {value!r}")
    return out


def _same_padding(op, padding, kernel, stride, dilation):
    """PyTorch's ``"valid"`` (none) and ``"same"`` as ``(top, bottom, left, right)``."""
    if padding == "valid":
        return (0, 0, 0, 0)
    if tuple(stride) != (1, 1):
        raise ArgumentError(f"{op}: padding='same' needs stride 1 (as in PyTorch), got stride "
                            f"{tuple(stride)}; give the padding explicitly")
    th, tw = (d * (k - 1) for d, k in zip(dilation, kernel))
    return (th // 2, th - th // 2, tw // 2, tw - tw // 2)


# ---------------------------------------------------------------- axes

def _bad_axis(op, shape, a, nd, expect):
    """The error for an ``axis`` entry ``a`` that is not an int in ``[-nd, nd)``
    (``nd`` counts the new axes a caller allows), or ``a`` as an int."""
    i = _as_int(a)
    if i is None:
        why = (f"(a bool, not an axis; pass keepdims={a!r} by name)"
               if isinstance(a, (bool, np.bool_)) else f"for shape {tuple(shape)}")
        raise ArgumentError(f"{op}: axis must be {expect}, got {a!r} {why}")
    if -nd <= i < nd:
        return i
    a = i
    valid = f"valid axes: {-nd} to {nd - 1}" if nd else "a 0-d array has no axes"
    raise ShapeError(f"{op}: axis {a} is out of range for shape {tuple(shape)} ({valid})")


def normalize_axis(op, shape, axis, extra=0) -> int:
    """One ``axis`` (an int) of an input of ``shape`` as a non-negative int.

    ``extra`` new axes widen the range (``stack`` and ``expand_dims`` insert
    one; a 0-d input that takes axis 0 and -1, as in PyTorch, passes one).
    Not an int: ArgumentError; out of range: ShapeError naming ``op``, the axis
    and the shape.

    >>> normalize_axis("softmax", (2, 5), -1)   # 1
    """
    nd = len(shape) + extra
    if type(axis) is int and -nd <= axis < nd:  # the common case
        return axis % nd
    return _bad_axis(op, shape, axis, nd, "one int") % nd


def normalize_axes(op, shape, axis, ordered=False) -> tuple[int, ...]:
    """``axis`` (None: all, an int, or a sequence of ints) as a tuple of
    distinct non-negative axes of an input of ``shape``, sorted (or in the
    given order with ``ordered=True``, for a permutation).

    Each axis is checked as by :func:`normalize_axis`; a repeated axis is a
    ShapeError. A 0-d input accepts axis 0 and -1, as PyTorch does, and has
    nothing to reduce: the result is ``()``.

    >>> normalize_axes("sum", (2, 3, 4), (-1, 0))   # (0, 2)
    """
    nd = len(shape)
    if axis is None:
        return tuple(range(nd))
    if type(axis) is int and -nd <= axis < nd:  # the common case
        return (axis % nd,)
    expect = "None, an int or a tuple of ints"
    given = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = [_bad_axis(op, shape, a, nd or 1, expect) % (nd or 1) for a in given]
    if len(set(out)) != len(out):
        twice = next(a for a in out if out.count(a) > 1)
        raise ShapeError(f"{op}: axes {axis} name an axis of shape {tuple(shape)} twice "
                         f"(axis {twice}); name each axis once")
    if not nd:
        return ()
    return tuple(out) if ordered else tuple(sorted(out))



# ---------------------------------------------------------------- PyTorch's names

TORCH_NAMES = {"dim": "axis", "keepdim": "keepdims", "start_dim": "start_axis",
               "end_dim": "end_axis", "input": "x"}
"""PyTorch's keyword -> NumPy's, for every function decorated with :func:`torch_names`."""


def torch_names(fn):
    """Let ``fn`` take PyTorch's keyword names (``dim=``, ``keepdim=``,
    ``start_dim=``/``end_dim=``, ``input=``) for the NumPy ones it declares
    (``axis=``, ``keepdims=``, ...): the same meaning, so ``x.sum(dim=1,
    keepdim=True)`` is ``x.sum(axis=1, keepdims=True)``. Passing both spellings
    is an ArgumentError. A call without keywords costs one dict test."""
    params = inspect.signature(fn).parameters
    table = {t: n for t, n in TORCH_NAMES.items() if n in params and t not in params}
    if not table:
        raise ArgumentTypeError(f"torch_names: {fn.__qualname__} declares none of "
                                f"{sorted(TORCH_NAMES.values())}")

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if kwargs:
            for torch_name, name in table.items():
                if torch_name in kwargs:
                    if name in kwargs:
                        raise ArgumentError(f"{fn.__name__}: pass {torch_name}= or {name}=, not "
                                            "both (they mean the same)")
                    kwargs[name] = kwargs.pop(torch_name)
        return fn(*args, **kwargs)

    return wrapper
