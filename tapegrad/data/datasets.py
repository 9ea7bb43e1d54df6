"""Ready-made datasets, read from local files only (nothing is downloaded).

- :func:`digits` -- scikit-learn's bundled 8x8 handwritten digits (1797
  images, shipped inside scikit-learn; ``pip install 'tapegrad[train]'``),
  with a fixed stratified 1437/360 train/test split.
- :func:`mnist` -- the 28x28 MNIST digits from the four standard IDX files in
  a local folder (plain or gzipped).
- :func:`read_idx` -- one IDX file as a NumPy array, with magic number and size
  checks.

Images come as float32 ``(N, 1, H, W)`` scaled to [0, 1]; labels as int64 ``(N,)``.
"""

from __future__ import annotations

import gzip
import os
import struct

import numpy as np

from ..errors import TapegradError
from .dataset import TensorDataset

__all__ = ["digits", "mnist", "read_idx", "DatasetError", "DatasetNotFoundError",
           "DIGITS_N_TEST", "MNIST_URL"]

MNIST_URL = "http://yann.lecun.com/exdb/mnist/"
DIGITS_N_TEST = 360


class DatasetError(TapegradError, ValueError):
    """A dataset file is malformed (bad magic number, truncated, inconsistent sizes)."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """A dataset's files are not where they were looked for."""


# ------------------------------------------------------------------ digits

def _split_key(n: int) -> np.ndarray:
    """A fixed pseudo-random order key per sample: Knuth's multiplicative hash.

    Pure integer arithmetic, so the split never changes with NumPy's RNG.
    """
    i = np.arange(n, dtype=np.uint64)
    return (i * np.uint64(2654435761) + np.uint64(12345)) % np.uint64(2**32)


def _stratified_test_mask(labels: np.ndarray, n_test: int) -> np.ndarray:
    """Pick ``n_test`` samples, each class in proportion to its size."""
    classes, counts = np.unique(labels, return_counts=True)
    share = counts * n_test / labels.size
    take = np.floor(share).astype(np.int64)
    # largest remainders get the leftover places (ties: lower class first)
    rest = n_test - int(take.sum())
    take[np.argsort(-(share - take), kind="stable")[:rest]] += 1
    key = _split_key(labels.size)
    mask = np.zeros(labels.size, dtype=bool)
    for c, k in zip(classes, take):  # 10 classes: loop over classes, not samples
        members = np.flatnonzero(labels == c)
        mask[members[np.argsort(key[members], kind="stable")[:k]]] = True
    return mask


