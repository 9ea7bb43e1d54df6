"""Tensor factories: zeros, ones, full, eye, arange, linspace, randn, rand, and
``*_like``; ``as_tensor``/``from_numpy`` wrap existing data."""

from __future__ import annotations

import numpy as np

from . import memory_formats
from .device import cpu, get_device
from .dtypes import as_dtype
from .errors import ArgumentError, ArgumentTypeError, DTypeError, ShapeError, describe
from .memory_formats import check_memory_format, contiguous_format, preserve_format
from .ops.elementwise import zero_gradient
from .random import get_generator
from .tensor import Tensor, _wrap, get_default_dtype

__all__ = ["zeros", "ones", "full", "empty", "eye", "arange", "linspace", "randn", "rand",
           "randint", "zeros_like", "ones_like", "full_like", "randn_like", "rand_like",
           "from_numpy", "as_tensor", "is_tensor", "randperm", "multinomial", "bernoulli",
           "normal", "FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor",
           "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor"]


def _shape(shape):
    if len(shape) == 1 and not isinstance(shape[0], int):
        return tuple(shape[0])
    return tuple(shape)


def _make(fill, shape, dtype, device, requires_grad):
    dev = get_device(device)
    dt = as_dtype(dtype) if dtype is not None else get_default_dtype()
    with dev.use():
        data = fill(dev.xp, _shape(shape), dt)
    t = _wrap(data, dev, None, 0, False)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _zeros(xp, s, d):
    return xp.zeros(s, d)


def _ones(xp, s, d):
    return xp.ones(s, d)


def _normal(device):
    gen = get_generator(device)
    return lambda xp, s, d: gen.standard_normal(s).astype(d, copy=False)


def _uniform(device):
    gen = get_generator(device)
    return lambda xp, s, d: gen.random(s).astype(d, copy=False)


def zeros(*shape, dtype=None, device="cpu", requires_grad=False):
    """``tapegrad.zeros(2, 3)`` or ``zeros((2, 3))``."""
    return _make(_zeros, shape, dtype, device, requires_grad)


def ones(*shape, dtype=None, device="cpu", requires_grad=False):
    return _make(_ones, shape, dtype, device, requires_grad)


def empty(*shape, dtype=None, device="cpu", requires_grad=False):
    return _make(lambda xp, s, d: xp.empty(s, d), shape, dtype, device, requires_grad)


def full(shape, value, dtype=None, device="cpu", requires_grad=False):
    """``value`` everywhere; without ``dtype``, the value's kind decides, as in
    PyTorch: bool, int64, or the default float dtype."""
    if dtype is None and isinstance(value, (bool, np.bool_)):
        dtype = np.bool_
    elif dtype is None and isinstance(value, (int, np.integer)):
        dtype = np.int64
    return _make(lambda xp, s, d: xp.full(s, value, d), (shape,) if isinstance(shape, int)
                 else tuple(shape), dtype, device, requires_grad)


def eye(n, m=None, dtype=None, device="cpu", requires_grad=False):
    """The ``n x m`` identity (``m = n`` unless given), as ``torch.eye``."""
    return _make(lambda xp, s, d: xp.eye(*s, dtype=d), (n, n if m is None else m), dtype,
                 device, requires_grad)


def arange(*args, dtype=None, device="cpu", requires_grad=False):
    """Like ``numpy.arange``; integer arguments give int64, floats the default dtype."""
    probe = np.arange(*args)
    dt = dtype if dtype is not None else (
        get_default_dtype() if probe.dtype.kind == "f" else probe.dtype)
    start, step = (args[0] if len(args) > 1 else 0), (args[2] if len(args) > 2 else 1)
    if as_dtype(dt).kind in "iub" and any(float(v) != int(v) for v in (start, step)):
        raise ArgumentError(
            f"arange{tuple(args)} with dtype {as_dtype(dt).name}: a fractional start or "
            "step has no agreed integer range (PyTorch truncates start and step, NumPy steps "
            "by the rounded difference); pass integers, or make the float range and .to() it")
    return _make(lambda xp, s, d: xp.arange(*args, dtype=d), (), dt, device, requires_grad)


