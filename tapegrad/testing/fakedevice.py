"""A strict stand-in for a CUDA device, so the CPU test suite proves that ops
keep to their device's array module.

CuPy refuses what leaks host NumPy into GPU code: a ``numpy.ndarray`` operand
(``TypeError: Unsupported type <class 'numpy.ndarray'>``), implicit conversion
(``np.asarray(gpu_array)``), and names CuPy does not have (``cupy.errstate``).
:func:`fake_device` gives a :class:`~tapegrad.device.Device` whose arrays
(:class:`FakeArray`, which wraps a NumPy array but is *not* an ndarray, as
``cupy.ndarray`` is not) and array module (:class:`FakeModule`, NumPy
restricted to CuPy's namespace) refuse the same things, so every op, layer
and optimizer can be run "off the host" on a machine without a GPU.

    dev = fake_device()
    x = tapegrad.tensor([1.0, 2.0], device=dev, requires_grad=True)

The device is for tests only: no ``get_device`` string names it, and the CPU
path never looks at it. Fused CUDA kernels are not run here (an op that
branches on CuPy takes its array formula, which is what the fake checks);
the kernels themselves are checked by the ``gpu`` tests on a GPU.
"""

from __future__ import annotations

import ast
import functools
import inspect
import types

import numpy as np

from ..device import Device, _register_array_type
from ..errors import TapegradError

__all__ = ["FakeArray", "FakeModule", "fake_device", "CupyTypeError", "CUPY_LACKS",
           "NDARRAY_LACKS"]

def _words(text: str) -> list[str]:
    return text.split()


# What CuPy 14 does not have of NumPy 2's namespace and of numpy.ndarray: used
# when CuPy itself is not installed (with CuPy, its own namespace decides).
CUPY_LACKS = frozenset(_words("""
    False_ ScalarType True_ asmatrix block bmat busday_count busday_offset busdaycalendar bytes_
    char character clongdouble complex256 core ctypeslib datetime64 datetime_as_string
    datetime_data dtypes einsum_path emath errstate f2py flexible float128 frompyfunc fromregex
    geomspace get_include getbufsize geterr geterrcall histogram_bin_edges info insert is_busday
    isnat little_endian longdouble ma matrix matvec memmap nanpercentile nanquantile ndenumerate
    nditer nested_iters object_ polyder polydiv polyint rec recarray record sctypeDict setbufsize
    seterr seterrcall show_runtime spacing str_ strings test timedelta64 typecodes unstack vecdot
    vecmat void
"""))
NDARRAY_LACKS = frozenset(_words("""
    __array_interface__ __array_namespace__ __array_struct__ __array_wrap__ __contains__
    __imatmul__ __index__ __setstate__ ctypes getfield resize setfield setflags to_device
"""))
_GENERATOR_HAS = frozenset(_words("""
    beta binomial chisquare dirichlet exponential f gamma geometric hypergeometric integers
    logseries poisson power random standard_exponential standard_gamma standard_normal uniform
"""))

_SCALARS = (bool, int, float, complex, np.generic)


class CupyTypeError(TapegradError, TypeError):
    """What CuPy raises as a TypeError (a host array operand, an implicit
    conversion, an argument it does not take), raised by the fake device."""


def _refuse(v):
    raise CupyTypeError(f"Unsupported type {type(v)} (the fake device refuses host arrays as "
                    "CuPy does: move it to the device first)")


def _unwrap(v):
    """The NumPy array behind ``v``; plain NumPy arrays refused, recursively."""
    if type(v) is FakeArray:
        return v._a
    if isinstance(v, np.ndarray):
        _refuse(v)
    if type(v) in (list, tuple):
        return type(v)(_unwrap(i) for i in v)
    return v


def _wrap(r):
    """NumPy results as FakeArrays (scalars as 0-d arrays, as CuPy returns)."""
    if isinstance(r, np.ndarray):
        return FakeArray(r)
    if isinstance(r, np.generic):
        return FakeArray(np.asarray(r))
    if type(r) in (list, tuple):
        return type(r)(_wrap(i) for i in r)
    return r


def _call(fn, args, kwargs):
    return _wrap(fn(*[_unwrap(a) for a in args], **{k: _unwrap(v) for k, v in kwargs.items()}))


def _strict(fn, signature=None):
    """``fn`` taking and giving FakeArrays (host arrays refused); with CuPy's
    ``signature`` of the same function, arguments CuPy does not take refused."""

    def call(*args, **kwargs):
        if signature is not None:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as exc:
                raise CupyTypeError(f"cupy.{call.__name__}: {exc} (the fake device checks calls "
                                "against CuPy's signatures)") from None
        return _call(fn, args, kwargs)

    call.__name__ = getattr(fn, "__name__", "fn")
    return call


