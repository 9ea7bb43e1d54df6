"""The CUDA path of every op with a kernel, run on the CPU: the kernels' own CUDA
source compiled for the host with g++ (stub CArray/CIndexer/thread indices, the
grid-stride loops then visit every element in order), the ops switched onto
their ``xp.name == "cupy"`` branch -- on NumPy arrays, and on the strict fake
device (tapegrad.testing.fakedevice), whose module has only CuPy's names and
signatures and whose kernels refuse host arrays, as CuPy's do. Each result must
equal the formula path on the same device bit for bit (float32 and float64;
float16 needs CuPy's float16 type, which only the NVRTC compile check and the
GPU tests see).

This checks what the compile check cannot: the kernels' index arithmetic and
operation order, and the Python glue around them (argument order, scalars,
flags, outputs written in place, nothing from the host). Still unverified here:
CuPy's launch and broadcasting machinery and the device arithmetic itself.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.device import cpu, kernels
from tapegrad.testing.fakedevice import FakeArray, fake_device

# these test the NumPy paths (oneDNN, where installed, has tests of its own)
pytestmark = pytest.mark.usefixtures("numpy_path")

kc = pytest.importorskip("tapegrad.device.kernel_check")
if shutil.which("g++") is None:
    pytest.skip("g++ is needed to build the kernels for the host", allow_module_level=True)

_PRELUDE = r"""
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#define __global__
struct tg_dim { unsigned int x; };
static const tg_dim threadIdx = {0}, blockIdx = {0}, blockDim = {1}, gridDim = {1};
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, sizeof f); return f; }
template <typename T, int ndim, bool c_contiguous = true, bool use_32bit_indexing = true>
struct CArray {
    T* data;
    T& operator[](ptrdiff_t i) const { return data[i]; }
};
template <int ndim, bool use_32bit_indexing = true>
struct CIndexer {
    ptrdiff_t n, at;
    ptrdiff_t size() const { return n; }
    void set(ptrdiff_t i) { at = i; }
    ptrdiff_t get() const { return at; }
};
#define CUPY_FOR(i, n) for (ptrdiff_t i = 0; i < (n); ++i)
"""

_CT = {"float": "float32", "double": "float64", "int": "int32", "long long": "int64",
       "signed char": "int8", "short": "int16", "bool": "bool"}


def _host_variants(spec):
    return [t for t in spec.types if "float16" not in t.values()]


def _suffix(types):
    return "_".join(types.values())


def _wrap_namespace(ns, source):
    return (f"namespace {ns} {{\nusing std::max; using std::min; using std::sqrt;\n"
            + source.replace('extern "C" ', "") + "\n}\n")


def _elementwise_unit(spec, types):
    """Host source and wrapper of one ElementwiseKernel variant."""
    ns = f"ns_{spec.name}_{_suffix(types)}"
    params = kc.params(spec)
    args = []
    for k, p in enumerate(params):
        ct = kernels.ctype(kc._param_dtype(p, types))
        if p.name in spec.scalars:
            args.append(f"*(const {ct}*)a[{k}]")
        else:
            args.append(f"CArray<{ct}, 1, 1, 1>{{({ct}*)a[{k}]}}")
    args.append("CIndexer<1, 1>{n, 0}")
    body = _wrap_namespace(ns, kc._source_own(spec, types))
    return body + (f'extern "C" void run_{spec.name}_{_suffix(types)}(void** a, long long n) '
                   f"{{ {ns}::{spec.name}({', '.join(args)}); }}\n")


def _raw_signature(source, name):
    m = re.search(rf"__global__ void {name}\((.*?)\)\s*{{", source, re.S)
    params = []
    for decl in m.group(1).split(","):
        decl = " ".join(decl.split())
        pointer = "*" in decl
        ctype = " ".join(decl.replace("const ", "").replace("*", " ").split()[:-1])
        params.append((pointer, ctype))
    return params


def _raw_unit(spec, types):
    ns = f"ns_{spec.name}_{_suffix(types)}"
    source = spec.source(**types)
    sig = _raw_signature(source, spec.name)
    args = [f"({ct}*)a[{k}]" if ptr else f"*(const {ct}*)a[{k}]"
            for k, (ptr, ct) in enumerate(sig)]
    return sig, _wrap_namespace(ns, source) + (
        f'extern "C" void run_{spec.name}_{_suffix(types)}(void** a) '
        f"{{ {ns}::{spec.name}({', '.join(args)}); }}\n")


class Host:
    """Every registered kernel built for the host in one shared library."""

    def __init__(self, tmp):
        kc._declare_all()
        units, self.raw_sigs = [_PRELUDE], {}
        self.specs = kernels.registered()
        for spec in self.specs.values():
            for types in _host_variants(spec):
                if spec.kind == "raw":
                    sig, unit = _raw_unit(spec, types)
                    self.raw_sigs[spec.name, _suffix(types)] = sig
                else:
                    unit = _elementwise_unit(spec, types)
                units.append(unit)
        src = tmp / "kernels_host.cpp"
        src.write_text("\n".join(units))
        lib = tmp / "kernels_host.so"
        subprocess.run(["g++", "-std=c++17", "-O1", "-ffp-contract=off", "-shared", "-fPIC",
                        "-o", str(lib), str(src)], check=True, capture_output=True, timeout=300)
        self.lib = ctypes.CDLL(str(lib))
        self.calls = []
        self._params = {}
        self._cupy_kernels = {}

    def params(self, spec):
        if spec.name not in self._params:
            self._params[spec.name] = kc.params(spec)
        return self._params[spec.name]

    def elementwise(self, spec, args):
        """Run like CuPy's ElementwiseKernel call: broadcast, allocate missing outputs."""
        params = self.params(spec)
        n_in = len(spec.in_params.split(","))
        types = {}
        for p, a in zip(params, args):
            if isinstance(a, np.ndarray) and p.dtype is None and p.name not in spec.scalars:
                types.setdefault(p.ctype, a.dtype.name)
        assert types in spec.types, (spec.name, types)
        self._cupy_accepts(spec, args, n_in, types)
        arrays = [a for p, a in zip(params, args)
                  if not p.raw and p.name not in spec.scalars]
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        bufs, outs, back = [], [], []
        for k, p in enumerate(params):
            dt = np.dtype(kc._param_dtype(p, types))
            a = args[k] if k < len(args) else None
            if p.name in spec.scalars:
                assert np.ndim(a) == 0, (spec.name, p.name)
                buf = np.array(a, dt)
            elif p.raw:
                assert a.dtype == dt, (spec.name, p.name, a.dtype, dt)
                buf = np.ascontiguousarray(a)
            elif k < n_in:
                assert a.dtype == dt, (spec.name, p.name, a.dtype, dt)
                buf = np.ascontiguousarray(np.broadcast_to(a, shape))
            else:
                if a is None:
                    a = np.empty(shape, dt)
                assert a.dtype == dt and a.shape == shape, (spec.name, p.name)
                buf = a if a.flags.c_contiguous else np.ascontiguousarray(a)
                if buf is not a:
                    back.append((a, buf))
                outs.append(a)
            bufs.append(buf)
        ptrs = (ctypes.c_void_p * len(bufs))(*(b.ctypes.data for b in bufs))
        getattr(self.lib, f"run_{spec.name}_{_suffix(types)}")(ptrs, ctypes.c_longlong(
            int(np.prod(shape))))
        for a, buf in back:
            a[...] = buf
        self.calls.append(spec.name)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _cupy_accepts(self, spec, args, n_in, types):
        """CuPy's own type resolution for these arguments (its arrays' dtypes; scalars
        are cast) gives the variant we resolved: no "Type is mismatched" on a GPU."""
        try:
            import cupy
        except ImportError:
            return
        if spec.name not in self._cupy_kernels:
            self._cupy_kernels[spec.name] = cupy.ElementwiseKernel(
                spec.in_params, spec.out_params, spec.operation, spec.name)
        kern = self._cupy_kernels[spec.name]
        dt = [a.dtype.type if isinstance(a, np.ndarray) else None for a in args]
        ins, outs, _ = kern._decide_params_type(tuple(dt[:n_in]), tuple(dt[n_in:]))
        for p, t in zip(self.params(spec), ins + outs):
            assert np.dtype(t) == kc._param_dtype(p, types), (spec.name, p.name, t)

    def raw(self, spec, types):
        sig = self.raw_sigs[spec.name, _suffix(types)]
        fn = getattr(self.lib, f"run_{spec.name}_{_suffix(types)}")

        def run(args):
            assert len(args) == len(sig), spec.name
            bufs = []
            for a, (ptr, ct) in zip(args, sig):
                if ptr:
                    assert isinstance(a, np.ndarray) and a.flags.c_contiguous, spec.name
                    assert a.dtype == np.dtype(_CT[ct]), (spec.name, a.dtype, ct)
                    bufs.append(a)
                else:  # a scalar must come typed as the kernel declares it
                    assert isinstance(a, np.generic) and a.dtype == np.dtype(_CT[ct]), (
                        spec.name, a, ct)
                    bufs.append(np.array(a))
            fn((ctypes.c_void_p * len(bufs))(*(b.ctypes.data for b in bufs)))
            self.calls.append(spec.name)
        return run


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    return Host(tmp_path_factory.mktemp("kernels"))



