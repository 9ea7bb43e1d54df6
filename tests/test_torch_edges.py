"""Edges the differential suite (tests/differential) found against PyTorch 2.13, kept
torch-free: each test holds PyTorch's answer, or the named error tapegrad raises
where it cannot give that answer (never NumPy's silently different one)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, DTypeError, ShapeError


def _grad(f, x):
    x = tg.tensor(x, requires_grad=True)
    f(x).sum().backward()
    return x.grad.numpy()


# ---------------------------------------------------------------- gradients
def test_tanh_of_a_0d_tensor_has_a_gradient():  # was NumPy's "return arrays must be ..."
    np.testing.assert_allclose(_grad(ops.tanh, np.float64(0.5)), 1 - np.tanh(0.5) ** 2)


def test_prod_gradient_at_a_denormal_is_one():  # g * out underflowed to 0 before / x
    x = tg.tensor(np.float64(5e-324), requires_grad=True)
    (x.prod() * 0.5).backward()
    assert float(x.grad.numpy()) == 0.5


# ---------------------------------------------------------------- shapes and views
def test_permute_of_a_1d_tensor_takes_one_int():
    x = tg.tensor([1.0, 2.0])
    assert x.permute(0).tolist() == [1.0, 2.0]
    assert ops.permute(tg.zeros(2, 3), (1, 0)).shape == (3, 2)


def test_view_refuses_where_it_would_copy_and_reshape_copies():
    x = tg.arange(6.0).reshape(2, 3)
    with pytest.raises(ShapeError, match=r"view: .*contiguous\(\)\.view"):
        x.T.view(-1)  # torch: "view size is not compatible with input tensor's size and stride"
    assert x.T.reshape(-1).tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    v = x.view(3, 2)  # a real view: a write through it reaches x
    v[0, 0] = 9.0
    assert x[0, 0].item() == 9.0
    assert x.T.reshape_as(tg.zeros(6)).shape == (6,)
    with pytest.raises(ShapeError):
        x.T.view_as(tg.zeros(6))


# ---------------------------------------------------------------- integers and bools
def test_sign_of_bool_is_the_bools():  # NumPy's sign has no bool loop
    out = ops.sign(tg.tensor([True, False]))
    assert out.dtype == np.bool_ and out.tolist() == [True, False]


def test_integer_powers_follow_torch():
    x = tg.tensor(np.array([1, -1, 2, 0, -1], np.int64))
    p = tg.tensor(np.array([-1, -1, -2, 3, -3], np.int64))
    assert (x ** p).tolist() == [1, -1, 0, 0, -1]  # NumPy refuses negative int powers
    with pytest.raises(ArgumentError, match="negative power -1"):
        x ** -1


def test_python_ints_wrap_into_small_int_dtypes_as_torch():
    u = tg.tensor(np.array([1, 2], np.uint8))
    assert (u * -1).tolist() == [255, 254] and (u * -1).dtype == np.uint8
    assert (u + 256).tolist() == [1, 2]  # NumPy 2 raises OverflowError
    with pytest.raises(DTypeError, match="does not fit uint8"):
        u ** 256  # the exponent does not wrap (torch refuses)


def test_bool_operands_of_sub_are_refused():
    with pytest.raises(DTypeError, match="bool operand"):
        tg.tensor([1.0, 2.0]) - True
    with pytest.raises(DTypeError, match="bool operand"):
        tg.tensor([True]) - tg.tensor([1.0])


def test_integer_division_by_zero_is_refused():  # NumPy: 0 and a warning
    x = tg.tensor(np.array([3, 4], np.int64))
    with pytest.raises(ArgumentError, match="integer division by zero"):
        x // tg.tensor(np.array([1, 0], np.int64))
    with pytest.raises(ArgumentError, match="integer division by zero"):
        x % 0
    assert (x // 2).tolist() == [1, 2] and (x % 3).tolist() == [0, 1]
    assert np.isinf((tg.tensor([1.0]) // 0.0).numpy()).all()  # floats: inf, as torch


def test_unary_plus_of_bool_and_argmax_of_bool_are_refused():
    b = tg.tensor([False, True])
    with pytest.raises(DTypeError, match=r"\+x"):
        b.__pos__()
    with pytest.raises(DTypeError, match="argmax: bool"):
        b.argmax()


def test_all_and_any_of_uint8_are_uint8():
    u = tg.tensor(np.array([0, 3], np.uint8))
    assert u.all().dtype == np.uint8 and u.any().dtype == np.uint8
    assert int(u.all().item()) == 0 and int(u.any().item()) == 1
    assert tg.tensor([1.0, 0.0]).any().dtype == np.bool_


@pytest.mark.parametrize("write", [
    lambda t: t.masked_fill(tg.tensor([True, False]), 300),
    lambda t: t.fill_(-1),
    lambda t: t.__setitem__(0, 256),
    lambda t: t.fill_(float("nan")),
    lambda t: t.clamp(min=-1),  # torch wraps it to 255; a float bound promotes instead
])
def test_numbers_out_of_an_int_dtype_are_refused_not_wrapped(write):
    u = tg.tensor(np.array([1, 2], np.uint8))
    with pytest.raises(DTypeError, match="does not fit uint8"):
        write(u)
    assert u.tolist() == [1, 2]


def test_in_range_numbers_still_write_into_int_tensors():
    u = tg.tensor(np.array([1, 2], np.uint8))
    u[0] = 255
    assert u.masked_fill(tg.tensor([False, True]), 2.7).tolist() == [255, 2]  # truncated
    assert u.clamp(0, 100).tolist() == [100, 2]
    assert u.clamp(min=-0.5).dtype == np.float32  # a float bound: the default float


def test_randint_refuses_a_range_the_dtype_cannot_hold():
    with pytest.raises(ArgumentError, match=r"\[0, 5\) does not fit bool"):
        tg.randint(0, 5, (3,), dtype=tg.bool)
    with pytest.raises(ArgumentError, match="does not fit uint8"):
        tg.randint(-1, 5, (3,), dtype=tg.uint8)
    assert tg.randint(0, 2, (3,), dtype=tg.bool).dtype == np.bool_


def test_arange_with_a_fractional_start_and_an_int_dtype_is_refused():
    # torch truncates start and step ([0, 0, 0, 0, 0]); NumPy gives [0, 1, 2, 3, 4]
    with pytest.raises(ArgumentError, match="fractional start or step"):
        tg.arange(0.5, 3, 0.5, dtype=tg.int32)
    assert tg.arange(1, 7.5, 2, dtype=tg.int32).tolist() == [1, 3, 5, 7]  # as both
    assert tg.arange(0.5, 3, 0.5).tolist() == [0.5, 1.0, 1.5, 2.0, 2.5]
