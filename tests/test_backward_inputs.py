"""backward(inputs=[...]): accumulate into those tensors only, replaying only the
entries that lead to them (MatConvNet's backPropDepth on a dynamic tape)."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, tape
from tapegrad.errors import GraphError


def _count_vjps(monkeypatch, entries):
    """Wrap the vjp of every class behind ``entries``; returns the list of the
    seqs whose vjp ran."""
    ran = []
    for cls in {e.fn for e in entries}:
        orig = cls.backward

        def counted(ctx, *g, _orig=orig):
            ran.append(ctx.seq)
            return _orig(ctx, *g)

        monkeypatch.setattr(cls, "backward", staticmethod(counted))
    return ran


def _net():
    tg.manual_seed(0)
    trunk = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU())
    head = nn.Sequential(nn.Linear(8, 5), nn.Tanh(), nn.Linear(5, 3))
    return trunk, head


def _x():
    return tg.tensor(np.random.default_rng(1).standard_normal((4, 6)), dtype=tg.float32)


def test_head_only_runs_no_vjp_of_the_trunk(monkeypatch):
    trunk, head = _net()
    feats = trunk(_x())
    loss = (head(feats) ** 2).sum()
    order = tape.entries(loss)
    trunk_seqs = {e.seq for e in tape.entries(feats)}
    head_seqs = {e.seq for e in order} - trunk_seqs
    ran = _count_vjps(monkeypatch, order)
    loss.backward(inputs=list(head.parameters()))
    assert set(ran) == head_seqs and len(ran) == len(head_seqs)
    assert not set(ran) & trunk_seqs
    assert all(p.grad is None for p in trunk.parameters())
    assert all(p.grad is not None for p in head.parameters())
    # the trunk's entries were not walked, so not released either
    assert all(e.saved is not None for e in tape.entries(feats))


def test_gradients_equal_the_full_backward():
    trunk, head = _net()
    x = _x()
    (head(trunk(x)) ** 2).sum().backward()
    want = [p.grad.numpy().copy() for p in head.parameters()]
    for p in (*trunk.parameters(), *head.parameters()):
        p.grad = None
    tg.backward((head(trunk(x)) ** 2).sum(), inputs=list(head.parameters()))
    for p, w in zip(head.parameters(), want):
        assert np.array_equal(p.grad.numpy(), w)


def test_an_input_deep_in_the_net_walks_only_the_path_to_it(monkeypatch):
    trunk, head = _net()
    loss = (head(trunk(_x())) ** 2).sum()
    first = trunk[0].weight
    ran = _count_vjps(monkeypatch, tape.entries(loss))
    loss.backward(inputs=[first])
    # every entry lies on the path from the loss to the first layer
    assert len(ran) == len(tape.entries(loss))
    assert first.grad is not None and trunk[0].bias.grad is None
    assert all(p.grad is None for p in head.parameters())


def test_pytorch_semantics_for_non_leaf_and_retained_tensors():
    x = tg.ones(3, requires_grad=True)
    w = tg.ones(3, requires_grad=True)
    h = x * w
    h.retain_grad()
    m = h * 2
    m.retain_grad()
    y = (m * 3).sum()
    y.backward(inputs=[w, h], retain_graph=True)
    # as torch 2.13: w and h get dy/dw, dy/dh (h once, though it is also retained);
    # m is retained and on the walked path, so it gets its gradient too; x is not an input
    assert np.array_equal(w.grad.numpy(), [6.0] * 3)
    assert np.array_equal(h.grad.numpy(), [6.0] * 3)
    assert np.array_equal(m.grad.numpy(), [3.0] * 3)
    assert x.grad is None
    y.backward(inputs=[w], retain_graph=True)  # accumulates
    assert np.array_equal(w.grad.numpy(), [12.0] * 3)


def test_non_leaf_input_without_retain_grad_accumulates_its_grad():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    h = x * 5
    (h * h).sum().backward(inputs=[h])
    assert np.array_equal(h.grad.numpy(), [10.0, 20.0])
    assert x.grad is None


def test_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    a0, b0 = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    a, b = tg.tensor(a0, requires_grad=True), tg.tensor(b0, requires_grad=True)
    ta = torch.tensor(a0, requires_grad=True)
    tb = torch.tensor(b0, requires_grad=True)
    h, th = tg.tanh(a @ b), torch.tanh(ta @ tb)
    (h.exp().sum() + (h * a[:, :2]).sum()).backward(inputs=[h, b])
    (th.exp().sum() + (th * ta[:, :2]).sum()).backward(inputs=[th, tb])
    assert a.grad is None and ta.grad is None
    np.testing.assert_allclose(h.grad.numpy(), th.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


def test_unreachable_input_gets_nothing_and_duplicates_count_once():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    u = tg.tensor([1.0], requires_grad=True)
    (x * x).sum().backward(inputs=[x, x, u])
    assert np.array_equal(x.grad.numpy(), [2.0, 4.0])
    assert u.grad is None


def test_errors():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    with pytest.raises(GraphError, match="inputs= is empty"):
        y.backward(inputs=[], retain_graph=True)
    with pytest.raises(GraphError, match="must require grad"):
        y.backward(inputs=[tg.tensor([1.0])], retain_graph=True)
    y.backward(inputs=x)  # a single tensor is accepted
    assert np.array_equal(x.grad.numpy(), [2.0, 4.0])
    with pytest.raises(GraphError, match="a second time"):
        y.backward(inputs=[x])


def test_create_graph_with_inputs():
    x = tg.tensor([0.5, -1.0], requires_grad=True)
    w = tg.tensor([2.0, 3.0], requires_grad=True)
    y = (tg.sin(x * w)).sum()
    y.backward(inputs=[x], create_graph=True)
    assert w.grad is None
    g = x.grad
    assert g.requires_grad
    (gx,) = tg.grad(g.sum(), x)  # d/dx sum(w cos(x w)) = -w^2 sin(x w)
    np.testing.assert_allclose(gx.numpy(), -(w.numpy() ** 2) * np.sin(x.numpy() * w.numpy()))


def test_post_accumulate_hooks_fire_for_inputs():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    w = tg.tensor([1.0, 1.0], requires_grad=True)
    seen = []
    x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    w.register_post_accumulate_grad_hook(lambda t: seen.append("w"))
    ((x * w) + x * x).sum().backward(inputs=[x])
    assert len(seen) == 1 and np.array_equal(seen[0], [3.0, 5.0])


@pytest.mark.parametrize("subset", [(0,), (1, 4), (2, 3, 5), (0, 1, 2, 3, 4, 5)])
def test_any_subset_of_parameters_gets_the_full_backward_gradient(subset):
    trunk, head = _net()
    params = [*trunk.parameters(), *head.parameters()]
    x = _x()
    (head(trunk(x)) ** 2).sum().backward()
    want = [p.grad.numpy().copy() for p in params]
    for p in params:
        p.grad = None
    chosen = [params[i] for i in subset]
    (head(trunk(x)) ** 2).sum().backward(inputs=chosen)
    for i, p in enumerate(params):
        if i in subset:
            assert np.array_equal(p.grad.numpy(), want[i])
        else:
            assert p.grad is None


def test_a_retained_sibling_output_of_an_input_gets_its_gradient():
    # torch 2.13: a, b = s.chunk(2) share one entry; with inputs=[a], the consumers
    # of b are walked too (they lead to that entry), so b's retain_grad() fires
    x = tg.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    a, b = tg.chunk(x * 2, 2)
    a.retain_grad()
    b.retain_grad()
    (a * 3 + b * 5).sum().backward(inputs=[a])
    assert np.array_equal(a.grad.numpy(), [3.0, 3.0])
    assert np.array_equal(b.grad.numpy(), [5.0, 5.0])
    assert x.grad is None


def test_hooks_of_inputs_may_queue_callbacks():
    # DistributedDataParallel's hooks queue a callback that waits for the reductions
    from tapegrad.engine import queue_callback

    w = tg.tensor([1.0, 2.0], requires_grad=True)
    v = tg.tensor([3.0], requires_grad=True)
    order = []

    def hook(t):
        order.append(("hook", t.grad.numpy().tolist()))
        queue_callback(lambda: order.append(("end", v.grad.numpy().tolist())))

    w.register_post_accumulate_grad_hook(hook)
    ((w * 2).sum() * v).sum().backward(inputs=[w, v])
    assert order == [("hook", [6.0, 6.0]), ("end", [6.0])]
    with pytest.raises(GraphError, match="no backward is running"):
        queue_callback(print)  # the queue is closed again
