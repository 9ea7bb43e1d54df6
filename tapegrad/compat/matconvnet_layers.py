"""The layers of a MatConvNet simplenn network, each a :class:`tapegrad.nn.Module`
calling tapegrad's ops with MatConvNet's conventions.

Each layer keeps MatConvNet's fields as attributes (``type``, ``name``,
``precious``, ``pad``, ``stride``, ...; ``class_`` for ``class``) and its weights
as Parameters in tapegrad's layout (NCHW data):

* conv ``F (FH, FW, FC, K)`` -> ``weight (K, FC, FH, FW)``; convt ``F (FH, FW, K, D)``
  -> ``weight (D, K, FH, FW)``; biases and bnorm multipliers ``(K,)``; bnorm's
  moments ``[mu sigma]`` stay a ``(K, 2)`` buffer.
* ``layer.weights`` gives them back in MatConvNet's layout and shapes (views:
  writing into them updates the Parameters, as ``net.layers{i}.weights{j}`` would).

``run(x, test, aux)`` is the layer on an NCHW Tensor: ``test`` is vl_simplenn's
test mode (dropout bypassed, bnorm normalised by its moments), ``aux`` a dropout
mask to reuse; it returns ``(y, aux)``. ``forward(x)`` is ``run`` in the mode of
``self.training`` (``net.eval()`` is test mode).
"""

from __future__ import annotations

import numpy as np

from .. import ops
from ..errors import ArgumentError, ShapeError, describe
from ..nn.module import Module
from ..nn.parameter import Parameter
from ..tensor import Tensor

__all__ = ["Layer", "Conv", "ConvT", "Pool", "ReLU", "Sigmoid", "LRN", "SpNorm", "NOffset",
           "Softmax", "Dropout", "BNorm", "to_nchw", "from_nchw"]


def to_nchw(a):
    """MatConvNet's ``H x W x C x N`` (trailing singleton dimensions may be missing,
    as MATLAB drops them) -> ``(N, C, H, W)``, a view."""
    a = a if a.ndim >= 4 else a.reshape(a.shape + (1,) * (4 - a.ndim))
    if a.ndim != 4:
        raise ShapeError(f"simplenn: expected an H x W x C x N array, got {describe(a)}")
    return a.transpose(3, 2, 0, 1)


def from_nchw(a):
    """``(N, C, H, W)`` -> MatConvNet's ``H x W x C x N``, a view (scalars unchanged)."""
    return a.transpose(2, 3, 1, 0) if a.ndim == 4 else a


# ------------------------------------------------------------ field parsing


def _show(v):
    """A short repr of a field's value for an error message."""
    if isinstance(v, np.ndarray):
        if v.dtype.kind in "biuf" and v.size <= 8:
            return str(v.ravel(order="F").tolist())
        return f"a {describe(v)} array"
    if isinstance(v, dict):
        return "a struct"
    if isinstance(v, list):
        return f"a cell of {len(v)}"
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _numbers(layer, field, value):
    """A MATLAB numeric or logical field as a flat float64 array (column-major),
    refusing strings, structs, cells, complex and non-finite values."""
    plain = (bool, int, float, np.generic)
    if isinstance(value, plain) or (isinstance(value, (list, tuple)) and value
                                    and all(isinstance(v, plain) for v in value)):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
        raise ArgumentError(f"simplenn: layer {layer!r} field {field!r} must be real numbers, "
                            f"got {_show(value)}")
    v = value.astype(np.float64).ravel(order="F")
    if not np.isfinite(v).all():
        raise ArgumentError(f"simplenn: layer {layer!r} field {field!r} must be finite, got "
                            f"{_show(value)}")
    return v


def _vec(layer, field, value, sizes, low=0):
    """A MATLAB numeric field as a tuple of ints >= ``low``, expanded from a scalar;
    ``sizes`` are the lengths MatConvNet accepts (e.g. 1 or 4 for ``pad``)."""
    v = _numbers(layer, field, value)
    if v.size not in sizes or not np.all(v == np.round(v)) or np.any(v < low):
        kind = "non-negative" if low == 0 else f">= {low}"
        raise ArgumentError(f"simplenn: layer {layer!r} field {field!r} must be "
                            f"{' or '.join(map(str, sizes))} {kind} integers, got "
                            f"{_show(value)}")
    n = max(sizes)
    return tuple(int(x) for x in (np.repeat(v, n) if v.size == 1 else v))


