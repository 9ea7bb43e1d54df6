"""Models from other frameworks: :mod:`tapegrad.compat.matconvnet` reads
MatConvNet's simplenn networks and evaluates them as ``vl_simplenn`` does.

>>> from tapegrad.compat.matconvnet import load_simplenn, simplenn
"""

from . import matconvnet

__all__ = ["matconvnet"]