def _unwrap_fake(args):
    """A fake-device call's arguments for the host build: FakeArrays give their NumPy
    array; a host NumPy array is refused, as CuPy's kernels refuse one."""
    out = []
    for a in args:
        if type(a) is FakeArray:
            a = a._a
        elif isinstance(a, np.ndarray):
            raise TypeError(f"Unsupported type {type(a)}: a host array passed to a CUDA "
                            "kernel (the fake device refuses it, as CuPy does)")
        out.append(a)
    return out


def _fake_elementwise(host, spec, args):
    un = _unwrap_fake(args)
    given = {id(u): a for u, a in zip(un, args) if type(a) is FakeArray}
    res = host.elementwise(spec, un)
    def wrap(r):  # outputs that were given were written in place
        return given[id(r)] if id(r) in given else FakeArray(r)
    return tuple(map(wrap, res)) if isinstance(res, tuple) else wrap(res)


def _fake_raw(host, spec, types):
    run = host.raw(spec, types)
    return lambda args: run(_unwrap_fake(args))


@pytest.fixture
def both(monkeypatch, host):
    """``both(fn)``: fn on the CUDA path, with the kernels from the host build, and on
    the formula path, on NumPy arrays and on the strict fake device (``tg.tensor`` puts
    tensors there; its module refuses what CuPy lacks, its kernels refuse host arrays).
    Returns ``(formula, cuda)`` per device and the kernels called."""
    from tapegrad.optim import adam, rmsprop, sgd

    fake = fake_device()
    make = tg.tensor

    def on_fake(fn):
        with monkeypatch.context() as m:
            m.setattr(tg, "tensor", lambda *a, **k: make(*a, **{"device": fake, **k}))
            return fn()

    def emulate(fn, device):
        with monkeypatch.context() as m:
            backend = cpu.backend if device is None else fake.backend
            m.setattr(backend, "name", "cupy")
            if device is None:
                m.setattr(kernels.KernelSpec, "__call__",
                          lambda self, *a: host.elementwise(self, a))
                m.setattr(kernels.RawKernelSpec, "build", lambda self, **t: host.raw(self, t))
            else:
                m.setattr(tg, "tensor", lambda *a, **k: make(*a, **{"device": fake, **k}))
                m.setattr(kernels.KernelSpec, "__call__",
                          lambda self, *a: _fake_elementwise(host, self, a))
                m.setattr(kernels.RawKernelSpec, "build",
                          lambda self, **t: _fake_raw(host, self, t))
            m.setattr(kernels, "launch",
                      lambda kern, n, args, block=256: kern(args) if n > 0 else None)
            for mod in (sgd, adam, rmsprop):
                m.setattr(mod, "_on_cuda", lambda p, g: g.dtype == p.dtype)
            return fn()

    def run(fn):
        ref, ref_fake = fn(), on_fake(fn)  # the formulas (the fake device draws its own
        host.calls.clear()  # random numbers, so each device is compared with itself)
        got = emulate(fn, None)
        calls = list(host.calls)
        got_fake = emulate(fn, fake)
        assert sorted(host.calls[len(calls):]) == sorted(calls)  # the same kernels
        return (ref, got), (ref_fake, got_fake), calls
    return run


