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
- ``int inputs``: the spec's float inputs as int8, uint8, int32, int64 and bool
  follow PyTorch's rule (:data:`INT_RULES`, checked against torch where it is
  installed): a floating op returns the default float dtype with the values of
  the float computation, sum/prod/cumsum return int64, the rest keep the dtype,
  and where PyTorch raises a DTypeError is raised.

The known-failures table lists the (spec, invariant) pairs that fail today,
as strict xfails: remove an entry as soon as its fix lands (the xfail then
fails).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tapegrad.engine import grad as tape_grad
from tapegrad.errors import DTypeError, ShapeError
from tapegrad.ops.unary import declared
from tapegrad.tape import Function
from tapegrad.tensor import Tensor, get_default_dtype
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
        np.testing.assert_allclose(o.array, e, rtol=1e-7, atol=1e-9, err_msg=spec.id)


@pytest.mark.parametrize("spec", _cases("float32"))
def test_float32_in_float32_out_and_gradients(spec):
    outs, diff, grads = _run(spec, _cast(_inputs(spec), np.float32), _random(1))
    for k, o in enumerate(outs):
        assert o.dtype == np.float32, f"{spec.id}: output {k} is {o.dtype} for float32 inputs"
    for k, (x, g) in enumerate(zip(diff, grads)):
        assert g is not None, f"{spec.id}: no gradient for float input {k}"
        assert g.dtype == np.float32, f"{spec.id}: gradient {k} is {g.dtype}"
        assert g.shape == x.shape, f"{spec.id}: gradient {k} has shape {g.shape}, not {x.shape}"
        assert np.isfinite(g.array).all(), f"{spec.id}: gradient {k} is not finite"


