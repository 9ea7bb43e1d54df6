"""The CUDA kernel registry and the compile check of every kernel (NVRTC, no GPU
needed), plus ``gpu`` tests of each kernel against its NumPy reference.

What runs where: the compile check needs CuPy's NVRTC (cupy-cuda12x,
nvidia-cuda-nvrtc-cu12, nvidia-cuda-runtime-cu12) and skips without it;
``test_kernels_host.py`` runs the kernels' source on the CPU; the ``gpu`` tests
need a GPU.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.device import kernel_check as kc
from tapegrad.device import kernels
from tapegrad.errors import DeviceError

_why = kc.available()
needs_nvrtc = pytest.mark.skipif(_why is not None, reason=f"compile check unavailable: {_why}")


def _all_specs():
    kc._declare_all()
    return {n: s for n, s in kernels.registered().items() if n.startswith("tg_")
            and not n.startswith("tg_test")}


# ------------------------------------------------------------------ the registry

def test_every_hot_path_has_its_kernel():
    names = set(_all_specs())
    expected = {
        "tg_relu_grad", "tg_leaky_relu_grad", "tg_sigmoid_grad", "tg_tanh_grad",
        "tg_dropout_mask", "tg_dropout_forward", "tg_batch_norm_forward",
        "tg_batch_norm_backward", "tg_softmax_ce_backward", "tg_sgd_update",
        "tg_sgd_momentum_update", "tg_adam_update", "tg_adam_amsgrad_update",
        "tg_rmsprop_update", "tg_rmsprop_momentum_update", "tg_rmsprop_centered_update",
        "tg_rmsprop_centered_momentum_update", "tg_im2col", "tg_col2im",
        "tg_max_pool_forward", "tg_max_pool_backward"}
    assert expected <= names


def test_elementwise_kernels_declare_reference_and_sample():
    for name, spec in _all_specs().items():
        if spec.kind == "elementwise":
            assert callable(spec.reference) and callable(spec.sample), name
            assert spec.types, name


def test_declaring_compiles_nothing_and_a_name_is_one_kernel():
    spec = kernels.elementwise("tg_test_registry", "T x", "T y", "y = x + (T)1")
    assert spec._compiled == {}
    assert kernels.elementwise("tg_test_registry", "T x", "T y", "y = x + (T)1") is spec
    with pytest.raises(DeviceError, match="tg_test_registry.*declared twice"):
        kernels.elementwise("tg_test_registry", "T x", "T y", "y = x + (T)2")
    raw = kernels.raw("tg_test_raw", 'extern "C" __global__ void tg_test_raw(${T}* y) {}',
                      register=False)
    assert "tg_test_raw" not in kernels.registered()
    assert "void tg_test_raw(float* y)" in raw.source(T="float32")
    assert raw.source(T="float16").startswith("#include <cupy/float16.cuh>")


def test_ctype_and_on_cuda():
    assert kernels.ctype("float32") == "float" and kernels.ctype(np.float64) == "double"
    assert kernels.ctype(np.dtype("int8")) == "signed char"
    with pytest.raises(DeviceError, match="complex64"):
        kernels.ctype("complex64")
    assert not kernels.on_cuda(np) and not kernels.on_cuda(tg.device.cpu.backend)
    from tapegrad.ops.graph_backend import TensorBackend

    assert not kernels.on_cuda(TensorBackend)  # create_graph: never a kernel


def test_building_without_a_gpu_says_so():
    if tg.cupy_available():
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceError, match="needs CuPy and a GPU"):
        _all_specs()["tg_relu_grad"].build()


# ---------------------------------------------------------------- compile check

@needs_nvrtc
def test_every_kernel_compiles_for_every_variant_and_arch():
    specs = _all_specs()
    results = kc.check(specs.values())
    done = {(r.name, tuple(r.types.items()), r.arch) for r in results}
    for name, spec in specs.items():
        for types in spec.types:
            for arch in kc.ARCHS:
                assert (name, tuple(types.items()), arch) in done, (name, types, arch)
    assert all(r.ptx_bytes > 0 for r in results)
    # float16 is a variant of every kernel whose op takes float16
    for name, spec in specs.items():
        if name != "tg_softmax_ce_backward":  # its float16 logits are computed in float32
            assert any("float16" in t.values() for t in spec.types), name


@needs_nvrtc
def test_own_generator_compiles_and_matches_cupys_signature():
    for name, spec in _all_specs().items():
        if spec.kind != "elementwise":
            continue
        cupy_params = [(q.name, q.dtype, q.ctype, q.raw, q.is_const)
                       for q in kc._cupy_params(spec)[:-1]]
        assert [(q.name, q.dtype, q.ctype, q.raw, q.is_const) for q in kc.params(spec)] == \
            cupy_params, name
        # the variants differ only in typedefs (checked below); float16 adds its header
        first = next((t for t in spec.types if "float16" in t.values()), spec.types[0])
        for types, src in kc.sources(spec, generator="own"):
            if types == first:
                kc.compile_ptx(src, name, spec.options, kc.ARCHS[-1])
        if kc._cupy_generator_known():
            for types in spec.types:
                sig = [re.search(r'extern "C" __global__ void [^)]*\)',
                                 kc.elementwise_source(spec, types, g)).group(0)
                       for g in ("cupy", "own")]
                assert sig[0] == sig[1], (name, types)


@needs_nvrtc
@pytest.mark.parametrize("generator", ["auto", "own"])
def test_a_bad_kernel_fails_naming_the_identifier(generator):
    bad = kernels.elementwise("tg_test_bad", "T x", "T y", "y = x * undefined_scale",
                              register=False)
    with pytest.raises(kc.KernelCompileError,
                       match=r"(?s)tg_test_bad.*compute_.*identifier \"undefined_scale\" is "
                             r"undefined.*float16"):
        kc.check([bad], generator=generator)


@needs_nvrtc
def test_a_bad_raw_kernel_fails_naming_the_identifier():
    bad = kernels.raw("tg_test_bad_raw",
                      'extern "C" __global__ void tg_test_bad_raw(${T}* y) { y[0] = nope; }',
                      register=False, types=({"T": "float64"},))
    with pytest.raises(kc.KernelCompileError, match=r'identifier "nope" is undefined'):
        kc.check([bad])


@needs_nvrtc
def test_reductions_are_refused_by_name():
    red = kernels.reduction("tg_test_red", "T x", "T y", map_expr="x", reduce_expr="a + b",
                            post_map_expr="y = a", identity="0", register=False)
    with pytest.raises(DeviceError, match="tg_test_red.*not reduction kernels"):
        kc.check([red])


def _fake_include(root, version):
    root.mkdir(parents=True)
    (root / "cuda_fp16.h").write_text("// fp16\n")
    (root / "cuda_runtime_api.h").write_text(f"#define CUDART_VERSION  {version}\n")
    return str(root)


def test_cuda_headers_match_nvrtc_and_cuda13_wheels_are_found(tmp_path, monkeypatch):
    """/usr/local/cuda (or CUDA_PATH) may hold another toolkit than the NVRTC in use
    (this machine: CUDA 13.0 headers, NVRTC 12.9 from the wheel): the headers of
    NVRTC's version win; CUDA 13 wheels keep theirs in nvidia/cu13/include."""
    system = _fake_include(tmp_path / "cuda13" / "include", 13000)
    site = tmp_path / "site"
    wheel12 = _fake_include(site / "nvidia" / "cuda_runtime" / "include", 12090)
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "cuda13"))
    monkeypatch.setattr(kc.sys, "path", [str(site)])
    try:
        for major, want in ((12, wheel12), (13, system), (None, system)):
            monkeypatch.setattr(kc, "_nvrtc_major", lambda m=major: m)
            kc._cuda_include.cache_clear()
            assert kc._cuda_include() == want, major
        monkeypatch.delenv("CUDA_PATH")
        only13 = tmp_path / "only13"
        wheel13 = _fake_include(only13 / "nvidia" / "cu13" / "include", 13000)
        monkeypatch.setattr(kc.sys, "path", [str(only13)])
        monkeypatch.setattr(kc.os.path, "isfile", lambda p, f=os.path.isfile: f(p) and
                            not p.startswith("/usr/local/cuda/"))  # no system toolkit
        monkeypatch.setattr(kc, "_nvrtc_major", lambda: 13)
        kc._cuda_include.cache_clear()
        assert kc._cuda_include() == wheel13
    finally:
        kc._cuda_include.cache_clear()