def _operand(v):
    """A binary operator's other operand, or None where Python should try the
    other side's reflected operator (a Tensor)."""
    if type(v) is FakeArray:
        return v._a
    if isinstance(v, _SCALARS):
        return v
    if isinstance(v, np.ndarray) or type(v) in (list, tuple):
        _refuse(v)
    return None


def _binary(name):
    def op(self, other):
        o = _operand(other)
        if o is None:
            return NotImplemented
        return _wrap(getattr(self._a, name)(o))

    op.__name__ = name
    return op


def _inplace(name):
    def op(self, other):
        o = _operand(other)
        if o is None:
            return NotImplemented
        getattr(self._a, name)(o)
        return self

    op.__name__ = name
    return op


def _unary(name):
    def op(self):
        return _wrap(getattr(self._a, name)())

    op.__name__ = name
    return op


class FakeArray:
    """An array of the fake device: NumPy inside, CuPy's rules outside."""

    __slots__ = ("_a",)
    __array_priority__ = 100

    def __init__(self, a: np.ndarray):
        self._a = a

    # -- what CuPy refuses
    def __array__(self, dtype=None, copy=None):
        raise CupyTypeError("Implicit conversion to a NumPy array is not allowed. Please use "
                        "`.get()` to construct a NumPy array explicitly. (fake device)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc.__name__ not in _cupy_names():
            return NotImplemented
        if method == "__call__":
            _check_ufunc_kwargs(ufunc.__name__, kwargs)
        for v in inputs + tuple(kwargs.get("out", ()) or ()):
            if type(v) is not FakeArray and not isinstance(v, _SCALARS):
                if isinstance(v, np.ndarray):
                    _refuse(v)
                return NotImplemented
        result = _call(getattr(ufunc, method), inputs, kwargs)
        out = kwargs.get("out")
        if out:  # CuPy returns the very arrays it wrote into
            return out[0] if len(out) == 1 else tuple(out)
        return result

    def __array_function__(self, func, types_, args, kwargs):
        if not any(func.__name__ in _cupy_names(m) for m in _FUNCTION_HOMES):
            return NotImplemented  # NumPy then raises, as CuPy makes it
        return _call(func, args, kwargs)

    # -- the CuPy extras
    def get(self, stream=None, order="C", out=None) -> np.ndarray:
        """A NumPy copy (CuPy's device-to-host transfer)."""
        return np.array(self._a, order=order, copy=True)

    def set(self, arr, stream=None):
        self._a[...] = arr

    @property
    def device(self) -> Device:
        return fake_device()

    # -- attributes of every array
    @property
    def shape(self):
        return self._a.shape

    @shape.setter
    def shape(self, value):
        self._a.shape = value

    @property
    def dtype(self):
        return self._a.dtype

    @property
    def ndim(self):
        return self._a.ndim

    @property
    def size(self):
        return self._a.size

    @property
    def T(self):
        return FakeArray(self._a.T)

    def __getattr__(self, name):
        if name in _ndarray_lacks():
            raise AttributeError(f"'cupy.ndarray' object has no attribute {name!r} "
                                 "(the fake device mirrors CuPy)")
        attr = getattr(self._a, name)
        if callable(attr):
            return _strict(attr, _method_signature(name))
        return _wrap(attr)

    def __getitem__(self, index):
        return _wrap(self._a[_index(index)])

    def __setitem__(self, index, value):
        self._a[_index(index)] = _unwrap(value)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (FakeArray(np.asarray(v)) for v in self._a)

    def __bool__(self):
        return bool(self._a)

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __complex__(self):
        return complex(self._a)

    def __repr__(self):
        return "fake" + repr(self._a)

    def __str__(self):
        return str(self._a)

    def __format__(self, spec):
        return format(self._a.item() if self._a.ndim == 0 else self._a, spec)

    def __copy__(self):
        return FakeArray(self._a.copy())

    def __deepcopy__(self, memo):
        return FakeArray(self._a.copy())

    def __reduce__(self):
        return (_restore, (self._a,))

    __hash__ = None


# the operators, each NumPy's on the wrapped arrays (in-place ones but @= and divmod,
# which cupy.ndarray lacks too)
for _name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
              "xor", "lshift", "rshift", "divmod"):
    setattr(FakeArray, f"__{_name}__", _binary(f"__{_name}__"))
    setattr(FakeArray, f"__r{_name}__", _binary(f"__r{_name}__"))
    if _name not in ("matmul", "divmod"):
        setattr(FakeArray, f"__i{_name}__", _inplace(f"__i{_name}__"))
