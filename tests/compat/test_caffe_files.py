"""Caffe's files: the schema built at run time, prototxt parsing and Caffe's
upgrades (V1 layers, the old input fields, BatchNorm's params), and the
caffemodel reader and writer (legacy shapes, double data, limits, named errors)."""

import io
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("google.protobuf")

from tapegrad.compat import caffe  # noqa: E402
from tapegrad.compat.caffe.files import BlobData, legacy_shape_equal  # noqa: E402
from tapegrad.errors import MissingDependencyError, SerializationError  # noqa: E402

M = caffe.messages()

SMALL = textwrap.dedent("""
    name: "small"
    layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
    layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
            inner_product_param { num_output: 4 } }
    layer { name: "relu" type: "ReLU" bottom: "ip" top: "ip" }
""")


def _small(tmp_path):
    pt = tmp_path / "small.prototxt"
    pt.write_text(SMALL)
    return pt


def test_schema_defaults_are_caffes():
    assert M.ConvolutionParameter().bias_term is True
    assert M.ConvolutionParameter().group == 1
    assert M.LRNParameter().k == 1.0 and M.LRNParameter().local_size == 5
    assert M.BatchNormParameter().moving_average_fraction == pytest.approx(0.999)
    assert M.PoolingParameter().round_mode == 0  # CEIL
    assert M.LossParameter().normalization == 1  # VALID
    assert M.NetState().phase == 1  # TEST
    assert M.SolverParameter().type == "SGD" and M.SolverParameter().regularization_type == "L2"
    assert M.SolverParameter().clip_gradients == -1
    st = M.SolverState(iter=3)
    st.history.add().data.extend([1.0, 2.0])
    back = M.SolverState.FromString(st.SerializeToString())
    assert back.iter == 3 and list(back.history[0].data) == [1.0, 2.0]


def test_text_errors_are_named():
    with pytest.raises(caffe.CaffeFileError, match="not a valid Caffe prototxt"):
        caffe.parse_net("layer { name: 'x' typo: 1 }")
    with pytest.raises(caffe.CaffeFileError, match="round_mode"):
        caffe.parse_net("layer { name: 'p' type: 'Pooling' pooling_param { ceil_mode: false } }")
    with pytest.raises(caffe.CaffeFileError, match="not UTF-8"):
        caffe.read_net(io.BytesIO(b"\xff\xfe\x00binary"))


def test_v1_layers_and_input_dim_are_upgraded():
    net = caffe.parse_net(textwrap.dedent("""
        name: "old"
        input: "data"
        input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
        layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv"
                 blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0 param: "shared_w"
                 convolution_param { num_output: 2 kernel_size: 3 } }
        layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
        layers { name: "loss" type: SOFTMAX_LOSS bottom: "conv" bottom: "data" top: "l" }
    """))
    assert [lp.type for lp in net.layer] == ["Input", "Convolution", "ReLU", "SoftmaxWithLoss"]
    assert list(net.layer[0].top) == ["data"]
    assert list(net.layer[0].input_param.shape[0].dim) == [1, 3, 8, 8]
    conv = net.layer[1]
    assert [(p.lr_mult, p.decay_mult) for p in conv.param] == [(1, 1), (2, 0)]
    assert conv.param[0].name == "shared_w"
    assert conv.convolution_param.num_output == 2
    assert len(net.layers) == 0 and len(net.input) == 0


def test_input_shape_and_batchnorm_params_are_upgraded():
    net = caffe.parse_net(textwrap.dedent("""
        input: "a" input_shape { dim: 2 dim: 5 }
        input: "b" input_shape { dim: 2 }
        layer { name: "bn" type: "BatchNorm" bottom: "a" top: "a"
                param { lr_mult: 0 } param { lr_mult: 0 } param { lr_mult: 0 } }
    """))
    assert list(net.layer[0].top) == ["a", "b"]
    assert [list(s.dim) for s in net.layer[0].input_param.shape] == [[2, 5], [2]]
    assert all(p.decay_mult == 0 for p in net.layer[1].param)


def test_v0_and_mixed_nets_are_refused():
    with pytest.raises(caffe.CaffeFileError, match="V0"):
        caffe.parse_net('layers { layer { name: "c" type: "conv" } }')
    with pytest.raises(caffe.CaffeFileError, match="both"):
        caffe.parse_net('layer { name: "a" type: "ReLU" } layers { name: "b" type: RELU }')


def test_written_caffemodel_is_read_by_protobuf(tmp_path):
    """Caffe's reader is protobuf with caffe.proto: our file parses as a NetParameter
    with each layer's definition, blob shapes and data."""
    model = caffe.load(_small(tmp_path))
    model.ip.weight.array[...] = np.arange(12, dtype=np.float32).reshape(4, 3)
    path = tmp_path / "small.caffemodel"
    model.save(path)
    net = M.NetParameter.FromString(path.read_bytes())
    assert net.name == "small"
    assert [lp.name for lp in net.layer] == ["data", "ip", "relu"]
    ip = net.layer[1]
    assert ip.type == "InnerProduct" and list(ip.bottom) == ["data"]
    assert ip.inner_product_param.num_output == 4
    assert [list(b.shape.dim) for b in ip.blobs] == [[4, 3], [4]]
    assert list(ip.blobs[0].data) == list(range(12))
    layers = caffe.read_weights(path)
    np.testing.assert_array_equal(layers[1].blobs[0].array, model.ip.weight.numpy())


