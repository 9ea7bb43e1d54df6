"""Caffe's solver (``caffe train --solver``): the learning-rate policies against their
formulas' values, the six solver types against a NumPy re-implementation written here
from Caffe's update formulas (iter_size, momentum, L2/L1 weight decay, lr_mult and
decay_mult, clip_gradients), SGD against tapegrad's and torch's SGD, snapshot and
restore continuing bit-identically, the .solverstate as protobuf reads it, tests,
LeNet training, and the named errors."""

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("google.protobuf")

from tapegrad import optim  # noqa: E402
from tapegrad.compat import caffe  # noqa: E402
from tapegrad.compat.caffe.files import CaffeFileError  # noqa: E402
from tapegrad.compat.caffe.solver import SolverDiverged, read_solver_state  # noqa: E402
from tapegrad.compat.caffe.updates import CaffeSolverError  # noqa: E402
from tapegrad.errors import OutOfRangeError  # noqa: E402

LENET = Path(__file__).parent / "caffe_models" / "lenet_train_test.prototxt"
M = caffe.messages()

# Input (x: 5x4, y: 5) -> InnerProduct (3 outputs; lr_mult / decay_mult other than 1)
# -> SoftmaxWithLoss; an Accuracy in the TEST phase.
SMALL = """
name: "small"
layer { name: "in" type: "Input" top: "x" top: "y"
        input_param { shape { dim: 5 dim: 4 } shape { dim: 5 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip"
        param { lr_mult: 1.5 decay_mult: 0.5 } param { lr_mult: 2 decay_mult: 2 }
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "constant" value: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "y" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "y" top: "acc"
        include { phase: TEST } }
"""
MULTS = [(1.5, 0.5), (2.0, 2.0)]  # (lr_mult, decay_mult) of ip's weight and bias


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((5, 4)).astype(np.float32),
             rng.integers(0, 3, 5).astype(np.float32)) for _ in range(n)]


def _feed(batches, start=0):
    it = iter(batches[start:])
    return lambda: dict(zip(("x", "y"), next(it)))


def _solver_text(body, net=SMALL):
    return f"net_param {{ {net} }}\nrandom_seed: 7\n{body}"


def _f32(v):
    return float(np.float32(v))


# ------------------------------------------------------------------ reference


