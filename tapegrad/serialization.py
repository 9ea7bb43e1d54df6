"""``tapegrad.save`` / ``tapegrad.load``: state dicts to ``.npz``, without pickle.

A checkpoint is an ordinary NumPy ``.npz`` archive: every Tensor or array is
one entry (named after its key path, so ``np.load`` shows
``features.0.weight``), and one entry ``__tapegrad__`` holds a JSON
description of the object's structure: nested dicts (any str/int/float/bool
keys), lists, tuples, and ints/floats/strings/bools/None, with references to
the array entries. Nothing is pickled, and loading uses
``np.load(allow_pickle=False)``, so a checkpoint cannot run code.

>>> tapegrad.save({"model": model.state_dict(), "optim": opt.state_dict(),
...                "epoch": 3}, "ckpt.npz")
>>> ckpt = tapegrad.load("ckpt.npz")
>>> model.load_state_dict(ckpt["model"])
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from .device import device_of_array, get_device
from .errors import SerializationError
from .tensor import Tensor, _wrap

__all__ = ["save", "load", "SerializationError"]

_META = "__tapegrad__"
_FORMAT = "tapegrad-npz"
_VERSION = 1


def _host(a):
    return a.get() if device_of_array(a).type == "cuda" else np.asarray(a)


class _Encoder:
    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def _name(self, path):
        base = ".".join(str(p) for p in path) or "value"
        base = base.replace("/", "_")
        if base.startswith("__"):
            base = "_" + base
        name, i = base, 1
        while name in self.arrays:
            name, i = f"{base}#{i}", i + 1
        return name

    def encode(self, obj, path):
        if isinstance(obj, Tensor):
            name = self._name(path)
            self.arrays[name] = _host(obj.data)
            return {"$tensor": name, "requires_grad": bool(obj.requires_grad)}
        if hasattr(obj, "__array_interface__") or hasattr(obj, "__cuda_array_interface__"):
            arr = _host(obj)
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
        raise SerializationError(
            f"save: cannot store a {type(obj).__name__} at {_where(path)}: checkpoints hold "
            "Tensors, arrays, numbers, strings, None, and dicts/lists/tuples of them "
            "(a Module? save module.state_dict() instead)")


def _where(path):
    return "the top level" if not path else "key " + ".".join(str(p) for p in path)


def save(obj, f) -> None:
    """Write ``obj`` (a state dict, or nested dicts/lists of Tensors, arrays and
    small metadata) to ``f`` (a path or a binary file object) as ``.npz``.

    Device arrays are copied to the host. A path is written atomically (a
    temporary file renamed into place), so a crash never leaves half a file.
    """
    enc = _Encoder()
    tree = enc.encode(obj, ())
    meta = json.dumps({"format": _FORMAT, "version": _VERSION, "tree": tree})
    entries = {_META: np.array(meta), **enc.arrays}
    if hasattr(f, "write"):
        np.savez(f, **entries)
        return
    path = os.fspath(f)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            np.savez(fh, **entries)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _bad(f, why):
    name = getattr(f, "name", f)
    return SerializationError(f"load: {name!s} is not a readable tapegrad checkpoint: {why}")


def load(f, device=None):
    """Read a checkpoint written by :func:`save`.

    Tensors come back as Tensors on ``device`` (default: CPU), arrays as NumPy
    arrays, and the rest as saved. A truncated, corrupt or foreign file raises
    :class:`SerializationError`.
    """
    dev = get_device(device if device is not None else "cpu")
    try:
        archive = np.load(f, allow_pickle=False)
    except FileNotFoundError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure means "not ours"
        raise _bad(f, f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise _bad(f, "it is a single .npy array, not an .npz archive written by tapegrad.save")
    with archive:
        try:
            if _META not in archive.files:
                raise _bad(f, f"the archive has no {_META!r} entry (a plain .npz? read it with "
                              "numpy.load)")
            meta = json.loads(str(archive[_META]))
            if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
                raise _bad(f, "unrecognised metadata")
            if meta.get("version", 0) > _VERSION:
                raise _bad(f, f"format version {meta['version']} is newer than this "
                              f"tapegrad reads ({_VERSION})")
            return _decode(meta["tree"], archive, dev, f)
        except SerializationError:
            raise
        except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile,
                json.JSONDecodeError, TypeError) as exc:
            raise _bad(f, f"{type(exc).__name__}: {exc}") from exc


def _decode(node, archive, dev, f):
    if isinstance(node, list):
        return [_decode(v, archive, dev, f) for v in node]
    if not isinstance(node, dict):
        return node
    if "$tensor" in node:
        arr = archive[node["$tensor"]]
        if dev.type == "cuda":
            with dev.use():
                arr = dev.xp.asarray(arr)
        t = _wrap(arr, dev, None, 0, False)
        if node.get("requires_grad") and t.dtype.kind in "fc":
            t.requires_grad = True
        return t
    if "$array" in node:
        return archive[node["$array"]]
    if "$dict" in node:
        return {k: _decode(v, archive, dev, f) for k, v in node["$dict"]}
    if "$tuple" in node:
        return tuple(_decode(v, archive, dev, f) for v in node["$tuple"])
    if "$float" in node:
        return float(node["$float"])
    raise _bad(f, f"unknown entry {sorted(node)!r} in the metadata")