def _v1_weights(tmp_path, double=False, legacy=True):
    """A V1 caffemodel as old Caffe wrote it: legacy 4-D blob dimensions."""
    net = M.NetParameter()
    layer = net.layers.add(name="ip", type=14)
    w = np.arange(12, dtype=np.float64).reshape(4, 3) / 10
    for a in (w, np.array([1.0, 2.0, 3.0, 4.0])):
        b = layer.blobs.add()
        dims = (1, 1) + a.shape if a.ndim == 2 else (1, 1, 1) + a.shape
        if legacy:
            b.num, b.channels, b.height, b.width = dims
        else:
            b.shape.dim.extend(a.shape)
        (b.double_data if double else b.data).extend(a.ravel().tolist())
    path = tmp_path / "v1.caffemodel"
    path.write_bytes(net.SerializeToString())
    return path, w


@pytest.mark.parametrize("double", [False, True])
def test_v1_caffemodel_with_legacy_shapes_loads(tmp_path, double):
    path, w = _v1_weights(tmp_path, double)
    layers = caffe.read_weights(path)
    assert layers[0].type == "InnerProduct" and layers[0].blobs[1].legacy
    model = caffe.load(_small(tmp_path), path)
    np.testing.assert_allclose(model.ip.weight.numpy(), w, rtol=1e-7)
    np.testing.assert_array_equal(model.ip.bias.numpy(), [1, 2, 3, 4])


def test_legacy_shape_rule():
    blob = BlobData(np.zeros((1, 1, 1, 4), np.float32), legacy=True)
    assert legacy_shape_equal(blob, (4,)) and legacy_shape_equal(blob, (1, 4))
    assert not legacy_shape_equal(blob, (4, 1))
    assert not legacy_shape_equal(BlobData(np.zeros((1, 4)), legacy=False), (4,))


def test_mismatched_weights_are_named_errors(tmp_path):
    pt = _small(tmp_path)
    bad = M.NetParameter()
    b = bad.layer.add(name="ip", type="InnerProduct").blobs.add()
    b.shape.dim.extend([4, 2])
    b.data.extend([0.0] * 8)
    bad.layer[0].blobs.add().shape.dim.extend([0])
    path = tmp_path / "bad.caffemodel"
    path.write_bytes(bad.SerializeToString())
    with pytest.raises(caffe.CaffeFileError, match=r"blob 0 \(weight\) of layer 'ip'.*\(4, 3\)"):
        caffe.load(pt, path)
    del bad.layer[0].blobs[1]
    path.write_bytes(bad.SerializeToString())
    with pytest.raises(caffe.CaffeFileError, match="holds 1 blobs"):
        caffe.load(pt, path)


def test_missing_layers_warn_or_fail_when_strict(tmp_path):
    empty = tmp_path / "empty.caffemodel"
    empty.write_bytes(b"")
    with pytest.warns(UserWarning, match=r"no weights for layers \['ip'\]"):
        caffe.load(_small(tmp_path), empty)
    with pytest.raises(caffe.CaffeFileError, match="strict=False"):
        caffe.load(_small(tmp_path), empty, strict=True)


def test_declared_shape_must_match_the_data(tmp_path):
    net = M.NetParameter()
    b = net.layer.add(name="ip").blobs.add()
    b.shape.dim.extend([1 << 40, 1 << 20])  # declares 2^60 values, holds 2
    b.data.extend([1.0, 2.0])
    with pytest.raises(caffe.CaffeFileError, match="holds 2 values"):
        caffe.read_weights(io.BytesIO(net.SerializeToString()))


def test_limits_and_truncation(tmp_path):
    path, _ = _v1_weights(tmp_path, legacy=False)
    data = path.read_bytes()
    with pytest.raises(caffe.CaffeFileError, match="max_bytes"):
        caffe.read_weights(path, max_bytes=len(data) - 1)
    with pytest.raises(caffe.CaffeFileError, match="max_bytes"):
        caffe.read_net(_small(tmp_path), max_bytes=10)
    for cut in (1, len(data) // 2, len(data) - 1):
        with pytest.raises(caffe.CaffeFileError, match="not a readable .caffemodel"):
            caffe.read_weights(io.BytesIO(data[:cut]))
    with pytest.raises(caffe.CaffeFileError, match="HDF5"):
        caffe.read_weights(tmp_path / "w.caffemodel.h5")
    assert issubclass(caffe.CaffeFileError, SerializationError)


def test_protobuf_missing_is_a_named_error():
    code = textwrap.dedent("""
        import sys
        sys.modules["google.protobuf"] = None
        import tapegrad, tapegrad.compat
        from tapegrad.errors import MissingDependencyError
        try:
            tapegrad.compat.caffe
        except MissingDependencyError as e:
            assert "pip install 'tapegrad[caffe]'" in str(e), e
            print("named")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "named", out.stderr
    assert issubclass(MissingDependencyError, ImportError)
