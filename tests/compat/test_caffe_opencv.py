"""tapegrad's Caffe reader against an independent implementation of Caffe: OpenCV's
DNN module reads the same deploy prototxt and the caffemodel tapegrad wrote (random
weights), and every layer's top must agree (fusion and Winograd off, so the
intermediate blobs are Caffe's). Reloading that caffemodel in tapegrad gives the
same outputs bit for bit."""

import numpy as np
import pytest

pytest.importorskip("google.protobuf")
cv2 = pytest.importorskip("cv2")
if int(cv2.__version__.split(".")[0]) >= 5:  # OpenCV 5 removed its Caffe importer
    pytest.skip("OpenCV 5 has no Caffe importer", allow_module_level=True)

import caffe_nets  # noqa: E402

import tapegrad  # noqa: E402
from tapegrad.compat import caffe  # noqa: E402

NETS = dict(caffe_nets.NETS, assorted=caffe_nets.assorted)
RTOL = 1e-4  # float32 sums in another order: max |a - b| / max |b|


def _opencv(prototxt, caffemodel):
    net = cv2.dnn.readNetFromCaffe(str(prototxt), str(caffemodel))
    net.enableFusion(False)
    if hasattr(net, "enableWinograd"):
        net.enableWinograd(False)
    return net


def _written(tmp_path, name):
    pt, cm = tmp_path / "net.prototxt", tmp_path / "net.caffemodel"
    pt.write_text(NETS[name]())
    model = caffe.load(pt)
    caffe_nets.random_weights(model)
    model.save(cm)
    return model, pt, cm


def _rel(a, b):
    return float(np.abs(a - b.reshape(a.shape)).max() / max(np.abs(b).max(), 1e-30))


@pytest.mark.parametrize("name", list(NETS))
def test_every_top_agrees_with_opencv(tmp_path, name):
    model, pt, cm = _written(tmp_path, name)
    x = np.random.default_rng(1).normal(size=model._layers[0].shapes[0]).astype(np.float32)
    trace = {}
    with tapegrad.no_grad():
        model.run({"data": x}, trace=trace)
    versions = trace["versions"]
    layers = [i for i, lp in enumerate(model._lps) if lp.type not in ("Input", "Dropout")]
    names = [model._lps[i].name for i in layers]
    net = _opencv(pt, cm)
    net.setInput(x)
    outs = net.forward(names)
    worst = {}
    for i, name_, z in zip(layers, names, outs):
        y = versions[model.wiring.writes[i][0]].numpy()
        assert y.size == z.size, (name_, y.shape, z.shape)
        worst[name_] = _rel(y, z)
    bad = {k: v for k, v in worst.items() if v > RTOL}
    assert not bad, bad
    final = versions[model.wiring.output_versions[0]].numpy()
    assert _rel(final, outs[-1]) < RTOL


@pytest.mark.parametrize("name", ["LeNet", "ResNet", "FCN"])
def test_written_caffemodel_reloads_exactly(tmp_path, name):
    model, pt, cm = _written(tmp_path, name)
    again = caffe.load(pt, cm)
    x = tapegrad.tensor(np.random.default_rng(2).normal(
        size=model._layers[0].shapes[0]).astype(np.float32))
    with tapegrad.no_grad():
        np.testing.assert_array_equal(model(x).numpy(), again(x).numpy())
    for (n1, p1), (n2, p2) in zip(model.named_parameters(), again.named_parameters()):
        assert n1 == n2
        np.testing.assert_array_equal(p1.numpy(), p2.numpy())