def linspace(start, end, steps, dtype=None, device="cpu", requires_grad=False):
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive, as ``torch.linspace``."""
    if not isinstance(steps, (int, np.integer)) or isinstance(steps, bool) or steps < 0:
        raise ArgumentError(f"linspace: steps must be an int >= 0, got {steps!r}")
    return _make(lambda xp, s, d: xp.linspace(start, end, int(steps), dtype=d), (), dtype,
                 device, requires_grad)


def randn(*shape, dtype=None, device="cpu", requires_grad=False):
    """Standard normal samples from the global generator (see ``manual_seed``)."""
    return _make(_normal(device), shape, dtype, device, requires_grad)


def rand(*shape, dtype=None, device="cpu", requires_grad=False):
    """Uniform samples in [0, 1) from the global generator."""
    return _make(_uniform(device), shape, dtype, device, requires_grad)


def randint(*args, size=None, dtype=None, device="cpu"):
    """Integers in ``[low, high)``, PyTorch's forms: ``randint(high, size)``,
    ``randint(low, high, size)`` (or ``size=`` by keyword); int64 unless ``dtype``."""
    if size is None and args and not isinstance(args[-1], (int, np.integer)):
        *args, size = args
    if size is None or len(args) not in (1, 2):
        raise ArgumentError(f"randint: expected randint(high, size) or randint(low, high, "
                            f"size), got {len(args)} bounds and size={size!r}")
    low, high = (0, args[0]) if len(args) == 1 else args
    dt = np.dtype(np.int64 if dtype is None else as_dtype(dtype))
    if dt.kind in "biu":  # as torch: low and high - 1 must fit the dtype, else no wrapping
        top = 1 if dt.kind == "b" else np.iinfo(dt).max
        bottom = 0 if dt.kind == "b" else np.iinfo(dt).min
        if low < bottom or high - 1 > top:
            raise ArgumentError(f"randint: [{low}, {high}) does not fit {dt.name} (from "
                                f"{bottom} to {top}); PyTorch refuses it too")
    gen = get_generator(device)
    return _make(lambda xp, s, d: gen.integers(low, high, s).astype(d, copy=False),
                 (tuple(size),), dt, device, False)


def _like(who, fill, t, dtype, requires_grad, memory_format, value=None):
    """``fill(xp, shape, dtype)``'s values (or the constant ``value``) of ``t``'s shape,
    laid out as PyTorch's ``empty_like(t, memory_format=...)``: by default
    (preserve_format) dense in t's order of axes, a channels-last t's channels-last
    (:mod:`tapegrad.memory_formats`)."""
    check_memory_format(who, memory_format, t.ndim)
    fmt = preserve_format if memory_format is None else memory_format

    def laid_out(xp, shape, dt):
        out = memory_formats.empty_like(xp, t.array, fmt, dt)
        # a constant is written in memory order; samples are the C-ordered tensor's,
        # copied across (a transposing copy: 2.2 ms for 4 MB, a fill 0.3 ms)
        out[...] = fill(xp, shape, dt) if value is None else value
        return out

    c_order = fmt is contiguous_format or (
        fmt is preserve_format and memory_formats.memory_order(t.array) == list(range(t.ndim)))
    return _make(fill if c_order else laid_out, (tuple(t.shape),),
                 t.dtype if dtype is None else dtype, t.device, requires_grad)


def zeros_like(t, dtype=None, requires_grad=False, memory_format=None):
    return _like("zeros_like", _zeros, t, dtype, requires_grad, memory_format, 0)


def ones_like(t, dtype=None, requires_grad=False, memory_format=None):
    return _like("ones_like", _ones, t, dtype, requires_grad, memory_format, 1)


def full_like(t, fill_value, dtype=None, requires_grad=False, memory_format=None):
    return _like("full_like", lambda xp, s, d: xp.full(s, fill_value, d), t, dtype,
                 requires_grad, memory_format, fill_value)


def _random_like(fill, name, t, dtype, requires_grad, memory_format):
    dt = np.dtype(t.dtype if dtype is None else dtype)
    if dt.kind != "f":
        raise DTypeError(f"{name}: samples need a floating dtype, got {dt} (PyTorch refuses "
                         f"too); pass dtype=tapegrad.float32")
    return _like(name, fill(t.device), t, dt, requires_grad, memory_format)


def randn_like(t, dtype=None, requires_grad=False, memory_format=None):
    """Standard normal samples of ``t``'s shape, dtype (unless given) and device; the
    samples are those of the C-ordered tensor, whatever the layout."""
    return _random_like(_normal, "randn_like", t, dtype, requires_grad, memory_format)


def rand_like(t, dtype=None, requires_grad=False, memory_format=None):
    return _random_like(_uniform, "rand_like", t, dtype, requires_grad, memory_format)


def from_numpy(a: np.ndarray) -> Tensor:
    """A tensor sharing memory with a NumPy array (dtype kept)."""
    if not isinstance(a, np.ndarray):
        raise ArgumentTypeError(f"from_numpy: expected a numpy.ndarray, got {type(a).__name__}")
    if a.dtype.kind not in "biufc":
        raise DTypeError(f"from_numpy: dtype {a.dtype} is not supported (only bool, integer, "
                         "floating and complex data)")
    return _wrap(a, cpu, None, 0, False)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """PyTorch's: ``data`` itself when it is already a Tensor of that dtype and
    device, else a tensor of it (sharing memory with a NumPy array of the right
    dtype on the CPU, as ``torch.as_tensor``)."""
    if isinstance(data, Tensor):
        return data.to(device=device, dtype=dtype)
    dev = get_device(device if device is not None else "cpu")
    if (dev is cpu and isinstance(data, np.ndarray) and data.dtype.kind in "biufc"
            and (dtype is None or np.dtype(dtype) == data.dtype)):
        return from_numpy(data)
    return Tensor(data, dtype=dtype, device=dev)


def is_tensor(obj) -> bool:
    """True for a :class:`tapegrad.Tensor` (Parameters too)."""
    return isinstance(obj, Tensor)


# ------------------------------------------------------------------ sampling
# Samples come from tapegrad's generator of the device (tapegrad.manual_seed):
# repeatable, but not PyTorch's stream.

def randperm(n, *, dtype=None, device="cpu", requires_grad=False):
    """A random permutation of ``0 .. n-1`` (int64 unless ``dtype``).
    >>> tapegrad.randperm(5)"""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
        raise ArgumentError(f"randperm: n must be an int >= 0, got {n!r}")
    gen = get_generator(device)
    dt = np.int64 if dtype is None else dtype
    return _make(lambda xp, s, d: xp.argsort(gen.random(int(n))).astype(d, copy=False), (),
                 dt, device, requires_grad)


def _sampled(op, x, generator):
    if not isinstance(x, Tensor):
        raise ArgumentTypeError(f"{op}: expects a tapegrad Tensor, got {type(x).__name__}")
    if generator is not None:
        raise ArgumentError(f"{op}: generator= is not supported (tapegrad has one generator "
                            "per device); seed it with tapegrad.manual_seed")
    return get_generator(x.device), x.device.xp


def multinomial(input, num_samples, replacement=False, *, generator=None):
    """``num_samples`` category indices per row of ``input`` (1-D or 2-D non-negative
    weights, not necessarily summing to 1), int64; without ``replacement`` each index
    at most once per row (there must be that many nonzero weights; PyTorch's CPU
    answer then is not defined).

    >>> tapegrad.multinomial(tapegrad.tensor([0.2, 0.8]), 4, replacement=True)
    """
    gen, xp = _sampled("multinomial", input, generator)
    p = input.array
    if p.ndim not in (1, 2) or p.dtype.kind != "f":
        raise ShapeError(f"multinomial: expects 1-D or 2-D floating weights, got "
                         f"{describe(p)}")
    if not isinstance(num_samples, (int, np.integer)) or num_samples <= 0:
        raise ArgumentError(f"multinomial: num_samples must be an int > 0, got {num_samples!r}")
    rows = p.reshape(-1, p.shape[-1]).astype(np.float64)
    n, k = rows.shape[1], int(num_samples)
    if not bool(xp.isfinite(rows).all()) or bool((rows < 0).any()):
        raise ArgumentError(f"multinomial: weights must be finite and >= 0, got {describe(p)}")
    nonzero = (rows > 0).sum(axis=1)
    if bool((nonzero == 0).any()):
        raise ArgumentError("multinomial: a row of weights sums to 0")
    if not replacement and (k > n or bool((nonzero < k).any())):
        raise ArgumentError(f"multinomial: cannot draw {k} samples without replacement from "
                            f"rows with {int(nonzero.min())} nonzero weights; pass "
                            "replacement=True or fewer samples")
    if replacement:
        # inverse CDF: row r's CDF shifted by r, so one searchsorted serves all rows
        cdf = xp.cumsum(rows, axis=1)
        cdf = cdf / cdf[:, -1:]
        cdf[:, -1] = 1.0
        r = xp.arange(rows.shape[0])[:, None]
        u = gen.random((rows.shape[0], k)) + r
        idx = xp.searchsorted((cdf + r).reshape(-1), u.reshape(-1), side="right")
        idx = idx.reshape(u.shape) - r * n
        last = n - 1 - xp.argmax(rows[:, ::-1] > 0, axis=1)[:, None]  # rounding at the top
        idx = xp.minimum(idx, last)
    else:
        # Gumbel top-k: the k largest log(w) + Gumbel noise are a draw without replacement
        with np.errstate(divide="ignore"):
            keys = xp.log(rows) - xp.log(gen.standard_exponential(rows.shape))
        idx = xp.argsort(-keys, axis=1, kind="stable")[:, :k]
    idx = idx.astype(np.int64, copy=False)
    return _wrap(idx.reshape(k) if p.ndim == 1 else idx, input.device, None, 0, False)


def bernoulli(input, p=None, *, generator=None):
    """1 with probability ``input`` (or the number ``p``), else 0, in input's floating
    dtype; its gradient is 0, as PyTorch's. >>> tapegrad.bernoulli(probs)"""
    gen, xp = _sampled("bernoulli", input, generator)
    if input.dtype.kind != "f":
        raise DTypeError(f"bernoulli: expects floating probabilities, got {describe(input)}")
    prob = input.array if p is None else p
    if bool(xp.any((xp.asarray(prob) < 0) | (xp.asarray(prob) > 1))):
        raise ArgumentError(f"bernoulli: probabilities must be in [0, 1], got {describe(prob)}")
    out = _wrap((gen.random(tuple(input.shape)) < prob).astype(input.dtype), input.device,
                None, 0, False)
    return zero_gradient(out, input)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None,
           requires_grad=False):
    """``torch.normal``'s forms: ``normal(mean, std)`` with a tensor for either or both
    (their broadcast shape and dtype; the gradient to them is 0, as PyTorch's), or
    ``normal(mean, std, size)`` with two numbers (the default dtype).
    >>> tapegrad.normal(0.0, 0.02, (3, 4))"""
    tensors = [t for t in (mean, std) if isinstance(t, Tensor)]
    if generator is not None:
        raise ArgumentError("normal: generator= is not supported (tapegrad has one generator "
                            "per device); seed it with tapegrad.manual_seed")
    if not tensors:
        if size is None:
            raise ArgumentError("normal: with a number mean and std, pass size=")
        if std < 0:
            raise ArgumentError(f"normal: std must be >= 0, got {std}")
        gen = get_generator(device or "cpu")
        return _make(lambda xp, s, d: (gen.standard_normal(s) * std + mean).astype(d),
                     (tuple(size),), dtype, device or "cpu", requires_grad)
    if size is not None:
        raise ArgumentError("normal: size= only goes with a number mean and std; a tensor "
                            "mean or std gives its own shape")
    first = tensors[0]
    for t in tensors:
        if t.dtype.kind != "f" or t.dtype != first.dtype:
            raise DTypeError(f"normal: mean and std must be floating tensors of one dtype, "
                             f"got {describe(*tensors)}")
    xp = first.device.xp
    m = mean.array if isinstance(mean, Tensor) else mean
    s = std.array if isinstance(std, Tensor) else std
    if bool(xp.any(xp.asarray(s) < 0)):
        raise ArgumentError(f"normal: std must be >= 0, got {describe(s)}")
    shape = np.broadcast_shapes(*(t.shape for t in tensors))
    z = get_generator(first.device).standard_normal(shape)
    out = _wrap((z * s + m).astype(first.dtype, copy=False), first.device, None, 0, False)
    return zero_gradient(out, *tensors)


