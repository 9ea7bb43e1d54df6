"""``tapegrad.autograd``: PyTorch's ``torch.autograd`` names, and seeing inside the tape.

- ``detect_anomaly()`` / ``set_detect_anomaly(bool)`` / ``is_anomaly_enabled()``:
  the line that made a NaN, and why (the masked-branch NaN of
  ``where(mask, log(x), 0)`` explained); see :mod:`.anomaly`.
- ``profile()``: Caffe's ``debug_info`` as data -- one record per op (mean
  |output|, mean |gradient|, saved bytes, forward and backward time), as a
  table or CSV; see :mod:`.profile`.
- ``grad``, ``backward``, ``Function``: the engine's, under torch.autograd's names.

Both tools are free when off: they swap instrumented code in while on.

>>> with tapegrad.autograd.detect_anomaly():
...     loss.backward()
"""

from ..engine import backward, grad
from ..errors import AnomalyError
from ..tape import Function
from .anomaly import (
    ForwardNote,
    detect_anomaly,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    set_detect_anomaly,
)
from .profile import OpRecord, profile

__all__ = [
    "backward", "grad", "Function", "AnomalyError", "detect_anomaly", "set_detect_anomaly",
    "is_anomaly_enabled", "is_anomaly_check_nan_enabled", "ForwardNote", "profile", "OpRecord",
]
