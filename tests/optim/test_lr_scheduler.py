"""Learning-rate schedulers vs closed forms and torch.optim.lr_scheduler."""

import math
import warnings

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.errors import ArgumentError, ArgumentTypeError, StateDictError
from tapegrad.optim import lr_scheduler as S

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")


def _opt(lr=0.1, second=None, kind="SGD", **kw):
    groups = [{"params": [nn.Parameter(tg.zeros(1))]}]
    if second is not None:
        groups.append({"params": [nn.Parameter(tg.zeros(1))], "lr": second})
    if kind == "SGD":
        kw.setdefault("momentum", 0.9)
    return getattr(optim, kind)(groups, lr=lr, **kw)


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
    ("MultiStepLR", dict(milestones=[3, 3, 6], gamma=0.5),
     lambda b, t: b * 0.5 ** (2 * (t >= 3) + (t >= 6))),
    ("ConstantLR", dict(factor=0.25, total_iters=4), lambda b, t: b * (0.25 if t < 4 else 1)),
    ("LinearLR", dict(start_factor=0.2, total_iters=4),
     lambda b, t: b * (0.2 + 0.8 * min(t, 4) / 4)),
    ("LinearLR", dict(start_factor=1.0, end_factor=0.0, total_iters=6),
     lambda b, t: b * (1 - min(t, 6) / 6)),
    ("ExponentialLR", dict(gamma=0.9), lambda b, t: b * 0.9 ** t),
    ("CosineAnnealingLR", dict(T_max=6, eta_min=0.01),
     lambda b, t: 0.01 + (b - 0.01) * (1 + math.cos(math.pi * t / 6)) / 2),
    ("LambdaLR", dict(lr_lambda=lambda t: 1 / (t + 1)), lambda b, t: b / (t + 1)),
    ("PolyLR", dict(max_iter=8, power=0.9), lambda b, t: b * (1 - min(t, 8) / 8) ** 0.9),
    ("InvLR", dict(gamma=1e-1, power=0.75), lambda b, t: b * (1 + 0.1 * t) ** -0.75),
]
IDS = [f"{c[0]}-{i}" for i, c in enumerate(CASES)]


@pytest.mark.parametrize("name,kw,formula", CASES, ids=IDS)
def test_closed_forms_per_group(name, kw, formula):
    sched = getattr(S, name)(_opt(0.1, second=0.02), **kw)
    seen = _lrs(sched, 14)
    for t, lrs in enumerate(seen):
        np.testing.assert_allclose(lrs, [formula(0.1, t), formula(0.02, t)], rtol=1e-12,
                                   atol=1e-15, err_msg=f"{name} t={t}")
    assert sched.get_lr() == pytest.approx(seen[-1], rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("name,kw,formula", CASES, ids=IDS)
def test_chainable_form_stays_on_closed_form_over_long_runs(name, kw, formula):
    # step() multiplies the current lr (as PyTorch); rounding drifts only a little
    sched = getattr(S, name)(_opt(0.1), **kw)
    for t in range(1, 600):
        sched.step()
        assert sched.get_last_lr()[0] == pytest.approx(formula(0.1, t), rel=1e-11, abs=1e-15)


@pytest.mark.parametrize("name,kw,formula", CASES, ids=IDS)
def test_step_with_epoch_sets_the_closed_form(name, kw, formula):
    sched = getattr(S, name)(_opt(0.1), **kw)
    for t in (7, 2, 0, 11):
        sched.step(t)
        assert sched.last_epoch == t
        assert sched.get_last_lr() == pytest.approx([formula(0.1, t)], rel=1e-14, abs=1e-16)


# ------------------------------------------------------------------ vs torch
def _torch_opt(lr=0.1, second=None, kind="SGD", **kw):
    ps = [{"params": [torch.zeros(1, requires_grad=True)]}]
    if second is not None:
        ps.append({"params": [torch.zeros(1, requires_grad=True)], "lr": second})
    if kind == "SGD":
        kw.setdefault("momentum", 0.9)
    return getattr(torch.optim, kind)(ps, lr=lr, **kw)


def _same_groups(ours, theirs, where):
    for i, (a, b) in enumerate(zip(ours.param_groups, theirs.param_groups)):
        for k in ("lr", "momentum", "betas", "initial_lr"):
            if k in b:
                np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=0,
                                           err_msg=f"{where} group {i} {k}")