for _name in ("lt", "le", "gt", "ge", "eq", "ne"):
    setattr(FakeArray, f"__{_name}__", _binary(f"__{_name}__"))
for _name in ("neg", "pos", "abs", "invert"):
    setattr(FakeArray, f"__{_name}__", _unary(f"__{_name}__"))
del _name


def _restore(a):
    return FakeArray(a)


def _index(index):
    """Indices as CuPy takes them: device arrays, and also host arrays and lists
    (CuPy copies those to the device itself)."""
    if type(index) is FakeArray:
        return index._a
    if type(index) is tuple:
        return tuple(i._a if type(i) is FakeArray else i for i in index)
    return index


_FUNCTION_HOMES = (None, "linalg", "fft", "lib.stride_tricks")


@functools.cache
def _cupy_names(sub: str | None = None) -> frozenset:
    """The public names of ``cupy`` (or ``cupy.<sub>``, dotted); NumPy's less
    :data:`CUPY_LACKS` where CuPy is not installed."""
    path = sub.split(".") if sub else []
    try:
        import cupy

        mod = functools.reduce(getattr, path, cupy)
        return frozenset(n for n in dir(mod) if not n.startswith("_"))
    except (ImportError, AttributeError):
        mod = functools.reduce(getattr, path, np)
        return frozenset(n for n in dir(mod) if not n.startswith("_")) - CUPY_LACKS


def _cupy_signature(sub, name):
    """CuPy's signature of ``cupy.<sub>.<name>`` where CuPy is installed and the
    function has one (its Python-level functions do; compiled ones may not)."""
    try:
        import cupy

        fn = getattr(functools.reduce(getattr, sub.split(".") if sub else [], cupy), name)
        sig = inspect.signature(fn)
    except (ImportError, AttributeError, TypeError, ValueError):
        return None
    kinds = {p.kind for p in sig.parameters.values()}
    if inspect.Parameter.VAR_KEYWORD in kinds:
        return None  # takes any keyword (einsum, pad): nothing to check
    return sig


@functools.cache
def _method_signature(name):
    """The signature of ``cupy.ndarray.<name>``, from the first line of its
    docstring (CuPy's methods are compiled: Cython writes the signature there,
    e.g. ``_ndarray_base.max(self, axis=None, out=None, keepdims=False)``)."""
    try:
        import cupy

        head = (getattr(cupy.ndarray, name).__doc__ or "").strip().splitlines()[0]
    except (ImportError, AttributeError, IndexError):
        return None
    if f".{name}(self" not in head:
        return None
    params = []
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for raw in head.split("(", 1)[1].rsplit(")", 1)[0].split(",")[1:]:
        item, _, default = raw.strip().partition("=")
        item = item.split()[-1]  # drop a Cython type: "int axis" -> "axis"
        if item.startswith("*"):
            params.append(inspect.Parameter(item.lstrip("*"), inspect.Parameter.VAR_POSITIONAL))
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        try:
            value = ast.literal_eval(default.strip()) if default else inspect.Parameter.empty
            params.append(inspect.Parameter(item, kind, default=value))
        except (ValueError, SyntaxError):
            return None
    try:
        return inspect.Signature(params)
    except ValueError:
        return None


@functools.cache
def _ndarray_lacks() -> frozenset:
    try:
        import cupy

        return frozenset(set(dir(np.ndarray)) - set(dir(cupy.ndarray)))
    except ImportError:
        return NDARRAY_LACKS


