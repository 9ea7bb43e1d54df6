"""A lazily built, cached registry of CuPy ElementwiseKernels.

No op uses it yet: every op runs its array-module formula on CuPy as on
NumPy. The CUDA backend issue wires the hot paths in; this is where their
kernels will be declared and compiled. Kernels are declared once at import
time with :func:`elementwise`
(which costs nothing: CuPy is not imported) and compiled on first use, once
per (kernel, device); CuPy itself caches the per-dtype specialisations.

    relu_backward = elementwise(
        "relu_backward", "T y, T gy", "T gx", "gx = y > 0 ? gy : (T)0")
    gx = relu_backward(y, gy)          # y, gy are cupy arrays

On CPU there is no kernel: callers branch on ``xp is numpy`` and use the
plain array formula, which is also what the GPU tests compare each kernel to.
"""

from __future__ import annotations

from ..errors import DeviceError
from . import _import_cupy

_registry: dict[str, KernelSpec] = {}


class KernelSpec:
    """A named CuPy kernel, compiled on first call per device."""

    def __init__(self, kind, name, in_params, out_params, operation, **options):
        self.kind = kind
        self.name = name
        self.in_params = in_params
        self.out_params = out_params
        self.operation = operation
        self.options = options
        self._compiled = {}

    def build(self):
        cupy = _import_cupy()
        if cupy is None:
            raise DeviceError(f"kernel {self.name!r} needs CuPy and a GPU")
        dev = cupy.cuda.runtime.getDevice()
        kern = self._compiled.get(dev)
        if kern is None:
            if self.kind == "elementwise":
                kern = cupy.ElementwiseKernel(
                    self.in_params, self.out_params, self.operation, self.name, **self.options
                )
            else:
                kern = cupy.ReductionKernel(
                    self.in_params, self.out_params, name=self.name, **self.options
                )
            self._compiled[dev] = kern
        return kern

    def __call__(self, *args, **kwargs):
        return self.build()(*args, **kwargs)


def elementwise(name, in_params, out_params, operation, **options) -> KernelSpec:
    """Declare (not compile) a CuPy ElementwiseKernel; see the module docstring."""
    if name in _registry:
        return _registry[name]
    spec = KernelSpec("elementwise", name, in_params, out_params, operation, **options)
    _registry[name] = spec
    return spec


def reduction(name, in_params, out_params, **options) -> KernelSpec:
    """Declare a CuPy ReductionKernel (map_expr, reduce_expr, post_map_expr, identity)."""
    if name in _registry:
        return _registry[name]
    spec = KernelSpec("reduction", name, in_params, out_params, None, **options)
    _registry[name] = spec
    return spec


def registered() -> dict[str, KernelSpec]:
    """All declared kernels, by name (for tests and ``tapegrad check``)."""
    return dict(_registry)
