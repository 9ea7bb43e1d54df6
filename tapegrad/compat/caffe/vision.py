"""Caffe's layers with weights -- Convolution, Deconvolution, InnerProduct, PReLU,
BatchNorm, Scale, Bias -- and Pooling and LRN. Each docstring says which of Caffe's
conventions it follows (BVLC/caffe ``src/caffe/layers/*_layer.cpp``)."""

from __future__ import annotations

import math

from ... import ops
from ...tape import no_grad
from ...tensor import tensor as make_tensor
from .base import Layer, canonical_axis, count, register
from .schema import messages

__all__ = ["Convolution", "Deconvolution", "InnerProduct", "Pooling", "LRN", "BatchNorm",
           "Scale", "Bias", "PReLU"]


def _two(layer, lp_param, name, default):
    """Caffe's ``name`` (repeated: one value or one per spatial axis) or
    ``name_h``/``name_w``, as ``(h, w)``."""
    stem = "kernel" if name == "kernel_size" else name
    h, w = f"{stem}_h", f"{stem}_w"
    has_hw = lp_param.HasField(h) or lp_param.HasField(w)
    values = list(getattr(lp_param, name)) if name in lp_param.DESCRIPTOR.fields_by_name else []
    if has_hw:
        if values:
            raise layer.error(f"{name} and {h}/{w} cannot both be given")
        if not (lp_param.HasField(h) and lp_param.HasField(w)) and name == "kernel_size":
            raise layer.error(f"for non-square kernels both {h} and {w} are required")
        return getattr(lp_param, h), getattr(lp_param, w)
    if not values:
        if default is None:
            raise layer.error(f"{name} is required")
        return default, default
    if len(values) == 1:
        return values[0], values[0]
    if len(values) == 2:
        return tuple(values)
    raise layer.error(f"{name} has {len(values)} values; tapegrad runs 2-D (N, C, H, W) "
                      "convolutions only (1 or 2 values)")


class _Conv(Layer):
    """Convolution geometry as Caffe's ``BaseConvolutionLayer``: ``kernel_size``/
    ``pad``/``stride``/``dilation`` as one value or (h, w), or ``*_h``/``*_w``;
    ``group``; ``bias_term``; ``engine`` ignored (it picks an implementation, not a
    result). Blobs: ``weight``, then ``bias`` when ``bias_term``. 2-D only (4-D
    bottoms, ``axis: 1``)."""

    def parse(self, lp):
        p = lp.convolution_param
        if not p.HasField("num_output"):
            raise self.error("convolution_param.num_output is required")
        self.num_output, self.group = p.num_output, p.group
        self.kernel = _two(self, p, "kernel_size", None)
        self.stride = _two(self, p, "stride", 1)
        self.pad = _two(self, p, "pad", 0)
        d = list(p.dilation)
        if len(d) > 2:
            raise self.error(f"dilation has {len(d)} values; 2-D convolutions take 1 or 2")
        self.dilation = (d[0], d[0]) if len(d) == 1 else tuple(d) if d else (1, 1)
        if p.axis != 1:
            raise self.error(f"axis {p.axis} is not supported (channels must be axis 1)")
        if min(self.kernel) < 1 or min(self.stride) < 1 or min(self.dilation) < 1:
            raise self.error(f"kernel {self.kernel}, stride {self.stride} and dilation "
                             f"{self.dilation} must be positive")
        if self.group < 1 or self.num_output % self.group:
            raise self.error(f"num_output {self.num_output} must be a multiple of group "
                             f"{self.group}")
        self.bias_term = p.bias_term
        self.blob_names = ("weight", "bias") if p.bias_term else ("weight",)
        self._fillers.update({0: p.weight_filler if p.HasField("weight_filler") else None,
                              1: p.bias_filler if p.HasField("bias_filler") else None})

    def _channels(self, x):
        if x.ndim != 4:
            raise self.error(f"expects a 4-D (N, C, H, W) bottom, got shape {tuple(x.shape)}")
        c = x.shape[1]
        if c % self.group:
            raise self.error(f"bottom channels {c} must be a multiple of group {self.group}")
        return c

    def _bias(self):
        return self.__dict__["_parameters"].get("bias") if self.bias_term else None


