"""Caffe's layers without weights: the activations (ReLU, ELU, Sigmoid, TanH,
AbsVal, Power, Exp, Log, BNLL, Dropout), Eltwise, and the shape layers (Concat,
Slice, Split, Flatten, Reshape, Crop, Softmax, Silence), each as Caffe computes it."""

from __future__ import annotations

import math

from ... import ops
from ...autograd import Function
from ...creation import full
from .base import Layer, canonical_axis, count, register

__all__ = []


def _unary(type_, doc, fn):
    cls = type(type_, (Layer,), {"type": type_, "__doc__": doc,
                                 "forward": lambda self, x: (fn(self, x),)})
    return register(cls)


_unary("Sigmoid", "Caffe's Sigmoid: ``1 / (1 + exp(-x))``.", lambda self, x: ops.sigmoid(x))
_unary("TanH", "Caffe's TanH.", lambda self, x: ops.tanh(x))
_unary("AbsVal", "Caffe's AbsVal: ``|x|`` (gradient ``sign(x)``, 0 at 0).",
       lambda self, x: x.abs())
_unary("BNLL", "Caffe's BNLL: ``log(1 + exp(x))``, gradient ``sigmoid(x)``.",
       lambda self, x: ops.softplus(x, 1.0, 50.0))


@register
class ReLU(Layer):
    """Caffe's ReLU: ``max(x, 0) + negative_slope * min(x, 0)``; the gradient at 0 is
    ``negative_slope`` (Caffe's ``bottom_data > 0`` test)."""

    type = "ReLU"

    def parse(self, lp):
        self.negative_slope = lp.relu_param.negative_slope

    def forward(self, x):
        if self.negative_slope == 0:
            return (ops.relu(x),)
        return (ops.leaky_relu(x, self.negative_slope),)


@register
class ELU(Layer):
    """Caffe's ELU: ``x`` for ``x > 0``, ``alpha * (exp(x) - 1)`` otherwise."""

    type = "ELU"

    def parse(self, lp):
        self.alpha = lp.elu_param.alpha

    def forward(self, x):
        return (ops.elu(x, self.alpha),)


@register
class Power(Layer):
    """Caffe's Power: ``(shift + scale * x) ^ power`` (``power: 0`` is the constant 1,
    with no gradient)."""

    type = "Power"

    def parse(self, lp):
        p = lp.power_param
        self.power, self.scale, self.shift = p.power, p.scale, p.shift

    def forward(self, x):
        if self.power == 0 or self.scale == 0:  # Caffe: a constant, no gradient
            value = 1.0 if self.power == 0 else self.shift ** self.power
            return (full(tuple(x.shape), value, dtype=x.dtype, device=x.device),)
        y = x * self.scale + self.shift if (self.scale, self.shift) != (1.0, 0.0) else x
        return (y if self.power == 1 else y ** self.power,)


@register
class Exp(Layer):
    """Caffe's Exp: ``base ^ (shift + scale * x)`` (``base: -1`` is e), computed as
    Caffe does: ``base^shift * exp(log(base) * scale * x)``."""

    type = "Exp"

    def parse(self, lp):
        p = lp.exp_param
        if p.base != -1 and p.base <= 0:
            raise self.error(f"base must be -1 (e) or positive, got {p.base}")
        log_base = 1.0 if p.base == -1 else math.log(p.base)
        self.inner = log_base * p.scale
        self.outer = 1.0 if p.shift == 0 else (math.e if p.base == -1 else p.base) ** p.shift

    def forward(self, x):
        y = (x * self.inner).exp() if self.inner != 1 else x.exp()
        return (y * self.outer if self.outer != 1 else y,)


