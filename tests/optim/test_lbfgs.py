"""LBFGS: against torch.optim.LBFGS (steps, losses, state, the line search), its
state_dict, its errors, and without torch: convergence on a convex quadratic, the
strong Wolfe conditions on accepted steps, and the strict fake device."""

import copy

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import optim
from tapegrad.errors import ArgumentError, ArgumentTypeError, StateDictError
from tapegrad.optim.lbfgs import _cubic_interpolate, _strong_wolfe
from tapegrad.testing.fakedevice import FakeArray, fake_device

try:
    import torch
    import torch.nn.functional as TF
    from torch.optim import lbfgs as torch_lbfgs
except ImportError:  # pragma: no cover
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")
# torch's LBFGS calls float() on the closure's loss, which requires grad
quiet_torch = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")

# ------------------------------------------------------------------------------ problems
# Each loss takes the functional module (tapegrad's or torch's), the parameters and
# the data, and is written with operators both libraries share.


def _rosenbrock(F, params, data):
    x = params[0]
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def _least_squares(F, params, data):
    (w, b), (X, y) = params, data
    r = X @ w + b - y
    return (r * r).mean()


def _logistic(F, params, data):  # L2-regularised, so the minimum is finite
    (w, b), (X, y) = params, data
    return F.binary_cross_entropy_with_logits(X @ w + b, y) + 1e-2 * (w * w).sum()


LOSSES = {"rosenbrock": _rosenbrock, "least_squares": _least_squares, "logistic": _logistic}


def _problem(name, seed):
    """Initial parameters and data (NumPy float64) of problem ``name``."""
    rng = np.random.default_rng(seed)
    if name == "rosenbrock":
        return [rng.uniform(-1.5, 1.5, int(rng.integers(2, 7)))], []
    X = rng.standard_normal((20, 5))
    z = X @ rng.standard_normal(5) + 0.3 * rng.standard_normal(20)
    y = z if name == "least_squares" else (z > 0).astype(np.float64)
    return [0.1 * rng.standard_normal(5), np.array(0.2)], [X, y]


class _Run:
    """One library's LBFGS on one problem: ``step()`` returns the loss as a float."""

    def __init__(self, lib, name, seed, dtype=np.float64, device=None, **options):
        init, data = _problem(name, seed)
        if lib == "torch":
            make, self.F, opt = torch.tensor, TF, torch.optim.LBFGS
        else:
            make = lambda a, **kw: tg.tensor(a, device=device, **kw)  # noqa: E731
            self.F, opt = F, optim.LBFGS
        self.params = [make(a.astype(dtype), requires_grad=True) for a in init]
        self.data = [make(a.astype(dtype)) for a in data]
        self.loss = LOSSES[name]
        self.opt = opt(self.params, **options)

    def closure(self):
        self.opt.zero_grad()
        loss = self.loss(self.F, self.params, self.data)
        loss.backward()
        return loss

    def step(self):
        return float(self.opt.step(self.closure))

    def values(self):
        return [_host(p) for p in self.params]


def _host(x):
    if torch is not None and isinstance(x, torch.Tensor):
        return x.detach().numpy()
    if isinstance(x, tg.Tensor):
        return x.detach().cpu().numpy()
    return x.get() if isinstance(x, FakeArray) else np.asarray(x)


def _assert_close(ours, theirs, rtol=1e-10, what=""):
    """Equal to ``rtol`` relative to the larger entries (small ones near 0 get the
    same absolute tolerance)."""
    ours, theirs = np.asarray(_host(ours), np.float64), np.asarray(_host(theirs), np.float64)
    assert ours.shape == theirs.shape, what
    scale = max(np.abs(theirs).max(initial=0.0), 1e-2)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=rtol * scale, err_msg=what)