def _softmax_loss(W, b, x, y):
    """Loss and gradients of SoftmaxWithLoss (normalization VALID: the batch size)."""
    z = x @ W.T + b
    z = z - z.max(1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    rows, cols = np.arange(len(y)), y.astype(int)
    d = p.copy()
    d[rows, cols] -= 1
    d /= len(y)
    return -np.log(p[rows, cols]).mean(), d.T @ x, d.sum(0), (p.argmax(1) == cols).mean()


def _reference(kind, o, params, batches, iters):
    """Caffe's ApplyUpdate, from its formulas, in float64: the params after ``iters``
    iterations, the losses, and whether clipping acted."""
    data = [np.array(p, np.float64) for p in params]
    h = [[np.zeros_like(d) for d in data] for _ in range(2)]
    mom, mom2, delta = _f32(o.get("momentum", 0)), _f32(o.get("momentum2", 0.999)), \
        _f32(o.get("delta", 1e-8))
    rms, wd, clip = _f32(o.get("rms_decay", 0.99)), _f32(o["weight_decay"]), o["clip"]
    feed, losses, clipped = iter(batches), [], False
    for it in range(iters):
        rate = _f32(o["base_lr"]) * _f32(o["gamma"]) ** (it // o["stepsize"])
        g, loss = [np.zeros_like(d) for d in data], 0.0
        for _ in range(o["iter_size"]):
            x, y = next(feed)
            lo, gw, gb, _ = _softmax_loss(data[0], data[1], x, y)
            g[0] += gw
            g[1] += gb
            loss += lo
        losses.append(loss / o["iter_size"])
        norm = math.sqrt(sum((a * a).sum() for a in g))
        if clip >= 0 and norm > clip:
            g = [a * clip / norm for a in g]
            clipped = True
        for j, (lr_mult, decay_mult) in enumerate(MULTS):
            d = g[j] / o["iter_size"]
            d = d + wd * decay_mult * (np.sign(data[j]) if o["reg"] == "L1" else data[j])
            lr = rate * lr_mult
            if kind == "SGD":
                h[0][j] = mom * h[0][j] + lr * d
                u = h[0][j]
            elif kind == "Nesterov":
                prev = h[0][j]
                h[0][j] = mom * prev + lr * d
                u = (1 + mom) * h[0][j] - mom * prev
            elif kind == "AdaGrad":
                h[0][j] = h[0][j] + d * d
                u = lr * d / (np.sqrt(h[0][j]) + delta)
            elif kind == "RMSProp":
                h[0][j] = rms * h[0][j] + (1 - rms) * d * d
                u = lr * d / (np.sqrt(h[0][j]) + delta)
            elif kind == "AdaDelta":
                h[0][j] = mom * h[0][j] + (1 - mom) * d * d
                step = d * np.sqrt((h[1][j] + delta) / (h[0][j] + delta))
                h[1][j] = mom * h[1][j] + (1 - mom) * step * step
                u = lr * step
            else:  # Adam
                t = it + 1
                h[0][j] = mom * h[0][j] + (1 - mom) * d
                h[1][j] = mom2 * h[1][j] + (1 - mom2) * d * d
                u = lr * math.sqrt(1 - mom2 ** t) / (1 - mom ** t) * h[0][j] / \
                    (np.sqrt(h[1][j]) + delta)
            data[j] = data[j] - u
    return data, losses, clipped


CASES = [
    ("SGD", dict(momentum=0.9, reg="L2", clip=0.2)),
    ("SGD", dict(reg="L1", clip=-1)),
    ("Nesterov", dict(momentum=0.9, reg="L1", clip=0.2)),
    ("AdaGrad", dict(delta=1e-6, reg="L2", clip=0.2)),
    ("RMSProp", dict(rms_decay=0.9, delta=1e-6, reg="L1", clip=-1)),
    ("AdaDelta", dict(momentum=0.95, delta=1e-6, reg="L2", clip=0.2, base_lr=1.0)),
    ("Adam", dict(momentum=0.9, momentum2=0.99, delta=1e-6, reg="L1", clip=0.2,
                  base_lr=0.05)),
]


@pytest.mark.parametrize("kind, opts", CASES, ids=[f"{k}-{o['reg']}" for k, o in CASES])
def test_each_type_matches_caffes_formulas(kind, opts):
    o = {"base_lr": 0.1, "gamma": 0.5, "stepsize": 2, "weight_decay": 0.05, "iter_size": 2,
         **opts}
    extra = "".join(f"{k}: {o[k]}\n" for k in ("momentum", "momentum2", "delta", "rms_decay")
                    if k in o)
    text = _solver_text(f'type: "{kind}"\nbase_lr: {o["base_lr"]}\nlr_policy: "step"\n'
                        f'gamma: {o["gamma"]}\nstepsize: {o["stepsize"]}\n'
                        f'weight_decay: {o["weight_decay"]}\nregularization_type: "{o["reg"]}"\n'
                        f'clip_gradients: {o["clip"]}\niter_size: {o["iter_size"]}\n'
                        f'display: 1\n{extra}')
    batches, shown = _batches(8), []
    s = caffe.Solver(text, train_feed=_feed(batches), on_display=shown.append)
    start = [p.data.copy() for p in s.net.params["ip"]]
    s.step(4)
    want, losses, clipped = _reference(kind, o, start, batches, 4)
    assert clipped == (o["clip"] >= 0)
    for p, w in zip(s.net.params["ip"], want):
        np.testing.assert_allclose(p.data, w, rtol=1e-4, atol=1e-6)
    assert [d["iter"] for d in shown] == [0, 1, 2, 3]
    assert [d["lr"] for d in shown] == pytest.approx([o["base_lr"] * f for f in
                                                      (1, 1, .5, .5)], rel=1e-6)
    assert [d["loss"] for d in shown] == pytest.approx(losses, rel=1e-5)
    assert s.iter == 4 and len(s._updater.history) == (2 if kind in ("AdaDelta", "Adam") else 1)


def test_sgd_matches_tapegrad_and_torch_sgd():
    """Constant lr, momentum 0: Caffe's SGD is PyTorch's (lr_mult / decay_mult as groups)."""
    text = _solver_text('base_lr: 0.2\nlr_policy: "fixed"\nweight_decay: 0.01')
    batches = _batches(3)
    s = caffe.Solver(text, train_feed=_feed(batches))
    start = [p.data.copy() for p in s.net.params["ip"]]
    s.step(3)

    model = caffe.load(caffe.parse_net(SMALL), phase="train")
    for p, a in zip(model.layer("ip").blobs(), start):
        p.array[...] = a
    opt = optim.SGD(model.param_groups(0.2, 0.01), lr=0.2)
    for x, y in batches:
        opt.zero_grad()
        model.loss(model.run({"x": x, "y": y})).backward()
        opt.step()
    for p, q in zip(s.net.params["ip"], model.layer("ip").blobs()):
        np.testing.assert_allclose(p.data, q.array, rtol=1e-6, atol=1e-7)

    torch = pytest.importorskip("torch")
    W, b = (torch.tensor(a, requires_grad=True) for a in start)
    topt = torch.optim.SGD([{"params": [W], "lr": 0.2 * 1.5, "weight_decay": 0.01 * 0.5},
                            {"params": [b], "lr": 0.2 * 2, "weight_decay": 0.01 * 2}], lr=0.2)
    for x, y in batches:
        topt.zero_grad()
        logits = torch.from_numpy(x) @ W.T + b
        torch.nn.functional.cross_entropy(logits, torch.from_numpy(y).long()).backward()
        topt.step()
    for p, q in zip(s.net.params["ip"], (W, b)):
        np.testing.assert_allclose(p.data, q.detach().numpy(), rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------ lr policies


@pytest.mark.parametrize("body, points", [
    ('lr_policy: "fixed" base_lr: 0.01', [(0, 0.01), (1000, 0.01)]),
    ('lr_policy: "step" base_lr: 0.1 gamma: 0.5 stepsize: 10',
     [(0, 0.1), (9, 0.1), (10, 0.05), (25, 0.025)]),
    ('lr_policy: "exp" base_lr: 0.1 gamma: 0.9', [(0, 0.1), (1, 0.09), (2, 0.081)]),
    ('lr_policy: "inv" base_lr: 0.01 gamma: 0.0001 power: 0.75',
     [(0, 0.01), (10000, 0.01 * 2 ** -0.75), (30000, 0.01 * 4 ** -0.75)]),
    ('lr_policy: "multistep" base_lr: 1 gamma: 0.1 stepvalue: 5 stepvalue: 8',
     [(0, 1.0), (4, 1.0), (5, 0.1), (7, 0.1), (8, 0.01), (100, 0.01)]),
    ('lr_policy: "poly" base_lr: 0.2 power: 2 max_iter: 100',
     [(0, 0.2), (50, 0.05), (75, 0.0125), (100, 0.0)]),
    ('lr_policy: "sigmoid" base_lr: 1 gamma: -0.5 stepsize: 10',
     [(8, 0.7310585786300049), (10, 0.5), (12, 0.2689414213699951)]),
])
def test_lr_policies(body, points):
    sp = caffe.read_solver(body)
    for it, want in points:
        assert caffe.learning_rate(sp, it) == pytest.approx(want, rel=1e-6, abs=1e-12)


def test_multistep_advances_once_per_iteration_as_caffe():
    sp = caffe.read_solver('lr_policy: "multistep" base_lr: 1 gamma: 0.1 stepvalue: 2 '
                           'stepvalue: 2 stepvalue: 3')
    assert caffe.learning_rate(sp, 10, current_step=1) == pytest.approx(0.1)
    s = caffe.Solver(_solver_text(str(sp)), train_feed=_feed(_batches(6)))
    seen = []
    for _ in range(5):
        seen.append(s._rate())
        s.iter += 1
    # Caffe's `if`: the repeated stepvalue 2 is passed at iteration 3, the 3 at 4
    assert seen == pytest.approx([1, 1, 0.1, 0.01, 0.001])
    assert s.current_step == 3


# ------------------------------------------------------------------ snapshots


def _adam_text(prefix):
    return _solver_text(f'type: "Adam"\nbase_lr: 0.05\nlr_policy: "multistep"\ngamma: 0.5\n'
                        f'stepvalue: 2\nstepvalue: 4\nmomentum: 0.9\nweight_decay: 0.01\n'
                        f'iter_size: 2\nclip_gradients: 1\nsnapshot_prefix: "{prefix}"')


def test_snapshot_restore_continues_bit_identically(tmp_path):
    batches = _batches(12)
    text = _adam_text(tmp_path / "small")
    whole = caffe.Solver(text, train_feed=_feed(batches))
    whole.step(6)

    first = caffe.Solver(text, train_feed=_feed(batches))
    first.step(3)
    model_path, state_path = first.snapshot()
    assert model_path == f"{tmp_path / 'small'}_iter_3.caffemodel"
    assert state_path == f"{tmp_path / 'small'}_iter_3.solverstate"

    state = M.SolverState()
    state.ParseFromString(Path(state_path).read_bytes())
    assert (state.iter, state.learned_net, state.current_step) == (3, model_path, 1)
    assert len(state.history) == 4  # Adam: m of weight, bias, then v of weight, bias
    assert [list(h.shape.dim) for h in state.history] == [[3, 4], [3], [3, 4], [3]]
    np.testing.assert_array_equal(np.array(state.history[2].data, np.float32).reshape(3, 4),
                                  first._updater.history[1][0])
    assert [layer.name for layer in caffe.read_weights(model_path)] == ["in", "ip", "loss"]

    resumed = caffe.Solver(text, train_feed=_feed(batches, start=6))
    resumed.restore(state_path)
    assert resumed.iter == 3
    resumed.step(3)
    assert (resumed.iter, resumed.current_step) == (6, whole.current_step)
    for p, q in zip(resumed.net.params["ip"], whole.net.params["ip"]):
        np.testing.assert_array_equal(p.data, q.data)


def test_solve_snapshots_and_resumes(tmp_path):
    text = _adam_text(tmp_path / "run") + "\nmax_iter: 5\nsnapshot: 2"
    s = caffe.Solver(text, train_feed=_feed(_batches(10)))
    s.solve()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"run_iter_{i}.{ext}" for i in (2, 4, 5) for ext in
                     ("caffemodel", "solverstate")]
    again = caffe.Solver(text, train_feed=_feed(_batches(10), start=8))
    again.solve(resume=tmp_path / "run_iter_4.solverstate")
    for p, q in zip(again.net.params["ip"], s.net.params["ip"]):
        np.testing.assert_array_equal(p.data, q.data)

    fresh = caffe.Solver(text, train_feed=_feed(_batches(1)),
                         weights=str(tmp_path / "run_iter_5.caffemodel"))
    np.testing.assert_array_equal(fresh.net.params["ip"][0].data, s.net.params["ip"][0].data)


def test_bad_solverstates(tmp_path):
    text = _adam_text(tmp_path / "small")
    s = caffe.Solver(text, train_feed=_feed(_batches(2)))
    s.step(1)
    _, state_path = s.snapshot()
    data = Path(state_path).read_bytes()
    (tmp_path / "cut.solverstate").write_bytes(data[:-7])
    with pytest.raises(CaffeFileError, match="not a readable .solverstate"):
        read_solver_state(tmp_path / "cut.solverstate")
    sgd = caffe.Solver(text.replace('type: "Adam"', 'type: "SGD"'),
                       train_feed=_feed(_batches(2)))
    with pytest.raises(CaffeFileError, match="holds 4 history blobs.*needs 2"):
        sgd.restore(state_path)
    with pytest.raises(CaffeFileError, match="HDF5"):
        sgd.restore(tmp_path / "x.solverstate.h5")


# ------------------------------------------------------------------ nets, tests


def test_test_means_sharing_and_schedule():
    body = ('base_lr: 0.1\nlr_policy: "fixed"\ntest_iter: 3\ntest_interval: 2\n'
            'test_compute_loss: true\nmax_iter: 4\nsnapshot_after_train: false')
    train, test = _batches(8), _batches(12, seed=1)
    tests = []
    s = caffe.Solver(_solver_text(body), train_feed=_feed(train), test_feed=_feed(test),
                     on_test=tests.append)
    assert len(s.test_nets) == 1 and s.test_nets[0].model.phase == "test"
    W, b = (p.data.astype(np.float64) for p in s.net.params["ip"])
    got = s.test()
    ref = [_softmax_loss(W, b, x, y) for x, y in test[:3]]
    assert got == pytest.approx({"loss": np.mean([r[0] for r in ref]),
                                 "acc": np.mean([r[3] for r in ref])}, rel=1e-5)
    assert tests == []  # test() reports to on_test only inside the solver's schedule
    # the test net runs on the train net's arrays
    assert np.shares_memory(s.test_nets[0].params["ip"][0].data, s.net.params["ip"][0].data)

    s2 = caffe.Solver(_solver_text(body), train_feed=_feed(train), test_feed=_feed(test * 3),
                      on_test=tests.append)
    s2.solve()
    assert [t["iter"] for t in tests] == [0, 2, 4]  # test_initialization, interval, final
    assert tests[0]["loss"] == pytest.approx(tests[0]["outputs"]["loss"])
    assert tests[0]["loss_weights"] == {"loss": 1.0}
    assert s2.net.params["ip"][0].data.tolist() != W.tolist()


def test_train_and_test_nets_by_caffes_rules(tmp_path):
    train = SMALL.replace('name: "small"', 'name: "train"')
    test = SMALL.replace('name: "small"', 'name: "test"')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "test.prototxt").write_text(test)
    solver = tmp_path / "sub" / "solver.prototxt"
    solver.write_text(f'train_net_param {{ {train} }}\ntest_net_param {{ {test} }}\n'
                      'test_net: "test.prototxt"\ntest_iter: 1\ntest_iter: 2\n'
                      'test_interval: 10\nbase_lr: 0.1\nlr_policy: "fixed"\n'
                      'test_state { stage: "a" }\ntest_state { stage: "b" }\n'
                      'train_state { level: 2 }')
    s = caffe.Solver(str(solver), train_feed=_feed(_batches(1)),
                     test_feed=[_feed(_batches(1)), _feed(_batches(2))])
    assert s.root == str(tmp_path / "sub")  # test.prototxt found beside the solver file
    assert s.param.snapshot_prefix == str(tmp_path / "sub" / "solver")
    assert [n.model.phase for n in s.test_nets] == ["test", "test"]
    assert s.net.model.net_name == "train"
    assert list(s.test()) == ["acc", "loss"] and list(s.test(1)) == ["acc", "loss"]
    with pytest.raises(OutOfRangeError, match="2 test net"):
        s.test(2)


def test_dummy_data_needs_no_feed_and_shared_params_update_once():
    net = """
    layer { name: "d" type: "DummyData" top: "x" top: "y"
            dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 }
                               data_filler { type: "gaussian" } data_filler { type: "constant" } } }
    layer { name: "a" type: "InnerProduct" bottom: "x" top: "a" param { name: "w" }
            inner_product_param { num_output: 3 bias_term: false
                                  weight_filler { type: "gaussian" } } }
    layer { name: "b" type: "InnerProduct" bottom: "a" top: "b" param { name: "w" }
            inner_product_param { num_output: 3 bias_term: false } }
    layer { name: "frozen" type: "InnerProduct" bottom: "b" top: "c"
            param { lr_mult: 0 } param { lr_mult: 0 }
            inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "c" bottom: "y" top: "loss" }
    """
    s = caffe.Solver(_solver_text('base_lr: 0.1\nlr_policy: "fixed"', net=net))
    w = s.net.params["a"][0]
    assert w.param is s.net.params["b"][0].param
    frozen = [p.data.copy() for p in s.net.params["frozen"]]
    before = w.data.copy()
    s.step(1)
    np.testing.assert_allclose(before - w.data, w.diff, atol=1e-7)  # data -= diff once
    assert np.abs(w.diff).sum() > 0
    for p, a in zip(s.net.params["frozen"], frozen):
        np.testing.assert_array_equal(p.data, a)
    assert len(s._updater.history[0]) == 3  # w (owned once), frozen's weight and bias


def test_diverged_loss_is_a_named_error():
    net = """
    layer { name: "in" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
    layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip"
            inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "t" top: "loss" }
    """
    x = np.full((4, 3), 3.0, np.float32)
    s = caffe.Solver(_solver_text('base_lr: 1e12\nlr_policy: "fixed"', net=net),
                     train_feed=lambda: {"x": x, "t": np.ones((4, 2), np.float32)})
    with pytest.raises(SolverDiverged, match=r"train loss is (inf|nan) at iteration \d+ "
                                             r"\(SGD, lr 1e\+12\).*lower base_lr"):
        s.step(20)


def _lenet_image_batch(rng, n):
    y = rng.integers(0, 10, n)
    x = rng.uniform(0, 0.1, (n, 1, 28, 28)).astype(np.float32)
    for i, k in enumerate(y):  # the class is where a bright square sits
        r, c = divmod(int(k), 5)
        x[i, 0, 2 + 12 * r:10 + 12 * r, 1 + 5 * c:6 + 5 * c] = 1.0
    return {"data": x, "label": y.astype(np.float32)}


def test_lenet_trains_from_a_solver_file(tmp_path, monkeypatch):
    models = tmp_path / "models"
    (models / "snaps").mkdir(parents=True)
    (models / "lenet_train_test.prototxt").write_text(
        LENET.read_text().replace("batch_size: 64", "batch_size: 16")
        .replace("batch_size: 100", "batch_size: 20"))
    (models / "lenet_solver.prototxt").write_text(
        'net: "lenet_train_test.prototxt"\ntest_iter: 2\ntest_interval: 8\nbase_lr: 0.01\n'
        'momentum: 0.9\nweight_decay: 0.0005\nlr_policy: "inv"\ngamma: 0.0001\npower: 0.75\n'
        'display: 1\nmax_iter: 8\nsnapshot: 8\nsnapshot_prefix: "snaps/lenet"\n'
        'solver_mode: CPU\nrandom_seed: 3\n')
    monkeypatch.chdir(tmp_path)  # net and snapshot_prefix resolve under the solver's folder
    rng = np.random.default_rng(0)
    shown, tests = [], []
    s = caffe.Solver("models/lenet_solver.prototxt",
                     train_feed=lambda: _lenet_image_batch(rng, 16),
                     test_feed=lambda: _lenet_image_batch(rng, 20),
                     on_display=shown.append, on_test=tests.append)
    s.solve()
    losses = [d["loss"] for d in shown]
    assert len(losses) == 9  # 8 iterations and Caffe's extra forward after the last
    assert np.mean(losses[-3:]) < 0.85 * np.mean(losses[:3])
    assert [t["iter"] for t in tests] == [0, 8] and set(tests[0]["outputs"]) == {"accuracy",
                                                                              "loss"}
    assert sorted(p.name for p in (models / "snaps").iterdir()) == \
        ["lenet_iter_8.caffemodel", "lenet_iter_8.solverstate"]


# ------------------------------------------------------------------ reading, errors


def test_read_solver_upgrades_and_defaults(tmp_path):
    sp = caffe.read_solver('solver_type: NESTEROV base_lr: 0.1')
    assert sp.type == "Nesterov" and not sp.HasField("solver_type")
    assert (sp.momentum2, sp.iter_size, sp.clip_gradients, sp.regularization_type,
            sp.snapshot_after_train) == (pytest.approx(0.999), 1, -1, "L2", True)
    assert caffe.SOLVER_TYPES == ("SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam")
    path = tmp_path / "my_solver.prototxt"
    path.write_text(f'base_lr: 0.1 snapshot_prefix: "{tmp_path}"')  # a folder: + the stem
    assert caffe.read_solver(path).snapshot_prefix == str(tmp_path / "my_solver")
    path.write_text('base_lr: 0.1')  # none: the path without its extension
    assert caffe.read_solver(path).snapshot_prefix == str(tmp_path / "my_solver")
    assert caffe.read_solver(caffe.read_solver(path)).base_lr == pytest.approx(0.1)


GOOD = 'base_lr: 0.1\nlr_policy: "fixed"\n'


@pytest.mark.parametrize("text, cls, pattern", [
    ('type: "Adamm"', CaffeSolverError, "'Adamm' is not a Caffe solver type; Caffe's are "
                                        "SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam"),
    ('type: "adagrad"', CaffeSolverError, "spelled 'AdaGrad'"),
    ('type: "Adam" solver_type: ADAM', CaffeFileError, "both the deprecated solver_type"),
    ('momentum: {', CaffeFileError, "not a valid Caffe solver prototxt"),
    ('base_lr: "x"', CaffeFileError, "not a valid Caffe solver prototxt"),
])
def test_bad_solver_files(text, cls, pattern):
    with pytest.raises(cls, match=pattern):
        caffe.read_solver(text)


@pytest.mark.parametrize("body, pattern", [
    ('lr_policy: "cosine" base_lr: 0.1', "lr_policy is 'cosine'; Caffe's learning rate "
                                         "policies are fixed, step, exp, inv"),
    ('base_lr: 0.1', "lr_policy is not set"),
    ('lr_policy: "fixed"', "base_lr is not set"),
    ('lr_policy: "step" base_lr: 0.1 gamma: 0.1', "'step'.*needs stepsize"),
    ('lr_policy: "step" base_lr: 0.1 stepsize: 5', "'step'.*needs gamma"),
    ('lr_policy: "step" base_lr: 0.1 gamma: 0.1 stepsize: -5', "stepsize > 0"),
    ('lr_policy: "exp" base_lr: 0.1 gamma: -0.1', "gamma >= 0"),
    ('lr_policy: "multistep" base_lr: 0.1 gamma: 0.1', "needs stepvalue"),
    ('lr_policy: "poly" base_lr: 0.1 max_iter: 10', "needs power"),
    ('lr_policy: "poly" base_lr: 0.1 power: 1', "needs max_iter"),
])
def test_lr_policy_errors(body, pattern):
    with pytest.raises(CaffeSolverError, match=pattern):
        caffe.learning_rate(caffe.read_solver(body), 0)


@pytest.mark.parametrize("body, pattern", [
    (GOOD + 'regularization_type: "L3"', "regularization_type 'L3'"),
    (GOOD + 'type: "AdaGrad" momentum: 0.9', "AdaGrad takes no momentum"),
    (GOOD + 'type: "RMSProp" rms_decay: 1.5', "0 <= rms_decay < 1"),
    (GOOD + 'net: "other.prototxt"', "exactly one of net, net_param.*gives net, net_param"),
    (GOOD + 'test_iter: 5', "test_interval > 0"),
    (GOOD + f'test_net_param {{ {SMALL} }}', "test_iter is given 0 times for 1 test nets"),
    (GOOD + 'snapshot_format: HDF5', "snapshot_format: HDF5 is not supported"),
    (GOOD + 'snapshot: 100', "snapshot_prefix is not"),
    (GOOD + 'iter_size: 0', "iter_size is 0"),
])
def test_bad_solver_options(body, pattern):
    with pytest.raises(CaffeSolverError, match=pattern):
        caffe.Solver(_solver_text(body), train_feed=_feed(_batches(1)))


def test_bad_nets_and_feeds(tmp_path):
    with pytest.raises(CaffeSolverError, match="exactly one of.*gives none"):
        caffe.Solver(GOOD)
    with pytest.raises(CaffeSolverError, match="'missing.prototxt' is not in the current"):
        caffe.Solver(GOOD + 'net: "missing.prototxt"')
    with pytest.raises(CaffeSolverError, match=r"train_feed: the net reads the blobs \['x', "
                                               r"'y'\]"):
        caffe.Solver(_solver_text(GOOD))
    s = caffe.Solver(_solver_text(GOOD), train_feed=lambda: {"x": np.zeros((5, 4))})
    with pytest.raises(CaffeSolverError, match=r"returned \['x'\], without \['y'\]"):
        s.step(1)


def test_weights_reach_the_test_nets_own_layers_and_shared_ones_stay_shared(tmp_path):
    """Caffe's CopyLayers: a caffemodel is copied into the train net and into the test
    nets; a test layer that the train net has shares its (training) blobs, a test-only
    layer keeps the file's weights."""
    net = SMALL + """
layer { name: "probe" type: "InnerProduct" bottom: "x" top: "probe"
        inner_product_param { num_output: 2 } include { phase: TEST } }
"""
    donor = caffe.load(caffe.parse_net(net), phase="test")
    donor(np.zeros((5, 4), np.float32), np.zeros(5, np.float32))
    probe_w = np.arange(8, dtype=np.float32).reshape(2, 4)  # not the filler's zeros
    donor.layer("probe").weight.array[...] = probe_w
    model_path = tmp_path / "donor.caffemodel"
    donor.save(model_path)
    s = caffe.Solver(_solver_text('base_lr: 0.5 lr_policy: "fixed" max_iter: 3 test_iter: 1 '
                                  'test_interval: 100', net=net),
                     train_feed=_feed(_batches(4)), test_feed=_feed(_batches(4, seed=1)),
                     weights=str(model_path))
    np.testing.assert_array_equal(s.net.params["ip"][0].data, donor.layer("ip").weight.numpy())
    s.step(2)
    s.test()
    test_net = s.test_nets[0]
    np.testing.assert_array_equal(test_net.params["probe"][0].data, probe_w)
    np.testing.assert_array_equal(test_net.params["ip"][0].data, s.net.params["ip"][0].data)
    assert not np.array_equal(s.net.params["ip"][0].data, donor.layer("ip").weight.numpy())
