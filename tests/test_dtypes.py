"""tapegrad/dtypes.py: PyTorch's type promotion, complex refusal, one dtype in
matmul/linear/conv, and the dtypes a tensor may hold."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, ops
from tapegrad.dtypes import result_type
from tapegrad.errors import DTypeError

F32, F64, F16 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)


@pytest.mark.parametrize("operands, expected", [
    ((np.ones(2, F32), np.float64(0.5)), F32),          # a NumPy scalar is a number
    ((np.ones(2, F32), np.array(1.0)), F32),            # 0-d does not promote a dimensioned
    ((np.ones(2, F32), np.ones(2)), F64),               # two dimensioned: NumPy's rule
    ((np.ones(2, np.int64), 0.5), F32),                 # int tensor * float -> default float
    ((np.ones(2, np.int64), np.array(0.5)), F64),       # ... a 0-d float64 tensor lifts it
    ((np.ones(2, F16), np.array(0.5, F32)), F16),
    ((np.ones(2, bool), 1), np.dtype(np.int64)),
    ((np.ones(2, np.int32), 3), np.dtype(np.int32)),
    ((np.ones(2, np.uint8), np.ones(2, np.int8)), np.dtype(np.int16)),
    ((np.ones(2, np.int64), np.ones(2, F16)), F16),     # not NumPy's float64
    ((np.ones(2, F32), 1j), np.dtype(np.complex64)),
    ((np.ones(2, F32), None, 2.0), F32),
])
def test_result_type_follows_torch(operands, expected):
    assert result_type(*operands) == expected


def test_result_type_matches_torch_where_available():
    torch = pytest.importorskip("torch")
    cases = [(np.ones(2, F32), np.array(1.0)), (np.ones(2, np.int64), np.array(0.5)),
             (np.ones(2, F16), np.array(0.5, F32)), (np.ones(2, np.int64), np.ones(2, F16)),
             (np.ones(2, np.uint8), np.ones(2, np.int8)), (np.ones(2, bool), np.ones(2, F16))]
    for a, b in cases:
        expected = torch.result_type(torch.from_numpy(a), torch.from_numpy(b))
        assert str(result_type(a, b)) == str(expected).replace("torch.", "")


def test_scalars_and_zero_d_tensors_keep_float32():
    x = tg.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    assert (x * np.float64(0.5)).dtype == F32
    assert (x + tg.tensor(np.float64(1.0))).dtype == F32
    assert (np.float64(2.0) - x).dtype == F32
    assert ops.clip(x, np.float64(0.1), np.float64(0.5)).dtype == F32
    assert ops.maximum(x, np.float64(0.3)).dtype == F32
    assert ops.where(x.array > 0, x, np.float64(0.0)).dtype == F32
    assert (x ** np.float64(2.0)).dtype == F32
    y = (x * np.float64(0.5) + tg.tensor(np.float64(1.0))).sum()
    y.backward()
    assert x.grad.dtype == F32


def test_dimensioned_float_tensors_promote_and_gradients_are_cast_back():
    x = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    y = tg.tensor(np.full(3, 2.0), requires_grad=True)
    z = x * y
    assert z.dtype == F64
    z.sum().backward()
    assert x.grad.dtype == F32 and y.grad.dtype == F64
    np.testing.assert_array_equal(x.grad.numpy(), [2, 2, 2])


def test_integer_tensors_with_float_numbers_give_the_default_float():
    i = tg.tensor([1, 2, 3])
    assert (i * 0.5).dtype == F32
    assert (i / 2).dtype == F32  # true division, as torch.div
    assert (i + 1).dtype == np.int64


def test_zero_d_reduction_results_promote_as_zero_d_tensors():
    # sums are 0-d tensors whose data may be a NumPy scalar: float64 stays float64
    x = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    s = x.sum() + (x * 2).sum()
    assert s.dtype == F64


@pytest.mark.parametrize("op", ["matmul", "linear"])
def test_contractions_refuse_mixed_float_dtypes(op):
    x32 = tg.tensor(np.ones((2, 3), np.float32))
    w64 = tg.tensor(np.ones((4, 3)))
    fn = (lambda: ops.matmul(x32, w64.T)) if op == "matmul" else (lambda: ops.linear(x32, w64))
    with pytest.raises(DTypeError, match=rf"{op}: .*float32.*float64"):
        fn()


def test_float32_linear_layer_refuses_float64_input():
    layer = nn.Linear(3, 2)
    with pytest.raises(DTypeError, match="float64"):
        layer(tg.tensor(np.ones((4, 3))))
    assert layer(tg.tensor(np.ones((4, 3), np.float32))).dtype == F32


def test_inplace_op_refuses_a_result_it_cannot_hold():
    i = tg.tensor([1, 2])
    with pytest.raises(DTypeError, match="in-place"):
        i += 0.5
    x = tg.tensor(np.ones(2, np.float32))
    x += tg.tensor(np.ones(2))  # float64 into float32: same kind, allowed (as torch)
    assert x.dtype == F32


def test_complex_tensors_cannot_require_grad():
    with pytest.raises(DTypeError, match="complex"):
        tg.tensor(np.array([1 + 2j]), requires_grad=True)
    with pytest.raises(DTypeError, match="complex"):
        nn.Parameter(tg.tensor(np.array([1 + 2j])))


def test_complex_constants_in_recorded_ops_are_refused():
    # the case: before, z.grad was silently 2.83+1.41j (PyTorch: 1.41+2.83j)
    w = tg.tensor([1.0], requires_grad=True)
    c = tg.tensor(np.array([3 - 1j]))
    with pytest.raises(DTypeError, match="Mul: complex"):
        ops.abs(w * c)
    with pytest.raises(DTypeError, match="complex"):
        w * 1j
    with pytest.raises(DTypeError, match="complex"):
        ops.matmul(tg.tensor(np.ones((1, 1)), requires_grad=True), np.ones((1, 1)) * 1j)
    with pytest.raises(DTypeError, match="complex"):
        w.astype(np.complex64)


def test_complex_without_grad_still_computes():
    z = tg.tensor(np.array([1 + 2j])) * tg.tensor(np.array([3 - 1j]))
    assert z.dtype == np.complex128
    np.testing.assert_allclose(ops.abs(z).numpy(), [abs((1 + 2j) * (3 - 1j))])


@pytest.mark.parametrize("data", [np.array([1.0, 2.0], dtype=object), np.array(["a"]),
                                  np.array([b"x"])])
def test_object_and_string_dtypes_are_refused_at_construction(data):
    with pytest.raises(DTypeError, match="not supported"):
        tg.tensor(data)


def _functions(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _functions(sub)


def test_every_op_declares_a_known_int_rule():
    from tapegrad.dtypes import INT_RULES
    from tapegrad.tape import Function

    bad = sorted({f"{f.__name__}: {f.int_inputs!r}" for f in _functions(Function)
                  if f.int_inputs not in INT_RULES})
    assert not bad, f"int_inputs outside tapegrad.dtypes.INT_RULES: {bad}"
    assert not hasattr(Function, "float_result")  # one declaration, not two


def test_int_dtype_rules():
    from tapegrad.dtypes import FLOAT, FLOAT_NOT_BOOL, INT64, KEEP, KEEP_NOT_BOOL, REFUSE, int_dtype

    i8, b = np.dtype(np.int8), np.dtype(bool)
    rule = lambda r: type("Op", (), {"int_inputs": r})  # noqa: E731
    assert int_dtype(rule(KEEP), b) == b and int_dtype(rule(KEEP_NOT_BOOL), i8) == i8
    assert int_dtype(rule(FLOAT), b) == F32 and int_dtype(rule(FLOAT_NOT_BOOL), i8) == F32
    assert int_dtype(rule(INT64), np.dtype(np.uint8)) == np.int64
    for r, dt in ((REFUSE, i8), (KEEP_NOT_BOOL, b), (FLOAT_NOT_BOOL, b)):
        with pytest.raises(DTypeError, match="Op: .* input .* cast it to a floating dtype"):
            int_dtype(rule(r), dt, "(2,) " + str(dt))
