"""Specs of tapegrad/ops/activation.py."""

from ... import ops
from . import OpSpec


def _kinkless(r):
    x = r.uniform(0.1, 2.0, (3, 4))
    return [x * r.choice([-1, 1], x.shape)]


def _logits(r):
    return [r.normal(size=(3, 5))]


SPECS = [
    OpSpec("relu", ops.relu, _kinkless, twice=True),
    OpSpec("leaky_relu", lambda x: ops.leaky_relu(x, 0.1), _kinkless, twice=True),
    OpSpec("sigmoid", ops.sigmoid, _logits, twice=True),
    OpSpec("tanh", ops.tanh, _logits, twice=True),
    OpSpec("softmax", ops.softmax, _logits, twice=True),
    OpSpec("softmax", lambda x: ops.softmax(x, axis=0), _logits, "axis 0", twice=True),
    OpSpec("log_softmax", ops.log_softmax, _logits, twice=True),
]
