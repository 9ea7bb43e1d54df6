"""A small binding of oneDNN (the library behind PyTorch's and Chainer's CPU layers)
for the host's float32 convolutions, pooling and (channels-last) batch norm: ctypes on
``libdnnl.so.3`` from the optional ``onednn-cpu-gomp`` wheel
(``pip install 'tapegrad[onednn]'``).

Nothing of ctypes leaves this module and its three families, :mod:`.onednn_conv`,
:mod:`.onednn_pool` and :mod:`.onednn_norm`. An op asks a family for a primitive by what
it computes (``onednn_conv.conv_forward(x, w, b, geo)``, ``onednn_pool.pool_forward(...)``) on
NumPy arrays and gets arrays back; this module keeps the engine and stream, builds
memory descriptors from the arrays' own shapes and strides (no copy for any strided
layout oneDNN takes), lets oneDNN choose its blocked layouts for the weights and
activations (``format_tag_any``), reorders in and out, and caches each primitive by
what it computes (kind, shapes, strides, parameters). Status codes become
:class:`tapegrad.errors.DeviceError` naming the call.

Whether the ops use it is :mod:`tapegrad.backends.onednn` (on when the library loads,
off with ``TAPEGRAD_ONEDNN=0``).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading

import numpy as np

from ..errors import DeviceError, MissingDependencyError

__all__ = ["available", "load_error", "version", "set_num_threads", "usable"]

# Whether ops use oneDNN where it applies: tapegrad.backends.onednn.enabled reads and
# sets this (TAPEGRAD_ONEDNN=0 turns it off for the process).
enabled = os.environ.get("TAPEGRAD_ONEDNN", "1").strip().lower() not in ("0", "false", "off",
                                                                        "no")

# ---------------------------------------------------------- the C API's constants
# (oneDNN 3.x, include/oneapi/dnnl/dnnl_types.h)
_SUCCESS = 0
_STATUS = {1: "out of memory", 2: "invalid arguments", 3: "unimplemented",
           4: "iterator ends", 5: "runtime error", 6: "not required"}
_CPU = 1  # dnnl_cpu
_IN_ORDER = 1  # dnnl_stream_in_order
_DTYPES = {np.dtype(np.float32): 3, np.dtype(np.uint8): 6}  # dnnl_f32, dnnl_u8
_TAG_ANY = 1  # dnnl_format_tag_any
_FORWARD_TRAINING, _FORWARD_INFERENCE = 64, 96
_CONV_DIRECT = 0x1  # dnnl_convolution_direct
_POOL_MAX, _POOL_AVG_INCLUDE, _POOL_AVG_EXCLUDE = 0x1FF, 0x2FF, 0x3FF  # dnnl_pooling_*
_Q_EXEC_ARG_MD = 255  # dnnl_query_exec_arg_md: the descriptor of an execute argument
_ARG_SRC, _ARG_DST, _ARG_WEIGHTS, _ARG_BIAS, _ARG_WORKSPACE = 1, 17, 33, 41, 64
_ARG_DIFF_SRC, _ARG_DIFF_DST, _ARG_DIFF_WEIGHTS, _ARG_DIFF_BIAS = 129, 145, 161, 169
_ARG_MEAN, _ARG_VARIANCE, _ARG_SCALE, _ARG_SHIFT = 49, 50, 51, 52  # normalization's
_ARG_DIFF_SCALE, _ARG_DIFF_SHIFT = 255, 256
_BACKWARD = 128  # dnnl_backward: data and weights (a normalization's scale and shift)
# dnnl_normalization_flags_t
_USE_GLOBAL_STATS, _USE_SCALE, _USE_SHIFT = 0x1, 0x2, 0x4
_MAX_NDIMS = 12
_Dims = ctypes.c_int64 * _MAX_NDIMS
_p = ctypes.c_void_p


class _ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", _p)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint),
                ("gpu_runtime", ctypes.c_uint)]


# ------------------------------------------------------------ loading the library
def _candidates():
    env = os.environ.get("TAPEGRAD_ONEDNN_LIBRARY")
    if env:  # that library and no other
        yield env
        return
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix, os.path.dirname(sys.executable)
                                 + "/..")):
        yield from sorted(glob.glob(os.path.join(prefix, "lib", "libdnnl.so.3*")))
    yield "libdnnl.so.3"  # the loader's own search path


_dnnl = None
_error: str | None = None
_lock = threading.Lock()


# GNU OpenMP's idle threads spin-wait after a parallel region (GOMP_SPINCOUNT, 300k
# spins by default) before they sleep. Between oneDNN's calls tapegrad's own worker pool
# and NumPy run, and an OpenMP thread spinning on the other core slows them: VGG-small
# at 2 threads (bench_train, AMD EPYC, 4 alternating runs) 43.4-47.3 ms a step with the
# default, 40.2-44.5 with 10k spins (mins 41.9-42.6 against 38.4-39.7). libgomp reads the
# variable once, when it loads; a value the user set is kept.
GOMP_SPINCOUNT = "10000"


def _spin_briefly():
    os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)


def _load():
    global _dnnl, _error
    if _dnnl is not None or _error is not None:
        return _dnnl
    with _lock:
        if _dnnl is not None or _error is not None:
            return _dnnl
        tried = []
        _spin_briefly()
        for path in _candidates():
            try:
                lib = ctypes.CDLL(path)
            except OSError as exc:
                tried.append(f"{path}: {exc}")
                continue
            try:
                _declare(lib)
            except AttributeError as exc:  # a library without oneDNN 3's C API
                tried.append(f"{path}: {exc}")
                continue
            v = lib.dnnl_version().contents
            if v.major != 3:
                tried.append(f"{path}: oneDNN {v.major}.{v.minor} found, 3.x needed")
                continue
            _dnnl = lib
            if _want_threads is not None:
                _omp_threads(_want_threads)
            return _dnnl
        _error = "; ".join(tried[-2:]) or "libdnnl.so.3 not found"
        return None


def _declare(lib):
    """Argument and result types of the calls used here."""
    c = ctypes
    sig = {
        "dnnl_version": (c.POINTER(_Version), []),
        "dnnl_engine_create": (c.c_int, [c.POINTER(_p), c.c_int, c.c_size_t]),
        "dnnl_stream_create": (c.c_int, [c.POINTER(_p), _p, c.c_uint]),
        "dnnl_stream_wait": (c.c_int, [_p]),
        "dnnl_memory_desc_create_with_strides": (c.c_int, [c.POINTER(_p), c.c_int, _Dims,
                                                           c.c_int, _Dims]),
        "dnnl_memory_desc_create_with_tag": (c.c_int, [c.POINTER(_p), c.c_int, _Dims, c.c_int,
                                                       c.c_int]),
        "dnnl_memory_desc_destroy": (c.c_int, [_p]),
        "dnnl_memory_desc_equal": (c.c_int, [_p, _p]),
        "dnnl_memory_desc_get_size": (c.c_size_t, [_p]),
        "dnnl_memory_desc_clone": (c.c_int, [c.POINTER(_p), _p]),
        "dnnl_memory_create": (c.c_int, [c.POINTER(_p), _p, _p, _p]),
        "dnnl_memory_set_data_handle": (c.c_int, [_p, _p]),
        "dnnl_memory_destroy": (c.c_int, [_p]),
        "dnnl_primitive_desc_query_md": (_p, [_p, c.c_int, c.c_int]),
        "dnnl_primitive_desc_destroy": (c.c_int, [_p]),
        "dnnl_primitive_create": (c.c_int, [c.POINTER(_p), _p]),
        "dnnl_primitive_execute": (c.c_int, [_p, _p, c.c_int, c.POINTER(_ExecArg)]),
        "dnnl_primitive_destroy": (c.c_int, [_p]),
        "dnnl_reorder_primitive_desc_create": (c.c_int, [c.POINTER(_p), _p, _p, _p, _p, _p]),
        "dnnl_pooling_forward_primitive_desc_create": (
            c.c_int, [c.POINTER(_p), _p, c.c_int, c.c_int, _p, _p, _Dims, _Dims, _Dims, _Dims,
                      _Dims, _p]),
        "dnnl_pooling_backward_primitive_desc_create": (
            c.c_int, [c.POINTER(_p), _p, c.c_int, _p, _p, _Dims, _Dims, _Dims, _Dims, _Dims, _p,
                      _p]),
        "dnnl_batch_normalization_forward_primitive_desc_create": (
            c.c_int, [c.POINTER(_p), _p, c.c_int, _p, _p, c.c_float, c.c_uint, _p]),
        "dnnl_batch_normalization_backward_primitive_desc_create": (
            c.c_int, [c.POINTER(_p), _p, c.c_int, _p, _p, _p, c.c_float, c.c_uint, _p, _p]),
        "dnnl_convolution_forward_primitive_desc_create": (
            c.c_int, [c.POINTER(_p), _p, c.c_int, c.c_int, _p, _p, _p, _p, _Dims, _Dims, _Dims,
                      _Dims, _p]),
        "dnnl_convolution_backward_data_primitive_desc_create": (
            c.c_int, [c.POINTER(_p), _p, c.c_int, _p, _p, _p, _Dims, _Dims, _Dims, _Dims, _p,
                      _p]),
        "dnnl_convolution_backward_weights_primitive_desc_create": (
            c.c_int, [c.POINTER(_p), _p, c.c_int, _p, _p, _p, _p, _Dims, _Dims, _Dims, _Dims,
                      _p, _p]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def available() -> bool:
    """True when ``libdnnl.so.3`` (oneDNN 3.x) loads."""
    return _load() is not None


def load_error() -> str | None:
    """Why oneDNN is unavailable (None when it loads)."""
    _load()
    return _error


def usable(xp, *arrays) -> bool:
    """Whether an op on ``arrays`` (None for an absent one) takes the oneDNN path: it is
    enabled and loads, the arrays are NumPy's, and every one is float32 with positive
    strides."""
    return (enabled and not _in_forked_child and xp.name == "numpy" and all(
        a is None or (a.dtype == np.float32 and min(a.strides, default=1) > 0)
        for a in arrays) and _load() is not None)  # (reversed or broadcast views: NumPy)


# GNU OpenMP's threads do not survive fork(): a forked child (a DataLoader worker) that
# ran an OpenMP region would hang, so children run the NumPy paths.
_in_forked_child = False


def _after_fork_in_child():
    global _in_forked_child
    _in_forked_child = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def version() -> str:
    lib = _require()
    v = lib.dnnl_version().contents
    return f"{v.major}.{v.minor}.{v.patch}"


def _require():
    lib = _load()
    if lib is None:
        raise MissingDependencyError(
            f"oneDNN is not available ({_error}); install it with "
            "pip install 'tapegrad[onednn]' (the onednn-cpu-gomp wheel), or set "
            "TAPEGRAD_ONEDNN_LIBRARY to a libdnnl.so.3")
    return lib


def _check(status, call):
    if status != _SUCCESS:
        raise DeviceError(f"oneDNN {call}: {_STATUS.get(status, f'status {status}')}")


# --------------------------------------------------------------- engine, threads
class _State(threading.local):
    stream = None


_state = _State()
_engine = None


def _engine_stream():
    """The process's CPU engine (one, shared) and this thread's stream."""
    global _engine
    lib = _require()
    if _engine is None:
        with _lock:
            if _engine is None:
                e = _p()
                _check(lib.dnnl_engine_create(ctypes.byref(e), _CPU, 0), "engine_create")
                _engine = e
    if _state.stream is None:
        s = _p()
        _check(lib.dnnl_stream_create(ctypes.byref(s), _engine, _IN_ORDER), "stream_create")
        _state.stream = s
    return lib, _engine, _state.stream


_gomp = None
_want_threads: int | None = None  # tapegrad.set_num_threads's count, applied at load too


def set_num_threads(n: int) -> None:
    """oneDNN's OpenMP threads, for :func:`tapegrad.set_num_threads` (GNU OpenMP's
    ``omp_set_num_threads``): applied now if the library is loaded, else when it loads."""
    global _want_threads
    _want_threads = int(n)
    if _dnnl is not None:
        _omp_threads(_want_threads)


def _omp_threads(n):
    global _gomp
    if _gomp is None:
        try:
            _gomp = ctypes.CDLL("libgomp.so.1")
        except OSError:
            return
    _gomp.omp_set_num_threads(n)


# ------------------------------------------------------------ memory descriptors
def _dims(values):
    d = _Dims()
    for i, v in enumerate(values):
        d[i] = int(v)
    return d


class _Desc:
    """An owned memory descriptor (destroyed with this object)."""

    __slots__ = ("md", "lib")

    def __init__(self, lib, md):
        self.lib, self.md = lib, md

    @classmethod
    def of(cls, lib, shape, strides, dtype=np.float32):
        md = _p()
        _check(lib.dnnl_memory_desc_create_with_strides(
            ctypes.byref(md), len(shape), _dims(shape), _DTYPES[np.dtype(dtype)],
            _dims(strides)),
            "memory_desc_create_with_strides")
        return cls(lib, md)

    @classmethod
    def plain(cls, lib, a):
        """The descriptor of NumPy array ``a`` as it lies (its shape, strides, dtype)."""
        return cls.of(lib, a.shape, _elem_strides(a), a.dtype)

    @classmethod
    def any(cls, lib, shape):
        md = _p()
        _check(lib.dnnl_memory_desc_create_with_tag(
            ctypes.byref(md), len(shape), _dims(shape), _DTYPES[np.dtype(np.float32)], _TAG_ANY),
            "memory_desc_create_with_tag")
        return cls(lib, md)

    @classmethod
    def clone(cls, lib, md):
        out = _p()
        _check(lib.dnnl_memory_desc_clone(ctypes.byref(out), md), "memory_desc_clone")
        return cls(lib, out)

    def __del__(self):
        if self.md:
            self.lib.dnnl_memory_desc_destroy(self.md)
            self.md = None


def _elem_strides(a):
    return tuple(s // a.itemsize for s in a.strides)


class _Prim:
    """A primitive with the descriptors of its arguments ``args`` (as its primitive
    descriptor ``pd`` chose them), built once and cached."""

    __slots__ = ("lib", "prim", "mds", "plans", "__weakref__")

    def __init__(self, lib, pd, args):
        self.lib = lib
        self.plans = {}  # (thread, the arguments' layouts) -> _Plan
        self.mds = {arg: _Desc.clone(lib, lib.dnnl_primitive_desc_query_md(pd, _Q_EXEC_ARG_MD, arg))
                    for arg in args}
        p = _p()
        _check(lib.dnnl_primitive_create(ctypes.byref(p), pd), "primitive_create")
        self.prim = p

    def __del__(self):
        if self.prim:
            self.lib.dnnl_primitive_destroy(self.prim)
            self.prim = None


def _pd_done(lib, pd):
    lib.dnnl_primitive_desc_destroy(pd)


# ------------------------------------------------------------------- execution
_cache: dict = {}
_reorders: dict = {}


def _memory(lib, engine, md, array):
    """A memory object of ``md`` on ``array``'s data (None: set later)."""
    m = _p()
    _check(lib.dnnl_memory_create(ctypes.byref(m), md, engine,
                                  None if array is None else array.ctypes.data),
           "memory_create")
    return m


