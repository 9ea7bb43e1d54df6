"""Optimizer.load_state_dict validates everything before changing anything."""

import copy
import io

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.errors import ArgumentError, StateDictError

MAKERS = {
    "SGD": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
    "Adam": lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True),
    "AdamW": lambda ps: optim.AdamW(ps, lr=0.01),
    "RMSprop": lambda ps: optim.RMSprop(ps, lr=0.01, momentum=0.5, centered=True),
}
SHAPES = [(2,), (3, 2)]


def _trained(name, seed=0):
    """An optimizer over two parameters (shapes (2,) and (3, 2)) after two steps."""
    rng = np.random.default_rng(seed)
    params = [nn.Parameter(tg.tensor(rng.standard_normal(s).astype(np.float32)))
              for s in SHAPES]
    opt = MAKERS[name](params)
    for _ in range(2):
        for p in params:
            p.grad = tg.tensor(rng.standard_normal(p.shape).astype(np.float32))
        opt.step()
    return opt, params


def _snapshot(opt):
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    state = {id(p): {k: (np.array(v, copy=True), v) if hasattr(v, "shape") else v
                     for k, v in s.items()} for p, s in opt.state.items()}
    return copy.deepcopy(groups), state


def _assert_unchanged(opt, snap):
    groups, state = snap
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == groups
    assert set(state) == {id(p) for p in opt.state}
    for p, s in opt.state.items():
        assert set(s) == set(state[id(p)])
        for k, v in s.items():
            old = state[id(p)][k]
            if isinstance(old, tuple):
                assert v is old[1]  # the same live array, with the same values
                np.testing.assert_array_equal(v, old[0])
            else:
                assert v == old


def _buffer(name):
    return {"SGD": "momentum_buffer", "Adam": "exp_avg", "AdamW": "exp_avg_sq",
            "RMSprop": "grad_avg"}[name]


def _set_state(key, value):
    def mutate(sd, name):
        sd["state"][1][_buffer(name) if key == "buffer" else key] = value
    return mutate


def _set_option(key, value):
    def mutate(sd, name):
        sd["param_groups"][0][key] = value
    return mutate


BAD = [
    # (mutation, optimizers it applies to, message fragment)
    (_set_state("buffer", np.zeros((2, 3), np.float32)), MAKERS,
     r"group 0 parameter 1 \(shape \(3, 2\)\): '\w+' has shape \(2, 3\), the parameter has "
     r"\(3, 2\)"),
    (_set_state("buffer", np.zeros(6, np.float32)), MAKERS, r"has shape \(6,\)"),
    (_set_state("buffer", np.zeros((3, 2), np.int64)), MAKERS,
     r"must be a float array, got \(3, 2\) int64"),
    (_set_state("buffer", [[0.0] * 2] * 3), MAKERS, "must be a float array, got list"),
    (_set_state("buffer", None), MAKERS, "must be a float array, got NoneType"),
    (_set_state("step", -1), ["Adam", "AdamW", "RMSprop"], r"'step' must be an int >= 0"),
    (_set_state("step", 2.0), ["Adam", "AdamW", "RMSprop"], r"'step' must be an int >= 0"),
    (_set_state("step", True), ["Adam", "AdamW", "RMSprop"], r"'step' must be an int >= 0"),
    (_set_state("step", np.array(2.5)), ["Adam", "AdamW", "RMSprop"], "'step' must be an int"),
    (_set_state("step", 3), ["SGD"], "unexpected state entry 'step'"),
    (_set_state("bogus", np.zeros((3, 2), np.float32)), MAKERS,
     "unexpected state entry 'bogus'"),
    (lambda sd, name: sd["state"][1].pop("exp_avg_sq" if "Adam" in name else "square_avg"),
     ["Adam", "AdamW", "RMSprop"], "missing state entry"),
    (lambda sd, name: sd["state"][1].pop("step"), ["Adam", "AdamW", "RMSprop"],
     "missing state entry 'step'"),
    (lambda sd, name: sd["state"].__setitem__(1, [1, 2]), MAKERS, "state is a list"),
    (lambda sd, name: sd["state"].__setitem__(5, {}), MAKERS, "parameter index 5"),
    (lambda sd, name: sd["param_groups"][0].__setitem__("params", [0, 0]), MAKERS,
     "parameter index 0"),
    (lambda sd, name: sd["param_groups"][0].__setitem__("params", [0, "1"]), MAKERS,
     "parameter index '1'"),
    (lambda sd, name: sd["param_groups"][0]["params"].append(2), MAKERS,
     "group 0 has 3 parameters in the state, 2 here"),
    (_set_option("lr", "0.1"), MAKERS, "option 'lr' must be a finite number, got '0.1'"),
    (_set_option("lr", float("nan")), MAKERS, "option 'lr' must be a finite number"),
    (_set_option("lr", -1.0), MAKERS, "group 0: .*(lr|learning rate)"),  # _check_group
    (lambda sd, name: sd["param_groups"][0].pop("lr"), MAKERS, "missing option 'lr'"),
    (_set_option("betas", (0.9, 0.9, 0.9)), ["Adam", "AdamW"],
     "option 'betas' must be 2 finite numbers"),
    (_set_option("betas", [0.9, 1.5]), ["Adam", "AdamW"], "betas must be in"),
    (_set_option("amsgrad", "no"), ["Adam", "AdamW"], "option 'amsgrad' must be a bool"),
    (_set_option("nesterov", 1), ["SGD"], "option 'nesterov' must be a bool"),
    (_set_option("centered", None), ["RMSprop"], "option 'centered' must be a bool"),
    (lambda sd, name: sd.pop("state"), MAKERS, "expected a dict with 'state' and"),
    (lambda sd, name: sd["param_groups"].append(copy.deepcopy(sd["param_groups"][0])),
     MAKERS, "the state has 2 parameter groups, the optimizer 1"),
]
CASES = [pytest.param(name, mutate, match, id=f"{name}-{i}")
         for i, (mutate, names, match) in enumerate(BAD) for name in MAKERS if name in names]


