"""PyTorch's Tensor methods and top-level names (tapegrad/tensor_methods.py,
tapegrad/creation.py): values against closed forms and NumPy, gradients by
gradcheck, and the same calls against torch where it is installed."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import ArgumentError, DTypeError, ShapeError
from tapegrad.testing import gradcheck

R = np.random.default_rng(0)
X = R.normal(size=(3, 4))


def _x(requires_grad=True):
    return tg.tensor(X.copy(), requires_grad=requires_grad)


# --- dim= / keepdim= wherever axis= / keepdims= are ---------------------------------

@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "logsumexp", "argmax",
                                  "argmin", "var", "std", "norm"])
def test_dim_and_keepdim_mean_axis_and_keepdims(name):
    x = _x()
    a = getattr(x, name)(dim=1, keepdim=True)
    b = getattr(x, name)(axis=1, keepdims=True)
    assert a.shape == b.shape == (3, 1)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(ArgumentError, match="not both"):
        getattr(x, name)(dim=1, axis=1)


def test_ops_take_torch_names_too():
    x = _x()
    assert tg.ops.sum(x, dim=0).shape == (4,)
    assert tg.ops.softmax(x, dim=0).shape == (3, 4)
    assert tg.ops.flatten(tg.ones(2, 3, 4), start_dim=1).shape == (2, 12)
    assert tg.ops.squeeze(tg.ones(2, 1), dim=1).shape == (2,)
    assert x.unsqueeze(dim=0).shape == (1, 3, 4)


# --- reductions ----------------------------------------------------------------------

def test_var_and_std_are_unbiased_by_default_as_in_pytorch():
    x = _x()
    np.testing.assert_allclose(x.var().item(), X.var(ddof=1))
    np.testing.assert_allclose(x.std(1).numpy(), X.std(axis=1, ddof=1))
    np.testing.assert_allclose(x.var(0, unbiased=False).numpy(), X.var(axis=0))
    np.testing.assert_allclose(x.var(0, correction=0).numpy(), X.var(axis=0))
    np.testing.assert_allclose(x.var(ddof=2).item(), X.var(ddof=2))
    np.testing.assert_allclose(tg.ops.var(x).item(), X.var())  # the op keeps NumPy's ddof=0
    with pytest.raises(ArgumentError, match="one of ddof"):
        x.var(ddof=1, unbiased=True)
    assert gradcheck(lambda t: t.std(1), [_x()])


def test_argmax_flat_and_keepdim():
    x = _x(False)
    assert x.argmax().item() == X.argmax() and x.argmax().dtype == np.int64
    assert x.argmax(keepdim=True).shape == (1, 1)
    np.testing.assert_array_equal(x.argmin(0).numpy(), X.argmin(0))
    with pytest.raises(ShapeError):
        tg.zeros(0).argmax()


def test_norm_fro_and_p():
    x = _x()
    np.testing.assert_allclose(x.norm().item(), np.sqrt((X ** 2).sum()))
    np.testing.assert_allclose(x.norm(1, dim=1).numpy(), np.abs(X).sum(1))
    with pytest.raises(ArgumentError, match="nuc"):
        x.norm("nuc")


def test_max_dim_values_indices_and_gradient_to_the_chosen_element():
    x = tg.tensor(np.array([[1.0, 5.0, 5.0], [7.0, 0.0, 2.0]]), requires_grad=True)
    values, indices = x.max(1)
    assert values.tolist() == [5.0, 7.0] and indices.tolist() == [1, 0]
    values.sum().backward()
    assert x.grad.tolist() == [[0, 1, 0], [1, 0, 0]]
    assert x.max(1, keepdim=True).values.shape == (2, 1)


# --- shape ---------------------------------------------------------------------------

def test_split_is_pytorchs_chunk_size_and_chunk_its_count():
    x = tg.arange(10.0)
    assert [len(p) for p in x.split(4)] == [4, 4, 2]
    assert [len(p) for p in x.split([3, 7])] == [3, 7]
    assert [len(p) for p in x.chunk(3)] == [4, 4, 2]
    assert [len(p) for p in tg.arange(6.0).chunk(4)] == [2, 2, 2]  # PyTorch: 3 pieces, not 4
    with pytest.raises(ShapeError, match="sum to 10"):
        x.split([3, 3])
    with pytest.raises(ArgumentError):
        x.chunk(0)
    assert gradcheck(lambda t: t.split(3, dim=1)[1] * 2, [_x()])


def test_repeat_expand_t_contiguous():
    x = _x()
    np.testing.assert_array_equal(x.repeat(2, 1, 3).numpy(), np.tile(X, (2, 1, 3)))
    assert gradcheck(lambda t: t.repeat(2, 3), [_x()])
    col = tg.tensor(np.array([[1.0], [2.0]]))
    assert col.expand(3, -1, 4).shape == (3, 2, 4)
    with pytest.raises(ShapeError):
        col.expand(4)
    assert x.t().shape == (4, 3) and tg.ones(3).t().shape == (3,)
    with pytest.raises(ShapeError, match="at most 2"):
        tg.ones(2, 2, 2).t()
    assert x.contiguous() is x
    xt = x.t().contiguous()
    assert xt.array.flags.c_contiguous and np.array_equal(xt.numpy(), X.T)


def test_gather_and_scatter_add_follow_pytorchs_index_rule():
    idx = np.array([[0, 3, 3], [1, 1, 0], [2, 0, 2]])
    x = _x()
    out = x.gather(1, tg.tensor(idx))
    np.testing.assert_array_equal(out.numpy(), np.take_along_axis(X, idx, 1))
    out.sum().backward()
    expect = np.zeros_like(X)
    np.add.at(expect, (np.arange(3)[:, None], idx), 1)
    np.testing.assert_array_equal(x.grad.numpy(), expect)
    # index smaller than x on the other axis: reads only the rows it covers
    np.testing.assert_array_equal(x.gather(0, np.array([[2, 0]])).numpy(), [[X[2, 0], X[0, 1]]])
    base = tg.zeros(3, 4, dtype="float64")
    src = tg.ones(3, 3, dtype="float64")
    got = base.scatter_add(1, idx, src).numpy()
    np.testing.assert_array_equal(got, expect)
    with pytest.raises(ArgumentError, match=r"\[0, 4\)"):
        x.gather(1, np.array([[4]] * 3))
    with pytest.raises(ArgumentError, match=r"\[0, 4\)"):
        x.gather(1, np.array([[-1]] * 3))  # NumPy would wrap; PyTorch refuses
    with pytest.raises(ShapeError, match="axes"):
        x.gather(1, np.array([0, 1]))
    with pytest.raises(ArgumentError, match="integer"):
        x.gather(1, np.zeros((3, 1)))


def test_masked_fill():
    x = _x()
    mask = x > 0
    out = x.masked_fill(mask, -1.0)
    np.testing.assert_array_equal(out.numpy(), np.where(X > 0, -1.0, X))
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), (X <= 0).astype(float))
    with pytest.raises(DTypeError, match="bool"):
        x.masked_fill(x, 0.0)


# --- dtypes, devices, new tensors ----------------------------------------------------

def test_dtype_methods_names_and_to():
    x = tg.tensor([1.5, -2.5])
    assert x.long().dtype == tg.int64 == tg.long and x.int().dtype == tg.int32
    assert x.bool().dtype == tg.bool and x.half().dtype == tg.float16
    assert x.double().dtype == tg.double
    assert x.type() == "tapegrad.FloatTensor" and x.long().type() == "tapegrad.LongTensor"
    assert x.type(tg.float64).dtype == np.float64
    assert x.to(tg.float64).dtype == np.float64 and x.to("float64").dtype == np.float64
    assert x.to("cpu", tg.float16).dtype == np.float16
    assert x.to(tg.zeros(1, dtype="float64")).dtype == np.float64
    assert x.to("cpu") is x
    y = tg.tensor([1.0, 2.0], requires_grad=True)
    y.to(tg.float64).sum().backward()  # differentiable, the gradient cast back
    assert y.grad.dtype == np.float32 and y.grad.tolist() == [1.0, 1.0]


def test_new_tensors_take_dtype_and_device():
    x = tg.zeros(2, dtype="float64")
    for t, shape in [(x.new_zeros(2, 3), (2, 3)), (x.new_ones((4,)), (4,)),
                     (x.new_full((1, 2), 7.0), (1, 2)), (x.new_tensor([1, 2]), (2,)),
                     (x.new_empty(3), (3,))]:
        assert t.shape == shape and t.dtype == np.float64 and t.device is x.device
    assert x.new_ones(2).tolist() == [1.0, 1.0] and x.new_full((1,), 7.0).item() == 7.0
    assert x.new_zeros(2, dtype=tg.int64).dtype == np.int64


def test_bitwise_operators_on_bool_and_int_tensors():
    a, b = tg.tensor([True, True, False]), tg.tensor([True, False, False])
    assert (a & b).tolist() == [True, False, False] and (a | b).tolist() == [True, True, False]
    assert (a ^ b).tolist() == [False, True, False] and (~a).tolist() == [False, False, True]
    assert (tg.tensor([6]) & 3).tolist() == [2] and (~tg.tensor([0])).tolist() == [-1]
    with pytest.raises(DTypeError, match="bool or integer"):
        tg.ones(2) & a
    with pytest.raises(DTypeError):
        ~tg.ones(2)


def test_top_level_names():
    assert tg.cat([tg.ones(2), tg.zeros(1)], dim=0).tolist() == [1, 1, 0]
    assert tg.stack([tg.ones(2), tg.zeros(2)], dim=1).shape == (2, 2)
    assert [i.tolist() for i in tg.where(tg.tensor([[True, False], [False, True]]))] == \
        [[0, 1], [0, 1]]
    assert tg.where(tg.tensor([True, False]), tg.ones(2), tg.zeros(2)).tolist() == [1, 0]
    with pytest.raises(ArgumentError, match="both"):
        tg.where(tg.tensor([True]), tg.ones(1))
    np.testing.assert_array_equal(tg.eye(2, 3).numpy(), np.eye(2, 3))
    assert tg.eye(2).dtype == tg.float32
    np.testing.assert_allclose(tg.linspace(0, 1, 5).numpy(), [0, 0.25, 0.5, 0.75, 1])
    assert tg.arange(3).dtype == np.int64 and tg.arange(0.0, 1.0, 0.5).dtype == np.float32
    assert tg.arange(3.0, requires_grad=True).requires_grad
    tg.manual_seed(0)
    r = tg.randn_like(tg.zeros(2, 3, dtype="float64"))
    assert r.shape == (2, 3) and r.dtype == np.float64
    u = tg.rand_like(tg.zeros(100)).numpy()
    assert ((u >= 0) & (u < 1)).all() and u.std() > 0
    assert tg.full_like(tg.zeros(2), 3.0).tolist() == [3.0, 3.0]
    a = np.zeros(3, np.float32)
    t = tg.as_tensor(a)
    a[0] = 5  # shares memory, as torch.as_tensor
    assert t.tolist()[0] == 5 and tg.as_tensor(t) is t
    assert tg.as_tensor([1, 2]).dtype == np.int64
    assert tg.as_tensor(a, dtype=tg.float64).dtype == np.float64
    assert tg.is_tensor(t) and not tg.is_tensor(a)
    with pytest.raises(DTypeError):
        tg.from_numpy(np.array([1], dtype=object))
    names = dir(tg)
    assert {"nn", "optim", "data", "testing", "save", "load"} <= set(names)


# --- the same calls in torch ---------------------------------------------------------

def test_against_torch():
    torch = pytest.importorskip("torch")
    x, xt = _x(), torch.tensor(X, requires_grad=True)
    idx = np.array([[0, 3, 3], [1, 1, 0], [2, 0, 2]])
    pairs = [
        (lambda t: t.var(), lambda t: t.var()),
        (lambda t: t.std(dim=0, keepdim=True), lambda t: t.std(dim=0, keepdim=True)),
        (lambda t: t.norm(), lambda t: t.norm()),
        (lambda t: t.norm(3, dim=1), lambda t: t.norm(3, dim=1)),
        (lambda t: t.softmax(0), lambda t: t.softmax(0)),
        (lambda t: t.log_softmax(dim=1), lambda t: t.log_softmax(dim=1)),
        (lambda t: t.repeat(2, 1, 2), lambda t: t.repeat(2, 1, 2)),
        (lambda t: t.expand(2, 3, 4), lambda t: t.expand(2, 3, 4)),
        (lambda t: t.split(3, dim=1)[1], lambda t: t.split(3, dim=1)[1]),
        (lambda t: t.chunk(2, dim=0)[0], lambda t: t.chunk(2, dim=0)[0]),
        (lambda t: t.gather(1, tg.tensor(idx)), lambda t: t.gather(1, torch.tensor(idx))),
        (lambda t: t.scatter_add(1, tg.tensor(idx), t[:, :3] * 2),
         lambda t: t.scatter_add(1, torch.tensor(idx), t[:, :3] * 2)),
        (lambda t: t.masked_fill(t > 0, 0.5), lambda t: t.masked_fill(t > 0, 0.5)),
        (lambda t: t.t(), lambda t: t.t()),
        (lambda t: t.max(1).values, lambda t: t.max(1).values),
        (lambda t: t.sum(dim=(0, 1), keepdim=True), lambda t: t.sum(dim=(0, 1), keepdim=True)),
    ]
    for ours, theirs in pairs:
        a, b = ours(x), theirs(xt)
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)
        w = R.normal(size=a.shape)
        x.grad = None
        xt.grad = None
        (a * tg.tensor(w)).sum().backward()
        (b * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert x.argmax().item() == xt.argmax().item()
    assert x.argmax(dim=1, keepdim=True).tolist() == xt.argmax(dim=1, keepdim=True).tolist()


def test_every_axis_taking_function_also_takes_dim():
    """The rule, not a list: a public op or Tensor method with ``axis=``/``keepdims=``
    accepts PyTorch's ``dim=``/``keepdim=`` too (through args.torch_names)."""
    import inspect

    found = [(f"ops.{n}", getattr(tg.ops, n)) for n in tg.ops.__all__]
    found += [(f"Tensor.{n}", f) for n, f in vars(tg.Tensor).items()
              if callable(f) and not n.startswith("_")]
    missing = []
    for name, f in found:
        params = inspect.signature(f).parameters
        if ("axis" in params or "keepdims" in params) and not hasattr(f, "__wrapped__"):
            missing.append(name)
    assert not missing
    assert _x().max(dim=1).values.shape == _x().max(axis=1).values.shape == (3,)


