"""tapegrad.utils.checkpoint / checkpoint_sequential: same gradients, less saved."""

import threading

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, tape
from tapegrad.errors import ArgumentError, GraphError
from tapegrad.utils import checkpoint, checkpoint_sequential, is_recomputing


def _vgg_like():
    """bench_train's VGG-small layer pattern, scaled down (float64)."""
    tg.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
        nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.5), nn.Flatten(), nn.Linear(24, 10), nn.ReLU(), nn.Linear(10, 3),
    ).to(dtype=tg.float64)


def _batch():
    rng = np.random.default_rng(0)
    return rng.standard_normal((5, 3, 8, 8)), rng.integers(0, 3, 5)


def _step(model, forward):
    """One training step's gradients and the model state after it."""
    x0, y = _batch()
    x = tg.tensor(x0, requires_grad=True)
    tg.manual_seed(7)  # the dropout masks
    loss = nn.functional.cross_entropy(forward(model, x), y)
    saved = tg.memory_report(loss).total_saved
    loss.backward()
    grads = [p.grad.numpy().copy() for p in model.parameters()] + [x.grad.numpy().copy()]
    state = [v.numpy().copy() for v in model.state_dict().values()]
    return grads, state, saved


def _plain(model, x):
    return model(x)


def _two_segments(model, x):
    h = checkpoint(nn.Sequential(*list(model)[:4]), x)
    h = checkpoint(nn.Sequential(*list(model)[4:11]), h)
    return nn.Sequential(*list(model)[11:])(h)


def test_gradients_identical_and_saved_bytes_drop():
    g0, s0, saved0 = _step(_vgg_like(), _plain)
    g1, s1, saved1 = _step(_vgg_like(), _two_segments)
    for a, b in zip(g0, g1):
        assert np.array_equal(a, b)  # bitwise: the same ops on the same arrays
    # running statistics and num_batches_tracked updated once, as without checkpointing
    for a, b in zip(s0, s1):
        assert np.array_equal(a, b)
    assert saved1 < 0.5 * saved0


def test_checkpoint_sequential_matches():
    g0, s0, _ = _step(_vgg_like(), _plain)
    g1, s1, _ = _step(_vgg_like(), lambda m, x: checkpoint_sequential(m, 3, x))
    for a, b in zip(g0 + s0, g1 + s1):
        assert np.array_equal(a, b)


def test_one_entry_whose_edges_are_the_boundary():
    tg.manual_seed(0)
    lin = nn.Linear(3, 2).to(dtype=tg.float64)
    x = tg.tensor(np.ones((2, 3)), requires_grad=True)
    skip = x * 2  # an earlier entry's output, captured in a closure
    out = checkpoint(lambda a: tg.tanh(lin(a)) + skip[:, :2], x)
    node = out.grad_fn
    assert node.name == "Checkpoint"
    targets = {id(t) for _, t, _, _, _ in node.edges}
    assert {id(x), id(lin.weight), id(lin.bias), id(skip.grad_fn)} == targets
    # it keeps only its inputs: the segment's own entries are gone
    assert [e.name for e in tape.entries(out)] == ["Checkpoint", "Mul"]
    out.sum().backward()
    want_x = (1 - np.tanh(lin(tg.tensor(np.ones((2, 3)))).numpy()) ** 2) @ lin.weight.numpy()
    want_x[:, :2] += 2.0  # through skip = x * 2
    np.testing.assert_allclose(x.grad.numpy(), want_x, rtol=1e-12)


