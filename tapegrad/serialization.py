"""``tapegrad.save`` / ``tapegrad.load``: state dicts and whole modules to ``.npz``,
without pickle.

A checkpoint is an ordinary NumPy ``.npz`` archive: every Tensor or array is
one entry (named after its key path, so ``np.load`` shows
``features.0.weight``), and one entry ``__tapegrad__`` holds a JSON
description of the object's structure: nested dicts (any str/int/float/bool
keys), lists, tuples, and ints/floats/strings/bools/None, with references to
the array entries. Nothing is pickled and nothing is ever unpickled, so a
checkpoint cannot run code.

Checkpoints come from strangers, so :func:`load` reads them defensively: the
zip directory and every ``.npy`` header are checked before any array is
allocated, the metadata must have exactly the forms :func:`save` writes, and
the limits below bound what a small hostile file can make it do. Raise them
per call (``load(path, max_bytes=8 << 30)``) for a checkpoint you trust.

>>> tapegrad.save({"model": model.state_dict(), "optim": opt.state_dict(),
...                "epoch": 3}, "ckpt.npz")
>>> ckpt = tapegrad.load("ckpt.npz")
>>> model.load_state_dict(ckpt["model"])

Whole modules (``torch.save(model, path)``) are stored as data too, never as
code: each module's class as ``"module.qualname"``, its parameters and buffers
(array entries named by their path, ``encoder.0.weight``), its submodules, its
training flag, and its other attributes: numbers, strings, bools, None,
dtypes, devices, module-level functions and classes (by name), tensors, and
lists/tuples/dicts of them. Anything else (a lambda, an open file, an object of
another class) is refused at save, naming the attribute's path. Shared
submodules and tied parameters stay shared. Hooks are not saved (a loaded
module has none), as optimizer state is not: save ``opt.state_dict()`` beside it.

Loading rebuilds each module with ``cls.__new__(cls)`` and ``Module.__init__``,
then restores its registries and attributes; the class's own ``__init__`` never
runs. A class is only ever looked up in an allow-list, never imported by the
name in the file: every class of ``tapegrad.nn``, the functions of
``tapegrad.ops`` / ``tapegrad.nn.functional``, and what
:func:`add_safe_globals` registered (your own ``nn.Module`` subclasses; also
:func:`safe_globals` for a ``with`` block, :func:`get_safe_globals`,
:func:`clear_safe_globals`). As in PyTorch 2.6+, ``load``'s default
``weights_only=True`` refuses whole modules (unless every class and function
the file names was registered): pass ``weights_only=False`` for a file you trust.

>>> tapegrad.save(model, "model.npz")
>>> tapegrad.serialization.add_safe_globals([Net])
>>> model = tapegrad.load("model.npz", weights_only=False)
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import os
import struct
import zipfile

import numpy as np

from . import serialization_modules as _modules
from .device import Device, cpu, device_of_array, get_device, to_host
from .errors import ArgumentError, ArgumentTypeError, SerializationError
from .nn.module import Module
from .serialization_modules import (
    add_safe_globals,
    clear_safe_globals,
    get_safe_globals,
    safe_globals,
)
from .serialization_modules import where as _where
from .tensor import Tensor, _wrap

__all__ = ["save", "load", "SerializationError", "add_safe_globals", "get_safe_globals",
           "clear_safe_globals", "safe_globals"]

_META = "__tapegrad__"
_FORMAT = "tapegrad-npz"
_VERSION = 2  # 2: module trees (written only where a file holds one; 1 otherwise)

MAX_BYTES = 1 << 30
"""Default ``max_bytes`` of :func:`load`: the most bytes the archive's compressed
entries may inflate to, in total (uncompressed entries, which is what
:func:`save` writes, are bounded by the file's own size instead)."""
MAX_ENTRIES = 100_000
"""Default ``max_entries`` of :func:`load`: the most entries in the zip archive."""
MAX_DEPTH = 100
"""Default ``max_depth`` of :func:`load`, and the most :func:`save` writes: the
nesting of dicts/lists/tuples in the saved object."""

_MAX_HEADER = 10_000  # bytes in an .npy header (numpy's own limit)
_CHUNK = 1 << 20  # bytes read at a time into the preallocated array
_FLOAT_WORDS = ("nan", "inf", "-inf")  # what repr() writes for non-finite floats
_SCALARS = (str, int, float, bool, type(None))
_UNSAFE = str.maketrans({"/": "_", "\\": "_", "\x00": "_"})  # in entry names


class _Encoder:
    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}
        self.modules_state = _modules.Encoding()
        self.version = 1

    def _name(self, path):
        base = ".".join(str(p) for p in path) or "value"
        # zip readers cut names at NUL and turn "\\" into "/" on Windows; names are UTF-8
        base = base.translate(_UNSAFE).encode("utf-8", "replace").decode("utf-8")
        if base.startswith("__"):
            base = "_" + base
        name, i = base, 1
        while name in self.arrays:
            name, i = f"{base}#{i}", i + 1
        return name

    def encode(self, obj, path):
        if len(path) > MAX_DEPTH:
            raise SerializationError(f"save: the object is nested more than MAX_DEPTH="
                                     f"{MAX_DEPTH} levels deep (at {_where(path[:3])}...); "
                                     "flatten it")
        if isinstance(obj, Tensor):
            node = _modules.encode_tensor(self, obj, path)  # inside a module tree
            if node is not None:
                return node
            return {"$tensor": self.store(obj, path), "requires_grad": bool(obj.requires_grad)}
        if not isinstance(obj, type) and (  # np.float64 the class has the attribute too
                hasattr(obj, "__array_interface__") or hasattr(obj, "__cuda_array_interface__")
                or device_of_array(obj) is not cpu):
            arr = to_host(obj)
            if arr.dtype == object:
                raise SerializationError(f"save: the array at {_where(path)} has dtype object, "
                                         "which cannot be stored without pickle")
            name = self._name(path)
            self.arrays[name] = arr
            return {"$array": name}
        if obj is None or isinstance(obj, (bool, int, str)):
            return obj
        if isinstance(obj, float):
            return obj if np.isfinite(obj) else {"$float": repr(obj)}
        if isinstance(obj, np.generic):
            return self.encode(obj.item(), path)
        if isinstance(obj, dict):
            items = []
            for k, v in obj.items():
                if not isinstance(k, (str, int, float, bool)) and k is not None:
                    raise SerializationError(f"save: dict key {k!r} at {_where(path)} is a "
                                             f"{type(k).__name__}; keys must be str/int/float")
                items.append([k, self.encode(v, (*path, k))])
            return {"$dict": items}
        if isinstance(obj, (list, tuple)):
            enc = [self.encode(v, (*path, i)) for i, v in enumerate(obj)]
            return enc if isinstance(obj, list) else {"$tuple": enc}
        if isinstance(obj, Module):
            self.version = 2
            return _modules.encode_module(self, obj, path)
        node = _modules.encode_other(obj, path)  # a dtype, device, function or class
        if node is not None:
            self.version = 2
            return node
        raise SerializationError(
            f"save: cannot store a {type(obj).__name__} at {_where(path)}: checkpoints hold "
            "Tensors, arrays, numbers, strings, None, dtypes, devices, nn.Modules, "
            "module-level functions and classes, and dicts/lists/tuples of them (in a "
            "module's attribute? keep it out of the module, or save module.state_dict())")

    def store(self, t, path):
        """A new array entry for Tensor ``t``; its name."""
        name = self._name(path)
        self.arrays[name] = to_host(t.array)
        return name


