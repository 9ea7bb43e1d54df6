"""In-place ops and the version counter."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import GraphError


def test_inplace_bumps_version_and_updates_data():
    x = tg.tensor([1.0, 2.0])
    v = x.version
    x += 1.0
    x *= 2.0
    x.add_(tg.tensor([1.0, 1.0]), alpha=0.5)
    x[0] = 10.0
    assert x.version == v + 4
    np.testing.assert_allclose(x.numpy(), [10.0, 6.5])


def test_modifying_a_saved_tensor_raises_with_versions():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = ops.log(h)  # log saves its input h
    h += 1.0
    with pytest.raises(GraphError, match=r"Log .*saved input 0 at version 0.*now version 1"):
        y.sum().backward()


def test_modifying_a_saved_output_raises():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = ops.exp(x)  # exp saves its output
    z = y * 1.0
    y.mul_(2.0)
    with pytest.raises(GraphError, match="Exp"):
        (z + y).sum().backward()


def test_inplace_on_unsaved_tensor_is_fine_and_rebases_history():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 3.0  # nothing saved that h's later change would invalidate
    h += x  # h = 3x + x
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0])


def test_setitem_is_differentiable():
    x = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    v = tg.tensor([5.0], requires_grad=True)
    h = x * 1.0
    h[1:2] = v * 2.0
    (h * tg.tensor([1.0, 10.0, 100.0])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 0.0, 100.0])
    np.testing.assert_allclose(v.grad.numpy(), [20.0])


def test_inplace_on_leaf_requiring_grad_is_refused_outside_no_grad():
    w = tg.tensor([1.0], requires_grad=True)
    with pytest.raises(GraphError, match="leaf tensor.*no_grad"):
        w += 1.0
    with tg.no_grad():
        w -= 0.5  # how optimizers update parameters
    assert w.item() == 0.5 and w.is_leaf and w.requires_grad


def test_views_share_the_version_counter():
    x = tg.tensor(np.arange(6.0))
    v = x[2:4]
    r = x.reshape(2, 3)
    v += 1.0
    assert x.version == r.version == v.version == 1
    np.testing.assert_allclose(x.numpy()[2:4], [3.0, 4.0])


def test_writing_a_view_after_its_base_was_saved_raises():
    x = tg.tensor(np.arange(1.0, 5.0), requires_grad=True)
    base = x * 1.0
    y = ops.log(base)
    with tg.no_grad():
        base[0:2] += 1.0  # a write through a view of the saved tensor
    with pytest.raises(GraphError, match="modified in place"):
        y.sum().backward()


def test_inplace_on_view_of_graph_tensor_reaches_the_base():
    x = tg.tensor(np.arange(4.0), requires_grad=True)
    h = x * 2.0
    view = h[1:3]
    view *= 3.0  # h = [0, 6x1, 6x2, 2x3]
    (h * tg.tensor([1.0, 10.0, 100.0, 1000.0])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 60.0, 600.0, 2000.0])