def _compare(make, steps, kind="SGD", second=0.02, metrics=None, **opt_kw):
    """Build ``make(S_or_T, opt)`` on both sides and compare steps 0..steps-1."""
    topt = _torch_opt(0.1, second, kind, **opt_kw)
    oopt = _opt(0.1, second, kind, **opt_kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation notes
        theirs, ours = make(torch.optim.lr_scheduler, topt), make(S, oopt)
        for t in range(steps):
            np.testing.assert_allclose(ours.get_last_lr(), theirs.get_last_lr(), rtol=1e-12,
                                       atol=0, err_msg=f"t={t}")
            _same_groups(oopt, topt, f"t={t}")
            if t == steps - 1:
                break
            topt.step()
            oopt.step()
            if metrics is None:
                theirs.step()
                ours.step()
            else:
                metrics(t, ours, theirs)
    return ours, theirs


def _poly(L, opt, **kw):
    if L is S:
        return S.PolyLR(opt, max_iter=kw["total_iters"], power=kw["power"])
    return L.PolynomialLR(opt, **kw)


TORCH_CASES = [
    ("StepLR", dict(step_size=1, gamma=0.9)),
    ("StepLR", dict(step_size=4, gamma=0.3)),
    ("MultiStepLR", dict(milestones=[0, 3, 7, 7, 20], gamma=0.5)),
    ("MultiStepLR", dict(milestones=[10], gamma=2.0)),
    ("ConstantLR", dict()),
    ("ConstantLR", dict(factor=1.0, total_iters=3)),
    ("ConstantLR", dict(factor=0.1, total_iters=1)),
    ("LinearLR", dict()),
    ("LinearLR", dict(start_factor=0.01, end_factor=1.0, total_iters=17)),
    ("LinearLR", dict(start_factor=1.0, end_factor=0.05, total_iters=9)),
    ("LinearLR", dict(start_factor=0.5, end_factor=0.0, total_iters=30)),
    ("LinearLR", dict(start_factor=0.7, end_factor=0.7, total_iters=4)),
    ("ExponentialLR", dict(gamma=0.93)),
    ("CosineAnnealingLR", dict(T_max=7)),
    ("CosineAnnealingLR", dict(T_max=1, eta_min=0.001)),
    ("CosineAnnealingLR", dict(T_max=13, eta_min=0.005)),
    ("LambdaLR", dict(lr_lambda=lambda t: 0.97 ** t + 0.01 * t)),
    ("poly", dict(total_iters=8, power=2.0)),
    ("poly", dict(total_iters=30, power=0.9)),
]


@needs_torch
@pytest.mark.parametrize("name,kw", TORCH_CASES, ids=[f"{c[0]}-{i}" for i, c in
                                                        enumerate(TORCH_CASES)])
def test_matches_torch(name, kw):
    if name == "poly":
        _compare(lambda L, o: _poly(L, o, **kw), 45)
    else:
        _compare(lambda L, o: getattr(L, name)(o, **kw), 45)


ONE_CYCLE = [
    dict(max_lr=1.0, total_steps=40),
    dict(max_lr=[0.5, 0.05], total_steps=37, anneal_strategy="linear"),
    dict(max_lr=0.3, epochs=4, steps_per_epoch=9, pct_start=0.25, div_factor=10.0,
         final_div_factor=100.0),
    dict(max_lr=0.3, total_steps=50, three_phase=True),
    dict(max_lr=0.3, total_steps=45, three_phase=True, anneal_strategy="linear",
         pct_start=0.4),
    dict(max_lr=0.3, total_steps=23, cycle_momentum=False),
    dict(max_lr=0.2, total_steps=30, base_momentum=[0.8, 0.7], max_momentum=0.9,
         pct_start=0.0),
    dict(max_lr=0.2, total_steps=3, pct_start=0.9),
    dict(max_lr=0.2, total_steps=1),
]


@needs_torch
@pytest.mark.parametrize("kind", ["SGD", "Adam", "RMSprop"])
@pytest.mark.parametrize("kw", ONE_CYCLE, ids=[str(i) for i in range(len(ONE_CYCLE))])
def test_one_cycle_matches_torch_lr_and_momentum(kw, kind):
    # _compare checks lr and momentum / betas (beta2 kept) at every step, up to
    # step total_steps (one past the schedule: allowed, as in PyTorch)
    _compare(lambda L, o: L.OneCycleLR(o, **kw), (kw.get("total_steps") or 36) + 1, kind=kind)


@needs_torch
def test_one_cycle_past_total_steps_raises_like_torch():
    ours, theirs = _compare(lambda L, o: L.OneCycleLR(o, max_lr=0.1, total_steps=6), 7)
    assert ours.last_epoch == theirs.last_epoch == 6
    with pytest.raises(ValueError, match="Tried to step 7 times"):
        theirs.step()
    with pytest.raises(ArgumentError, match=r"OneCycleLR: tried to step 7 times.*total "
                                            r"steps is 6"):
        ours.step()
    assert ours.last_epoch == 6  # nothing changed


@needs_torch
def test_one_cycle_empty_phase_raises_where_torch_divides_by_zero():
    # pct_start=1.0: the descent is empty, reached only at step total_steps
    ours, theirs = _compare(lambda L, o: L.OneCycleLR(o, max_lr=0.1, total_steps=4,
                                                      pct_start=1.0), 4)
    with pytest.raises(ZeroDivisionError):
        theirs.step()
    with pytest.raises(ArgumentError, match="OneCycleLR: phase 2 of the schedule is empty"):
        ours.step()


@needs_torch
def test_one_cycle_updates_parameters_like_torch():
    rng = np.random.default_rng(0)
    for kind in ("SGD", "Adam"):
        x0 = rng.standard_normal(5)
        tp = torch.tensor(x0, requires_grad=True)
        op = nn.Parameter(tg.tensor(x0))
        topt = getattr(torch.optim, kind)([tp], lr=0.1)
        oopt = getattr(optim, kind)([op], lr=0.1)
        ts = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.5, total_steps=20)
        os_ = S.OneCycleLR(oopt, max_lr=0.5, total_steps=20)
        for _ in range(20):
            tp.grad = tp.detach() - 1  # the gradient of |p - 1|^2 / 2
            op.grad = tg.tensor(op.numpy() - 1)
            topt.step()
            oopt.step()
            ts.step()
            os_.step()
        assert np.isfinite(op.numpy()).all() and not np.allclose(op.numpy(), x0)
        np.testing.assert_allclose(op.numpy(), tp.detach().numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=kind)