def save(obj, f) -> None:
    """Write ``obj`` (a state dict, a whole ``nn.Module``, or nested dicts/lists of
    Tensors, arrays, modules and small metadata) to ``f`` (a path or a binary file
    object) as ``.npz``.

    Device arrays are copied to the host. A path is written atomically and
    durably: to ``<path>.tmp<pid>``, flushed to disk, renamed into place, and
    the folder synced, so a crash leaves the previous file or the new one.
    Temporaries of the same path left by writers that died (``kill -9``) are
    removed; those of running processes are not touched.
    """
    enc = _Encoder()
    tree = enc.encode(obj, ())
    meta = json.dumps({"format": _FORMAT, "version": enc.version, "tree": tree})
    entries = {_META: np.array(meta), **enc.arrays}
    if hasattr(f, "write"):
        np.savez(f, **entries)
        return
    path = os.fspath(f)
    _remove_stale_temporaries(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **entries)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _sync_folder(path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _remove_stale_temporaries(path):
    """Delete ``<path>.tmp<pid>`` files whose writer process no longer exists."""
    if os.name != "posix":  # no safe liveness probe (os.kill(pid, 0) would kill on Windows)
        return
    folder, base = os.path.split(os.path.abspath(path))
    prefix = base + ".tmp"
    try:
        names = os.listdir(folder)
    except OSError:
        return  # the write below reports an unusable folder
    for name in names:
        pid = name[len(prefix):]
        if not (name.startswith(prefix) and pid.isdigit()) or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):  # removed concurrently, or not ours to remove
            os.remove(os.path.join(folder, name))