OPTIONS = st.fixed_dictionaries({
    "line_search_fn": st.sampled_from([None, "strong_wolfe"]),
    "history_size": st.integers(1, 10),
    "lr": st.sampled_from([1.0, 0.5]),
})
# Rosenbrock amplifies a rounding difference (torch against itself with a 1-ulp
# change of the start drifts as far): its runs are kept to 12 iterations, where the
# two libraries agree to ~1e-11.
CASES = st.one_of(
    st.tuples(st.just("rosenbrock"), st.integers(1, 4)),
    st.tuples(st.sampled_from(["least_squares", "logistic"]), st.integers(1, 25)),
).flatmap(lambda c: st.tuples(st.just(c[0]), st.integers(0, 10_000), OPTIONS.map(
    lambda o: {**o, "max_iter": c[1]})))


@needs_torch
@quiet_torch
@given(case=CASES)
def test_matches_torch(case):
    name, seed, options = case
    ours, theirs = _Run("tg", name, seed, **options), _Run("torch", name, seed, **options)
    for step in range(3):
        loss = ours.step()
        expected = theirs.step()
        assume(np.isfinite(expected))
        assert loss == pytest.approx(expected, rel=1e-10), f"step {step}"
        for i, (p, q) in enumerate(zip(ours.values(), theirs.values())):
            _assert_close(p, q, what=f"{name} {options} step {step} parameter {i}")
    _assert_same_state(ours.opt.state_dict(), theirs.opt.state_dict())


def _assert_same_state(ours, theirs, rtol=None):
    """The same entries, counters and history lengths; with ``rtol``, the same values
    (of a run stopped short of convergence: once converged, they are rounding noise)."""
    assert ours["param_groups"] == theirs["param_groups"]
    assert set(ours["state"]) == set(theirs["state"]) == {0}
    mine, yours = ours["state"][0], theirs["state"][0]
    assert set(mine) == set(yours)
    assert (mine["func_evals"], mine["n_iter"]) == (yours["func_evals"], yours["n_iter"])
    for key in ("old_dirs", "old_stps", "ro", "al"):
        if key in yours:
            assert len(mine[key]) == len(yours[key]), key
            assert [a is None for a in mine[key]] == [b is None for b in yours[key]], key
            if rtol is not None and key != "al":
                for a, b in zip(mine[key], yours[key]):
                    _assert_close(a, b, rtol, key)
    if rtol is not None:
        for key in ("d", "prev_flat_grad", "t", "H_diag", "prev_loss"):
            _assert_close(mine[key], yours[key], rtol, key)
        used = [i for i, b in enumerate(yours["al"]) if b is not None]
        _assert_close([float(mine["al"][i]) for i in used],
                      [float(yours["al"][i]) for i in used], rtol, "al")


@needs_torch
@quiet_torch
@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
@pytest.mark.parametrize("name", ["rosenbrock", "logistic"])
def test_state_matches_torch(name, line_search_fn):
    options = dict(line_search_fn=line_search_fn, max_iter=3, history_size=4)
    ours, theirs = _Run("tg", name, 8, **options), _Run("torch", name, 8, **options)
    for _ in range(2):
        ours.step()
        theirs.step()
    assert len(ours.opt.state[ours.params[0]]["old_dirs"]) >= 3
    _assert_same_state(ours.opt.state_dict(), theirs.opt.state_dict(), rtol=1e-9)


@needs_torch
@quiet_torch
def test_float32_matches_torch_and_stays_float32():
    # few iterations: once converged, float32 leaves the parameters ~sqrt(eps) apart
    options = dict(line_search_fn="strong_wolfe", max_iter=3, history_size=5)
    ours = _Run("tg", "logistic", 3, np.float32, **options)
    theirs = _Run("torch", "logistic", 3, np.float32, **options)
    for _ in range(2):
        assert ours.step() == pytest.approx(theirs.step(), rel=1e-5)
        for p, q in zip(ours.values(), theirs.values()):
            assert p.dtype == np.float32
            _assert_close(p, q, 1e-5)
    state = ours.opt.state[ours.params[0]]
    assert all(v.dtype == np.float32 for v in [state["d"], state["prev_flat_grad"],
                                               *state["old_dirs"], *state["old_stps"]])