def _execute(lib, stream, prim, args):
    """Run ``prim`` on ``args``, [(arg, memory)] or an _ExecArg array, and wait."""
    if isinstance(args, list):
        args = (_ExecArg * len(args))(*[_ExecArg(k, m) for k, m in args])
    _check(lib.dnnl_primitive_execute(prim, stream, len(args), args), "primitive_execute")
    _check(lib.dnnl_stream_wait(stream), "stream_wait")


def _reorder(lib, engine, stream, key, src_md, src, dst_md, dst):
    """Copy ``src`` (under ``src_md``) into ``dst`` (under ``dst_md``); the reorder is
    cached under ``key``, which names both layouts (never a descriptor's address: a
    freed descriptor's address is reused)."""
    prim = _reorders.get(key)
    if prim is None:
        pd = _p()
        _check(lib.dnnl_reorder_primitive_desc_create(ctypes.byref(pd), src_md, engine, dst_md,
                                                      engine, None), "reorder")
        try:
            p = _p()
            _check(lib.dnnl_primitive_create(ctypes.byref(p), pd), "primitive_create")
        finally:
            _pd_done(lib, pd)
        prim = _reorders[key] = _Owned(lib, p)
    mems = prim.mems.get(threading.get_ident())  # this thread's, made once (as _Plan's)
    if mems is None:
        ms, md = _memory(lib, engine, src_md, None), _memory(lib, engine, dst_md, None)
        mems = prim.mems[threading.get_ident()] = (
            ms, md, (_ExecArg * 2)(_ExecArg(_ARG_SRC, ms), _ExecArg(_ARG_DST, md)))
    _check(lib.dnnl_memory_set_data_handle(mems[0], src.ctypes.data), "memory_set_data_handle")
    _check(lib.dnnl_memory_set_data_handle(mems[1], dst.ctypes.data), "memory_set_data_handle")
    _execute(lib, stream, prim.prim, mems[2])