def _alive(pid):
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # exists under another user (or not a pid at all: leave it)
    return True


def _sync_folder(path):
    """Make the rename itself durable (POSIX: fsync the directory entry)."""
    if os.name != "posix":
        return
    # the file is already in place: a folder that cannot be synced (some network
    # file systems) must not turn a completed save into an error
    with contextlib.suppress(OSError):
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _bad(f, why):
    return _refuse(f, f"is not a readable tapegrad checkpoint: {why}")


def _refuse(f, why):
    return SerializationError(f"load: {getattr(f, 'name', f)!s} {why}")


def load(f, map_location=None, pickle_module=None, *, weights_only: bool | None = None,
         mmap: bool | None = None, device=None, max_bytes: int = MAX_BYTES,
         max_entries: int = MAX_ENTRIES, max_depth: int = MAX_DEPTH):
    """Read a checkpoint written by :func:`save`.

    ``weights_only`` (PyTorch's; ``None`` means True, as in PyTorch 2.6+):
    tensors, arrays and plain data load either way; a whole module loads with
    ``weights_only=False``, its classes taken only from the allow-list (see the
    module docstring and :func:`add_safe_globals`), or with True where every
    class and function it names was registered. ``pickle_module`` must be None:
    nothing is ever unpickled. ``mmap`` is accepted for PyTorch's signature; the
    arrays are read into memory either way.

    Tensors come back as Tensors on ``map_location`` (PyTorch's name; or
    ``device=``, the same): ``"cpu"`` (the default), ``"cuda"``, ``"cuda:N"``
    or a Device. Checkpoints hold host arrays and no devices, so one saved on
    a GPU loads anywhere: ``load(f, map_location="cuda")`` puts every tensor
    on GPU 0. Arrays come back as NumPy arrays, and the rest as saved. Any
    truncated, corrupt, foreign or hostile file raises
    :class:`SerializationError` naming the file and the problem, before
    anything large is allocated. The limits (module defaults
    :data:`MAX_BYTES` = 1 GiB, :data:`MAX_ENTRIES` = 100,000,
    :data:`MAX_DEPTH` = 100) can be raised for a file you trust:

    - ``max_bytes``: total bytes the compressed entries may inflate to (files
      from :func:`save` are uncompressed; their arrays are bounded by the file
      size, which this does not limit);
    - ``max_entries``: entries in the zip archive, and modules plus their
      parameters, buffers, submodules and attributes in its module trees;
    - ``max_depth``: nesting of dicts/lists/tuples (and of modules) in the metadata.
    """
    if pickle_module is not None:
        raise ArgumentError(f"load: pickle_module={pickle_module!r}, but tapegrad checkpoints "
                            "are never unpickled (nor pickled); pass pickle_module=None")
    if mmap is not None and not isinstance(mmap, bool):
        raise ArgumentTypeError(f"load: mmap must be None or a bool, got {mmap!r}")
    if weights_only is not None and not isinstance(weights_only, bool):
        raise ArgumentTypeError(f"load: weights_only must be None or a bool, got "
                                f"{weights_only!r}")
    dev = _load_device(map_location, device)
    opts = (max_bytes, max_entries, max_depth, weights_only is not False)
    if hasattr(f, "read"):
        reader = _read_checked(f, f, opts)
    else:
        with open(f, "rb") as fh:
            reader = _read_checked(fh, f, opts)
    remap = map_location is not None or device is not None
    return _Decoder(reader, dev, remap).decode(reader.tree)


def _load_device(map_location, device) -> Device:
    if map_location is not None and device is not None and \
            get_device(map_location) is not get_device(device):
        raise ArgumentError(f"load: map_location={map_location!r} and device={device!r} "
                            "disagree; pass one of them")
    where = map_location if map_location is not None else device
    if where is None:
        return cpu
    if isinstance(where, (str, Device)):
        return get_device(where)
    raise ArgumentError(
        f"load: map_location must be a device ('cpu', 'cuda', 'cuda:N' or a Device), got "
        f"{type(where).__name__} {where!r}; tapegrad checkpoints record no devices (every "
        "tensor is stored as a host array), so there is nothing for a dict or function to "
        "remap: pass the one device the tensors should load onto")