@register
class Log(Layer):
    """Caffe's Log: ``log_base(shift + scale * x)`` (``base: -1`` is e)."""

    type = "Log"

    def parse(self, lp):
        p = lp.log_param
        if p.base != -1 and (p.base <= 0 or p.base == 1):
            raise self.error(f"base must be -1 (e) or positive and not 1, got {p.base}")
        self.base_scale = 1.0 if p.base == -1 else 1.0 / math.log(p.base)
        self.scale, self.shift = p.scale, p.shift

    def forward(self, x):
        y = x * self.scale + self.shift if (self.scale, self.shift) != (1.0, 0.0) else x
        y = y.log()
        return (y * self.base_scale if self.base_scale != 1 else y,)


@register
class Dropout(Layer):
    """Caffe's Dropout: in training each unit is kept with probability
    ``1 - dropout_ratio`` and scaled by ``1 / (1 - dropout_ratio)`` (at train time,
    as Caffe does); at test time the identity. Training is ``self.training``."""

    type = "Dropout"

    def parse(self, lp):
        self.ratio = lp.dropout_param.dropout_ratio
        if not 0 <= self.ratio < 1:
            raise self.error(f"dropout_ratio must be in [0, 1), got {self.ratio}")

    def forward(self, x):
        return (ops.dropout(x, self.ratio, training=self.training),)


class _QuotientProd(Function):
    """Caffe's PROD with ``stable_prod_grad: false``: each bottom's gradient is
    ``top_diff * top / bottom`` (NaN or inf where that bottom is 0, as in Caffe)."""

    @staticmethod
    def forward(ctx, *xs):
        y = xs[0]
        for x in xs[1:]:
            y = y * x
        ctx.save_for_backward(y, *xs)
        return y

    @staticmethod
    def backward(ctx, g):
        y, *xs = ctx.saved_tensors
        with ctx.xp.errstate(divide="ignore", invalid="ignore"):
            return tuple(g * y / x if need else None
                         for x, need in zip(xs, ctx.needs_input_grad))


@register
class Eltwise(Layer):
    """Caffe's Eltwise: SUM (``sum coeff_i * x_i``, coeff 1 by default), PROD, MAX.
    MAX's gradient goes to the first bottom holding the maximum (Caffe's running
    ``bottom > top`` test keeps the earliest on ties, and skips a NaN after the first
    bottom). PROD's gradient is the product of the other
    bottoms (``stable_prod_grad``, the default) or Caffe's quotient ``top / bottom``."""

    type = "Eltwise"
    bottoms = (2, None)

    def parse(self, lp):
        p = lp.eltwise_param
        self.op = {0: "PROD", 1: "SUM", 2: "MAX"}[p.operation]
        self.coeff = list(p.coeff)
        self.stable = p.stable_prod_grad
        if self.coeff and self.op != "SUM":
            raise self.error("coeff is only for operation: SUM")
        if self.coeff and len(self.coeff) != self.n_bottom:
            raise self.error(f"takes one coeff per bottom: {self.n_bottom} bottoms, "
                             f"{len(self.coeff)} coeff")

    def forward(self, *xs):
        shape = tuple(xs[0].shape)
        for x in xs[1:]:
            if tuple(x.shape) != shape:
                raise self.error(f"all bottoms must have one shape, got "
                                 f"{[tuple(x.shape) for x in xs]}")
        if self.op == "SUM":
            coeff = self.coeff or [1.0] * len(xs)
            y = xs[0] * coeff[0] if coeff[0] != 1 else xs[0]
            for c, x in zip(coeff[1:], xs[1:]):
                y = y + (x * c if c != 1 else x)
            return (y,)
        if self.op == "PROD":
            if not self.stable:
                return (_QuotientProd.apply(*xs),)
            y = xs[0]
            for x in xs[1:]:
                y = y * x
            return (y,)
        y = xs[0]
        for x in xs[1:]:  # Caffe's running maximum: a tie or a NaN keeps the earlier
            y = ops.where(x > y, x, y)
        return (y,)


