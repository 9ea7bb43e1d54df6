"""Compile every declared kernel to PTX with NVRTC, without a GPU.

CuPy's own ``compile_using_nvrtc`` asks the device for its architecture and
fails on a machine without one; ``cupy.cuda.nvrtc`` (createProgram /
compileProgram / getPTX) compiles for an explicit ``-arch=compute_XX`` on any
machine with the NVRTC library (``pip install cupy-cuda12x
nvidia-cuda-nvrtc-cu12 nvidia-cuda-runtime-cu12``). This module does that for
every kernel in :func:`tapegrad.device.kernels.registered`, for each dtype
variant it declares, so a typo in a kernel fails CI with NVRTC's message
naming the undefined identifier, long before anyone has a GPU.

Where the source comes from
---------------------------
* Raw kernels: their template, specialised per variant (what CuPy compiles).
* ElementwiseKernels: CuPy builds the full ``__global__`` function (parameter
  list, ``CUPY_FOR`` loop over ``i``, ``CIndexer``) only when called with
  device arrays. Its generator ``cupy._core._kernel._get_elementwise_kernel_code``
  is importable but private, so :func:`elementwise_source` calls it when its
  signature is the one known (CuPy 13-14: the exact source CuPy would compile
  for 1-D contiguous arguments) and otherwise writes the same function itself
  from the declaration (``generator="own"``; the tests compile both).

Run ``python -m tapegrad.device.kernel_check`` for a table; it exits 1 when a
kernel fails to compile and 0 with a note when CuPy/NVRTC are missing.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import sys
import time
from dataclasses import dataclass

import numpy as np

from ..errors import DeviceError
from . import kernels

__all__ = ["ARCHS", "KernelCompileError", "available", "elementwise_source", "compile_ptx",
           "check", "main"]

# the oldest architecture NVRTC 12 compiles for without a deprecation warning (Turing) and the
# H200's Hopper, which the GPU verification runs on
ARCHS = ("compute_75", "compute_90")

# CuPy prepends these to every ElementwiseKernel it compiles
_CUPY_HEADERS = ("cupy/complex.cuh", "cupy/carray.cuh", "cupy/atomics.cuh",
                 "cupy/math_constants.h")


class KernelCompileError(DeviceError):
    """A kernel's CUDA source did not compile; the message holds NVRTC's log."""


@dataclass
class Result:
    name: str
    kind: str
    types: dict
    arch: str
    seconds: float
    ptx_bytes: int


def _modules():
    import cupy
    from cupy.cuda import nvrtc

    return cupy, nvrtc


def available() -> str | None:
    """None when the check can run here, else why not (one line)."""
    try:
        _, nvrtc = _modules()
        nvrtc.getVersion()
    except Exception as exc:  # ImportError, a missing libnvrtc, ...
        return f"CuPy's NVRTC is not usable ({type(exc).__name__}: {exc})"
    if _cuda_include() is None:
        return ("the CUDA runtime headers (cuda_fp16.h) are not found: pip install "
                "nvidia-cuda-runtime-cu12, or set CUDA_PATH")
    return None


@functools.cache
def _cuda_include() -> str | None:
    """A directory with cuda_fp16.h: CUDA_PATH's, /usr/local/cuda's, or a CUDA runtime
    wheel's (``nvidia/cuda_runtime/include`` for CUDA 12, ``nvidia/cu13/include`` for 13).

    The first one whose headers have NVRTC's major version wins: NVRTC may come from
    a wheel while /usr/local/cuda holds another toolkit (CUDA 13 headers under NVRTC
    12, say), and mismatched headers can fail to compile or compile something other
    than what CuPy compiles on the GPU (the mismatch CuPy's own discovery once had)."""
    roots = [os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    roots = [os.path.join(r, "include") for r in roots if r]
    for p in sys.path:
        roots += glob.glob(os.path.join(p, "nvidia", "cuda_runtime", "include"))
        roots += sorted(glob.glob(os.path.join(p, "nvidia", "cu[0-9]*", "include")))
    found = [r for r in roots if os.path.isfile(os.path.join(r, "cuda_fp16.h"))]
    major = _nvrtc_major()
    return next((r for r in found if _cudart_major(r) == major), found[0] if found else None)


def _nvrtc_major() -> int | None:
    try:
        return int(_modules()[1].getVersion()[0])
    except Exception:  # no CuPy or no libnvrtc: available() says so
        return None


def _cudart_major(include: str) -> int | None:
    """The CUDA major version of the runtime headers in ``include`` (CUDART_VERSION)."""
    try:
        with open(os.path.join(include, "cuda_runtime_api.h"), errors="replace") as f:
            m = re.search(r"#define\s+CUDART_VERSION\s+(\d+)", f.read())
    except OSError:
        return None
    return int(m.group(1)) // 1000 if m else None


@functools.cache
def _include_options():
    cupy, _ = _modules()
    inc = os.path.join(os.path.dirname(cupy.__file__), "_core", "include")
    opts = ["-I" + inc, "-I" + _cuda_include(), "--std=c++17"]
    cccl = os.path.join(inc, "cupy", "_cccl")
    opts += ["-I" + os.path.join(cccl, d) for d in ("cub", "thrust", "libcudacxx")
             if os.path.isdir(os.path.join(cccl, d))]
    return tuple(opts)


def _param_dtype(p, types):
    """A parameter's dtype: fixed in the declaration (``int32 n``) or its placeholder's."""
    if p.dtype is not None:
        return np.dtype(p.dtype)
    if p.ctype not in types:
        raise DeviceError(f"type placeholder {p.ctype!r} of parameter {p.name!r} has no dtype "
                          f"in the variant {types}; list it in the kernel's types=")
    return np.dtype(types[p.ctype])


def _cupy_params(spec):
    cupy, _ = _modules()
    kern = cupy.ElementwiseKernel(spec.in_params, spec.out_params, spec.operation, spec.name,
                                  preamble=spec.preamble)
    return kern.params  # ParameterInfo of every argument, then _ind


@dataclass(frozen=True)
class Param:
    """One ElementwiseKernel parameter, parsed as CuPy parses it (``[raw] type name``;
    a type that is a dtype name is fixed, anything else a placeholder)."""
    name: str
    dtype: object  # numpy dtype, or None for a placeholder
    ctype: str  # the placeholder, or the fixed type's C name
    raw: bool
    is_const: bool


def params(spec) -> list[Param]:
    """The parameters of an ElementwiseKernel spec, inputs then outputs (no CuPy needed)."""
    out = []
    for text, const in ((spec.in_params, True), (spec.out_params, False)):
        for decl in filter(None, (d.strip() for d in text.split(","))):
            words = decl.split()
            raw = words[0] == "raw"
            typ, name = words[raw:]
            fixed = typ in kernels._CTYPES
            out.append(Param(name, np.dtype(typ) if fixed else None,
                             kernels.ctype(typ) if fixed else typ, raw, const))
    return out


def _source_from_cupy(spec, types):
    """CuPy's own generator (private, signature checked by the caller)."""
    import cupy._core._kernel as ck
    from cupy._core._carray import Indexer

    _ndarray, _indexer, _scalar = 1, 2, 3  # CuPy's _ArgInfo kinds
    cupy, _ = _modules()
    cps = _cupy_params(spec)
    infos = []
    for p in cps[:-1]:
        dt = _param_dtype(p, types)
        if p.name in spec.scalars:
            infos.append(ck._ArgInfo(_scalar, dt.type, dt, 0, True, True))
        else:
            infos.append(ck._ArgInfo(_ndarray, cupy.ndarray, dt, 1, True, True))
    infos.append(ck._ArgInfo(_indexer, Indexer, None, 1, True, True))
    type_map = ck._TypeMap(tuple((k, np.dtype(v)) for k, v in types.items()))
    return ck._get_elementwise_kernel_code(tuple(infos), type_map, cps, spec.operation,
                                           spec.name, spec.preamble, spec.loop_prep,
                                           spec.after_loop)


def _source_own(spec, types):
    """The function CuPy builds, written from the declaration: typedefs of the type
    placeholders, raw arrays and scalars as plain parameters, every other array a
    ``CArray`` read through the ``CIndexer`` inside a ``CUPY_FOR`` loop over ``i``."""
    ps = params(spec)
    lines = []
    if "float16" in types.values() or any(p.dtype == "float16" for p in ps):
        lines.append('#include "cupy/float16.cuh"')
    lines += [f"typedef {kernels.ctype(v)} {k};" for k, v in types.items()]
    args, loads = [], []
    for p in ps:
        ct = kernels.ctype(_param_dtype(p, types))
        const = "const " if p.is_const else ""
        name_t = p.ctype if p.dtype is None else ct
        if p.name in spec.scalars:
            args.append(f"const {ct} {p.name}")
        elif p.raw:
            args.append(f"{const}CArray<{ct}, 1, 1, 1> {p.name}")
        else:
            args.append(f"{const}CArray<{ct}, 1, 1, 1> _raw_{p.name}")
            loads.append(f"{const}{name_t} &{p.name} = _raw_{p.name}[_ind.get()];")
    args.append("CIndexer<1, 1> _ind")
    body = "\n        ".join(loads + [spec.operation + ";"])
    return "\n".join(lines) + f"""
{spec.preamble}
extern "C" __global__ void {spec.name}({", ".join(args)}) {{
    {spec.loop_prep};
    CUPY_FOR(i, _ind.size()) {{
        _ind.set(i);
        {body}
    }}
    {spec.after_loop};
}}
"""


def _cupy_generator_known() -> bool:
    try:
        import cupy._core._kernel as ck

        doc = ck._get_elementwise_kernel_code.__doc__ or ""
        return doc.startswith("_get_elementwise_kernel_code(tuple arginfos, _TypeMap type_map, "
                              "tuple params, str operation, str name, str preamble")
    except Exception:
        return False


def elementwise_source(spec, types: dict, generator: str = "auto") -> str:
    """The full CUDA source (CuPy's headers included) of one variant of an
    ElementwiseKernel spec; ``generator`` is ``"cupy"``, ``"own"`` or ``"auto"``."""
    if spec.kind != "elementwise":
        raise DeviceError(f"kernel {spec.name!r}: the compile check covers elementwise and raw "
                          f"kernels, not {spec.kind} kernels; add their source generator to "
                          "tapegrad.device.kernel_check first")
    if generator == "auto":
        generator = "cupy" if _cupy_generator_known() else "own"
    code = _source_from_cupy(spec, types) if generator == "cupy" else _source_own(spec, types)
    return "".join(f"#include <{h}>\n" for h in _CUPY_HEADERS) + code


def compile_ptx(source: str, name: str, options=(), arch: str = ARCHS[-1]) -> str:
    """Compile CUDA ``source`` to PTX for ``arch`` (``"compute_90"``) with NVRTC;
    raises :class:`KernelCompileError` with the log."""
    _, nvrtc = _modules()
    prog = nvrtc.createProgram(source, f"{name}.cu", [], [])
    try:
        try:
            # CuPy appends -ftz=true to every kernel it compiles: so do we
            nvrtc.compileProgram(prog, [f"-arch={arch}", *_include_options(), *options,
                                        "-ftz=true"])
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(prog)
            raise KernelCompileError(f"kernel {name!r} does not compile for {arch}: {exc}\n"
                                     f"{log}") from None
        return nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)


def sources(spec, generator="auto"):
    """``(types, source)`` for every variant of a spec."""
    for types in spec.types:
        if spec.kind == "raw":
            yield types, spec.source(**types)
        else:
            yield types, elementwise_source(spec, types, generator)


def check(specs=None, archs=None, generator: str = "auto") -> list[Result]:
    """Compile every variant of every kernel (default: all registered) for each arch
    (default :data:`ARCHS`)."""
    archs = ARCHS if archs is None else tuple(archs)
    if specs is None:
        _declare_all()
        specs = kernels.registered().values()
    results = []
    for spec in specs:
        for types, src in sources(spec, generator):
            for arch in archs:
                t0 = time.perf_counter()
                try:
                    ptx = compile_ptx(src, spec.name, spec.options, arch)
                except KernelCompileError as exc:
                    raise KernelCompileError(f"{exc} (variant {types})") from None
                results.append(Result(spec.name, spec.kind, types, arch,
                                      time.perf_counter() - t0, len(ptx)))
    return results


def _declare_all():
    """Import every module that declares kernels."""
    import tapegrad.ops  # noqa: F401
    import tapegrad.optim  # noqa: F401


def main(argv=None) -> int:
    """``python -m tapegrad.device.kernel_check [compute_XX ...]``: compile all kernels
    (for :data:`ARCHS` unless archs are given), print a table."""
    archs = tuple(sys.argv[1:] if argv is None else argv) or ARCHS
    why = available()
    if why is not None:
        print(f"kernel compile check skipped: {why}")
        return 0
    t0 = time.perf_counter()
    try:
        results = check(archs=archs)
    except KernelCompileError as exc:
        print(exc)
        return 1
    names = {}
    for r in results:
        names.setdefault(r.name, []).append(r)
    print(f"{'kernel':36} {'kind':12} variants ({', '.join(archs)})")
    for name, rs in names.items():
        variants = sorted({"/".join(r.types.values()) for r in rs})
        print(f"{name:36} {rs[0].kind:12} {', '.join(variants)}")
    n_var = len({(r.name, tuple(r.types.items())) for r in results})
    print(f"{len(names)} kernels, {n_var} variants, {len(results)} PTX compiles OK in "
          f"{time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
