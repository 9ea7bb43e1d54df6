"""Feeds for a Caffe net's data layers, from data tapegrad reads.

tapegrad runs Caffe's data layers as Inputs (:mod:`.data`); a *feed* fills their
tops: ``feed()`` returns ``{top: float32 array}`` for one forward pass, the next
batch each call, cycling through the data forever as Caffe's data layers do.
:func:`feed_for` builds one for a net (every data layer of its phase) or for one
``LayerParameter``:

>>> feed = feed_for(net, "digits")           # net: a caffe.Net or CaffeModel
>>> net.forward(**feed())                     # {"data": (64, 1, 28, 28), "label": (64,)}

Where the data come from:

* ``Data``, ``ImageData``, ``MemoryData`` and ``Input`` layers (tops: data, then an
  optional label) read ``source``: ``"digits"`` (scikit-learn's 8x8 digits made
  MNIST-shaped: upscaled to 20x20 and centred in 28x28, values 0..255 as in
  Caffe's MNIST LMDB; tapegrad's fixed 1437/360 train/test split) or ``"mnist"``
  (the IDX files in ``data_dir``: train-* for TRAIN, t10k-* for TEST). The layer's
  own ``source`` (an LMDB, an image list) is not read. TRAIN nets get the training
  split, TEST nets the test split.
* ``HDF5Data`` reads its own ``hdf5_data_param.source`` (a text file listing
  ``.h5`` files; each top is the dataset of that name), whatever ``source`` says.
  It needs h5py (``pip install h5py``).
* ``DummyData`` makes its own values and ``WindowData`` is refused.

Order: Caffe's Data layer reads its LMDB in order, and so does the feed (the
dataset's order; MNIST's files are in no class order). ``shuffle`` in
``hdf5_data_param`` / ``image_data_param`` reshuffles at each pass as Caffe does
(in either phase, as Caffe); ``feed_for(..., shuffle=True)`` shuffles a layer that
does not ask. ``rand_skip`` skips a random number of images at the start.

``transform_param`` is applied as Caffe's ``DataTransformer`` applies it to a
Datum (all layers but HDF5Data, which Caffe forbids to transform, and Input):
``(x - mean) * scale`` with ``mean_value`` (one per channel, or one for all) or
``mean_file`` (a binaryproto of the full image's shape), then ``crop_size``
(random offsets per image in TRAIN, the centre in TEST) and ``mirror`` (a random
horizontal flip per image, in either phase where the layer asks, as Caffe).
``force_color``/``force_gray`` are ignored, as Caffe ignores them for unencoded
data. ImageData's ``new_height``/``new_width`` resize (bilinear) and ``is_color``
repeats the grey channel three times (as OpenCV's ``imread`` does). Labels are
float32, as Caffe's.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from ...errors import MissingDependencyError
from .base import LAYERS, CaffeLayerError
from .data import DATA_LAYERS
from .files import MAX_BYTES, _read_bytes, locate, read_net
from .graph import included
from .schema import messages

_FED = tuple(t for t in DATA_LAYERS if t != "DummyData") + ("Input",)  # (DummyData: its own)

__all__ = ["feed_for", "FeedError", "LayerFeed", "NetFeed", "SOURCES", "digits_mnist_shaped",
           "resize_bilinear"]

SOURCES = ("digits", "mnist")
"""What :func:`feed_for` reads for the Data, ImageData, MemoryData and Input layers."""


class FeedError(CaffeLayerError):
    """A data layer cannot be fed as asked: a source that cannot supply its tops,
    shapes that differ from the ones the net declares, a transform_param that does
    not fit the images, an unreadable HDF5 source."""


# ------------------------------------------------------------------ images


def resize_bilinear(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """``x`` (N, C, H, W) resized to (N, C, height, width), bilinear with pixel centres
    aligned as OpenCV's ``INTER_LINEAR`` (float64 out)."""

    def weights(n_in, n_out):
        src = np.clip((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0, n_in - 1)
        lo = np.floor(src).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        m = np.zeros((n_out, n_in))
        np.add.at(m, (np.arange(n_out), lo), 1 - (src - lo))
        np.add.at(m, (np.arange(n_out), hi), src - lo)
        return m

    mh, mw = weights(x.shape[2], height), weights(x.shape[3], width)
    return np.einsum("oh,nchw,pw->ncop", mh, x.astype(np.float64), mw, optimize=True)


def _mnist_shaped(counts: np.ndarray) -> np.ndarray:
    """8x8 digit images of counts 0..16 -> uint8 (N, 1, 28, 28): upscaled to 20x20
    and centred with a 4-pixel border, as MNIST's digits sit in their 28x28 frame."""
    big = resize_bilinear(counts, 20, 20) * (255.0 / 16.0)
    out = np.zeros((counts.shape[0], 1, 28, 28), np.uint8)
    out[:, :, 4:24, 4:24] = np.clip(np.rint(big), 0, 255).astype(np.uint8)
    return out


@functools.lru_cache(maxsize=1)
def digits_mnist_shaped():
    """``(x_train, y_train, x_test, y_test)``: scikit-learn's digits (tapegrad's
    split, :func:`tapegrad.data.datasets.digits`) as MNIST-shaped uint8 images
    (N, 1, 28, 28) in 0..255 and float32 labels."""
    from ...data import datasets

    x_tr, y_tr, x_te, y_te = datasets.digits(as_arrays=True)
    return (_mnist_shaped(np.rint(x_tr * 16)), y_tr.astype(np.float32),
            _mnist_shaped(np.rint(x_te * 16)), y_te.astype(np.float32))


@functools.lru_cache(maxsize=1)
def _mnist(root: str):
    from ...data import datasets

    x_tr, y_tr, x_te, y_te = datasets.mnist(root, as_arrays=True)
    as_bytes = lambda x: np.rint(x * 255).astype(np.uint8)  # the IDX files' own values
    return as_bytes(x_tr), y_tr.astype(np.float32), as_bytes(x_te), y_te.astype(np.float32)


def _images(source: str, phase: str, data_dir):
    if source == "digits":
        x_tr, y_tr, x_te, y_te = digits_mnist_shaped()
    elif source == "mnist":
        if not data_dir:
            raise FeedError("source 'mnist' needs data_dir (--data-dir): the folder holding "
                            "the four MNIST IDX files (train-images-idx3-ubyte, ...)")
        x_tr, y_tr, x_te, y_te = _mnist(os.path.abspath(os.fspath(data_dir)))
    else:
        raise FeedError(f"unknown data source {source!r}: choose one of {', '.join(SOURCES)}")
    return (x_tr, y_tr) if phase == "train" else (x_te, y_te)


# ------------------------------------------------------------------ order


class _Order:
    """An endless stream of indices into ``n`` items: passes in order, or each
    pass shuffled (``rng``); ``skip`` items dropped at the start."""

    def __init__(self, n: int, shuffle: bool, rng, skip: int = 0):
        self.n, self.shuffle, self.rng = n, shuffle, rng
        self.epoch, self.pos = 0, skip % max(n, 1)
        self.perm = self._pass()

    def _pass(self):
        return self.rng.permutation(self.n) if self.shuffle else np.arange(self.n)

    def take(self, k: int) -> np.ndarray:
        out = []
        while k:
            if self.pos == self.n:
                self.epoch, self.pos, self.perm = self.epoch + 1, 0, self._pass()
            got = self.perm[self.pos:self.pos + k]
            self.pos += len(got)
            k -= len(got)
            out.append(got)
        return np.concatenate(out) if out else np.zeros(0, np.int64)


# ------------------------------------------------------------------ transform


class _Transform:
    """Caffe's ``DataTransformer`` on uint8/float (N, C, H, W) batches."""

    def __init__(self, tp, phase, chw, rng, where, root, max_bytes):
        c, h, w = chw
        self.phase, self.rng = phase, rng
        self.scale = float(tp.scale)
        self.crop, self.mirror = int(tp.crop_size), bool(tp.mirror)
        self.mean = None
        has_file = tp.HasField("mean_file")
        if has_file and len(tp.mean_value):
            raise FeedError(f"{where}: transform_param has both mean_file and mean_value; "
                            "Caffe allows one of them: remove the other")
        if has_file:
            self.mean = _read_mean(tp.mean_file, (c, h, w), where, root, max_bytes)
        elif len(tp.mean_value):
            values = list(tp.mean_value)
            if len(values) not in (1, c):
                raise FeedError(f"{where}: transform_param has {len(values)} mean_value for "
                                f"images of {c} channel(s); give 1 or {c}")
            self.mean = np.array(values * c if len(values) == 1 else values,
                                 np.float32)[:, None, None]
        if self.crop and (self.crop > h or self.crop > w):
            raise FeedError(f"{where}: transform_param crop_size {self.crop} is larger than "
                            f"the {h}x{w} images; use crop_size <= {min(h, w)}")
        self.out_chw = (c, self.crop, self.crop) if self.crop else (c, h, w)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float32)
        if self.mean is not None:
            x = x - self.mean  # at the uncropped position, as Caffe indexes the mean
        if self.scale != 1:
            x = x * np.float32(self.scale)
        n, (_, h, w) = len(x), x.shape[1:]
        if not self.crop and not self.mirror:
            return np.ascontiguousarray(x, np.float32)
        out = np.empty((n,) + self.out_chw, np.float32)
        crop = self.crop
        for i in range(n):
            flip = self.mirror and bool(self.rng.integers(2))  # drawn first, as Caffe
            img = x[i]
            if crop:
                if self.phase == "train":
                    y0, x0 = int(self.rng.integers(h - crop + 1)), \
                        int(self.rng.integers(w - crop + 1))
                else:
                    y0, x0 = (h - crop) // 2, (w - crop) // 2
                img = img[:, y0:y0 + crop, x0:x0 + crop]
            out[i] = img[:, :, ::-1] if flip else img
        return out


