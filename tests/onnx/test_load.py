"""tapegrad.onnx.load as an API: the Module it returns (Parameters, buffers,
constants folded, dynamic shapes), fine-tuning through it, devices, and its errors.
The operators one by one: test_load_ops.py."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from onnx_helpers import assert_matches_ort, f32, make_model, one_node  # noqa: E402

import tapegrad  # noqa: E402
import tapegrad.onnx  # noqa: E402
from tapegrad import nn  # noqa: E402
from tapegrad.onnx import UnsupportedOnnxError  # noqa: E402

N = helper.make_node


# ------------------------------------------ dynamic shapes, folding


def _dynamic_flatten():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as PyTorch exports x.view(n, -1)."""
    nodes = [N("Shape", ["x"], ["s"]), N("Gather", ["s", "zero"], ["n"], axis=0),
             N("Unsqueeze", ["n", "ax"], ["n1"]), N("Concat", ["n1", "minus1"], ["shape"], axis=0),
             N("Reshape", ["x", "shape"], ["flat"]), N("MatMul", ["flat", "w"], ["y"])]
    inits = {"zero": np.array(0, np.int64), "ax": np.array([0], np.int64),
             "minus1": np.array([-1], np.int64),
             "w": np.random.default_rng(1).standard_normal((12, 2)).astype(np.float32)}
    import onnx as _onnx
    from onnx import helper as h

    x = h.make_tensor_value_info("x", _onnx.TensorProto.FLOAT, ["batch", 3, 4])
    y = h.make_tensor_value_info("y", _onnx.TensorProto.FLOAT, ["batch", 2])
    graph = h.make_graph(nodes, "dyn", [x], [y],
                         [_onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("batch", [1, 3])
def test_dynamic_batch_shape_chain(rng, batch):
    m = _dynamic_flatten()
    x = f32(rng, batch, 3, 4)
    assert_matches_ort(m, {"x": x})
    model = tapegrad.onnx.load(m)
    assert [n for n, _ in model.named_parameters()] == ["w"]  # the int64 ones are constants


def test_constant_folding():
    """Constant / ConstantOfShape / Shape of constants are evaluated at load time."""
    shape = helper.make_tensor("s", onnx.TensorProto.INT64, [2], [3, 4])
    fill = helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [0.25])
    nodes = [N("Constant", [], ["shape"], value=shape),
             N("ConstantOfShape", ["shape"], ["w"], value=fill),
             N("Shape", ["w"], ["ws"]), N("Reshape", ["x", "ws"], ["xr"]),
             N("Mul", ["xr", "w"], ["y"])]
    x = np.arange(12, dtype=np.float32)
    m = make_model(nodes, {"x": x}, {"y": [3, 4]}, opset=13)
    assert_matches_ort(m, {"x": x})
    model = tapegrad.onnx.load(m)
    assert [s.info.op_type for s in model._steps] == ["Reshape", "Mul"]


# ----------------------------------------------------------- fine-tuning


def _small_convnet(dtype=np.float32, seed=0):
    r = np.random.default_rng(seed)
    inits = {"conv.weight": (r.standard_normal((4, 1, 3, 3)) * 0.5).astype(dtype),
             "conv.bias": np.zeros(4, dtype), "fc.weight":
             (r.standard_normal((3, 4 * 3 * 3)) * 0.3).astype(dtype),
             "fc.bias": np.zeros(3, dtype), "bn.scale": np.ones(4, dtype),
             "bn.bias": np.zeros(4, dtype), "bn.mean": np.zeros(4, dtype),
             "bn.var": np.ones(4, dtype)}
    nodes = [N("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
             N("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["bn"]),
             N("Relu", ["bn"], ["r"]), N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2],
                                         strides=[2, 2]),
             N("Flatten", ["p"], ["f"]),
             N("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], transB=1)]
    x = np.zeros((2, 1, 6, 6), dtype)
    return make_model(nodes, {"x": x}, ["y"], inits, opset=13, out_dtype=dtype)


def test_fine_tune_one_sgd_step(rng):
    model = tapegrad.onnx.load(_small_convnet())
    names = {n for n, _ in model.named_parameters()}
    assert names == {"conv_weight", "conv_bias", "fc_weight", "fc_bias", "bn_scale", "bn_bias"}
    assert model.onnx_names["conv_weight"] == "conv.weight"
    x = tapegrad.tensor(f32(rng, 8, 1, 6, 6))
    target = tapegrad.tensor(rng.integers(0, 3, 8))
    opt = tapegrad.optim.SGD(model.parameters(), lr=0.1)
    loss0 = nn.functional.cross_entropy(model(x), target)
    opt.zero_grad()
    loss0.backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and np.isfinite(p.grad.numpy()).all(), n
        assert np.abs(p.grad.numpy()).sum() > 0, n
    opt.step()
    loss1 = nn.functional.cross_entropy(model(x), target)
    assert loss1.item() < loss0.item()


def test_parameter_gradients_match_finite_differences(rng):
    model = tapegrad.onnx.load(_small_convnet(np.float64))
    x = tapegrad.tensor(rng.standard_normal((2, 1, 6, 6)))
    cot = rng.standard_normal((2, 3))

    def loss():
        return (model(x) * tapegrad.tensor(cot)).sum()

    loss().backward()
    eps = 1e-6
    for name, p in model.named_parameters():
        flat = p.array.reshape(-1)
        for i in rng.choice(flat.size, size=min(3, flat.size), replace=False):
            old = flat[i]
            with tapegrad.no_grad():
                flat[i] = old + eps
                up = loss().item()
                flat[i] = old - eps
                down = loss().item()
                flat[i] = old
            num = (up - down) / (2 * eps)
            assert abs(num - p.grad.numpy().reshape(-1)[i]) < 1e-6 + 1e-4 * abs(num), name


def test_state_dict_and_paths(tmp_path):
    proto = _small_convnet()
    path = tmp_path / "net.onnx"
    onnx.save(proto, str(path))
    a, b = tapegrad.onnx.load(path), tapegrad.onnx.load(proto.SerializeToString())
    x = tapegrad.tensor(np.ones((1, 1, 6, 6), np.float32))
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    assert set(a.state_dict()) == {"conv_weight", "conv_bias", "fc_weight", "fc_bias",
                                   "bn_scale", "bn_bias", "bn_mean", "bn_var"}


def test_multiple_outputs_tuple(rng):
    x = f32(rng, 2, 3)
    nodes = [N("Relu", ["x"], ["a"]), N("Neg", ["x"], ["b"])]
    model = tapegrad.onnx.load(make_model(nodes, {"x": x}, ["a", "b"]))
    a, b = model(tapegrad.tensor(x))
    np.testing.assert_array_equal(b.numpy(), -x)


# ----------------------------------------------------------------- errors


def test_unsupported_operator_names_node(rng):
    x = f32(rng, 2, 3)
    m = make_model([N("Hardmax", ["x"], ["y"], name="my_hardmax")], {"x": x}, ["y"])
    with pytest.raises(UnsupportedOnnxError, match=r"'my_hardmax'.*Hardmax"):
        tapegrad.onnx.load(m)


def test_unsupported_attribute_value_names_it(rng):
    x = f32(rng, 2, 6)
    node = N("TopK", ["x", "k"], ["v", "i"], sorted=0, name="tk")
    m = make_model([node], {"x": x}, {"v": [2, 3]},
                   {"k": np.array([3], np.int64)})
    with pytest.raises(UnsupportedOnnxError, match=r"'tk' \(TopK.*sorted=0"):
        tapegrad.onnx.load(m)(tapegrad.tensor(x))
    x3 = f32(rng, 1, 1, 2, 3, 4)
    m = one_node("MaxPool", x3, dict(kernel_shape=[1, 2, 2]))
    with pytest.raises(UnsupportedOnnxError, match=r"3-D MaxPool"):
        tapegrad.onnx.load(m)(tapegrad.tensor(x3))


def test_training_mode_graphs_refused(rng):
    x = f32(rng, 2, 3, 2, 2)
    inits = {k: np.ones(3, np.float32) for k in "sbmv"}
    bn = N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1)
    m = make_model([bn], {"x": x}, {"y": [2, 3, 2, 2], "rm": [3], "rv": [3]}, inits, opset=15)
    with pytest.raises(UnsupportedOnnxError, match="BatchNormalization in training mode"):
        tapegrad.onnx.load(m)(tapegrad.tensor(x))
    drop = N("Dropout", ["x", "r", "t"], ["y"])
    m = make_model([drop], {"x": x}, ["y"], {"r": np.array(0.5, np.float32),
                                             "t": np.array(True)}, opset=13)
    with pytest.raises(UnsupportedOnnxError, match="training_mode=True"):
        tapegrad.onnx.load(m)(tapegrad.tensor(x))


def test_unknown_attribute_refused():
    node = N("Relu", ["x"], ["y"], name="r")
    node.attribute.append(helper.make_attribute("mystery", 3))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2, 3])],
                          [helper.make_tensor_value_info("y", 1, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(UnsupportedOnnxError, match="mystery=3"):
        tapegrad.onnx.load(m, check=False)


def test_wrong_input_dtype_and_count(rng):
    model = tapegrad.onnx.load(one_node("Relu", f32(rng, 2, 3)))
    with pytest.raises(tapegrad.errors.DTypeError, match="float32"):
        model(tapegrad.tensor(np.ones((2, 3))))
    with pytest.raises(tapegrad.errors.ArgumentError, match="1 input"):
        model()


def test_without_onnx_one_clear_line():
    code = ("import sys; sys.modules['onnx'] = None\n"
            "import tapegrad, tapegrad.onnx\n"
            "assert 'onnx' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
            "try:\n    tapegrad.onnx.load('m.onnx')\n"
            "except ImportError as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("OnnxNotInstalledError tapegrad.onnx.load needs the onnx "
                                  "package: pip install 'tapegrad[onnx]'")


def test_import_tapegrad_does_not_import_onnx():
    code = "import sys, tapegrad, tapegrad.onnx; print('onnx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# ---------------------------------------------------------------- devices


@pytest.mark.parametrize("build", [_small_convnet, _dynamic_flatten],
                         ids=["convnet", "shape-chain"])
def test_module_on_strict_fake_device(rng, build):
    """``model.to(device)`` moves Parameters, buffers and folded constants; values a
    rule makes on the host (Shape) join the device; results and gradients are the CPU's."""
    from tapegrad.testing.fakedevice import fake_device

    dev = fake_device()
    proto = build()
    x = f32(rng, 2, *[d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim][1:])
    cpu, off = tapegrad.onnx.load(proto), tapegrad.onnx.load(proto).to(dev)
    y_cpu, y_off = cpu(tapegrad.tensor(x)), off(tapegrad.tensor(x, device=dev))
    assert y_off.device is dev
    np.testing.assert_allclose(dev.host(y_off.array), y_cpu.numpy(), rtol=1e-6, atol=1e-6)
    y_cpu.sum().backward()
    y_off.sum().backward()
    for (n, p), (_, q) in zip(cpu.named_parameters(), off.named_parameters()):
        np.testing.assert_allclose(dev.host(q.grad.array), p.grad.numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=n)


def test_initializer_names_never_shadow_module_attributes(rng):
    x = f32(rng, 2, 3)
    inits = {"forward": f32(rng, 3), "a.b": f32(rng, 3), "a_b": f32(rng, 3)}
    nodes = [N("Add", ["x", "forward"], ["t"]), N("Mul", ["t", "a.b"], ["u"]),
             N("Sub", ["u", "a_b"], ["y"])]
    m = make_model(nodes, {"x": x}, ["y"], inits)
    assert_matches_ort(m, {"x": x})
    model = tapegrad.onnx.load(m)
    assert sorted(model.onnx_names.values()) == ["a.b", "a_b", "forward"]
    assert "forward" not in model.onnx_names and callable(model.forward)
    assert len(set(model.onnx_names)) == 3


def test_op_errors_name_the_node(rng):
    x = f32(rng, 2, 6)
    m = one_node("Reshape", x, None, {"s": np.array([1, 6], np.int64)}, ["s"])
    model = tapegrad.onnx.load(m, check=False)
    with pytest.raises(tapegrad.errors.ShapeError, match=r"node 'Reshape_0' \(Reshape.*reshape"):
        model(tapegrad.tensor(x))
