"""Caffe nets loaded by tapegrad export to ONNX: each real architecture of
caffe_nets.py (random weights) runs in onnxruntime with tapegrad's outputs."""

import numpy as np
import pytest

pytest.importorskip("google.protobuf")
pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import caffe_nets  # noqa: E402

import tapegrad  # noqa: E402
from tapegrad.compat import caffe  # noqa: E402

NETS = dict(caffe_nets.NETS, assorted=caffe_nets.assorted)


@pytest.mark.parametrize("name", list(NETS))
def test_caffe_net_exports_to_onnx(tmp_path, name):
    pt = tmp_path / "net.prototxt"
    pt.write_text(NETS[name]())
    model = caffe.load(pt)
    caffe_nets.random_weights(model)
    rng = np.random.default_rng(0)
    shapes = model._input_shapes()  # {top: the shape its Input declares}
    xs = [rng.standard_normal(shapes[t]).astype(np.float32) for t in model.inputs]
    with tapegrad.no_grad():
        ours = model(*[tapegrad.tensor(x) for x in xs])
    ours = ours if isinstance(ours, tuple) else (ours,)
    path = tmp_path / "net.onnx"
    args = tuple(tapegrad.tensor(x) for x in xs)
    tapegrad.onnx.export(model, args if len(args) > 1 else args[0], str(path))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})
    assert len(theirs) == len(ours)
    for a, b in zip(theirs, ours):
        b = b.numpy()
        # float32 sums in another order: max |a - b| / max |b|, as the OpenCV check
        assert float(np.abs(a - b).max()) <= 1e-4 * max(float(np.abs(b).max()), 1e-30)
