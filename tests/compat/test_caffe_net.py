"""The pycaffe-style Net and the Module: Caffe's backward rule
(``bottom_need_backward``: LeNet's first convolution computes no data gradient,
lr_mult 0, propagate_down, force_backward), gradchecks through ``Net.backward``,
in-place blobs, loss weights, shared parameters, phase rules, data layers,
weights in and out, and ONNX export."""

import copy
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("google.protobuf")

import tapegrad  # noqa: E402
from tapegrad.compat import caffe  # noqa: E402
from tapegrad.testing import gradcheck  # noqa: E402

LENET = Path(__file__).parent / "caffe_models" / "lenet_train_test.prototxt"
RNG = np.random.default_rng(0)


def _lenet_net(tmp_path, edit=None, phase=caffe.TRAIN):
    text = LENET.read_text()
    if edit:
        text = edit(text)
    path = tmp_path / "lenet.prototxt"
    path.write_text(text)
    rng = np.random.default_rng(5)
    net = caffe.Net(str(path), phase, rng=rng)
    x = rng.uniform(size=(3, 1, 28, 28)).astype(np.float32)
    y = np.array([1.0, 7.0, 3.0], np.float32)
    return net, x, y


def test_lenet_forward_backward_follows_caffes_rule(tmp_path):
    net, x, y = _lenet_net(tmp_path)
    assert net.inputs == ["data", "label"] and net.outputs == ["loss"]
    assert list(net.params) == []  # the Data layer's shapes come with the first feed
    out = net.forward(data=x, label=y)
    assert list(net.params) == ["conv1", "conv2", "ip1", "ip2"]
    ip2 = net.blobs["ip2"].data.astype(np.float64)
    p = np.exp(ip2 - ip2.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    assert out["loss"] == pytest.approx(-np.log(p[np.arange(3), y.astype(int)]).mean(), rel=1e-5)
    net.blobs["data"].diff[...] = 7.0  # Caffe leaves the data blob's diff alone
    net.backward()
    assert (net.blobs["data"].diff == 7.0).all()  # the first conv computes no data gradient
    assert np.abs(net.blobs["conv1"].diff).sum() > 0
    onehot = np.eye(10)[y.astype(int)]
    np.testing.assert_allclose(net.blobs["ip2"].diff, (p - onehot) / 3, rtol=1e-4, atol=1e-7)
    # in place: ip1's data is after the ReLU, its diff is before it
    assert (net.blobs["ip1"].data >= 0).all()
    relu_mask = net.blobs["ip1"].data > 0
    assert not net.blobs["ip1"].diff[~relu_mask].any()
    w = net.params["ip2"][0]
    np.testing.assert_allclose(w.diff, ((p - onehot) / 3).T @ net.blobs["ip1"].data, rtol=1e-4,
                               atol=1e-7)
    first = w.diff.copy()
    net.backward()
    np.testing.assert_allclose(w.diff, 2 * first, rtol=1e-6)  # parameter diffs accumulate
    net.clear_param_diffs()
    assert not w.diff.any()


def test_lr_mult_zero_and_propagate_down(tmp_path):
    def freeze(text):
        return text.replace("param { lr_mult: 1 }\n  param { lr_mult: 2 }\n  convolution_param {\n"
                            "    num_output: 20", "param { lr_mult: 0 }\n  param { lr_mult: 0 }\n"
                            "  convolution_param {\n    num_output: 20", 1)

    net, x, y = _lenet_net(tmp_path, freeze)
    net.forward(data=x, label=y)
    net.backward()
    assert not net.params["conv1"][0].diff.any()  # lr_mult 0: no diff
    assert not net.blobs["conv1"].diff.any()  # nothing below conv2 needs backward
    assert not net.blobs["pool1"].diff.any()
    assert net.params["conv2"][0].diff.any()

    def stop(text):
        return text.replace('bottom: "ip1"\n  top: "ip2"', 'bottom: "ip1"\n  top: "ip2"\n'
                            "  propagate_down: false")

    net, x, y = _lenet_net(tmp_path, stop)
    net.forward(data=x, label=y)
    net.backward()
    assert net.params["ip2"][0].diff.any()
    assert not net.params["ip1"][0].diff.any() and not net.blobs["ip1"].diff.any()


def test_force_backward_gradient_matches_finite_differences(tmp_path):
    net, x, y = _lenet_net(tmp_path, lambda t: "force_backward: true\n" + t)
    net.forward(data=x, label=y)
    net.backward()
    g = net.blobs["data"].diff.astype(np.float64)
    assert np.abs(g).max() > 0
    m64 = copy.deepcopy(net.model).double()
    y64 = y.astype(np.float64)

    def loss(x):
        with tapegrad.no_grad():
            return m64.loss(m64.run({"data": tapegrad.tensor(x), "label": y64})).item()

    v = np.random.default_rng(6).normal(size=x.shape)
    eps = 1e-6  # float64, small enough to stay between ReLU's and max pooling's kinks
    fd = (loss(x + eps * v) - loss(x - eps * v)) / (2 * eps)
    assert (g * v).sum() == pytest.approx(fd, rel=1e-4)


SMOOTH = """
force_backward: true
layer { name: "in" type: "Input" top: "x" top: "t"
        input_param { shape { dim: 2 dim: 3 dim: 5 dim: 5 }
                      shape { dim: 2 dim: 4 dim: 2 dim: 2 } } }
layer { name: "c" type: "Convolution" bottom: "x" top: "c" param { name: "w" }
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 group: 1 } }
layer { name: "s" type: "Sigmoid" bottom: "c" top: "c" }
layer { name: "lrn" type: "LRN" bottom: "c" top: "n" lrn_param { local_size: 3 alpha: 0.5 } }
layer { name: "p" type: "Pooling" bottom: "n" top: "p"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layer { name: "sc" type: "Scale" bottom: "p" top: "p" scale_param { bias_term: true } }
layer { name: "e" type: "ELU" bottom: "p" top: "e" }
layer { name: "sum" type: "Eltwise" bottom: "e" bottom: "p" top: "sum"
        eltwise_param { coeff: 2 coeff: -1 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "sum" bottom: "t" top: "loss" loss_weight: 3 }
layer { name: "aux" type: "TanH" bottom: "e" top: "aux" loss_weight: 0.5 }
"""


def _smooth(tmp_path):
    path = tmp_path / "smooth.prototxt"
    path.write_text(SMOOTH)
    model = caffe.load(path)
    rng = np.random.default_rng(3)
    for p in model.parameters():
        p.array[...] = rng.normal(0, 0.5, p.shape)
    x = rng.normal(size=(2, 3, 5, 5)).astype(np.float32)
    t = rng.normal(size=(2, 4, 2, 2)).astype(np.float32)
    return model, x, t


def test_net_backward_equals_the_tape_gradient(tmp_path):
    """Net.backward (float32, Caffe's seeds) against tapegrad.grad of Caffe's loss on
    the same model, and its data diff against finite differences in float64."""
    model, x, t = _smooth(tmp_path)
    net = caffe.Net.from_model(model)
    net.forward(x=x, t=t)
    net.backward()
    xt = tapegrad.tensor(x, requires_grad=True)
    tt = tapegrad.tensor(t, requires_grad=True)
    loss = model.loss(model.run({"x": xt, "t": tt}))
    params = [p for p in model.parameters() if p.requires_grad]
    grads = tapegrad.grad(loss, [xt, tt] + params)
    np.testing.assert_allclose(net.blobs["x"].diff, grads[0].numpy(), rtol=1e-4, atol=1e-6)
    # force_backward: EuclideanLoss fills its second bottom's diff too (Caffe's rule)
    np.testing.assert_allclose(net.blobs["t"].diff, grads[1].numpy(), rtol=1e-4, atol=1e-6)
    assert len(net.params["c"]) == 2
    np.testing.assert_allclose(net.params["c"][0].diff, grads[2].numpy(), rtol=1e-4, atol=1e-6)
    m64 = copy.deepcopy(model).double()
    assert gradcheck(lambda x: m64.loss(m64.run({"x": x, "t": t.astype(np.float64)})),
                     [x.astype(np.float64)])


def test_loss_weights_and_seeds(tmp_path):
    model, x, t = _smooth(tmp_path)
    env = model.run({"x": x, "t": t})
    ref = 3 * env["loss"] + 0.5 * env["aux"].sum()
    assert model.loss(env).item() == pytest.approx(ref.item(), rel=1e-6)
    net = caffe.Net.from_model(model)
    net.forward(x=x, t=t)
    net.backward()
    before = net.blobs["x"].diff.copy()
    net.blobs["loss"].diff[...] = 6.0  # the loss top's diff is its seed, as in Caffe
    net.backward()
    assert np.abs(net.blobs["x"].diff - before).max() > 1e-3


def test_shared_parameters(tmp_path):
    text = """
    layer { name: "in" type: "Input" top: "a" top: "b" input_param { shape { dim: 2 dim: 3 } } }
    layer { name: "fa" type: "InnerProduct" bottom: "a" top: "fa" param { name: "W" lr_mult: 2 }
            inner_product_param { num_output: 4 bias_term: false } }
    layer { name: "fb" type: "InnerProduct" bottom: "b" top: "fb" param { name: "W" }
            inner_product_param { num_output: 4 bias_term: false } }
    layer { name: "l" type: "EuclideanLoss" bottom: "fa" bottom: "fb" top: "l" }
    """
    model = caffe.CaffeModel(caffe.parse_net(text))
    assert model.fa.weight is model.fb.weight
    assert [n for n, _ in model.named_parameters()] == ["fa.weight"]
    groups = model.param_groups(0.1, 0.01)
    assert len(groups) == 1 and groups[0]["lr"] == pytest.approx(0.2)
    a, b = RNG.normal(size=(2, 2, 3)).astype(np.float32)
    net = caffe.Net.from_model(model)
    net.forward(a=a, b=b)
    net.backward()
    w = model.fa.weight.numpy()
    d = a @ w.T - b @ w.T
    np.testing.assert_allclose(net.params["fa"][0].diff, (d.T @ a - d.T @ b) / 2, rtol=1e-4,
                               atol=1e-6)
    assert net.params["fb"][0].diff is net.params["fa"][0].diff


def test_phase_and_stage_rules():
    text = """
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 } } }
    layer { name: "tr" type: "ReLU" bottom: "x" top: "a" include { phase: TRAIN } }
    layer { name: "te" type: "TanH" bottom: "x" top: "a" include { phase: TEST } }
    layer { name: "st" type: "Sigmoid" bottom: "a" top: "s" include { stage: "deploy" } }
    layer { name: "lv" type: "AbsVal" bottom: "a" top: "v" exclude { min_level: 2 } }
    """
    net = caffe.parse_net(text)
    names = lambda m: [lp.name for lp in m._lps]  # noqa: E731
    assert names(caffe.CaffeModel(net, "train")) == ["in", "tr", "lv"]
    assert names(caffe.CaffeModel(net, "test", stages=["deploy"])) == ["in", "te", "st", "lv"]
    assert names(caffe.CaffeModel(net, "test", level=3)) == ["in", "te"]


def test_data_layers_are_fed_inputs():
    text = """
    layer { name: "d" type: "MemoryData" top: "data" top: "label"
            memory_data_param { batch_size: 2 channels: 1 height: 3 width: 3 } }
    layer { name: "z" type: "DummyData" top: "z" dummy_data_param { shape { dim: 2 dim: 9 }
            data_filler { type: "constant" value: 0.5 } } }
    layer { name: "f" type: "Flatten" bottom: "data" top: "f" }
    layer { name: "e" type: "Eltwise" bottom: "f" bottom: "z" top: "y" }
    layer { name: "s" type: "Silence" bottom: "label" }
    """
    model = caffe.CaffeModel(caffe.parse_net(text))
    assert model.inputs == ["data", "label", "z"] and model.is_built
    x = RNG.normal(size=(2, 1, 3, 3)).astype(np.float32)
    y = model(data=x, label=np.zeros(2))
    np.testing.assert_allclose(y.numpy(), x.reshape(2, 9) + 0.5, rtol=1e-6)
    assert "MemoryData layer 'd'" in model.notes[0]
    with pytest.raises(caffe.CaffeLayerError, match="'label'.*was not fed"):
        model(data=x)


def test_deferred_shapes_come_from_the_first_feed(tmp_path):
    model = caffe.load(LENET, phase="test")
    assert not model.is_built and list(model.parameters()) == []
    x = RNG.uniform(size=(2, 1, 28, 28)).astype(np.float32)
    acc, loss = model(x, np.array([1.0, 2.0]))
    assert 0 <= acc.item() <= 1 and loss.item() > 0
    assert tuple(model.conv1.weight.shape) == (20, 1, 5, 5)


def test_save_copy_from_and_onnx(tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    deploy = tmp_path / "deploy.prototxt"
    deploy.write_text("""
    name: "LeNet"
    input: "data" input_shape { dim: 2 dim: 1 dim: 28 dim: 28 }
    layers { name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1"
             convolution_param { num_output: 4 kernel_size: 5 weight_filler { type: "msra" } } }
    layers { name: "pool1" type: POOLING bottom: "conv1" top: "pool1"
             pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
    layers { name: "relu" type: RELU bottom: "pool1" top: "pool1" }
    layers { name: "lrn" type: LRN bottom: "pool1" top: "lrn" }
    layers { name: "ip" type: INNER_PRODUCT bottom: "lrn" top: "ip"
             inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
    layers { name: "prob" type: SOFTMAX bottom: "ip" top: "prob" }
    """)
    model = caffe.load(deploy)
    net = caffe.Net(str(deploy), caffe.TEST)
    weights = tmp_path / "w.caffemodel"
    model.save(weights)
    net.copy_from(str(weights))
    x = RNG.uniform(size=(2, 1, 28, 28)).astype(np.float32)
    with tapegrad.no_grad():
        y = model(tapegrad.tensor(x)).numpy()
    np.testing.assert_array_equal(net.forward(data=x)["prob"], y)
    net2 = caffe.Net(str(deploy), str(weights), caffe.TEST)
    np.testing.assert_array_equal(net2.forward(data=x)["prob"], y)
    net2.save(str(tmp_path / "again.caffemodel"))
    assert (tmp_path / "again.caffemodel").read_bytes() == weights.read_bytes()
    onnx_path = tmp_path / "lenet.onnx"
    tapegrad.onnx.export(model, tapegrad.tensor(x), str(onnx_path))
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (z,) = sess.run(None, {sess.get_inputs()[0].name: x})
    np.testing.assert_allclose(z, y, rtol=1e-4, atol=1e-6)


def test_module_trains_with_an_optimizer(tmp_path):
    model, x, t = _smooth(tmp_path)
    opt = tapegrad.optim.SGD(model.param_groups(0.01), lr=0.01)
    first = None
    for _ in range(5):
        opt.zero_grad()
        loss = model.loss(model.run({"x": x, "t": t}))
        first = loss.item() if first is None else first
        loss.backward()
        opt.step()
    assert loss.item() < first


@pytest.mark.parametrize("force", [False, True])
def test_deploy_net_backward_from_a_written_top_diff(force):
    """pycaffe's saliency recipe: write the prob blob's diff and call backward; Caffe
    computes it only with force_backward (no layer of a deploy net needs backward)."""
    text = ("force_backward: true\n" if force else "") + """
    layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 6 } } }
    layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
            inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }
    layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
    """
    net = caffe.Net.from_model(caffe.CaffeModel(caffe.parse_net(text),
                                                rng=np.random.default_rng(1)))
    x = np.random.default_rng(2).normal(size=(2, 6)).astype(np.float32)
    p = net.forward(data=x)["prob"].astype(np.float64)
    net.blobs["prob"].diff[...] = [[1, 0, 0], [0, 0, 1]]
    net.backward()
    if not force:
        assert not net.blobs["data"].diff.any() and not net.params["fc"][0].diff.any()
        return
    onehot = np.array([[1, 0, 0], [0, 0, 1]])
    dfc = p * (onehot - (p * onehot).sum(1, keepdims=True))  # d p_class / d fc
    w = net.params["fc"][0].data
    np.testing.assert_allclose(net.blobs["data"].diff, dfc @ w, rtol=1e-4, atol=1e-7)