def _resolve(path: str, root, where: str, what: str) -> str:
    """``path`` as given (absolute or relative to the working directory, as Caffe),
    else relative to ``root``."""
    found = locate(path, root, os.path.isfile)
    if found is not None:
        return found
    tried = f" (nor under {root!r})" if root else ""
    raise FeedError(f"{where}: {what} {path!r} not found in {os.getcwd()!r}{tried}; give a "
                    "path relative to the working directory or an absolute one")


def _read_mean(path, chw, where, root, max_bytes):
    """A mean_file: a ``BlobProto`` of shape (1, C, H, W) (or (C, H, W))."""
    from google.protobuf.message import DecodeError

    path = _resolve(path, root, where, "mean_file")
    data, _ = _read_bytes(path, max_bytes, "mean_file", "mean_file")
    blob = messages().BlobProto()
    try:
        blob.ParseFromString(data)
    except DecodeError as e:
        raise FeedError(f"{where}: mean_file {path!r} is not a BlobProto (.binaryproto): "
                        f"{e}") from None
    shape = tuple(blob.shape.dim) if blob.HasField("shape") else \
        (blob.num, blob.channels, blob.height, blob.width)
    values = np.asarray(blob.data or blob.double_data, np.float32)
    squeezed = shape[1:] if len(shape) == 4 and shape[0] == 1 else shape
    if tuple(squeezed) != tuple(chw) or values.size != int(np.prod(chw)):
        raise FeedError(f"{where}: mean_file {path!r} holds a mean of shape {shape} "
                        f"({values.size} values) but the images are {tuple(chw)}; Caffe "
                        "needs the mean of the full (uncropped) image")
    return values.reshape(chw)