def _host_array(a):
    a = a.array if isinstance(a, tg.Tensor) else a
    return a.get() if type(a) is FakeArray else a


def _same(a, b, path="result"):
    """Bitwise equality (NaN where NaN) of nested results."""
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b), path
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{k}]")
        return
    a, b = _host_array(a), _host_array(b)
    if a is None or b is None:
        assert a is None and b is None, path
        return
    assert a.dtype == b.dtype and a.shape == b.shape, (path, a.dtype, b.dtype, a.shape, b.shape)
    np.testing.assert_array_equal(a, b, err_msg=path, strict=True)


def check(both, fn, *expect_kernels):
    (ref, got), (ref_fake, got_fake), calls = both(fn)
    _same(ref, got, "CUDA path on NumPy")
    _same(ref_fake, got_fake, "CUDA path on the fake device")
    for k in expect_kernels:
        assert k in calls, (k, calls)
    return calls


rng = np.random.default_rng(12)
FLOATS = [np.float32, np.float64]


def _grad_run(op, x, gy, *args, **kw):
    def run():
        t = tg.tensor(x, requires_grad=True)
        y = op(t, *args, **kw)
        y.backward(tg.tensor(gy))
        return y, t.grad
    return run


def test_host_build_covers_every_kernel(host):
    built = {name for name, _ in host.raw_sigs} | {
        n for n, s in host.specs.items() if s.kind != "raw" and _host_variants(s)}
    assert built == set(host.specs)


