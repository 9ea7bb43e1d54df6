"""MATLAB v7.3 ``.mat`` files (HDF5 behind a 512-byte text header) through h5py,
read defensively.

MATLAB's layout: every variable is a dataset or a group carrying a
MATLAB_class attribute; arrays are stored with their dimensions reversed (HDF5
is row-major, MATLAB column-major), so ``dataset[()].T`` has MATLAB's shape. A
struct is a group with one member per field (MATLAB_fields lists their order).
A cell is a dataset of object references into the ``#refs#`` group; so is each
field of a struct *array* (one reference per element). Empty arrays are a
dataset of their dimensions with the MATLAB_empty attribute. Chars are UTF-16
code units (uint16).

HDF5 can make a reader open other files (external links, external raw storage,
virtual datasets, filter plugins) and declare datasets far larger than the file
(unwritten chunks read as the fill value). MATLAB writes none of these, so
:func:`read_v73` first walks every link of the file and refuses them before any
data is read, then checks each dataset's declared size against the budget
before reading it, and refuses reference cycles and soft links.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._matcheck import count

__all__ = ["read_v73"]

_NUMERIC = {"double": np.float64, "single": np.float32, "int8": np.int8, "uint8": np.uint8,
            "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
            "int64": np.int64, "uint64": np.uint64}
_BUILTIN_FILTERS = {1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit",
                    6: "scaleoffset"}  # everything else would load an HDF5 plugin library
_MAX_ATTR = 1 << 16  # bytes of a MATLAB_class / MATLAB_empty attribute
_MAX_DIMS = 32


def read_v73(h5py, path, budget, names=None) -> dict[str, Any]:
    """The top-level variables of the v7.3 file at ``path`` (those in ``names``,
    or all), decoded as :func:`tapegrad.compat._matfile.read_mat` describes."""
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise budget.bad(f"it is not a readable HDF5 (MATLAB v7.3) file ({e}); truncated?") \
            from e
    with f:
        reader = _Reader(h5py, f, budget)
        reader.walk(f)  # every link and dataset checked before any data is read
        return {k: reader.value(f[k], 0, f"variable {k!r}") for k in f
                if not k.startswith("#") and (names is None or k in names)}


class _Reader:
    def __init__(self, h5py, f, budget):
        self.h5py, self.f, self.budget = h5py, f, budget
        self.seen: set = set()  # objects checked (fileno, address)
        self.open: set = set()  # objects being decoded: a reference back to one is a cycle

    def bad(self, why):
        return self.budget.bad(why)

    def key(self, obj):
        info = self.h5py.h5o.get_info(obj.id)
        return info.fileno, info.addr

    # ------------------------------------------------------------- structure
    def walk(self, root):
        """Check every object reachable from ``root`` through links, iteratively
        (a group may hard-link to itself: each object is visited once)."""
        h5py = self.h5py
        stack = [root]
        while stack:
            obj = stack.pop()
            k = self.key(obj)
            if k in self.seen:
                continue
            self.seen.add(k)
            self.budget.take_items(1, f"the HDF5 object {obj.name}")
            if isinstance(obj, h5py.Dataset):
                self.check_dataset(obj)
                continue
            if not isinstance(obj, h5py.Group):
                continue  # a committed datatype: no data
            for name in obj:
                link = obj.get(name, getlink=True)
                where = f"{obj.name.rstrip('/')}/{name}"
                if isinstance(link, h5py.ExternalLink):
                    raise self.bad(f"{where} is an HDF5 external link to {link.filename!r}; "
                                   "tapegrad opens no file but the one it was given")
                if isinstance(link, h5py.SoftLink):
                    raise self.bad(f"{where} is an HDF5 soft link to {link.path!r}; MATLAB "
                                   "writes none (and soft links can cycle)")
                if not isinstance(link, h5py.HardLink):
                    raise self.bad(f"{where} is an HDF5 link of an unknown kind")
                stack.append(obj[name])

    def check_dataset(self, ds):
        h5py = self.h5py
        if ds.external:
            files = sorted({str(e[0]) for e in ds.external})
            raise self.bad(f"{ds.name} keeps its data in other files ({files}: HDF5 external "
                           "storage); tapegrad opens no file but the one it was given")
        if ds.is_virtual:
            raise self.bad(f"{ds.name} is an HDF5 virtual dataset (its data lies in other "
                           "files); tapegrad opens no file but the one it was given")
        plist = ds.id.get_create_plist()
        for i in range(plist.get_nfilters()):
            fid = plist.get_filter(i)[0]
            if fid not in _BUILTIN_FILTERS:
                raise self.bad(f"{ds.name} is compressed with HDF5 filter {fid}, which would "
                               "load a plugin library; MATLAB uses deflate only")
        if ds.shape is None:
            raise self.bad(f"{ds.name} has a null dataspace (no data)")
        if len(ds.shape) > _MAX_DIMS:
            raise self.bad(f"{ds.name} has {len(ds.shape)} dimensions (at most {_MAX_DIMS})")
        dt = ds.dtype
        if not (dt.kind in "biuf" or h5py.check_dtype(ref=dt) is h5py.Reference
                or (dt.names and len(dt.names) == 2)):
            raise self.bad(f"{ds.name} has HDF5 type {dt}, which MATLAB does not write")
        if count(ds.shape) * dt.itemsize > self.budget.max_bytes:
            raise self.bad(f"{ds.name} declares {ds.shape[::-1]} elements of {dt} "
                           f"({count(ds.shape) * dt.itemsize} bytes), more than max_bytes="
                           f"{self.budget.max_bytes}; if you trust the file, pass a larger "
                           "load_simplenn(..., max_bytes=...)")

    def deref(self, ref, where):
        """The object a reference points to, checked as :meth:`walk` checks."""
        if not ref:
            raise self.bad(f"{where} holds a null HDF5 reference")
        try:
            obj = self.f[ref]
        except (KeyError, ValueError) as e:
            raise self.bad(f"{where} holds an HDF5 reference that points nowhere ({e})") from e
        self.walk(obj)  # a no-op for an object the first walk reached
        return obj

    def attr(self, obj, name):
        """A small attribute, its size checked before it is read."""
        if name not in obj.attrs:
            return None
        a = obj.attrs.get_id(name)
        if a.shape is None or count(a.shape) * a.dtype.itemsize > _MAX_ATTR:
            raise self.bad(f"{obj.name}'s {name} attribute has the shape {a.shape} of "
                           f"{a.dtype}, not a short value")
        return obj.attrs[name]

    def attr_str(self, obj, name):
        a = self.attr(obj, name)
        if a is None:
            return None
        if isinstance(a, np.ndarray) and a.size == 1:
            a = a.item()
        if isinstance(a, bytes):
            return a.decode("latin-1")
        if isinstance(a, str):
            return a
        raise self.bad(f"{obj.name}'s {name} attribute is a {type(a).__name__}, not a string")

    def field_order(self, group):
        names = self.attr(group, "MATLAB_fields")
        if names is None:
            return list(group.keys())
        self.budget.take_items(len(np.ravel(names)), f"{group.name}'s field names")
        order = [b"".join(np.ravel(n).astype("S1").tolist()).decode("latin-1")
                 for n in np.ravel(names)]
        return [n for n in order if n in group] + [k for k in group if k not in order]

    # -------------------------------------------------------------- decoding
    def value(self, obj, depth, where) -> Any:
        self.budget.check_depth(depth, where)
        k = self.key(obj)
        if k in self.open:
            raise self.bad(f"{where} ({obj.name}) contains itself: an HDF5 reference cycle")
        self.open.add(k)
        try:
            return self.decode(obj, depth, where)
        finally:
            self.open.discard(k)

    def refs(self, ds, depth, where):
        """The objects a reference dataset points to, decoded (C order of the
        reversed dims = MATLAB's column-major order)."""
        self.budget.take_items(ds.size, f"{where} (a {'x'.join(map(str, ds.shape[::-1]))} "
                                        "cell)")
        self.budget.take_bytes(ds.size * ds.dtype.itemsize, where)
        return [self.value(self.deref(r, where), depth + 1, f"{where}{{{i + 1}}}")
                for i, r in enumerate(np.ravel(ds[()]))]

    def decode(self, obj, depth, where):
        h5py = self.h5py
        cls = self.attr_str(obj, "MATLAB_class")
        if isinstance(obj, h5py.Group):
            if cls not in (None, "struct"):
                raise self.bad(f"{where} ({obj.name}) is of class {cls} (objects and function "
                               "handles are not supported)")
            names = self.field_order(obj)
            fields = {k: obj[k] for k in names}
            # a struct array: every field is a dataset of references, one per element
            is_ref = [isinstance(d, h5py.Dataset) and h5py.check_dtype(ref=d.dtype)
                      is h5py.Reference and self.attr_str(d, "MATLAB_class") is None
                      for d in fields.values()]
            if fields and all(is_ref):
                cols = {k: self.refs(d, depth, f"{where}.{k}") for k, d in fields.items()}
                n = len(next(iter(cols.values())))
                if any(len(c) != n for c in cols.values()):
                    raise self.bad(f"{where} is a struct array whose fields have different "
                                   "numbers of elements")
                items = [{k: cols[k][i] for k in names} for i in range(n)]
                return items[0] if n == 1 else items
            return {k: self.value(d, depth + 1, f"{where}.{k}") for k, d in fields.items()}
        if not isinstance(obj, h5py.Dataset):
            raise self.bad(f"{where} ({obj.name}) is neither an HDF5 group nor a dataset")
        empty = self.attr(obj, "MATLAB_empty")
        if empty is not None and np.ravel(empty).size and np.ravel(empty)[0]:
            return self.empty(obj, cls, where)
        if cls == "cell" or h5py.check_dtype(ref=obj.dtype) is h5py.Reference:
            return self.refs(obj, depth, where)
        dt = obj.dtype
        shape = "x".join(map(str, obj.shape[::-1]))
        if dt.names:
            raise self.bad(f"{where} is complex; simplenn networks hold real arrays only")
        target = np.dtype(_NUMERIC.get(cls, dt))
        if cls == "char":
            self.budget.take_items(count(obj.shape[1:]), f"{where} (a {shape} char array)")
            target = np.dtype("U1")
        self.budget.take_bytes(obj.size * max(dt.itemsize, target.itemsize),
                               f"{where} (a {shape} {cls} array)")
        arr = np.asarray(obj[()]).T  # MATLAB's shape (a Fortran-ordered view)
        if cls == "char":
            return self.chars(arr, where)
        if cls == "logical":
            return arr.astype(bool)
        if cls in _NUMERIC:
            return arr.astype(_NUMERIC[cls], copy=False)
        raise self.bad(f"{where} ({obj.name}) has an unknown MATLAB class {cls!r}")

    def empty(self, obj, cls, where):
        if cls == "char":
            return ""
        if cls in ("cell", "struct"):
            return [] if cls == "cell" else {}
        if obj.dtype.kind not in "iu" or obj.ndim > 1 or obj.size > _MAX_DIMS:
            raise self.bad(f"{where} is marked empty but its dimensions are "
                           f"{obj.shape} {obj.dtype}, not a short list of integers")
        dims = tuple(int(d) for d in np.ravel(obj[()])) if obj.size else (0, 0)
        if count(dims):
            raise self.bad(f"{where} is marked empty (MATLAB_empty) but declares dimensions "
                           f"{'x'.join(map(str, dims))} ({count(dims)} elements)")
        return np.zeros(dims, dtype=_NUMERIC.get(cls, np.float64))

    def chars(self, arr, where):
        """MATLAB's UTF-16 code units -> a str per row (surrogate pairs joined)."""
        if arr.dtype.kind not in "iu" or (arr.size and (arr.min() < 0 or arr.max() > 0xFFFF)):
            raise self.bad(f"{where} is a char array but holds {arr.dtype} values that are not "
                           "UTF-16 code units (0..65535)")
        rows = np.atleast_2d(arr).reshape(-1, arr.shape[-1] if arr.ndim else 1)
        try:
            out = [row.astype("<u2").tobytes().decode("utf-16-le") for row in rows]
        except UnicodeDecodeError as e:
            raise self.bad(f"{where} is a char array that is not valid UTF-16 ({e})") from e
        return out[0] if len(out) == 1 else out
