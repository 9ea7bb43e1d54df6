"""PyTorch's ``torch.utils`` counterparts: activation checkpointing.

>>> from tapegrad.utils import checkpoint, checkpoint_sequential
>>> y = checkpoint(block, x)        # block's activations recomputed in backward

``tapegrad.utils.data`` is :mod:`tapegrad.data` (``Dataset``, ``DataLoader``),
under PyTorch's name (``import tapegrad.utils.data`` works as ``import torch.utils.data``).
"""

from . import checkpoint  # the module, callable as the function (torch.utils.checkpoint's two uses)
from .checkpoint import checkpoint_sequential, is_recomputing

__all__ = ["checkpoint", "checkpoint_sequential", "is_recomputing", "data"]


def __getattr__(name):
    if name == "data":  # torch.utils.data's name for tapegrad.data (tapegrad/utils/data.py)
        import importlib

        return importlib.import_module(".data", __name__)
    raise AttributeError(f"module 'tapegrad.utils' has no attribute {name!r}")
