"""MATLAB files for the MatConvNet tests, written the way MATLAB writes them.

v5 (``save net.mat``) through ``scipy.io.savemat``: a struct is a dict, a cell
array a ``1 x n`` object array (``cell``), numbers keep their MATLAB shape (at
least 2-D), strings are char rows.

v7.3 (``save -v7.3``) through h5py, as MATLAB lays it out (see the MATLAB
v7.3 notes in ``tapegrad/compat/_matfile.py``): a 512-byte text header, then
HDF5 with a ``MATLAB_class`` attribute on every object; arrays stored with
their dimensions reversed; structs as groups (``MATLAB_fields`` gives the
order); cells as datasets of object references into ``#refs#``; chars as
uint16; empty arrays as their dimensions with ``MATLAB_empty``. This mimics
files MATLAB R2015+ writes as far as we know them; no MATLAB-written file was
available to compare against byte for byte.
"""

from __future__ import annotations

import itertools

import numpy as np


def cell(*items):
    """A MATLAB cell row ``{a, b, ...}`` for savemat (and save_v73)."""
    c = np.empty((1, len(items)), dtype=object)
    for i, v in enumerate(items):
        c[0, i] = v
    return c


def save_v5(path, **variables):
    import scipy.io

    scipy.io.savemat(path, variables, oned_as="row")


_CLASS = {np.dtype(np.float64): "double", np.dtype(np.float32): "single",
          np.dtype(np.int32): "int32", np.dtype(np.int64): "int64", np.dtype(np.uint8): "uint8",
          np.dtype(np.int16): "int16", np.dtype(np.uint16): "uint16"}


def save_v73(path, **variables):
    import h5py

    names = itertools.count()

    def attr(obj, key, text):
        obj.attrs.create(key, np.bytes_(text))

    def empty(parent, name, cls, dims=(0, 0)):
        ds = parent.create_dataset(name, data=np.array(dims, dtype=np.uint64))
        attr(ds, "MATLAB_class", cls)
        ds.attrs.create("MATLAB_empty", np.uint8(1))

    def put(parent, name, v):
        if isinstance(v, dict):
            g = parent.create_group(name)
            attr(g, "MATLAB_class", "struct")
            fields = np.empty(len(v), dtype=object)  # each name as a vlen array of chars
            for i, k in enumerate(v):
                fields[i] = np.array(list(k), dtype="S1")
            g.attrs.create("MATLAB_fields", fields, dtype=h5py.vlen_dtype(np.dtype("S1")))
            for k, x in v.items():
                put(g, k, x)
            return
        if isinstance(v, np.ndarray) and v.dtype == object:
            if v.size == 0:
                empty(parent, name, "cell", v.shape)
                return
            refs = []
            for e in v.ravel(order="F"):  # MATLAB's element order
                key = str(next(names))
                put(f["#refs#"], key, e)
                refs.append(f["#refs#"][key].ref)
            # MATLAB's dims reversed, filled in C order = MATLAB's column-major order
            data = np.array(refs, dtype=h5py.ref_dtype).reshape(v.shape[::-1])
            ds = parent.create_dataset(name, data=data)
            attr(ds, "MATLAB_class", "cell")
            return
        if isinstance(v, str):
            if not v:
                empty(parent, name, "char")
                return
            ds = parent.create_dataset(name, data=np.array([[ord(c)] for c in v], np.uint16))
            attr(ds, "MATLAB_class", "char")
            ds.attrs.create("MATLAB_int_decode", np.int32(2))
            return
        a = np.asarray(v)
        a = a.reshape(a.shape + (1,) * (2 - a.ndim)) if a.ndim < 2 else a
        if a.dtype == bool:
            ds = parent.create_dataset(name, data=a.T.astype(np.uint8))
            attr(ds, "MATLAB_class", "logical")
            ds.attrs.create("MATLAB_int_decode", np.int32(1))
            return
        if a.size == 0:
            empty(parent, name, _CLASS[a.dtype], a.shape)
            return
        ds = parent.create_dataset(name, data=np.ascontiguousarray(a.T))
        attr(ds, "MATLAB_class", _CLASS[a.dtype])

    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_group("#refs#")
        for k, v in variables.items():
            put(f, k, v)
    head = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Tue Dec  1 00:00:00 2026 " \
           b"HDF5 schema 1.00 ."
    head = head.ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02IM"
    with open(path, "r+b") as fh:
        fh.write(head.ljust(512, b"\x00"))


