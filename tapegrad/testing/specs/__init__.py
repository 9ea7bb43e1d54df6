"""The table of op specs: one entry per differentiable op of ``tapegrad.ops``.

Each family has a module here (``specs/conv.py`` for ``ops/conv.py``) that
lists :class:`OpSpec` entries. The test suite gradchecks every entry (and
gradgradchecks those marked ``twice``), and a coverage test fails when an op
in ``tapegrad.ops.__all__`` has no spec and is not listed in
:data:`NOT_DIFFERENTIABLE` -- so a new op cannot be added without one.
``tapegrad check --device cuda`` runs the same table on a GPU.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

FAMILIES = ("elementwise", "activation", "reduction", "shape", "linalg", "conv", "pool", "norm",
            "loss", "vl_loss", "dropout", "distance")

# ops whose results carry no gradient (helpers, metrics): no gradcheck
NOT_DIFFERENTIABLE = {"sign", "accuracy", "topk_error", "cast"}


@dataclass
class OpSpec:
    """``fn(*tensors)`` evaluated at ``inputs(rng)`` (float64 arrays, kept
    away from kinks); ``label`` tells several specs of one op apart."""

    name: str
    fn: Callable
    inputs: Callable[[np.random.Generator], list]
    label: str = ""
    twice: bool = False  # also check second derivatives
    atol: float = 1e-5
    rtol: float = 1e-3
    eps: float = 1e-6
    extra: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.name}[{self.label}]" if self.label else self.name


def all_specs() -> list[OpSpec]:
    out = []
    for fam in FAMILIES:
        try:
            mod = importlib.import_module(f"{__name__}.{fam}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{fam}":
                raise
            continue
        out.extend(mod.SPECS)
    return out
