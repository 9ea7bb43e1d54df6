"""Feeds for Caffe's data layers (tapegrad.compat.caffe.feeds): the MNIST-shaped
digits, MNIST from IDX files, HDF5Data from its source list, Caffe's
DataTransformer (scale, mean_value, mean_file, crop, mirror), batching and cycling
order, shuffling, and the named errors."""

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("google.protobuf")
pytest.importorskip("sklearn")

from tapegrad.compat import caffe  # noqa: E402
from tapegrad.compat.caffe import feeds  # noqa: E402
from tapegrad.compat.caffe.feeds import FeedError, feed_for  # noqa: E402
from tapegrad.data import datasets  # noqa: E402
from tapegrad.errors import MissingDependencyError  # noqa: E402

LENET = Path(__file__).parent / "caffe_models" / "lenet_train_test.prototxt"


def _layer(body: str):
    """The one layer of a net written as ``layer { ... }`` text."""
    return caffe.parse_net(f"layer {{ {body} }}").layer[0]


def _data(batch=10, transform="", tops=("data", "label"), extra="", kind="Data"):
    t = " ".join(f'top: "{x}"' for x in tops)
    param = {"Data": f"data_param {{ source: 'x' batch_size: {batch} {extra} }}",
             "ImageData": f"image_data_param {{ source: 'x' batch_size: {batch} {extra} }}",
             "MemoryData": f"memory_data_param {{ batch_size: {batch} {extra} }}"}[kind]
    tp = f"transform_param {{ {transform} }}" if transform else ""
    return _layer(f'name: "d" type: "{kind}" {t} {tp} {param}')


def _raw(phase="train"):
    x_tr, y_tr, x_te, y_te = feeds.digits_mnist_shaped()
    return (x_tr, y_tr) if phase == "train" else (x_te, y_te)


# ------------------------------------------------------------------ the digits


def test_digits_are_mnist_shaped_bytes_in_tapegrads_split():
    x_tr, y_tr, x_te, y_te = feeds.digits_mnist_shaped()
    _, ly_tr, _, ly_te = datasets.digits(as_arrays=True)
    assert x_tr.shape == (1437, 1, 28, 28) and x_te.shape == (360, 1, 28, 28)
    assert x_tr.dtype == np.uint8 and x_tr.max() == 255
    assert y_tr.dtype == np.float32 and np.array_equal(y_tr, ly_tr)
    assert np.array_equal(y_te, ly_te)
    border = np.ones((28, 28), bool)
    border[4:24, 4:24] = False
    assert not x_tr[:, 0, border].any()  # a 4-pixel empty frame, as MNIST's


