"""ONNX interchange: ``load`` a ``.onnx`` graph as a trainable ``nn.Module``,
``export`` a module to ONNX, and ``backend``, an ``onnx.backend.base.Backend``
that runs ONNX's own conformance suite on tapegrad.

Needs the optional ``onnx`` package (``pip install 'tapegrad[onnx]'``); without it
``import tapegrad.onnx`` still works and each entry point raises
:class:`OnnxNotInstalledError` with that one line. Nothing here imports ``onnx``
until it is used.

>>> model = tapegrad.onnx.load("resnet50.onnx")     # Parameters for its weights
>>> y = model(x)
"""

from __future__ import annotations

import importlib
from typing import Any

from ._deps import OnnxNotInstalledError, UnsupportedOnnxError, require_onnx

__all__ = ["load", "export", "MAX_BYTES", "MAX_VALUE_BYTES", "Backend", "backend",
           "OnnxNotInstalledError", "UnsupportedOnnxError", "require_onnx"]


from .reader import MAX_BYTES, MAX_VALUE_BYTES  # noqa: E402 - imports no onnx


def load(model: Any, *, check: bool = True, base_dir=None, max_bytes: int = MAX_BYTES,
         max_value_bytes: int = MAX_VALUE_BYTES):
    """The ONNX graph at ``model`` (a path, bytes or an ``onnx.ModelProto``) as a
    :class:`tapegrad.nn.Module`: float initializers become ``nn.Parameter``s,
    ``model(*inputs)`` takes one Tensor per graph input, in order.

    Untrusted files are safe to load: external data is read only from regular
    files inside the model's folder (``base_dir=`` for bytes and protos, which
    otherwise read none), and ``max_bytes`` (file + external data + values folded
    at load, in total) and ``max_value_bytes`` (any one value) bound what a small
    file can make it allocate; raise them for a model you trust. Malformed or
    oversized models raise ``SerializationError`` or :class:`UnsupportedOnnxError`
    naming the file and the node (docs/onnx.md, "Untrusted models").

    >>> m = tapegrad.onnx.load("lenet.onnx"); loss = m(x).sum(); loss.backward()
    """
    require_onnx("tapegrad.onnx.load")
    from .importer import load as _load

    return _load(model, check=check, base_dir=base_dir, max_bytes=max_bytes,
                 max_value_bytes=max_value_bytes)


def export(*args: Any, **kwargs: Any):
    """Write ``model`` as an ONNX graph (see :mod:`tapegrad.onnx.exporter`).

    >>> tapegrad.onnx.export(model, x, "model.onnx")
    """
    require_onnx("tapegrad.onnx.export")
    from .exporter import export as _export

    return _export(*args, **kwargs)


def __getattr__(name: str):
    # the backend module subclasses onnx's classes, so it is imported on first use
    if name in ("Backend", "backend"):
        require_onnx(f"tapegrad.onnx.{name}")
        mod = importlib.import_module(".backend", __name__)
        return mod if name == "backend" else mod.Backend
    raise AttributeError(f"module 'tapegrad.onnx' has no attribute {name!r}")