class FakeModule(types.ModuleType):
    """NumPy restricted to CuPy's names, its results as FakeArrays; names CuPy
    lacks raise AttributeError as ``cupy.<name>`` would."""

    def __init__(self, numpy_module=np, sub: str | None = None):
        super().__init__(f"tapegrad_fake.{sub}" if sub else "tapegrad_fake")
        self._np = numpy_module
        self._sub = sub
        self.ndarray = FakeArray

    def __getattr__(self, name):
        if name.startswith("__") or name not in _cupy_names(self._sub):
            where = f"cupy.{self._sub}" if self._sub else "cupy"
            raise AttributeError(f"module {where!r} has no attribute {name!r} (the fake "
                                 "device mirrors CuPy's namespace)")
        value = getattr(self._np, name)
        if isinstance(value, types.ModuleType):
            if self._sub is None and name == "random":
                value = _FakeRandom()
            else:
                value = FakeModule(value, name if self._sub is None else f"{self._sub}.{name}")
        elif isinstance(value, np.ufunc):
            value = _FakeUfunc(value)
        elif callable(value) and not isinstance(value, type) and name not in _PASS:
            value = _strict(value, _cupy_signature(self._sub, name))
        setattr(self, name, value)
        return value

    # host-to-device copies: the explicit way in, as cupy.asarray / cupy.array are
    def asarray(self, a, dtype=None, order=None, **kw):
        if type(a) is FakeArray:
            return FakeArray(np.asarray(a._a, dtype=dtype, order=order))
        return FakeArray(np.array(_unwrap_host(a), dtype=dtype, order=order, copy=True))

    def array(self, a, dtype=None, copy=True, order="K", ndmin=0, **kw):
        src = a._a if type(a) is FakeArray else _unwrap_host(a)
        return FakeArray(np.array(src, dtype=dtype, copy=copy, order=order, ndmin=ndmin))

    def ascontiguousarray(self, a, dtype=None):
        return FakeArray(np.ascontiguousarray(_unwrap(a), dtype=dtype))


# names whose values pass through unchanged (they return dtypes, shapes, flags)
_PASS = frozenset(_words("""
    result_type promote_types can_cast dtype finfo iinfo isscalar ndim shape size issubdtype
    min_scalar_type common_type broadcast_shapes
"""))


def _unwrap_host(a):
    """What ``cupy.asarray`` accepts: host arrays, scalars, lists of them (and of
    device arrays, whose values it copies)."""
    if type(a) in (list, tuple):
        return [_unwrap_host(i) for i in a]
    return a._a if type(a) is FakeArray else a


def _check_ufunc_kwargs(name, kwargs):
    extra = set(kwargs) - {"out", "dtype", "casting"}
    if extra:  # CuPy's ufuncs take no where=, order=, subok=, signature=
        raise CupyTypeError(f"cupy.{name}: Wrong arguments {sorted(extra)} (the fake device "
                            "mirrors CuPy's ufuncs)")


class _FakeUfunc:
    """A NumPy ufunc with CuPy's methods (call, reduce, accumulate, at, outer)."""

    __slots__ = ("_u", "__name__")

    def __init__(self, u):
        self._u = u
        self.__name__ = u.__name__

    def __call__(self, *args, **kwargs):
        _check_ufunc_kwargs(self.__name__, kwargs)
        if "out" in kwargs and type(kwargs["out"]) is FakeArray:
            out = kwargs["out"]
            self._u(*[_unwrap(a) for a in args], out=out._a)
            return out
        return _call(self._u, args, kwargs)

    def __getattr__(self, name):
        if name in ("reduce", "accumulate", "outer", "reduceat"):
            return _strict(getattr(self._u, name))
        if name == "at":
            return self._at
        if name in ("nin", "nout", "nargs", "types"):
            return getattr(self._u, name)
        raise AttributeError(f"cupy.ufunc has no attribute {name!r}")

    def _at(self, a, indices, b=None):
        self._u.at(a._a, _index(indices), *(() if b is None else (_unwrap(b),)))


class _FakeGenerator:
    """numpy.random.Generator limited to cupy.random.Generator's methods."""

    def __init__(self, seed):
        self._g = np.random.default_rng(seed)

    def __getattr__(self, name):
        if name not in _GENERATOR_HAS:
            raise AttributeError(f"'cupy.random.Generator' object has no attribute {name!r} "
                                 "(the fake device mirrors CuPy)")
        return _strict(getattr(self._g, name))


class _FakeRandom(FakeModule):
    def __init__(self):
        super().__init__(np.random, "random")

    def default_rng(self, seed=None):
        return _FakeGenerator(seed)


class _FakeDevice(Device):
    """The fake device: arrays cross to and from the host only explicitly."""

    __slots__ = ()

    def put(self, a):
        if type(a) is FakeArray:
            return a
        if not isinstance(a, np.ndarray) and hasattr(a, "get"):  # another device's array
            a = a.get()
        return FakeArray(np.array(a, copy=True))

    def host(self, a) -> np.ndarray:
        return a.get()

    def __reduce__(self):
        return (fake_device, ())


_DEVICE: list = []


def fake_device() -> Device:
    """The one strict fake device (``str(dev) == "fake:0"``), made on first use."""
    if not _DEVICE:
        dev = _FakeDevice("fake", 0, FakeModule())
        _DEVICE.append(dev)
        _register_array_type(FakeArray, lambda a: dev)
    return _DEVICE[0]
