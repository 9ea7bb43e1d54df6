"""The Tensor methods and top-level functions added from a census of ported PyTorch
scripts (tapegrad/tensor_methods_more.py, torch_functions.py): values against NumPy
closed forms, gradients (twice) by central differences, in-place and view behaviour,
and the refusals. Torch-free (tests/differential compares them with torch)."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import (
    ArgumentError,
    ArgumentTypeError,
    DTypeError,
    GraphError,
    OutOfRangeError,
    ShapeError,
)
from tapegrad.testing import gradcheck, gradgradcheck

rng = np.random.default_rng(0)
A = rng.standard_normal((3, 4))
B = rng.uniform(0.5, 2.0, (3, 4)) * np.where(rng.random((3, 4)) < 0.5, -1, 1)
ints = np.array([7, -7, 5, -3, 0])


def both(fn, inputs):
    gradcheck(fn, inputs)
    gradgradcheck(fn, inputs)


def grads(fn, *arrays):
    xs = [tg.tensor(a, requires_grad=True) for a in arrays]
    return [g.numpy() for g in tg.grad(fn(*xs).sum(), xs)]


# ------------------------------------------------------------------ arithmetic
def test_add_sub_with_alpha_and_number_operands():
    a, b = tg.tensor(A), tg.tensor(B)
    np.testing.assert_allclose(a.add(b, alpha=-0.5).numpy(), A - 0.5 * B)
    np.testing.assert_allclose(tg.sub(a, b, alpha=2).numpy(), A - 2 * B)
    np.testing.assert_allclose(tg.add(2, a).numpy(), 2 + A)
    np.testing.assert_allclose(a.subtract(1.5).numpy(), A - 1.5)
    assert tg.add(tg.tensor([1, 2]), 3, alpha=2).tolist() == [7, 8]
    m = tg.tensor([True, False])
    assert m.add(m, alpha=2).dtype == np.bool_  # bool results stay bool, as PyTorch's
    with pytest.raises(ArgumentError, match="alpha must be an integer"):
        tg.tensor([1, 2]).add(1, alpha=1.5)
    with pytest.raises(ArgumentError, match="bool alpha"):
        a.add(b, alpha=True)
    with pytest.raises(DTypeError, match="bool operand"):
        tg.tensor([1, 2]).sub(True)
    both(lambda x, y: x.add(y, alpha=-2.5) + x.sub(y, alpha=3), [A, B])


def test_div_rounding_modes_and_their_zero_gradient():
    a, b = tg.tensor(A * 4), tg.tensor(B)
    np.testing.assert_array_equal(a.div(b, rounding_mode="floor").numpy(),
                                  np.floor_divide(A * 4, B))
    np.testing.assert_array_equal(a.div(b, rounding_mode="trunc").numpy(), np.trunc(A * 4 / B))
    i, d = tg.tensor(ints), tg.tensor(np.array([2, 2, -2, 2, 3]))
    assert i.div(d, rounding_mode="trunc").tolist() == [3, -3, -2, -1, 0]  # C's rule
    assert i.div(d, rounding_mode="floor").tolist() == [3, -4, -3, -2, 0]  # Python's
    assert i.div(d).dtype == np.float32 and i.true_divide(2).tolist()[0] == 3.5
    np.testing.assert_array_equal(grads(lambda x, y: x.div(y, rounding_mode="floor"), A, B)[0],
                                  np.zeros_like(A))
    with pytest.raises(ArgumentError, match="integer division by zero"):
        i.div(0, rounding_mode="floor")
    with pytest.raises(ArgumentError, match="rounding_mode"):
        a.div(b, rounding_mode="round")


def test_floor_divide_and_remainder_follow_pytorchs_promotion():
    i32 = tg.tensor(np.array([7, -7], np.int32))
    h = tg.tensor(np.array([2.0, 2.0], np.float16))
    assert (i32 // h).dtype == np.float16  # NumPy would give float64
    assert (i32 % h).dtype == np.float16
    assert tg.floor_divide(10, tg.tensor([3])).tolist() == [3]
    with pytest.raises(GraphError, match="not differentiable"):
        tg.tensor([1.0], requires_grad=True).floor_divide(2)


def test_remainder_and_fmod_values_and_gradients():
    np.testing.assert_array_equal(tg.tensor(A * 4).remainder(tg.tensor(B)).numpy(),
                                  np.remainder(A * 4, B))
    np.testing.assert_array_equal(tg.tensor(A * 4).fmod(tg.tensor(B)).numpy(), np.fmod(A * 4, B))
    assert tg.remainder(tg.tensor(ints), 3).tolist() == [1, 2, 2, 0, 0]
    assert tg.fmod(tg.tensor(ints), 3).tolist() == [1, -1, 2, 0, 0]
    ga, gb = grads(lambda x, y: x % y, A * 4, B)  # % is remainder, differentiable
    np.testing.assert_array_equal(ga, np.ones_like(A))
    np.testing.assert_array_equal(gb, -np.floor_divide(A * 4, B))
    gb = grads(lambda x, y: x.fmod(y), A * 4, B)[1]
    np.testing.assert_array_equal(gb, -np.trunc(A * 4 / B))
    x = A * 4 + 0.01  # off the jumps
    both(lambda p, q: p.remainder(q) + p.fmod(q), [x, B])
    # a divisor of inf: the value stays finite, as PyTorch's (the slope is 0 there)
    got = tg.tensor([1.5, -1.5], requires_grad=True).fmod(tg.tensor([np.inf, 2.0]))
    np.testing.assert_array_equal(got.detach().numpy(), [1.5, -1.5])
    with pytest.raises(ArgumentError, match="integer division by zero"):
        tg.tensor(ints) % 0
    with pytest.raises(DTypeError, match="bool"):
        tg.tensor([True]).remainder(tg.tensor([True]))
    with pytest.raises(ArgumentTypeError):
        tg.fmod(2, tg.tensor([1.0]))  # torch.fmod takes no number as input either


def test_reciprocal_square_rsqrt_neg():
    i = tg.tensor(np.array([1, 2, 4]))
    assert i.reciprocal().dtype == np.float32
    np.testing.assert_array_equal(i.rsqrt().numpy(), 1 / np.sqrt(np.float32([1, 2, 4])))
    assert i.square().tolist() == [1, 4, 16] and i.square().dtype == np.int64
    assert tg.tensor([True, False]).square().dtype == np.int64  # as torch.square
    assert tg.negative(i).tolist() == [-1, -2, -4]
    both(lambda x: x.reciprocal() + x.square() + x.abs().rsqrt() + x.neg(), [B])


def test_addcmul_addcdiv_and_an_adam_step():
    a, b, c = tg.tensor(A), tg.tensor(B), tg.tensor(B[::-1].copy())
    np.testing.assert_allclose(a.addcmul(b, c, value=0.5).numpy(), A + 0.5 * B * B[::-1])
    np.testing.assert_allclose(tg.addcdiv(a, b, c, value=-2).numpy(), A - 2 * B / B[::-1])
    one = tg.tensor([1])
    assert one.addcmul(tg.tensor([3]), tg.tensor([3]), value=-2.5).tolist() == [-17]  # value->-2
    with pytest.raises(DTypeError, match="integer division"):
        one.addcdiv(one, one)
    both(lambda x, y, z: x.addcmul(y, z, value=0.3) + x.addcdiv(y, z, value=-1.5),
         [A, B, B[::-1].copy()])
    # Adam written by hand, as scripts do, against the formula
    p, g = tg.tensor(A.copy(), requires_grad=True), tg.tensor(B)
    m, v = tg.zeros_like(p), tg.zeros_like(p)
    with tg.no_grad():
        m.mul_(0.9).add_(g, alpha=0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        p.addcdiv_(m, v.sqrt().add_(1e-8), value=-0.01)
    mm, vv = 0.1 * B, 0.001 * B * B
    np.testing.assert_allclose(p.detach().numpy(), A - 0.01 * mm / (np.sqrt(vv) + 1e-8))


# -------------------------------------------------------------------- rounding
@pytest.mark.parametrize("name, ref", [("floor", np.floor), ("ceil", np.ceil),
                                       ("trunc", np.trunc), ("round", np.round)])
def test_rounding_values_zero_gradient_and_in_place(name, ref):
    x = A * 3
    np.testing.assert_array_equal(getattr(tg, name)(tg.tensor(x)).numpy(), ref(x))
    out = getattr(tg.tensor(x, requires_grad=True), name)()
    assert out.requires_grad  # a zero gradient, as PyTorch's (not "no gradient")
    np.testing.assert_array_equal(grads(lambda t: getattr(t, name)(), x)[0], np.zeros_like(x))
    assert getattr(tg.tensor(ints), name)().tolist() == ints.tolist()  # integers: a copy
    with pytest.raises(DTypeError, match="bool"):
        getattr(tg.tensor([True]), name)()
    y = tg.tensor(x.copy())
    getattr(y[1], name + "_")()  # through a view
    np.testing.assert_array_equal(y.numpy()[1], ref(x[1]))


def test_round_decimals_and_frac():
    v = np.array([1234.5678, 0.125, 2.5, -0.35])
    for d in (2, 1, 0, -2):
        np.testing.assert_array_equal(tg.tensor(v).round(decimals=d).numpy(), np.round(v, d))
    assert tg.tensor([0.5, 1.5]).round().tolist() == [0.0, 2.0]  # half to even
    with pytest.raises(DTypeError, match="decimals"):
        tg.tensor([1, 2]).round(decimals=1)
    np.testing.assert_array_equal(tg.frac(tg.tensor(A * 3)).numpy(), A * 3 - np.trunc(A * 3))
    np.testing.assert_array_equal(grads(lambda t: t.frac(), A)[0], np.ones_like(A))
    with pytest.raises(DTypeError):
        tg.tensor([1, 2]).frac()


# ------------------------------------------------------- elementwise functions
@pytest.mark.parametrize("name, ref, x", [
    ("expm1", np.expm1, A), ("log2", np.log2, np.abs(A) + 0.1),
    ("log10", np.log10, np.abs(A) + 0.1), ("sinh", np.sinh, A), ("cosh", np.cosh, A)])
def test_smooth_functions_exact_values_and_gradients(name, ref, x):
    got = getattr(tg.tensor(x, requires_grad=True), name)()
    np.testing.assert_allclose(got.detach().numpy(), ref(x), rtol=1e-15)
    np.testing.assert_allclose(getattr(tg, name)(tg.tensor(x)).numpy(), ref(x), rtol=1e-15)
    both(lambda t: getattr(t, name)(), [x])
    f32 = getattr(tg.tensor(x.astype(np.float32), requires_grad=True), name)()
    assert f32.dtype == np.float32
    assert getattr(tg.tensor(np.array([1, 2])), name)().dtype == np.float32


def test_smooth_functions_where_a_composition_would_round():
    tiny = np.array([1e-12, -1e-20, 3e-8])
    x = tg.tensor(tiny, requires_grad=True)
    np.testing.assert_array_equal(x.expm1().detach().numpy(), np.expm1(tiny))
    exact = tg.tensor(np.array([8.0, 1024.0, 1000.0]), requires_grad=True)
    assert exact.log2().tolist()[:2] == [3.0, 10.0] and exact.log10().tolist()[2] == 3.0
    big = tg.tensor(np.array([89.0], np.float32), requires_grad=True)  # exp(89) overflows
    assert np.isfinite(big.sinh().item()) and np.isfinite(big.cosh().item())
    np.testing.assert_array_equal(tg.tensor([np.inf, -np.inf], requires_grad=True).sinh()
                                  .detach().numpy(), [np.inf, -np.inf])


def test_inverse_trigonometry_values_and_gradients():
    x = np.clip(A / 3, -0.9, 0.9)
    for name, ref, d in (("asin", np.arcsin, 1 / np.sqrt(1 - x * x)),
                         ("acos", np.arccos, -1 / np.sqrt(1 - x * x)),
                         ("atan", np.arctan, 1 / (1 + x * x))):
        t = tg.tensor(x, requires_grad=True)
        y = getattr(t, name)()
        np.testing.assert_allclose(y.numpy(), ref(x))
        y.sum().backward()
        np.testing.assert_allclose(t.grad.numpy(), d, rtol=1e-12)
    np.testing.assert_allclose(tg.atan2(tg.tensor(A), tg.tensor(B)).numpy(), np.arctan2(A, B))
    assert tg.tensor([1]).atan2(tg.tensor([1])).dtype == np.float32
    a = tg.tensor(np.array([1.0, 0.0, 1e-170]), requires_grad=True)
    b = tg.tensor(np.array([2.0, 0.0, 1e-170]), requires_grad=True)
    tg.atan2(a, b).sum().backward()  # 0 where x^2 + y^2 is 0 (or underflows), as PyTorch
    np.testing.assert_allclose(a.grad.numpy(), [0.4, 0.0, 0.0])
    np.testing.assert_allclose(b.grad.numpy(), [-0.2, 0.0, 0.0])


def test_logical_ops_and_tests():
    x, y = tg.tensor(np.array([0.0, 2.0, np.nan, 0.0])), tg.tensor(np.array([1, 0, 3, 0]))
    assert tg.logical_and(x, y).tolist() == [False, False, True, False]
    assert x.logical_or(y).tolist() == [True, True, True, False]
    assert x.logical_xor(y).tolist() == [True, True, False, False]
    assert y.logical_not().tolist() == [False, True, False, True]
    with pytest.raises(ArgumentTypeError):
        x.logical_and(1)
    z = tg.tensor([1.0, np.inf, -np.inf, np.nan])
    assert z.isnan().tolist() == [False, False, False, True]
    assert z.isinf().tolist() == [False, True, True, False]
    assert z.isfinite().tolist() == [True, False, False, False]


def test_nan_to_num_values_and_gradient():
    z = np.array([1.5, np.inf, -np.inf, np.nan], np.float32)
    np.testing.assert_array_equal(tg.tensor(z).nan_to_num().numpy(), np.nan_to_num(z))
    np.testing.assert_array_equal(tg.nan_to_num(tg.tensor(z), 9.0, 1.0, -1.0).numpy(),
                                  [1.5, 1.0, -1.0, 9.0])
    np.testing.assert_array_equal(grads(lambda t: t.nan_to_num(), z.astype(np.float64))[0],
                                  [1, 0, 0, 0])
    assert tg.tensor([1, 2]).nan_to_num().tolist() == [1, 2]


# ------------------------------------------------------ selecting and writing
def test_masked_select_broadcasts_and_accumulates_gradients():
    m = np.array([True, False, True, True])
    got = tg.tensor(A).masked_select(tg.tensor(m))
    np.testing.assert_array_equal(got.numpy(), A[np.broadcast_to(m, A.shape)])
    g = grads(lambda t: t.masked_select(tg.tensor(np.ones((2, 4), bool))), A[0])[0]
    np.testing.assert_array_equal(g, [2.0, 2.0, 2.0, 2.0])  # broadcast to 2 rows: twice each
    with pytest.raises(DTypeError, match="bool"):
        tg.tensor(A).masked_select(tg.tensor([1, 0, 1, 1]))
    with pytest.raises(ShapeError):
        tg.tensor(A).masked_select(tg.tensor(np.ones((2, 4), bool)))


def test_scatter_src_value_and_reduce():
    idx = np.array([[2, 0, 1, 0], [0, 1, 2, 2]])
    src = rng.standard_normal((2, 4))
    want = A.copy()
    for i in range(2):
        for j in range(4):
            want[idx[i, j], j] = src[i, j]
    np.testing.assert_array_equal(tg.tensor(A).scatter(0, tg.tensor(idx), tg.tensor(src)).numpy(),
                                  want)
    filled = tg.scatter(tg.tensor(A), 0, tg.tensor(idx[:1]), value=7.0).numpy()
    assert (filled[idx[0], np.arange(4)] == 7).all()
    added = tg.tensor(A).scatter(0, tg.tensor(idx), tg.tensor(src), reduce="add").numpy()
    want = A.copy()
    np.add.at(want, (idx, np.arange(4)), src)
    np.testing.assert_allclose(added, want)
    times = tg.tensor(A).scatter(0, tg.tensor(idx), 2.0, reduce="multiply").numpy()
    want = A.copy()
    np.multiply.at(want, (idx, np.arange(4)), 2.0)
    np.testing.assert_array_equal(times, want)
    both(lambda x, s: x.scatter(0, tg.tensor(idx), s) * x, [A, src])
    with pytest.raises(GraphError, match="multiply"):
        tg.tensor(A, requires_grad=True).scatter(0, tg.tensor(idx), 2.0, reduce="multiply")
    with pytest.raises(DTypeError, match="dtype"):
        tg.tensor(A).scatter(0, tg.tensor(idx), tg.tensor(src.astype(np.float32)))
    with pytest.raises(ArgumentError):
        tg.tensor(A).scatter(0, tg.tensor(idx), 1.0, reduce="max")


def test_index_add_index_copy_and_scatter_add_in_place():
    idx = tg.tensor([2, 0, 2])
    rows = rng.standard_normal((3, 4))
    want = A.copy()
    np.add.at(want, [2, 0, 2], 2 * rows)
    np.testing.assert_allclose(tg.index_add(tg.tensor(A), 0, idx, tg.tensor(rows), alpha=2)
                               .numpy(), want)
    cols = rng.standard_normal((3, 2))
    want = A.copy()
    want[:, [3, 1]] = cols
    np.testing.assert_array_equal(tg.tensor(A).index_copy(1, tg.tensor([3, 1]), tg.tensor(cols))
                                  .numpy(), want)
    both(lambda x, r: x.index_add(0, idx, r) * x, [A, rows])
    both(lambda x, c: x.index_copy(1, tg.tensor([3, 1]), c) * x, [A, cols])
    # in place, through a view, in grad mode: the gradient reaches the base and the source
    x = tg.tensor(A, requires_grad=True)
    r = tg.tensor(rows[:2], requires_grad=True)
    y = x * 1.0
    y[1:].index_add_(0, tg.tensor([1, 0]), r)
    counts = tg.zeros(3)
    counts.scatter_add_(0, tg.tensor([0, 0, 2]), tg.ones(3))
    assert counts.tolist() == [2.0, 0.0, 1.0]
    (y * y).sum().backward()
    np.testing.assert_allclose(r.grad.numpy(), 2 * y.detach().numpy()[[2, 1]])
    with pytest.raises(ShapeError, match="out of range"):
        tg.tensor(A).index_add(0, tg.tensor([3]), tg.tensor(rows[:1]))
    with pytest.raises(ShapeError, match="must have shape"):
        tg.tensor(A).index_copy(0, tg.tensor([0]), tg.tensor(rows))
    with pytest.raises(DTypeError):
        tg.tensor(A).index_add(0, tg.tensor([0]), tg.tensor(rows[:1].astype(np.float32)))


# ------------------------------------------------------------- scans, shapes
def test_cumprod_values_and_exact_gradients_at_zeros():
    x = A.copy()
    x[0, 1] = x[2, 0] = x[2, 2] = 0.0
    np.testing.assert_allclose(tg.tensor(x).cumprod(1).numpy(), np.cumprod(x, 1))
    np.testing.assert_allclose(tg.cumprod(tg.tensor(x), 0).numpy(), np.cumprod(x, 0))
    both(lambda t: t.cumprod(1), [x])
    long = rng.uniform(0.8, 1.2, (2, 75))  # the blocked path: 75 > 32
    long[1, 40] = 0.0
    np.testing.assert_allclose(tg.tensor(long).cumprod(-1).numpy(), np.cumprod(long, -1))
    both(lambda t: t.cumprod(-1), [long])
    assert tg.tensor(np.array([1, 2, 3], np.int32)).cumprod(0).dtype == np.int64
    assert tg.tensor([True, False]).cumprod(0).tolist() == [1, 0]
    assert tg.tensor([1, 2]).cumprod(0, dtype=tg.float64).dtype == np.float64


def test_unbind_select_movedim_tile_repeat_interleave():
    x = tg.tensor(A)
    parts = x.unbind(1)
    assert len(parts) == 4 and all(np.array_equal(p.numpy(), A[:, k]) for k, p in enumerate(parts))
    np.testing.assert_array_equal(x.select(1, -1).numpy(), A[:, -1])
    with pytest.raises(OutOfRangeError):
        x.select(0, 3)
    y = tg.tensor(np.arange(24.0).reshape(2, 3, 4))
    np.testing.assert_array_equal(y.movedim(0, -1).numpy(), np.moveaxis(y.numpy(), 0, -1))
    np.testing.assert_array_equal(tg.moveaxis(y, (0, 1), (2, 0)).numpy(),
                                  np.moveaxis(y.numpy(), (0, 1), (2, 0)))
    np.testing.assert_array_equal(x.tile(2).numpy(), np.tile(A, 2))
    np.testing.assert_array_equal(tg.tile(x, (2, 1, 1)).numpy(), np.tile(A, (2, 1, 1)))
    np.testing.assert_array_equal(x.repeat_interleave(2, dim=0).numpy(), np.repeat(A, 2, 0))
    np.testing.assert_array_equal(x.repeat_interleave(tg.tensor([1, 0, 2, 1]), dim=1).numpy(),
                                  np.repeat(A, [1, 0, 2, 1], 1))
    np.testing.assert_array_equal(x.repeat_interleave(2).numpy(), np.repeat(A.ravel(), 2))
    assert tg.repeat_interleave(tg.tensor([1, 2])).tolist() == [0, 1, 1]
    with pytest.raises(ArgumentError, match=">= 0"):
        x.repeat_interleave(-1)
    with pytest.raises(ShapeError):
        x.repeat_interleave(tg.tensor([1, 2]), dim=0)
    with pytest.raises(ArgumentError, match="output_size"):
        x.repeat_interleave(2, dim=0, output_size=5)
    both(lambda t: t.unbind(1)[2] * t.select(0, 1)[:3] + t.movedim(0, 1).tile(1, 1)[0, 0]
         + t.repeat_interleave(2, dim=1)[:, 1:5].sum(), [A])


def test_diagonal_is_a_view_and_trace():
    a = tg.zeros(3, 4)
    a.diagonal().add_(1.0)
    a.t().diagonal(1).fill_(5.0)  # a transposed view: merged the other way
    want = np.eye(3, 4)
    want[[1, 2], [0, 1]] = 5.0
    np.testing.assert_array_equal(a.numpy(), want)
    y = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(tg.diagonal(tg.tensor(y), -1, 2, 1).numpy(),
                                  np.diagonal(y, -1, 2, 1))
    assert tg.tensor(A).diagonal(9).shape == (0,)
    stuck = tg.zeros(4, 4).t()[1:].diagonal()  # no view to be had: a read-only copy
    with pytest.raises(GraphError, match="read-only"):
        stuck.add_(1.0)
    w = tg.tensor(np.ones((3, 3)), requires_grad=True)
    z = w * 2
    z.diagonal().mul_(3)
    z.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), 2 + 4 * np.eye(3))
    both(lambda t: t.diagonal(1) * t.trace(), [A])
    assert tg.tensor(np.arange(9).reshape(3, 3)).trace().item() == 12
    with pytest.raises(ShapeError):
        tg.tensor(A[0]).trace()
    with pytest.raises(ShapeError, match="one axis"):
        tg.tensor(A).diagonal(0, 1, 1)


def test_count_nonzero_mT_and_products():
    x = tg.tensor(np.array([[0.0, 1.0, np.nan], [0.0, 0.0, 2.0]]))
    assert x.count_nonzero().item() == 3 and x.count_nonzero().dtype == np.int64
    assert tg.count_nonzero(x, dim=0).tolist() == [0, 1, 2]
    assert x.count_nonzero((0, 1)).item() == 3
    y = tg.tensor(rng.standard_normal((2, 3, 4)))
    np.testing.assert_array_equal(y.mT.numpy(), np.swapaxes(y.numpy(), -1, -2))
    with pytest.raises(ShapeError, match="mT"):
        _ = tg.tensor(A[0]).mT
    m, v = tg.tensor(A), tg.tensor(B[0])
    np.testing.assert_allclose(m.mv(v).numpy(), A @ B[0])
    np.testing.assert_allclose(tg.ger(v, v).numpy(), np.outer(B[0], B[0]))
    np.testing.assert_allclose(v.dot(v).item(), B[0] @ B[0])
    with pytest.raises(ShapeError):
        tg.mv(m, tg.tensor(B[:, 0]))
    both(lambda p, q: p.mv(q).sum() + q.outer(q), [A, B[0]])


def test_layout_queries():
    x = tg.tensor(np.zeros((3, 4), np.float32))
    assert x.stride() == (4, 1) and x.t().stride() == (1, 4) and x.stride(-1) == 1
    assert x.is_contiguous() and not x.t().is_contiguous() and not x[:, :1].is_contiguous()
    assert x.element_size() == 4 and tg.tensor([True]).element_size() == 1
    assert x.nelement() == 12
    assert not x.is_contiguous(memory_format=tg.channels_last)  # 2-D: PyTorch's False


def test_register_hook_is_refused_by_name():
    x = tg.tensor([1.0], requires_grad=True)
    with pytest.raises(GraphError, match="retain_grad"):
        x.register_hook(lambda g: g * 2)


def test_stride_of_inserted_length_one_axes_is_pytorchs():
    x = tg.zeros(3, 4)
    assert x[None].stride() == (12, 4, 1)      # NumPy's strides say 0 there
    assert x[:, None].stride() == (4, 4, 1)
    assert x[..., None].stride() == (4, 1, 1)
    assert x.t()[0:1].stride() == (1, 4)       # a sliced length-1 axis keeps its stride
    assert x.expand(2, 3, 4).stride() == (0, 4, 1)
