"""tapegrad.onnx.load's operators against onnxruntime: one small graph per operator
family and attribute convention (float32, within 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from onnx_helpers import assert_matches_ort, f32, make_model, one_node, run_tapegrad  # noqa: E402

import tapegrad  # noqa: E402
import tapegrad.onnx  # noqa: E402

N = helper.make_node


# ------------------------------------------------------------- convolution

CONV_CASES = [
    dict(pads=[1, 2, 0, 1], strides=[2, 1]),              # [top, left, bottom, right]
    dict(pads=[1, 1, 1, 1], dilations=[2, 2]),
    dict(group=2),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 2]),
    dict(auto_pad="VALID", strides=[1, 2]),
]


@pytest.mark.parametrize("attrs", CONV_CASES, ids=lambda a: "-".join(map(str, a)))
@pytest.mark.parametrize("bias", [True, False])
def test_conv(rng, attrs, bias):
    x, w, b = f32(rng, 2, 4, 9, 8), f32(rng, 6, 4 // attrs.get("group", 1), 3, 3), f32(rng, 6)
    inits = {"w": w, "b": b} if bias else {"w": w}
    assert_matches_ort(one_node("Conv", x, attrs, inits, ["w", "b"] if bias else ["w"]),
                       {"x": x})


def test_conv1d(rng):
    x, w = f32(rng, 2, 3, 11), f32(rng, 4, 3, 3)
    m = one_node("Conv", x, dict(pads=[2, 1], strides=[2], dilations=[2]), {"w": w}, ["w"])
    assert_matches_ort(m, {"x": x})


CONVT_CASES = [
    dict(strides=[2, 2], pads=[1, 0, 0, 1]),
    dict(strides=[2, 3], output_padding=[1, 2]),
    dict(strides=[2, 2], output_shape=[10, 9]),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    dict(strides=[2, 2], auto_pad="SAME_LOWER"),
    dict(group=2, dilations=[2, 1]),
    dict(strides=[2, 2], output_padding=[3, 0], dilations=[1, 1]),  # > stride: explicit
]


@pytest.mark.parametrize("attrs", CONVT_CASES, ids=lambda a: "-".join(map(str, a)))
def test_conv_transpose(rng, attrs):
    g = attrs.get("group", 1)
    x, w, b = f32(rng, 2, 4, 5, 4), f32(rng, 4, 6 // g, 3, 3), f32(rng, 6)
    if attrs.get("output_padding") == [3, 0]:
        # onnxruntime refuses output_padding >= stride; the reference is pads of zeros
        m = one_node("ConvTranspose", x, dict(strides=[2, 2]), {"w": w, "b": b}, ["w", "b"])
        ref = run_tapegrad(m, {"x": x})[0] - b[:, None, None]
        ref = np.pad(ref, ((0, 0), (0, 0), (0, 3), (0, 0))) + b[:, None, None]
        got = run_tapegrad(one_node("ConvTranspose", x, attrs, {"w": w, "b": b}, ["w", "b"]),
                           {"x": x})[0]
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        return
    assert_matches_ort(one_node("ConvTranspose", x, attrs, {"w": w, "b": b}, ["w", "b"]),
                       {"x": x})


# ----------------------------------------------------------------- pooling

POOL_CASES = [
    dict(kernel_shape=[3, 3], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1]),
    dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 3], strides=[1, 2], auto_pad="SAME_UPPER"),
    dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[3, 3], auto_pad="VALID"),
]


@pytest.mark.parametrize("attrs", POOL_CASES, ids=lambda a: "-".join(map(str, a)))
def test_max_pool(rng, attrs):
    x = f32(rng, 2, 3, 8, 7)
    assert_matches_ort(one_node("MaxPool", x, attrs), {"x": x})


@pytest.mark.parametrize("attrs", POOL_CASES, ids=lambda a: "-".join(map(str, a)))
@pytest.mark.parametrize("include", [0, 1])
def test_average_pool(rng, attrs, include):
    x = f32(rng, 2, 3, 8, 7)
    attrs = dict(attrs, count_include_pad=include)
    assert_matches_ort(one_node("AveragePool", x, attrs, opset=19), {"x": x})


def test_pool1d(rng):
    x = f32(rng, 2, 3, 10)
    a = dict(kernel_shape=[3], strides=[2], pads=[1, 0])
    assert_matches_ort(one_node("MaxPool", x, a), {"x": x})
    assert_matches_ort(one_node("AveragePool", x, dict(a, count_include_pad=1)), {"x": x})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(rng, op):
    x = f32(rng, 2, 3, 5, 4)
    assert_matches_ort(one_node(op, x), {"x": x})


# ----------------------------------------------------------- normalisation


def test_batch_norm_inference(rng):
    x = f32(rng, 2, 3, 4, 5)
    inits = {"s": f32(rng, 3), "b": f32(rng, 3), "m": f32(rng, 3),
             "v": np.abs(f32(rng, 3)) + 0.5}
    m = one_node("BatchNormalization", x, dict(epsilon=1e-3), inits, ["s", "b", "m", "v"])
    assert_matches_ort(m, {"x": x})
    model = tapegrad.onnx.load(m)
    assert {n for n, _ in model.named_parameters()} == {"s", "b"}
    assert {n for n, _ in model.named_buffers()} == {"m", "v"}  # running statistics


def _lrn_spec(x, size, alpha, beta, bias):
    """ONNX's LRN formula, written out: channels [c - (size-1)//2, c + ceil((size-1)/2)]."""
    y = np.empty_like(x)
    c_all = x.shape[1]
    for c in range(c_all):
        lo, hi = max(0, c - (size - 1) // 2), min(c_all - 1, c + -(-(size - 1) // 2))
        sq = (x[:, lo:hi + 1].astype(np.float64) ** 2).sum(axis=1)
        y[:, c] = x[:, c] / (bias + alpha / size * sq) ** beta
    return y


@pytest.mark.parametrize("size", [1, 3, 4, 5, 6])
def test_lrn(rng, size):
    x = f32(rng, 2, 7, 3, 3) * 3
    attrs = dict(size=size, alpha=0.02, beta=0.75, bias=2.0)
    m = one_node("LRN", x, attrs)
    got = run_tapegrad(m, {"x": x})[0]
    np.testing.assert_allclose(got, _lrn_spec(x, size, 0.02, 0.75, 2.0), rtol=1e-5, atol=1e-6)
    if size % 2:  # onnxruntime takes odd sizes only (and onnx 1.23's reference LRN loops
        assert_matches_ort(m, {"x": x})  # over the batch axis instead of the channels)


def test_instance_norm(rng):
    x = f32(rng, 2, 3, 4, 5)
    m = one_node("InstanceNormalization", x, dict(epsilon=1e-4),
                 {"s": f32(rng, 3), "b": f32(rng, 3)}, ["s", "b"])
    assert_matches_ort(m, {"x": x})


# ------------------------------------------------------------- activations

ACT_CASES = [
    ("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("LeakyRelu", dict(alpha=0.2)),
    ("LeakyRelu", dict(alpha=-0.3)), ("HardSigmoid", dict(alpha=0.3, beta=0.4)),
    ("HardSigmoid", {}), ("HardSwish", {}), ("Elu", dict(alpha=0.7)), ("Selu", {}),
    ("Softplus", {}), ("Softmax", dict(axis=1)), ("LogSoftmax", dict(axis=-1)),
    ("Abs", {}), ("Neg", {}), ("Exp", {}), ("Identity", {}), ("Erf", {}),
]


@pytest.mark.parametrize("op,attrs", ACT_CASES, ids=[f"{o}-{a}" for o, a in ACT_CASES])
def test_activation(rng, op, attrs):
    x = f32(rng, 2, 3, 4) * 3
    assert_matches_ort(one_node(op, x, attrs), {"x": x})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 2), (11, 0), (13, 1), (13, -2)])
