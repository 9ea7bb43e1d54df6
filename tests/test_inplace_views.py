"""In-place writes and the graph: PyTorch's semantics for tensors and their views.

Each expected value is PyTorch 2.13's answer (``x = [1, 2, 3]``, ``b = [10, 20, 30]``,
both requiring grad); before views were rebased, tapegrad gave the answer in the
comment. tests/differential/ compares many more cases against torch itself."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import GraphError


def _x():
    return tg.tensor([1.0, 2.0, 3.0], requires_grad=True)


def _b():
    return tg.tensor([10.0, 20.0, 30.0], requires_grad=True)


def _grad(t):
    return None if t.grad is None else t.grad.numpy().ravel().tolist()


def test_zero_and_fill_record_that_the_old_values_are_gone():
    x = _x()
    y = x * 2
    y.zero_()
    (y * x).sum().backward()
    assert _grad(x) == [0, 0, 0]  # was [2, 4, 6]
    x = _x()
    y = x * 2
    y.fill_(5.0)
    (y * y).sum().backward()
    assert _grad(x) == [0, 0, 0]  # was [20, 20, 20]
    np.testing.assert_array_equal(y.numpy(), [5.0, 5.0, 5.0])


def test_fill_with_a_tensor_value_is_differentiable():
    x, b = _x(), _b()
    y = x * 1
    y.fill_(b[1])
    y.sum().backward()
    assert _grad(x) == [0, 0, 0] and _grad(b) == [0, 3, 0]


def test_a_view_taken_before_an_inplace_op_on_its_base_sees_it():
    x = _x()
    y = x * 1
    v = y[0:2]
    y *= 3
    v.sum().backward()
    assert _grad(x) == [3, 3, 0]  # was [1, 1, 0]


def test_setitem_on_the_base_reaches_an_older_view():
    x, b = _x(), _b()
    y = x * 1
    v = y[0:2]
    y[0] = b[0]
    v.sum().backward()
    assert _grad(x) == [0, 1, 0] and _grad(b) == [1, 0, 0]  # was [1, 1, 0] and None


def test_inplace_through_a_view_reaches_the_base_graph():
    x = _x()
    c = tg.zeros(2, 3)
    v = c[0]
    v += x
    assert c.requires_grad and c.grad_fn is not None
    (c * c).sum().backward()
    assert _grad(x) == [2, 4, 6]  # was [0, 0, 0]


def test_a_transposed_view_sees_an_inplace_add_on_its_base():
    x, b = _x(), _b()
    y = x.reshape(3, 1) * 1
    v = y.T
    y += b.reshape(3, 1)
    (v * v).sum().backward()
    assert _grad(b) == [22, 44, 66] and _grad(x) == [22, 44, 66]  # b was None


def test_views_of_views_and_sibling_views_follow_a_write_through_one_of_them():
    x = tg.tensor(np.arange(1.0, 7.0), requires_grad=True)
    y = (x * 1).reshape(2, 3)
    row = y[1]           # view of y
    col = y.T[:, 0]      # view of a view of y: y[:, 0]
    row[1:] *= 10.0      # y[1, 1:] *= 10
    (col * tg.tensor([1.0, 2.0, 3.0])).sum().backward()  # col = [y00, y01, y02]
    assert _grad(x) == [1, 2, 3, 0, 0, 0]
    x.grad = None
    y = (x * 1).reshape(2, 3)
    row = y[1]
    diag = y.T[1]        # y[:, 1] = [y01, y11]
    row[1:] *= 10.0
    diag.sum().backward()
    assert _grad(x) == [0, 1, 0, 0, 10, 0]
    np.testing.assert_array_equal(diag.numpy(), [2.0, 50.0])


def test_multiply_in_place_by_a_tensor_that_requires_grad():
    x, b = _x(), _b()
    y = x * 1
    y *= b  # was refused: Mul's saved y was overwritten; it now keeps the old y
    y.sum().backward()
    assert _grad(x) == [10, 20, 30] and _grad(b) == [1, 2, 3]
    x, b = _x(), _b()
    v = (x * 1)[1:]
    v *= b[1:]
    v.sum().backward()
    assert _grad(x) == [0, 20, 30] and _grad(b) == [0, 2, 3]


def test_a_view_write_is_differentiable_twice():
    x = _x()
    y = x * 1
    v = y[1:]
    v *= x[1:]  # y = [x0, x1^2, x2^2]
    (gx,) = tg.grad((y * y).sum(), [x], create_graph=True)  # 2x0, 4x1^3, 4x2^3
    np.testing.assert_allclose(gx.numpy(), [2.0, 32.0, 108.0])
    gx.sum().backward()  # 2, 12x1^2, 12x2^2
    assert _grad(x) == [2, 48, 108]


def test_an_operand_that_is_the_written_tensor_is_refused_as_in_torch():
    x = _x()
    y = x * 1
    y *= y  # Mul saved y twice: as input 0 (kept, a copy) and as its other operand
    with pytest.raises(GraphError, match="modified in place"):
        y.sum().backward()


def test_an_entry_that_saved_the_old_values_still_refuses_backward():
    x = _x()
    y = x * 1
    e = ops.exp(y)  # saves its output
    e[0:2] *= 2.0   # through a view: e's saved output changed
    with pytest.raises(GraphError, match="modified in place"):
        e.sum().backward()


def test_writes_into_expanded_views_are_refused_by_name():
    x = _x()
    e = ops.broadcast_to(x.reshape(1, 3) * 1, (2, 3))
    with pytest.raises(GraphError, match="expand"):
        e.add_(1.0)
    with tg.no_grad(), pytest.raises(GraphError, match="expand"):
        ops.broadcast_to(tg.zeros(1, 3), (2, 3)).fill_(1.0)


def test_fill_and_zero_on_a_leaf_that_requires_grad_are_refused_in_grad_mode():
    x = _x()
    with pytest.raises(GraphError, match="leaf tensor"):
        x.fill_(1.0)
    with pytest.raises(GraphError, match="leaf tensor"):
        x.zero_()
    with pytest.raises(GraphError, match="view of a leaf"):
        x[0:2].zero_()
    with tg.no_grad():
        x.zero_()  # as nn.init does
    assert _grad(x) is None and x.numpy().tolist() == [0, 0, 0]


def test_views_made_in_no_grad_mode_and_split_views_are_refused_where_torch_refuses():
    x = _x()
    y = x * 1
    with tg.no_grad():
        v = y[0:2]
    with pytest.raises(GraphError, match="grad mode was off"):
        v += 1.0
    a, _ = ops.split(x * 1, [1], 0)
    with pytest.raises(GraphError, match="several views"):
        a += 1.0


def test_a_reshape_that_copies_is_no_view():
    x = tg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    t = (x * 1).T  # not contiguous: reshape copies
    flat = t.reshape(6)
    flat += 100.0
    assert t.numpy().max() < 100  # the copy's write does not reach t
    assert t.version == 0 and flat.version == 1


def _writes_through_views(x, b):
    """y (3, 4) from x, changed through a transposed view, a row view and setitem."""
    y = (x * 1).reshape(3, 4)
    t = y.T[1:3]          # (2, 3): y[:, 1:3] transposed
    t *= b                # b (2, 3)
    row = y[2]
    row += ops.exp(x[:4])
    y[0, 0] = b[0, 0] * x[5]
    return y * y


def test_view_writes_pass_gradcheck_and_gradgradcheck():
    from tapegrad.testing.gradcheck import gradcheck, gradgradcheck

    rng = np.random.default_rng(0)
    x, b = rng.standard_normal(12), rng.standard_normal((2, 3))
    gradcheck(_writes_through_views, [x, b])
    gradgradcheck(_writes_through_views, [x, b])


def test_view_writes_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    x, b = rng.standard_normal(12), rng.standard_normal((2, 3))
    tx, tb = (torch.tensor(a, requires_grad=True) for a in (x, b))
    gx, gb = (tg.tensor(a, requires_grad=True) for a in (x, b))
    ty = (tx * 1).reshape(3, 4)
    tt = ty.T[1:3]
    tt *= tb
    ty[2] += torch.exp(tx[:4])
    ty[0, 0] = tb[0, 0] * tx[5]
    (ty * ty).sum().backward()
    _writes_through_views(gx, gb).sum().backward()
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gb.grad.numpy(), tb.grad.numpy(), rtol=1e-12)
