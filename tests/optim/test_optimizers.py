"""Optimizers: closed forms, torch.optim, param groups, state_dict, in-place rules."""

import copy

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.errors import GraphError, StateDictError

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def _param(values):
    return nn.Parameter(tg.tensor(np.asarray(values, np.float32)))


G = np.array([0.5, -2.0, 1e-3, 3.0], np.float32)
P0 = np.array([1.0, 2.0, -1.0, 0.0], np.float32)


def _run_constant_grad(opt_cls, steps, **kw):
    p = _param(P0)
    opt = opt_cls([p], **kw)
    for _ in range(steps):
        p.grad = tg.tensor(G)
        opt.step()
    return p.numpy().astype(np.float64)


def test_sgd_closed_forms():
    lr, m, k = 0.1, 0.9, 5
    np.testing.assert_allclose(_run_constant_grad(optim.SGD, 1, lr=lr), P0 - lr * G, rtol=1e-6)
    # momentum: buf_j = g (1 + m + ... + m^(j-1)), p_k = p0 - lr g sum_j (1 - m^j) / (1 - m)
    total = sum((1 - m ** j) / (1 - m) for j in range(1, k + 1))
    np.testing.assert_allclose(_run_constant_grad(optim.SGD, k, lr=lr, momentum=m),
                               P0 - lr * G * total, rtol=1e-5, atol=1e-6)
    # weight decay, one step: p - lr (g + wd p)
    np.testing.assert_allclose(_run_constant_grad(optim.SGD, 1, lr=lr, weight_decay=0.1),
                               P0 - lr * (G + 0.1 * P0), rtol=1e-6)
    # nesterov, one step: buf = g, d = g + m g
    np.testing.assert_allclose(
        _run_constant_grad(optim.SGD, 1, lr=lr, momentum=m, nesterov=True),
        P0 - lr * (1 + m) * G, rtol=1e-6)


def test_adam_and_rmsprop_closed_forms():
    lr, eps, t = 0.01, 1e-8, 4
    g = G.astype(np.float64)
    # constant g: m_hat = g, v_hat = g^2, so each step moves lr * g / (|g| + eps)
    np.testing.assert_allclose(_run_constant_grad(optim.Adam, t, lr=lr),
                               P0 - t * lr * g / (np.abs(g) + eps), rtol=1e-5, atol=1e-6)
    # AdamW: p *= 1 - lr wd before each step
    p = P0.astype(np.float64)
    for _ in range(t):
        p = p * (1 - lr * 0.1) - lr * g / (np.abs(g) + eps)
    np.testing.assert_allclose(_run_constant_grad(optim.AdamW, t, lr=lr, weight_decay=0.1), p,
                               rtol=1e-5, atol=1e-6)
    # RMSprop: s_t = g^2 (1 - alpha^t)
    alpha = 0.9
    p = P0.astype(np.float64)
    for k in range(1, t + 1):
        p = p - lr * g / (np.abs(g) * np.sqrt(1 - alpha ** k) + eps)
    np.testing.assert_allclose(_run_constant_grad(optim.RMSprop, t, lr=lr, alpha=alpha), p,
                               rtol=1e-5, atol=1e-6)
    # Adadelta, by its recursion written out in float64
    rho, e = 0.9, 1e-6
    p, s, u = P0.astype(np.float64), 0.0, 0.0
    for _ in range(t):
        s = rho * s + (1 - rho) * g * g
        d = np.sqrt(u + e) / np.sqrt(s + e) * g
        u = rho * u + (1 - rho) * d * d
        p = p - lr * d
    np.testing.assert_allclose(_run_constant_grad(optim.Adadelta, t, lr=lr), p, rtol=1e-5,
                               atol=1e-6)


TORCH_CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, weight_decay=1e-2)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.3)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.02, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, weight_decay=0.3, amsgrad=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.1)),
    ("RMSprop", dict(lr=0.003, centered=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1)),
]


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("name,kw", TORCH_CASES)
def test_matches_torch_optim(name, kw):
    rng = np.random.default_rng(0)
    init = rng.standard_normal((3, 4)).astype(np.float32)
    target = rng.standard_normal((3, 4)).astype(np.float32)
    ours = _param(init)
    theirs = torch.tensor(init, requires_grad=True)
    opt = getattr(optim, name)([ours], **kw)
    topt = getattr(torch.optim, name)([theirs], **kw)
    for step in range(8):
        noise = rng.standard_normal((3, 4)).astype(np.float32)
        # a gradient that depends on the current parameters (a quadratic bowl + noise)
        ours.grad = tg.tensor(2 * (ours.numpy() - target) + noise)
        theirs.grad = torch.from_numpy(2 * (theirs.detach().numpy() - target) + noise)
        opt.step()
        topt.step()
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{name} {kw} step {step}")


def test_step_is_in_place_unrecorded_and_bumps_version():
    tg.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    opt = optim.Adam(net.parameters(), lr=0.1)
    arrays = [p.array for p in net.parameters()]
    versions = [p.version for p in net.parameters()]
    net(tg.randn(5, 3)).sum().backward()
    stale = net(tg.randn(5, 3)).sum()  # saved the parameters before the step
    opt.step()
    for p, a, v in zip(net.parameters(), arrays, versions):
        assert p.array is a  # updated in place
        assert p.version == v + 1  # once per step
        assert p.is_leaf and p.grad_fn is None and p.requires_grad
    with pytest.raises(GraphError, match="modified in place"):
        stale.backward()


def test_parameters_without_grad_are_skipped():
    a, b = _param([1.0]), _param([2.0])
    opt = optim.SGD([a, b], lr=1.0, momentum=0.9)
    a.grad = tg.tensor([1.0])
    opt.step()
    assert a.item() == 0.0 and b.item() == 2.0 and b.version == 0
    assert b not in opt.state or not opt.state.get(b)