def test_softmax_opset_semantics(rng, op, opset, axis):
    """Before opset 13 the input is flattened to 2-D at ``axis``."""
    x = f32(rng, 2, 3, 4)
    assert_matches_ort(one_node(op, x, dict(axis=axis), opset=opset), {"x": x})


@pytest.mark.parametrize("slope_shape", [(1,), (3, 1, 1), (3, 4, 3), (3,), (1, 3, 1, 1)])
def test_prelu(rng, slope_shape):
    x = f32(rng, 2, 3, 4, 3)  # a (3,) slope is per column (the last axis), not per channel
    m = one_node("PRelu", x, None, {"s": f32(rng, *slope_shape)}, ["s"])
    assert_matches_ort(m, {"x": x})


def test_clip(rng):
    x = f32(rng, 3, 4) * 3
    inits = {"lo": np.array(-0.5, np.float32), "hi": np.array(1.2, np.float32)}
    assert_matches_ort(one_node("Clip", x, None, inits, ["lo", "hi"], opset=13), {"x": x})
    assert_matches_ort(one_node("Clip", x, None, {"lo": inits["lo"]}, ["lo"], opset=13),
                       {"x": x})
    assert_matches_ort(one_node("Clip", x, dict(min=-0.1, max=0.3), opset=6), {"x": x})


