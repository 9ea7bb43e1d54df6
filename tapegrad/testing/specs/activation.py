"""Specs of tapegrad/ops/activation.py."""

import math

import numpy as np

from ... import ops
from . import OpSpec


def _kinkless(r):
    x = r.uniform(0.1, 2.0, (3, 4))
    return [x * r.choice([-1, 1], x.shape)]


def _logits(r):
    return [r.normal(size=(3, 5))]


def _wide(r):
    return [r.normal(size=(3, 5)) * 2]


SPECS = [
    OpSpec("relu", ops.relu, _kinkless, reference=lambda x: np.maximum(x, 0)),
    OpSpec("leaky_relu", lambda x: ops.leaky_relu(x, 0.1), _kinkless,
           reference=lambda x: np.where(x > 0, x, 0.1 * x)),
    OpSpec("sigmoid", ops.sigmoid, _logits, reference=lambda x: 1 / (1 + np.exp(-x))),
    OpSpec("tanh", ops.tanh, _logits, reference=np.tanh),
]


def _away_from(kinks, low=-5.0, high=5.0, shape=(3, 4)):
    """Uniform inputs, none within 0.1 of a kink (the gradchecks' steps are far smaller)."""
    def make(r):
        x = r.uniform(low, high, shape)
        for k in kinks:
            x = np.where(np.abs(x - k) < 0.1, x + 0.25, x)
        return [x]

    return make


def _selu(x):
    return 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x))


def _sig(x):
    return 1 / (1 + np.exp(-x))


SPECS += [
    OpSpec("relu6", ops.relu6, _away_from([0.0, 6.0], -3.0, 9.0),
           reference=lambda x: np.clip(x, 0, 6)),
    OpSpec("hardtanh", ops.hardtanh, _away_from([-1.0, 1.0], -3.0, 3.0),
           reference=lambda x: np.clip(x, -1, 1)),
    OpSpec("hardtanh", lambda x: ops.hardtanh(x, -0.5, 2.0), _away_from([-0.5, 2.0], -3.0, 3.0),
           "bounds", reference=lambda x: np.clip(x, -0.5, 2.0)),
    OpSpec("hardsigmoid", ops.hardsigmoid, _away_from([-3.0, 3.0]),
           reference=lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    OpSpec("hardswish", ops.hardswish, _away_from([-3.0, 3.0]),
           reference=lambda x: x * np.clip(x + 3, 0, 6) / 6),
    OpSpec("selu", ops.selu, _away_from([0.0], -3.0, 3.0), reference=_selu),
    OpSpec("mish", ops.mish, _wide, reference=lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    OpSpec("logsigmoid", ops.logsigmoid, _wide, reference=lambda x: np.log(_sig(x))),
    OpSpec("softsign", ops.softsign, _wide, reference=lambda x: x / (1 + np.abs(x))),
    OpSpec("tanhshrink", ops.tanhshrink, _wide, reference=lambda x: x - np.tanh(x)),
    OpSpec("glu", ops.glu, lambda r: [r.normal(size=(3, 4)) * 2],
           reference=lambda x: x[:, :2] * _sig(x[:, 2:])),
    OpSpec("glu", lambda x: ops.glu(x, dim=0), lambda r: [r.normal(size=(4, 3)) * 2], "dim 0",
           reference=lambda x: x[:2] * _sig(x[2:])),
]


# GELU, SiLU, ELU, softplus, PReLU: they keep the input

def _softplus_inputs(r):
    x = r.uniform(-2.0, 2.0, (3, 5))
    return [np.where(np.abs(2 * x - 1.5) < 0.1, x + 0.2, x)]


def _prelu_inputs(slopes):
    def make(r):
        return [_kinkless(r)[0].reshape(2, 3, 2), r.uniform(-0.5, 0.5, slopes)]

    return make


def _prelu(x, w):
    return np.where(x > 0, x, w.reshape((1, -1, 1) if w.size > 1 else ()) * x)


def normal_cdf(x):
    return 0.5 * (1 + np.vectorize(math.erf, otypes=[float])(x / np.sqrt(2)))


SPECS += [
    OpSpec("gelu", ops.gelu, _wide, reference=lambda x: x * normal_cdf(x)),
    OpSpec("gelu", lambda x: ops.gelu(x, approximate="tanh"), _wide, "tanh",
           reference=lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi)
                                                      * (x + 0.044715 * x ** 3)))),
    OpSpec("silu", ops.silu, _wide, reference=lambda x: x / (1 + np.exp(-x))),
    OpSpec("elu", ops.elu, _kinkless, reference=lambda x: np.where(x > 0, x, np.expm1(x))),
    OpSpec("elu", lambda x: ops.elu(x, alpha=-0.5), _kinkless, "negative alpha",
           reference=lambda x: np.where(x > 0, x, -0.5 * np.expm1(x))),
    OpSpec("softplus", ops.softplus, _wide, reference=lambda x: np.log1p(np.exp(x))),
    # beta * x crosses the threshold 1.5 in the inputs: both branches (kept away from it)
    OpSpec("softplus", lambda x: ops.softplus(x, beta=2.0, threshold=1.5), _softplus_inputs,
           "beta, threshold", reference=lambda x: np.where(2 * x > 1.5, x,
                                                           np.log1p(np.exp(2 * x)) / 2)),
    OpSpec("prelu", ops.prelu, _prelu_inputs(3), "per channel", reference=_prelu),
    OpSpec("prelu", ops.prelu, _prelu_inputs(1), "one slope", reference=_prelu),
]
