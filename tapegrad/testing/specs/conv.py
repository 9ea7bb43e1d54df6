"""Specs of tapegrad/ops/conv.py."""

from ... import ops
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


SPECS = [
    OpSpec("conv2d", lambda x, w, b: ops.conv2d(x, w, b, padding=1),
           _conv_inputs((2, 3, 5, 5), (4, 3, 3, 3)), "3x3 pad 1"),
    OpSpec("conv2d", lambda x, w, b: ops.conv2d(x, w, b, stride=(2, 1), padding=(1, 0, 2, 1),
                                                dilation=(1, 2)),
           _conv_inputs((1, 2, 6, 5), (3, 2, 2, 3)), "stride, asymmetric pad, dilation"),
    OpSpec("conv2d", lambda x, w: ops.conv2d(x, w, stride=2, groups=2),
           _conv_inputs((2, 4, 5, 6), (4, 2, 3, 2), bias=False), "groups, no bias"),
    OpSpec("conv2d", lambda x, w, b: ops.conv2d(x, w, b),
           _conv_inputs((3, 2, 3, 4), (5, 2, 3, 4)), "fully connected"),
    OpSpec("conv_transpose2d", lambda x, w, b: ops.conv_transpose2d(x, w, b, stride=2),
           _convt_inputs((2, 3, 3, 3), (3, 2, 3, 3)), "upsample 2"),
    OpSpec("conv_transpose2d",
           lambda x, w, b: ops.conv_transpose2d(x, w, b, stride=(2, 3), padding=(1, 0, 0, 2),
                                                output_padding=(1, 0), groups=2, dilation=1),
           _convt_inputs((1, 4, 3, 2), (4, 1, 3, 4), groups=2), "crop, groups, output_padding"),
    OpSpec("conv_transpose2d",
           lambda x, w, b: ops.conv_transpose2d(x, w, b, padding=1, dilation=2),
           _convt_inputs((1, 2, 4, 3), (2, 3, 2, 3)), "dilation"),
]