@register
class Concat(Layer):
    """Caffe's Concat along ``axis`` (or the legacy ``concat_dim``)."""

    type = "Concat"
    bottoms = (1, None)
    in_place = False

    def parse(self, lp):
        self.p = (lp.concat_param.axis if lp.concat_param.HasField("axis") else None,
                  lp.concat_param.concat_dim if lp.concat_param.HasField("concat_dim")
                  else None)

    def _axis(self, x):
        axis, dim = self.p
        if axis is not None and dim is not None:
            raise self.error("give axis or concat_dim, not both")
        if dim is not None:
            if dim >= x.ndim:
                raise self.error(f"concat_dim {dim} is out of range for {tuple(x.shape)}")
            return dim
        return canonical_axis(self, 1 if axis is None else axis, x.ndim)

    def forward(self, *xs):
        axis = self._axis(xs[0])
        for x in xs[1:]:
            if x.ndim != xs[0].ndim or any(a != b for i, (a, b) in
                                           enumerate(zip(x.shape, xs[0].shape)) if i != axis):
                raise self.error(f"bottoms must match except along axis {axis}, got "
                                 f"{[tuple(x.shape) for x in xs]}")
        return (xs[0],) if len(xs) == 1 else (ops.concatenate(list(xs), axis=axis),)


@register
class Slice(Layer):
    """Caffe's Slice along ``axis`` (or ``slice_dim``) at ``slice_point``s, or into
    equal parts (one per top) without them."""

    type = "Slice"
    tops = (1, None)
    in_place = False

    def parse(self, lp):
        p = lp.slice_param
        self.axis = p.axis if p.HasField("axis") else None
        self.dim = p.slice_dim if p.HasField("slice_dim") else None
        if self.axis is not None and self.dim is not None:
            raise self.error("give axis or slice_dim, not both")
        self.points = list(p.slice_point)
        if self.points and len(self.points) != self.n_top - 1:
            raise self.error(f"{len(self.points)} slice_point for {self.n_top} tops (needs "
                             f"{self.n_top - 1})")
        if any(b <= a for a, b in zip([0] + self.points, self.points)):
            raise self.error(f"slice_point {self.points} must increase from above 0")

    def forward(self, x):
        if self.dim is not None:
            if self.dim >= x.ndim:
                raise self.error(f"slice_dim {self.dim} is out of range for {tuple(x.shape)}")
            axis = self.dim
        else:
            axis = canonical_axis(self, 1 if self.axis is None else self.axis, x.ndim)
        n = x.shape[axis]
        if self.points:
            if self.points[-1] >= n:
                raise self.error(f"slice_point {self.points} must be below the axis size {n}")
            bounds = [0] + self.points + [n]
        else:
            if n % self.n_top:
                raise self.error(f"{self.n_top} tops do not divide axis {axis} of size {n}")
            step = n // self.n_top
            bounds = list(range(0, n + 1, step))
        if self.n_top == 1:
            return (x,)
        lead = (slice(None),) * axis
        return tuple(x[lead + (slice(a, b),)] for a, b in zip(bounds, bounds[1:]))


@register
class Split(Layer):
    """Caffe's Split: each top is the bottom (the gradients of the tops add up)."""

    type = "Split"
    tops = (1, None)

    def forward(self, x):
        return (x,) * self.n_top


@register
class Silence(Layer):
    """Caffe's Silence: consumes its bottoms, no tops (their diff is 0)."""

    type = "Silence"
    bottoms = (1, None)
    tops = (0, 0)

    def forward(self, *xs):
        return ()


@register
class Flatten(Layer):
    """Caffe's Flatten: axes ``axis..end_axis`` (inclusive, defaults 1 and -1) into one."""

    type = "Flatten"
    in_place = False

    def parse(self, lp):
        self.axis, self.end_axis = lp.flatten_param.axis, lp.flatten_param.end_axis

    def forward(self, x):
        a = canonical_axis(self, self.axis, x.ndim)
        e = canonical_axis(self, self.end_axis, x.ndim, "end_axis")
        if e < a:
            raise self.error(f"end_axis {self.end_axis} comes before axis {self.axis} in "
                             f"{tuple(x.shape)}")
        s = tuple(x.shape)
        return (x.reshape(s[:a] + (count(s, a, e + 1),) + s[e + 1:]),)