def _plateau_metrics(seed, n):
    """Noisy, falling, with flat stretches and repeats (so ties and thresholds matter)."""
    rng = np.random.default_rng(seed)
    x = 10 * np.exp(-np.arange(n) / 15) + rng.uniform(0, 1, n)
    x[10:18] = x[10]
    return np.round(x, 1).tolist()


PLATEAU = [
    dict(),
    dict(mode="max", factor=0.5, patience=2),
    dict(factor=0.5, patience=1, threshold=0.05, cooldown=2),
    dict(mode="min", threshold_mode="abs", threshold=0.2, patience=0, min_lr=0.004),
    dict(mode="max", threshold_mode="abs", threshold=0.0, patience=3, cooldown=1,
         min_lr=[0.01, 0.001]),
    dict(factor=0.0, patience=2, eps=1e-3),
    dict(factor=0.9, patience=0, eps=0.009),
    dict(factor=0.5, patience=0, eps=0.05),  # 0.1 -> 0.05 is exactly eps: skipped
]


@needs_torch
@pytest.mark.parametrize("kw", PLATEAU, ids=[str(i) for i in range(len(PLATEAU))])
@pytest.mark.parametrize("seed", [0, 1])
def test_reduce_on_plateau_matches_torch(kw, seed):
    values = _plateau_metrics(seed, 60)

    def feed(t, ours, theirs):
        theirs.step(values[t])
        ours.step(tg.tensor(values[t], dtype=tg.float64) if t % 2 else values[t])
        for k in ("best", "num_bad_epochs", "cooldown_counter", "last_epoch"):
            assert getattr(ours, k) == getattr(theirs, k), (t, k)

    _compare(lambda L, o: L.ReduceLROnPlateau(o, **kw), 60, metrics=feed)