def test_pytorchs_positional_forms_and_dtypes():
    # the review of the first version: each of these silently differed from PyTorch
    x = tg.tensor(np.array([[1.0, 5, 3], [4, 2, 6]]))
    a = np.array([[1.0, 5, 3], [4, 2, 6]])
    np.testing.assert_allclose(x.var(1, False).numpy(), a.var(1))  # var(dim, unbiased)
    assert x.var(1, True).shape == (2,)
    np.testing.assert_allclose(x.std(0, False, True).numpy(), a.std(0, keepdims=True))
    np.testing.assert_allclose(x.var(False).item(), a.var())
    with pytest.raises(ArgumentError, match="twice"):
        x.var(False, unbiased=True)
    # masked_fill keeps the tensor's dtype (the value is cast, 2.7 -> 2)
    out = tg.tensor([1, 2, 3]).masked_fill(tg.tensor([True, False, True]), 2.7)
    assert out.dtype == np.int64 and out.tolist() == [2, 2, 2]
    # sigmoid of integers is a float tensor
    s = tg.sigmoid(tg.tensor([0, 1, 2]))
    assert s.dtype == tg.float32 and s.tolist()[0] == 0.5
    # the implicit softmax dim is PyTorch's: 0 for 3-D input, 1 for 2-D and 4-D
    x3 = tg.randn(2, 3, 4)
    np.testing.assert_allclose(tg.ops.softmax(x3).numpy().sum(0), np.ones((3, 4)), rtol=1e-6)
    assert np.allclose(tg.ops.softmax(tg.randn(2, 3, 4, 5)).numpy().sum(1), 1, rtol=1e-6)
    # full's dtype follows its value; random *_like needs a float dtype
    assert tg.full((2,), 3).dtype == np.int64 and tg.full((2,), True).dtype == np.bool_
    assert tg.full((2,), 3.0).dtype == tg.float32
    with pytest.raises(DTypeError, match="floating"):
        tg.rand_like(tg.tensor([1, 2]))