@register
class Convolution(_Conv):
    """``y = conv2d(x, weight, bias)``, weight ``(num_output, C/group, kh, kw)``;
    output ``(H + 2*pad - (dilation*(k-1)+1)) // stride + 1`` (floor)."""

    type = "Convolution"

    def blob_shapes(self, bottoms):
        c = self._channels(bottoms[0])
        return [(self.num_output, c // self.group) + self.kernel, (self.num_output,)]

    def forward(self, x):
        self._channels(x)
        return (ops.conv2d(x, self.weight, self._bias(), stride=self.stride, padding=self.pad,
                           dilation=self.dilation, groups=self.group),)


@register
class Deconvolution(_Conv):
    """Caffe's Deconvolution is ``conv_transpose2d``: weight ``(C, num_output/group, kh,
    kw)``, output ``stride*(H-1) + dilation*(k-1) + 1 - 2*pad``."""

    type = "Deconvolution"

    def blob_shapes(self, bottoms):
        c = self._channels(bottoms[0])
        return [(c, self.num_output // self.group) + self.kernel, (self.num_output,)]

    def forward(self, x):
        self._channels(x)
        return (ops.conv_transpose2d(x, self.weight, self._bias(), stride=self.stride,
                                     padding=self.pad, groups=self.group,
                                     dilation=self.dilation),)


@register
class InnerProduct(Layer):
    """Caffe's InnerProduct: the bottom flattened from ``axis`` to ``(M, K)``;
    weight ``(num_output, K)`` (``(K, num_output)`` with ``transpose: true``); top
    ``shape[:axis] + (num_output,)``."""

    type = "InnerProduct"

    def parse(self, lp):
        p = lp.inner_product_param
        if not p.HasField("num_output"):
            raise self.error("inner_product_param.num_output is required")
        self.num_output, self.axis, self.transpose = p.num_output, p.axis, p.transpose
        self.bias_term = p.bias_term
        self.blob_names = ("weight", "bias") if p.bias_term else ("weight",)
        self._fillers.update({0: p.weight_filler if p.HasField("weight_filler") else None,
                              1: p.bias_filler if p.HasField("bias_filler") else None})

    def _split(self, x):
        axis = canonical_axis(self, self.axis, x.ndim)
        return axis, count(x.shape, axis)

    def blob_shapes(self, bottoms):
        _, k = self._split(bottoms[0])
        w = (k, self.num_output) if self.transpose else (self.num_output, k)
        return [w, (self.num_output,)]

    def forward(self, x):
        axis, k = self._split(x)
        want = self.weight.shape[0] if self.transpose else self.weight.shape[1]
        if k != want:
            raise self.error(f"bottom shape {tuple(x.shape)} flattens from axis {axis} to "
                             f"{k} inputs but the weight {tuple(self.weight.shape)} takes "
                             f"{want}")
        lead = tuple(x.shape[:axis])
        x2 = x.reshape((math.prod(lead), k))  # (M, K)
        if self.transpose:
            y = x2 @ self.weight
            if self.bias_term:
                y = y + self.bias
        else:
            y = ops.linear(x2, self.weight, self.bias if self.bias_term else None)
        return (y.reshape(lead + (self.num_output,)),)


@register
class PReLU(Layer):
    """Caffe's PReLU: one slope per channel (axis 1), or one shared slope (a 0-axis
    blob) with ``channel_shared``; slopes start at 0.25 without a filler."""

    type = "PReLU"
    blob_names = ("slope",)

    def parse(self, lp):
        p = lp.prelu_param
        self.channel_shared = p.channel_shared
        if p.HasField("filler"):
            self._fillers[0] = p.filler
        else:
            self._fillers[0] = messages().FillerParameter(type="constant", value=0.25)

    def blob_shapes(self, bottoms):
        x = bottoms[0]
        if x.ndim < 2:
            raise self.error(f"needs a bottom of at least 2 axes, got {tuple(x.shape)}")
        return [() if self.channel_shared else (x.shape[1],)]

    def forward(self, x):
        return (ops.prelu(x, self.slope),)


@register
class Pooling(Layer):
    """Caffe's Pooling: MAX (ties to the first in the window) and AVE, with Caffe's
    output size -- ``ceil((H + 2*pad - k) / stride) + 1`` (``round_mode: FLOOR``:
    floor), less one when padded and the last window would start at or past
    ``H + pad`` -- and AVE's divisor counting padding cells up to ``H + pad``
    (``ops.avg_pool2d(ceil_mode=True, count_include_pad=True)``). ``global_pooling``
    pools the whole plane. STOCHASTIC pooling and the second (mask) top are refused;
    so is a geometry where Caffe's size rule differs from the op's (no padding and a
    stride larger than the kernel, where Caffe keeps a window wholly outside the
    input)."""

    type = "Pooling"
    tops = (1, 1)

    def parse(self, lp):
        p = lp.pooling_param
        if p.pool == 2:
            raise self.error("STOCHASTIC pooling is not supported (its random choice of "
                             "window cell has no counterpart in tapegrad); use MAX or AVE")
        self.method = "MAX" if p.pool == 0 else "AVE"
        self.global_pooling = p.global_pooling
        if p.global_pooling:
            if p.HasField("kernel_size") or p.HasField("kernel_h") or p.HasField("kernel_w"):
                raise self.error("with global_pooling: true the kernel size cannot be given")
            self.kernel = None
        elif p.HasField("kernel_size") == (p.HasField("kernel_h") and p.HasField("kernel_w")):
            raise self.error("give kernel_size, or both kernel_h and kernel_w (not both)")
        else:
            self.kernel = (p.kernel_h, p.kernel_w) if p.HasField("kernel_h") else \
                (p.kernel_size, p.kernel_size)
        self.pad = (p.pad_h, p.pad_w) if p.HasField("pad_h") else (p.pad, p.pad)
        self.stride = (p.stride_h, p.stride_w) if p.HasField("stride_h") else \
            (p.stride, p.stride)
        self.ceil = p.round_mode == 0
        if p.global_pooling and (self.pad != (0, 0) or self.stride != (1, 1)):
            raise self.error("with global_pooling: true only pad 0 and stride 1 are allowed")
        if min(self.stride) < 1 or (self.kernel and min(self.kernel) < 1):
            raise self.error(f"kernel {self.kernel} and stride {self.stride} must be positive")
        if self.kernel and (self.pad[0] >= self.kernel[0] or self.pad[1] >= self.kernel[1]):
            raise self.error(f"pad {self.pad} must be smaller than the kernel {self.kernel}")

    def caffe_size(self, size, k, s, p):
        """Caffe's pooled size along one axis (PoolingLayer::Reshape)."""
        r = (size + 2 * p - k) / s
        n = (math.ceil(r) if self.ceil else math.floor(r)) + 1
        if p and (n - 1) * s >= size + p:
            n -= 1
        return n

    def forward(self, x):
        if x.ndim != 4:
            raise self.error(f"expects a 4-D (N, C, H, W) bottom, got {tuple(x.shape)}")
        kernel = tuple(x.shape[2:]) if self.global_pooling else self.kernel
        want = tuple(self.caffe_size(size, k, s, p) for size, k, s, p in
                     zip(x.shape[2:], kernel, self.stride, self.pad))
        if min(want) < 1 or any(k > size + 2 * p for size, k, p in
                                zip(x.shape[2:], kernel, self.pad)):
            raise self.error(f"kernel {kernel} with pad {self.pad} does not fit the bottom "
                             f"{tuple(x.shape)}")
        for size, s, p, n in zip(x.shape[2:], self.stride, self.pad, want):
            if (n - 1) * s >= size + p:
                raise self.error(
                    f"Caffe's output size {want} keeps a window that starts past the "
                    f"bottom {tuple(x.shape)} (stride {self.stride} > kernel {kernel}, no "
                    "pad), whose value Caffe leaves undefined; use round_mode: FLOOR")
        if self.method == "MAX":
            y = ops.max_pool2d(x, kernel, self.stride, self.pad, ceil_mode=self.ceil)
        else:
            y = ops.avg_pool2d(x, kernel, self.stride, self.pad, ceil_mode=self.ceil,
                               count_include_pad=True)
        if tuple(y.shape[2:]) != want:  # never expected: the op and Caffe agree here
            raise self.error(f"output size {tuple(y.shape[2:])} differs from Caffe's {want}")
        return (y,)


@register
class LRN(Layer):
    """Caffe's LRN. ACROSS_CHANNELS: ``x / (k + alpha/n * sum_{n channels} x^2)^beta``
    (``ops.local_response_norm``, window centred, truncated at the edges).
    WITHIN_CHANNEL: ``x / (1 + alpha * avg_{n x n} x^2)^beta``, the average taken
    as Caffe's AVE pooling with pad ``(n-1)/2`` (padding counted: divisor n*n);
    ``k`` is not used there, as in Caffe. ``local_size`` must be odd."""

    type = "LRN"

    def parse(self, lp):
        p = lp.lrn_param
        if p.local_size % 2 != 1:
            raise self.error(f"local_size must be odd (Caffe's rule), got {p.local_size}")
        self.size, self.alpha, self.beta, self.k = p.local_size, p.alpha, p.beta, p.k
        self.within = p.norm_region == 1

    def forward(self, x):
        if x.ndim != 4:
            raise self.error(f"expects a 4-D (N, C, H, W) bottom, got {tuple(x.shape)}")
        if not self.within:
            return (ops.local_response_norm(x, self.size, self.alpha, self.beta, self.k),)
        pad = (self.size - 1) // 2
        avg = ops.avg_pool2d(x * x, self.size, 1, pad, ceil_mode=True, count_include_pad=True)
        return (x * (avg * self.alpha + 1.0) ** (-self.beta),)


@register
class BatchNorm(Layer):
    """Caffe's BatchNorm (no affine part: a Scale layer follows). Blobs: the sums
    ``mean`` and ``variance`` and the ``scale_factor`` ``s``; the statistics used are
    ``blob / s`` (0 when ``s`` is 0). ``use_global_stats`` defaults to the phase
    (TEST: true) -- here to ``not self.training``. Training normalises with the
    batch mean and biased variance and updates the blobs as Caffe does:
    ``s = maf*s + 1``, ``mean = maf*mean + batch_mean``, ``variance = maf*variance +
    m/(m-1) * batch_var`` (``maf`` = moving_average_fraction, m values per channel).
    The blobs are never learnt (their lr_mult must be 0)."""

    type = "BatchNorm"
    blob_names = ("mean", "variance", "scale_factor")

    def parse(self, lp):
        p = lp.batch_norm_param
        self.use_global_stats = p.use_global_stats if p.HasField("use_global_stats") else None
        self.maf, self.eps = p.moving_average_fraction, p.eps
        for i, spec in enumerate(lp.param):
            if spec.lr_mult != 0:
                raise self.error(f"param {i} has lr_mult {spec.lr_mult}; the statistics "
                                 "cannot be learnt (Caffe: 'Cannot configure batch "
                                 "normalization statistics as layer parameters')")

    def blob_shapes(self, bottoms):
        x = bottoms[0]
        c = 1 if x.ndim == 1 else x.shape[1]
        return [(c,), (c,), (1,)]

    def forward(self, x):
        shape = tuple(x.shape)
        x4 = x.reshape((shape[0], 1)) if x.ndim == 1 else x
        global_stats = (not self.training) if self.use_global_stats is None \
            else self.use_global_stats
        if global_stats:
            s = float(self.scale_factor.array[0])
            f = 0.0 if s == 0 else 1.0 / s
            with no_grad():
                mean = make_tensor(self.mean.array * f, device=x.device)
                var = make_tensor(self.variance.array * f, device=x.device)
            y = ops.batch_norm(x4, mean, var, training=False, eps=self.eps)
        else:
            y = ops.batch_norm(x4, None, None, training=True, eps=self.eps)
            if not self.__dict__.get("_dry"):  # the model's shape pass: no update
                self._update(x4)
        return (y.reshape(shape),)

    def _update(self, x):
        a = x.array
        axes = (0,) + tuple(range(2, a.ndim))
        m = a.size // a.shape[1]
        mean = a.mean(axis=axes)
        var = ((a - mean.reshape((1, -1) + (1,) * (a.ndim - 2))) ** 2).mean(axis=axes)
        maf = self.maf
        self.scale_factor.array[...] = self.scale_factor.array * maf + 1
        self.mean.array[...] = self.mean.array * maf + mean
        self.variance.array[...] = self.variance.array * maf + (m / (m - 1) if m > 1 else 1) * var


def _broadcast_shape(layer, x, axis, n_axes, what):
    """Where a Scale/Bias blob of ``n_axes`` axes sits in ``x``: (axis, broadcast shape)."""
    axis = 0 if n_axes == 0 else canonical_axis(layer, axis, x.ndim)
    if axis + n_axes > x.ndim:
        raise layer.error(f"the {what} blob's {n_axes} axes from axis {axis} run past the "
                          f"bottom {tuple(x.shape)}")
    return axis, (1,) * axis + tuple(x.shape[axis:axis + n_axes]) + \
        (1,) * (x.ndim - axis - n_axes)


def _param_axes(layer, x, axis, num_axes):
    axis = canonical_axis(layer, axis, x.ndim)
    if num_axes < -1:
        raise layer.error(f"num_axes must be -1 or more, got {num_axes}")
    end = x.ndim if num_axes == -1 else axis + num_axes
    if end > x.ndim:
        raise layer.error(f"axis {axis} with num_axes {num_axes} runs past the bottom "
                          f"{tuple(x.shape)}")
    return tuple(x.shape[axis:end])


def _apply(layer, x, v, axis, what):
    """``v`` (the blob or second bottom) broadcast against ``x`` from ``axis``."""
    _, shape = _broadcast_shape(layer, x, axis, v.ndim, what)
    n_axes = v.ndim
    ax = 0 if n_axes == 0 else canonical_axis(layer, axis, x.ndim)
    if tuple(x.shape[ax:ax + n_axes]) != tuple(v.shape):
        raise layer.error(f"the {what} {tuple(v.shape)} does not match the bottom "
                          f"{tuple(x.shape)} from axis {ax}")
    return v.reshape(shape)


@register
class Scale(Layer):
    """Caffe's Scale: ``y = x * scale (+ bias)``, the scale a blob (shape
    ``x.shape[axis:axis+num_axes]``, filled with 1 by default) or the second bottom;
    ``bias_term`` adds a Bias blob of the same placement. Blobs: ``scale`` (one
    bottom), then ``bias``."""

    type = "Scale"
    bottoms = (1, 2)

    def parse(self, lp):
        p = lp.scale_param
        self.axis, self.num_axes, self.bias_term = p.axis, p.num_axes, p.bias_term
        names = ("scale",) if self.n_bottom == 1 else ()
        self.blob_names = names + (("bias",) if p.bias_term else ())
        one = messages().FillerParameter(type="constant", value=1.0)
        fillers = ([p.filler if p.HasField("filler") else one] if self.n_bottom == 1 else []) \
            + [p.bias_filler if p.HasField("bias_filler") else None]
        self._fillers.update(enumerate(fillers))

    def blob_shapes(self, bottoms):
        x = bottoms[0]
        if self.n_bottom == 2:
            shape = tuple(bottoms[1].shape)
            return [shape] if self.bias_term else []
        shape = _param_axes(self, x, self.axis, self.num_axes)
        return [shape, shape]

    def forward(self, x, s=None):
        s = self.scale if s is None else s
        y = x * _apply(self, x, s, self.axis, "scale")
        if self.bias_term:
            y = y + _apply(self, x, self.bias, self.axis, "bias")
        return (y,)

    def allow_force_backward(self, bottom):
        return True


@register
class Bias(Layer):
    """Caffe's Bias: ``y = x + bias``, the bias a blob (shape
    ``x.shape[axis:axis+num_axes]``, filler default 0) or the second bottom."""

    type = "Bias"
    bottoms = (1, 2)

    def parse(self, lp):
        p = lp.bias_param
        self.axis, self.num_axes = p.axis, p.num_axes
        self.blob_names = ("bias",) if self.n_bottom == 1 else ()
        self._fillers[0] = p.filler if p.HasField("filler") else None

    def blob_shapes(self, bottoms):
        if self.n_bottom == 2:
            return []
        return [_param_axes(self, bottoms[0], self.axis, self.num_axes)]

    def forward(self, x, b=None):
        b = self.bias if b is None else b
        return (x + _apply(self, x, b, self.axis, "bias"),)