def test_resize_bilinear_matches_opencv():
    cv2 = pytest.importorskip("cv2")
    img = np.random.default_rng(0).uniform(0, 16, (8, 8)).astype(np.float32)
    ours = feeds.resize_bilinear(img[None, None], 20, 20)[0, 0]
    theirs = cv2.resize(img, (20, 20), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


def test_lenet_feed_batches_in_order_and_cycles():
    net = caffe.Net(str(LENET), caffe.TRAIN)
    feed = feed_for(net, "digits")
    assert feed.tops == ["data", "label"] and feed.size == 1437
    x, y = _raw()
    labels = []
    for i in range(23):  # 22 full batches of 64, then 29 last + 35 first
        b = feed()
        assert b["data"].shape == (64, 1, 28, 28) and b["data"].dtype == np.float32
        assert b["label"].shape == (64,) and b["label"].dtype == np.float32
        labels.append(b["label"])
        if i == 0:
            np.testing.assert_array_equal(b["data"], x[:64] * np.float32(0.00390625))
    assert feed.epoch == 1
    np.testing.assert_array_equal(np.concatenate(labels), np.concatenate([y, y[:35]]))
    assert np.isfinite(net.forward(**feed())["loss"])


def test_test_phase_gets_the_test_split_and_its_batch():
    feed = feed_for(str(LENET), "digits", phase="test")
    b = feed()
    x, y = _raw("test")
    assert b["data"].shape == (100, 1, 28, 28) and feed.size == 360
    np.testing.assert_array_equal(b["label"], y[:100])
    model = caffe.load(str(LENET), phase="test")
    assert feed_for(model, "digits").shapes == feed.shapes
    with pytest.raises(FeedError, match="phase 'test', not 'train'"):
        feed_for(model, "digits", phase="train")


# ------------------------------------------------------------------ transform_param


def test_scale_and_mean_value_are_applied_as_caffe():
    f = feed_for(_data(transform="scale: 0.5 mean_value: 10"), phase="train")
    x, _ = _raw()
    np.testing.assert_array_equal(f()["data"], (x[:10].astype(np.float32) - 10) * 0.5)


def test_center_crop_in_test_random_crop_in_train():
    x, _ = _raw("test")
    b = feed_for(_data(transform="crop_size: 20"), phase="test")()
    np.testing.assert_array_equal(b["data"], x[:10, :, 4:24, 4:24])
    xt, _ = _raw()
    f = feed_for(_data(batch=40, transform="crop_size: 24"), phase="train", seed=3)
    offsets = set()
    for i, img in enumerate(f()["data"]):
        hits = [(r, c) for r in range(5) for c in range(5)
                if np.array_equal(img, xt[i, :, r:r + 24, c:c + 24])]
        assert hits, f"image {i} is no 24x24 window of its source"
        offsets.update(hits)
    assert len(offsets) > 5  # drawn per image


def test_mirror_flips_some_images_at_random():
    x, _ = _raw()
    b = feed_for(_data(batch=60, transform="mirror: true"), phase="train", seed=1)()["data"]
    flipped = [np.array_equal(img, x[i, :, :, ::-1]) and not np.array_equal(img, x[i])
               for i, img in enumerate(b)]
    kept = [np.array_equal(img, x[i]) for i, img in enumerate(b)]
    assert all(f or k for f, k in zip(flipped, kept))
    assert 10 < sum(flipped) < 50


def test_mean_file_is_subtracted_before_the_crop(tmp_path):
    m = caffe.messages().BlobProto()
    m.shape.dim.extend([1, 1, 28, 28])
    mean = np.arange(784, dtype=np.float32) / 7
    m.data.extend(mean.tolist())
    (tmp_path / "mean.binaryproto").write_bytes(m.SerializeToString())
    path = str(tmp_path / "mean.binaryproto")
    b = feed_for(_data(transform=f"crop_size: 20 mean_file: '{path}' scale: 2"),
                 phase="test")()["data"]
    x, _ = _raw("test")
    want = (x[:10].astype(np.float32) - mean.reshape(1, 1, 28, 28)) * 2
    np.testing.assert_allclose(b, want[:, :, 4:24, 4:24], rtol=1e-6)
    m.shape.dim[:] = [1, 1, 20, 20]
    del m.data[400:]
    (tmp_path / "small.binaryproto").write_bytes(m.SerializeToString())
    with pytest.raises(FeedError, match=r"mean of shape \(1, 1, 20, 20\).*full"):
        feed_for(_data(transform=f"mean_file: '{tmp_path / 'small.binaryproto'}'"),
                 phase="test")


@pytest.mark.parametrize("transform, match", [
    ("mean_value: 1 mean_value: 2 mean_value: 3", "3 mean_value for images of 1 channel"),
    ("crop_size: 30", "crop_size 30 is larger than the 28x28"),
    ("mean_file: 'm.binaryproto' mean_value: 3", "both mean_file and mean_value"),
    ("mean_file: 'nowhere.binaryproto'", "mean_file 'nowhere.binaryproto' not found"),
])
def test_transform_errors_are_named(transform, match):
    with pytest.raises(FeedError, match=match):
        feed_for(_data(transform=transform), phase="train")


# ------------------------------------------------------------------ layer kinds


def test_image_data_resizes_repeats_grey_and_shuffles_each_pass():
    lp = _data(batch=479, kind="ImageData",
               extra="new_height: 14 new_width: 14 is_color: true shuffle: true")
    f = feed_for(lp, phase="train", seed=2)
    x, y = _raw()
    passes = [np.concatenate([f()["label"] for _ in range(3)]) for _ in range(2)]
    assert f.shapes["data"] == (479, 3, 14, 14)
    for p in passes:  # each pass a permutation of the whole split
        np.testing.assert_array_equal(np.sort(p), np.sort(y))
    assert not np.array_equal(passes[0], passes[1]) and not np.array_equal(passes[0], y)
    img = feed_for(_data(batch=1, kind="ImageData", extra="new_height: 14 new_width: 14"),
                   phase="train")()["data"][0]
    assert np.array_equal(img[0], img[1]) and np.array_equal(img[1], img[2])
    with pytest.raises(FeedError, match="new_height and new_width together"):
        feed_for(_data(kind="ImageData", extra="new_height: 14"), phase="train")


def test_memory_data_and_input_layers_check_declared_shapes():
    ok = _data(batch=5, kind="MemoryData", extra="channels: 1 height: 28 width: 28")
    assert feed_for(ok, phase="train")()["data"].shape == (5, 1, 28, 28)
    bad = _data(batch=5, kind="MemoryData", extra="channels: 1 height: 32 width: 32")
    with pytest.raises(FeedError, match=r"declares top 'data' of shape \(5, 1, 32, 32\)"):
        feed_for(bad, phase="train")
    inp = _layer('name: "in" type: "Input" top: "data" top: "label" '
                 'input_param { shape { dim: 8 dim: 1 dim: 28 dim: 28 } '
                 'shape { dim: 8 dim: 1 dim: 1 dim: 1 } }')
    b = feed_for(inp, phase="test")()
    assert b["data"].shape == (8, 1, 28, 28) and b["label"].shape == (8, 1, 1, 1)
    assert b["data"].max() > 1  # an Input is not transformed: the 0..255 bytes
    wrong = _layer('name: "in" type: "Input" top: "data" '
                   'input_param { shape { dim: 8 dim: 3 dim: 32 dim: 32 } }')
    with pytest.raises(FeedError, match=r"\(8, 3, 32, 32\), but digits \(test split\) gives "
                                        r"batches of shape \(8, 1, 28, 28\)"):
        feed_for(wrong, phase="test")


def test_rand_skip_starts_later_and_batch_size_overrides():
    x, y = _raw()
    b = feed_for(_data(extra="rand_skip: 50"), phase="train", seed=4, batch_size=7)()
    k = [s for s in range(50) if np.array_equal(b["label"], y[s:s + 7])]
    assert b["label"].shape == (7,) and k


@pytest.mark.parametrize("body, source, match", [
    ('name: "w" type: "WindowData" top: "data" top: "label" '
     'window_data_param { source: "w.txt" batch_size: 4 }', "digits", "window_file"),
    ('name: "i" type: "Input" top: "a" top: "b" top: "c" '
     'input_param { shape { dim: 2 } }', "digits", r"3 tops \['a', 'b', 'c'\]"),
    ('name: "i" type: "Input" top: "a"', "digits", "sets no batch_size"),
    ('name: "d" type: "Data" top: "data" data_param { batch_size: 4 }', "cifar",
     "unknown data source 'cifar'"),
    ('name: "d" type: "Data" top: "data" data_param { batch_size: 4 }', "mnist",
     "needs data_dir"),
])
def test_layers_a_source_cannot_feed_are_named(body, source, match):
    with pytest.raises(FeedError, match=match):
        feed_for(_layer(body), source, phase="train")


def test_a_layer_param_needs_a_phase():
    with pytest.raises(FeedError, match="needs phase"):
        feed_for(_data())


# ------------------------------------------------------------------ MNIST files


def _idx(path, arr):
    code, dims = 0x08, arr.shape
    path.write_bytes(struct.pack(">HBB", 0, code, len(dims)) +
                     struct.pack(f">{len(dims)}I", *dims) + arr.astype(np.uint8).tobytes())


def test_mnist_from_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    imgs = {k: rng.integers(0, 256, (n, 28, 28)) for k, n in (("train", 12), ("t10k", 6))}
    for k, n in (("train", 12), ("t10k", 6)):
        _idx(tmp_path / f"{k}-images-idx3-ubyte", imgs[k])
        _idx(tmp_path / f"{k}-labels-idx1-ubyte", np.arange(n) % 10)
    b = feed_for(str(LENET), "mnist", phase="test", data_dir=tmp_path)()  # wraps: 6 images
    assert b["data"].shape == (100, 1, 28, 28)
    np.testing.assert_array_equal(b["data"][:6, 0], imgs["t10k"] * np.float32(0.00390625))
    np.testing.assert_array_equal(b["label"][:12], np.tile(np.arange(6), 2))
    tr = feed_for(str(LENET), "mnist", phase="train", data_dir=tmp_path)()
    np.testing.assert_array_equal(tr["data"][:12, 0], imgs["train"] * np.float32(0.00390625))


# ------------------------------------------------------------------ HDF5Data


def _h5_layer(listing, batch=4, extra="", tops=("data", "label")):
    t = " ".join(f'top: "{x}"' for x in tops)
    return _layer(f'name: "h" type: "HDF5Data" {t} hdf5_data_param {{ source: "{listing}" '
                  f'batch_size: {batch} {extra} }}')


@pytest.fixture
def h5_files(tmp_path):
    h5py = pytest.importorskip("h5py")
    start = 0
    for name, n in (("a.h5", 5), ("b.h5", 3)):
        with h5py.File(tmp_path / name, "w") as f:
            f["data"] = np.arange(start, start + n, dtype=np.float64)[:, None].repeat(6, 1) \
                .reshape(n, 1, 2, 3)
            f["label"] = np.arange(start, start + n, dtype=np.int32)
        start += n
    (tmp_path / "list.txt").write_text("a.h5\nb.h5\n")  # relative to the list's folder
    return tmp_path


def test_hdf5_reads_its_source_list_in_order_across_files(h5_files):
    f = feed_for(_h5_layer(h5_files / "list.txt"), "mnist", phase="train")  # source unused
    labels = [f()["label"] for _ in range(4)]
    assert f.shapes == {"data": (4, 1, 2, 3), "label": (4,)}
    np.testing.assert_array_equal(np.concatenate(labels), np.arange(16) % 8)
    b = f()
    assert b["data"].dtype == np.float32 and b["data"][1, 0, 1, 2] == 1


def test_hdf5_shuffle_keeps_files_together_and_reshuffles_each_pass(h5_files):
    f = feed_for(_h5_layer(h5_files / "list.txt", batch=8, extra="shuffle: true"),
                 phase="test", seed=5)
    passes = [f()["label"] for _ in range(6)]
    for p in passes:
        assert sorted(p) == list(range(8))
        first = set(p[:5]) if p[0] < 5 else set(p[:3])
        assert first in ({0, 1, 2, 3, 4}, {5, 6, 7})  # a file's rows stay together
    assert len({tuple(p) for p in passes}) > 1


def test_hdf5_errors_are_named(h5_files, monkeypatch):
    listing = h5_files / "list.txt"
    with pytest.raises(FeedError, match=r"has no dataset 'extra'"):
        feed_for(_h5_layer(listing, tops=("data", "extra")), phase="train")
    with pytest.raises(FeedError, match="does not transform data"):
        feed_for(_layer(f'name: "h" type: "HDF5Data" top: "data" transform_param '
                        f'{{ scale: 2 }} hdf5_data_param {{ source: "{listing}" '
                        'batch_size: 2 }'), phase="train")
    with pytest.raises(FeedError, match="hdf5_data_param.source 'nope.txt' not found"):
        feed_for(_h5_layer("nope.txt"), phase="train")
    (h5_files / "bad.txt").write_text("a.h5 missing.h5")
    with pytest.raises(FeedError, match="'missing.h5' not found"):
        feed_for(_h5_layer(h5_files / "bad.txt"), phase="train")
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(MissingDependencyError, match="pip install h5py"):
        feed_for(_h5_layer(listing), phase="train")