def test_positional_forms_against_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(1).normal(size=(2, 3, 4))
    x, xt = tg.tensor(a), torch.tensor(a)
    for args in [(1, False), (1, True), (0, False, True), (False,), (2,)]:
        np.testing.assert_allclose(x.var(*args).numpy(), xt.var(*args).numpy(), rtol=1e-12)
        np.testing.assert_allclose(x.std(*args).numpy(), xt.std(*args).numpy(), rtol=1e-12)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about the implicit dim
        for shape in [(5,), (2, 3), (2, 3, 4), (2, 3, 4, 5)]:
            b = np.random.default_rng(2).normal(size=shape)
            np.testing.assert_allclose(tg.nn.functional.softmax(tg.tensor(b)).numpy(),
                                       torch.nn.functional.softmax(torch.tensor(b)).numpy(),
                                       rtol=1e-12)
    assert tg.full((2,), 3).dtype.name == str(torch.full((2,), 3).dtype).split(".")[1]


def test_more_pytorch_call_forms():
    x = tg.randn(2, 1, 3)
    assert x.squeeze(0) is x and x.squeeze(1).shape == (2, 3) and x.squeeze((0, 1)).shape == (2, 3)
    with pytest.raises(ShapeError):
        tg.ops.squeeze(x, 0)  # the op stays NumPy's
    assert x.transpose(dim0=0, dim1=2).shape == (3, 1, 2)
    assert x.permute(dims=(2, 0, 1)).shape == (3, 2, 1)
    with pytest.raises(ArgumentError):
        x.transpose(dim0=0)
    ints = tg.tensor([1, 2, 3])
    s = ints.sum(dtype=tg.float64)
    assert s.dtype == np.float64 and s.item() == 6.0
    assert x.to("cpu", non_blocking=True) is x and x.to(copy=True) is not x
    tg.manual_seed(0)
    r = tg.randint(10, (50,))
    assert r.dtype == np.int64 and r.shape == (50,)
    assert r.numpy().min() >= 0 and r.numpy().max() < 10
    assert tg.randint(3, 5, (4,)).numpy().min() >= 3 and tg.randint(2, size=(3,)).shape == (3,)
    with pytest.raises(ArgumentError, match="randint"):
        tg.randint(5)