# ------------------------------------------------------------------ feeds


class LayerFeed:
    """The feed of one data layer: ``feed()`` -> ``{top: batch}``. ``tops``,
    ``batch_size``, ``shapes`` (top -> the batch's shape), ``size`` (items per
    pass) and ``epoch`` (passes completed)."""

    def __init__(self, lp, phase, source="digits", *, data_dir=None, rng=None,
                 batch_size=None, shuffle=None, root=None, max_bytes=MAX_BYTES):
        self.lp, self.phase = lp, phase
        self.where = f"{lp.type} layer {lp.name!r}"
        self.tops = list(lp.top)
        rng = np.random.default_rng(rng)
        declared = LAYERS[lp.type](lp, phase).shapes if lp.type in LAYERS else []
        if lp.type == "HDF5Data":
            self._init_hdf5(lp, rng, batch_size, shuffle, root, max_bytes)
        elif lp.type in ("Data", "ImageData", "MemoryData", "Input"):
            self._init_images(lp, source, data_dir, rng, batch_size, shuffle, declared,
                              root, max_bytes)
        elif lp.type == "WindowData":
            raise FeedError(f"{self.where} reads windows of the images its window_file "
                            "lists, which tapegrad does not do; feed its tops yourself "
                            "(net.forward(data=..., label=...))")
        else:
            raise FeedError(f"{self.where} is not a data layer tapegrad feeds")
        for t, d in zip(self.tops, declared):
            got = self.shapes[t]
            if d is not None and batch_size and len(d):
                d = (batch_size,) + tuple(d[1:])  # the batch_size given replaces the layer's
            if d is not None and tuple(d) != got:
                raise FeedError(f"{self.where} declares top {t!r} of shape {tuple(d)}, but "
                                f"{self.what} gives batches of shape {got}; make the layer "
                                "declare the data's shape")

    # ---- Data, ImageData, MemoryData, Input
    def _init_images(self, lp, source, data_dir, rng, batch_size, shuffle, declared, root,
                     max_bytes):
        kind = lp.type
        if len(self.tops) > 2:
            raise FeedError(f"{self.where} has {len(self.tops)} tops {self.tops}; a feed "
                            f"from {source!r} fills two (data, label): feed the others "
                            "yourself")
        x, y = _images(source, self.phase, data_dir)
        self.what = f"{source} ({self.phase} split)"
        batch = batch_size or {"Data": lp.data_param.batch_size,
                               "ImageData": lp.image_data_param.batch_size,
                               "MemoryData": lp.memory_data_param.batch_size}.get(kind)
        if not batch and kind == "Input" and declared and declared[0]:
            batch = declared[0][0]
        if not batch:
            raise FeedError(f"{self.where} sets no batch_size (nor an input shape); give "
                            "it one, or pass batch_size=")
        self.batch_size = int(batch)
        p = lp.image_data_param
        if kind == "ImageData":
            if bool(p.new_height) != bool(p.new_width):
                raise FeedError(f"{self.where}: set new_height and new_width together "
                                "(Caffe's rule), or neither")
            if p.new_height and p.new_width and x.shape[2:] != (p.new_height, p.new_width):
                x = np.clip(np.rint(resize_bilinear(x, p.new_height, p.new_width)),
                            0, 255).astype(np.uint8)
            if p.is_color and x.shape[1] == 1:
                x = np.repeat(x, 3, axis=1)  # as imread(..., IMREAD_COLOR) of a grey image
        self.x, self.y = x, y
        self.size = len(x)
        if not self.size:
            raise FeedError(f"{self.where}: {self.what} holds no images")
        self.transform = None if kind == "Input" else _Transform(
            lp.transform_param, self.phase, x.shape[1:], rng, self.where, root, max_bytes)
        chw = self.transform.out_chw if self.transform else x.shape[1:]
        asks = {"ImageData": p.shuffle}.get(kind, False)
        skip = {"Data": lp.data_param.rand_skip, "ImageData": p.rand_skip}.get(kind, 0)
        skip = int(rng.integers(skip)) if skip else 0
        self.order = _Order(self.size, asks if shuffle is None else shuffle, rng, skip)
        self.shapes = dict(zip(self.tops, [(self.batch_size,) + tuple(chw),
                                           (self.batch_size,)]))
        label = declared[1] if len(declared) > 1 else None
        if label and int(np.prod(label[1:])) == 1:  # e.g. an Input's (N, 1, 1, 1)
            self.shapes[self.tops[1]] = (self.batch_size,) + tuple(label[1:])
        self.next = self._next_images

    def _next_images(self):
        idx = self.order.take(self.batch_size)
        x = self.x[idx]
        data = self.transform(x) if self.transform else x.astype(np.float32)
        out = {self.tops[0]: data}
        if len(self.tops) > 1:
            out[self.tops[1]] = self.y[idx].reshape(self.shapes[self.tops[1]])
        return out

    # ---- HDF5Data
    def _init_hdf5(self, lp, rng, batch_size, shuffle, root, max_bytes):
        p = lp.hdf5_data_param
        if lp.HasField("transform_param"):
            raise FeedError(f"{self.where} has a transform_param; Caffe's HDF5Data does not "
                            "transform data (it refuses the layer): store the prepared "
                            "values in the .h5 files and remove transform_param")
        if not p.source:
            raise FeedError(f"{self.where} has no hdf5_data_param.source (the text file "
                            "listing its .h5 files)")
        self.batch_size = int(batch_size or p.batch_size)
        if not self.batch_size:
            raise FeedError(f"{self.where} sets no hdf5_data_param.batch_size")
        self.what = f"HDF5 source {p.source!r}"
        self.h5 = _Hdf5Source(p.source, self.tops, self.where, root, max_bytes,
                              p.shuffle if shuffle is None else shuffle, rng)
        self.size = self.h5.size
        self.shapes = {t: (self.batch_size,) + s for t, s in self.h5.row_shapes.items()}
        self.next = self.h5.take_batch_fn(self.batch_size)

    @property
    def epoch(self) -> int:
        return self.h5.epoch if self.lp.type == "HDF5Data" else self.order.epoch

    def __call__(self) -> dict:
        return self.next()

    def __repr__(self):
        return f"LayerFeed({self.where}, {self.what}, {self.shapes})"