def _read_checked(fh, f, opts):
    try:
        return _Reader(fh, f, *opts).read()
    except SerializationError:
        raise
    except RecursionError as exc:
        raise _bad(f, "its metadata is nested too deeply to parse") from exc
    except Exception as exc:  # noqa: BLE001 - anything a damaged file makes the readers raise
        detail = str(exc) or "the data ends early"  # zipfile raises a bare EOFError
        raise _bad(f, f"{type(exc).__name__}: {detail}") from exc


class _Reader:
    """Validates an .npz checkpoint from the outside in, then reads its arrays."""

    def __init__(self, fh, f, max_bytes, max_entries, max_depth, weights_only):
        self.fh, self.f = fh, f
        self.max_bytes, self.max_entries, self.max_depth = max_bytes, max_entries, max_depth
        self.weights_only = weights_only
        self.refs: dict[str, bool] = {}  # array entry -> referenced as a Tensor
        self.kinds: dict[str, str] = {}  # array entry -> "tensor", "parameter" or "array"
        self.grad_refs: list[str] = []  # entries of Parameters that require grad
        self.module_classes: list[type] = []  # of the $module nodes, in order
        self.open_modules: set[int] = set()  # those whose node is being checked
        self.globals: dict[str, object] = {}  # allowed name -> its class or function
        self.items = 0  # modules, registry entries and attributes met

    def bad(self, why):
        return _bad(self.f, why)

    def refuse(self, why):  # a sound file that weights_only or the allow-list refuses
        return _refuse(self.f, why)

    def read(self):
        head = self.fh.read(8)
        self.fh.seek(-len(head), 1)
        if not head:
            raise self.bad("the file is empty")
        if head.startswith(b"\x93NUMPY"):
            raise self.bad("it is a single .npy array, not an .npz archive written by "
                           "tapegrad.save")
        if not head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
            raise self.bad(f"it is not an .npz archive (a zip file): it starts with {head!r}")
        self.size = self.fh.seek(0, 2)
        self._check_count(self._declared_entries())
        with zipfile.ZipFile(self.fh) as zf:
            entries = self._check_directory(zf.infolist())
            if _META not in entries:
                raise self.bad(f"the archive has no {_META!r} entry (a plain .npz? read it "
                               "with numpy.load)")
            meta = self._metadata(zf, entries[_META])
            self.check_tree(meta["tree"], ())
            headers = {}
            for name, as_tensor in self.refs.items():
                if name not in entries or name == _META:
                    raise self.bad(f"the metadata refers to an array {name!r} that the archive "
                                   "does not hold")
                headers[name] = self._npy_header(zf, entries[name], as_tensor)
            for name in self.grad_refs:
                if headers[name][3].kind != "f":
                    raise self.bad(f"entry {name!r} is a Parameter that requires grad but has "
                                   f"dtype {headers[name][3]} (only floating point can)")
            self.arrays = {name: self._read_data(zf, entries[name], *headers[name])
                           for name in headers}
        self.tree = meta["tree"]
        return self

    # ----------------------------------------------------------- zip layer
    def _check_count(self, n):
        if n > self.max_entries:
            raise self.bad(f"the archive has {n} entries, more than max_entries="
                           f"{self.max_entries}; if you trust the file, pass a larger "
                           "load(..., max_entries=...)")

    def _declared_entries(self):
        """The entry count from the end-of-directory record, before zipfile
        parses (and allocates) the whole central directory."""
        end = self.size
        tail_len = min(end, 22 + 0xFFFF + 20)  # record, its comment, the zip64 locator
        self.fh.seek(end - tail_len)
        tail = self.fh.read(tail_len)
        self.fh.seek(0)
        i = tail.rfind(b"PK\x05\x06")
        if i < 0 or len(tail) - i < 22:
            raise self.bad("it is not a complete zip archive (no end-of-directory record; "
                           "truncated?)")
        (count,) = struct.unpack_from("<H", tail, i + 10)
        if count == 0xFFFF and i >= 20 and tail[i - 20:i - 16] == b"PK\x06\x07":
            (offset,) = struct.unpack_from("<Q", tail, i - 12)
            self.fh.seek(offset)
            rec = self.fh.read(56)
            self.fh.seek(0)
            if len(rec) == 56 and rec[:4] == b"PK\x06\x06":
                (count,) = struct.unpack_from("<Q", rec, 32)
        return count

    def _check_directory(self, infos):
        self._check_count(len(infos))
        names = [i.filename for i in infos]
        if len(set(names)) != len(names):
            raise self.bad("the archive lists an entry twice")
        stored = sum(i.compress_size for i in infos)
        if stored > self.size:
            raise self.bad(f"its entries claim {stored} bytes in a {self.size}-byte file "
                           "(corrupt or overlapping entries)")
        inflated = 0
        for i in infos:
            if i.compress_type == zipfile.ZIP_STORED:
                if i.file_size != i.compress_size:
                    raise self.bad(f"entry {i.filename!r} is stored uncompressed but declares "
                                   f"{i.file_size} bytes of content in {i.compress_size}")
            elif i.compress_type == zipfile.ZIP_DEFLATED:
                inflated += i.file_size
            else:
                raise self.bad(f"entry {i.filename!r} uses zip compression method "
                               f"{i.compress_type}; numpy writes only stored or deflated")
        if inflated > self.max_bytes:
            raise self.bad(f"its compressed entries inflate to {inflated} bytes, more than "
                           f"max_bytes={self.max_bytes}; if you trust the file, pass a larger "
                           "load(..., max_bytes=...)")
        return {n[:-4]: i for n, i in zip(names, infos) if n.endswith(".npy")}

    # ----------------------------------------------------------- npy layer
    def _npy_header(self, zf, info, as_tensor):
        """``(data offset, shape, fortran order, dtype)`` of an entry, its header
        checked against the entry's size."""
        with zf.open(info) as fh:
            return self._parse_header(fh, info, as_tensor)

    def _parse_header(self, fh, info, as_tensor):
        name = info.filename
        major, minor = np.lib.format.read_magic(fh)
        if major not in (1, 2, 3) or minor != 0:
            raise self.bad(f"entry {name!r} has .npy format version {major}.{minor}")
        (hlen,) = struct.unpack("<H" if major == 1 else "<I", fh.read(2 if major == 1 else 4))
        if hlen > _MAX_HEADER:
            raise self.bad(f"entry {name!r} has a {hlen}-byte .npy header (numpy writes "
                           f"at most {_MAX_HEADER})")
        header = ast.literal_eval(fh.read(hlen).decode("utf8" if major == 3 else "latin1"))
        if not isinstance(header, dict) or set(header) != {"descr", "fortran_order", "shape"}:
            raise self.bad(f"entry {name!r} has a malformed .npy header")
        shape, fortran = header["shape"], header["fortran_order"]
        if (not isinstance(shape, tuple) or not isinstance(fortran, bool)
                or not all(type(n) is int and n >= 0 for n in shape)):
            raise self.bad(f"entry {name!r} has a malformed .npy header (shape {shape!r})")
        dtype = np.lib.format.descr_to_dtype(header["descr"])
        if dtype.hasobject:
            raise self.bad(f"entry {name!r} holds pickled Python objects (dtype "
                           f"{dtype}); tapegrad never writes nor unpickles those")
        count = math.prod(shape)
        if dtype.subdtype is not None or (dtype.itemsize == 0 and count):
            raise self.bad(f"entry {name!r} has dtype {dtype}, which numpy does not write")
        if as_tensor and dtype.kind not in "biufc":
            raise self.bad(f"entry {name!r} is stored as a Tensor but has dtype {dtype}")
        held = info.file_size - fh.tell()
        if count * dtype.itemsize != held:
            raise self.bad(f"entry {name!r} declares shape {shape} {dtype} "
                           f"({count * dtype.itemsize} bytes) but holds {held} bytes of data")
        return fh.tell(), shape, fortran, dtype

    @staticmethod
    def _read_data(zf, info, offset, shape, fortran, dtype):
        out = np.empty(math.prod(shape), dtype)  # sizes checked: this is what the file holds
        with zf.open(info) as fh:
            fh.read(offset)
            raw = memoryview(out.view(np.uint8)) if out.nbytes else memoryview(b"")
            pos = 0
            while pos < len(raw):  # a CRC error surfaces from the last read
                n = fh.readinto(raw[pos:pos + _CHUNK])
                if not n:
                    raise EOFError(f"entry {info.filename!r} ends early")
                pos += n
        return out.reshape(shape[::-1]).T if fortran else out.reshape(shape)

    # ------------------------------------------------------ metadata layer
    def _metadata(self, zf, info):
        header = self._npy_header(zf, info, False)
        if header[1] != () or header[3].kind != "U":
            raise self.bad(f"the {_META!r} entry has shape {header[1]} and dtype {header[3]}, "
                           "not a JSON string")
        text = self._read_data(zf, info, *header).item()
        try:
            meta = json.loads(text)
        except RecursionError as exc:
            raise self.bad(f"its metadata is nested too deeply (max_depth="
                           f"{self.max_depth})") from exc
        except ValueError as exc:
            raise self.bad(f"its metadata is not valid JSON ({exc})") from exc
        if not isinstance(meta, dict) or set(meta) != {"format", "version", "tree"} \
                or meta["format"] != _FORMAT:
            raise self.bad(f"its metadata is not in the {_FORMAT!r} format")
        version = meta["version"]
        if type(version) is not int or version < 1:
            raise self.bad(f"its metadata has an invalid format version {version!r}")
        if version > _VERSION:
            raise self.bad(f"format version {version} is newer than this tapegrad reads "
                           f"({_VERSION}); upgrade tapegrad")
        return meta

    def check_tree(self, node, path):
        """Accept only what _Encoder writes; collect the array references."""
        if len(path) > self.max_depth:  # the same count as _Encoder's
            raise self.bad(f"its metadata is nested more than max_depth={self.max_depth} "
                           "levels; if you trust the file, pass a larger load(..., "
                           "max_depth=...)")
        if isinstance(node, _SCALARS):
            return
        where = _where(path)
        if isinstance(node, list):
            for i, v in enumerate(node):
                self.check_tree(v, (*path, i))
            return
        keys = sorted(node) if isinstance(node, dict) else None
        if keys == ["$tensor", "requires_grad"] and isinstance(node["requires_grad"], bool):
            self.ref(node["$tensor"], "tensor", where)
        elif keys == ["$array"]:
            self.ref(node["$array"], "array", where)
        elif keys == ["$tuple"] and isinstance(node["$tuple"], list):
            for i, v in enumerate(node["$tuple"]):
                self.check_tree(v, (*path, i))
        elif keys == ["$float"] and node["$float"] in _FLOAT_WORDS:
            pass
        elif keys == ["$dict"] and isinstance(node["$dict"], list):
            for item in node["$dict"]:
                if not (isinstance(item, list) and len(item) == 2
                        and isinstance(item[0], _SCALARS)):
                    raise self.bad(f"its metadata has a malformed dict item at {where}")
                self.check_tree(item[1], (*path, item[0]))
        elif not _modules.check_node(self, node, path):  # the module-tree kinds
            raise self.bad(f"its metadata has an unknown entry at {where}: "
                           f"{json.dumps(node)[:80]}")

    def ref(self, name, kind, where, requires_grad=False):
        if not isinstance(name, str) or name in self.refs:
            raise self.bad(f"its metadata has an invalid or repeated array reference "
                           f"{name!r} at {where}")
        self.refs[name] = kind != "array"
        self.kinds[name] = kind
        if requires_grad:
            self.grad_refs.append(name)

    def count_item(self, path):
        self.items += 1
        if self.items > self.max_entries:
            raise self.bad(f"its module tree holds more than max_entries={self.max_entries} "
                           f"modules, tensors and attributes (at {_where(path)}); if you trust "
                           "the file, pass a larger load(..., max_entries=...)")