@pytest.mark.parametrize("spec", _cases("no_mutation"))
def test_inputs_are_not_mutated(spec):
    arrays = _inputs(spec)
    xs = _leaves(arrays)
    _, _, grads = _run(spec, None, _random(1), xs)
    for k, (x, a) in enumerate(zip(xs, arrays)):
        np.testing.assert_array_equal(x.array, a, err_msg=f"{spec.id}: input {k} was modified")
    given = [g.array for g in grads if g is not None]
    for k, g in enumerate(given):
        for a in (x.array for x in xs):
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
        g = np.zeros(x.shape) if g is None else g.array
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
        y32 = o32.array.astype(np.float64)
        scale = max(1.0, float(np.abs(y32).max(initial=0.0)))
        # 5 float16 epsilons of each value and of the largest one
        np.testing.assert_allclose(o16.array.astype(np.float64), y32, rtol=5e-3,
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



# ------------------------------------------------- integer and bool inputs

INT_DTYPES = ("int8", "uint8", "int32", "int64", "bool")
K, KB, F, FB, I64, R = "keep", "keep, not bool", "float", "float, not bool", "int64", "refuse"

# What each op does with integer and bool input in PyTorch 2.13 (by spec id, else by
# name): K keeps the dtype, KB keeps it but refuses bool, F gives the default float
# dtype, FB that but refuses bool, I64 int64, R refuses; (rule, {dtype: outcome})
# overrides single dtypes. MatConvNet's own ops (spnorm, noffset, pdist, loss) are
# float-only there: R. test_int_rules_match_torch checks the table against torch.
INT_RULES: dict[str, object] = {
    "add": K, "sub": KB, "mul": K, "div": F, "pow[scalar exponent]": F,
    "pow[tensor exponent]": KB, "maximum": K, "minimum": K, "where": K, "clip": F, "cast": K,
    "relu": KB, "leaky_relu": R, "relu6": KB, "hardtanh": (KB, {"uint8": R}), "glu": R,
    "softmax": R, "log_softmax": R, "gelu": R, "elu": R, "softplus": R, "prelu": R,
    "sum": I64, "mean": R, "var": R, "std": R, "max": K, "min": K, "logsumexp": F, "cumsum": I64,
    "prod": I64, "reshape": K, "flatten": K, "transpose": K, "permute": K, "swapaxes": K,
    "broadcast_to": K, "expand_dims": K, "squeeze": K, "getitem": K, "setitem": K,
    "scatter_add": K, "gather": K, "scatter_add_along": K, "concatenate": K, "stack": K,
    "split": K, "pad": K, "tril": K, "triu": K, "sort": K, "topk": KB, "matmul": KB,
    "linear": KB, "norm": R, "conv2d": KB, "conv_transpose2d": (R, {"int64": "int64"}),
    "max_pool2d": KB, "avg_pool2d": (R, {"int64": "int64"}), "batch_norm": R,
    "layer_norm": R, "group_norm": R, "local_response_norm": (R, {"int64": "float32"}),
    "spnorm": R, "noffset": R, "cross_entropy": R, "nll_loss": R, "mse_loss": R,
    "l1_loss": R, "smooth_l1_loss": R, "binary_cross_entropy_with_logits": R, "loss": R,
    "dropout": R, "dropout2d": R, "pdist": R, "embedding": K, "adaptive_avg_pool2d": R,
    "adaptive_max_pool2d": R, "interpolate": R,
    "interpolate[nearest 3->7]": (R, {"uint8": "uint8"}),
    "interpolate[nearest 5->4]": (R, {"uint8": "uint8"}),
    "interpolate[nearest x2]": (R, {"uint8": "uint8"}),
    "interpolate[nearest x1.5]": (R, {"uint8": "uint8"}),
    "interpolate[nearest-exact 5->3]": (R, {"uint8": "uint8"}),
    "pixel_shuffle": K, "pixel_unshuffle": K, "huber_loss": R, "binary_cross_entropy": R,
    "kl_div": R, "cosine_similarity": R, "normalize": R, "margin_ranking_loss": FB,
    "cosine_embedding_loss": F, "triplet_margin_loss": FB,
    "rnn_cell": FB, "lstm_cell": R, "gru_cell": R, "rnn_layer": R, "atan2": F,
}
# The ops declared with ops.unary.Unary (exp, sin, sigmoid, ...) need no entry: their
# declared int_inputs is the rule here, and test_int_rules_match_torch checks it against
# PyTorch's function of the same name (torch.X, torch.nn.functional.X, torch.special.X).
DECLARED = {name: cls.int_inputs for name, cls in declared().items()}
INT_RULES.update({name: rule for name, rule in DECLARED.items() if name not in INT_RULES})
for _label in ("bilinear 3->7", "bilinear 3->7 align_corners", "bilinear 7->3", "bilinear x2",
               "bilinear x1.5 align_corners", "bilinear x(1.5, 2.5) recomputed"):
    INT_RULES[f"interpolate[{_label}]"] = (R, {"uint8": "uint8"})

# spec id or name -> where tapegrad still differs from PyTorch. Strict: delete once fixed.
INT_DEVIATIONS = {
    "rnn_cell": "integers refused (PyTorch's rnn_tanh_cell computes them in float32)",
    "conv2d": "integers refused (PyTorch keeps them)",
    "conv_transpose2d": "int64 refused (PyTorch keeps it)",
    "max_pool2d": "integers refused (PyTorch keeps them)",
    "avg_pool2d": "int64 refused (PyTorch keeps it)",
    "local_response_norm": "int64 refused (PyTorch gives float32)",
    "margin_ranking_loss": "integers refused (PyTorch gives float32)",
    "cosine_embedding_loss": "integers refused (PyTorch gives float32)",
    "triplet_margin_loss": "integers refused (PyTorch gives float32)",
}
for _id in INT_RULES:
    if _id.startswith("interpolate[") and _id != "interpolate[area 7->3]":
        INT_DEVIATIONS[_id] = "uint8 refused (PyTorch keeps it)"


def _int_rule(key):
    return INT_RULES.get(key.id, INT_RULES.get(key.name)) if isinstance(key, OpSpec) else \
        INT_RULES[key]


def _int_outcome(rule, dt):
    """What PyTorch's rule gives for input dtype ``dt``: a dtype name, or "refuse"."""
    if isinstance(rule, tuple):
        rule, over = rule
        if dt in over:
            return over[dt]
    if rule in (KB, FB) and dt == "bool":
        return R
    return {K: dt, KB: dt, F: str(get_default_dtype()), FB: str(get_default_dtype()),
            I64: "int64"}.get(rule, R)


def _int_cases():
    out = []
    for spec in SPECS:
        reason = INT_DEVIATIONS.get(spec.id, INT_DEVIATIONS.get(spec.name))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(spec, id=spec.id, marks=marks))
    return out