def test_double_backward():
    tg.manual_seed(3)
    lin = nn.Linear(5, 3).to(dtype=tg.float64)
    x0 = np.random.default_rng(2).standard_normal((4, 5))

    def f(a):
        return tg.tanh(lin(a)) * a.sum(1, keepdim=True)

    res = []
    for ck in (False, True):
        x = tg.tensor(x0, requires_grad=True)
        y = checkpoint(f, x) if ck else f(x)
        (g,) = tg.grad((y * y).sum(), x, create_graph=True)
        gx, gw = tg.grad((g * g).sum(), [x, lin.weight])
        res.append([g.numpy(), gx.numpy(), gw.numpy()])
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_grad_and_backward_inputs_through_a_checkpoint():
    tg.manual_seed(1)
    a, b = nn.Linear(4, 4).to(dtype=tg.float64), nn.Linear(4, 2).to(dtype=tg.float64)
    x = tg.tensor(np.random.default_rng(0).standard_normal((3, 4)))
    want = tg.grad((b(tg.relu(a(x))) ** 2).sum(), [a.weight, b.weight])
    got = tg.grad((b(checkpoint(lambda t: tg.relu(a(t)), x)) ** 2).sum(), [a.weight, b.weight])
    for w, g in zip(want, got):
        assert np.array_equal(w.numpy(), g.numpy())
    (b(checkpoint(lambda t: tg.relu(a(t)), x)) ** 2).sum().backward(inputs=[a.weight])
    assert np.array_equal(a.weight.grad.numpy(), want[0].numpy())
    assert a.bias.grad is None and b.weight.grad is None


def test_several_outputs_kwargs_and_constants():
    x = tg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)

    def f(t, scale=1.0):
        return t * scale, "label", (t * t).sum(1), 3

    h, label, s, three = checkpoint(f, x, scale=2.0)
    assert label == "label" and three == 3
    (h.sum() + 0 * s.sum()).backward()  # s's gradient is zero, not missing
    assert np.array_equal(x.grad.numpy(), np.full((2, 3), 2.0))
    x.grad = None
    _, _, s, _ = checkpoint(f, x, scale=2.0)
    s.sum().backward()  # the first output unused: its gradient is zeros
    assert np.array_equal(x.grad.numpy(), 2 * x.numpy())


def test_preserve_rng_state():
    x = tg.tensor(np.ones((50, 40)), requires_grad=True)

    def drop(t):
        return nn.functional.dropout(t, 0.5)

    tg.manual_seed(0)
    y = checkpoint(drop, x)
    y.sum().backward()
    assert np.array_equal(x.grad.numpy(), y.numpy())  # d(x * mask)/dx = mask = y here
    x.grad = None
    y = checkpoint(drop, x, preserve_rng_state=False)
    y.sum().backward()  # a fresh mask in backward: the user asked for it
    assert not np.array_equal(x.grad.numpy(), y.numpy())


def test_nested_checkpoints():
    tg.manual_seed(4)
    lin = nn.Linear(3, 3).to(dtype=tg.float64)
    x0 = np.random.default_rng(5).standard_normal((2, 3))

    def inner(t):
        return tg.tanh(lin(t))

    def outer(t):
        return checkpoint(inner, t) * 3 + t

    grads = []
    for f in (lambda t: inner(t) * 3 + t, lambda t: checkpoint(outer, t)):
        x = tg.tensor(x0, requires_grad=True)
        lin.zero_grad()
        f(x).sum().backward()
        grads.append((x.grad.numpy(), lin.weight.grad.numpy()))
    for a, b in zip(*grads):
        assert np.array_equal(a, b)


def test_retain_graph_and_a_second_backward():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = checkpoint(lambda t: (t * t).sum(), x)
    y.backward(retain_graph=True)
    y.backward()
    assert np.array_equal(x.grad.numpy(), [4.0, 8.0])
    with pytest.raises(GraphError, match="a second time"):
        y.backward()


def test_no_grad_and_nothing_to_differentiate():
    x = tg.tensor([1.0, 2.0])
    y = checkpoint(lambda t: t * 2, x)  # nothing requires grad: a plain call
    assert y.grad_fn is None
    with tg.no_grad():
        y = checkpoint(lambda t: t * 2, tg.tensor([1.0], requires_grad=True))
    assert y.grad_fn is None