@register
class Reshape(Layer):
    """Caffe's Reshape: ``shape`` replaces axes ``[axis, axis + num_axes)`` (all from
    ``axis`` with ``num_axes: -1``); a 0 copies the bottom's dimension at the same
    position, one -1 is inferred."""

    type = "Reshape"
    in_place = False

    def parse(self, lp):
        p = lp.reshape_param
        self.dims, self.axis, self.num_axes = list(p.shape.dim), p.axis, p.num_axes
        if self.dims.count(-1) > 1:
            raise self.error(f"shape {self.dims} has more than one -1")
        if any(d < -1 for d in self.dims):
            raise self.error(f"shape {self.dims} has a dimension below -1")
        if self.num_axes < -1:
            raise self.error(f"num_axes must be -1 or more, got {self.num_axes}")

    def top_shape(self, shape):
        n = len(shape)
        start = self.axis if self.axis >= 0 else n + self.axis + 1
        if not 0 <= start <= n:
            raise self.error(f"axis {self.axis} is out of range for {shape}")
        end = n if self.num_axes == -1 else start + self.num_axes
        if end > n:
            raise self.error(f"axis {self.axis} + num_axes {self.num_axes} runs past {shape}")
        top = list(shape[:start]) + list(self.dims) + list(shape[end:])
        for i, d in enumerate(self.dims):
            if d == 0:
                if start + i >= n:
                    raise self.error(f"shape {self.dims} has a 0 at {i} but the bottom "
                                     f"{shape} has no axis {start + i} to copy")
                top[start + i] = shape[start + i]
        if -1 in self.dims:
            i = start + self.dims.index(-1)
            known = math.prod(d for j, d in enumerate(top) if j != i)
            if known == 0 or math.prod(shape) % known:
                raise self.error(f"cannot infer the -1 of {self.dims}: the bottom {shape} "
                                 f"has {math.prod(shape)} values, not a multiple of {known}")
            top[i] = math.prod(shape) // known
        if math.prod(top) != math.prod(shape):
            raise self.error(f"shape {tuple(top)} does not hold the bottom {shape}'s "
                             f"{math.prod(shape)} values")
        return tuple(top)

    def forward(self, x):
        return (x.reshape(self.top_shape(tuple(x.shape))),)


@register
class Crop(Layer):
    """Caffe's Crop: the first bottom cropped to the second's shape on the axes from
    ``axis`` (default 2), at ``offset`` (one value for all, or one per axis)."""

    type = "Crop"
    bottoms = (2, 2)
    in_place = False

    def parse(self, lp):
        self.axis, self.offset = lp.crop_param.axis, list(lp.crop_param.offset)

    def allow_force_backward(self, bottom):
        return bottom == 0

    def forward(self, x, like):
        start = canonical_axis(self, self.axis, x.ndim)
        if like.ndim != x.ndim:
            raise self.error(f"bottoms {tuple(x.shape)} and {tuple(like.shape)} differ in "
                             "rank")
        if len(self.offset) > 1 and start + len(self.offset) != x.ndim:
            raise self.error(f"{len(self.offset)} offsets for the {x.ndim - start} axes from "
                             f"axis {start}")
        index = []
        for i in range(x.ndim):
            if i < start:
                index.append(slice(None))
                continue
            off = self.offset[0] if len(self.offset) == 1 else \
                self.offset[i - start] if self.offset else 0
            size = like.shape[i]
            if x.shape[i] - off < size:
                raise self.error(f"crop of axis {i} is out of bounds: size {size} at offset "
                                 f"{off} in {tuple(x.shape)}")
            index.append(slice(off, off + size))
        return (x[tuple(index)],)


@register
class Softmax(Layer):
    """Caffe's Softmax along ``axis`` (default 1)."""

    type = "Softmax"

    def parse(self, lp):
        self.axis = lp.softmax_param.axis

    def forward(self, x):
        return (ops.softmax(x, axis=canonical_axis(self, self.axis, x.ndim)),)