def _as_ints(arrays, dt):
    """The float inputs as small integers of ``dt`` (bool: > 0; uint8: >= 0)."""
    out = []
    for a in arrays:
        if a.dtype.kind == "f":
            a = a > 0 if dt == "bool" else np.round(np.abs(a) * 2 if dt == "uint8" else a * 2)
            a = a.astype(dt)
        out.append(a)
    return out


def _assert_int_result(spec, dt, o, e):
    """``o`` (an op's result on ``dt`` inputs) holds the values ``e`` of the float
    computation: for an integer result, where ``e`` is an integer its dtype holds
    (not a pad value of 0.5, nor a sum that wraps around)."""
    e, r = e.array.astype(np.float64), o.array.astype(np.float64)
    msg = f"{spec.id}: {dt} inputs"
    if o.dtype.kind == "f":
        np.testing.assert_allclose(r, e, rtol=1e-6, atol=1e-7, err_msg=msg)
    elif o.dtype.kind == "b":
        np.testing.assert_array_equal(r, e != 0, err_msg=msg)
    else:
        info = np.iinfo(o.dtype)
        fits = np.isfinite(e) & (e >= info.min) & (e <= info.max) & (e == np.round(e))
        np.testing.assert_allclose(r[fits], e[fits], rtol=1e-5, err_msg=msg)


def test_every_spec_has_an_int_rule():
    missing = sorted({s.id for s in SPECS if _int_rule(s) is None})
    assert not missing, f"no INT_RULES entry (PyTorch's rule for int/bool inputs): {missing}"


@pytest.mark.parametrize("spec", _int_cases())
def test_int_and_bool_inputs_follow_torch(spec):
    arrays = _inputs(spec)
    cast = [a.dtype.kind == "f" for a in arrays]
    for dt in INT_DTYPES:
        ints = _as_ints(arrays, dt)
        expected = _int_outcome(_int_rule(spec), dt)
        if expected == R:
            with pytest.raises(DTypeError):
                spec.fn(*[Tensor(a) for a in ints])
            continue
        with warnings.catch_warnings():  # int overflow and log(0) as in the float run
            warnings.simplefilter("ignore", RuntimeWarning)
            outs = _tuple(spec.fn(*[Tensor(a) for a in ints]))
            floats = _tuple(spec.fn(*[Tensor(a.astype(np.float32) if c else a)
                                      for a, c in zip(ints, cast)]))
        for o, e in zip(outs, floats):
            if e.dtype.kind != "f":
                continue  # indices (topk, adaptive_max_pool2d) follow no input dtype
            assert str(o.dtype) == expected, f"{spec.id}: {dt} inputs gave {o.dtype}, " \
                                             f"PyTorch gives {expected}"
            assert not o.requires_grad, f"{spec.id}: integer inputs gave a result requiring grad"
            _assert_int_result(spec, dt, o, e)


