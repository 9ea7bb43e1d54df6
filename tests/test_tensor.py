"""The Tensor API: construction, dtypes, properties, operators, conversions."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import ArgumentError, DTypeError, GraphError, ShapeError


def test_python_floats_default_to_float32_and_arrays_keep_dtype():
    assert tg.tensor(1.5).dtype == np.float32
    assert tg.tensor([[1.0, 2.0]]).dtype == np.float32
    assert tg.tensor([1, 2]).dtype == np.int64
    assert tg.tensor([True]).dtype == np.bool_
    for dt in (np.float16, np.float32, np.float64):
        assert tg.tensor(np.ones(3, dt)).dtype == dt
    assert tg.tensor([1.0], dtype="float64").dtype == np.float64


def test_set_default_dtype():
    try:
        tg.set_default_dtype(np.float64)
        assert tg.tensor(0.5).dtype == np.float64
        with pytest.raises(DTypeError):
            tg.set_default_dtype(np.int32)
    finally:
        tg.set_default_dtype(np.float32)


def test_integer_and_bool_tensors_cannot_require_grad():
    with pytest.raises(DTypeError, match=r"only floating-point.*\(2,\) int64"):
        tg.tensor([1, 2], requires_grad=True)
    with pytest.raises(DTypeError):
        tg.tensor([True]).requires_grad_()


def test_tensor_copies_its_input():
    a = np.zeros(3, np.float32)
    t = tg.tensor(a)
    a[0] = 5
    assert t.array[0] == 0
    shared = tg.from_numpy(a)
    assert shared.array is a


def test_properties_and_conversions():
    t = tg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    assert t.shape == (2, 3) and t.ndim == 2 and len(t) == 2 and t.numel() == 6
    assert t.device == "cpu" and str(t.device) == "cpu"
    assert t.is_leaf and t.requires_grad and t.grad is None
    host = t.numpy()
    host[0, 0] = 100
    assert t.array[0, 0] == 0  # numpy() is a copy
    assert tg.tensor([[2.5]]).item() == 2.5
    with pytest.raises(GraphError, match="one-element"):
        t.item()
    d = t.detach()
    assert not d.requires_grad and d.array is t.array and d.is_leaf
    assert t.to("cpu") is t
    assert float(tg.tensor(3.0)) == 3.0


def test_repr():
    assert repr(tg.tensor([1.0, 2.0])) == "tensor([1., 2.])"
    r = repr(tg.tensor([1.0], requires_grad=True) * 2.0)
    assert "grad_fn=<Mul>" in r
    assert "dtype=float64" in repr(tg.tensor(np.ones(1)))
    assert repr(tg.tensor([1])) == "tensor([1])"  # as PyTorch: int64 and bool unnamed
    assert repr(tg.tensor([1], dtype="int32")) == "tensor([1], dtype=int32)"


def test_operators_match_numpy_and_reflect():
    a = np.array([[1.0, -2.0], [3.0, 4.0]], np.float32)
    b = np.array([0.5, 2.0], np.float32)
    ta, tb = tg.tensor(a), tg.tensor(b)
    cases = [
        (ta + tb, a + b), (ta - tb, a - b), (ta * tb, a * b), (ta / tb, a / b),
        (ta ** 2, a**2), (2.0 ** tb, 2.0**b), (-ta, -a), (ta @ tb, a @ b),
        (1.0 - ta, 1.0 - a), (3.0 / tb, 3.0 / b), (b + ta, b + a), (b * ta, b * a),
        (a @ tb, a @ b),
    ]
    for got, want in cases:
        assert isinstance(got, tg.Tensor)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
        assert got.dtype == want.dtype
    for got, want in [(ta < 1, a < 1), (ta >= tb, a >= b), (ta == 3.0, a == 3.0),
                      (ta != tb, a != b)]:
        assert got.dtype == np.bool_ and not got.requires_grad
        np.testing.assert_array_equal(got.numpy(), want)


def test_tensor_is_hashable_despite_elementwise_eq():
    t = tg.tensor([1.0])
    assert {t: 1}[t] == 1


def test_getitem_basic_and_advanced():
    t = tg.tensor(np.arange(12.0).reshape(3, 4), requires_grad=True)
    np.testing.assert_array_equal(t[1].numpy(), [4, 5, 6, 7])
    np.testing.assert_array_equal(t[:, 1:3].numpy(), np.arange(12.0).reshape(3, 4)[:, 1:3])
    idx = tg.tensor([0, 0, 2])
    y = t[idx]
    y.sum().backward()
    np.testing.assert_array_equal(t.grad.numpy()[:, 0], [2, 0, 1])


def test_astype_and_clone():
    x = tg.tensor([1.5, 2.5], requires_grad=True)
    y = x.astype(np.float64)
    assert y.dtype == np.float64
    (y * y).sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 5.0])
    c = x.clone()
    assert c.array is not x.array and c.requires_grad


def test_float16_ops_and_grads():
    x = tg.tensor(np.array([0.5, 1.0], np.float16), requires_grad=True)
    y = (x * x).sum()
    assert y.dtype == np.float16
    y.backward()
    assert x.grad.dtype == np.float16


def test_factories():
    tg.manual_seed(0)
    a = tg.randn(2, 3)
    tg.manual_seed(0)
    b = tg.randn((2, 3))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert a.dtype == np.float32
    assert tg.zeros(2, 2).numpy().sum() == 0 and tg.ones(3).numpy().sum() == 3
    assert tg.arange(3).dtype == np.int64 and tg.arange(0.0, 1.0, 0.5).dtype == np.float32
    assert tg.full((2,), 7.0).numpy().tolist() == [7.0, 7.0]
    z = tg.zeros_like(a, requires_grad=True)
    assert z.requires_grad and z.shape == a.shape


def test_transpose_with_two_axes_swaps_them_as_in_pytorch():
    x = tg.tensor(np.arange(6.0).reshape(2, 3))
    # before: NumPy's reading, (0, 1) is the identity permutation -> (2, 3), silently
    np.testing.assert_array_equal(x.transpose(0, 1).numpy(), x.numpy().T)
    y = tg.ones(2, 3, 4)
    assert y.transpose(0, 2).shape == (4, 3, 2)
    assert y.transpose((2, 0, 1)).shape == (4, 2, 3)  # one sequence: a permutation
    assert y.transpose().shape == (4, 3, 2)
    assert y.permute(1, 2, 0).shape == (3, 4, 2) == y.permute((1, 2, 0)).shape
    with pytest.raises(ShapeError, match="permute"):
        y.permute(0, 0, 1)


def test_max_min_with_a_dim_return_values_and_indices_as_in_pytorch():
    x = tg.tensor(np.array([[1.0, 5.0, 5.0], [7.0, 2.0, 3.0]]), requires_grad=True)
    # before: out.max(1) returned the values, and `_, pred = out.max(1)` with a
    # batch of 2 silently unpacked them
    _, pred = x.max(1)
    np.testing.assert_array_equal(pred.numpy(), [1, 0])
    assert pred.dtype == np.int64
    values, indices = x.min(dim=1, keepdim=True)
    assert values.shape == indices.shape == (2, 1)
    np.testing.assert_array_equal(values.numpy(), [[1.0], [2.0]])
    x.max(1).values.sum().backward()  # the gradient goes to the chosen index only
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [1, 0, 0]])
    assert x.max().item() == 7.0 and x.amax(axis=(0, 1)).item() == 7.0
    np.testing.assert_array_equal(x.max(tg.tensor(np.full((2, 3), 4.0))).numpy(),
                                  [[4, 5, 5], [7, 4, 4]])


def test_max_min_argument_errors():
    x = tg.ones(2, 3)
    with pytest.raises(ArgumentError, match="not both"):
        x.max(dim=1, axis=1)
    with pytest.raises(ArgumentError, match="amax"):
        x.max((0, 1))
    with pytest.raises(ShapeError, match="empty axis"):
        tg.ones(2, 0).max(1)
    with pytest.raises(ShapeError, match="max: axis 2"):
        x.max(2)


def test_max_dim_matches_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(0).normal(size=(3, 4, 5))
    for dim in (0, 1, -1):
        v, i = tg.tensor(a).max(dim)
        tv, ti = torch.tensor(a).max(dim)
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())


def test_size_is_pytorchs():
    x = tg.ones(2, 3)
    # before: x.size was NumPy's element count and x.size(0) raised "'int' object is not callable"
    assert x.size() == (2, 3) and x.size(0) == 2 and x.size(-1) == 3
    assert x.numel() == 6 and x.dim() == 2 and x.shape == (2, 3)
