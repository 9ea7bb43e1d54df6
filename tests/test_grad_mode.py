"""no_grad / enable_grad: context managers, decorators, thread-local."""

import threading

import numpy as np

import tapegrad as tg


def test_no_grad_records_nothing():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with tg.no_grad():
        y = x * 2.0
    assert not y.requires_grad and y.grad_fn is None
    with tg.no_grad(), tg.enable_grad():
        z = x * 2.0
    assert z.requires_grad
    assert tg.is_grad_enabled()


def test_decorators():
    x = tg.tensor([1.0], requires_grad=True)

    @tg.no_grad()
    def f(t):
        return t * 3.0

    @tg.enable_grad()
    def g(t):
        return t * 3.0

    assert not f(x).requires_grad
    with tg.no_grad():
        assert g(x).requires_grad
    assert f.__name__ == "f"


def test_grad_mode_is_thread_local():
    x = tg.tensor([1.0], requires_grad=True)
    seen = {}
    ready = threading.Event()
    done = threading.Event()

    def worker():
        ready.wait()
        seen["other"] = (x * 2.0).requires_grad
        done.set()

    t = threading.Thread(target=worker)
    t.start()
    with tg.no_grad():
        ready.set()
        done.wait()
        seen["here"] = (x * 2.0).requires_grad
    t.join()
    assert seen == {"other": True, "here": False}


def test_detach_cuts_the_graph():
    x = tg.tensor(np.array([2.0]), requires_grad=True)
    y = (x * x).detach() * x
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0])