STACKS = {
    "chained-exp-step": lambda L, o: L.ChainedScheduler(
        [L.ExponentialLR(o, gamma=0.9), L.StepLR(o, step_size=3, gamma=0.5)]),
    "chained-const-exp-multistep": lambda L, o: L.ChainedScheduler(
        [L.ConstantLR(o, factor=0.1, total_iters=3), L.ExponentialLR(o, gamma=0.95),
         L.MultiStepLR(o, milestones=[5, 9], gamma=0.2)], optimizer=o),
    "chained-linear-cosine": lambda L, o: L.ChainedScheduler(
        [L.LinearLR(o, start_factor=0.1, total_iters=5), L.CosineAnnealingLR(o, T_max=11)]),
    "chained-lambda-overrides": lambda L, o: L.ChainedScheduler(
        [L.ExponentialLR(o, gamma=0.5), L.LambdaLR(o, lambda t: 1 / (1 + t))]),
    "sequential-linear-cosine": lambda L, o: L.SequentialLR(
        o, [L.LinearLR(o, start_factor=0.1, total_iters=5), L.CosineAnnealingLR(o, T_max=20)],
        milestones=[5]),
    "sequential-three": lambda L, o: L.SequentialLR(
        o, [L.ConstantLR(o, factor=0.5, total_iters=10), L.ExponentialLR(o, gamma=0.8),
            L.StepLR(o, step_size=2, gamma=0.5)], milestones=[3, 8]),
    "sequential-multistep-linear": lambda L, o: L.SequentialLR(
        o, [L.MultiStepLR(o, milestones=[1, 2], gamma=0.5),
            L.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=6)], milestones=[4]),
    "chained-sequential-exp": lambda L, o: L.ChainedScheduler(
        [L.SequentialLR(o, [L.LinearLR(o, start_factor=0.25, total_iters=4),
                            L.CosineAnnealingLR(o, T_max=9, eta_min=0.001)], milestones=[4]),
         L.ExponentialLR(o, gamma=0.97)]),
}


@needs_torch
@pytest.mark.parametrize("name", list(STACKS))
def test_stacks_match_torch(name):
    _compare(STACKS[name], 40)


@needs_torch
def test_plateau_beside_a_schedule_matches_torch():
    values = _plateau_metrics(3, 50)

    def make(L, o):
        return L.StepLR(o, step_size=7, gamma=0.5), L.ReduceLROnPlateau(o, patience=2)

    topt, oopt = _torch_opt(0.1, 0.02), _opt(0.1, 0.02)
    (ts, tp), (os_, op) = make(torch.optim.lr_scheduler, topt), make(S, oopt)
    for t in range(50):
        topt.step()
        ts.step()
        tp.step(values[t])
        os_.step()
        op.step(values[t])
        _same_groups(oopt, topt, f"t={t}")


def test_chained_exponential_and_step_closed_form():
    opt = _opt(0.1, second=0.02)
    sched = S.ChainedScheduler([S.ExponentialLR(opt, gamma=0.9), S.StepLR(opt, 3, 0.5)])
    for t, lrs in enumerate(_lrs(sched, 12)):
        f = 0.9 ** t * 0.5 ** (t // 3)
        np.testing.assert_allclose(lrs, [0.1 * f, 0.02 * f], rtol=1e-12, err_msg=f"t={t}")


def test_sequential_warmup_then_cosine_closed_form():
    opt = _opt(0.1)
    sched = S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.1, total_iters=5),
                                 S.CosineAnnealingLR(opt, T_max=10)], milestones=[5])
    for t, (lr,) in enumerate(_lrs(sched, 16)):
        want = (0.1 * (0.1 + 0.9 * t / 5) if t < 5
                else 0.1 * (1 + math.cos(math.pi * (t - 5) / 10)) / 2)
        assert lr == pytest.approx(want, rel=1e-12, abs=1e-15), t
    assert sched.last_epoch == 16


def test_chained_constant_warmup_is_a_product():
    opt = _opt(1.0)
    sched = S.ChainedScheduler([S.ConstantLR(opt, factor=0.5, total_iters=2),
                                S.MultiStepLR(opt, milestones=[1, 3], gamma=0.1)])
    got = [lr for (lr,) in _lrs(sched, 4)]
    np.testing.assert_allclose(got, [0.5, 0.05, 0.1, 0.01, 0.01], rtol=1e-12)


