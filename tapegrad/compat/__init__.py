"""Models from other frameworks: :mod:`tapegrad.compat.matconvnet` reads
MatConvNet's simplenn networks and evaluates them as ``vl_simplenn`` does;
:mod:`tapegrad.compat.caffe` reads Caffe's ``.prototxt`` / ``.caffemodel`` files
(imported on first use: it needs ``protobuf``, ``pip install 'tapegrad[caffe]'``).

>>> from tapegrad.compat.matconvnet import load_simplenn, simplenn
>>> from tapegrad.compat import caffe
"""

import importlib

from . import matconvnet

__all__ = ["matconvnet", "caffe"]


def __getattr__(name):
    if name == "caffe":
        return importlib.import_module(".caffe", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