class _Owned:
    """A reorder primitive and each thread's pair of memory objects for it (destroyed
    with this object)."""

    __slots__ = ("lib", "prim", "mems")

    def __init__(self, lib, prim):
        self.lib, self.prim, self.mems = lib, prim, {}

    def __del__(self):
        for ms, md, _ in self.mems.values():
            self.lib.dnnl_memory_destroy(ms)
            self.lib.dnnl_memory_destroy(md)
        self.mems = {}
        if self.prim:
            self.lib.dnnl_primitive_destroy(self.prim)
            self.prim = None


def _primitive(lib, engine, prim_key, build):
    """The cached primitive (and its full key): a primitive splits its work for the
    OpenMP thread count it was made at, so there is one per count."""
    prim_key = (prim_key, _want_threads)
    prim = _cache.get(prim_key)
    if prim is None:
        prim = _cache[prim_key] = build(lib, engine)
    return prim_key, prim


class _Plan:
    """How a primitive runs on arguments of given shapes, strides and dtypes, made once per
    thread: for each argument, the array's own descriptor where it must be reordered
    (None where the primitive takes it as it lies), the reorder buffer's length, and a
    memory object whose data pointer each call sets (descriptors and memory objects cost
    ~40% of a small call's time when made per call)."""

    __slots__ = ("lib", "args", "exec_args")

    def __init__(self, lib, engine, prim, items):
        self.lib, self.args = lib, []
        for arg, a, is_input in items:
            plain, want = _Desc.plain(lib, a), prim.mds[arg]
            same = bool(lib.dnnl_memory_desc_equal(plain.md, want.md))
            size = 0 if same else lib.dnnl_memory_desc_get_size(want.md) // a.itemsize or 1
            self.args.append((arg, is_input, None if same else plain, size,
                              _memory(lib, engine, want.md, None)))
        self.exec_args = (_ExecArg * len(self.args))(
            *[_ExecArg(arg, mem) for arg, *_, mem in self.args])

    def __del__(self):
        for *_, mem in self.args:
            self.lib.dnnl_memory_destroy(mem)
        self.args = []