def test_errors():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ArgumentError, match="non-reentrant"):
        checkpoint(lambda t: t * 2, x, use_reentrant=True)
    with pytest.raises(ArgumentError, match="callable"):
        checkpoint(3, x)
    with pytest.raises(ArgumentError, match="dict"):
        checkpoint(lambda t: {"a": t * 2}, x)
    with pytest.raises(ArgumentError, match="segments"):
        checkpoint_sequential([lambda t: t], 2, x)
    # an input modified in place between forward and backward
    h = x * 1
    y = checkpoint(lambda t: (t * t).sum(), h)
    h.array[...] = 0
    h._bump_version()
    with pytest.raises(GraphError, match="modified in place"):
        y.backward()
    # a function that reads different tensors when recomputed
    w1 = tg.tensor([1.0, 1.0], requires_grad=True)
    w2 = tg.tensor([2.0, 2.0], requires_grad=True)
    calls = []

    def fickle(t):
        calls.append(1)
        return (t * (w1 if len(calls) == 1 else w2)).sum()

    y = checkpoint(fickle, x)
    with pytest.raises(GraphError, match="read different tensors"):
        y.backward()


def test_is_recomputing_and_forward_saves_nothing():
    flags = []
    x = tg.tensor(np.ones(4), requires_grad=True)

    def f(t):
        flags.append(is_recomputing())
        return tg.exp(t).sum()

    y = checkpoint(f, x)
    assert tape._unsaved is None  # the save hook is off again after the forward
    assert tg.memory_report(y).total_saved == x.array.nbytes  # only the input is kept
    y.backward()
    assert flags == [False, True]
    assert not is_recomputing()


def test_other_threads_keep_saving_during_a_checkpointed_forward():
    started, release = threading.Event(), threading.Event()
    x = tg.tensor(np.ones(3), requires_grad=True)

    def slow(t):
        started.set()
        release.wait(10)
        return t * 2

    th = threading.Thread(target=lambda: checkpoint(slow, x))
    th.start()
    started.wait(10)
    try:
        y = tg.exp(x)  # recorded in this thread while the other is inside checkpoint
        assert y.grad_fn.saved  # exp keeps its output
    finally:
        release.set()
        th.join(10)


class _LockedBits:
    """A CuPy-like bit generator: a lock (no deepcopy) and its state in one array."""

    def __init__(self):
        self.lock = threading.Lock()
        self._state = np.array([0])


class _LockedGenerator:
    """CuPy's Generator: its bits in ``bit_generator`` (``_bit_generator`` before CuPy
    10 or so), and a lazily made binomial state."""

    def __init__(self, attr):
        self.attr = attr
        setattr(self, attr, _LockedBits())
        self._binomial_state = None

    def random(self, shape, dtype=np.float64):
        s = getattr(self, self.attr)._state
        s += 1
        return np.full(shape, (s[0] % 7) / 7.0, dtype=dtype)


@pytest.mark.parametrize("attr", ["bit_generator", "_bit_generator"])
def test_rng_replay_of_a_generator_that_cannot_be_deep_copied(monkeypatch, attr):
    from tapegrad import random

    gen = _LockedGenerator(attr)
    monkeypatch.setitem(random._generators, "cpu", gen)
    x = tg.tensor(np.ones(5), requires_grad=True)
    y = checkpoint(lambda t: t * tg.tensor(random.get_generator("cpu").random(5)), x)
    drawn = y.numpy().copy()
    y.sum().backward()
    assert np.array_equal(x.grad.numpy(), drawn)  # the recomputation drew the same numbers
    assert getattr(gen, attr)._state[0] == 1  # and the live generator did not move back


def test_retain_grad_on_a_checkpoint_input_counts_its_gradient_once():
    # the segment's replay reaches h's entry as a sink; the outer backward then
    # replays it with the full gradient: h.grad got the segment's part twice
    tg.manual_seed(2)
    lin = nn.Linear(4, 4).to(dtype=tg.float64)
    x0 = np.random.default_rng(6).standard_normal((3, 4))
    res = []
    for ck in (False, True):
        x = tg.tensor(x0, requires_grad=True)
        h = x * 2
        h.retain_grad()
        out = checkpoint(lambda t: tg.tanh(lin(t)), h) if ck else tg.tanh(lin(h))
        ((out * out).sum() + h.sum()).backward()
        res.append((h.grad.numpy(), x.grad.numpy()))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    assert h.grad_fn.retained is not None  # put back after the replay


