"""MATLAB ``.mat`` files as plain Python values: v5 through ``scipy.io.loadmat``,
v7.3 (HDF5) through ``h5py``, both decoded to the same vocabulary so that the
layer builders never see which one it was:

* struct ``1x1`` -> ``dict`` (field order kept); struct array -> ``list`` of dicts,
* cell -> ``list`` (MATLAB's column-major element order),
* char -> ``str`` (a char matrix -> a list of its rows),
* logical -> ``bool`` array; numbers -> an ndarray in MATLAB's shape (at least
  2-D, as MATLAB stores it: trailing singleton dimensions already dropped).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ArgumentError, SerializationError, TapegradError

__all__ = ["read_mat", "from_scipy", "MatFileDependencyError"]

_HINT = "install tapegrad's MatConvNet extra: pip install 'tapegrad[matconvnet]'"


class MatFileDependencyError(TapegradError, ImportError):
    """scipy (``.mat`` v5) or h5py (v7.3) is missing."""


def read_mat(path) -> dict[str, Any]:
    """The top-level variables of a MATLAB file, decoded (see the module notes).

    >>> read_mat("imagenet-vgg-f.mat")["layers"][0]["type"]      # 'conv'
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(128)
        f.seek(512)
        hdf5 = f.read(8) == b"\x89HDF\r\n\x1a\n"
    if hdf5 or head.startswith(b"MATLAB 7.3"):
        try:
            import h5py
        except ImportError:
            raise MatFileDependencyError(f"{path} is a MATLAB v7.3 (HDF5) file, which needs "
                                         f"h5py: {_HINT}") from None
        with h5py.File(path, "r") as f:
            return {k: _from_h5(f, v) for k, v in f.items() if not k.startswith("#")}
    try:
        import scipy.io
    except ImportError:
        raise MatFileDependencyError(f"reading the MATLAB file {path} needs scipy: "
                                     f"{_HINT}") from None
    try:
        raw = scipy.io.loadmat(path, squeeze_me=False, struct_as_record=True,
                               chars_as_strings=True)
    except (ValueError, TypeError) as e:
        raise SerializationError(f"{path} is not a readable MATLAB .mat file: {e}") from e
    return {k: from_scipy(v) for k, v in raw.items() if not k.startswith("__")}


def from_scipy(v) -> Any:
    """A value from ``scipy.io.loadmat(..., squeeze_me=False)`` (records or
    ``mat_struct`` objects), decoded."""
    if isinstance(v, Mapping):
        return {k: from_scipy(x) for k, x in v.items()}
    if type(v).__name__ == "mat_struct":  # struct_as_record=False
        return {k: from_scipy(getattr(v, k)) for k in v._fieldnames}
    if isinstance(v, np.void) and v.dtype.names:  # one record (squeeze_me=True)
        return {k: from_scipy(v[k]) for k in v.dtype.names}
    if isinstance(v, str):
        return v
    if not isinstance(v, np.ndarray):
        return np.asarray(v)
    if v.dtype.names:  # struct array: one record per element, column-major
        items = [{k: from_scipy(e[k]) for k in v.dtype.names} for e in v.ravel(order="F")]
        return items[0] if v.size == 1 else items
    if v.dtype == object:
        items = [from_scipy(e) for e in v.ravel(order="F")]
        if v.size and all(type(e).__name__ == "mat_struct" for e in v.flat):
            return items[0] if v.size == 1 else items  # a struct (struct_as_record=False)
        return items  # a cell array
    if v.dtype.kind == "U":  # char (chars_as_strings: one str per row)
        rows = [str(s) for s in v.ravel(order="F")]
        return "" if not rows else rows[0] if len(rows) == 1 else rows
    return v


# ------------------------------------------------------------- v7.3 (HDF5)
#
# MATLAB's v7.3 layout (HDF5 behind a 512-byte text header): every variable is
# a dataset or a group carrying a MATLAB_class attribute; arrays are stored
# with their dimensions reversed (HDF5 is row-major, MATLAB column-major), so
# ``dataset[()].T`` has MATLAB's shape. A struct is a group with one member per
# field (MATLAB_fields lists their order). A cell is a dataset of object
# references into the ``#refs#`` group; so is each field of a struct *array*
# (one reference per element). Empty arrays are a dataset of their dimensions
# with the MATLAB_empty attribute. Chars are uint16 code units.


