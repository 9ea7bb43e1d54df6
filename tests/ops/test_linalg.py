"""matmul and linear over generated batch/broadcast shapes."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as hs

import tapegrad as tg
from tapegrad import ops
from tapegrad.testing import gradcheck
from tapegrad.testing import strategies as st


@given(hs.data())
def test_matmul_batched_broadcasting(data):
    m, k, n = (data.draw(hs.integers(1, 3)) for _ in range(3))
    ba, bb = data.draw(st.broadcastable_shapes(max_dims=2, max_side=3))
    a_vec, b_vec = data.draw(hs.booleans()), data.draw(hs.booleans())
    sa = (k,) if a_vec else ba + (m, k)
    sb = (k,) if b_vec else bb + (k, n)
    r = np.random.default_rng(0)
    a, b = r.normal(size=sa), r.normal(size=sb)
    np.testing.assert_allclose((tg.tensor(a) @ tg.tensor(b)).numpy(), a @ b, rtol=1e-12)
    gradcheck(ops.matmul, [a, b])


@given(hs.integers(1, 4), hs.integers(1, 4), hs.integers(1, 4), hs.booleans())
def test_linear_is_caffe_inner_product(n, i, o, bias):
    r = np.random.default_rng(n + 10 * i + 100 * o)
    x, w, b = r.normal(size=(n, i)), r.normal(size=(o, i)), r.normal(size=o)
    args = [x, w, b] if bias else [x, w]
    want = x @ w.T + (b if bias else 0)
    np.testing.assert_allclose(ops.linear(*map(tg.tensor, args)).numpy(), want, rtol=1e-12)
    gradcheck(ops.linear, args)


def test_first_layer_skips_the_input_gradient():
    x = tg.tensor(np.ones((4, 3), np.float32))  # the data: needs no gradient
    w = tg.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    y = ops.linear(x, w)
    assert y.grad_fn.needs_input_grad[0] is False
    assert y.grad_fn.saved[1] is None  # the weight is not kept: no input gradient to compute
    y.sum().backward()
    assert x.grad is None and w.grad.shape == (2, 3)


# ------------------------------------------------------------------ norm
@given(st.shapes(min_dims=1, max_dims=3), hs.sampled_from([1, 2, 3.0, 0.5, np.inf, "fro"]),
       hs.integers(0, 1000))
def test_norm_matches_a_numpy_reference_and_gradchecks(shape, p, seed):
    r = np.random.default_rng(seed)
    x = r.uniform(0.3, 2.0, shape) * r.choice([-1, 1], shape)
    axis = int(r.integers(0, len(shape)))
    q = 2 if p == "fro" else p
    want = np.abs(x).max(axis=axis) if q == np.inf else (np.abs(x) ** q).sum(axis=axis) ** (1 / q)
    np.testing.assert_allclose(ops.norm(tg.tensor(x), p, axis).numpy(), want, rtol=1e-12)
    if q != np.inf:  # ties of random values are unlikely, but the inf-norm's kink is near
        gradcheck(lambda t: ops.norm(t, p, axis), [x])


def test_norm_of_zero_has_zero_gradient_and_inf_norm_shares_ties():
    x = tg.tensor(np.zeros(3), requires_grad=True)
    ops.norm(x).backward()  # before the rule's mask: 0/0
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 0.0])
    y = tg.tensor([3.0, -3.0, 1.0], requires_grad=True)
    ops.norm(y, np.inf).backward()
    np.testing.assert_array_equal(y.grad.numpy(), [0.5, -0.5, 0.0])


def test_norm_float16_accumulates_in_float32():
    y = ops.norm(tg.tensor(np.full(4, 260.0, np.float16)))
    assert y.dtype == np.float16 and y.item() == 520.0


def test_norm_is_a_function_and_refuses_bad_p():
    import pytest

    from tapegrad.errors import ArgumentError

    assert ops.norm(tg.tensor([3.0, 4.0])).item() == 5.0  # was: 'module' object is not callable
    for bad in (0, -1, "nuc", True):
        with pytest.raises(ArgumentError, match="norm: p"):
            ops.norm(tg.tensor([1.0]), bad)


def test_norm_matches_torch():
    import pytest

    torch = pytest.importorskip("torch")
    a = np.random.default_rng(3).normal(size=(2, 3, 4))
    for p in (1, 2, 3.0, np.inf):
        for axis in (None, 1, (0, 2)):
            x = tg.tensor(a, requires_grad=True)
            ops.norm(x, p, axis).sum().backward()
            t = torch.tensor(a, requires_grad=True)
            torch.linalg.vector_norm(t, p, dim=axis).sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-10)