# --------------------------------------------------- legacy tensor types
class _LegacyType:
    """PyTorch's legacy constructors (``torch.FloatTensor``...): ``FloatTensor(data)`` a
    copy of ``data`` in that dtype, ``FloatTensor(2, 3)`` a tensor of that size -- of
    zeros (PyTorch's is uninitialised) -- and ``isinstance(x, FloatTensor)`` a check of
    the dtype (CPU tensors, as in PyTorch)."""

    def __init__(self, name, dtype):
        self.__name__ = self.__qualname__ = name
        self.legacy_dtype = np.dtype(dtype)

    def __repr__(self):
        return f"<class 'tapegrad.{self.__name__}'>"

    def __call__(self, *args, device=None):
        dev = "cpu" if device is None else device
        if not args:
            return zeros(0, dtype=self.legacy_dtype, device=dev)
        if all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args):
            if any(a < 0 for a in args):
                raise ArgumentError(f"{self.__name__}: sizes must be >= 0, got {args}")
            return zeros(*args, dtype=self.legacy_dtype, device=dev)
        if len(args) > 1:
            raise ArgumentTypeError(f"{self.__name__}: expects sizes (ints) or one sequence "
                                    f"of data, got {args!r}")
        data = args[0]
        if isinstance(data, Tensor) and data.dtype != self.legacy_dtype:
            raise DTypeError(f"{self.__name__}: got {describe(data)}, of another dtype "
                             f"(PyTorch refuses it too); use x.to({self.legacy_dtype.name})")
        if isinstance(data, (float, complex, bool)) or not hasattr(data, "__len__") and \
                not isinstance(data, Tensor) and not hasattr(data, "shape"):
            raise ArgumentTypeError(f"{self.__name__}: expects sizes (ints) or a sequence of "
                                    f"data, got {type(data).__name__}")
        return Tensor(data, dtype=self.legacy_dtype, device=dev)

    def __instancecheck__(self, obj):
        return isinstance(obj, Tensor) and obj.dtype == self.legacy_dtype and \
            obj.device is cpu


FloatTensor = _LegacyType("FloatTensor", np.float32)
DoubleTensor = _LegacyType("DoubleTensor", np.float64)
HalfTensor = _LegacyType("HalfTensor", np.float16)
LongTensor = _LegacyType("LongTensor", np.int64)
IntTensor = _LegacyType("IntTensor", np.int32)
ShortTensor = _LegacyType("ShortTensor", np.int16)
CharTensor = _LegacyType("CharTensor", np.int8)
ByteTensor = _LegacyType("ByteTensor", np.uint8)
BoolTensor = _LegacyType("BoolTensor", np.bool_)
