"""Learning-rate schedulers vs closed forms and torch.optim.lr_scheduler."""

import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.optim import lr_scheduler as S

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def _opt(lr=0.1, second=None):
    groups = [{"params": [nn.Parameter(tg.zeros(1))]}]
    if second is not None:
        groups.append({"params": [nn.Parameter(tg.zeros(1))], "lr": second})
    return optim.SGD(groups, lr=lr, momentum=0.9)


def _lrs(sched, steps):
    """get_last_lr() after 0..steps steps; each must equal the groups' lr."""
    out = []
    for t in range(steps + 1):
        if t:
            sched.optimizer.step()
            sched.step()
        out.append(sched.get_last_lr())
        assert [g["lr"] for g in sched.optimizer.param_groups] == out[-1]
    return out


CASES = [
    ("StepLR", dict(step_size=3, gamma=0.5), lambda b, t: b * 0.5 ** (t // 3)),
    ("MultiStepLR", dict(milestones=[5, 2], gamma=0.1),
     lambda b, t: b * 0.1 ** ((t >= 2) + (t >= 5))),
    ("ExponentialLR", dict(gamma=0.9), lambda b, t: b * 0.9 ** t),
    ("CosineAnnealingLR", dict(T_max=6, eta_min=0.01),
     lambda b, t: 0.01 + (b - 0.01) * (1 + math.cos(math.pi * t / 6)) / 2),
    ("LambdaLR", dict(lr_lambda=lambda t: 1 / (t + 1)), lambda b, t: b / (t + 1)),
    ("PolyLR", dict(max_iter=8, power=0.9), lambda b, t: b * (1 - min(t, 8) / 8) ** 0.9),
    ("InvLR", dict(gamma=1e-1, power=0.75), lambda b, t: b * (1 + 0.1 * t) ** -0.75),
]


@pytest.mark.parametrize("name,kw,formula", CASES)
def test_closed_forms_per_group(name, kw, formula):
    sched = getattr(S, name)(_opt(0.1, second=0.02), **kw)
    for t, lrs in enumerate(_lrs(sched, 10)):
        np.testing.assert_allclose(lrs, [formula(0.1, t), formula(0.02, t)], rtol=1e-12,
                                   atol=1e-15, err_msg=f"{name} t={t}")


@pytest.mark.skipif(torch is None, reason="torch not installed")
@pytest.mark.parametrize("name,kw,formula", [c for c in CASES if hasattr(
    torch.optim.lr_scheduler if torch else None, c[0])])
def test_matches_torch(name, kw, formula):
    p = torch.zeros(1, requires_grad=True)
    topt = torch.optim.SGD([p], lr=0.1)
    theirs = getattr(torch.optim.lr_scheduler, name)(topt, **kw)
    ours = getattr(S, name)(_opt(0.1), **kw)
    for t in range(12):
        np.testing.assert_allclose(ours.get_last_lr(), theirs.get_last_lr(), rtol=1e-9,
                                   err_msg=f"{name} t={t}")
        topt.step()
        theirs.step()
        ours.step()


def test_poly_matches_torch_polynomial():
    if torch is None:
        pytest.skip("torch not installed")
    p = torch.zeros(1, requires_grad=True)
    topt = torch.optim.SGD([p], lr=0.1)
    theirs = torch.optim.lr_scheduler.PolynomialLR(topt, total_iters=8, power=2.0)
    ours = S.PolyLR(_opt(0.1), max_iter=8, power=2.0)
    for _ in range(10):
        assert ours.get_last_lr()[0] == pytest.approx(theirs.get_last_lr()[0], abs=1e-12)
        topt.step()
        theirs.step()
        ours.step()


def test_scheduler_state_dict_resume():
    opt = _opt(0.1)
    sched = S.MultiStepLR(opt, milestones=[3, 6], gamma=0.5)
    for _ in range(4):
        sched.step()
    state = sched.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == 4
    opt2 = _opt(0.1)
    sched2 = S.MultiStepLR(opt2, milestones=[1], gamma=0.9)
    sched2.load_state_dict(state)
    for _ in range(4):
        sched.step()
        sched2.step()
        assert sched2.get_last_lr() == sched.get_last_lr()
        assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]


def test_lambda_state_dict_leaves_functions_out(tmp_path):
    sched = S.LambdaLR(_opt(), lambda t: 0.5 ** t)
    sched.step()
    state = sched.state_dict()
    assert "lr_lambdas" not in state
    tg.save(state, tmp_path / "s.npz")
    back = tg.load(tmp_path / "s.npz")
    sched2 = S.LambdaLR(_opt(), lambda t: 0.5 ** t)
    sched2.load_state_dict(back)
    sched.step()
    sched2.step()
    assert sched2.get_last_lr() == sched.get_last_lr() == [0.1 * 0.25]


def test_resuming_needs_initial_lr_and_bad_arguments():
    with pytest.raises(ValueError, match="initial_lr"):
        S.StepLR(_opt(), step_size=2, last_epoch=5)
    opt = _opt()
    S.StepLR(opt, step_size=2)
    resumed = S.StepLR(opt, step_size=2, gamma=0.5, last_epoch=4)
    assert resumed.get_last_lr() == [0.1 * 0.5 ** 2]
    with pytest.raises(ValueError):
        S.PolyLR(_opt(), max_iter=0)
    with pytest.raises(ValueError):
        S.LambdaLR(_opt(second=0.1), [lambda t: 1.0])