# ----------------------------------------------------- products, arithmetic


@pytest.mark.parametrize("ta,tb,alpha,beta", [(0, 0, 1.0, 1.0), (1, 0, 0.5, 2.0),
                                              (0, 1, 1.5, 0.0), (1, 1, -1.0, 0.3)])
def test_gemm(rng, ta, tb, alpha, beta):
    a = f32(rng, 5, 3) if ta else f32(rng, 3, 5)
    b = f32(rng, 4, 5) if tb else f32(rng, 5, 4)
    m = one_node("Gemm", a, dict(transA=ta, transB=tb, alpha=alpha, beta=beta),
                 {"b": b, "c": f32(rng, 4)}, ["b", "c"])
    assert_matches_ort(m, {"x": a})


def test_matmul_batched(rng):
    x = f32(rng, 2, 3, 4)
    assert_matches_ort(one_node("MatMul", x, None, {"w": f32(rng, 4, 6)}, ["w"]), {"x": x})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_broadcast(rng, op):
    x = f32(rng, 2, 3, 4)
    assert_matches_ort(one_node(op, x, None, {"c": f32(rng, 3, 1) + 3}, ["c"]), {"x": x})


def test_sum_variadic(rng):
    x = f32(rng, 2, 3)
    inits = {"a": f32(rng, 3), "b": f32(rng, 2, 1)}
    assert_matches_ort(one_node("Sum", x, None, inits, ["a", "b"]), {"x": x})


@pytest.mark.parametrize("axes,keep", [([1], 1), ([0, 2], 0), (None, 1)])
def test_reduce_mean(rng, axes, keep):
    x = f32(rng, 2, 3, 4)
    attrs = dict(keepdims=keep) if axes is None else dict(axes=axes, keepdims=keep)
    assert_matches_ort(one_node("ReduceMean", x, attrs, opset=13), {"x": x})
    if axes is not None:  # opset 18: axes as an input
        m = one_node("ReduceMean", x, dict(keepdims=keep),
                     {"ax": np.array(axes, np.int64)}, ["ax"], opset=18)
        assert_matches_ort(m, {"x": x})


# ---------------------------------------------------------------- shapes


@pytest.mark.parametrize("shape,allowzero", [([0, -1], 0), ([-1, 4], 0), ([2, 3, 2, 2], 0),
                                             ([0, 0, 4], 1)])
def test_reshape(rng, shape, allowzero):
    x = f32(rng, 2, 3, 4) if not allowzero else f32(rng, 0, 3, 4)
    m = one_node("Reshape", x, dict(allowzero=allowzero) if allowzero else None,
                 {"s": np.array(shape, np.int64)}, ["s"], opset=14)
    assert_matches_ort(m, {"x": x})


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(rng, axis):
    x = f32(rng, 2, 3, 4)
    assert_matches_ort(one_node("Flatten", x, dict(axis=axis)), {"x": x})


def test_transpose_concat(rng):
    x = f32(rng, 2, 3, 4)
    assert_matches_ort(one_node("Transpose", x, dict(perm=[2, 0, 1])), {"x": x})
    assert_matches_ort(one_node("Transpose", x), {"x": x})
    m = one_node("Concat", x, dict(axis=1), {"c": f32(rng, 2, 5, 4)}, ["c"])
    assert_matches_ort(m, {"x": x})


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze(rng, opset):
    x = f32(rng, 2, 1, 3, 1)
    if opset < 13:
        sq, un = one_node("Squeeze", x, dict(axes=[1, -1]), opset=11), \
            one_node("Unsqueeze", x, dict(axes=[0, 5]), opset=11)
    else:
        sq = one_node("Squeeze", x, None, {"a": np.array([1, -1], np.int64)}, ["a"], opset)
        un = one_node("Unsqueeze", x, None, {"a": np.array([0, 5], np.int64)}, ["a"], opset)
    assert_matches_ort(sq, {"x": x})
    assert_matches_ort(un, {"x": x})


@pytest.mark.parametrize("mode,pads", [("constant", [0, 1, 2, 0, 0, 2, 1, 1]),
                                       ("constant", [0, 0, -1, 1, 0, 0, 1, -2]),
                                       ("reflect", [0, 0, 1, 2, 0, 0, 2, 1]),
                                       ("edge", [0, 0, 2, 0, 0, 0, 1, 3])])
