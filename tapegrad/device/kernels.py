"""A lazily built, cached registry of the CuPy kernels that ops use on CUDA.

Each kernel is declared at the top of its op's own module, next to the array
formula it replaces (Chainer's ``functions/activation/relu.py``), with the
dtype variants it supports and, for the tests, a NumPy reference of what it
computes. Declaring costs nothing (CuPy is not imported); the kernel is built
on first call, once per (kernel, device) -- and for a raw kernel once per type
variant -- and CuPy caches the compiled binaries::

    relu_grad = elementwise(
        "tg_relu_grad", "T y, T gy", "T gx", "gx = gy * (y != (T)0 ? (T)1 : (T)0)",
        reference=lambda y, gy: gy * (y != 0))
    gx = relu_grad(y, gy)          # y, gy are cupy arrays

RawKernels (:func:`raw`) are templates over type placeholders (``${T}``),
specialised per variant; they and the longer ElementwiseKernels live in
``tapegrad/ops/_cuda_<family>.py`` (im2col/col2im, max pooling, batch norm,
cross-entropy) next to the family module that calls them.

On CPU there is no kernel: ops branch on :func:`on_cuda` (``ctx.xp.name ==
"cupy"``) and keep their array formula as the CPU path, which is also what the
GPU tests compare each kernel to. Under ``create_graph`` ``ctx.xp`` is the
recording backend, so kernels are used on the raw-array path only.

Every declared kernel's CUDA source is compiled to PTX without a GPU on every
CI run by :mod:`tapegrad.device.kernel_check`, for each of its variants, and
``tests/device/test_kernels_host.py`` runs each op's CUDA branch with the
kernels' source built for the CPU.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import DeviceError
from . import _import_cupy, cupy_unavailable_reason

__all__ = ["elementwise", "reduction", "raw", "registered", "on_cuda", "launch", "ctype",
           "FLOATS", "KernelSpec", "RawKernelSpec"]

# dtype variants: one mapping of type placeholders to dtype names per variant
FLOATS = ({"T": "float16"}, {"T": "float32"}, {"T": "float64"})

# Every kernel is built with FMA contraction off, so that ``a * b + c`` rounds
# twice, as the NumPy formula it replaces does: the kernels are memory-bound, so
# the fused multiply-add would buy no speed, only results that differ from the
# CPU path in the last bit. (CuPy itself adds -ftz=true to every kernel, its own
# included: float32 subnormals are flushed to zero on the GPU.)
DEFAULT_OPTIONS = ("--fmad=false",)

_CTYPES = {"float16": "float16", "float32": "float", "float64": "double",
           "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
           "uint8": "unsigned char", "bool": "bool"}

_registry: dict[str, KernelSpec | RawKernelSpec] = {}


def ctype(dtype) -> str:
    """The CUDA type CuPy uses for a dtype name: ``ctype("float32") == "float"``."""
    try:
        name = np.dtype(dtype).name
        return _CTYPES[name]
    except (KeyError, TypeError):
        raise DeviceError(f"no CUDA kernel type for dtype {dtype!r}") from None


def on_cuda(xp) -> bool:
    """True when ``xp`` (``ctx.xp``, an array module, or an ``ArrayBackend``) is CuPy:
    the raw-array path on a GPU, where the fused kernels apply."""
    return getattr(xp, "name", None) == "cupy" or getattr(xp, "__name__", None) == "cupy"


def _cupy():
    cupy = _import_cupy()
    if cupy is None:
        raise DeviceError(f"kernel needs CuPy and a GPU ({cupy_unavailable_reason()})")
    return cupy


class KernelSpec:
    """A named CuPy ElementwiseKernel (or ReductionKernel), compiled on first call
    per device.

    ``types`` lists the dtype variants (placeholder -> dtype name) the kernel is
    meant for and checked with; ``scalars`` names the parameters passed as Python
    or NumPy scalars (the compile check needs to know; CuPy infers it per call);
    ``reference`` is a NumPy callable with the kernel's call signature returning
    what the kernel returns; ``sample(rng, dtype)`` makes NumPy arguments for it.
    """

    def __init__(self, kind, name, in_params, out_params, operation, *, types=FLOATS,
                 scalars=(), reference=None, sample=None, preamble="", loop_prep="",
                 after_loop="", options=DEFAULT_OPTIONS, **kw):
        self.kind = kind
        self.name = name
        self.in_params = in_params
        self.out_params = out_params
        self.operation = operation
        self.types = tuple(dict(t) for t in types)
        self.scalars = tuple(scalars)
        self.reference = reference
        self.sample = sample
        self.preamble = preamble
        self.loop_prep = loop_prep
        self.after_loop = after_loop
        self.options = tuple(options)
        self.kw = kw  # ReductionKernel's map_expr, reduce_expr, post_map_expr, identity
        self._compiled = {}

    def _key(self):
        return (self.kind, self.in_params, self.out_params, self.operation, self.preamble,
                self.loop_prep, self.after_loop, self.options, tuple(sorted(self.kw.items())))

    def build(self):
        cupy = _cupy()
        dev = cupy.cuda.runtime.getDevice()
        kern = self._compiled.get(dev)
        if kern is None:
            if self.kind == "elementwise":
                kern = cupy.ElementwiseKernel(
                    self.in_params, self.out_params, self.operation, self.name,
                    preamble=self.preamble, loop_prep=self.loop_prep,
                    after_loop=self.after_loop, options=self.options)
            else:
                kern = cupy.ReductionKernel(self.in_params, self.out_params, name=self.name,
                                            preamble=self.preamble, options=self.options,
                                            **self.kw)
            self._compiled[dev] = kern
        return kern

    def __call__(self, *args, **kwargs):
        return self.build()(*args, **kwargs)

    def __repr__(self):
        return f"<{self.kind} kernel {self.name}: {self.in_params} -> {self.out_params}>"


class RawKernelSpec:
    """A CuPy RawKernel whose source is a :class:`string.Template` over type
    placeholders (``${T}``, ``${I}``), specialised explicitly per variant.

    ``spec.build(T="float32")`` (dtype names) returns the compiled
    ``cupy.RawKernel`` for that variant; ``spec.source(**types)`` the CUDA source.
    The source must define ``extern "C" __global__ void <name>(...)``.
    """

    kind = "raw"

    def __init__(self, name, source, *, types=FLOATS, options=DEFAULT_OPTIONS,
                 reference=None):
        self.name = name
        self.template = string.Template(source)
        self.types = tuple(dict(t) for t in types)
        self.options = tuple(options)
        self.reference = reference
        self._compiled = {}

    def _key(self):
        return (self.kind, self.template.template, self.options)

    def source(self, **types) -> str:
        """The CUDA source of one variant: ``spec.source(T="float16", I="int8")``."""
        names = {k: ctype(v) for k, v in types.items()}
        head = "#include <cupy/float16.cuh>\n" if "float16" in types.values() else ""
        return head + self.template.substitute(names)

    def build(self, **types):
        cupy = _cupy()
        key = (cupy.cuda.runtime.getDevice(), tuple(sorted(types.items())))
        kern = self._compiled.get(key)
        if kern is None:
            kern = cupy.RawKernel(self.source(**types), self.name, options=self.options)
            self._compiled[key] = kern
        return kern

    def __repr__(self):
        return f"<raw kernel {self.name}: {len(self.types)} variants>"


def _declare(spec, register):
    if not register:
        return spec
    old = _registry.get(spec.name)
    if old is not None:
        if old._key() != spec._key():
            raise DeviceError(f"kernel name {spec.name!r} is declared twice with different "
                              "sources; give the second one its own name")
        return old
    _registry[spec.name] = spec
    return spec


def elementwise(name: str, in_params: str, out_params: str, operation: str, *,
                types: Sequence[dict] = FLOATS, scalars: Sequence[str] = (),
                reference: Callable | None = None, sample: Callable | None = None,
                register: bool = True, **options) -> KernelSpec:
    """Declare (not compile) a CuPy ElementwiseKernel; see the module docstring.

    >>> k = elementwise("tg_twice", "T x", "T y", "y = x * 2")
    """
    spec = KernelSpec("elementwise", name, in_params, out_params, operation, types=types,
                      scalars=scalars, reference=reference, sample=sample, **options)
    return _declare(spec, register)


def reduction(name: str, in_params: str, out_params: str, *, register: bool = True,
              **options) -> KernelSpec:
    """Declare a CuPy ReductionKernel (``map_expr``, ``reduce_expr``,
    ``post_map_expr``, ``identity``). >>> reduction("tg_sumsq", "T x", "T y", ...)"""
    spec = KernelSpec("reduction", name, in_params, out_params, None, **options)
    return _declare(spec, register)


def raw(name: str, source: str, *, types: Sequence[dict] = FLOATS,
        reference: Callable | None = None, register: bool = True,
        options: Sequence[str] = DEFAULT_OPTIONS) -> RawKernelSpec:
    """Declare a RawKernel from a source template with explicit type variants.

    >>> k = raw("tg_fill", 'extern "C" __global__ void tg_fill(${T}* y) {...}')
    """
    spec = RawKernelSpec(name, source, types=types, options=options, reference=reference)
    return _declare(spec, register)


def registered() -> dict[str, KernelSpec | RawKernelSpec]:
    """All declared kernels, by name (for tests, the compile check and ``tapegrad check``).

    Importing :mod:`tapegrad.ops` and :mod:`tapegrad.optim` declares them all.
    """
    return dict(_registry)


def launch(kern, n: int, args, block: int = 256):
    """Run a RawKernel over ``n`` items with a grid-stride loop's grid."""
    if n > 0:
        grid = min((n + block - 1) // block, 65535 * 8)
        kern((grid,), (block,), args)