@pytest.mark.parametrize("name,mutate,match", CASES)
def test_invalid_state_is_refused_and_nothing_changes(name, mutate, match):
    src, _ = _trained(name, seed=1)
    sd = copy.deepcopy(src.state_dict())
    mutate(sd, name)
    opt, params = _trained(name, seed=2)
    snap = _snapshot(opt)
    with pytest.raises(StateDictError, match=match) as e:
        opt.load_state_dict(sd)
    assert f"{name}.load_state_dict failed (nothing was loaded)" in str(e.value)
    _assert_unchanged(opt, snap)
    for p in params:  # and the optimizer still steps
        p.grad = tg.ones(*p.shape)
    opt.step()


def test_all_problems_are_listed_at_once():
    src, _ = _trained("Adam")
    sd = copy.deepcopy(src.state_dict())
    sd["state"][0]["exp_avg"] = np.zeros(5, np.float32)
    sd["state"][1]["step"] = -2
    sd["param_groups"][0]["eps"] = "tiny"
    opt, _ = _trained("Adam", seed=3)
    with pytest.raises(StateDictError) as e:
        opt.load_state_dict(sd)
    lines = str(e.value).splitlines()[1:]
    assert len(lines) == 3
    assert any("group 0 parameter 0 (shape (2,)): 'exp_avg' has shape (5,)" in x for x in lines)
    assert any("group 0 parameter 1 (shape (3, 2)): 'step'" in x for x in lines)
    assert any("option 'eps'" in x for x in lines)


def test_model_state_dict_is_not_an_optimizer_state():
    opt, _ = _trained("SGD")
    with pytest.raises(StateDictError, match=r"got \['bias', 'weight'\]"):
        opt.load_state_dict(nn.Linear(2, 3).state_dict())


@pytest.mark.parametrize("name", MAKERS)
def test_accepted_forms_round_trip(name):
    """Valid variants still load: Tensors for arrays, 0-d integer steps, string
    indices, float64 buffers (cast to the parameter's dtype), lazy entries absent,
    and a file written by tapegrad.save."""
    src, _ = _trained(name)
    sd = copy.deepcopy(src.state_dict())
    st = sd["state"]
    st[0] = {k: tg.tensor(np.asarray(v, np.float64)) if hasattr(v, "shape") else v
             for k, v in st[0].items()}
    if "step" in st[1]:
        st[1]["step"] = np.array(st[1]["step"], np.int64)
    st["1"] = st.pop(1)
    opt, _ = _trained(name, seed=5)
    opt.load_state_dict(sd)
    for p, q in zip(src.param_groups[0]["params"], opt.param_groups[0]["params"]):
        for k, v in src.state[p].items():
            got = opt.state[q][k]
            assert type(got) is type(v) and getattr(got, "dtype", None) == getattr(v, "dtype",
                                                                                   None)
            np.testing.assert_array_equal(got, v)
    for lazy in type(opt)._lazy_state:  # optional entries may be missing from the state
        for s in sd["state"].values():
            s.pop(lazy, None)
    opt.load_state_dict(sd)
    buf = io.BytesIO()
    tg.save(src.state_dict(), buf)
    buf.seek(0)
    opt.load_state_dict(tg.load(buf))


@pytest.mark.parametrize("name", MAKERS)
def test_every_state_entry_is_declared(name):
    """What _update creates is exactly what load_state_dict accepts."""
    opt, params = _trained(name)
    cls = type(opt)
    for p in params:
        keys = set(opt.state[p])
        assert keys <= set(cls._state_buffers + cls._state_counters)
        assert set(cls._state_buffers + cls._state_counters) - set(cls._lazy_state) <= keys
        for k in keys & set(cls._state_buffers):
            assert opt.state[p][k].shape == p.shape


def test_option_types_are_checked_on_construction_too():
    p = nn.Parameter(tg.zeros(2))
    with pytest.raises(ArgumentError, match="option 'lr' must be a finite number"):
        optim.SGD([p], lr="0.1")
    with pytest.raises(ArgumentError, match="option 'amsgrad' must be a bool"):
        optim.Adam([p], amsgrad="yes")
    with pytest.raises(ArgumentError, match="option 'weight_decay' must be a finite number"):
        optim.AdamW([p], weight_decay=float("inf"))
    opt = optim.SGD([p], lr=np.float32(0.1), momentum=1)  # numpy and int numbers are fine
    with pytest.raises(ArgumentError, match="option 'momentum'"):
        opt.add_param_group({"params": [nn.Parameter(tg.zeros(1))], "momentum": [0.9]})