def _scalar(layer, field, value):
    v = _numbers(layer, field, value)
    if v.size != 1:
        raise ArgumentError(f"simplenn: layer {layer!r} field {field!r} must be a scalar, "
                            f"got {_show(value)}")
    return float(v[0])


def _flag(layer, field, value):
    """A logical field (``precious``, ``noRoot``): true if any element is."""
    return bool(_numbers(layer, field, value).any()) if not _empty(value) else False


def _empty(v):
    return v is None or (hasattr(v, "size") and v.size == 0) or (isinstance(v, list) and not v)


def _float_array(layer, what, a):
    if isinstance(a, (dict, list, str)):
        raise ArgumentError(f"simplenn: layer {layer!r} {what} must be a single or double "
                            f"array, got {_show(a)}")
    a = np.asarray(a)
    if a.dtype.kind != "f":
        raise ArgumentError(f"simplenn: layer {layer!r} {what} must be single or double, got "
                            f"{describe(a)}")
    return a


class Layer(Module):
    """The base of every simplenn layer (see the module notes)."""

    type = "?"
    fields: tuple = ()  # MatConvNet's fields this layer reads, besides name/type/precious

    def __init__(self, name="", precious=False):
        super().__init__()
        self.name = str(name)
        self.precious = _flag(self.name, "precious", precious)

    def extents(self) -> dict:
        """The largest value of each field that sets how much the forward pass
        allocates or loops over, independently of the input (pad, stride, ...)."""
        return {}

    def params(self) -> list:
        """The layer's Parameters, in the order of MatConvNet's ``weights``."""
        return []

    @property
    def weights(self) -> list:
        """The weights in MatConvNet's layout and shapes: views of the Parameters'
        arrays, so ``layer.weights[0][...] = f`` sets them (between passes: a write
        through a view is not seen by the version checks of a recorded graph)."""
        return []

    def weight_grads(self, grads, x=None) -> list:
        """Gradients of :meth:`params` (tapegrad layout, None where not computed) ->
        MatConvNet's ``dzdw`` list; ``x`` is the layer's NCHW input array."""
        return []

    def run(self, x, test=False, aux=None):
        raise NotImplementedError

    def forward(self, x):
        return self.run(x, not self.training)[0]

    def extra_repr(self):
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.fields
                          if not isinstance(getattr(self, f), np.ndarray))
        return f"{self.name!r}" + (f", {shown}" if shown else "")


def _param(a):
    return Parameter(np.ascontiguousarray(a))


class _Filters(Layer):
    """conv and convt: a filter bank and optional biases."""

    def _set_weights(self, filters, biases, layout, outputs):
        filters = _float_array(self.name, "filters", filters)
        filters = filters.reshape(filters.shape + (1,) * (4 - filters.ndim))
        if filters.ndim != 4 or 0 in filters.shape:
            raise ShapeError(f"simplenn: layer {self.name!r} needs a non-empty 4-D filter bank, "
                             f"got {describe(filters)}")
        self.weight = _param(filters.transpose(layout))
        self._bias_shape = None
        self.bias = None
        if not _empty(biases):
            b = _float_array(self.name, "biases", biases)
            if b.size != outputs(filters.shape):
                raise ShapeError(f"simplenn: layer {self.name!r} has {b.size} biases for "
                                 f"{outputs(filters.shape)} outputs (filters "
                                 f"{'x'.join(map(str, filters.shape))})")
            self._bias_shape = b.shape
            self.bias = _param(b.ravel(order="F").astype(filters.dtype))

    def params(self):
        return [self.weight] + ([self.bias] if self.bias is not None else [])

    def extra_repr(self):
        bank = "x".join(map(str, from_nchw(self.weight.array).shape))
        return super().extra_repr().replace(f"{self.name!r}", f"{self.name!r}, {bank}", 1)

    @property
    def weights(self):
        w = [from_nchw(self.weight.array)]
        return w + [self.bias.array.reshape(self._bias_shape, order="F")
                    if self.bias is not None else np.zeros((0, 0), self.weight.dtype)]

    def weight_grads(self, grads, x=None):
        gw = None if grads[0] is None else from_nchw(grads[0])
        if self.bias is None:
            return [gw, np.zeros((0, 0), self.weight.dtype)]
        gb = grads[1]
        return [gw, None if gb is None else gb.reshape(self._bias_shape, order="F")]