def test_pad(rng, mode, pads):
    x = f32(rng, 2, 3, 4, 5)
    inits = {"p": np.array(pads, np.int64), "v": np.array(1.5, np.float32)}
    ins = ["p", "v"] if mode == "constant" else ["p"]
    m = one_node("Pad", x, dict(mode=mode), {k: inits[k] for k in ins}, ins, opset=13)
    assert_matches_ort(m, {"x": x})


def test_slice_gather(rng):
    x = f32(rng, 5, 6, 7)
    inits = {"s": np.array([4, 1], np.int64), "e": np.array([-100, 6], np.int64),
             "a": np.array([0, 2], np.int64), "st": np.array([-2, 2], np.int64)}
    m = one_node("Slice", x, None, inits, ["s", "e", "a", "st"])
    assert_matches_ort(m, {"x": x})
    m = one_node("Gather", x, dict(axis=1), {"i": np.array([[0, -1], [2, 2]], np.int64)}, ["i"])
    assert_matches_ort(m, {"x": x})
    m = one_node("Gather", x, dict(axis=2), {"i": np.array(3, np.int64)}, ["i"])
    assert_matches_ort(m, {"x": x})


def test_dropout_identity_constant(rng):
    x = f32(rng, 3, 4)
    c = helper.make_tensor("c", onnx.TensorProto.FLOAT, [4], f32(rng, 4).tolist())
    nodes = [N("Dropout", ["x", "r"], ["d"]), N("Identity", ["d"], ["i"]),
             N("Constant", [], ["k"], value=c), N("Add", ["i", "k"], ["y"])]
    m = make_model(nodes, {"x": x}, ["y"], {"r": np.array(0.5, np.float32)}, opset=13)
    assert_matches_ort(m, {"x": x})


# ------------------------------------------------- pooling beyond tapegrad's ops

