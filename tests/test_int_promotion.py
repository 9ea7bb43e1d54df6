"""Integer and bool inputs follow PyTorch's rule (tapegrad/dtypes.py, ``int_dtype``),
not NumPy's: a floating op computes in and returns the default float dtype, sum,
prod and cumsum accumulate in int64, and where PyTorch refuses a DTypeError says
so. Torch-free; tests/ops/test_spec_invariants.py runs every spec'd op the same way."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import DTypeError

INTS = ("int8", "uint8", "int16", "int32", "int64", "bool")


def _t(values, dtype):
    return tg.tensor(np.array(values).astype(dtype))


def test_exp_of_uint8_is_float32_not_an_overflowing_float16():
    y = ops.exp(_t([12], np.uint8))  # NumPy: float16 inf
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.numpy(), [162754.8], rtol=1e-6)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("name", ["exp", "log", "log1p", "sqrt", "tanh", "sin", "cos", "erf",
                                  "sigmoid"])
def test_floating_ops_of_ints_give_the_default_float(name, dtype):
    x = _t([0, 1, 2], dtype) if dtype != "bool" else _t([False, True, True], dtype)
    with np.errstate(divide="ignore"):  # log(0)
        y = getattr(ops, name)(x)  # NumPy: float16 for int8/bool, float64 for int32/int64
        expected = getattr(ops, name)(x.float())
    assert y.dtype == np.float32 and not y.requires_grad
    np.testing.assert_allclose(y.numpy(), expected.numpy(), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "bool"])
def test_logsumexp_of_ints_is_float32(dtype):
    y = ops.logsumexp(_t([1, 0, 1], dtype), axis=0)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.item(), np.log(2 * np.e + 1), rtol=1e-6)


def test_the_rule_follows_set_default_dtype():
    tg.set_default_dtype(np.float64)
    try:
        assert ops.exp(_t([1], np.int32)).dtype == np.float64
        assert (_t([1], np.int8) / _t([2], np.int8)).dtype == np.float64
    finally:
        tg.set_default_dtype(np.float32)


def test_true_division_promotes_first_then_takes_the_default_float():
    assert (_t([1, 2], np.int64) / 2).dtype == np.float32
    assert (_t([1, 2], np.float16) / _t([2, 2], np.int64)).dtype == np.float16
    assert (_t([True], bool) / _t([True], bool)).dtype == np.float32


@pytest.mark.parametrize("dtype", ["uint8", "int8", "bool"])
def test_sum_prod_cumsum_of_small_ints_accumulate_in_int64(dtype):
    x = _t([200, 100] if dtype == "uint8" else [100, 100] if dtype == "int8" else [1, 1], dtype)
    total = 300 if dtype == "uint8" else 200 if dtype == "int8" else 2
    assert ops.sum(x).dtype == np.int64 and ops.sum(x).item() == total  # uint8: not uint64
    assert ops.cumsum(x, 0).dtype == np.int64 and ops.cumsum(x, 0).numpy()[-1] == total
    assert ops.prod(x).dtype == np.int64


def test_softsign_and_tanhshrink_take_ints_but_not_bool():
    for name in ("softsign", "tanhshrink"):
        fn = getattr(ops, name)
        y = fn(_t([-2, 0, 3], np.int32))
        assert y.dtype == np.float32
        np.testing.assert_allclose(y.numpy(), fn(tg.tensor([-2.0, 0.0, 3.0])).numpy())
        with pytest.raises(DTypeError, match="bool input"):
            fn(_t([True], bool))


@pytest.mark.parametrize("call", [
    lambda x: ops.softmax(x, 0), lambda x: ops.log_softmax(x, 0), lambda x: ops.mean(x),
    lambda x: ops.var(x), lambda x: ops.std(x), lambda x: ops.norm(x),
    lambda x: ops.leaky_relu(x), lambda x: x.mean(), lambda x: x.softmax(0),
], ids=["softmax", "log_softmax", "mean", "var", "std", "norm", "leaky_relu", "Tensor.mean",
        "Tensor.softmax"])
@pytest.mark.parametrize("dtype", ["uint8", "int64", "bool"])
def test_refused_where_pytorch_refuses(call, dtype):
    # softmax of uint8 [1, 2, 3] was [nan, nan, 0] in float16 (x - max wrapped around);
    # PyTorch raises "softmax_kernel_impl not implemented for 'Byte'"
    x = _t([1, 2, 3], dtype)
    with pytest.raises(DTypeError, match=r"(integer|bool) input .* cast it to a floating dtype"):
        call(x)


def test_softmax_of_the_cast_uint8_tensor():
    y = ops.softmax(_t([1, 2, 3], np.uint8).float(), 0)
    np.testing.assert_allclose(y.numpy(), [0.0900306, 0.2447285, 0.6652409], rtol=1e-6)


@pytest.mark.parametrize("call", [lambda b: b - b, lambda b: ops.abs(b), lambda b: ops.relu(b),
                                  lambda b: b ** b],
                         ids=["sub", "abs", "relu", "pow"])
def test_bool_refused_where_pytorch_refuses_it(call):
    b = _t([True, False], bool)
    with pytest.raises(DTypeError, match="bool input"):  # NumPy: TypeError, bool, int8
        call(b)


def test_integer_ops_that_keep_their_dtype():
    x = _t([-3, 2], np.int8)
    assert (x - x).dtype == np.int8 and ops.abs(x).dtype == np.int8
    assert ops.relu(x).dtype == np.int8 and (x ** ops.abs(x)).dtype == np.int8
    assert (_t([True], bool) ** 2).dtype == np.int64


def test_an_int_input_beside_a_float_one_that_requires_grad():
    w = tg.tensor([0.5, 2.0], requires_grad=True)
    y = (w * ops.exp(_t([0, 1], np.int64))).sum()
    y.backward()
    np.testing.assert_allclose(w.grad.numpy(), [1.0, np.e], rtol=1e-6)
    assert w.grad.dtype == np.float32


@pytest.mark.parametrize("make", [
    lambda: tg.tensor([1.0], dtype="bfloat16"), lambda: tg.tensor([1.0]).to("bfloat16"),
    lambda: tg.tensor([1.0]).astype("bfloat16"), lambda: tg.zeros(2, dtype="bfloat16"),
], ids=["tensor", "to", "astype", "zeros"])
def test_bfloat16_is_a_named_dtype_error(make):
    with pytest.raises(DTypeError, match="bfloat16 is not supported.*float16.*float32"):
        make()


def test_an_unknown_dtype_name_is_a_dtype_error():
    with pytest.raises(DTypeError, match="'floaty' is not a dtype"):
        tg.tensor([1.0], dtype="floaty")
