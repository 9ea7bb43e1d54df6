"""Gradients through imported graphs: every rule that carries float data is
gradchecked (float64, central differences) with respect to the graph input, so a
rule that detached its data path (computing on raw arrays) or composed ops
wrongly cannot pass. Parameters' gradients: test_load.py."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper  # noqa: E402
from onnx_helpers import make_model  # noqa: E402

import tapegrad  # noqa: E402
import tapegrad.onnx  # noqa: E402
from tapegrad.testing.gradcheck import gradcheck  # noqa: E402

N = helper.make_node
R = np.random.default_rng(7)


def w(*shape):
    return R.standard_normal(shape)


def i64(*v):
    return np.array(v, np.int64)


# (id, input shape, nodes reading "x" and writing "y", initializers, opset)
CASES = [
    ("conv", (1, 4, 6, 5), [N("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 2, 1], strides=[2, 1],
                               dilations=[1, 2], group=2)], {"w": w(4, 2, 3, 2), "b": w(4)}, 17),
    ("conv1d", (2, 2, 7), [N("Conv", ["x", "w"], ["y"], pads=[1, 1])], {"w": w(3, 2, 3)}, 17),
    ("convtranspose", (1, 2, 3, 4), [N("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2],
                                       pads=[1, 0, 0, 1])], {"w": w(2, 3, 3, 3), "b": w(3)}, 17),
    ("convtranspose-crop-extend", (1, 2, 3, 3),
     [N("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], output_padding=[3, 0])],
     {"w": w(2, 3, 2, 2), "b": w(3)}, 17),
    ("maxpool", (1, 2, 7, 6), [N("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 2],
                                 pads=[1, 0, 1, 1], ceil_mode=1)], {}, 17),
    ("maxpool-dilated", (1, 2, 7, 6), [N("MaxPool", ["x"], ["y"], kernel_shape=[2, 2],
                                         dilations=[2, 2], pads=[1, 1, 1, 1])], {}, 17),
    ("avgpool", (1, 2, 7, 6), [N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3],
                                 strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)], {}, 17),
    ("avgpool-dilated", (1, 2, 7, 6), [N("AveragePool", ["x"], ["y"], kernel_shape=[2, 2],
                                         dilations=[2, 1], count_include_pad=1,
                                         pads=[1, 0, 1, 1])], {}, 19),
    ("globalpools", (2, 3, 4, 3), [N("GlobalAveragePool", ["x"], ["a"]),
                                   N("GlobalMaxPool", ["x"], ["b"]), N("Add", ["a", "b"], ["y"])],
     {}, 17),
    ("batchnorm", (2, 3, 2, 2), [N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
     {"s": w(3), "b": w(3), "m": w(3), "v": np.abs(w(3)) + 1}, 15),
    ("instancenorm", (2, 3, 2, 3), [N("InstanceNormalization", ["x", "s", "b"], ["y"])],
     {"s": w(3), "b": w(3)}, 17),
    ("layernorm", (2, 3, 4), [N("LayerNormalization", ["x", "s", "b"], ["y"], axis=1)],
     {"s": w(3, 4), "b": w(3, 4)}, 17),
    ("lrn", (1, 6, 2, 2), [N("LRN", ["x"], ["y"], size=4, alpha=0.3, bias=1.5)], {}, 17),
    ("leakyrelu-neg", (3, 4), [N("LeakyRelu", ["x"], ["y"], alpha=-0.2)], {}, 17),
    ("prelu-full", (2, 3, 2), [N("PRelu", ["x", "s"], ["y"])], {"s": w(3, 2)}, 17),
    ("prelu-channel", (2, 3, 2), [N("PRelu", ["x", "s"], ["y"])], {"s": w(3, 1)}, 17),
    ("activations", (3, 4), [N("HardSigmoid", ["x"], ["a"], alpha=0.3),
                             N("HardSwish", ["x"], ["b"]), N("Selu", ["a"], ["c"]),
                             N("Celu", ["b"], ["d"], alpha=0.5),
                             N("Gelu", ["c"], ["e"]), N("Mish", ["d"], ["f"]),
                             N("Softplus", ["e"], ["g"]), N("Mul", ["f", "g"], ["y"])], {}, 20),
    ("softmax-opset11", (2, 3, 4), [N("Softmax", ["x"], ["a"], axis=1),
                                    N("LogSoftmax", ["x"], ["b"], axis=2),
                                    N("Add", ["a", "b"], ["y"])], {}, 11),
    ("gemm", (4, 3), [N("Gemm", ["x", "w", "c"], ["y"], transA=1, alpha=0.5, beta=2.0)],
     {"w": w(4, 5), "c": w(5)}, 17),
    ("matmul-div-sum", (2, 3, 4), [N("MatMul", ["x", "w"], ["a"]), N("Div", ["a", "d"], ["b"]),
                                   N("Sum", ["a", "b", "x2"], ["y"])],
     {"w": w(4, 2), "d": np.abs(w(2)) + 1, "x2": w(3, 2)}, 17),
    ("shapes", (2, 3, 4), [N("Transpose", ["x"], ["a"], perm=[1, 2, 0]),
                           N("Reshape", ["a", "s"], ["b"]), N("Unsqueeze", ["b", "ax"], ["c"]),
                           N("Squeeze", ["c", "ax"], ["d"]), N("Flatten", ["d"], ["e"], axis=1),
                           N("Concat", ["e", "e"], ["y"], axis=0)],
     {"s": i64(0, -1), "ax": i64(1)}, 13),
    ("pads", (1, 2, 4, 5), [N("Pad", ["x", "p", "v"], ["a"], mode="constant"),
                            N("Pad", ["a", "q"], ["b"], mode="reflect"),
                            N("Pad", ["b", "q"], ["y"], mode="edge")],
     {"p": i64(0, 0, 1, -1, 0, 0, -1, 2), "v": np.array(0.5), "q": i64(0, 0, 1, 2, 0, 0, 2, 1)},
     13),
    ("slice-gather", (5, 6), [N("Slice", ["x", "st", "en", "ax", "sp"], ["a"]),
                              N("Gather", ["a", "i"], ["b"], axis=1),
                              N("GatherElements", ["b", "j"], ["y"], axis=0)],
     {"st": i64(4, 0), "en": i64(-100, 6), "ax": i64(0, 1), "sp": i64(-2, 2), "i": i64(2, 0, 2),
      "j": i64(2, 0, 1)[None].repeat(2, 0)}, 13),
    ("reduce", (2, 3, 4), [N("ReduceMean", ["x"], ["a"], axes=[1], keepdims=1),
                           N("ReduceL2", ["x"], ["b"], axes=[1], keepdims=1),
                           N("ReduceLogSumExp", ["x"], ["c"], axes=[1], keepdims=1),
                           N("Sum", ["a", "b", "c"], ["y"])], {}, 13),
    ("split-cumsum", (4, 6), [N("Split", ["x", "sz"], ["a", "b"], axis=1),
                              N("CumSum", ["a", "ax"], ["c"], exclusive=1, reverse=1),
                              N("Sub", ["c", "b"], ["y"])],
     {"sz": i64(3, 3), "ax": i64(0)}, 13),
    ("where-expand-tile", (2, 3), [N("Greater", ["x", "z"], ["m"]),
                                   N("Where", ["m", "x", "z"], ["a"]),
                                   N("Expand", ["a", "sh"], ["b"]),
                                   N("Tile", ["b", "rep"], ["y"])],
     {"z": w(2, 3), "sh": i64(2, 2, 3), "rep": i64(1, 2, 1)}, 13),
    ("topk-clip", (3, 5), [N("TopK", ["x", "k"], ["v", "idx"], axis=1),
                           N("Clip", ["v", "lo", "hi"], ["y"])],
     {"k": i64(3), "lo": np.array(-0.5), "hi": np.array(0.7)}, 13),
]


@pytest.mark.parametrize("shape,nodes,inits,opset", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_input_gradient(shape, nodes, inits, opset):
    x = R.standard_normal(shape)
    model = tapegrad.onnx.load(make_model(nodes, {"x": x}, ["y"], inits, opset=opset,
                                          out_dtype=np.float64))
    assert gradcheck(lambda t: model(t), [x], atol=1e-6, rtol=1e-4)
