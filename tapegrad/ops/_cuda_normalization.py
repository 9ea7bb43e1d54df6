"""CUDA: batch norm's normalise+affine forward and closed-form training dx
(:class:`.normalization.BatchNorm`), each one pass over ``(N, C*L)``."""

from __future__ import annotations

import numpy as np

from ..device import kernels

# CUDA: the normalise+affine of the forward and the closed-form dx of the training
# backward, each one pass over (N, C*L) with per-channel coefficients indexed by
# ch = (i / L) % C, in the same operation order as the array formulas they replace
# (which stay the CPU path and are restated by the references). T is the input's
# dtype, F the one it is computed in (float32 for float16).
_BN_TYPES = ({"T": "float16", "F": "float32"}, {"T": "float32", "F": "float32"},
             {"T": "float64", "F": "float64"})


def _bn_forward_reference(x, a, b, scale, bias, ln, c, has_bias, y=None):
    ch = (np.arange(x.size) // ln % c).reshape(x.shape)
    v = (x.astype(a.dtype) - a[ch]) - b[ch]
    v = v * scale[ch]
    if has_bias:
        v = v + bias[ch]
    return v.astype(x.dtype)


def _bn_backward_reference(g, k, b, scale, ln, c, xc):
    ch = (np.arange(xc.size) // ln % c).reshape(xc.shape)
    return (g.astype(xc.dtype) - (xc * k[ch] + b[ch])) * scale[ch]


def _bn_sample(rng, dtype, backward=False):
    f = np.float64 if dtype == np.float64 else np.float32
    vec = lambda: rng.standard_normal(3).astype(f)  # noqa: E731
    x = rng.standard_normal((4, 3 * 5)).astype(dtype)
    if backward:
        return x, vec(), vec(), vec(), 5, 3, rng.standard_normal((4, 15)).astype(f)
    return x, vec(), vec(), vec(), vec(), 5, 3, 1


bn_forward = kernels.elementwise(
    "tg_batch_norm_forward",
    "T x, raw F a, raw F b, raw F scale, raw F bias, int32 ln, int32 c, int32 has_bias", "T y",
    """const int ch = (i / ln) % c;
    F v = ((F)x - a[ch]) - b[ch];
    v = v * scale[ch];
    if (has_bias) v = v + bias[ch];
    y = (T)v""",
    types=_BN_TYPES, scalars=("ln", "c", "has_bias"), reference=_bn_forward_reference,
    sample=_bn_sample)
bn_backward = kernels.elementwise(
    "tg_batch_norm_backward", "T g, raw F k, raw F b, raw F scale, int32 ln, int32 c", "F xc",
    """const int ch = (i / ln) % c;
    F v = xc * k[ch];
    v = v + b[ch];
    xc = ((F)g - v) * scale[ch]""",
    types=_BN_TYPES, scalars=("ln", "c"), reference=_bn_backward_reference,
    sample=lambda rng, dt: _bn_sample(rng, dt, backward=True))