def test_main_prints_a_table_or_why_not(capsys, monkeypatch):
    one = {"tg_max_pool_forward": _all_specs()["tg_max_pool_forward"]}
    monkeypatch.setattr(kernels, "registered", lambda: one)  # the full run is tested above
    assert kc.main([kc.ARCHS[-1]]) == 0
    out = capsys.readouterr().out
    if _why is None:
        assert "tg_max_pool_forward" in out and "PTX compiles OK" in out
    else:
        assert "skipped" in out


# -------------------------------------------------------------------- on a GPU

def _tolerance(dtype):
    return {np.float16: (2e-3, 2e-3), np.float32: (2e-6, 1e-6),
            np.float64: (1e-13, 1e-13)}[np.dtype(dtype).type]


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(n for n, s in _all_specs().items()
                                        if s.kind == "elementwise"))
def test_kernel_matches_its_numpy_reference(name):
    import cupy

    spec = _all_specs()[name]
    for types in spec.types:
        dtype = np.dtype(types.get("T", types.get("F")))
        args = spec.sample(np.random.default_rng(0), dtype)
        want = spec.reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
        got = spec(*[cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args])
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        rtol, atol = _tolerance(dtype)
        assert len(got) == len(want), (name, types)  # zip would drop a missing output
        for w, g in zip(want, got):
            assert g.dtype == w.dtype, (name, types)
            np.testing.assert_allclose(cupy.asnumpy(g), w, rtol=rtol, atol=atol,
                                       err_msg=f"{name} {types}")