# ---------------------------------------------------------- torch-free pins
def _one_cycle_reference(t, total, max_lr, pct, div, final, linear, three):
    """The 1cycle lr written out: piecewise between the corner points."""
    lo = max_lr / div
    corners = [(0.0, lo), (pct * total - 1, max_lr)]
    if three:
        corners.append((2 * pct * total - 2, lo))
    corners.append((total - 1, lo / final))
    for (s0, v0), (s1, v1) in zip(corners, corners[1:]):
        if t <= s1 or s1 == total - 1:
            x = (t - s0) / (s1 - s0)
            if linear:
                return v0 + (v1 - v0) * x
            return v1 + (v0 - v1) * (1 + math.cos(math.pi * x)) / 2
    raise AssertionError


@pytest.mark.parametrize("linear", [False, True])
@pytest.mark.parametrize("three", [False, True])
def test_one_cycle_closed_form(linear, three):
    opt = _opt(0.1, second=0.5)
    sched = S.OneCycleLR(opt, max_lr=[1.0, 2.0], total_steps=20, pct_start=0.3,
                         anneal_strategy="linear" if linear else "cos", div_factor=20.0,
                         final_div_factor=50.0, three_phase=three)
    for t, lrs in enumerate(_lrs(sched, 19)):
        want = [_one_cycle_reference(t, 20, m, 0.3, 20.0, 50.0, linear, three)
                for m in (1.0, 2.0)]
        np.testing.assert_allclose(lrs, want, rtol=1e-12, err_msg=f"t={t}")


def test_one_cycle_pinned_values_and_momentum():
    opt = _opt(0.1, momentum=0.0)
    sched = S.OneCycleLR(opt, max_lr=1.0, total_steps=10, anneal_strategy="linear")
    g = opt.param_groups[0]
    assert (g["initial_lr"], g["max_lr"], g["min_lr"]) == (0.04, 1.0, 0.04 / 1e4)
    seen = [(g["lr"], g["momentum"])]
    for _ in range(9):
        sched.step()
        seen.append((g["lr"], g["momentum"]))
    # peak at step pct_start * total - 1 = 2, then down to min_lr at step 9
    np.testing.assert_allclose(seen[0], (0.04, 0.95), rtol=1e-12)
    np.testing.assert_allclose(seen[1], (0.52, 0.90), rtol=1e-12)
    np.testing.assert_allclose(seen[2], (1.0, 0.85), rtol=1e-12)
    np.testing.assert_allclose(seen[9], (4e-6, 0.95), rtol=1e-12, atol=1e-15)
    sched.step()  # step 10 == total_steps is allowed (as in PyTorch); 11 is not
    with pytest.raises(ValueError, match="tried to step 11 times"):
        sched.step()
    adam = _opt(0.1, kind="Adam", betas=(0.9, 0.98))
    S.OneCycleLR(adam, max_lr=0.01, total_steps=10, max_momentum=0.93)
    assert adam.param_groups[0]["betas"] == (0.93, 0.98)


def test_reduce_on_plateau_pinned_trace():
    opt = _opt(1.0)
    sched = S.ReduceLROnPlateau(opt, factor=0.5, patience=2, threshold=0.1, cooldown=1,
                                min_lr=0.2)
    metrics = [10, 9.5, 9.2, 9.1, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8]
    want = [1, 1, 1, .5, .5, .5, .5, .25, .25, .25, .25, .2, .2, .2, .2, .2]
    got = []
    for m in metrics:
        sched.step(m)
        got.append(sched.get_last_lr()[0])
        assert opt.param_groups[0]["lr"] == got[-1]
    assert got == want
    assert (sched.best, sched.last_epoch) == (8, 16)
    # a change below eps is skipped; mode="max", threshold_mode="abs"
    opt = _opt(1e-9)
    sched = S.ReduceLROnPlateau(opt, mode="max", threshold_mode="abs", threshold=1.0,
                                patience=0)
    sched.step(5.0)
    sched.step(5.9)  # not above 5 + 1: bad, and patience 0 -> reduce, but by < eps
    assert (sched.best, sched.num_bad_epochs, sched.get_last_lr()) == (5.0, 0, [1e-9])
    sched.step(7.0)
    assert sched.best == 7.0
    sched = S.ReduceLROnPlateau(_opt(1.0), factor=0.5, patience=0, eps=0.5)
    sched.step(1.0)
    sched.step(1.0)  # a change of exactly eps is skipped too
    assert sched.get_last_lr() == [1.0]


# ------------------------------------------------------------ state_dict
def _metric(t):
    return [5, 4, 4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2][t % 20]