def _attr_str(obj, name):
    a = obj.attrs.get(name)
    if a is None:
        return None
    return a.decode() if isinstance(a, bytes) else str(a)


def _field_order(group):
    names = group.attrs.get("MATLAB_fields")
    if names is None:
        return list(group.keys())
    order = ["".join(c.decode() if isinstance(c, bytes) else str(c) for c in np.ravel(n))
             for n in names]
    return [n for n in order if n in group] + [k for k in group if k not in order]


def _from_h5(f, obj) -> Any:
    import h5py

    cls = _attr_str(obj, "MATLAB_class")
    if isinstance(obj, h5py.Group):
        if cls not in (None, "struct"):
            raise SerializationError(f"MATLAB v7.3: cannot read {obj.name} of class {cls} "
                                     "(objects and function handles are not supported)")
        names = _field_order(obj)
        fields = {k: obj[k] for k in names}
        # a struct array: every field is a dataset of references, one per element
        refs = [isinstance(d, h5py.Dataset) and d.dtype == h5py.ref_dtype
                and _attr_str(d, "MATLAB_class") is None for d in fields.values()]
        if fields and all(refs):
            cols = {k: [_from_h5(f, f[r]) for r in d[()].ravel()] for k, d in fields.items()}
            count = len(next(iter(cols.values())))
            items = [{k: cols[k][i] for k in names} for i in range(count)]
            return items[0] if count == 1 else items
        return {k: _from_h5(f, d) for k, d in fields.items()}
    if obj.attrs.get("MATLAB_empty", 0):
        if cls == "char":
            return ""
        if cls in ("cell", "struct"):
            return [] if cls == "cell" else {}
        dims = tuple(int(d) for d in np.ravel(obj[()])) if obj.size else (0, 0)
        return np.zeros(dims, dtype=_NUMERIC.get(cls, np.float64))
    data = obj[()]
    if cls == "cell" or data.dtype == h5py.ref_dtype:
        return [_from_h5(f, f[r]) for r in np.ravel(data)]  # C order of reversed dims
    arr = np.asarray(data).T  # MATLAB's shape (a Fortran-ordered view)
    if cls == "char":
        rows = ["".join(chr(c) for c in row) for row in np.atleast_2d(arr)]
        return rows[0] if len(rows) == 1 else rows
    if cls == "logical":
        return arr.astype(bool)
    if cls in _NUMERIC:
        if arr.dtype.names:  # complex: a (real, imag) compound
            raise SerializationError(f"MATLAB v7.3: {obj.name} is complex; simplenn networks "
                                     "hold real arrays only")
        return arr.astype(_NUMERIC[cls], copy=False)
    raise SerializationError(f"MATLAB v7.3: cannot read {obj.name} of class {cls!r}")


_NUMERIC = {"double": np.float64, "single": np.float32, "int8": np.int8, "uint8": np.uint8,
            "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
            "int64": np.int64, "uint64": np.uint64}


def check_unsqueezed(top: Mapping, key: str) -> None:
    """Refuse a dict that ``scipy.io.loadmat(..., squeeze_me=True)`` made: it drops
    every singleton dimension (a 5x5x1x20 filter bank becomes 5x5x20), so the
    weights' layout cannot be recovered."""
    v = top[key]
    if isinstance(v, np.ndarray) and v.dtype == object and v.ndim == 2:
        return  # a cell as MATLAB saves it: 1 x n
    if isinstance(v, np.ndarray) and v.dtype.names and v.ndim == 2:
        return  # a struct (array) as MATLAB saves it
    if isinstance(v, (list, dict)):
        return  # already decoded (read_mat)
    raise ArgumentError(f"load_simplenn: {key!r} has the shape {getattr(v, 'shape', None)} "
                        "of a file loaded with squeeze_me=True, which drops the singleton "
                        "dimensions of the weights (a 5x5x1x20 filter bank becomes 5x5x20) so "
                        "their layout cannot be recovered; pass the file's path, or load it "
                        "with scipy.io.loadmat(path) (squeeze_me=False, the default)")