def test_more_call_forms_against_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(3).normal(size=(2, 1, 3))
    x, xt = tg.tensor(a), torch.tensor(a)
    for ours, theirs in [(x.squeeze(0), xt.squeeze(0)), (x.squeeze(1), xt.squeeze(1)),
                         (x.squeeze((0, 1)), xt.squeeze((0, 1))),
                         (x.transpose(dim0=0, dim1=2), xt.transpose(dim0=0, dim1=2)),
                         (x.permute(dims=(2, 0, 1)), xt.permute(dims=(2, 0, 1)))]:
        assert tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_floor_division_and_remainder():
    a = tg.tensor([7, -7, 5])
    assert (a // 2).tolist() == [3, -4, 2] and (a % 3).tolist() == [1, 2, 2]
    assert (10 // tg.tensor([3])).tolist() == [3] and (10 % tg.tensor([4])).tolist() == [2]
    assert (tg.tensor([7.5]) // 2).tolist() == [3.0]
    with pytest.raises(tg.errors.GraphError, match="not differentiable"):
        tg.tensor([1.0], requires_grad=True) // 2
    with tg.no_grad():
        assert (tg.tensor([5.0], requires_grad=True) % 2).tolist() == [1.0]
    torch = pytest.importorskip("torch")
    v = np.array([7, -7, 5, -3])
    assert (tg.tensor(v) // 2).tolist() == (torch.tensor(v) // 2).tolist()
    assert (tg.tensor(v) % -3).tolist() == (torch.tensor(v) % -3).tolist()


def test_methods_of_the_newer_ops_against_torch():
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(4).normal(size=(3, 4))
    x, xt = tg.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    pairs = [(lambda t: t.sin(), lambda t: t.sin()), (lambda t: t.cos(), lambda t: t.cos()),
             (lambda t: t.erf(), lambda t: t.erf()),
             (lambda t: t.cumsum(dim=1), lambda t: t.cumsum(dim=1)),
             (lambda t: t.prod(1), lambda t: t.prod(1)),
             (lambda t: t.sort(dim=0, descending=True).values,
              lambda t: t.sort(dim=0, descending=True).values),
             (lambda t: t.topk(2, dim=1).values, lambda t: t.topk(2, dim=1).values),
             (lambda t: t.tril(), lambda t: t.tril()), (lambda t: t.triu(1), lambda t: t.triu(1))]
    for ours, theirs in pairs:
        u, v = ours(x), theirs(xt)
        np.testing.assert_allclose(u.numpy(), v.detach().numpy(), rtol=1e-12, atol=1e-14)
        x.grad, xt.grad = None, None
        u.sum().backward()
        v.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-14)
    assert x.sort(1).indices.tolist() == xt.sort(1).indices.tolist()