RESUMABLE = {
    "StepLR": lambda o: S.StepLR(o, step_size=3, gamma=0.5),
    "LinearLR": lambda o: S.LinearLR(o, start_factor=0.1, total_iters=8),
    "ConstantLR": lambda o: S.ConstantLR(o, factor=0.5, total_iters=7),
    "CosineAnnealingLR": lambda o: S.CosineAnnealingLR(o, T_max=9, eta_min=0.001),
    "PolyLR": lambda o: S.PolyLR(o, max_iter=12, power=0.9),
    "InvLR": lambda o: S.InvLR(o, gamma=0.1, power=0.75),
    "OneCycleLR": lambda o: S.OneCycleLR(o, max_lr=[0.4, 0.2], total_steps=14,
                                         three_phase=True),
    "ReduceLROnPlateau": lambda o: S.ReduceLROnPlateau(o, factor=0.5, patience=1,
                                                       cooldown=1),
    "ChainedScheduler": lambda o: S.ChainedScheduler(
        [S.ExponentialLR(o, gamma=0.9), S.StepLR(o, step_size=4, gamma=0.5)]),
    "SequentialLR": lambda o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.1, total_iters=5), S.CosineAnnealingLR(o, T_max=7)],
        milestones=[5]),
}


def _advance(sched, t):
    sched.optimizer.step()
    if isinstance(sched, S.ReduceLROnPlateau):
        sched.step(_metric(t))
    else:
        sched.step()


def _groups(opt):
    return [{k: g[k] for k in ("lr", "momentum") if k in g} for g in opt.param_groups]


@pytest.mark.parametrize("name", list(RESUMABLE))
def test_state_dict_round_trip_resumes_identically(name, tmp_path):
    make = RESUMABLE[name]
    opt = _opt(0.1, second=0.02)
    sched = make(opt)
    for t in range(6):
        _advance(sched, t)
    tg.save({"opt": opt.state_dict(), "sched": sched.state_dict()}, tmp_path / "ck.npz")
    back = tg.load(tmp_path / "ck.npz")
    opt2 = _opt(0.1, second=0.02)
    sched2 = make(opt2)
    opt2.load_state_dict(back["opt"])
    sched2.load_state_dict(back["sched"])
    assert sched2.get_last_lr() == sched.get_last_lr()
    for t in range(6, 13):
        _advance(sched, t)
        _advance(sched2, t)
        assert sched2.get_last_lr() == sched.get_last_lr(), t
        assert _groups(opt2) == _groups(opt), t
    assert sched2.state_dict().keys() == sched.state_dict().keys()


def test_state_dict_keys():
    opt = _opt()
    plateau = S.ReduceLROnPlateau(opt)
    assert {"best", "num_bad_epochs", "cooldown_counter", "last_epoch", "mode", "threshold",
            "factor", "patience", "min_lrs", "_last_lr"} <= plateau.state_dict().keys()
    assert plateau.state_dict()["best"] == math.inf
    cycle = S.OneCycleLR(_opt(), max_lr=0.1, total_steps=10)
    assert {"total_steps", "_schedule_phases", "last_epoch", "base_lrs"} <= \
        cycle.state_dict().keys()
    opt = _opt()
    chained = S.ChainedScheduler([S.ExponentialLR(opt, 0.9), S.StepLR(opt, 2)])
    state = chained.state_dict()
    assert "optimizer" not in state and len(state["_schedulers"]) == 2
    assert state["_schedulers"][1]["step_size"] == 2
    with pytest.raises(StateDictError, match="1 scheduler states, this one 2"):
        chained.load_state_dict({**state, "_schedulers": state["_schedulers"][:1]})


def test_scheduler_state_dict_resume():
    opt = _opt(0.1)
    sched = S.MultiStepLR(opt, milestones=[3, 6], gamma=0.5)
    for _ in range(4):
        sched.step()
    state = sched.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == 4
    opt2 = _opt(0.1)
    sched2 = S.MultiStepLR(opt2, milestones=[1], gamma=0.9)
    opt2.load_state_dict(opt.state_dict())  # the current lr lives in the optimizer
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


def test_resuming_with_last_epoch_sets_the_closed_form():
    with pytest.raises(ValueError, match="initial_lr"):
        S.StepLR(_opt(), step_size=2, last_epoch=5)
    opt = _opt()
    S.StepLR(opt, step_size=2)
    resumed = S.StepLR(opt, step_size=2, gamma=0.5, last_epoch=4)
    assert resumed.get_last_lr() == [0.1 * 0.5 ** 2] and resumed.last_epoch == 5
    resumed = S.ExponentialLR(opt, gamma=0.5, last_epoch=2)
    assert resumed.get_last_lr() == [0.1 * 0.5 ** 3]
    resumed.step()
    assert resumed.get_last_lr() == [0.1 * 0.5 ** 4]