class _Hdf5Source:
    """The .h5 files listed in an HDF5Data source, read one at a time, as Caffe."""

    def __init__(self, source, tops, where, root, max_bytes, shuffle, rng):
        try:
            import h5py
        except ImportError:
            raise MissingDependencyError(f"{where} reads HDF5 files with h5py, which is not "
                                         "installed; run: pip install h5py") from None
        self.h5py, self.tops, self.where = h5py, tops, where
        self.max_bytes, self.shuffle, self.rng = max_bytes, shuffle, rng
        listing = _resolve(source, root, where, "hdf5_data_param.source")
        with open(listing, encoding="utf-8", errors="replace") as f:
            names = f.read().split()  # Caffe reads whitespace-separated names
        if not names:
            raise FeedError(f"{where}: the source list {listing!r} names no .h5 file")
        folder = os.path.dirname(os.path.abspath(listing))
        self.files = [_resolve(n, folder, where, f"file listed in {listing!r}") for n in names]
        self.sizes, shapes = [], None
        for path in self.files:  # check every file's datasets up front
            rows, s = self._inspect(path)
            if shapes is not None and s != shapes:
                raise FeedError(f"{where}: {path!r} has rows of shapes {s}, the first file "
                                f"{shapes}; every file must hold the same shapes")
            shapes = s
            self.sizes.append(rows)
        self.size = sum(self.sizes)
        if not self.size:
            raise FeedError(f"{where}: the files of {listing!r} hold no rows")
        self.row_shapes = shapes
        self.epoch, self.file_order = 0, self._perm(len(self.files))
        self.k, self.data = -1, None
        self._load_next()

    def _perm(self, n):
        return self.rng.permutation(n) if self.shuffle else np.arange(n)

    def _inspect(self, path):
        try:
            with self.h5py.File(path, "r") as f:
                shapes, rows = {}, set()
                for t in self.tops:
                    d = f.get(t)
                    if not isinstance(d, self.h5py.Dataset):
                        raise FeedError(f"{self.where}: {path!r} has no dataset {t!r} (one "
                                        f"per top {self.tops}); it holds {sorted(f.keys())}")
                    if d.ndim < 1 or d.dtype.kind not in "biuf":
                        raise FeedError(f"{self.where}: dataset {t!r} of {path!r} is "
                                        f"{d.shape} {d.dtype}; Caffe needs numbers with "
                                        "rows along the first axis")
                    if d.size * 4 > self.max_bytes:
                        raise FeedError(f"{self.where}: dataset {t!r} of {path!r} would "
                                        f"take {d.size * 4} bytes, over max_bytes="
                                        f"{self.max_bytes}; pass a larger max_bytes if you "
                                        "trust it")
                    shapes[t] = tuple(d.shape[1:])
                    rows.add(d.shape[0])
        except OSError as e:
            raise FeedError(f"{self.where}: cannot read {path!r} as HDF5: {e}") from None
        if len(rows) != 1:
            raise FeedError(f"{self.where}: the datasets {self.tops} of {path!r} have "
                            f"different numbers of rows {sorted(rows)}")
        return rows.pop(), shapes

    def _load_next(self):
        """Move to the next file (its rows reshuffled where asked), as Caffe."""
        while True:
            self.k += 1
            if self.k == len(self.files):
                self.k, self.epoch = 0, self.epoch + 1
                self.file_order = self._perm(len(self.files))
            i = int(self.file_order[self.k])
            if self.sizes[i]:
                break
        if self.data is None or len(self.files) > 1:
            with self.h5py.File(self.files[i], "r") as f:
                self.data = {t: np.asarray(f[t], np.float32) for t in self.tops}
        self.rows, self.row = self._perm(self.sizes[i]), 0

    def take_batch_fn(self, batch):
        def take():
            parts = []
            need = batch
            while need:
                if self.row == len(self.rows):
                    self._load_next()
                idx = self.rows[self.row:self.row + need]
                self.row += len(idx)
                need -= len(idx)
                parts.append({t: v[idx] for t, v in self.data.items()})
            return {t: np.concatenate([p[t] for p in parts]) for t in self.tops}
        return take