def _to_numpy(v):
    """torch's state, with NumPy arrays in place of its tensors."""
    if isinstance(v, torch.Tensor):
        return v.detach().numpy().copy()
    if isinstance(v, dict):
        return {k: _to_numpy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_to_numpy(x) for x in v]
    return v


@needs_torch
@quiet_torch
@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_continues_from_torchs_state(line_search_fn):
    """torch's state_dict, as NumPy arrays, loads into ours; both then take the same
    steps (the two use the same state entries, with the same meaning)."""
    options = dict(line_search_fn=line_search_fn, max_iter=6, history_size=4)
    theirs = _Run("torch", "logistic", 11, **options)
    for _ in range(2):
        theirs.step()
    ours = _Run("tg", "logistic", 11, **options)
    with tg.no_grad():
        for p, q in zip(ours.params, theirs.values()):
            p.copy_(tg.tensor(q))
    ours.opt.load_state_dict(_to_numpy(theirs.opt.state_dict()))
    for _ in range(2):
        assert ours.step() == pytest.approx(theirs.step(), rel=1e-10)
        for p, q in zip(ours.values(), theirs.values()):
            _assert_close(p, q)


@needs_torch
@given(t=st.floats(1e-3, 30.0), scale=st.floats(0.1, 10.0), wiggle=st.sampled_from([0, 3]),
       kink=st.sampled_from([0, 1, 5]), c2=st.sampled_from([0.9, 0.1, 1e-3]),
       seed=st.integers(0, 10_000), max_ls=st.integers(0, 25))
# the zoom's safeguard (a step too near an end of the bracket) and its tolerance stop
@example(t=0.1, scale=1.0, wiggle=0, kink=5, c2=1e-3, seed=729, max_ls=25)
@example(t=1e-3, scale=1.0, wiggle=0, kink=5, c2=0.1, seed=3496, max_ls=25)
def test_line_search_matches_torch(t, scale, wiggle, kink, c2, seed, max_ls):
    """_strong_wolfe and torch's, on the same (NumPy-evaluated) objective and start:
    the same step, loss and number of evaluations. The initial step ``t`` ranges from
    much too short (extrapolation) to much too long (zoom); a small ``c2`` (LBFGS uses
    0.9) and a kink make the zoom run long, to its safeguards and its tolerance."""
    rng = np.random.default_rng(seed)
    a, c = rng.uniform(0.5, 5.0, 4), rng.standard_normal(4)

    def f_and_g(x):  # sum(a r^2 + scale r^4 + wiggle sin(3 r) + kink |r|), r = x - c
        r = x - c
        f = (a * r * r + scale * r ** 4 + wiggle * np.sin(3 * r) + kink * np.abs(r)).sum()
        g = 2 * a * r + 4 * scale * r ** 3 + 3 * wiggle * np.cos(3 * r) + kink * np.sign(r)
        return float(f), g

    x0 = c + rng.standard_normal(4)
    f0, g0 = f_and_g(x0)
    d = -g0 / np.abs(g0).sum()
    got = _strong_wolfe(lambda step: f_and_g(x0 + float(step) * d), np, d, t, f0, g0, g0.dot(d),
                        c2=c2, max_ls=max_ls)
    td = torch.from_numpy(d)

    def torch_eval(x, step, direction):
        f, g = f_and_g(x0 + float(step) * d)
        return f, torch.from_numpy(g)

    want = torch_lbfgs._strong_wolfe(torch_eval, None, t, td, f0, torch.from_numpy(g0),
                                     torch.from_numpy(g0).dot(td), c2=c2, max_ls=max_ls)
    # The same evaluations; the values to rounding, which a cubic fit over a bracket
    # shrunk to ~1e-9 can amplify (PyTorch's float64 sqrt is not always correctly
    # rounded, and its dot sums in another order): rarely, t agrees only to ~1e-7.
    assert got[3] == want[3]
    assert float(got[2]) == pytest.approx(float(want[2]), rel=1e-6)
    assert got[0] == pytest.approx(want[0], rel=1e-9, abs=1e-9 * abs(f0))
    np.testing.assert_allclose(got[1], want[1].numpy(), rtol=0, atol=1e-6 * np.abs(g0).max())


