"""The table of op specs: one entry per differentiable op of ``tapegrad.ops``.

Each family of :data:`tapegrad.ops.FAMILIES` has a module here
(``specs/conv.py`` for ``ops/conv.py``) that lists :class:`OpSpec` entries.
:func:`check_spec` gradchecks an entry, and gradgradchecks it where every op
it records is ``differentiable_twice`` (:attr:`OpSpec.twice`: derived from the
Function classes, never claimed by the spec). The test suite checks every
entry, and a coverage test fails when an op in ``tapegrad.ops.__all__`` has
no spec and is not in :data:`NOT_DIFFERENTIABLE` -- so a new op cannot be
added without one. ``tapegrad check --device cuda`` runs the same table and
the same :func:`check_spec` on a GPU.

``tests/ops/test_spec_invariants.py`` checks more of every entry: float32 in
gives float32 out and float32 gradients, inputs are not mutated, a zero-size
batch (:attr:`OpSpec.zero_size`) works, the forward matches
:attr:`OpSpec.reference` (the layer ops' direct loops live in
:mod:`tapegrad.testing.reference`), and float16 runs close to float32 (or is
refused). Constants that follow the batch (targets, masks, per-sample
weights) are sliced to the batch size inside ``fn`` (``_T[:len(x)]``), so the
same ``fn`` serves the zero-size variant.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ... import ops
from ...errors import ArgumentError
from ...tape import entries
from ...tensor import Tensor
from ..gradcheck import GradcheckError, gradcheck, gradgradcheck

__all__ = ["OpSpec", "all_specs", "check_spec", "check_not_differentiable", "empty_batch",
           "FAMILIES", "NOT_DIFFERENTIABLE", "SECOND_ORDER_ATOL"]

FAMILIES = tuple(fam.__name__.rsplit(".", 1)[1] for fam in ops.FAMILIES)

# Second derivatives difference a first gradient that itself carries rounding:
# gradgradcheck gets this many times the spec's first-order atol.
SECOND_ORDER_ATOL = 10


def _scores_and_labels(r):
    return [r.normal(size=(4, 3)), np.array([0, 2, 1, 1])]


# The ops whose results never carry a gradient (helpers, metrics), each with
# inputs: check_not_differentiable shows that nothing is recorded from them.
NOT_DIFFERENTIABLE: dict[str, Callable[[np.random.Generator], list]] = {
    "sign": lambda r: [r.normal(size=(3, 4))],
    "accuracy": _scores_and_labels,
    "topk_error": _scores_and_labels,
    "one_hot": lambda r: [np.array([[0, 3], [2, 2]])],
}


def empty_batch(*positions: int) -> Callable[[list], list]:
    """A ``zero_size`` that empties axis 0 of the inputs at ``positions``.

    >>> empty_batch(0, 1)([np.ones((3, 4)), np.ones((3, 1))])[1].shape
    (0, 1)
    """

    def make(inputs):
        return [x[:0] if i in positions else x for i, x in enumerate(inputs)]

    return make


def _leaves(arrays, device=None):
    """Tensors of ``arrays``; the float ones require grad."""
    return [Tensor(a, device=device or "cpu", requires_grad=np.asarray(a).dtype.kind == "f")
            for a in arrays]


def _outputs(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@dataclass
class OpSpec:
    """``fn(*tensors)`` evaluated at ``inputs(rng)`` (float64 arrays, kept
    away from kinks); ``label`` tells several specs of one op apart.

    ``reference``: plain NumPy of the float64 input arrays, returning what
    ``fn`` returns. ``zero_size``: maps ``inputs(rng)`` to inputs with an
    empty batch (default: axis 0 of the first input); ``None`` only with a
    ``zero_size_reason``. ``zero_size_raises``: the error a zero-size batch
    must raise, where it has no value (PyTorch refuses too). ``float16``:
    False when the op refuses float16 with a DTypeError. ``first_order_only``:
    why second derivatives are not checked although every op ``fn`` records
    is ``differentiable_twice`` (a spec can opt out, never in).
    """

    name: str
    fn: Callable
    inputs: Callable[[np.random.Generator], list]
    label: str = ""
    atol: float = 1e-5
    rtol: float = 1e-3
    eps: float = 1e-6
    reference: Callable | None = None
    zero_size: Callable[[list], list] | None = empty_batch(0)
    zero_size_reason: str = ""
    zero_size_raises: type[Exception] | None = None
    float16: bool = True
    first_order_only: str = ""

    def __post_init__(self):
        if self.zero_size is None and not self.zero_size_reason:
            raise ArgumentError(f"OpSpec {self.id}: zero_size=None needs a zero_size_reason")

    @property
    def id(self) -> str:
        return f"{self.name}[{self.label}]" if self.label else self.name

    @cached_property
    def functions(self) -> frozenset:
        """The Function classes ``fn`` records at ``inputs``."""
        outs = _outputs(self.fn(*_leaves(self.inputs(np.random.default_rng(0)))))
        return frozenset(e.fn for e in entries(*(o for o in outs if isinstance(o, Tensor))))

    @property
    def twice(self) -> bool:
        """Second derivatives are checked: every recorded Function says
        ``differentiable_twice`` and the spec does not opt out."""
        return self.differentiable_twice and not self.first_order_only

    @property
    def differentiable_twice(self) -> bool:
        return all(f.differentiable_twice for f in self.functions)


def all_specs() -> list[OpSpec]:
    """Every family's ``SPECS``, in the order of :data:`FAMILIES`."""
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


