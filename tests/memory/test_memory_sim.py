"""tapegrad/memory/sim.py replays tapegrad/engine.py's freeing on sizes alone; this
checks the two against each other on real backwards.

For each graph the simulation (what ``memory_report`` predicts) and the engine
(a real ``backward``, watched through ``autograd.instrument``) must agree on

* the entries whose vjp runs, in the same order, and
* after each vjp, the saved buffers released so far: the simulation's running sum
  of ``freed`` against the bytes of the tape-owned buffers that are really gone
  (weak references to them have died).

So a change to the engine's freeing (when, what, for which entries) that the
simulation does not follow fails here, and the other way round.
"""

import weakref

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import memory, nn, ops
from tapegrad.autograd import instrument
from tapegrad.memory import sim as memory_sim
from tapegrad.walks import _reachable, _toward


def _mlp():
    tg.manual_seed(0)
    x = tg.tensor(np.random.default_rng(0).normal(size=(8, 20)).astype(np.float32))
    net = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(),
                        nn.Linear(32, 10))
    loss = ops.cross_entropy(net(x), np.arange(8) % 10)
    return loss, None


def _cnn():
    tg.manual_seed(0)
    x = tg.tensor(np.random.default_rng(1).normal(size=(2, 3, 12, 12)).astype(np.float32))
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(8, 4, 3), nn.Flatten(), nn.Linear(64, 5))
    return ops.cross_entropy(net(x), np.array([1, 4])), None


def _fan_in_and_split():
    w = tg.tensor(np.linspace(-1, 1, 24).reshape(4, 6), requires_grad=True)
    h = ops.sigmoid(w)
    a, b = ops.split(h * 2.0, 2, axis=1)  # one entry, two outputs
    loss = (ops.exp(a) * ops.sin(b) + h[:, :3] * a).sum()  # h and a each reach two vjps
    return loss, None


def _head_only():
    tg.manual_seed(0)
    x = tg.tensor(np.random.default_rng(2).normal(size=(4, 10)).astype(np.float32))
    trunk, head = nn.Linear(10, 16), nn.Linear(16, 3)
    loss = ops.cross_entropy(head(ops.relu(trunk(x))), np.array([0, 1, 2, 0]))
    return loss, list(head.parameters())  # backward(inputs=...): the trunk's vjps do not run


GRAPHS = {"mlp": _mlp, "cnn": _cnn, "fan-in and split": _fan_in_and_split,
          "inputs= (head only)": _head_only}


class _Watch(instrument.Observer):
    """At each vjp: its entry, and the bytes of the watched buffers already gone."""

    def __init__(self, refs, sizes):
        self.refs, self.sizes, self.steps = refs, sizes, []

    def gone(self):
        return sum(self.sizes[k] for k, r in self.refs.items() if r() is None)

    def on_backward(self, node, grads, in_grads, seconds):
        self.steps.append((node.seq, node.name, self.gone()))


def _predict(loss, inputs):
    """What memory_report's simulation replays: its records, and the tape-owned buffers
    as weak references (key -> ref) with their sizes."""
    stack = [loss._node]
    if inputs is None:
        order, sinks, only = _reachable(stack), set(), None
    else:
        only = {id(t) for t in inputs}
        order, sinks = _toward(only, set())(stack)
    buffers, _, owned = memory._buffers(order)
    keys = memory._node_keys(order, buffers)
    refs = {}
    for node in order:
        for v in memory._saved_arrays(node):
            k = memory._root_of(v, buffers)
            if k in owned and k not in refs:
                p = v
                while id(p) != k:
                    p = p.array if isinstance(p, tg.Tensor) else p.base
                refs[k] = weakref.ref(p)
    seeds = [((loss._node, 0), loss.shape, loss.array.dtype.itemsize, loss.array.nbytes)]
    sim = memory_sim.simulate(order, keys, buffers, owned, 0, seeds,
                              memory_sim.LeafGrads(only), sinks)
    return sim.records, refs, {k: buffers[k] for k in refs}


@pytest.mark.parametrize("name", list(GRAPHS))
def test_the_simulation_frees_what_the_engine_frees_step_by_step(name):
    loss, inputs = GRAPHS[name]()
    records, refs, sizes = _predict(loss, inputs)
    assert refs, "a graph whose tape owns no saved buffer checks nothing"
    watch = _Watch(refs, sizes)
    instrument.add(watch)
    try:
        loss.backward(inputs=inputs)
    finally:
        instrument.remove(watch)
    after = watch.gone()
    # the vjps: the same entries in the same order
    assert [(s, n) for s, n, _ in watch.steps] == [(r[0], r[1]) for r in records]
    # the frees: before each vjp, what the simulation freed after the ones before it
    freed_before = np.cumsum([0] + [r[3] for r in records])
    assert [g for _, _, g in watch.steps] == list(freed_before[:-1])
    assert after == freed_before[-1] == sum(sizes.values())  # all of it, once backward ends


def test_the_cross_check_sees_a_late_free():
    """Moving the engine's free to the end of backward (what the issue that asked for
    this test tried) fails the comparison above: nothing is gone before the last vjp."""
    loss, _ = _mlp()
    records, refs, sizes = _predict(loss, None)
    watch = _Watch(refs, sizes)
    instrument.add(watch)
    try:
        loss.backward(retain_graph=True)  # keeps every saved array until the graph dies
    finally:
        instrument.remove(watch)
    freed_before = list(np.cumsum([0] + [r[3] for r in records])[:-1])
    assert [g for _, _, g in watch.steps] != freed_before
    assert all(g == 0 for _, _, g in watch.steps)