@needs_torch
@pytest.mark.parametrize("max_ls", [1, 2, 5, 25])
def test_line_search_past_a_bump_matches_torch(max_ls):
    """phi(t) = -t + 9.5 sigmoid((t - 5) / 0.3): the first try (t = 1) is too short, the
    extrapolation lands at 10 past a bump, higher than at 1 yet still sufficiently
    lower than at 0 and still falling -- a bracket only from the second extrapolation
    on (PyTorch's ``ls_iter > 1``)."""

    def f_and_g(x):
        s = 1 / (1 + np.exp(-(x - 5) / 0.3))
        return float((-x + 9.5 * s).sum()), -1 + 9.5 * s * (1 - s) / 0.3

    d, g0 = np.ones(1), np.full(1, -1.0)
    got = _strong_wolfe(lambda step: f_and_g(float(step) * d), np, d, 1.0, 0.0, g0, g0.dot(d),
                        max_ls=max_ls)
    want = torch_lbfgs._strong_wolfe(
        lambda x, step, direction: (f_and_g(float(step) * d)[0],
                                    torch.from_numpy(f_and_g(float(step) * d)[1])),
        None, 1.0, torch.from_numpy(d), 0.0, torch.from_numpy(g0), torch.tensor(-1.0,
        dtype=torch.float64), max_ls=max_ls)
    assert got[3] == want[3]
    assert float(got[2]) == pytest.approx(float(want[2]), rel=1e-12)
    assert got[0] == pytest.approx(want[0], rel=1e-12)


@needs_torch
@given(x=st.lists(st.floats(-5, 5), min_size=6, max_size=6))
def test_cubic_interpolate_matches_torch(x):
    x1, f1, g1, x2, f2, g2 = x
    assume(abs(x1 - x2) > 1e-3)
    args = (x1, f1, np.float64(g1), x2, f2, np.float64(g2))
    targs = (x1, f1, torch.tensor(g1, dtype=torch.float64), x2, f2,
             torch.tensor(g2, dtype=torch.float64))
    for bounds in (None, (min(x1, x2) - 1, max(x1, x2) + 3)):
        got = _cubic_interpolate(np, *args, bounds=bounds)
        want = torch_lbfgs._cubic_interpolate(*targs, bounds=bounds)
        np.testing.assert_allclose(float(got), float(want), rtol=1e-12, atol=1e-12)


@needs_torch
def test_errors_are_torchs_kinds():
    p, q = tg.zeros(2, requires_grad=True), tg.zeros(2, requires_grad=True)
    tp, tq = torch.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="parameter groups"):
        torch.optim.LBFGS([{"params": [tp]}, {"params": [tq]}])
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": [p]}, {"params": [q]}])
    with pytest.raises(TypeError):
        torch.optim.LBFGS([tp]).step()
    with pytest.raises(TypeError, match="closure"):
        optim.LBFGS([p]).step()


# ------------------------------------------------------------------------ state_dict


