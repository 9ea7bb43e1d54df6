"""Post-accumulate-grad hooks and end-of-backward callbacks (the engine's hooks)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.engine import queue_callback
from tapegrad.errors import GraphError


def test_hook_fires_once_after_all_contributions():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    ((w * 3).sum() + (w * w).sum() + w.sum()).backward()  # three consumers of w
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], 3 + 2 * np.array([1.0, 2.0]) + 1)


def test_hook_fires_when_some_consumers_get_no_gradient():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    calls = []
    w.register_post_accumulate_grad_hook(lambda t: calls.append(1))

    class FirstOnly(tg.Function):  # gives its second input no gradient
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g, None

    dead_end = w * 5  # reached by backward, but no gradient flows into it
    FirstOnly.apply(w * 2, dead_end).sum().backward()
    assert calls == [1]
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 2.0])


def test_hook_on_root_leaf_and_remove():
    w = tg.tensor(2.0, requires_grad=True)
    calls = []
    h = w.register_post_accumulate_grad_hook(lambda t: calls.append(t.grad.item()))
    w.backward()
    assert calls == [1.0]
    h.remove()
    (w * 1).backward()
    assert calls == [1.0]


def test_unreached_leaf_and_grad_do_not_fire():
    a = tg.tensor(1.0, requires_grad=True)
    b = tg.tensor(1.0, requires_grad=True)
    calls = []
    b.register_post_accumulate_grad_hook(lambda t: calls.append("b"))
    a.register_post_accumulate_grad_hook(lambda t: calls.append("a"))
    (a * 2).backward()
    tg.grad(a * b, b)  # returns gradients, accumulates nothing
    assert calls == ["a"]


def test_hook_only_on_leaves():
    x = tg.tensor(1.0, requires_grad=True)
    with pytest.raises(GraphError, match="leaf"):
        (x * 2).register_post_accumulate_grad_hook(print)


def test_queue_callback_runs_at_the_end_of_backward():
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    v = tg.tensor([1.0], requires_grad=True)
    order = []

    def hook(t):
        order.append("hook")
        queue_callback(lambda: order.append(("end", v.grad is not None)))

    w.register_post_accumulate_grad_hook(hook)
    ((w * 2).sum() * v).sum().backward()
    assert order == ["hook", ("end", True)]
    with pytest.raises(GraphError, match="no backward is running"):
        queue_callback(print)
