"""Damaged caffemodels: truncated or bit-flipped files either load or raise
CaffeFileError (or, where the damage reaches a layer's blobs, its named
CaffeLayerError), never another exception (hypothesis; small files)."""

import io
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("google.protobuf")

from tapegrad.compat import caffe  # noqa: E402

PROTOTXT = """
name: "fuzz"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 1 dim: 2 dim: 5 dim: 5 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 3 kernel_size: 3 } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
        inner_product_param { num_output: 2 } }
"""


def _files():
    model = caffe.CaffeModel(caffe.parse_net(PROTOTXT))
    rng = np.random.default_rng(0)
    for p in model.parameters():
        p.array[...] = rng.normal(size=p.shape)
    with tempfile.TemporaryDirectory() as d:
        model.save(Path(d) / "m.caffemodel")
        current = (Path(d) / "m.caffemodel").read_bytes()
    # the same weights in the V1 format with legacy 4-D dimensions (as old Caffe wrote)
    m = caffe.messages()
    v1 = m.NetParameter()
    for layer, type_ in ((model.conv, 4), (model.ip, 14)):
        lp = v1.layers.add(name=layer.name, type=type_)
        for p in layer.blobs():
            a = p.numpy()
            b = lp.blobs.add()
            b.num, b.channels, b.height, b.width = (1,) * (4 - a.ndim) + a.shape
            b.data.extend(a.ravel().tolist())
    return current, v1.SerializeToString()


CURRENT, V1 = _files()


def _load(data):
    """read_weights and copy_from on ``data``: True if it loaded, False if refused with
    a named error; any other exception fails the test."""
    try:
        caffe.read_weights(io.BytesIO(data))
    except caffe.CaffeFileError:
        return False
    model = caffe.CaffeModel(caffe.parse_net(PROTOTXT))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.copy_from(io.BytesIO(data))
    except (caffe.CaffeFileError, caffe.CaffeLayerError):
        return False
    return True


def test_undamaged_files_load():
    assert _load(CURRENT) and _load(V1)


@given(st.sampled_from([CURRENT, V1]), st.data())
def test_truncated(data, draw):
    cut = draw.draw(st.integers(0, len(data) - 1))
    _load(data[:cut])


@given(st.sampled_from([CURRENT, V1]), st.lists(st.tuples(st.integers(0, 10 ** 6),
                                                         st.integers(0, 7)), min_size=1,
                                               max_size=8))
def test_bit_flips(data, flips):
    b = bytearray(data)
    for pos, bit in flips:
        b[pos % len(b)] ^= 1 << bit
    _load(bytes(b))


@given(st.binary(max_size=200))
def test_random_bytes(data):
    _load(data)