@pytest.mark.parametrize("name", ["rosenbrock", "logistic"])
@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
@pytest.mark.parametrize("through", ["file", "deepcopy"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_state_dict_round_trip_resumes_exactly(name, line_search_fn, through, dtype, tmp_path):
    options = dict(line_search_fn=line_search_fn, max_iter=4, history_size=3)
    run = _Run("tg", name, 5, dtype, **options)
    for _ in range(2):
        run.step()
    saved = {"params": [p.detach().clone() for p in run.params], "optim": run.opt.state_dict()}
    if through == "file":
        tg.save(saved, tmp_path / "lbfgs.npz")
        saved = tg.load(tmp_path / "lbfgs.npz")
    else:
        saved = copy.deepcopy(saved)
    losses = [run.step() for _ in range(3)]

    resumed = _Run("tg", name, 5, dtype, line_search_fn=line_search_fn, max_iter=9,
                   history_size=7)
    with tg.no_grad():
        for p, q in zip(resumed.params, saved["params"]):
            p.copy_(q)
    resumed.opt.load_state_dict(saved["optim"])
    assert resumed.opt.param_groups[0]["max_iter"] == 4
    assert resumed.opt.param_groups[0]["history_size"] == 3
    assert [resumed.step() for _ in range(3)] == losses
    for p, q in zip(resumed.values(), run.values()):
        np.testing.assert_array_equal(p, q)


def test_load_state_dict_copies_and_casts():
    run = _Run("tg", "least_squares", 1, max_iter=5)
    run.step()
    run.step()
    sd = run.opt.state_dict()
    other = _Run("tg", "least_squares", 1, np.float32, max_iter=5)
    other.opt.load_state_dict(sd)
    mine, theirs = other.opt.state[other.params[0]], run.opt.state[run.params[0]]
    assert set(mine) == set(theirs) and mine["n_iter"] == theirs["n_iter"]
    for key in ("d", "prev_flat_grad"):
        assert mine[key].dtype == np.float32 and mine[key] is not theirs[key]
    assert all(a.dtype == np.float32 and a is not b
               for a, b in zip(mine["old_dirs"], theirs["old_dirs"]))
    assert mine["old_dirs"] is not theirs["old_dirs"]
    before = _host(theirs["d"]).copy()
    other.step()  # the loaded state is its own: the source does not change
    np.testing.assert_array_equal(theirs["d"], before)


def _trained_state():
    run = _Run("tg", "least_squares", 2, max_iter=3)
    run.step()
    run.step()
    return run.opt.state_dict(), run


def _corrupt(key, value):
    def mutate(sd):
        sd["state"][0][key] = value
    return mutate


def _delete(key):
    def mutate(sd):
        del sd["state"][0][key]
    return mutate


def _state_on_second(sd):
    sd["state"][1] = {"func_evals": 1, "n_iter": 1}


def _option(key, value):
    def mutate(sd):
        sd["param_groups"][0][key] = value
    return mutate


BAD_STATES = [
    (_corrupt("d", np.zeros(5)), r"'d' must be a float vector of the 6 parameter values"),
    (_corrupt("prev_flat_grad", np.zeros(6, np.int64)), "'prev_flat_grad' must be a float"),
    (_corrupt("old_dirs", [np.zeros(6)] * 7), "one length"),
    (_corrupt("old_stps", [np.zeros((2, 3))] * 2), "'old_stps' must hold float vectors"),
    (_corrupt("ro", ["x", 1.0]), "'ro' must hold numbers"),
    (_corrupt("al", 3), "'al' must be a list"),
    (_corrupt("t", None), "'t' must be a number"),
    (_corrupt("n_iter", -1), "'n_iter' must be an int >= 0"),
    (_corrupt("func_evals", 1.5), "'func_evals' must be an int >= 0"),
    (_corrupt("momentum_buffer", np.zeros(6)), "unexpected state entry 'momentum_buffer'"),
    (_delete("H_diag"), "missing state entry 'H_diag'"),
    (_delete("n_iter"), "missing state entry 'n_iter'"),
    (_state_on_second, "LBFGS keeps all its state under the first parameter"),
    (_option("line_search_fn", "backtracking"), "line_search_fn must be None"),
    (_option("history_size", 0), "history_size must be an int >= 1"),
]


@pytest.mark.parametrize("mutate,match", BAD_STATES)
def test_invalid_state_is_refused_and_nothing_changes(mutate, match):
    sd, _ = _trained_state()
    sd = copy.deepcopy(sd)
    mutate(sd)
    target = _Run("tg", "least_squares", 2, max_iter=3, history_size=9)
    target.step()
    before = copy.deepcopy(target.opt.state_dict())
    with pytest.raises(StateDictError, match=match):
        target.opt.load_state_dict(sd)
    after = target.opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    assert set(after["state"][0]) == set(before["state"][0])
    np.testing.assert_array_equal(after["state"][0]["d"], before["state"][0]["d"])


def test_a_state_before_any_iteration_loads():
    """A first step that found the gradient already below tolerance_grad leaves only
    the counters; that state loads, and the next step starts from scratch."""
    p = tg.tensor([1.0, 1.0], requires_grad=True)
    opt = optim.LBFGS([p])

    def closure():
        opt.zero_grad()
        loss = ((p - 1) ** 2).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 0.0
    assert opt.state_dict()["state"] == {0: {"func_evals": 1, "n_iter": 0}}
    q = tg.tensor([3.0, -1.0], requires_grad=True)
    fresh = optim.LBFGS([q])
    fresh.load_state_dict(opt.state_dict())
    assert fresh.state[q] == {"func_evals": 1, "n_iter": 0}


def test_accepted_state_forms():
    """Counters as 0-d int arrays, vectors as Tensors, scalars as NumPy scalars or
    0-d arrays, lists as tuples: all load, as what the step itself keeps."""
    sd, run = _trained_state()
    sd = copy.deepcopy(sd)
    st0 = sd["state"][0]
    st0["n_iter"] = np.array(st0["n_iter"])
    st0["d"] = tg.tensor(st0["d"])
    st0["t"] = np.array(float(st0["t"]))
    st0["H_diag"] = np.float64(st0["H_diag"])
    st0["old_dirs"] = tuple(st0["old_dirs"])
    target = _Run("tg", "least_squares", 2, max_iter=3)
    target.opt.load_state_dict(sd)
    mine = target.opt.state[target.params[0]]
    assert type(mine["n_iter"]) is int and isinstance(mine["d"], np.ndarray)
    assert isinstance(mine["t"], np.float64) and isinstance(mine["old_dirs"], list)
    with tg.no_grad():
        for p, q in zip(target.params, run.params):
            p.copy_(q)
    assert target.step() == run.step()


def test_history_size_changed_between_steps():
    """Raised: the coefficients list grows (torch's would be too short); lowered:
    the oldest pairs go as the next one comes."""
    run = _Run("tg", "logistic", 6, max_iter=4, history_size=2)
    run.step()
    state = run.opt.state[run.params[0]]
    assert len(state["old_dirs"]) == 2 and len(state["al"]) == 2
    run.opt.param_groups[0]["history_size"] = 5
    run.step()
    assert len(state["old_dirs"]) == 5 and len(state["al"]) == 5
    run.opt.param_groups[0]["history_size"] = 1
    run.step()
    assert len(state["old_dirs"]) == len(state["old_stps"]) == len(state["ro"]) == 1


# ---------------------------------------------------------------------------- errors


def _param():
    return tg.tensor([1.0, 2.0], requires_grad=True)


@pytest.mark.parametrize("options,match", [
    (dict(line_search_fn="armijo"), "line_search_fn must be None .* or 'strong_wolfe'"),
    (dict(history_size=0), "history_size must be an int >= 1"),
    (dict(max_iter=2.5), "max_iter must be an int >= 1"),
    (dict(max_iter=0), "max_iter must be an int >= 1"),
    (dict(max_eval=0), "max_eval must be an int >= 1"),
    (dict(lr=-1.0), "invalid learning rate"),
    (dict(tolerance_grad=-1e-3), "tolerance_grad must be >= 0"),
    (dict(lr=float("nan")), "lr"),
])
def test_option_errors(options, match):
    with pytest.raises(ArgumentError, match=match):
        optim.LBFGS([_param()], **options)


def test_step_and_group_errors():
    p, q = _param(), _param()
    with pytest.raises(ArgumentError, match="LBFGS doesn't support per-parameter options"):
        optim.LBFGS([{"params": [p]}, {"params": [q], "lr": 0.1}])
    opt = optim.LBFGS([p])
    with pytest.raises(ArgumentError, match="parameter groups"):
        opt.add_param_group({"params": [q]})
    assert len(opt.param_groups) == 1
    with pytest.raises(ArgumentTypeError, match="LBFGS.step needs a closure"):
        opt.step()
    with pytest.raises(ArgumentTypeError, match="the closure must return the loss"):
        opt.step(lambda: None)
    opt.param_groups[0]["line_search_fn"] = "wolfe"  # changed after construction
    with pytest.raises(ArgumentError, match="line_search_fn"):
        opt.step(lambda: (p * p).sum())
    opt.param_groups[0]["line_search_fn"] = None
    opt.param_groups.append({**opt.param_groups[0], "params": [q]})
    with pytest.raises(ArgumentError, match="exactly one parameter group, this one has 2"):
        opt.step(lambda: (p * p).sum())
    off = tg.tensor([1.0], requires_grad=True, device=fake_device())
    with pytest.raises(tg.errors.DeviceError, match="one device"):
        optim.LBFGS([p, off]).step(lambda: (p * p).sum())
    # one group with its own options is fine
    assert optim.LBFGS([{"params": [q], "lr": 0.5}]).param_groups[0]["lr"] == 0.5
    assert optim.LBFGS([q], max_iter=8).param_groups[0]["max_eval"] == 10  # max_iter * 5 // 4


# -------------------------------------------------------------------- without torch


def _quadratic(n=12, seed=0):
    """A (A x, x)/2 - (b, x) with eigenvalues of A from 1 to 100, and its minimiser."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    A = Q @ np.diag(np.geomspace(1.0, 100.0, n)) @ Q.T
    b = rng.standard_normal(n)
    return A, b, np.linalg.solve(A, b)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_minimises_a_convex_quadratic(line_search_fn):
    A, b, x_star = _quadratic()
    At, bt = tg.tensor(A), tg.tensor(b)
    x = tg.zeros(len(b), dtype=tg.float64, requires_grad=True)
    # tolerance_change=0: it stops when max|g| <= tolerance_grad (or d is no descent)
    opt = optim.LBFGS([x], max_iter=200, tolerance_change=0.0, line_search_fn=line_search_fn)

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x @ (At @ x)) - bt @ x
        loss.backward()
        return loss

    first = opt.step(closure).item()
    assert first == 0.0  # the loss at the start
    assert np.abs(A @ x.detach().numpy() - b).max() <= 2e-7  # tolerance_grad, and rounding
    np.testing.assert_allclose(x.detach().numpy(), x_star, atol=1e-8)
    assert opt.state[x]["n_iter"] < 60  # 100 pairs on a 12-dimensional quadratic


def _rosenbrock_numpy(x):
    f = np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
    g = np.zeros_like(x)
    g[:-1] = -400 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2 * (1 - x[:-1])
    g[1:] += 200 * (x[1:] - x[:-1] ** 2)
    return f, g


def test_accepted_steps_satisfy_the_strong_wolfe_conditions():
    """One iteration per step (max_iter=1, the history kept across steps): each
    accepted x + t d has f <= f0 + c1 t g0.d and |g.d| <= c2 |g0.d|, c1 = 1e-4,
    c2 = 0.9; Rosenbrock's valley makes the line search extrapolate and zoom."""
    x = tg.tensor([-1.2, 1.0], dtype=tg.float64, requires_grad=True)
    opt = optim.LBFGS([x], max_iter=1, max_eval=25, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = _rosenbrock(F, [x], [])
        loss.backward()
        return loss

    evals_per_step, checked = [], 0
    for _ in range(100):
        x0 = x.detach().numpy().copy()
        f0, g0 = _rosenbrock_numpy(x0)
        if np.abs(g0).max() < 1e-5:
            break
        evals = opt.state[x]["func_evals"] if x in opt.state else 0
        assert opt.step(closure).item() == pytest.approx(f0, rel=1e-14)
        state = opt.state[x]
        if np.array_equal(x.detach().numpy(), x0):  # stopped: |g.d| < tolerance_change
            assert abs(g0.dot(state["d"])) < 1e-9
            break
        evals_per_step.append(state["func_evals"] - evals - 1)
        d, t = state["d"], state["t"]
        np.testing.assert_array_equal(x.detach().numpy(), x0 + d * t)
        f1, g1 = _rosenbrock_numpy(x.detach().numpy())
        assert f1 <= f0 + 1e-4 * t * g0.dot(d)
        assert abs(g1.dot(d)) <= 0.9 * abs(g0.dot(d))
        checked += 1
    assert np.abs(x.detach().numpy() - 1).max() < 1e-4
    assert checked > 10
    assert max(evals_per_step) >= 3 and min(evals_per_step) == 1  # searched, and not always


def test_without_line_search_steps_by_lr():
    """Fixed steps: the first iteration ever moves by min(1, 1/|g|_1) lr along -g,
    later ones by lr along the quasi-Newton direction."""
    x = tg.tensor([3.0, -4.0], dtype=tg.float64, requires_grad=True)
    opt = optim.LBFGS([x], lr=0.5, max_iter=1)

    def closure():
        opt.zero_grad()
        loss = (x * x).sum()
        loss.backward()
        return loss

    opt.step(closure)  # g = (6, -8), |g|_1 = 14
    np.testing.assert_allclose(x.detach().numpy(), [3.0 - 6 / 28, -4.0 + 8 / 28], rtol=1e-15)
    assert opt.state[x]["t"] == pytest.approx(0.5 / 14, rel=1e-15)
    assert opt.state[x]["func_evals"] == 1  # the last iteration's loss is left to the next step
    x1 = x.detach().numpy().copy()
    opt.step(closure)
    assert opt.state[x]["t"] == 0.5 and opt.state[x]["n_iter"] == 2
    # on x.x the pair (y, s) has y = 2 s: H_diag = 1/2, d = -g / 2 = -x, and x halves
    assert opt.state[x]["H_diag"] == pytest.approx(0.5, rel=1e-15)
    np.testing.assert_allclose(x.detach().numpy(), x1 / 2, rtol=1e-14)


def test_steps_bump_versions_and_leave_the_parameters_leaves():
    x = tg.tensor([1.5, -0.5], dtype=tg.float64, requires_grad=True)
    opt = optim.LBFGS([x], line_search_fn="strong_wolfe")
    stale = (x * x).sum()  # saved x before the step
    version = x.version

    def closure():
        opt.zero_grad()
        loss = _rosenbrock(F, [x], [])
        loss.backward()
        return loss

    with tg.no_grad():  # the closure still records
        opt.step(closure)
    assert x.version > version and x.is_leaf and x.requires_grad and x.grad_fn is None
    with pytest.raises(tg.errors.GraphError, match="modified in place"):
        stale.backward()


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_fake_device_matches_cpu(line_search_fn):
    """Off the host (CuPy's rules, NumPy underneath): the same steps, and every
    state array on the device."""
    dev = fake_device()
    options = dict(line_search_fn=line_search_fn, max_iter=5, history_size=3)
    cpu, off = _Run("tg", "logistic", 4, **options), _Run("tg", "logistic", 4, device=dev,
                                                           **options)
    for _ in range(3):
        assert off.step() == cpu.step()
        for p, q in zip(off.values(), cpu.values()):
            _assert_close(p, q, 1e-13)
    state = off.opt.state[off.params[0]]
    for v in (state["d"], state["prev_flat_grad"], *state["old_dirs"], *state["old_stps"]):
        assert isinstance(v, FakeArray)
    resumed = _Run("tg", "logistic", 4, device=dev, **options)
    resumed.opt.load_state_dict(off.opt.state_dict())
    assert isinstance(resumed.opt.state[resumed.params[0]]["d"], FakeArray)