class Conv(_Filters):
    """``vl_nnconv``: filters ``FH x FW x FC x K``; ``FC`` may divide the input's
    channels (``C / FC`` groups); ``pad [T B L R]``, ``stride [SY SX]``, ``dilate``."""

    type = "conv"
    fields = ("pad", "stride", "dilate")

    def __init__(self, filters, biases, pad=0, stride=1, dilate=1, **kw):
        super().__init__(**kw)
        # (FH, FW, FC, K) -> (K, FC, FH, FW)
        self._set_weights(filters, biases, (3, 2, 0, 1), lambda shape: shape[3])
        self.pad = _vec(self.name, "pad", pad, (1, 4))
        self.stride = _vec(self.name, "stride", stride, (1, 2), low=1)
        self.dilate = _vec(self.name, "dilate", dilate, (1, 2), low=1)

    def extents(self):
        return {f: max(getattr(self, f)) for f in self.fields}

    def run(self, x, test=False, aux=None):
        c, k, fc = x.shape[1], self.weight.shape[0], self.weight.shape[1]
        if c % fc or k % (c // fc):
            raise ShapeError(f"simplenn: conv layer {self.name!r}: the filters' depth {fc} must "
                             f"divide the input's {c} channels into groups that divide the {k} "
                             f"filters; input (N, C, H, W) {describe(x)}, filters "
                             f"FH x FW x FC x K {tuple(self.weights[0].shape)}")
        return ops.conv2d(x, self.weight, self.bias, stride=self.stride, padding=self.pad,
                          dilation=self.dilate, groups=c // fc), None


class ConvT(_Filters):
    """``vl_nnconvt``: filters ``FH x FW x K x D`` (``D`` the input's channels),
    ``upsample [UY UX]``, ``crop [T B L R]``, ``numGroups`` (``K * numGroups``
    outputs): ``conv_transpose2d`` with stride = upsample, padding = crop."""

    type = "convt"
    fields = ("upsample", "crop", "numGroups")

    def __init__(self, filters, biases, upsample=1, crop=0, numGroups=1, **kw):  # noqa: N803
        super().__init__(**kw)
        groups = _vec(self.name, "numGroups", numGroups, (1,), low=1)[0]
        shape = np.shape(_float_array(self.name, "filters", filters))
        d = shape[3] if len(shape) == 4 else 1  # MATLAB drops a trailing D of 1
        if d % groups:
            raise ShapeError(f"simplenn: convt layer {self.name!r}: numGroups = {groups} must "
                             f"divide the filters' D = {d} input channels")
        # (FH, FW, K, D) -> (D, K, FH, FW); K * numGroups outputs
        self._set_weights(filters, biases, (3, 2, 0, 1), lambda shape: shape[2] * groups)
        self.upsample = _vec(self.name, "upsample", upsample, (1, 2), low=1)
        self.crop = _vec(self.name, "crop", crop, (1, 4))
        self.numGroups = groups

    def extents(self):
        return {"upsample": max(self.upsample), "crop": max(self.crop)}

    def run(self, x, test=False, aux=None):
        return ops.conv_transpose2d(x, self.weight, self.bias, stride=self.upsample,
                                    padding=self.crop, groups=self.numGroups), None


class Pool(Layer):
    """``vl_nnpool``: ``pool [PH PW]``, ``stride``, ``pad [T B L R]``, ``method``
    ``max`` or ``avg``; floor rounding; padding never wins a max and is not
    counted in an average."""

    type = "pool"
    fields = ("method", "pool", "stride", "pad")

    def __init__(self, pool, method="max", stride=1, pad=0, **kw):
        super().__init__(**kw)
        if not isinstance(method, str) or method not in ("max", "avg"):
            raise ArgumentError(f"simplenn: pool layer {self.name!r}: method must be 'max' or "
                                f"'avg', got {_show(method)}")
        self.method = method
        self.pool = _vec(self.name, "pool", pool, (1, 2), low=1)
        self.stride = _vec(self.name, "stride", stride, (1, 2), low=1)
        self.pad = _vec(self.name, "pad", pad, (1, 4))
        (ph, pw), (t, b, left, r) = self.pool, self.pad
        if max(t, b) >= ph or max(left, r) >= pw:
            raise ArgumentError(f"simplenn: pool layer {self.name!r}: pad [T B L R] = "
                                f"{list(self.pad)} must be smaller than the window "
                                f"[PH PW] = {list(self.pool)} (else a window could lie "
                                "entirely in the padding)")

    def extents(self):
        return {f: max(getattr(self, f)) for f in ("pool", "stride", "pad")}

    def run(self, x, test=False, aux=None):
        if self.method == "avg":
            return ops.avg_pool2d(x, self.pool, self.stride, self.pad,
                                  count_include_pad=False), None
        # MatConvNet scans a window column by column (its arrays are column-major)
        # and routes the gradient to the first maximum in that order; max_pool2d
        # scans rows first. Pooling the spatially transposed input (N, C, W, H)
        # gives MatConvNet's choice among tied maxima (e.g. the zeros after a ReLU).
        (ph, pw), (sy, sx), (t, b, left, r) = self.pool, self.stride, self.pad
        y = ops.max_pool2d(x.transpose(0, 1, 3, 2), (pw, ph), (sx, sy), (left, r, t, b))
        return y.transpose(0, 1, 3, 2), None


class ReLU(Layer):
    """``vl_nnrelu``; ``leak > 0`` is a leaky ReLU (the slope at 0 is the leak, as
    MatConvNet's ``x > 0`` test); a leak <= 0 is ignored, as vl_simplenn does."""

    type = "relu"
    fields = ("leak",)

    def __init__(self, leak=0.0, **kw):
        super().__init__(**kw)
        self.leak = _scalar(self.name, "leak", leak)

    def run(self, x, test=False, aux=None):
        return (ops.leaky_relu(x, self.leak) if self.leak > 0 else ops.relu(x)), None


class Sigmoid(Layer):
    type = "sigmoid"

    def run(self, x, test=False, aux=None):
        return ops.sigmoid(x), None


class LRN(Layer):
    """``vl_nnnormalize(x, [N KAPPA ALPHA BETA])``: alpha is not divided by N."""

    type = "lrn"
    fields = ("param",)

    def __init__(self, param=(5, 1, 0.0001 / 5, 0.75), **kw):
        super().__init__(**kw)
        p = _numbers(self.name, "param", param)
        if p.size != 4 or p[0] != round(p[0]) or p[0] < 1 or not p[1] > 0 or p[2] < 0:
            raise ArgumentError(f"simplenn: lrn layer {self.name!r}: param must be "
                                "[N KAPPA ALPHA BETA] with an integer N >= 1, KAPPA > 0 and "
                                f"ALPHA >= 0, got {_show(p)}")
        self.param = tuple(float(v) for v in p)

    def extents(self):
        return {"param(1) (the window N)": int(self.param[0])}

    def run(self, x, test=False, aux=None):
        n, kappa, alpha, beta = self.param
        return ops.local_response_norm(x, int(n), alpha, beta, kappa,
                                       alpha_over_size=False), None


class SpNorm(Layer):
    type = "spnorm"
    fields = ("param",)

    def __init__(self, param, **kw):
        super().__init__(**kw)
        p = _numbers(self.name, "param", param)
        if p.size != 4 or np.any(p[:2] != np.round(p[:2])) or np.any(p[:2] < 1) or p[2] < 0:
            raise ArgumentError(f"simplenn: spnorm layer {self.name!r}: param must be "
                                "[PH PW ALPHA BETA] with integers PH, PW >= 1 and ALPHA >= 0, "
                                f"got {_show(p)}")
        self.param = tuple(float(v) for v in p)

    def extents(self):
        return {"param(1:2) (the window PH PW)": int(max(self.param[:2]))}

    def run(self, x, test=False, aux=None):
        return ops.spnorm(x, list(self.param)), None


class NOffset(Layer):
    type = "noffset"
    fields = ("param",)

    def __init__(self, param, **kw):
        super().__init__(**kw)
        p = _numbers(self.name, "param", param)
        if p.size != 2:
            raise ArgumentError(f"simplenn: noffset layer {self.name!r}: param must be [P1 P2], "
                                f"got {_show(p)}")
        self.param = tuple(float(v) for v in p)

    def run(self, x, test=False, aux=None):
        return ops.noffset(x, list(self.param)), None


class Softmax(Layer):
    """``vl_nnsoftmax``: over the channels."""

    type = "softmax"

    def run(self, x, test=False, aux=None):
        return ops.softmax(x, axis=1), None


class Dropout(Layer):
    """``vl_nndropout``: the mask holds 0 or ``1/(1-rate)`` and is the layer's
    ``aux`` (reused when given); bypassed in test mode."""

    type = "dropout"
    fields = ("rate",)

    def __init__(self, rate=0.5, **kw):
        super().__init__(**kw)
        self.rate = _scalar(self.name, "rate", rate)
        if not 0 <= self.rate < 1:
            raise ArgumentError(f"simplenn: dropout layer {self.name!r}: rate must be in "
                                f"[0, 1), got {self.rate}")

    def run(self, x, test=False, aux=None):
        if test:
            return x, None
        if aux is None and self.rate == 0:  # MatConvNet's mask of ones
            aux = x.device.xp.ones(x.shape, dtype=x.dtype)
        y, mask = ops.dropout(x, self.rate, mask=aux, return_mask=True)
        return y, mask.array


class BNorm(Layer):
    """``vl_nnbnorm``: multipliers ``G``, biases ``B``, moments ``[mu sigma]``
    (``K x 2``, ``sigma = sqrt(var + epsilon)``), ``epsilon``. Normal mode
    normalises by the batch's mean and biased variance; test mode computes
    ``G (x - mu) / sigma + B`` with the moments (its gradient treats them as
    constants: the true gradient of the test-mode output)."""

    type = "bnorm"
    fields = ("epsilon",)

    def __init__(self, multipliers, biases, moments=None, epsilon=1e-5, **kw):
        super().__init__(**kw)
        g = _float_array(self.name, "multipliers", multipliers)
        b = _float_array(self.name, "biases", biases)
        k = g.size
        if b.size != k:
            raise ShapeError(f"simplenn: bnorm layer {self.name!r}: {g.size} multipliers but "
                             f"{b.size} biases")
        if _empty(moments):  # vl_simplenn_tidy's default
            moments = np.zeros((k, 2), dtype=g.dtype)
        m = _float_array(self.name, "moments", moments)
        if m.size != 2 * k:
            raise ShapeError(f"simplenn: bnorm layer {self.name!r}: moments must be K x 2 = "
                             f"{k} x 2 ([mu sigma]), got {describe(m)}")
        self._shapes = (g.shape, b.shape, m.shape)
        self.weight = _param(g.ravel(order="F"))
        self.bias = _param(b.ravel(order="F").astype(g.dtype))
        # (K, 2) in MatConvNet's layout: column 0 the means, column 1 the sigmas
        self.register_buffer("moments", Tensor(m.reshape(k, 2, order="F").astype(g.dtype)))
        self.epsilon = _scalar(self.name, "epsilon", epsilon)
        if self.epsilon < 0:
            raise ArgumentError(f"simplenn: bnorm layer {self.name!r}: epsilon must be >= 0, "
                                f"got {self.epsilon}")

    def params(self):
        return [self.weight, self.bias]

    @property
    def weights(self):
        gs, bs, ms = self._shapes
        return [self.weight.array.reshape(gs, order="F"), self.bias.array.reshape(bs, order="F"),
                self.moments.array.reshape(ms, order="F")]

    def weight_grads(self, grads, x=None):
        gs, bs, ms = self._shapes
        out = [None if g is None else g.reshape(s, order="F") for g, s in zip(grads, (gs, bs))]
        # vl_simplenn's third "derivative": the batch's moments times the batch size
        # (additive over sub-batches; cnn_train averages them into the moments)
        xp = self.weight.device.xp
        mu = x.mean(axis=(0, 2, 3))
        var = ((x - mu.reshape(1, -1, 1, 1)) ** 2).mean(axis=(0, 2, 3))
        moments = xp.stack([mu, xp.sqrt(var + self.epsilon)], axis=1) * x.shape[0]
        return out + [moments.astype(x.dtype).reshape(ms, order="F")]

    def run(self, x, test=False, aux=None):
        if not test:
            return ops.batch_norm(x, None, None, self.weight, self.bias, training=True,
                                  eps=self.epsilon), None
        k = self.weight.shape[0]
        mu, sigma = self.moments.array[:, 0], self.moments.array[:, 1]
        scale = self.weight / Tensor(sigma, device=x.device)  # (K,), recorded: G gets a grad
        shift = self.bias - scale * Tensor(mu, device=x.device)
        return x * scale.reshape(1, k, 1, 1) + shift.reshape(1, k, 1, 1), None