# ------------------------------------------------------------------ activations

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name, op, args", [
    ("relu", ops.relu, ()), ("leaky_relu", ops.leaky_relu, (0.1,)),
    ("leaky_relu", ops.leaky_relu, (0.3,)), ("sigmoid", ops.sigmoid, ()),
    ("tanh", ops.tanh, ())])
def test_activation_vjps(both, dtype, name, op, args):
    x = rng.standard_normal((6, 7)).astype(dtype)
    x[0, :3] = (0.0, np.nan, -np.inf)
    gy = rng.standard_normal((6, 7)).astype(dtype)
    gy[1, 0] = np.inf
    with np.errstate(invalid="ignore"):  # relu's CPU rule turns inf * 0 into NaN, as PyTorch
        check(both, _grad_run(op, x, gy, *args), f"tg_{name}_grad")


# ---------------------------------------------------------------------- dropout

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_dropout_fused_and_mask_kernels(both, dtype, p):
    x = rng.standard_normal((8, 9)).astype(dtype)
    gy = rng.standard_normal((8, 9)).astype(dtype)

    def run():
        tg.manual_seed(3)
        t = tg.tensor(x, requires_grad=True)
        y = ops.dropout(t, p)  # fused: y and the mask in one pass
        y2, mask = ops.dropout(t, p, return_mask=True)  # the mask kernel
        z = ops.dropout2d(t.reshape(2, 4, 3, 3), p)  # (N, C, 1, 1) mask
        (y * tg.tensor(gy)).sum().backward()
        return y, y2, mask, z, t.grad
    check(both, run, "tg_dropout_forward", "tg_dropout_mask")


# ------------------------------------------------------------------- batch norm

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5, 2)])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm(both, dtype, shape, affine, training):
    c = shape[1]
    x = (rng.standard_normal(shape) * 3 + 100).astype(dtype)  # a large mean: shift matters
    gy = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(c).astype(dtype)
    b = rng.standard_normal(c).astype(dtype)

    def run():
        t = tg.tensor(x, requires_grad=True)
        wt = tg.tensor(w, requires_grad=True) if affine else None
        bt = tg.tensor(b, requires_grad=True) if affine else None
        rm, rv = tg.tensor(np.full(c, 99.0, dtype)), tg.tensor(np.full(c, 8.0, dtype))
        y = ops.batch_norm(t, rm, rv, wt, bt, training=training)
        y.backward(tg.tensor(gy))
        return y, t.grad, None if wt is None else wt.grad, None if bt is None else bt.grad, rm, rv
    expect = ("tg_batch_norm_forward",) + (("tg_batch_norm_backward",) if training else ())
    check(both, run, *expect)


