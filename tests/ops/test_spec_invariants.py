"""Invariants every op spec must keep (MyGrad's uber test, Chainer's
FunctionTestCase), checked over the whole table of tapegrad.testing.specs:

- ``float32``: float32 inputs give float32 outputs and finite float32
  gradients of the inputs' shapes (backward with a random float32 upstream);
- ``no_mutation``: forward and backward leave the input arrays unchanged, and
  no gradient shares memory with an input or with another gradient;
- ``zero_size``: the spec's zero-size batch gives the reference's output, and
  zero gradients of the inputs' shapes -- or the error the spec names where
  an empty batch has no value;
- ``reference``: the float64 forward equals the spec's NumPy reference (a
  closed form, or a direct loop of tapegrad.testing.reference);
- ``float16``: the float16 forward stays float16 and within float16 rounding
  of the float32 forward of the same values -- or, for specs marked
  ``float16=False``, raises a DTypeError naming the op.

The known-failures table lists the (spec, invariant) pairs that fail today,
as strict xfails: remove an entry as soon as its fix lands (the xfail then
fails).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tapegrad.errors import DTypeError, ShapeError
from tapegrad.tape import Function
from tapegrad.tape import grad as tape_grad
from tapegrad.tensor import Tensor
from tapegrad.testing.specs import OpSpec, all_specs

SPECS = all_specs()
BY_ID = {s.id: s for s in SPECS}


INVARIANTS = ("float32", "no_mutation", "zero_size", "reference", "float16")

# (spec id, invariant) -> what fails today. Strict: delete the entry once fixed.
KNOWN_FAILURES: dict[tuple[str, str], str] = {}


def _applies(invariant, spec):
    if invariant == "zero_size":
        return spec.zero_size is not None
    if invariant == "reference":
        return spec.reference is not None
    return True


def _cases(invariant):
    out = []
    for spec in SPECS:
        if not _applies(invariant, spec):
            continue
        reason = KNOWN_FAILURES.get((spec.id, invariant))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(spec, id=spec.id, marks=marks))
    return out


def _cast(arrays, dtype):
    return [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]


def _leaves(arrays):
    return [Tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]


def _tuple(out):
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _run(spec, arrays, upstream=None, xs=None):
    """Forward (and backward, when ``upstream(shape, dtype)`` makes each
    output's gradient) of ``spec.fn`` at ``arrays`` (or at the leaves ``xs``):
    (outputs, differentiable leaves, their gradients)."""
    xs = _leaves(arrays) if xs is None else xs
    outs = _tuple(spec.fn(*xs))
    diff = [x for x in xs if x.requires_grad]
    grads = [None] * len(diff)
    pairs = [(o, upstream(o.shape, o.dtype)) for o in outs
             if upstream is not None and o.requires_grad]
    if pairs and diff:
        grads = tape_grad([o for o, _ in pairs], diff, [Tensor(g) for _, g in pairs],
                          allow_unused=True)
    return outs, diff, list(grads)


def _inputs(spec, seed=0):
    return [np.asarray(a) for a in spec.inputs(np.random.default_rng(seed))]


def _random(seed):
    rng = np.random.default_rng(seed)
    return lambda shape, dtype: rng.standard_normal(shape).astype(dtype)


def _ones(shape, dtype):
    return np.ones(shape, dtype)


def _assert_matches(spec, outs, expected):
    expected = _tuple(expected)
    assert len(outs) == len(expected), f"{spec.id}: {len(outs)} outputs, expected {len(expected)}"
    for o, e in zip(outs, expected):
        assert o.shape == np.shape(e), f"{spec.id}: shape {o.shape}, expected {np.shape(e)}"
        np.testing.assert_allclose(o.data, e, rtol=1e-7, atol=1e-9, err_msg=spec.id)


@pytest.mark.parametrize("spec", _cases("float32"))
def test_float32_in_float32_out_and_gradients(spec):
    outs, diff, grads = _run(spec, _cast(_inputs(spec), np.float32), _random(1))
    for k, o in enumerate(outs):
        assert o.dtype == np.float32, f"{spec.id}: output {k} is {o.dtype} for float32 inputs"
    for k, (x, g) in enumerate(zip(diff, grads)):
        assert g is not None, f"{spec.id}: no gradient for float input {k}"
        assert g.dtype == np.float32, f"{spec.id}: gradient {k} is {g.dtype}"
        assert g.shape == x.shape, f"{spec.id}: gradient {k} has shape {g.shape}, not {x.shape}"
        assert np.isfinite(g.data).all(), f"{spec.id}: gradient {k} is not finite"


@pytest.mark.parametrize("spec", _cases("no_mutation"))
def test_inputs_are_not_mutated(spec):
    arrays = _inputs(spec)
    xs = _leaves(arrays)
    _, _, grads = _run(spec, None, _random(1), xs)
    for k, (x, a) in enumerate(zip(xs, arrays)):
        np.testing.assert_array_equal(x.data, a, err_msg=f"{spec.id}: input {k} was modified")
    given = [g.data for g in grads if g is not None]
    for k, g in enumerate(given):
        for a in (x.data for x in xs):
            assert not np.shares_memory(g, a), f"{spec.id}: gradient {k} is a view of an input"
        for j, h in enumerate(given[:k]):
            assert not np.shares_memory(g, h), f"{spec.id}: gradients {j} and {k} share memory"


@pytest.mark.parametrize("spec", _cases("zero_size"))
def test_zero_size_batch(spec):
    arrays = spec.zero_size(_inputs(spec))
    assert any(a.size == 0 for a in arrays), f"{spec.id}: zero_size made no empty input"
    if spec.zero_size_raises is not None:
        with pytest.raises(spec.zero_size_raises, match=spec.name):
            spec.fn(*_leaves(arrays))
        return
    if spec.reference is not None:
        with warnings.catch_warnings():  # NumPy warns of the mean of an empty slice
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = spec.reference(*arrays)
        _assert_matches(spec, _run(spec, arrays)[0], expected)
    _, diff, grads = _run(spec, arrays, _ones)
    for k, (x, g) in enumerate(zip(diff, grads)):
        g = np.zeros(x.shape) if g is None else g.data
        assert g.shape == x.shape, f"{spec.id}: gradient {k} has shape {g.shape}, not {x.shape}"
        np.testing.assert_array_equal(g, np.zeros(x.shape),
                                      err_msg=f"{spec.id}: gradient {k} of an empty batch")


@pytest.mark.parametrize("spec", _cases("reference"))
def test_forward_matches_numpy_reference(spec):
    arrays = _cast(_inputs(spec), np.float64)
    outs, _, _ = _run(spec, arrays)
    _assert_matches(spec, outs, spec.reference(*arrays))


@pytest.mark.parametrize("spec", _cases("float16"))
def test_float16_close_to_float32_or_refused(spec):
    half = _cast(_inputs(spec), np.float16)
    if not spec.float16:
        with pytest.raises(DTypeError, match=spec.name):
            _run(spec, half)
        return
    outs16, _, _ = _run(spec, half)
    outs32, _, _ = _run(spec, _cast(half, np.float32))
    for o16, o32 in zip(outs16, outs32):
        assert o16.dtype == np.float16, f"{spec.id}: float16 forward gave {o16.dtype}"
        y32 = o32.data.astype(np.float64)
        scale = max(1.0, float(np.abs(y32).max(initial=0.0)))
        # 5 float16 epsilons of each value and of the largest one
        np.testing.assert_allclose(o16.data.astype(np.float64), y32, rtol=5e-3,
                                   atol=5e-3 * scale, err_msg=f"{spec.id}: float16 vs float32")


def test_known_failures_name_real_checks():
    for spec_id, invariant in KNOWN_FAILURES:
        assert spec_id in BY_ID, f"KNOWN_FAILURES names no spec {spec_id!r}"
        assert invariant in INVARIANTS, f"KNOWN_FAILURES names no invariant {invariant!r}"
        assert _applies(invariant, BY_ID[spec_id]), f"{spec_id} is not checked for {invariant}"


def test_spec_ids_are_unique():
    assert len(BY_ID) == len(SPECS), "two specs share an id: give one a label"


# ----------------------------------------------- the checks catch broken ops


def _twice(bug):
    """``2 x`` with one deliberate bug, for checking that the checks above fail."""

    class Twice(Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 2
            if bug == "upcast":
                y = y.astype("float64")
            elif bug == "mutates":
                x += 1
            elif bug == "half" and x.dtype == "float16":
                y = y + y.dtype.type(0.25)
            elif bug == "empty" and x.size == 0:
                y = ctx.xp.zeros((1,) + x.shape[1:], x.dtype)
            elif bug == "value":
                y = y + 1e-6
            return y

        @staticmethod
        def backward(ctx, g):
            return g * 2

    return OpSpec("twice", Twice.apply, lambda r: [r.normal(size=(3, 4))], bug,
                  reference=lambda x: 2 * x)


class _Shared(Function):  # both inputs get the very same gradient array
    @staticmethod
    def forward(ctx, x, y):
        return x + y

    @staticmethod
    def backward(ctx, g):
        g = g * 1.0
        return g, g


@pytest.mark.parametrize("check, spec", [
    (test_float32_in_float32_out_and_gradients, _twice("upcast")),
    (test_inputs_are_not_mutated, _twice("mutates")),
    (test_inputs_are_not_mutated, OpSpec("shared", _Shared.apply,
                                         lambda r: [r.normal(size=3), r.normal(size=3)])),
    (test_zero_size_batch, _twice("empty")),
    (test_forward_matches_numpy_reference, _twice("value")),
    (test_float16_close_to_float32_or_refused, _twice("half")),
], ids=["float32", "mutation", "shared gradient", "zero_size", "reference", "float16"])
def test_each_check_fails_for_a_broken_op(check, spec):
    with pytest.raises(AssertionError):
        check(spec)


def test_zero_size_check_fails_when_the_named_error_is_not_raised():
    spec = _twice("")
    spec.zero_size_raises = ShapeError
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        test_zero_size_batch(spec)


def test_a_sound_op_passes_every_check():
    spec = _twice("")
    for check in (test_float32_in_float32_out_and_gradients, test_inputs_are_not_mutated,
                  test_zero_size_batch, test_forward_matches_numpy_reference,
                  test_float16_close_to_float32_or_refused):
        check(spec)