def _run(prim_key, build, inputs, outputs):
    """Execute the cached primitive ``prim_key`` (built by ``build(lib, engine)``):
    ``inputs`` {arg: array} and ``outputs`` {arg: array} in plain (strided) layouts;
    each is reordered into the layout the primitive chose where that differs (inputs
    before the primitive runs, outputs after)."""
    lib, engine, stream = _engine_stream()
    prim_key, prim = _primitive(lib, engine, prim_key, build)
    items = [(k, v, True) for k, v in inputs.items()] + [(k, v, False) for k, v in outputs.items()]
    layout = (threading.get_ident(),) + tuple((k, a.shape, a.strides, a.dtype.char)
                                              for k, a, _ in items)
    plan = prim.plans.get(layout)
    if plan is None:
        plan = prim.plans[layout] = _Plan(lib, engine, prim, items)
    keep, back = [], []
    for (arg, is_input, plain, size, mem), (_, a, _) in zip(plan.args, items):
        if plain is not None:
            want, buf = prim.mds[arg], np.empty(size, a.dtype)
            key = (prim_key, arg, a.shape, a.strides)
            if is_input:
                _reorder(lib, engine, stream, key + ("in",), plain.md, a, want.md, buf)
            else:
                back.append((key + ("out",), want, buf, plain, a))
            keep.append(buf)
            a = buf
        _check(lib.dnnl_memory_set_data_handle(mem, a.ctypes.data), "memory_set_data_handle")
    _execute(lib, stream, prim.prim, plan.exec_args)
    for key, want, buf, plain, a in back:
        _reorder(lib, engine, stream, key, want.md, buf, plain.md, a)
