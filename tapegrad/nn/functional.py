"""PyTorch-style ``F``: ``import tapegrad.nn.functional as F`` gives the
functional ops of :mod:`tapegrad.ops` (``F.relu``, ``F.conv2d``, ...)."""

from ..ops import *  # noqa: F403
from ..ops import __all__  # noqa: F401