class NetFeed:
    """The feed of a net: every fed data layer's tops in one dict per call.
    ``layers`` (the :class:`LayerFeed` s), ``tops``, ``shapes``, ``size`` (the
    largest layer's items per pass)."""

    def __init__(self, layers):
        self.layers = list(layers)
        self.tops = [t for f in self.layers for t in f.tops]
        self.shapes = {t: s for f in self.layers for t, s in f.shapes.items()}
        self.size = max((f.size for f in self.layers), default=0)

    @property
    def epoch(self) -> int:
        return min((f.epoch for f in self.layers), default=0)

    def __call__(self) -> dict:
        out = {}
        for f in self.layers:
            out.update(f())
        return out

    def __repr__(self):
        return f"NetFeed({self.layers})"


def _phase_name(phase) -> str:
    from .model import _phase

    return _phase(phase)[0]


def feed_for(net, source: str = "digits", *, phase=None, data_dir=None, seed: int = 0,
             batch_size: int | None = None, shuffle: bool | None = None, root=None,
             level: int = 0, stages=(), max_bytes: int = MAX_BYTES):
    """A feed for ``net``'s data layers: a :class:`NetFeed` for a ``caffe.Net``, a
    ``CaffeModel``, a ``NetParameter`` or a prototxt path (the layers of ``phase``,
    ``level`` and ``stages``), or a :class:`LayerFeed` for one ``LayerParameter``.

    ``source``: ``"digits"`` or ``"mnist"`` (with ``data_dir``), for the Data,
    ImageData, MemoryData and Input layers; HDF5Data reads its own source list
    (relative paths from the working directory, else from ``root``; its files also
    from the list's folder). ``phase`` (``"train"``/``"test"`` or caffe.TRAIN/TEST;
    taken from a Net or CaffeModel) picks the split and the random or centred crops.
    ``seed`` seeds the shuffles, crops and flips; ``batch_size`` overrides the
    layers' own; ``shuffle`` forces reshuffling at every pass on (True) or off
    (False) instead of what each layer asks. DummyData layers are left out (they
    make their values). Raises :class:`FeedError` where a layer cannot be fed.
    """
    from .model import CaffeModel
    from .net import Net

    if isinstance(net, Net):
        net = net.model
    kw = dict(data_dir=data_dir, batch_size=batch_size, shuffle=shuffle, root=root,
              max_bytes=max_bytes)
    if hasattr(net, "DESCRIPTOR") and net.DESCRIPTOR.name in ("LayerParameter",):
        if phase is None:
            raise FeedError("feed_for(layer_param, ...) needs phase='train' or 'test'")
        return LayerFeed(net, _phase_name(phase), source, rng=seed, **kw)
    if isinstance(net, CaffeModel):
        if phase is not None and _phase_name(phase) != net.phase:
            raise FeedError(f"feed_for: the model is in phase {net.phase!r}, not "
                            f"{_phase_name(phase)!r}")
        name, lps = net.phase, net._lps
    else:
        if phase is None:
            raise FeedError("feed_for(prototxt, ...) needs phase='train' or 'test'")
        name = _phase_name(phase)
        param = read_net(net, max_bytes=max_bytes)
        lps = [lp for lp in param.layer if included(lp, 0 if name == "train" else 1,
                                                     level, stages)]
    layers = []
    for i, lp in enumerate(lps):
        if lp.type in _FED:
            layers.append(LayerFeed(lp, name, source, rng=[seed, i], **kw))
    return NetFeed(layers)
