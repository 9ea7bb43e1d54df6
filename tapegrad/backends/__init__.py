"""PyTorch's ``torch.backends`` flags, for scripts that set or read them.

tapegrad uses neither cuDNN nor Apple's MPS: ``cudnn.is_available()`` and
``mps.is_available()`` are False, and the cuDNN flags (``benchmark``,
``deterministic``, ``enabled``, ``allow_tf32``) are kept as set and change nothing.
``onednn`` (also ``mkldnn``, PyTorch's name) switches the CPU layers' oneDNN paths.
"""

from . import cudnn, mps, onednn

mkldnn = onednn  # torch.backends.mkldnn.enabled / .is_available() / .flags(...)

__all__ = ["cudnn", "mps", "onednn", "mkldnn"]