def test_an_unused_output_leaves_what_only_it_reaches_without_grad():
    # as torch.utils.checkpoint: v only feeds the unused output, so v.grad stays None
    # (a zero .grad would still move v under momentum or weight decay)
    x = tg.tensor(np.ones((2, 3)), requires_grad=True)
    w = tg.tensor(np.ones((3, 3)), requires_grad=True)
    v = tg.tensor(np.ones((3, 2)), requires_grad=True)
    a, b = checkpoint(lambda t: (tg.tanh(t @ w), t @ v), x)
    a.sum().backward()
    assert v.grad is None
    assert w.grad is not None and x.grad is not None
    x.grad = w.grad = None
    a, b = checkpoint(lambda t: (tg.tanh(t @ w), t @ v), x)
    b.sum().backward()
    assert w.grad is None
    np.testing.assert_array_equal(v.grad.numpy(), np.full((3, 2), 2.0))


def test_a_parameter_modified_between_forward_and_backward_raises():
    # the recomputation would read the new values: a gradient the forward never had
    # (without a checkpoint, the matmul's saved weight raises the same way)
    x = tg.tensor(np.ones((2, 3)), requires_grad=True)
    w = tg.tensor(np.ones((3, 3)), requires_grad=True)
    y = checkpoint(lambda t: tg.tanh(t @ w), x)
    with tg.no_grad():
        w.mul_(2)
    with pytest.raises(GraphError, match="modified in place after its forward"):
        y.sum().backward()
    y = checkpoint(lambda t: tg.tanh(t @ w), x)  # modified before the forward: fine
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), (1 - np.tanh(6.0) ** 2) * 6 * np.ones((2, 3)))


def test_exceptions_leave_no_state_behind():
    x = tg.tensor(np.ones(3), requires_grad=True)

    def boom(t):
        raise KeyError("in forward")

    with pytest.raises(KeyError):
        checkpoint(boom, x)
    assert tape._unsaved is None and not is_recomputing()
    calls = []

    def boom_later(t):
        calls.append(1)
        if len(calls) == 2:
            raise KeyError("in the recomputation")
        return nn.functional.dropout(t, 0.5) * 2

    tg.manual_seed(0)
    y = checkpoint(boom_later, x)
    state = tg.random.get_generator("cpu").bit_generator.state
    with pytest.raises(KeyError):
        y.sum().backward()
    assert not is_recomputing() and tape._unsaved is None and tg.is_grad_enabled()
    assert tg.random.get_generator("cpu").bit_generator.state == state  # put back
    (x * 2).sum().backward()  # the engine works as before
    assert np.array_equal(x.grad.numpy(), [2.0] * 3)


def test_a_leaked_intermediate_reaching_backward_is_a_clear_error():
    # PyTorch recomputes it; tapegrad's entry for it kept nothing: say so, and how to fix
    x = tg.tensor(np.full((2, 3), 0.1), requires_grad=True)
    w = tg.tensor(np.ones((3, 3)), requires_grad=True)
    store = []

    def f(t):
        h = tg.tanh(t @ w)
        store.append(h)
        return h * 2

    y = checkpoint(f, x)
    with pytest.raises(GraphError, match=r"`Tanh` \(tape entry #\d+\) ran inside a checkpointed"):
        (y.sum() + (store[0] ** 2).sum()).backward()
    x.grad = w.grad = None  # the checkpoint's vjp ran before the error
    y = checkpoint(f, x)
    y.sum().backward()  # the returned output alone is fine
    np.testing.assert_allclose(x.grad.numpy(), 2 * (1 - np.tanh(0.3) ** 2) * 3 * np.ones((2, 3)))