def test_zero_grad_and_closure():
    p = _param([3.0])
    opt = optim.SGD([p], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with tg.no_grad():  # the closure still records
        loss = opt.step(closure)
    assert loss.item() == 9.0 and p.item() == pytest.approx(3.0 - 0.25 * 6.0)
    opt.zero_grad()
    assert p.grad is None
    p.grad = tg.tensor([1.0])
    opt.zero_grad(set_to_none=False)
    assert p.grad.item() == 0.0


def _net(seed):
    tg.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))


def test_gradient_accumulation_equals_one_big_batch():
    """Caffe's iter_size / MatConvNet's accumulate: backward on k sub-batch losses
    (each scaled by 1/k) and one step give the same update as the full batch."""
    tg.manual_seed(0)
    x, y = tg.randn(12, 6), tg.randn(12, 2)
    big, acc = _net(1), _net(1)
    opt_big = optim.SGD(big.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    opt_acc = optim.SGD(acc.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    loss_fn = nn.MSELoss()
    for _ in range(3):
        opt_big.zero_grad()
        loss_fn(big(x), y).backward()
        opt_big.step()
        opt_acc.zero_grad()
        for k in range(3):
            sl = slice(4 * k, 4 * k + 4)
            (loss_fn(acc(x[sl]), y[sl]) / 3).backward()
        for p, q in zip(big.parameters(), acc.parameters()):
            np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-7)
        opt_acc.step()
    for p, q in zip(big.parameters(), acc.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6)


def test_param_groups_and_caffe_mults():
    net = _net(0)
    groups = optim.mult_param_groups(net, lr=0.1, weight_decay=1e-2,
                                     lr_mult={"*.bias": 2, "0.weight": 0},
                                     decay_mult={"*.bias": 0})
    opt = optim.SGD(groups, lr=0.1, momentum=0.9)
    by_mult = {(g["lr_mult"], g["decay_mult"]): g for g in opt.param_groups}
    assert set(by_mult) == {(2.0, 0.0), (1.0, 1.0)}
    assert by_mult[2.0, 0.0]["lr"] == pytest.approx(0.2)
    assert by_mult[2.0, 0.0]["weight_decay"] == 0.0
    assert by_mult[1.0, 1.0]["lr"] == pytest.approx(0.1)
    assert [p.shape for p in by_mult[1.0, 1.0]["params"]] == [(2, 8)]  # 0.weight is frozen
    assert all(g["momentum"] == 0.9 for g in opt.param_groups)
    # per-group lr is honoured
    a, b = _param([0.0]), _param([0.0])
    opt = optim.SGD([{"params": [a]}, {"params": [b], "lr": 1.0}], lr=0.1)
    a.grad, b.grad = tg.tensor([1.0]), tg.tensor([1.0])
    opt.step()
    assert a.item() == pytest.approx(-0.1) and b.item() == pytest.approx(-1.0)
    c = _param([0.0])
    opt.add_param_group({"params": c, "momentum": 0.5})
    assert opt.param_groups[-1]["lr"] == 0.1 and opt.param_groups[-1]["momentum"] == 0.5


def test_argument_errors():
    p = _param([1.0])
    with pytest.raises(TypeError):
        optim.SGD(p, lr=0.1)
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="required"):
        optim.SGD([p])
    with pytest.raises(ValueError, match="more than one"):
        optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        optim.SGD([p * 2], lr=0.1)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError):
        optim.RMSprop([p], lr=-1)


@pytest.mark.parametrize("make", [
    lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
    lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True),
    lambda ps: optim.AdamW(ps, lr=0.01),
    lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.3, centered=True),
])
def test_state_dict_round_trip_resumes_exactly(make, tmp_path):
    tg.manual_seed(3)
    x, y = tg.randn(8, 6), tg.randn(8, 2)
    net = _net(5)
    opt = make(net.parameters())

    def train(model, o, steps):
        for _ in range(steps):
            o.zero_grad()
            nn.MSELoss()(model(x), y).backward()
            o.step()

    train(net, opt, 3)
    tg.save({"model": net.state_dict(), "optim": opt.state_dict()}, tmp_path / "ckpt.npz")
    train(net, opt, 2)

    resumed = _net(99)  # different init: everything must come from the checkpoint
    ropt = make(resumed.parameters())
    ckpt = tg.load(tmp_path / "ckpt.npz")
    resumed.load_state_dict(ckpt["model"])
    ropt.load_state_dict(ckpt["optim"])
    assert ropt.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    train(resumed, ropt, 2)
    for p, q in zip(net.parameters(), resumed.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


def test_load_state_dict_copies_and_checks_groups():
    a = _param([1.0, 2.0])
    opt = optim.Adam([a], lr=0.1)
    a.grad = tg.tensor([1.0, 1.0])
    opt.step()
    sd = copy.deepcopy(opt.state_dict())
    b = _param([1.0, 2.0])
    opt2 = optim.Adam([b], lr=0.5)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == 0.1 and opt2.param_groups[0]["betas"] == (0.9, 0.999)
    st = opt2.state[b]
    assert st["step"] == 1 and st["exp_avg"] is not sd["state"][0]["exp_avg"]
    assert st["exp_avg"].dtype == np.float32
    with pytest.raises(StateDictError, match="groups"):
        optim.Adam([{"params": [b]}, {"params": [_param([0.0])]}]).load_state_dict(sd)
    with pytest.raises(StateDictError, match="parameters"):
        optim.Adam([b, _param([0.0])]).load_state_dict(sd)
