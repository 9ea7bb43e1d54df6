"""digits() split and the IDX reader behind mnist()."""

import gzip
import struct

import numpy as np
import pytest

from tapegrad.data import DatasetError, DatasetNotFoundError, datasets
from tapegrad.errors import TapegradError


def _idx_bytes(arr: np.ndarray, code: int = 0x08) -> bytes:
    header = struct.pack(">HBB", 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def _write_mnist(folder, n_train=6, n_test=4, gz=False, seed=0):
    rng = np.random.default_rng(seed)
    files = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        imgs = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)
        labs = rng.integers(0, 10, n).astype(np.uint8)
        for kind, arr in (("images-idx3-ubyte", imgs), ("labels-idx1-ubyte", labs)):
            name = f"{prefix}-{kind}" + (".gz" if gz else "")
            data = _idx_bytes(arr)
            (folder / name).write_bytes(gzip.compress(data) if gz else data)
        files[prefix] = (imgs, labs)
    return files


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("sklearn")
    return datasets.digits(as_arrays=True)


def test_digits_shapes_and_split(digits):
    x_tr, y_tr, x_te, y_te = digits
    assert x_tr.shape == (1437, 1, 8, 8) and x_te.shape == (360, 1, 8, 8)
    assert x_tr.dtype == np.float32 and y_tr.dtype == np.int64
    assert x_tr.min() >= 0.0 and x_tr.max() <= 1.0
    # stratified: every class has ~20% of its samples in the test split
    tr, te = np.bincount(y_tr, minlength=10), np.bincount(y_te, minlength=10)
    assert np.all(np.abs(te / (tr + te) - 0.2) < 0.01)


def test_digits_split_is_fixed(digits):
    again = datasets.digits(as_arrays=True)
    for a, b in zip(digits, again):
        np.testing.assert_array_equal(a, b)
    # pinned: the split must never change between versions
    assert digits[3][:12].tolist() == _PINNED_TEST_LABELS
    train, test = datasets.digits()
    assert len(train) == 1437 and len(test) == 360


def test_digits_without_sklearn(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *a, **k):
        if name.startswith("sklearn"):
            raise ImportError("No module named 'sklearn'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(TapegradError, match=r"pip install 'tapegrad\[train\]'"):
        datasets.digits()


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_reads_idx(tmp_path, gz):
    files = _write_mnist(tmp_path, gz=gz)
    x_tr, y_tr, x_te, y_te = datasets.mnist(tmp_path, as_arrays=True)
    assert x_tr.shape == (6, 1, 28, 28) and x_te.shape == (4, 1, 28, 28)
    assert x_tr.dtype == np.float32 and y_tr.dtype == np.int64
    np.testing.assert_allclose(x_tr[:, 0] * 255, files["train"][0].astype(np.float32),
                               rtol=1e-6)
    np.testing.assert_array_equal(y_te, files["t10k"][1])
    train, test = datasets.mnist(str(tmp_path))
    assert len(train) == 6 and len(test) == 4


def test_read_idx_other_dtypes(tmp_path):
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 5
    (tmp_path / "a").write_bytes(_idx_bytes(a, 0x0C))
    out = datasets.read_idx(tmp_path / "a")
    np.testing.assert_array_equal(out, a)
    assert out.dtype == np.int32 and out.dtype.isnative
    f = np.linspace(0, 1, 5).astype(np.float64)
    (tmp_path / "f").write_bytes(_idx_bytes(f, 0x0E))
    np.testing.assert_array_equal(datasets.read_idx(tmp_path / "f"), f)


def test_mnist_missing_file_names_it(tmp_path):
    _write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetNotFoundError, match="t10k-labels-idx1-ubyte") as info:
        datasets.mnist(tmp_path)
    assert "yann.lecun.com/exdb/mnist" in str(info.value)
    assert isinstance(info.value, FileNotFoundError)


def test_mnist_missing_folder(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="does not exist"):
        datasets.mnist(tmp_path / "nope")


def test_wrong_magic(tmp_path):
    _write_mnist(tmp_path)
    p = tmp_path / "train-images-idx3-ubyte"
    raw = bytearray(p.read_bytes())
    raw[0] = 0x12
    p.write_bytes(bytes(raw))
    with pytest.raises(DatasetError, match="bad IDX magic number 0x12000803"):
        datasets.mnist(tmp_path)


def test_labels_file_in_images_place(tmp_path):
    _write_mnist(tmp_path)
    labels = (tmp_path / "train-labels-idx1-ubyte").read_bytes()
    (tmp_path / "train-images-idx3-ubyte").write_bytes(labels)
    with pytest.raises(DatasetError, match="expected 3"):
        datasets.mnist(tmp_path)


@pytest.mark.parametrize("gz", [False, True])
def test_truncated(tmp_path, gz):
    _write_mnist(tmp_path, gz=gz)
    name = "train-images-idx3-ubyte" + (".gz" if gz else "")
    p = tmp_path / name
    raw = gzip.decompress(p.read_bytes()) if gz else p.read_bytes()
    raw = raw[:-100]
    p.write_bytes(gzip.compress(raw) if gz else raw)
    with pytest.raises(DatasetError, match="truncated"):
        datasets.mnist(tmp_path)


def test_truncated_header_and_trailing_bytes(tmp_path):
    (tmp_path / "short").write_bytes(b"\x00\x00")
    with pytest.raises(DatasetError, match="not an IDX file"):
        datasets.read_idx(tmp_path / "short")
    (tmp_path / "hdr").write_bytes(struct.pack(">HBB", 0, 8, 3) + b"\x00\x00\x00\x02")
    with pytest.raises(DatasetError, match="truncated IDX header"):
        datasets.read_idx(tmp_path / "hdr")
    (tmp_path / "extra").write_bytes(_idx_bytes(np.zeros(3, np.uint8)) + b"\x01")
    with pytest.raises(DatasetError, match="trailing bytes"):
        datasets.read_idx(tmp_path / "extra")


def test_broken_gzip(tmp_path):
    (tmp_path / "x.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DatasetError, match="cannot read"):
        datasets.read_idx(tmp_path / "x.gz")


def test_count_mismatch(tmp_path):
    _write_mnist(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(_idx_bytes(np.zeros(5, np.uint8)))
    with pytest.raises(DatasetError, match="6 images but"):
        datasets.mnist(tmp_path)


_PINNED_TEST_LABELS = [0, 5, 0, 3, 8, 6, 9, 6, 9, 7, 1, 7]