# ------------------------------------------------------------------ networks


def conv(rng, name, fh, fw, c, k, dtype, scale=0.1, **fields):
    w = (scale * rng.standard_normal((fh, fw, c, k))).astype(dtype)
    b = (0.1 * rng.standard_normal((1, k))).astype(dtype)
    return {"type": "conv", "name": name, "weights": cell(w, b),
            "stride": np.array([[1.0]]), "pad": np.array([[0.0]]), **fields}


def pool(name, size, stride, method="max", pad=0.0):
    return {"type": "pool", "name": name, "method": method, "pool": np.array([size], float),
            "stride": np.atleast_2d(np.array(stride, float)),
            "pad": np.atleast_2d(np.array(pad, float))}


def lenet(rng, dtype=np.float32, widths=(20, 50, 500), scale=0.1):
    """MatConvNet's examples/mnist/cnn_mnist_init.m (without batch norm; it draws
    the filters with scale 1/100)."""
    a, b, c = widths
    return cell(
        conv(rng, "conv1", 5, 5, 1, a, dtype, scale),
        pool("pool1", [2, 2], 2),
        conv(rng, "conv2", 5, 5, a, b, dtype, scale),
        pool("pool2", [2, 2], 2),
        conv(rng, "conv3", 4, 4, b, c, dtype, scale),
        {"type": "relu", "name": "relu1", "leak": np.array([[0.0]])},
        conv(rng, "conv4", 1, 1, c, 10, dtype, scale),
        {"type": "softmaxloss", "name": "loss"},
    )


def vgg_small(rng, dtype=np.float64, classes=5):
    """A VGG-style stack on 9 x 9 x 3 images: conv (asymmetric pad), leaky relu,
    lrn, max pool with asymmetric pad, bnorm, conv, relu, dropout, avg pool with
    padding, 1x1 conv to the classes, softmaxloss."""
    k = 4
    g = (1 + 0.2 * rng.standard_normal((k, 1))).astype(dtype)
    bb = (0.1 * rng.standard_normal((k, 1))).astype(dtype)
    moments = np.concatenate([0.1 * rng.standard_normal((k, 1)),
                              1 + rng.random((k, 1))], axis=1).astype(dtype)
    return cell(
        conv(rng, "conv1", 3, 3, 3, k, dtype, scale=0.3, pad=np.array([[1.0, 0.0, 2.0, 1.0]])),
        {"type": "relu", "name": "relu1", "leak": np.array([[0.1]])},
        {"type": "lrn", "name": "norm1", "param": np.array([[3.0, 1.0, 0.5, 0.75]])},
        pool("pool1", [3, 2], 2, pad=[[0.0, 1.0, 0.0, 1.0]]),
        {"type": "bnorm", "name": "bn1", "weights": cell(g, bb, moments),
         "epsilon": np.array([[1e-4]])},
        conv(rng, "conv2", 3, 3, k, 6, dtype, scale=0.3, pad=np.array([[1.0]])),
        {"type": "relu", "name": "relu2"},
        {"type": "dropout", "name": "drop", "rate": np.array([[0.25]])},
        pool("pool2", [2, 2], 1, method="avg", pad=[[1.0, 0.0, 1.0, 0.0]]),
        conv(rng, "fc", 1, 1, 6, classes, dtype, scale=0.5),
        {"type": "softmaxloss", "name": "loss"},
    )


def meta(classes=10):
    return {"normalization": {"imageSize": np.array([[28.0, 28.0, 1.0]]),
                              "averageImage": np.zeros((1, 1), np.float32)},
            "classes": {"name": cell(*[str(i) for i in range(classes)]),
                        "description": cell(*[f"digit {i}" for i in range(classes)])}}
