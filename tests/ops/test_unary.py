"""tapegrad/ops/unary.py: one declaration per unary op -- what it saves, its int/bool
rule, float16 in float32 -- and the ops declared with it."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.dtypes import FLOAT, KEEP_NOT_BOOL, REFUSE
from tapegrad.errors import ArgumentError, DTypeError
from tapegrad.ops.unary import BOTH, INPUT, NOTHING, OUTPUT, Unary, declared
from tapegrad.tape import entries
from tapegrad.testing import gradcheck, gradgradcheck


class Cube(Unary):
    """``x ** 3``, declared here as a user would. >>> cube(x)"""
    saves = INPUT

    def f(xp, x):
        return x * x * x

    def df(ctx, g, x, out):
        return g * 3 * x * x


cube = Cube.public("cube")


class CubeFromBoth(Unary):
    saves = BOTH
    int_inputs = REFUSE
    half_in_float32 = True

    def f(xp, x):
        return x * x * x

    def df(ctx, g, x, out):
        return g * 3 * out / x


UNARY = list(declared().values())


def test_the_library_declares_its_unary_ops_with_it():
    names = {c.__name__ for c in UNARY}
    assert {"Exp", "Log", "Log1p", "Sqrt", "Abs", "Neg", "Sin", "Cos", "Asin", "Acos", "Atan",
            "Erf", "Sigmoid", "Tanh", "Hardsigmoid", "Hardswish", "SELU", "Mish", "LogSigmoid",
            "Softsign", "Tanhshrink", "SiLU"} <= names


@pytest.mark.parametrize("cls", UNARY, ids=lambda c: c.__name__)
def test_each_declared_op_is_public_under_its_name(cls):
    fn = getattr(ops, cls.op_name)
    assert fn.op_class is cls and fn.__name__ == cls.op_name and fn.__doc__ == cls.__doc__
    assert cls.op_name in ops.__all__
    assert cls.saves in (INPUT, OUTPUT, BOTH, NOTHING)


@pytest.mark.parametrize("fn", [cube, ops.exp, ops.tanh], ids=["cube", "exp", "tanh"])
def test_a_declared_op_is_differentiable_twice(fn):
    x = np.random.default_rng(0).uniform(0.2, 1.5, (3, 4))
    gradcheck(fn, [x])
    gradgradcheck(fn, [x])


@pytest.mark.parametrize("fn, kept", [(cube, "input"), (ops.exp, "output"), (ops.neg, None),
                                      (CubeFromBoth.public("cube_both"), "both")])
def test_it_saves_what_it_declares_and_frees_it_after_backward(fn, kept):
    x = tg.tensor([0.5, 2.0], requires_grad=True)
    y = fn(x)
    (entry,) = entries(y)
    want = {"input": (x.array,), "output": (y.array,), "both": (x.array, y.array),
            None: None}[kept]
    if want is None:
        assert not entry.saved
    else:
        assert len(entry.saved) == len(want)
        assert all(s is w for s, w in zip(entry.saved, want))
    y.sum().backward()
    assert not entry.saved


def test_int_and_bool_inputs_follow_the_declared_rule():
    i, b = tg.tensor([1, 2]), tg.tensor([True, False])
    assert Cube.int_inputs == FLOAT
    assert cube(i).dtype == tg.get_default_dtype() and cube(b).dtype == tg.get_default_dtype()
    with pytest.raises(DTypeError, match="cube_both: integer input"):
        CubeFromBoth.public("cube_both")(i)
    assert ops.neg(i).dtype == np.int64 and ops.Neg.int_inputs == KEEP_NOT_BOOL
    with pytest.raises(DTypeError, match="neg: bool input"):
        ops.neg(b)


def test_float16_is_computed_in_float32_where_declared():
    fn = CubeFromBoth.public("cube_both")
    x = tg.tensor(np.array([0.3, 1.7, 25.0], np.float16), requires_grad=True)
    y = fn(x)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y.numpy(), (np.float32(x.numpy()) ** 3).astype(np.float16))
    y.sum().backward()
    assert x.grad.dtype == np.float16


def test_pytorchs_input_keyword():
    x = tg.tensor([0.5])
    np.testing.assert_array_equal(ops.exp(input=x).numpy(), ops.exp(x).numpy())
    with pytest.raises(ArgumentError, match="exp: pass the tensor or input=, not both"):
        ops.exp(x, input=x)


def test_a_misdeclaration_is_refused_when_the_class_is_made():
    with pytest.raises(ArgumentError, match="Bad.saves must be"):
        class Bad(Unary):
            saves = "everything"


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_hardtanh_and_relu6_keep_integers_as_pytorch(dtype):
    torch = pytest.importorskip("torch")
    a = np.array([-7, -2, 0, 1, 3, 6, 9], dtype=np.int64)
    if dtype == "uint8":
        a = np.abs(a)
    a = a.astype(dtype)
    F = torch.nn.functional
    lo = 0.5 if dtype == "uint8" else -1.5
    for ours, theirs in [(lambda t: ops.hardtanh(t, lo, 2.5), lambda t: F.hardtanh(t, lo, 2.5)),
                         (ops.relu6, F.relu6)]:
        got, want = ours(tg.tensor(a)), theirs(torch.from_numpy(a))
        assert str(got.dtype) == str(want.dtype).replace("torch.", "")
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(DTypeError, match="bool input"):
        ops.relu6(tg.tensor([True]))
    if dtype == "uint8":  # torch: "cannot do hardtanh on an unsigned type with negative limits"
        with pytest.raises(RuntimeError):
            F.hardtanh(torch.from_numpy(a))
        with pytest.raises(DTypeError, match="hardtanh: negative bounds"):
            ops.hardtanh(tg.tensor(a))
