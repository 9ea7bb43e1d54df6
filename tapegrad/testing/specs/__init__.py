"""The table of op specs: one entry per differentiable op of ``tapegrad.ops``.

Each family has a module here (``specs/conv.py`` for ``ops/conv.py``) that
lists :class:`OpSpec` entries. The test suite gradchecks every entry (and
gradgradchecks those marked ``twice``), and a coverage test fails when an op
in ``tapegrad.ops.__all__`` has no spec and is not listed in
:data:`NOT_DIFFERENTIABLE` -- so a new op cannot be added without one.
``tapegrad check --device cuda`` runs the same table on a GPU.

``tests/ops/test_spec_invariants.py`` checks more of every entry: float32 in
gives float32 out and float32 gradients, inputs are not mutated, a zero-size
batch (:attr:`OpSpec.zero_size`) works, the forward matches
:attr:`OpSpec.reference`, and float16 runs close to float32 (or is refused).
Constants that follow the batch (targets, masks, per-sample weights) are
sliced to the batch size inside ``fn`` (``_T[:len(x)]``), so the same ``fn``
serves the zero-size variant.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...errors import ArgumentError

FAMILIES = ("elementwise", "activation", "reduction", "shape", "linalg", "conv", "pool",
            "normalization", "losses", "vl_loss", "dropout", "distance")

# ops whose results carry no gradient (helpers, metrics): no gradcheck
NOT_DIFFERENTIABLE = {"sign", "accuracy", "topk_error", "cast"}


def empty_batch(*positions: int) -> Callable[[list], list]:
    """A ``zero_size`` that empties axis 0 of the inputs at ``positions``.

    >>> empty_batch(0, 1)([np.ones((3, 4)), np.ones((3, 1))])[1].shape
    (0, 1)
    """

    def make(inputs):
        return [x[:0] if i in positions else x for i, x in enumerate(inputs)]

    return make


@dataclass
class OpSpec:
    """``fn(*tensors)`` evaluated at ``inputs(rng)`` (float64 arrays, kept
    away from kinks); ``label`` tells several specs of one op apart.

    ``reference``: plain NumPy of the float64 input arrays, returning what
    ``fn`` returns. ``zero_size``: maps ``inputs(rng)`` to inputs with an
    empty batch (default: axis 0 of the first input); ``None`` only with a
    ``zero_size_reason``. ``zero_size_raises``: the error a zero-size batch
    must raise, where it has no value (PyTorch refuses too). ``float16``:
    False when the op refuses float16 with a DTypeError.
    """

    name: str
    fn: Callable
    inputs: Callable[[np.random.Generator], list]
    label: str = ""
    twice: bool = False  # also check second derivatives
    atol: float = 1e-5
    rtol: float = 1e-3
    eps: float = 1e-6
    extra: dict = field(default_factory=dict)
    reference: Callable | None = None
    zero_size: Callable[[list], list] | None = empty_batch(0)
    zero_size_reason: str = ""
    zero_size_raises: type[Exception] | None = None
    float16: bool = True

    def __post_init__(self):
        if self.zero_size is None and not self.zero_size_reason:
            raise ArgumentError(f"OpSpec {self.id}: zero_size=None needs a zero_size_reason")

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
