"""Shape and indexing ops over generated shapes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError, ShapeError
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


# --------------------------------------------------------------- ops.pad (NumPy)


@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 3, 4)])
@pytest.mark.parametrize("pad_width", [0, 2, (1,), ((1, 2),), [[2, 0]], np.array([1, 1]),
                                       "per-axis", "per-axis-single"])
def test_pad_follows_numpy_pad_width(shape, pad_width):
    x = np.random.default_rng(0).standard_normal(shape)
    if isinstance(pad_width, str) and pad_width == "per-axis":
        pad_width = tuple((i, 2 - i) for i in range(len(shape)))
    elif isinstance(pad_width, str):
        pad_width = tuple((i + 1,) for i in range(len(shape)))
    y = ops.pad(tg.tensor(x), pad_width, value=-1.0)
    np.testing.assert_array_equal(y.numpy(), np.pad(x, pad_width, constant_values=-1.0))
    gradcheck(lambda t: ops.pad(t, pad_width), [x])


def test_pad_flat_pair_is_before_after_on_every_axis_as_numpy():
    x = np.zeros((2, 3, 4))
    # NumPy: (1, 2) pads every axis 1 before, 2 after (this used to raise)
    assert ops.pad(tg.tensor(x), (1, 2)).shape == np.pad(x, (1, 2)).shape == (5, 6, 7)


@pytest.mark.parametrize("shape, pad_width, err, words", [
    # was ((1, 1), (2, 2)): (4, 7); NumPy gives (5, 6)
    ((2, 3), (1, 2), ArgumentError, r"pad_width \(1, 2\) is ambiguous for shape \(2, 3\)"),
    # was one symmetric pad per axis; NumPy refuses
    ((2, 3, 4), (1, 2, 3), ArgumentError, r"one int per axis.*\(\(1, 1\), \(2, 2\), \(3, 3\)\)"),
    ((2, 3, 4), ((1, 2), (3, 4)), ShapeError, r"shape \(2, 3, 4\)"),
    ((2, 3), -1, ArgumentError, r"non-negative"),
    ((2, 3), ((1, -1),), ArgumentError, r"non-negative"),
    ((2, 3), (1.5,), ArgumentError, r"NumPy's"),
    ((2, 3), ((1, 2), 3), ArgumentError, r"NumPy's"),
])
def test_pad_refuses_what_numpy_refuses_and_the_ambiguous(shape, pad_width, err, words):
    with pytest.raises(err, match=r"pad: .*" + words):
        ops.pad(tg.zeros(*shape), pad_width)


# ------------------------------------------------------------ axis validation


@pytest.mark.parametrize("call, words", [
    (lambda x: ops.transpose(x, (0, 1, 5)), r"transpose: axis 5 is out of range for shape "
                                            r"\(3, 2, 1\) \(valid axes: -3 to 2\)"),
    (lambda x: ops.transpose(x, (0, 1, -4)), r"transpose: axis -4 is out of range"),
    (lambda x: ops.transpose(x, (0, 1)), r"transpose: axes \(0, 1\) must name each of the 3"),
    (lambda x: ops.permute(x, 0, 2, 2), r"permute: axes \(0, 2, 2\) name an axis .* twice"),
    (lambda x: ops.permute(x, (0, 1, 3)), r"permute: axis 3 is out of range"),
    (lambda x: ops.swapaxes(x, 0, 4), r"swapaxes: axis 4 is out of range .*\(3, 2, 1\)"),
    (lambda x: ops.expand_dims(x, 5), r"expand_dims: axis 5 .*\(valid axes: -4 to 3\)"),
    (lambda x: ops.squeeze(x, 5), r"squeeze: axis 5 is out of range"),
    (lambda x: ops.squeeze(x, (2, -1)), r"squeeze: axes \(2, -1\) name an axis .* twice"),
    (lambda x: ops.concatenate([x, x], 3), r"concatenate: axis 3 is out of range"),
    (lambda x: ops.stack([x, x], 5), r"stack: axis 5 .*\(valid axes: -4 to 3\)"),
    (lambda x: ops.split(x, 2, 3), r"split: axis 3 is out of range"),
    (lambda x: ops.flatten(x, 4), r"flatten: axis 4 is out of range"),
    (lambda x: ops.flatten(x, 0, -5), r"flatten: axis -5 is out of range"),
    (lambda x: ops.flatten(tg.tensor(1.0), 1), r"flatten: axis 1 .*\(valid axes: -1 to 0\)"),
    (lambda x: ops.concatenate([tg.tensor(1.0)] * 2), r"concatenate: axis 0 .*0-d array"),
])
def test_axes_are_validated_with_a_named_shape_error(call, words):
    # before: NumPy's AxisError, an IndexError (split), or a silent wrap-around
    # (swapaxes(x, 0, 4) swapped axes 0 and 1; squeeze(x, 5) and flatten(x, 4) too)
    with pytest.raises(ShapeError, match=words):
        call(tg.tensor(np.zeros((3, 2, 1))))


def test_axis_must_be_an_int():
    with pytest.raises(ArgumentError, match=r"swapaxes: axis must be one int, got 1.0"):
        ops.swapaxes(tg.zeros(2, 3), 1.0, 0)


def test_reshape_messages_say_why():
    with pytest.raises(ShapeError, match=r"only one size may be -1"):
        ops.reshape(tg.zeros(2, 3), (-1, -1))
    with pytest.raises(ShapeError, match=r"\(0, -1\): with a 0 among the sizes the -1"):
        ops.reshape(tg.zeros(0, 4), (0, -1))


# ---------------------------------------------------------- zero-size tensors


@pytest.mark.parametrize("call, out_shape", [
    (lambda x: ops.reshape(x, (-1, 12)), (0, 12)),
    (lambda x: ops.flatten(x, 1), (0, 12)),
    (lambda x: ops.transpose(x, (1, 0, 2)), (3, 0, 4)),
    (lambda x: ops.swapaxes(x, 0, -1), (4, 3, 0)),
    (lambda x: ops.expand_dims(x, 1), (0, 1, 3, 4)),
    (lambda x: ops.squeeze(ops.expand_dims(x, 0), 0), (0, 3, 4)),
    (lambda x: ops.concatenate([x, x], axis=0), (0, 3, 4)),
    (lambda x: ops.concatenate([x, ops.pad(x, ((1, 0), (0, 0), (0, 0)))], axis=0), (1, 3, 4)),
    (lambda x: ops.stack([x, x], axis=1), (0, 2, 3, 4)),
    (lambda x: ops.split(x, [1], axis=1)[1], (0, 2, 4)),
    (lambda x: ops.pad(x, 1), (2, 5, 6)),
    (lambda x: ops.getitem(x, (slice(None), [0, 0, 2])), (0, 3, 4)),
    (lambda x: ops.getitem(x, (Ellipsis, 1)), (0, 3)),
    (lambda x: ops.broadcast_to(x[:, :1], (0, 3, 4)), (0, 3, 4)),
])
def test_zero_size_shape_ops(call, out_shape):
    x = tg.tensor(np.zeros((0, 3, 4), np.float32), requires_grad=True)
    y = call(x)
    assert y.shape == out_shape and y.dtype == np.float32
    ops.sum(y).backward()
    assert x.grad.shape == x.shape


# ---------------------------------------------------------------- tril, triu, sort, topk


@pytest.mark.parametrize("k", [-2, -1, 0, 1, 3])
def test_tril_triu_against_loops(k):
    x = np.random.default_rng(1).normal(size=(2, 3, 4))
    for op, keep in ((ops.tril, lambda i, j: j - i <= k), (ops.triu, lambda i, j: j - i >= k)):
        t = tg.tensor(x, requires_grad=True)
        y = op(t, k)
        ref = np.array([[[x[b, i, j] if keep(i, j) else 0.0 for j in range(4)]
                         for i in range(3)] for b in range(2)])
        np.testing.assert_array_equal(y.numpy(), ref)
        y.sum().backward()
        np.testing.assert_array_equal(t.grad.numpy(), (ref != 0).astype(float))


def test_tril_errors_and_non_finite_values():
    with pytest.raises(ShapeError, match=r"tril: expects a tensor of at least 2 axes.*\(3,\)"):
        ops.tril(tg.ones(3))
    with pytest.raises(ArgumentError, match="triu: diagonal must be an int"):
        ops.triu(tg.ones(2, 2), 0.5)
    assert ops.triu(tg.tensor([[1.0, 2.0], [np.inf, 3.0]])).numpy().tolist() == [[1, 2], [0, 3]]


def test_sort_is_stable_and_puts_nan_last():
    x = np.array([3.0, 1.0, np.nan, 1.0, 3.0, 2.0])
    v, i = ops.sort(tg.tensor(x))
    assert i.numpy().tolist() == [1, 3, 5, 0, 4, 2] and i.dtype == tg.int64
    v, i = ops.sort(tg.tensor(x), descending=True)
    assert i.numpy().tolist() == [2, 0, 4, 5, 1, 3]
    np.testing.assert_array_equal(v.numpy(), x[[2, 0, 4, 5, 1, 3]])


def test_sort_and_topk_values_carry_the_gradient_back():
    x = np.array([[0.3, -1.0, 2.0, 0.5], [1.0, 0.0, -0.5, 0.2]])
    t = tg.tensor(x, requires_grad=True)
    v, i = ops.topk(t, 2, dim=1)
    assert i.numpy().tolist() == [[2, 3], [0, 3]]
    (v * tg.tensor([[1.0, 10.0], [100.0, 1000.0]])).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), [[0, 0, 1, 10], [100, 0, 0, 1000]])
    v, i = ops.topk(tg.tensor(x), 3, axis=-1, largest=False)
    assert i.numpy().tolist() == [[1, 0, 3], [2, 1, 3]]
    assert ops.sort(tg.tensor(x), dim=0).indices.numpy().tolist() == [[0, 0, 1, 1], [1, 1, 0, 0]]
    with pytest.raises(ShapeError, match=r"topk: k=5 is out of range for 4 elements"):
        ops.topk(tg.tensor(x), 5)
    assert ops.topk(tg.zeros(0, 4), 2).values.shape == (0, 2)


# ------------------------------------------------ index ranges (hardening, second round)

@pytest.mark.parametrize("index", [np.array([2**64 - 1], np.uint64), [2**64 - 1],
                                   np.uint64(2**64 - 1),
                                   (np.ones(5, bool), np.array([2**63], np.uint64))])
def test_an_unsigned_index_past_intp_is_refused_not_wrapped(index):
    # NumPy casts uint64 to intp: 2**64-1 became -1, and W[...] returned the last row
    w = tg.tensor(np.arange(10.0).reshape(5, 2), requires_grad=True)
    with pytest.raises(ShapeError, match="does not fit axis"):
        w[index]
    with pytest.raises(ShapeError, match="does not fit axis"):
        h = w * 1
        h[index] = 0.0


def test_unsigned_indices_in_range_still_index():
    w = tg.tensor(np.arange(10.0).reshape(5, 2))
    np.testing.assert_array_equal(w[np.array([4, 0], np.uint64)].numpy(), [[8, 9], [0, 1]])
    np.testing.assert_array_equal(w[..., np.array([1], np.uint64)].numpy().ravel(),
                                  [1, 3, 5, 7, 9])


def test_off_the_host_every_integer_index_is_range_checked():
    # CuPy wraps out-of-range advanced indices; the check runs before indexing there
    from tapegrad.testing.fakedevice import fake_device

    w = tg.tensor(np.arange(10.0).reshape(5, 2)).to(fake_device())
    with pytest.raises(ShapeError, match=r"values 0\.\.5 does not fit axis 0"):
        w[np.array([0, 5])]
    with pytest.raises(ShapeError, match=r"values -3\.\.-3 does not fit axis 1"):
        w[:, np.array([-3])]
    np.testing.assert_array_equal(w[np.array([-1])].to("cpu").numpy(), [[8, 9]])