def digits(as_arrays: bool = False):
    """scikit-learn's 8x8 handwritten digits with a fixed stratified split.

    Returns ``(train, test)``, two :class:`TensorDataset` of (images, labels):
    1437 training and 360 test samples, images float32 ``(N, 1, 8, 8)`` in
    [0, 1] (the original 0..16 counts / 16), labels int64 in 0..9. Every
    class is split in proportion (about 20% test), by a fixed hash order, so the
    split is the same on every machine and version. ``as_arrays=True`` returns
    NumPy arrays ``(x_train, y_train, x_test, y_test)`` instead.

    The data ship inside scikit-learn (no download); it is an optional
    dependency: ``pip install 'tapegrad[train]'``.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise DatasetNotFoundError(
            "the digits dataset comes with scikit-learn, which is not installed "
            f"({exc}); install the training extra: pip install 'tapegrad[train]'"
        ) from None
    bunch = load_digits()
    images = (np.asarray(bunch.images, dtype=np.float32) / np.float32(16.0))[:, None]
    labels = np.asarray(bunch.target, dtype=np.int64)
    test = _stratified_test_mask(labels, DIGITS_N_TEST)
    x_tr, y_tr = np.ascontiguousarray(images[~test]), labels[~test]
    x_te, y_te = np.ascontiguousarray(images[test]), labels[test]
    if as_arrays:
        return x_tr, y_tr, x_te, y_te
    return TensorDataset(x_tr, y_tr), TensorDataset(x_te, y_te)


# ------------------------------------------------------------------- IDX

_IDX_DTYPES = {
    0x08: np.dtype(np.uint8), 0x09: np.dtype(np.int8), 0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8"),
}


def read_idx(path, expect_ndim: int | None = None) -> np.ndarray:
    """Read one IDX file (``.gz`` too) into a native-endian NumPy array.

    The format: two zero bytes, a type byte (0x08 uint8, 0x09 int8, 0x0B
    int16, 0x0C int32, 0x0D float32, 0x0E float64), a byte with the number of
    dimensions, one big-endian uint32 per dimension, then the data. Raises
    :class:`DatasetError` on a bad magic number, a truncated file, or trailing
    bytes; ``expect_ndim`` also checks the number of dimensions (3 for
    images, 1 for labels).
    """
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        if isinstance(exc, FileNotFoundError):
            raise DatasetNotFoundError(f"IDX file not found: {path}") from None
        raise DatasetError(f"cannot read IDX file {path}: {exc}") from None
    if len(raw) < 4:
        raise DatasetError(f"{path}: not an IDX file (only {len(raw)} bytes, the header "
                           "alone needs 4)")
    zero, code, ndim = struct.unpack(">HBB", raw[:4])
    magic = int.from_bytes(raw[:4], "big")
    if zero != 0 or code not in _IDX_DTYPES or ndim == 0:
        hint = f"0x{0x800 + expect_ndim:08X}" if expect_ndim else "0x00000803 or 0x00000801"
        raise DatasetError(
            f"{path}: bad IDX magic number 0x{magic:08X}, expected {hint} (two zero bytes, "
            "a type byte 08/09/0B/0C/0D/0E, the number of dimensions). Is it an IDX file? "
            "A gzipped file must end in .gz.")
    if expect_ndim is not None and ndim != expect_ndim:
        raise DatasetError(f"{path}: IDX magic number 0x{magic:08X} says {ndim} dimension(s), "
                           f"expected {expect_ndim}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetError(f"{path}: truncated IDX header ({len(raw)} bytes, need {header})")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_DTYPES[code]
    need = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    have = len(raw) - header
    if have != need:
        what = "truncated" if have < need else "has trailing bytes"
        raise DatasetError(f"{path}: IDX file {what}: dimensions {dims} of {dtype.name} "
                           f"need {need} data bytes, found {have}")
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="), copy=True)


_MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def _find(root: str, stem: str) -> str:
    """``stem`` or ``stem.gz`` (also the ``stem``-with-dot spelling some mirrors
    use: ``train-images.idx3-ubyte``) in ``root`` or ``root/MNIST/raw``."""
    dotted = stem.replace("-idx", ".idx")
    for folder in (root, os.path.join(root, "MNIST", "raw")):
        for name in (stem, stem + ".gz", dotted, dotted + ".gz"):
            p = os.path.join(folder, name)
            if os.path.isfile(p):
                return p
    raise DatasetNotFoundError(
        f"MNIST file {stem} (or {stem}.gz) not found in {root!r}. MNIST is not downloaded "
        f"by tapegrad: get the four IDX files (train-images-idx3-ubyte, "
        f"train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, plain or "
        f".gz) from {MNIST_URL} or a mirror and put them in that folder.")


def _mnist_pair(images_path: str, labels_path: str):
    images = read_idx(images_path, expect_ndim=3)
    labels = read_idx(labels_path, expect_ndim=1)
    if images.dtype != np.uint8 or labels.dtype != np.uint8:
        raise DatasetError(f"MNIST files hold unsigned bytes; {images_path} has "
                           f"{images.dtype.name}, {labels_path} {labels.dtype.name}")
    if images.shape[0] != labels.shape[0]:
        raise DatasetError(f"{images_path} has {images.shape[0]} images but {labels_path} "
                           f"has {labels.shape[0]} labels")
    if labels.size and labels.max() > 9:
        raise DatasetError(f"{labels_path}: labels must be 0..9, found {labels.max()}")
    x = (images.astype(np.float32) / np.float32(255.0))[:, None]
    return np.ascontiguousarray(x), labels.astype(np.int64)


def mnist(root, as_arrays: bool = False):
    """MNIST from the four IDX files in the local folder ``root``.

    Returns ``(train, test)`` TensorDatasets: 60000 and 10000 images float32
    ``(N, 1, 28, 28)`` scaled to [0, 1] (Caffe's ``scale: 0.00390625``) and
    int64 labels; ``as_arrays=True`` gives ``(x_train, y_train, x_test, y_test)``.
    Files may be plain or ``.gz``. Nothing is downloaded: get them from
    http://yann.lecun.com/exdb/mnist/ or a mirror.
    """
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise DatasetNotFoundError(
            f"MNIST folder {root!r} does not exist. Get the four IDX files from {MNIST_URL} "
            "or a mirror (nothing is downloaded at run time) and pass their folder.")
    paths = {k: _find(root, v) for k, v in _MNIST_FILES.items()}
    x_tr, y_tr = _mnist_pair(paths["train_images"], paths["train_labels"])
    x_te, y_te = _mnist_pair(paths["test_images"], paths["test_labels"])
    if as_arrays:
        return x_tr, y_tr, x_te, y_te
    return TensorDataset(x_tr, y_tr), TensorDataset(x_te, y_te)