# ---------------------------------------------------------------- cross entropy

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("spatial", [(), (3, 2)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.15])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore", [False, True])
def test_cross_entropy_backward(both, dtype, spatial, weighted, smoothing, reduction, ignore):
    n, c = 5, 4
    x = rng.standard_normal((n, c) + spatial).astype(dtype)
    t = rng.integers(0, c, (n,) + spatial)
    if ignore:
        t.reshape(-1)[::3] = -100
    w = rng.random(c).astype(dtype) + 0.5 if weighted else None
    gy = rng.standard_normal((n,) + spatial).astype(dtype) if reduction == "none" else None

    def run():
        xt = tg.tensor(x, requires_grad=True)
        loss = ops.cross_entropy(xt, t, weight=w, reduction=reduction, label_smoothing=smoothing,
                                 ignore_index=-100)
        loss.backward(None if gy is None else tg.tensor(gy))
        return loss, xt.grad
    check(both, run, "tg_softmax_ce_backward")


# ------------------------------------------------------------------------- conv

_CONVS = [  # (N, C, H, W), (O, Cg, kh, kw), stride, padding, dilation, groups
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1, 1, 1),
    ((2, 4, 9, 8), (6, 2, 3, 2), 2, (1, 0, 2, 1), 1, 2),
    ((1, 2, 10, 9), (3, 2, 3, 3), (2, 3), 2, (2, 1), 1),
    ((3, 1, 12, 12), (5, 1, 5, 5), 1, 0, 1, 1),
    ((2, 6, 5, 5), (6, 1, 3, 3), 1, 1, 1, 6),
    ((2, 2, 8, 8), (2, 2, 1, 1), 2, 0, 1, 1),
    ((2, 4, 11, 10), (8, 2, 2, 3), 3, (2, 1, 0, 2), (2, 3), 2),  # stride > kernel: gaps
    ((1, 3, 6, 7), (9, 3, 3, 3), 1, "same", 2, 1),  # stride 1, many outputs: col2im path
]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("xs, ws, stride, padding, dilation, groups", _CONVS)
def test_conv2d(both, dtype, xs, ws, stride, padding, dilation, groups):
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)

    def run():
        xt, wt, bt = (tg.tensor(a, requires_grad=True) for a in (x, w, b))
        y = ops.conv2d(xt, wt, bt, stride=stride, padding=padding, dilation=dilation,
                       groups=groups)
        y.backward(tg.tensor(np.linspace(-1, 1, y.array.size).reshape(y.shape).astype(dtype)))
        return y, xt.grad, wt.grad, bt.grad
    check(both, run, "tg_im2col")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("stride, padding, output_padding, groups, dilation", [
    (1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (3, 2, 0, 2, 1), (2, 0, 1, 1, 2)])
def test_conv_transpose2d(both, dtype, stride, padding, output_padding, groups, dilation):
    x = rng.standard_normal((2, 4, 5, 4)).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 3)).astype(dtype)

    def run():
        xt, wt = tg.tensor(x, requires_grad=True), tg.tensor(w, requires_grad=True)
        y = ops.conv_transpose2d(xt, wt, stride=stride, padding=padding,
                                 output_padding=output_padding, groups=groups,
                                 dilation=dilation)
        y.backward(tg.tensor(np.cos(np.arange(y.array.size)).reshape(y.shape).astype(dtype)))
        return y, xt.grad, wt.grad
    calls = check(both, run, "tg_im2col")
    if stride != 1:
        assert "tg_col2im" in calls


# --------------------------------------------------------------------- max pool

@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", [
    (2, None, 0, False), (3, 2, 1, False), (3, 2, (1, 0, 2, 1), True), (2, 1, 0, False),
    (3, 3, 0, True), ((2, 3), (1, 2), (1, 1, 0, 2), False),
    (2, 3, 1, True), ((3, 2), (4, 3), (2, 0, 1, 1), True)])  # stride > kernel
def test_max_pool2d(both, dtype, kernel, stride, padding, ceil_mode):
    x = np.round(rng.standard_normal((2, 3, 9, 8)), 1).astype(dtype)  # ties
    x[0, 0, 0, :4] = (np.nan, -np.inf, -np.inf, np.nan)
    x[0, 1, :3, :3] = -np.inf  # windows of -inf only
    x[1, 2, 4, 4] = np.inf

    def run():
        t = tg.tensor(x, requires_grad=True)
        y = ops.max_pool2d(t, kernel, stride, padding, ceil_mode=ceil_mode)
        gy = np.random.default_rng(5).standard_normal(y.shape).astype(dtype)
        y.backward(tg.tensor(gy))
        return y, t.grad
    check(both, run, "tg_max_pool_forward", "tg_max_pool_backward")