def _geom(n, c, h, w, o, kh, kw, stride, pad, dilation, groups):
    from tapegrad.ops._conv_columns import Geom

    g = Geom()
    g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.groups = n, c, h, w, o, kh, kw, groups
    g.stride, g.dilation, g.pad = stride, dilation, pad
    g.ho = (h + pad[0] + pad[1] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    g.wo = (w + pad[2] + pad[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    return g


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_im2col_col2im_match_the_numpy_ones(dtype):
    import cupy

    from tapegrad.device import cpu
    from tapegrad.device.backend import ArrayBackend
    from tapegrad.ops import _conv_columns, _cuda_conv

    cx = ArrayBackend(cupy)
    for geom in [(2, 3, 7, 6, 4, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
                 (2, 4, 9, 8, 6, 3, 2, (2, 1), (1, 0, 2, 1), (2, 1), 2)]:
        g = _geom(*geom)
        x = np.random.default_rng(1).standard_normal((g.n, g.c, g.h, g.w)).astype(dtype)
        cols = _conv_columns.im2col(cpu.backend, x, g)
        np.testing.assert_array_equal(_cuda_conv.im2col(cx, cupy.asarray(x), g).get(), cols)
        back = _conv_columns.col2im(cpu.backend, cols, g, cols.dtype)
        rtol, atol = _tolerance(dtype)
        np.testing.assert_allclose(_cuda_conv.col2im(cx, cupy.asarray(cols), g, cols.dtype).get(),
                                   back, rtol=rtol, atol=atol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("kernel, stride, padding, ceil_mode", [
    (2, None, 0, False), (3, 2, 1, False), (3, 2, (1, 0, 2, 1), True), (2, 1, 0, False)])
def test_max_pool_kernels_match_the_cpu_op(dtype, kernel, stride, padding, ceil_mode):
    x = np.round(np.random.default_rng(2).standard_normal((2, 3, 9, 8)), 1).astype(dtype)
    x[0, 0, 0, :4] = (np.nan, -np.inf, -np.inf, np.nan)
    x[0, 1, :3, :3] = -np.inf
    res = []
    for device in ("cpu", "cuda"):
        t = tg.tensor(x, device=device, requires_grad=True)
        y = tg.ops.max_pool2d(t, kernel, stride, padding, ceil_mode=ceil_mode)
        gy = np.random.default_rng(3).standard_normal(y.shape).astype(dtype)
        y.backward(tg.tensor(gy, device=device))
        res.append((y.to("cpu").numpy(), t.grad.to("cpu").numpy()))
    np.testing.assert_array_equal(res[1][0], res[0][0])  # a selection: exact
    rtol, atol = _tolerance(dtype)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=rtol, atol=atol)


@pytest.mark.gpu
def test_dropout_masks_repeat_under_manual_seed_fused_or_not():
    x = tg.tensor(np.ones((64, 33), np.float32), device="cuda")
    tg.manual_seed(11)
    fused = tg.ops.dropout(x, 0.3)  # mask and y in one kernel
    tg.manual_seed(11)
    y, mask = tg.ops.dropout(x, 0.3, return_mask=True)  # the mask kernel, then x * mask
    np.testing.assert_array_equal(fused.to("cpu").numpy(), y.to("cpu").numpy())
    vals = np.unique(mask.to("cpu").numpy())
    np.testing.assert_allclose(vals, [0.0, np.float32(1 / 0.7)])


@pytest.mark.gpu
@pytest.mark.parametrize("make", [
    lambda ps: tg.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    lambda ps: tg.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.2),
    lambda ps: tg.optim.Adam(ps, lr=1e-2, weight_decay=0.1, amsgrad=True),
    lambda ps: tg.optim.AdamW(ps, lr=1e-2),
    lambda ps: tg.optim.RMSprop(ps, lr=1e-2, centered=True, momentum=0.5)])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_optimizer_kernels_match_the_cpu_update(make, dtype):
    rng = np.random.default_rng(4)
    p0 = rng.standard_normal((7, 5)).astype(dtype)
    grads = [rng.standard_normal((7, 5)).astype(dtype) for _ in range(3)]
    res = []
    for device in ("cpu", "cuda"):
        p = tg.nn.Parameter(tg.tensor(p0.copy(), device=device))
        opt = make([p])
        for g in grads:
            p.grad = tg.tensor(g, device=device)
            opt.step()
        res.append(p.to("cpu").numpy())
    rtol, atol = _tolerance(dtype)
    np.testing.assert_allclose(res[1], res[0], rtol=rtol * 10, atol=atol * 10)
