"""Small helpers shared by the layer files."""

from __future__ import annotations

import math

from ..creation import empty
from . import init
from .parameter import Parameter


def new_param(shape, device, dtype):
    return Parameter(empty(*shape, dtype=dtype, device=device or "cpu"))


def default_reset(weight, bias, fan_in=None):
    """PyTorch's Linear/Conv default: kaiming_uniform_(a=sqrt(5)) weight, i.e.
    U(+-1/sqrt(fan_in)), and bias U(+-1/sqrt(fan_in))."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        if fan_in is None:
            fan_in, _ = init.calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        init.uniform_(bias, -bound, bound)