def test_max_pool2d_without_grad_saves_no_index(both):
    x = rng.standard_normal((2, 2, 6, 6)).astype(np.float32)
    check(both, lambda: ops.max_pool2d(tg.tensor(x), 2), "tg_max_pool_forward")


# ------------------------------------------------------------------- optimizers

def _optimizer_run(make, dtype, steps=3):
    p0 = rng.standard_normal((5, 4)).astype(dtype)
    grads = [rng.standard_normal((5, 4)).astype(dtype) for _ in range(steps)]

    def run():
        p = tg.nn.Parameter(tg.tensor(p0.copy()))
        opt = make([p])
        for g in grads:
            p.grad = tg.tensor(g)
            opt.step()
        return p, *(v for st in opt.state.values() for v in st.values()
                     if hasattr(v, "dtype"))
    return run


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kw", [
    dict(), dict(weight_decay=0.01), dict(momentum=0.9), dict(momentum=0.9, dampening=0.3),
    dict(momentum=0.9, nesterov=True, weight_decay=1e-3)])
def test_sgd(both, dtype, kw):
    calls = check(both, _optimizer_run(lambda ps: tg.optim.SGD(ps, lr=0.1, **kw), dtype))
    assert calls and set(calls) <= {"tg_sgd_update", "tg_sgd_momentum_update"}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("cls", ["Adam", "AdamW"])
@pytest.mark.parametrize("kw", [dict(), dict(weight_decay=0.1), dict(amsgrad=True),
                                dict(amsgrad=True, weight_decay=0.05, betas=(0.8, 0.9))])
def test_adam(both, dtype, cls, kw):
    make = lambda ps: getattr(tg.optim, cls)(ps, lr=0.01, **kw)  # noqa: E731
    calls = check(both, _optimizer_run(make, dtype))
    assert set(calls) == {"tg_adam_amsgrad_update" if kw.get("amsgrad") else "tg_adam_update"}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kw", [dict(), dict(centered=True), dict(momentum=0.8),
                                dict(centered=True, momentum=0.5, weight_decay=0.01)])
def test_rmsprop(both, dtype, kw):
    calls = check(both, _optimizer_run(lambda ps: tg.optim.RMSprop(ps, lr=0.01, **kw), dtype))
    assert len(set(calls)) == 1 and calls[0].startswith("tg_rmsprop")


# ------------------------------------------------- the references the GPU tests use

def _elementwise_names():
    kc._declare_all()
    return sorted(n for n, s in kernels.registered().items()
                  if s.kind == "elementwise" and s.reference is not None and s.sample is not None)


@pytest.mark.parametrize("name", _elementwise_names())
def test_reference_is_the_kernel(host, name):
    """Each kernel's NumPy reference computes what its source computes, bit for bit
    (so the gpu test comparing them checks the device, not the formula)."""
    spec = host.specs[name]
    for types in _host_variants(spec):
        dtype = np.dtype(types.get("T", types.get("F")))
        args = spec.sample(np.random.default_rng(7), dtype)
        want = spec.reference(*_copies(args))
        _same(want, host.elementwise(spec, _copies(args)), f"{name} {types}")


def _copies(args):
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def test_double_backward_records_formulas_not_kernels(both):
    """Under create_graph the vjps run on Tensors (ctx.xp is the recording backend):
    no kernel may see them, and second derivatives equal the CPU path's."""
    x = rng.standard_normal((2, 3, 6, 6))
    w = rng.standard_normal((4, 3, 3, 3))
    t = rng.integers(0, 4, 2)

    def run():
        xt, wt = tg.tensor(x, requires_grad=True), tg.tensor(w, requires_grad=True)
        h = ops.conv2d(xt, wt, padding=1)
        h = ops.batch_norm(h, None, None, training=True)
        h = ops.max_pool2d(ops.tanh(ops.sigmoid(ops.leaky_relu(h, 0.1))), 2)
        loss = ops.cross_entropy(ops.relu(h).sum(axis=(2, 3)), t, label_smoothing=0.1)
        gx, gw = tg.grad(loss, (xt, wt), create_graph=True)
        ((gx * gx).sum() + (gw * gw).sum()).backward()
        return loss, gx, gw, xt.grad, wt.grad
    check(both, run, "tg_im2col", "tg_batch_norm_forward", "tg_max_pool_forward")
