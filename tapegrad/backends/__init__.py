"""PyTorch's ``torch.backends`` flags, for scripts that set or read them.

tapegrad uses neither cuDNN nor Apple's MPS: ``cudnn.is_available()`` and
``mps.is_available()`` are False, and the cuDNN flags (``benchmark``,
``deterministic``, ``enabled``, ``allow_tf32``) are kept as set and change nothing.
"""

from . import cudnn, mps

__all__ = ["cudnn", "mps"]
