"""MATLAB ``.mat`` files as plain Python values: v5 through ``scipy.io.loadmat``
(after :mod:`._mat_v5` has checked and inflated it), v7.3 (HDF5) through
``h5py`` (:mod:`._mat_v73`), both decoded to the same vocabulary so that the
layer builders never see which one it was:

* struct ``1x1`` -> ``dict`` (field order kept); struct array -> ``list`` of dicts,
* cell -> ``list`` (MATLAB's column-major element order),
* char -> ``str`` (a char matrix -> a list of its rows),
* logical -> ``bool`` array; numbers -> an ndarray in MATLAB's shape (at least
  2-D, as MATLAB stores it: trailing singleton dimensions already dropped).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ArgumentError, TapegradError
from ._mat_v5 import checked_stream
from ._mat_v73 import read_v73
from ._matcheck import MAX_BYTES, MAX_DEPTH, MAX_ITEMS, Budget, MatFileError

__all__ = ["read_mat", "from_scipy", "MatFileDependencyError", "MatFileError"]

_HDF5 = b"\x89HDF\r\n\x1a\n"

_HINT = "install tapegrad's MatConvNet extra: pip install 'tapegrad[matconvnet]'"


class MatFileDependencyError(TapegradError, ImportError):
    """scipy (``.mat`` v5) or h5py (v7.3) is missing."""


def read_mat(path, *, max_bytes: int = MAX_BYTES, max_items: int = MAX_ITEMS,
             max_depth: int = MAX_DEPTH, names=None) -> dict[str, Any]:
    """The top-level variables of a MATLAB file (those in ``names``, or all),
    decoded (see the module notes). The file is read as a hostile one: any
    truncated, corrupt or foreign file, or one declaring more than the limits
    (:mod:`._matcheck`), raises :class:`MatFileError` naming the file and the
    problem before anything of that size is allocated.

    >>> read_mat("imagenet-vgg-f.mat")["layers"][0]["type"]      # 'conv'
    """
    path = os.fspath(path)
    budget = Budget(path, max_bytes, max_items, max_depth)
    with open(path, "rb") as fh:  # a missing or unreadable file: the OSError as it is
        size = fh.seek(0, 2)
        fh.seek(0)
        head = fh.read(128)
        fh.seek(512)
        hdf5 = fh.read(8) == _HDF5 or head.startswith(_HDF5)
        fh.seek(0)
        if not size:
            raise budget.bad("the file is empty")
        if hdf5 or head.startswith(b"MATLAB 7.3"):
            try:
                import h5py
            except ImportError:
                raise MatFileDependencyError(f"{path} is a MATLAB v7.3 (HDF5) file, which "
                                             f"needs h5py: {_HINT}") from None
            return _checked(budget, read_v73, h5py, path, budget, names)
        try:
            import scipy.io
        except ImportError:
            raise MatFileDependencyError(f"reading the MATLAB file {path} needs scipy: "
                                         f"{_HINT}") from None
        stream = _checked(budget, checked_stream, fh, size, budget)
    raw = _checked(budget, scipy.io.loadmat, io.BytesIO(stream), squeeze_me=False,
                   struct_as_record=True, chars_as_strings=True)
    del stream
    return {k: _checked(budget, from_scipy, v) for k, v in raw.items()
            if not k.startswith("__") and (names is None or k in names)}


def _checked(budget, fn, *args, **kwargs):
    """``fn(*args)``, with whatever a damaged file makes the readers raise turned
    into a MatFileError naming the file (tapegrad's own errors pass, and so does
    MemoryError: the checks exist so that it cannot happen)."""
    try:
        return fn(*args, **kwargs)
    except (TapegradError, MemoryError):
        raise
    except RecursionError as e:
        raise budget.bad("it is nested too deeply to decode (lower max_depth)") from e
    except Exception as e:  # noqa: BLE001 - anything a damaged file makes scipy/h5py raise
        raise budget.bad(f"{type(e).__name__}: {e}") from e


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