DILATED = [
    dict(kernel_shape=[2, 2], dilations=[2, 2]),
    dict(kernel_shape=[3, 2], strides=[2, 1], dilations=[2, 3], pads=[1, 0, 2, 1]),
    dict(kernel_shape=[2, 2], strides=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
]


@pytest.mark.parametrize("attrs", DILATED, ids=lambda a: "-".join(map(str, a)))
def test_max_pool_dilated(rng, attrs):
    x = f32(rng, 2, 3, 9, 8)
    assert_matches_ort(one_node("MaxPool", x, attrs), {"x": x})


@pytest.mark.parametrize("attrs", DILATED, ids=lambda a: "-".join(map(str, a)))
@pytest.mark.parametrize("include", [0, 1])
def test_average_pool_dilated(rng, attrs, include):
    x = f32(rng, 2, 3, 9, 8)
    m = one_node("AveragePool", x, dict(attrs, count_include_pad=include), opset=19)
    assert_matches_ort(m, {"x": x})


@pytest.mark.parametrize("kernel,strides,pads,ceil", [
    ((3, 3), (2, 2), [(1, 1), (0, 1)], False), ((3, 2), (2, 2), [(0, 0), (0, 0)], True),
    ((3, 3), (2, 2), [(1, 1), (1, 1)], True), ((2, 3), (1, 2), [(1, 0), (2, 1)], False)])
@pytest.mark.parametrize("kind,include", [("max", False), ("avg", False), ("avg", True)])
def test_pool_by_offsets_equals_pool_ops(rng, kernel, strides, pads, ceil, kind, include):
    """The per-offset fallback gives tapegrad's pool ops' values and gradients."""
    from tapegrad.onnx._rules import NodeInfo
    from tapegrad.onnx.ops_pool import _pool_by_offsets

    x = tapegrad.tensor(rng.standard_normal((2, 3, 7, 8)), requires_grad=True)
    node = NodeInfo("p", "MaxPool" if kind == "max" else "AveragePool", 17)
    tblr = (pads[0][0], pads[0][1], pads[1][0], pads[1][1])
    got = _pool_by_offsets(node, x, kernel, strides, (1, 1), pads, ceil, kind, include)
    want = tapegrad.ops.max_pool2d(x, kernel, strides, tblr, ceil_mode=ceil) if kind == "max" \
        else tapegrad.ops.avg_pool2d(x, kernel, strides, tblr, ceil_mode=ceil,
                                     count_include_pad=include)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    cot = tapegrad.tensor(rng.standard_normal(want.shape))
    (g1,) = tapegrad.grad((got * cot).sum(), [x])
    (g2,) = tapegrad.grad((want * cot).sum(), [x])
    np.testing.assert_allclose(g1.numpy(), g2.numpy(), rtol=1e-12, atol=1e-12)


def test_pool_large_padding_uses_offsets(rng):
    """Padding as large as the kernel (ONNX allows it; tapegrad's op does not)."""
    x = f32(rng, 1, 2, 5, 5)
    y = run_tapegrad(one_node("MaxPool", x, dict(kernel_shape=[2, 2], pads=[2, 0, 0, 2])),
                     {"x": x})[0]
    xp = np.pad(x, ((0, 0), (0, 0), (2, 0), (0, 2)), constant_values=-np.inf)
    want = np.maximum.reduce([xp[:, :, i:i + 6, j:j + 6] for i in (0, 1) for j in (0, 1)])
    np.testing.assert_array_equal(y, want)


# ------------------------------------------------------ beyond the required set

EXTRA = [
    ("Where", lambda x: [N("Greater", ["x", "z"], ["c"]), N("Where", ["c", "x", "z"], ["y"])]),
    ("Split", lambda x: [N("Split", ["x", "s"], ["a", "b"], axis=1), N("Sub", ["a", "b"], ["y"])]),
    ("LayerNormalization", lambda x: [N("LayerNormalization", ["x", "g", "z"], ["y"], axis=-2)]),
    ("CumSum", lambda x: [N("CumSum", ["x", "ax"], ["y"], exclusive=1, reverse=1)]),
    ("ReduceL2", lambda x: [N("ReduceL2", ["x", "ax"], ["y"], keepdims=0)]),
    ("Gelu", lambda x: [N("Gelu", ["x"], ["y"], approximate="tanh")]),
    ("Trilu", lambda x: [N("Trilu", ["x", "k"], ["y"], upper=0)]),
]


@pytest.mark.parametrize("name,nodes", EXTRA, ids=[e[0] for e in EXTRA])
def test_extra_operators(rng, name, nodes):
    x = f32(rng, 2, 4, 3)
    inits = {"z": np.full((4, 3), 0.1, np.float32), "s": np.array([2, 2], np.int64),
             "g": f32(rng, 4, 3), "ax": np.array([1], np.int64), "k": np.array(1, np.int64)}
    graph_nodes = nodes(x)
    used = {i for n in graph_nodes for i in n.input}
    m = make_model(graph_nodes, {"x": x}, ["y"], {k: v for k, v in inits.items() if k in used},
                   opset=20)
    assert_matches_ort(m, {"x": x})


# ------------------------------------------------------------ older opsets


def test_legacy_broadcast_axis(rng):
    """Opset < 7: ``broadcast=1, axis=1`` aligns B's axes with A's from axis 1."""
    x, c = f32(rng, 2, 3, 4, 5), f32(rng, 3, 4)
    m = make_model([helper.make_node("Add", ["x", "c"], ["y"], broadcast=1, axis=1)],
                   {"x": x}, ["y"], {"c": c}, opset=6)
    np.testing.assert_allclose(run_tapegrad(m, {"x": x})[0], x + c[None, :, :, None],
                               rtol=1e-6)


def test_pad_opset2_attributes(rng):
    x = f32(rng, 2, 3)
    m = one_node("Pad", x, dict(pads=[0, 1, 1, 2], value=0.5), opset=2)
    np.testing.assert_array_equal(run_tapegrad(m, {"x": x})[0],
                                  np.pad(x, ((0, 1), (1, 2)), constant_values=0.5))


def test_reshape_opset1_shape_attribute(rng):
    x = f32(rng, 2, 3, 4)
    m = make_model([helper.make_node("Reshape", ["x"], ["y"], shape=[0, -1])], {"x": x},
                   {"y": [2, 12]}, opset=1)
    np.testing.assert_array_equal(run_tapegrad(m, {"x": x})[0], x.reshape(2, 12))


@pytest.mark.parametrize("start,end,step", [(-100, -200, -1), (2, -200, -2), (10, 0, -1),
                                            (-1, -100, -3), (-100, 100, 2), (3, 3, 1),
                                            (100, -100, -1), (1, -1, 1)])
def test_slice_clamping(rng, start, end, step):
    x = f32(rng, 6, 2)
    inits = {"s": np.array([start], np.int64), "e": np.array([end], np.int64),
             "a": np.array([0], np.int64), "st": np.array([step], np.int64)}
    m = one_node("Slice", x, None, inits, ["s", "e", "a", "st"], opset=13)
    assert_matches_ort(m, {"x": x})
