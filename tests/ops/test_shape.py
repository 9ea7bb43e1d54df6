"""Shape and indexing ops over generated shapes."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as hs

import tapegrad as tg
from tapegrad import ops
from tapegrad.testing import gradcheck
from tapegrad.testing import strategies as st


@given(st.arrays(st.shapes(min_dims=1)), hs.data())
def test_reshape_transpose_flatten(x, data):
    perm = data.draw(hs.permutations(list(range(x.ndim))))
    gradcheck(lambda t: ops.transpose(t, perm), [x])
    np.testing.assert_array_equal(ops.transpose(tg.tensor(x), perm).numpy(), x.transpose(perm))
    gradcheck(lambda t: ops.reshape(t, (-1,)), [x])
    gradcheck(lambda t: ops.flatten(t, 0), [x])
    a, b = data.draw(hs.integers(0, x.ndim - 1)), data.draw(hs.integers(0, x.ndim - 1))
    np.testing.assert_array_equal(ops.swapaxes(tg.tensor(x), a, b).numpy(), x.swapaxes(a, b))


@given(hs.data())
def test_broadcast_to_sums_back(data):
    small, big = data.draw(st.broadcastable_shapes())
    out = np.broadcast_shapes(small, big)
    x = data.draw(st.arrays(small))
    gradcheck(lambda t: ops.broadcast_to(t, out), [x])


@given(st.arrays(st.shapes(min_dims=1, max_dims=3, min_side=2)), hs.data())
def test_advanced_indexing_with_repeats_accumulates(x, data):
    idx = np.array(data.draw(hs.lists(hs.integers(0, x.shape[0] - 1), min_size=1, max_size=6)))
    t = tg.tensor(x, requires_grad=True)
    t[idx].sum().backward()
    want = np.zeros(x.shape[0])
    np.add.at(want, idx, 1)
    np.testing.assert_allclose(t.grad.numpy().reshape(x.shape[0], -1)[:, 0], want)
    gradcheck(lambda v: v[idx], [x])


@given(st.arrays(st.shapes(min_dims=2, max_dims=3, min_side=2)))
def test_basic_slicing(x):
    gradcheck(lambda t: t[1:, ::-1], [x])
    gradcheck(lambda t: t[..., 0, None], [x])


@given(hs.integers(1, 3), hs.integers(1, 3), hs.integers(0, 1))
def test_concatenate_stack_split(n1, n2, axis):
    r = np.random.default_rng(n1 * 10 + n2)
    a, b = r.normal(size=(2, n1)), r.normal(size=(2, n2))
    if axis == 0:
        a, b = a.T, b.T
    gradcheck(lambda x, y: ops.concatenate([x, y], axis=axis), [a, b])
    gradcheck(lambda x: ops.stack([x, x * 2.0], axis=axis), [a])
    c = ops.concatenate([tg.tensor(a), tg.tensor(b)], axis=axis)
    parts = ops.split(c, [a.shape[axis]], axis=axis)
    np.testing.assert_array_equal(parts[0].numpy(), a)
    np.testing.assert_array_equal(parts[1].numpy(), b)


@given(st.arrays(st.shapes(min_dims=1, max_dims=3)), hs.data())
def test_pad_and_expand_squeeze(x, data):
    pw = [(data.draw(hs.integers(0, 2)), data.draw(hs.integers(0, 2))) for _ in range(x.ndim)]
    gradcheck(lambda t: ops.pad(t, pw), [x])
    np.testing.assert_array_equal(ops.pad(tg.tensor(x), pw).numpy(), np.pad(x, pw))
    e = ops.expand_dims(tg.tensor(x), 0)
    assert e.shape == (1,) + x.shape
    assert ops.squeeze(e, 0).shape == x.shape