# ---------------------------------------------------------------- errors
class _Plain(optim.Optimizer):
    def __init__(self, params, lr=0.1):
        super().__init__(params, dict(lr=lr))

    def _update(self, p, grad, state, group):
        p -= group["lr"] * grad


def _two_opts():
    return _opt(), _opt()


BAD = [
    (lambda: S.LinearLR(_opt(), start_factor=0), ArgumentError,
     r"LinearLR: start_factor must be a number in \(0, 1\], got 0"),
    (lambda: S.LinearLR(_opt(), end_factor=1.5), ArgumentError,
     r"LinearLR: end_factor must be a number in \[0, 1\], got 1.5"),
    (lambda: S.LinearLR(_opt(), total_iters=0), ArgumentError,
     "LinearLR: total_iters must be an int >= 1, got 0"),
    (lambda: S.ConstantLR(_opt(), factor=0.0), ArgumentError, "ConstantLR: factor .* got 0.0"),
    (lambda: S.ConstantLR(_opt(), factor=2), ArgumentError, "ConstantLR: factor .* got 2"),
    (lambda: S.StepLR(_opt(), step_size=0), ArgumentError, "StepLR: step_size .* got 0"),
    (lambda: S.CosineAnnealingLR(_opt(), T_max=2.5), ArgumentError, "T_max .* got 2.5"),
    (lambda: S.PolyLR(_opt(), max_iter=0), ArgumentError, "PolyLR: max_iter"),
    (lambda: S.InvLR(_opt(), gamma=-1, power=1), ArgumentError, "InvLR: gamma .* got -1"),
    (lambda: S.LambdaLR(_opt(second=0.1), [lambda t: 1.0]), ArgumentError,
     "LambdaLR: got 1 lr_lambdas for 2"),
    (lambda: S.StepLR("sgd", 2), ArgumentTypeError, "StepLR: expected a tapegrad.optim"),
    (lambda: S.ExponentialLR(_opt(), 0.9, last_epoch=-2), ArgumentError, "last_epoch"),
    (lambda: S.OneCycleLR(_opt(), max_lr=0.1), ArgumentError,
     "OneCycleLR: give total_steps, or epochs and steps_per_epoch"),
    (lambda: S.OneCycleLR(_opt(), max_lr=0.1, total_steps=0), ArgumentError,
     "OneCycleLR: total_steps must be an int >= 1, got 0"),
    (lambda: S.OneCycleLR(_opt(), 0.1, epochs=2, steps_per_epoch=0), ArgumentError,
     "OneCycleLR: steps_per_epoch .* got 0"),
    (lambda: S.OneCycleLR(_opt(), 0.1, total_steps=9, pct_start=1.5), ArgumentError,
     r"OneCycleLR: pct_start must be a number in \[0, 1\], got 1.5"),
    (lambda: S.OneCycleLR(_opt(), 0.1, total_steps=9, anneal_strategy="cosine"),
     ArgumentError, "OneCycleLR: anneal_strategy must be 'cos' or 'linear', got 'cosine'"),
    (lambda: S.OneCycleLR(_opt(), [0.1, 0.2], total_steps=9), ArgumentError,
     "OneCycleLR: got 2 values of max_lr for 1 param groups"),
    (lambda: S.OneCycleLR(_opt(), 0.1, total_steps=9, div_factor=0), ArgumentError,
     "OneCycleLR: div_factor .* got 0"),
    (lambda: S.OneCycleLR(_Plain([nn.Parameter(tg.zeros(1))]), 0.1, total_steps=9),
     ArgumentError, "OneCycleLR: cycle_momentum=True needs .* _Plain has neither"),
    (lambda: S.OneCycleLR(_opt(kind="Adam"), 0.1, total_steps=9, max_momentum=1.0),
     ArgumentError, r"OneCycleLR: momentum must be a number in \[0, 1\), got 1.0"),
    (lambda: S.OneCycleLR(_opt(), 0.1, total_steps=10, pct_start=0.1), ArgumentError,
     "OneCycleLR: phase 1 of the schedule is empty"),
    (lambda: S.ReduceLROnPlateau(_opt(), mode="avg"), ArgumentError,
     "ReduceLROnPlateau: mode must be 'min' or 'max', got 'avg'"),
    (lambda: S.ReduceLROnPlateau(_opt(), threshold_mode="pct"), ArgumentError,
     "ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got 'pct'"),
    (lambda: S.ReduceLROnPlateau(_opt(), factor=1.0), ArgumentError,
     r"ReduceLROnPlateau: factor must be a number in \[0, 1\), got 1.0"),
    (lambda: S.ReduceLROnPlateau(_opt(), patience=-1), ArgumentError,
     "ReduceLROnPlateau: patience must be an int >= 0, got -1"),
    (lambda: S.ReduceLROnPlateau(_opt(), min_lr=[0.1, 0.2]), ArgumentError,
     "ReduceLROnPlateau: got 2 values of min_lr for 1 param groups"),
    (lambda: S.ReduceLROnPlateau(_opt()).step("low"), ArgumentTypeError,
     "ReduceLROnPlateau.step: metrics must be a number .* got str"),
    (lambda: S.ChainedScheduler([]), ArgumentError, "ChainedScheduler expects at least one"),
    (lambda: S.ChainedScheduler([S.StepLR(o, 2) for o in _two_opts()]), ArgumentError,
     r"ChainedScheduler: schedulers\[1\] \(StepLR\) drives a different optimizer"),
    (lambda: S.ChainedScheduler([S.ReduceLROnPlateau(_opt())]), ArgumentError,
     r"ChainedScheduler does not support ReduceLROnPlateau \(schedulers\[0\]\)"),
    (lambda: S.ChainedScheduler([object()]), ArgumentTypeError,
     r"ChainedScheduler: schedulers\[0\] is a object"),
]


