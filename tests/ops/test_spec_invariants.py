"""Invariants every op spec must keep (MyGrad's uber test, Chainer's
FunctionTestCase), checked over the whole table of tapegrad.testing.specs:

- ``float32``: float32 inputs give float32 outputs and finite float32
  gradients of the inputs' shapes (backward with a random float32 upstream);
- ``no_mutation``: forward and backward leave the input arrays unchanged, and
  no gradient shares memory with an input or with another gradient;
- ``zero_size``: the spec's zero-size batch gives the reference's output, and
  zero gradients of the inputs' shapes -- or the error the spec names where
  an empty batch has no value;
- ``reference``: the float64 forward equals the spec's NumPy reference (or
  the direct-loop reference of the family test, see LOOP_REFERENCES);
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
from test_conv import ref_conv2d, ref_conv_transpose2d
from test_distance import ref_pdist
from test_losses import ref_cross_entropy
from test_normalization import _reference_bn, ref_lrn, ref_spnorm
from test_pool import ref_pool
from test_vl_loss import ref_vl_loss

from tapegrad.errors import DTypeError, ShapeError
from tapegrad.tape import Function
from tapegrad.tape import grad as tape_grad
from tapegrad.tensor import Tensor
from tapegrad.testing.specs import OpSpec, all_specs
from tapegrad.testing.specs import distance as distance_specs
from tapegrad.testing.specs import losses as loss_specs
from tapegrad.testing.specs import vl_loss as vl_specs

SPECS = all_specs()
BY_ID = {s.id: s for s in SPECS}


def _bn(training):
    def ref(x, w=None, b=None):
        c = x.shape[1]
        w, b = (np.ones(c), np.zeros(c)) if w is None else (w, b)
        return _reference_bn(x, np.full(c, 0.3), np.full(c, 1.7), w, b, training, 0.1, 1e-5)[0]

    return ref


def _ce(targets, **kw):
    return lambda x: ref_cross_entropy(x, targets[:len(x)], **kw)


def _vl(labels, kind, iw=None):
    return lambda x: ref_vl_loss(x, labels[:len(x)], kind, None if iw is None else iw[:len(x)])[0]


def _pool(k, s, pad, ceil, method, include_pad=True):
    return lambda x: ref_pool(x, k, s, pad, ceil, method, include_pad)[0]


L, V = loss_specs, vl_specs
# Direct-loop references that live in the family tests (reused, not copied),
# for specs whose closed form does not fit in the spec table; keyed by spec id.
LOOP_REFERENCES = {
    "conv2d[3x3 pad 1]": lambda x, w, b: ref_conv2d(x, w, b, padding=1),
    "conv2d[stride, asymmetric pad, dilation]": lambda x, w, b: ref_conv2d(
        x, w, b, stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2)),
    "conv2d[groups, no bias]": lambda x, w: ref_conv2d(x, w, stride=2, groups=2),
    "conv2d[fully connected]": ref_conv2d,
    "conv_transpose2d[upsample 2]": lambda x, w, b: ref_conv_transpose2d(x, w, b, stride=2),
    "conv_transpose2d[crop, groups, output_padding]": lambda x, w, b: ref_conv_transpose2d(
        x, w, b, stride=(2, 3), padding=(1, 0, 0, 2), output_padding=(1, 0), groups=2),
    "conv_transpose2d[dilation]": lambda x, w, b: ref_conv_transpose2d(
        x, w, b, padding=1, dilation=2),
    "max_pool2d[2x2 tiles]": _pool((2, 2), (2, 2), (0, 0, 0, 0), False, "max"),
    "max_pool2d[asymmetric pad, ceil]": _pool((3, 2), (2, 1), (1, 0, 1, 1), True, "max"),
    "avg_pool2d[2x2 tiles]": _pool((2, 2), (2, 2), (0, 0, 0, 0), False, "avg"),
    "avg_pool2d[Caffe: ceil, include pad]": _pool((3, 3), (2, 2), (1, 1, 1, 1), True, "avg"),
    "avg_pool2d[MatConvNet: exclude pad]": _pool((2, 3), (1, 1), (0, 1, 2, 1), False, "avg",
                                                 include_pad=False),
    "batch_norm[train NCHW]": _bn(True),
    "batch_norm[train NC]": _bn(True),
    "batch_norm[eval NCHW]": _bn(False),
    "batch_norm[train, no affine, no stats]": _bn(True),
    "local_response_norm[Caffe]": lambda x: ref_lrn(x, 3, 0.5, 0.75, 1.0, True),
    "local_response_norm[MatConvNet, even size]": lambda x: ref_lrn(x, 4, 0.2, 0.6, 2.0, False),
    "spnorm": lambda x: ref_spnorm(x, 3, 2, 0.5, 0.75),
    "cross_entropy": _ce(L._T),
    "cross_entropy[weight+smoothing]": _ce(L._T, weight=L._W, label_smoothing=0.2),
    "cross_entropy[none]": _ce(L._T, reduction="none"),
    "cross_entropy[spatial weight]": _ce(L._TS, weight=L._W[:3]),
    "cross_entropy[caffe FULL]": _ce(L._TS, normalization="FULL"),
    "loss[softmaxlog]": _vl(V._CAT, "softmaxlog"),
    "loss[log]": _vl(V._CAT, "log", V._IW[:, 0]),  # (N, 1, H, W) -> (N, H, W)
    "loss[mhinge]": _vl(V._CAT, "mhinge"),
    "loss[mshinge]": _vl(V._CAT, "mshinge"),
    "loss[classerror]": _vl(V._CAT, "classerror"),
    "loss[binarylog]": _vl(V._BIN, "binarylog"),
    "loss[logistic]": _vl(V._BIN, "logistic"),
    "loss[hinge]": _vl(V._BIN, "hinge"),
    "pdist": lambda x, x0: ref_pdist(x, x0, 2),
    "pdist[squared L2]": lambda x, x0: ref_pdist(x, x0, 2, no_root=True),
    "pdist[L1 per image]": lambda x, x0: ref_pdist(x, x0, 1),
    "pdist[p3 weighted aggregate]": lambda x, x0: ref_pdist(
        x, x0, 3, aggregate=True, iw=distance_specs._IW[:len(x), None, None, None]),
    "pdist[p0.5]": lambda x, x0: ref_pdist(x, x0, 0.5),
}

INVARIANTS = ("float32", "no_mutation", "zero_size", "reference", "float16")

# (spec id, invariant) -> what fails today. Strict: delete the entry once fixed.
KNOWN_FAILURES: dict[tuple[str, str], str] = {}


def _applies(invariant, spec):
    if invariant == "zero_size":
        return spec.zero_size is not None
    if invariant == "reference":
        return _reference(spec) is not None
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


def _reference(spec):
    return LOOP_REFERENCES.get(spec.id, spec.reference)


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
    if _reference(spec) is not None:
        with warnings.catch_warnings():  # NumPy warns of the mean of an empty slice
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = _reference(spec)(*arrays)
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
    _assert_matches(spec, outs, _reference(spec)(*arrays))


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