def _torch_ops(torch):
    """One PyTorch call per INT_RULES key, on an integer tensor x of shape (1, 2, 4, 4)."""
    nnf = torch.nn.functional
    i64 = torch.int64

    def v(x):  # (4,)
        return x[0, 0, 0]

    def m(x):  # (4, 4)
        return x[0, 0]

    ops_ = {
        "add": lambda x: x + x, "sub": lambda x: x - x, "mul": lambda x: x * x,
        "div": lambda x: x / x, "pow[scalar exponent]": lambda x: x ** 3.0,
        "pow[tensor exponent]": lambda x: x ** x,
        "maximum": lambda x: torch.maximum(x, x), "minimum": lambda x: torch.minimum(x, x),
        "where": lambda x: torch.where(x > 0, x, x), "clip": lambda x: torch.clamp(x, -0.5, 0.7),
        "cast": lambda x: (x.double() * 2.0).to(x.dtype), "relu": torch.relu,
        "leaky_relu": nnf.leaky_relu, "relu6": nnf.relu6, "hardtanh": nnf.hardtanh,
        "glu": nnf.glu,
        "softmax": lambda x: torch.softmax(x, 1), "log_softmax": lambda x: torch.log_softmax(x, 1),
        "gelu": nnf.gelu, "elu": nnf.elu, "softplus": nnf.softplus,
        "prelu": lambda x: nnf.prelu(x, torch.ones(2)), "sum": torch.sum, "mean": torch.mean,
        "var": torch.var, "std": torch.std, "max": torch.amax, "min": torch.amin,
        "logsumexp": lambda x: torch.logsumexp(x, 1), "cumsum": lambda x: torch.cumsum(x, 1),
        "prod": torch.prod, "reshape": lambda x: x.reshape(-1), "flatten": torch.flatten,
        "transpose": lambda x: x.transpose(0, 1), "permute": lambda x: x.permute(3, 2, 1, 0),
        "swapaxes": lambda x: x.swapaxes(1, 2), "broadcast_to": lambda x: x.expand(3, 2, 4, 4),
        "expand_dims": lambda x: x.unsqueeze(0), "squeeze": lambda x: x.squeeze(0),
        "getitem": lambda x: x[0, :, 1], "setitem": lambda x: x.clone().index_put_(
            (torch.tensor([0]),), x[:1]),
        "scatter_add": lambda x: torch.zeros(3, dtype=x.dtype).scatter_add(
            0, torch.tensor([0, 1]), v(x)[:2]),
        "gather": lambda x: torch.gather(m(x), 1, torch.zeros(4, 1, dtype=i64)),
        "scatter_add_along": lambda x: m(x).scatter_add(1, torch.zeros(4, 1, dtype=i64), m(x)),
        "concatenate": lambda x: torch.cat([x, x], 1), "stack": lambda x: torch.stack([x, x]),
        "split": lambda x: torch.split(x, 2, 2)[0], "pad": lambda x: nnf.pad(x, (1, 1)),
        "tril": torch.tril, "triu": torch.triu, "sort": lambda x: torch.sort(x)[0],
        "topk": lambda x: torch.topk(x, 2)[0], "matmul": lambda x: m(x) @ m(x),
        "linear": lambda x: nnf.linear(m(x), m(x)), "norm": torch.linalg.vector_norm,
        "conv2d": lambda x: nnf.conv2d(x, x[:, :, :2, :2].repeat(3, 1, 1, 1)),
        "conv_transpose2d": lambda x: nnf.conv_transpose2d(x, x[:, :1, :2, :2].repeat(2, 1, 1,
                                                                                        1)),
        "max_pool2d": lambda x: nnf.max_pool2d(x, 2), "avg_pool2d": lambda x: nnf.avg_pool2d(x, 2),
        "batch_norm": lambda x: nnf.batch_norm(x, None, None, training=True),
        "layer_norm": lambda x: nnf.layer_norm(x, (4,)),
        "group_norm": lambda x: nnf.group_norm(x, 1),
        "local_response_norm": lambda x: nnf.local_response_norm(x, 2),
        "cross_entropy": lambda x: nnf.cross_entropy(m(x), torch.zeros(4, dtype=i64)),
        "nll_loss": lambda x: nnf.nll_loss(m(x), torch.zeros(4, dtype=i64)),
        "mse_loss": lambda x: nnf.mse_loss(x, x), "l1_loss": lambda x: nnf.l1_loss(x, x),
        "smooth_l1_loss": lambda x: nnf.smooth_l1_loss(x, x),
        "binary_cross_entropy_with_logits": lambda x: nnf.binary_cross_entropy_with_logits(x, x),
        "dropout": lambda x: nnf.dropout(x, 0.5), "dropout2d": lambda x: nnf.dropout2d(x, 0.5),
        "embedding": lambda x: nnf.embedding(torch.zeros(2, dtype=i64), m(x)),
        "adaptive_avg_pool2d": lambda x: nnf.adaptive_avg_pool2d(x, 3),
        "adaptive_max_pool2d": lambda x: nnf.adaptive_max_pool2d(x, 3)[0],
        "interpolate": lambda x: nnf.interpolate(x, size=(2, 2), mode="area"),
        "pixel_shuffle": lambda x: nnf.pixel_shuffle(x.reshape(1, 4, 2, 4), 2),
        "pixel_unshuffle": lambda x: nnf.pixel_unshuffle(x, 2),
        "huber_loss": lambda x: nnf.huber_loss(x, x),
        "binary_cross_entropy": lambda x: nnf.binary_cross_entropy(x, x),
        "kl_div": lambda x: nnf.kl_div(x, x, reduction="batchmean"),
        "cosine_similarity": lambda x: nnf.cosine_similarity(x, x),
        "normalize": nnf.normalize,
        "margin_ranking_loss": lambda x: nnf.margin_ranking_loss(v(x), v(x), v(x)),
        "cosine_embedding_loss": lambda x: nnf.cosine_embedding_loss(m(x), m(x), torch.ones(4)),
        "triplet_margin_loss": lambda x: nnf.triplet_margin_loss(m(x), m(x), m(x)),
                "atan2": lambda x: torch.atan2(x, x),
        "rnn_cell": lambda x: torch.rnn_tanh_cell(m(x), m(x), m(x), m(x)),
        "lstm_cell": lambda x: torch.lstm_cell(m(x), (m(x), m(x)), *[torch.ones(
            (16, 4), dtype=x.dtype)] * 2),
        "gru_cell": lambda x: torch.gru_cell(m(x), m(x), *[torch.ones((12, 4), dtype=x.dtype)] * 2),
        "rnn_layer": lambda x: torch.nn.LSTM(4, 4)(m(x).unsqueeze(1))[0],
    }
    def interpolate(label):  # "bilinear x2", "nearest-exact 5->3", ...
        kw = {"align_corners": True} if "align_corners" in label else {}
        return lambda x: nnf.interpolate(x, scale_factor=2, mode=label.split()[0], **kw)

    for key in INT_RULES:
        if key.startswith("interpolate["):
            ops_[key] = interpolate(key[len("interpolate["):-1])
    for name in DECLARED:  # PyTorch's function of the same name
        ops_.setdefault(name, next(getattr(mod, name) for mod in (torch, nnf, torch.special)
                                   if hasattr(mod, name)))
    return ops_


MATCONVNET_ONLY = ("spnorm", "noffset", "pdist", "loss")  # no PyTorch counterpart


def test_int_rules_match_torch():
    torch = pytest.importorskip("torch")
    calls = _torch_ops(torch)
    assert set(calls) | set(MATCONVNET_ONLY) == set(INT_RULES)
    wrong = []
    for key, call in calls.items():
        for dt in INT_DTYPES:
            x = torch.ones((1, 2, 4, 4), dtype=torch.int64).to(getattr(torch, dt))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    got = str(call(x).dtype).replace("torch.", "")
            except (RuntimeError, NotImplementedError, TypeError, ValueError):
                got = R
            if got != _int_outcome(INT_RULES[key], dt):
                wrong.append(f"{key} {dt}: torch {got}, table {_int_outcome(INT_RULES[key], dt)}")
    assert not wrong, "INT_RULES disagrees with PyTorch:\n" + "\n".join(wrong)


def test_int_check_fails_for_numpys_promotion():
    spec = OpSpec("exp", lambda x: Tensor(np.exp(x.array)), lambda r: [r.normal(size=(3,))])
    with pytest.raises(AssertionError, match="PyTorch gives float32"):
        test_int_and_bool_inputs_follow_torch(spec)
