"""Specs of tapegrad/ops/conv.py, each against the direct-loop reference.
Both ops are twice differentiable, so every spec is gradgradchecked too; the
squared ones make the upstream gradient depend on the inputs, so that the
recorded vjp is differentiated with respect to its upstream gradient as well."""

from ... import ops
from ..reference import ref_conv2d, ref_conv_transpose2d
from . import OpSpec


def _conv_inputs(x_shape, w_shape, bias=True):
    def make(r):
        out = [r.normal(size=x_shape), r.normal(size=w_shape)]
        if bias:
            out.append(r.normal(size=(w_shape[0],)))
        return out

    return make


def _convt_inputs(x_shape, w_shape, groups=1):
    def make(r):
        return [r.normal(size=x_shape), r.normal(size=w_shape),
                r.normal(size=(w_shape[1] * groups,))]

    return make


def _conv(inputs, label, power=1, **kw):
    return OpSpec("conv2d", lambda x, w, *b: ops.conv2d(x, w, *b, **kw) ** power, inputs,
                  label, reference=lambda x, w, *b: ref_conv2d(x, w, *b, **kw) ** power)


def _convt(inputs, label, power=1, **kw):
    return OpSpec("conv_transpose2d",
                  lambda x, w, b: ops.conv_transpose2d(x, w, b, **kw) ** power, inputs, label,
                  reference=lambda x, w, b: ref_conv_transpose2d(x, w, b, **kw) ** power)


SPECS = [
    _conv(_conv_inputs((2, 3, 5, 5), (4, 3, 3, 3)), "3x3 pad 1", padding=1),
    _conv(_conv_inputs((1, 2, 6, 5), (3, 2, 2, 3)), "stride, asymmetric pad, dilation",
          stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2)),
    _conv(_conv_inputs((2, 4, 5, 6), (4, 2, 3, 2), bias=False), "groups, no bias", stride=2,
          groups=2),
    _conv(_conv_inputs((3, 2, 3, 4), (5, 2, 3, 4)), "fully connected"),
    # Ho = 3, and the floor drops a row and a column: the recorded input gradient's
    # output_padding is (1, 1)
    _conv(_conv_inputs((1, 2, 9, 8), (2, 2, 2, 2)), "stride 3 > kernel, rows dropped", stride=3,
          padding=(0, 0, 1, 0)),
    _conv(_conv_inputs((1, 3, 5, 4), (3, 1, 3, 2)), "depthwise, dilation 2, pad 2", padding=2,
          dilation=2, groups=3),
    _conv(_conv_inputs((2, 2, 5, 4), (4, 1, 3, 3)), "squared: stride, pad, groups", power=2,
          stride=(2, 1), padding=(1, 1, 0, 1), groups=2),
    # pointwise: x is its own columns, gx one GEMM per image
    _conv(_conv_inputs((2, 4, 3, 5), (6, 2, 1, 1)), "1x1, groups", power=2, groups=2),
    _convt(_convt_inputs((2, 3, 3, 3), (3, 2, 3, 3)), "upsample 2", stride=2),
    _convt(_convt_inputs((2, 4, 3, 2), (4, 3, 1, 1), groups=2), "1x1, groups", power=2,
           groups=2),
    # 1x1 but not pointwise: output_padding below the dilation adds a row and a column
    _convt(_convt_inputs((1, 2, 3, 2), (2, 3, 1, 1)), "1x1, dilation 2, output_padding 1",
           output_padding=1, dilation=2),
    _convt(_convt_inputs((1, 4, 3, 2), (4, 1, 3, 4), groups=2), "crop, groups, output_padding",
           stride=(2, 3), padding=(1, 0, 0, 2), output_padding=(1, 0), groups=2, dilation=1),
    _convt(_convt_inputs((1, 2, 4, 3), (2, 3, 2, 3)), "dilation", padding=1, dilation=2),
    # output_padding 1 >= stride 1 (allowed below the dilation): the conv that is its input
    # gradient has one more output row than the input, which the recorded vjp crops
    _convt(_convt_inputs((1, 2, 3, 3), (2, 2, 2, 2)), "output_padding >= stride, dilation 2",
           output_padding=1, dilation=2),
    _convt(_convt_inputs((2, 2, 2, 3), (2, 1, 3, 2), groups=2), "squared: stride, crop, groups",
           power=2, stride=2, padding=(0, 1, 1, 0), groups=2),
]