class _Decoder:
    """Builds the object from a _Reader's validated metadata and arrays."""

    def __init__(self, reader, device, remap):
        self.arrays, self.globals, self.f = reader.arrays, reader.globals, reader.f
        self.device, self.remap = device, remap  # remap: map_location was given
        self.tensors: dict[str, Tensor] = {}  # entry -> the Tensor made from it
        self.modules: list = []  # in the file's order, for $module_ref

    def bad(self, why):
        return _bad(self.f, why)

    def refuse(self, why):
        return _refuse(self.f, why)

    def tensor(self, name):
        arr = self.arrays[name]
        if self.device is not cpu:
            arr = self.device.put(arr)
        return _wrap(arr, self.device, None, 0, False)

    def decode(self, node):
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        if not isinstance(node, dict):
            return node
        kind = next(k for k in node if k.startswith("$"))
        if kind == "$tensor":
            t = self.tensors[node["$tensor"]] = self.tensor(node["$tensor"])
            if node["requires_grad"] and t.dtype.kind in "fc":
                t.requires_grad = True
            return t
        if kind == "$array":
            return self.arrays[node["$array"]]
        if kind == "$dict":
            return {k: self.decode(v) for k, v in node["$dict"]}
        if kind == "$tuple":
            return tuple(self.decode(v) for v in node["$tuple"])
        if kind == "$float":
            return float(node["$float"])
        return _modules.decode_node(self, kind, node)