def check_spec(spec: OpSpec, device=None, orders=(1, 2)) -> dict[int, str]:
    """Check ``spec``'s derivatives on ``device``: order 1 by :func:`gradcheck`,
    order 2 by :func:`gradgradcheck` (with ``SECOND_ORDER_ATOL`` times the
    spec's atol), both at ``spec.inputs(default_rng(0))``.

    Returns ``{order: "pass"}``, or ``"skip: why"`` for an order 2 that
    :attr:`OpSpec.twice` rules out. Raises :class:`GradcheckError` (naming
    the spec) at the first wrong derivative or for a spec that records no
    op, ArgumentError for a ``first_order_only`` reason that is not needed;
    errors of the op itself propagate.
    """
    if not spec.functions:
        raise GradcheckError(f"{spec.id}: fn records no op (its result does not require grad); "
                             "a non-differentiable op belongs in NOT_DIFFERENTIABLE")
    if spec.first_order_only and not spec.differentiable_twice:
        raise ArgumentError(f"{spec.id}: first_order_only, but {_once_reason(spec)} anyway: "
                            "drop the reason")
    inputs = spec.inputs(np.random.default_rng(0))
    kw = dict(eps=spec.eps, rtol=spec.rtol, device=device, name=spec.id)
    result = {}
    for order in orders:
        if order == 1:
            gradcheck(spec.fn, inputs, atol=spec.atol, **kw)
        elif order != 2:
            raise ArgumentError(f"check_spec: orders are 1 and 2, got {order!r}")
        elif not spec.twice:
            result[order] = f"skip: {_once_reason(spec)}"
            continue
        else:
            gradgradcheck(spec.fn, inputs, atol=spec.atol * SECOND_ORDER_ATOL, **kw)
        result[order] = "pass"
    return result


def _once_reason(spec):
    if spec.first_order_only and spec.differentiable_twice:
        return spec.first_order_only
    once = sorted(f.__name__ for f in spec.functions if not f.differentiable_twice)
    return f"{', '.join(once)} not differentiable_twice"


def check_not_differentiable(name: str, device=None) -> None:
    """Raise GradcheckError unless ``ops.<name>``, called at its inputs in
    :data:`NOT_DIFFERENTIABLE` (float ones requiring grad), records nothing."""
    out = getattr(ops, name)(*_leaves(NOT_DIFFERENTIABLE[name](np.random.default_rng(0)), device))
    for o in _outputs(out):
        if isinstance(o, Tensor) and (o.requires_grad or entries(o)):
            raise GradcheckError(f"{name}: listed in NOT_DIFFERENTIABLE, but its result requires "
                                 "grad; give it an OpSpec instead")
