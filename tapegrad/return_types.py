"""PyTorch's ``torch.return_types``: the named tuples some ops return."""

from __future__ import annotations

from typing import NamedTuple


class ValuesIndices(NamedTuple):
    """What ``x.max(dim)`` / ``x.min(dim)`` return, as PyTorch's ``return_types``."""

    values: object
    indices: object