def _resumed_chain():
    opt = _opt()
    S.StepLR(opt, 2)
    return S.ChainedScheduler([S.StepLR(opt, 2, last_epoch=3)])


def _seq(milestones, n=2, last_epoch=-1, prep=None):
    opt = _opt()
    scheds = [S.ExponentialLR(opt, 0.9) for _ in range(n)]
    if prep:
        scheds = prep(opt, scheds)
    return S.SequentialLR(opt, scheds, milestones, last_epoch=last_epoch)


def _stepped(opt, scheds):
    scheds[1].step()
    return scheds


BAD += [
    (_resumed_chain, ArgumentError, r"schedulers\[0\] \(StepLR\) was made with last_epoch"),
    (lambda: _seq([3, 5]), ArgumentError, "SequentialLR: expects one milestone fewer"),
    (lambda: _seq([5, 3], n=3), ArgumentError,
     r"SequentialLR: milestones must be increasing ints >= 1, got \[5, 3\]"),
    (lambda: _seq([0]), ArgumentError, "milestones must be increasing ints >= 1"),
    (lambda: _seq([3], last_epoch=4), ArgumentError, "SequentialLR: last_epoch=4 .* not"),
    (lambda: _seq([3], prep=_stepped), ArgumentError,
     r"SequentialLR: schedulers\[1\] \(ExponentialLR\) is at last_epoch=1"),
    (lambda: _seq([3], prep=lambda o, s: [s[0], S.ChainedScheduler([s[1]])]),
     ArgumentError, r"SequentialLR: schedulers\[1\] is a ChainedScheduler"),
    (lambda: _seq([3], prep=lambda o, s: [s[0], S.ReduceLROnPlateau(o)]), ArgumentError,
     "SequentialLR does not support ReduceLROnPlateau"),
    (lambda: S.SequentialLR(_opt(), [S.StepLR(_opt(), 2)], []), ArgumentError,
     "drives a different optimizer"),
]


@pytest.mark.parametrize("make,cls,match", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_arguments(make, cls, match):
    with pytest.raises(cls, match=match) as info:
        make()
    assert isinstance(info.value, ValueError if cls is ArgumentError else TypeError)


def test_group_added_after_the_scheduler_is_reported():
    opt = _opt()
    sched = S.StepLR(opt, 2)
    opt.add_param_group({"params": [nn.Parameter(tg.zeros(1))]})
    with pytest.raises(ArgumentError, match="StepLR: the optimizer has 2 param groups, the "
                                            "scheduler was made for 1"):
        sched.step()
